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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two free ports on localhost (bound, then released for the cluster to take).
    fn addresses() -> Vec<String> {
        let listeners: Vec<std::net::TcpListener> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        listeners.iter().map(|l| l.local_addr().expect("its address").to_string()).collect()
    }

    /// Process 1 runs a "build" that plans some queries otherwise than process 0 does, or
    /// cannot plan them at all: each such query is refused on process 0 with an error naming
    /// process 1, before any worker installs it, and the cluster goes on running the queries
    /// both processes plan alike.
    #[test]
    fn a_query_another_process_plans_otherwise_is_refused_by_name() {
        let addresses = addresses();
        let other = Cluster::new(1, addresses.clone(), 1).expect("cluster");
        let otherwise: Resolver = Arc::new(|bytes: &[u8]| {
            let mut recipe: Recipe = serde_json::from_slice(bytes).expect("a recipe");
            if recipe.query.contains("v + 1") {
                recipe.query = recipe.query.replace("v + 1", "v + 2");
            } else if recipe.query.contains("v + 3") {
                return Err(WeirError::plan("no such thing in this build"));
            }
            RecipeCatalog::new(recipe)?.plan()
        });
        let serving = std::thread::spawn(move || Workers::serve(&other, otherwise));
        let mut engine = Engine::new();
        engine.join_cluster(&Cluster::new(0, addresses, 1).expect("cluster")).expect("joins");
        engine
            .execute("CREATE STREAM s (k BIGINT, v BIGINT, t BIGINT, WATERMARK FOR t AS t)")
            .expect("ddl");
        let e = engine.subscribe("SELECT k, v + 1 FROM s").expect_err("planned otherwise");
        assert_eq!(
            e.to_string(),
            "process 1 of the cluster cannot run this query: it plans the query differently \
             from process 0 (are they the same build of weir?)"
        );
        let e = engine.subscribe("SELECT k, v + 3 FROM s").expect_err("not planned");
        assert_eq!(
            e.to_string(),
            "process 1 of the cluster cannot run this query: no such thing in this build"
        );
        let sub = engine.subscribe("SELECT k, v * 2 FROM s WHERE k > 1").expect("planned alike");
        // The last row moves the watermark past instant 1, whose rows then appear.
        engine
            .execute("INSERT INTO s VALUES (1, 10, 1), (2, 20, 1), (3, 30, 1), (1, 0, 5)")
            .expect("rows");
        let rows: usize = sub.poll().expect("output").iter().map(|b| b.len()).sum();
        assert_eq!(rows, 2);
        drop(sub);
        drop(engine);
        serving.join().expect("process 1's thread").expect("process 1 ends cleanly");
    }
}
