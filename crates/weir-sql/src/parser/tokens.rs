//! Tokens and names: the cursor our own statement parsers walk, spans, identifier
//! normalization, and sqlparser errors turned into [`WeirError`]s with a position.

use sqlparser::ast as sql;
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Word};
use weir_common::{Result, Span, WeirError};

/// Maps token locations (1-based line, column in characters) back to byte offsets, in time
/// independent of the script's length (scripts can hold many thousands of statements).
pub(super) struct Source<'a> {
    sql: &'a str,
    /// Byte offset where each line starts, and whether the line is ASCII (then columns are
    /// byte offsets).
    lines: Vec<(usize, bool)>,
}

impl<'a> Source<'a> {
    pub(super) fn new(sql: &'a str) -> Self {
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
    pub(super) fn offset_of(&self, loc: Location) -> Option<usize> {
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
    pub(super) fn slice(&self, toks: &[TokenWithSpan]) -> String {
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

pub(super) fn span_of(toks: &[TokenWithSpan]) -> Option<Span> {
    let first = toks.first()?;
    let last = toks.last()?;
    Span::from_sql(sqlparser::tokenizer::Span::new(first.span.start, last.span.end))
}

pub(super) fn tok_span(t: &TokenWithSpan) -> Option<Span> {
    Span::from_sql(t.span)
}

pub(super) fn word_is(t: &TokenWithSpan, w: &str) -> bool {
    matches!(&t.token, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w))
}

/// Identifiers are case-insensitive unless quoted, as in DataFusion.
pub(super) fn ident_name(word: &Word) -> String {
    if word.quote_style.is_some() {
        word.value.clone()
    } else {
        word.value.to_ascii_lowercase()
    }
}

pub(super) fn describe(t: Option<&TokenWithSpan>) -> String {
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
    WeirError::syntax_at(msg, span)
}

/// Like [`sqlparser_error`], pointing just past `toks` when sqlparser gives no position (it
/// gives none at the end of input).
pub(super) fn sql_err(e: ParserError, toks: &[TokenWithSpan]) -> WeirError {
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
pub(super) struct Cursor<'a> {
    pub(super) toks: &'a [TokenWithSpan],
    pub(super) pos: usize,
    /// The token right after `toks` in the statement (e.g. a window's `]`), for messages.
    after: Option<&'a TokenWithSpan>,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(toks: &'a [TokenWithSpan]) -> Self {
        Cursor { toks, pos: 0, after: None }
    }

    pub(super) fn followed_by(mut self, after: &'a TokenWithSpan) -> Self {
        self.after = Some(after);
        self
    }

    pub(super) fn peek(&self) -> Option<&'a TokenWithSpan> {
        self.toks.get(self.pos)
    }

    pub(super) fn next(&mut self) -> Option<&'a TokenWithSpan> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }

    /// Steps back over the token [`Cursor::next`] took.
    pub(super) fn pos_back(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    pub(super) fn rest(&self) -> &'a [TokenWithSpan] {
        &self.toks[self.pos.min(self.toks.len())..]
    }

    pub(super) fn err(&self, expected: &str) -> WeirError {
        let found = self.peek().or(self.after);
        let span = match found {
            Some(t) => tok_span(t),
            None => self.toks.last().and_then(|t| {
                Span::from_sql(t.span).map(|s| Span::point(s.end_line, s.end_column))
            }),
        };
        WeirError::syntax_at(format!("expected {expected}, found {}", describe(found)), span)
    }

    pub(super) fn peek_word(&self, w: &str) -> bool {
        self.peek().is_some_and(|t| word_is(t, w))
    }

    pub(super) fn eat_word(&mut self, w: &str) -> bool {
        if self.peek_word(w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn expect_word(&mut self, w: &str) -> Result<()> {
        if self.eat_word(w) {
            Ok(())
        } else {
            Err(self.err(w))
        }
    }

    pub(super) fn eat(&mut self, tok: &Token) -> bool {
        if self.peek().is_some_and(|t| &t.token == tok) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn expect(&mut self, tok: &Token, what: &str) -> Result<()> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    pub(super) fn ident(&mut self, what: &str) -> Result<(String, Option<Span>)> {
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

    pub(super) fn end(&self) -> Result<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err("end of statement"))
        }
    }

    pub(super) fn integer(&mut self, what: &str) -> Result<i64> {
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

    pub(super) fn string(&mut self, what: &str) -> Result<String> {
        match self.peek().map(|t| &t.token) {
            Some(Token::SingleQuotedString(s)) => {
                self.pos += 1;
                Ok(s.clone())
            }
            _ => Err(self.err(what)),
        }
    }
}

/// A sqlparser parser over `toks`, once they pass [`check_prefix_runs`].
pub(super) fn sub_parser(toks: &[TokenWithSpan]) -> Result<Parser<'static>> {
    static DIALECT: GenericDialect = GenericDialect {};
    check_prefix_runs(toks)?;
    check_size(toks)?;
    Ok(Parser::new(&DIALECT).with_tokens_with_locations(toks.to_vec()))
}

/// The most chaining operators (`AND`, `OR`, `+`, `-`, `*`, `/`, `%`, `||`; comparisons do not
/// chain) one statement may hold. A chain of them is
/// a tree as deep as it is long, and its syntax tree is cloned, visited and dropped by
/// recursive code (sqlparser's, Weir's, parts of DataFusion's): much deeper than this
/// overflows a 2 MiB thread's stack in a debug build (about 400 `OR`s). Far beyond any
/// hand-written query; generated SQL should use `IN (...)` lists, which are flat.
pub(super) const MAX_OPERATORS: usize = 256;

/// The most set operations (`UNION`, `INTERSECT`, `EXCEPT`) one statement may hold, for the
/// same reason: each nests the plan a level deeper.
pub(super) const MAX_SET_OPERATIONS: usize = 64;

/// Refuses a statement with more operators or set operations than the limits above, naming
/// the limit, at the first one past it.
fn check_size(toks: &[TokenWithSpan]) -> Result<()> {
    let (mut operators, mut sets) = (0usize, 0usize);
    for t in toks {
        let (operator, set) = match &t.token {
            Token::Word(w) if w.quote_style.is_none() => (
                matches!(w.keyword, Keyword::AND | Keyword::OR),
                matches!(w.keyword, Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT),
            ),
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::StringConcat => (true, false),
            _ => (false, false),
        };
        operators += operator as usize;
        sets += set as usize;
        if operators > MAX_OPERATORS {
            return Err(WeirError::syntax_at(
                format!("statement too large: more than {MAX_OPERATORS} operators"),
                tok_span(t),
            ));
        }
        if sets > MAX_SET_OPERATIONS {
            return Err(WeirError::syntax_at(
                format!(
                    "statement too large: more than {MAX_SET_OPERATIONS} UNION, INTERSECT or \
                     EXCEPT"
                ),
                tok_span(t),
            ));
        }
    }
    Ok(())
}

/// The most prefix operators (`NOT`, `-`, `+`) in a row a statement may hold. Each is a level
/// of nesting: sqlparser stops at 50 levels with an error that does not say why ("expected end
/// of statement, found NOT"), and planning a deeply nested expression recurses through
/// DataFusion's rewrites, which in a debug build overflow a 2 MiB thread's stack at about 35.
const MAX_PREFIX_RUN: usize = 20;

/// Refuses a run of more than [`MAX_PREFIX_RUN`] prefix operators, naming it.
fn check_prefix_runs(toks: &[TokenWithSpan]) -> Result<()> {
    let mut run: Option<(usize, &TokenWithSpan)> = None;
    for t in toks {
        let prefix = match &t.token {
            Token::Word(w) => w.keyword == Keyword::NOT && w.quote_style.is_none(),
            Token::Minus | Token::Plus => true,
            Token::Whitespace(_) => continue,
            _ => false,
        };
        run = match (prefix, run) {
            (false, _) => None,
            (true, None) => Some((1, t)),
            (true, Some((n, first))) => Some((n + 1, first)),
        };
        if let Some((_, first)) = run.filter(|(n, _)| *n > MAX_PREFIX_RUN) {
            return Err(WeirError::syntax_at(
                format!(
                    "statement nests too deeply: more than {MAX_PREFIX_RUN} operators in a row \
                     (NOT, - or +)"
                ),
                tok_span(first),
            ));
        }
    }
    Ok(())
}

pub(super) fn ident_of(id: &sql::Ident) -> String {
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

pub(super) fn matching(toks: &[TokenWithSpan], open: usize, l: &Token, r: &Token) -> Option<usize> {
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
pub(super) fn word_token(
    value: &str,
    keyword: Keyword,
    span: sqlparser::tokenizer::Span,
) -> TokenWithSpan {
    TokenWithSpan::new(Token::Word(Word { value: value.into(), quote_style: None, keyword }), span)
}
