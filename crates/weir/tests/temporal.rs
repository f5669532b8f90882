//! Differential tests of temporal joins (`JOIN t FOR SYSTEM_TIME AS OF p.t`): the engine's
//! output, for random inputs pushed in batches of 1, 3 and 1024 elements on one and two workers,
//! equals an oracle evaluated from scratch from the definition (docs/sql.md, "Temporal joins"):
//!
//! - each element e = (k, v, t) of the probe stream `p` is output once, stamped t, joined with
//!   the row of its key valid at t: for a table with a primary key, the row that the table's
//!   changes at instants ≤ t (INSERT replaces a key's row, DELETE removes it, in statement order)
//!   leave for k; for a changelog stream with a primary key, the element of key k with the
//!   largest timestamp ≤ t (of equal timestamps, the last to arrive); with a `ROW KIND`
//!   column, of its elements other than `-U` ones, and none if that element is a delete;
//! - a NULL key, a key without a row at t, or a residual condition that is not true gives no
//!   row, and, for LEFT JOIN, e padded with NULL;
//! - output is a stream: the same bag of (instant, row) whatever the batching and worker count,
//!   in time order;
//! - through views (`pv`, the ISTREAM of `p` filtered, on the left; a relation view of the
//!   versioned side filtered, on the right), the same with the filters applied: a key whose
//!   row the right view filters out has no row.
//!
//! The changelog stream arrives out of order within its watermark delay (never late), so the
//! engine must hold each element of `p` until every version at or before it has arrived.
//! `DIFF_CASES` sets the number of cases per property (default 16).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use proptest::prelude::*;
use weir::{Engine, PlanKind};

/// The changelog's watermark delay.
const DELAY: i64 = 3;

#[derive(Clone, Copy, Debug)]
struct El {
    k: Option<i64>,
    v: i64,
    t: i64,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `INSERT INTO tb VALUES (k, w) AT t`: an upsert.
    Insert(i64, i64),
    /// `DELETE FROM tb WHERE k = .. AT t`.
    Delete(i64),
}

#[derive(Clone, Debug)]
struct Input {
    /// The probe stream, in time order.
    p: Vec<El>,
    /// Table changes, in time order.
    table: Vec<(i64, Op)>,
    /// The changelog's elements in time order (`v` is w), and the order they arrive in: a
    /// permutation that is never late for a watermark of (largest timestamp − DELAY) and
    /// keeps equal timestamps in order.
    log: Vec<El>,
    log_arrival: Vec<usize>,
    /// The row kind of each element of `log` (the stream `ck` declared with `ROW KIND`).
    log_kinds: Vec<&'static str>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Versioned {
    Table,
    Changelog,
    /// The changelog with a `ROW KIND` column: upserts, deletes and ignored `-U` elements.
    Kinded,
}

/// The query; with `views`, both sides are read through views: the probe stream as `pv` (the
/// ISTREAM of `p` where v >= 1), the versioned side as a relation view of its rows where
/// w <> 3.
fn query(side: Versioned, left: bool, theta: bool, views: bool) -> String {
    let name = match side {
        Versioned::Table => "tb",
        Versioned::Changelog => "cl",
        Versioned::Kinded => "ck",
    };
    let join = if left { "LEFT JOIN" } else { "JOIN" };
    let (probe, name) = if views { ("pv", format!("{name}v")) } else { ("p", name.to_string()) };
    let theta = if theta { " AND r.w >= p.v" } else { "" };
    format!(
        "SELECT p.k, p.v, p.t, r.w FROM {probe} AS p {join} {name} FOR SYSTEM_TIME AS OF p.t \
         AS r ON p.k = r.k{theta}"
    )
}

const DDL: &str = "CREATE STREAM p (k BIGINT, v BIGINT, t BIGINT, WATERMARK FOR t AS t); \
     CREATE TABLE tb (k BIGINT, w BIGINT, PRIMARY KEY (k)); \
     CREATE STREAM cl (k BIGINT, w BIGINT, t BIGINT, PRIMARY KEY (k), WATERMARK FOR t AS t - 3); \
     CREATE STREAM ck (k BIGINT, w BIGINT, op VARCHAR, t BIGINT, PRIMARY KEY (k), ROW KIND op, \
       WATERMARK FOR t AS t - 3); \
     CREATE VIEW pv AS SELECT ISTREAM k, v, t FROM p WHERE v >= 1; \
     CREATE VIEW tbv AS SELECT k, w FROM tb WHERE w <> 3; \
     CREATE VIEW clv AS SELECT k, w FROM cl WHERE w <> 3; \
     CREATE VIEW ckv AS SELECT k, w FROM ck WHERE w <> 3";

/// The row kinds the changelog `ck` is written with, and what each does.
const KINDS: [&str; 8] = ["+I", "+U", "c", "r", "u", "-D", "d", "-U"];

/// `ck`'s elements (k, w, t) with their kinds.
fn kinded_batch(els: &[(El, &str)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("w", DataType::Int64, true),
        Field::new("op", DataType::Utf8, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(els.iter().map(|e| e.0.k).collect::<Vec<_>>())),
        Arc::new(Int64Array::from(els.iter().map(|e| e.0.v).collect::<Vec<_>>())),
        Arc::new(arrow::array::StringArray::from(els.iter().map(|e| e.1).collect::<Vec<_>>())),
        Arc::new(Int64Array::from(els.iter().map(|e| e.0.t).collect::<Vec<_>>())),
    ];
    RecordBatch::try_new(schema, cols).expect("batch")
}

fn batch(names: [&str; 3], els: &[El]) -> RecordBatch {
    let schema = Arc::new(Schema::new(
        names.iter().map(|n| Field::new(*n, DataType::Int64, true)).collect::<Vec<_>>(),
    ));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(els.iter().map(|e| e.k).collect::<Vec<_>>())),
        Arc::new(Int64Array::from(els.iter().map(|e| e.v).collect::<Vec<_>>())),
        Arc::new(Int64Array::from(els.iter().map(|e| e.t).collect::<Vec<_>>())),
    ];
    RecordBatch::try_new(schema, cols).expect("batch")
}

/// The engine's output: (instant, row) per element, in output order.
fn run(
    sql: &str,
    side: Versioned,
    input: &Input,
    size: usize,
    workers: usize,
) -> Result<Vec<(i64, Vec<String>)>, String> {
    let err = |what: &str, e: weir::WeirError| format!("{what}: {e}");
    let mut e = Engine::new();
    e.set_workers(workers).map_err(|x| err("workers", x))?;
    e.execute(DDL).map_err(|x| err("DDL", x))?;
    let sub = e.subscribe(sql).map_err(|x| err("subscribe", x))?;
    if sub.kind != PlanKind::Stream {
        return Err("a temporal join's output is not a stream".into());
    }
    match side {
        Versioned::Table => {
            // Table changes at τ after the elements stamped ≤ τ, so that they happen at τ.
            let mut next = 0;
            for (i, &(t, op)) in input.table.iter().enumerate() {
                let end = next + input.p[next..].iter().take_while(|x| x.t <= t).count();
                for c in input.p[next..end].chunks(size) {
                    e.push("p", batch(["k", "v", "t"], c)).map_err(|x| err("push", x))?;
                }
                next = end;
                let sql = match op {
                    Op::Insert(k, w) => format!("INSERT INTO tb VALUES ({k}, {w}) AT {t}"),
                    Op::Delete(k) => format!("DELETE FROM tb WHERE k = {k} AT {t}"),
                };
                e.execute(&sql).map_err(|x| err(&format!("table change {i}"), x))?;
            }
            for c in input.p[next..].chunks(size) {
                e.push("p", batch(["k", "v", "t"], c)).map_err(|x| err("push", x))?;
            }
        }
        Versioned::Changelog | Versioned::Kinded => {
            // The two streams interleaved by arrival position, each in chunks.
            let arrived: Vec<(El, &str)> =
                input.log_arrival.iter().map(|&i| (input.log[i], input.log_kinds[i])).collect();
            let mut pc = input.p.chunks(size).peekable();
            let mut lc = arrived.chunks(size).peekable();
            loop {
                let take_p = match (pc.peek(), lc.peek()) {
                    (Some(a), Some(b)) => a[0].t <= b[0].0.t,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                if take_p {
                    let c = pc.next().unwrap_or_default();
                    e.push("p", batch(["k", "v", "t"], c)).map_err(|x| err("push p", x))?;
                } else {
                    let c = lc.next().unwrap_or_default();
                    let pushed = if side == Versioned::Kinded {
                        e.push("ck", kinded_batch(c))
                    } else {
                        let els: Vec<El> = c.iter().map(|x| x.0).collect();
                        e.push("cl", batch(["k", "w", "t"], &els))
                    };
                    pushed.map_err(|x| err("push changelog", x))?;
                }
            }
        }
    }
    e.close_all().map_err(|x| err("close", x))?;
    let changes = sub.poll_changes().map_err(|x| err("poll", x))?;
    let mut out = Vec::new();
    for c in changes {
        if c.diff < 1 {
            return Err(format!("a stream element with diff {}: {c}", c.diff));
        }
        for _ in 0..c.diff {
            out.push((c.time, c.values.clone()));
        }
    }
    Ok(out)
}

fn show(v: Option<i64>) -> String {
    v.map_or_else(|| "NULL".to_string(), |x| x.to_string())
}

/// The oracle: the version of each key valid at t, then the join, from the definition.
fn oracle(
    side: Versioned,
    left: bool,
    theta: bool,
    views: bool,
    input: &Input,
) -> Vec<(i64, Vec<String>)> {
    let mut out = Vec::new();
    for e in input.p.iter().filter(|e| !views || e.v >= 1) {
        let version: Option<i64> = e.k.and_then(|k| match side {
            Versioned::Table => {
                let mut rows: BTreeMap<i64, i64> = BTreeMap::new();
                for &(t, op) in input.table.iter().filter(|(t, _)| *t <= e.t) {
                    let _ = t;
                    match op {
                        Op::Insert(key, w) => {
                            rows.insert(key, w);
                        }
                        Op::Delete(key) => {
                            rows.remove(&key);
                        }
                    }
                }
                rows.get(&k).copied()
            }
            Versioned::Changelog | Versioned::Kinded => {
                // The latest by (timestamp, arrival) at or before e.t; with kinds, of the
                // elements that are not `-U`, and nothing if it is a delete.
                let kinded = side == Versioned::Kinded;
                let mut best: Option<(i64, usize, Option<i64>)> = None;
                for (pos, &i) in input.log_arrival.iter().enumerate() {
                    let l = input.log[i];
                    let kind = if kinded { input.log_kinds[i] } else { "+I" };
                    if kind == "-U" {
                        continue;
                    }
                    let row = (!matches!(kind, "-D" | "d")).then_some(l.v);
                    if l.k == Some(k) && l.t <= e.t && best.is_none_or(|b| (l.t, pos) > (b.0, b.1))
                    {
                        best = Some((l.t, pos, row));
                    }
                }
                best.and_then(|b| b.2)
            }
        });
        // Through the view, a key whose row has w = 3 has no row.
        let version = version.filter(|&w| !views || w != 3);
        let matched = version.filter(|&w| !theta || w >= e.v);
        let row = |w: Option<i64>| vec![show(e.k), e.v.to_string(), e.t.to_string(), show(w)];
        match matched {
            Some(w) => out.push((e.t, row(Some(w)))),
            None if left => out.push((e.t, row(None))),
            None => {}
        }
    }
    out
}

fn els(n: usize, keys: i64) -> impl Strategy<Value = Vec<El>> {
    prop::collection::vec((prop::option::weighted(0.9, 0..keys), 0i64..6, 0i64..12), 0..n).prop_map(
        |mut v| {
            v.sort_by_key(|x| x.2);
            v.into_iter().map(|(k, v, t)| El { k, v, t }).collect()
        },
    )
}

fn input() -> impl Strategy<Value = Input> {
    let table = prop::collection::vec(
        (0i64..12, prop_oneof![3 => (0i64..3, 0i64..6).prop_map(|(k, w)| Op::Insert(k, w)), 1 => (0i64..3).prop_map(Op::Delete)]),
        0..10,
    )
    .prop_map(|mut v| {
        v.sort_by_key(|x| x.0);
        v
    });
    let log = prop::collection::vec((0i64..3, 0i64..6, 0i64..12), 0..12).prop_map(|mut v| {
        v.sort_by_key(|x| x.2);
        v.into_iter().map(|(k, v, t)| El { k: Some(k), v, t }).collect::<Vec<_>>()
    });
    let kinds = prop::collection::vec(prop::sample::select(&KINDS[..]), 12);
    (els(14, 3), table, log, any::<u64>(), kinds).prop_map(|(p, table, log, seed, mut kinds)| {
        let log_arrival = shuffle_within_delay(&log, seed);
        kinds.truncate(log.len());
        Input { p, table, log, log_arrival, log_kinds: kinds }
    })
}

/// A permutation of `log`'s indexes in which no element is late (its timestamp is at least
/// the largest timestamp before it − DELAY) and equal timestamps keep their order: each step
/// takes, among the first few elements not yet taken, one at most DELAY after the earliest
/// not yet taken (always at least that one).
fn shuffle_within_delay(log: &[El], mut seed: u64) -> Vec<usize> {
    let mut left: Vec<usize> = (0..log.len()).collect();
    let mut out = Vec::with_capacity(log.len());
    while !left.is_empty() {
        // Candidates: the first element of each timestamp among the next few, at most DELAY
        // after the earliest left (which the watermark must not pass: so none is ever late).
        let earliest = log[left[0]].t;
        let mut choices: Vec<usize> = Vec::new();
        for (j, &i) in left.iter().enumerate().take(4) {
            let first_of_t = left[..j].iter().all(|&x| log[x].t != log[i].t);
            if first_of_t && log[i].t <= earliest + DELAY {
                choices.push(j);
            }
        }
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let j = choices[(seed >> 33) as usize % choices.len()];
        out.push(left.remove(j));
    }
    out
}

fn cases() -> u32 {
    std::env::var("DIFF_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(16)
}

fn check(side: Versioned, input: &Input) -> Result<(), TestCaseError> {
    let shapes = [
        (false, false, false),
        (true, false, false),
        (true, true, false),
        (false, true, false),
        (true, false, true),
        (false, true, true),
    ];
    for (left, theta, views) in shapes {
        let sql = query(side, left, theta, views);
        let mut expected = oracle(side, left, theta, views, input);
        expected.sort();
        let mut first: Option<Vec<(i64, Vec<String>)>> = None;
        for (size, workers) in [(1, 1), (3, 1), (1024, 1), (3, 2)] {
            let got = run(&sql, side, input, size, workers)
                .map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
            prop_assert!(
                got.windows(2).all(|w| w[0].0 <= w[1].0),
                "{sql}: output not in time order: {got:?}"
            );
            let mut sorted = got.clone();
            sorted.sort();
            prop_assert_eq!(
                &sorted,
                &expected,
                "{} (batch {}, {} workers)\n{:?}",
                sql,
                size,
                workers,
                input
            );
            if workers == 1 {
                match &first {
                    None => first = Some(got),
                    Some(f) => prop_assert_eq!(f, &got, "{}: batching changed the output", sql),
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn temporal_join_with_a_versioned_table_matches_oracle(input in input()) {
        check(Versioned::Table, &input)?;
    }

    #[test]
    fn temporal_join_with_a_changelog_stream_matches_oracle(input in input()) {
        check(Versioned::Changelog, &input)?;
    }

    #[test]
    fn temporal_join_with_deletes_in_a_changelog_matches_oracle(input in input()) {
        check(Versioned::Kinded, &input)?;
    }
}

#[test]
fn the_oracle_follows_the_definition() {
    // a: 1 from 2, 2 from 4 (upsert), deleted at 6; e@1 precedes every version.
    let input = Input {
        p: vec![
            El { k: Some(0), v: 0, t: 1 },
            El { k: Some(0), v: 0, t: 3 },
            El { k: Some(0), v: 5, t: 4 },
            El { k: None, v: 0, t: 5 },
            El { k: Some(0), v: 0, t: 6 },
        ],
        table: vec![(2, Op::Insert(0, 1)), (4, Op::Insert(0, 2)), (6, Op::Delete(0))],
        log: vec![],
        log_arrival: vec![],
        log_kinds: vec![],
    };
    let got: Vec<String> = oracle(Versioned::Table, true, true, false, &input)
        .into_iter()
        .map(|(t, r)| format!("@{t} {}", r.join(" ")))
        .collect();
    assert_eq!(
        got,
        ["@1 0 0 1 NULL", "@3 0 0 3 1", "@4 0 5 4 NULL", "@5 NULL 0 5 NULL", "@6 0 0 6 NULL"]
    );
}

#[test]
fn the_oracle_applies_row_kinds() {
    // Key 0: 1 from 1; at 2 a `-U` (ignored) and a `+U` to 2; deleted at 4; then the same key
    // deleted by Debezium's `d` before it comes back with `r` at 6.
    let el = |w, t| El { k: Some(0), v: w, t };
    let input = Input {
        p: (1..=6).map(|t| El { k: Some(0), v: 0, t }).collect(),
        table: vec![],
        log: vec![el(1, 1), el(1, 2), el(2, 2), el(0, 4), el(0, 5), el(3, 6)],
        log_arrival: vec![0, 1, 2, 3, 4, 5],
        log_kinds: vec!["+I", "-U", "+U", "-D", "d", "r"],
    };
    let got: Vec<String> = oracle(Versioned::Kinded, true, false, false, &input)
        .into_iter()
        .map(|(t, r)| format!("@{t} {}", r[3]))
        .collect();
    assert_eq!(got, ["@1 1", "@2 2", "@3 2", "@4 NULL", "@5 NULL", "@6 3"]);
}
