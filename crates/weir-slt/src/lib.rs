//! # weir-slt: Weir's SQL test-suite runner
//!
//! Runs files in sqllogictest format, extended with records for continuous queries
//! (`subscribe`, `output`) and plans (`explain`); the format is documented in
//! `grammar-tests/README.md`. [`record`] parses a file into records; [`runner`] executes them
//! against a fresh [`weir::Engine`] per file and reports failures with file, line, expected and
//! actual text; [`values`] prints query values as SQLite's reference driver does and hashes
//! results; [`lists`] reads the known-failure list and the pass-count baseline kept beside a
//! corpus; [`complete`] rewrites a file's expectations with what Weir produced (`--complete`).
//! The `weir-slt` binary and the `grammar` and `sqlite` integration tests drive it.

pub mod complete;
pub mod lists;
pub mod record;
pub mod runner;
pub mod values;

use std::path::{Path, PathBuf};

/// The `.slt` and `.test` files under `path` (or `path` itself), in name order.
pub fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        entries.sort();
        for e in entries {
            collect_files(&e, out)?;
        }
    } else if path.extension().is_some_and(|e| e == "slt" || e == "test") {
        out.push(path.to_path_buf());
    }
    Ok(())
}
