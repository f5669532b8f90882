//! Runs SQLite's sqllogictest corpus (`shared/conformance/sqlite/`, beside the repository)
//! against the recorded baseline in `crates/weir-slt/sqlite/`: fails if any file passes fewer
//! records than recorded, skipping the listed known failures. Without the corpus (a checkout
//! with no `shared/` beside it) the test is reported as ignored, the reason in its kind
//! (`test [no SQLite corpus at ...] sqlite::corpus ... ignored`), never as a pass. It runs
//! twice: with continuous queries on the engine's thread, and on two timely workers (the
//! corpus is almost all one-shot queries, which run on the engine's thread either way; the
//! second run holds that a worker count changes nothing there).
//!
//! The same check from the command line, at the repository root:
//! `cargo run -p weir-slt -- --baseline crates/weir-slt/sqlite/baseline.txt ../shared/conformance/sqlite/`

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use weir_slt::lists::{Baseline, KnownFailures};
use weir_slt::{collect_files, runner};

fn main() {
    let args = Arguments::from_args();
    let krate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = krate.join("../../../shared/conformance/sqlite");
    let trials =
        [(1, "sqlite::corpus_holds_its_baseline"), (2, "sqlite-w2::corpus_holds_its_baseline")]
            .into_iter()
            .map(|(workers, name)| {
                if corpus.is_dir() {
                    let corpus = corpus.clone();
                    Trial::test(name, move || holds_its_baseline(corpus, workers))
                } else {
                    let why = format!("no SQLite corpus at {}", corpus.display());
                    Trial::test(name, || Ok(())).with_kind(why).with_ignored_flag(true)
                }
            })
            .collect();
    libtest_mimic::run(&args, trials).exit();
}

/// The corpus run with continuous queries on `workers` workers passes at least the baseline's
/// records in every file.
fn holds_its_baseline(corpus: PathBuf, workers: usize) -> Result<(), Failed> {
    let krate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let baseline = Baseline::load(&krate.join("sqlite/baseline.txt"))
        .map_err(|e| format!("the baseline: {e}"))?;
    let known = KnownFailures::load(&krate.join("sqlite/known-failures.txt"))
        .map_err(|e| format!("the known failures: {e}"))?;
    let mut files = Vec::new();
    collect_files(&corpus, &mut files).map_err(|e| format!("reading the corpus: {e}"))?;
    if files.is_empty() {
        return Err(format!("no test files under {}", corpus.display()).into());
    }

    let opts = runner::Options {
        known_failures: Some(&known),
        quiet: true,
        workers,
        ..runner::Options::default()
    };
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut total = runner::Counts::default();
    let mut problems = Vec::new();
    runner::run_files(&files, &opts, jobs, |i, report| {
        let file = &files[i];
        println!("{}: {}", file.display(), report.counts);
        total.add(&report.counts);
        match baseline.get(file) {
            Some((_, want)) if report.counts.passed < want => problems.push(format!(
                "{}: {} passed, below its baseline of {want}",
                file.display(),
                report.counts.passed
            )),
            Some(_) => {}
            None => problems.push(format!(
                "{}: no count in crates/weir-slt/sqlite/baseline.txt (record one with \
                 --write-baseline)",
                file.display()
            )),
        }
    });
    for key in baseline.entries.keys() {
        if !files.iter().any(|f| weir_slt::lists::names(key, f)) {
            problems.push(format!("{}: in the baseline but not in the corpus", key.display()));
        }
    }
    println!("sqlite corpus on {workers} worker(s): {total}");
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("the SQLite corpus fell below its baseline:\n{}", problems.join("\n")).into())
    }
}
