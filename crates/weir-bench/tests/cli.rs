//! The `weir-bench` command line: its help is clap's list of options (not source comments),
//! and a bad value says what the good ones are.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::process::Command;

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir-bench")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn help_lists_the_options() {
    let (code, stdout, stderr) = bench(&["--help"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(stdout.starts_with(
        "NEXMark for Weir: seeded events, the NEXMark queries, and the benchmark driver \
         (docs/benchmarks.md)\n\nUsage: weir-bench [OPTIONS]\n"
    ));
    assert!(!stdout.contains("//"), "{stdout}");
    for option in ["--query <QUERIES>", "--events <N>", "--scaling", "--sketch", "--agg <AGG>"] {
        assert!(stdout.contains(option), "{option}: {stdout}");
    }
}

#[test]
fn bad_values_name_the_good_ones() {
    let (code, stdout, stderr) = bench(&["--query", "q1,q77"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr,
        "error: invalid value 'q1,q77' for '--query <QUERIES>': unknown query 'q77' (the \
         queries: q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q11, q12, q13, q14, q15, q16, q17, \
         q18, q19, q20, q21, q22, tumble, hop, tumble_cql, hop_cql, cumulate, or all)\n\n\
         For more information, try '--help'.\n"
    );
    let (code, _, stderr) = bench(&["--events", "ten"]);
    assert_eq!(code, 2);
    assert!(stderr
        .starts_with("error: invalid value 'ten' for '--events <N>': 'ten' is not a number\n"));
    let (code, _, stderr) = bench(&["--scaling", "--sketch"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: the argument '--scaling' cannot be used with '--sketch'\n"),
        "{stderr}"
    );
}

/// A paced run reports its latency percentiles; a windowed query's outputs too, each caused by
/// a chunk. A debug build is slow, so the rate is low and only the shape is checked.
#[test]
fn paced_runs_report_latency_percentiles() {
    let (code, stdout, stderr) =
        bench(&["--query", "q0,q5", "--events", "3000", "--pace", "100000", "--chunk", "100"]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (line, q) in lines.iter().zip(["q0 ", "q5 "]) {
        assert!(line.starts_with(q), "{line}");
        assert!(line.contains("paced 100000 events/s in chunks of 100  events 3000"), "{line}");
        for part in ["p50 ", " ms  p99 ", " ms  p99.9 ", " ms  max ", "behind schedule"] {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert!(!line.contains("outputs 0"), "{line}");
    }
    let (code, _, stderr) = bench(&["--query", "q12", "--pace", "1000", "--events", "10"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("q12 runs on processing time"), "{stderr}");
}

#[test]
fn decode_times_weir_and_arrow_over_the_same_rows() {
    let dir = std::env::temp_dir().join(format!("weir-bench-decode-{}", std::process::id()));
    let data = dir.to_str().unwrap();
    for format in ["csv", "json"] {
        let (code, stdout, stderr) =
            bench(&["--decode", format, "--events", "3000", "--runs", "1", "--data", data]);
        assert_eq!(code, 0, "{stderr}");
        // The 3000 events hold 2760 bids (46 in 50); both readers must have read all of them
        // (the run fails if their counts differ).
        let ext = if format == "csv" { "csv  " } else { "jsonl" };
        assert!(stdout.starts_with(&format!("decode {ext} rows      2760 ")), "{stdout}");
        for part in [" rows/s ", " MB/s  (cpu ", " rows per cpu-s)  arrow alone ", "weir/arrow "] {
            assert!(stdout.contains(part), "{part}: {stdout}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
