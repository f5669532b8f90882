//! The interactive shell: `weir> ` prompts, statements ended by `;` (continued on `  ..> `
//! lines), tab completion, backslash commands, history in `$XDG_DATA_HOME/weir/history`, and
//! continuous queries whose output appears live above the prompt.
//!
//! Threads: the main thread reads lines and runs statements; a ticker polls the running
//! queries ten times a second (and, in `weir demo`, pushes the generated bids); a printer owns
//! rustyline's `ExternalPrinter`, so output arriving while the user types is printed above the
//! prompt, which is then drawn again with what was typed. The engine is shared behind a mutex
//! and everything printed goes through the printer, in the order it was produced.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use rustyline::config::Configurer;
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{
    Cmd, CompletionType, ConditionalEventHandler, Config, Editor, Event, EventContext,
    EventHandler, ExternalPrinter, KeyEvent, RepeatCount,
};

use weir::CatalogObject;

use crate::complete::{column_names, kind_name, Catalog, SqlHelper};
use crate::demo;
use crate::output::{self, Format};
use crate::progress;
use crate::script::{completeness, Completeness};
use crate::script::{for_each_statement, Failure, Session};
use crate::tableview;

const PROMPT: &str = "weir> ";
const CONTINUE: &str = "  ..> ";

/// This many undecodable lines in a row end the shell (the terminal is not sending text).
const MAX_BAD_INPUT: u32 = 100;

/// How often running queries are polled for output.
const TICK: Duration = Duration::from_millis(100);

pub const HELP: &str = "\
Type SQL ending with ';' (a statement may span lines; Tab completes keywords, names and
columns). A continuous query (a SELECT over a stream) keeps running and prints each change
as it happens, tagged [N]: its instant and, for a relation, +1/-1. Meanwhile you can type
more statements; their effects show up in the live output.

  Ctrl-C             stop the latest continuous query (or clear what you are typing)
  Ctrl-D, \\q         quit
  \\help, \\?          this help
  \\d                 list streams, tables and views
  \\d NAME            describe one: columns, types, event time
  \\queries           list the running continuous queries
  \\stop [N|all]      stop query [N], all of them, or the latest
  \\view [N]          query [N]'s (or the latest's) current result as a table, updated in
                     place as it changes; q to come back
  \\timing [on|off]   show how long each statement takes
  \\format [F]        show or set the output format: table, csv or jsonl
  \\i FILE            run the statements of a file in this session

SQL reference: docs/sql.md. This shell: docs/repl.md.
";

/// The commands, for the message about an unknown one.
const COMMAND_LIST: &str = "\\d [NAME], \\queries, \\stop [N|all], \\view [N], \
                            \\timing [on|off], \\format [table|csv|jsonl], \\i FILE, \\help, \\q";

/// Where history is kept: `$XDG_DATA_HOME/weir/history`, else
/// `$HOME/.local/share/weir/history`.
pub fn history_path() -> Option<PathBuf> {
    let non_empty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    let data = non_empty("XDG_DATA_HOME")
        .or_else(|| non_empty("HOME").map(|h| h.join(".local").join("share")))?;
    Some(data.join("weir").join("history"))
}

/// Which queries `\stop` stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Latest,
    All,
    Number(usize),
}

/// A backslash command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Meta {
    Help,
    Quit,
    Describe(Option<String>),
    Queries,
    Stop(Stop),
    /// `None`: the latest query.
    View(Option<usize>),
    /// `None`: toggle.
    Timing(Option<bool>),
    /// `None`: show the current one.
    Format(Option<Format>),
    Include(PathBuf),
}

/// Parses a line starting with `\`; an error is the message to print.
fn parse_command(line: &str) -> Result<Meta, String> {
    let line = line.trim();
    let (name, rest) = match line.find(char::is_whitespace) {
        Some(i) => (&line[..i], line[i..].trim()),
        None => (line, ""),
    };
    let no_arg = |m: Meta| {
        if rest.is_empty() {
            Ok(m)
        } else {
            Err(format!("{name} takes no argument"))
        }
    };
    match name {
        "\\q" | "\\quit" => no_arg(Meta::Quit),
        "\\help" | "\\h" | "\\?" => no_arg(Meta::Help),
        "\\queries" => no_arg(Meta::Queries),
        "\\d" | "\\describe" => {
            let name = rest.trim_end_matches(';').trim_end();
            if name.contains(';') || (!name.starts_with('"') && name.contains(char::is_whitespace))
            {
                return Err(format!("\\d takes one name, not '{rest}'"));
            }
            Ok(Meta::Describe((!name.is_empty()).then(|| name.to_string())))
        }
        "\\stop" => match rest {
            "" => Ok(Meta::Stop(Stop::Latest)),
            "all" => Ok(Meta::Stop(Stop::All)),
            n => n
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map(|n| Meta::Stop(Stop::Number(n)))
                .map_err(|_| format!("\\stop takes a query number, 'all' or nothing, not '{n}'")),
        },
        "\\view" if rest.is_empty() => Ok(Meta::View(None)),
        "\\view" => rest
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map(|n| Meta::View(Some(n)))
            .map_err(|_| format!("\\view takes a query number or nothing, not '{rest}'")),
        "\\timing" => match rest.to_ascii_lowercase().as_str() {
            "" => Ok(Meta::Timing(None)),
            "on" => Ok(Meta::Timing(Some(true))),
            "off" => Ok(Meta::Timing(Some(false))),
            _ => Err(format!("\\timing takes on, off or nothing, not '{rest}'")),
        },
        "\\format" if rest.is_empty() => Ok(Meta::Format(None)),
        "\\format" => rest.parse().map(|f| Meta::Format(Some(f))),
        "\\i" | "\\include" if rest.is_empty() => Err("\\i needs a file: \\i FILE.sql".into()),
        "\\i" | "\\include" => Ok(Meta::Include(expand_path(rest))),
        _ => Err(format!("unknown command '{name}'. The commands are: {COMMAND_LIST}")),
    }
}

/// A path as typed: quotes removed, a leading `~/` for the home directory.
fn expand_path(s: &str) -> PathBuf {
    let s = s.trim();
    let s = s
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
        .unwrap_or(s);
    match (s.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(s),
    }
}

/// `\d`'s table: each stream (then its companions), table and view, with its kind, columns
/// and what `SHOW` says of it.
fn listing(catalog: &Catalog, format: Format) -> String {
    if catalog.objects.is_empty() {
        return "Nothing yet: create a stream with CREATE STREAM (see \\help and docs/sql.md).\n"
            .to_string();
    }
    let column = |f: &dyn Fn(&CatalogObject) -> String| -> ArrayRef {
        Arc::new(StringArray::from(catalog.objects.iter().map(f).collect::<Vec<_>>()))
    };
    let columns = vec![
        column(&|o| o.name.clone()),
        column(&|o| kind_name(o.kind).to_string()),
        column(&|o| column_names(o).collect::<Vec<_>>().join(", ")),
        column(&|o| o.details.clone()),
    ];
    let schema = Arc::new(Schema::new(
        ["name", "kind", "columns", "details"]
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, false))
            .collect::<Vec<_>>(),
    ));
    let rendered = RecordBatch::try_new(schema.clone(), columns)
        .map_err(anyhow::Error::from)
        .and_then(|b| output::rows(format, &schema, &[b]));
    match rendered {
        Ok(s) => s,
        Err(e) => format!("error: {e:#}\n"),
    }
}

/// What the main thread and the ticker share.
struct Shared {
    session: Session<Vec<u8>>,
    demo: Option<demo::Generator>,
}

type SharedRef = Arc<Mutex<Shared>>;

/// Locks the shared state. If a thread panicked while holding it (a bug), the shell carries on
/// with the state as it is rather than losing the session.
fn lock(shared: &SharedRef) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// What the session printed since the last call.
    fn take_output(&mut self) -> String {
        let bytes = std::mem::take(self.session.out_mut());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

enum Message {
    Text(String),
    /// `true`: keep what is sent from now on (the table view has the screen); `false`: print
    /// what was kept, and go on printing.
    Hold(bool),
    /// Answered once everything sent before has been printed.
    Sync(Sender<()>),
}

/// The thread that prints everything, through rustyline's `ExternalPrinter` when there is one
/// (the text then appears above the prompt and the line being edited), or straight to
/// standard output.
struct Printer {
    tx: Sender<Message>,
    thread: Option<JoinHandle<()>>,
}

impl Printer {
    fn start(editor: &mut Editor<SqlHelper, FileHistory>) -> Printer {
        let (tx, rx) = mpsc::channel::<Message>();
        let thread = match editor.create_external_printer() {
            Ok(mut p) => thread::spawn(move || {
                printer_loop(rx, |s| {
                    let _ = p.print(s);
                })
            }),
            // Not a terminal: nothing to draw around.
            Err(_) => thread::spawn(move || {
                printer_loop(rx, |s| {
                    let mut out = io::stdout().lock();
                    let _ = out.write_all(s.as_bytes());
                    let _ = out.flush();
                })
            }),
        };
        Printer { tx, thread: Some(thread) }
    }

    fn sender(&self) -> Sender<Message> {
        self.tx.clone()
    }

    fn print(&self, text: String) {
        if !text.is_empty() {
            let _ = self.tx.send(Message::Text(text));
        }
    }

    /// While held, what is printed is kept, and printed when released.
    fn hold(&self, on: bool) {
        let _ = self.tx.send(Message::Hold(on));
    }

    /// Waits (a little) until everything sent so far is printed, so a prompt drawn next comes
    /// after it.
    fn sync(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Message::Sync(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(2));
        }
    }

    /// Prints what is left and stops.
    fn finish(mut self) {
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Output kept while the table view has the screen is bounded: beyond this many bytes, the
/// rest is counted rather than kept.
const HELD_BYTES: usize = 1 << 20;

fn printer_loop(rx: Receiver<Message>, mut print: impl FnMut(String)) {
    // While the table view is shown: what to print after it, and how many lines did not fit.
    let mut held: Option<(String, usize)> = None;
    for m in rx {
        match m {
            Message::Text(s) => match &mut held {
                None => print(s),
                Some((kept, dropped)) if kept.len() + s.len() > HELD_BYTES => {
                    *dropped += s.lines().count();
                }
                Some((kept, _)) => kept.push_str(&s),
            },
            Message::Hold(true) => held = held.or(Some((String::new(), 0))),
            Message::Hold(false) => {
                if let Some((mut kept, dropped)) = held.take() {
                    if dropped > 0 {
                        kept.push_str(&format!(
                            "({dropped} more line(s) of live output while the table view was \
                             open were not kept)\n"
                        ));
                    }
                    if !kept.is_empty() {
                        print(kept);
                    }
                }
            }
            Message::Sync(ack) => {
                let _ = ack.send(());
            }
        }
    }
}

/// The ticker: polls the running queries, and pushes the demo's bids.
struct Ticker {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Ticker {
    fn start(shared: SharedRef, printer: Sender<Message>) -> Ticker {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::spawn(move || loop {
            match stopped.recv_timeout(TICK) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let mut g = lock(&shared);
            let mut note = String::new();
            let Shared { session, demo } = &mut *g;
            if let Some(generator) = demo.as_mut() {
                if let Err(e) = generator.tick(session.engine_mut(), demo::now_ms()) {
                    note = format!("demo: no more bids: {e}\n");
                    *demo = None;
                }
            }
            // Sources read in the background, a bounded slice of time per tick.
            let started = std::time::Instant::now();
            let mut source_error = None;
            loop {
                match session.engine_mut().poll_sources(1 << 20) {
                    Ok(p) if !p.idle() && started.elapsed() < TICK / 2 => continue,
                    Ok(_) => break,
                    Err(e) => {
                        source_error = Some(e);
                        break;
                    }
                }
            }
            let result = session.print_new_output();
            let mut text = g.take_output();
            if let Some(e) = source_error {
                text.push_str(&format!("error: {e}\n"));
            }
            if let Err(Failure::Statement(msg)) = result {
                text.push_str(&format!("error: {msg}\n"));
            }
            text.push_str(&note);
            // Sent while holding the lock: output stays in the order it was produced.
            if !text.is_empty() && printer.send(Message::Text(text)).is_err() {
                return;
            }
        });
        Ticker { stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Records whether the line was empty when Ctrl-C was pressed, then lets it interrupt.
struct CtrlC(Arc<AtomicBool>);

impl ConditionalEventHandler for CtrlC {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        self.0.store(ctx.line().is_empty(), Ordering::SeqCst);
        None
    }
}

/// The shell's state outside the line editor.
struct Shell {
    shared: SharedRef,
    printer: Printer,
    timing: bool,
    /// Set by Ctrl-C pressed while a statement runs (not while editing, where it is a key).
    interrupted: Arc<AtomicBool>,
}

impl Shell {
    /// Runs SQL text (whose first line is line `first_line` of its source); prints its output,
    /// or the error, and the time taken with `\timing`. Whether it succeeded.
    fn run_sql(&self, text: &str, first_line: u64, source: Option<&Path>) -> bool {
        let mut g = lock(&self.shared);
        let start = Instant::now();
        let result = g.session.run_text(text, first_line);
        let elapsed = start.elapsed();
        let mut out = g.take_output();
        let ok = match result {
            Ok(()) => true,
            Err(f) => {
                let msg = match f {
                    Failure::Statement(m) => m,
                    Failure::Output(e) => e.to_string(),
                    Failure::Reported(n) => format!("{n} failure(s), reported above"),
                };
                match source {
                    Some(p) => out.push_str(&format!("error: {}: {msg}\n", p.display())),
                    None => out.push_str(&format!("error: {msg}\n")),
                }
                false
            }
        };
        if self.timing {
            out.push_str(&format!("Time: {:.3} ms\n", elapsed.as_secs_f64() * 1000.0));
        }
        // Sent while holding the lock, so nothing the ticker prints can overtake it.
        self.printer.print(out);
        drop(g);
        if ok {
            self.load_sources();
        }
        ok
    }

    /// Reads the files a statement started loading in the foreground, with a progress bar;
    /// output printed meanwhile appears above it. Ctrl-C leaves the rest to the background.
    fn load_sources(&self) {
        // A source starts on its first poll once a query reads its stream: start them here,
        // so that the bar does not depend on whether the ticker got there first.
        let progress = {
            let mut g = lock(&self.shared);
            let engine = g.session.engine_mut();
            let waiting = engine.source_progress().iter().any(|p| !p.started);
            if waiting {
                let _ = engine.poll_sources(0);
            }
            engine.source_progress()
        };
        if progress::loading(&progress).is_empty() {
            return;
        }
        self.interrupted.store(false, Ordering::SeqCst);
        let mut bar = progress::LoadBar::new(&progress);
        loop {
            let mut g = lock(&self.shared);
            let polled = g.session.engine_mut().poll_sources(1 << 20);
            let printed = g.session.print_new_output();
            let mut out = g.take_output();
            if let Err(Failure::Statement(msg)) = printed {
                out.push_str(&format!("error: {msg}\n"));
            }
            if let Err(e) = &polled {
                out.push_str(&format!("error: {e}\n"));
            }
            let progress = g.session.engine_mut().source_progress();
            drop(g);
            if !out.is_empty() {
                bar.suspend(|| {
                    self.printer.print(out);
                    self.printer.sync();
                });
            }
            bar.update(&progress);
            if progress::loading(&progress).is_empty() {
                break;
            }
            if self.interrupted.swap(false, Ordering::SeqCst) {
                bar.suspend(|| {
                    self.printer.print("(loading goes on in the background)\n".into());
                    self.printer.sync();
                });
                break;
            }
            if matches!(polled, Ok(p) if p.idle()) {
                thread::sleep(Duration::from_millis(20));
            }
        }
        bar.finish();
    }

    fn catalog(&self) -> Catalog {
        Catalog::load(lock(&self.shared).session.engine())
    }

    fn format(&self) -> Format {
        lock(&self.shared).session.format()
    }

    /// Ctrl-C at an empty prompt: stops the latest continuous query.
    fn stop_latest(&self) {
        let mut g = lock(&self.shared);
        let text = match g.session.stop_latest() {
            Some(n) => {
                let left = g.session.queries().len();
                if left == 0 {
                    format!("[{n}] stopped\n")
                } else {
                    format!("[{n}] stopped ({left} still running: \\queries lists them)\n")
                }
            }
            None => "(no query is running: \\q or Ctrl-D quits)\n".to_string(),
        };
        self.printer.print(text);
    }

    /// Runs a backslash command; `false` to quit.
    fn command(&mut self, meta: Meta) -> bool {
        let text = match meta {
            Meta::Quit => return false,
            Meta::Help => HELP.to_string(),
            Meta::Timing(on) => {
                self.timing = on.unwrap_or(!self.timing);
                format!("Timing is {}.\n", if self.timing { "on" } else { "off" })
            }
            Meta::Format(None) => format!("format: {}\n", self.format()),
            Meta::Format(Some(f)) => {
                let mut g = lock(&self.shared);
                let result = g.session.set_format(f);
                let mut out = g.take_output();
                if let Err(Failure::Statement(msg)) = result {
                    out.push_str(&format!("error: {msg}\n"));
                }
                out.push_str(&format!("format: {f}\n"));
                out
            }
            Meta::Queries => {
                let queries = lock(&self.shared).session.queries();
                if queries.is_empty() {
                    "No continuous query is running.\n".to_string()
                } else {
                    let mut s = String::new();
                    for q in queries {
                        let sql = q.sql.split_whitespace().collect::<Vec<_>>().join(" ");
                        s.push_str(&format!("[{}] {sql}\n", q.number));
                    }
                    s
                }
            }
            Meta::Stop(which) => self.stop(which),
            Meta::View(which) => self.view(which),
            Meta::Describe(None) => self.list(),
            Meta::Describe(Some(name)) => {
                // The name as in SQL: case-insensitive unless double-quoted.
                self.run_sql(&format!("DESCRIBE {name};"), 1, None);
                return true;
            }
            Meta::Include(path) => {
                self.include(&path);
                return true;
            }
        };
        self.printer.print(text);
        true
    }

    fn stop(&self, which: Stop) -> String {
        let mut g = lock(&self.shared);
        let numbers: Vec<usize> = match which {
            Stop::Latest => g.session.queries().last().map(|q| q.number).into_iter().collect(),
            Stop::All => g.session.queries().iter().map(|q| q.number).collect(),
            Stop::Number(n) => vec![n],
        };
        if numbers.is_empty() {
            return "No continuous query is running.\n".to_string();
        }
        let mut out = String::new();
        for n in numbers {
            if g.session.stop(n) {
                out.push_str(&format!("[{n}] stopped\n"));
            } else {
                out.push_str(&format!("error: no query [{n}] is running (\\queries lists them)\n"));
            }
        }
        out
    }

    /// `\view [N]`: the table view of a query, until q. The live output printed meanwhile is
    /// kept and printed after it.
    fn view(&self, which: Option<usize>) -> String {
        let number = {
            let g = lock(&self.shared);
            let queries = g.session.queries();
            match which {
                None => match queries.last() {
                    Some(q) => q.number,
                    None => return "No continuous query is running.\n".to_string(),
                },
                Some(n) if queries.iter().any(|q| q.number == n) => n,
                Some(n) => {
                    return format!("error: no query [{n}] is running (\\queries lists them)\n")
                }
            }
        };
        self.printer.sync();
        self.printer.hold(true);
        let shown = tableview::show(
            |width, height| lock(&self.shared).session.view_frame(number, width, height),
            TICK,
        );
        self.printer.hold(false);
        match shown {
            Ok(()) => String::new(),
            Err(e) => format!("error: {e}\n"),
        }
    }

    /// `\d`: every stream, table and view, as one table.
    fn list(&self) -> String {
        listing(&self.catalog(), self.format())
    }

    /// `\i FILE`: runs its statements in order, stopping at the first error or at Ctrl-C.
    /// Streams stay open (unlike `weir run`).
    fn include(&self, path: &Path) {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) => {
                self.printer.print(format!("error: cannot read {}: {e}\n", path.display()));
                return;
            }
        };
        self.interrupted.store(false, Ordering::SeqCst);
        let result = for_each_statement(io::BufReader::new(file), |text, first_line| {
            if self.interrupted.load(Ordering::SeqCst) {
                return Err(Failure::Statement(
                    "stopped by Ctrl-C (the statements before this point have run)".into(),
                ));
            }
            if self.run_sql(text, first_line, Some(path)) {
                Ok(())
            } else {
                // Already reported.
                Err(Failure::Output(io::Error::other("stopped")))
            }
        });
        match result {
            Ok(()) => {}
            Err(Failure::Statement(msg)) => {
                self.printer.print(format!("{}: {msg}\n", path.display()));
            }
            Err(Failure::Output(_) | Failure::Reported(_)) => {}
        }
    }
}

/// Runs the REPL until `\q` or Ctrl-D; with `demo`, with the demo's bids flowing.
pub fn run(args: &crate::args::Args, demo: bool) -> anyhow::Result<()> {
    let format = args.format;
    let config = Config::builder()
        .max_history_size(10_000)?
        .history_ignore_dups(true)?
        .auto_add_history(false)
        .completion_type(CompletionType::List)
        .build();
    let mut editor: Editor<SqlHelper, FileHistory> = Editor::with_config(config)?;
    editor.set_helper(Some(SqlHelper::new()));
    editor.set_auto_add_history(false);
    let line_was_empty = Arc::new(AtomicBool::new(true));
    editor.bind_sequence(
        KeyEvent::ctrl('C'),
        EventHandler::Conditional(Box::new(CtrlC(line_was_empty.clone()))),
    );
    let history = history_path();
    if let Some(h) = &history {
        // No history yet is normal.
        let _ = editor.load_history(h);
    }
    let mut intro =
        format!("Weir {} (type \\help for help, \\q to quit)\n", env!("CARGO_PKG_VERSION"));
    let mut session = match &args.data_dir {
        None => {
            let mut engine = weir::Engine::new();
            crate::place_workers(&mut engine, args)?;
            engine.set_memory_limit(args.memory_limit);
            Session::with_engine(engine, format, Vec::new(), true)
        }
        Some(dir) => {
            let (mut engine, recovery) = match &args.cluster {
                Some(c) => weir::Engine::open_on_cluster(dir, c)?,
                None => weir::Engine::open_with_workers(dir, args.workers)?,
            };
            engine.set_checkpoint_interval(args.checkpoint_interval);
            engine.set_memory_limit(args.memory_limit);
            engine.set_wal(args.wal)?;
            if recovery.replayed > 0 {
                intro.push_str(&format!(
                    "replayed {} records of pushed input from the write-ahead log\n",
                    recovery.replayed
                ));
            }
            for w in &recovery.warnings {
                intro.push_str(&format!("warning: {w}\n"));
            }
            let mut session = Session::with_engine(engine, format, Vec::new(), true);
            if let Some(n) = recovery.checkpoint {
                intro.push_str(&format!("resumed from checkpoint {n} in {}\n", dir.display()));
                if let Err(Failure::Statement(e)) = session.resume_parked(&recovery.parked) {
                    intro.push_str(&format!("error: {e}\n"));
                }
                intro.push_str(&String::from_utf8_lossy(&std::mem::take(session.out_mut())));
            }
            session
        }
    };
    let generator = if demo {
        if let Err(Failure::Statement(e)) = session.run_text(demo::SETUP, 1) {
            anyhow::bail!("the demo cannot start: {e}");
        }
        session.out_mut().clear();
        intro.push_str(demo::INTRO);
        Some(demo::Generator::new(demo::SEED, demo::now_ms()))
    } else {
        None
    };
    let shared = Arc::new(Mutex::new(Shared { session, demo: generator }));
    let printer = Printer::start(&mut editor);
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        // Ctrl-C while a statement runs must not kill the shell. (If a handler cannot be
        // installed, Ctrl-C outside the line editor ends the process, as before.)
        let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    }
    let ticker = Ticker::start(shared.clone(), printer.sender());
    let mut shell = Shell { shared, printer, timing: false, interrupted };
    shell.printer.print(intro);
    shell.printer.sync();

    let mut buf = String::new();
    let mut result = Ok(());
    // Consecutive lines of bad input: a terminal that only produces errors ends the shell.
    let mut bad_input = 0;
    loop {
        if let Some(h) = editor.helper_mut() {
            h.catalog = shell.catalog();
            h.pending = if buf.is_empty() { String::new() } else { format!("{buf}\n") };
        }
        let prompt = if buf.is_empty() { PROMPT } else { CONTINUE };
        line_was_empty.store(true, Ordering::SeqCst);
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                if buf.is_empty() && line_was_empty.load(Ordering::SeqCst) {
                    shell.stop_latest();
                    shell.printer.sync();
                }
                buf.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            // Bytes that are not UTF-8 (a stray paste): drop the line and go on.
            Err(ReadlineError::Io(e))
                if e.kind() == io::ErrorKind::InvalidData && bad_input < MAX_BAD_INPUT =>
            {
                bad_input += 1;
                shell
                    .printer
                    .print("error: the line was not valid UTF-8; it was discarded\n".into());
                shell.printer.sync();
                continue;
            }
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        bad_input = 0;
        if buf.is_empty() && line.trim_start().starts_with('\\') {
            let _ = editor.add_history_entry(line.trim());
            let go_on = match parse_command(&line) {
                Ok(meta) => shell.command(meta),
                Err(msg) => {
                    shell.printer.print(format!("error: {msg}\n"));
                    true
                }
            };
            shell.printer.sync();
            if !go_on {
                break;
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
        shell.run_sql(&buf, 1, None);
        shell.printer.sync();
        buf.clear();
    }
    ticker.stop();
    let Shell { printer, .. } = shell;
    printer.finish();
    if let Some(h) = &history {
        if let Some(dir) = h.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = editor.save_history(h) {
            let _ = writeln!(io::stderr(), "warning: cannot save history to {}: {e}", h.display());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backslash_commands() {
        assert_eq!(parse_command("\\q"), Ok(Meta::Quit));
        assert_eq!(parse_command("  \\quit  "), Ok(Meta::Quit));
        assert_eq!(parse_command("\\?"), Ok(Meta::Help));
        assert_eq!(parse_command("\\help"), Ok(Meta::Help));
        assert_eq!(parse_command("\\format csv"), Ok(Meta::Format(Some(Format::Csv))));
        assert_eq!(parse_command("\\format"), Ok(Meta::Format(None)));
        assert_eq!(parse_command("\\d"), Ok(Meta::Describe(None)));
        assert_eq!(parse_command("\\d bids;"), Ok(Meta::Describe(Some("bids".into()))));
        assert_eq!(parse_command("\\timing"), Ok(Meta::Timing(None)));
        assert_eq!(parse_command("\\timing OFF"), Ok(Meta::Timing(Some(false))));
        assert_eq!(parse_command("\\stop"), Ok(Meta::Stop(Stop::Latest)));
        assert_eq!(parse_command("\\stop 2"), Ok(Meta::Stop(Stop::Number(2))));
        assert_eq!(parse_command("\\stop [3]"), Ok(Meta::Stop(Stop::Number(3))));
        assert_eq!(parse_command("\\stop all"), Ok(Meta::Stop(Stop::All)));
        assert_eq!(parse_command("\\queries"), Ok(Meta::Queries));
        assert_eq!(parse_command("\\view"), Ok(Meta::View(None)));
        assert_eq!(parse_command("\\view [2]"), Ok(Meta::View(Some(2))));
        assert!(parse_command("\\view all").is_err());
        assert_eq!(parse_command("\\i 'my file.sql'"), Ok(Meta::Include("my file.sql".into())));
        assert!(parse_command("\\format xml").unwrap_err().starts_with("unknown format"));
        assert!(parse_command("\\i").unwrap_err().contains("needs a file"));
        assert!(parse_command("\\q now").unwrap_err().contains("takes no argument"));
        assert!(parse_command("\\stop x").is_err());
        assert!(parse_command("\\timing maybe").is_err());
        let unknown = parse_command("\\nope").unwrap_err();
        assert!(
            unknown.starts_with("unknown command '\\nope'. The commands are: \\d"),
            "{unknown}"
        );
        assert!(unknown.contains("\\timing") && unknown.contains("\\i FILE"), "{unknown}");
    }

    #[test]
    fn listing_shows_streams_companions_tables_and_views_but_no_sink() {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = weir::Engine::new();
        engine.set_base_dir(dir.path());
        engine
            .execute(
                "CREATE STREAM bids (auction BIGINT, price BIGINT, ts TIMESTAMP, \
                 WATERMARK FOR ts AS ts); \
                 CREATE TABLE \"Auctions\" (id BIGINT, \"Item\" VARCHAR); \
                 CREATE VIEW top AS SELECT auction, MAX(price) AS best FROM bids GROUP BY auction; \
                 CREATE SINK out1 WITH (path = 'o.csv') AS SELECT ISTREAM auction FROM bids [NOW]; \
                 INSERT INTO \"Auctions\" VALUES (1, 'a')",
            )
            .unwrap();
        let catalog = Catalog::load(&engine);
        assert_eq!(
            listing(&catalog, Format::Table),
            "\
+-------------+--------+------------------------------------------------------------+-----------------------------+
| name        | kind   | columns                                                    | details                     |
+-------------+--------+------------------------------------------------------------+-----------------------------+
| bids        | stream | auction, price, ts                                         | event time ts, 0 element(s) |
| bids$late   | stream | auction, price, ts, missed_watermark                       | late elements of bids       |
| bids$errors | stream | source, line, byte_offset, field, reason, raw, detected_at | unreadable rows of bids     |
| Auctions    | table  | id, Item                                                   | 1 row(s)                    |
| top         | view   | auction, best                                              | relation                    |
+-------------+--------+------------------------------------------------------------+-----------------------------+
(5 rows)
"
        );
        assert_eq!(
            listing(&catalog, Format::Csv),
            "\
name,kind,columns,details
bids,stream,\"auction, price, ts\",\"event time ts, 0 element(s)\"
bids$late,stream,\"auction, price, ts, missed_watermark\",late elements of bids
bids$errors,stream,\"source, line, byte_offset, field, reason, raw, detected_at\",unreadable rows of bids
Auctions,table,\"id, Item\",1 row(s)
top,view,\"auction, best\",relation
"
        );
        assert_eq!(
            listing(&Catalog::default(), Format::Table),
            "Nothing yet: create a stream with CREATE STREAM (see \\help and docs/sql.md).\n"
        );
    }

    proptest::proptest! {
        #[test]
        fn commands_never_panic(s in "\\\\[a-z?]{0,8}( [a-zA-Z0-9_~/.'\"\\[\\] ]{0,20})?") {
            let _ = parse_command(&s);
        }
    }

    #[test]
    fn odd_commands_never_panic() {
        for s in ["\\", "\\ ", "\\\\", "\\d \"", "\\i ~", "\\stop 99999999999999999999", "\\é"] {
            let _ = parse_command(s);
        }
    }
}
