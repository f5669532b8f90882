//! Runs the records of one file against a fresh engine.

use std::collections::HashMap;
use std::path::Path;

use regex::Regex;
use weir::format::rows_as_text;
use weir::{Engine, ExecResult, Subscription};

use crate::record::{parse, Expect, Kind, Record, SortMode};

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

struct Failure {
    line: usize,
    sql: String,
    expected: String,
    actual: String,
}

/// Runs one file, printing each failure; returns the counts.
pub fn run_file(path: &Path) -> Counts {
    let mut counts = Counts::default();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            println!("{}: cannot read: {e}", path.display());
            counts.failed += 1;
            return counts;
        }
    };
    let records = match parse(&text) {
        Ok(r) => r,
        Err(e) => {
            println!("{}: {e}", path.display());
            counts.failed += 1;
            return counts;
        }
    };
    let mut engine = Engine::new();
    let mut subs: HashMap<String, Subscription> = HashMap::new();
    for rec in records {
        if rec.skip {
            counts.skipped += 1;
            continue;
        }
        if matches!(rec.kind, Kind::Halt) {
            break;
        }
        match run_record(&mut engine, &mut subs, &rec) {
            Ok(()) => counts.passed += 1,
            Err(f) => {
                counts.failed += 1;
                println!("{}:{}: FAILED", path.display(), f.line);
                for l in f.sql.lines() {
                    println!("    {l}");
                }
                println!("  expected:");
                for l in f.expected.lines() {
                    println!("    {l}");
                }
                println!("  actual:");
                for l in f.actual.lines() {
                    println!("    {l}");
                }
            }
        }
    }
    counts
}

fn fail(
    rec: &Record,
    sql: &str,
    expected: impl Into<String>,
    actual: impl Into<String>,
) -> Failure {
    Failure {
        line: rec.line,
        sql: sql.to_string(),
        expected: expected.into(),
        actual: actual.into(),
    }
}

fn check_error(rec: &Record, sql: &str, expect: &Expect, err: &str) -> Result<(), Failure> {
    let Expect::Error { pattern, exact } = expect else {
        return Err(fail(rec, sql, "ok", format!("error: {err}")));
    };
    if let Some(p) = pattern {
        let re = Regex::new(p)
            .map_err(|e| fail(rec, sql, format!("a valid regex: {p}"), e.to_string()))?;
        if !re.is_match(err) {
            return Err(fail(rec, sql, format!("error matching /{p}/"), err));
        }
    }
    if let Some(lines) = exact {
        let got: Vec<&str> = err.lines().map(|l| l.trim_end()).collect();
        if got != lines.iter().map(|s| s.as_str()).collect::<Vec<_>>() {
            return Err(fail(rec, sql, lines.join("\n"), err));
        }
    }
    Ok(())
}

fn run_record(
    engine: &mut Engine,
    subs: &mut HashMap<String, Subscription>,
    rec: &Record,
) -> Result<(), Failure> {
    match &rec.kind {
        Kind::Statement { sql, expect } => match (engine.execute(sql), expect) {
            (Ok(_), Expect::Ok) => Ok(()),
            (Ok(_), Expect::Error { .. }) => Err(fail(rec, sql, "an error", "ok")),
            (Err(e), expect) => check_error(rec, sql, expect, &e.to_string()),
        },
        Kind::Query { sql, sort, expected, expect_error } => {
            let result = engine.execute(sql);
            if let Some(expect) = expect_error {
                return match result {
                    Ok(_) => Err(fail(rec, sql, "an error", "ok")),
                    Err(e) => check_error(rec, sql, expect, &e.to_string()),
                };
            }
            let mut results =
                result.map_err(|e| fail(rec, sql, expected.join("\n"), format!("error: {e}")))?;
            let Some(ExecResult::Rows { batches, .. }) = results.pop() else {
                return Err(fail(
                    rec,
                    sql,
                    expected.join("\n"),
                    "not a one-shot query (use subscribe)",
                ));
            };
            let mut rows: Vec<Vec<String>> = Vec::new();
            for b in &batches {
                rows.extend(rows_as_text(b).map_err(|e| fail(rec, sql, "rows", e.to_string()))?);
            }
            let actual: Vec<String> = match sort {
                SortMode::NoSort => rows.iter().map(|r| r.join(" ")).collect(),
                SortMode::RowSort => {
                    rows.sort();
                    rows.iter().map(|r| r.join(" ")).collect()
                }
                SortMode::ValueSort => {
                    let mut v: Vec<String> = rows.into_iter().flatten().collect();
                    v.sort();
                    v
                }
            };
            // Values compare token by token, so one row per line and one value per line (as
            // SQLite's files write them) are both accepted.
            let tokens = |lines: &[String]| -> Vec<String> {
                lines.iter().flat_map(|l| l.split_whitespace().map(str::to_string)).collect()
            };
            if tokens(&actual) != tokens(expected) {
                return Err(fail(rec, sql, expected.join("\n"), actual.join("\n")));
            }
            Ok(())
        }
        Kind::Subscribe { name, sql } => {
            let sub = engine
                .subscribe(sql)
                .map_err(|e| fail(rec, sql, "a running query", format!("error: {e}")))?;
            subs.insert(name.clone(), sub);
            Ok(())
        }
        Kind::Output { name, expected } => {
            let label = format!("output {name}");
            let sub = subs
                .get(name)
                .ok_or_else(|| fail(rec, &label, "a subscription", "no such subscription"))?;
            let actual: Vec<String> = match sub.poll_changes() {
                Ok(c) => c.iter().map(|c| c.to_string()).collect(),
                Err(e) => vec![format!("error: {e}")],
            };
            if &actual != expected {
                return Err(fail(rec, &label, expected.join("\n"), actual.join("\n")));
            }
            Ok(())
        }
        Kind::Explain { sql, expected } => {
            let text = format!("EXPLAIN {sql}");
            match engine.execute(&text) {
                Ok(mut r) => match r.pop() {
                    Some(ExecResult::Explain(plan)) => {
                        let got: Vec<&str> = plan.lines().map(|l| l.trim_end()).collect();
                        if got != expected.iter().map(|s| s.as_str()).collect::<Vec<_>>() {
                            return Err(fail(rec, sql, expected.join("\n"), plan));
                        }
                        Ok(())
                    }
                    _ => Err(fail(rec, sql, expected.join("\n"), "no plan")),
                },
                Err(e) => Err(fail(rec, sql, expected.join("\n"), format!("error: {e}"))),
            }
        }
        Kind::Halt => Ok(()),
    }
}
