//! Typed errors and user-facing diagnostics.
//!
//! Errors split into what the user can fix ([`WeirError::Syntax`], [`WeirError::Plan`],
//! [`WeirError::Execution`], [`WeirError::Input`]) and what is a bug in Weir
//! ([`WeirError::Internal`], whose message says so). SQL errors carry a [`Diagnostic`] with the
//! line and column of the offending text; its `Display` shows that line with a caret under it.

use std::fmt;

/// A position range in SQL text: 1-based lines and columns (in characters), end exclusive
/// (sqlparser's convention: the end is the position just after the last character).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub line: u64,
    pub column: u64,
    pub end_line: u64,
    pub end_column: u64,
}

impl Span {
    /// A span covering the one character at a position.
    pub fn point(line: u64, column: u64) -> Span {
        Span { line, column, end_line: line, end_column: column + 1 }
    }

    /// Converts sqlparser's span; `None` for its "empty" span (line 0).
    pub fn from_sql(span: sqlparser::tokenizer::Span) -> Option<Span> {
        if span.start.line == 0 {
            return None;
        }
        Some(Span {
            line: span.start.line,
            column: span.start.column,
            end_line: span.end.line,
            end_column: span.end.column,
        })
    }
}

/// A message about SQL text, with where it applies and the text itself so it can be rendered
/// without the caller keeping the statement around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Option<Span>,
    /// The full SQL text the span points into.
    pub source: Option<String>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>) -> Self {
        Diagnostic { message: message.into(), span: None, source: None }
    }

    pub fn at(message: impl Into<String>, span: Option<Span>) -> Self {
        Diagnostic { message: message.into(), span, source: None }
    }

    /// Attaches the SQL text the span refers to (kept if one is already attached).
    pub fn with_source(mut self, sql: &str) -> Self {
        if self.source.is_none() {
            self.source = Some(sql.to_string());
        }
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        let Some(span) = self.span else { return Ok(()) };
        write!(f, " at line {}, column {}", span.line, span.column)?;
        let Some(src) = &self.source else { return Ok(()) };
        let Some(line) = src.lines().nth(span.line.saturating_sub(1) as usize) else {
            return Ok(());
        };
        let col = span.column.max(1) as usize;
        let width = if span.end_line == span.line && span.end_column > span.column {
            (span.end_column - span.column) as usize
        } else {
            line.chars().count().saturating_sub(col - 1).max(1)
        };
        // Columns count characters; keep tabs so the caret lines up under them.
        let pad: String =
            line.chars().take(col - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        write!(f, "\n  {}\n  {}{}", line, pad, "^".repeat(width.max(1)))
    }
}

/// Every error a Weir library crate returns.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WeirError {
    /// The SQL text does not parse.
    #[error("syntax error: {0}")]
    Syntax(Diagnostic),
    /// The SQL parses but cannot be planned: unknown names, type errors, unsupported forms.
    #[error("{0}")]
    Plan(Diagnostic),
    /// A statement is valid but cannot run now (a late element, a closed stream...).
    #[error("{0}")]
    Execution(String),
    /// An input event is malformed: names its source, row and field.
    #[error("bad input: {0}")]
    Input(String),
    /// A broken invariant inside Weir.
    #[error("internal error (this is a bug in Weir, please report it): {0}")]
    Internal(String),
}

/// One constructor per category: `WeirError::plan`/`plan_at`, `syntax_at`, `exec`, `input`,
/// `internal`. Code builds errors through these rather than through the variants.
impl WeirError {
    pub fn plan(message: impl Into<String>) -> Self {
        WeirError::Plan(Diagnostic::new(message))
    }

    pub fn plan_at(message: impl Into<String>, span: Option<Span>) -> Self {
        WeirError::Plan(Diagnostic::at(message, span))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        WeirError::Internal(message.into())
    }

    pub fn exec(message: impl Into<String>) -> Self {
        WeirError::Execution(message.into())
    }

    pub fn input(message: impl Into<String>) -> Self {
        WeirError::Input(message.into())
    }

    pub fn syntax_at(message: impl Into<String>, span: Option<Span>) -> Self {
        WeirError::Syntax(Diagnostic::at(message, span))
    }

    /// Attaches the statement text to a SQL diagnostic so it renders with a caret.
    pub fn with_source(self, sql: &str) -> Self {
        match self {
            WeirError::Syntax(d) => WeirError::Syntax(d.with_source(sql)),
            WeirError::Plan(d) => WeirError::Plan(d.with_source(sql)),
            other => other,
        }
    }
}

impl From<arrow::error::ArrowError> for WeirError {
    fn from(e: arrow::error::ArrowError) -> Self {
        WeirError::Internal(format!("arrow: {e}"))
    }
}

pub type Result<T, E = WeirError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_caret_under_span() {
        let d = Diagnostic::at("unknown stream 'bids'", Some(Span::point(2, 6)))
            .with_source("SELECT *\nFROM bids");
        assert_eq!(
            d.to_string(),
            "unknown stream 'bids' at line 2, column 6\n  FROM bids\n       ^"
        );
    }

    #[test]
    fn renders_multi_char_span() {
        let span = Span { line: 1, column: 8, end_line: 1, end_column: 11 };
        let d = Diagnostic::at("no such column", Some(span)).with_source("SELECT abc FROM t");
        assert_eq!(
            d.to_string(),
            "no such column at line 1, column 8\n  SELECT abc FROM t\n         ^^^"
        );
    }
}
