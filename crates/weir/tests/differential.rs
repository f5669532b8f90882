#[test]
fn stub() {}
