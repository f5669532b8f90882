//! Runs the SQL examples of the documentation (`README.md`, `docs/*.md`,
//! `grammar-tests/README.md`) through the engine, one test per file (`docs::docs/sql.md`), so
//! an example that no longer parses or binds, or whose shown output is no longer what Weir
//! produces, fails with the file and line of the example.
//!
//! The convention (also in `grammar-tests/README.md`, "The examples in the docs"):
//!
//! - Each Markdown file runs on one fresh engine, its blocks in order, so a later example may
//!   use the streams, tables and views of an earlier one. Relative paths (sinks, sources,
//!   `COPY`) are relative to a scratch directory; idle timeouts count no wall-clock time. The
//!   engine has no data directory (as `weir run` without `--data-dir`) until a hidden
//!   `<!-- docs-test data-dir -->` gives it one, for a `CHECKPOINT` example.
//! - A ```` ```sql ```` block is run statement by statement, and every statement must succeed.
//!   A continuous `SELECT` is started (subscribed), so it must bind. It runs until a later
//!   block or hidden step starts another continuous query (then the earlier ones end), so a
//!   block of `INSERT`s or an `ADVANCE` after an example feeds the example's query.
//! - ```` ```sql synopsis ```` is a syntax summary with placeholders (`[IF NOT EXISTS]`,
//!   `...`): not run. ```` ```sql psql ```` is a session of `weir serve` (data lines after
//!   `COPY ... FROM STDIN`, `COPY (SUBSCRIBE ...)`): not run here; `crates/weir-server`'s tests
//!   drive the server. Any other word after `sql` is an error, so a typo cannot turn a test off.
//! - A ```` ```output ```` block shows, exactly and in order, what was produced since the
//!   previous `output` block: the plans (`EXPLAIN`), one-shot rows (values separated by one
//!   space) and hidden expected errors of the last `sql` block and the hidden steps after it,
//!   then the new changes of each running continuous query, in start order, in the
//!   grammar-tests' notation (`@τ v ...` for stream elements, `@τ +1 v ...` / `@τ -1 v ...` for
//!   relation changes, sorted within an instant). An empty block says nothing was produced.
//!   Text after three or more spaces that follow a value is a note for the reader and is not
//!   compared; trailing spaces and the block's indentation are ignored.
//! - Hidden steps are HTML comments, which Markdown does not render:
//!   `<!-- docs-test: SQL -->` runs statements as a `sql` block would (the input behind an
//!   example whose data the prose describes); `<!-- docs-test error: SQL -->` runs one
//!   statement that must fail, its message then shown by the next `output` block;
//!   `<!-- docs-test fresh -->` replaces the engine with a new empty one (an example reusing a
//!   name with other columns); `<!-- docs-test stop -->` ends the running queries without
//!   checking their output; `<!-- docs-test file PATH` ... `-->` writes the lines in between
//!   to PATH in the scratch directory (a file an example reads).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use weir::format::rows_as_text;
use weir::{Engine, ExecResult, Subscription};

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../");
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    libtest_mimic::run(&args, trials(&root)).exit_code()
}

/// One trial per documentation file; a failing trial when the files cannot be listed.
fn trials(root: &Path) -> Vec<Trial> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("grammar-tests/README.md")];
    match std::fs::read_dir(root.join("docs")) {
        Ok(entries) => {
            let mut docs: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .filter_map(|p| p.file_name().map(|n| Path::new("docs").join(n)))
                .collect();
            docs.sort();
            files.extend(docs);
        }
        Err(e) => {
            let msg = format!("cannot read {}: {e}", root.join("docs").display());
            return vec![Trial::test("docs::files", move || Err(msg.into()))];
        }
    }
    files
        .into_iter()
        .map(|rel| {
            let name =
                rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
            let path = root.join(&rel);
            Trial::test(format!("docs::{}", name.join("/")), move || run_doc(&path, &rel))
        })
        .chain([
            Trial::test("docs::convention", convention_is_parsed),
            Trial::test("docs::notes", notes_are_not_compared),
        ])
        .collect()
}

/// One step of a documentation file, with the (1-based) line it starts on.
#[derive(Debug, PartialEq)]
enum Step {
    /// A ```sql block, or a hidden `docs-test:` comment: statements that must succeed.
    Sql { line: usize, text: String, hidden: bool },
    /// `docs-test error:`: one statement that must fail.
    Error { line: usize, text: String },
    /// `docs-test fresh`: a new, empty engine.
    Fresh,
    /// `docs-test stop`: the running queries end and what they produced is not checked.
    Stop,
    /// `docs-test data-dir`: checkpoints go to the scratch directory from now on.
    DataDir,
    /// `docs-test file PATH`: a file in the scratch directory.
    File { line: usize, path: String, contents: String },
    /// A ```output block: the expected lines.
    Output { line: usize, lines: Vec<String> },
}

/// The steps of a Markdown file, in order. Fences are ``` or ~~~ lines, possibly indented (a
/// block inside a list item); their contents lose that indentation.
fn steps(text: &str) -> Result<Vec<Step>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        if let Some(fence) = fence {
            let marker_len =
                trimmed.len() - trimmed.trim_start_matches(fence.as_bytes()[0] as char).len();
            let marker = &trimmed[..marker_len];
            let info = trimmed[marker_len..].trim();
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim().starts_with(marker) {
                end += 1;
            }
            if end == lines.len() {
                return Err(format!("line {}: a code block that never ends", i + 1));
            }
            let body: Vec<String> =
                lines[start..end].iter().map(|l| strip_indent(l, indent).to_string()).collect();
            // `SQL` and `Sql` are SQL blocks too, so a capital cannot turn a test off.
            let info = info.to_ascii_lowercase();
            let mut words = info.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("sql"), None, _) => {
                    out.push(Step::Sql { line: start + 1, text: body.join("\n"), hidden: false })
                }
                (Some("sql"), Some("synopsis" | "psql"), None) => {}
                (Some("sql"), Some(other), _) => {
                    return Err(format!(
                        "line {}: unknown marker '{other}' after sql (known: synopsis, psql)",
                        i + 1
                    ));
                }
                (Some("output"), None, _) => {
                    out.push(Step::Output { line: start + 1, lines: body })
                }
                (Some("output"), Some(other), _) => {
                    return Err(format!("line {}: unknown marker '{other}' after output", i + 1));
                }
                _ => {}
            }
            i = end + 1;
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("<!-- docs-test") {
            let start = i;
            let mut body = rest.to_string();
            while !body.contains("-->") {
                i += 1;
                let Some(next) = lines.get(i) else {
                    return Err(format!("line {}: a docs-test comment without its -->", start + 1));
                };
                body.push('\n');
                body.push_str(next);
            }
            let (body, after) = body.split_once("-->").unwrap_or((&body, ""));
            if !after.trim().is_empty() {
                return Err(format!("line {}: text after a docs-test comment's -->", i + 1));
            }
            out.push(directive(start + 1, body)?);
            i += 1;
            continue;
        }
        i += 1;
    }
    Ok(out)
}

/// A `docs-test` comment, `body` being what follows `<!-- docs-test` up to `-->`.
fn directive(line: usize, body: &str) -> Result<Step, String> {
    if let Some(sql) = body.strip_prefix(':') {
        return Ok(Step::Sql { line, text: sql.to_string(), hidden: true });
    }
    if let Some(sql) = body.strip_prefix(" error:") {
        return Ok(Step::Error { line, text: sql.trim().to_string() });
    }
    if body.trim() == "fresh" {
        return Ok(Step::Fresh);
    }
    if body.trim() == "stop" {
        return Ok(Step::Stop);
    }
    if body.trim() == "data-dir" {
        return Ok(Step::DataDir);
    }
    if let Some(rest) = body.strip_prefix(" file ") {
        let (path, contents) = rest.split_once('\n').unwrap_or((rest, ""));
        let path = path.trim().to_string();
        if path.is_empty() {
            return Err(format!("line {line}: docs-test file without a path"));
        }
        return Ok(Step::File { line, path, contents: contents.to_string() });
    }
    Err(format!(
        "line {line}: unknown docs-test comment (known: `docs-test: SQL`, `docs-test error: SQL`, \
         `docs-test fresh`, `docs-test stop`, `docs-test data-dir`, `docs-test file PATH`)"
    ))
}

fn strip_indent(line: &str, indent: usize) -> &str {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    &line[spaces.min(indent)..]
}

/// An expected output line without its note (text after three or more spaces that follow a
/// value) and trailing spaces.
fn without_note(line: &str) -> &str {
    let body_start = line.len() - line.trim_start().len();
    match line[body_start..].find("   ") {
        Some(at) => line[..body_start + at].trim_end(),
        None => line.trim_end(),
    }
}

/// The engine of one file and what it produced since the last `output` block.
struct Doc {
    engine: Engine,
    dir: PathBuf,
    /// Plans, one-shot rows and expected errors, in statement order.
    shown: Vec<String>,
    /// The running continuous queries: (line, subscription), in start order.
    subs: Vec<(usize, Subscription)>,
}

fn fresh_engine(dir: &Path) -> Engine {
    let mut engine = Engine::new();
    engine.use_manual_processing_time();
    engine.set_base_dir(dir);
    engine
}

fn run_doc(path: &Path, rel: &Path) -> Result<(), Failed> {
    let shown = rel.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let steps = steps(&text).map_err(|e| format!("{shown}: {e}"))?;
    let dir = std::env::temp_dir().join(format!(
        "weir-docs-{}-{}",
        std::process::id(),
        shown.replace(['/', '.'], "-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut doc =
        Doc { engine: fresh_engine(&dir), dir: dir.clone(), shown: Vec::new(), subs: Vec::new() };
    let result = steps.iter().try_for_each(|s| doc.step(s).map_err(|e| format!("{shown}:{e}")));
    drop(doc);
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(Failed::from)
}

impl Doc {
    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Sql { line, text, hidden } => {
                if !hidden {
                    self.shown.clear();
                }
                self.run_sql(*line, text)
            }
            Step::Error { line, text } => match self.engine.execute(text) {
                Ok(_) => {
                    Err(format!("{line}: expected an error from the hidden statement\n    {text}"))
                }
                Err(e) => {
                    self.shown.extend(e.to_string().lines().map(str::to_string));
                    Ok(())
                }
            },
            Step::Fresh | Step::Stop => {
                self.subs.clear();
                self.shown.clear();
                if *step == Step::Fresh {
                    self.engine = fresh_engine(&self.dir);
                }
                Ok(())
            }
            Step::DataDir => {
                self.engine.set_data_dir(self.dir.join("data"));
                Ok(())
            }
            Step::File { line, path, contents } => {
                let target = self.dir.join(path);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("{line}: {e}"))?;
                }
                std::fs::write(&target, contents)
                    .map_err(|e| format!("{line}: cannot write {path}: {e}"))
            }
            Step::Output { line, lines } => {
                let actual = self.collect();
                let expected: Vec<&str> = lines.iter().map(|l| without_note(l)).collect();
                if actual.iter().map(String::as_str).ne(expected.iter().copied()) {
                    let mut msg = format!(
                        "{line}: the output block differs from what Weir produced\n  expected:\n"
                    );
                    for l in &expected {
                        let _ = writeln!(msg, "    {l}");
                    }
                    msg.push_str("  actual:\n");
                    for l in &actual {
                        let _ = writeln!(msg, "    {l}");
                    }
                    return Err(msg);
                }
                Ok(())
            }
        }
    }

    /// Runs a block's statements, one at a time, so a failure names its statement's line.
    fn run_sql(&mut self, line: usize, text: &str) -> Result<(), String> {
        let stmts = weir_sql::parse_script(text)
            .map_err(|e| format!("{line}: the block starting here does not parse: {e}"))?;
        let mut started = false;
        for p in stmts {
            let at = line + usize::try_from(p.span.line).unwrap_or(1).saturating_sub(1);
            let sql = p.text.clone();
            match self.engine.execute_statement(p) {
                Ok(ExecResult::Subscribed(sub)) => {
                    if !started {
                        // A new example's query: the earlier examples' queries end.
                        self.subs.clear();
                        started = true;
                    }
                    self.subs.push((at, sub));
                }
                Ok(ExecResult::Explain(plan)) => {
                    self.shown.extend(plan.lines().map(|l| l.trim_end().to_string()))
                }
                Ok(ExecResult::Rows { batches, .. }) => {
                    for b in &batches {
                        let rows = rows_as_text(b).map_err(|e| format!("{at}: {e}"))?;
                        self.shown
                            .extend(rows.into_iter().map(|r| r.join(" ").trim_end().to_string()));
                    }
                }
                Ok(ExecResult::Done(_)) => {}
                Err(e) => {
                    let e = e.with_source(text);
                    return Err(format!("{at}: {e}\n  in the statement\n    {sql}"));
                }
            }
        }
        // Sources are read as a script's are before its output is looked at.
        let _ = self.engine.run_sources();
        Ok(())
    }

    /// What was produced since the last `output` block; the queries go on running.
    fn collect(&mut self) -> Vec<String> {
        let _ = self.engine.run_sources();
        let mut out = std::mem::take(&mut self.shown);
        for (line, sub) in &self.subs {
            loop {
                match sub.poll_changes() {
                    Ok(c) if c.is_empty() => break,
                    Ok(c) => out.extend(c.iter().map(|c| c.to_string().trim_end().to_string())),
                    Err(e) => {
                        out.push(format!("error (query at line {line}): {e}"));
                        break;
                    }
                }
            }
        }
        out
    }
}

/// The parser of this convention, checked on a small file (run as the trial `docs::convention`).
fn convention_is_parsed() -> Result<(), Failed> {
    let text = "x\n```sql\nSELECT 1;\n```\n```sql synopsis\nDROP [IF EXISTS] s\n```\n\
                    <!-- docs-test: INSERT\nINTO t VALUES (1) -->\n  ```output\n  1\n  ```\n\
                    <!-- docs-test fresh -->\n<!-- docs-test file a.csv\nk,v\n-->\n";
    let s = steps(text).unwrap_or_default();
    assert_eq!(s.len(), 5, "{s:?}");
    assert_eq!(s[0], Step::Sql { line: 3, text: "SELECT 1;".into(), hidden: false });
    assert!(matches!(&s[1], Step::Sql { line: 8, hidden: true, .. }));
    assert_eq!(s[2], Step::Output { line: 11, lines: vec!["1".into()] });
    assert_eq!(s[3], Step::Fresh);
    assert!(
        matches!(&s[4], Step::File { path, contents, .. } if path == "a.csv" && contents == "k,v\n")
    );
    assert!(steps("```sql sinopsis\nx\n```\n").is_err());
    assert!(steps("```sql\nx\n").is_err());
    assert!(steps("<!-- docs-test frsh -->\n").is_err());
    assert!(matches!(steps("```SQL\nSELECT 1\n```\n").as_deref(), Ok([Step::Sql { .. }])));
    Ok(())
}

fn notes_are_not_compared() -> Result<(), Failed> {
    assert_eq!(without_note("@2 -1 a 5 1        a9 enters"), "@2 -1 a 5 1");
    assert_eq!(
        without_note("    Window: [ROWS 3]  -> relation  "),
        "    Window: [ROWS 3]  -> relation"
    );
    Ok(())
}
