//! `weir-slt`: runs grammar-tests (and any sqllogictest-format file) against Weir.
//!
//! ```text
//! weir-slt [OPTIONS] [PATH ...]   files or directories (default: grammar-tests), *.slt and *.test
//! weir-slt --complete PATH ...    rewrite the expectations of failing records with Weir's output
//! ```
//! (the options: [`HELP`]). Prints each failure with file, line, expected and actual text, then
//! per file and in total a line `N passed, M failed, K skipped`. Without `--baseline` it exits
//! non-zero if anything failed; with it, if any file passed fewer records than its baseline.
//! With `--complete` it exits non-zero if a failing record could not be completed. The file
//! format is documented in `grammar-tests/README.md`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use weir_slt::lists::{Baseline, KnownFailures};
use weir_slt::{collect_files, complete, runner};

const USAGE: &str = "usage: weir-slt [--baseline FILE [--write-baseline]] [--known-failures FILE] \
[--categories] [--timing] [-q|--quiet] [-j N] [-w N] [PATH ...]   (default PATH: grammar-tests)
       weir-slt --complete [--known-failures FILE] PATH ...";

/// `weir-slt --help`.
const HELP: &str = "\
weir-slt [OPTIONS] [PATH ...]   run files or directories (default: grammar-tests), *.slt and *.test
  --baseline FILE        fail if a file passes fewer records than FILE records for it
  --write-baseline       rewrite the --baseline FILE from this run instead
  --known-failures FILE  records to skip (default: known-failures.txt beside the baseline)
  --categories           print the failures grouped by kind, most frequent first
  --timing               per file: time, time in the engine, and the slowest records
  -q, --quiet            one line per failure instead of its SQL, expected and actual text
  -j, --jobs N           files run on N threads (default: the number of cores)
  -w, --workers N        continuous queries run on N timely workers per file (default 1)

weir-slt --complete PATH ...    rewrite each file's failing expectations with what Weir produced
  Runs each file and, for every failing query, output, explain, statement error and query error
  record, writes Weir's rows, changes, plan or error text (and the regex after `error`) in place
  of the expected ones. Everything else stays byte for byte; a file that passes is not touched.
  Records whose outcome is of another kind (an error where rows or ok were expected, ok where an
  error was) are left as they are and listed. Review the diff: completed output is what Weir
  does, not what it should do.";

#[derive(Default)]
struct Args {
    roots: Vec<PathBuf>,
    baseline: Option<PathBuf>,
    write_baseline: bool,
    known_failures: Option<PathBuf>,
    categories: bool,
    timing: bool,
    quiet: bool,
    jobs: Option<usize>,
    workers: usize,
    complete: bool,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--baseline" => a.baseline = Some(PathBuf::from(value("--baseline")?)),
            "--write-baseline" => a.write_baseline = true,
            "--known-failures" => a.known_failures = Some(PathBuf::from(value(&arg)?)),
            "--categories" => a.categories = true,
            "--timing" => a.timing = true,
            "--complete" => a.complete = true,
            "-q" | "--quiet" => a.quiet = true,
            "-j" | "--jobs" => {
                let n = value(&arg)?;
                a.jobs = Some(n.parse().map_err(|_| format!("{arg}: '{n}' is not a number"))?);
            }
            "-w" | "--workers" => {
                let n = value(&arg)?;
                a.workers = n.parse().map_err(|_| format!("{arg}: '{n}' is not a number"))?;
                if a.workers == 0 {
                    return Err(format!("{arg}: the number of workers must be at least 1"));
                }
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ => a.roots.push(PathBuf::from(arg)),
        }
    }
    if a.write_baseline && a.baseline.is_none() {
        return Err("--write-baseline needs --baseline FILE".into());
    }
    if a.complete {
        if a.baseline.is_some() || a.categories || a.timing {
            return Err("--complete takes no --baseline, --categories or --timing".into());
        }
        if a.roots.is_empty() {
            return Err("--complete needs the files or directories to rewrite".into());
        }
    }
    if a.roots.is_empty() {
        a.roots.push(PathBuf::from("grammar-tests"));
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("weir-slt: {e}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
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
        workers: args.workers,
    };
    if args.complete {
        return complete_files(&files, &opts);
    }
    let jobs =
        args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
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
