//! `CREATE STREAM` (columns, `WATERMARK FOR`, `WITH (...)` options) and `CREATE TABLE`:
//! the statements that declare inputs. `CREATE VIEW` and `CREATE SINK` wrap a query and are
//! parsed with the other statements in `mod.rs`.

use sqlparser::ast as sql;
use sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_common::{Result, Span, WeirError};

use super::ast::{ColumnAst, OptionValue, PrimaryKeyAst, Statement, StreamOption, WatermarkAst};
use super::time::{parse_duration, unit_micros};
use super::tokens::{
    ident_of, matching, object_name, sql_err, sub_parser, tok_span, word_is, Cursor,
};

/// `CREATE STREAM [IF NOT EXISTS] name (col type, ..., [PRIMARY KEY (k, ...), [ROW KIND col,]]
/// WATERMARK FOR col [AS col - d]) [WITH (key = value, ...)]` (the elements in any order).
pub(super) fn parse_create_stream(c: &mut Cursor, span: Option<Span>) -> Result<Statement> {
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
    let mut primary_key: Option<PrimaryKeyAst> = None;
    let mut row_kind: Option<(String, Option<Span>)> = None;
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
                return Err(WeirError::syntax_at(
                    "a stream has at most one WATERMARK clause",
                    tok_span(&elem[0]),
                ));
            }
            watermark = Some(parse_watermark(elem)?);
        } else if word_is(&elem[0], "PRIMARY") {
            set_primary_key(&mut primary_key, parse_primary_key(elem)?)?;
        } else if word_is(&elem[0], "ROW") && elem.get(1).is_some_and(|t| word_is(t, "KIND")) {
            if row_kind.is_some() {
                return Err(WeirError::syntax_at(
                    "a stream has at most one ROW KIND clause",
                    tok_span(&elem[0]),
                ));
            }
            let mut k = Cursor::new(&elem[2..]);
            row_kind = Some(k.ident("the column holding each element's row kind")?);
            k.end()?;
        } else {
            let (column, primary) = parse_column(elem)?;
            if let Some(span) = primary {
                let columns = vec![(column.name.clone(), column.span)];
                let key = PrimaryKeyAst { columns, span, row_kind: None };
                set_primary_key(&mut primary_key, key)?;
            }
            columns.push(column);
        }
        if c.eat(&Token::Comma) {
            continue;
        }
        c.expect(&Token::RParen, "',' or ')'")?;
        break;
    }
    if let Some((col, at)) = row_kind {
        let Some(key) = primary_key.as_mut() else {
            return Err(WeirError::syntax_at(
                format!(
                    "ROW KIND {col} makes a changelog of a stream: it needs a PRIMARY KEY (the \
                     key whose row each element upserts or deletes)"
                ),
                at,
            ));
        };
        key.row_kind = Some((col, at));
    }
    let options = if c.eat_word("WITH") { parse_stream_options(c)? } else { Vec::new() };
    c.end()?;
    let _ = span;
    Ok(Statement::CreateStream {
        name,
        columns,
        watermark,
        primary_key,
        options,
        if_not_exists,
        span: name_span,
    })
}

/// `( key = value, ... )` after `CREATE STREAM ... WITH`.
pub(super) fn parse_stream_options(c: &mut Cursor) -> Result<Vec<StreamOption>> {
    parse_options(c, false)
}

/// `( key [=] value, ... )` after `COPY ... FROM 'path' [WITH]`: PostgreSQL's form, where `=`
/// may be left out and a key alone (`HEADER`) means TRUE, or Weir's.
pub(super) fn parse_copy_options(c: &mut Cursor) -> Result<Vec<StreamOption>> {
    parse_options(c, true)
}

fn parse_options(c: &mut Cursor, postgres: bool) -> Result<Vec<StreamOption>> {
    c.expect(&Token::LParen, "'(' and options, e.g. (source = 'file', path = 'x.csv')")?;
    let mut options: Vec<StreamOption> = Vec::new();
    loop {
        let (key, span) = c.ident("an option name (source, path, format, ...)")?;
        if options.iter().any(|o| o.key == key) {
            return Err(WeirError::syntax_at(format!("option '{key}' is given twice"), span));
        }
        let alone = matches!(c.peek().map(|t| &t.token), Some(Token::Comma | Token::RParen));
        if postgres && alone {
            options.push(StreamOption { key, value: OptionValue::Bool(true), span });
            if c.eat(&Token::Comma) {
                continue;
            }
            c.expect(&Token::RParen, "',' or ')'")?;
            return Ok(options);
        }
        // PostgreSQL's `FORMAT csv` leaves the '=' out.
        if !postgres || c.peek().is_some_and(|t| t.token == Token::Eq) {
            c.expect(&Token::Eq, "'='")?;
        }
        let value = if c.peek_word("INTERVAL") {
            OptionValue::Duration(parse_duration(c, &[])?)
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
                            // `10 SECONDS`: a duration (a number followed by any other
                            // word is a duration with a unit that parse_duration refuses).
                            match c.peek() {
                                Some(TokenWithSpan { token: Token::Word(w), .. })
                                    if w.quote_style.is_none()
                                        || unit_micros(&w.value).is_some() =>
                                {
                                    c.pos = at;
                                    OptionValue::Duration(parse_duration(c, &[])?)
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

/// A second primary key (two `PRIMARY KEY` clauses, or one and a column's) is an error.
fn set_primary_key(slot: &mut Option<PrimaryKeyAst>, key: PrimaryKeyAst) -> Result<()> {
    if slot.is_some() {
        return Err(WeirError::syntax_at(
            "a stream or table has at most one PRIMARY KEY",
            key.span,
        ));
    }
    *slot = Some(key);
    Ok(())
}

/// `PRIMARY KEY (a, b)`, an element of a column list.
fn parse_primary_key(elem: &[TokenWithSpan]) -> Result<PrimaryKeyAst> {
    let mut c = Cursor::new(elem);
    let span = c.peek().and_then(tok_span);
    c.expect_word("PRIMARY")?;
    c.expect_word("KEY")?;
    c.expect(&Token::LParen, "'(' and the key's columns")?;
    let mut columns = vec![c.ident("a key column")?];
    while c.eat(&Token::Comma) {
        columns.push(c.ident("a key column")?);
    }
    c.expect(&Token::RParen, "',' or ')'")?;
    c.end()?;
    Ok(PrimaryKeyAst { columns, span, row_kind: None })
}

/// A column, and the position of its `PRIMARY KEY` constraint if it has one.
fn parse_column(elem: &[TokenWithSpan]) -> Result<(ColumnAst, Option<Option<Span>>)> {
    let mut c = Cursor::new(elem);
    let (name, span) = c.ident("a column name")?;
    if c.eat_word("AS") {
        return parse_proctime_column(c, name, span);
    }
    let mut p = sub_parser(c.rest())?;
    let data_type = p.parse_data_type().map_err(|e| sql_err(e, elem))?;
    // Column constraints other than PRIMARY KEY (NOT NULL, UNIQUE...) are accepted and not
    // enforced. Anything else after the type (a missing comma: `b TIMESTAMP c BOOLEAN`) is an
    // error, not a column silently dropped.
    let mut primary = None;
    while let Some(o) = p.parse_optional_column_option().map_err(|e| sql_err(e, elem))? {
        if matches!(o, sql::ColumnOption::PrimaryKey(_)) {
            primary = Some(span);
        }
    }
    let rest = c.rest();
    let used = rest.len() - remaining(&mut p);
    if let Some(t) = rest.get(used) {
        return Err(WeirError::syntax_at(
            format!("expected ',' or ')' after the type of column '{name}', found {}", t.token),
            tok_span(t),
        ));
    }
    Ok((ColumnAst { name, data_type, span, proctime: false }, primary))
}

/// `name AS PROCTIME()`, Flink's processing-time attribute (after `name AS`). Other computed
/// columns are refused by name.
fn parse_proctime_column(
    mut c: Cursor,
    name: String,
    span: Option<Span>,
) -> Result<(ColumnAst, Option<Option<Span>>)> {
    let at = c.peek().and_then(tok_span);
    if !c.eat_word("PROCTIME") {
        return Err(WeirError::syntax_at(
            format!(
                "column '{name}': the only computed column Weir has is `{name} AS PROCTIME()` \
                 (the arrival time); give other columns a type"
            ),
            at.or(span),
        ));
    }
    c.expect(&Token::LParen, "'(' after PROCTIME")?;
    c.expect(&Token::RParen, "')': PROCTIME() takes no arguments")?;
    c.end()?;
    let data_type = sql::DataType::Timestamp(None, sql::TimezoneInfo::None);
    Ok((ColumnAst { name, data_type, span, proctime: true }, None))
}

/// How many of a sub-parser's tokens are left (its end-of-input token not counted).
fn remaining(p: &mut sqlparser::parser::Parser<'_>) -> usize {
    let mut n = 0;
    while p.peek_nth_token(n).token != Token::EOF {
        n += 1;
    }
    n
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
            return Err(WeirError::syntax_at(
                format!("WATERMARK FOR {column} AS must be '{column}' or '{column} - <delay>'"),
                span2,
            ));
        }
        if c.eat(&Token::Minus) {
            delay = Some(parse_duration(&mut c, &[])?);
        }
    }
    c.end()?;
    Ok(WatermarkAst { column, delay, span })
}

pub(super) fn parse_create_table(toks: &[TokenWithSpan], span: Option<Span>) -> Result<Statement> {
    // `WITH (...)` after the column list is Weir's (the file the table is loaded from), parsed
    // here; sqlparser gets the rest.
    let close = toks
        .iter()
        .position(|t| t.token == Token::LParen)
        .and_then(|open| matching(toks, open, &Token::LParen, &Token::RParen));
    let (toks, options) = match close {
        Some(close) if toks.get(close + 1).is_some_and(|t| word_is(t, "WITH")) => {
            let mut c = Cursor::new(&toks[close + 2..]);
            let options = parse_stream_options(&mut c)?;
            c.end()?;
            (&toks[..=close], options)
        }
        _ => (toks, Vec::new()),
    };
    let toks = &keyword_column_names(toks);
    let mut p = sub_parser(toks)?;
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
                    proctime: false,
                })
                .collect();
            let mut primary_key = None;
            for col in &ct.columns {
                if col.options.iter().any(|o| matches!(o.option, sql::ColumnOption::PrimaryKey(_)))
                {
                    let span = Span::from_sql(col.name.span);
                    let columns = vec![(ident_of(&col.name), span)];
                    let key = PrimaryKeyAst { columns, span, row_kind: None };
                    set_primary_key(&mut primary_key, key)?;
                }
            }
            for constraint in &ct.constraints {
                if let sql::TableConstraint::PrimaryKey(pk) = constraint {
                    let span = Span::from_sql(sqlparser::ast::Spanned::span(pk));
                    let mut columns = Vec::new();
                    for ic in &pk.columns {
                        match &ic.column.expr {
                            sql::Expr::Identifier(id) => {
                                columns.push((ident_of(id), Span::from_sql(id.span)))
                            }
                            other => {
                                return Err(WeirError::plan_at(
                                    format!("a PRIMARY KEY names columns, not '{other}'"),
                                    span,
                                ))
                            }
                        }
                    }
                    let key = PrimaryKeyAst { columns, span, row_kind: None };
                    set_primary_key(&mut primary_key, key)?;
                }
            }
            Ok(Statement::CreateTable {
                name,
                columns,
                primary_key,
                options,
                if_not_exists: ct.if_not_exists,
                span: Span::from_sql(sqlparser::ast::Spanned::span(&ct.name)),
            })
        }
        _ => Err(WeirError::plan_at("expected CREATE TABLE", span)),
    }
}

/// sqlparser reads a column list element starting with `KEY` or `INDEX` as MySQL's index
/// declaration (`KEY idx (col)`), so `CREATE TABLE t (id INT, key VARCHAR)` would not parse,
/// though PostgreSQL takes `key` as a column name. An element `KEY <word>` or `INDEX <word>`
/// not followed by `(` declares a column: its name is marked quoted (with its lowercase
/// spelling, as an unquoted name is normalized), so it is read as a name.
fn keyword_column_names(toks: &[TokenWithSpan]) -> Vec<TokenWithSpan> {
    let mut out = toks.to_vec();
    let mut depth = 0usize;
    let significant: Vec<usize> =
        (0..toks.len()).filter(|&i| !matches!(toks[i].token, Token::Whitespace(_))).collect();
    for (j, &i) in significant.iter().enumerate() {
        match &toks[i].token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        let starts_element = depth == 1
            && j > 0
            && matches!(toks[significant[j - 1]].token, Token::LParen | Token::Comma);
        if !starts_element {
            continue;
        }
        let Token::Word(w) = &toks[i].token else { continue };
        let is_index_word = w.quote_style.is_none()
            && (w.value.eq_ignore_ascii_case("key") || w.value.eq_ignore_ascii_case("index"));
        let next = significant.get(j + 1).map(|&n| &toks[n].token);
        let after = significant.get(j + 2).map(|&n| &toks[n].token);
        if is_index_word && matches!(next, Some(Token::Word(_))) && after != Some(&Token::LParen) {
            let mut quoted = w.clone();
            quoted.value = w.value.to_ascii_lowercase();
            quoted.quote_style = Some('"');
            quoted.keyword = sqlparser::keywords::Keyword::NoKeyword;
            out[i].token = Token::Word(quoted);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::testing::one;
    use crate::parser::{parse_script, Duration};

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
    fn create_table_with_options_and_copy() {
        let kv = |options: Vec<StreamOption>| -> Vec<(String, OptionValue)> {
            options.into_iter().map(|o| (o.key, o.value)).collect()
        };
        match one("CREATE TABLE t (a BIGINT, key VARCHAR) WITH (source = 'file', path = 'x.csv')") {
            Statement::CreateTable { columns, options, .. } => {
                assert_eq!(columns.len(), 2);
                assert_eq!(
                    kv(options),
                    [
                        ("source".into(), OptionValue::Text("file".into())),
                        ("path".into(), OptionValue::Text("x.csv".into()))
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        match one("COPY t FROM 'x.csv' WITH (FORMAT csv, HEADER, DELIMITER ';', epoch = 'ms')") {
            Statement::Copy { target, path, options, .. } => {
                assert_eq!((target.as_str(), path.as_str()), ("t", "x.csv"));
                assert_eq!(
                    kv(options),
                    [
                        ("format".into(), OptionValue::Text("csv".into())),
                        ("header".into(), OptionValue::Bool(true)),
                        ("delimiter".into(), OptionValue::Text(";".into())),
                        ("epoch".into(), OptionValue::Text("ms".into()))
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(one("COPY t FROM 'x.csv'"), Statement::Copy { options, .. } if options.is_empty())
        );
        let err = parse_script("COPY t (a) FROM 'x.csv'").unwrap_err().to_string();
        assert!(err.contains("not a column list"), "{err}");
        let err = parse_script("CREATE TABLE t (a BIGINT) WITH (a 1)").unwrap_err().to_string();
        assert!(err.contains("expected '='"), "{err}");
    }
}
