//! `weir-slt`: runs grammar-tests (and any sqllogictest-format file) against Weir.
//!
//! ```text
//! weir-slt [OPTIONS] [PATH ...]   files or directories (default: grammar-tests), *.slt and *.test
//! weir-slt --complete PATH ...    rewrite the expectations of failing records with Weir's output
//! ```
//! (the options: `weir-slt --help`). Prints each failure with file, line, expected and actual text, then
//! per file and in total a line `N passed, M failed, K skipped`. Without `--baseline` it exits
//! non-zero if anything failed; with it, if any file passed fewer records than its baseline.
//! With `--complete` it exits non-zero if a failing record could not be completed. The file
//! format is documented in `grammar-tests/README.md`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use weir_slt::lists::{Baseline, KnownFailures};
use weir_slt::{collect_files, complete, runner};

/// What `--help` prints after the options.
const AFTER_HELP: &str = "\
With --complete, each file is run and, for every failing query, output, explain, statement error
and query error record, Weir's rows, changes, plan or error text (and the regex after `error`)
replace the expected ones. Everything else stays byte for byte; a file that passes is not
touched. Records whose outcome is of another kind (an error where rows or ok were expected, ok
where an error was) are left as they are and listed. Review the diff: completed output is what
Weir does, not what it should do.

The file format: grammar-tests/README.md.";

#[derive(Debug, Parser)]
#[command(
    name = "weir-slt",
    version,
    about = "Runs grammar-tests and sqllogictest-format files (*.slt, *.test) against Weir",
    after_help = AFTER_HELP
)]
struct Args {
    /// Files or directories to run
    #[arg(value_name = "PATH", default_value = "grammar-tests")]
    roots: Vec<PathBuf>,
    /// Fail if a file passes fewer records than FILE records for it
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Rewrite the --baseline FILE from this run instead
    #[arg(long, requires = "baseline")]
    write_baseline: bool,
    /// Records to skip (default: known-failures.txt beside the baseline)
    #[arg(long, value_name = "FILE")]
    known_failures: Option<PathBuf>,
    /// Print the failures grouped by kind, most frequent first
    #[arg(long)]
    categories: bool,
    /// Per file: time, time in the engine, and the slowest records
    #[arg(long)]
    timing: bool,
    /// One line per failure instead of its SQL, expected and actual text
    #[arg(short, long)]
    quiet: bool,
    /// Files run on N threads (default: the number of cores)
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    jobs: Option<u64>,
    /// Continuous queries run on N timely workers per file
    #[arg(short, long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    workers: u64,
    /// Rewrite each file's failing expectations with what Weir produced (see below)
    #[arg(long, conflicts_with_all = ["baseline", "categories", "timing"])]
    complete: bool,
}

fn main() -> ExitCode {
    let mut command = Args::command();
    let matches = command.get_matches_mut();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command).exit());
    // The default PATH is for running, not for rewriting.
    if args.complete && matches.value_source("roots") == Some(ValueSource::DefaultValue) {
        command
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--complete needs the files or directories to rewrite",
            )
            .exit();
    }
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir-slt: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    // (file, the root it was found under)
    let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
    for r in &args.roots {
        if !r.exists() {
            return Err(format!("{} does not exist", r.display()));
        }
        let mut found = Vec::new();
        collect_files(r, &mut found).map_err(|e| format!("cannot read {}: {e}", r.display()))?;
        files.extend(found.into_iter().map(|f| (f, r.clone())));
    }
    let known_path = args.known_failures.clone().or_else(|| {
        let beside = args.baseline.as_ref()?.with_file_name("known-failures.txt");
        beside.exists().then_some(beside)
    });
    let known = match &known_path {
        Some(p) => {
            let k = KnownFailures::load(p)?;
            println!(
                "known failures: {} ({} records listed, not run)",
                p.display(),
                k.entries.len()
            );
            Some(k)
        }
        None => None,
    };
    let baseline = match (&args.baseline, args.write_baseline) {
        (Some(p), false) => Some(Baseline::load(p)?),
        _ => None,
    };

    let opts = runner::Options {
        known_failures: known.as_ref(),
        quiet: args.quiet,
        complete: false,
        workers: usize::try_from(args.workers).map_err(|e| e.to_string())?,
    };
    if args.complete {
        return complete_files(&files, &opts);
    }
    let jobs = match args.jobs {
        Some(n) => usize::try_from(n).map_err(|e| e.to_string())?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let paths: Vec<PathBuf> = files.iter().map(|(f, _)| f.clone()).collect();
    let mut total = runner::Counts::default();
    let mut per_file: Vec<runner::Counts> = Vec::new();
    let mut categories: HashMap<String, usize> = HashMap::new();
    runner::run_files(&paths, &opts, jobs, |i, report| {
        print!("{}", report.output);
        println!("{}: {}", paths[i].display(), report.counts);
        if args.timing {
            let slowest: Vec<String> = report
                .slowest
                .iter()
                .map(|(t, line)| format!("line {line} {:.2} s", t.as_secs_f64()))
                .collect();
            println!(
                "  time: {:.2} s, {:.2} s of it in the engine; slowest: {}",
                report.time.as_secs_f64(),
                report.engine_time.as_secs_f64(),
                slowest.join(", ")
            );
        }
        total.add(&report.counts);
        for f in &report.failures {
            *categories.entry(f.category.clone()).or_default() += 1;
        }
        per_file.push(report.counts);
    });
    println!("{} files", files.len());

    if args.categories && !categories.is_empty() {
        let mut sorted: Vec<(String, usize)> = categories.into_iter().collect();
        sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        println!("failures by kind:");
        for (c, n) in sorted {
            println!("{n:>7}  {c}");
        }
    }

    let mut ok = total.failed == 0 && total.passed > 0;
    if let (Some(path), true) = (&args.baseline, args.write_baseline) {
        // Files not run this time keep their counts.
        let mut b = if path.exists() { Baseline::load(path)? } else { Baseline::default() };
        for ((file, root), counts) in files.iter().zip(&per_file) {
            b.entries.insert(baseline_key(file, root), counts.passed);
        }
        std::fs::write(path, b.to_text()).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote the baseline of {} files to {}", b.entries.len(), path.display());
        ok = true;
    } else if let (Some(b), Some(path)) = (&baseline, &args.baseline) {
        ok = true;
        for ((file, _), counts) in files.iter().zip(&per_file) {
            let Some((key, want)) = b.get(file) else {
                println!("baseline: {} has no recorded count", file.display());
                continue;
            };
            if counts.passed < want {
                ok = false;
                println!(
                    "BASELINE DROP: {} passed {} records, below its baseline of {want} ({}: {})",
                    file.display(),
                    counts.passed,
                    path.display(),
                    key.display()
                );
            } else if counts.passed > want {
                println!(
                    "baseline: {} passed {} records, above its baseline of {want}: \
                     record it with --write-baseline",
                    file.display(),
                    counts.passed
                );
            }
        }
        if ok {
            println!("baseline: no file below {}", path.display());
        }
    }
    println!("{total}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// How the baseline names `file`: its path under the root it was found in (the file name when
/// the root is the file itself).
fn baseline_key(file: &Path, root: &Path) -> PathBuf {
    match file.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => file.file_name().map(PathBuf::from).unwrap_or_else(|| file.to_path_buf()),
    }
}

/// `--complete`: completes each file in place and says what it did.
fn complete_files(
    files: &[(PathBuf, PathBuf)],
    opts: &runner::Options,
) -> Result<ExitCode, String> {
    let (mut rewritten, mut changed, mut left, mut failing) = (0, 0, 0, 0);
    for (file, _) in files {
        let done = complete::complete_file(file, opts)?;
        let shown = file.display();
        if done.rewritten.is_empty() {
            println!("{shown}: unchanged");
        } else {
            let lines: Vec<String> = done.rewritten.iter().map(|l| l.to_string()).collect();
            println!(
                "{shown}: completed {} records (lines {})",
                done.rewritten.len(),
                lines.join(", ")
            );
            rewritten += done.rewritten.len();
            changed += 1;
        }
        for (line, why) in &done.left {
            println!("{shown}:{line}: not completed: {why}");
        }
        left += done.left.len();
        if !done.passes() {
            print!("{}", done.check.output);
            println!("{shown}: after completion: {}", done.check.counts);
            failing += 1;
        }
    }
    println!(
        "completed {rewritten} records in {changed} of {} files; {left} failing records left as \
         they were; {failing} files still fail",
        files.len()
    );
    Ok(if left == 0 && failing == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
