//! Runs every file under `grammar-tests/` as part of `cargo test`.

use std::path::Path;

use weir_slt::{collect_files, runner};

#[test]
fn grammar_tests_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../grammar-tests");
    let mut files = Vec::new();
    collect_files(&root, &mut files).expect("grammar-tests/ is readable");
    assert!(!files.is_empty(), "no grammar-tests found under {}", root.display());
    let mut total = runner::Counts::default();
    let mut failed_files = Vec::new();
    for f in &files {
        let c = runner::run_file(f);
        if c.failed > 0 {
            failed_files.push(f.display().to_string());
        }
        total.add(&c);
    }
    println!(
        "grammar-tests: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.skipped
    );
    assert!(failed_files.is_empty(), "grammar-tests failed in: {failed_files:?} (details above)");
    assert!(total.passed > 0);
}
