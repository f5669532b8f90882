//! What `SHOW`, `SHOW STREAM STATS` and `DESCRIBE` print: the typed catalog listing
//! ([`super::CatalogObject`]) and stream statistics rendered as rows of text.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::{Result, Span, TimeDomain, WeirError};
use weir_exec::heap::StateSize;
use weir_plan::PlanKind;
use weir_sql::parser::ObjectKind;
use weir_sql::types::sql_type_name;

use super::catalog::Catalog;
use super::dataflow::{RunningQuery, Target};
use super::memory::format_bytes;
use super::{CatalogObject, ExecResult};
use crate::intake::{format_watermark, StreamStats};

/// `SHOW STREAMS` (base streams only), `SHOW TABLES`, `SHOW VIEWS`, `SHOW SINKS`: name and
/// details.
pub(crate) fn show(kind: ObjectKind, listing: &[CatalogObject]) -> ExecResult {
    let (names, details): (Vec<String>, Vec<String>) = listing
        .iter()
        .filter(|o| o.kind == kind && o.companion_of.is_none())
        .map(|o| (o.name.clone(), o.details.clone()))
        .unzip();
    text_rows(&["name", "details"], vec![names, details])
}

/// `SHOW STREAM STATS`.
pub(crate) fn stream_stats(
    stats: &[StreamStats],
    domain: impl Fn(&str) -> TimeDomain,
) -> Result<ExecResult> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("stream", DataType::Utf8, false),
        Field::new("accepted", DataType::Int64, false),
        Field::new("late", DataType::Int64, false),
        Field::new("bad", DataType::Int64, false),
        Field::new("watermark", DataType::Utf8, false),
        Field::new("buffered", DataType::Int64, false),
        Field::new("idle", DataType::Boolean, false),
        Field::new("source", DataType::Utf8, true),
    ]));
    let count = |f: &dyn Fn(&StreamStats) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(stats.iter().map(|s| f(s) as i64)))
    };
    let watermarks = stats.iter().map(|s| format_watermark(s.watermark, domain(&s.stream)));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(stats.iter().map(|s| s.stream.as_str()))),
        count(&|s| s.accepted),
        count(&|s| s.late),
        count(&|s| s.bad),
        Arc::new(StringArray::from_iter_values(watermarks)),
        count(&|s| s.buffered),
        Arc::new(BooleanArray::from_iter(stats.iter().map(|s| Some(s.idle)))),
        Arc::new(StringArray::from_iter(stats.iter().map(|s| s.source.as_deref()))),
    ];
    let batch = RecordBatch::try_new(schema.clone(), cols)?;
    Ok(ExecResult::Rows { schema, batches: vec![batch] })
}

/// `DESCRIBE name`: each column's name, SQL type and what it is (the event-time column of a
/// stream says so, with the watermark delay; so does a `PROCTIME()` column).
pub(crate) fn describe(catalog: &Catalog, name: &str, span: Option<Span>) -> Result<ExecResult> {
    let mut proctime = None;
    let (schema, time_col, delay, kind) = if let Some(s) = catalog.stream(name) {
        proctime = s.proctime;
        (s.schema.clone(), Some(s.time_column), s.watermark_delay, "stream")
    } else if let Some(t) = catalog.table(name) {
        (t.schema.clone(), None, 0, "table")
    } else if let Some(v) = catalog.view(name) {
        let k = if v.def.kind() == PlanKind::Stream { "view (stream)" } else { "view (relation)" };
        (v.def.schema.clone(), None, 0, k)
    } else {
        return Err(WeirError::plan_at(format!("unknown stream, table or view '{name}'"), span));
    };
    let mut cols = Vec::new();
    let mut types = Vec::new();
    let mut notes = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        cols.push(f.name().clone());
        types.push(sql_type_name(f.data_type()));
        notes.push(if Some(i) == proctime && proctime == time_col {
            format!("{kind} arrival time (PROCTIME()), the stream's time")
        } else if Some(i) == proctime {
            format!("{kind} arrival time (PROCTIME())")
        } else if Some(i) == time_col {
            format!("{kind} event time, watermark delay {delay}")
        } else {
            kind.to_string()
        });
    }
    Ok(text_rows(&["column", "type", "notes"], vec![cols, types, notes]))
}

/// `SHOW QUERIES`: each running continuous query, in start order: its id, what it feeds (a
/// view, a sink or a subscriber), whether it outputs a stream or a relation, the streams and
/// tables it reads, the last instant it evaluated, and a subscriber's query text.
pub(crate) fn queries(running: &[RunningQuery]) -> ExecResult {
    let mut cols: Vec<Vec<String>> = vec![Vec::new(); 6];
    for q in running {
        let feeds = q.target.feeds();
        let text = match &q.target {
            Target::Subscriber(sql) => sql.clone().unwrap_or_default(),
            Target::View(_) | Target::Sink(_) => String::new(),
        };
        let kind = match q.plan.kind() {
            PlanKind::Stream => "stream",
            PlanKind::Relation => "relation",
        };
        let domain = q.plan.time_domain().unwrap_or(TimeDomain::Ticks);
        let last = q
            .runner
            .last_instant()
            .map_or_else(|| "-".to_string(), |t| weir_common::time::format_time(t, domain));
        for (col, v) in cols.iter_mut().zip([
            q.id.to_string(),
            feeds,
            kind.to_string(),
            q.runner.sources().join(", "),
            last,
            text,
        ]) {
            col.push(v);
        }
    }
    text_rows(&["id", "feeds", "output", "reads", "last_instant", "query"], cols)
}

/// `SHOW MEMORY`: per running continuous query, in start order, the state it holds (an
/// estimate, see [`weir_exec::heap`]): `id`, `feeds`, `state_bytes`, `state` (the same,
/// readable) and `largest` (the operator, the waiting input or a view's contents holding the
/// most, with its share); then per table (`id` is `table`) its contents; then a row `total`
/// with the sum, and the queries' part of it against the limit.
pub(crate) fn memory(
    sizes: &[(u64, String, StateSize)],
    tables: &[(String, usize)],
    limit: Option<usize>,
) -> ExecResult {
    let mut cols: Vec<Vec<String>> = vec![Vec::new(); 5];
    let mut queries = 0;
    for (id, feeds, size) in sizes {
        queries += size.total();
        let largest = size
            .largest()
            .map(|(label, bytes)| format!("{label} ({})", format_bytes(bytes)))
            .unwrap_or_default();
        for (col, v) in cols.iter_mut().zip([
            id.to_string(),
            feeds.clone(),
            size.total().to_string(),
            format_bytes(size.total()),
            largest,
        ]) {
            col.push(v);
        }
    }
    let mut total = queries;
    for (name, bytes) in tables {
        total += bytes;
        for (col, v) in cols.iter_mut().zip([
            "table".to_string(),
            name.clone(),
            bytes.to_string(),
            format_bytes(*bytes),
            String::new(),
        ]) {
            col.push(v);
        }
    }
    let limit = match limit {
        Some(l) => format!("queries {} of memory_limit {}", format_bytes(queries), format_bytes(l)),
        None => "no memory_limit".to_string(),
    };
    for (col, v) in cols.iter_mut().zip([
        "total".to_string(),
        String::new(),
        total.to_string(),
        format_bytes(total),
        limit,
    ]) {
        col.push(v);
    }
    text_rows(&["id", "feeds", "state_bytes", "state", "largest"], cols)
}

/// `SHOW CREATE name`: the statement that created it, as written.
pub(crate) fn create(catalog: &Catalog, name: &str, span: Option<Span>) -> Result<ExecResult> {
    let name = name.to_ascii_lowercase();
    let Some(text) = catalog.statement_of(&name) else {
        return Err(WeirError::plan_at(
            format!("unknown stream, table, view or sink '{name}'"),
            span,
        ));
    };
    Ok(text_rows(&["name", "statement"], vec![vec![name.clone()], vec![text.to_string()]]))
}

/// Columns of text as a result.
pub(super) fn text_rows(names: &[&str], cols: Vec<Vec<String>>) -> ExecResult {
    let schema: SchemaRef = Arc::new(Schema::new(
        names.iter().map(|n| Field::new(*n, DataType::Utf8, false)).collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> =
        cols.into_iter().map(|c| Arc::new(StringArray::from(c)) as ArrayRef).collect();
    match RecordBatch::try_new(schema.clone(), arrays) {
        Ok(b) => ExecResult::Rows { schema, batches: vec![b] },
        Err(_) => ExecResult::Rows {
            schema: schema.clone(),
            batches: vec![RecordBatch::new_empty(schema)],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(r: ExecResult) -> Vec<Vec<String>> {
        match r {
            ExecResult::Rows { batches, .. } => crate::format::rows_as_text(&batches[0]).unwrap(),
            other => panic!("not rows: {other:?}"),
        }
    }

    #[test]
    fn show_lists_one_kind_without_companions() {
        let object = |name: &str, kind, companion: Option<&str>| CatalogObject {
            name: name.into(),
            kind,
            companion_of: companion.map(str::to_string),
            details: format!("{name} details"),
            columns: vec![],
        };
        let listing = [
            object("s", ObjectKind::Stream, None),
            object("s$late", ObjectKind::Stream, Some("s")),
            object("t", ObjectKind::Table, None),
        ];
        assert_eq!(rows(show(ObjectKind::Stream, &listing)), [["s", "s details"]]);
        assert_eq!(rows(show(ObjectKind::Table, &listing)), [["t", "t details"]]);
        assert!(rows(show(ObjectKind::View, &listing)).is_empty());
    }
}
