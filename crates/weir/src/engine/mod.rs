//! The engine: a thin dispatcher over the parts that own Weir's state.
//!
//! A statement flows through it the way data flows through Weir:
//!
//! 1. the text is parsed ([`weir_sql::parse_script`]) and each statement dispatched by
//!    [`Engine::execute_statement`];
//! 2. DDL is bound in `weir-sql` ([`weir_sql::ddl`]) and recorded in the [`catalog`];
//! 3. queries are bound against the catalog and either evaluated once over the [`tables`]
//!    (one-shot queries over tables and views) or started in the [`dataflow`] (continuous
//!    queries, whose output goes to a subscriber, a maintained view or a file sink);
//! 4. elements (a push, an INSERT, a source read) are admitted by the [`crate::intake`] (late
//!    and bad rows, watermarks), forwarded to the queries reading them, and every query is then
//!    evaluated up to its frontier ([`Engine::run_queries`]).
//!
//! `SHOW` and `DESCRIBE` render the typed catalog listing ([`show`]); checkpoints and
//! recovery are in [`recovery`], sources are polled in [`sources`].
//!
//! Time: each stream has a watermark W (no element below W will still arrive); a query's
//! frontier is the minimum of its streams' watermarks (idle streams left out); the engine
//! evaluates every query up to its frontier after each statement, push or source read. Tables
//! never hold queries back: a change to a table happens at its `AT τ` instant (or the engine's
//! clock, the largest instant seen so far).

pub(crate) mod catalog;
mod cluster;
mod copy;
pub(crate) mod dataflow;
mod ddl;
mod dml;
mod load;
pub mod memory;
mod recovery;
mod settings;
pub(crate) mod show;
mod sources;
pub(crate) mod tables;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration as WallDuration;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use weir_common::{Result, Time, TimeDomain, Watermark, WeirError};
use weir_plan::LogicalPlan;
use weir_sql::parser::{ObjectKind, ParsedStatement, Statement};
use weir_sql::{bind_query_with, parse_script, CqlQuery};

use catalog::Catalog;
pub use cluster::serve_cluster;
pub use copy::{CopyIn, CopyReport};
use dataflow::{subscription, Dataflow, SinkFile, Subscriber, Target};

pub use recovery::Recovery;
pub use sources::SourcePoll;
use tables::{expand, Shared, Tables};

use crate::intake::{Arrival, Intake, StreamPolicy, StreamStats};
use crate::source::{SourceProgress, SourceSpec};
use crate::subscription::{output_channel, send, Subscription};

/// What one statement did.
#[derive(Debug)]
pub enum ExecResult {
    /// A statement without rows: a short tag such as `CREATE STREAM` or `INSERT 3`.
    Done(String),
    /// Rows: a one-shot query over tables and views, SHOW, DESCRIBE.
    Rows { schema: SchemaRef, batches: Vec<RecordBatch> },
    /// EXPLAIN output.
    Explain(String),
    /// A continuous query was started; its output arrives through the subscription.
    Subscribed(Subscription),
}

/// What a query returns, as [`Engine::describe`] tells it without running the query.
#[derive(Debug, Clone)]
pub struct QueryShape {
    /// The output columns.
    pub schema: SchemaRef,
    /// Whether it runs continuously (its output arrives through a subscription) or once.
    pub continuous: bool,
    /// Stream elements or relation changes (continuous queries).
    pub kind: weir_plan::PlanKind,
    /// How instants read (continuous queries).
    pub domain: TimeDomain,
}

/// One object of the catalog, as [`Engine::catalog`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogObject {
    pub name: String,
    pub kind: ObjectKind,
    /// For `s$late` and `s$errors`: `s`.
    pub companion_of: Option<String>,
    /// What `SHOW` says of it: a stream's event-time column and element count, a table's row
    /// count, a view's kind (stream or relation), a sink's file, format, size and failure.
    pub details: String,
    /// Name and type of each column (none for a sink).
    pub columns: Vec<(String, DataType)>,
}

/// An embedded Weir instance. See the crate docs.
#[derive(Debug, Default)]
pub struct Engine {
    /// What exists: definitions and their CREATE statements.
    catalog: Catalog,
    /// Per stream: watermark, policies, accounting, source.
    intake: Intake,
    /// Table contents and maintained views' contents.
    tables: Tables,
    /// The running continuous queries.
    dataflow: Dataflow,
    /// Each file sink's file, shared with the query that writes it.
    sinks: BTreeMap<String, Shared<SinkFile>>,
    /// The largest instant seen (element, heartbeat or table change); table changes without
    /// `AT` happen here.
    clock: Time,
    /// Where checkpoints go, how often, and what recovery resumes.
    checkpoints: recovery::Checkpoints,
    /// Relative source and sink paths are resolved here (empty: the working directory).
    base_dir: std::path::PathBuf,
    /// Files no sink may write (absolute), with what they are: the script being run.
    protected: Vec<(std::path::PathBuf, String)>,
    /// If set, every source and sink file must be inside this directory (resolved).
    confined: Option<std::path::PathBuf>,
    /// Subscriptions to a maintained view itself, by id: the view they tap.
    taps: BTreeMap<u64, String>,
    /// `SET` settings: how queries are planned from now on.
    settings: settings::Settings,
    /// The memory limit on the continuous queries' state (see [`memory`]).
    memory: memory::MemoryLimit,
    /// While sources are being read: file sinks may still be writing what the queries
    /// delivered when [`Engine::run_queries`] returns (see [`Engine::poll_sources`]).
    /// Otherwise every call leaves each sink's file holding all its query's output so far.
    sinks_in_flight: bool,
}

impl Engine {
    pub fn new() -> Self {
        Engine::default()
    }

    /// Runs the continuous queries started from now on `n` timely workers (threads of this
    /// process; 1, the default, and 0 run them on the caller's thread). Set it before the first
    /// continuous query starts. A checkpoint holds each worker's state, so it restores on the
    /// same number of workers ([`Engine::open_with_workers`]).
    pub fn set_workers(&mut self, n: usize) -> Result<()> {
        self.dataflow.set_workers(n)
    }

    /// The number of workers continuous queries run on.
    pub fn workers(&self) -> usize {
        self.dataflow.workers()
    }

    /// Whether continuous queries run on workers of other processes too ([`Engine::join_cluster`]).
    pub fn on_cluster(&self) -> bool {
        self.dataflow.spans_processes()
    }

    /// Rows and bytes the continuous queries have sent from one worker to another so far
    /// (exchanges by key or instant, rows to worker 0, output gathered there); (0, 0) on one
    /// worker. The bytes are those of the rows' Arrow buffers plus 16 per row (time and diff):
    /// about what they would take on the wire between processes.
    pub fn worker_traffic(&self) -> (u64, u64) {
        self.dataflow.traffic()
    }

    /// Executes a script of `;`-separated statements, in order, stopping at the first error.
    /// Errors in SQL text render with the line and a caret.
    pub fn execute(&mut self, sql: &str) -> Result<Vec<ExecResult>> {
        // A statement sees every sink's file whole (a poll of sources that goes on leaves the
        // last writes in flight: see `Engine::poll_sources`).
        self.dataflow.settle_outputs();
        let stmts = parse_script(sql)?;
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            out.push(self.execute_statement(s).map_err(|e| e.with_source(sql))?);
        }
        Ok(out)
    }

    /// Executes one statement already parsed by [`weir_sql::parse_script`] (so a driver that
    /// splits a script itself need not parse it twice). Errors carry spans relative to the text
    /// it was parsed from; attach that text with [`WeirError::with_source`] to render a caret.
    pub fn execute_statement(&mut self, p: ParsedStatement) -> Result<ExecResult> {
        match &p.statement {
            // Logged as a statement (with the write-ahead log on), the rows it inserts not
            // again.
            Statement::Insert { .. } | Statement::Delete { .. } => {
                let logged = self.log_statement(&p.text)?;
                let result = self.without_logging(|e| e.run_statement(p));
                if logged {
                    self.after_logged()?;
                }
                result
            }
            Statement::CreateStream { .. }
            | Statement::CreateTable { .. }
            | Statement::Copy { .. }
            | Statement::CreateView { .. }
            | Statement::CreateSink { .. }
            | Statement::Drop { .. } => {
                let result = self.run_statement(p)?;
                self.after_definition()?;
                Ok(result)
            }
            _ => self.run_statement(p),
        }
    }

    /// [`Engine::execute_statement`] without the write-ahead log's part.
    fn run_statement(&mut self, p: ParsedStatement) -> Result<ExecResult> {
        let text = p.text;
        match p.statement {
            Statement::CreateStream {
                name,
                columns,
                watermark,
                primary_key,
                options,
                if_not_exists,
                span,
            } => self.create_stream(
                &name,
                &columns,
                watermark.as_ref(),
                primary_key.as_ref(),
                &options,
                if_not_exists,
                span,
                &text,
            ),
            Statement::CreateTable { name, columns, primary_key, options, if_not_exists, span } => {
                let key = primary_key.as_ref();
                self.create_table(&name, &columns, key, &options, if_not_exists, span, &text)
            }
            Statement::Copy { target, path, options, span } => {
                self.copy_from_file(&target, &path, &options, span)
            }
            Statement::CreateView { name, query, sql, or_replace, span } => {
                self.create_view(&name, &query, sql, or_replace, span, &text)
            }
            Statement::CreateSink { name, options, query, sql, span } => {
                self.create_sink(&name, &options, (&query, &sql), span, &text)
            }
            Statement::CreateIndex { table, span } => {
                if self.catalog.table(&table).is_none() {
                    return Err(WeirError::plan_at(format!("unknown table '{table}'"), span));
                }
                Ok(ExecResult::Done("CREATE INDEX".into()))
            }
            Statement::Drop { kind, name, if_exists, span } => {
                self.drop(kind, &name, if_exists, span)
            }
            Statement::Insert { target, columns, source, at, span } => {
                self.insert(&target, &columns, source, at, span)
            }
            Statement::Delete { target, selection, at, span } => {
                self.delete(&target, selection, at, span)
            }
            Statement::Advance { stream, to, span } => {
                let t = self.time_of(&stream, to, span)?;
                self.advance(&stream, t)?;
                Ok(ExecResult::Done("ADVANCE".into()))
            }
            Statement::Close { stream, .. } => {
                match stream {
                    Some(s) => self.close(&s)?,
                    None => self.close_all()?,
                }
                Ok(ExecResult::Done("CLOSE".into()))
            }
            Statement::Show(kind) => Ok(show::show(kind, &self.catalog())),
            Statement::ShowStreamStats => show::stream_stats(&self.stream_stats(), |s| {
                self.catalog.stream(s).map_or(TimeDomain::Ticks, |d| d.domain)
            }),
            Statement::Describe { name, span } => show::describe(&self.catalog, &name, span),
            Statement::ShowQueries => Ok(show::queries(self.dataflow.queries())),
            Statement::ShowMemory => {
                let sizes = self.dataflow.state_sizes();
                Ok(show::memory(&sizes, &self.tables.table_bytes(), self.memory.limit()))
            }
            Statement::ShowCreate { name, span } => show::create(&self.catalog, &name, span),
            Statement::Set { name, value, span, value_span } => {
                self.set_setting_at(&name, value.as_deref(), span, value_span)?;
                Ok(ExecResult::Done(if value.is_some() { "SET" } else { "RESET" }.into()))
            }
            Statement::ShowSetting { name, span } => self.show_setting(&name, span),
            Statement::Checkpoint => {
                let n = self.checkpoint()?;
                Ok(ExecResult::Done(format!("CHECKPOINT {n}")))
            }
            Statement::Explain(q) => {
                let plan = self.bind(&q)?;
                // Where rows move between workers on several (on one, nothing moves), so the
                // plan reads the same whatever the worker count.
                let notes = weir_workers::exchanges(&plan).unwrap_or_default();
                Ok(ExecResult::Explain(weir_plan::explain::explain_with(&plan, &notes)))
            }
            Statement::Query(q) => {
                if self.catalog.is_continuous(&q) {
                    let plan = self.bind(&q)?;
                    let sql = text.trim().trim_end_matches(';').trim().to_string();
                    Ok(ExecResult::Subscribed(self.start_query(plan, Some(sql))?))
                } else {
                    let plan = bind_query_with(&self.catalog.binder(true), self.settings.bind, &q)?;
                    let batch = expand(&self.tables.evaluate(&plan, false)?)?;
                    Ok(ExecResult::Rows { schema: batch.schema(), batches: vec![batch] })
                }
            }
        }
    }

    /// What the statement in `sql` returns, without running it: the shape of a query's
    /// output, `None` for a statement that returns no rows (DDL, INSERT, ADVANCE...) or one
    /// whose rows are not a query's (SHOW, DESCRIBE, EXPLAIN). Errors are the ones running it
    /// would give in planning: unknown names, types.
    pub fn describe(&self, sql: &str) -> Result<Option<QueryShape>> {
        let mut stmts = parse_script(sql)?;
        if stmts.len() != 1 {
            return Err(WeirError::plan("expected exactly one statement"));
        }
        let Some(ParsedStatement { statement: Statement::Query(q), .. }) = stmts.pop() else {
            return Ok(None);
        };
        let continuous = self.catalog.is_continuous(&q);
        let plan = bind_query_with(&self.catalog.binder(!continuous), self.settings.bind, &q)
            .map_err(|e| e.with_source(sql))?;
        Ok(Some(QueryShape {
            schema: weir_exec::compile::exec_schema(&plan.schema()),
            continuous,
            kind: plan.kind(),
            domain: plan.time_domain().unwrap_or(TimeDomain::Ticks),
        }))
    }

    /// The shape of what `subscribe(query_or_name)` would stream.
    pub fn describe_subscription(&self, query_or_name: &str) -> Result<QueryShape> {
        let trimmed = query_or_name.trim().trim_end_matches(';').trim();
        let plan = self.subscription_plan(trimmed)?;
        Ok(QueryShape {
            schema: weir_exec::compile::exec_schema(&plan.schema()),
            continuous: true,
            kind: plan.kind(),
            domain: plan.time_domain().unwrap_or(TimeDomain::Ticks),
        })
    }

    /// Starts a continuous query, or subscribes to a view or stream given by name. A
    /// maintained (relation) view's subscription is the view itself: its current contents,
    /// as insertions at the instant of its latest change, then every change it goes through,
    /// exactly what one-shot queries over it see; it ends when the view is dropped or fails.
    pub fn subscribe(&mut self, query_or_name: &str) -> Result<Subscription> {
        let trimmed = query_or_name.trim().trim_end_matches(';').trim();
        if let Some(sub) = self.tap_view(trimmed)? {
            return Ok(sub);
        }
        let plan = self.subscription_plan(trimmed)?;
        self.start_query(plan, Some(trimmed.to_string()))
    }

    /// A subscription to maintained view `name`, if it is one.
    fn tap_view(&mut self, name: &str) -> Result<Option<Subscription>> {
        let name = name.to_ascii_lowercase();
        let (Some(def), Some(view)) = (self.catalog.view(&name), self.tables.view(&name)) else {
            return Ok(None);
        };
        let plan = def.def.plan.clone();
        let view = view.clone();
        let id = self.dataflow.allocate_id();
        let (tx, rx) = output_channel();
        {
            let mut v = view.lock();
            if let Some(e) = &v.failed {
                return Err(e.clone());
            }
            if !v.contents.is_empty() {
                // Restored from a checkpoint, a view's latest change is not known: the clock.
                let at = v.changed_at.unwrap_or(self.clock);
                let snapshot = v.contents.snapshot(&v.schema, at)?;
                send(&tx, Ok(snapshot));
            }
            v.taps.push((id, tx));
        }
        self.taps.insert(id, name);
        Ok(Some(subscription(id, &plan, rx)))
    }

    /// The plan of a query, or of `SELECT * FROM name` for a view or stream's name.
    fn subscription_plan(&self, text: &str) -> Result<Arc<LogicalPlan>> {
        if is_bare_name(text) {
            let name = text.to_ascii_lowercase();
            return match self.catalog.view(&name) {
                Some(v) => Ok(v.def.plan.clone()),
                None => self.plan_text(&format!("SELECT * FROM {text}")),
            };
        }
        self.plan_text(text)
    }

    /// The query text [`Engine::subscription_plan`] plans `text` from.
    fn subscription_text(&self, text: &str) -> String {
        if is_bare_name(text) {
            return match self.catalog.view(&text.to_ascii_lowercase()) {
                Some(v) => v.def.sql.clone(),
                None => format!("SELECT * FROM {text}"),
            };
        }
        text.to_string()
    }

    fn plan_text(&self, sql: &str) -> Result<Arc<LogicalPlan>> {
        plan_query_text(&self.catalog.binder(false), self.settings.bind, sql)
    }

    fn bind(&self, q: &CqlQuery) -> Result<Arc<LogicalPlan>> {
        bind_query_with(&self.catalog.binder(false), self.settings.bind, q)
    }

    fn start_query(&mut self, plan: Arc<LogicalPlan>, sql: Option<String>) -> Result<Subscription> {
        let (tx, rx) = output_channel();
        let output = Box::new(Subscriber(tx));
        let text = self.subscription_text(sql.as_deref().unwrap_or_default());
        let id = self.launch(&plan, &text, Target::Subscriber(sql), Some(output))?;
        let mut sub = subscription(id, &plan, rx);
        sub.notices = self.ended_inputs(&plan);
        Ok(sub)
    }

    /// A notice for each stream `plan` reads that has already ended (closed, or its source
    /// read to its end): a query started now sees none of its elements, because a continuous
    /// query sees a stream's elements from the instant it starts, and no element comes after
    /// the end. Without it, such a query would print a header and then nothing, with no word
    /// why.
    fn ended_inputs(&self, plan: &LogicalPlan) -> Vec<String> {
        let mut out = Vec::new();
        for name in plan.sources() {
            let Some(st) = self.intake.get(&name) else { continue };
            // A companion (`s$late`, `s$errors`) ends with its stream.
            let base = st.companion_of.as_deref().unwrap_or(&name);
            if !(st.closed || self.intake.get(base).is_some_and(|b| b.closed)) {
                continue;
            }
            let how = match self.intake.get(base).and_then(|b| b.source.as_ref()) {
                Some(src) => {
                    format!("its source {} was read to its end", src.reader.spec.describe())
                }
                None => "it was closed".to_string(),
            };
            out.push(format!(
                "stream '{name}' has ended ({how}): this query sees none of its elements. A \
                 continuous query sees a stream from the moment it starts; to read the file \
                 again, create the stream again (DROP STREAM, then CREATE STREAM)"
            ));
        }
        out
    }

    /// Starts running a plan into an output (None: parked), from its tables' current
    /// contents; returns the query's id.
    /// Starts `plan`, planned from the query `text`, into `output`.
    fn launch(
        &mut self,
        plan: &Arc<LogicalPlan>,
        text: &str,
        target: Target,
        output: Option<Box<dyn dataflow::Output>>,
    ) -> Result<u64> {
        let recipe = self.recipe(text)?;
        let mut initial = Vec::new();
        for s in plan.sources() {
            if let Some(snapshot) = self.tables.snapshot(&s, self.clock)? {
                initial.push((s, snapshot));
            }
        }
        let id = self.dataflow.launch(plan, recipe, target, output, initial)?;
        self.run_queries();
        Ok(id)
    }

    /// Stops a continuous query (or ends a subscription to a view).
    pub fn unsubscribe(&mut self, id: u64) {
        if let Some(view) = self.taps.remove(&id) {
            if let Some(v) = self.tables.view(&view) {
                v.lock().taps.retain(|(tap, _)| *tap != id);
            }
            return;
        }
        self.dataflow.stop_where(|q| q.id == id);
    }

    /// Whether a running query is complete: it reads only streams, every one of them is
    /// closed, so its output is all delivered and nothing can change it (a query reading a
    /// table or view never is: they can change). False for an unknown id.
    pub fn is_complete(&self, id: u64) -> bool {
        let view = self.taps.get(&id).map(|v| dataflow::Target::View(v.clone()));
        let found = match &view {
            Some(target) => self.dataflow.queries().iter().find(|q| q.target == *target),
            None => self.dataflow.queries().iter().find(|q| q.id == id),
        };
        found.is_some_and(|q| {
            q.runner.sources().iter().all(|s| {
                self.intake.input_time(s).is_some_and(|(w, _)| w == weir_common::WATERMARK_CLOSED)
            })
        })
    }

    /// Number of running continuous queries.
    pub fn running_queries(&self) -> usize {
        self.dataflow.len()
    }

    /// Evaluates every query up to its frontier and delivers the output (see
    /// [`dataflow`]); idle streams rise to what their readers evaluated, and elements every
    /// reader has passed are no longer counted as buffered (see [`Intake::settle`]).
    fn run_queries(&mut self) {
        if let Some(now) = self.intake.refresh_processing_time() {
            // With streams stamped on arrival, a table changed now changes at the processing
            // clock's instant: after the elements that arrived before the change.
            self.clock = self.clock.max(now);
        }
        let frontiers = self.dataflow.frontiers(|s| self.intake.input_time(s));
        self.intake.settle(&self.dataflow.reader_frontiers(&frontiers));
        self.dataflow.advance(&frontiers, self.sinks_in_flight);
        self.enforce_memory_limit();
    }

    /// Fails the queries holding the most state while the queries' state is at or above the
    /// memory limit (see [`memory`]); cheap while the process is below it.
    fn enforce_memory_limit(&mut self) {
        if self.memory.limit().is_none() {
            return;
        }
        let process = memory::process_memory();
        if !self.memory.should_walk(process) {
            return;
        }
        let started = std::time::Instant::now();
        let sizes = self.dataflow.state_sizes();
        for (id, e) in self.memory.judge(&sizes, process, started.elapsed()) {
            self.dataflow.fail(id, e);
        }
    }

    /// Limits the state the continuous queries hold to `bytes` (None: no limit, the
    /// default), as `SET memory_limit` does: when their accounted state reaches it, the query
    /// holding the most fails with an error naming it and the operator holding its state
    /// (see [`memory`]). Tables and the process itself come on top of the limit.
    pub fn set_memory_limit(&mut self, bytes: Option<usize>) {
        self.memory.set(bytes);
        self.enforce_memory_limit();
    }

    /// The memory limit on the continuous queries' state, if any.
    pub fn memory_limit(&self) -> Option<usize> {
        self.memory.limit()
    }

    /// Takes in an arrival at a stream: admits it (late and bad rows under the stream's
    /// policies), hands what it admitted to the queries reading the stream and its companions,
    /// and evaluates what became complete. A record a policy refused is the error returned.
    fn ingest(&mut self, name: &str, a: Arrival) -> Result<()> {
        self.log_arrival(name, &a)?;
        let admitted = self.intake.admit(name, a)?;
        if let Some(t) = admitted.max_time {
            self.clock = self.clock.max(t);
        }
        for (stream, batch) in admitted.forward {
            self.dataflow.forward(&stream, batch)?;
        }
        self.run_queries();
        admitted.fatal.map_or(Ok(()), Err)
    }

    /// Appends a batch of elements to a stream. The batch must have the stream's columns;
    /// timestamps come from its event-time column. Late elements (below the watermark) go to
    /// `s$late` and rows without an event time to `s$errors`, unless the stream's policy makes
    /// them errors: then the whole batch is refused.
    pub fn push(&mut self, stream: &str, batch: RecordBatch) -> Result<()> {
        self.push_from(stream, batch, "push")
    }

    fn push_from(&mut self, stream: &str, batch: RecordBatch, origin: &str) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        let schema = self.intake.writable(&name, stream)?.def.input_schema();
        let arrival = crate::intake::batch_arrival(&name, &schema, batch, origin)?;
        let taken = self.ingest(&name, arrival);
        self.after_logged()?;
        taken
    }

    /// Appends rows given as values, one `Vec` per row in the stream's column order. Values are
    /// converted to the column types (e.g. `Utf8("2024-01-01 00:00:01")` to a TIMESTAMP); a
    /// row whose values do not fit is a bad row, under the stream's policy.
    pub fn push_rows(
        &mut self,
        stream: &str,
        rows: &[Vec<datafusion_common::ScalarValue>],
    ) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        let schema = self.intake.writable(&name, stream)?.def.input_schema();
        let arrival = crate::intake::values_arrival(&schema, rows)?;
        let taken = self.ingest(&name, arrival);
        self.after_logged()?;
        taken
    }

    /// Heartbeat: instant `t` of `stream` is complete (its watermark moves past `t`) and is an
    /// instant of every query reading it. Watermarks never move back: a heartbeat at or below
    /// what is already complete changes nothing. The largest instant cannot be completed this
    /// way (nothing, not even a late element, could be stamped after it): `CLOSE` ends a stream.
    pub fn advance(&mut self, stream: &str, t: Time) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        if self.intake.writable(&name, stream)?.def.stamped_on_arrival() {
            return Err(WeirError::exec(format!(
                "'{name}' is stamped on arrival (PROCTIME()): its time follows the processing \
                 clock, not ADVANCE"
            )));
        }
        if t == Time::MAX {
            return Err(WeirError::exec(format!(
                "cannot ADVANCE '{name}' to {t}, the largest instant: CLOSE {name} ends the stream"
            )));
        }
        self.log_time(Some(&name), Some(t))?;
        self.intake.advance(&name, t)?;
        self.clock = self.clock.max(t);
        self.dataflow.heartbeat(&name, t);
        self.run_queries();
        self.after_logged()
    }

    /// End of input: the stream's watermark becomes +∞, so every pending instant is evaluated.
    pub fn close(&mut self, stream: &str) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        self.log_time(Some(&name), None)?;
        self.intake.close(&name, stream)?;
        self.run_queries();
        self.after_logged()
    }

    /// Closes every stream.
    pub fn close_all(&mut self) -> Result<()> {
        self.log_time(None, None)?;
        self.intake.close_all();
        self.run_queries();
        self.after_logged()
    }

    /// The current watermark of a stream: every instant below it is complete
    /// ([`weir_common::WATERMARK_CLOSED`] once the stream is closed).
    pub fn watermark(&self, stream: &str) -> Option<Watermark> {
        self.intake.watermark(&stream.to_ascii_lowercase())
    }

    /// Statistics of every stream (companions are counted in their base's `late` and `bad`).
    pub fn stream_stats(&self) -> Vec<StreamStats> {
        self.intake.stats()
    }

    /// Declares or replaces a stream's policies (late and bad rows, idle timeout).
    pub fn set_stream_policy(&mut self, stream: &str, policy: StreamPolicy) -> Result<()> {
        self.intake.set_policy(&stream.to_ascii_lowercase(), stream, policy)
    }

    /// Attaches a source to a stream (replacing one not yet started). It starts reading when
    /// a query reads the stream; see [`Engine::poll_sources`].
    pub fn set_source(&mut self, stream: &str, spec: SourceSpec) -> Result<()> {
        self.check_confined(&format!("stream '{stream}'"), "read", &spec.input, None)?;
        self.intake.set_source(&stream.to_ascii_lowercase(), stream, spec)
    }

    /// How far each stream's source has read.
    pub fn source_progress(&self) -> Vec<SourceProgress> {
        sources::progress(&self.intake)
    }

    /// Relative source paths are read from `dir` (default: the working directory).
    pub fn set_base_dir(&mut self, dir: impl Into<std::path::PathBuf>) {
        self.base_dir = dir.into();
    }

    /// No sink may write `path`; `what` says what it is in the refusal (e.g. "the script
    /// being run"). Sinks already refuse each other's files and their streams' sources.
    pub fn protect_path(&mut self, path: impl AsRef<std::path::Path>, what: &str) {
        self.protected.push((ddl::absolute(path.as_ref()), what.to_string()));
    }

    /// Confines sources and sinks to `dir` (a server's data for its clients): a stream may
    /// read and a sink write only files inside it, symbolic links resolved, and no stream
    /// reads standard input; relative paths are then read from `dir`. Streams and sinks that
    /// exist already are not checked.
    pub fn confine_paths(&mut self, dir: impl AsRef<std::path::Path>) -> Result<()> {
        let dir = dir.as_ref();
        let real = dir.canonicalize().map_err(|e| {
            WeirError::exec(format!("cannot confine files to '{}': {e}", dir.display()))
        })?;
        self.base_dir = real.clone();
        self.confined = Some(real);
        Ok(())
    }

    /// Idle timeouts and `PROCTIME()` stamps then follow [`Engine::advance_processing_time`]
    /// instead of the wall clock (for tests and simulations); the manual clock starts at the
    /// Unix epoch, 1970-01-01 00:00:00.
    pub fn use_manual_processing_time(&mut self) {
        self.intake.use_manual_processing_time();
    }

    /// Moves the manual processing clock forward (see [`Engine::use_manual_processing_time`]);
    /// streams past their idle timeout become idle and the queries they held back go on, and
    /// streams stamped on arrival complete every instant before the new time.
    pub fn advance_processing_time(&mut self, by: WallDuration) {
        self.intake.advance_processing_time(by);
        self.run_queries();
    }

    /// The sinks and maintained views whose query failed, each named (`sink 'k'`, `view
    /// 'v'`) with its error. A failed one keeps what it wrote (a sink its file, a view its
    /// last contents) and stays failed across recovery; `SHOW SINKS` says so too.
    pub fn failures(&self) -> Vec<(String, WeirError)> {
        let sinks = self
            .sinks
            .iter()
            .filter_map(|(name, k)| k.lock().failed.clone().map(|e| (format!("sink '{name}'"), e)));
        let views = self
            .tables
            .views()
            .filter_map(|(name, v)| v.lock().failed.clone().map(|e| (format!("view '{name}'"), e)));
        sinks.chain(views).collect()
    }

    /// Every stream (with its companions `s$late` and `s$errors` right after it), table, view
    /// and sink, in name order within each kind, with its columns: what a REPL completes and
    /// `SHOW` lists.
    pub fn catalog(&self) -> Vec<CatalogObject> {
        let columns = |schema: &SchemaRef| -> Vec<(String, DataType)> {
            schema.fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect()
        };
        let object =
            |name: &str, kind, companion_of: Option<&str>, details, schema| CatalogObject {
                name: name.to_string(),
                kind,
                companion_of: companion_of.map(str::to_string),
                details,
                columns: columns(schema),
            };
        let mut out = Vec::new();
        for s in self.catalog.base_streams() {
            let wm = s.schema.field(s.time_column).name();
            let accepted = self.intake.get(&s.name).map_or(0, |st| st.accepted);
            let details = format!("event time {wm}, {accepted} element(s)");
            out.push(object(&s.name, ObjectKind::Stream, None, details, &s.schema));
            for (suffix, what) in [
                (crate::intake::LATE_SUFFIX, "late elements"),
                (crate::intake::ERRORS_SUFFIX, "unreadable rows"),
            ] {
                let Some(c) = self.catalog.stream(&format!("{}{suffix}", s.name)) else {
                    continue;
                };
                let details = format!("{what} of {}", s.name);
                out.push(object(&c.name, ObjectKind::Stream, Some(&s.name), details, &c.schema));
            }
        }
        for t in self.catalog.tables() {
            let rows = self.tables.table(&t.name).map_or(0, |t| t.contents.len());
            out.push(object(&t.name, ObjectKind::Table, None, format!("{rows} row(s)"), &t.schema));
        }
        for v in self.catalog.views() {
            let details = v.def.kind().to_string();
            out.push(object(&v.def.name, ObjectKind::View, None, details, &v.def.schema));
        }
        for name in self.catalog.sinks() {
            let details = self.sinks.get(name).map(|s| sink_details(&s.lock())).unwrap_or_default();
            out.push(CatalogObject {
                name: name.clone(),
                kind: ObjectKind::Sink,
                companion_of: None,
                details,
                columns: Vec::new(),
            });
        }
        out
    }
}

/// What `SHOW SINKS` says of a sink: its file, format, size and failure.
fn sink_details(k: &SinkFile) -> String {
    let format = match k.file.spec.format {
        crate::sink::SinkFormat::Csv => "csv",
        crate::sink::SinkFormat::JsonLines => "jsonl",
        crate::sink::SinkFormat::Parquet => "parquet",
    };
    let mut details = format!("{} ({format}), {} bytes", k.file.spec.path, k.file.written());
    if let Some(e) = &k.failed {
        details += &format!(", failed: {e}");
    }
    details
}

/// Whether a subscription's text is a bare view or stream name rather than a query.
fn is_bare_name(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

/// Plans `sql`, which must be exactly one query, against `catalog` under `options` (the
/// engine's continuous queries, and a recipe on another process of a cluster).
pub(super) fn plan_query_text(
    catalog: &dyn weir_sql::Catalog,
    options: weir_sql::BindOptions,
    sql: &str,
) -> Result<Arc<LogicalPlan>> {
    let mut stmts = parse_script(sql)?;
    match (stmts.len(), stmts.pop().map(|s| s.statement)) {
        (1, Some(Statement::Query(q))) => {
            bind_query_with(catalog, options, &q).map_err(|e| e.with_source(sql))
        }
        _ => Err(WeirError::plan("expected exactly one query")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One query and one event through the parts: the catalog lists the stream, the intake
    /// admits the element, the dataflow delivers its result.
    #[test]
    fn one_query_and_one_event_through_the_parts() {
        let mut e = Engine::new();
        e.execute("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)").unwrap();
        let sub = e.subscribe("SELECT ISTREAM k, COUNT(*) FROM s [RANGE 2] GROUP BY k").unwrap();
        e.execute("INSERT INTO s VALUES ('a', 1), ('a', 2), ('b', 3), ('a', 5); CLOSE s").unwrap();
        let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
        assert_eq!(got, ["@1 a 1", "@2 a 2", "@3 a 1", "@3 b 1", "@5 a 1"]);
        let names: Vec<(String, Option<String>)> =
            e.catalog().into_iter().map(|o| (o.name, o.companion_of)).collect();
        assert_eq!(
            names,
            [
                ("s".to_string(), None),
                ("s$late".to_string(), Some("s".to_string())),
                ("s$errors".to_string(), Some("s".to_string())),
            ]
        );
        assert_eq!(e.stream_stats()[0].accepted, 4);
    }

    /// Confined to a directory, streams read and sinks write only inside it: not through
    /// `..`, an absolute path, a glob rooted elsewhere or a symbolic link that points out;
    /// standard input is refused.
    #[test]
    fn confined_paths_stay_inside_their_directory() {
        let root = std::env::temp_dir().join(format!("weir-confine-{}", std::process::id()));
        let dir = root.join("data");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("in.csv"), "1,1\n").unwrap();
        std::fs::write(root.join("secret.csv"), "1,1\n").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(root.join("secret.csv"), dir.join("link.csv")).unwrap();
        let mut e = Engine::new();
        e.confine_paths(&dir).unwrap();
        let stream = |e: &mut Engine, n: usize, path: &str| {
            e.execute(&format!(
                "CREATE STREAM s{n} (a BIGINT, t BIGINT, WATERMARK FOR t AS t) \
                 WITH (source = 'file', path = '{path}')"
            ))
            .map(|_| ())
        };
        stream(&mut e, 1, "in.csv").unwrap();
        stream(&mut e, 2, "sub/*.csv").unwrap();
        let outside = root.join("secret.csv").display().to_string();
        for (n, bad) in [(3, "../secret.csv"), (4, outside.as_str()), (5, "../*.csv")] {
            let err = stream(&mut e, n, bad).unwrap_err().to_string();
            assert!(err.contains("files are confined to"), "{bad}: {err}");
        }
        #[cfg(unix)]
        assert!(stream(&mut e, 6, "link.csv").is_err());
        let stdin = e
            .execute("CREATE STREAM s7 (a BIGINT, t BIGINT, WATERMARK FOR t AS t) WITH (source = 'stdin')")
            .unwrap_err();
        assert!(stdin.to_string().contains("cannot read standard input"), "{stdin}");
        e.execute("CREATE SINK k1 WITH (path = 'out.csv') AS SELECT a FROM s1").unwrap();
        let sink = e.execute("CREATE SINK k2 WITH (path = '../out.csv') AS SELECT a FROM s1");
        assert!(sink.unwrap_err().to_string().contains("sink 'k2' cannot write '../out.csv'"));
        // Tables loaded from files and COPY are confined the same way.
        e.execute("CREATE TABLE t1 (a BIGINT, b BIGINT) WITH (source = 'file', path = 'in.csv', header = false); COPY t1 FROM 'in.csv'").unwrap();
        for sql in [
            "CREATE TABLE t2 (a BIGINT, b BIGINT) WITH (source = 'file', path = '../secret.csv')"
                .to_string(),
            format!("COPY t1 FROM '{outside}'"),
            "COPY s1 FROM '../secret.csv'".to_string(),
        ] {
            let err = e.execute(&sql).unwrap_err().to_string();
            assert!(err.contains("files are confined to"), "{sql}: {err}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Subscribing to a maintained view by name gives the view's own contents, then its
    /// changes: the same numbers as one-shot queries over it, not a fresh run of its
    /// definition over the elements that arrive from now on.
    #[test]
    fn a_view_subscription_starts_from_the_views_contents() {
        let mut e = Engine::new();
        e.execute(
            "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t); \
             CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k; \
             INSERT INTO s VALUES ('a', 1), ('a', 2), ('b', 3), ('a', 4)",
        )
        .unwrap();
        let sub = e.subscribe("c").unwrap();
        e.execute("INSERT INTO s VALUES ('b', 5); CLOSE s").unwrap();
        let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
        // Instants 1..3 were complete (a: 2, b: 1, last changed at 3); then 4 and 5.
        assert_eq!(
            got,
            ["@3 +1 a 2", "@3 +1 b 1", "@4 -1 a 2", "@4 +1 a 3", "@5 -1 b 1", "@5 +1 b 2"]
        );
        // Its view reads only a closed stream: nothing more can come.
        assert!(e.is_complete(sub.id));
        let id = sub.id;
        drop(sub);
        e.unsubscribe(id);
        // The view goes on.
        assert_eq!(e.running_queries(), 1);
    }
}
