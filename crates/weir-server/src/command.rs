//! What a client sends, statement by statement: the statements the server answers itself
//! (SUBSCRIBE, COPY, cursors, transactions, session settings) and the rest, which is Weir SQL
//! for the engine.
//!
//! A query string may hold several statements; [`split`] cuts it at the semicolons outside
//! strings, quoted names and comments, keeping where each statement starts so an error's
//! position points into the string as the client sent it.

use weir::Format;

/// One statement of a query string and the byte offset where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece<'a> {
    pub text: &'a str,
    pub offset: usize,
}

/// Cuts `query` into statements (empty ones left out).
pub(crate) fn split(query: &str) -> Vec<Piece<'_>> {
    let bytes = query.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    fn push<'a>(query: &'a str, from: usize, to: usize, out: &mut Vec<Piece<'a>>) {
        let text = &query[from..to];
        let trimmed = text.trim_start();
        let lead = text.len() - trimmed.len();
        if !is_blank(trimmed) {
            out.push(Piece { text: trimmed.trim_end(), offset: from + lead });
        }
    }
    while i < bytes.len() {
        match bytes[i] {
            b'\'' | b'"' => {
                let q = bytes[i];
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == q {
                        if bytes.get(i + 1) == Some(&q) {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    i += 1;
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 1;
            }
            b';' => {
                push(query, start, i, &mut out);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    push(query, start, query.len(), &mut out);
    out
}

/// Whether a statement is nothing but whitespace and comments.
fn is_blank(text: &str) -> bool {
    let mut rest = text.trim_start();
    loop {
        if rest.is_empty() {
            return true;
        }
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.split_once('\n').map_or("", |(_, after)| after).trim_start();
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, after)| after).trim_start();
        } else {
            return false;
        }
    }
}

/// A statement the server answers, or Weir SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// Weir SQL, run by the engine.
    Weir,
    /// `SUBSCRIBE [TO] view | (query)`: changes as rows until the client cancels.
    Subscribe { query: String },
    /// `COPY (query or SUBSCRIBE ...) TO STDOUT`: a one-shot query's rows, or a continuous
    /// query's changes as copy data until the client cancels.
    CopyOut { query: String, subscribe: bool, csv: bool },
    /// `COPY stream FROM STDIN [WITH (FORMAT csv | json, HEADER, DELIMITER 'c')]`.
    CopyIn { stream: String, format: Format },
    /// `DECLARE c CURSOR FOR SUBSCRIBE ...` (or a continuous query).
    Declare { cursor: String, query: String },
    /// `FETCH [n | ALL] [FROM] c [WITH (timeout = '1s')]`.
    Fetch { cursor: String, count: Option<usize>, timeout_ms: Option<u64> },
    /// `CLOSE c` of a cursor of this session (`CLOSE s` of a stream is Weir SQL).
    Close { name: String },
    /// `BEGIN`, `START TRANSACTION`: Weir has no transactions (every statement takes effect
    /// at once); accepted so drivers that wrap statements in them work.
    Begin,
    /// `COMMIT`, `END`, `ROLLBACK`, `ABORT`.
    Commit { rollback: bool },
    /// `SET [SESSION | LOCAL] name = | TO value`, `RESET name`.
    Set { name: String, value: Option<String> },
    /// `SHOW name` of a session setting (`SHOW STREAMS` etc. are Weir SQL).
    ShowSetting { name: String },
    /// `DISCARD ALL` and similar pool statements: nothing to discard.
    Discard,
    /// Something the server recognises and refuses, with why.
    Refused { code: &'static str, message: String },
}

/// Words of a statement, lowercased, with where the rest of the text begins after each.
struct Words<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Words<'a> {
    fn new(text: &'a str) -> Self {
        Words { text, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        self.text[self.pos..].trim()
    }

    /// The next word (letters, digits, `_`, `$`), lowercased, without consuming it.
    fn peek(&self) -> Option<String> {
        let rest = self.text[self.pos..].trim_start();
        let word: String =
            rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$').collect();
        (!word.is_empty()).then(|| word.to_ascii_lowercase())
    }

    fn next(&mut self) -> Option<String> {
        let rest = self.text[self.pos..].trim_start();
        let skipped = self.text.len() - self.pos - rest.len();
        let len: usize = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
            .map(char::len_utf8)
            .sum();
        if len == 0 {
            return None;
        }
        self.pos += skipped + len;
        Some(rest[..len].to_ascii_lowercase())
    }

    fn eat(&mut self, word: &str) -> bool {
        if self.peek().as_deref() == Some(word) {
            self.next();
            true
        } else {
            false
        }
    }
}

/// The Weir statements that begin with `SHOW`.
const WEIR_SHOW: &[&str] = &["streams", "tables", "views", "sinks", "stream", "null_order"];

/// The engine's own settings: `SET`, `RESET` and `SHOW` of these are Weir SQL (they apply to
/// the engine, so to every session), not session settings.
const WEIR_SETTINGS: &[&str] = &["null_order"];

/// What a statement is.
pub(crate) fn classify(text: &str) -> Command {
    let mut w = Words::new(text);
    let Some(first) = w.next() else { return Command::Weir };
    match first.as_str() {
        "subscribe" => {
            w.eat("to");
            Command::Subscribe { query: unparen(w.rest()).to_string() }
        }
        "copy" => copy(&mut w),
        "declare" => declare(&mut w),
        "fetch" => fetch(&mut w),
        "close" => match (w.next(), w.rest().is_empty()) {
            (Some(name), true) => Command::Close { name },
            _ => Command::Weir,
        },
        "begin" | "start" => Command::Begin,
        "commit" | "end" => Command::Commit { rollback: false },
        "rollback" | "abort" => Command::Commit { rollback: true },
        "discard" => Command::Discard,
        "set" => set(&mut w),
        "reset" => match w.next() {
            Some(name) if WEIR_SETTINGS.contains(&name.as_str()) => Command::Weir,
            Some(name) => Command::Set { name, value: None },
            None => refused("42601", "RESET needs a setting name"),
        },
        "show" => match w.peek() {
            Some(word) if WEIR_SHOW.contains(&word.as_str()) => Command::Weir,
            Some(_) => {
                let name = w.rest().trim_end_matches(';').trim().to_ascii_lowercase();
                Command::ShowSetting { name }
            }
            None => Command::Weir,
        },
        _ => Command::Weir,
    }
}

fn refused(code: &'static str, message: impl Into<String>) -> Command {
    Command::Refused { code, message: message.into() }
}

/// `(x)` as `x` (when the parentheses enclose all of it).
fn unparen(s: &str) -> &str {
    match leading_parens(s) {
        Some((inner, rest)) if rest.trim().is_empty() => inner.trim(),
        _ => s.trim(),
    }
}

/// The text of a parenthesized part at the start of `s`, and what follows it.
fn leading_parens(s: &str) -> Option<(&str, &str)> {
    let t = s.trim_start();
    if !t.starts_with('(') {
        return None;
    }
    let mut depth = 0i64;
    let mut quote = None;
    for (i, c) in t.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return Some((&t[1..i], &t[i + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

/// The `(key value, ...)` pairs of `WITH (FORMAT csv, HEADER true, DELIMITER ',')`, or of the
/// older unparenthesized form (`CSV HEADER DELIMITER ','`), keys lowercased. `CSV`, `JSON`,
/// `TEXT` and `BINARY` alone are formats; `HEADER` alone is `header true`.
fn options(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut w = Words::new(s);
    w.eat("with");
    let text = match leading_parens(w.rest()) {
        Some((inner, rest)) if rest.trim().is_empty() => inner,
        Some(_) => return Err("unexpected text after the options".into()),
        None => w.rest(),
    };
    let tokens = option_tokens(text)?;
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let key = tokens[i].to_ascii_lowercase();
        i += 1;
        if matches!(key.as_str(), "csv" | "json" | "text" | "binary") {
            out.push(("format".to_string(), key));
            continue;
        }
        if tokens.get(i).map(String::as_str) == Some("=") {
            i += 1;
        }
        let takes_value = key != "header"
            || tokens.get(i).is_some_and(|t| {
                matches!(
                    t.to_ascii_lowercase().as_str(),
                    "true" | "false" | "on" | "off" | "0" | "1"
                )
            });
        if takes_value {
            match tokens.get(i) {
                Some(v) => out.push((key, v.clone())),
                None => return Err(format!("option '{key}' needs a value")),
            }
            i += 1;
        } else {
            out.push((key, "true".into()));
        }
    }
    Ok(out)
}

/// Words, quoted strings (unquoted) and `=`; commas separate and are dropped.
fn option_tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == ',' {
            chars.next();
        } else if c == '=' {
            chars.next();
            out.push("=".into());
        } else if c == '\'' {
            chars.next();
            let mut v = String::new();
            loop {
                match chars.next() {
                    Some('\'') if chars.peek() == Some(&'\'') => {
                        chars.next();
                        v.push('\'');
                    }
                    Some('\'') => break,
                    Some(ch) => v.push(ch),
                    None => return Err("unterminated string in the options".into()),
                }
            }
            out.push(v);
        } else {
            let mut v = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() || ch == ',' || ch == '=' || ch == '\'' {
                    break;
                }
                v.push(ch);
                chars.next();
            }
            out.push(v);
        }
    }
    Ok(out)
}

fn copy(w: &mut Words<'_>) -> Command {
    let rest = w.rest();
    if let Some((inner, after)) = leading_parens(rest) {
        let mut a = Words::new(after);
        if !(a.eat("to") && a.eat("stdout")) {
            return refused("0A000", "Weir copies a query only TO STDOUT");
        }
        let opts = match options(a.rest()) {
            Ok(o) => o,
            Err(e) => return refused("42601", e),
        };
        let mut csv = false;
        for (k, v) in opts {
            match (k.as_str(), v.to_ascii_lowercase().as_str()) {
                ("format", "csv") => csv = true,
                ("format", "text") => csv = false,
                _ => {
                    return refused(
                        "0A000",
                        format!("COPY TO STDOUT option '{k}' is not supported"),
                    )
                }
            }
        }
        let mut i = Words::new(inner);
        let subscribe = i.eat("subscribe");
        if subscribe {
            i.eat("to");
        }
        let query = if subscribe { unparen(i.rest()) } else { inner.trim() };
        return Command::CopyOut { query: query.to_string(), subscribe, csv };
    }
    let Some(stream) = w.next() else {
        return refused("42601", "COPY needs a stream: COPY s FROM STDIN (FORMAT csv)");
    };
    if !w.eat("from") {
        return refused("0A000", "Weir copies into a stream only: COPY s FROM STDIN");
    }
    if !w.eat("stdin") {
        // `COPY t FROM 'file'` is Weir SQL: the engine reads the file (on the server's machine,
        // within `--file-dir`).
        return Command::Weir;
    }
    let opts = match options(w.rest()) {
        Ok(o) => o,
        Err(e) => return refused("42601", e),
    };
    let (mut json, mut header, mut delimiter) = (false, false, b',');
    for (k, v) in opts {
        let lv = v.to_ascii_lowercase();
        match k.as_str() {
            "format" if lv == "csv" => json = false,
            "format" if lv == "json" || lv == "jsonl" => json = true,
            "format" => {
                return refused(
                    "0A000",
                    format!("COPY FORMAT {v} is not supported: Weir reads csv or json (lines)"),
                )
            }
            "header" => header = !matches!(lv.as_str(), "false" | "off" | "0"),
            "delimiter" if v.len() == 1 => delimiter = v.as_bytes()[0],
            "delimiter" if v == "\\t" => delimiter = b'\t',
            "delimiter" => return refused("22023", "COPY DELIMITER must be one character"),
            _ => return refused("0A000", format!("COPY option '{k}' is not supported")),
        }
    }
    let format = if json { Format::JsonLines } else { Format::Csv { header, delimiter } };
    Command::CopyIn { stream, format }
}

fn declare(w: &mut Words<'_>) -> Command {
    let Some(cursor) = w.next() else {
        return refused("42601", "DECLARE needs a cursor name");
    };
    while w.eat("no") || w.eat("scroll") || w.eat("binary") || w.eat("insensitive") {}
    if !w.eat("cursor") {
        return refused("42601", "expected DECLARE name CURSOR FOR SUBSCRIBE ...");
    }
    if w.eat("with") || w.eat("without") {
        w.eat("hold");
    }
    if !w.eat("for") {
        return refused("42601", "expected DECLARE name CURSOR FOR SUBSCRIBE ...");
    }
    let mut query = w.rest();
    let mut q = Words::new(query);
    if q.eat("subscribe") {
        q.eat("to");
        query = q.rest();
    }
    Command::Declare { cursor, query: unparen(query).to_string() }
}

fn fetch(w: &mut Words<'_>) -> Command {
    let _ = w.eat("forward") || w.eat("next");
    let mut count = Some(1);
    if w.eat("all") {
        count = None;
    } else if let Some(word) = w.peek() {
        if let Ok(n) = word.parse::<usize>() {
            w.next();
            count = Some(n);
        }
    }
    let _ = w.eat("from") || w.eat("in");
    let Some(cursor) = w.next() else {
        return refused("42601", "FETCH needs a cursor name");
    };
    let mut timeout_ms = None;
    let rest = w.rest();
    if !rest.is_empty() {
        match options(rest) {
            Ok(opts) => {
                for (k, v) in opts {
                    if k != "timeout" {
                        return refused("0A000", format!("FETCH option '{k}' is not supported"));
                    }
                    match weir::parse_wall_duration(&v) {
                        Ok(d) => timeout_ms = Some(d.as_millis() as u64),
                        Err(e) => return refused("22023", format!("FETCH timeout: {e}")),
                    }
                }
            }
            Err(e) => return refused("42601", e),
        }
    }
    Command::Fetch { cursor, count, timeout_ms }
}

fn set(w: &mut Words<'_>) -> Command {
    let _ = w.eat("session") || w.eat("local");
    let Some(mut name) = w.next() else { return refused("42601", "SET needs a setting name") };
    if WEIR_SETTINGS.contains(&name.as_str()) {
        return Command::Weir;
    }
    // `SET TIME ZONE x`, `SET NAMES x`.
    if name == "time" && w.eat("zone") {
        name = "timezone".into();
    }
    let rest = w.rest();
    let rest = rest.strip_prefix('=').map(str::trim).unwrap_or(rest);
    let mut v = Words::new(rest);
    let value = if v.eat("to") { v.rest() } else { rest };
    Command::Set { name, value: Some(value.trim_matches('\'').to_string()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_semicolons_outside_strings_and_comments() {
        let q = "SELECT 'a;b'; -- c;d\n SELECT \"x;\" /* ; */ ; ;  ";
        let pieces: Vec<(&str, usize)> = split(q).iter().map(|p| (p.text, p.offset)).collect();
        assert_eq!(pieces, [("SELECT 'a;b'", 0), ("-- c;d\n SELECT \"x;\" /* ; */", 14)]);
        assert!(split(" ; -- nothing\n").is_empty());
    }

    #[test]
    fn classifies_server_statements() {
        assert_eq!(classify("SUBSCRIBE TO v"), Command::Subscribe { query: "v".into() });
        assert_eq!(
            classify("subscribe (SELECT a FROM s)"),
            Command::Subscribe { query: "SELECT a FROM s".into() }
        );
        assert_eq!(
            classify("COPY (SUBSCRIBE v) TO STDOUT"),
            Command::CopyOut { query: "v".into(), subscribe: true, csv: false }
        );
        assert_eq!(
            classify("COPY (SELECT * FROM t) TO STDOUT WITH (FORMAT csv)"),
            Command::CopyOut { query: "SELECT * FROM t".into(), subscribe: false, csv: true }
        );
        assert_eq!(
            classify("COPY bids FROM STDIN WITH (FORMAT csv, HEADER true)"),
            Command::CopyIn {
                stream: "bids".into(),
                format: Format::Csv { header: true, delimiter: b',' }
            }
        );
        assert_eq!(
            classify("COPY bids FROM STDIN CSV HEADER DELIMITER '|'"),
            Command::CopyIn {
                stream: "bids".into(),
                format: Format::Csv { header: true, delimiter: b'|' }
            }
        );
        assert_eq!(
            classify("copy bids from stdin (format json)"),
            Command::CopyIn { stream: "bids".into(), format: Format::JsonLines }
        );
        // A server-side file is Weir SQL: the engine reads it, confined to --file-dir.
        assert_eq!(classify("COPY bids FROM '/etc/passwd'"), Command::Weir);
        assert!(matches!(
            classify("COPY bids FROM STDIN (FORMAT binary)"),
            Command::Refused { code: "0A000", .. }
        ));
        assert_eq!(
            classify("DECLARE c CURSOR FOR SUBSCRIBE v"),
            Command::Declare { cursor: "c".into(), query: "v".into() }
        );
        assert_eq!(
            classify("FETCH 100 c WITH (timeout = '1s')"),
            Command::Fetch { cursor: "c".into(), count: Some(100), timeout_ms: Some(1000) }
        );
        assert_eq!(
            classify("FETCH ALL FROM c"),
            Command::Fetch { cursor: "c".into(), count: None, timeout_ms: None }
        );
        assert_eq!(classify("CLOSE c"), Command::Close { name: "c".into() });
        assert_eq!(classify("CLOSE"), Command::Weir);
        assert_eq!(classify("BEGIN"), Command::Begin);
        assert_eq!(classify("ROLLBACK"), Command::Commit { rollback: true });
        assert_eq!(
            classify("SET extra_float_digits = 3"),
            Command::Set { name: "extra_float_digits".into(), value: Some("3".into()) }
        );
        assert_eq!(
            classify("SET application_name TO 'psql'"),
            Command::Set { name: "application_name".into(), value: Some("psql".into()) }
        );
        assert_eq!(classify("SHOW STREAMS"), Command::Weir);
        // The engine's own setting is Weir SQL.
        assert_eq!(classify("SET null_order = 'largest'"), Command::Weir);
        assert_eq!(classify("RESET null_order"), Command::Weir);
        assert_eq!(classify("SHOW null_order"), Command::Weir);
        assert_eq!(
            classify("SHOW server_version"),
            Command::ShowSetting { name: "server_version".into() }
        );
        assert_eq!(classify("SELECT 1"), Command::Weir);
        assert_eq!(classify("CREATE STREAM s (a BIGINT)"), Command::Weir);
    }
}
