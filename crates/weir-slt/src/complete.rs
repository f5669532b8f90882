//! `weir-slt --complete`: rewrites a file's expectations with what Weir produced.
//!
//! The file is run once with [`Options::complete`]; each record that fails and whose
//! expectation can say what Weir produced gets it: the rows of a `query`, the changes of an
//! `output`, the plan of an `explain` (all after `----`), and the error regex and exact error
//! text of `statement error` and `query error`. Everything else stays byte for byte: records
//! that pass, skipped records, comments (a comment inside a rewritten block is kept after it),
//! blank lines, directives and headers (but for the regex after `error`). A record whose outcome
//! is of another kind (an error where rows or `ok` were expected, `ok` where an error was, a
//! failed `subscribe`, a result that differs from an earlier one with its label) is left as it
//! is and reported: that is for a person to look at, not to record. The completed text is run
//! again to check it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::record::{parse, Kind, Layout};
use crate::runner::{run_text, FileReport, Fix, Options};

/// The outcome of completing one file.
#[derive(Debug)]
pub struct Completed {
    /// The completed text (the original when nothing was rewritten).
    pub text: String,
    /// The lines of the records rewritten (lines of the original text).
    pub rewritten: Vec<usize>,
    /// Failed records left as they are: (line, the kind of failure).
    pub left: Vec<(usize, String)>,
    /// The completed text, run again.
    pub check: FileReport,
}

impl Completed {
    /// Whether the file now passes as it is.
    pub fn passes(&self) -> bool {
        self.check.counts.failed == 0
    }
}

/// Completes the file at `path` (its contents `text`); nothing is written.
pub fn complete_text(path: &Path, text: &str, opts: &Options) -> Result<Completed, String> {
    let records = parse(text)?;
    let report = run_text(path, text, &Options { complete: true, ..*opts });
    let fixes: BTreeMap<usize, &Fix> = report.fixes.iter().map(|(l, f)| (*l, f)).collect();
    let left = report
        .failures
        .iter()
        .filter(|f| !fixes.contains_key(&f.line))
        .map(|f| (f.line, f.category.clone()))
        .collect();
    let mut edits = Edits::default();
    let mut rewritten = Vec::new();
    for rec in &records {
        let Some(fix) = fixes.get(&rec.line) else { continue };
        let error_record =
            matches!(rec.kind, Kind::Statement { .. } | Kind::Query { expect_error: Some(_), .. });
        match fix {
            Fix::Expected(lines) if !error_record => edits.expected(&rec.layout, lines),
            Fix::Error { pattern, exact } if error_record => {
                if let Some(p) = pattern {
                    edits.headers.insert(rec.line, p.clone());
                }
                if let Some(lines) = exact {
                    edits.expected(&rec.layout, lines);
                }
            }
            _ => continue,
        }
        rewritten.push(rec.line);
    }
    let new_text = if rewritten.is_empty() { text.to_string() } else { edits.apply(text) };
    let check = run_text(path, &new_text, &Options { complete: false, ..*opts });
    Ok(Completed { text: new_text, rewritten, left, check })
}

/// Completes the file at `path` in place; writes it only if its text changed.
pub fn complete_file(path: &Path, opts: &Options) -> Result<Completed, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let done = complete_text(path, &text, opts)?;
    if done.text != text {
        std::fs::write(path, &done.text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(done)
}

/// Line edits of one file, by 1-based line number of the original text.
#[derive(Default)]
struct Edits {
    /// Lines `first..=last` become these lines (the comment lines among them are kept after).
    replace: BTreeMap<usize, (usize, Vec<String>)>,
    /// These lines are written after the line.
    insert_after: BTreeMap<usize, Vec<String>>,
    /// The record header on this line gets this regex after its `error` word.
    headers: BTreeMap<usize, String>,
}

impl Edits {
    /// What follows the record's `----` becomes `lines` (a `----` is added after its SQL when it
    /// has none).
    fn expected(&mut self, layout: &Layout, lines: &[String]) {
        match (layout.dashes, layout.expected) {
            (_, Some((first, last))) => {
                self.replace.insert(first, (last, lines.to_vec()));
            }
            (Some(dashes), None) => {
                self.insert_after.insert(dashes, lines.to_vec());
            }
            (None, _) => {
                let mut block = vec!["----".to_string()];
                block.extend_from_slice(lines);
                self.insert_after.insert(layout.sql_end, block);
            }
        }
    }

    fn apply(&self, text: &str) -> String {
        let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut out = String::with_capacity(text.len());
        let mut skip_to = 0;
        let mut kept_comments: Vec<&str> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let n = i + 1;
            if let Some((last, new)) = self.replace.get(&n) {
                for l in new {
                    out.push_str(l);
                    out.push_str(eol);
                }
                skip_to = *last;
            }
            if n <= skip_to {
                if line.starts_with('#') {
                    kept_comments.push(line);
                }
                if n == skip_to {
                    for c in kept_comments.drain(..) {
                        push_line(&mut out, c, eol);
                    }
                }
            } else if let Some(pattern) = self.headers.get(&n) {
                out.push_str(&with_pattern(line, pattern));
                out.push_str(eol);
            } else {
                out.push_str(line);
            }
            if let Some(new) = self.insert_after.get(&n) {
                if !out.ends_with('\n') {
                    out.push_str(eol);
                }
                for l in new {
                    out.push_str(l);
                    out.push_str(eol);
                }
            }
        }
        // A last line without a line break keeps having none.
        if !text.ends_with('\n') && !text.is_empty() {
            if let Some(stripped) = out.strip_suffix(eol) {
                out.truncate(stripped.len());
            }
        }
        out
    }
}

/// Writes `line` with a line break (a file's last line may have none).
fn push_line(out: &mut String, line: &str, eol: &str) {
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str(eol);
    }
}

/// The header `statement error <old>` (or `query error <old>`) with `pattern` after `error`,
/// without its line break.
fn with_pattern(header: &str, pattern: &str) -> String {
    let header = header.trim_end_matches(['\r', '\n']);
    let keep = word_end(header, 2).unwrap_or(header.len());
    format!("{} {pattern}", &header[..keep])
}

/// The byte offset just past the `n`th whitespace-separated word of `line`.
fn word_end(line: &str, n: usize) -> Option<usize> {
    let mut words = 0;
    let mut in_word = false;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            if in_word {
                words += 1;
                if words == n {
                    return Some(i);
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    (in_word && words + 1 == n).then_some(line.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(text: &str) -> Completed {
        complete_text(Path::new("t.slt"), text, &Options { quiet: true, ..Options::default() })
            .expect("parses")
    }

    #[test]
    fn words_and_headers() {
        assert_eq!(word_end("statement error", 2), Some(15));
        assert_eq!(word_end("statement error  a b", 2), Some(15));
        assert_eq!(word_end("statement", 2), None);
        assert_eq!(with_pattern("statement error old text\r\n", "new"), "statement error new");
        assert_eq!(with_pattern("query error\n", "x\\(y\\)"), "query error x\\(y\\)");
    }

    #[test]
    fn rows_changes_and_errors_are_rewritten() {
        let text = "# header\n\
            statement ok\nCREATE TABLE t (a BIGINT, b VARCHAR)\n\n\
            statement ok\nINSERT INTO t VALUES (1, 'x'), (2, 'y')\n\n\
            query IT rowsort\nSELECT a, b FROM t\n----\n1 x\n# stays\n3 z\n\n\
            query I\nSELECT a FROM t WHERE a > 1\n\n\
            statement error nothing like it\nSELECT * FROM nope\n\n\
            statement error\nSELECT nope FROM t\n----\nwrong\n";
        let done = complete(text);
        assert_eq!(done.rewritten, [8, 15, 18, 21]);
        assert!(done.left.is_empty(), "{:?}", done.left);
        assert!(done.passes(), "{}", done.check.output);
        let want = "# header\n\
            statement ok\nCREATE TABLE t (a BIGINT, b VARCHAR)\n\n\
            statement ok\nINSERT INTO t VALUES (1, 'x'), (2, 'y')\n\n\
            query IT rowsort\nSELECT a, b FROM t\n----\n1 x\n2 y\n# stays\n\n\
            query I\nSELECT a FROM t WHERE a > 1\n----\n2\n\n\
            statement error unknown stream, table or view 'nope' at line 1, column 15\n\
            SELECT * FROM nope\n\n\
            statement error\nSELECT nope FROM t\n----\n\
            column 'nope' not found at line 1, column 8\n  SELECT nope FROM t\n         ^^^^\n";
        assert_eq!(done.text, want);
    }

    #[test]
    fn outcomes_of_another_kind_are_left() {
        let text = "statement ok\nSELECT * FROM nope\n\nstatement error\nSELECT 1\n\n\
                    query I\nSELECT * FROM nope\n----\n1";
        let done = complete(text);
        assert_eq!(done.text, text);
        assert!(done.rewritten.is_empty());
        let lines: Vec<usize> = done.left.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [1, 4, 7]);
        assert!(!done.passes());
    }

    #[test]
    fn a_last_line_without_a_break_keeps_none() {
        let done = complete("query I\nSELECT 2\n----\n1");
        assert_eq!(done.text, "query I\nSELECT 2\n----\n2");
        let done = complete("query I\nSELECT 2\r\n----\r\n1\r\n");
        assert_eq!(done.text, "query I\nSELECT 2\r\n----\r\n2\r\n");
    }
}
