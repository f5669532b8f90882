//! `weir-slt`: runs grammar-tests (and any sqllogictest-format file) against Weir.
//!
//! ```text
//! weir-slt [PATH ...]       files or directories (default: grammar-tests), *.slt and *.test
//! ```
//! Prints each failure with file, line, expected and actual text, then per file and in total a
//! line `N passed, M failed, K skipped`. Exits non-zero if anything failed. The file format is
//! documented in `grammar-tests/README.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use weir_slt::{collect_files, runner};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: weir-slt [PATH ...]   (default: grammar-tests)");
        return ExitCode::SUCCESS;
    }
    let roots: Vec<PathBuf> = if args.is_empty() {
        vec![PathBuf::from("grammar-tests")]
    } else {
        args.iter().map(PathBuf::from).collect()
    };
    let mut files = Vec::new();
    for r in &roots {
        if !r.exists() {
            eprintln!("weir-slt: {} does not exist", r.display());
            return ExitCode::FAILURE;
        }
        if let Err(e) = collect_files(r, &mut files) {
            eprintln!("weir-slt: cannot read {}: {e}", r.display());
            return ExitCode::FAILURE;
        }
    }
    let mut total = runner::Counts::default();
    for f in &files {
        let counts = runner::run_file(f);
        println!(
            "{}: {} passed, {} failed, {} skipped",
            f.display(),
            counts.passed,
            counts.failed,
            counts.skipped
        );
        total.add(&counts);
    }
    println!("{} files", files.len());
    println!("{} passed, {} failed, {} skipped", total.passed, total.failed, total.skipped);
    if total.failed > 0 || total.passed == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
