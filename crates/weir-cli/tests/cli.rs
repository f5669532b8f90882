//! End-to-end tests of the `weir` binary: scripts in each output format, `-c`, standard
//! input, errors and the bundled examples.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `weir` with `args`, feeding `stdin` (or nothing) on standard input.
fn weir(args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// A script file in a fresh temporary directory.
fn script_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-cli-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.sql"));
    std::fs::write(&path, text).unwrap();
    path
}

fn example(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    root.join(name).to_string_lossy().into_owned()
}

/// One-shot rows, a stream output with a duplicated element, a relation output and a
/// stream-table join with a quoted string and a NULL.
const SCRIPT: &str = "\
CREATE STREAM s (k VARCHAR, a BIGINT, t BIGINT, WATERMARK FOR t AS t);
CREATE TABLE p (k VARCHAR, label VARCHAR);
INSERT INTO p VALUES ('x', 'say \"hi\", x'), ('y', NULL) AT 0;
SELECT * FROM p;
SELECT k, a FROM s WHERE a > 1;
SELECT k, COUNT(*) AS n FROM s [RANGE 2] GROUP BY k;
SELECT ISTREAM s.a, p.label FROM s [NOW] JOIN p ON s.k = p.k;
INSERT INTO s VALUES ('x', 1, 1), ('y', 3, 1), ('x', 5, 2);
ADVANCE s TO 2;
INSERT INTO s VALUES ('y', 3, 4), ('y', 3, 4);
";

/// Each query's header once, its columns as wide as their types (text 10, BIGINT 8).
const TABLE: &str = "\
+---+-------------+
| k | label       |
+---+-------------+
| x | say \"hi\", x |
| y | NULL        |
+---+-------------+
(2 rows)
[1] SELECT k, a FROM s WHERE a > 1
[1] _time | k          | a
[2] SELECT k, COUNT(*) AS n FROM s [RANGE 2] GROUP BY k
[2] _time | _diff | k          | n
[3] SELECT ISTREAM s.a, p.label FROM s [NOW] JOIN p ON s.k = p.k
[3] _time | a        | label
[1] 1     | y          | 3
[2] 1     | +1    | x          | 1
[2] 1     | +1    | y          | 1
[3] 1     | 1        | say \"hi\", x
[3] 1     | 3        | NULL
[1] 2     | x          | 5
[2] 2     | -1    | x          | 1
[2] 2     | +1    | x          | 2
[3] 2     | 5        | say \"hi\", x
[2] 3     | +1    | x          | 1
[2] 3     | -1    | x          | 2
[2] 3     | -1    | y          | 1
[1] 4     | y          | 3
[1] 4     | y          | 3
[2] 4     | -1    | x          | 1
[2] 4     | +1    | y          | 2
[2] 6     | -1    | y          | 2
[3] 4     | 3        | NULL
[3] 4     | 3        | NULL
";

#[test]
fn table_format() {
    let path = script_file("table", SCRIPT);
    let r = weir(&["run", path.to_str().unwrap()], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(r.stdout, TABLE);
    // table is the default; --format table says the same.
    let r = weir(&["run", path.to_str().unwrap(), "--format", "table"], None);
    assert_eq!(r.stdout, TABLE);
}

/// A fresh temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-cli-dir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every file of `dir`, by name, with its text.
fn files_of(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// CSV on standard output is one continuous query's: a second is refused before it starts,
/// saying what to do instead.
#[test]
fn csv_on_standard_output_holds_one_query() {
    let path = script_file("csv", SCRIPT);
    let r = weir(&["--format", "csv", "run", path.to_str().unwrap()], None);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "k,label\nx,\"say \"\"hi\"\", x\"\ny,\n_query,_time,k,a\n");
    assert_eq!(
        r.stderr,
        "error: with --format csv, standard output holds the CSV of one continuous query and \
         nothing after it, and query 1 writes there already: give --output-dir DIR to write each \
         continuous query to a CSV file of its own (DIR/query-N.csv), or use --format jsonl, \
         whose lines say which query they belong to\n  \
         at line 6: SELECT k, COUNT(*) AS n FROM s [RANGE 2] GROUP BY k\n"
    );
    // One query: plain CSV, as before.
    let r = weir(
        &[
            "-c",
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
             SELECT a FROM s; INSERT INTO s VALUES (1, 1), (2, 2);",
            "--format",
            "csv",
        ],
        None,
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (0, "_query,_time,a\n1,1,1\n1,2,2\n", "")
    );
    // Nor may a one-shot result follow it.
    let r = weir(
        &["--format=csv", "-c", "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\nSELECT a FROM s;\nSELECT 1 AS one;"],
        None,
    );
    assert_eq!((r.code, r.stdout.as_str()), (1, "_query,_time,a\n"));
    assert!(r.stderr.ends_with("\n  at line 3: SELECT 1 AS one\n"), "{}", r.stderr);
}

/// `--output-dir`: one CSV file per continuous query (the columns of a CSV sink), listed with
/// its SQL in queries.csv; one-shot rows still go to standard output.
#[test]
fn output_dir_writes_a_csv_file_per_query() {
    let path = script_file("outdir", SCRIPT);
    let dir = temp_dir("outdir");
    let out = dir.join("out");
    let r = weir(&["run", path.to_str().unwrap(), "--output-dir", out.to_str().unwrap()], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(r.stdout, "k,label\nx,\"say \"\"hi\"\", x\"\ny,\n");
    let files = files_of(&out);
    let expected = [
        (
            "queries.csv",
            "query,file,sql\n\
             1,query-1.csv,\"SELECT k, a FROM s WHERE a > 1\"\n\
             2,query-2.csv,\"SELECT k, COUNT(*) AS n FROM s [RANGE 2] GROUP BY k\"\n\
             3,query-3.csv,\"SELECT ISTREAM s.a, p.label FROM s [NOW] JOIN p ON s.k = p.k\"\n",
        ),
        ("query-1.csv", "_time,k,a\n1,y,3\n2,x,5\n4,y,3\n4,y,3\n"),
        (
            "query-2.csv",
            "_time,_diff,k,n\n1,1,x,1\n1,1,y,1\n2,-1,x,1\n2,1,x,2\n3,1,x,1\n3,-1,x,2\n3,-1,y,1\n\
             4,-1,x,1\n4,1,y,2\n6,-1,y,2\n",
        ),
        (
            "query-3.csv",
            "_time,a,label\n1,1,\"say \"\"hi\"\", x\"\n1,3,\n2,5,\"say \"\"hi\"\", x\"\n4,3,\n4,3,\n",
        ),
    ];
    let expected: Vec<(String, String)> =
        expected.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
    assert_eq!(files, expected);
    // JSON lines files: the stdout objects without `_query`.
    let out = dir.join("json");
    let r = weir(
        &[
            "--format",
            "jsonl",
            "--output-dir",
            out.to_str().unwrap(),
            "run",
            path.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(
        std::fs::read_to_string(out.join("query-3.jsonl")).unwrap().lines().next().unwrap(),
        r#"{"_time":1,"_diff":1,"a":1,"label":"say \"hi\", x"}"#
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jsonl_format() {
    let path = script_file("jsonl", SCRIPT);
    let r = weir(&["run", path.to_str().unwrap(), "--format=jsonl"], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(
        r.stdout,
        r#"{"k":"x","label":"say \"hi\", x"}
{"k":"y","label":null}
{"_query":1,"_time":1,"_diff":1,"k":"y","a":3}
{"_query":2,"_time":1,"_diff":1,"k":"x","n":1}
{"_query":2,"_time":1,"_diff":1,"k":"y","n":1}
{"_query":3,"_time":1,"_diff":1,"a":1,"label":"say \"hi\", x"}
{"_query":3,"_time":1,"_diff":1,"a":3,"label":null}
{"_query":1,"_time":2,"_diff":1,"k":"x","a":5}
{"_query":2,"_time":2,"_diff":-1,"k":"x","n":1}
{"_query":2,"_time":2,"_diff":1,"k":"x","n":2}
{"_query":3,"_time":2,"_diff":1,"a":5,"label":"say \"hi\", x"}
{"_query":2,"_time":3,"_diff":1,"k":"x","n":1}
{"_query":2,"_time":3,"_diff":-1,"k":"x","n":2}
{"_query":2,"_time":3,"_diff":-1,"k":"y","n":1}
{"_query":1,"_time":4,"_diff":1,"k":"y","a":3}
{"_query":1,"_time":4,"_diff":1,"k":"y","a":3}
{"_query":2,"_time":4,"_diff":-1,"k":"x","n":1}
{"_query":2,"_time":4,"_diff":1,"k":"y","n":2}
{"_query":2,"_time":6,"_diff":-1,"k":"y","n":2}
{"_query":3,"_time":4,"_diff":1,"a":3,"label":null}
{"_query":3,"_time":4,"_diff":1,"a":3,"label":null}
"#
    );
}

#[test]
fn jsonl_timestamps_and_explain() {
    let r = weir(
        &[
            "--format",
            "jsonl",
            "-c",
            "CREATE STREAM b (x DOUBLE, ok BOOLEAN, ts TIMESTAMP, WATERMARK FOR ts AS ts);
             EXPLAIN SELECT x FROM b;
             SELECT x, ok FROM b;
             INSERT INTO b VALUES (1.5, true, '2024-05-01 12:00:01'), (NULL, false, '2024-05-01 12:00:02.5')",
        ],
        None,
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    let explain: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert!(explain["explain"].is_string());
    assert_eq!(
        lines[1..],
        [
            r#"{"_query":1,"_time":"2024-05-01T12:00:01","_diff":1,"x":1.5,"ok":true}"#,
            r#"{"_query":1,"_time":"2024-05-01T12:00:02.500","_diff":1,"x":null,"ok":false}"#,
        ]
    );
}

#[test]
fn inline_sql_with_c() {
    let r = weir(
        &[
            "-c",
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t); \
             SELECT ISTREAM a FROM s [RANGE 2]; INSERT INTO s VALUES (10, 1), (20, 3)",
        ],
        None,
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(
        r.stdout,
        "[1] SELECT ISTREAM a FROM s [RANGE 2]\n[1] _time | a\n[1] 1     | 10\n[1] 3     | 20\n"
    );
}

#[test]
fn statements_on_stdin() {
    let r = weir(&[], Some(SCRIPT));
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(r.stdout, TABLE);
    let r = weir(&["run", "-"], Some(SCRIPT));
    assert_eq!(r.stdout, TABLE);
    let r = weir(&["--format", "csv"], Some("SELECT 1 AS one"));
    assert_eq!((r.code, r.stdout.as_str()), (0, "one\n1\n"));
}

#[test]
fn sql_error_stops_with_a_caret() {
    let path = script_file(
        "error",
        "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
         SELECT a FROM s;\n\
         INSERT INTO s VALUES (1, 1), (2, 2);\n\
         \n\
         SELECT nope FROM s;\n\
         INSERT INTO s VALUES (3, 3);\n",
    );
    let r = weir(&["run", path.to_str().unwrap()], None);
    assert_eq!(r.code, 1);
    // Output up to the failing statement is printed; nothing after it runs.
    assert_eq!(r.stdout, "[1] SELECT a FROM s\n[1] _time | a\n[1] 1     | 1\n");
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{}", r.stderr);
    assert_eq!(lines[0], "error: column 'nope' not found at line 5, column 8");
    assert_eq!(lines[1], "  SELECT nope FROM s;");
    // The caret starts under `nope` (the engine currently draws one caret too many).
    assert!(lines[2].starts_with("         ^^^^"), "{}", r.stderr);
    assert!(lines[2].trim_start().chars().all(|c| c == '^'), "{}", r.stderr);
}

#[test]
fn syntax_error_stops_where_it_is() {
    let r = weir(
        &[
            "-c",
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
             SELECT a FROM s; INSERT INTO s VALUES (1, 1), (2, 2);\n\
             SELEC 1;\n\
             INSERT INTO s VALUES (3, 3);",
        ],
        None,
    );
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (1, "[1] SELECT a FROM s\n[1] _time | a\n[1] 1     | 1\n")
    );
    assert!(r.stderr.starts_with("error: syntax error: "), "{}", r.stderr);
    assert!(r.stderr.contains(" at line 3, column 1\n  SELEC 1;\n  ^"), "{}", r.stderr);
}

#[test]
fn runtime_error_names_the_statement() {
    let r = weir(
        &[],
        Some(
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
             CLOSE s;\n\
             INSERT INTO s\n  VALUES (1, 1);\n",
        ),
    );
    assert_eq!((r.code, r.stdout.as_str()), (1, ""));
    assert_eq!(r.stderr, "error: stream 's' is closed\n  at line 3: INSERT INTO s ...\n");
}

#[test]
fn bad_arguments() {
    let r = weir(&["--format", "xml", "-c", "SELECT 1"], None);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        "error: invalid value 'xml' for '--format <F>': unknown format 'xml' (expected table, \
         csv or jsonl)\n\nFor more information, try '--help'.\n"
    );
    let r = weir(&["run", "/definitely/not/here.sql"], None);
    assert_eq!(r.code, 1);
    assert!(r.stderr.starts_with("error: cannot read /definitely/not/here.sql: "));
    let r = weir(&["--help"], None);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("weir run FILE.sql"));
}

/// Options go before or after the command and its file; every command has its --help; a
/// script given as psql or other tools take it is answered with `weir run FILE`.
#[test]
fn options_go_anywhere_and_mistakes_suggest_weir_run() {
    let path = script_file(
        "anywhere",
        "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
         SELECT a FROM s; INSERT INTO s VALUES (7, 1);\n",
    );
    let file = path.to_str().unwrap();
    let jsonl = "{\"_query\":1,\"_time\":1,\"_diff\":1,\"a\":7}\n";
    for args in [
        &["run", "--format", "jsonl", file][..],
        &["run", file, "--format", "jsonl"],
        &["--format", "jsonl", "run", file],
        &["run", "--workers", "2", "--format=jsonl", file],
    ] {
        let r = weir(args, None);
        assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, jsonl, ""), "{args:?}");
    }
    for command in ["run", "demo", "serve"] {
        let r = weir(&[command, "--help"], None);
        assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{command}");
        assert!(r.stdout.contains(&format!("\nUsage: weir {command} ")), "{}", r.stdout);
    }
    let r = weir(&["run", "--help"], None);
    assert!(r.stdout.starts_with(
        "Run a script: its statements in order, then its streams' sources to their end\n\n\
         Usage: weir run [OPTIONS] <FILE.sql>\n"
    ));
    let usage = "\n\nUsage: weir [OPTIONS] [COMMAND]\n\nFor more information, try '--help'.\n";
    let r = weir(&[file], None);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        format!("error: '{file}' is not a command: to run a script, use 'weir run {file}'{usage}")
    );
    let r = weir(&["-f", file], None);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        format!("error: weir has no -f option: to run a script, use 'weir run {file}'{usage}")
    );
    let r = weir(&["--workers", "2", "bids.SQL"], None);
    assert_eq!(
        r.stderr,
        format!(
            "error: 'bids.SQL' is not a command: to run a script, use 'weir run bids.SQL'{usage}"
        )
    );
}

#[test]
fn ticks_example() {
    let r = weir(&["run", &example("ticks.sql")], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(
        r.stdout,
        "\
[1] SELECT sensor, temp FROM readings WHERE temp > 30
[1] _time | sensor     | temp
[2] SELECT sensor, COUNT(*) AS n, MAX(temp) AS hottest FROM readings [RANGE 3] GROUP BY sensor
[2] _time | _diff | sensor     | n        | hottest
[3] SELECT DSTREAM sensor, temp, t FROM readings [RANGE 2]
[3] _time | sensor     | temp     | t
[1] 1     | b          | 35
[2] 1     | +1    | a          | 1        | 21
[2] 1     | +1    | b          | 1        | 35
[2] 2     | -1    | a          | 1        | 21
[2] 2     | +1    | a          | 2        | 24
[3] 3     | a          | 21       | 1
[3] 3     | b          | 35       | 1
[1] 4     | b          | 33
[2] 4     | +1    | a          | 1        | 24
[2] 4     | -1    | a          | 2        | 24
[2] 4     | +1    | b          | 1        | 33
[2] 4     | -1    | b          | 1        | 35
[2] 5     | -1    | a          | 1        | 24
[3] 4     | a          | 24       | 2
[3] 6     | b          | 33       | 4
[2] 7     | -1    | b          | 1        | 33
"
    );
}

#[test]
fn auction_example_runs_in_every_format() {
    let out = temp_dir("auction");
    let r = weir(&["run", &example("auction.sql"), "--output-dir", out.to_str().unwrap()], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let files = files_of(&out);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["queries.csv", "query-1.csv", "query-2.csv", "query-3.csv", "query-4.csv"]);
    assert!(files.iter().map(|(_, t)| t.lines().count()).sum::<usize>() > 40);
    for format in ["table", "jsonl"] {
        let r = weir(&["run", &example("auction.sql"), "--format", format], None);
        assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{format}");
        assert!(r.stdout.lines().count() > 40, "{format}: {}", r.stdout);
        if format == "jsonl" {
            for line in r.stdout.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert!(v["_time"].as_str().unwrap().starts_with("2024-05-01T12:"));
            }
        }
    }
}

#[test]
fn examples_give_the_same_output_on_two_and_three_workers() {
    for file in ["auction.sql", "messy_bids.sql", "sketches.sql", "ticks.sql"] {
        let one = weir(&["run", &example(file)], None);
        assert_eq!(one.code, 0, "{file}: {}", one.stderr);
        for n in ["2", "3"] {
            let many = weir(&["run", &example(file), "--workers", n], None);
            assert_eq!(
                (many.code, &many.stdout, &many.stderr),
                (0, &one.stdout, &one.stderr),
                "{file} on {n}"
            );
        }
    }
    let r = weir(&["--workers", "0", "-c", "SELECT 1"], None);
    assert!(r.stderr.contains("'0' is not a positive number of workers"), "{}", r.stderr);
}

#[test]
fn error_positions_count_from_the_start_of_stdin() {
    let r = weir(
        &[],
        Some(
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\n-- two on a line\n\
             SELECT a FROM s; SELECT zz FROM s;\n",
        ),
    );
    assert_eq!((r.code, r.stdout.as_str()), (1, "[1] SELECT a FROM s\n[1] _time | a\n"));
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines[0], "error: column 'zz' not found at line 4, column 25");
    assert_eq!(lines[1], "  SELECT a FROM s; SELECT zz FROM s;");
    assert!(lines[2].starts_with("                          ^^"), "{}", r.stderr);
}

/// Where an error is reported when it is not in the first line of its statement, or its
/// statement is not the first of its line: line, column and caret line refer to the script.
#[test]
fn error_positions_in_later_lines_and_statements() {
    let cases: &[(&str, &str, &str)] = &[
        // a later line of a multi-line statement
        (
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\nSELECT a,\n       nope\nFROM s;\n",
            "",
            "error: column 'nope' not found at line 3, column 8\n         nope\n         ^^^^\n",
        ),
        // a later line of a statement that starts after another on its line
        (
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\nSELECT a FROM s; SELECT a,\n  zz FROM s;\n",
            "[1] SELECT a FROM s\n[1] _time | a\n",
            "error: column 'zz' not found at line 3, column 3\n    zz FROM s;\n    ^^\n",
        ),
        // the second statement of a line, after non-ASCII text (columns count characters)
        (
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\nSELECT 'é名' AS x; SELECT zz FROM s;\n",
            "+-----+\n| x   |\n+-----+\n| é名 |\n+-----+\n(1 row)\n",
            "error: column 'zz' not found at line 2, column 26\n  SELECT 'é名' AS x; SELECT zz FROM s;\n                           ^^\n",
        ),
        // tabs before the error: kept in the caret line
        (
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\tSELECT a FROM s;\tSELECT\n\t\tzz FROM s;\n",
            "[1] SELECT a FROM s\n[1] _time | a\n",
            "error: column 'zz' not found at line 3, column 3\n  \t\tzz FROM s;\n  \t\t^^\n",
        ),
        // the second statement of the first line
        (
            "CREATE TABLE t (a BIGINT); INSERT INTO t VALUES (1, 2);\n",
            "",
            "error: 't' has 1 columns but the INSERT gives 2 at line 1, column 40\n  CREATE TABLE t (a BIGINT); INSERT INTO t VALUES (1, 2);\n                                         ^\n",
        ),
        // a syntax error in a later line of a statement
        (
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\nSELECT a FROM s WHERE a > (1 +\n  2 + ;\n",
            "",
            "error: syntax error: expected an expression, found end of statement at line 3, column 6\n    2 + ;\n       ^\n",
        ),
        // a syntax error in the second statement of a line
        (
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\nSELECT a FROM s; SELEC 1;\n",
            "",
            "error: syntax error: expected a statement (SELECT, WITH, VALUES, CREATE, INSERT, DELETE, COPY, DROP, SHOW, DESCRIBE, EXPLAIN, ADVANCE, CLOSE, CHECKPOINT, SET, RESET), found 'SELEC' at line 2, column 18\n  SELECT a FROM s; SELEC 1;\n                   ^^^^^\n",
        ),
        // a DELETE's condition
        (
            "CREATE TABLE t (a BIGINT);\nINSERT INTO t VALUES (1);\nDELETE FROM t WHERE nope = 1;\n",
            "",
            "error: column 'nope' not found at line 3, column 21\n  DELETE FROM t WHERE nope = 1;\n                      ^^^^\n",
        ),
    ];
    for (i, (script, stdout, stderr)) in cases.iter().enumerate() {
        let path = script_file(&format!("positions-{i}"), script);
        let r = weir(&["run", path.to_str().unwrap()], None);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (1, *stdout, *stderr),
            "{script}"
        );
    }
}

/// `weir run` reads a stream's CSV from standard input and a JSON-lines file next to the
/// script; each source's end closes its stream, so the final windows are emitted.
#[test]
fn sources_from_stdin_and_a_file_beside_the_script() {
    let path = script_file(
        "sources",
        "CREATE STREAM bids (auction BIGINT, price BIGINT, t BIGINT, WATERMARK FOR t AS t - 2)
           WITH (source = 'stdin', format = 'csv', bad_rows = 'skip');
         CREATE STREAM asks (auction BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'asks.jsonl');
         SELECT ISTREAM auction, MAX(price) AS top FROM bids [RANGE 10] GROUP BY auction;
         SELECT line, reason FROM bids$errors;
         SELECT auction FROM asks;",
    );
    let dir = path.parent().unwrap();
    std::fs::write(dir.join("asks.jsonl"), "{\"auction\": 7, \"t\": 1}\n").unwrap();
    let out = dir.join("out");
    let r = weir(
        &["--output-dir", out.to_str().unwrap(), "run", path.to_str().unwrap()],
        Some("auction,price,t\n1,10,1\n1,12,3\n2,oops,4\n2,5,2\n"),
    );
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    assert_eq!(read("query-1.csv"), "_time,auction,top\n1,1,10\n2,2,5\n3,1,12\n");
    assert_eq!(read("query-2.csv"), "_time,line,reason\n3,4,cannot read 'oops' as BIGINT\n");
    assert_eq!(read("query-3.csv"), "_time,auction\n1,7\n");
}

/// The bundled messy-file example: out-of-order rows released in time order, a late element in
/// the late stream, unreadable rows in the error stream.
#[test]
fn messy_bids_example() {
    let out = temp_dir("messy");
    let r = weir(
        &[
            "--format",
            "csv",
            "run",
            &example("messy_bids.sql"),
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    assert_eq!(
        read("query-1.csv"),
        "_time,auction,best\n\
         2024-05-01T12:00:01,1,100\n\
         2024-05-01T12:00:02,1,110\n\
         2024-05-01T12:00:03,2,250\n\
         2024-05-01T12:00:06,3,180\n\
         2024-05-01T12:00:09,2,310\n\
         2024-05-01T12:00:12,1,160\n"
    );
    assert_eq!(
        read("query-2.csv"),
        "_time,bidder,price,missed_watermark\n2024-05-01T12:00:07,grace,90,2024-05-01T12:00:07\n"
    );
    assert_eq!(
        read("query-3.csv"),
        "_time,line,field,reason\n\
         2024-05-01T12:00:06,6,price,cannot read 'twelve' as BIGINT\n\
         2024-05-01T12:00:12,10,,\"expected 4 fields, found 3\"\n"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// The bundled sketches example: replays dropped, then each sketch exact on this small file
/// (distinct visitors, busiest pages, median latency per 10-second window sliding by 5, checked
/// by hand in the comments), a reproducible sample, and the blocked users' clicks.
#[test]
fn sketches_example() {
    let out = temp_dir("sketches");
    let r = weir(
        &[
            "--format",
            "csv",
            "run",
            &example("sketches.sql"),
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    // Ids 1-14 once each: the replays of 3, 5 and 10 are dropped.
    let ids: Vec<String> = read("query-1.csv")
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(ids, (1..=14).map(|i| i.to_string()).collect::<Vec<_>>());
    // [0:00, 0:05) users {7, 8, 9, 42, 10}; [0:00, 0:10) adds 11 and 13; [0:05, 0:15) has
    // 8, 11, 13, 7, 12, 9, 42, 14; [0:10, 0:20) 12, 9, 42, 14.
    assert_eq!(
        read("query-2.csv"),
        "_time,visitors\n\
         2024-05-01T12:00:00,0\n\
         2024-05-01T12:00:04.999999,5\n\
         2024-05-01T12:00:09.999999,7\n\
         2024-05-01T12:00:14.999999,8\n\
         2024-05-01T12:00:19.999999,4\n\
         2024-05-01T12:00:24.999999,0\n"
    );
    // /home 4 of 6 in the first window; /cart before /pay at equal counts (value order).
    assert_eq!(
        read("query-3.csv"),
        "_time,busiest\n\
         2024-05-01T12:00:00,[]\n\
         2024-05-01T12:00:04.999999,\"[{value: /home, count: 4}, {value: /cart, count: 1}]\"\n\
         2024-05-01T12:00:09.999999,\"[{value: /home, count: 6}, {value: /cart, count: 2}]\"\n\
         2024-05-01T12:00:14.999999,\"[{value: /home, count: 4}, {value: /cart, count: 2}]\"\n\
         2024-05-01T12:00:19.999999,\"[{value: /home, count: 2}, {value: /cart, count: 1}]\"\n\
         2024-05-01T12:00:24.999999,[]\n"
    );
    // Medians: (95 + 120) / 2, (110 + 120) / 2, (110 + 150) / 2, (100 + 180) / 2.
    assert_eq!(
        read("query-4.csv"),
        "_time,median_ms\n\
         2024-05-01T12:00:00,\n\
         2024-05-01T12:00:04.999999,107.5\n\
         2024-05-01T12:00:09.999999,115.0\n\
         2024-05-01T12:00:14.999999,130.0\n\
         2024-05-01T12:00:19.999999,140.0\n\
         2024-05-01T12:00:24.999999,\n"
    );
    // The sample holds the first three clicks, then each click that enters it; the same on
    // every run (its priorities are a fixed hash: grammar-tests/windows/sample_seeded.slt
    // checks them against an independent computation).
    let sample = read("query-5.csv");
    assert!(sample.starts_with(
        "_time,id,page\n\
         2024-05-01T12:00:00,1,/home\n\
         2024-05-01T12:00:01,2,/home\n\
         2024-05-01T12:00:01,3,/cart\n"
    ));
    assert_eq!(sample.lines().count(), 12, "{sample}");
    // Users 42 and 13 are blocked: every click of theirs, no other (no false positive here).
    assert_eq!(
        read("query-6.csv"),
        "_time,user_id,page\n\
         2024-05-01T12:00:03,42,/pay\n\
         2024-05-01T12:00:07,13,/pay\n\
         2024-05-01T12:00:13,42,/pay\n"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A sink may not overwrite the script being run (it would be truncated before it is read to
/// its end): refused with the statement's position, and the script is intact.
#[test]
fn a_sink_cannot_overwrite_its_script() {
    let text = "CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
                CREATE SINK k WITH (path = 'guard.sql') AS SELECT v FROM s;\n";
    let path = script_file("guard", text);
    let run = weir(&["run", path.to_str().unwrap()], None);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("sink 'k' cannot write 'guard.sql': it is the script being run"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("at line 2, column 1"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

/// A Parquet sink's file is complete when `weir run` ends (its footer is written as the
/// engine shuts down), so another run reads it as a Parquet source.
#[test]
fn a_parquet_sink_is_complete_when_the_run_ends() {
    let write = script_file(
        "parquet-out",
        "CREATE STREAM s (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
         CREATE SINK out WITH (path = 'out.parquet') AS SELECT ISTREAM k, v * 10 AS w FROM s;\n\
         INSERT INTO s VALUES ('a', 1, 1), ('b', 2, 2);\n",
    );
    let run = weir(&["run", write.to_str().unwrap()], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dir = write.parent().unwrap();
    assert!(dir.join("out.parquet").exists());
    let read = dir.join("read.sql");
    std::fs::write(
        &read,
        "CREATE STREAM back (k VARCHAR, w BIGINT, _time BIGINT, WATERMARK FOR _time AS _time)\n\
           WITH (source = 'file', path = 'out.parquet');\n\
         SELECT k, w FROM back;\n",
    )
    .unwrap();
    let run = weir(&["run", "--format", "csv", read.to_str().unwrap()], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "_query,_time,k,w\n1,1,a,10\n1,2,b,20\n");
}

/// A source that fails under `bad_rows = 'fail'` and a sink whose query fails do not stop
/// the run: what the rows before the failure complete is printed (the failed stream ends at
/// its bad row), the other streams and queries go on, each failure is reported once on
/// standard error, and the exit status says that something failed.
#[test]
fn failures_are_reported_and_the_rest_goes_on() {
    let path = script_file(
        "failures",
        "CREATE STREAM good (v BIGINT, t BIGINT, WATERMARK FOR t AS t)\n\
           WITH (source = 'file', path = 'good.csv');\n\
         CREATE STREAM bad (v BIGINT, t BIGINT, WATERMARK FOR t AS t)\n\
           WITH (source = 'file', path = 'bad.csv');\n\
         SELECT v FROM good;\n\
         SELECT v FROM bad;\n\
         CREATE SINK k WITH (path = 'k.csv') AS SELECT ISTREAM 12 / (v - 3) AS x FROM good;\n",
    );
    let dir = path.parent().unwrap();
    std::fs::write(dir.join("good.csv"), "v,t\n1,1\n3,2\n5,3\n").unwrap();
    std::fs::write(dir.join("bad.csv"), "v,t\n7,1\nx,2\n8,3\n").unwrap();
    let out = dir.join("out");
    let run = weir(
        &["--format=csv", "run", path.to_str().unwrap(), "--output-dir", out.to_str().unwrap()],
        None,
    );
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{}", run.stderr);
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    assert_eq!(read("query-1.csv"), "_time,v\n1,1\n2,3\n3,5\n");
    assert_eq!(read("query-2.csv"), "_time,v\n1,7\n");
    let errors: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{}", run.stderr);
    assert_eq!(
        errors[0],
        "error: bad input: stream 'bad' source 'bad.csv' line 3, field 'v': cannot read 'x' as BIGINT"
    );
    assert_eq!(errors[1], "error: sink 'k' failed: division by zero, evaluating 12 / (good.v - 3)");
}

/// Checkpoints that cannot be written stop the run with the environment's error, instead of
/// reading on without the guarantee (before, the run retried the checkpoint forever); a sink
/// on a device (`/dev/null`) is checkpointed without a sync, which devices refuse.
#[cfg(target_os = "linux")]
#[test]
fn a_checkpoint_that_cannot_be_written_stops_the_run() {
    let path = script_file(
        "unwritable",
        "CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t)\n\
           WITH (source = 'file', path = 'keys.csv');\n\
         CREATE SINK nothing WITH (path = '/dev/null', format = 'json') AS SELECT ISTREAM k FROM s;\n",
    );
    let dir = path.parent().unwrap();
    let csv: String = std::iter::once("k,t\n".to_string())
        .chain((0..50_000).map(|i| format!("{i},{i}\n")))
        .collect();
    std::fs::write(dir.join("keys.csv"), csv).unwrap();
    let script = path.to_str().unwrap();
    let fine = dir.join("state");
    let run = weir(
        &["--data-dir", fine.to_str().unwrap(), "--checkpoint-interval", "1ms", "run", script],
        None,
    );
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    let run = weir(
        &["--data-dir", "/dev/full/state", "--checkpoint-interval", "1ms", "run", script],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "error: cannot create the data directory '/dev/full/state': Not a directory (os error 20)\n"
    );
}

/// `--memory-limit`: a query whose state grows with every new key (a count per key of a
/// stream of distinct keys) passes the limit and fails with an error that names it and the
/// operator holding the state; the run goes on with the other sink and exits with status 1.
#[test]
fn a_query_past_the_memory_limit_fails_with_a_named_error() {
    let path = script_file(
        "memory",
        "CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t)\n\
           WITH (source = 'file', path = 'keys.csv');\n\
         CREATE SINK per_key WITH (path = 'per_key.csv') AS\n\
           SELECT ISTREAM k, COUNT(*) AS n FROM s GROUP BY k;\n\
         CREATE SINK total WITH (path = 'total.csv') AS\n\
           SELECT ISTREAM COUNT(*) AS n FROM s [RANGE 10];\n",
    );
    let dir = path.parent().unwrap();
    let mut csv = String::from("k,t\n");
    for i in 0..400_000 {
        csv.push_str(&format!("{i},{i}\n"));
    }
    std::fs::write(dir.join("keys.csv"), csv).unwrap();
    let run = weir(&["run", "--memory-limit", "16MB", path.to_str().unwrap()], None);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let errors: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert!(
        errors[0].starts_with(
            "error: sink 'per_key' failed: query 0 (sink per_key) stopped: the continuous \
             queries' state reached the memory limit ("
        ),
        "{}",
        run.stderr
    );
    assert!(errors[0].contains(" of 16.0 MiB), and this query held the most: "), "{}", run.stderr);
    assert!(errors[0].contains(" of it in `Aggregate: group=[s.k]"), "{}", run.stderr);
    // The other sink saw every element: its window held 10 to the end, then emptied.
    let total = std::fs::read_to_string(dir.join("total.csv")).unwrap();
    let tail: Vec<&str> = total.lines().rev().take(3).collect();
    assert_eq!(tail, ["400009,0", "400008,1", "400007,2"]);
    // A limit that is not a size is refused before anything runs.
    let bad = weir(&["run", "--memory-limit", "lots", path.to_str().unwrap()], None);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("'lots' is not a size"), "{}", bad.stderr);
    // The write-ahead log is for input that arrives live; a script is read again.
    let state = dir.join("state");
    let args = ["run", "--data-dir", state.to_str().unwrap(), "--wal", "write"];
    let wal = weir(&[&args[..], &[path.to_str().unwrap()]].concat(), None);
    assert_eq!(wal.code, 1, "{}", wal.stderr);
    assert!(
        wal.stderr.starts_with("error: --wal is for the REPL and weir serve"),
        "{}",
        wal.stderr
    );
    let no_dir = weir(&["run", "--wal", "write", path.to_str().unwrap()], None);
    assert_eq!(no_dir.code, 2, "{}", no_dir.stderr);
}

/// A restart with `--data-dir` resumes the statements its checkpoint holds, not the script:
/// an edited script, or a sink file that went missing, is refused with what to do.
#[test]
fn a_resume_refuses_an_edited_script_and_a_missing_sink_file() {
    let dir = std::env::temp_dir().join(format!("weir-cli-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("in.csv"), "v,t\n1,1\n2,2\n").unwrap();
    let script = "CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)\n  \
                  WITH (source = 'file', path = 'in.csv');\n\
                  CREATE SINK o WITH (path = 'out.csv') AS SELECT ISTREAM v FROM s;\n";
    let path = dir.join("p.sql");
    std::fs::write(&path, script).unwrap();
    let state = dir.join("state");
    let run =
        || weir(&["--data-dir", state.to_str().unwrap(), "run", path.to_str().unwrap()], None);
    let first = run();
    assert_eq!((first.code, first.stderr.as_str()), (0, ""));
    assert_eq!(std::fs::read_to_string(dir.join("out.csv")).unwrap(), "_time,v\n1,1\n2,2\n");
    // The same script resumes.
    let again = run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stderr.starts_with("weir: resuming from checkpoint"), "{}", again.stderr);
    // An edited one is refused, and nothing is touched.
    std::fs::write(&path, script.replace("SELECT ISTREAM v", "SELECT ISTREAM v * 10 AS w"))
        .unwrap();
    let edited = run();
    assert_eq!(edited.code, 1);
    assert!(
        edited.stderr.contains("the script changed since the checkpoint in"),
        "{}",
        edited.stderr
    );
    assert!(edited.stderr.contains("delete") && edited.stderr.contains("to start over"));
    assert_eq!(std::fs::read_to_string(dir.join("out.csv")).unwrap(), "_time,v\n1,1\n2,2\n");
    // Back as it was, but with the sink's file gone.
    std::fs::write(&path, script).unwrap();
    std::fs::remove_file(dir.join("out.csv")).unwrap();
    let missing = run();
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains(
            "sink 'out.csv': the file is missing, but the checkpoint holds its first 16 bytes"
        ),
        "{}",
        missing.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sources are read after a script's statements, so `SHOW STREAM STATS` inside the script has
/// nothing to count yet; `--stats` prints the final accounting of every stream on standard
/// error once the sources have ended, leaving standard output to the queries.
#[test]
fn stats_print_the_final_accounting_of_every_source() {
    let path = script_file(
        "stats",
        "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t)
           WITH (source = 'file', path = 'in.csv', bad_rows = 'skip');
         SELECT a FROM s WHERE a > 100;\n",
    );
    std::fs::write(path.with_file_name("in.csv"), "a,t\n1,1\nx,2\n3,5\n4,3\n").unwrap();
    let file = path.to_str().unwrap();
    let r = weir(&["run", "--stats", "--format", "csv", file], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, "_query,_time,a\n"), "{}", r.stderr);
    assert!(r.stderr.starts_with("weir: final accounting of every stream\n"), "{}", r.stderr);
    // 4 records: 2 accepted, 1 late (t = 3 after t = 5), 1 unreadable; the file read to its end.
    let line = r.stderr.lines().find(|l| l.contains(" s ") || l.starts_with("s ")).unwrap_or("");
    let fields: Vec<&str> = line.split(['|', ' ']).filter(|f| !f.is_empty()).collect();
    assert_eq!(fields[..4], ["s", "2", "1", "1"], "{}", r.stderr);
    assert!(r.stderr.contains("4 records") && r.stderr.contains("ended"), "{}", r.stderr);
    let r = weir(&["serve", "--stats"], None);
    assert_eq!(r.code, 2, "{}", r.stderr);
}
