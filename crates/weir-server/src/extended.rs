//! The extended query protocol: prepared statements with parameters, as drivers use them
//! (Parse, Describe, Bind, Execute).
//!
//! A statement is prepared once: its parameters `$1, $2, ...` get types, and a query's result
//! columns are described without running it. A parameter's type is the one the client
//! declared; otherwise Weir infers it from where the parameter stands: the column it is
//! inserted into (`INSERT INTO s VALUES ($1, $2)`), the column it is compared with
//! (`WHERE price > $1`), a count (`LIMIT $1`); anywhere else it is text, which Weir converts
//! like a string literal. At Execute, each bound value is written into the statement as a
//! literal of its type (strings quoted and escaped, so a value can never become SQL) and the
//! statement runs as if sent as a simple query.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{FieldFormat, FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;

use crate::command::{classify, split, Command};
use crate::core::{CoreHandle, Request};
use crate::encode::{fields, pg_type};
use crate::session::{subscription_columns, Mode, Session};
use crate::sqlstate::{pg_error, server_error};

/// A prepared statement.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub sql: String,
    /// The type of each parameter `$1..$n`.
    pub params: Vec<Type>,
    /// The result columns, if it returns rows.
    pub columns: Option<SchemaRef>,
}

/// Prepares statements: parameter types and result columns, from the engine's catalog.
#[derive(Debug)]
pub(crate) struct Preparer {
    pub core: CoreHandle,
    /// The columns of the session's open cursors, by name, for FETCH.
    pub cursors: Arc<std::sync::Mutex<std::collections::HashMap<String, SchemaRef>>>,
}

/// Where each `$n` placeholder is in `sql` (outside strings, quoted names and comments):
/// (byte range, n).
pub(crate) fn placeholders(sql: &str) -> Vec<(std::ops::Range<usize>, usize)> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'$' if b.get(i + 1).is_some_and(u8::is_ascii_digit)
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let start = i;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if let Ok(n) = sql[start + 1..i].parse::<usize>() {
                    out.push((start..i, n));
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `sql` with each `$n` replaced by `value(n)`.
pub(crate) fn substitute(sql: &str, value: impl Fn(usize) -> String) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (range, n) in placeholders(sql) {
        out.push_str(&sql[at..range.start]);
        out.push_str(&value(n));
        at = range.end;
    }
    out.push_str(&sql[at..]);
    out
}

/// The SQL type name Weir casts a parameter of PostgreSQL type `t` to.
fn sql_type(t: &Type) -> &'static str {
    match *t {
        Type::INT2 => "SMALLINT",
        Type::INT4 | Type::INT8 => "BIGINT",
        Type::FLOAT4 => "REAL",
        Type::FLOAT8 => "DOUBLE",
        Type::NUMERIC => "DECIMAL(38,10)",
        Type::BOOL => "BOOLEAN",
        Type::TIMESTAMP => "TIMESTAMP",
        Type::DATE => "DATE",
        _ => "VARCHAR",
    }
}

/// The word just before and just after byte range `r` of `sql` (identifiers, possibly
/// qualified, or an operator).
fn neighbours(sql: &str, r: &std::ops::Range<usize>) -> (String, String, String, String) {
    let tokens = |s: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = String::new();
        for c in s.chars() {
            if c.is_alphanumeric() || c == '_' || c == '.' || c == '$' {
                cur.push(c);
            } else {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                if "<>=!".contains(c) {
                    // Operators of one or two characters.
                    match out.last_mut() {
                        Some(last)
                            if last.chars().all(|l| "<>=!".contains(l)) && last.len() < 2 =>
                        {
                            last.push(c)
                        }
                        _ => out.push(c.to_string()),
                    }
                } else if !c.is_whitespace() {
                    out.push(c.to_string());
                }
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        out
    };
    let before = tokens(&sql[..r.start]);
    let after = tokens(&sql[r.end..]);
    let get =
        |v: &Vec<String>, i: usize| v.get(i).cloned().unwrap_or_default().to_ascii_lowercase();
    let n = before.len();
    (
        if n >= 2 { get(&before, n - 2) } else { String::new() },
        if n >= 1 { get(&before, n - 1) } else { String::new() },
        get(&after, 0),
        get(&after, 1),
    )
}

/// Infers each parameter's type (see the module docs). `columns(name)` gives a catalog
/// object's columns; `insert` is the target and column list of an INSERT.
fn infer(sql: &str, declared: &[Option<Type>], catalog: &[weir::CatalogObject]) -> Vec<Type> {
    let marks = placeholders(sql);
    let count = marks.iter().map(|(_, n)| *n).max().unwrap_or(0).max(declared.len());
    let mut types: Vec<Option<Type>> =
        (0..count).map(|i| declared.get(i).cloned().flatten()).collect();
    let column_type = |name: &str| -> Option<Type> {
        let col = name.rsplit('.').next().unwrap_or(name);
        catalog
            .iter()
            .flat_map(|o| o.columns.iter())
            .find(|(c, _)| c.eq_ignore_ascii_case(col))
            .map(|(_, t)| pg_type(t))
    };
    let insert = insert_columns(sql, catalog);
    for (pos, (range, n)) in marks.iter().enumerate() {
        let slot = &mut types[n - 1];
        if slot.is_some() {
            continue;
        }
        if let Some(t) = insert.as_ref().and_then(|cols| value_column(sql, range, cols)) {
            *slot = Some(t);
            continue;
        }
        let (before2, before, after, after2) = neighbours(sql, range);
        let is_op = |s: &str| matches!(s, "=" | "<" | ">" | "<=" | ">=" | "<>" | "!=");
        *slot = if is_op(&before) {
            column_type(&before2)
        } else if is_op(&after) {
            column_type(&after2)
        } else if matches!(before.as_str(), "limit" | "offset") {
            Some(Type::INT8)
        } else {
            None
        };
        let _ = pos;
    }
    types.into_iter().map(|t| t.unwrap_or(Type::TEXT)).collect()
}

/// For `INSERT INTO x [(cols)] VALUES ...`: the types of the target columns, in order.
fn insert_columns(sql: &str, catalog: &[weir::CatalogObject]) -> Option<Vec<Type>> {
    let lower = sql.to_ascii_lowercase();
    let rest = lower.trim_start().strip_prefix("insert")?.trim_start().strip_prefix("into")?;
    let rest = rest.trim_start();
    let name: String =
        rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$').collect();
    let object = catalog.iter().find(|o| o.name == name)?;
    let after = rest[name.len()..].trim_start();
    let listed: Option<Vec<String>> = after.strip_prefix('(').and_then(|a| {
        let (inner, _) = a.split_once(')')?;
        Some(inner.split(',').map(|c| c.trim().to_string()).collect())
    });
    Some(match listed {
        Some(cols) => cols
            .iter()
            .map(|c| {
                object
                    .columns
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(c))
                    .map_or(Type::TEXT, |(_, t)| pg_type(t))
            })
            .collect(),
        None => object.columns.iter().map(|(_, t)| pg_type(t)).collect(),
    })
}

/// For a placeholder standing alone as a value of `VALUES (...)`: the type of its column.
fn value_column(sql: &str, range: &std::ops::Range<usize>, cols: &[Type]) -> Option<Type> {
    let lower = sql.to_ascii_lowercase();
    let values = lower.find("values")?;
    if range.start < values {
        return None;
    }
    // The tuple the placeholder is in, and its position among the tuple's values.
    let open = lower[..range.start].rfind('(')?;
    if open < values {
        return None;
    }
    let inside = &sql[open + 1..range.start];
    if inside.contains(['(', ')']) {
        return None;
    }
    let after = sql[range.end..].trim_start();
    if !(after.starts_with(',') || after.starts_with(')')) {
        return None;
    }
    let index = inside.matches(',').count();
    let before = inside.rsplit(',').next().unwrap_or("").trim();
    if !before.is_empty() {
        return None;
    }
    cols.get(index).cloned()
}

#[async_trait]
impl QueryParser for Preparer {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let pieces = split(sql);
        if pieces.len() > 1 {
            return Err(server_error(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(piece) = pieces.first() else { return Ok(None) };
        let text = piece.text.to_string();
        let catalog = self
            .core
            .call(|reply| Request::Catalog { reply })
            .await
            .map_err(|e| pg_error(&e, "", 0))?;
        let params = infer(&text, types, &catalog);
        // Describe with each parameter a NULL of its type.
        let probe = substitute(&text, |n| {
            let t = params.get(n - 1).map_or("VARCHAR", sql_type);
            format!("CAST(NULL AS {t})")
        });
        let columns = match classify(&text) {
            Command::Weir => {
                let sql = probe.clone();
                let shape = self
                    .core
                    .call(|reply| Request::Describe { sql, reply })
                    .await
                    .and_then(|r| r)
                    .map_err(|e| pg_error(&e, sql_of(&text), 0))?;
                shape.map(|s| {
                    if s.continuous {
                        subscription_columns(&s.schema, s.domain)
                    } else {
                        s.schema
                    }
                })
            }
            Command::Subscribe { query } => {
                let query = substitute(&query, |_| "NULL".into());
                let shape = self
                    .core
                    .call(|reply| Request::DescribeSubscription { query, reply })
                    .await
                    .and_then(|r| r)
                    .map_err(|e| pg_error(&e, "", 0))?;
                Some(subscription_columns(&shape.schema, shape.domain))
            }
            Command::ShowSetting { name } => {
                Some(Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)])))
            }
            Command::Fetch { cursor, .. } => {
                let cursors = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
                match cursors.get(&cursor) {
                    Some(schema) => Some(schema.clone()),
                    None => {
                        return Err(server_error(
                            "34000",
                            format!("cursor \"{cursor}\" does not exist"),
                        ))
                    }
                }
            }
            _ => None,
        };
        Ok(Some(Prepared { sql: text, params, columns }))
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(stmt.params.clone())
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(match &stmt.columns {
            Some(schema) => {
                fields(schema, |i| format.map_or(FieldFormat::Text, |f| f.format_for(i)))
            }
            None => Vec::new(),
        })
    }
}

fn sql_of(text: &str) -> &str {
    text
}

/// A bound parameter as a SQL literal of its type.
fn literal(portal: &Portal<Prepared>, i: usize, t: &Type) -> PgWireResult<String> {
    fn quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "''"))
    }
    let lit = match *t {
        Type::INT2 => portal.parameter::<i16>(i, t)?.map(|v| v.to_string()),
        Type::INT4 => portal.parameter::<i32>(i, t)?.map(|v| v.to_string()),
        Type::INT8 => portal.parameter::<i64>(i, t)?.map(|v| v.to_string()),
        Type::FLOAT4 | Type::FLOAT8 => {
            let v = if *t == Type::FLOAT4 {
                portal.parameter::<f32>(i, t)?.map(f64::from)
            } else {
                portal.parameter::<f64>(i, t)?
            };
            v.map(|v| {
                if v.is_finite() {
                    format!("CAST({v:?} AS DOUBLE)")
                } else {
                    format!("CAST('{v}' AS DOUBLE)")
                }
            })
        }
        Type::BOOL => portal.parameter::<bool>(i, t)?.map(|v| v.to_string().to_ascii_uppercase()),
        Type::NUMERIC => portal.parameter::<rust_decimal::Decimal>(i, t)?.map(|v| v.to_string()),
        Type::TIMESTAMP => portal
            .parameter::<chrono::NaiveDateTime>(i, t)?
            .map(|v| format!("TIMESTAMP '{}'", v.format("%Y-%m-%d %H:%M:%S%.6f"))),
        Type::DATE => portal.parameter::<chrono::NaiveDate>(i, t)?.map(|v| format!("DATE '{v}'")),
        _ => portal.parameter::<String>(i, &Type::TEXT)?.map(|v| quote(&v)),
    };
    Ok(lit.unwrap_or_else(|| "NULL".into()))
}

#[async_trait]
impl ExtendedQueryHandler for Session {
    type Statement = Prepared;
    type QueryParser = Preparer;

    fn query_parser(&self) -> Arc<Preparer> {
        self.preparer()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &portal.statement.statement;
        let declared = &portal.statement.parameter_types;
        let mut values = Vec::with_capacity(portal.parameter_len());
        for i in 0..portal.parameter_len() {
            let t = declared
                .get(i)
                .cloned()
                .flatten()
                .or_else(|| stmt.params.get(i).cloned())
                .unwrap_or(Type::TEXT);
            values.push(literal(portal, i, &t)?);
        }
        let sql =
            substitute(&stmt.sql, |n| values.get(n - 1).cloned().unwrap_or_else(|| "NULL".into()));
        let mut out = Vec::new();
        let mode = Mode::Extended(&portal.result_column_format);
        self.run_piece(client, &sql, &sql, 0, true, mode, &mut out).await?;
        crate::session::send_all_but_last(client, &mut out).await?;
        Ok(out.pop().unwrap_or(Response::EmptyQuery))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    #[test]
    fn placeholders_outside_strings_are_found_and_replaced() {
        let sql = "SELECT '$1', \"$2\", $1 + $12 -- $3\n FROM t WHERE a$1 = $2";
        let found: Vec<usize> = placeholders(sql).into_iter().map(|(_, n)| n).collect();
        assert_eq!(found, [1, 12, 2]);
        assert_eq!(
            substitute("SELECT $1, '$1', $2", |n| format!("<{n}>")),
            "SELECT <1>, '$1', <2>"
        );
    }

    fn object(name: &str, columns: &[(&str, DataType)]) -> weir::CatalogObject {
        weir::CatalogObject {
            name: name.into(),
            kind: weir::ObjectKind::Stream,
            companion_of: None,
            details: String::new(),
            columns: columns.iter().map(|(n, t)| (n.to_string(), t.clone())).collect(),
        }
    }

    #[test]
    fn parameter_types_come_from_where_they_stand() {
        let catalog = [object(
            "bids",
            &[
                ("item", DataType::Utf8),
                ("price", DataType::Int64),
                ("t", DataType::Timestamp(TimeUnit::Microsecond, None)),
            ],
        )];
        assert_eq!(
            infer("INSERT INTO bids VALUES ($1, $2, $3)", &[], &catalog),
            [Type::TEXT, Type::INT8, Type::TIMESTAMP]
        );
        assert_eq!(
            infer("INSERT INTO bids (t, price) VALUES ($1, $2), ($3, $4)", &[], &catalog),
            [Type::TIMESTAMP, Type::INT8, Type::TIMESTAMP, Type::INT8]
        );
        assert_eq!(
            infer("SELECT * FROM bids WHERE price > $1 AND $2 = bids.item LIMIT $3", &[], &catalog),
            [Type::INT8, Type::TEXT, Type::INT8]
        );
        // A declared type wins; a parameter used nowhere typed is text.
        assert_eq!(
            infer("SELECT $1 + price, $2 FROM bids", &[Some(Type::FLOAT8)], &catalog),
            [Type::FLOAT8, Type::TEXT]
        );
    }
}
