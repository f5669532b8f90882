//! Continuous queries on several timely workers give what one worker gives, change for
//! change (instants and diffs included), on plans that exchange rows by key, gather them on
//! one worker, or keep them where they are.

use weir::{Engine, ExecResult};

/// Runs `script` on `workers` workers and returns every query's output as text lines, in
/// the order printed.
fn run(script: &str, workers: usize) -> Vec<String> {
    let mut engine = Engine::new();
    engine.set_workers(workers).expect("workers");
    run_on(engine, script).0
}

/// Runs `script` on a cluster of two processes of `threads` workers each, the second played
/// by a thread of this one (`weir::serve_cluster`), connected over localhost.
fn run_on_cluster(script: &str, threads: usize) -> (Vec<String>, (u64, u64)) {
    let addresses: Vec<String> = (0..2)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        })
        .collect();
    let other = weir::Cluster::new(1, addresses.clone(), threads).expect("cluster");
    let server = std::thread::spawn(move || weir::serve_cluster(&other));
    let mut engine = Engine::new();
    engine
        .join_cluster(&weir::Cluster::new(0, addresses, threads).expect("cluster"))
        .expect("join");
    assert_eq!(engine.workers(), 2 * threads);
    let lines = run_on(engine, script);
    // The engine is dropped: the other process's workers are told to stop.
    server.join().expect("server thread").expect("served");
    lines
}

/// The output lines of `script` on `engine`, and the rows and bytes its workers exchanged.
fn run_on(mut engine: Engine, script: &str) -> (Vec<String>, (u64, u64)) {
    let mut subs = Vec::new();
    let mut lines = Vec::new();
    for stmt in weir_sql::parse_script(script).expect("parse") {
        let text = stmt.text.clone();
        match engine.execute_statement(stmt).expect(&text) {
            ExecResult::Subscribed(sub) => subs.push(sub),
            ExecResult::Rows { batches, .. } => {
                lines.extend(batches.iter().map(|b| format!("{b:?}")))
            }
            _ => {}
        }
        poll(&subs, &mut lines);
    }
    engine.close_all().expect("close");
    poll(&subs, &mut lines);
    (lines, engine.worker_traffic())
}

fn poll(subs: &[weir::Subscription], lines: &mut Vec<String>) {
    for (i, sub) in subs.iter().enumerate() {
        match sub.poll_changes() {
            Ok(changes) => lines.extend(changes.iter().map(|c| format!("q{i} {c:?}"))),
            Err(e) => lines.push(format!("q{i} failed: {e}")),
        }
    }
}

const EVENTS: &str = "
CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t - 2);
CREATE TABLE names (k VARCHAR, name VARCHAR);
INSERT INTO names VALUES ('a', 'alpha'), ('b', 'beta'), ('c', 'gamma');
";

fn same(queries: &str, inserts: &str) {
    let script = format!("{EVENTS}{queries}{inserts}");
    let one = run(&script, 1);
    assert!(one.iter().any(|l| l.starts_with("q0 ")), "the query gives output: {one:?}");
    for n in [2, 3] {
        assert_eq!(run(&script, n), one, "{n} workers");
    }
}

const INSERTS: &str = "
INSERT INTO s VALUES ('a', 1, 1), ('b', 2, 1), ('a', 3, 2), ('c', 4, 3);
INSERT INTO s VALUES ('b', 5, 4), ('a', 6, 4), ('c', 7, 6), ('a', 8, 9);
INSERT INTO names VALUES ('d', 'delta');
INSERT INTO s VALUES ('d', 9, 10), ('b', 10, 11), ('a', 11, 11), ('a', 12, 15);
";

#[test]
fn grouped_aggregates_exchange_by_key() {
    same("SELECT k, COUNT(*), SUM(v) FROM s [RANGE 3] GROUP BY k;", INSERTS);
    same("SELECT ISTREAM k, MAX(v) FROM s [RANGE 5 SLIDE 2] GROUP BY k;", INSERTS);
    same("SELECT COUNT(*), SUM(v) FROM s [RANGE 4];", INSERTS);
}

#[test]
fn joins_distinct_and_filters() {
    same(
        "SELECT ISTREAM s.k, n.name, s.v FROM s JOIN names n ON s.k = n.k WHERE s.v > 2;",
        INSERTS,
    );
    same("SELECT DISTINCT k FROM s [RANGE 2];", INSERTS);
    same("SELECT * FROM s WHERE v % 2 = 0;", INSERTS);
}

#[test]
fn single_worker_operators_and_every_instant() {
    same("SELECT RSTREAM k, COUNT(*) FROM s [RANGE 3] GROUP BY k;", INSERTS);
    same("SELECT * FROM s [ROWS 2];", INSERTS);
    same("SELECT k, v FROM s [PARTITION BY k ROWS 1];", INSERTS);
    same("SELECT k, v FROM s [RANGE 10] ORDER BY v DESC LIMIT 2;", INSERTS);
}

#[test]
fn a_cluster_of_two_processes_gives_what_one_worker_gives() {
    let queries = "SELECT k, COUNT(*), SUM(v) FROM s [RANGE 3] GROUP BY k;
        SELECT ISTREAM k, MAX(v) FROM s [RANGE 5 SLIDE 2] GROUP BY k;
        SELECT ISTREAM s.k, n.name, s.v FROM s JOIN names n ON s.k = n.k WHERE s.v > 2;
        SELECT DISTINCT k FROM s [RANGE 2];
        SELECT RSTREAM k, COUNT(*) FROM s [RANGE 3] GROUP BY k;
        CREATE VIEW big AS SELECT k, v FROM s WHERE v > 4;
        SELECT k, SUM(v) FROM big GROUP BY k;
        SELECT k, 100 / (v - 6) FROM s;";
    let script = format!("{EVENTS}{queries}{INSERTS}");
    let one = run(&script, 1);
    for q in 0..7 {
        assert!(one.iter().any(|l| l.starts_with(&format!("q{q} "))), "q{q} gives output");
    }
    assert!(one.iter().any(|l| l.contains("division by zero")), "the last query fails: {one:?}");
    // Worker w sends what worker w of one process would: the same rows and bytes in all.
    let mut two = Engine::new();
    two.set_workers(2).expect("workers");
    let (lines, sent) = run_on(two, &script);
    assert_eq!(lines, one);
    assert!(sent.0 > 0, "rows move between the workers");
    assert_eq!(run_on_cluster(&script, 1), (one.clone(), sent), "two processes of one worker");
    assert_eq!(run_on_cluster(&script, 2).0, one, "two processes of two workers");
}

#[test]
fn the_worker_count_is_chosen_before_queries_start() {
    let mut engine = Engine::new();
    engine.execute(EVENTS).expect("ddl");
    let _sub = engine.subscribe("SELECT k FROM s").expect("query");
    // Keeping the count is fine (a server restored from a checkpoint does so).
    engine.set_workers(1).expect("same count");
    let e = engine.set_workers(2).expect_err("queries are running");
    assert!(e.to_string().contains("before any continuous query starts"), "{e}");
    let mut zero = Engine::new();
    zero.set_workers(0).expect("0 means one worker");
    assert_eq!(zero.workers(), 1);
    // A data directory is no obstacle: checkpoints hold each worker's state.
    let mut dir_engine = Engine::new();
    dir_engine.set_data_dir(std::env::temp_dir().join("weir-workers-test-unused"));
    dir_engine.set_workers(2).expect("workers with a data directory");
    assert_eq!(dir_engine.workers(), 2);
}

#[test]
fn explain_shows_the_exchanges_between_workers() {
    let explain = |workers: usize, sql: &str| {
        let mut engine = Engine::new();
        engine.set_workers(workers).expect("workers");
        engine.execute(EVENTS).expect("ddl");
        match engine.execute(sql).expect("explain").pop() {
            Some(weir::ExecResult::Explain(text)) => text,
            other => panic!("{other:?}"),
        }
    };
    let grouped = "EXPLAIN SELECT ISTREAM k, COUNT(*) FROM s [RANGE 10 SLIDE 5] GROUP BY k";
    assert_eq!(
        explain(2, grouped),
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
    // The plan reads the same on one worker, where nothing moves.
    assert_eq!(explain(1, grouped), explain(2, grouped));
    assert_eq!(
        explain(2, "EXPLAIN SELECT DISTINCT k FROM s [ROWS 3]"),
        "Distinct  -> relation
  Exchange: by hash of the whole row  -> relation
    Project: s.k  -> relation
      Window: [ROWS 3]  -> relation
        Exchange: all rows to one worker  -> stream
          Project: s.k  -> stream
            StreamScan: s  -> stream
"
    );
    // A partitioned ROWS window and a window function exchange by their partition key.
    let partitioned = explain(
        2,
        "EXPLAIN SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn \
         FROM s [PARTITION BY k ROWS 2]",
    );
    assert_eq!(partitioned.matches("Exchange: by hash of").count(), 2, "{partitioned}");
    assert!(partitioned.contains("Exchange: by hash of k  -> stream"), "{partitioned}");
}

#[test]
fn traffic_between_workers_is_counted() {
    let traffic = |workers: usize, query: &str| {
        let mut engine = Engine::new();
        engine.set_workers(workers).expect("workers");
        engine.execute(EVENTS).expect("ddl");
        let sub = engine.subscribe(query).expect("query");
        engine.execute(INSERTS).expect("inserts");
        engine.close_all().expect("close");
        drop(sub.poll_changes().expect("changes"));
        engine.worker_traffic()
    };
    let grouped = "SELECT k, COUNT(*) FROM s [RANGE 3] GROUP BY k";
    assert_eq!(traffic(1, grouped), (0, 0), "one worker sends nothing");
    let (rows, bytes) = traffic(2, grouped);
    // Eight elements, about half of them exchanged to the other worker by key, plus the
    // output's changes gathered on worker 0; each row at least its time and diff.
    assert!((1..=40).contains(&rows), "{rows}");
    assert!(bytes >= 16 * rows, "{bytes} bytes for {rows} rows");
}

/// A hot key under a sliding window: every element has the same key. Its pane partials are
/// made where the elements are and merged on the key's worker (two-phase aggregation), so
/// the rows that move between workers are the partials (one per worker and pane at most) and
/// the output, not the elements; the result is one worker's.
#[test]
fn a_hot_key_under_a_sliding_window_moves_its_partials_not_its_elements() {
    let query = "SELECT ISTREAM k, COUNT(*), SUM(v), MAX(v) FROM s [RANGE 10 SLIDE 5] GROUP BY k";
    let run = |workers: usize| {
        let mut engine = Engine::new();
        engine.set_workers(workers).expect("workers");
        engine
            .execute("CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t)")
            .expect("ddl");
        let sub = engine.subscribe(query).expect("query");
        let mut out = Vec::new();
        // 2 000 elements, 4 per tick: 100 panes of 5 ticks.
        for chunk in 0..20 {
            let rows: Vec<String> = (0..100)
                .map(|i| {
                    let n = chunk * 100 + i;
                    format!("('hot', {}, {})", n % 7, n / 4)
                })
                .collect();
            engine.execute(&format!("INSERT INTO s VALUES {}", rows.join(", "))).expect("insert");
            out.extend(sub.poll_changes().expect("changes").into_iter().map(|c| format!("{c:?}")));
        }
        engine.close_all().expect("close");
        out.extend(sub.poll_changes().expect("changes").into_iter().map(|c| format!("{c:?}")));
        (out, engine.worker_traffic().0)
    };
    let (one, _) = run(1);
    let (two, moved) = run(2);
    assert_eq!(one, two);
    assert!(one.len() > 90, "{}", one.len());
    // At most 2 partials per pane (one per worker), the output gathered on worker 0: far
    // below the 1 000 elements that half the instants would send to the key's worker.
    assert!(moved < 500, "{moved} rows moved between workers");
}
