//! File sinks: a continuous query's output appended to CSV, JSON-lines or Parquet files, exactly as a
//! subscriber would see it.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use weir::Engine;

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-sinks-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn stream_and_relation_outputs_in_csv_and_json_lines() {
    let dir = tempdir("formats");
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t);
         CREATE SINK big WITH (path = 'out/big.csv') AS SELECT ISTREAM k, v FROM s WHERE v > 1;
         CREATE SINK counts WITH (path = 'out/counts.jsonl')
           AS SELECT k, COUNT(*) AS n FROM s [RANGE 2] GROUP BY k;
         INSERT INTO s VALUES ('a', 1, 1), ('b, \"c\"', 2, 1), ('a', 3, 2), ('a', 3, 2);
         CLOSE s",
    )
    .unwrap();
    let csv = std::fs::read_to_string(dir.join("out/big.csv")).unwrap();
    assert_eq!(csv, "_time,k,v\n1,\"b, \"\"c\"\"\",2\n2,a,3\n2,a,3\n");
    let json = std::fs::read_to_string(dir.join("out/counts.jsonl")).unwrap();
    assert_eq!(
        json,
        "{\"_time\":1,\"_diff\":1,\"k\":\"a\",\"n\":1}\n\
         {\"_time\":1,\"_diff\":1,\"k\":\"b, \\\"c\\\"\",\"n\":1}\n\
         {\"_time\":2,\"_diff\":-1,\"k\":\"a\",\"n\":1}\n\
         {\"_time\":2,\"_diff\":1,\"k\":\"a\",\"n\":3}\n\
         {\"_time\":3,\"_diff\":1,\"k\":\"a\",\"n\":2}\n\
         {\"_time\":3,\"_diff\":-1,\"k\":\"a\",\"n\":3}\n\
         {\"_time\":3,\"_diff\":-1,\"k\":\"b, \\\"c\\\"\",\"n\":1}\n\
         {\"_time\":4,\"_diff\":-1,\"k\":\"a\",\"n\":2}\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timestamps_sinks_in_the_catalog_and_errors() {
    let dir = tempdir("catalog");
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM b (p BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE SINK prices WITH (path = 'p.csv', format = 'csv') AS SELECT p FROM b;
         INSERT INTO b VALUES (5, '2024-01-01 00:00:01'), (6, '2024-01-01 00:00:02.5')",
    )
    .unwrap();
    let err = e.execute("DROP STREAM b").unwrap_err().to_string();
    assert!(err.contains("cannot drop 'b': sink 'prices' depends on it"), "{err}");
    let err = e.execute("CREATE SINK x AS SELECT p FROM b").unwrap_err().to_string();
    assert!(err.contains("a sink needs WITH (path = '...')"), "{err}");
    let err = e.execute("CREATE SINK x WITH (path = 'x', mode = 'a') AS SELECT p FROM b");
    assert!(err.unwrap_err().to_string().contains("unknown sink option 'mode'"));
    let err = e.execute("CREATE SINK prices WITH (path = 'y.csv') AS SELECT p FROM b");
    assert!(err.unwrap_err().to_string().contains("'prices' already exists"));
    match e.execute("SHOW SINKS").unwrap().pop() {
        Some(weir::ExecResult::Rows { batches, .. }) => {
            let rows = weir::format::rows_as_text(&batches[0]).unwrap();
            assert_eq!(rows, [["prices", "p.csv (csv), 30 bytes"]]);
        }
        other => panic!("{other:?}"),
    }
    e.execute("DROP SINK prices; DROP STREAM b").unwrap();
    let csv = std::fs::read_to_string(dir.join("p.csv")).unwrap();
    assert_eq!(csv, "_time,p\n2024-01-01T00:00:01,5\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sink truncates its file, so one that would destroy data is refused before the file is
/// touched: another sink's file, a file or glob a stream reads, a protected file (the script).
#[test]
fn sinks_never_overwrite_what_weir_reads_or_writes() {
    let dir = tempdir("paths");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    for f in ["in/bids.csv", "in/more.csv", "script.sql"] {
        std::fs::write(dir.join(f), "precious\n").unwrap();
    }
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.protect_path(dir.join("script.sql"), "the script being run");
    e.execute(
        "CREATE STREAM b (v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'in/bids.csv');
         CREATE STREAM g (v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'in/*.csv');
         CREATE SINK out WITH (path = 'out/v.csv') AS SELECT v FROM b",
    )
    .unwrap();
    let refused = |e: &mut Engine, path: &str| -> String {
        let sql = format!("CREATE SINK k WITH (path = '{path}') AS SELECT v FROM b");
        e.execute(&sql).unwrap_err().to_string()
    };
    let err = refused(&mut e, "out/../out/v.csv");
    assert!(
        err.starts_with("sink 'k' cannot write 'out/../out/v.csv': sink 'out' writes that file"),
        "{err}"
    );
    let err = refused(&mut e, "./in/bids.csv");
    assert!(err.contains("stream 'b' reads it ('in/bids.csv')"), "{err}");
    let err = refused(&mut e, "in/new.csv");
    assert!(err.contains("stream 'g' reads it ('in/*.csv')"), "a glob covers files to come: {err}");
    let err = refused(&mut e, "script.sql");
    assert!(err.contains("it is the script being run"), "{err}");
    for f in ["in/bids.csv", "in/more.csv", "script.sql"] {
        assert_eq!(std::fs::read_to_string(dir.join(f)).unwrap(), "precious\n", "{f}");
    }
    assert!(!dir.join("in/new.csv").exists());
    e.execute("CREATE SINK k WITH (path = 'out/other.csv') AS SELECT v FROM b").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A full disk is the environment's failure, not Weir's: the sink fails with the system's
/// message (never "internal error"), the other sinks go on, and `Engine::failures` says so.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_fails_the_sink_with_the_system_s_message() {
    let dir = tempdir("full");
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t);
         CREATE SINK full WITH (path = '/dev/full', format = 'json') AS SELECT v FROM s;
         CREATE SINK fine WITH (path = 'fine.csv') AS SELECT v FROM s;
         INSERT INTO s VALUES (1, 1), (2, 2); CLOSE s",
    )
    .unwrap();
    let failures: Vec<String> = e.failures().iter().map(|(n, e)| format!("{n}: {e}")).collect();
    assert_eq!(
        failures,
        ["sink 'full': sink '/dev/full': cannot write: No space left on device (os error 28)"]
    );
    assert_eq!(std::fs::read_to_string(dir.join("fine.csv")).unwrap(), "_time,v\n1,1\n2,2\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// While sources are read, sinks write on threads of their own and the engine reads on; a
/// poll that finds every source ended leaves each file holding all its query's output (the
/// file it replaces cut away), and a write that failed meanwhile has failed its sink.
#[test]
fn sinks_written_while_sources_are_read_hold_everything_when_they_end() {
    let dir = tempdir("in-flight");
    let rows: String = (0..5000).map(|i| format!("{i},{i}\n")).collect();
    std::fs::write(dir.join("in.csv"), rows).unwrap();
    std::fs::write(dir.join("even.csv"), "an older run's output\n".repeat(10_000)).unwrap();
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'in.csv', format = 'csv', header = false);
         CREATE SINK full WITH (path = '/dev/full', format = 'json') AS SELECT v FROM s;
         CREATE SINK even WITH (path = 'even.csv') AS SELECT v FROM s WHERE v % 2 = 0",
    )
    .unwrap();
    let mut polls = 0;
    while e.poll_sources(2048).unwrap().live > 0 {
        polls += 1;
        if polls == 5 {
            // SHOW SINKS counts the bytes in the file.
            let shown = match e.execute("SHOW SINKS").unwrap().pop() {
                Some(weir::ExecResult::Rows { batches, .. }) => {
                    weir::format::rows_as_text(&batches[0]).unwrap()
                }
                other => panic!("{other:?}"),
            };
            let size = std::fs::metadata(dir.join("even.csv")).unwrap().len();
            assert!(shown[0][1].ends_with(&format!("(csv), {size} bytes")), "{shown:?} {size}");
        }
    }
    assert!(polls > 10, "{polls} polls: the writes were not left in flight between them");
    let failures: Vec<String> = e.failures().iter().map(|(n, e)| format!("{n}: {e}")).collect();
    assert_eq!(
        failures,
        ["sink 'full': sink '/dev/full': cannot write: No space left on device (os error 28)"]
    );
    let expected: String = (0..5000).step_by(2).map(|i| format!("{i},{i}\n")).collect();
    let even = std::fs::read_to_string(dir.join("even.csv")).unwrap();
    assert!(even == format!("_time,v\n{expected}"), "even.csv: {} bytes", even.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A poll of sources that goes on leaves its writes in flight, and the next statement waits
/// for them: with a named pipe that is read only after a pause, the statement cannot return
/// before the reader has started reading.
#[cfg(unix)]
#[test]
fn a_statement_waits_for_the_writes_a_poll_left_in_flight() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let dir = tempdir("fifo");
    // 240 KB of output, more than a pipe holds.
    let rows: String = (0..20_000).map(|i| format!("{i},{i}\n")).collect();
    std::fs::write(dir.join("in.csv"), rows).unwrap();
    let fifo = dir.join("out.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::open(&fifo).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        (started, text)
    });
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'in.csv', format = 'csv', header = false);
         CREATE SINK out WITH (path = 'out.fifo', format = 'csv') AS SELECT v FROM s",
    )
    .unwrap();
    let poll = e.poll_sources(1 << 20).unwrap();
    assert!(poll.live > 0 && poll.records == 20_000, "{poll:?}");
    e.execute("SHOW SINKS").unwrap();
    let returned = Instant::now();
    while e.poll_sources(1 << 20).unwrap().live > 0 {}
    drop(e);
    let (started, text) = reader.join().unwrap();
    assert!(returned >= started, "the statement returned before the pipe was read");
    assert_eq!(text.lines().count(), 20_001, "the header and every row");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every row of a Parquet file, each value as text, with the file's column names.
fn parquet_rows(path: &std::path::Path) -> (Vec<String>, Vec<String>) {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = std::fs::File::open(path).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let names = builder.schema().fields().iter().map(|f| f.name().clone()).collect();
    let mut rows = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        let opts = arrow::util::display::FormatOptions::default().with_null("NULL");
        let cols: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..batch.num_rows() {
            rows.push(cols.iter().map(|c| c.value(r).to_string()).collect::<Vec<_>>().join(","));
        }
    }
    (names, rows)
}

/// A Parquet sink writes the columns a CSV sink would, typed; the file is complete (its
/// footer written) when the sink ends, and a stream can read it back.
#[test]
fn parquet_sinks_write_typed_columns_that_a_source_reads_back() {
    let dir = tempdir("parquet");
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (k VARCHAR, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE SINK big WITH (path = 'out/big.parquet') AS SELECT ISTREAM k, v FROM s WHERE v > 1;
         CREATE SINK counts WITH (path = 'out/counts.pq', format = 'parquet')
           AS SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k;
         INSERT INTO s VALUES ('a', 1, '2024-01-01 00:00:01'), ('b', 2, '2024-01-01 00:00:01'),
                              ('a', 3, '2024-01-01 00:00:02'), ('a', 3, '2024-01-01 00:00:02');
         CLOSE s",
    )
    .unwrap();
    let shown = e.execute("SHOW SINKS").unwrap();
    assert!(format!("{shown:?}").contains("out/big.parquet (parquet)"), "{shown:?}");
    e.execute("DROP SINK big").unwrap();
    let (names, rows) = parquet_rows(&dir.join("out/big.parquet"));
    assert_eq!(names, ["_time", "k", "v"]);
    assert_eq!(
        rows,
        ["2024-01-01T00:00:01,b,2", "2024-01-01T00:00:02,a,3", "2024-01-01T00:00:02,a,3"]
    );
    // The other sink's file is finished when the engine goes away.
    drop(e);
    let (names, rows) = parquet_rows(&dir.join("out/counts.pq"));
    assert_eq!(names, ["_time", "_diff", "k", "n"]);
    assert_eq!(
        rows,
        [
            "2024-01-01T00:00:01,1,a,1",
            "2024-01-01T00:00:01,1,b,1",
            // Within an instant, changes are in value order.
            "2024-01-01T00:00:02,-1,a,1",
            "2024-01-01T00:00:02,1,a,2",
            "2024-01-01T00:00:02,-1,b,1",
            "2024-01-01T00:00:03,-1,a,2",
        ]
    );
    // Read back by a stream.
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM back (k VARCHAR, v BIGINT, _time TIMESTAMP, WATERMARK FOR _time AS _time)
         WITH (source = 'file', path = 'out/big.parquet')",
    )
    .unwrap();
    let sub = e.subscribe("SELECT k, v FROM back").unwrap();
    e.run_sources().unwrap();
    let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
    assert_eq!(
        got,
        ["@2024-01-01T00:00:01 b 2", "@2024-01-01T00:00:02 a 3", "@2024-01-01T00:00:02 a 3"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Parquet file cannot be cut back to a checkpoint and appended to: with a data directory,
/// a Parquet sink is refused with what to do instead.
#[test]
fn parquet_sinks_are_refused_where_checkpoints_are_taken() {
    let dir = tempdir("parquet-ckpt");
    let (mut e, _) = Engine::open(dir.join("data")).unwrap();
    e.set_base_dir(&dir);
    e.execute("CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let err = e
        .execute("CREATE SINK p WITH (path = 'p.parquet') AS SELECT v FROM s")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "sink 'p': a Parquet file cannot be resumed after a crash (it is readable only once \
         complete, and cannot be cut back to a checkpoint), so Parquet sinks are not offered \
         with a data directory: write CSV or JSON lines (format = 'csv' or 'json'), which \
         recover exactly-once at line 1, column 13\n  \
         CREATE SINK p WITH (path = 'p.parquet') AS SELECT v FROM s\n              ^"
    );
    let err = e
        .execute("CREATE SINK p WITH (path = 'p.orc') AS SELECT v FROM s")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "'p.orc' ends in .orc, a format Weir does not read or write: use CSV, JSON lines or \
         Parquet, or say format = 'csv' if it is CSV after all at line 1, column 21\n  \
         CREATE SINK p WITH (path = 'p.orc') AS SELECT v FROM s\n                      ^^^^"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
