//! Event time over real inputs: the determinism contract across arrival orders, batchings and
//! file chunkings; every late or bad row accounted for; a followed file seen as it grows.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use proptest::prelude::*;
use weir::{Engine, SourceSpec, Subscription};

/// Continuous queries whose output must not depend on arrival order or batching. (ROWS
/// windows are left out: they see the arrival order of equal timestamps, by definition.)
const QUERIES: &[&str] = &[
    "SELECT ISTREAM k, COUNT(*), SUM(v) FROM s [RANGE 5 SLIDE 2] GROUP BY k",
    "SELECT k, MAX(v) FROM s [RANGE 7] GROUP BY k",
    "SELECT RSTREAM k, v FROM s [NOW] WHERE v > 3",
    "SELECT DSTREAM k FROM s [RANGE 3]",
    "SELECT ISTREAM a.k, a.v, b.v FROM s [RANGE 4] AS a, s [RANGE 2] AS b WHERE a.k = b.k AND a.v < b.v",
];

const DELAY: i64 = 4;

fn create(engine: &mut Engine, source: Option<&str>) {
    let with = source.map(|s| format!(" WITH ({s})")).unwrap_or_default();
    engine
        .execute(&format!(
            "CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t - {DELAY}){with}"
        ))
        .unwrap();
}

fn subscribe_all(engine: &mut Engine) -> Vec<Subscription> {
    QUERIES.iter().map(|q| engine.subscribe(q).unwrap()).collect()
}

fn outputs(subs: &[Subscription]) -> String {
    let mut out = String::new();
    for (q, s) in QUERIES.iter().zip(subs) {
        writeln!(out, "-- {q}").unwrap();
        for c in s.poll_changes().unwrap() {
            writeln!(out, "{c}").unwrap();
        }
    }
    out
}

fn batch(rows: &[(String, i64, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0.as_str()))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// In-order events, and an arrival order within the disorder bound: each element is moved by
/// a jitter in [0, DELAY], so none arrives more than DELAY behind the newest before it.
fn events() -> impl Strategy<Value = (Vec<(String, i64, i64)>, Vec<usize>)> {
    prop::collection::vec((0..3u8, 0..8i64, 0..3i64, 0..=DELAY), 1..60).prop_map(|raw| {
        let mut t = 0;
        let mut evs = Vec::new();
        let mut keys = Vec::new();
        for (i, (k, v, dt, jitter)) in raw.into_iter().enumerate() {
            t += dt;
            evs.push((format!("k{k}"), v, t));
            keys.push((t + jitter, i));
        }
        keys.sort();
        (evs, keys.into_iter().map(|(_, i)| i).collect())
    })
}

fn in_order_run(evs: &[(String, i64, i64)]) -> String {
    let mut e = Engine::new();
    create(&mut e, None);
    let subs = subscribe_all(&mut e);
    for ev in evs {
        e.push("s", batch(std::slice::from_ref(ev))).unwrap();
    }
    e.close("s").unwrap();
    outputs(&subs)
}

fn csv_text(evs: &[(String, i64, i64)], order: &[usize]) -> String {
    let mut text = String::from("k,v,t\n");
    for &i in order {
        let (k, v, t) = &evs[i];
        writeln!(text, "{k},{v},{t}").unwrap();
    }
    text
}

fn jsonl_text(evs: &[(String, i64, i64)], order: &[usize]) -> String {
    let mut text = String::new();
    for &i in order {
        let (k, v, t) = &evs[i];
        writeln!(text, "{{\"t\": {t}, \"k\": \"{k}\", \"v\": {v}}}").unwrap();
    }
    text
}

fn config() -> ProptestConfig {
    let cases = std::env::var("EVENT_TIME_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(24);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    /// Shuffled within the bound and pushed in random batches: byte-identical output.
    #[test]
    fn shuffled_pushes_in_random_batches_match_the_in_order_run(
        (evs, order) in events(),
        cuts in prop::collection::vec(1..7usize, 1..40),
    ) {
        let expected = in_order_run(&evs);
        let mut e = Engine::new();
        create(&mut e, None);
        let subs = subscribe_all(&mut e);
        let shuffled: Vec<_> = order.iter().map(|&i| evs[i].clone()).collect();
        let mut rest = &shuffled[..];
        let mut sizes = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().unwrap_or(&1)).min(rest.len());
            e.push("s", batch(&rest[..n])).unwrap();
            rest = &rest[n..];
        }
        e.close("s").unwrap();
        prop_assert_eq!(e.stream_stats()[0].late, 0);
        prop_assert_eq!(outputs(&subs), expected);
    }

    /// The same shuffled events read from a CSV or JSON-lines file in random chunk sizes.
    #[test]
    fn shuffled_files_read_in_random_chunks_match_the_in_order_run(
        (evs, order) in events(),
        chunk in 1..64usize,
        json in any::<bool>(),
    ) {
        let expected = in_order_run(&evs);
        let dir = tempdir();
        let (name, text) = if json {
            ("events.jsonl", jsonl_text(&evs, &order))
        } else {
            ("events.csv", csv_text(&evs, &order))
        };
        std::fs::write(dir.join(name), text).unwrap();
        let mut e = Engine::new();
        e.set_base_dir(&dir);
        create(&mut e, Some(&format!("source = 'file', path = '{name}'")));
        let subs = subscribe_all(&mut e);
        for _ in 0..100_000 {
            if e.poll_sources(chunk).unwrap().live == 0 {
                break;
            }
        }
        let stats = &e.stream_stats()[0];
        prop_assert_eq!((stats.accepted, stats.late, stats.bad), (evs.len() as u64, 0, 0));
        prop_assert_eq!(outputs(&subs), expected);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Beyond the bound, which elements are late depends on the arrival order only, never on
    /// how arrivals are batched: each is compared with the watermark its predecessors left.
    #[test]
    fn lateness_does_not_depend_on_batching(
        raw in prop::collection::vec((0..20i64, 0..8i64), 1..50),
        cuts in prop::collection::vec(1..9usize, 1..20),
    ) {
        let evs: Vec<(String, i64, i64)> =
            raw.iter().enumerate().map(|(i, (t, v))| (format!("k{}", i % 2), *v, *t)).collect();
        let run = |sizes: &[usize]| -> String {
            let mut e = Engine::new();
            create(&mut e, None);
            let mut subs = subscribe_all(&mut e);
            subs.push(e.subscribe("SELECT k, v, t, missed_watermark FROM s$late").unwrap());
            let mut rest = &evs[..];
            let mut it = sizes.iter().cycle();
            while !rest.is_empty() {
                let n = (*it.next().unwrap_or(&1)).min(rest.len());
                e.push("s", batch(&rest[..n])).unwrap();
                rest = &rest[n..];
            }
            e.close("s").unwrap();
            let late: Vec<String> =
                subs.pop().unwrap().poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
            format!("{}\n-- late\n{}", outputs(&subs), late.join("\n"))
        };
        prop_assert_eq!(run(&cuts), run(&[1]));
    }

    /// Beyond the bound, every element is either accepted or late, never lost; the late stream
    /// holds exactly the late ones; bad lines are all in the error stream.
    #[test]
    fn every_row_is_accepted_late_or_bad(
        ts in prop::collection::vec(0..40i64, 1..50),
        bad_every in 2..9usize,
    ) {
        let dir = tempdir();
        let mut text = String::from("k,v,t\n");
        let mut bad = 0;
        for (i, t) in ts.iter().enumerate() {
            if i % bad_every == 1 {
                writeln!(text, "x,not-a-number,{t}").unwrap();
                bad += 1;
            } else {
                writeln!(text, "k,{i},{t}").unwrap();
            }
        }
        std::fs::write(dir.join("mixed.csv"), text).unwrap();
        let mut e = Engine::new();
        e.set_base_dir(&dir);
        create(&mut e, Some("source = 'file', path = 'mixed.csv', bad_rows = 'skip'"));
        let on_time = e.subscribe("SELECT v FROM s").unwrap();
        let late = e.subscribe("SELECT v, t, missed_watermark FROM s$late").unwrap();
        let errors = e.subscribe("SELECT line FROM s$errors").unwrap();
        e.run_sources().unwrap();
        let stats = &e.stream_stats()[0];
        prop_assert_eq!(stats.accepted + stats.late + stats.bad, ts.len() as u64);
        prop_assert_eq!(stats.bad, bad);
        prop_assert_eq!(on_time.poll_changes().unwrap().len() as u64, stats.accepted);
        let late = late.poll_changes().unwrap();
        prop_assert_eq!(late.len() as u64, stats.late);
        for c in &late {
            // Each late element's timestamp is below the watermark it missed.
            let s = c.to_string();
            let f: Vec<i64> = s.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
            prop_assert!(f[1] < f[2], "{}", s);
        }
        prop_assert_eq!(errors.poll_changes().unwrap().len() as u64, bad);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

proptest! {
    #![proptest_config(config())]

    /// Whatever the bytes (CSV-ish, JSON-ish or garbage, invalid UTF-8 included), reading
    /// never panics, and every record read is accepted, late or bad.
    #[test]
    fn any_bytes_are_accounted_for(
        lines in prop::collection::vec(
            prop_oneof![
                "[a-z]{0,3},[0-9]{0,3},[0-9]{1,2}".prop_map(String::into_bytes),
                "\\{\"k\": \"[a-z]{0,2}\", \"v\": [0-9]{1,2}, \"t\": [0-9]{1,2}\\}"
                    .prop_map(String::into_bytes),
                prop::collection::vec(any::<u8>(), 0..12),
                "\"[a-z,\n]{0,5}\",[0-9],[0-9]".prop_map(String::into_bytes),
            ],
            0..30,
        ),
        json in any::<bool>(),
        chunk in 1..40usize,
    ) {
        let dir = tempdir();
        let name = if json { "x.jsonl" } else { "x.csv" };
        let mut bytes = if json { Vec::new() } else { b"k,v,t\n".to_vec() };
        for l in &lines {
            bytes.extend_from_slice(l);
            bytes.push(b'\n');
        }
        std::fs::write(dir.join(name), &bytes).unwrap();
        let mut e = Engine::new();
        e.set_base_dir(&dir);
        create(&mut e, Some(&format!("source = 'file', path = '{name}', bad_rows = 'skip'")));
        let _sub = e.subscribe("SELECT * FROM s").unwrap();
        for _ in 0..10_000 {
            if e.poll_sources(chunk).unwrap().live == 0 {
                break;
            }
        }
        let stats = &e.stream_stats()[0];
        let records = e.source_progress()[0].records;
        prop_assert_eq!(stats.accepted + stats.late + stats.bad, records);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

proptest! {
    #![proptest_config(config())]

    /// Floating-point sums over a join do not depend on the join's output order or on the
    /// batching of the input (float addition is not associative).
    #[test]
    fn float_sums_over_a_join_do_not_depend_on_batching(
        rows in prop::collection::vec((0..3i64, 0..6usize, 0..4i64), 1..40),
        cuts in prop::collection::vec(1..9usize, 1..10),
    ) {
        let mut rows = rows;
        rows.sort_by_key(|r| r.2);
        const VALUES: [f64; 6] = [0.1, 0.2, 0.3, 1e16, -1e16, 3.3e-5];
        let run = |sizes: &[usize]| -> Vec<String> {
            let mut e = Engine::new();
            e.execute(
                "CREATE STREAM a (k BIGINT, x DOUBLE, t BIGINT, WATERMARK FOR t AS t);
                 CREATE STREAM b (k BIGINT, y DOUBLE, t BIGINT, WATERMARK FOR t AS t)",
            )
            .unwrap();
            let sub = e
                .subscribe(
                    "SELECT a.k, SUM(a.x * b.y) AS s, AVG(a.x) AS m \
                     FROM a [RANGE 3] AS a, b [RANGE 3] AS b WHERE a.k = b.k GROUP BY a.k",
                )
                .unwrap();
            let mut i = 0;
            let mut it = sizes.iter().cycle();
            while i < rows.len() {
                let n = (*it.next().unwrap_or(&1)).min(rows.len() - i);
                let chunk = &rows[i..i + n];
                let values = |f: &dyn Fn(&(i64, usize, i64)) -> String| {
                    chunk.iter().map(f).collect::<Vec<_>>().join(", ")
                };
                e.execute(&format!(
                    "INSERT INTO a VALUES {}; INSERT INTO b VALUES {}",
                    values(&|(k, v, t)| format!("({k}, {:e}, {t})", VALUES[*v])),
                    values(&|(k, v, t)| format!("({k}, {:e}, {t})", VALUES[(v + 1) % 6])),
                ))
                .unwrap();
                i += n;
            }
            e.execute("CLOSE ALL").unwrap();
            sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect()
        };
        prop_assert_eq!(run(&cuts), run(&[rows.len()]));
    }
}

/// A fresh directory under the target's temporary directory.
fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-event-time-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A followed file is read as it grows; a partial last line waits for its end.
#[test]
fn followed_file_sees_appended_rows() {
    let dir = tempdir();
    let path = dir.join("growing.csv");
    std::fs::write(&path, "k,v,t\na,1,1\nb,2,2\n").unwrap();
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let mut spec = SourceSpec::csv_file(path.to_string_lossy());
    spec.input = weir::Input::Files { path: path.to_string_lossy().into(), follow: true };
    e.set_source("s", spec).unwrap();
    let sub = e.subscribe("SELECT k, v FROM s").unwrap();
    let text = |sub: &Subscription| -> Vec<String> {
        sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect()
    };
    let p = e.run_sources().unwrap();
    assert_eq!(p.live, 1, "a followed file never ends");
    assert_eq!(text(&sub), ["@1 a 1"]);

    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"c,3,3\nd,4,").unwrap();
    f.flush().unwrap();
    e.run_sources().unwrap();
    assert_eq!(text(&sub), ["@2 b 2"]);
    assert_eq!(e.stream_stats()[0].accepted, 3, "the unterminated line waits");

    f.write_all(b"4\n").unwrap();
    f.flush().unwrap();
    e.run_sources().unwrap();
    e.close("s").unwrap();
    assert_eq!(text(&sub), ["@3 c 3", "@4 d 4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A followed glob reads files that appear later and sort after the last one (rotated logs):
/// the file before is then complete, its unterminated last line read as a record; a file that
/// sorts before the one being followed is not read.
#[test]
fn followed_glob_picks_up_newer_files() {
    let dir = tempdir();
    std::fs::write(dir.join("log-1.csv"), "k,v,t\na,1,1\nb,2,2\n").unwrap();
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'log-*.csv', follow = true)",
    )
    .unwrap();
    let sub = e.subscribe("SELECT k, v FROM s").unwrap();
    let text = |sub: &Subscription| -> Vec<String> {
        sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect()
    };
    assert_eq!(e.run_sources().unwrap().live, 1);
    assert_eq!(text(&sub), ["@1 a 1"]);

    // log-1 grows by an unterminated line, then rotates: log-2 appears.
    let mut f = std::fs::OpenOptions::new().append(true).open(dir.join("log-1.csv")).unwrap();
    f.write_all(b"c,3,3").unwrap();
    f.flush().unwrap();
    e.run_sources().unwrap();
    assert_eq!(e.stream_stats()[0].accepted, 2, "the unterminated line waits while log-1 is last");
    std::fs::write(dir.join("log-2.csv"), "k,v,t\nd,4,4\ne,5,5\n").unwrap();
    std::fs::write(dir.join("log-0.csv"), "k,v,t\nz,0,0\n").unwrap();
    e.run_sources().unwrap();
    assert_eq!(text(&sub), ["@2 b 2", "@3 c 3", "@4 d 4"]);
    assert_eq!(e.stream_stats()[0].accepted, 5, "log-0 sorts before log-1: not read");

    // log-2 is followed in turn.
    let mut f = std::fs::OpenOptions::new().append(true).open(dir.join("log-2.csv")).unwrap();
    f.write_all(b"f,6,6\n").unwrap();
    f.flush().unwrap();
    e.run_sources().unwrap();
    e.close("s").unwrap();
    assert_eq!(text(&sub), ["@5 e 5", "@6 f 6"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A source starts when a query reads its stream, so every query started before reading sees
/// every row; a source that fails ends its stream there and leaves the engine serving
/// everything else.
#[test]
fn sources_start_with_their_first_query_and_fail_alone() {
    let dir = tempdir();
    std::fs::write(dir.join("ok.csv"), "k,v,t\na,1,1\nb,2,2\n").unwrap();
    std::fs::write(dir.join("bad.csv"), "k,v,t\na,1,1\nb,x,2\n").unwrap();
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM good (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'ok.csv');
         CREATE STREAM broken (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'bad.csv')",
    )
    .unwrap();
    let p = e.poll_sources(1 << 20).unwrap();
    assert_eq!((p.records, p.waiting), (0, 2), "no query reads them yet");
    let g1 = e.subscribe("SELECT v FROM good").unwrap();
    let g2 = e.subscribe("SELECT SUM(v) FROM good").unwrap();
    let b = e.subscribe("SELECT v FROM broken").unwrap();
    let err = e.run_sources().unwrap_err().to_string();
    assert_eq!(
        err,
        "bad input: stream 'broken' source 'bad.csv' line 3, field 'v': cannot read 'x' as BIGINT"
    );
    // The broken stream ends at its bad row: the row before it is delivered, then the error.
    assert_eq!(b.poll_changes().unwrap().len(), 1);
    assert!(b.poll_changes().is_err());
    assert_eq!(g1.poll_changes().unwrap().len(), 2);
    assert_eq!(g2.poll_changes().unwrap().len(), 3, "+1 @1, then -1/+1 @2");
    // The engine still serves statements.
    e.execute("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (1)").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
