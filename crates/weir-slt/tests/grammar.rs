//! Runs every file under `grammar-tests/` as part of `cargo test`, each file its own test
//! (`grammar::windows/range.slt`), so a failure names its file and `cargo test -p weir-slt --
//! range` runs one. libtest-mimic gives the test binary libtest's command line (filters,
//! `--list`, `--exact`, `--test-threads`), its output and its parallel run.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use weir_slt::{collect_files, runner};

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../grammar-tests");
    // Failures name /.../grammar-tests/FILE rather than /.../crates/weir-slt/../../grammar-tests.
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    libtest_mimic::run(&args, trials(&root)).exit_code()
}

/// One trial per test file under `root`; a single failing trial when there are none.
fn trials(root: &Path) -> Vec<Trial> {
    let mut files = Vec::new();
    if let Err(e) = collect_files(root, &mut files) {
        let msg = format!("cannot read {}: {e}", root.display());
        return vec![Trial::test("grammar::files", move || Err(msg.into()))];
    }
    if files.is_empty() {
        let msg = format!("no grammar-tests found under {}", root.display());
        return vec![Trial::test("grammar::files", move || Err(msg.into()))];
    }
    let mut trials = Vec::new();
    for workers in [1, 2] {
        trials.extend(files.iter().map(|file| trial(root, file.clone(), workers)));
    }
    trials
}

/// A file run with continuous queries on `workers` workers: `grammar::FILE` on one,
/// `grammar-w2::FILE` on two. Both must give the file's expected output exactly.
fn trial(root: &Path, file: PathBuf, workers: usize) -> Trial {
    let rel = file.strip_prefix(root).unwrap_or(&file);
    // Forward slashes on every platform, so names (and filters) are the same everywhere.
    let name = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
    let prefix = if workers == 1 { "grammar".to_string() } else { format!("grammar-w{workers}") };
    Trial::test(format!("{prefix}::{}", name.join("/")), move || run(&file, workers))
}

fn run(file: &Path, workers: usize) -> Result<(), Failed> {
    let opts = runner::Options { workers, ..runner::Options::default() };
    let report = runner::run_file_with(file, &opts);
    if report.counts.failed > 0 {
        return Err(format!("{}{}: {}", report.output, file.display(), report.counts).into());
    }
    Ok(())
}
