//! Checkpoints through the embedding API: an engine restored from a checkpoint and fed the
//! rest of the input produces what an uninterrupted engine produces, for sinks, maintained
//! views, tables and subscribers; damaged checkpoints fall back to older ones.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::path::Path;

use weir::{Engine, ExecResult};

const SETUP: &str = "
CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t - 2)
  WITH (source = 'file', path = 'in.csv');
CREATE TABLE names (k VARCHAR, label VARCHAR);
INSERT INTO names VALUES ('a', 'alpha'), ('b', 'beta');
CREATE VIEW counts AS SELECT k, COUNT(*) AS n, SUM(v) AS total FROM s [RANGE 10 SLIDE 5] GROUP BY k;
CREATE SINK labelled WITH (path = 'out/labelled.csv') AS
  SELECT ISTREAM names.label, s.v FROM s [NOW] JOIN names ON s.k = names.k;
CREATE SINK changes WITH (path = 'out/changes.jsonl') AS SELECT * FROM counts;
CREATE SINK sessions WITH (path = 'out/sessions.csv') AS
  SELECT ISTREAM k, window_start, window_end, COUNT(*) AS n, SUM(v) AS total
  FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), 2)) GROUP BY k, window_start, window_end;
CREATE SINK cumulated WITH (path = 'out/cumulated.csv') AS
  SELECT ISTREAM k, window_start, window_end, COUNT(*) AS n, MAX(v) AS top
  FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), 3, 12, 1)) GROUP BY k, window_start, window_end;
CREATE SINK tumbled WITH (path = 'out/tumbled.csv') AS
  SELECT RSTREAM names.label, x.v FROM s [RANGE 5 SLIDE 5] AS x JOIN names ON x.k = names.k;
CREATE SINK paired WITH (path = 'out/paired.csv') AS
  SELECT ISTREAM x.k, x.v, y.v AS w FROM s [RANGE 6 SLIDE 6] AS x
  JOIN s [RANGE 4 SLIDE 5 OFFSET 2] AS y ON x.k = y.k AND x.v < y.v;
CREATE SINK window_join WITH (path = 'out/window_join.csv') AS
  SELECT ISTREAM x.k, x.v, y.v AS w, x.window_start FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 6)) x
  JOIN TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 6)) y
  ON x.window_start = y.window_start AND x.window_end = y.window_end AND x.k = y.k AND x.v < y.v;
CREATE SINK topped WITH (path = 'out/topped.csv') AS
  SELECT ISTREAM c.k, c.n FROM counts AS c JOIN (SELECT MAX(n) AS top FROM counts) AS m
  ON c.n = m.top;
";

const SUBSCRIBED: &str = "SELECT DSTREAM k, v FROM s [ROWS 3]";

fn input(dir: &Path) {
    let mut text = String::from("k,v,t\n");
    for i in 0..400 {
        let k = ["a", "b", "c"][i % 3];
        let t = i / 2 + (i % 4) / 2; // a little disorder
        text.push_str(&format!("{k},{i},{t}\n"));
    }
    std::fs::write(dir.join("in.csv"), text).unwrap();
}

fn rows(e: &mut Engine, sql: &str) -> Vec<Vec<String>> {
    match e.execute(sql).unwrap().pop() {
        Some(ExecResult::Rows { batches, .. }) => weir::format::rows_as_text(&batches[0]).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn lines(sub: &weir::Subscription) -> Vec<String> {
    sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect()
}

#[test]
fn restored_engines_continue_exactly() {
    continue_exactly(1);
}

#[test]
fn restored_engines_on_two_workers_continue_as_one_worker_runs() {
    continue_exactly(2);
}

/// An engine on `workers` workers, checkpointed midway and restored on as many, gives what an
/// uninterrupted engine on one worker gives.
fn continue_exactly(workers: usize) {
    let root = tempfile_dir(&format!("continue-{workers}"));
    let (plain, durable, state) = (root.join("plain"), root.join("durable"), root.join("state"));
    for d in [&plain, &durable] {
        std::fs::create_dir_all(d).unwrap();
        input(d);
    }
    // Uninterrupted.
    let mut a = Engine::new();
    a.set_base_dir(&plain);
    a.execute(SETUP).unwrap();
    let sub_a = a.subscribe(SUBSCRIBED).unwrap();
    a.run_sources().unwrap();
    let expected_sub = lines(&sub_a);
    let expected_counts = rows(&mut a, "SELECT * FROM counts ORDER BY k");

    // Interrupted: read part of the input, checkpoint, read a bit more (lost), "crash".
    let (mut b, recovery) = Engine::open_with_workers(&state, workers).unwrap();
    assert_eq!((recovery.checkpoint, b.workers()), (None, workers));
    b.set_base_dir(&durable);
    b.execute(SETUP).unwrap();
    let sub_b = b.subscribe(SUBSCRIBED).unwrap();
    b.poll_sources(1500).unwrap();
    let before = lines(&sub_b);
    match b.execute("CHECKPOINT").unwrap().pop() {
        Some(ExecResult::Done(tag)) => assert_eq!(tag, "CHECKPOINT 1"),
        other => panic!("{other:?}"),
    }
    b.poll_sources(1500).unwrap();
    drop(sub_b);
    drop(b);

    let (mut c, recovery) = Engine::open_with_workers(&state, workers).unwrap();
    assert_eq!(recovery.checkpoint, Some(1));
    assert_eq!(recovery.parked, [SUBSCRIBED]);
    let (sub_c, from) = c.resume(SUBSCRIBED).unwrap();
    assert!(from.is_some());
    c.run_sources().unwrap();
    // The subscriber sees everything once: what it got before the checkpoint, then the rest.
    let mut seen = before;
    seen.extend(lines(&sub_c));
    assert_eq!(seen, expected_sub);
    assert_eq!(rows(&mut c, "SELECT * FROM counts ORDER BY k"), expected_counts);
    assert_eq!(rows(&mut c, "SELECT * FROM names ORDER BY k").len(), 2);
    let sinks = [
        "out/labelled.csv",
        "out/changes.jsonl",
        "out/sessions.csv",
        "out/cumulated.csv",
        "out/tumbled.csv",
        "out/paired.csv",
        "out/window_join.csv",
        "out/topped.csv",
    ];
    for f in sinks {
        let want = std::fs::read(plain.join(f)).unwrap();
        let got = std::fs::read(durable.join(f)).unwrap();
        assert!(want == got, "{f} differs");
    }
    // Sessions (gap 2) were open across the checkpoint: many were shown, one line each.
    let sessions = std::fs::read_to_string(plain.join("out/sessions.csv")).unwrap();
    assert!(sessions.lines().count() > 50, "{sessions}");
    // Cumulating windows (step 3, size 12, offset 1) were growing across the checkpoint: one
    // line per key and window.
    let cumulated = std::fs::read_to_string(plain.join("out/cumulated.csv")).unwrap();
    assert!(cumulated.lines().count() > 100, "{cumulated}");
    // Joins holding tumbling and gapped windows had windows filling across the checkpoint.
    let least = [("out/tumbled.csv", 500), ("out/paired.csv", 800), ("out/window_join.csv", 500)];
    for (f, least) in least {
        let text = std::fs::read_to_string(plain.join(f)).unwrap();
        assert!(text.lines().count() > least, "{f}: {} lines", text.lines().count());
    }
    // The view read twice is one node, its state saved once; the keys with the most elements
    // changed all along.
    let topped = std::fs::read_to_string(plain.join("out/topped.csv")).unwrap();
    assert!(topped.lines().count() > 20, "{topped}");
    let stats = c.stream_stats();
    assert_eq!(stats[0].accepted, 400);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_checkpoint_restores_on_any_worker_count() {
    let root = tempfile_dir("worker-count");
    let (mut e, _) = Engine::open_with_workers(&root, 2).unwrap();
    e.execute(
        "CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t);
         CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k;
         INSERT INTO s VALUES (1, 1), (2, 1), (1, 2); CHECKPOINT",
    )
    .unwrap();
    drop(e);
    // Each restart on another count takes input and checkpoints again: the query keeps the 2
    // parts it was saved as, hosted by 1, 3, 4 and 2 workers. An engine never restarted takes
    // the same input.
    let mut reference = Engine::new();
    reference
        .execute(
            "CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t);
             CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k;
             INSERT INTO s VALUES (1, 1), (2, 1), (1, 2)",
        )
        .unwrap();
    let steps = [(1, "(5, 3)"), (3, "(2, 4), (3, 4)"), (4, "(3, 5)"), (2, "(1, 6), (4, 7)")];
    for (workers, input) in steps {
        let (mut e, recovery) = Engine::open_with_workers(&root, workers).unwrap();
        assert!(recovery.checkpoint.is_some(), "{workers} workers");
        let insert = format!("INSERT INTO s VALUES {input}");
        e.execute(&format!("{insert}; CHECKPOINT")).unwrap();
        reference.execute(&insert).unwrap();
        let (got, want) = (
            rows(&mut e, "SELECT * FROM c ORDER BY k"),
            rows(&mut reference, "SELECT * FROM c ORDER BY k"),
        );
        assert_eq!(got, want, "{workers} workers");
        assert!(want.len() >= 2, "the view has rows: {want:?}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_checkpoint_of_one_worker_restores_on_several() {
    let root = tempfile_dir("one-worker");
    let script = "CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t);
         CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k;
         INSERT INTO s VALUES (1, 1), (2, 1), (1, 2)";
    let (mut e, _) = Engine::open_with_workers(&root, 1).unwrap();
    e.execute(&format!("{script}; CHECKPOINT")).unwrap();
    drop(e);
    let mut reference = Engine::new();
    reference.execute(script).unwrap();
    // The query runs on the engine's thread, as it was saved; a new one runs on the workers.
    let (mut e, recovery) = Engine::open_with_workers(&root, 3).unwrap();
    assert!(recovery.checkpoint.is_some());
    let insert = "INSERT INTO s VALUES (2, 3), (3, 4)";
    e.execute(&format!("{insert}; CHECKPOINT")).unwrap();
    reference.execute(insert).unwrap();
    let q = "SELECT * FROM c ORDER BY k";
    assert_eq!(rows(&mut e, q), rows(&mut reference, q));
    drop(e);
    let (mut e, _) = Engine::open_with_workers(&root, 2).unwrap();
    e.execute("INSERT INTO s VALUES (1, 5)").unwrap();
    reference.execute("INSERT INTO s VALUES (1, 5)").unwrap();
    assert_eq!(rows(&mut e, q), rows(&mut reference, q));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn damaged_checkpoints_fall_back_and_no_data_dir_is_an_error() {
    let root = tempfile_dir("damaged");
    let mut e = Engine::new();
    let err = e.checkpoint().unwrap_err().to_string();
    assert!(err.contains("no data directory"), "{err}");
    let (mut e, _) = Engine::open(&root).unwrap();
    e.execute("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (1); CHECKPOINT").unwrap();
    e.execute("INSERT INTO t VALUES (2); CHECKPOINT").unwrap();
    // Damage the newest: restoring falls back to the first, with a warning.
    let newest = root.join("ckpt-000000000002.arrow");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() - 40]).unwrap();
    let (mut r, recovery) = Engine::open(&root).unwrap();
    assert_eq!(recovery.checkpoint, Some(1));
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert!(recovery.warnings[0].contains("is damaged"), "{:?}", recovery.warnings);
    assert_eq!(rows(&mut r, "SELECT x FROM t"), [["1"]]);
    // The next checkpoint is numbered after the damaged one, which it never replaces: a
    // checkpoint that names files by number must not find a new file under an old number.
    match r.execute("CHECKPOINT").unwrap().pop() {
        Some(ExecResult::Done(tag)) => assert_eq!(tag, "CHECKPOINT 3"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&root);
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-recovery-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `s$errors` and `s$late` are outputs like any other: sinks over them are byte-identical
/// whether the input is read in one piece, in small reads, or interrupted by a checkpoint and
/// a restore, because a bad row's `detected_at` depends only on the records before it.
#[test]
fn companion_sinks_are_exactly_once_whatever_the_reads() {
    const COMPANIONS: &str = "
CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t - 1)
  WITH (source = 'file', path = 'in.csv', bad_rows = 'skip');
CREATE SINK errors WITH (path = 'out/errors.csv') AS SELECT line, reason, raw FROM s$errors;
CREATE SINK late WITH (path = 'out/late.csv') AS SELECT k, v, missed_watermark FROM s$late;
";
    let mut text = String::from("k,v,t\n");
    for i in 0..3000usize {
        let t = i / 2;
        match i % 23 {
            5 => text.push_str(&format!("a,not-a-number,{t}\n")),
            11 => text.push_str("b,1\n"),
            17 => text.push_str(&format!("c,{i},{}\n", t.saturating_sub(4))),
            _ => text.push_str(&format!("{},{i},{t}\n", ["a", "b", "c"][i % 3])),
        }
    }
    let root = tempfile_dir("companions");
    let run = |name: &str, chunk: usize, interrupt: bool| -> (Vec<u8>, Vec<u8>) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("in.csv"), &text).unwrap();
        let state = dir.join("state");
        let (mut e, _) = Engine::open(&state).unwrap();
        e.set_base_dir(&dir);
        e.execute(COMPANIONS).unwrap();
        if interrupt {
            e.poll_sources(chunk).unwrap();
            e.poll_sources(chunk).unwrap();
            e.checkpoint().unwrap();
            e.poll_sources(chunk).unwrap(); // lost in the "crash"
            drop(e);
            let (restored, recovery) = Engine::open(&state).unwrap();
            assert_eq!(recovery.checkpoint, Some(1));
            e = restored;
        }
        loop {
            let p = e.poll_sources(chunk).unwrap();
            if p.idle() {
                break;
            }
        }
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        (read("out/errors.csv"), read("out/late.csv"))
    };
    let whole = run("whole", 1 << 20, false);
    assert!(whole.0.len() > 200 && whole.1.len() > 50, "the input has bad and late rows");
    // Reads are at least 4 KiB: the input is about 35 KiB.
    for (name, chunk, interrupt) in [("small", 4096, false), ("interrupted", 9000, true)] {
        let got = run(name, chunk, interrupt);
        assert!(got.0 == whole.0, "{name}: s$errors differs");
        assert!(got.1 == whole.1, "{name}: s$late differs");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A sink whose query fails keeps what it committed and stays failed across recovery: the
/// restored engine neither restarts its query (which would write what the uninterrupted run
/// never wrote) nor forgets why it stopped.
#[test]
fn a_failed_sink_stays_failed_after_recovery() {
    let root = tempfile_dir("failed-sink");
    let state = root.join("state");
    let (mut e, _) = Engine::open(&state).unwrap();
    e.set_base_dir(&root);
    e.execute(
        "CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t);
         CREATE SINK q WITH (path = 'q.csv') AS SELECT ISTREAM 12 / (v - 3) AS x FROM s;
         CREATE SINK ok WITH (path = 'ok.csv') AS SELECT ISTREAM v FROM s;
         INSERT INTO s VALUES (1, 1), (5, 2);
         ADVANCE s TO 2;
         INSERT INTO s VALUES (3, 3);
         ADVANCE s TO 3",
    )
    .unwrap();
    let failures: Vec<String> = e.failures().iter().map(|(n, e)| format!("{n}: {e}")).collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("sink 'q': ") && failures[0].contains("division by zero"),
        "{failures:?}"
    );
    e.checkpoint().unwrap();
    let written = std::fs::read_to_string(root.join("q.csv")).unwrap();
    assert_eq!(written, "_time,x\n1,-6\n2,6\n");
    drop(e);

    let (mut r, recovery) = Engine::open(&state).unwrap();
    assert_eq!(recovery.checkpoint, Some(1));
    assert_eq!(r.failures().len(), 1, "still failed after recovery");
    r.execute("INSERT INTO s VALUES (7, 4); CLOSE s").unwrap();
    assert_eq!(std::fs::read_to_string(root.join("q.csv")).unwrap(), written, "nothing new");
    let ok = std::fs::read_to_string(root.join("ok.csv")).unwrap();
    assert_eq!(ok, "_time,v\n1,1\n2,5\n3,3\n4,7\n", "the other sink goes on");
    let shown = rows(&mut r, "SHOW SINKS");
    assert!(shown[1][1].contains("failed: "), "{shown:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// A table loaded from a file is restored from the checkpoint, not read again: a file deleted
/// after the checkpoint does not stop recovery, and the rows are neither doubled nor lost.
#[test]
fn a_table_loaded_from_a_file_is_restored_not_reloaded() {
    let root = tempfile_dir("table-file");
    let file = root.join("names.csv");
    std::fs::write(&file, "k,label\na,alpha\nb,beta\n").unwrap();
    let (mut e, _) = Engine::open(&root).unwrap();
    e.execute(&format!(
        "CREATE TABLE names (k VARCHAR, label VARCHAR) WITH (source = 'file', path = '{}');
         INSERT INTO names VALUES ('c', 'gamma'); CHECKPOINT",
        file.display()
    ))
    .unwrap();
    drop(e);
    std::fs::remove_file(&file).unwrap();
    let (mut e, recovery) = Engine::open(&root).unwrap();
    assert_eq!(recovery.checkpoint, Some(1));
    assert_eq!(
        rows(&mut e, "SELECT k, label FROM names ORDER BY k"),
        [["a", "alpha"], ["b", "beta"], ["c", "gamma"]]
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A Parquet source's checkpoint is the number of rows taken in from its file: a restored
/// engine goes on from the next row, and its sink ends byte-identical to an uninterrupted
/// run's (the file is read in batches of 8192 rows, so the checkpoint falls between batches).
#[test]
fn a_parquet_source_resumes_at_the_next_row() {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    const SETUP: &str = "
CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t - 3)
  WITH (source = 'file', path = 'in.parquet', bad_rows = 'skip');
CREATE SINK totals WITH (path = 'out/totals.csv') AS
  SELECT ISTREAM k, COUNT(*) AS n, SUM(v) AS total FROM s [RANGE 100 SLIDE 50] GROUP BY k;
CREATE SINK errors WITH (path = 'out/errors.csv') AS SELECT line, field, reason FROM s$errors;
";
    let n = 30_000i64;
    let schema = Arc::new(Schema::new(vec![
        Field::new("t", DataType::Int64, true),
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values((0..n).map(|i| i / 3 + (i % 5) / 2))),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| ["a", "b", "c"][i as usize % 3]),
            )),
            // Every 997th value is not a number: a bad row.
            Arc::new(StringArray::from_iter_values((0..n).map(|i| {
                if i % 997 == 5 {
                    "none".to_string()
                } else {
                    i.to_string()
                }
            }))),
        ],
    )
    .unwrap();
    let root = tempfile_dir("parquet");
    let run = |name: &str, interrupt: bool| -> (Vec<u8>, Vec<u8>) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::fs::File::create(dir.join("in.parquet")).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let state = dir.join("state");
        let (mut e, _) = Engine::open(&state).unwrap();
        e.set_base_dir(&dir);
        e.execute(SETUP).unwrap();
        if interrupt {
            e.poll_sources(1).unwrap();
            e.poll_sources(1).unwrap();
            e.checkpoint().unwrap();
            e.poll_sources(1).unwrap(); // lost in the "crash"
            drop(e);
            let (restored, recovery) = Engine::open(&state).unwrap();
            assert_eq!(recovery.checkpoint, Some(1));
            e = restored;
        }
        e.run_sources().unwrap();
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        (read("out/totals.csv"), read("out/errors.csv"))
    };
    let whole = run("whole", false);
    let errors = String::from_utf8(whole.1.clone()).unwrap();
    assert_eq!(errors.lines().count(), 1 + 31, "{errors}");
    assert!(errors.contains(",6,v,cannot read 'none' as BIGINT\n"), "{errors}");
    let interrupted = run("interrupted", true);
    assert!(interrupted.0 == whole.0, "the totals differ");
    assert!(interrupted.1 == whole.1, "s$errors differs");
    let _ = std::fs::remove_dir_all(&root);
}

/// A table's primary key and a temporal join's versions survive a checkpoint: after the
/// restore an INSERT of a key that has a row still replaces it, and an element held across
/// the checkpoint meets the version of its instant, not the one inserted after the restore.
#[test]
fn keyed_tables_and_temporal_joins_are_restored() {
    let root = tempfile_dir("temporal");
    let q = "SELECT p.id, r.cents FROM pays AS p JOIN rates FOR SYSTEM_TIME AS OF p.t AS r \
             ON p.cur = r.cur";
    let (mut e, _) = Engine::open(&root).unwrap();
    e.execute(
        "CREATE TABLE rates (cur VARCHAR, cents BIGINT, PRIMARY KEY (cur));
         CREATE STREAM pays (id VARCHAR, cur VARCHAR, t BIGINT, WATERMARK FOR t AS t);
         INSERT INTO rates VALUES ('eur', 110) AT 0;",
    )
    .unwrap();
    let sub = e.subscribe(q).unwrap();
    // p2@2 is held (pays' watermark is 2) when the checkpoint is taken.
    e.execute("INSERT INTO pays VALUES ('p1', 'eur', 1), ('p2', 'eur', 2); CHECKPOINT").unwrap();
    let mut seen = lines(&sub);
    assert_eq!(seen, ["@1 p1 110"]);
    drop(sub);
    drop(e);
    let (mut e, recovery) = Engine::open(&root).unwrap();
    assert_eq!(recovery.checkpoint, Some(1));
    let (sub, _) = e.resume(q).unwrap();
    e.execute(
        "INSERT INTO rates VALUES ('eur', 120) AT 3;
         INSERT INTO pays VALUES ('p3', 'eur', 3); CLOSE pays",
    )
    .unwrap();
    seen.extend(lines(&sub));
    assert_eq!(seen, ["@1 p1 110", "@2 p2 110", "@3 p3 120"]);
    assert_eq!(rows(&mut e, "SELECT cur, cents FROM rates"), [["eur", "120"]]);
    let _ = std::fs::remove_dir_all(&root);
}

/// The write-ahead log's input script: pushes, rows, table changes, a heartbeat, a delete.
const WAL_SETUP: &str = "
CREATE STREAM p (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t);
CREATE TABLE names (k VARCHAR, label VARCHAR);
CREATE VIEW totals AS SELECT k, COUNT(*) AS n, SUM(v) AS total FROM p [RANGE 4] GROUP BY k;
CREATE SINK labelled WITH (path = 'labelled.csv') AS
  SELECT ISTREAM names.label, p.v, p.t FROM p [NOW] JOIN names ON p.k = names.k;
";

/// Step `i` of the pushed input: a batch through `push`, rows through `push_rows`, table
/// changes without `AT` (they happen at the engine's clock), a heartbeat, a delete.
fn wal_step(e: &mut Engine, i: i64) {
    use std::sync::Arc;
    use weir::arrow::array::{Int64Array, RecordBatch, StringArray};
    use weir::arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
            Arc::new(Int64Array::from(vec![i, 10 * i, 100 * i])),
            Arc::new(Int64Array::from(vec![3 * i, 3 * i + 1, 3 * i + 1])),
        ],
    )
    .unwrap();
    e.push("p", batch).unwrap();
    let row = vec![weir::Value::from("a"), weir::Value::from(i), weir::Value::from(3 * i + 2)];
    e.push_rows("p", &[row]).unwrap();
    match i % 4 {
        0 => e.execute(&format!(
            "INSERT INTO names VALUES ('{}', 'n{i}')",
            ["a", "b", "c"][(i / 4 % 3) as usize]
        )),
        1 => e.execute("DELETE FROM names WHERE label < 'n3'"),
        2 => e.execute(&format!("ADVANCE p TO {}", 3 * i + 2)),
        _ => e.execute("INSERT INTO p VALUES ('b', -1, 1)"), // late: refused, and again on replay
    }
    .map(drop)
    .unwrap_or_else(|err| assert!(err.to_string().contains("late"), "{err}"));
}

/// What the sink wrote and the view holds.
fn wal_outputs(e: &mut Engine, dir: &Path) -> (String, Vec<Vec<String>>) {
    let sink = std::fs::read_to_string(dir.join("labelled.csv")).unwrap();
    (sink, rows(e, "SELECT * FROM totals ORDER BY k"))
}

/// Input pushed after the last checkpoint, lost in a crash without the log, is replayed with
/// it: the engine then continues exactly as an uninterrupted one, sink and view alike, with
/// a checkpoint in the middle or not, and with the newest checkpoint damaged.
#[test]
fn pushed_input_is_replayed_from_the_write_ahead_log() {
    let root = tempfile_dir("wal");
    // Uninterrupted: 40 steps.
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let mut a = Engine::new();
    a.set_base_dir(&plain);
    a.execute(WAL_SETUP).unwrap();
    (0..40).for_each(|i| wal_step(&mut a, i));
    a.close_all().unwrap();
    let expected = wal_outputs(&mut a, &plain);
    assert!(expected.0.lines().count() > 20, "{}", expected.0);

    // `checkpoint_at`: a CHECKPOINT after that step. `damage`: the newest checkpoint damaged
    // before the restart.
    for (case, checkpoint_at, damage, sync) in [
        ("no-checkpoint", None, false, weir::WalSync::Write),
        ("checkpoint", Some(12), false, weir::WalSync::Fsync),
        ("damaged", Some(12), true, weir::WalSync::Write),
    ] {
        let dir = root.join(case);
        let (mut b, _) = Engine::open(&dir).unwrap();
        b.set_base_dir(&dir);
        b.set_wal(Some(sync)).unwrap();
        b.execute(WAL_SETUP).unwrap();
        for i in 0..25 {
            wal_step(&mut b, i);
            if checkpoint_at == Some(i) {
                b.checkpoint().unwrap();
            }
        }
        drop(b); // a crash: nothing is checkpointed on the way out
        if damage {
            let newest = weir::checkpoint::store::list(&dir).remove(0);
            let mut bytes = std::fs::read(&newest).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            std::fs::write(&newest, bytes).unwrap();
        }
        let (mut c, recovery) = Engine::open(&dir).unwrap();
        assert_eq!(recovery.warnings.len(), usize::from(damage), "{case}: {recovery:?}");
        // Every step since the checkpoint restored logged 3 records: a push, rows, a statement
        // (a damaged checkpoint falls back to the one before: the definitions' last).
        let from = if damage { 0 } else { checkpoint_at.map_or(0, |c| c + 1) };
        assert_eq!(recovery.replayed, 3 * (25 - from) as usize, "{case}: {recovery:?}");
        c.set_base_dir(&dir);
        c.set_wal(Some(sync)).unwrap();
        (25..40).for_each(|i| wal_step(&mut c, i));
        c.close_all().unwrap();
        assert_eq!(wal_outputs(&mut c, &dir), expected, "{case}");
    }

    // Without the log, the same crash loses what came after the last checkpoint.
    let dir = root.join("no-log");
    let (mut b, _) = Engine::open(&dir).unwrap();
    b.set_base_dir(&dir);
    b.execute(WAL_SETUP).unwrap();
    b.checkpoint().unwrap();
    (0..25).for_each(|i| wal_step(&mut b, i));
    drop(b);
    let (mut c, recovery) = Engine::open(&dir).unwrap();
    assert_eq!(recovery.replayed, 0);
    c.set_base_dir(&dir);
    (25..40).for_each(|i| wal_step(&mut c, i));
    c.close_all().unwrap();
    assert_ne!(wal_outputs(&mut c, &dir), expected);
    let _ = std::fs::remove_dir_all(&root);
}

/// A record cut short by a crash ends the log with a warning; the records before it are
/// replayed. A log needs a data directory.
#[test]
fn a_torn_log_record_is_dropped_with_a_warning() {
    let dir = tempfile_dir("wal-torn");
    let (mut b, _) = Engine::open(&dir).unwrap();
    b.set_wal(Some(weir::WalSync::Write)).unwrap();
    b.execute("CREATE TABLE t (v BIGINT)").unwrap();
    b.execute("INSERT INTO t VALUES (1)").unwrap();
    b.execute("INSERT INTO t VALUES (2)").unwrap();
    drop(b);
    let (seq, log) = weir::checkpoint::wal::files(&dir).pop().unwrap();
    assert!(seq > 0);
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 3]).unwrap();
    let (mut c, recovery) = Engine::open(&dir).unwrap();
    assert_eq!(recovery.replayed, 1, "{recovery:?}");
    assert_eq!(recovery.warnings.len(), 1, "{recovery:?}");
    assert!(recovery.warnings[0].contains("a record cut short"), "{recovery:?}");
    assert_eq!(rows(&mut c, "SELECT v FROM t"), [["1"]]);
    // The replayed record is in a new checkpoint; the old log is gone.
    drop(c);
    let (mut d, recovery) = Engine::open(&dir).unwrap();
    assert_eq!((recovery.replayed, recovery.warnings.len()), (0, 0), "{recovery:?}");
    assert_eq!(rows(&mut d, "SELECT v FROM t"), [["1"]]);
    let err = Engine::new().set_wal(Some(weir::WalSync::Write)).unwrap_err().to_string();
    assert!(err.starts_with("a write-ahead log needs a data directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
