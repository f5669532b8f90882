//! Runs the records of one file against a fresh engine.
//!
//! One-shot `query` records are checked as SQLite's reference driver checks them (see
//! [`crate::values`] for how values print): results are rendered by the type letters, sorted by
//! the sort mode, and compared with the expected lines, either `N values hashing to <md5>` (when
//! the result has more values than the hash threshold), one value per line, or one row per line.
//! A listed result also passes if it matches Weir's own text for the values token by token (the
//! form grammar-tests are written in: `2.5`, `true`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use regex::Regex;
use weir::format::rows_as_text;
use weir::{Engine, ExecResult, Subscription, Value};

use crate::lists::KnownFailures;
use crate::record::{parse, Expect, Kind, Record, SortMode};
use crate::values::{hash_line, hash_values, parse_hash_line, reference_column, reference_value};

/// The reference driver's default: results with more than 8 values are compared by hash.
pub const DEFAULT_HASH_THRESHOLD: usize = 8;

/// How many of the slowest records a report keeps.
const SLOWEST: usize = 5;

/// How many rows of an actual result a failure report shows when the expectation is a hash.
const SHOWN_ROWS: usize = 16;

#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.skipped += o.skipped;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} passed, {} failed, {} skipped", self.passed, self.failed, self.skipped)
    }
}

/// How a file is run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options<'a> {
    /// Records listed here are not run and count as skipped.
    pub known_failures: Option<&'a KnownFailures>,
    /// One line per failure (`FILE:LINE: FAILED: category`) instead of the SQL, expected and
    /// actual text.
    pub quiet: bool,
    /// Note, for each failed record that can take it, what Weir produced as a [`Fix`] in
    /// [`FileReport::fixes`] (for `--complete`).
    pub complete: bool,
    /// The number of workers continuous queries run on (0 or 1: one, the engine's thread).
    pub workers: usize,
}

/// What `--complete` writes into a failed record: what Weir produced, in the record's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// The lines after `----` (written after the SQL when the record has no `----`).
    Expected(Vec<String>),
    /// An error record's regex (after `statement error` / `query error`) and exact text (after
    /// `----`), each where the record has one.
    Error { pattern: Option<String>, exact: Option<Vec<String>> },
}

/// One failed record: where, and what kind of failure (an engine error with the specifics taken
/// out, or a kind of mismatch), for grouping.
#[derive(Debug, Clone)]
pub struct FailureInfo {
    pub line: usize,
    pub category: String,
}

/// The outcome of one file.
#[derive(Debug, Default)]
pub struct FileReport {
    pub counts: Counts,
    /// The file's failure reports and notes, ready to print.
    pub output: String,
    pub failures: Vec<FailureInfo>,
    /// Time to run the file, and the part of it spent inside the engine's `execute`.
    pub time: Duration,
    pub engine_time: Duration,
    /// The slowest records: (time, line), slowest first.
    pub slowest: Vec<(Duration, usize)>,
    /// With [`Options::complete`]: (record line, fix) for each failed record that has one.
    pub fixes: Vec<(usize, Fix)>,
}

struct Failure {
    line: usize,
    sql: String,
    expected: String,
    actual: String,
    category: String,
    /// What Weir produced, in the record's form, where the record's expectation can say it
    /// (boxed: most failures have none, and a failure travels in every `Result` here).
    fix: Option<Box<Fix>>,
}

impl Failure {
    fn with_fix(mut self, fix: Fix) -> Failure {
        self.fix = Some(Box::new(fix));
        self
    }
}

/// Runs one file, printing each failure; returns the counts.
pub fn run_file(path: &Path) -> Counts {
    let report = run_file_with(path, &Options::default());
    print!("{}", report.output);
    report.counts
}

/// Runs files on up to `jobs` threads (longest file first) and hands each report to `each`
/// in the order of `files`, as soon as it and all before it are done.
pub fn run_files(
    files: &[PathBuf],
    opts: &Options,
    jobs: usize,
    mut each: impl FnMut(usize, FileReport),
) {
    let mut order: Vec<usize> = (0..files.len()).collect();
    let size = |i: &usize| std::fs::metadata(&files[*i]).map(|m| m.len()).unwrap_or(0);
    order.sort_by_key(|i| std::cmp::Reverse(size(i)));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, FileReport)>();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, files.len().max(1)) {
            let tx = tx.clone();
            let (next, order) = (&next, &order);
            s.spawn(move || {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if tx.send((i, run_file_with(&files[i], opts))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut done = BTreeMap::new();
        let mut want = 0;
        for (i, report) in rx {
            done.insert(i, report);
            while let Some(report) = done.remove(&want) {
                each(want, report);
                want += 1;
            }
        }
    });
}

/// Per-file state of a run.
struct State {
    engine: Engine,
    /// Time spent inside the engine's `execute`.
    engine_time: Duration,
    subs: HashMap<String, Subscription>,
    hash_threshold: usize,
    /// label -> (hash of its result, line of the record that set it)
    labels: HashMap<String, (String, usize)>,
    /// Fixes are worked out for failed records ([`Options::complete`]).
    complete: bool,
    /// Completed results are written in Weir's own text (grammar-tests, `.slt`), not as the
    /// reference driver prints them (SQLite's `.test` files).
    weir_text: bool,
}

/// Runs one file against a fresh engine.
pub fn run_file_with(path: &Path, opts: &Options) -> FileReport {
    match std::fs::read_to_string(path) {
        Ok(text) => run_text(path, &text, opts),
        Err(e) => {
            let mut report = FileReport::default();
            let _ = writeln!(report.output, "{}: cannot read: {e}", path.display());
            report.counts.failed += 1;
            report.failures.push(FailureInfo { line: 0, category: "cannot read".into() });
            report
        }
    }
}

/// A fresh engine for one file: idle timeouts count `sleep` records, not the wall clock, and
/// source paths are relative to the file.
fn test_engine(path: &Path, workers: usize) -> Result<Engine, weir::WeirError> {
    let mut engine = Engine::new();
    engine.use_manual_processing_time();
    if let Some(dir) = path.parent() {
        engine.set_base_dir(dir);
    }
    engine.set_workers(workers.max(1))?;
    Ok(engine)
}

/// Runs the records in `text` (the contents of `path`) against a fresh engine.
pub fn run_text(path: &Path, text: &str, opts: &Options) -> FileReport {
    let mut report = FileReport::default();
    let shown = path.display();
    let records = match parse(text) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(report.output, "{shown}: {e}");
            report.counts.failed += 1;
            report.failures.push(FailureInfo { line: 0, category: "parse error".into() });
            return report;
        }
    };
    let known = opts.known_failures.map(|k| k.for_file(path)).unwrap_or_default();
    let engine = match test_engine(path, opts.workers) {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(report.output, "{shown}: {e}");
            report.counts.failed += 1;
            report.failures.push(FailureInfo { line: 0, category: "engine".into() });
            return report;
        }
    };
    let mut state = State {
        engine,
        subs: HashMap::new(),
        hash_threshold: DEFAULT_HASH_THRESHOLD,
        labels: HashMap::new(),
        engine_time: Duration::ZERO,
        complete: opts.complete,
        weir_text: path.extension().is_none_or(|e| e != "test"),
    };
    let file_start = Instant::now();
    let mut halted = false;
    for rec in &records {
        if matches!(rec.kind, Kind::HashThreshold(_) | Kind::Sleep(_)) && (halted || rec.skip) {
            continue; // not a statement or query: never counted
        }
        if halted || rec.skip || known.contains_key(&rec.line) {
            report.counts.skipped += 1;
            continue;
        }
        match &rec.kind {
            Kind::Halt => {
                halted = true;
                continue;
            }
            Kind::HashThreshold(n) => {
                state.hash_threshold = *n;
                continue;
            }
            Kind::Sleep(d) => {
                state.engine.advance_processing_time(*d);
                continue;
            }
            _ => {}
        }
        let record_start = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| run_record(&mut state, rec)))
            .unwrap_or_else(|panic| {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                Err(Failure {
                    line: rec.line,
                    sql: record_sql(rec).to_string(),
                    expected: "no panic".into(),
                    actual: format!("panic: {msg}"),
                    category: format!("panic: {}", error_category(msg)),
                    fix: None,
                })
            });
        report.slowest.push((record_start.elapsed(), rec.line));
        report.slowest.sort_by(|a, b| b.cmp(a));
        report.slowest.truncate(SLOWEST);
        match outcome {
            Ok(()) => report.counts.passed += 1,
            Err(f) => {
                report.counts.failed += 1;
                write_failure(&mut report.output, &shown.to_string(), &f, opts.quiet);
                if let (true, Some(fix)) = (opts.complete, f.fix) {
                    report.fixes.push((f.line, *fix));
                }
                report.failures.push(FailureInfo { line: f.line, category: f.category });
            }
        }
    }
    report.time = file_start.elapsed();
    report.engine_time = state.engine_time;
    let lines: HashSet<usize> = records.iter().map(|r| r.line).collect();
    for line in known.keys().filter(|l| !lines.contains(l)) {
        let _ = writeln!(
            report.output,
            "{shown}:{line}: note: listed as a known failure, but no record starts on this line"
        );
    }
    report
}

fn write_failure(out: &mut String, file: &str, f: &Failure, quiet: bool) {
    if quiet {
        let _ = writeln!(out, "{file}:{}: FAILED: {}", f.line, f.category);
        return;
    }
    let _ = writeln!(out, "{file}:{}: FAILED", f.line);
    for l in f.sql.lines() {
        let _ = writeln!(out, "    {l}");
    }
    let _ = writeln!(out, "  expected:");
    for l in f.expected.lines() {
        let _ = writeln!(out, "    {l}");
    }
    let _ = writeln!(out, "  actual:");
    for l in f.actual.lines() {
        let _ = writeln!(out, "    {l}");
    }
}

fn record_sql(rec: &Record) -> &str {
    match &rec.kind {
        Kind::Statement { sql, .. }
        | Kind::Query { sql, .. }
        | Kind::Subscribe { sql, .. }
        | Kind::Explain { sql, .. } => sql,
        Kind::Output { name, .. } => name,
        Kind::Halt | Kind::HashThreshold(_) | Kind::Sleep(_) => "",
    }
}

fn fail(
    rec: &Record,
    sql: &str,
    expected: impl Into<String>,
    actual: impl Into<String>,
    category: impl Into<String>,
) -> Failure {
    Failure {
        line: rec.line,
        sql: sql.to_string(),
        expected: expected.into(),
        actual: actual.into(),
        category: category.into(),
        fix: None,
    }
}

/// An engine error message as a failure category: its first line, without the expression it
/// was about (`cannot evaluate <expr>: ...`), source positions, quoted names and numbers.
pub fn error_category(msg: &str) -> String {
    static PATTERNS: std::sync::OnceLock<Vec<(Regex, &'static str)>> = std::sync::OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            (r"^cannot evaluate .*?: (This feature is not implemented: )?", ""),
            (r" at line \d+, column \d+", ""),
            (r"(logical expression \w+)\(.*", "$1"),
            (r"'[^']*'", "'…'"),
            (r#""[^"]*""#, "\"…\""),
            (r"\d+", "N"),
        ]
        .into_iter()
        .filter_map(|(p, r)| Some((Regex::new(p).ok()?, r)))
        .collect()
    });
    let mut s = msg.lines().next().unwrap_or("").trim().to_string();
    for (re, with) in patterns {
        s = re.replace_all(&s, *with).into_owned();
    }
    if s.chars().count() > 140 {
        s = s.chars().take(140).collect::<String>() + "…";
    }
    format!("error: {s}")
}

fn check_error(rec: &Record, sql: &str, expect: &Expect, err: &str) -> Result<(), Failure> {
    let Expect::Error { pattern, exact } = expect else {
        return Err(fail(rec, sql, "ok", format!("error: {err}"), error_category(err)));
    };
    let with_fix = |f: Failure| match error_fix(pattern.is_some(), exact.is_some(), err) {
        Some(fix) => f.with_fix(fix),
        None => f,
    };
    if let Some(p) = pattern {
        let re = Regex::new(p).map_err(|e| {
            with_fix(fail(rec, sql, format!("a valid regex: {p}"), e.to_string(), "invalid regex"))
        })?;
        if !re.is_match(err) {
            return Err(with_fix(fail(
                rec,
                sql,
                format!("error matching /{p}/"),
                err,
                "error with another message",
            )));
        }
    }
    if let Some(lines) = exact {
        let got: Vec<&str> = err.lines().map(|l| l.trim_end()).collect();
        if got != lines.iter().map(|s| s.as_str()).collect::<Vec<_>>() {
            return Err(with_fix(fail(
                rec,
                sql,
                lines.join("\n"),
                err,
                "error with another message",
            )));
        }
    }
    Ok(())
}

/// The expectation of an error record that `err` meets: a regex for its first line where the
/// record has a regex, its text where the record has the exact text. `None` when the text
/// cannot be written after `----` (it has a blank line, which would end the record).
fn error_fix(pattern: bool, exact: bool, err: &str) -> Option<Fix> {
    let lines: Vec<String> = err.lines().map(|l| l.trim_end().to_string()).collect();
    if exact && lines.iter().any(|l| l.is_empty()) {
        return None;
    }
    Some(Fix::Error {
        pattern: pattern.then(|| error_regex(lines.first().map_or("", String::as_str))),
        exact: exact.then_some(lines),
    })
}

/// A regex matching `line`, written as it reads. The record's header is split at whitespace
/// and joined with single spaces, so other whitespace in `line` is matched by `\s+`.
pub fn error_regex(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.join(" ") == line {
        regex::escape(line)
    } else {
        words.iter().map(|w| regex::escape(w)).collect::<Vec<_>>().join("\\s+")
    }
}

fn run_record(state: &mut State, rec: &Record) -> Result<(), Failure> {
    let engine = &mut state.engine;
    let engine_time = &mut state.engine_time;
    let mut timed = |f: &mut dyn FnMut() -> weir::Result<Vec<ExecResult>>| {
        let start = Instant::now();
        let r = f();
        *engine_time += start.elapsed();
        r
    };
    match &rec.kind {
        Kind::Statement { sql, expect } => match (timed(&mut || engine.execute(sql)), expect) {
            (Ok(_), Expect::Ok) => Ok(()),
            (Ok(_), Expect::Error { .. }) => {
                Err(fail(rec, sql, "an error", "ok", "expected an error, got ok"))
            }
            (Err(e), expect) => check_error(rec, sql, expect, &e.to_string()),
        },
        Kind::Query { sql, types, sort, label, expected, expect_error } => {
            // Sources are read when results are looked at; their errors reach the queries.
            let _ = engine.run_sources();
            let result = timed(&mut || engine.execute(sql));
            if let Some(expect) = expect_error {
                return match result {
                    Ok(_) => Err(fail(rec, sql, "an error", "ok", "expected an error, got ok")),
                    Err(e) => check_error(rec, sql, expect, &e.to_string()),
                };
            }
            let q = QueryCheck {
                types,
                sort: *sort,
                label: label.as_deref(),
                expected,
                hash_threshold: state.hash_threshold,
                complete: state.complete,
                weir_text: state.weir_text,
            };
            q.run(rec, sql, result, &mut state.labels)
        }
        Kind::Subscribe { name, sql } => {
            let sub = engine.subscribe(sql).map_err(|e| {
                let e = e.to_string();
                fail(rec, sql, "a running query", format!("error: {e}"), error_category(&e))
            })?;
            state.subs.insert(name.clone(), sub);
            Ok(())
        }
        Kind::Output { name, expected } => {
            let label = format!("output {name}");
            let _ = engine.run_sources();
            let sub = state.subs.get(name).ok_or_else(|| {
                fail(rec, &label, "a subscription", "no such subscription", "no such subscription")
            })?;
            // Every change so far, then the error if the query failed after them.
            let mut actual: Vec<String> = Vec::new();
            loop {
                match sub.poll_changes() {
                    Ok(c) if c.is_empty() => break,
                    Ok(c) => actual.extend(c.iter().map(|c| c.to_string())),
                    Err(e) => {
                        actual.push(format!("error: {e}"));
                        break;
                    }
                }
            }
            if &actual != expected {
                let f = fail(
                    rec,
                    &label,
                    expected.join("\n"),
                    actual.join("\n"),
                    "wrong output changes",
                );
                return Err(f.with_fix(Fix::Expected(actual)));
            }
            Ok(())
        }
        Kind::Explain { sql, expected } => {
            let text = format!("EXPLAIN {sql}");
            match timed(&mut || engine.execute(&text)) {
                Ok(mut r) => match r.pop() {
                    Some(ExecResult::Explain(plan)) => {
                        let got: Vec<&str> = plan.lines().map(|l| l.trim_end()).collect();
                        if got != expected.iter().map(|s| s.as_str()).collect::<Vec<_>>() {
                            let fix = Fix::Expected(got.iter().map(|l| l.to_string()).collect());
                            let f = fail(rec, sql, expected.join("\n"), &plan, "wrong plan");
                            return Err(f.with_fix(fix));
                        }
                        Ok(())
                    }
                    _ => Err(fail(rec, sql, expected.join("\n"), "no plan", "no plan")),
                },
                Err(e) => {
                    let e = e.to_string();
                    Err(fail(
                        rec,
                        sql,
                        expected.join("\n"),
                        format!("error: {e}"),
                        error_category(&e),
                    ))
                }
            }
        }
        Kind::Halt | Kind::HashThreshold(_) | Kind::Sleep(_) => Ok(()),
    }
}

/// A one-shot query's result, checked against its record.
struct QueryCheck<'a> {
    types: &'a str,
    sort: SortMode,
    label: Option<&'a str>,
    expected: &'a [String],
    hash_threshold: usize,
    /// Work out the [`Fix`] of a wrong result.
    complete: bool,
    /// Write a completed result in Weir's own text (see [`State::weir_text`]).
    weir_text: bool,
}

impl QueryCheck<'_> {
    fn run(
        &self,
        rec: &Record,
        sql: &str,
        result: weir::Result<Vec<ExecResult>>,
        labels: &mut HashMap<String, (String, usize)>,
    ) -> Result<(), Failure> {
        let expected_text = self.expected.join("\n");
        let mut results = result.map_err(|e| {
            let e = e.to_string();
            fail(rec, sql, &expected_text, format!("error: {e}"), error_category(&e))
        })?;
        let Some(ExecResult::Rows { schema, batches }) = results.pop() else {
            return Err(fail(
                rec,
                sql,
                &expected_text,
                "not a one-shot query (use subscribe)",
                "not a one-shot query",
            ));
        };
        let letters: Vec<char> = self.types.chars().collect();
        let columns = schema.fields().len();
        if !letters.is_empty() && letters.len() != columns {
            return Err(fail(
                rec,
                sql,
                &expected_text,
                format!("{columns} columns for type string '{}'", self.types),
                "wrong number of result columns",
            ));
        }
        let reference = reference_rows(&batches, &letters)
            .map_err(|e| fail(rec, sql, &expected_text, e.clone(), e))?;
        // Sorted as the reference driver sorts: rows (or values) by their printed text.
        let (rows, sorted_values) = match self.sort {
            SortMode::ValueSort => (Vec::new(), sorted(reference.into_iter().flatten().collect())),
            sort => (sort_rows(reference, sort), Vec::new()),
        };
        let values: Vec<&str> = if self.sort == SortMode::ValueSort {
            sorted_values.iter().map(String::as_str).collect()
        } else {
            rows.iter().flatten().map(String::as_str).collect()
        };
        let row_lines = || -> Vec<String> {
            if self.sort == SortMode::ValueSort {
                sorted_values.clone()
            } else {
                rows.iter().map(|r| r.join(" ")).collect()
            }
        };
        let hashed = self.hash_threshold > 0 && values.len() > self.hash_threshold;
        let expected_hash = match self.expected {
            [line] => parse_hash_line(line),
            _ => None,
        };
        let hash = (self.label.is_some() || (hashed && expected_hash.is_some()))
            .then(|| hash_values(&values));
        let passed = match (expected_hash, &hash) {
            (Some((n, want)), Some(got)) if hashed => n == values.len() && got == want,
            _ => {
                let same = |got: &[&str]| {
                    got.len() == self.expected.len()
                        && got.iter().zip(self.expected).all(|(g, e)| g.trim_end() == e.trim_end())
                };
                same(&values)
                    || (self.sort != SortMode::ValueSort && {
                        let lines = row_lines();
                        same(&lines.iter().map(String::as_str).collect::<Vec<_>>())
                    })
                    || (expected_hash.is_none() && self.weir_tokens_match(&batches))
            }
        };
        if !passed {
            let lines = row_lines();
            let (actual, category) = self.mismatch(&values, &lines, hashed, expected_hash);
            let f = fail(rec, sql, expected_text, actual, category);
            if !self.complete {
                return Err(f);
            }
            let fix = self.completion(&values, &lines, &batches, hashed, expected_hash);
            return Err(f.with_fix(Fix::Expected(fix)));
        }
        if let (Some(label), Some(h)) = (self.label, hash) {
            match labels.get(label) {
                Some((first, line)) if *first != h => {
                    return Err(fail(
                        rec,
                        sql,
                        format!("the result labelled {label} at line {line}"),
                        format!("{} values hashing to {h}", values.len()),
                        "labelled result differs from an earlier one",
                    ));
                }
                Some(_) => {}
                None => {
                    labels.insert(label.to_string(), (h, rec.line));
                }
            }
        }
        Ok(())
    }

    /// Weir's own text for the values, sorted by the sort mode on that text, against the
    /// expected lines, token by token.
    fn weir_tokens_match(&self, batches: &[RecordBatch]) -> bool {
        self.weir_rows(batches).is_some_and(|rows| {
            let values: Vec<String> = rows.into_iter().flatten().collect();
            tokens(&values) == tokens(self.expected)
        })
    }

    /// The result in Weir's own text, sorted by the sort mode on that text: its rows, or for
    /// `valuesort` its values, one to a row.
    fn weir_rows(&self, batches: &[RecordBatch]) -> Option<Vec<Vec<String>>> {
        let mut rows = Vec::new();
        for b in batches {
            rows.extend(rows_as_text(b).ok()?);
        }
        let rows = sort_rows(rows, self.sort);
        Some(match self.sort {
            SortMode::ValueSort => {
                sorted(rows.into_iter().flatten().collect()).into_iter().map(|v| vec![v]).collect()
            }
            _ => rows,
        })
    }

    /// The expected lines `--complete` writes for a wrong result. A hashed result (more values
    /// than the hash threshold) is written as its hash where the record expects a hash, and in
    /// SQLite's `.test` files; other results are listed: in grammar-tests in Weir's own text,
    /// one row per line (a value per line for `valuesort`), as they are written by hand; in
    /// `.test` files, and where a row of Weir's text would be a blank line (which ends a
    /// record), as the reference driver prints them, a value per line in `.test` files.
    fn completion(
        &self,
        values: &[&str],
        row_lines: &[String],
        batches: &[RecordBatch],
        hashed: bool,
        expected_hash: Option<(usize, &str)>,
    ) -> Vec<String> {
        if hashed && (expected_hash.is_some() || !self.weir_text) {
            return vec![hash_line(values)];
        }
        if self.weir_text {
            let weir = self.weir_rows(batches).map(|rows| {
                rows.iter().map(|r| r.join(" ").trim_end().to_string()).collect::<Vec<_>>()
            });
            if let Some(lines) = weir.filter(|l| l.iter().all(|l| !l.trim().is_empty())) {
                return lines;
            }
            if self.sort != SortMode::ValueSort {
                return row_lines.to_vec();
            }
        }
        values.iter().map(|v| v.to_string()).collect()
    }

    /// The actual result as the failure shows it, and the kind of mismatch.
    fn mismatch(
        &self,
        values: &[&str],
        row_lines: &[String],
        hashed: bool,
        expected_hash: Option<(usize, &str)>,
    ) -> (String, String) {
        if let (true, Some((n, _))) = (hashed, expected_hash) {
            let mut actual = hash_line(values);
            for l in row_lines.iter().take(SHOWN_ROWS) {
                let _ = write!(actual, "\n  {l}");
            }
            if row_lines.len() > SHOWN_ROWS {
                let _ = write!(actual, "\n  ... {} more rows", row_lines.len() - SHOWN_ROWS);
            }
            let kind = if n == values.len() {
                "wrong result (hash): values differ"
            } else {
                "wrong result (hash): value count differs"
            };
            return (actual, kind.to_string());
        }
        let value_wise = self.expected.len() == values.len() && values.len() != row_lines.len();
        let actual = if value_wise || self.sort == SortMode::ValueSort {
            values.join("\n")
        } else {
            row_lines.join("\n")
        };
        let kind = if values.is_empty() {
            "wrong result: no rows".to_string()
        } else if expected_hash.is_some() {
            "wrong result (hash): too few values to hash".to_string()
        } else {
            let got = tokens(values);
            let want = tokens(self.expected);
            if got.len() != want.len() {
                "wrong result: value count differs".to_string()
            } else if sorted(got.iter().map(|s| s.to_string()).collect())
                == sorted(want.iter().map(|s| s.to_string()).collect())
            {
                "wrong result: same values, another order".to_string()
            } else {
                "wrong result: values differ".to_string()
            }
        };
        (actual, kind)
    }
}

fn tokens<S: AsRef<str>>(lines: &[S]) -> Vec<&str> {
    lines.iter().flat_map(|l| l.as_ref().split_whitespace()).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort_unstable();
    v
}

fn sort_rows(mut rows: Vec<Vec<String>>, sort: SortMode) -> Vec<Vec<String>> {
    if sort == SortMode::RowSort {
        rows.sort_unstable();
    }
    rows
}

/// The rows of a result as the reference driver prints them, by the type letters.
fn reference_rows(batches: &[RecordBatch], letters: &[char]) -> Result<Vec<Vec<String>>, String> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for b in batches {
        let mut weir_text: Option<Vec<Vec<String>>> = None;
        let mut columns = Vec::with_capacity(b.num_columns());
        for (c, col) in b.columns().iter().enumerate() {
            let letter = letters.get(c).copied().unwrap_or('?');
            if let Some(values) = reference_column(col.as_ref(), letter) {
                columns.push(values);
                continue;
            }
            // Other types and letters: by value, with Weir's own text (computed once).
            if weir_text.is_none() {
                weir_text = Some(rows_as_text(b).map_err(|e| format!("cannot format rows: {e}"))?);
            }
            let text = weir_text.as_deref().unwrap_or_default();
            let mut values = Vec::with_capacity(b.num_rows());
            for (r, row) in text.iter().enumerate() {
                let t = row.get(c).map(String::as_str).unwrap_or_default();
                if !matches!(letter, 'I' | 'R' | 'T') {
                    values.push(t.to_string());
                    continue;
                }
                let value = Value::try_from_array(col.as_ref(), r)
                    .map_err(|e| format!("cannot read a value: {e}"))?;
                values.push(reference_value(&value, letter, t));
            }
            columns.push(values);
        }
        let start = rows.len();
        rows.extend((0..b.num_rows()).map(|_| Vec::with_capacity(columns.len())));
        for col in columns {
            for (row, v) in rows[start..].iter_mut().zip(col) {
                row.push(v);
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::hash_values;

    fn run(text: &str) -> FileReport {
        run_text(Path::new("t.test"), text, &Options { quiet: true, ..Options::default() })
    }

    /// Runs `text` and returns (passed, failed, skipped) and the failure categories.
    fn counts(text: &str) -> ((usize, usize, usize), Vec<String>) {
        let r = run(text);
        let c = &r.counts;
        ((c.passed, c.failed, c.skipped), r.failures.into_iter().map(|f| f.category).collect())
    }

    const TABLE: &str = "statement ok\nCREATE TABLE t1(a INTEGER, b INTEGER, c VARCHAR)\n\n\
        statement ok\nINSERT INTO t1 VALUES (1, 10, 'x y'), (3, 30, ''), (2, 20, 'z')\n\n";

    #[test]
    fn results_over_the_threshold_compare_by_hash() {
        // rowsort sorts rows by their printed values; `(empty)` stands for ''.
        let values = ["1", "10", "x y", "2", "20", "z", "3", "30", "(empty)"];
        let text = format!(
            "{TABLE}query IIT rowsort\nSELECT a, b, c FROM t1\n----\n9 values hashing to {}\n",
            hash_values(&values)
        );
        assert_eq!(counts(&text), ((3, 0, 0), vec![]));
        let wrong = format!(
            "{TABLE}query IIT rowsort\nSELECT a, b, c FROM t1\n----\n9 values hashing to {}\n",
            hash_values(&["1"])
        );
        assert_eq!(counts(&wrong).1, ["wrong result (hash): values differ"]);
        // Listed values are accepted too, value-wise and row-wise.
        let listed = format!(
            "{TABLE}query IIT rowsort\nSELECT a, b, c FROM t1\n----\n{}\n",
            values.join("\n")
        );
        assert_eq!(counts(&listed), ((3, 0, 0), vec![]));
        let rows = format!("{TABLE}query IIT rowsort\nSELECT a, b, c FROM t1\n----\n1 10 x y\n2 20 z\n3 30 (empty)\n");
        assert_eq!(counts(&rows), ((3, 0, 0), vec![]));
    }

    #[test]
    fn hash_threshold_zero_never_hashes() {
        let values = ["1", "10", "x y", "2", "20", "z", "3", "30", "(empty)"];
        let text = format!(
            "hash-threshold 0\n\n{TABLE}query IIT rowsort\nSELECT a, b, c FROM t1\n----\n9 values hashing to {}\n",
            hash_values(&values)
        );
        assert_eq!(counts(&text).1, ["wrong result (hash): too few values to hash"]);
    }

    #[test]
    fn valuesort_sorts_all_values() {
        let text =
            format!("{TABLE}query I valuesort\nSELECT b FROM t1 WHERE a > 1\n----\n20\n30\n");
        assert_eq!(counts(&text), ((3, 0, 0), vec![]));
        let text = format!(
            "{TABLE}query II valuesort\nSELECT a, b FROM t1\n----\n9 values hashing to x\n"
        );
        assert_eq!(counts(&text).0, (2, 1, 0));
    }

    #[test]
    fn values_print_by_type_letter() {
        // R prints %.3f; a listed R value may also be written as Weir prints it.
        assert_eq!(counts("query R\nSELECT 5.0 / 2\n----\n2.500\n").0, (1, 0, 0));
        assert_eq!(counts("query R\nSELECT 5e0 / 2\n----\n2.5\n").0, (1, 0, 0));
        assert_eq!(counts("query R\nSELECT 5.0 / 2\n----\n2.50000\n").0, (1, 0, 0));
        assert_eq!(counts("query R\nSELECT 7\n----\n7.000\n").0, (1, 0, 0));
        // A real in an I column is truncated, as the reference driver's sqlite3_column_int does.
        assert_eq!(counts("query I\nSELECT 5.0 / 2\n----\n2\n").0, (1, 0, 0));
        assert_eq!(counts("query I\nSELECT -5.0 / 2\n----\n-2\n").0, (1, 0, 0));
        // A boolean in an I column is 1 or 0; NULL is NULL.
        assert_eq!(counts("query II\nSELECT 1 < 2, NULL\n----\n1\nNULL\n").0, (1, 0, 0));
        assert_eq!(counts("query T\nSELECT ''\n----\n(empty)\n").0, (1, 0, 0));
        assert_eq!(
            counts("query I\nSELECT 1, 2\n----\n1 2\n").1,
            ["wrong number of result columns"]
        );
    }

    #[test]
    fn labels_must_agree() {
        let text = format!(
            "{TABLE}query I rowsort label-1\nSELECT a FROM t1\n----\n1\n2\n3\n\n\
             query I rowsort label-1\nSELECT b / 10 FROM t1\n----\n1\n2\n3\n\n\
             query I rowsort label-1\nSELECT a + 1 FROM t1\n----\n2\n3\n4\n"
        );
        assert_eq!(
            counts(&text),
            ((4, 1, 0), vec!["labelled result differs from an earlier one".to_string()])
        );
    }

    #[test]
    fn skips_halts_and_known_failures() {
        let text =
            "onlyif sqlite\nstatement ok\nSELECT 1\n\nskipif weir\nquery I\nSELECT 1\n----\n2\n\n\
             query I\nSELECT 1\n----\n2\n\nskipif sqlite\nhalt\n\nstatement ok\nSELECT 1\n";
        assert_eq!(counts(text).0, (0, 1, 3));
        let known = KnownFailures::parse("t.test:11 wrong on purpose\n").expect("parses");
        let r = run_text(
            Path::new("dir/t.test"),
            text,
            &Options { known_failures: Some(&known), quiet: true, ..Options::default() },
        );
        assert_eq!((r.counts.passed, r.counts.failed, r.counts.skipped), (0, 0, 4));
    }

    #[test]
    fn statements_and_errors() {
        let text = "statement error\nSELECT * FROM nope\n\nstatement ok\nSELECT * FROM nope\n\n\
                    query error unknown\nSELECT * FROM nope\n\nstatement error\nSELECT 1\n";
        let (c, cats) = counts(text);
        assert_eq!(c, (2, 2, 0));
        assert_eq!(cats[1], "expected an error, got ok");
        assert!(cats[0].starts_with("error: unknown stream, table or view '…'"), "{cats:?}");
    }

    #[test]
    fn error_categories() {
        assert_eq!(
            error_category(
                "cannot evaluate a IN (<subquery>): This feature is not implemented: Physical plan \
                 does not support logical expression InSubquery(InSubquery { expr: Literal(Int64(1)) })"
            ),
            "error: Physical plan does not support logical expression InSubquery"
        );
        assert_eq!(
            error_category("unknown column 'x' at line 1, column 15\n  SELECT x\n         ^"),
            "error: unknown column '…'"
        );
    }
}
