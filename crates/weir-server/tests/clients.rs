//! `weir serve` from a real PostgreSQL client: tokio-postgres, over TCP on loopback.
//!
//! Each test starts a server on a free port in its own runtime and talks to it as an
//! application would: simple queries, error responses with SQLSTATE and position, COPY into a
//! stream, a subscription streamed with `COPY (SUBSCRIBE ...) TO STDOUT`, cursors, cancel,
//! disconnect, a slow subscriber, and two clients at once.

#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use weir_server::{Config, Server};

async fn start(config: Config) -> std::net::SocketAddr {
    let server =
        Server::bind(Config { listen: "127.0.0.1:0".parse().unwrap(), ..config }).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    addr
}

async fn connect(addr: std::net::SocketAddr) -> Client {
    connect_with_handle(addr).await.0
}

/// A client and its connection task (aborting the task drops the socket, as a client
/// process that dies would).
async fn connect_with_handle(addr: std::net::SocketAddr) -> (Client, tokio::task::JoinHandle<()>) {
    let conn = format!("host={} port={} user=weir", addr.ip(), addr.port());
    let (client, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    (client, task)
}

/// The rows of a simple query, as text (NULL as "NULL"), each row's values joined by ' '.
async fn rows(client: &Client, sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    for m in client.simple_query(sql).await.unwrap() {
        if let SimpleQueryMessage::Row(r) = m {
            let values: Vec<&str> = (0..r.len()).map(|i| r.get(i).unwrap_or("NULL")).collect();
            out.push(values.join(" "));
        }
    }
    out
}

/// The next `n` lines of a COPY TO STDOUT stream.
async fn lines(
    stream: &mut std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    n: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("a line within 20 s")
            .expect("the copy goes on")
            .unwrap();
        let text = String::from_utf8(chunk.to_vec()).unwrap();
        out.extend(text.lines().map(str::to_string));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_rows_and_errors() {
    let addr = start(Config::default()).await;
    let c = connect(addr).await;
    c.batch_execute("CREATE TABLE t (a BIGINT, b VARCHAR, c DOUBLE, d BOOLEAN, e TIMESTAMP)")
        .await
        .unwrap();
    // Prepared statements with parameters, as drivers send them (binary values).
    let ts = |s: &str| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap();
    let insert = c.prepare("INSERT INTO t VALUES ($1, $2, $3, $4, $5)").await.unwrap();
    let n = c
        .execute(&insert, &[&1i64, &"x", &1.5f64, &true, &ts("2024-01-01 00:00:01.5")])
        .await
        .unwrap();
    assert_eq!(n, 1);
    let none: Option<&str> = None;
    c.execute(&insert, &[&2i64, &none, &-0.25f64, &false, &ts("2024-01-02 00:00:00")])
        .await
        .unwrap();
    // A value can never become SQL: a quote is part of the string.
    c.execute(
        &insert,
        &[&3i64, &"it's'); DROP TABLE t; --", &0.0f64, &true, &ts("2024-01-03 00:00:00")],
    )
    .await
    .unwrap();
    let typed =
        c.query("SELECT a, b, c, d, e FROM t WHERE a < $1 ORDER BY a", &[&3i64]).await.unwrap();
    assert_eq!(typed.len(), 2);
    assert_eq!(typed[0].get::<_, i64>(0), 1);
    assert_eq!(typed[0].get::<_, &str>(1), "x");
    assert_eq!(typed[0].get::<_, f64>(2), 1.5);
    assert!(typed[0].get::<_, bool>(3));
    assert_eq!(typed[0].get::<_, chrono::NaiveDateTime>(4), ts("2024-01-01 00:00:01.5"));
    assert_eq!(typed[1].get::<_, Option<&str>>(1), None);
    let quoted = c.query_one("SELECT b FROM t WHERE a = $1", &[&3i64]).await.unwrap();
    assert_eq!(quoted.get::<_, &str>(0), "it's'); DROP TABLE t; --");
    c.batch_execute("DELETE FROM t WHERE a = 3").await.unwrap();
    assert_eq!(
        rows(&c, "SELECT * FROM t ORDER BY a").await,
        ["1 x 1.5 t 2024-01-01 00:00:01.5", "2 NULL -0.25 f 2024-01-02 00:00:00"]
    );
    // Several statements in one query string: every result, in order.
    assert_eq!(rows(&c, "SELECT 1; SELECT 'two'").await, ["1", "two"]);
    // DESCRIBE and SHOW answer with rows.
    let described = rows(&c, "DESCRIBE t").await;
    assert_eq!(described.len(), 5, "{described:?}");
    assert!(described[0].starts_with("a BIGINT"), "{described:?}");
    assert_eq!(rows(&c, "SHOW TABLES").await.len(), 1);
    // Errors: SQLSTATE and the position of the offending text in the query string.
    let e = c.simple_query("SELECT 1; SELECT nope FROM t").await.unwrap_err();
    let db = e.as_db_error().expect("an error response");
    assert_eq!(db.code().code(), "42703");
    assert_eq!(db.message(), "column 'nope' not found");
    assert!(matches!(db.position(), Some(tokio_postgres::error::ErrorPosition::Original(18))));
    let e = c.simple_query("SELEC 1").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "42601");
    let e = c.simple_query("SELECT * FROM nowhere").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "42P01");
    // The session goes on after errors; settings and transactions as drivers use them.
    c.batch_execute("SET application_name = 'test'; BEGIN; COMMIT").await.unwrap();
    assert_eq!(rows(&c, "SHOW application_name").await, ["test"]);
    let e = c.simple_query("SHOW no_such_setting").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "42704");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_feeds_a_subscription_streamed_to_another_client() {
    copy_in_case(Config::default()).await;
}

/// `weir serve --workers 2`: the same changes as on one worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_two_workers_a_subscription_sees_what_one_worker_gives() {
    copy_in_case(Config { workers: 2, ..Config::default() }).await;
}

async fn copy_in_case(config: Config) {
    let addr = start(config).await;
    let writer = connect(addr).await;
    let watcher = connect(addr).await;
    writer
        .batch_execute(
            "CREATE STREAM bids (item VARCHAR, price BIGINT, t BIGINT, WATERMARK FOR t AS t) \
             WITH (bad_rows = 'skip')",
        )
        .await
        .unwrap();
    let mut changes = Box::pin(
        watcher
            .copy_out(
                "COPY (SUBSCRIBE (SELECT ISTREAM item, SUM(price) AS total \
                 FROM bids [RANGE 10] GROUP BY item)) TO STDOUT",
            )
            .await
            .unwrap(),
    );
    let sink = writer.copy_in("COPY bids FROM STDIN WITH (FORMAT csv, HEADER true)").await.unwrap();
    let mut sink = Box::pin(sink);
    // Records split across chunks, a bad one skipped into bids$errors.
    for chunk in ["item,price,t\na,", "10,1\nb,5,2\n", "a,oops,3\nb,7", ",4\n"] {
        sink.send(bytes::Bytes::from(chunk)).await.unwrap();
    }
    let copied = sink.as_mut().finish().await.unwrap();
    assert_eq!(copied, 4);
    writer.batch_execute("ADVANCE bids TO 5").await.unwrap();
    // Each change: instant, diff, then the query's columns, tab-separated.
    assert_eq!(lines(&mut changes, 3).await, ["1\t1\ta\t10", "2\t1\tb\t5", "4\t1\tb\t12"]);
    let stats = rows(&writer, "SHOW STREAM STATS").await;
    assert!(stats[0].starts_with("bids 3 0 1"), "{stats:?}");
    // Closing the stream ends the subscription: the copy completes.
    writer.batch_execute("CLOSE bids").await.unwrap();
    let rest: Vec<_> =
        tokio::time::timeout(Duration::from_secs(20), changes.collect()).await.unwrap();
    assert!(rest.iter().all(|r| r.is_ok()), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_fetch_what_has_arrived() {
    let addr = start(Config::default()).await;
    let c = connect(addr).await;
    c.batch_execute(
        "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t); \
         DECLARE cur CURSOR FOR SUBSCRIBE (SELECT k FROM s); \
         INSERT INTO s VALUES ('a', 1), ('b', 2), ('c', 3)",
    )
    .await
    .unwrap();
    // Instants 1 and 2 are complete (the watermark is 3).
    assert_eq!(rows(&c, "FETCH 1 cur").await, ["1 1 a"]);
    // The same through a prepared statement, values in binary.
    let typed = c.query("FETCH ALL cur", &[]).await.unwrap();
    assert_eq!(typed.len(), 1);
    assert_eq!(
        (typed[0].get::<_, i64>(0), typed[0].get::<_, i64>(1), typed[0].get::<_, &str>(2)),
        (2, 1, "b")
    );
    let names: Vec<&str> = typed[0].columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["weir_instant", "weir_diff", "k"]);
    // Nothing more yet: a FETCH with a timeout returns no rows when it expires.
    assert!(rows(&c, "FETCH ALL cur WITH (timeout = '100ms')").await.is_empty());
    c.batch_execute("CLOSE s").await.unwrap();
    assert_eq!(rows(&c, "FETCH ALL cur").await, ["3 1 c"]);
    c.batch_execute("CLOSE cur").await.unwrap();
    let e = c.simple_query("FETCH 1 cur").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "34000");
}

/// Reads a COPY TO STDOUT stream to its end: the error that ended it, if one did.
async fn first_error(
    stream: &mut std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
) -> Option<tokio_postgres::Error> {
    loop {
        match stream.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Some(e),
            None => return None,
        }
    }
}

async fn running_queries(c: &Client) -> usize {
    rows(c, "SHOW weir_running_queries").await[0].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_disconnect_stop_the_subscription() {
    let addr = start(Config::default()).await;
    let admin = connect(addr).await;
    admin
        .batch_execute("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)")
        .await
        .unwrap();

    // Cancel: the subscription ends with 57014 and the connection stays usable.
    let c = connect(addr).await;
    let token = c.cancel_token();
    let mut changes =
        Box::pin(c.copy_out("COPY (SUBSCRIBE (SELECT k FROM s)) TO STDOUT").await.unwrap());
    admin.batch_execute("INSERT INTO s VALUES ('a', 1), ('b', 2)").await.unwrap();
    assert_eq!(lines(&mut changes, 1).await, ["1\t1\ta"]);
    assert_eq!(running_queries(&admin).await, 1);
    token.cancel_query(NoTls).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(20), first_error(&mut changes))
        .await
        .expect("the cancel is honoured");
    let e = end.expect("an error ends a cancelled subscription");
    assert_eq!(e.as_db_error().unwrap().code().code(), "57014");
    assert_eq!(rows(&c, "SELECT 1").await, ["1"]);
    assert_eq!(running_queries(&admin).await, 0);

    // Disconnect while the subscription is quiet: the server notices and stops the query.
    let (d, connection) = connect_with_handle(addr).await;
    let quiet = Box::pin(d.copy_out("COPY (SUBSCRIBE (SELECT k FROM s)) TO STDOUT").await.unwrap());
    assert_eq!(running_queries(&admin).await, 1);
    connection.abort();
    drop(quiet);
    drop(d);
    let mut stopped = false;
    for _ in 0..200 {
        if running_queries(&admin).await == 0 {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stopped, "the subscription of a client that disconnected is stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_is_cut_off_without_stalling_anyone() {
    let addr = start(Config { subscriber_buffer: 1000, ..Config::default() }).await;
    let writer = connect(addr).await;
    let slow = connect(addr).await;
    writer
        .batch_execute("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)")
        .await
        .unwrap();
    // The slow client subscribes and then reads nothing.
    let mut changes =
        Box::pin(slow.copy_out("COPY (SUBSCRIBE (SELECT k FROM s)) TO STDOUT").await.unwrap());
    // 60 chunks, each its own batch of output: more than the socket buffers hold.
    let sink = writer.copy_in("COPY s FROM STDIN").await.unwrap();
    let mut sink = Box::pin(sink);
    for chunk in 0..60 {
        let mut text = String::new();
        for i in 0..10_000 {
            let t = chunk * 10_000 + i;
            text.push_str(&format!("some-longer-key-{t},{t}\n"));
        }
        sink.send(bytes::Bytes::from(text)).await.unwrap();
    }
    assert_eq!(sink.as_mut().finish().await.unwrap(), 600_000);
    writer.batch_execute("CLOSE s").await.unwrap();
    // The writer was never held up, and can go on.
    assert_eq!(rows(&writer, "SELECT 1").await, ["1"]);
    // The slow client gets what was buffered for it, then the error that cut it off.
    let end =
        tokio::time::timeout(Duration::from_secs(60), first_error(&mut changes)).await.unwrap();
    let e = end.expect("the slow subscriber's copy ends in an error");
    let db = e.as_db_error().unwrap();
    assert_eq!(db.code().code(), "53400");
    assert!(db.message().starts_with("the subscription fell behind"), "{}", db.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_is_checked_with_scram_and_opens_other_addresses() {
    // Without a password, only loopback.
    let open = Config { listen: "0.0.0.0:0".parse().unwrap(), ..Config::default() };
    let e = Server::bind(open).await.unwrap_err();
    assert!(e.to_string().starts_with("refusing to listen on 0.0.0.0:0 without authentication"));

    let config = Config {
        listen: "0.0.0.0:0".parse().unwrap(),
        user: "alice".into(),
        password: Some("s3cret pass".into()),
        ..Config::default()
    };
    let server = Server::bind(config).await.unwrap();
    let port = server.local_addr().unwrap().port();
    tokio::spawn(server.run());
    let try_connect = |user: &'static str, password: &'static str| async move {
        let conn = format!("host=127.0.0.1 port={port} user={user} password='{password}'");
        tokio_postgres::connect(&conn, NoTls).await
    };
    let (c, connection) = try_connect("alice", "s3cret pass").await.unwrap();
    tokio::spawn(connection);
    assert_eq!(rows(&c, "SELECT 1").await, ["1"]);
    for (user, password) in [("alice", "wrong"), ("bob", "s3cret pass"), ("alice", "")] {
        let e = try_connect(user, password).await.err().expect("refused");
        let code = e.as_db_error().map(|d| d.code().code().to_string());
        assert!(
            code.as_deref() == Some("28P01") || e.to_string().contains("password"),
            "{user}/{password}: {e}"
        );
    }
}

/// Every Weir type through a driver that asks for binary results, and back as parameters,
/// and the same values as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_in_binary_and_in_text() {
    let addr = start(Config::default()).await;
    let c = connect(addr).await;
    c.batch_execute(
        "CREATE TABLE v (i BIGINT, s SMALLINT, r REAL, d DOUBLE, n DECIMAL(10,2), b BOOLEAN, \
         x VARCHAR, ts TIMESTAMP, dt DATE); \
         INSERT INTO v VALUES (-9007199254740993, -7, 1.5, 0.1, 12345.67, false, 'ü', \
         TIMESTAMP '1999-12-31 23:59:59.999999', DATE '2024-02-29')",
    )
    .await
    .unwrap();
    let row = c.query_one("SELECT * FROM v", &[]).await.unwrap();
    let types: Vec<&str> = row.columns().iter().map(|c| c.type_().name()).collect();
    assert_eq!(
        types,
        ["int8", "int2", "float4", "float8", "numeric", "bool", "text", "timestamp", "date"]
    );
    assert_eq!(row.get::<_, i64>(0), -9007199254740993);
    assert_eq!(row.get::<_, i16>(1), -7);
    assert_eq!(row.get::<_, f32>(2), 1.5);
    assert_eq!(row.get::<_, f64>(3), 0.1);
    assert!(!row.get::<_, bool>(5));
    assert_eq!(row.get::<_, &str>(6), "ü");
    let ts =
        chrono::NaiveDateTime::parse_from_str("1999-12-31 23:59:59.999999", "%Y-%m-%d %H:%M:%S%.f");
    assert_eq!(row.get::<_, chrono::NaiveDateTime>(7), ts.unwrap());
    assert_eq!(
        row.get::<_, chrono::NaiveDate>(8),
        chrono::NaiveDate::from_ymd_opt(2024, 2, 29).unwrap()
    );
    // The same values as text, PostgreSQL's spellings.
    assert_eq!(
        rows(&c, "SELECT * FROM v").await,
        ["-9007199254740993 -7 1.5 0.1 12345.67 f ü 1999-12-31 23:59:59.999999 2024-02-29"]
    );
    // Parameters of each type select the row back.
    let back = c
        .query(
            "SELECT i FROM v WHERE s = $1 AND d = $2 AND b = $3 AND x = $4 AND ts = $5 AND dt = $6",
            &[
                &-7i16,
                &0.1f64,
                &false,
                &"ü",
                &ts.unwrap(),
                &chrono::NaiveDate::from_ymd_opt(2024, 2, 29).unwrap(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(back.len(), 1);
}
