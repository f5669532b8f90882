//! `INSERT` and `DELETE`, parsed by sqlparser once a trailing `AT τ` (the instant of a table
//! change) is split off.

use sqlparser::ast::{self as sql, TableObject};
use sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_common::{Result, Span, WeirError};

use super::ast::{Statement, TimeLit};
use super::time::parse_time_lit;
use super::tokens::{object_name, sql_err, sub_parser, word_is, Cursor};

/// INSERT and DELETE, with an optional trailing `AT τ`.
pub(super) fn parse_dml(toks: &[TokenWithSpan], span: Option<Span>) -> Result<Statement> {
    let (toks, at) = split_at_clause(toks)?;
    let mut p = sub_parser(toks)?;
    let stmt = p.parse_statement().map_err(|e| sql_err(e, toks))?;
    if let Err(e) = p.expect_token(&Token::EOF) {
        return Err(sql_err(e, toks));
    }
    match stmt {
        sql::Statement::Insert(ins) => {
            if !ins.into {
                let at = Span::from_sql(sqlparser::ast::Spanned::span(&ins.table)).or(span);
                return Err(WeirError::syntax_at("expected INTO after INSERT", at));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::testing::one;

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
}
