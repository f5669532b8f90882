//! The CQL front end: script -> statements, with CQL's additions taken out of the token stream.
//!
//! `sqlparser` 0.62 has no hook for what follows a table name, so CQL is parsed in a pre-pass
//! over sqlparser's own tokens (which keep line and column):
//!
//! - `SELECT ISTREAM|DSTREAM|RSTREAM a, b` and the function form `SELECT ISTREAM(a, b)` lose
//!   the operator keyword (and the parentheses) and record it in [`CqlQuery::r2s`]. `ISTREAM`
//!   right after `SELECT` is reserved: it is never a column name there.
//! - `name [window]` in a FROM clause becomes `__weir_wN AS name` (or `__weir_wN alias`); the
//!   window is parsed here into a [`WindowAst`] and looked up by the binder through that name.
//! - `... AT τ` at the end of INSERT or DELETE on a table gives the instant of the change.
//! - Statements sqlparser does not know (`CREATE STREAM` with `WATERMARK FOR`, `ADVANCE`,
//!   `CLOSE`, `SHOW`, `DESCRIBE`, `DROP`, `EXPLAIN`) are parsed by a small parser of our own
//!   over the same tokens; their column lists and data types still go through sqlparser.
//!
//! What remains is handed to `Parser::with_tokens_with_locations`, so every error, ours or
//! sqlparser's, points at the original text.

use sqlparser::ast::{self as sql, TableObject};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::{Keyword, RESERVED_FOR_TABLE_ALIAS};
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Word};
use weir_common::{Diagnostic, Result, Span, Time, WeirError};
use weir_plan::R2S;

/// Prefix of the synthetic table names that stand for windowed streams.
pub const WINDOW_PREFIX: &str = "__weir_w";

/// A parsed statement with where it sits in the script.
#[derive(Debug, Clone)]
pub struct ParsedStatement {
    pub statement: Statement,
    /// The statement's own text.
    pub text: String,
    /// Where the statement starts in the script.
    pub span: Span,
}

/// A column of `CREATE STREAM` / `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct ColumnAst {
    pub name: String,
    pub data_type: sql::DataType,
    pub span: Option<Span>,
}

/// A duration as written: bare integers are ticks, durations with a unit are microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duration {
    Ticks(i64),
    Micros(i64),
}

/// An instant as written: an integer tick or a TIMESTAMP literal (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLit {
    Ticks(Time),
    Micros(Time),
}

/// `WATERMARK FOR col [AS col - delay]`.
#[derive(Debug, Clone)]
pub struct WatermarkAst {
    pub column: String,
    pub delay: Option<Duration>,
    pub span: Option<Span>,
}

/// One `key = value` of `CREATE STREAM ... WITH (...)`. Keys are lower-cased; the engine
/// validates them (sources, formats and policies are its business, not the parser's).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOption {
    pub key: String,
    pub value: OptionValue,
    /// Where the key is written, for messages.
    pub span: Option<Span>,
}

/// The value of a stream option, as written.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// `'text'` (or a bare word such as `csv`).
    Text(String),
    /// A number, as written.
    Number(String),
    Bool(bool),
    /// `INTERVAL '10' SECOND` or `10 SECONDS`.
    Duration(Duration),
}

impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            OptionValue::Number(n) => f.write_str(n),
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Duration(d) => write!(f, "{d}"),
        }
    }
}

/// A window clause as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowKind {
    Unbounded,
    Now,
    Range(Duration),
    RangeSlide(Duration, Duration),
    Rows(u64),
    PartitionRows(Vec<(String, Option<Span>)>, u64),
    /// `TABLE(TUMBLE(TABLE s, DESCRIPTOR(col), size))`: `[RANGE size SLIDE size]` plus
    /// `window_start` and `window_end` columns.
    Tumble {
        column: String,
        size: Duration,
    },
    /// `TABLE(HOP(TABLE s, DESCRIPTOR(col), slide, size))`: `[RANGE size SLIDE slide]` plus
    /// `window_start` and `window_end` columns.
    Hop {
        column: String,
        slide: Duration,
        size: Duration,
    },
}

impl WindowKind {
    /// Whether the window adds `window_start` and `window_end` columns (the table functions).
    pub fn has_bounds_columns(&self) -> bool {
        matches!(self, WindowKind::Tumble { .. } | WindowKind::Hop { .. })
    }
}

/// A window after a stream name, with the synthetic name that replaced it in the SQL.
#[derive(Debug, Clone)]
pub struct WindowAst {
    pub synthetic: String,
    pub stream: String,
    pub kind: WindowKind,
    /// From the stream name to the closing bracket.
    pub span: Option<Span>,
}

/// A query with its CQL parts taken out.
#[derive(Debug, Clone)]
pub struct CqlQuery {
    /// Plain SQL: windowed streams appear as `__weir_wN`.
    pub query: Box<sql::Query>,
    /// An explicit `ISTREAM`/`DSTREAM`/`RSTREAM` on the top-level SELECT.
    pub r2s: Option<R2S>,
    pub windows: Vec<WindowAst>,
}

/// What kind of object a DROP, SHOW or CREATE names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Stream,
    Table,
    View,
    Sink,
}

/// One statement of a Weir script.
#[derive(Debug, Clone)]
pub enum Statement {
    CreateStream {
        name: String,
        columns: Vec<ColumnAst>,
        watermark: Option<WatermarkAst>,
        /// `WITH (key = value, ...)`: source, format and policies.
        options: Vec<StreamOption>,
        if_not_exists: bool,
        span: Option<Span>,
    },
    CreateTable {
        name: String,
        columns: Vec<ColumnAst>,
        if_not_exists: bool,
        span: Option<Span>,
    },
    CreateView {
        name: String,
        query: Box<CqlQuery>,
        sql: String,
        or_replace: bool,
        span: Option<Span>,
    },
    /// `CREATE SINK name WITH (path = '...', format = 'csv') AS query`: a continuous query
    /// whose output is appended to a file.
    CreateSink {
        name: String,
        options: Vec<StreamOption>,
        query: Box<CqlQuery>,
        sql: String,
        span: Option<Span>,
    },
    Drop {
        kind: ObjectKind,
        name: String,
        if_exists: bool,
        span: Option<Span>,
    },
    Show(ObjectKind),
    /// `SHOW STREAM STATS`: per stream, accepted, late and bad rows, watermark, buffering.
    ShowStreamStats,
    /// `CHECKPOINT`: write a checkpoint of the engine now.
    Checkpoint,
    /// `CREATE INDEX ... ON table (...)`: accepted and ignored (operators index their own
    /// state).
    CreateIndex {
        table: String,
        span: Option<Span>,
    },
    Describe {
        name: String,
        span: Option<Span>,
    },
    /// INSERT into a stream or table; `source` is a plain query (usually VALUES).
    Insert {
        target: String,
        columns: Vec<String>,
        source: Box<sql::Query>,
        at: Option<TimeLit>,
        span: Option<Span>,
    },
    /// DELETE from a table.
    Delete {
        target: String,
        selection: Option<Box<sql::Expr>>,
        at: Option<TimeLit>,
        span: Option<Span>,
    },
    /// Heartbeat: the stream's watermark moves to the instant after τ.
    Advance {
        stream: String,
        to: TimeLit,
        span: Option<Span>,
    },
    /// End of input for a stream (watermark +∞).
    Close {
        stream: Option<String>,
        span: Option<Span>,
    },
    Query(Box<CqlQuery>),
    Explain(Box<CqlQuery>),
}

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Duration::Ticks(t) => write!(f, "{t}"),
            Duration::Micros(us) => write!(f, "INTERVAL '{us}' MICROSECOND"),
        }
    }
}

impl std::fmt::Display for WindowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowKind::Unbounded => write!(f, "[UNBOUNDED]"),
            WindowKind::Now => write!(f, "[NOW]"),
            WindowKind::Range(d) => write!(f, "[RANGE {d}]"),
            WindowKind::RangeSlide(r, s) => write!(f, "[RANGE {r} SLIDE {s}]"),
            WindowKind::Rows(n) => write!(f, "[ROWS {n}]"),
            WindowKind::PartitionRows(cols, n) => {
                let cols: Vec<&str> = cols.iter().map(|(c, _)| c.as_str()).collect();
                write!(f, "[PARTITION BY {} ROWS {n}]", cols.join(", "))
            }
            WindowKind::Tumble { column, size } => {
                write!(f, "TUMBLE(DESCRIPTOR({column}), {size})")
            }
            WindowKind::Hop { column, slide, size } => {
                write!(f, "HOP(DESCRIPTOR({column}), {slide}, {size})")
            }
        }
    }
}

impl std::fmt::Display for CqlQuery {
    /// CQL text that parses back to this query: windows after their stream names, the
    /// relation-to-stream operator after the top-level SELECT.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = self.query.to_string();
        if let Some(op) = self.r2s {
            if let Some(rest) = text.strip_prefix("SELECT ") {
                text = format!("SELECT {op} {rest}");
            } else if let Some(with) = &self.query.with {
                // WITH ... SELECT: the body follows the WITH clause's text.
                let prefix = format!("{with} ");
                if let Some(rest) =
                    text.strip_prefix(&prefix).and_then(|r| r.strip_prefix("SELECT "))
                {
                    text = format!("{prefix}SELECT {op} {rest}");
                }
            }
        }
        // Replace the longest names first so __weir_w1 never matches inside __weir_w10.
        let mut windows: Vec<&WindowAst> = self.windows.iter().collect();
        windows.sort_by_key(|w| std::cmp::Reverse(w.synthetic.len()));
        for w in windows {
            let replacement = match &w.kind {
                WindowKind::Tumble { column, size } => {
                    format!("TABLE(TUMBLE(TABLE {}, DESCRIPTOR({column}), {size}))", w.stream)
                }
                WindowKind::Hop { column, slide, size } => {
                    format!("TABLE(HOP(TABLE {}, DESCRIPTOR({column}), {slide}, {size}))", w.stream)
                }
                kind => format!("{} {kind}", w.stream),
            };
            text = text.replace(&w.synthetic, &replacement);
        }
        f.write_str(&text)
    }
}

/// Parses a script of `;`-separated statements.
pub fn parse_script(sql: &str) -> Result<Vec<ParsedStatement>> {
    parse_script_inner(sql).map_err(|e| e.with_source(sql))
}

fn parse_script_inner(sql: &str) -> Result<Vec<ParsedStatement>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(|e| {
        WeirError::Syntax(Diagnostic::at(
            e.message.clone(),
            Some(Span::point(e.location.line, e.location.column)),
        ))
    })?;
    let tokens: Vec<TokenWithSpan> =
        tokens.into_iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).collect();
    let source = Source::new(sql);
    let mut out = Vec::new();
    for stmt in tokens.split(|t| t.token == Token::SemiColon) {
        if stmt.is_empty() {
            continue;
        }
        let text = source.slice(stmt);
        let span = span_of(stmt);
        let statement = parse_statement(&source, stmt)?;
        out.push(ParsedStatement { statement, text, span: span.unwrap_or(Span::point(1, 1)) });
    }
    Ok(out)
}

/// Maps token locations (1-based line, column in characters) back to byte offsets, in time
/// independent of the script's length (scripts can hold many thousands of statements).
struct Source<'a> {
    sql: &'a str,
    /// Byte offset where each line starts, and whether the line is ASCII (then columns are
    /// byte offsets).
    lines: Vec<(usize, bool)>,
}

impl<'a> Source<'a> {
    fn new(sql: &'a str) -> Self {
        let mut lines = Vec::new();
        let mut start = 0;
        for line in sql.split_inclusive('\n') {
            lines.push((start, line.is_ascii()));
            start += line.len();
        }
        if lines.is_empty() || sql.ends_with('\n') {
            lines.push((sql.len(), true));
        }
        Source { sql, lines }
    }

    /// Byte offset of a location, if it lies in the text (or just past its end).
    fn offset_of(&self, loc: Location) -> Option<usize> {
        let (start, ascii) = *self.lines.get((loc.line as usize).checked_sub(1)?)?;
        let col = (loc.column as usize).checked_sub(1)?;
        let off = if ascii {
            start + col
        } else {
            let rest = &self.sql[start..];
            match rest.char_indices().nth(col) {
                Some((i, _)) => start + i,
                None => start + rest.len(),
            }
        };
        (off <= self.sql.len()).then_some(off)
    }

    /// The source text a token range covers.
    fn slice(&self, toks: &[TokenWithSpan]) -> String {
        let (Some(first), Some(last)) = (toks.first(), toks.last()) else { return String::new() };
        match (self.offset_of(first.span.start), self.offset_of(last.span.end)) {
            (Some(s), Some(e))
                if s <= e && self.sql.is_char_boundary(s) && self.sql.is_char_boundary(e) =>
            {
                self.sql[s..e].to_string()
            }
            _ => String::new(),
        }
    }
}

fn span_of(toks: &[TokenWithSpan]) -> Option<Span> {
    let first = toks.first()?;
    let last = toks.last()?;
    Span::from_sql(sqlparser::tokenizer::Span::new(first.span.start, last.span.end))
}

fn tok_span(t: &TokenWithSpan) -> Option<Span> {
    Span::from_sql(t.span)
}

fn word_is(t: &TokenWithSpan, w: &str) -> bool {
    matches!(&t.token, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w))
}

/// Identifiers are case-insensitive unless quoted, as in DataFusion.
fn ident_name(word: &Word) -> String {
    if word.quote_style.is_some() {
        word.value.clone()
    } else {
        word.value.to_ascii_lowercase()
    }
}

fn describe(t: Option<&TokenWithSpan>) -> String {
    match t {
        None => "end of statement".to_string(),
        Some(t) => format!("'{}'", t.token),
    }
}

/// Converts a sqlparser error, recovering its position for the caret.
pub fn sqlparser_error(e: ParserError) -> WeirError {
    let msg = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => "statement nests too deeply".to_string(),
    };
    let (msg, span) = match msg.rfind(" at Line: ") {
        Some(i) => {
            let pos = &msg[i + " at Line: ".len()..];
            let mut parts = pos.split(", Column: ");
            let line = parts.next().and_then(|s| s.trim().parse::<u64>().ok());
            let col = parts.next().and_then(|s| s.trim().parse::<u64>().ok());
            let span = match (line, col) {
                (Some(l), Some(c)) => Some(Span::point(l, c)),
                _ => None,
            };
            (msg[..i].to_string(), span)
        }
        None => (msg, None),
    };
    let msg = msg
        .replacen("Expected: ", "expected ", 1)
        .replacen(", found: ", ", found ", 1)
        .replace("found EOF", "found end of statement");
    WeirError::Syntax(Diagnostic::at(msg, span))
}

/// Like [`sqlparser_error`], pointing just past `toks` when sqlparser gives no position (it
/// gives none at the end of input).
fn sql_err(e: ParserError, toks: &[TokenWithSpan]) -> WeirError {
    match sqlparser_error(e) {
        WeirError::Syntax(mut d) if d.span.is_none() => {
            d.span = toks.last().and_then(|t| {
                Span::from_sql(t.span).map(|s| Span::point(s.end_line, s.end_column))
            });
            WeirError::Syntax(d)
        }
        other => other,
    }
}

/// A cursor over one statement's tokens for the statements we parse ourselves.
struct Cursor<'a> {
    toks: &'a [TokenWithSpan],
    pos: usize,
    /// The token right after `toks` in the statement (e.g. a window's `]`), for messages.
    after: Option<&'a TokenWithSpan>,
}

impl<'a> Cursor<'a> {
    fn new(toks: &'a [TokenWithSpan]) -> Self {
        Cursor { toks, pos: 0, after: None }
    }

    fn followed_by(mut self, after: &'a TokenWithSpan) -> Self {
        self.after = Some(after);
        self
    }

    fn peek(&self) -> Option<&'a TokenWithSpan> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<&'a TokenWithSpan> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn rest(&self) -> &'a [TokenWithSpan] {
        &self.toks[self.pos.min(self.toks.len())..]
    }

    fn err(&self, expected: &str) -> WeirError {
        let found = self.peek().or(self.after);
        let span = match found {
            Some(t) => tok_span(t),
            None => self.toks.last().and_then(|t| {
                Span::from_sql(t.span).map(|s| Span::point(s.end_line, s.end_column))
            }),
        };
        WeirError::Syntax(Diagnostic::at(
            format!("expected {expected}, found {}", describe(found)),
            span,
        ))
    }

    fn peek_word(&self, w: &str) -> bool {
        self.peek().is_some_and(|t| word_is(t, w))
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if self.peek_word(w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_word(&mut self, w: &str) -> Result<()> {
        if self.eat_word(w) {
            Ok(())
        } else {
            Err(self.err(w))
        }
    }

    fn eat(&mut self, tok: &Token) -> bool {
        if self.peek().is_some_and(|t| &t.token == tok) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &Token, what: &str) -> Result<()> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    fn ident(&mut self, what: &str) -> Result<(String, Option<Span>)> {
        match self.peek() {
            Some(t) => match &t.token {
                Token::Word(w) => {
                    self.pos += 1;
                    Ok((ident_name(w), tok_span(t)))
                }
                _ => Err(self.err(what)),
            },
            None => Err(self.err(what)),
        }
    }

    fn end(&self) -> Result<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err("end of statement"))
        }
    }

    fn integer(&mut self, what: &str) -> Result<i64> {
        let neg = self.eat(&Token::Minus);
        match self.peek().map(|t| &t.token) {
            Some(Token::Number(n, _)) => {
                let v: i64 = n.parse().map_err(|_| self.err(what))?;
                self.pos += 1;
                Ok(if neg { -v } else { v })
            }
            _ => Err(self.err(what)),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        match self.peek().map(|t| &t.token) {
            Some(Token::SingleQuotedString(s)) => {
                self.pos += 1;
                Ok(s.clone())
            }
            _ => Err(self.err(what)),
        }
    }
}

fn sub_parser(toks: &[TokenWithSpan]) -> Parser<'static> {
    static DIALECT: GenericDialect = GenericDialect {};
    Parser::new(&DIALECT).with_tokens_with_locations(toks.to_vec())
}

fn parse_statement(source: &Source, toks: &[TokenWithSpan]) -> Result<Statement> {
    let mut c = Cursor::new(toks);
    let span = span_of(toks);
    if c.eat_word("CREATE") {
        let or_replace = c.eat_word("OR") && {
            c.expect_word("REPLACE")?;
            true
        };
        if c.eat_word("STREAM") {
            return parse_create_stream(&mut c, span);
        }
        if c.peek_word("VIEW") || c.peek_word("MATERIALIZED") {
            c.eat_word("MATERIALIZED");
            c.expect_word("VIEW")?;
            let (name, _) = c.ident("a view name")?;
            c.expect_word("AS")?;
            let rest = c.rest();
            let query = parse_cql_query(rest)?;
            return Ok(Statement::CreateView {
                name,
                query: Box::new(query),
                sql: source.slice(rest),
                or_replace,
                span,
            });
        }
        if c.eat_word("SINK") {
            let (name, name_span) = c.ident("a sink name")?;
            let options = if c.eat_word("WITH") { parse_stream_options(&mut c)? } else { vec![] };
            c.expect_word("AS")?;
            let rest = c.rest();
            let query = parse_cql_query(rest)?;
            return Ok(Statement::CreateSink {
                name,
                options,
                query: Box::new(query),
                sql: source.slice(rest),
                span: name_span,
            });
        }
        if c.peek_word("TABLE") {
            return parse_create_table(toks, span);
        }
        if c.peek_word("INDEX") || c.peek_word("UNIQUE") {
            // Accepted for SQL compatibility; operators keep their own indexes.
            c.eat_word("UNIQUE");
            c.expect_word("INDEX")?;
            if c.eat_word("IF") {
                c.expect_word("NOT")?;
                c.expect_word("EXISTS")?;
            }
            c.ident("an index name")?;
            c.expect_word("ON")?;
            let (table, span) = c.ident("a table name")?;
            return Ok(Statement::CreateIndex { table, span });
        }
        return Err(c.err("STREAM, TABLE, VIEW or SINK"));
    }
    if c.eat_word("DROP") {
        let kind = object_kind(&mut c)?;
        let if_exists = c.eat_word("IF") && {
            c.expect_word("EXISTS")?;
            true
        };
        let (name, name_span) = c.ident("a name")?;
        c.end()?;
        return Ok(Statement::Drop { kind, name, if_exists, span: name_span });
    }
    if c.eat_word("SHOW") {
        if c.eat_word("STREAM") {
            c.expect_word("STATS")?;
            c.end()?;
            return Ok(Statement::ShowStreamStats);
        }
        let kind = if c.eat_word("STREAMS") {
            ObjectKind::Stream
        } else if c.eat_word("TABLES") {
            ObjectKind::Table
        } else if c.eat_word("VIEWS") {
            ObjectKind::View
        } else if c.eat_word("SINKS") {
            ObjectKind::Sink
        } else {
            return Err(c.err("STREAMS, TABLES, VIEWS, SINKS or STREAM STATS"));
        };
        c.end()?;
        return Ok(Statement::Show(kind));
    }
    if c.eat_word("CHECKPOINT") {
        c.end()?;
        return Ok(Statement::Checkpoint);
    }
    if c.eat_word("DESCRIBE") || c.eat_word("DESC") {
        let (name, span) = c.ident("a stream, table or view name")?;
        c.end()?;
        return Ok(Statement::Describe { name, span });
    }
    if c.eat_word("ADVANCE") {
        c.eat_word("STREAM");
        let (stream, span) = c.ident("a stream name")?;
        c.expect_word("TO")?;
        let to = parse_time_lit(&mut c)?;
        c.end()?;
        return Ok(Statement::Advance { stream, to, span });
    }
    if c.eat_word("CLOSE") {
        if c.eat_word("ALL") {
            c.end()?;
            return Ok(Statement::Close { stream: None, span });
        }
        c.eat_word("STREAM");
        let (stream, span) = c.ident("a stream name or ALL")?;
        c.end()?;
        return Ok(Statement::Close { stream: Some(stream), span });
    }
    if c.eat_word("EXPLAIN") {
        return Ok(Statement::Explain(Box::new(parse_cql_query(c.rest())?)));
    }
    if c.peek_word("INSERT") || c.peek_word("DELETE") {
        return parse_dml(toks, span);
    }
    if c.peek_word("UPDATE") {
        return Err(WeirError::plan_at(
            "UPDATE is not supported yet: DELETE and INSERT at the same instant (AT τ) instead",
            span,
        ));
    }
    if c.peek_word("SELECT")
        || c.peek_word("WITH")
        || c.peek_word("VALUES")
        || c.peek().is_some_and(|t| t.token == Token::LParen)
    {
        return Ok(Statement::Query(Box::new(parse_cql_query(toks)?)));
    }
    Err(c.err(
        "a statement (SELECT, CREATE, INSERT, DELETE, DROP, SHOW, DESCRIBE, EXPLAIN, ADVANCE, CLOSE)",
    ))
}

fn object_kind(c: &mut Cursor) -> Result<ObjectKind> {
    if c.eat_word("STREAM") {
        Ok(ObjectKind::Stream)
    } else if c.eat_word("TABLE") {
        Ok(ObjectKind::Table)
    } else if c.eat_word("VIEW") {
        Ok(ObjectKind::View)
    } else if c.eat_word("SINK") {
        Ok(ObjectKind::Sink)
    } else {
        Err(c.err("STREAM, TABLE, VIEW or SINK"))
    }
}

/// `CREATE STREAM [IF NOT EXISTS] name (col type, ..., WATERMARK FOR col [AS col - d])
/// [WITH (key = value, ...)]`.
fn parse_create_stream(c: &mut Cursor, span: Option<Span>) -> Result<Statement> {
    let if_not_exists = if c.eat_word("IF") {
        c.expect_word("NOT")?;
        c.expect_word("EXISTS")?;
        true
    } else {
        false
    };
    let (name, name_span) = c.ident("a stream name")?;
    c.expect(&Token::LParen, "'(' and a column list")?;
    let mut columns = Vec::new();
    let mut watermark = None;
    loop {
        // One element: up to the next comma or closing parenthesis at this depth.
        let start = c.pos;
        let mut depth = 0;
        while let Some(t) = c.peek() {
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => break,
                Token::RParen => depth -= 1,
                Token::Comma if depth == 0 => break,
                _ => {}
            }
            c.pos += 1;
        }
        let elem = &c.toks[start..c.pos];
        if elem.is_empty() {
            return Err(c.err("a column definition or WATERMARK FOR"));
        }
        if word_is(&elem[0], "WATERMARK") {
            if watermark.is_some() {
                return Err(WeirError::Syntax(Diagnostic::at(
                    "a stream has at most one WATERMARK clause",
                    tok_span(&elem[0]),
                )));
            }
            watermark = Some(parse_watermark(elem)?);
        } else {
            columns.push(parse_column(elem)?);
        }
        if c.eat(&Token::Comma) {
            continue;
        }
        c.expect(&Token::RParen, "',' or ')'")?;
        break;
    }
    let options = if c.eat_word("WITH") { parse_stream_options(c)? } else { Vec::new() };
    c.end()?;
    let _ = span;
    Ok(Statement::CreateStream {
        name,
        columns,
        watermark,
        options,
        if_not_exists,
        span: name_span,
    })
}

/// `( key = value, ... )` after `CREATE STREAM ... WITH`.
fn parse_stream_options(c: &mut Cursor) -> Result<Vec<StreamOption>> {
    c.expect(&Token::LParen, "'(' and stream options, e.g. (source = 'file', path = 'x.csv')")?;
    let mut options: Vec<StreamOption> = Vec::new();
    loop {
        let (key, span) = c.ident("an option name (source, path, format, ...)")?;
        if options.iter().any(|o| o.key == key) {
            return Err(WeirError::Syntax(Diagnostic::at(
                format!("option '{key}' is given twice"),
                span,
            )));
        }
        c.expect(&Token::Eq, "'='")?;
        let value = if c.peek_word("INTERVAL") {
            OptionValue::Duration(parse_duration(c)?)
        } else {
            match c.peek().map(|t| &t.token) {
                Some(Token::SingleQuotedString(s)) => {
                    c.pos += 1;
                    OptionValue::Text(s.clone())
                }
                Some(Token::Number(..)) | Some(Token::Minus) => {
                    let at = c.pos;
                    let neg = c.eat(&Token::Minus);
                    match c.next().map(|t| &t.token) {
                        Some(Token::Number(n, _)) => {
                            let n = if neg { format!("-{n}") } else { n.clone() };
                            // `10 SECONDS`: a duration.
                            match c.peek() {
                                Some(TokenWithSpan { token: Token::Word(w), .. })
                                    if unit_micros(&w.value).is_some() =>
                                {
                                    c.pos = at;
                                    OptionValue::Duration(parse_duration(c)?)
                                }
                                _ => OptionValue::Number(n),
                            }
                        }
                        _ => {
                            c.pos = at;
                            return Err(c.err("an option value"));
                        }
                    }
                }
                Some(Token::Word(w)) if w.quote_style.is_none() => {
                    c.pos += 1;
                    match w.value.to_ascii_lowercase().as_str() {
                        "true" => OptionValue::Bool(true),
                        "false" => OptionValue::Bool(false),
                        v => OptionValue::Text(v.to_string()),
                    }
                }
                _ => return Err(c.err("an option value: 'text', a number, TRUE or FALSE")),
            }
        };
        options.push(StreamOption { key, value, span });
        if c.eat(&Token::Comma) {
            continue;
        }
        c.expect(&Token::RParen, "',' or ')'")?;
        return Ok(options);
    }
}

fn parse_column(elem: &[TokenWithSpan]) -> Result<ColumnAst> {
    let mut c = Cursor::new(elem);
    let (name, span) = c.ident("a column name")?;
    let mut p = sub_parser(c.rest());
    let data_type = p.parse_data_type().map_err(|e| sql_err(e, elem))?;
    // Column constraints (NOT NULL, PRIMARY KEY...) are accepted and not enforced.
    Ok(ColumnAst { name, data_type, span })
}

fn parse_watermark(elem: &[TokenWithSpan]) -> Result<WatermarkAst> {
    let mut c = Cursor::new(elem);
    c.expect_word("WATERMARK")?;
    c.expect_word("FOR")?;
    let (column, span) = c.ident("the event-time column")?;
    let mut delay = None;
    if c.eat_word("AS") {
        let (col2, span2) = c.ident("the event-time column")?;
        if col2 != column {
            return Err(WeirError::Syntax(Diagnostic::at(
                format!("WATERMARK FOR {column} AS must be '{column}' or '{column} - <delay>'"),
                span2,
            )));
        }
        if c.eat(&Token::Minus) {
            delay = Some(parse_duration(&mut c)?);
        }
    }
    c.end()?;
    Ok(WatermarkAst { column, delay, span })
}

fn parse_create_table(toks: &[TokenWithSpan], span: Option<Span>) -> Result<Statement> {
    let mut p = sub_parser(toks);
    let stmt = p.parse_statement().map_err(|e| sql_err(e, toks))?;
    if let Err(e) = p.expect_token(&Token::EOF) {
        return Err(sql_err(e, toks));
    }
    match stmt {
        sql::Statement::CreateTable(ct) => {
            if ct.query.is_some() {
                return Err(WeirError::plan_at("CREATE TABLE ... AS is not supported yet", span));
            }
            let name = object_name(&ct.name);
            let columns = ct
                .columns
                .iter()
                .map(|col| ColumnAst {
                    name: ident_of(&col.name),
                    data_type: col.data_type.clone(),
                    span: Span::from_sql(col.name.span),
                })
                .collect();
            Ok(Statement::CreateTable {
                name,
                columns,
                if_not_exists: ct.if_not_exists,
                span: Span::from_sql(sqlparser::ast::Spanned::span(&ct.name)),
            })
        }
        _ => Err(WeirError::plan_at("expected CREATE TABLE", span)),
    }
}

fn ident_of(id: &sql::Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_ascii_lowercase()
    }
}

/// The last part of a possibly qualified name, normalized.
pub fn object_name(name: &sql::ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(ident_of)
        .unwrap_or_else(|| name.to_string().to_ascii_lowercase())
}

/// INSERT and DELETE, with an optional trailing `AT τ`.
fn parse_dml(toks: &[TokenWithSpan], span: Option<Span>) -> Result<Statement> {
    let (toks, at) = split_at_clause(toks)?;
    let mut p = sub_parser(toks);
    let stmt = p.parse_statement().map_err(|e| sql_err(e, toks))?;
    if let Err(e) = p.expect_token(&Token::EOF) {
        return Err(sql_err(e, toks));
    }
    match stmt {
        sql::Statement::Insert(ins) => {
            let target = match &ins.table {
                TableObject::TableName(n) => object_name(n),
                _ => return Err(WeirError::plan_at("INSERT needs a stream or table name", span)),
            };
            let Some(source) = ins.source else {
                return Err(WeirError::plan_at("INSERT needs VALUES or a query", span));
            };
            let span = Span::from_sql(sqlparser::ast::Spanned::span(&ins.table)).or(span);
            Ok(Statement::Insert {
                target,
                columns: ins.columns.iter().map(object_name).collect(),
                source,
                at,
                span,
            })
        }
        sql::Statement::Delete(del) => {
            let tables = match &del.from {
                sql::FromTable::WithFromKeyword(t) | sql::FromTable::WithoutKeyword(t) => t,
            };
            let target = match tables.as_slice() {
                [twj] if twj.joins.is_empty() => match &twj.relation {
                    sql::TableFactor::Table { name, .. } => object_name(name),
                    _ => return Err(WeirError::plan_at("DELETE needs one table", span)),
                },
                _ => return Err(WeirError::plan_at("DELETE needs one table", span)),
            };
            Ok(Statement::Delete { target, selection: del.selection.map(Box::new), at, span })
        }
        _ => Err(WeirError::plan_at("expected INSERT or DELETE", span)),
    }
}

/// Splits off a trailing `AT <instant>`.
fn split_at_clause(toks: &[TokenWithSpan]) -> Result<(&[TokenWithSpan], Option<TimeLit>)> {
    // Candidates: `AT n`, `AT -n`, `AT TIMESTAMP 's'`, `AT 's'` at the very end.
    for back in [2usize, 3] {
        if toks.len() > back && word_is(&toks[toks.len() - back], "AT") {
            let mut c = Cursor::new(&toks[toks.len() - back + 1..]);
            if let Ok(t) = parse_time_lit(&mut c) {
                if c.at_end() {
                    return Ok((&toks[..toks.len() - back], Some(t)));
                }
            }
        }
    }
    Ok((toks, None))
}

fn parse_time_lit(c: &mut Cursor) -> Result<TimeLit> {
    if c.eat_word("TIMESTAMP") {
        let s = c.string("a timestamp string")?;
        return timestamp_micros(&s, c).map(TimeLit::Micros);
    }
    if let Some(Token::SingleQuotedString(_)) = c.peek().map(|t| &t.token) {
        let s = c.string("a timestamp string")?;
        return timestamp_micros(&s, c).map(TimeLit::Micros);
    }
    c.integer("an instant (an integer tick or TIMESTAMP '...')").map(TimeLit::Ticks)
}

fn timestamp_micros(s: &str, c: &Cursor) -> Result<i64> {
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s)
        .map(|ns| ns.div_euclid(1000))
        .map_err(|e| {
            let span = c.toks.get(c.pos.saturating_sub(1)).and_then(tok_span);
            WeirError::Syntax(Diagnostic::at(format!("bad timestamp '{s}': {e}"), span))
        })
}

/// `10`, `10 SECONDS`, `INTERVAL '10' SECOND`, `INTERVAL '10 seconds'`.
fn parse_duration(c: &mut Cursor) -> Result<Duration> {
    if c.eat_word("INTERVAL") {
        let s = c.string("a quoted interval, e.g. INTERVAL '10' SECOND")?;
        let mut parts = s.split_whitespace();
        let n: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(|| {
            let span = c.toks.get(c.pos - 1).and_then(tok_span);
            WeirError::Syntax(Diagnostic::at(format!("bad interval '{s}'"), span))
        })?;
        let unit = match parts.next() {
            Some(u) => u.to_string(),
            None => match c.next() {
                Some(TokenWithSpan { token: Token::Word(w), .. }) => w.value.clone(),
                _ => {
                    c.pos -= 1;
                    return Err(c.err("an interval unit (SECOND, MINUTE, ...)"));
                }
            },
        };
        let scale = unit_micros(&unit).ok_or_else(|| c.err("an interval unit"))?;
        return Ok(Duration::Micros(n.saturating_mul(scale)));
    }
    let n = c.integer("a duration (e.g. 10, 10 SECONDS, INTERVAL '10' SECOND)")?;
    if let Some(TokenWithSpan { token: Token::Word(w), .. }) = c.peek() {
        if let Some(scale) = unit_micros(&w.value) {
            c.pos += 1;
            return Ok(Duration::Micros(n.saturating_mul(scale)));
        }
    }
    Ok(Duration::Ticks(n))
}

fn unit_micros(unit: &str) -> Option<i64> {
    let u = unit.to_ascii_uppercase();
    let u = u.strip_suffix('S').filter(|s| !s.is_empty()).unwrap_or(&u);
    Some(match u {
        "MICROSECOND" | "U" => 1,
        "MILLISECOND" | "M" => 1_000,
        "SECOND" | "SEC" => 1_000_000,
        "MINUTE" | "MIN" => 60_000_000,
        "HOUR" => 3_600_000_000,
        "DAY" => 86_400_000_000,
        _ => return None,
    })
}

/// The inside of `[ ... ]`.
fn parse_window(
    toks: &[TokenWithSpan],
    open: &TokenWithSpan,
    close: &TokenWithSpan,
) -> Result<WindowKind> {
    let mut c = Cursor::new(toks).followed_by(close);
    let expected = "UNBOUNDED, NOW, RANGE, ROWS or PARTITION BY in the window";
    if c.at_end() {
        return Err(WeirError::Syntax(Diagnostic::at(
            format!("expected {expected}, found ']'"),
            tok_span(open).map(|s| Span::point(s.line, s.column + 1)),
        )));
    }
    let kind = if c.eat_word("UNBOUNDED") {
        WindowKind::Unbounded
    } else if c.eat_word("NOW") {
        WindowKind::Now
    } else if c.eat_word("RANGE") {
        if c.eat_word("UNBOUNDED") {
            WindowKind::Unbounded
        } else {
            let range = parse_duration(&mut c)?;
            if c.eat_word("SLIDE") {
                WindowKind::RangeSlide(range, parse_duration(&mut c)?)
            } else {
                WindowKind::Range(range)
            }
        }
    } else if c.eat_word("ROWS") {
        WindowKind::Rows(rows_count(&mut c)?)
    } else if c.eat_word("PARTITION") {
        c.expect_word("BY")?;
        let mut cols = vec![c.ident("a partition column")?];
        while c.eat(&Token::Comma) {
            cols.push(c.ident("a partition column")?);
        }
        c.expect_word("ROWS")?;
        WindowKind::PartitionRows(cols, rows_count(&mut c)?)
    } else {
        return Err(c.err(expected));
    };
    if !c.at_end() {
        return Err(c.err("']'"));
    }
    Ok(kind)
}

/// `TUMBLE(TABLE s, DESCRIPTOR(col), size)` or `HOP(TABLE s, DESCRIPTOR(col), slide, size)`:
/// the tokens inside `TABLE( ... )`.
fn parse_window_function(
    toks: &[TokenWithSpan],
    close: &TokenWithSpan,
) -> Result<(String, WindowKind)> {
    let mut c = Cursor::new(toks).followed_by(close);
    let hop = if c.eat_word("TUMBLE") {
        false
    } else {
        c.expect_word("HOP")?;
        true
    };
    c.expect(&Token::LParen, "'('")?;
    c.expect_word("TABLE")?;
    let (stream, _) = c.ident("a stream name")?;
    c.expect(&Token::Comma, "','")?;
    c.expect_word("DESCRIPTOR")?;
    c.expect(&Token::LParen, "'('")?;
    let (column, _) = c.ident("the event-time column")?;
    c.expect(&Token::RParen, "')'")?;
    c.expect(&Token::Comma, "','")?;
    let first = parse_duration(&mut c)?;
    let kind = if hop {
        c.expect(&Token::Comma, "',' and the window size (HOP takes slide, then size)")?;
        let size = parse_duration(&mut c)?;
        WindowKind::Hop { column, slide: first, size }
    } else {
        WindowKind::Tumble { column, size: first }
    };
    c.expect(&Token::RParen, "')'")?;
    c.end()?;
    Ok((stream, kind))
}

fn rows_count(c: &mut Cursor) -> Result<u64> {
    let span = c.peek().and_then(tok_span);
    let n = c.integer("a row count")?;
    u64::try_from(n).map_err(|_| {
        WeirError::Syntax(Diagnostic::at("a ROWS window needs a count of at least 0", span))
    })
}

fn matching(toks: &[TokenWithSpan], open: usize, l: &Token, r: &Token) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        if &t.token == l {
            depth += 1;
        } else if &t.token == r {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// A word token at `span` (for tokens the pre-pass writes in place of CQL syntax).
fn word_token(value: &str, keyword: Keyword, span: sqlparser::tokenizer::Span) -> TokenWithSpan {
    TokenWithSpan::new(Token::Word(Word { value: value.into(), quote_style: None, keyword }), span)
}

/// Writes `synthetic AS name` in place of a windowed stream, or just `synthetic` when the
/// query gives an alias itself (`next` is the token after the window).
fn push_windowed(
    out: &mut Vec<TokenWithSpan>,
    synthetic: &str,
    name: TokenWithSpan,
    next: Option<&TokenWithSpan>,
) {
    let alias_follows = match next.map(|t| &t.token) {
        Some(Token::Word(w)) => {
            w.keyword == Keyword::AS || !RESERVED_FOR_TABLE_ALIAS.contains(&w.keyword)
        }
        _ => false,
    };
    out.push(word_token(synthetic, Keyword::NoKeyword, name.span));
    if !alias_follows {
        out.push(word_token("AS", Keyword::AS, name.span));
        out.push(name);
    }
}

/// Clause keywords that end a FROM clause at their nesting depth.
const ENDS_FROM: &[&str] = &[
    "SELECT",
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "ON",
    "USING",
    "WINDOW",
    "QUALIFY",
];

/// Takes CQL's parts out of a query's tokens and parses the rest with sqlparser.
pub fn parse_cql_query(toks: &[TokenWithSpan]) -> Result<CqlQuery> {
    let mut toks: Vec<TokenWithSpan> = toks.to_vec();
    if toks.is_empty() {
        return Err(WeirError::Syntax(Diagnostic::new("expected a query, found end of statement")));
    }
    // 1. Relation-to-stream operator after the top-level SELECT.
    let mut r2s = None;
    // The top-level SELECT is the first SELECT outside parentheses (after any WITH clause,
    // whose definitions are parenthesized).
    let mut depth = 0i32;
    let mut sel = None;
    for (i, t) in toks.iter().enumerate() {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0 && word_is(t, "SELECT") => {
                sel = Some(i);
                break;
            }
            _ => {}
        }
    }
    if let Some(sel) = sel.filter(|&i| i + 1 < toks.len()) {
        let op = if word_is(&toks[sel + 1], "ISTREAM") {
            Some(R2S::Istream)
        } else if word_is(&toks[sel + 1], "DSTREAM") {
            Some(R2S::Dstream)
        } else if word_is(&toks[sel + 1], "RSTREAM") {
            Some(R2S::Rstream)
        } else {
            None
        };
        if let Some(op) = op {
            r2s = Some(op);
            toks.remove(sel + 1);
            // Function form: SELECT ISTREAM(a, b) FROM ... / SELECT ISTREAM(*)
            if toks.get(sel + 1).is_some_and(|t| t.token == Token::LParen) {
                if let Some(close) = matching(&toks, sel + 1, &Token::LParen, &Token::RParen) {
                    let after = toks.get(close + 1);
                    if after.is_none() || after.is_some_and(|t| word_is(t, "FROM")) {
                        toks.remove(close);
                        toks.remove(sel + 1);
                    }
                }
            }
        }
    }
    // 2. `x IN ()`: SQL's empty list (false; NOT IN () is true, even for NULL x), which
    // sqlparser rejects, becomes an empty subquery with the same meaning.
    let mut i = 0;
    while i + 2 < toks.len() {
        if word_is(&toks[i], "IN")
            && toks[i + 1].token == Token::LParen
            && toks[i + 2].token == Token::RParen
        {
            let span = toks[i + 1].span;
            let empty = [
                word_token("SELECT", Keyword::SELECT, span),
                word_token("NULL", Keyword::NULL, span),
                word_token("WHERE", Keyword::WHERE, span),
                word_token("FALSE", Keyword::FALSE, span),
            ];
            toks.splice(i + 2..i + 2, empty);
            i += 6;
        } else {
            i += 1;
        }
    }
    // 3. Windows after stream names in FROM clauses.
    let mut windows = Vec::new();
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(toks.len());
    let mut in_from: Vec<bool> = vec![false];
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        match &t.token {
            Token::LParen => in_from.push(false),
            Token::RParen if in_from.len() > 1 => {
                in_from.pop();
            }
            Token::Word(w)
                if in_from.last().copied().unwrap_or(false)
                    && w.value.eq_ignore_ascii_case("TABLE")
                    && toks.get(i + 1).is_some_and(|t| t.token == Token::LParen)
                    && toks
                        .get(i + 2)
                        .is_some_and(|t| word_is(t, "TUMBLE") || word_is(t, "HOP")) =>
            {
                let close =
                    matching(&toks, i + 1, &Token::LParen, &Token::RParen).ok_or_else(|| {
                        WeirError::Syntax(Diagnostic::at(
                            "TABLE( is never closed: expected ')'",
                            tok_span(t),
                        ))
                    })?;
                let (stream, kind) = parse_window_function(&toks[i + 2..close], &toks[close])?;
                let synthetic = format!("{WINDOW_PREFIX}{}", windows.len());
                let span = Span::from_sql(sqlparser::tokenizer::Span::new(
                    t.span.start,
                    toks[close].span.end,
                ));
                let name = word_token(&stream, Keyword::NoKeyword, t.span);
                push_windowed(&mut out, &synthetic, name, toks.get(close + 1));
                windows.push(WindowAst { synthetic, stream, kind, span });
                i = close + 1;
                continue;
            }
            Token::Word(w) if w.quote_style.is_none() => {
                let up = w.value.to_ascii_uppercase();
                if let Some(top) = in_from.last_mut() {
                    if up == "FROM" || up == "JOIN" {
                        *top = true;
                    } else if ENDS_FROM.contains(&up.as_str()) {
                        *top = false;
                    }
                }
            }
            Token::LBracket if in_from.last().copied().unwrap_or(false) => {
                let close =
                    matching(&toks, i, &Token::LBracket, &Token::RBracket).ok_or_else(|| {
                        WeirError::Syntax(Diagnostic::at(
                            "window '[' is never closed: expected ']'",
                            tok_span(t),
                        ))
                    })?;
                let Some(name_tok) = out.pop() else {
                    return Err(WeirError::Syntax(Diagnostic::at(
                        "a window must follow a stream name",
                        tok_span(t),
                    )));
                };
                let Token::Word(name_word) = &name_tok.token else {
                    return Err(WeirError::Plan(Diagnostic::at(
                        "a window must follow a stream name (windows over subqueries are not \
                         supported: define a view and window it)",
                        tok_span(t),
                    )));
                };
                if out.last().is_some_and(|p| p.token == Token::Period) {
                    return Err(WeirError::Plan(Diagnostic::at(
                        "qualified stream names are not supported before a window",
                        tok_span(&name_tok),
                    )));
                }
                let kind = parse_window(&toks[i + 1..close], t, &toks[close])?;
                let synthetic = format!("{WINDOW_PREFIX}{}", windows.len());
                let span = Span::from_sql(sqlparser::tokenizer::Span::new(
                    name_tok.span.start,
                    toks[close].span.end,
                ));
                windows.push(WindowAst {
                    synthetic: synthetic.clone(),
                    stream: ident_name(name_word),
                    kind,
                    span,
                });
                push_windowed(&mut out, &synthetic, name_tok, toks.get(close + 1));
                i = close + 1;
                continue;
            }
            _ => {}
        }
        out.push(t.clone());
        i += 1;
    }
    let mut p = sub_parser(&out);
    let query = p.parse_query().map_err(|e| sql_err(e, &out))?;
    if let Err(e) = p.expect_token(&Token::EOF) {
        return Err(sql_err(e, &out));
    }
    Ok(CqlQuery { query, r2s, windows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        let mut v = parse_script(sql).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).statement
    }

    fn query(sql: &str) -> CqlQuery {
        match one(sql) {
            Statement::Query(q) => *q,
            other => panic!("not a query: {other:?}"),
        }
    }

    #[test]
    fn windows_are_replaced_and_round_trip() {
        let q = query("SELECT ISTREAM * FROM s [RANGE 10 SECONDS SLIDE 2 SECONDS] AS x, t [NOW]");
        assert_eq!(q.r2s, Some(R2S::Istream));
        assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 AS x, __weir_w1 AS t");
        assert_eq!(
            q.windows[0].kind,
            WindowKind::RangeSlide(Duration::Micros(10_000_000), Duration::Micros(2_000_000))
        );
        assert_eq!(q.windows[1].kind, WindowKind::Now);
        assert_eq!(q.windows[1].stream, "t");
        // Round trip: the rewritten SQL parses to the same text again.
        let again = query(&q.query.to_string());
        assert_eq!(again.query.to_string(), q.query.to_string());
    }

    #[test]
    fn function_form_of_r2s() {
        let q = query("SELECT RSTREAM(a, b) FROM s [ROWS 3]");
        assert_eq!(q.r2s, Some(R2S::Rstream));
        assert_eq!(q.query.to_string(), "SELECT a, b FROM __weir_w0 AS s");
        let q = query("SELECT DSTREAM(*) FROM s [PARTITION BY k, j ROWS 1] y");
        assert_eq!(q.r2s, Some(R2S::Dstream));
        assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 y");
        match &q.windows[0].kind {
            WindowKind::PartitionRows(cols, 1) => {
                assert_eq!(cols.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["k", "j"])
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn durations() {
        let q = query("SELECT * FROM s [RANGE INTERVAL '5' MINUTE] JOIN t [RANGE 3] ON s.a = t.a");
        assert_eq!(q.windows[0].kind, WindowKind::Range(Duration::Micros(300_000_000)));
        assert_eq!(q.windows[1].kind, WindowKind::Range(Duration::Ticks(3)));
        assert_eq!(
            q.query.to_string(),
            "SELECT * FROM __weir_w0 AS s JOIN __weir_w1 AS t ON s.a = t.a"
        );
    }

    #[test]
    fn create_stream_with_watermark() {
        match one("CREATE STREAM bids (auction BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)") {
            Statement::CreateStream { name, columns, watermark: Some(w), .. } => {
                assert_eq!(name, "bids");
                assert_eq!(columns.len(), 2);
                assert_eq!(w.column, "ts");
                assert_eq!(w.delay, Some(Duration::Micros(2_000_000)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_stream_with_options() {
        let sql = "CREATE STREAM bids (price BIGINT, ts TIMESTAMP, WATERMARK FOR ts) WITH (source = 'file', \
                   path = 'data/b.csv', header = true, max = -3, idle_timeout = INTERVAL '5' SECOND, \
                   poll = 250 MILLISECONDS, format = csv)";
        match one(sql) {
            Statement::CreateStream { options, .. } => {
                let kv: Vec<(String, OptionValue)> =
                    options.into_iter().map(|o| (o.key, o.value)).collect();
                assert_eq!(
                    kv,
                    vec![
                        ("source".into(), OptionValue::Text("file".into())),
                        ("path".into(), OptionValue::Text("data/b.csv".into())),
                        ("header".into(), OptionValue::Bool(true)),
                        ("max".into(), OptionValue::Number("-3".into())),
                        ("idle_timeout".into(), OptionValue::Duration(Duration::Micros(5_000_000))),
                        ("poll".into(), OptionValue::Duration(Duration::Micros(250_000))),
                        ("format".into(), OptionValue::Text("csv".into())),
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        let err = parse_script("CREATE STREAM s (t INT, WATERMARK FOR t) WITH (a = 1, a = 2)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("option 'a' is given twice"), "{err}");
        let err = parse_script("CREATE STREAM s (t INT, WATERMARK FOR t) WITH (a 1)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected '='"), "{err}");
        assert!(matches!(one("SHOW STREAM STATS"), Statement::ShowStreamStats));
    }

    #[test]
    fn dml_with_at() {
        match one("INSERT INTO prices VALUES ('x', 12) AT 3") {
            Statement::Insert { target, at, .. } => {
                assert_eq!(target, "prices");
                assert_eq!(at, Some(TimeLit::Ticks(3)));
            }
            other => panic!("{other:?}"),
        }
        match one("DELETE FROM prices WHERE item = 'x' AT 3") {
            Statement::Delete { target, at, selection, .. } => {
                assert_eq!(target, "prices");
                assert_eq!(at, Some(TimeLit::Ticks(3)));
                assert_eq!(selection.unwrap().to_string(), "item = 'x'");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn script_splitting_and_heartbeats() {
        let v = parse_script("ADVANCE s TO 10; CLOSE STREAM s;\n CLOSE ALL; SHOW STREAMS").unwrap();
        assert_eq!(v.len(), 4);
        assert!(matches!(v[0].statement, Statement::Advance { to: TimeLit::Ticks(10), .. }));
        assert_eq!(v[2].span.line, 2);
    }

    #[test]
    fn errors_name_position_and_expectation() {
        let e = parse_script("SELECT * FROM s [RANGE]").unwrap_err().to_string();
        assert!(e.contains("expected a duration"), "{e}");
        assert!(e.contains("found ']' at line 1, column 23"), "{e}");
        let e = parse_script("SELECT * FROM s [FOO 3]").unwrap_err().to_string();
        assert!(e.contains("expected UNBOUNDED, NOW, RANGE, ROWS or PARTITION BY"), "{e}");
        let e = parse_script("SELECT a FROM s WHERE").unwrap_err().to_string();
        assert!(e.contains("expected an expression"), "{e}");
        assert!(e.contains("^"), "{e}");
    }

    /// parse -> print -> parse gives the same query.
    fn round_trip(sql: &str) {
        let q = query(sql);
        let printed = q.to_string();
        let again = query(&printed);
        assert_eq!(again.to_string(), printed, "round trip of {sql}");
        assert_eq!(again.r2s, q.r2s);
        // Spans differ between the two texts; compare the windows as written.
        let kinds = |q: &CqlQuery| {
            q.windows.iter().map(|w| (w.stream.clone(), w.kind.to_string())).collect::<Vec<_>>()
        };
        assert_eq!(kinds(&again), kinds(&q));
    }

    #[test]
    fn round_trips() {
        for sql in [
            "SELECT ISTREAM a, b FROM s [RANGE 10] WHERE a > 1",
            "SELECT DSTREAM(*) FROM s [ROWS 3] x JOIN t [NOW] ON x.a = t.a",
            "SELECT RSTREAM k, COUNT(*) FROM s [PARTITION BY k, j ROWS 2] GROUP BY k",
            "SELECT * FROM s [RANGE INTERVAL '10' SECOND SLIDE 5 SECONDS] AS w, p",
            "SELECT k FROM (SELECT k FROM s [UNBOUNDED]) AS sub",
            "SELECT a FROM s [RANGE 2] UNION ALL SELECT a FROM t [RANGE 3]",
            "WITH g AS (SELECT k FROM s [RANGE 2]) SELECT ISTREAM k FROM g",
            "SELECT ISTREAM window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start",
            "SELECT * FROM TABLE(HOP(TABLE e, DESCRIPTOR(ts), 5, 10)) AS h",
        ] {
            round_trip(sql);
        }
    }

    mod props {
        use proptest::prelude::*;

        fn window() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("[UNBOUNDED]".to_string()),
                Just("[NOW]".to_string()),
                (1i64..100).prop_map(|t| format!("[RANGE {t}]")),
                (1i64..100, 1i64..100).prop_map(|(t, s)| format!("[RANGE {t} SLIDE {s}]")),
                (1i64..10).prop_map(|t| format!("[RANGE {t} SECONDS]")),
                (0u64..10).prop_map(|n| format!("[ROWS {n}]")),
                (0u64..10).prop_map(|n| format!("[PARTITION BY k ROWS {n}]")),
            ]
        }

        fn query() -> impl Strategy<Value = String> {
            (
                prop_oneof![Just(""), Just("ISTREAM "), Just("DSTREAM "), Just("RSTREAM ")],
                prop::collection::vec(
                    (prop_oneof![Just("s"), Just("t"), Just("bids")], window(), any::<bool>()),
                    1..4,
                ),
                any::<bool>(),
            )
                .prop_map(|(r2s, from, filter)| {
                    let from: Vec<String> = from
                        .iter()
                        .enumerate()
                        .map(|(i, (name, w, alias))| {
                            if *alias {
                                format!("{name} {w} AS x{i}")
                            } else {
                                format!("{name} {w}")
                            }
                        })
                        .collect();
                    let filter = if filter { " WHERE a > 1" } else { "" };
                    format!("SELECT {r2s}a, b FROM {}{filter}", from.join(", "))
                })
        }

        proptest! {
            #[test]
            fn generated_queries_round_trip(sql in query()) {
                super::round_trip(&sql);
            }

            #[test]
            fn token_soup_never_panics(words in prop::collection::vec(prop_oneof![
                Just("SELECT"), Just("ISTREAM"), Just("FROM"), Just("s"), Just("["), Just("]"),
                Just("RANGE"), Just("SLIDE"), Just("ROWS"), Just("PARTITION"), Just("BY"),
                Just("("), Just(")"), Just(","), Just("10"), Just("-1"), Just("SECONDS"),
                Just("INTERVAL"), Just("'5'"), Just("AS"), Just("WHERE"), Just("CREATE"),
                Just("STREAM"), Just("WATERMARK"), Just("FOR"), Just("t"), Just("-"), Just(";"),
                Just("ADVANCE"), Just("TO"), Just("CLOSE"), Just("AT"), Just("INSERT"),
                Just("INTO"), Just("VALUES"), Just("NOW"), Just("UNBOUNDED"), Just("*"),
            ], 0..25)) {
                let _ = crate::parser::parse_script(&words.join(" "));
            }

            #[test]
            fn arbitrary_text_never_panics(text in ".{0,80}") {
                let _ = crate::parser::parse_script(&text);
            }
        }
    }

    #[test]
    fn never_panics_on_garbage() {
        for s in [
            "[",
            "]",
            "SELECT ISTREAM(",
            "FROM [",
            "SELECT * FROM s [ROWS -1]",
            "CREATE STREAM x (",
            "ADVANCE",
            "INSERT INTO t VALUES (1) AT",
        ] {
            let _ = parse_script(s);
        }
    }
}
