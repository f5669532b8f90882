//! The engine's data statements: `INSERT` (into a stream: an arrival like a push; into a
//! table: a change at its `AT` instant or the engine's clock), `DELETE` (from a table) and the
//! time literals of `ADVANCE`.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Span, Time, TimeDomain, WeirError};
use weir_sql::parser::TimeLit;
use weir_sql::sqlparser::ast as sql;
use weir_sql::CqlQuery;

use super::tables::expand;
use super::{Engine, ExecResult};
use crate::intake::admit::cast_column;

impl Engine {
    pub(super) fn insert(
        &mut self,
        target: &str,
        columns: &[String],
        source: Box<sql::Query>,
        at: Option<TimeLit>,
        span: Option<Span>,
    ) -> Result<ExecResult> {
        let is_stream = self.catalog.stream(target).is_some();
        let schema = if let Some(s) = self.catalog.stream(target) {
            if let Some(base) = self.catalog.companion_of(target) {
                return Err(WeirError::plan_at(
                    format!("'{target}' is written by the engine from '{base}'"),
                    span,
                ));
            }
            if at.is_some() {
                return Err(WeirError::plan_at(
                    "AT applies to tables; a stream's elements carry their own timestamps",
                    span,
                ));
            }
            if let Some(p) = s.proctime {
                let p = s.schema.field(p).name();
                if columns.iter().any(|c| c == p) {
                    return Err(WeirError::plan_at(
                        format!("'{target}'.'{p}' is the arrival time (PROCTIME()): Weir fills it"),
                        span,
                    ));
                }
            }
            s.input_schema()
        } else if let Some(t) = self.catalog.table(target) {
            t.schema.clone()
        } else if self.catalog.view(target).is_some() {
            return Err(WeirError::plan_at(format!("cannot INSERT into view '{target}'"), span));
        } else {
            return Err(WeirError::plan_at(format!("unknown stream or table '{target}'"), span));
        };
        let q = CqlQuery { query: source, r2s: None, windows: vec![] };
        let plan = self.bind(&q)?;
        let rows = expand(&self.tables.evaluate(&plan, true)?)?;
        let data = arrange_columns(target, &schema, columns, &rows, span)?;
        let n = data.num_rows();
        if is_stream {
            self.push_from(target, data, "INSERT")?;
        } else {
            let clock = self.clock;
            let t = self.table_time(at);
            let changes = self.tables.insertion(target, data, t).inspect_err(|_| {
                self.clock = clock;
            })?;
            self.change_table(target, changes, t)?;
        }
        Ok(ExecResult::Done(format!("INSERT {n}")))
    }

    pub(super) fn delete(
        &mut self,
        target: &str,
        selection: Option<Box<sql::Expr>>,
        at: Option<TimeLit>,
        span: Option<Span>,
    ) -> Result<ExecResult> {
        let Some(table) = self.catalog.table(target) else {
            if self.catalog.stream(target).is_some() {
                return Err(WeirError::plan_at(
                    format!("cannot DELETE from stream '{target}': streams are append-only"),
                    span,
                ));
            }
            return Err(WeirError::plan_at(format!("unknown table '{target}'"), span));
        };
        let schema = table.schema.clone();
        let plan =
            weir_sql::binder::bind_selection(&self.catalog.binder(false), target, selection)?;
        let victims = self.tables.evaluate(&plan, false)?;
        let n: i64 = victims.diffs.iter().sum();
        let t = self.table_time(at);
        let data = RecordBatch::try_new(schema, victims.data.columns().to_vec())?;
        let diffs = victims.diffs.iter().map(|d| -d).collect();
        self.change_table(target, ChangeBatch::new(data, vec![t; victims.len()], diffs), t)?;
        Ok(ExecResult::Done(format!("DELETE {n}")))
    }

    /// The instant of a table change: its `AT`, or the engine's clock; the clock follows.
    pub(super) fn table_time(&mut self, at: Option<TimeLit>) -> Time {
        let t = match at {
            None => self.clock,
            Some(TimeLit::Ticks(t)) | Some(TimeLit::Micros(t)) => t,
        };
        self.clock = self.clock.max(t);
        t
    }

    /// Applies changes to a table and hands them to the queries reading it.
    pub(super) fn change_table(&mut self, name: &str, changes: ChangeBatch, t: Time) -> Result<()> {
        self.tables.apply(name, &changes)?;
        self.dataflow.forward_table_change(name, &changes, t)?;
        self.run_queries();
        Ok(())
    }

    /// A time literal of `ADVANCE stream TO ...`, checked against the stream's time domain.
    pub(super) fn time_of(&self, stream: &str, t: TimeLit, span: Option<Span>) -> Result<Time> {
        let domain = self.catalog.stream(stream).map(|s| s.domain);
        match (t, domain) {
            (_, None) => Err(WeirError::plan_at(format!("unknown stream '{stream}'"), span)),
            (TimeLit::Ticks(v), Some(TimeDomain::Ticks))
            | (TimeLit::Micros(v), Some(TimeDomain::Micros)) => Ok(v),
            (TimeLit::Ticks(_), Some(TimeDomain::Micros)) => Err(WeirError::plan_at(
                format!("stream '{stream}' is stamped by TIMESTAMP: write TIMESTAMP '...'"),
                span,
            )),
            (TimeLit::Micros(_), Some(TimeDomain::Ticks)) => Err(WeirError::plan_at(
                format!("stream '{stream}' is stamped by integer ticks: write an integer"),
                span,
            )),
        }
    }
}

/// Puts inserted rows into the target's column order; unnamed columns are NULL.
fn arrange_columns(
    target: &str,
    schema: &SchemaRef,
    columns: &[String],
    rows: &RecordBatch,
    span: Option<Span>,
) -> Result<RecordBatch> {
    let n = rows.num_rows();
    let mut out = Vec::with_capacity(schema.fields().len());
    if columns.is_empty() {
        if rows.num_columns() != schema.fields().len() {
            return Err(WeirError::plan_at(
                format!(
                    "'{target}' has {} columns but the INSERT gives {}",
                    schema.fields().len(),
                    rows.num_columns()
                ),
                span,
            ));
        }
        for (i, f) in schema.fields().iter().enumerate() {
            out.push(cast_column(target, f, rows.column(i))?);
        }
    } else {
        if columns.len() != rows.num_columns() {
            return Err(WeirError::plan_at(
                format!(
                    "INSERT names {} columns but gives {} values",
                    columns.len(),
                    rows.num_columns()
                ),
                span,
            ));
        }
        for c in columns {
            if schema.index_of(c).is_err() {
                return Err(WeirError::plan_at(format!("'{target}' has no column '{c}'"), span));
            }
        }
        for f in schema.fields() {
            match columns.iter().position(|c| c == f.name()) {
                Some(i) => out.push(cast_column(target, f, rows.column(i))?),
                None => out.push(arrow::array::new_null_array(f.data_type(), n)),
            }
        }
    }
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        out,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
    )?)
}
