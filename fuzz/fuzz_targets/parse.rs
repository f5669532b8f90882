//! The CQL front end never panics: any text either parses or gives a syntax error.
//! Run with `cargo fuzz run parse` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(stmts) = weir_sql::parse_script(text) {
            // Printing and re-parsing a query must not panic either.
            for s in stmts {
                if let weir_sql::Statement::Query(q) = s.statement {
                    let _ = weir_sql::parse_script(&q.to_string());
                }
            }
        }
    }
});
