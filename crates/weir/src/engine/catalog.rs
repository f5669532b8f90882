//! The catalog: what exists. Definitions of streams (with their companions), tables, views and
//! sinks, what each view and sink reads, and the CREATE statements of everything that exists,
//! in order (a checkpoint's catalog). The binder resolves names through it
//! ([`Catalog::binder`]); it holds no data and no running state.

use std::collections::BTreeMap;

use weir_common::{Result, Span, WeirError};
use weir_plan::PlanKind;
use weir_sql::parser::ObjectKind;
use weir_sql::{CatalogEntry, CqlQuery, StreamDef, TableDef, ViewDef};

use crate::intake::is_or_companion_of;

#[derive(Debug)]
struct StreamEntry {
    def: StreamDef,
    /// For `s$late` and `s$errors`: `s`.
    companion_of: Option<String>,
}

/// A view, what it reads, and whether its relation is maintained for one-shot reads (a
/// relation view over streams).
#[derive(Debug)]
pub(crate) struct ViewEntry {
    pub def: ViewDef,
    pub deps: Vec<String>,
    pub maintained: bool,
}

/// The catalog. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    streams: BTreeMap<String, StreamEntry>,
    tables: BTreeMap<String, TableDef>,
    views: BTreeMap<String, ViewEntry>,
    /// Each sink's dependencies.
    sinks: BTreeMap<String, Vec<String>>,
    /// The CREATE statements of the objects that exist, in order.
    ddl: Vec<(String, String)>,
}

impl Catalog {
    pub fn exists(&self, name: &str) -> bool {
        self.streams.contains_key(name)
            || self.tables.contains_key(name)
            || self.views.contains_key(name)
            || self.sinks.contains_key(name)
    }

    /// Fails unless `name` is free.
    pub fn check_free(&self, name: &str, span: Option<Span>) -> Result<()> {
        if self.exists(name) {
            return Err(WeirError::plan_at(format!("'{name}' already exists"), span));
        }
        Ok(())
    }

    /// Adds a stream and its companions (whose names must be free too).
    pub fn add_stream(&mut self, def: StreamDef, companions: [StreamDef; 2]) -> Result<()> {
        for c in &companions {
            self.check_free(&c.name, None)?;
        }
        for c in companions {
            let entry = StreamEntry { def: c, companion_of: Some(def.name.clone()) };
            self.streams.insert(entry.def.name.clone(), entry);
        }
        self.streams.insert(def.name.clone(), StreamEntry { def, companion_of: None });
        Ok(())
    }

    /// What a query's recipe for other processes holds (see [`super::cluster`]): every
    /// stream (companions too), every table, and every view's name and query text.
    pub fn recipe_entries(&self) -> (Vec<StreamDef>, Vec<TableDef>, Vec<(String, String)>) {
        (
            self.streams.values().map(|s| s.def.clone()).collect(),
            self.tables.values().cloned().collect(),
            self.views.iter().map(|(n, v)| (n.clone(), v.def.sql.clone())).collect(),
        )
    }

    pub fn add_table(&mut self, def: TableDef) {
        self.tables.insert(def.name.clone(), def);
    }

    /// Adds or replaces a view.
    pub fn add_view(&mut self, view: ViewEntry) {
        self.views.insert(view.def.name.clone(), view);
    }

    pub fn add_sink(&mut self, name: &str, deps: Vec<String>) {
        self.sinks.insert(name.to_string(), deps);
    }

    pub fn remove_sink(&mut self, name: &str) {
        self.sinks.remove(name);
    }

    pub fn stream(&self, name: &str) -> Option<&StreamDef> {
        self.streams.get(name).map(|s| &s.def)
    }

    /// The base stream of a companion.
    pub fn companion_of(&self, name: &str) -> Option<&str> {
        self.streams.get(name).and_then(|s| s.companion_of.as_deref())
    }

    pub fn table(&self, name: &str) -> Option<&TableDef> {
        self.tables.get(name)
    }

    pub fn view(&self, name: &str) -> Option<&ViewEntry> {
        self.views.get(name)
    }

    /// Base streams (no companions), tables, views and sinks, each in name order.
    pub fn base_streams(&self) -> impl Iterator<Item = &StreamDef> {
        self.streams.values().filter(|s| s.companion_of.is_none()).map(|s| &s.def)
    }

    pub fn tables(&self) -> impl Iterator<Item = &TableDef> {
        self.tables.values()
    }

    pub fn views(&self) -> impl Iterator<Item = &ViewEntry> {
        self.views.values()
    }

    pub fn sinks(&self) -> impl Iterator<Item = &String> {
        self.sinks.keys()
    }

    /// Whether a query is continuous: it has a relation-to-stream operator or a window, or
    /// names a stream (base or derived) directly. Otherwise it is one-shot: it reads tables and
    /// views and returns their current relation.
    pub fn is_continuous(&self, q: &CqlQuery) -> bool {
        // TUMBLE/HOP over a table is a one-shot relation like the table; over a stream, the
        // stream's name makes the query continuous.
        q.r2s.is_some()
            || q.windows.iter().any(|w| !w.kind.maps_relations())
            || referenced_names(q).iter().any(|n| {
                self.streams.contains_key(n)
                    || self.views.get(n).is_some_and(|v| v.def.kind() == PlanKind::Stream)
            })
    }

    /// Why `name` cannot be dropped (a companion, or something depends on it), if it cannot.
    pub fn check_droppable(&self, name: &str, span: Option<Span>) -> Result<()> {
        if let Some(base) = self.companion_of(name) {
            return Err(WeirError::plan_at(
                format!("'{name}' belongs to stream '{base}' and is dropped with it"),
                span,
            ));
        }
        let is_dep = |d: &String| is_or_companion_of(d, name);
        if let Some((v, _)) = self.views.iter().find(|(_, v)| v.deps.iter().any(is_dep)) {
            return Err(WeirError::plan_at(
                format!("cannot drop '{name}': view '{v}' depends on it"),
                span,
            ));
        }
        if let Some((k, _)) = self.sinks.iter().find(|(_, deps)| deps.iter().any(is_dep)) {
            return Err(WeirError::plan_at(
                format!("cannot drop '{name}': sink '{k}' depends on it"),
                span,
            ));
        }
        Ok(())
    }

    /// Whether an object of this kind has this name.
    pub fn has(&self, kind: ObjectKind, name: &str) -> bool {
        match kind {
            ObjectKind::Stream => self.streams.contains_key(name),
            ObjectKind::Table => self.tables.contains_key(name),
            ObjectKind::View => self.views.contains_key(name),
            ObjectKind::Sink => self.sinks.contains_key(name),
        }
    }

    /// Removes an object (a stream with its companions).
    pub fn remove(&mut self, kind: ObjectKind, name: &str) {
        match kind {
            ObjectKind::Stream => {
                self.streams.retain(|n, s| n != name && s.companion_of.as_deref() != Some(name));
            }
            ObjectKind::Table => {
                self.tables.remove(name);
            }
            ObjectKind::View => {
                self.views.remove(name);
            }
            ObjectKind::Sink => {
                self.sinks.remove(name);
            }
        }
    }

    /// Records the CREATE statement `text` of `name` (a replaced view's moves to the end).
    pub fn record_created(&mut self, name: &str, text: &str) {
        self.ddl.retain(|(n, _)| n != name);
        self.ddl.push((name.to_string(), text.to_string()));
    }

    /// Forgets the CREATE statement of a dropped object.
    pub fn record_dropped(&mut self, name: &str) {
        if !self.exists(name) {
            self.ddl.retain(|(n, _)| n != name);
        }
    }

    /// The CREATE statement of `name`, if it exists.
    pub fn statement_of(&self, name: &str) -> Option<&str> {
        self.ddl.iter().rev().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, s)| s.as_str())
    }

    /// The CREATE statements of what exists, in order.
    pub fn statements(&self) -> impl Iterator<Item = &str> {
        self.ddl.iter().map(|(_, s)| s.as_str())
    }

    /// The binder's view of the catalog. For one-shot queries (`one_shot`), maintained views
    /// appear as tables holding their current contents.
    pub fn binder(&self, one_shot: bool) -> BinderCatalog<'_> {
        BinderCatalog { catalog: self, one_shot }
    }
}

/// Name resolution for [`weir_sql::bind_query`] over a [`Catalog`].
pub(crate) struct BinderCatalog<'a> {
    catalog: &'a Catalog,
    one_shot: bool,
}

impl weir_sql::Catalog for BinderCatalog<'_> {
    fn lookup(&self, name: &str) -> Option<CatalogEntry> {
        let c = self.catalog;
        if self.one_shot {
            if let Some(v) = c.views.get(name).filter(|v| v.maintained) {
                let def = TableDef {
                    name: name.to_string(),
                    schema: v.def.schema.clone(),
                    primary_key: vec![],
                };
                return Some(CatalogEntry::Table(def));
            }
        }
        if let Some(s) = c.streams.get(name) {
            return Some(CatalogEntry::Stream(s.def.clone()));
        }
        if let Some(t) = c.tables.get(name) {
            return Some(CatalogEntry::Table(t.clone()));
        }
        c.views.get(name).map(|v| CatalogEntry::View(v.def.clone()))
    }
}

/// Names a query reads directly (streams, tables, views), for dependency tracking.
pub(crate) fn referenced_names(q: &CqlQuery) -> Vec<String> {
    let mut names: Vec<String> = q.windows.iter().map(|w| w.stream.clone()).collect();
    weir_sql::binder::collect_relation_names(&q.query, &mut names);
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use weir_common::TimeDomain;
    use weir_sql::Catalog as _;

    use super::*;
    use crate::intake::Intake;

    fn stream(name: &str) -> StreamDef {
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, true)]));
        StreamDef {
            name: name.into(),
            schema,
            time_column: 0,
            domain: TimeDomain::Ticks,
            watermark_delay: 0,
            primary_key: vec![],
            row_kind: None,
            proctime: None,
        }
    }

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        let s = stream("s");
        let companions = Intake::companion_defs(&s).unwrap();
        c.add_stream(s, companions).unwrap();
        c.add_table(TableDef { name: "t".into(), schema: stream("t").schema, primary_key: vec![] });
        c
    }

    #[test]
    fn streams_come_with_their_companions() {
        let c = catalog();
        assert!(c.exists("s$late") && c.exists("s$errors"));
        assert_eq!(c.companion_of("s$late"), Some("s"));
        assert_eq!(c.stream("s$errors").map(|d| d.time_column), Some(6));
        let err = c.check_droppable("s$late", None).unwrap_err();
        assert!(err.to_string().contains("dropped with it"), "{err}");
        let mut c = c;
        c.remove(ObjectKind::Stream, "s");
        assert!(!c.exists("s$late"));
    }

    #[test]
    fn a_name_is_taken_once() {
        let c = catalog();
        assert!(c.check_free("t", None).unwrap_err().to_string().contains("'t' already exists"));
        let mut c = c;
        let clash = stream("x");
        let mut companions = Intake::companion_defs(&clash).unwrap();
        companions[0].name = "t".into();
        assert!(c.add_stream(clash, companions).is_err());
        assert!(!c.exists("x"), "nothing is added when a companion's name is taken");
    }

    /// The CREATE statements are kept in order; a replaced one moves to the end; a dropped
    /// object's goes.
    #[test]
    fn keeps_the_ddl_of_what_exists() {
        let mut c = catalog();
        c.record_created("s", "CREATE STREAM s ...");
        c.record_created("t", "CREATE TABLE t ...");
        c.record_created("s", "CREATE STREAM s ... again");
        assert_eq!(
            c.statements().collect::<Vec<_>>(),
            ["CREATE TABLE t ...", "CREATE STREAM s ... again"]
        );
        c.remove(ObjectKind::Table, "t");
        c.record_dropped("t");
        assert_eq!(c.statements().count(), 1);
    }

    #[test]
    fn the_binder_sees_streams_tables_and_companions() {
        let c = catalog();
        let b = c.binder(false);
        assert!(matches!(b.lookup("s"), Some(CatalogEntry::Stream(_))));
        assert!(
            matches!(b.lookup("s$errors"), Some(CatalogEntry::Stream(d)) if d.schema.fields().len() == 7)
        );
        assert!(matches!(b.lookup("t"), Some(CatalogEntry::Table(_))));
        assert!(b.lookup("nope").is_none());
    }
}
