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
//!
//! The files, by job: this one splits a script and dispatches each statement; `ast.rs` holds
//! the syntax tree and prints it back as CQL; `cql.rs` is the pre-pass over a query (R2S and
//! windows); `ddl.rs` parses `CREATE STREAM` and `CREATE TABLE`; `dml.rs` INSERT and DELETE
//! with `AT τ`; `time.rs` durations and instants; `tokens.rs` the token cursor, spans, names
//! and sqlparser's errors.

mod ast;
mod cql;
mod ddl;
mod dml;
mod group_window;
mod time;
mod tokens;

pub use ast::{
    ColumnAst, CqlQuery, Duration, ObjectKind, OptionValue, ParsedStatement, PrimaryKeyAst,
    Statement, StreamOption, TimeLit, WatermarkAst, WindowAst, WindowKind,
};
pub use cql::{parse_cql_query, VERSIONED_PREFIX, WINDOW_PREFIX};
pub use tokens::{object_name, sqlparser_error};

use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};
use weir_common::{Result, Span, WeirError};

use ddl::{parse_copy_options, parse_create_stream, parse_create_table, parse_stream_options};
use dml::parse_dml;
use time::parse_time_lit;
use tokens::{span_of, Cursor, Source};

/// Parses a script of `;`-separated statements.
pub fn parse_script(sql: &str) -> Result<Vec<ParsedStatement>> {
    parse_script_inner(sql).map_err(|e| e.with_source(sql))
}

fn parse_script_inner(sql: &str) -> Result<Vec<ParsedStatement>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(|e| {
        WeirError::syntax_at(
            e.message.clone(),
            Some(Span::point(e.location.line, e.location.column)),
        )
    })?;
    let mut tokens: Vec<TokenWithSpan> =
        tokens.into_iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).collect();
    time::complete_timestamp_literals(&mut tokens);
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
        if c.eat_word("QUERIES") {
            c.end()?;
            return Ok(Statement::ShowQueries);
        }
        if c.eat_word("MEMORY") {
            c.end()?;
            return Ok(Statement::ShowMemory);
        }
        if c.eat_word("CREATE") {
            // `SHOW CREATE VIEW v` as MySQL and Materialize write it; the kind is optional.
            let _ = c.eat_word("STREAM")
                || c.eat_word("TABLE")
                || c.eat_word("VIEW")
                || c.eat_word("SINK");
            let (name, span) = c.ident("a stream, table, view or sink name")?;
            c.end()?;
            return Ok(Statement::ShowCreate { name, span });
        }
        let kind = if c.eat_word("STREAMS") {
            ObjectKind::Stream
        } else if c.eat_word("TABLES") {
            ObjectKind::Table
        } else if c.eat_word("VIEWS") {
            ObjectKind::View
        } else if c.eat_word("SINKS") {
            ObjectKind::Sink
        } else if c.peek().is_some_and(|t| matches!(t.token, Token::Word(_))) {
            let (name, span) = c.ident("a setting name")?;
            c.end()?;
            return Ok(Statement::ShowSetting { name, span });
        } else {
            return Err(c.err(
                "STREAMS, TABLES, VIEWS, SINKS, QUERIES, MEMORY, CREATE, STREAM STATS or a setting \
                 name",
            ));
        };
        c.end()?;
        return Ok(Statement::Show(kind));
    }
    if c.eat_word("SET") {
        return parse_set(&mut c);
    }
    if c.eat_word("RESET") {
        let (name, span) = c.ident("a setting name")?;
        c.end()?;
        return Ok(Statement::Set { name, value: None, span, value_span: None });
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
    if c.eat_word("COPY") {
        return parse_copy(&mut c);
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
    Err(c.err(STATEMENTS))
}

/// What a statement can begin with, as the error for anything else lists it.
const STATEMENTS: &str = "a statement (SELECT, WITH, VALUES, CREATE, INSERT, DELETE, COPY, DROP, \
                          SHOW, DESCRIBE, EXPLAIN, ADVANCE, CLOSE, CHECKPOINT, SET, RESET)";

/// `COPY name FROM 'path' [WITH] [(options)]`, after `COPY`.
fn parse_copy(c: &mut Cursor) -> Result<Statement> {
    let (target, span) = c.ident("a table or stream name")?;
    if c.peek().is_some_and(|t| t.token == Token::LParen) {
        return Err(c.err("FROM: COPY takes a whole table or stream, not a column list"));
    }
    if c.eat_word("TO") {
        c.pos_back();
        return Err(c.err(
            "FROM: COPY ... TO is not a script statement (a sink writes a query's output: \
             CREATE SINK name WITH (path = '...') AS SELECT ...)",
        ));
    }
    c.expect_word("FROM")?;
    if c.peek_word("STDIN") {
        return Err(c.err(
            "a quoted file path: COPY FROM STDIN is for clients of `weir serve`; a script \
             reads standard input with a stream source (source = 'stdin')",
        ));
    }
    let path = c.string("a quoted file path")?;
    c.eat_word("WITH");
    let options = if c.at_end() { Vec::new() } else { parse_copy_options(c)? };
    c.end()?;
    Ok(Statement::Copy { target, path, options, span })
}

/// `SET [SESSION] name {= | TO} value`, after `SET`: the value is a quoted text, a word, a
/// number, or `DEFAULT`.
fn parse_set(c: &mut Cursor) -> Result<Statement> {
    c.eat_word("SESSION");
    let (name, span) = c.ident("a setting name")?;
    if !c.eat(&Token::Eq) {
        c.expect_word("TO").map_err(|_| c.err("'=' or TO"))?;
    }
    let value_span = c.peek().and_then(tokens::tok_span);
    let value = match c.next().map(|t| &t.token) {
        Some(Token::Word(w))
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("DEFAULT") =>
        {
            None
        }
        Some(Token::SingleQuotedString(s)) => Some(s.clone()),
        Some(Token::Word(w)) => Some(w.value.clone()),
        Some(Token::Number(n, _)) => Some(n.clone()),
        _ => {
            c.pos_back();
            return Err(c.err("a setting value (a quoted text, a word, a number or DEFAULT)"));
        }
    };
    c.end()?;
    Ok(Statement::Set { name, value, span, value_span })
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

/// Helpers for the tests of every parser file.
#[cfg(test)]
mod testing {
    use super::*;

    pub(super) fn one(sql: &str) -> Statement {
        let mut v = parse_script(sql).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).statement
    }

    pub(super) fn query(sql: &str) -> CqlQuery {
        match one(sql) {
            Statement::Query(q) => *q,
            other => panic!("not a query: {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list of statements an unknown word is told about names every statement there is:
    /// each word in it begins one the parser takes.
    #[test]
    fn the_statement_list_is_complete_and_every_word_in_it_parses() {
        let examples = [
            ("SELECT", "SELECT 1"),
            ("WITH", "WITH x AS (SELECT 1 AS a) SELECT a FROM x"),
            ("VALUES", "VALUES (1)"),
            ("CREATE", "CREATE TABLE t (a BIGINT)"),
            ("INSERT", "INSERT INTO t VALUES (1)"),
            ("DELETE", "DELETE FROM t"),
            ("COPY", "COPY t FROM 'x.csv'"),
            ("DROP", "DROP TABLE t"),
            ("SHOW", "SHOW TABLES"),
            ("DESCRIBE", "DESCRIBE t"),
            ("EXPLAIN", "EXPLAIN SELECT 1"),
            ("ADVANCE", "ADVANCE s TO 1"),
            ("CLOSE", "CLOSE s"),
            ("CHECKPOINT", "CHECKPOINT"),
            ("SET", "SET null_order = 'largest'"),
            ("RESET", "RESET null_order"),
        ];
        let listed: Vec<&str> = STATEMENTS
            .trim_start_matches("a statement (")
            .trim_end_matches(')')
            .split(", ")
            .collect();
        assert_eq!(listed, examples.map(|(w, _)| w));
        for (_, sql) in examples {
            assert!(parse_script(sql).is_ok(), "{sql}: {:?}", parse_script(sql).err());
        }
    }

    #[test]
    fn set_reset_and_show_a_setting() {
        let set = |sql: &str| match testing::one(sql) {
            Statement::Set { name, value, .. } => (name, value),
            other => panic!("{sql}: {other:?}"),
        };
        let largest = ("null_order".to_string(), Some("largest".to_string()));
        assert_eq!(set("SET null_order = 'largest'"), largest);
        assert_eq!(set("SET SESSION null_order TO largest"), largest);
        assert_eq!(set("set NULL_ORDER to 'largest'"), largest);
        assert_eq!(set("SET null_order = DEFAULT"), ("null_order".to_string(), None));
        assert_eq!(set("RESET null_order"), ("null_order".to_string(), None));
        assert!(matches!(
            testing::one("SHOW null_order"),
            Statement::ShowSetting { name, .. } if name == "null_order"
        ));
        let e = parse_script("SET null_order 'largest'").unwrap_err().to_string();
        assert!(e.contains("expected '=' or TO, found ''largest'' at line 1, column 16"), "{e}");
        let e = parse_script("SET null_order =").unwrap_err().to_string();
        assert!(e.contains("expected a setting value"), "{e}");
        let e = parse_script("SET null_order = 'a' 'b'").unwrap_err().to_string();
        assert!(e.contains("expected end of statement"), "{e}");
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
        assert!(e.contains("expected UNBOUNDED, NOW, RANGE, ROWS, PARTITION BY, SESSION, DEDUPLICATE or SAMPLE"), "{e}");
        let e = parse_script("SELECT a FROM s WHERE").unwrap_err().to_string();
        assert!(e.contains("expected an expression"), "{e}");
        assert!(e.contains("^"), "{e}");
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
