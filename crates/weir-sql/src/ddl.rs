//! Binding DDL: the parsed column and watermark clauses of `CREATE STREAM` and `CREATE TABLE`
//! turned into the definitions the catalog keeps ([`StreamDef`], [`TableDef`]).
//!
//! Everything that can be checked from the statement alone is checked here, with the position
//! of the offending clause: column types, the event-time column (it must exist and be a
//! TIMESTAMP or an integer), the watermark delay (its unit must match the time domain, it must
//! not be negative) and the reserved `$` of companion streams. Whether a name is free is the
//! catalog's business, and a stream's `WITH (...)` options (sources, policies) the engine's.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::{Result, Span, TimeDomain, WeirError};

use crate::catalog::{StreamDef, TableDef};
use crate::parser::{ColumnAst, Duration, PrimaryKeyAst, WatermarkAst};
use crate::types::arrow_type;

/// The schema of declared columns (every field nullable).
pub fn columns_schema(columns: &[ColumnAst]) -> Result<SchemaRef> {
    let mut fields = Vec::with_capacity(columns.len());
    for c in columns {
        fields.push(Field::new(&c.name, arrow_type(&c.data_type, c.span)?, true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The definition of `CREATE STREAM name (columns, WATERMARK FOR ...)`; `span` is the
/// statement's, for errors that concern it as a whole.
pub fn stream_def(
    name: &str,
    columns: &[ColumnAst],
    watermark: Option<&WatermarkAst>,
    primary_key: Option<&PrimaryKeyAst>,
    span: Option<Span>,
) -> Result<StreamDef> {
    let schema = columns_schema(columns)?;
    let proctime = proctime_column(columns)?;
    let key_ast = primary_key;
    let Some(wm) = watermark else {
        // Without an event time, the PROCTIME() column stamps each element on arrival: in
        // order, the watermark the processing clock.
        return match proctime {
            Some(p) => {
                let primary_key = key_columns(&schema, primary_key)?;
                check_stream_name(name, span)?;
                Ok(StreamDef {
                    name: name.to_string(),
                    row_kind: row_kind_column(&schema, key_ast, &primary_key, p)?,
                    schema,
                    time_column: p,
                    domain: TimeDomain::Micros,
                    watermark_delay: 0,
                    primary_key,
                    proctime: Some(p),
                })
            }
            None => Err(WeirError::plan_at(
                format!(
                    "stream '{name}' needs a time: add WATERMARK FOR <column> [AS <column> - \
                     <delay>] (event time), or a column <name> AS PROCTIME() (arrival time)"
                ),
                span,
            )),
        };
    };
    let time_column = schema.index_of(&wm.column).map_err(|_| {
        WeirError::plan_at(format!("WATERMARK FOR names unknown column '{}'", wm.column), wm.span)
    })?;
    if proctime == Some(time_column) {
        return Err(WeirError::plan_at(
            format!(
                "'{}' is the arrival time (PROCTIME()): the processing clock is its watermark; \
                 leave WATERMARK FOR out, or name an event-time column",
                wm.column
            ),
            wm.span,
        ));
    }
    let domain = match schema.field(time_column).data_type() {
        DataType::Timestamp(_, None) => TimeDomain::Micros,
        t if t.is_integer() => TimeDomain::Ticks,
        t => {
            return Err(WeirError::plan_at(
                format!(
                    "the event-time column '{}' must be TIMESTAMP or an integer, not {t}",
                    wm.column
                ),
                wm.span,
            ))
        }
    };
    let delay =
        match (wm.delay, domain) {
            (None, _) => 0,
            (Some(Duration::Ticks(d)), TimeDomain::Ticks)
            | (Some(Duration::Micros(d)), TimeDomain::Micros) => d,
            (Some(_), TimeDomain::Ticks) => {
                return Err(WeirError::plan_at(
                    "the watermark delay of an integer-tick stream is a bare integer",
                    wm.span,
                ))
            }
            (Some(_), TimeDomain::Micros) => return Err(WeirError::plan_at(
                "the watermark delay of a TIMESTAMP stream needs a unit (e.g. INTERVAL '5' SECOND)",
                wm.span,
            )),
        };
    if delay < 0 {
        return Err(WeirError::plan_at("the watermark delay must not be negative", wm.span));
    }
    check_stream_name(name, span)?;
    let primary_key = key_columns(&schema, key_ast)?;
    Ok(StreamDef {
        name: name.to_string(),
        row_kind: row_kind_column(&schema, key_ast, &primary_key, time_column)?,
        schema,
        time_column,
        domain,
        watermark_delay: delay,
        primary_key,
        proctime,
    })
}

fn check_stream_name(name: &str, span: Option<Span>) -> Result<()> {
    if name.contains('$') {
        return Err(WeirError::plan_at(
            format!("'{name}': '$' is reserved for s$late and s$errors"),
            span,
        ));
    }
    Ok(())
}

/// The position of the `name AS PROCTIME()` column, if there is one (at most one).
fn proctime_column(columns: &[ColumnAst]) -> Result<Option<usize>> {
    let mut found = None;
    for (i, c) in columns.iter().enumerate().filter(|(_, c)| c.proctime) {
        if found.is_some() {
            return Err(WeirError::plan_at(
                format!("'{}': a stream has at most one PROCTIME() column", c.name),
                c.span,
            ));
        }
        found = Some(i);
    }
    Ok(found)
}

/// The definition of `CREATE TABLE name (columns [, PRIMARY KEY (...)])`.
pub fn table_def(
    name: &str,
    columns: &[ColumnAst],
    primary_key: Option<&PrimaryKeyAst>,
) -> Result<TableDef> {
    let schema = columns_schema(columns)?;
    let primary_key = key_columns(&schema, primary_key)?;
    Ok(TableDef { name: name.to_string(), schema, primary_key })
}

/// The position of a changelog stream's `ROW KIND` column, if declared: a VARCHAR column that
/// is neither a key column nor the stream's time.
fn row_kind_column(
    schema: &SchemaRef,
    key: Option<&PrimaryKeyAst>,
    key_columns: &[usize],
    time_column: usize,
) -> Result<Option<usize>> {
    let Some((c, span)) = key.and_then(|k| k.row_kind.as_ref()) else { return Ok(None) };
    let i = schema
        .index_of(c)
        .map_err(|_| WeirError::plan_at(format!("ROW KIND names unknown column '{c}'"), *span))?;
    let problem = if key_columns.contains(&i) {
        Some("is a PRIMARY KEY column")
    } else if i == time_column {
        Some("is the stream's time")
    } else if !matches!(schema.field(i).data_type(), DataType::Utf8 | DataType::Utf8View) {
        Some("must be VARCHAR")
    } else {
        None
    };
    match problem {
        Some(p) => Err(WeirError::plan_at(
            format!(
                "ROW KIND column '{c}' {p}: it holds each element's kind, one of {}",
                crate::catalog::RowKind::accepted()
            ),
            *span,
        )),
        None => Ok(Some(i)),
    }
}

/// The positions of a primary key's columns: each a column of the schema, named once.
fn key_columns(schema: &SchemaRef, key: Option<&PrimaryKeyAst>) -> Result<Vec<usize>> {
    let Some(key) = key else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(key.columns.len());
    for (c, span) in &key.columns {
        let i = schema.index_of(c).map_err(|_| {
            WeirError::plan_at(format!("PRIMARY KEY names unknown column '{c}'"), *span)
        })?;
        if out.contains(&i) {
            return Err(WeirError::plan_at(format!("PRIMARY KEY names column '{c}' twice"), *span));
        }
        out.push(i);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{parse_script, Statement};

    /// The stream definition of a `CREATE STREAM` statement, or its error's message.
    fn bind(sql: &str) -> std::result::Result<StreamDef, String> {
        let mut stmts = parse_script(sql).map_err(|e| e.to_string())?;
        let Some(Statement::CreateStream { name, columns, watermark, primary_key, span, .. }) =
            stmts.pop().map(|s| s.statement)
        else {
            panic!("not a CREATE STREAM: {sql}");
        };
        stream_def(&name, &columns, watermark.as_ref(), primary_key.as_ref(), span)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn binds_columns_event_time_and_delay() {
        let def = bind(
            "CREATE STREAM bids (auction BIGINT, price DOUBLE, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)",
        )
        .unwrap();
        assert_eq!(def.name, "bids");
        assert_eq!(def.time_column, 2);
        assert_eq!(def.domain, TimeDomain::Micros);
        assert_eq!(def.watermark_delay, 2_000_000);
        let types: Vec<&DataType> = def.schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(types[..2], [&DataType::Int64, &DataType::Float64]);

        let ticks = bind("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t - 3)");
        let ticks = ticks.unwrap();
        assert_eq!((ticks.domain, ticks.watermark_delay), (TimeDomain::Ticks, 3));
        let in_order = bind("CREATE STREAM s (t INT, WATERMARK FOR t)").unwrap();
        assert_eq!(in_order.watermark_delay, 0);
    }

    #[test]
    fn refuses_bad_event_time_clauses_with_their_position() {
        let cases = [
            ("CREATE STREAM s (t BIGINT)", "stream 's' needs a time: add WATERMARK FOR"),
            (
                "CREATE STREAM s (p AS PROCTIME(), WATERMARK FOR p)",
                "'p' is the arrival time (PROCTIME())",
            ),
            ("CREATE STREAM s (p AS PROCTIME(), q AS PROCTIME())", "at most one PROCTIME()"),
            ("CREATE STREAM s (t BIGINT, WATERMARK FOR u)", "names unknown column 'u'"),
            ("CREATE STREAM s (t VARCHAR, WATERMARK FOR t)", "must be TIMESTAMP or an integer"),
            (
                "CREATE STREAM s (t BIGINT, WATERMARK FOR t AS t - INTERVAL '1' SECOND)",
                "integer-tick stream is a bare integer",
            ),
            ("CREATE STREAM s (t TIMESTAMP, WATERMARK FOR t AS t - 5)", "needs a unit"),
        ];
        for (sql, expected) in cases {
            let err = bind(sql).unwrap_err();
            assert!(err.contains(expected), "{sql}: {err}");
            assert!(err.contains("at line 1, column"), "{sql}: no position in {err}");
        }
    }

    #[test]
    fn proctime_columns_are_filled_on_arrival() {
        // Alone, the PROCTIME() column is the stream's time.
        let on_arrival = bind("CREATE STREAM s (k VARCHAR, p AS PROCTIME(), v BIGINT)").unwrap();
        assert_eq!((on_arrival.time_column, on_arrival.proctime), (1, Some(1)));
        assert!(on_arrival.stamped_on_arrival());
        assert_eq!(on_arrival.domain, TimeDomain::Micros);
        assert_eq!(
            on_arrival.schema.field(1).data_type(),
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None)
        );
        let input = on_arrival.input_schema();
        let names: Vec<&str> = input.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["k", "v"]);
        assert_eq!(on_arrival.input_time_column(), None);
        // Beside an event time, it is a value: the event time stamps the element.
        let both =
            bind("CREATE STREAM s (p AS PROCTIME(), ts TIMESTAMP, WATERMARK FOR ts)").unwrap();
        assert_eq!((both.time_column, both.proctime), (1, Some(0)));
        assert!(!both.stamped_on_arrival());
        assert_eq!(both.input_time_column(), Some(0));
        let plain = bind("CREATE STREAM s (ts TIMESTAMP, WATERMARK FOR ts)").unwrap();
        assert_eq!((plain.proctime, plain.input_time_column()), (None, Some(0)));
        let err = bind("CREATE STREAM s (p AS NOW(), t BIGINT, WATERMARK FOR t)").unwrap_err();
        assert!(err.contains("the only computed column Weir has is `p AS PROCTIME()`"), "{err}");
        assert!(err.contains("line 1, column 23"), "{err}");
    }

    #[test]
    fn binds_table_columns() {
        let mut stmts =
            parse_script("CREATE TABLE t (a INT, b VARCHAR, c DECIMAL(10, 2))").unwrap();
        let Some(Statement::CreateTable { name, columns, .. }) = stmts.pop().map(|s| s.statement)
        else {
            panic!("not a CREATE TABLE");
        };
        let def = table_def(&name, &columns, None).unwrap();
        let types: Vec<&DataType> = def.schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(types, [&DataType::Int64, &DataType::Utf8, &DataType::Decimal128(10, 2)]);
    }

    /// The table definition of a `CREATE TABLE` statement, or its error's message.
    fn table(sql: &str) -> std::result::Result<TableDef, String> {
        let mut stmts = parse_script(sql).map_err(|e| e.to_string())?;
        let Some(Statement::CreateTable { name, columns, primary_key, .. }) =
            stmts.pop().map(|s| s.statement)
        else {
            panic!("not a CREATE TABLE: {sql}");
        };
        table_def(&name, &columns, primary_key.as_ref()).map_err(|e| e.to_string())
    }

    #[test]
    fn primary_keys_of_tables_and_streams() {
        let t = |sql| table(sql).unwrap().primary_key;
        assert_eq!(t("CREATE TABLE t (a INT, b VARCHAR, PRIMARY KEY (b, a))"), [1, 0]);
        assert_eq!(t("CREATE TABLE t (a INT, b VARCHAR PRIMARY KEY)"), [1]);
        assert_eq!(t("CREATE TABLE t (a INT, b VARCHAR)"), Vec::<usize>::new());
        let s =
            bind("CREATE STREAM s (k VARCHAR, v INT, t BIGINT, PRIMARY KEY (k), WATERMARK FOR t)");
        assert_eq!(s.unwrap().primary_key, [0]);
        let s = bind("CREATE STREAM s (k VARCHAR PRIMARY KEY, t BIGINT, WATERMARK FOR t)");
        assert_eq!(s.unwrap().primary_key, [0]);
        let errors = [
            (
                table("CREATE TABLE t (a INT, PRIMARY KEY (z))"),
                "unknown column 'z' at line 1, column 37",
            ),
            (table("CREATE TABLE t (a INT, PRIMARY KEY (a, a))"), "column 'a' twice"),
            (
                table("CREATE TABLE t (a INT PRIMARY KEY, PRIMARY KEY (a))"),
                "at most one PRIMARY KEY",
            ),
            (
                bind(
                    "CREATE STREAM s (k INT PRIMARY KEY, t INT, PRIMARY KEY (t), WATERMARK FOR t)",
                )
                .map(|d| TableDef {
                    name: d.name,
                    schema: d.schema,
                    primary_key: d.primary_key,
                }),
                "at most one PRIMARY KEY at line 1, column 44",
            ),
        ];
        for (got, expected) in errors {
            let err = got.unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
    }
}
