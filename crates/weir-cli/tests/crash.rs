//! Exactly-once recovery, the hard way: a multi-query workload (windows, a join, aggregates,
//! views over views, DISTINCT, DSTREAM, the late and unreadable rows of `bids$late` and
//! `bids$errors`, a sink whose query fails at a division by zero part way through, and one on
//! a full disk, Linux's `/dev/full`, which fails at its first write) reads
//! files into file sinks under `weir --data-dir`, with unbounded state (a GROUP BY and a join
//! under DISTINCT that grow with the input, whose checkpoints after a full one are their changes)
//! with frequent checkpoints; the process is killed with SIGKILL at random moments (some of
//! them while a checkpoint file is being written) and restarted until it finishes. Its sink
//! files must be byte-identical to those of a run that was never interrupted.
//!
//! The same runs on two workers (`--workers 2`, the starts cycling through `--workers 3` and
//! `--workers 1`, so checkpoints move between worker counts), and on a cluster of two processes
//! of one worker (`--hosts`, process 0 killed; process 1 then ends on its own and is started
//! again with it; every other start is one process of two workers, so checkpoints move between
//! the two), must write what one worker writes uninterrupted.
//!
//! `WEIR_CRASH_KILLS` sets the number of kills (default 6 in `cargo test`, 4 on two workers;
//! the note on the fault-tolerance issue reports a run with 50), `WEIR_CRASH_SCALE` multiplies
//! the input size (default 1: 36 000 bids in 12 files), `WEIR_CRASH_SEED` the random seed. The
//! summary line says how many restarts restored a checkpoint of changes (see docs/recovery.md).
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test
#![cfg(target_os = "linux")] // a full disk is /dev/full

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::workload::{outputs, workload, Rng};

fn weir(dir: &Path, data: Option<&Path>, workers: usize, cluster: Option<(&str, usize)>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("--workers").arg(workers.to_string());
    if let Some((hosts, process)) = cluster {
        cmd.arg("--hosts").arg(hosts).arg("--process").arg(process.to_string());
    }
    if let Some(d) = data {
        cmd.arg("--data-dir").arg(d).arg("--checkpoint-interval").arg("20ms");
    }
    cmd.arg("run")
        .arg(dir.join("w.sql"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Whether the restart will restore a checkpoint of changes (one after a full checkpoint,
/// whose state is a chain of files): the newest intact checkpoint is not full.
fn resumes_from_changes(data: &Path) -> bool {
    use weir::checkpoint::store;
    let Some(stored) = store::list(data).into_iter().find_map(|p| store::read(&p).ok()) else {
        return false;
    };
    let manifest: Option<serde_json::Value> =
        stored.section("manifest").and_then(|m| serde_json::from_slice(m).ok());
    manifest.and_then(|m| m["generation"].as_u64()).is_some_and(|g| g < stored.sequence)
}

/// The sequence number of the newest checkpoint in `data` (0: none).
fn newest(data: &Path) -> u64 {
    weir::checkpoint::store::list(data)
        .first()
        .and_then(|p| weir::checkpoint::store::sequence_of(p))
        .unwrap_or(0)
}

/// Whether a checkpoint file is being written right now.
fn writing_checkpoint(data: &Path) -> bool {
    std::fs::read_dir(data)
        .map(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".tmp")))
        .unwrap_or(false)
}

#[test]
fn killed_and_restarted_runs_write_exactly_the_uninterrupted_output() {
    crash_loop(1, 1, 6);
}

#[test]
fn killed_and_restarted_runs_on_one_two_and_three_workers_write_what_one_worker_writes() {
    crash_loop(1, 2, 4);
}

#[test]
fn killed_and_restarted_runs_on_two_processes_write_what_one_worker_writes() {
    crash_loop(2, 1, 4);
}

/// Two free ports on localhost, as a `--hosts` list.
fn free_ports() -> String {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("{},{}", a.local_addr().unwrap(), b.local_addr().unwrap())
}

/// Kills and restarts runs on `processes` processes of `workers` workers (`default_kills`
/// times unless `WEIR_CRASH_KILLS` says otherwise) and compares their sinks with an
/// uninterrupted run on one worker.
fn crash_loop(processes: usize, workers: usize, default_kills: usize) {
    let kills: usize = std::env::var("WEIR_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(default_kills);
    let seed: u64 =
        std::env::var("WEIR_CRASH_SEED").ok().and_then(|k| k.parse().ok()).unwrap_or(42);
    let scale: u64 =
        std::env::var("WEIR_CRASH_SCALE").ok().and_then(|k| k.parse().ok()).unwrap_or(1);
    let root = tempfile::tempdir().unwrap();
    let (reference, crashed, data) =
        (root.path().join("reference"), root.path().join("crashed"), root.path().join("state"));
    workload(&reference, seed, scale);
    workload(&crashed, seed, scale);

    let start = Instant::now();
    let out = weir(&reference, None, 1, None).wait_with_output().unwrap();
    // The ratio sink fails (and says so); the run goes on and exits 1.
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sink 'ratio' failed: division by zero"), "{stderr}");
    // A sink on a full disk fails at its first write, and says so: the environment's error.
    let no_space = "sink 'full' failed: sink '/dev/full': cannot write: No space left on device";
    assert!(stderr.contains(no_space), "{stderr}");
    let full = start.elapsed();
    let expected = outputs(&reference);
    assert!(expected.iter().all(|(_, b)| b.len() > 100), "the workload produces output");

    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut killed = 0;
    let mut restarts = 0;
    let mut chained = 0;
    loop {
        // On a cluster, process 1 (which only serves workers) starts first; it ends by itself
        // when process 0 does, killed or not. Every other start of a cluster's run is one
        // process with all the workers instead: a checkpoint moves between the two layouts.
        // On several workers, starts cycle through one more worker and one worker: a
        // checkpoint moves from 2 to 3, 3 to 1, 1 to 2, ...
        let (processes, workers) = match processes {
            1 if workers > 1 && restarts % 3 == 1 => (1, workers + 1),
            1 if workers > 1 && restarts % 3 == 2 => (1, 1),
            1 => (1, workers),
            p if restarts % 2 == 1 => (1, p * workers),
            p => (p, workers),
        };
        let hosts = (processes > 1).then(free_ports);
        let server = hosts.as_deref().map(|h| weir(&crashed, Some(&data), workers, Some((h, 1))));
        let mut child = weir(&crashed, Some(&data), workers, hosts.as_deref().map(|h| (h, 0)));
        let wait_server = move || {
            if let Some(s) = server {
                let out = s.wait_with_output().unwrap();
                String::from_utf8_lossy(&out.stderr).into_owned()
            } else {
                String::new()
            }
        };
        restarts += 1;
        if killed < kills {
            // A third of the kills strike at a random moment early in a run (most often
            // before it wrote a checkpoint); a third a random moment after the run wrote two
            // checkpoints of its own, a full one and one of changes (so that runs make
            // progress, and restarts restore checkpoints of changes); a third while a
            // checkpoint file is being written.
            let window = (full / 4).min(Duration::from_millis(800));
            let mut deadline = Instant::now()
                + Duration::from_millis(50)
                + window.mul_f64(rng.below(1000) as f64 / 1000.0);
            let kind = killed % 3;
            let before = newest(&data);
            let mut wrote = false;
            let give_up = Instant::now() + full * 2;
            loop {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                let now = Instant::now();
                if kind == 1 && !wrote && newest(&data) > before + 1 {
                    wrote = true;
                    deadline = now + Duration::from_millis(rng.below(30));
                }
                if (kind == 2 && writing_checkpoint(&data))
                    || (kind == 0 && now >= deadline)
                    || (kind == 1 && wrote && now >= deadline)
                    || now >= give_up
                {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let status = child.wait().unwrap();
            wait_server();
            if status.code().is_some() {
                break; // it finished (exit 1: the ratio sink failed) before the kill
            }
            killed += 1;
            chained += usize::from(resumes_from_changes(&data));
            continue;
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let served = wait_server();
        assert!(!served.contains("error"), "process 1: {served}");
        // The failed sinks stay failed across every restart, and are reported again.
        assert!(stderr.contains("sink 'full' failed: sink '/dev/full'"), "{stderr}");
        break;
    }
    let got = outputs(&crashed);
    for ((name, want), (got_name, have)) in expected.iter().zip(&got) {
        assert_eq!(name, got_name);
        assert!(
            want == have,
            "{name} differs after {killed} kills: {} bytes expected, {} written",
            want.len(),
            have.len()
        );
    }
    assert_eq!(expected.len(), got.len());
    eprintln!(
        "{processes} processes of {workers} workers: {killed} kills, {restarts} starts ({chained} from a checkpoint of \
         changes), {:?} in all",
        start.elapsed()
    );
}
