//! Definitions of named streams, tables and views, as the binder sees them.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use weir_common::{Time, TimeDomain};
use weir_plan::{LogicalPlan, PlanKind};

/// A base stream: append-only, stamped by its event-time column, or on arrival by the
/// processing clock when that column is its `PROCTIME()` one.
#[derive(Debug, Clone)]
pub struct StreamDef {
    pub name: String,
    pub schema: SchemaRef,
    /// Index of the column whose value is each element's timestamp: the event-time column of
    /// `WATERMARK FOR`, or without one the `PROCTIME()` column.
    pub time_column: usize,
    pub domain: TimeDomain,
    /// Bounded disorder d of `WATERMARK FOR ts AS ts - d` (0 for in-order streams).
    pub watermark_delay: Time,
    /// The columns of its `PRIMARY KEY`, if it has one (a changelog: each element is its
    /// key's row from its timestamp on); empty otherwise.
    pub primary_key: Vec<usize>,
    /// With a primary key, the column of `ROW KIND col` (a VARCHAR), if declared: each
    /// element's [`RowKind`]. Without it every element upserts.
    pub row_kind: Option<usize>,
    /// The column declared `name AS PROCTIME()`, if any: not given by writers, filled by the
    /// engine with each element's arrival time on the processing clock.
    pub proctime: Option<usize>,
}

/// What an element of a changelog stream (a stream with a `PRIMARY KEY` and a `ROW KIND`
/// column) does to its key's row, from the text of that column: Flink's row kinds (`+I`,
/// `+U`, `-U`, `-D`) and Debezium's operations (`c`, `r`, `u`, `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// `+I`, `+U`, `c` (create), `r` (read, a snapshot row), `u` (update): the element is its
    /// key's row from its timestamp on.
    Upsert,
    /// `-D`, `d`: the key has no row from the element's timestamp on.
    Delete,
    /// `-U`: the row before an update, which the `+U` after it replaces; ignored, as an upsert
    /// reader does.
    UpdateBefore,
}

impl RowKind {
    /// The texts of each kind, as the `ROW KIND` column holds them.
    pub const UPSERT: [&'static str; 5] = ["+I", "+U", "c", "r", "u"];
    pub const DELETE: [&'static str; 2] = ["-D", "d"];
    pub const UPDATE_BEFORE: [&'static str; 1] = ["-U"];

    /// The kind a `ROW KIND` value names (exact, case-sensitive), if any.
    pub fn parse(s: &str) -> Option<RowKind> {
        if Self::UPSERT.contains(&s) {
            Some(RowKind::Upsert)
        } else if Self::DELETE.contains(&s) {
            Some(RowKind::Delete)
        } else if Self::UPDATE_BEFORE.contains(&s) {
            Some(RowKind::UpdateBefore)
        } else {
            None
        }
    }

    /// The accepted values, for messages.
    pub fn accepted() -> &'static str {
        "'+I', '+U', '-U', '-D' (Flink) or 'c', 'r', 'u', 'd' (Debezium)"
    }
}

impl StreamDef {
    /// Whether elements are stamped on arrival by the processing clock (the stream's time
    /// column is its `PROCTIME()` column) rather than by an event time they carry.
    pub fn stamped_on_arrival(&self) -> bool {
        self.proctime == Some(self.time_column)
    }

    /// The columns writers give (pushes, INSERT, sources): every column but the `PROCTIME()`
    /// one, in order.
    pub fn input_schema(&self) -> SchemaRef {
        match self.proctime {
            None => self.schema.clone(),
            Some(p) => {
                let fields = self.schema.fields().iter().enumerate().filter(|(i, _)| *i != p);
                Arc::new(arrow::datatypes::Schema::new(
                    fields.map(|(_, f)| f.clone()).collect::<Vec<_>>(),
                ))
            }
        }
    }

    /// The event-time column's index in [`StreamDef::input_schema`]; None when elements are
    /// stamped on arrival.
    pub fn input_time_column(&self) -> Option<usize> {
        match self.proctime {
            Some(p) if p == self.time_column => None,
            Some(p) if p < self.time_column => Some(self.time_column - 1),
            _ => Some(self.time_column),
        }
    }
}

/// A table: a relation changed by INSERT and DELETE.
#[derive(Debug, Clone)]
pub struct TableDef {
    pub name: String,
    pub schema: SchemaRef,
    /// The columns of its `PRIMARY KEY`, if it has one (an INSERT of an existing key
    /// replaces the key's row); empty otherwise.
    pub primary_key: Vec<usize>,
}

/// A named query: a derived stream (with a relation-to-stream operator) or relation.
#[derive(Debug, Clone)]
pub struct ViewDef {
    pub name: String,
    pub sql: String,
    pub plan: Arc<LogicalPlan>,
    /// Output columns, unqualified.
    pub schema: SchemaRef,
}

impl ViewDef {
    pub fn kind(&self) -> PlanKind {
        self.plan.kind()
    }
}

/// One catalog entry.
#[derive(Debug, Clone)]
pub enum CatalogEntry {
    Stream(StreamDef),
    Table(TableDef),
    View(ViewDef),
}

impl CatalogEntry {
    pub fn schema(&self) -> SchemaRef {
        match self {
            CatalogEntry::Stream(s) => s.schema.clone(),
            CatalogEntry::Table(t) => t.schema.clone(),
            CatalogEntry::View(v) => v.schema.clone(),
        }
    }

    /// "stream", "table" or "view", for messages.
    pub fn noun(&self) -> &'static str {
        match self {
            CatalogEntry::Stream(_) => "stream",
            CatalogEntry::Table(_) => "table",
            CatalogEntry::View(_) => "view",
        }
    }
}

/// Name resolution for the binder. Names are case-insensitive: implementations receive them
/// lower-cased.
pub trait Catalog {
    fn lookup(&self, name: &str) -> Option<CatalogEntry>;
}
