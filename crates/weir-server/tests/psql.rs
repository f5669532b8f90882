//! `weir serve` driven by psql itself (Debian's postgresql-client; `.ci/run` installs it):
//! a script that creates a stream and a view, copies CSV into the stream with `COPY ... FROM
//! STDIN`, reads the view, watches a continuous query with `COPY (SUBSCRIBE ...) TO STDOUT`
//! and makes an error, compared line by line with what psql prints.
//!
//! The continuous query is CQL's: `ISTREAM` of a count per key over the last 2 instants of
//! `x@1 y@1 x@2 x@5` inserts (x,1) and (y,1) at 1, (x,2) at 2, (x,1) at 3 (x@1 left the window,
//! so the count changed back), nothing at 4 (the window is empty) and (x,1) at 5. Each line is
//! instant, diff, then the query's columns; psql prints no status after `COPY ... TO STDOUT`.
//! `SUBSCRIBE totals` of the maintained view gives its contents as of its latest change (3),
//! and ends at once: the stream it reads is closed.

#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::process::Command;

use weir_server::{Config, Server};

const SCRIPT: &str = "\
CREATE STREAM bids (item VARCHAR, price BIGINT, t BIGINT, WATERMARK FOR t AS t);
CREATE VIEW totals AS SELECT item, SUM(price) AS total FROM bids [UNBOUNDED] GROUP BY item;
COPY bids FROM STDIN (FORMAT csv);
a,10,1
b,5,2
a,7,3
\\.
CLOSE bids;
SELECT * FROM totals ORDER BY item;
COPY (SUBSCRIBE totals) TO STDOUT;
CREATE STREAM more (k VARCHAR, t BIGINT, WATERMARK FOR t AS t) WITH (source = 'file', path = 'more.csv');
COPY (SUBSCRIBE (SELECT ISTREAM k, COUNT(*) AS n FROM more [RANGE 2] GROUP BY k)) TO STDOUT;
SELECT nope FROM totals;
SELECT 'still here' AS status;
";

#[test]
fn psql_runs_a_script_with_copy_and_a_continuous_query() {
    if Command::new("psql").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("WEIR_SKIP_PSQL").is_some(),
            "psql is not installed (Debian: apt-get install postgresql-client); \
             set WEIR_SKIP_PSQL=1 to skip this test"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("more.csv"), "k,t\nx,1\ny,1\nx,2\nx,5\n").unwrap();
    std::fs::write(dir.path().join("script.sql"), SCRIPT).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        base_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    };
    let server = runtime.block_on(Server::bind(config)).unwrap();
    let addr = server.local_addr().unwrap();
    runtime.spawn(server.run());
    let out = Command::new("psql")
        .args(["-X", "-A", "-F", ",", "-h", &addr.ip().to_string(), "-p"])
        .arg(addr.port().to_string())
        .args(["-U", "weir", "-d", "weir", "-f", "script.sql"])
        .current_dir(dir.path())
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout,
        "CREATE STREAM\n\
         CREATE VIEW\n\
         COPY 3\n\
         CLOSE\n\
         item,total\n\
         a,17\n\
         b,5\n\
         (2 rows)\n\
         3\t1\ta\t17\n\
         3\t1\tb\t5\n\
         CREATE STREAM\n\
         1\t1\tx\t1\n\
         1\t1\ty\t1\n\
         2\t1\tx\t2\n\
         3\t1\tx\t1\n\
         5\t1\tx\t1\n\
         status\n\
         still here\n\
         (1 row)\n",
        "stderr: {stderr}"
    );
    assert_eq!(
        stderr,
        "psql:script.sql:13: ERROR:  column 'nope' not found\n\
         LINE 1: SELECT nope FROM totals;\n\
         \x20              ^\n"
    );
}

/// With a certificate and a password, psql connects over TLS and logs in with SCRAM.
#[test]
fn psql_connects_over_tls_with_a_password() {
    if Command::new("psql").arg("--version").output().is_err()
        || Command::new("openssl").arg("version").output().is_err()
    {
        assert!(
            std::env::var_os("WEIR_SKIP_PSQL").is_some(),
            "psql and openssl are needed (Debian: postgresql-client, openssl); \
             set WEIR_SKIP_PSQL=1 to skip this test"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2"])
        .args(["-subj", "/CN=localhost"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        user: "alice".into(),
        password: Some("pencil".into()),
        tls: Some((dir.path().join("cert.pem"), dir.path().join("key.pem"))),
        ..Config::default()
    };
    let server = runtime.block_on(Server::bind(config)).unwrap();
    let port = server.local_addr().unwrap().port();
    runtime.spawn(server.run());
    let psql = |password: &str| {
        Command::new("psql")
            .arg(format!("host=127.0.0.1 port={port} user=alice dbname=weir sslmode=require"))
            .args(["-X", "-A", "-t", "-c", "\\conninfo", "-c", "SELECT 40 + 2"])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap()
    };
    let ok = psql("pencil");
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(stdout.contains("SSL connection"), "{stdout}");
    assert!(stdout.ends_with("42\n"), "{stdout}");
    let refused = psql("wrong");
    assert!(!refused.status.success());
    // pgwire's own message for a wrong proof ("Password authentication failed for user").
    let stderr = String::from_utf8_lossy(&refused.stderr).to_ascii_lowercase();
    assert!(stderr.contains("fatal:  password authentication failed"), "{stderr}");
}

/// With `--data-dir`, a server restarted after a checkpoint has its streams and views back.
#[test]
fn a_restarted_server_resumes_from_its_checkpoint() {
    restart_from_checkpoint(1);
}

/// The same on two workers (`weir serve --workers 2 --data-dir ...`).
#[test]
fn a_restarted_server_on_two_workers_resumes_from_its_checkpoint() {
    restart_from_checkpoint(2);
}

fn restart_from_checkpoint(workers: usize) {
    if Command::new("psql").arg("--version").output().is_err() {
        assert!(std::env::var_os("WEIR_SKIP_PSQL").is_some(), "psql is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |sql: &[&str]| {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: Some(dir.path().join("state")),
            workers,
            ..Config::default()
        };
        let server = runtime.block_on(Server::bind(config)).unwrap();
        let notes = server.notes.clone();
        let port = server.local_addr().unwrap().port();
        runtime.spawn(server.run());
        let mut psql = Command::new("psql");
        psql.args(["-X", "-A", "-t", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "weir"]);
        for s in sql {
            psql.args(["-c", s]);
        }
        let out = psql.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // Dropping the runtime ends the server, as a crash would (the engine thread stops
        // when its last connection handle goes).
        drop(runtime);
        (notes, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (notes, _) = run(&[
        "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)",
        "CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k",
        "INSERT INTO s VALUES ('a', 1), ('a', 2), ('b', 3)",
        "CHECKPOINT",
    ]);
    assert!(notes.is_empty(), "{notes:?}");
    let (notes, out) =
        run(&["SELECT * FROM c ORDER BY k", "CLOSE s", "SELECT * FROM c ORDER BY k"]);
    assert_eq!(notes.len(), 1);
    assert!(notes[0].starts_with("resumed from checkpoint 1 in "), "{notes:?}");
    // Instants 1 and 2 were complete at the checkpoint; closing the stream completes 3.
    assert_eq!(out, "a|2\nCLOSE\na|2\nb|1\n");
}
