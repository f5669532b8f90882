//! Running on a cluster of `weir` processes: the recipe a query travels to the other
//! processes as, and the planner that reads it there.
//!
//! A plan holds DataFusion expressions, which have no wire form, so process 0 sends the other
//! processes what it planned the query from instead ([`Recipe`]): the query's SQL text, the
//! engine settings that bind it ([`weir_sql::BindOptions`]), and every stream, table and view
//! of the catalog (schemas and view texts: a few bytes per object). [`resolver`] plans the
//! recipe the same way the engine does, and the worker runtime refuses the query unless every
//! process got the same plan ([`weir_workers::fingerprint`]). The other processes hold no
//! catalog, sources or sinks of their own: they only run workers ([`serve_cluster`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};
use weir_common::{ipc, Result, Time, TimeDomain, WeirError};
use weir_plan::LogicalPlan;
use weir_sql::{BindOptions, CatalogEntry, NullOrder, StreamDef, TableDef, ViewDef};
use weir_workers::{Cluster, Resolver, Workers};

use super::Engine;

/// A query as the other processes of a cluster plan it (see the module docs).
#[derive(Debug, Serialize, Deserialize)]
struct Recipe {
    query: String,
    null_order: String,
    streams: Vec<StreamRecipe>,
    tables: Vec<TableRecipe>,
    views: Vec<(String, String)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StreamRecipe {
    name: String,
    schema: Vec<u8>,
    time_column: usize,
    micros: bool,
    watermark_delay: Time,
    primary_key: Vec<usize>,
    row_kind: Option<usize>,
    proctime: Option<usize>,
}

#[derive(Debug, Serialize, Deserialize)]
struct TableRecipe {
    name: String,
    schema: Vec<u8>,
    primary_key: Vec<usize>,
}

/// A schema as the bytes of an empty Arrow IPC stream.
fn schema_bytes(schema: &SchemaRef) -> Result<Vec<u8>> {
    ipc::write_stream(&RecordBatch::new_empty(schema.clone()))
}

fn schema_of(bytes: &[u8]) -> Result<SchemaRef> {
    ipc::read_stream(bytes).map(|(schema, _)| schema)
}

impl Engine {
    /// Runs every continuous query started from now on the workers of a cluster of
    /// processes, this one being process 0 (the others run [`serve_cluster`] with the same
    /// `cluster` but their own index). Set before any continuous query starts.
    pub fn join_cluster(&mut self, cluster: &Cluster) -> Result<()> {
        self.dataflow.set_cluster(cluster)
    }

    /// The recipe of the query `text`, planned against the catalog as it is now: None unless
    /// queries run on several processes.
    pub(super) fn recipe(&self, text: &str) -> Result<Option<Vec<u8>>> {
        if !self.dataflow.spans_processes() {
            return Ok(None);
        }
        let (streams, tables, views) = self.catalog.recipe_entries();
        let recipe = Recipe {
            query: text.to_string(),
            null_order: self.settings.bind.null_order.name().to_string(),
            streams: streams
                .into_iter()
                .map(|s| {
                    Ok(StreamRecipe {
                        schema: schema_bytes(&s.schema)?,
                        name: s.name,
                        time_column: s.time_column,
                        micros: s.domain == TimeDomain::Micros,
                        watermark_delay: s.watermark_delay,
                        primary_key: s.primary_key,
                        row_kind: s.row_kind,
                        proctime: s.proctime,
                    })
                })
                .collect::<Result<_>>()?,
            tables: tables
                .into_iter()
                .map(|t| {
                    Ok(TableRecipe {
                        schema: schema_bytes(&t.schema)?,
                        name: t.name,
                        primary_key: t.primary_key,
                    })
                })
                .collect::<Result<_>>()?,
            views,
        };
        serde_json::to_vec(&recipe)
            .map(Some)
            .map_err(|e| WeirError::internal(format!("writing a query's recipe: {e}")))
    }
}

/// Runs this process as process `cluster.process` (not 0) of a cluster: its workers take
/// their queries and input from process 0 and return once process 0 shuts them down.
pub fn serve_cluster(cluster: &Cluster) -> Result<()> {
    Workers::serve(cluster, resolver())
}

/// Plans a [`Recipe`] as the engine of process 0 did.
pub fn resolver() -> Resolver {
    Arc::new(|bytes: &[u8]| {
        let recipe: Recipe = serde_json::from_slice(bytes)
            .map_err(|e| WeirError::internal(format!("an unreadable query recipe: {e}")))?;
        RecipeCatalog::new(recipe)?.plan()
    })
}

/// The catalog a recipe describes, as the binder looks names up in it.
struct RecipeCatalog {
    query: String,
    options: BindOptions,
    streams: BTreeMap<String, StreamDef>,
    tables: BTreeMap<String, TableDef>,
    views: BTreeMap<String, String>,
}

impl RecipeCatalog {
    fn new(r: Recipe) -> Result<RecipeCatalog> {
        let null_order = NullOrder::parse(&r.null_order).ok_or_else(|| {
            WeirError::internal(format!("a recipe's null order '{}'", r.null_order))
        })?;
        let mut streams = BTreeMap::new();
        for s in r.streams {
            let def = StreamDef {
                schema: schema_of(&s.schema)?,
                time_column: s.time_column,
                domain: if s.micros { TimeDomain::Micros } else { TimeDomain::Ticks },
                watermark_delay: s.watermark_delay,
                primary_key: s.primary_key,
                row_kind: s.row_kind,
                proctime: s.proctime,
                name: s.name.clone(),
            };
            streams.insert(s.name, def);
        }
        let mut tables = BTreeMap::new();
        for t in r.tables {
            let def = TableDef {
                schema: schema_of(&t.schema)?,
                primary_key: t.primary_key,
                name: t.name.clone(),
            };
            tables.insert(t.name, def);
        }
        Ok(RecipeCatalog {
            query: r.query,
            options: BindOptions { null_order },
            streams,
            tables,
            views: r.views.into_iter().collect(),
        })
    }

    fn plan(&self) -> Result<Arc<LogicalPlan>> {
        self.bind(&self.query)
    }

    /// Plans `sql`, one query, as the engine does.
    fn bind(&self, sql: &str) -> Result<Arc<LogicalPlan>> {
        super::plan_query_text(self, self.options, sql)
    }
}

impl weir_sql::Catalog for RecipeCatalog {
    fn lookup(&self, name: &str) -> Option<CatalogEntry> {
        if let Some(s) = self.streams.get(name) {
            return Some(CatalogEntry::Stream(s.clone()));
        }
        if let Some(t) = self.tables.get(name) {
            return Some(CatalogEntry::Table(t.clone()));
        }
        // A view is planned again from its text, against the same catalog, as it was when
        // created (what it reads cannot change under it).
        let sql = self.views.get(name)?;
        let plan = self.bind(sql).ok()?;
        let schema = weir_exec::compile::exec_schema(&plan.schema());
        Some(CatalogEntry::View(ViewDef { name: name.to_string(), sql: sql.clone(), plan, schema }))
    }
}
