//! Weir as a cluster of processes (`--hosts`, `--process`): the crash test's workload (many
//! queries over CSV files into file sinks, two of which fail) run by two `weir` processes on
//! localhost must write what one process writes, byte for byte, fail the same sinks with the
//! same errors, and leave both processes with the same exit status. A process lost mid-session
//! fails what process 0 runs next with an error that names it.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test
#![cfg(target_os = "linux")] // a full disk is /dev/full

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::workload::{outputs, workload};

/// Two free ports on localhost (bound, then released for the processes to take).
fn hosts(n: usize) -> String {
    let listeners: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect::<Vec<_>>().join(",")
}

fn weir(dir: &Path, workers: usize, cluster: Option<(&str, usize)>) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("--workers").arg(workers.to_string());
    if let Some((hosts, process)) = cluster {
        cmd.arg("--hosts").arg(hosts).arg("--process").arg(process.to_string());
    }
    cmd.arg("run")
        .arg(dir.join("w.sql"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the workload in `dir` on `processes` processes of `workers` workers each: the output
/// of process 0, and every other process's.
fn run(dir: &Path, processes: usize, workers: usize) -> (Output, Vec<Output>) {
    if processes == 1 {
        return (weir(dir, workers, None).wait_with_output().unwrap(), Vec::new());
    }
    let hosts = hosts(processes);
    // The serving processes first: process 0 waits for them anyway.
    let others: Vec<_> = (1..processes).map(|p| weir(dir, workers, Some((&hosts, p)))).collect();
    let first = weir(dir, workers, Some((&hosts, 0))).wait_with_output().unwrap();
    let others = others.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    (first, others)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn two_processes_write_what_one_process_writes() {
    let root = tempfile::tempdir().unwrap();
    let reference = root.path().join("one");
    workload(&reference, 42, 1);
    let (one, _) = run(&reference, 1, 1);
    let expected = outputs(&reference);
    assert!(expected.iter().all(|(_, b)| b.len() > 100), "the workload produces output");
    let stderr = text(&one.stderr);
    assert_eq!(one.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sink 'ratio' failed: division by zero"), "{stderr}");

    for (processes, workers) in [(2, 1), (2, 2)] {
        let dir = root.path().join(format!("p{processes}w{workers}"));
        workload(&dir, 42, 1);
        let (first, others) = run(&dir, processes, workers);
        let shape = format!("{processes} processes of {workers} workers");
        assert_eq!(text(&first.stderr), stderr, "{shape}: process 0's errors");
        assert_eq!(first.status.code(), one.status.code(), "{shape}");
        assert_eq!(text(&first.stdout), text(&one.stdout), "{shape}");
        for (p, o) in others.iter().enumerate() {
            let said = text(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{shape}, process {}: {said}", p + 1);
            assert!(o.stdout.is_empty(), "{shape}: only process 0 writes output");
        }
        let got = outputs(&dir);
        assert_eq!(got.len(), expected.len(), "{shape}");
        for ((name, want), (got_name, have)) in expected.iter().zip(&got) {
            assert_eq!(name, got_name);
            assert!(
                want == have,
                "{shape}: {name} differs: {} bytes expected, {} written",
                want.len(),
                have.len()
            );
        }
    }
}

#[test]
fn a_process_started_with_another_worker_count_is_refused() {
    let root = tempfile::tempdir().unwrap();
    workload(root.path(), 1, 1);
    let hosts = hosts(2);
    let other = weir(root.path(), 2, Some((&hosts, 1)));
    let first = weir(root.path(), 1, Some((&hosts, 0))).wait_with_output().unwrap();
    let other = other.wait_with_output().unwrap();
    let said = text(&first.stderr);
    assert_eq!(first.status.code(), Some(1), "{said}");
    assert!(
        said.contains("process 1 was started for 2 processes of 2 workers, this one for 2 of 1"),
        "{said}"
    );
    assert_ne!(other.status.code(), Some(0), "{}", text(&other.stderr));
}

/// Process 1 killed while process 0 runs statements from its input: process 0 says once which
/// connection it lost, fails the statement that next needs the workers with an error that says
/// what happened (not an internal error, which would be a bug), and exits 1.
#[test]
fn a_process_lost_mid_session_fails_the_next_statement_by_name() {
    let root = tempfile::tempdir().unwrap();
    let hosts = hosts(2);
    let start = |process: usize| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["--hosts", &hosts, "--process", &process.to_string()])
            .current_dir(root.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut other = start(1);
    let mut first = start(0);
    let mut input = first.stdin.take().unwrap();
    let mut output = BufReader::new(first.stdout.take().unwrap());
    input
        .write_all(
            b"CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
              CREATE VIEW v AS SELECT k, COUNT(*) AS n FROM s GROUP BY k;\n\
              INSERT INTO s VALUES (7, 1);\n\
              SELECT * FROM v;\n",
        )
        .unwrap();
    input.flush().unwrap();
    // The view's first answer: the cluster runs the session's queries.
    let mut line = String::new();
    while !line.contains("rows)") {
        line.clear();
        assert!(output.read_line(&mut line).unwrap() > 0, "process 0 ended early");
    }
    other.kill().unwrap();
    other.wait().unwrap();
    input.write_all(b"INSERT INTO s VALUES (8, 2);\nSELECT * FROM v;\n").unwrap();
    drop(input);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = first.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            first.kill().unwrap();
            panic!("process 0 did not end after losing process 1");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    first.stderr.take().unwrap().read_to_string(&mut said).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    let lost = "error: process 0 of the cluster lost a connection to another process: ";
    assert_eq!(said.matches(lost).count(), 1, "{said}");
    assert!(
        said.contains(
            "failed: the workers stopped: a process of the cluster ended or lost its connection"
        ),
        "{said}"
    );
    assert!(!said.contains("internal error"), "{said}");
}

/// `weir serve` on two processes answers psql as one process does: a view grouped by key (its
/// rows exchanged between the processes), a snapshot of it, and a continuous query over a file
/// stream subscribed with `COPY (SUBSCRIBE ...) TO STDOUT`, with the instants and diffs of
/// every change.
#[test]
fn the_server_on_two_processes_answers_what_one_process_answers() {
    if Command::new("psql").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("WEIR_SKIP_PSQL").is_some(),
            "psql is not installed (Debian: apt-get install postgresql-client); \
             set WEIR_SKIP_PSQL=1 to skip this test"
        );
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let mut csv = String::from("k,t\n");
    for t in 1..=40 {
        csv.push_str(&format!("k{},{t}\n", (t * t) % 7 % 3));
    }
    std::fs::write(root.path().join("more.csv"), csv).unwrap();
    std::fs::write(
        root.path().join("script.sql"),
        "CREATE STREAM bids (item VARCHAR, price BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
         CREATE VIEW totals AS SELECT item, SUM(price) AS total, COUNT(*) AS n \
           FROM bids [UNBOUNDED] GROUP BY item;\n\
         COPY bids FROM STDIN (FORMAT csv);\n\
         a,10,1\nb,5,2\na,7,3\nc,1,3\nb,2,4\nd,9,6\n\\.\n\
         CLOSE bids;\n\
         SELECT * FROM totals ORDER BY item;\n\
         CREATE STREAM more (k VARCHAR, t BIGINT, WATERMARK FOR t AS t) \
           WITH (source = 'file', path = 'more.csv');\n\
         COPY (SUBSCRIBE (SELECT ISTREAM k, COUNT(*) AS n FROM more [RANGE 5] GROUP BY k)) \
           TO STDOUT;\n\
         SELECT 'still here' AS status;\n",
    )
    .unwrap();
    // A server: its process, and the address it said it listens on.
    let serve = |cluster: Option<(&str, usize)>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        if let Some((hosts, process)) = cluster {
            cmd.args(["--hosts", hosts, "--process", &process.to_string()]);
        }
        let mut child = cmd
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if cluster.is_some_and(|(_, p)| p != 0) {
            return (child, None);
        }
        let mut said = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let addr = loop {
            line.clear();
            assert!(said.read_line(&mut line).unwrap() > 0, "the server ended: {line}");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split(' ').next().unwrap().to_string();
            }
        };
        (child, Some(addr))
    };
    let psql = |addr: &str| {
        let (host, port) = addr.rsplit_once(':').unwrap();
        let out = Command::new("psql")
            .args(["-X", "-A", "-F", ",", "-h", host, "-p", port, "-U", "weir", "-d", "weir"])
            .args(["-f", "script.sql"])
            .current_dir(root.path())
            .env("PGCONNECT_TIMEOUT", "20")
            .output()
            .unwrap();
        (text(&out.stdout), text(&out.stderr))
    };

    let (mut one, addr) = serve(None);
    let (want, want_err) = psql(&addr.unwrap());
    one.kill().unwrap();
    one.wait().unwrap();
    assert!(want.contains("a,17,2\nb,7,2\nc,1,1\nd,9,1\n(4 rows)\n"), "{want}\n{want_err}");
    assert!(want.ends_with("status\nstill here\n(1 row)\n"), "{want}\n{want_err}");
    // Counts over the last 5 instants go up and down.
    for n in 1..=3 {
        assert!(want.lines().any(|l| l.ends_with(&format!("\t{n}"))), "{n}: {want}");
    }

    let hosts = hosts(2);
    let (mut other, _) = serve(Some((&hosts, 1)));
    let (mut first, addr) = serve(Some((&hosts, 0)));
    let (got, got_err) = psql(&addr.unwrap());
    first.kill().unwrap();
    first.wait().unwrap();
    // Process 1 ends once process 0 is gone.
    let deadline = Instant::now() + Duration::from_secs(60);
    while other.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            other.kill().unwrap();
            panic!("process 1 did not end after process 0");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(got, want, "psql's errors: {got_err}");
    assert_eq!(got_err, want_err);
}
