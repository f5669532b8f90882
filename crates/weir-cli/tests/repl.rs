//! The REPL driven through a pseudo-terminal, as a person would use it: statements and their
//! tables, live continuous queries stopped with Ctrl-C, tab completion, SQL colours, history
//! across restarts, and `weir demo`.
//!
//! Every wait is for text to appear (with a generous timeout), never a sleep; input is typed
//! only once the prompt is showing, when the line editor is reading the keyboard.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::path::Path;
use std::process::Command;

use rexpect::reader::Options;
use rexpect::session::{spawn_with_options, PtySession};

/// Each expectation may take this long (the binary is a debug build on a busy machine).
const TIMEOUT_MS: u64 = 30_000;

/// `weir ARGS` on a new terminal, with its history and home in `home`, without colours
/// (`NO_COLOR`): with them, the line editor redraws the line, prompt included, as keywords
/// are typed, and a wait for the prompt could end early. Colours have a test of their own.
fn weir(args: &[&str], home: &Path) -> PtySession {
    weir_with(args, home, true, Some("1"))
}

/// `weir ARGS` on a new terminal; `strip` removes colour codes from what is read, and
/// `no_color` sets `NO_COLOR`.
fn weir_with(args: &[&str], home: &Path, strip: bool, no_color: Option<&str>) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(args)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("TERM", "xterm")
        .env_remove("NO_COLOR");
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let options = Options::new().timeout_ms(Some(TIMEOUT_MS)).strip_ansi_escape_codes(strip);
    let mut p = spawn_with_options(cmd, options).unwrap();
    p.exp_string("type \\help for help").unwrap();
    p.exp_string("weir> ").unwrap();
    p
}

/// Types a line and presses Enter.
fn type_line(p: &mut PtySession, line: &str) {
    p.send(line).unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
}

/// Waits for the end of the session.
fn quit(mut p: PtySession) {
    type_line(&mut p, "\\q");
    p.exp_eof().unwrap();
}

#[test]
fn a_statement_prints_its_table() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&[], home.path());
    type_line(&mut p, "CREATE TABLE t (a BIGINT, b VARCHAR);");
    p.exp_string("CREATE TABLE").unwrap();
    p.exp_string("weir> ").unwrap();
    // A statement over two lines: the second gets the continuation prompt.
    type_line(&mut p, "INSERT INTO t");
    p.exp_string("..> ").unwrap();
    type_line(&mut p, "VALUES (1, 'x'), (2, 'yy');");
    p.exp_string("INSERT 2").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT * FROM t;");
    p.exp_string("| a | b  |").unwrap();
    p.exp_string("| 2 | yy |").unwrap();
    p.exp_string("(2 rows)").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "\\timing");
    p.exp_string("Timing is on.").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT COUNT(*) AS n FROM t;");
    p.exp_string("(1 row)").unwrap();
    p.exp_regex(r"Time: \d+\.\d{3} ms").unwrap();
    p.exp_string("weir> ").unwrap();
    // Errors show the line with a caret; unknown commands list the real ones.
    type_line(&mut p, "SELECT nope FROM t;");
    p.exp_string("error: column 'nope' not found").unwrap();
    p.exp_string("^^^^").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "\\bogus");
    p.exp_string("unknown command '\\bogus'. The commands are: \\d [NAME]").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn ctrl_c_stops_a_live_query_and_the_shell_goes_on() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&[], home.path());
    type_line(&mut p, "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);");
    p.exp_string("CREATE STREAM").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "CREATE TABLE seen (a BIGINT);");
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT a FROM s WHERE a > 1;");
    p.exp_string("[1] _time | a").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT ISTREAM COUNT(*) AS n FROM s [RANGE 10];");
    p.exp_string("[2] _time | n").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "INSERT INTO s VALUES (5, 1), (7, 2);");
    p.exp_string("[1] 1     | 5").unwrap();
    p.exp_string("weir> ").unwrap();
    // Ctrl-C at the empty prompt stops the latest query, [2], and only that one.
    p.send_control('c').unwrap();
    p.exp_string("[2] stopped (1 still running").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "INSERT INTO s VALUES (9, 3);");
    let out = p.exp_string("INSERT 1").unwrap();
    p.exp_string("[1] 2     | 7").unwrap();
    let out = out + &p.exp_string("weir> ").unwrap();
    assert!(!out.contains("[2]"), "{out}");
    p.send_control('c').unwrap();
    p.exp_string("[1] stopped").unwrap();
    let out = p.exp_string("weir> ").unwrap();
    assert!(!out.contains("still running"), "{out}");
    type_line(&mut p, "INSERT INTO s VALUES (11, 4); INSERT INTO seen VALUES (1);");
    let out = p.exp_string("INSERT 1").unwrap();
    assert!(!out.contains("[1]"), "{out}");
    p.exp_string("weir> ").unwrap();
    // The catalog and the table's contents are all still there.
    type_line(&mut p, "\\d");
    p.exp_regex(r"\| s +\| stream \| a, t").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "\\queries");
    p.exp_string("No continuous query is running.").unwrap();
    p.exp_string("weir> ").unwrap();
    // Ctrl-C on a line being typed only clears it.
    p.send("SELECT 'never run'").unwrap();
    p.flush().unwrap();
    p.exp_string("never run'").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT * FROM seen;");
    let out = p.exp_string("(1 row)").unwrap();
    assert!(!out.contains("| never run |"), "{out}");
    p.exp_string("weir> ").unwrap();
    // Ctrl-D quits.
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn odd_input_does_not_end_the_shell() {
    use std::io::Write;
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&[], home.path());
    // Bytes that are not UTF-8.
    let mut tty = p.process().get_file_handle().unwrap();
    tty.write_all(b"SELECT \xff\xfe 1;\r").unwrap();
    tty.flush().unwrap();
    p.exp_string("not valid UTF-8").unwrap();
    p.exp_string("weir> ").unwrap();
    // Control characters, an unterminated string, a lone semicolon, a stray backslash.
    for (line, prompt) in [
        ("\x01\x02\x1b[Z SELECT;", "weir> "),
        ("SELECT 'abc;", "..> "),
        ("';", "weir> "),
        (";", "weir> "),
        ("\\", "weir> "),
        ("\\d nope", "weir> "),
    ] {
        type_line(&mut p, line);
        p.exp_string(prompt).unwrap();
    }
    type_line(&mut p, "SELECT 6 * 7 AS answer;");
    p.exp_string("| 42     |").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn typed_sql_is_coloured_unless_no_color_is_set() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir_with(&[], home.path(), false, None);
    p.send("SELECT 'x' -- c").unwrap();
    p.flush().unwrap();
    // Keyword, quoted text and comment each in their colour as the line is being typed.
    p.exp_string("\x1b[1;34mSELECT\x1b[0m \x1b[32m'x'\x1b[0m \x1b[90m-- c\x1b[0m").unwrap();
    p.send_control('u').unwrap();
    type_line(&mut p, "SELECT 42 AS n;");
    p.exp_string("| 42 |").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);

    let mut p = weir_with(&[], home.path(), false, Some("1"));
    type_line(&mut p, "SELECT 43 AS n;");
    // With NO_COLOR the line is echoed as typed, with no colour codes inside it.
    p.exp_string("SELECT 43 AS n;").unwrap();
    p.exp_string("| 43 |").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn tab_completes_a_streams_columns() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&[], home.path());
    type_line(
        &mut p,
        "CREATE STREAM trades (symbol VARCHAR, qty BIGINT, ts BIGINT, WATERMARK FOR ts AS ts);",
    );
    p.exp_string("CREATE STREAM").unwrap();
    p.exp_string("weir> ").unwrap();
    // `trades.` and Tab twice lists the columns.
    p.send("SELECT trades.").unwrap();
    p.send("\t").unwrap();
    p.send("\t").unwrap();
    p.flush().unwrap();
    p.exp_regex(r"symbol\s+qty\s+ts").unwrap();
    // A unique prefix completes in place: `sym` becomes `symbol`, and the query runs.
    p.send_control('u').unwrap();
    p.send("SELECT sym").unwrap();
    p.send("\t").unwrap();
    p.send(" FROM trades;\r").unwrap();
    p.flush().unwrap();
    p.exp_string("[1] _time | symbol").unwrap();
    p.exp_string("weir> ").unwrap();
    // Names after FROM.
    p.send("SELECT * FROM tr\t").unwrap();
    p.send(";\r").unwrap();
    p.flush().unwrap();
    p.exp_regex(r"\[2\] _time \| symbol +\| qty +\| ts").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn history_survives_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&[], home.path());
    type_line(&mut p, "SELECT 41 + 1 AS answer;");
    p.exp_string("| 42     |").unwrap();
    p.exp_string("weir> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    let history = std::fs::read_to_string(home.path().join("data/weir/history")).unwrap();
    assert!(history.contains("SELECT 41 + 1 AS answer;"), "{history}");

    let mut p = weir(&[], home.path());
    // Up arrow brings the statement back; Enter runs it again.
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("AS answer;").unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
    p.exp_string("| 42     |").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn demo_shows_live_rows() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&["demo"], home.path());
    type_line(&mut p, "SELECT auction, bidder, price FROM bids;");
    p.exp_string("[1] _time                      | auction  | bidder   | price").unwrap();
    // Bids arrive while the prompt waits, stamped with the wall clock.
    let row = r"\[1\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)? +\| \d +\| \d+ +\| \d+";
    p.exp_regex(row).unwrap();
    p.exp_regex(row).unwrap();
    // Typing is not disturbed by rows printed meanwhile: finish a statement after one.
    p.send("SELECT item FROM auctions WHERE").unwrap();
    p.flush().unwrap();
    p.exp_regex(row).unwrap();
    type_line(&mut p, " id = 5;");
    p.exp_string("| piano |").unwrap();
    p.exp_string("(1 row)").unwrap();
    // Ctrl-C is the line editor's once it reads again: before that, the terminal is not in
    // raw mode and the key would be lost (a race seen once in CI, under load).
    p.exp_string("weir> ").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("[1] stopped").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

/// A query over a stream with a file source loads the file in the foreground with a progress
/// bar (bytes and rows per second), shows the results, and gives the prompt back.
#[test]
fn loading_a_file_shows_progress_then_the_results() {
    let home = tempfile::tempdir().unwrap();
    let csv = home.path().join("big.csv");
    let mut text = String::from("k,v,t\n");
    for i in 0..300_000 {
        text.push_str(&format!("key{},{i},{}\n", i % 7, i / 10));
    }
    std::fs::write(&csv, text).unwrap();
    let mut p = weir(&[], home.path());
    type_line(
        &mut p,
        &format!(
            "CREATE STREAM big (k VARCHAR, v BIGINT, t BIGINT, WATERMARK FOR t AS t) \
             WITH (source = 'file', path = '{}');",
            csv.display()
        ),
    );
    p.exp_string("CREATE STREAM").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT k, v FROM big WHERE v = 299999;");
    p.exp_regex(r"loading big \[[=> ]+\] [\d.]+ [KMG]?i?B/[\d.]+ [KMG]?i?B").unwrap();
    p.exp_string("rows/s").unwrap();
    p.exp_string("key0").unwrap();
    p.exp_string("299999").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SHOW STREAM STATS;");
    p.exp_string("300000").unwrap();
    p.exp_string("ended").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn view_shows_the_current_result_as_a_table_and_q_comes_back() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&[], home.path());
    type_line(&mut p, "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t);");
    p.exp_string("CREATE STREAM").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k;");
    p.exp_string("[1] _time").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "INSERT INTO s VALUES ('a', 1), ('b', 1), ('a', 2);");
    p.exp_string("INSERT 3").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "ADVANCE s TO 3;");
    p.exp_string("ADVANCE").unwrap();
    p.exp_string("weir> ").unwrap();
    // At instant 2, a's count became 2 where a's row was: the relation as of then.
    type_line(&mut p, "\\view");
    p.exp_string("[1] at 2  |  2 row(s)  |  q: back").unwrap();
    p.exp_string("SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k").unwrap();
    p.exp_regex(r"\| k \| n \|\s+\+---\+---\+\s+\| a \| 2 \|\s+\| b \| 1 \|").unwrap();
    p.exp_string("(2 rows)").unwrap();
    p.send("q").unwrap();
    p.flush().unwrap();
    p.exp_string("weir> ").unwrap();
    // The shell goes on, and the query too.
    type_line(&mut p, "INSERT INTO s VALUES ('b', 4); ADVANCE s TO 5;");
    p.exp_regex(r"\[1\] 4 +\| \+1 +\| b +\| 2").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "\\view 7");
    p.exp_string("error: no query [7] is running").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}

#[test]
fn view_follows_a_live_query() {
    let home = tempfile::tempdir().unwrap();
    let mut p = weir(&["demo"], home.path());
    type_line(&mut p, "SELECT COUNT(*) AS bids FROM bids [UNBOUNDED];");
    p.exp_string("[1] _time").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "\\view 1");
    // The count goes up in place as bids arrive: the view is drawn again with a new instant
    // and a new count.
    let status = r"\[1\] at (\S+)  \|  1 row\(s\)";
    let (_, first) = p.exp_regex(status).unwrap();
    loop {
        let (_, next) = p.exp_regex(status).unwrap();
        if next != first {
            break;
        }
    }
    p.send_control('c').unwrap();
    p.flush().unwrap();
    p.exp_string("weir> ").unwrap();
    // The changelog printed while the view was open comes after it.
    p.exp_regex(r"\[1\] \d{4}-\d\d-\d\dT").unwrap();
    p.send_control('c').unwrap();
    p.flush().unwrap();
    p.exp_string("[1] stopped").unwrap();
    quit(p);
}

/// `--wal`: what was typed after the last checkpoint survives a crash of the shell (SIGKILL):
/// the restart replays it from the write-ahead log and says so.
#[test]
fn typed_input_survives_a_crash_with_the_write_ahead_log() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("state");
    let data = data.to_str().unwrap();
    let mut p = weir(&["--data-dir", data, "--wal", "write"], home.path());
    type_line(&mut p, "CREATE TABLE t (v BIGINT);");
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "INSERT INTO t VALUES (1), (2);");
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "INSERT INTO t VALUES (40);");
    p.exp_string("weir> ").unwrap();
    p.process_mut().kill(rexpect::process::Signal::SIGKILL).unwrap();

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(["--data-dir", data, "--wal", "write"])
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("TERM", "xterm")
        .env("NO_COLOR", "1");
    let options = Options::new().timeout_ms(Some(TIMEOUT_MS)).strip_ansi_escape_codes(true);
    let mut p = spawn_with_options(cmd, options).unwrap();
    p.exp_string("replayed 2 records of pushed input from the write-ahead log").unwrap();
    p.exp_string("weir> ").unwrap();
    type_line(&mut p, "SELECT SUM(v) AS s FROM t;");
    p.exp_string("| 43 |").unwrap();
    p.exp_string("weir> ").unwrap();
    quit(p);
}
