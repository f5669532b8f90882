//! Running SQL text one statement at a time: after each statement the new output of every
//! running continuous query is printed, so output appears where the statement that caused it
//! (an INSERT, ADVANCE or CLOSE) sits in the script.
//!
//! Scripts, `-c` text and standard input are all read the same way, a line at a time: as soon
//! as the lines read so far end a statement (a `;` outside strings and comments) they are
//! parsed and run, so a piped producer sees output as it goes, and the first error (syntax or
//! not) stops the run after the output of the statements before it. Statements sharing a line
//! are parsed together. (Parsing a large script in one piece is quadratic in
//! `weir_sql::parse_script`; this way it never has to be.)
//!
//! Each statement is executed as it was parsed, not parsed again, so an error's line, column
//! and caret line refer to the text parsed; they are moved down to where that text sits in the
//! input. Errors that carry no position (a late element, a closed stream) are followed by the
//! line of the statement that failed.

use std::fs::File;
use std::io::{self, BufRead, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use weir::{Engine, ExecResult, Subscription, WeirError};
use weir_sql::sqlparser::dialect::GenericDialect;
use weir_sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::output::{self, Format, QueryOutput};
use crate::tableview::{Contents, Frame};

/// Why a run stopped.
#[derive(Debug)]
pub enum Failure {
    /// A statement or a continuous query failed; the message is printed after `error: `.
    Statement(String),
    /// Writing the output failed (e.g. a closed pipe).
    Output(io::Error),
    /// Continuous queries, sources or sinks failed while the run went on; each was reported
    /// on standard error when it happened. The run's exit status says so.
    Reported(usize),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Statement(format!("{e:#}"))
    }
}

/// A continuous query and the state of its printing.
#[derive(Debug)]
struct Running {
    sub: Subscription,
    output: QueryOutput,
    /// The statement that started it, for `\queries`.
    sql: String,
    /// With `--output-dir`: the file its changes go to, instead of the session's output.
    file: Option<QueryFile>,
    /// The REPL: its current result, for the table view (`\view`).
    contents: Option<Contents>,
}

/// A continuous query's own output file (`--output-dir`).
#[derive(Debug)]
struct QueryFile {
    path: PathBuf,
    writer: BufWriter<File>,
}

impl QueryFile {
    /// Creates `path` (truncated), or with `append` adds to it; the header is written to a
    /// file that is new or empty.
    fn open(path: PathBuf, append: bool, header: &str) -> Result<Self, Failure> {
        let cannot =
            |e: io::Error| Failure::Statement(format!("cannot write {}: {e}", path.display()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(cannot)?;
        let empty = file.metadata().map_err(cannot)?.len() == 0;
        let mut q = QueryFile { writer: BufWriter::new(file), path };
        if empty {
            q.write(header)?;
        }
        Ok(q)
    }

    fn write(&mut self, text: &str) -> Result<(), Failure> {
        self.writer.write_all(text.as_bytes()).map_err(|e| self.failed(e))
    }

    fn flush(&mut self) -> Result<(), Failure> {
        self.writer.flush().map_err(|e| self.failed(e))
    }

    fn failed(&self, e: io::Error) -> Failure {
        Failure::Statement(format!("cannot write {}: {e}", self.path.display()))
    }
}

/// A running continuous query, as listed by the REPL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryInfo {
    /// Its `[N]`.
    pub number: usize,
    pub sql: String,
}

/// An engine with its running queries, printing to `out`.
#[derive(Debug)]
pub struct Session<W: Write> {
    engine: Engine,
    queries: Vec<Running>,
    started: usize,
    format: Format,
    out: W,
    /// REPL: statement tags are shown, errors are not followed by the statement's line.
    interactive: bool,
    /// Not interactive: the failures reported on standard error so far (query, source and
    /// sink errors, each once), by message.
    reported: Vec<String>,
    /// `--output-dir`: each continuous query's changes go to a file of its own there.
    output_dir: Option<PathBuf>,
    /// The queries started with `--output-dir`, `(number, file name, SQL)`, listed in its
    /// `queries.csv`.
    listed: Vec<(usize, String, String)>,
    /// Continuous queries are being resumed from a checkpoint: their files are added to.
    resuming: bool,
    /// A script in CSV without `--output-dir`: the continuous query whose CSV standard output
    /// holds. Nothing else may be printed after its header.
    csv_owner: Option<usize>,
    /// `--stats`: print every stream's final accounting at the end.
    final_stats: bool,
}

/// The message for output refused because a continuous query's CSV holds standard output.
fn csv_taken(owner: usize) -> String {
    format!(
        "with --format csv, standard output holds the CSV of one continuous query and nothing \
         after it, and query {owner} writes there already: give --output-dir DIR to write each \
         continuous query to a CSV file of its own (DIR/query-N.csv), or use --format jsonl, \
         whose lines say which query they belong to"
    )
}

impl<W: Write> Session<W> {
    #[cfg(test)]
    pub fn new(format: Format, out: W, interactive: bool) -> Self {
        Session::with_engine(Engine::new(), format, out, interactive)
    }

    /// A session over an engine built elsewhere (restored from a checkpoint).
    pub fn with_engine(engine: Engine, format: Format, out: W, interactive: bool) -> Self {
        Session {
            engine,
            queries: Vec::new(),
            started: 0,
            format,
            out,
            interactive,
            reported: Vec::new(),
            output_dir: None,
            listed: Vec::new(),
            resuming: false,
            csv_owner: None,
            final_stats: false,
        }
    }

    /// At [`Session::finish`], print every stream's final accounting (`SHOW STREAM STATS`) on
    /// standard error, once the sources have been read to their end.
    pub fn print_final_stats(&mut self) {
        self.final_stats = true;
    }

    /// Writes each continuous query's changes to a file of its own in `dir` (created if
    /// missing): `query-N.csv` or `query-N.jsonl`, without the `_query` column, listed in
    /// `dir/queries.csv` (`query,file,sql`).
    pub fn set_output_dir(&mut self, dir: &Path) -> Result<(), Failure> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::Statement(format!("cannot create the directory {}: {e}", dir.display()))
        })?;
        self.output_dir = Some(dir.to_path_buf());
        Ok(())
    }

    /// Takes over the continuous queries a checkpoint restored (they print from the instant
    /// they resume at; output after the checkpoint may be printed again: file sinks, not
    /// standard output, are exactly-once).
    pub fn resume_parked(&mut self, parked: &[String]) -> Result<(), Failure> {
        self.resuming = true;
        for sql in parked {
            let resumed = self.engine.resume(sql).map_err(|e| Failure::Statement(e.to_string()));
            let shown =
                resumed.and_then(|(sub, _from)| self.show(ExecResult::Subscribed(sub), sql));
            if let Err(e) = shown {
                self.resuming = false;
                return Err(e);
            }
        }
        self.resuming = false;
        self.print_new_output()
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Switches the output format; running queries print their header in the new format.
    pub fn set_format(&mut self, format: Format) -> Result<(), Failure> {
        if format == self.format {
            return Ok(());
        }
        self.format = format;
        for q in &mut self.queries {
            if q.file.is_some() {
                continue;
            }
            let header = q.output.header(format)?;
            self.out.write_all(header.as_bytes())?;
        }
        self.out.flush()?;
        Ok(())
    }

    /// Runs the statements of `text`, whose first line is line `first_line` of the input.
    pub fn run_text(&mut self, text: &str, first_line: u64) -> Result<(), Failure> {
        let stmts = match weir_sql::parse_script(text) {
            Ok(stmts) => stmts,
            Err(e) => return Err(Failure::Statement(relocate(e, text, first_line))),
        };
        for stmt in stmts {
            // Kept for the output (`\queries`) and for an error without a position.
            let (sql, line) = (stmt.text.clone(), stmt.span.line);
            // No position in a message: say which statement failed.
            let at_statement = || {
                let mut lines = sql.lines();
                let first = lines.next().unwrap_or("").trim_end();
                let more = if lines.next().is_some() { " ..." } else { "" };
                let at = first_line.saturating_add(line.saturating_sub(1));
                format!("\n  at line {at}: {first}{more}")
            };
            let result = match self.engine.execute_statement(stmt) {
                Ok(r) => r,
                Err(e) => {
                    let located = matches!(
                        &e,
                        WeirError::Syntax(d) | WeirError::Plan(d) if d.span.is_some()
                    );
                    let mut msg = relocate(e, text, first_line);
                    if !located && !self.interactive {
                        msg.push_str(&at_statement());
                    }
                    self.out.flush()?;
                    return Err(Failure::Statement(msg));
                }
            };
            match self.show(result, &sql) {
                Err(Failure::Statement(mut msg)) if !self.interactive => {
                    msg.push_str(&at_statement());
                    self.out.flush()?;
                    return Err(Failure::Statement(msg));
                }
                shown => shown?,
            }
            self.print_new_output()?;
        }
        Ok(())
    }

    /// End of input: reads the streams' sources (to their end; a followed file or standard
    /// input until it ends or the process is interrupted), then closes every stream and prints
    /// what that completes.
    pub fn finish(&mut self) -> Result<(), Failure> {
        let progress = self.engine.source_progress();
        let mut bar = (io::stderr().is_terminal()
            && progress.iter().any(|p| p.bytes_total.is_some() || !p.unbounded))
        .then(|| crate::progress::LoadBar::new(&progress));
        let result = self.read_sources(&mut bar);
        if let Some(bar) = bar {
            bar.finish();
        }
        result?;
        // With a data directory, the final state is checkpointed too: a rerun then finds
        // nothing left to do and rewrites nothing.
        if self.engine.data_dir().is_some() {
            self.engine.close_all().map_err(|e| Failure::Statement(e.to_string()))?;
            self.print_new_output()?;
            self.engine.checkpoint().map_err(|e| Failure::Statement(e.to_string()))?;
        }
        self.engine.close_all().map_err(|e| Failure::Statement(e.to_string()))?;
        self.print_new_output()?;
        if self.final_stats {
            self.out.flush()?;
            let _ = io::stderr().write_all(self.final_accounting()?.as_bytes());
        }
        for (name, e) in self.engine.failures() {
            self.report(&format!("{name} failed: "), &e.to_string())?;
        }
        match self.reported.len() {
            0 => Ok(()),
            n => Err(Failure::Reported(n)),
        }
    }

    /// `SHOW STREAM STATS` as a table, headed for a reader of standard error.
    pub fn final_accounting(&mut self) -> Result<String, Failure> {
        let stats = self
            .engine
            .execute("SHOW STREAM STATS")
            .map_err(|e| Failure::Statement(e.to_string()))?;
        let mut text = String::from("weir: final accounting of every stream\n");
        for r in stats {
            if let ExecResult::Rows { schema, batches } = r {
                text.push_str(&output::rows(Format::Table, &schema, &batches)?);
            }
        }
        Ok(text)
    }

    /// Reports a failure on standard error (`error: {what}{message}`) unless the same message
    /// was reported already (a source's error reaches every query reading it). Interactive
    /// sessions report through their results instead.
    fn report(&mut self, what: &str, message: &str) -> Result<(), Failure> {
        if self.interactive || self.reported.iter().any(|m| m == message) {
            return Ok(());
        }
        self.reported.push(message.to_string());
        self.out.flush()?;
        let _ = writeln!(io::stderr(), "error: {what}{message}");
        Ok(())
    }

    /// Reads every source to its end (a followed file or stdin: until it ends or the process
    /// is interrupted), printing output as it comes. A source that fails is reported and the
    /// others go on.
    fn read_sources(&mut self, bar: &mut Option<crate::progress::LoadBar>) -> Result<(), Failure> {
        // Each read is one round of the workers; on a cluster of processes a round crosses
        // between them several times, so it takes in more per round (the output does not
        // depend on how the input is cut: docs/architecture.md, section 6).
        let budget = if self.engine.on_cluster() { 8 << 20 } else { 1 << 20 };
        loop {
            let polled = self.engine.poll_sources(budget);
            if let Err(e) = &polled {
                if self.interactive {
                    return Err(Failure::Statement(e.to_string()));
                }
                // Reported before the queries it fails, so their message is not repeated.
                self.report("", &e.to_string())?;
                if self.engine.checkpoint_failure().is_some() {
                    // Reading on would break the promise that a restart resumes exactly.
                    return Err(Failure::Reported(self.reported.len()));
                }
            }
            match bar {
                Some(b) => {
                    let printed = b.suspend(|| self.print_new_output());
                    printed?;
                    b.update(&self.engine.source_progress());
                }
                None => self.print_new_output()?,
            }
            let Ok(p) = polled else { continue };
            if p.live == 0 {
                return Ok(());
            }
            if p.idle() {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }

    fn show(&mut self, r: ExecResult, sql: &str) -> Result<(), Failure> {
        // A script's CSV on standard output is one query's: refuse what would follow it.
        let refuse = |text: &str, owner: Option<usize>| match owner {
            Some(n) if !text.is_empty() => Err(Failure::Statement(csv_taken(n))),
            _ => Ok(()),
        };
        let owner =
            if self.interactive || self.format != Format::Csv { None } else { self.csv_owner };
        let text = match r {
            ExecResult::Done(tag) => output::done(self.format, &tag, self.interactive),
            ExecResult::Rows { schema, batches } => output::rows(self.format, &schema, &batches)?,
            ExecResult::Explain(text) => output::explain(self.format, &text)?,
            ExecResult::Subscribed(sub) => {
                if let (Some(n), None) = (owner, &self.output_dir) {
                    self.engine.unsubscribe(sub.id);
                    return Err(Failure::Statement(csv_taken(n)));
                }
                for notice in &sub.notices {
                    if self.interactive {
                        self.out.write_all(format!("notice: {notice}\n").as_bytes())?;
                    } else {
                        self.out.flush()?;
                        let _ = writeln!(io::stderr(), "notice: {notice}");
                    }
                }
                self.started += 1;
                let number = self.started;
                let sql = sql.trim().trim_end_matches(';').trim_end().to_string();
                let mut output = QueryOutput::new(number, &sub);
                let mut file = None;
                let text = match self.output_dir.clone() {
                    Some(dir) => {
                        output = output.without_query_column();
                        let ext = if self.format == Format::Jsonl { "jsonl" } else { "csv" };
                        let name = format!("query-{number}.{ext}");
                        let header = output.header(self.format)?;
                        file = Some(QueryFile::open(dir.join(&name), self.resuming, &header)?);
                        self.listed.push((number, name, output::one_line(&sql)));
                        self.write_list(&dir)?;
                        String::new()
                    }
                    None => {
                        let mut header = output.header(self.format)?;
                        if !self.interactive && self.format == Format::Table {
                            // Which query `[N]` is, for a reader of a script's output.
                            header = format!("[{number}] {}\n{header}", output::one_line(&sql));
                        }
                        if !self.interactive && self.format == Format::Csv {
                            self.csv_owner = Some(number);
                        }
                        header
                    }
                };
                let contents =
                    self.interactive.then(|| Contents::new(sub.column_names(), sub.kind));
                self.queries.push(Running { sub, output, sql, file, contents });
                text
            }
        };
        refuse(&text, owner)?;
        self.out.write_all(text.as_bytes())?;
        Ok(())
    }

    /// Writes `dir/queries.csv`: the number, file and SQL of each query with a file there.
    fn write_list(&self, dir: &Path) -> Result<(), Failure> {
        let records = std::iter::once(["query".to_string(), "file".into(), "sql".into()]).chain(
            self.listed.iter().map(|(n, file, sql)| [n.to_string(), file.clone(), sql.clone()]),
        );
        let text = output::csv_records(records)?;
        let path = dir.join("queries.csv");
        std::fs::write(&path, text)
            .map_err(|e| Failure::Statement(format!("cannot write {}: {e}", path.display())))
    }

    /// Prints every change produced since the last call, query by query in start order. A
    /// query that failed is dropped; the first failure is returned after the others print.
    pub fn print_new_output(&mut self) -> Result<(), Failure> {
        let mut failures: Vec<(String, String)> = Vec::new();
        let format = self.format;
        let mut i = 0;
        while i < self.queries.len() {
            let q = &mut self.queries[i];
            match q.sub.poll() {
                Ok(batches) => {
                    let text = q.output.changes(format, &q.sub, &batches)?;
                    if let Some(contents) = &mut q.contents {
                        let mut changes = Vec::new();
                        for b in &batches {
                            changes.extend(
                                q.sub.changes(b).map_err(|e| Failure::Statement(e.to_string()))?,
                            );
                        }
                        contents.apply(changes);
                    }
                    match &mut q.file {
                        Some(f) => {
                            f.write(&text)?;
                            f.flush()?;
                        }
                        None => self.out.write_all(text.as_bytes())?,
                    }
                    if !q.sub.is_closed() {
                        i += 1;
                        continue;
                    }
                    // Ended: failed after this output (the error comes with the next poll),
                    // or a stream or table it read was dropped.
                    match q.sub.poll() {
                        Err(e) => failures
                            .push((format!("query {} failed: ", q.output.number), e.to_string())),
                        Ok(_) if self.interactive => {
                            let n = q.output.number;
                            writeln!(
                                self.out,
                                "[{n}] ended: a stream or table it read was dropped"
                            )?;
                        }
                        Ok(_) => {}
                    }
                    self.queries.remove(i);
                }
                Err(e) => {
                    failures.push((format!("query {} failed: ", q.output.number), e.to_string()));
                    self.queries.remove(i);
                }
            }
        }
        self.out.flush()?;
        if self.interactive {
            // The REPL shows the first failure as the result of what it was running.
            return match failures.into_iter().next() {
                Some((what, msg)) => Err(Failure::Statement(format!("{what}{msg}"))),
                None => Ok(()),
            };
        }
        // A script goes on: the failure is reported and the other queries keep running.
        for (what, msg) in failures {
            self.report(&what, &msg)?;
        }
        Ok(())
    }
}

impl<W: Write> Session<W> {
    /// The engine, for the REPL's catalog.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, for the REPL's meta-commands and the demo's generator.
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Where output goes.
    pub fn out_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The continuous queries still running, in start order.
    pub fn queries(&self) -> Vec<QueryInfo> {
        self.queries
            .iter()
            .map(|q| QueryInfo { number: q.output.number, sql: q.sql.clone() })
            .collect()
    }

    /// The table view of query `[number]` (see [`crate::tableview`]) for a terminal of
    /// `width` by `height`; `Err` with the reason once the query is not running.
    pub fn view_frame(&self, number: usize, width: usize, height: usize) -> Frame {
        let Some(q) = self.queries.iter().find(|q| q.output.number == number) else {
            return Err(format!(
                "[{number}] is not running any more (stopped, failed, or its input was \
                 dropped): q to go back"
            ));
        };
        let sql = output::one_line(&q.sql);
        match &q.contents {
            Some(c) => Ok(c.render(number, &sql, width, height)),
            None => Err(format!("[{number}] {sql}: its output goes to a file")),
        }
    }

    /// Stops continuous query `[number]`; its output not yet printed is dropped. Whether it
    /// was running.
    pub fn stop(&mut self, number: usize) -> bool {
        let Some(i) = self.queries.iter().position(|q| q.output.number == number) else {
            return false;
        };
        let q = self.queries.remove(i);
        self.engine.unsubscribe(q.sub.id);
        true
    }

    /// Stops the most recently started continuous query still running; its number.
    pub fn stop_latest(&mut self) -> Option<usize> {
        let number = self.queries.last()?.output.number;
        self.stop(number);
        Some(number)
    }
}

/// Renders an error about `chunk`, whose first line is line `first_line` of the input: a
/// syntax error from parsing it, or an error from executing one of its statements (whose
/// spans refer to `chunk`, with no source attached). Positions and the caret line then refer
/// to the input. (The input is only padded to its line here, when there is an error to show.)
/// An error that carries a source of its own (text the engine made up and parsed itself)
/// is shown as it is.
fn relocate(mut e: WeirError, chunk: &str, first_line: u64) -> String {
    if let WeirError::Syntax(d) | WeirError::Plan(d) = &mut e {
        if d.source.as_deref().is_none_or(|s| s == chunk) {
            let lines_before = first_line.saturating_sub(1);
            if let Some(span) = d.span.as_mut() {
                span.line = span.line.saturating_add(lines_before);
                span.end_line = span.end_line.saturating_add(lines_before);
            }
            let pad = usize::try_from(lines_before).unwrap_or(0);
            d.source = Some(format!("{}{chunk}", "\n".repeat(pad)));
        }
    }
    e.to_string()
}

/// Whether text typed so far ends a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completeness {
    /// Only whitespace and comments.
    Empty,
    /// More is needed: no final `;`, or inside a string, quoted name or comment.
    Incomplete,
    /// Ends with `;` (or cannot be tokenized at all: running it reports the error).
    Complete,
}

pub fn completeness(text: &str) -> Completeness {
    let dialect = GenericDialect {};
    match Tokenizer::new(&dialect, text).tokenize() {
        Ok(tokens) => match tokens.iter().rev().find(|t| !matches!(t, Token::Whitespace(_))) {
            None => Completeness::Empty,
            Some(Token::SemiColon) => Completeness::Complete,
            Some(_) => Completeness::Incomplete,
        },
        Err(e) if e.message.contains("Unterminated") || e.message.contains("EOF") => {
            Completeness::Incomplete
        }
        Err(_) => Completeness::Complete,
    }
}

/// Runs statements as they arrive on `input` (a file, a pipe), each as soon as its `;` is
/// read, then closes every stream at the end of input.
pub fn run_lines<R: BufRead, W: Write>(session: &mut Session<W>, input: R) -> Result<(), Failure> {
    for_each_statement(input, |text, first_line| session.run_text(text, first_line))?;
    session.finish()
}

/// Reads `input` a line at a time and calls `run(text, first_line)` as soon as the lines read
/// so far end a statement (`text` may hold several statements sharing a line), and once more
/// for what is left at the end. Stops at the first error.
pub fn for_each_statement<R: BufRead>(
    mut input: R,
    mut run: impl FnMut(&str, u64) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let mut buf = String::new();
    let mut first_line = 1u64;
    let mut line = String::new();
    loop {
        line.clear();
        let n = input
            .read_line(&mut line)
            .map_err(|e| Failure::Statement(format!("cannot read the input: {e}")))?;
        if n == 0 {
            break;
        }
        buf.push_str(&line);
        // Only a line with a `;` can end a statement (this keeps long statements linear).
        if !line.contains(';') {
            continue;
        }
        match completeness(&buf) {
            Completeness::Incomplete => continue,
            Completeness::Empty | Completeness::Complete => {
                let lines = buf.matches('\n').count() as u64;
                run(&buf, first_line)?;
                first_line += lines;
                buf.clear();
            }
        }
    }
    if !buf.trim().is_empty() {
        run(&buf, first_line)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completeness_follows_semicolons_strings_and_comments() {
        assert_eq!(completeness(""), Completeness::Empty);
        assert_eq!(completeness("  -- just a comment\n"), Completeness::Empty);
        assert_eq!(completeness("SELECT 1"), Completeness::Incomplete);
        assert_eq!(completeness("SELECT 1;"), Completeness::Complete);
        assert_eq!(completeness("SELECT 1; -- done\n"), Completeness::Complete);
        assert_eq!(completeness("SELECT 1; SELECT"), Completeness::Incomplete);
        assert_eq!(completeness("SELECT 'a;"), Completeness::Incomplete);
        assert_eq!(completeness("SELECT 'a;';"), Completeness::Complete);
        assert_eq!(completeness("SELECT /* ; "), Completeness::Incomplete);
        assert_eq!(completeness("SELECT \"a;"), Completeness::Incomplete);
    }

    fn run(script: &str, format: Format) -> (String, Option<String>) {
        let mut s = Session::new(format, Vec::new(), false);
        let err = match s.run_text(script, 1).and_then(|()| s.finish()) {
            Ok(()) => None,
            Err(Failure::Statement(m)) => Some(m),
            Err(Failure::Output(e)) => Some(e.to_string()),
            Err(Failure::Reported(_)) => Some(s.reported.join("\n")),
        };
        (String::from_utf8(s.out).unwrap(), err)
    }

    #[test]
    fn output_follows_the_statement_that_causes_it() {
        let (out, err) = run(
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
             SELECT a FROM s WHERE a > 1;\n\
             INSERT INTO s VALUES (1, 1), (3, 1);\n\
             INSERT INTO s VALUES (2, 2);",
            Format::Table,
        );
        assert_eq!(err, None);
        assert_eq!(
            out,
            "[1] SELECT a FROM s WHERE a > 1\n[1] _time | a\n[1] 1     | 3\n[1] 2     | 2\n"
        );
    }

    #[test]
    fn errors_point_into_the_script() {
        let (_, err) = run(
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\nSELECT b FROM s;",
            Format::Table,
        );
        let err = err.unwrap();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("\n  SELECT b FROM s;\n"), "{err}");
        let (_, err) = run(
            "CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);\n\
             CLOSE s;\nINSERT INTO s VALUES (1, 1);",
            Format::Table,
        );
        let err = err.unwrap();
        assert!(err.ends_with("\n  at line 3: INSERT INTO s VALUES (1, 1)"), "{err}");
    }

    #[test]
    fn errors_in_a_later_statement_and_line_of_a_chunk() {
        let mut s = Session::new(Format::Table, Vec::new(), true);
        s.run_text("CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);", 1).unwrap();
        // A chunk read from line 5 of the input: its statements' spans are moved down 4 lines.
        let err = match s.run_text("SELECT 1 AS one; SELECT a,\n  zz FROM s;", 5) {
            Err(Failure::Statement(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(err, "column 'zz' not found at line 6, column 3\n    zz FROM s;\n    ^^");
        let err = match s.run_text("SELECT a FROM s; SELECT zz FROM s;", 2) {
            Err(Failure::Statement(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err,
            "column 'zz' not found at line 2, column 25\n  \
             SELECT a FROM s; SELECT zz FROM s;\n                          ^^"
        );
    }

    #[test]
    fn a_new_format_prints_the_headers_again() {
        let mut s = Session::new(Format::Table, Vec::new(), true);
        s.run_text("CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);", 1).unwrap();
        s.run_text("SELECT a FROM s;", 1).unwrap();
        s.set_format(Format::Csv).unwrap();
        s.set_format(Format::Csv).unwrap();
        s.run_text("INSERT INTO s VALUES (4, 1), (5, 2);", 1).unwrap();
        assert_eq!(
            String::from_utf8(s.out).unwrap(),
            "CREATE STREAM\n[1] _time | a\n_query,_time,a\n1,1,4\n"
        );
    }

    #[test]
    fn queries_stop_one_by_one_and_end_with_their_stream() {
        let mut s = Session::new(Format::Table, Vec::new(), true);
        s.run_text("CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);", 1).unwrap();
        s.run_text("SELECT a FROM s;\nSELECT ISTREAM a * 10 AS b FROM s;", 1).unwrap();
        let sqls: Vec<String> = s.queries().into_iter().map(|q| q.sql).collect();
        assert_eq!(sqls, ["SELECT a FROM s", "SELECT ISTREAM a * 10 AS b FROM s"]);
        assert_eq!(s.stop_latest(), Some(2));
        assert!(!s.stop(2));
        s.out.clear();
        s.run_text("INSERT INTO s VALUES (4, 1), (5, 2);", 1).unwrap();
        assert_eq!(
            String::from_utf8(std::mem::take(&mut s.out)).unwrap(),
            "INSERT 2\n[1] 1     | 4\n"
        );
        s.run_text("DROP STREAM s;", 1).unwrap();
        assert_eq!(
            String::from_utf8(std::mem::take(&mut s.out)).unwrap(),
            "DROP STREAM\n[1] ended: a stream or table it read was dropped\n"
        );
        assert!(s.queries().is_empty());
        assert_eq!(s.stop_latest(), None);
    }

    /// A query started over a stream that has ended says so instead of printing a header
    /// and then nothing; one over a stream still open does not.
    #[test]
    fn a_query_over_an_ended_stream_gets_a_notice() {
        let mut s = Session::new(Format::Table, Vec::new(), true);
        s.run_text("CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t);", 1).unwrap();
        s.run_text("SELECT a FROM s;", 1).unwrap();
        let first = String::from_utf8(std::mem::take(&mut s.out)).unwrap();
        assert!(!first.contains("notice"), "{first}");
        s.run_text("INSERT INTO s VALUES (1, 1); CLOSE s;", 1).unwrap();
        s.out.clear();
        s.run_text("SELECT ISTREAM a FROM s;", 1).unwrap();
        let second = String::from_utf8(std::mem::take(&mut s.out)).unwrap();
        assert!(
            second.starts_with(
                "notice: stream 's' has ended (it was closed): this query sees none of its elements"
            ),
            "{second}"
        );
    }

    #[test]
    fn statements_run_as_lines_arrive() {
        let mut s = Session::new(Format::Csv, Vec::new(), false);
        let input = "CREATE STREAM s (a BIGINT, t BIGINT,\n  WATERMARK FOR t AS t);\n\
                     SELECT ISTREAM a FROM s [RANGE 1]; INSERT INTO s VALUES (7, 1);\n\
                     -- trailing comment, no semicolon\nADVANCE s TO 3";
        run_lines(&mut s, input.as_bytes()).map_err(|e| format!("{e:?}")).unwrap();
        assert_eq!(String::from_utf8(s.out).unwrap(), "_query,_time,a\n1,1,7\n");
    }
}
