//! `docs/repl.md`'s transcripts, the ```` ```text transcript ```` blocks ("A session", the caret
//! error), each replayed in a new shell on a pseudo-terminal: every line typed after `weir> `
//! (and `  ..> `) is typed, a bare `weir>` is a Ctrl-C at the empty prompt, and what the shell
//! prints in between must be exactly the transcript's lines, so a transcript cannot drift from
//! the shell. Only the time `\timing` measures is free (`Time: 0.401 ms`). A first line before
//! any prompt is the shell's greeting, checked too. Transcripts of live, wall-clock output (the
//! demo, loading progress, the table view) are plain ```` ```text ```` blocks, not replayed.
//!
//! Output is compared as a terminal shows it: each line as the carriage returns the line editor
//! writes leave it (text after a `\r` overwrites the line), blank lines and the echo of the typed
//! line left out.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::path::Path;
use std::process::Command;

use rexpect::reader::Options;
use rexpect::session::{spawn_with_options, PtySession};

/// Each expectation may take this long (the binary is a debug build on a busy machine).
const TIMEOUT_MS: u64 = 30_000;

/// One exchange of the transcript: what is typed (no lines: Ctrl-C) and what the shell prints.
#[derive(Debug, Default)]
struct Exchange {
    typed: Vec<String>,
    printed: Vec<String>,
}

/// The ```` ```text transcript ```` blocks of a Markdown file: (line of the block, its lines).
fn transcript_blocks(markdown: &str) -> Vec<(usize, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if line.trim_end() == "```text transcript" {
            let body = lines.by_ref().map(|(_, l)| l).take_while(|l| l.trim_end() != "```");
            blocks.push((i + 1, body.map(str::to_string).collect()));
        }
    }
    blocks
}

/// A transcript: the shell's greeting (the lines before the first prompt), then the exchanges.
fn transcript(block: &[String]) -> (Vec<String>, Vec<Exchange>) {
    let mut greeting = Vec::new();
    let mut exchanges: Vec<Exchange> = Vec::new();
    for line in block {
        if let Some(typed) = line.strip_prefix("weir>") {
            let typed = typed.strip_prefix(' ').unwrap_or(typed);
            let typed = if typed.is_empty() { vec![] } else { vec![typed.to_string()] };
            exchanges.push(Exchange { typed, printed: Vec::new() });
        } else if let (Some(more), Some(last)) = (line.strip_prefix("  ..> "), exchanges.last_mut())
        {
            last.typed.push(more.to_string());
        } else if let Some(last) = exchanges.last_mut() {
            last.printed.push(line.trim_end().to_string());
        } else {
            greeting.push(line.trim_end().to_string());
        }
    }
    (greeting, exchanges)
}

/// Lines as a terminal leaves them: a carriage return sends the cursor back to the line's start,
/// and what follows overwrites what was there.
fn rendered(raw: &str) -> Vec<String> {
    raw.split('\n')
        .map(|segment| {
            let mut line: Vec<char> = Vec::new();
            let mut at = 0;
            for c in segment.chars() {
                if c == '\r' {
                    at = 0;
                } else if at < line.len() {
                    line[at] = c;
                    at += 1;
                } else {
                    line.push(c);
                    at += 1;
                }
            }
            line.into_iter().collect::<String>().trim_end().to_string()
        })
        .collect()
}

/// The printed lines without the echo of what was typed: the lines at the start that together
/// spell a typed line (perhaps after its prompt, perhaps wrapped at the terminal's width), blank
/// lines, and a bare prompt.
fn without_echo(lines: Vec<String>, typed: &[String]) -> Vec<String> {
    let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let echoes: Vec<String> = typed
        .iter()
        .flat_map(|t| [squeeze(t), squeeze(&format!("weir> {t}")), squeeze(&format!("..> {t}"))])
        .collect();
    let mut lines: Vec<String> =
        lines.into_iter().filter(|l| !l.is_empty() && l != "weir>").collect();
    let mut spelled = String::new();
    let mut echo_lines = 0;
    for line in &lines {
        let more = spelled.clone() + &squeeze(line);
        if !echoes.iter().any(|e| e.starts_with(&more)) {
            break;
        }
        spelled = more;
        echo_lines += 1;
        if echoes.contains(&spelled) {
            break;
        }
    }
    if echoes.contains(&spelled) {
        lines.drain(..echo_lines);
    }
    lines.into_iter().map(|l| normalized(&l)).collect()
}

/// The time `\timing` prints varies: a line `Time: <number> ms` is written `Time: N ms`.
fn normalized(line: &str) -> String {
    match line.strip_prefix("Time: ").and_then(|t| t.strip_suffix(" ms")) {
        Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.') => {
            "Time: N ms".to_string()
        }
        _ => line.to_string(),
    }
}

fn type_line(p: &mut PtySession, line: &str) {
    p.send(line).unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
}

#[test]
fn the_transcripts_in_repl_md_are_what_the_shell_prints() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/repl.md");
    let markdown = std::fs::read_to_string(&doc).unwrap();
    let blocks = transcript_blocks(&markdown);
    assert!(blocks.len() >= 2, "docs/repl.md has fewer transcripts than expected: {blocks:?}");
    for (line, block) in blocks {
        replay(line, &block);
    }
}

/// Replays the transcript at `line` of docs/repl.md in a new shell.
fn replay(line: usize, block: &[String]) {
    let at = format!("docs/repl.md:{line}");
    let (greeting, exchanges) = transcript(block);
    assert!(!exchanges.is_empty(), "{at}: a transcript without a prompt");

    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("TERM", "xterm")
        .env("NO_COLOR", "1");
    let options = Options::new().timeout_ms(Some(TIMEOUT_MS)).strip_ansi_escape_codes(true);
    let mut p = spawn_with_options(cmd, options).unwrap();
    let before = p.exp_string("weir> ").unwrap();
    if !greeting.is_empty() {
        let shown: Vec<String> = rendered(&before).into_iter().filter(|l| !l.is_empty()).collect();
        assert_eq!(shown, greeting, "{at}: the greeting");
    }

    for ex in &exchanges {
        match ex.typed.split_first() {
            None => p.send_control('c').unwrap(),
            Some((first, rest)) => {
                type_line(&mut p, first);
                for line in rest {
                    p.exp_string("..> ").unwrap();
                    type_line(&mut p, line);
                }
            }
        }
        if ex.typed.first().is_some_and(|t| t == "\\q") {
            assert!(ex.printed.is_empty(), "{at}: lines after \\q");
            p.exp_eof().unwrap();
            return;
        }
        // Wait for the last line the transcript shows (rows of a live query may come after the
        // prompt is back), then for the prompt after it.
        let mut raw = String::new();
        if let Some(last) = ex.printed.last() {
            let waited = if normalized(last) == "Time: N ms" {
                p.exp_regex(r"Time: [0-9.]+ ms").map(|(text, matched)| text + &matched)
            } else {
                p.exp_string(last).map(|text| text + last)
            };
            let waited = waited
                .unwrap_or_else(|e| panic!("{at}: after {:?}, no line {last:?}: {e}", ex.typed));
            raw.push_str(&waited);
        }
        raw.push_str(&p.exp_string("weir> ").unwrap());
        let actual = without_echo(rendered(&raw), &ex.typed);
        let expected: Vec<String> = ex.printed.iter().map(|l| normalized(l)).collect();
        assert_eq!(
            actual, expected,
            "{at}: what the shell prints after {:?} (left: the shell, right: the doc)",
            ex.typed
        );
    }
    type_line(&mut p, "\\q");
    p.exp_eof().unwrap();
}

#[test]
fn the_transcript_is_read_as_typed_and_printed_lines() {
    let md = "x\n```text\nweir> not this\n```\n```text transcript\nWeir 1\nweir> SELECT 1,\n  ..>   2;\nrow\nweir>\n[1] stopped\nweir> \\q\n```\n";
    let blocks = transcript_blocks(md);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].0, 5);
    let (greeting, ex) = transcript(&blocks[0].1);
    assert_eq!(greeting, ["Weir 1"]);
    assert_eq!(ex.len(), 3);
    assert_eq!(ex[0].typed, ["SELECT 1,", "  2;"]);
    assert_eq!(ex[0].printed, ["row"]);
    assert!(ex[1].typed.is_empty());
    assert_eq!(ex[1].printed, ["[1] stopped"]);
    assert_eq!(rendered("weir> abc\r[1] 1 | 2\r\nnext"), ["[1] 1 | 2", "next"]);
    assert_eq!(normalized("Time: 0.401 ms"), "Time: N ms");
    let typed = ["SELECT a".to_string()];
    let lines = ["SELECT".to_string(), "a".to_string(), "x".to_string()];
    assert_eq!(without_echo(lines.to_vec(), &typed), ["x"]);
}
