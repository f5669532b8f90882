//! The whole engine never panics on a script: statements run or fail with an error.
//! A fixed prelude gives the fuzzer a stream and a table to aim at.
//! Run with `cargo fuzz run execute` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let mut engine = weir::Engine::new();
        let _ = engine.execute(
            "CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t - 2);
             CREATE TABLE p (k VARCHAR, w BIGINT)",
        );
        let _ = engine.execute(text);
        let _ = engine.close_all();
    }
});
