//! Engine behaviours not covered by grammar-tests: the Rust API itself.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use weir::{Engine, ExecResult, Value};

fn explain(e: &mut Engine, sql: &str) -> String {
    match e.execute(sql).unwrap().pop() {
        Some(ExecResult::Explain(s)) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn explain_names_every_cql_operator() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let plan =
        explain(&mut e, "EXPLAIN SELECT ISTREAM k, COUNT(*) FROM s [RANGE 10 SLIDE 5] GROUP BY k");
    assert_eq!(
        plan,
        "ISTREAM  -> stream
  Exchange: by instant  -> relation
    Project: s.k, count(*) AS COUNT(*)  -> relation
      Project: s.k, __window_0  -> relation
        Aggregate: group=[s.k] aggs=[sum(__pane_0)]  -> relation
          Exchange: by hash of s.k  -> relation
            Window: [RANGE 10 SLIDE 5]  -> relation
              PaneAggregate: panes of 5 group=[s.k] aggs=[count(*)]  -> stream
                StreamScan: s  -> stream
"
    );
}

#[test]
fn push_rows_and_heartbeat() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let sub = e.subscribe("SELECT RSTREAM k FROM s [RANGE 3]").unwrap();
    e.push_rows("s", &[vec![Value::from("a"), Value::Int64(Some(1))]]).unwrap();
    e.advance("s", 2).unwrap();
    let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
    assert_eq!(got, ["@1 a", "@2 a"]);
    e.advance("s", 5).unwrap();
    let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
    // a leaves at 4 (an instant: RSTREAM emits the empty relation, i.e. nothing); 5 is a heartbeat.
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn late_elements_are_routed_or_refused_by_policy() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let late = e.subscribe("SELECT k, t, missed_watermark FROM s$late").unwrap();
    e.execute("INSERT INTO s VALUES ('a', 5)").unwrap();
    // Default: routed to s$late, the rest of the batch accepted.
    e.execute("INSERT INTO s VALUES ('b', 6), ('c', 4)").unwrap();
    let stats = e.stream_stats();
    assert_eq!((stats[0].accepted, stats[0].late), (2, 1));
    // Policy `error` (through the API): the whole batch is refused.
    let policy = weir::StreamPolicy { late: weir::LatePolicy::Error, ..Default::default() };
    e.set_stream_policy("s", policy).unwrap();
    let err = e.execute("INSERT INTO s VALUES ('d', 7), ('e', 4)").unwrap_err().to_string();
    assert!(err.contains("row 2: late element at 4 is below the watermark 7"), "{err}");
    assert_eq!(e.stream_stats()[0].accepted, 2);
    e.close("s").unwrap();
    let got: Vec<String> = late.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
    assert_eq!(got, ["@6 c 4 6"]);
}

#[test]
fn one_shot_over_maintained_view() {
    let mut e = Engine::new();
    e.execute(
        "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t);
         CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [RANGE 5] GROUP BY k;
         INSERT INTO s VALUES ('a', 1), ('a', 2), ('b', 3), ('b', 4)",
    )
    .unwrap();
    // Instants below the watermark (4) are evaluated: a=2, b=1.
    let rows = match e.execute("SELECT k, n FROM c").unwrap().pop() {
        Some(ExecResult::Rows { batches, .. }) => weir::format::rows_as_text(&batches[0]).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(rows, vec![vec!["a".to_string(), "2".into()], vec!["b".into(), "1".into()]]);
}

/// A derived stream made by RSTREAM has elements at its own instants only; windowing it must
/// not feed the window's expiries back as new RSTREAM instants (that never terminated).
#[test]
fn rstream_view_has_its_own_instants() {
    let mut e = Engine::new();
    e.execute(
        "CREATE STREAM s (x VARCHAR, t BIGINT, WATERMARK FOR t AS t);
         CREATE VIEW snap AS SELECT RSTREAM COUNT(*) AS n FROM s [RANGE 2]",
    )
    .unwrap();
    let now = e.subscribe("SELECT n FROM snap [NOW]").unwrap();
    e.execute("INSERT INTO s VALUES ('a', 1), ('b', 2); CLOSE s").unwrap();
    let got: Vec<String> = now.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
    // snap: 1@1 2@2 1@3 0@4; snap [NOW] holds exactly the element of each instant.
    assert_eq!(
        got,
        ["@1 +1 1", "@2 -1 1", "@2 +1 2", "@3 +1 1", "@3 -1 2", "@4 +1 0", "@4 -1 1", "@5 -1 0"]
    );
}

fn rows(e: &mut Engine, sql: &str) -> Vec<String> {
    match e.execute(sql).unwrap().pop() {
        Some(ExecResult::Rows { batches, .. }) => batches
            .iter()
            .flat_map(|b| weir::format::rows_as_text(b).unwrap())
            .map(|r| r.join(" "))
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn relational_sql_over_tables() {
    let mut e = Engine::new();
    e.execute(
        "CREATE TABLE p (item VARCHAR, price BIGINT);
         CREATE TABLE q (item VARCHAR, qty BIGINT);
         INSERT INTO p VALUES ('x', 10), ('y', 20), ('z', 30);
         INSERT INTO q VALUES ('x', 1), ('w', 2), (NULL, 3)",
    )
    .unwrap();
    assert_eq!(rows(&mut e, "SELECT 1, 1"), ["1 1"]);
    assert_eq!(rows(&mut e, "SELECT 2 + 3 * 4, (2 + 3) * 4"), ["14 20"]);
    assert_eq!(
        rows(&mut e, "SELECT p.item, q.qty FROM p LEFT JOIN q ON p.item = q.item ORDER BY 1"),
        ["x 1", "y NULL", "z NULL"]
    );
    assert_eq!(
        rows(&mut e, "SELECT p.item, q.item FROM p FULL JOIN q ON p.item = q.item ORDER BY 1, 2"),
        ["NULL NULL", "NULL w", "x x", "y NULL", "z NULL"]
    );
    assert_eq!(
        rows(&mut e, "SELECT item FROM p WHERE item IN (SELECT item FROM q) ORDER BY 1"),
        ["x"]
    );
    assert_eq!(
        rows(&mut e, "SELECT item FROM p WHERE NOT EXISTS (SELECT 1 FROM q WHERE q.item = p.item) ORDER BY 1"),
        ["y", "z"]
    );
    // NOT IN over a set containing NULL is never true.
    assert!(rows(&mut e, "SELECT item FROM p WHERE item NOT IN (SELECT item FROM q)").is_empty());
    assert_eq!(rows(&mut e, "SELECT item FROM p EXCEPT SELECT item FROM q ORDER BY 1"), ["y", "z"]);
    assert_eq!(rows(&mut e, "SELECT item FROM p INTERSECT SELECT item FROM q"), ["x"]);
    assert_eq!(
        rows(&mut e, "SELECT item, (SELECT MAX(qty) FROM q) FROM p ORDER BY 1"),
        ["x 3", "y 3", "z 3"]
    );
    assert_eq!(rows(&mut e, "SELECT item FROM p WHERE price > (SELECT AVG(price) FROM p)"), ["z"]);
    assert_eq!(
        rows(
            &mut e,
            "SELECT item, (SELECT COUNT(*) FROM q WHERE q.item = p.item) FROM p ORDER BY 1"
        ),
        ["x 1", "y 0", "z 0"]
    );
}

/// Forms whose incremental semantics are not implemented yet are refused, never run wrongly.
#[test]
fn unimplemented_forms_are_refused() {
    let mut e = Engine::new();
    e.execute(
        "CREATE STREAM s (k BIGINT, v BIGINT, t BIGINT, WATERMARK FOR t AS t);
         CREATE STREAM s2 (k BIGINT, w BIGINT, t BIGINT, WATERMARK FOR t AS t)",
    )
    .unwrap();
    let q = "SELECT v, NTILE(2) OVER (ORDER BY t) FROM s [RANGE 3]";
    let err = e.subscribe(q).unwrap_err().to_string();
    assert!(
        err.contains("window function NTILE over a relation is not supported yet"),
        "{q}: {err}"
    );
}

/// A pushed row whose values do not fit is a bad row: refused with the batch under the default
/// policy, routed to `s$errors` under `skip`, naming the row and the field either way.
#[test]
fn pushed_rows_that_do_not_fit_follow_the_bad_row_policy() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let rows = |v: Value| {
        vec![
            vec![Value::from("a"), Value::Int64(Some(1)), Value::Int64(Some(1))],
            vec![Value::from("b"), v, Value::Int64(Some(2))],
        ]
    };
    let err = e.push_rows("s", &rows(Value::from("many"))).unwrap_err().to_string();
    assert_eq!(
        err,
        "bad input: stream 's' row 2, field 'v': cannot read 'many' as BIGINT \
         (nothing in this batch was accepted)"
    );
    let policy = weir::StreamPolicy { bad_rows: weir::BadRowPolicy::Skip, ..Default::default() };
    e.set_stream_policy("s", policy).unwrap();
    let errors = e.subscribe("SELECT line, field, reason, raw FROM s$errors").unwrap();
    e.push_rows("s", &rows(Value::from("many"))).unwrap();
    e.close("s").unwrap();
    let got: Vec<String> = errors.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
    assert_eq!(got, ["@1 2 v cannot read 'many' as BIGINT b, many, 2"]);
    let stats = &e.stream_stats()[0];
    assert_eq!((stats.accepted, stats.bad), (1, 1));
}

/// Reads `sub` on another thread to its end, blocking in its iterator, as lines of changes
/// (`error: ...` for a failure). After the end, a blocking receive returns at once.
fn read_on_another_thread(sub: weir::Subscription) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        for batch in &sub {
            match batch {
                Ok(b) => lines.extend(sub.changes(&b).unwrap().iter().map(|c| c.to_string())),
                Err(e) => lines.push(format!("error: {e}")),
            }
        }
        assert!(sub.recv().unwrap().is_none());
        lines
    })
}

/// A reader thread blocks in the subscription's iterator while this thread drives the engine;
/// it sees every change in order, and the iterator ends when the stream is dropped.
#[test]
fn a_subscription_read_on_another_thread_blocks_until_output_and_ends_with_the_query() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let sub = e.subscribe("SELECT k, SUM(v) AS total FROM s [RANGE 10] GROUP BY k").unwrap();
    let reader = read_on_another_thread(sub);
    e.execute("INSERT INTO s VALUES ('a', 1, 1), ('a', 2, 3)").unwrap();
    e.advance("s", 3).unwrap();
    e.execute("INSERT INTO s VALUES ('b', 5, 4)").unwrap();
    e.advance("s", 4).unwrap();
    e.execute("DROP STREAM s").unwrap();
    let lines = reader.join().unwrap();
    assert_eq!(lines, ["@1 +1 a 1", "@3 -1 a 1", "@3 +1 a 3", "@4 +1 b 5"]);
}

/// A failure reaches a blocking reader after the output before it, and ends the iterator.
#[test]
fn a_blocking_reader_gets_the_output_then_the_failure() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let sub = e.subscribe("SELECT ISTREAM 12 / v AS q FROM s").unwrap();
    let reader = read_on_another_thread(sub);
    e.execute("INSERT INTO s VALUES (3, 1)").unwrap();
    e.advance("s", 1).unwrap();
    e.execute("INSERT INTO s VALUES (0, 2)").unwrap();
    e.advance("s", 2).unwrap();
    let lines = reader.join().unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], "@1 4");
    assert!(lines[1].starts_with("error: ") && lines[1].contains("division by zero"), "{lines:?}");
}

/// The subscription is an async Stream: a task awaits changes that another thread produces.
#[test]
fn a_subscription_is_an_async_stream_woken_by_the_engine() {
    use futures::StreamExt;
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
    let mut sub = e.subscribe("SELECT ISTREAM v FROM s WHERE v > 1").unwrap();
    let reader = std::thread::spawn(move || {
        futures::executor::block_on(async {
            let mut rows = Vec::new();
            while let Some(batch) = sub.next().await {
                for r in sub.rows(&batch.unwrap()).unwrap() {
                    rows.push((r.time, i64::try_from(r.values[0].clone()).unwrap()));
                }
            }
            rows
        })
    });
    for t in 1..=4 {
        e.push_rows("s", &[vec![Value::Int64(Some(t)), Value::Int64(Some(t))]]).unwrap();
        e.advance("s", t).unwrap();
    }
    e.execute("DROP STREAM s").unwrap();
    assert_eq!(reader.join().unwrap(), [(2, 2), (3, 3), (4, 4)]);
}

/// Typed rows: values keep their SQL types (NULLs included), stream multiplicities are
/// repeated, and relation changes keep their diffs.
#[test]
fn rows_carry_typed_values() {
    let mut e = Engine::new();
    e.execute("CREATE STREAM s (k VARCHAR, v DOUBLE, t TIMESTAMP, WATERMARK FOR t AS t)").unwrap();
    let stream = e.subscribe("SELECT ISTREAM k, v, t FROM s").unwrap();
    let counts = e.subscribe("SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k").unwrap();
    e.execute(
        "INSERT INTO s VALUES ('a', 1.5, TIMESTAMP '2026-01-01 00:00:00'), \
         ('a', 1.5, TIMESTAMP '2026-01-01 00:00:00'), (NULL, NULL, TIMESTAMP '2026-01-01 00:00:00')",
    )
    .unwrap();
    e.execute("ADVANCE s TO TIMESTAMP '2026-01-01 00:00:02'").unwrap();
    let rows = stream.poll_rows().unwrap();
    assert_eq!(rows.len(), 3);
    let a = Value::Utf8(Some("a".into()));
    // An instant's output is consolidated in a deterministic order (NULLs first here).
    assert_eq!(rows[0].values[..2], [Value::Utf8(None), Value::Float64(None)]);
    assert_eq!(rows[1].values[..2], [a.clone(), Value::Float64(Some(1.5))]);
    assert_eq!(rows[1], rows[2], "an element of multiplicity 2 is two rows");
    assert!(matches!(rows[1].values[2], Value::TimestampMicrosecond(Some(_), _)));
    assert!(rows.iter().all(|r| r.time == rows[0].time));
    assert!(rows.iter().all(|r| r.diff == 1));
    let changes: Vec<(i64, Value, i64)> = counts
        .poll_rows()
        .unwrap()
        .into_iter()
        .filter(|r| r.values[0] == a)
        .map(|r| (r.diff, r.values[1].clone(), r.time - rows[0].time))
        .collect();
    assert_eq!(
        changes,
        [(1, Value::Int64(Some(2)), 0), (-1, Value::Int64(Some(2)), 1_000_000)],
        "the count enters at the elements' instant and leaves a second later"
    );
}

/// A query started after a stream's file was read to its end is told so (`notices`): it
/// would otherwise wait for elements that never come.
#[test]
fn a_query_over_a_stream_whose_file_ended_gets_a_notice() {
    let dir = std::env::temp_dir().join(format!("weir-smoke-notice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("in.csv"), "a,t\n1,1\n2,2\n").unwrap();
    let mut e = Engine::new();
    e.set_base_dir(&dir);
    e.execute(
        "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t) \
         WITH (source = 'file', path = 'in.csv')",
    )
    .unwrap();
    let first = e.subscribe("SELECT a FROM s").unwrap();
    assert!(first.notices.is_empty());
    while e.poll_sources(1 << 20).unwrap().live > 0 {}
    assert_eq!(first.poll_changes().unwrap().len(), 2);
    let second = e.subscribe("SELECT a FROM s").unwrap();
    assert_eq!(second.notices.len(), 1);
    assert!(
        second.notices[0].starts_with("stream 's' has ended (its source file in.csv")
            && second.notices[0].contains("was read to its end"),
        "{:?}",
        second.notices
    );
    let late = e.subscribe("SELECT * FROM s$late").unwrap();
    assert!(
        late.notices[0].starts_with("stream 's$late' has ended (its source"),
        "{:?}",
        late.notices
    );
    let _ = std::fs::remove_dir_all(&dir);
}
