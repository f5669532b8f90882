//! The interactive shell: `weir> ` prompts, statements ended by `;` (continued on `  ..> `
//! lines), backslash commands, and history in `$XDG_DATA_HOME/weir/history`.

use std::io::{self, Write};
use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::output::Format;
use crate::script::{completeness, Completeness, Failure, Session};

const PROMPT: &str = "weir> ";
const CONTINUE: &str = "  ..> ";

const HELP: &str = "\
Type SQL statements ending with ';' (they may span lines). A continuous query (a SELECT over
a stream) keeps running: its new output prints after each later statement.
  \\help                      this list
  \\format [table|csv|jsonl]  show or set the output format
  \\q, \\quit                  quit (Ctrl-D also quits; Ctrl-C clears the current statement)
";

/// Where history is kept: `$XDG_DATA_HOME/weir/history`, else
/// `$HOME/.local/share/weir/history`.
pub fn history_path() -> Option<PathBuf> {
    let non_empty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    let data = non_empty("XDG_DATA_HOME")
        .or_else(|| non_empty("HOME").map(|h| h.join(".local").join("share")))?;
    Some(data.join("weir").join("history"))
}

/// What a backslash command asks for.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Quit,
    Print(String),
    SetFormat(Format),
}

fn command(line: &str, format: Format) -> Action {
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or("");
    let arg = words.next();
    match (name, arg) {
        ("\\q" | "\\quit", None) => Action::Quit,
        ("\\help" | "\\h" | "\\?", None) => Action::Print(HELP.to_string()),
        ("\\format", None) => Action::Print(format!("format: {format}\n")),
        ("\\format", Some(f)) if words.next().is_none() => match f.parse() {
            Ok(f) => Action::SetFormat(f),
            Err(e) => Action::Print(format!("error: {e}\n")),
        },
        _ => Action::Print(format!("error: unknown command '{}' (try \\help)\n", line.trim())),
    }
}

/// Runs the REPL until `\q` or end of input.
pub fn run(format: Format) -> anyhow::Result<()> {
    let mut editor = DefaultEditor::new()?;
    let history = history_path();
    if let Some(h) = &history {
        // No history yet is normal.
        let _ = editor.load_history(h);
    }
    let mut session = Session::new(format, io::stdout(), true);
    writeln!(
        io::stdout(),
        "Weir {} (type \\help for help, \\q to quit)",
        env!("CARGO_PKG_VERSION")
    )?;
    let mut buf = String::new();
    loop {
        let prompt = if buf.is_empty() { PROMPT } else { CONTINUE };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buf.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        if buf.is_empty() && line.trim_start().starts_with('\\') {
            let _ = editor.add_history_entry(line.trim());
            match command(&line, session.format()) {
                Action::Quit => break,
                Action::Print(s) => io::stdout().write_all(s.as_bytes())?,
                Action::SetFormat(f) => match session.set_format(f) {
                    Ok(()) => {}
                    Err(Failure::Statement(msg)) => crate::report(&msg),
                    Err(Failure::Output(e)) => return Err(e.into()),
                },
            }
            continue;
        }
        if !buf.is_empty() {
            buf.push('\n');
        }
        buf.push_str(&line);
        match completeness(&buf) {
            Completeness::Incomplete => continue,
            Completeness::Empty => {
                buf.clear();
                continue;
            }
            Completeness::Complete => {}
        }
        let _ = editor.add_history_entry(buf.trim());
        let result = session.run_text(&buf, 1);
        buf.clear();
        match result {
            Ok(()) => {}
            Err(Failure::Statement(msg)) => crate::report(&msg),
            Err(Failure::Output(e)) => return Err(e.into()),
        }
        io::stdout().flush()?;
    }
    if let Some(h) = &history {
        if let Some(dir) = h.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = editor.save_history(h) {
            let _ = writeln!(io::stderr(), "warning: cannot save history to {}: {e}", h.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backslash_commands() {
        assert_eq!(command("\\q", Format::Table), Action::Quit);
        assert_eq!(command("  \\quit  ", Format::Table), Action::Quit);
        assert_eq!(command("\\format csv", Format::Table), Action::SetFormat(Format::Csv));
        assert_eq!(command("\\format", Format::Jsonl), Action::Print("format: jsonl\n".into()));
        assert!(matches!(command("\\help", Format::Table), Action::Print(s) if s.contains("\\q")));
        assert!(matches!(
            command("\\format xml", Format::Table),
            Action::Print(s) if s.starts_with("error: unknown format")
        ));
        assert!(matches!(
            command("\\nope", Format::Table),
            Action::Print(s) if s == "error: unknown command '\\nope' (try \\help)\n"
        ));
    }
}
