//! Random scripts against the whole engine: every statement runs or fails with an error a user
//! can read, and no script panics, reports an internal error ("this is a bug in Weir") or runs
//! without end.
//!
//! Each script is generated from a seed by a small grammar aimed at what the engine has: two
//! streams and a table, INSERTs with values at the edges of their types (the largest and
//! smallest BIGINT, NULL, 1e308, times far apart), heartbeats forwards and backwards, and
//! continuous queries over every kind of window (CQL windows, the window table functions,
//! sessions) with filters, arithmetic that can overflow, aggregates, DISTINCT, joins with the
//! table and window functions. The queries' subscriptions are polled after every statement,
//! and every stream is closed at the end, so windows close and their results are computed.
//! One script in four (the seeds divisible by 4) runs on two timely workers.
//!
//! `FUZZ_SCRIPTS` sets how many scripts run (100 by default, for CI; thousands for a deep run)
//! and `FUZZ_SEED` the first seed. A failure prints the seed and the script, which replays it:
//! `FUZZ_SEED=<seed> FUZZ_SCRIPTS=1 cargo test -p weir --test integration script_fuzz`.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::sync::mpsc;
use std::time::Duration;

use weir::{Engine, ExecResult, Subscription, WeirError};
use weir_common::rng::SplitMix64;

/// How long one script may take before it counts as running without end. Generous: a debug
/// build on a loaded 2-core machine runs the slowest scripts in about a second.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Gen {
    rng: SplitMix64,
    /// The largest time inserted or advanced to so far, around which new times are drawn.
    clock: i64,
    views: usize,
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    /// A tick: mostly near the clock, sometimes far off or at the ends of the domain.
    fn time(&mut self) -> i64 {
        let t = match self.below(20) {
            0 => i64::MAX - self.below(3) as i64,
            1 => i64::MIN + self.below(3) as i64,
            2 => self.clock.saturating_add(1_000_000_000),
            3 => self.clock.saturating_sub(self.below(50) as i64),
            _ => self.clock.saturating_add(self.below(6) as i64),
        };
        self.clock = self.clock.max(t.min(i64::MAX / 2));
        t
    }

    fn bigint(&mut self) -> String {
        self.pick(&[
            "0",
            "1",
            "-1",
            "2",
            "7",
            "42",
            "-100",
            "NULL",
            "9223372036854775807",
            "-9223372036854775808",
        ])
        .to_string()
    }

    fn key(&mut self) -> String {
        self.pick(&["'a'", "'b'", "'c'", "NULL", "''", "'a b'"]).to_string()
    }

    fn double(&mut self) -> String {
        self.pick(&["0.5", "-0.0", "1e308", "-1e308", "NULL", "3", "2.25"]).to_string()
    }

    /// A duration in ticks for a window: small mostly, sometimes zero, negative or huge.
    fn ticks(&mut self) -> String {
        self.pick(&["1", "2", "3", "5", "10", "1000000", "0", "-1", "9223372036854775807"])
            .to_string()
    }

    /// A stream with a window, or a window table function, as a FROM item; whether it has
    /// `window_start`/`window_end`.
    fn source(&mut self) -> (String, bool) {
        let (a, b) = (self.ticks(), self.ticks());
        match self.below(14) {
            0 => ("s".into(), false),
            1 => (format!("s [RANGE {a}]"), false),
            2 => (format!("s [RANGE {a} SLIDE {b}]"), false),
            3 => (format!("s [ROWS {}]", self.below(4)), false),
            4 => (format!("s [PARTITION BY k ROWS {}]", self.below(4)), false),
            5 => ("s [NOW]".into(), false),
            6 => ("s [UNBOUNDED]".into(), false),
            7 => (format!("s [SESSION {a} PARTITION BY k]"), false),
            8 => (format!("TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), {a}))"), true),
            9 => (format!("TABLE(HOP(TABLE s, DESCRIPTOR(t), {a}, {b}))"), true),
            10 => (format!("TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), {a}, {b}))"), true),
            11 => (format!("TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), {a}))"), true),
            12 if self.views > 0 => (format!("v{}", self.below(self.views as u64)), false),
            _ => ("p".into(), false),
        }
    }

    fn predicate(&mut self) -> String {
        let (x, y) = (self.bigint(), self.key());
        self.pick(&["v > X", "k = Y", "v + X < 3", "v * X <> 0", "d < 1", "k IS NULL", "v % 2 = 0"])
            .replace('X', &x)
            .replace('Y', &y)
    }

    fn query(&mut self) -> String {
        let (from, bounds) = self.source();
        let r2s = self.pick(&["", "", "ISTREAM ", "DSTREAM ", "RSTREAM "]);
        let wb = if bounds { "window_start, window_end, " } else { "" };
        let group = if bounds { "window_start, window_end, k" } else { "k" };
        let from_is_p = from == "p";
        let (v, d) = if from_is_p { ("w", "w") } else { ("v", "d") };
        let mut q = match self.below(9) {
            0 => format!("SELECT {r2s}* FROM {from}"),
            1 => format!("SELECT {r2s}k, {v} * 2 + {v} - {v} / 3 AS x FROM {from}"),
            2 => format!(
                "SELECT {r2s}{wb}k, COUNT(*) AS n, SUM({v}) AS s, MIN({d}) AS lo, MAX({v}) AS hi, \
                 AVG({v}) AS a FROM {from} GROUP BY {group}"
            ),
            3 => format!("SELECT {r2s}DISTINCT k FROM {from}"),
            4 => format!("SELECT {r2s}x.k, p.w FROM {from} AS x JOIN p ON x.k = p.k"),
            5 => format!(
                "SELECT k, {v}, rn FROM (SELECT k, {v}, ROW_NUMBER() OVER (PARTITION BY k \
                 ORDER BY {v} DESC) AS rn FROM {from}) AS r WHERE rn <= {}",
                self.below(3) + 1
            ),
            6 => format!("SELECT {r2s}COUNT(*), SUM({v}) FROM {from}"),
            7 => format!("SELECT {r2s}k, APPROX_COUNT_DISTINCT({v}) AS c FROM {from} GROUP BY k"),
            _ => format!(
                "SELECT {r2s}k, SUM({v}) OVER (PARTITION BY k ORDER BY {v} ROWS BETWEEN 1 \
                 PRECEDING AND CURRENT ROW) AS w FROM {from}"
            ),
        };
        if !from_is_p && self.chance(3) {
            let p = self.predicate();
            if let Some(at) = q.find(" GROUP BY") {
                q.insert_str(at, &format!(" WHERE {p}"));
            } else if !q.contains(") AS r WHERE") {
                q.push_str(&format!(" WHERE {p}"));
            }
        }
        q
    }

    fn statement(&mut self) -> String {
        match self.below(12) {
            0..=3 => {
                let rows: Vec<String> = (0..self.below(4) + 1)
                    .map(|_| {
                        let (k, v, d, t) = (self.key(), self.bigint(), self.double(), self.time());
                        format!("({k}, {v}, {d}, {t})")
                    })
                    .collect();
                format!("INSERT INTO s VALUES {}", rows.join(", "))
            }
            4 => format!("ADVANCE s TO {}", self.time()),
            5 => {
                let (k, w) = (self.key(), self.bigint());
                format!("INSERT INTO p VALUES ({k}, {w})")
            }
            6 => format!("DELETE FROM p WHERE k = {}", self.key()),
            7 => {
                let q = self.query();
                self.views += 1;
                format!("CREATE VIEW v{} AS {q}", self.views - 1)
            }
            8 => format!("EXPLAIN {}", self.query()),
            9 if self.chance(4) => "CLOSE s".into(),
            _ => self.query(),
        }
    }
}

/// The script of `seed`: the schema, 1 to 3 queries, then 4 to 20 statements.
fn script(seed: u64) -> Vec<String> {
    let mut g = Gen { rng: SplitMix64::new(seed), clock: 0, views: 0 };
    let delay = g.below(4);
    let mut out = vec![
        format!("CREATE STREAM s (k VARCHAR, v BIGINT, d DOUBLE, t BIGINT, WATERMARK FOR t AS t - {delay})"),
        "CREATE TABLE p (k VARCHAR, w BIGINT)".to_string(),
    ];
    // Queries first, so that the statements after them feed them.
    for _ in 0..g.below(3) + 1 {
        out.push(g.query());
    }
    for _ in 0..g.below(17) + 4 {
        out.push(g.statement());
    }
    out
}

/// Whether an error is a bug in Weir rather than a statement the engine rightly refuses.
fn bug(e: &WeirError) -> bool {
    matches!(e, WeirError::Internal(_))
}

/// What the scripts did, to show that they reach the engine's insides.
#[derive(Default, Debug)]
struct Tally {
    statements: usize,
    ran: usize,
    queries: usize,
    /// Queries that failed while running (overflow, division by zero, ...).
    failed_queries: usize,
    changes: usize,
}

/// Runs `statements` on a new engine, counting into `tally`; the first internal error, with
/// the statement it came from, or `None`.
fn run(statements: &[String], workers: usize, tally: &mut Tally) -> Option<String> {
    let mut engine = Engine::new();
    if let Err(e) = engine.set_workers(workers) {
        return Some(format!("starting {workers} workers: {e}"));
    }
    let mut subs: Vec<(String, Subscription, bool)> = Vec::new();
    let poll = |subs: &mut Vec<(String, Subscription, bool)>, tally: &mut Tally| {
        for (q, sub, failed) in subs.iter_mut() {
            match sub.poll() {
                Ok(batches) => tally.changes += batches.iter().map(|b| b.len()).sum::<usize>(),
                Err(e) if bug(&e) => return Some(format!("polling `{q}`: {e}")),
                Err(_) if !*failed => {
                    *failed = true;
                    tally.failed_queries += 1;
                }
                Err(_) => {}
            }
        }
        None
    };
    for stmt in statements {
        tally.statements += 1;
        match engine.execute(stmt) {
            Ok(results) => {
                tally.ran += 1;
                for r in results {
                    if let ExecResult::Subscribed(sub) = r {
                        tally.queries += 1;
                        subs.push((stmt.clone(), sub, false));
                    }
                }
            }
            Err(e) if bug(&e) => return Some(format!("`{stmt}`: {e}")),
            Err(_) => {}
        }
        if let Some(b) = poll(&mut subs, tally) {
            return Some(b);
        }
    }
    if let Err(e) = engine.close_all() {
        if bug(&e) {
            return Some(format!("close_all: {e}"));
        }
    }
    poll(&mut subs, tally)
}

#[test]
fn random_scripts_never_panic_hang_or_report_internal_errors() {
    let n = env_u64("FUZZ_SCRIPTS", 100);
    let first = env_u64("FUZZ_SEED", 1);
    let mut total = Tally::default();
    for seed in first..first + n {
        let stmts = script(seed);
        // One script in four runs on two timely workers.
        let workers = if seed % 4 == 0 { 2 } else { 1 };
        let (tx, rx) = mpsc::channel();
        let to_run = stmts.clone();
        // The engine lives on its own thread so that a script running without end is reported
        // (the thread is left behind; the test fails).
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(|| {
                let mut tally = Tally::default();
                (run(&to_run, workers, &mut tally), tally)
            });
            let _ = tx.send(outcome);
        });
        let failure = match rx.recv_timeout(SCRIPT_TIMEOUT) {
            Ok(Ok((None, t))) => {
                total.statements += t.statements;
                total.ran += t.ran;
                total.queries += t.queries;
                total.failed_queries += t.failed_queries;
                total.changes += t.changes;
                continue;
            }
            Ok(Ok((Some(b), _))) => format!("internal error: {b}"),
            Ok(Err(_)) => "panic (message above)".to_string(),
            Err(_) => format!("no end after {SCRIPT_TIMEOUT:?}"),
        };
        panic!(
            "seed {seed} ({workers} workers): {failure}\nreplay: FUZZ_SEED={seed} FUZZ_SCRIPTS=1 cargo test \
             -p weir --test integration script_fuzz\nscript:\n{};",
            stmts.join(";\n")
        );
    }
    eprintln!("{n} scripts: {total:?}");
    // Scripts that reach the engine: most statements run, and queries produce changes.
    assert!(total.ran * 2 > total.statements, "{total:?}");
    assert!(total.queries > 0 && total.changes > 0, "{total:?}");
}

#[test]
fn scripts_are_reproducible() {
    assert_eq!(script(7), script(7));
    assert_ne!(script(7), script(8));
}
