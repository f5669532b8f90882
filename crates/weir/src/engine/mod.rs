//! The engine: catalog, stream and table state, running queries, statements.
//!
//! Time: each stream has a watermark W (no element below W will still arrive). `WATERMARK FOR
//! ts AS ts - d` sets W = (largest timestamp seen) − d; `ADVANCE s TO τ` completes instant τ
//! (W ≥ τ+1) and makes τ an instant of every query reading `s`; `CLOSE s` sets W = +∞. Tables
//! never hold queries back: a change to a table happens at its `AT τ` instant (or the engine's
//! clock, the largest instant seen so far) and, for a query that already evaluated past it, at
//! that query's next instant. A query's frontier is the minimum of its streams' watermarks
//! (idle streams left out); the engine evaluates every query up to its frontier after each
//! statement, push or source read.
//!
//! Input: `push`, `INSERT` and sources (`poll_sources`) all end in `ingest`, which applies the
//! stream's late and bad-row policies (see [`crate::ingest`]). Output: each running query feeds
//! a subscriber, a maintained view or a file sink ([`crate::sink`]). Checkpoints and recovery
//! are in the `recovery` submodule.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Duration as WallDuration;

use arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir_common::time::format_time;
use weir_common::{
    ChangeBatch, Result, Time, TimeDomain, Watermark, WeirError, WATERMARK_CLOSED, WATERMARK_MIN,
};
use weir_exec::query::evaluate_once;
use weir_exec::row::{RowBytes, RowCodec};
use weir_exec::QueryRunner;
use weir_plan::{explain, LogicalPlan, PlanKind};
use weir_sql::parser::{ObjectKind, ParsedStatement, Statement, TimeLit};
use weir_sql::types::arrow_type;
use weir_sql::{
    bind_query, parse_script, Catalog, CatalogEntry, CqlQuery, StreamDef, TableDef, ViewDef,
};

mod buffered;
mod recovery;

use buffered::Buffered;
pub use recovery::Recovery;

use crate::ingest::{
    bad_row_message, clamp, errors_batch, errors_def, is_or_companion_of, late_batch, late_def,
    parse_options, BadRowPolicy, LatePolicy, StreamPolicy, StreamStats, ERRORS_SUFFIX, LATE_SUFFIX,
};
use crate::sink::{FileSink, SinkFormat, SinkSpec};
use crate::source::{BadRow, Polled, SourceProgress, SourceReader, SourceSpec};
use crate::subscription::Subscription;

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

#[derive(Debug)]
struct StreamState {
    def: StreamDef,
    watermark: Watermark,
    max_seen: Option<Time>,
    closed: bool,
    accepted: u64,
    /// For a companion (`s$late`, `s$errors`): `s`. A companion's watermark is its base's.
    companion_of: Option<String>,
    policy: StreamPolicy,
    late: u64,
    bad: u64,
    /// Processing time of the last element or heartbeat, for the idle timeout.
    last_activity: WallDuration,
    idle: bool,
    /// Accepted elements by time, not yet released to every query reading the stream.
    buffered: Buffered,
    source: Option<SourceState>,
}

impl StreamState {
    fn new(def: StreamDef, policy: StreamPolicy, now: WallDuration) -> Self {
        StreamState {
            def,
            watermark: WATERMARK_MIN,
            max_seen: None,
            closed: false,
            accepted: 0,
            companion_of: None,
            policy,
            late: 0,
            bad: 0,
            last_activity: now,
            idle: false,
            buffered: Buffered::default(),
            source: None,
        }
    }
}

/// A stream's source and whether it failed.
#[derive(Debug)]
struct SourceState {
    reader: SourceReader,
    failed: Option<String>,
}

/// Processing (wall-clock) time, for idle timeouts. Tests use a manual clock.
#[derive(Debug)]
enum ProcessingClock {
    System(std::time::Instant),
    Manual(WallDuration),
}

impl Default for ProcessingClock {
    fn default() -> Self {
        ProcessingClock::System(std::time::Instant::now())
    }
}

impl ProcessingClock {
    fn now(&self) -> WallDuration {
        match self {
            ProcessingClock::System(start) => start.elapsed(),
            ProcessingClock::Manual(t) => *t,
        }
    }
}

/// Rows of one arrival at a stream: pushed, inserted, or read by its source.
struct Arrival {
    data: RecordBatch,
    /// For each row of `data`, its record number in the arrival (rows and bad records share
    /// one numbering, so a policy can stop at the first offending record).
    rows_from: Vec<usize>,
    /// Records that could not be read.
    bad: Vec<(usize, BadRow)>,
    /// `push`, `INSERT`, or the file the records came from.
    origin: String,
    /// The line of each record (sources), for messages; otherwise record i is row i+1.
    lines: Option<Vec<u64>>,
    /// Whether the records before an offending one are accepted (sources) or the whole
    /// arrival is refused (push, INSERT).
    partial: bool,
}

/// What [`Engine::poll_sources`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourcePoll {
    /// Records read in this call.
    pub records: usize,
    /// Bytes read in this call.
    pub bytes: u64,
    /// Sources still reading (a followed file or stdin may produce more later).
    pub live: usize,
    /// Sources not started yet: no query reads their stream.
    pub waiting: usize,
}

impl SourcePoll {
    /// Whether the call read nothing and decoded nothing: every source waits for more input or
    /// has ended. (A call can decode without reading: the last line of a followed file, once a
    /// newer file appears.)
    pub fn idle(&self) -> bool {
        self.bytes == 0 && self.records == 0
    }
}

/// A relation's current contents: encoded rows with their multiplicities.
#[derive(Debug)]
struct Contents {
    codec: RowCodec,
    rows: BTreeMap<RowBytes, i64>,
}

impl Contents {
    fn new(schema: &SchemaRef) -> Result<Self> {
        Ok(Contents { codec: RowCodec::for_schema(schema)?, rows: BTreeMap::new() })
    }

    /// Adds the changes' diffs; rows whose multiplicity reaches zero leave.
    fn apply(&mut self, changes: &ChangeBatch) -> Result<()> {
        let rows = self.codec.encode(changes.data.columns(), changes.len())?;
        for (i, d) in changes.diffs.iter().enumerate() {
            let key: RowBytes = rows.get(i).into();
            let n = self.rows.entry(key.clone()).or_insert(0);
            *n += d;
            if *n <= 0 {
                self.rows.remove(&key);
            }
        }
        Ok(())
    }

    /// The contents as inserts at `at`.
    fn snapshot(&self, schema: &SchemaRef, at: Time) -> Result<ChangeBatch> {
        let data = self.codec.decode_batch(schema, self.rows.keys().map(|k| &k[..]))?;
        let diffs: Vec<i64> = self.rows.values().copied().collect();
        Ok(ChangeBatch::new(data, vec![at; diffs.len()], diffs))
    }
}

#[derive(Debug)]
struct TableState {
    def: TableDef,
    contents: Contents,
}

/// Where a running query's output goes.
#[derive(Debug)]
enum Sink {
    /// A subscriber's channel.
    Subscriber(Sender<Result<ChangeBatch>>),
    /// The maintained contents of a relation view, for one-shot queries over it.
    View(String),
    /// A file sink, by name.
    File(String),
    /// A subscriber's query restored from a checkpoint, waiting for [`Engine::resume`]: it
    /// buffers its input and is not evaluated until then.
    Parked,
}

/// A sink: its query's output appended to a file.
#[derive(Debug)]
struct SinkState {
    deps: Vec<String>,
    file: FileSink,
    /// Set if the query or a write failed; the sink then stops.
    failed: Option<WeirError>,
}

#[derive(Debug)]
struct RunningQuery {
    id: u64,
    runner: QueryRunner,
    sink: Sink,
    plan: Arc<LogicalPlan>,
    /// A subscriber's query text, by which it is resumed after recovery.
    sql: Option<String>,
}

/// The current relation of a view over streams, maintained as its query runs.
#[derive(Debug)]
struct ViewContents {
    contents: Contents,
    /// Set if the view's query failed; one-shot queries over it then report this.
    failed: Option<WeirError>,
}

#[derive(Debug)]
struct View {
    def: ViewDef,
    deps: Vec<String>,
    contents: Option<ViewContents>,
}

/// An embedded Weir instance. See the crate docs.
#[derive(Debug, Default)]
pub struct Engine {
    streams: BTreeMap<String, StreamState>,
    tables: BTreeMap<String, TableState>,
    views: BTreeMap<String, View>,
    sinks: BTreeMap<String, SinkState>,
    queries: Vec<RunningQuery>,
    next_id: u64,
    /// The largest instant seen (element, heartbeat or table change); table changes without
    /// `AT` happen here.
    clock: Time,
    processing: ProcessingClock,
    /// The CREATE statements of the objects that exist, in order: the catalog of a checkpoint.
    ddl: Vec<(String, String)>,
    /// Checkpoints: where, how often, the last one's sequence number and processing time.
    data_dir: Option<std::path::PathBuf>,
    checkpoint_interval: Option<WallDuration>,
    checkpoint_sequence: u64,
    last_checkpoint: WallDuration,
    /// During recovery: each sink's committed position, to reopen its file at.
    resume_sinks: HashMap<String, u64>,
    /// Relative source paths are read from here (empty: the working directory).
    base_dir: std::path::PathBuf,
}

/// The binder's view of the engine's catalog. For one-shot queries, maintained views appear as
/// tables holding their current contents.
struct CatalogView<'a>(&'a Engine, bool);

impl Catalog for CatalogView<'_> {
    fn lookup(&self, name: &str) -> Option<CatalogEntry> {
        let e = self.0;
        if self.1 {
            if let Some(v) = e.views.get(name).filter(|v| v.contents.is_some()) {
                let def = TableDef { name: name.to_string(), schema: v.def.schema.clone() };
                return Some(CatalogEntry::Table(def));
            }
        }
        if let Some(s) = e.streams.get(name) {
            return Some(CatalogEntry::Stream(s.def.clone()));
        }
        if let Some(t) = e.tables.get(name) {
            return Some(CatalogEntry::Table(t.def.clone()));
        }
        e.views.get(name).map(|v| CatalogEntry::View(v.def.clone()))
    }
}

fn exec_err(msg: impl Into<String>) -> WeirError {
    WeirError::Execution(msg.into())
}

impl Engine {
    pub fn new() -> Self {
        Engine::default()
    }

    /// Executes a script of `;`-separated statements, in order, stopping at the first error.
    /// Errors in SQL text render with the line and a caret.
    pub fn execute(&mut self, sql: &str) -> Result<Vec<ExecResult>> {
        let stmts = parse_script(sql)?;
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            out.push(self.execute_parsed(s).map_err(|e| e.with_source(sql))?);
        }
        Ok(out)
    }

    /// Starts a continuous query (or subscribes to a view or stream given by name).
    pub fn subscribe(&mut self, query_or_name: &str) -> Result<Subscription> {
        let trimmed = query_or_name.trim().trim_end_matches(';').trim();
        let plan = self.subscription_plan(trimmed)?;
        self.start_query(plan, Some(trimmed.to_string()))
    }

    /// The plan of a query, or of `SELECT * FROM name` for a view or stream's name.
    fn subscription_plan(&self, text: &str) -> Result<Arc<LogicalPlan>> {
        if !text.is_empty() && text.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            let name = text.to_ascii_lowercase();
            return match self.views.get(&name) {
                Some(v) => Ok(v.def.plan.clone()),
                None => self.plan_text(&format!("SELECT * FROM {text}")),
            };
        }
        self.plan_text(text)
    }

    fn plan_text(&self, sql: &str) -> Result<Arc<LogicalPlan>> {
        let mut stmts = parse_script(sql)?;
        match (stmts.len(), stmts.pop().map(|s| s.statement)) {
            (1, Some(Statement::Query(q))) => self.bind(&q).map_err(|e| e.with_source(sql)),
            _ => Err(WeirError::plan("expected exactly one query")),
        }
    }

    fn bind(&self, q: &CqlQuery) -> Result<Arc<LogicalPlan>> {
        bind_query(&CatalogView(self, false), q)
    }

    /// Whether a query is continuous: it has a relation-to-stream operator, or names a stream
    /// (base or derived) directly. Otherwise it is one-shot: it reads tables and views and
    /// returns their current relation.
    fn is_continuous(&self, q: &CqlQuery) -> bool {
        q.r2s.is_some()
            || !q.windows.is_empty()
            || referenced_names(q).iter().any(|n| {
                self.streams.contains_key(n)
                    || self.views.get(n).is_some_and(|v| v.def.kind() == PlanKind::Stream)
            })
    }

    fn execute_parsed(&mut self, p: ParsedStatement) -> Result<ExecResult> {
        let text = p.text.clone();
        // The catalog as the CREATE statements of what exists, in order (for checkpoints): a
        // new object's statement is appended, a replaced view's moves to the end, a dropped
        // object's goes.
        let (created, replaces, dropped) = match &p.statement {
            Statement::CreateStream { name, .. }
            | Statement::CreateTable { name, .. }
            | Statement::CreateSink { name, .. } => (Some(name.clone()), false, None),
            Statement::CreateView { name, or_replace, .. } => {
                (Some(name.clone()), *or_replace, None)
            }
            Statement::Drop { name, .. } => (None, false, Some(name.clone())),
            _ => (None, false, None),
        };
        let existed = created.as_deref().is_some_and(|n| self.exists(n));
        let result = self.execute_statement(p, &text)?;
        if let Some(name) = created.filter(|_| !existed || replaces) {
            self.ddl.retain(|(n, _)| *n != name);
            self.ddl.push((name, text));
        }
        if let Some(name) = dropped {
            if !self.exists(&name) {
                self.ddl.retain(|(n, _)| *n != name);
            }
        }
        Ok(result)
    }

    fn execute_statement(&mut self, p: ParsedStatement, text: &str) -> Result<ExecResult> {
        match p.statement {
            Statement::CreateStream { name, columns, watermark, options, if_not_exists, span } => {
                if self.exists(&name) {
                    if if_not_exists {
                        return Ok(ExecResult::Done("CREATE STREAM".into()));
                    }
                    return Err(WeirError::plan_at(format!("'{name}' already exists"), span));
                }
                let Some(wm) = watermark else {
                    return Err(WeirError::plan_at(
                        format!(
                            "stream '{name}' needs an event-time column: add \
                             WATERMARK FOR <column> [AS <column> - <delay>]"
                        ),
                        span,
                    ));
                };
                let mut fields = Vec::new();
                for c in &columns {
                    fields.push(Field::new(&c.name, arrow_type(&c.data_type, c.span)?, true));
                }
                let schema = Arc::new(Schema::new(fields));
                let time_column = schema.index_of(&wm.column).map_err(|_| {
                    WeirError::plan_at(
                        format!("WATERMARK FOR names unknown column '{}'", wm.column),
                        wm.span,
                    )
                })?;
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
                let delay = match (wm.delay, domain) {
                    (None, _) => 0,
                    (Some(weir_sql::parser::Duration::Ticks(d)), TimeDomain::Ticks)
                    | (Some(weir_sql::parser::Duration::Micros(d)), TimeDomain::Micros) => d,
                    (Some(_), TimeDomain::Ticks) => {
                        return Err(WeirError::plan_at(
                            "the watermark delay of an integer-tick stream is a bare integer",
                            wm.span,
                        ))
                    }
                    (Some(_), TimeDomain::Micros) => {
                        return Err(WeirError::plan_at(
                            "the watermark delay of a TIMESTAMP stream needs a unit (e.g. INTERVAL '5' SECOND)",
                            wm.span,
                        ))
                    }
                };
                if delay < 0 {
                    return Err(WeirError::plan_at(
                        "the watermark delay must not be negative",
                        wm.span,
                    ));
                }
                if name.contains('$') {
                    return Err(WeirError::plan_at(
                        format!("'{name}': '$' is reserved for s$late and s$errors"),
                        span,
                    ));
                }
                let def = StreamDef { name, schema, time_column, domain, watermark_delay: delay };
                let (policy, source) = parse_options(&def, &options)?;
                self.add_stream(def, policy, source)?;
                Ok(ExecResult::Done("CREATE STREAM".into()))
            }
            Statement::CreateTable { name, columns, if_not_exists, span } => {
                if self.exists(&name) {
                    if if_not_exists {
                        return Ok(ExecResult::Done("CREATE TABLE".into()));
                    }
                    return Err(WeirError::plan_at(format!("'{name}' already exists"), span));
                }
                let mut fields = Vec::new();
                for c in &columns {
                    fields.push(Field::new(&c.name, arrow_type(&c.data_type, c.span)?, true));
                }
                let schema: SchemaRef = Arc::new(Schema::new(fields));
                let contents = Contents::new(&schema)?;
                self.tables
                    .insert(name.clone(), TableState { def: TableDef { name, schema }, contents });
                Ok(ExecResult::Done("CREATE TABLE".into()))
            }
            Statement::CreateView { name, query, sql, or_replace, span } => {
                if self.exists(&name) && !(or_replace && self.views.contains_key(&name)) {
                    return Err(WeirError::plan_at(format!("'{name}' already exists"), span));
                }
                let plan = self.bind(&query)?;
                let schema = weir_exec::compile::exec_schema(&plan.schema());
                let deps = referenced_names(&query);
                if deps.contains(&name) {
                    return Err(WeirError::plan_at(
                        format!("view '{name}' refers to itself"),
                        span,
                    ));
                }
                let reads_stream = plan.sources().iter().any(|s| self.streams.contains_key(s));
                let maintain = plan.kind() == PlanKind::Relation && reads_stream;
                let contents = if maintain {
                    Some(ViewContents { contents: Contents::new(&schema)?, failed: None })
                } else {
                    None
                };
                let def = ViewDef { name: name.clone(), sql, plan: plan.clone(), schema };
                self.views.insert(name.clone(), View { def, deps, contents });
                if maintain {
                    self.launch(&plan, Sink::View(name), None)?;
                }
                Ok(ExecResult::Done("CREATE VIEW".into()))
            }
            Statement::CreateSink { name, options, query, span, .. } => {
                if self.exists(&name) {
                    return Err(WeirError::plan_at(format!("'{name}' already exists"), span));
                }
                let spec = SinkSpec::from_options(&options, span)?;
                let plan = self.bind(&query)?;
                let schema = weir_exec::compile::exec_schema(&plan.schema());
                let domain = plan.time_domain().unwrap_or(TimeDomain::Ticks);
                let file_path = self.base_dir.join(&spec.path);
                let resume_at = self.sink_resume_position(&name);
                let file =
                    FileSink::open(spec, file_path, &schema, plan.kind(), domain, resume_at)?;
                let deps = referenced_names(&query);
                self.sinks.insert(name.clone(), SinkState { deps, file, failed: None });
                if let Err(e) = self.launch(&plan, Sink::File(name.clone()), None) {
                    self.sinks.remove(&name);
                    return Err(e);
                }
                Ok(ExecResult::Done("CREATE SINK".into()))
            }
            Statement::Drop { kind, name, if_exists, span } => {
                self.drop(kind, &name, if_exists, span)
            }
            Statement::Show(kind) => Ok(self.show(kind)),
            Statement::Checkpoint => {
                let n = self.checkpoint()?;
                Ok(ExecResult::Done(format!("CHECKPOINT {n}")))
            }
            Statement::ShowStreamStats => self.show_stream_stats(),
            Statement::CreateIndex { table, span } => {
                if !self.tables.contains_key(&table) {
                    return Err(WeirError::plan_at(format!("unknown table '{table}'"), span));
                }
                Ok(ExecResult::Done("CREATE INDEX".into()))
            }
            Statement::Describe { name, span } => self.describe(&name, span),
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
            Statement::Explain(q) => Ok(ExecResult::Explain(explain(self.bind(&q)?.as_ref()))),
            Statement::Query(q) => {
                if self.is_continuous(&q) {
                    let plan = self.bind(&q)?;
                    let sql = text.trim().trim_end_matches(';').trim().to_string();
                    Ok(ExecResult::Subscribed(self.start_query(plan, Some(sql))?))
                } else {
                    let plan = bind_query(&CatalogView(self, true), &q)?;
                    self.one_shot(&plan)
                }
            }
        }
    }

    /// Registers a stream with its companions `s$late` and `s$errors`.
    fn add_stream(
        &mut self,
        def: StreamDef,
        policy: StreamPolicy,
        source: Option<SourceSpec>,
    ) -> Result<()> {
        let late = late_def(&def)?;
        let errors = errors_def(&def);
        for c in [&late.name, &errors.name] {
            if self.exists(c) {
                return Err(WeirError::plan(format!("'{c}' already exists")));
            }
        }
        let now = self.processing.now();
        let name = def.name.clone();
        let mut st = StreamState::new(def, policy, now);
        if let Some(spec) = source {
            let reader = SourceReader::new(spec, st.def.schema.clone(), st.def.time_column)
                .map_err(WeirError::plan)?;
            st.source = Some(SourceState { reader, failed: None });
        }
        for c in [late, errors] {
            let mut cs = StreamState::new(c, StreamPolicy::default(), now);
            cs.companion_of = Some(name.clone());
            self.streams.insert(cs.def.name.clone(), cs);
        }
        self.streams.insert(name, st);
        Ok(())
    }

    fn exists(&self, name: &str) -> bool {
        self.streams.contains_key(name)
            || self.tables.contains_key(name)
            || self.views.contains_key(name)
            || self.sinks.contains_key(name)
    }

    /// Evaluates a plan over tables: the current relation.
    fn one_shot(&self, plan: &LogicalPlan) -> Result<ExecResult> {
        let batch = self.evaluate(plan)?;
        let expanded = expand(&batch)?;
        Ok(ExecResult::Rows { schema: expanded.schema(), batches: vec![expanded] })
    }

    fn evaluate(&self, plan: &LogicalPlan) -> Result<ChangeBatch> {
        self.evaluate_with(plan, false)
    }

    /// See [`evaluate_once`] for `as_produced`.
    fn evaluate_with(&self, plan: &LogicalPlan, as_produced: bool) -> Result<ChangeBatch> {
        let mut inputs = HashMap::new();
        for s in plan.sources() {
            let view = self.views.get(&s).and_then(|v| v.contents.as_ref().map(|c| (v, c)));
            match (self.tables.get(&s), view) {
                (Some(t), _) => {
                    inputs.insert(s.clone(), t.contents.snapshot(&t.def.schema, 0)?);
                }
                (None, Some((v, c))) => {
                    if let Some(e) = &c.failed {
                        return Err(exec_err(format!("view '{s}' failed: {e}")));
                    }
                    inputs.insert(s.clone(), c.contents.snapshot(&v.def.schema, 0)?);
                }
                (None, None) => {
                    return Err(exec_err(format!(
                        "'{s}' is a stream: a query over it is continuous, not one-shot"
                    )))
                }
            }
        }
        evaluate_once(plan, inputs, as_produced)
    }

    fn start_query(&mut self, plan: Arc<LogicalPlan>, sql: Option<String>) -> Result<Subscription> {
        let (tx, rx) = channel();
        let id = self.launch(&plan, Sink::Subscriber(tx), sql)?;
        Ok(subscription(id, &plan, rx))
    }

    /// Starts running a plan into a sink; returns the query's id.
    fn launch(&mut self, plan: &Arc<LogicalPlan>, sink: Sink, sql: Option<String>) -> Result<u64> {
        if plan.contains_apply() {
            return Err(WeirError::plan(
                "this correlated subquery cannot be turned into a join, which a continuous query \
                 needs; it works in one-shot queries over tables",
            ));
        }
        let mut runner = QueryRunner::new(plan)?;
        // A query over tables starts from their current contents.
        for s in plan.sources() {
            if let Some(t) = self.tables.get(&s) {
                if !t.contents.rows.is_empty() {
                    runner.push(&s, t.contents.snapshot(&t.def.schema, self.clock)?)?;
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.queries.push(RunningQuery { id, runner, sink, plan: plan.clone(), sql });
        self.run_queries();
        Ok(id)
    }

    /// Stops a continuous query.
    pub fn unsubscribe(&mut self, id: u64) {
        self.queries.retain(|q| q.id != id);
    }

    /// Number of running continuous queries.
    pub fn running_queries(&self) -> usize {
        self.queries.len()
    }

    /// Evaluates every query up to its frontier and delivers the output. A query whose
    /// subscriber went away is stopped; a query that fails reports the error and stops.
    ///
    /// A query's frontier is the minimum watermark of the streams it reads, leaving out idle
    /// ones (unless all are idle). An idle stream's watermark then rises to the largest
    /// frontier of the queries reading it: what those queries have evaluated is complete, so
    /// an element below it that arrives when the stream speaks again is late, like any other.
    fn run_queries(&mut self) {
        let now = self.processing.now();
        for st in self.streams.values_mut() {
            if let Some(timeout) = st.policy.idle_timeout {
                st.idle = !st.closed && now.saturating_sub(st.last_activity) >= timeout;
            }
        }
        // Watermark and idleness by name; a companion has its base stream's.
        let info: HashMap<String, (String, Watermark, bool)> = self
            .streams
            .iter()
            .map(|(n, s)| {
                let base = s.companion_of.clone().unwrap_or(n.clone());
                let b = self.streams.get(&base).unwrap_or(s);
                (n.clone(), (base, b.watermark, b.idle))
            })
            .collect();
        let frontiers: Vec<Watermark> = self
            .queries
            .iter()
            .map(|q| {
                let inputs: Vec<&(String, Watermark, bool)> =
                    q.runner.sources().iter().filter_map(|s| info.get(s)).collect();
                let active = inputs.iter().filter(|i| !i.2).map(|i| i.1).min();
                active.or(inputs.iter().map(|i| i.1).min()).unwrap_or(WATERMARK_CLOSED)
            })
            .collect();
        // Idle streams rise to the frontier of the queries reading them; buffered elements
        // below every reader's frontier are released.
        let mut released: HashMap<String, Watermark> = HashMap::new();
        for (q, &f) in self.queries.iter().zip(&frontiers) {
            for s in q.runner.sources() {
                if let Some((base, _, idle)) = info.get(s) {
                    if *idle {
                        if let Some(st) = self.streams.get_mut(base) {
                            st.watermark = st.watermark.max(f);
                        }
                    }
                    let r = released.entry(s.clone()).or_insert(f);
                    *r = (*r).min(f);
                }
            }
        }
        for (name, st) in self.streams.iter_mut() {
            match released.get(name) {
                Some(&f) if f < WATERMARK_CLOSED => {
                    st.buffered.release(clamp(f));
                }
                _ => st.buffered.clear(),
            }
        }
        let views = &mut self.views;
        let sinks = &mut self.sinks;
        let mut frontiers = frontiers.into_iter();
        self.queries.retain_mut(|q| {
            let frontier = frontiers.next().unwrap_or(WATERMARK_CLOSED);
            if matches!(q.sink, Sink::Parked) {
                return true;
            }
            // Output produced before a failure is still delivered, then the failure.
            let mut batches = Vec::new();
            let result = q.runner.advance(frontier, &mut batches);
            match &q.sink {
                Sink::Subscriber(tx) => {
                    let delivered = batches.into_iter().all(|b| tx.send(Ok(b)).is_ok());
                    match result {
                        Ok(()) => delivered,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            false
                        }
                    }
                }
                Sink::View(name) => {
                    let Some(c) = views.get_mut(name).and_then(|v| v.contents.as_mut()) else {
                        return false;
                    };
                    match batches.iter().try_for_each(|b| c.contents.apply(b)).and(result) {
                        Ok(()) => true,
                        Err(e) => {
                            c.failed = Some(e);
                            false
                        }
                    }
                }
                Sink::Parked => true,
                Sink::File(name) => {
                    let Some(sink) = sinks.get_mut(name) else {
                        return false;
                    };
                    match batches.iter().try_for_each(|b| sink.file.write(b)).and(result) {
                        Ok(()) => true,
                        Err(e) => {
                            sink.failed = Some(e);
                            false
                        }
                    }
                }
            }
        });
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
        let st = self.writable(&name, stream)?;
        let schema = st.def.schema.clone();
        if batch.num_columns() != schema.fields().len() {
            return Err(WeirError::Input(format!(
                "stream '{name}': expected {} columns, got {}",
                schema.fields().len(),
                batch.num_columns()
            )));
        }
        let mut cols = Vec::with_capacity(batch.num_columns());
        for (i, f) in schema.fields().iter().enumerate() {
            cols.push(cast_column(&name, f, batch.column(i))?);
        }
        let data = RecordBatch::try_new(schema.clone(), cols)?;
        let arrival = Arrival {
            rows_from: (0..data.num_rows()).collect(),
            data,
            bad: Vec::new(),
            origin: origin.to_string(),
            lines: None,
            partial: false,
        };
        self.ingest(&name, arrival)
    }

    /// The stream `name` if elements may be appended to it.
    fn writable(&self, name: &str, written: &str) -> Result<&StreamState> {
        let st = self
            .streams
            .get(name)
            .ok_or_else(|| exec_err(format!("unknown stream '{written}'")))?;
        if let Some(base) = &st.companion_of {
            return Err(exec_err(format!(
                "stream '{name}' is written by the engine from '{base}'; it cannot be appended to"
            )));
        }
        if st.closed {
            return Err(exec_err(format!("stream '{name}' is closed")));
        }
        Ok(st)
    }

    /// Takes in an arrival: sorts its rows into accepted, late and bad under the stream's
    /// policies, forwards each to the queries reading the stream or its companions, then
    /// moves the watermark and evaluates what became complete.
    fn ingest(&mut self, name: &str, a: Arrival) -> Result<()> {
        let a = match self.ingest_on_time(name, a)? {
            None => return Ok(()),
            Some(a) => a,
        };
        let st = self.streams.get(name).ok_or_else(|| WeirError::internal("stream vanished"))?;
        let def = st.def.clone();
        let policy = st.policy.clone();
        let w = st.watermark;
        let line_of = |record: usize| match &a.lines {
            Some(lines) => lines.get(record).copied().unwrap_or(0),
            None => record as u64 + 1,
        };
        let where_ = |record: usize| {
            if a.lines.is_some() {
                format!("source '{}' line {}", a.origin, line_of(record))
            } else {
                format!("row {}", line_of(record))
            }
        };
        // Rows without an event time are bad rows.
        let times = event_times(&def, &a.data)?;
        let mut bad = a.bad;
        let time_field = def.schema.field(def.time_column).name().clone();
        let texts = if times.iter().any(Option::is_none) {
            crate::format::rows_as_text(&a.data)?
        } else {
            Vec::new()
        };
        for (row, t) in times.iter().enumerate() {
            if t.is_none() {
                let record = a.rows_from[row];
                bad.push((
                    record,
                    BadRow {
                        line: line_of(record),
                        offset: 0,
                        field: time_field.clone(),
                        reason: "no event time".into(),
                        raw: texts.get(row).map(|r| r.join(", ")).unwrap_or_default(),
                    },
                ));
            }
        }
        bad.sort_by_key(|(i, _)| *i);
        // The first record a policy refuses, and why.
        let mut fatal: Option<(usize, WeirError)> = None;
        if policy.bad_rows == BadRowPolicy::Fail {
            if let Some((i, b)) = bad.first() {
                let origin = if a.lines.is_some() { a.origin.as_str() } else { "push" };
                fatal = Some((*i, WeirError::Input(bad_row_message(name, origin, b))));
            }
        }
        // Lateness is decided element by element in arrival order: each element is compared
        // with the watermark left by the elements before it, in this arrival or earlier ones,
        // so it does not depend on how arrivals were batched.
        let delay = def.watermark_delay as Watermark;
        let mut missed: Vec<Option<Watermark>> = vec![None; times.len()];
        let mut progress = w;
        for (row, t) in times.iter().enumerate() {
            if let Some(t) = *t {
                if (t as Watermark) < progress {
                    missed[row] = Some(progress);
                } else {
                    progress = progress.max(t as Watermark - delay);
                }
            }
        }
        if policy.late == LatePolicy::Error {
            let first_late = missed.iter().position(Option::is_some);
            if let Some(row) = first_late {
                let record = a.rows_from[row];
                if fatal.as_ref().is_none_or(|(i, _)| record < *i) {
                    let msg = format!(
                        "stream '{name}' {}: late element at {} is below the watermark {}",
                        where_(record),
                        format_time(times[row].unwrap_or_default(), def.domain),
                        format_watermark(missed[row].unwrap_or(w), def.domain),
                    );
                    fatal = Some((record, exec_err(msg)));
                }
            }
        }
        if !a.partial {
            if let Some((_, e)) = fatal {
                const NOTE: &str = "(nothing in this batch was accepted)";
                return Err(match e {
                    WeirError::Execution(m) => exec_err(format!("{m} {NOTE}")),
                    WeirError::Input(m) => WeirError::Input(format!("{m} {NOTE}")),
                    e => e,
                });
            }
        }
        let cut = fatal.as_ref().map_or(usize::MAX, |(record, _)| *record);
        let mut accepted_rows = Vec::new();
        let mut late_rows = Vec::new();
        for (row, t) in times.iter().enumerate() {
            if a.rows_from[row] >= cut {
                continue;
            }
            match (t, missed[row]) {
                (Some(_), Some(_)) => late_rows.push(row as u32),
                (Some(_), None) => accepted_rows.push(row as u32),
                (None, _) => {}
            }
        }
        bad.retain(|(i, _)| *i < cut);
        let take = |rows: &[u32]| -> Result<RecordBatch> {
            if rows.len() == a.data.num_rows() {
                return Ok(a.data.clone());
            }
            let idx = arrow::array::UInt32Array::from(rows.to_vec());
            Ok(arrow::compute::take_record_batch(&a.data, &idx)?)
        };
        let now = self.processing.now();
        if !late_rows.is_empty() {
            let late_name = format!("{name}{LATE_SUFFIX}");
            let stamps: Vec<Time> =
                late_rows.iter().map(|&r| clamp(missed[r as usize].unwrap_or(w))).collect();
            let late_def = self.streams.get(&late_name).map(|s| s.def.clone());
            if let Some(ld) = late_def {
                let batch = late_batch(&ld, &take(&late_rows)?, &stamps)?;
                let n = stamps.len();
                self.forward(&late_name, ChangeBatch::new(batch, stamps, vec![1; n]))?;
            }
        }
        let accepted_times: Vec<Time> =
            accepted_rows.iter().filter_map(|&r| times[r as usize]).collect();
        if !accepted_rows.is_empty() {
            let data = take(&accepted_rows)?;
            let batch =
                ChangeBatch::new(data, accepted_times.clone(), vec![1; accepted_rows.len()]);
            self.forward(name, batch)?;
        }
        self.note_accepted(name, &accepted_times)?;
        let st =
            self.streams.get_mut(name).ok_or_else(|| WeirError::internal("stream vanished"))?;
        st.late += late_rows.len() as u64;
        st.bad += bad.len() as u64;
        if !late_rows.is_empty() || !bad.is_empty() {
            st.last_activity = now;
            st.idle = false;
        }
        // Bad rows are stamped with the stream's progress including this arrival.
        if !bad.is_empty() {
            let errors_name = format!("{name}{ERRORS_SUFFIX}");
            let st = &self.streams[name];
            let stamp = match st.max_seen {
                None if st.watermark == WATERMARK_MIN => 0,
                m => clamp(st.watermark).max(m.unwrap_or(Time::MIN)),
            };
            let errors_def = self.streams.get(&errors_name).map(|s| s.def.clone());
            if let Some(ed) = errors_def {
                let rows: Vec<BadRow> = bad.iter().map(|(_, b)| b.clone()).collect();
                let batch = errors_batch(&ed, &a.origin, &rows, stamp)?;
                self.forward(&errors_name, ChangeBatch::uniform(batch, stamp, 1))?;
            }
        }
        self.run_queries();
        match fatal {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// The common case of [`Engine::ingest`] without its bookkeeping: no bad rows, no NULL
    /// event time, nothing late. Takes the arrival in and returns None, or hands it back for
    /// the general path.
    fn ingest_on_time(&mut self, name: &str, a: Arrival) -> Result<Option<Arrival>> {
        let st = self.streams.get(name).ok_or_else(|| WeirError::internal("stream vanished"))?;
        if !a.bad.is_empty() {
            return Ok(Some(a));
        }
        let col = a.data.column(st.def.time_column);
        if col.null_count() > 0 {
            return Ok(Some(a));
        }
        let times: Vec<Time> = match col.data_type() {
            DataType::Timestamp(TimeUnit::Microsecond, _) => col
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .ok_or_else(|| WeirError::internal("timestamp column"))?
                .values()
                .to_vec(),
            DataType::Int64 => col
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| WeirError::internal("int column"))?
                .values()
                .to_vec(),
            _ => return Ok(Some(a)),
        };
        // Lateness element by element, as in `ingest`: the first late element sends the
        // arrival down the general path.
        let delay = st.def.watermark_delay as Watermark;
        let mut progress = st.watermark;
        for &t in &times {
            if (t as Watermark) < progress {
                return Ok(Some(a));
            }
            progress = progress.max(t as Watermark - delay);
        }
        self.note_accepted(name, &times)?;
        let n = times.len();
        if n > 0 {
            self.forward(name, ChangeBatch::new(a.data, times, vec![1; n]))?;
        }
        self.run_queries();
        Ok(None)
    }

    /// The stream's bookkeeping for elements it accepted: counts, buffering, largest timestamp,
    /// watermark (largest − delay), the engine clock, and activity (for idleness).
    fn note_accepted(&mut self, name: &str, times: &[Time]) -> Result<()> {
        let Some(max) = times.iter().copied().max() else {
            return Ok(());
        };
        let now = self.processing.now();
        let st = self.streams.get_mut(name).ok_or_else(|| WeirError::internal("stream"))?;
        st.accepted += times.len() as u64;
        st.buffered.add(times);
        st.last_activity = now;
        st.idle = false;
        st.max_seen = Some(st.max_seen.map_or(max, |m| m.max(max)));
        st.watermark = st.watermark.max(max as Watermark - st.def.watermark_delay as Watermark);
        self.clock = self.clock.max(max);
        Ok(())
    }

    /// Hands changes of a stream to every query reading it (the last one takes the batch).
    fn forward(&mut self, name: &str, batch: ChangeBatch) -> Result<()> {
        let readers: Vec<usize> = (0..self.queries.len())
            .filter(|&i| self.queries[i].runner.sources().iter().any(|s| s == name))
            .collect();
        let mut batch = Some(batch);
        for (k, &i) in readers.iter().enumerate() {
            let b = if k + 1 == readers.len() { batch.take() } else { batch.clone() };
            if let Some(b) = b {
                self.queries[i].runner.push(name, b)?;
            }
        }
        Ok(())
    }

    /// Appends rows given as values, one `Vec` per row in the stream's column order. Values are
    /// converted to the column types (e.g. `Utf8("2024-01-01 00:00:01")` to a TIMESTAMP).
    pub fn push_rows(
        &mut self,
        stream: &str,
        rows: &[Vec<datafusion_common::ScalarValue>],
    ) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        let st = self.writable(&name, stream)?;
        let schema = st.def.schema.clone();
        let width = schema.fields().len();
        // A row whose values do not fit the columns is a bad row, under the stream's policy.
        let mut good: Vec<Vec<ArrayRef>> = Vec::with_capacity(rows.len());
        let mut rows_from = Vec::with_capacity(rows.len());
        let mut bad = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let raw = r.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
            let bad_row = |field: &str, reason: String| BadRow {
                line: i as u64 + 1,
                offset: 0,
                field: field.to_string(),
                reason,
                raw: raw.clone(),
            };
            if r.len() != width {
                bad.push((i, bad_row("", format!("expected {width} values, got {}", r.len()))));
                continue;
            }
            let mut values = Vec::with_capacity(width);
            let mut failed = None;
            for (v, f) in r.iter().zip(schema.fields()) {
                let converted = v
                    .to_array()
                    .map_err(|e| e.to_string())
                    .and_then(|a| cast_value(f, &a).map_err(|e| e.to_string()));
                match converted {
                    Ok(a) => values.push(a),
                    Err(reason) => {
                        failed = Some(bad_row(f.name(), reason));
                        break;
                    }
                }
            }
            match failed {
                Some(b) => bad.push((i, b)),
                None => {
                    good.push(values);
                    rows_from.push(i);
                }
            }
        }
        let mut cols = Vec::with_capacity(width);
        for (c, f) in schema.fields().iter().enumerate() {
            let refs: Vec<&dyn Array> = good.iter().map(|r| r[c].as_ref()).collect();
            cols.push(if refs.is_empty() {
                arrow::array::new_empty_array(f.data_type())
            } else {
                arrow::compute::concat(&refs)?
            });
        }
        let data = RecordBatch::try_new_with_options(
            schema,
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(good.len())),
        )?;
        let arrival =
            Arrival { data, rows_from, bad, origin: "push".into(), lines: None, partial: false };
        self.ingest(&name, arrival)
    }

    /// Heartbeat: instant `t` of `stream` is complete (its watermark moves past `t`) and is an
    /// instant of every query reading it.
    pub fn advance(&mut self, stream: &str, t: Time) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        self.writable(&name, stream)?;
        let now = self.processing.now();
        let st = self
            .streams
            .get_mut(&name)
            .ok_or_else(|| exec_err(format!("unknown stream '{stream}'")))?;
        st.watermark = st.watermark.max(t as Watermark + 1);
        st.last_activity = now;
        st.idle = false;
        self.clock = self.clock.max(t);
        for q in &mut self.queries {
            if q.runner.sources().contains(&name) {
                q.runner.heartbeat(&name, t);
            }
        }
        self.run_queries();
        Ok(())
    }

    /// End of input: the stream's watermark becomes +∞, so every pending instant is evaluated.
    pub fn close(&mut self, stream: &str) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        if let Some(base) = self.streams.get(&name).and_then(|s| s.companion_of.clone()) {
            return Err(exec_err(format!(
                "stream '{name}' ends when '{base}' does; close '{base}' instead"
            )));
        }
        let st = self
            .streams
            .get_mut(&name)
            .ok_or_else(|| exec_err(format!("unknown stream '{stream}'")))?;
        st.closed = true;
        st.watermark = WATERMARK_CLOSED;
        self.run_queries();
        Ok(())
    }

    /// Closes every stream.
    pub fn close_all(&mut self) -> Result<()> {
        for st in self.streams.values_mut() {
            st.closed = true;
            st.watermark = WATERMARK_CLOSED;
        }
        self.run_queries();
        Ok(())
    }

    /// The current watermark of a stream: every instant below it is complete
    /// ([`WATERMARK_CLOSED`] once the stream is closed).
    pub fn watermark(&self, stream: &str) -> Option<Watermark> {
        let st = self.streams.get(&stream.to_ascii_lowercase())?;
        match &st.companion_of {
            Some(base) => self.streams.get(base).map(|b| b.watermark),
            None => Some(st.watermark),
        }
    }

    /// Statistics of every stream (companions are counted in their base's `late` and `bad`).
    pub fn stream_stats(&self) -> Vec<StreamStats> {
        self.streams
            .values()
            .filter(|s| s.companion_of.is_none())
            .map(|s| StreamStats {
                stream: s.def.name.clone(),
                accepted: s.accepted,
                late: s.late,
                bad: s.bad,
                watermark: s.watermark,
                buffered: s.buffered.count(),
                idle: s.idle,
                source: s.source.as_ref().map(describe_source),
            })
            .collect()
    }

    /// How far each stream's source has read.
    pub fn source_progress(&self) -> Vec<SourceProgress> {
        self.streams
            .iter()
            .filter_map(|(name, st)| {
                let src = st.source.as_ref()?;
                let r = &src.reader;
                Some(SourceProgress {
                    stream: name.clone(),
                    bytes_read: r.bytes_read,
                    bytes_total: r.bytes_total,
                    records: r.records_read,
                    started: r.started(),
                    ended: r.ended,
                    failed: src.failed.is_some(),
                    unbounded: r.unbounded(),
                })
            })
            .collect()
    }

    /// Declares or replaces a stream's policies (late and bad rows, idle timeout).
    pub fn set_stream_policy(&mut self, stream: &str, policy: StreamPolicy) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        self.writable(&name, stream)?;
        if let Some(st) = self.streams.get_mut(&name) {
            st.policy = policy;
        }
        Ok(())
    }

    /// Attaches a source to a stream (replacing one not yet started). It starts reading when
    /// a query reads the stream; see [`Engine::poll_sources`].
    pub fn set_source(&mut self, stream: &str, spec: SourceSpec) -> Result<()> {
        let name = stream.to_ascii_lowercase();
        self.writable(&name, stream)?;
        let st = self.streams.get_mut(&name).ok_or_else(|| WeirError::internal("stream"))?;
        if st.source.as_ref().is_some_and(|s| s.reader.started()) {
            return Err(exec_err(format!("stream '{name}' is already reading its source")));
        }
        let reader = SourceReader::new(spec, st.def.schema.clone(), st.def.time_column)
            .map_err(WeirError::plan)?;
        st.source = Some(SourceState { reader, failed: None });
        Ok(())
    }

    /// Relative source paths are read from `dir` (default: the working directory).
    pub fn set_base_dir(&mut self, dir: impl Into<std::path::PathBuf>) {
        self.base_dir = dir.into();
    }

    /// Idle timeouts then follow [`Engine::advance_processing_time`] instead of the wall clock
    /// (for tests and simulations).
    pub fn use_manual_processing_time(&mut self) {
        self.processing = ProcessingClock::Manual(self.processing.now());
    }

    /// Moves the manual processing clock forward (see [`Engine::use_manual_processing_time`]);
    /// streams past their idle timeout become idle and the queries they held back go on.
    pub fn advance_processing_time(&mut self, by: WallDuration) {
        if let ProcessingClock::Manual(t) = &mut self.processing {
            *t += by;
        }
        self.run_queries();
    }

    /// Whether any running query reads `stream` or its companions.
    fn is_read(&self, stream: &str) -> bool {
        self.queries
            .iter()
            .any(|q| q.runner.sources().iter().any(|s| is_or_companion_of(s, stream)))
    }

    /// Reads from every source whose stream some query reads, up to about `max_bytes` each,
    /// and takes in what was read. A source starts reading when the first query over its
    /// stream (or `s$late`, `s$errors`) is running; a file source that reaches its end closes
    /// its stream. A source that fails (a missing file, a bad row under `bad_rows = 'fail'`, a
    /// late row under `late = 'error'`) stops, the queries reading its stream fail with the
    /// message, and the first such error is returned; other sources and queries go on.
    pub fn poll_sources(&mut self, max_bytes: usize) -> Result<SourcePoll> {
        let names: Vec<String> = self
            .streams
            .iter()
            .filter(|(_, s)| {
                s.source.as_ref().is_some_and(|src| src.failed.is_none() && !src.reader.ended)
            })
            .map(|(n, _)| n.clone())
            .collect();
        let mut poll = SourcePoll::default();
        let mut first_error = None;
        for name in names {
            let started = self.source_mut(&name).is_some_and(|s| s.reader.started());
            if !started {
                if !self.is_read(&name) {
                    poll.waiting += 1;
                    continue;
                }
                let base = self.base_dir.clone();
                let r = match self.source_mut(&name) {
                    Some(s) => s.reader.start(&base),
                    None => continue,
                };
                if let Err(msg) = r {
                    let e = WeirError::Input(format!("stream '{name}': {msg}"));
                    self.fail_source(&name, &e);
                    first_error.get_or_insert(e);
                    continue;
                }
            }
            let Some(src) = self.source_mut(&name) else { continue };
            let before = src.reader.bytes_read;
            let polled = src.reader.poll(max_bytes);
            poll.bytes += src.reader.bytes_read - before;
            match polled {
                Ok(Polled::Rows { decoded, records, origin, lines }) => {
                    poll.records += records;
                    let arrival = Arrival {
                        data: decoded.batch,
                        rows_from: decoded.rows_from,
                        bad: decoded.bad,
                        origin,
                        lines: Some(lines),
                        partial: true,
                    };
                    if let Err(e) = self.ingest(&name, arrival) {
                        self.fail_source(&name, &e);
                        first_error.get_or_insert(e);
                        continue;
                    }
                }
                Ok(Polled::Nothing) => {}
                Ok(Polled::Ended) => {
                    let closed = self.streams.get(&name).is_some_and(|s| s.closed);
                    if !closed {
                        self.close(&name)?;
                    }
                    continue;
                }
                Err(msg) => {
                    let e = WeirError::Input(format!("stream '{name}': {msg}"));
                    self.fail_source(&name, &e);
                    first_error.get_or_insert(e);
                    continue;
                }
            }
            if self.source_mut(&name).is_some_and(|s| !s.reader.ended) {
                poll.live += 1;
            }
        }
        self.run_queries();
        if let Err(e) = self.maybe_checkpoint() {
            first_error.get_or_insert(e);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(poll),
        }
    }

    /// Reads every source as far as it goes now: finite files to their end (closing their
    /// streams), followed files and stdin up to what is available. Returns the first source
    /// error (see [`Engine::poll_sources`]) after reading everything else.
    pub fn run_sources(&mut self) -> Result<SourcePoll> {
        let mut total = SourcePoll::default();
        let mut first_error = None;
        loop {
            let p = match self.poll_sources(1 << 20) {
                Ok(p) => p,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            total.records += p.records;
            total.bytes += p.bytes;
            total.live = p.live;
            total.waiting = p.waiting;
            if p.idle() {
                break;
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }

    fn source_mut(&mut self, name: &str) -> Option<&mut SourceState> {
        self.streams.get_mut(name).and_then(|s| s.source.as_mut())
    }

    /// A source stopped: it records why, and the queries reading its stream fail.
    fn fail_source(&mut self, name: &str, e: &WeirError) {
        if let Some(s) = self.source_mut(name) {
            s.failed = Some(e.to_string());
        }
        let views = &mut self.views;
        let sinks = &mut self.sinks;
        self.queries.retain(|q| {
            let reads = q.runner.sources().iter().any(|s| is_or_companion_of(s, name));
            if !reads {
                return true;
            }
            match &q.sink {
                Sink::Subscriber(tx) => {
                    let _ = tx.send(Err(e.clone()));
                }
                Sink::View(v) => {
                    if let Some(c) = views.get_mut(v).and_then(|v| v.contents.as_mut()) {
                        c.failed = Some(e.clone());
                    }
                }
                Sink::File(s) => {
                    if let Some(sink) = sinks.get_mut(s) {
                        sink.failed = Some(e.clone());
                    }
                }
                Sink::Parked => {}
            }
            false
        });
    }

    fn time_of(&self, stream: &str, t: TimeLit, span: Option<weir_common::Span>) -> Result<Time> {
        let domain = self.streams.get(stream).map(|s| s.def.domain);
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

    fn insert(
        &mut self,
        target: &str,
        columns: &[String],
        source: Box<weir_sql::sqlparser::ast::Query>,
        at: Option<TimeLit>,
        span: Option<weir_common::Span>,
    ) -> Result<ExecResult> {
        let schema = if let Some(s) = self.streams.get(target) {
            if let Some(base) = &s.companion_of {
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
            s.def.schema.clone()
        } else if let Some(t) = self.tables.get(target) {
            t.def.schema.clone()
        } else if self.views.contains_key(target) {
            return Err(WeirError::plan_at(format!("cannot INSERT into view '{target}'"), span));
        } else {
            return Err(WeirError::plan_at(format!("unknown stream or table '{target}'"), span));
        };
        let q = CqlQuery { query: source, r2s: None, windows: vec![] };
        let plan = self.bind(&q)?;
        let rows = expand(&self.evaluate_with(&plan, true)?)?;
        let data = arrange_columns(target, &schema, columns, &rows, span)?;
        let n = data.num_rows();
        if self.streams.contains_key(target) {
            self.push_from(target, data, "INSERT")?;
        } else {
            let t = self.table_time(at)?;
            self.change_table(target, ChangeBatch::uniform(data, t, 1), t)?;
        }
        Ok(ExecResult::Done(format!("INSERT {n}")))
    }

    fn delete(
        &mut self,
        target: &str,
        selection: Option<Box<weir_sql::sqlparser::ast::Expr>>,
        at: Option<TimeLit>,
        span: Option<weir_common::Span>,
    ) -> Result<ExecResult> {
        let Some(table) = self.tables.get(target) else {
            if self.streams.contains_key(target) {
                return Err(WeirError::plan_at(
                    format!("cannot DELETE from stream '{target}': streams are append-only"),
                    span,
                ));
            }
            return Err(WeirError::plan_at(format!("unknown table '{target}'"), span));
        };
        let schema = table.def.schema.clone();
        let sql = match &selection {
            Some(e) => format!("SELECT * FROM {target} WHERE {e}"),
            None => format!("SELECT * FROM {target}"),
        };
        let plan = self.plan_text(&sql)?;
        let victims = self.evaluate(&plan)?;
        let n: i64 = victims.diffs.iter().sum();
        let t = self.table_time(at)?;
        let data = RecordBatch::try_new(schema, victims.data.columns().to_vec())?;
        let diffs = victims.diffs.iter().map(|d| -d).collect();
        self.change_table(target, ChangeBatch::new(data, vec![t; victims.len()], diffs), t)?;
        Ok(ExecResult::Done(format!("DELETE {n}")))
    }

    fn table_time(&mut self, at: Option<TimeLit>) -> Result<Time> {
        let t = match at {
            None => self.clock,
            Some(TimeLit::Ticks(t)) | Some(TimeLit::Micros(t)) => t,
        };
        self.clock = self.clock.max(t);
        Ok(t)
    }

    /// Applies changes to a table and forwards them to the queries reading it.
    fn change_table(&mut self, name: &str, changes: ChangeBatch, t: Time) -> Result<()> {
        let table =
            self.tables.get_mut(name).ok_or_else(|| WeirError::internal("table vanished"))?;
        table.contents.apply(&changes)?;
        for q in &mut self.queries {
            if q.runner.sources().iter().any(|s| s == name) {
                let at = q.runner.last_instant().map_or(t, |l| t.max(l.saturating_add(1)));
                let mut c = changes.clone();
                c.times.iter_mut().for_each(|x| *x = at);
                q.runner.push(name, c)?;
            }
        }
        self.run_queries();
        Ok(())
    }

    fn drop(
        &mut self,
        kind: ObjectKind,
        name: &str,
        if_exists: bool,
        span: Option<weir_common::Span>,
    ) -> Result<ExecResult> {
        if let Some(base) = self.streams.get(name).and_then(|s| s.companion_of.as_ref()) {
            return Err(WeirError::plan_at(
                format!("'{name}' belongs to stream '{base}' and is dropped with it"),
                span,
            ));
        }
        let present = match kind {
            ObjectKind::Stream => self.streams.contains_key(name),
            ObjectKind::Table => self.tables.contains_key(name),
            ObjectKind::View => self.views.contains_key(name),
            ObjectKind::Sink => self.sinks.contains_key(name),
        };
        let tag = match kind {
            ObjectKind::Stream => "DROP STREAM",
            ObjectKind::Table => "DROP TABLE",
            ObjectKind::View => "DROP VIEW",
            ObjectKind::Sink => "DROP SINK",
        };
        if !present {
            if if_exists {
                return Ok(ExecResult::Done(tag.into()));
            }
            let noun = &tag[5..].to_ascii_lowercase();
            return Err(WeirError::plan_at(format!("unknown {noun} '{name}'"), span));
        }
        let is_dep = |d: &String| is_or_companion_of(d, name);
        if let Some((v, _)) = self.views.iter().find(|(_, v)| v.deps.iter().any(is_dep)) {
            return Err(WeirError::plan_at(
                format!("cannot drop '{name}': view '{v}' depends on it"),
                span,
            ));
        }
        if let Some((k, _)) = self.sinks.iter().find(|(_, k)| k.deps.iter().any(is_dep)) {
            return Err(WeirError::plan_at(
                format!("cannot drop '{name}': sink '{k}' depends on it"),
                span,
            ));
        }
        match kind {
            ObjectKind::Stream => {
                self.streams.retain(|n, s| n != name && s.companion_of.as_deref() != Some(name));
            }
            ObjectKind::Table => {
                self.tables.remove(name);
            }
            ObjectKind::View => {
                self.views.remove(name);
                self.queries.retain(|q| !matches!(&q.sink, Sink::View(v) if v == name));
            }
            ObjectKind::Sink => {
                self.sinks.remove(name);
                self.queries.retain(|q| !matches!(&q.sink, Sink::File(k) if k == name));
            }
        }
        // Queries reading a dropped stream or table stop; their subscriptions end.
        self.queries.retain(|q| !q.runner.sources().iter().any(is_dep));
        Ok(ExecResult::Done(tag.into()))
    }

    fn show(&self, kind: ObjectKind) -> ExecResult {
        let (names, details): (Vec<String>, Vec<String>) = match kind {
            ObjectKind::Stream => self
                .streams
                .values()
                .filter(|s| s.companion_of.is_none())
                .map(|s| {
                    let wm = s.def.schema.field(s.def.time_column).name().clone();
                    (s.def.name.clone(), format!("event time {wm}, {} element(s)", s.accepted))
                })
                .unzip(),
            ObjectKind::Table => self
                .tables
                .values()
                .map(|t| {
                    (
                        t.def.name.clone(),
                        format!("{} row(s)", t.contents.rows.values().sum::<i64>()),
                    )
                })
                .unzip(),
            ObjectKind::View => {
                self.views.values().map(|v| (v.def.name.clone(), v.def.kind().to_string())).unzip()
            }
            ObjectKind::Sink => self
                .sinks
                .iter()
                .map(|(name, k)| {
                    let format = match k.file.spec.format {
                        SinkFormat::Csv => "csv",
                        SinkFormat::JsonLines => "jsonl",
                    };
                    let mut details =
                        format!("{} ({format}), {} bytes", k.file.spec.path, k.file.written);
                    if let Some(e) = &k.failed {
                        details += &format!(", failed: {e}");
                    }
                    (name.clone(), details)
                })
                .unzip(),
        };
        text_rows(&["name", "details"], vec![names, details])
    }

    fn show_stream_stats(&self) -> Result<ExecResult> {
        let stats = self.stream_stats();
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
        let watermarks = stats.iter().map(|s| {
            let domain = self.streams.get(&s.stream).map_or(TimeDomain::Ticks, |st| st.def.domain);
            format_watermark(s.watermark, domain)
        });
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(stats.iter().map(|s| s.stream.as_str()))),
            count(&|s| s.accepted),
            count(&|s| s.late),
            count(&|s| s.bad),
            Arc::new(StringArray::from_iter_values(watermarks)),
            count(&|s| s.buffered),
            Arc::new(arrow::array::BooleanArray::from_iter(stats.iter().map(|s| Some(s.idle)))),
            Arc::new(StringArray::from_iter(stats.iter().map(|s| s.source.as_deref()))),
        ];
        let batch = RecordBatch::try_new(schema.clone(), cols)?;
        Ok(ExecResult::Rows { schema, batches: vec![batch] })
    }

    fn describe(&self, name: &str, span: Option<weir_common::Span>) -> Result<ExecResult> {
        let (schema, time_col, kind) = if let Some(s) = self.streams.get(name) {
            (s.def.schema.clone(), Some(s.def.time_column), "stream")
        } else if let Some(t) = self.tables.get(name) {
            (t.def.schema.clone(), None, "table")
        } else if let Some(v) = self.views.get(name) {
            let k =
                if v.def.kind() == PlanKind::Stream { "view (stream)" } else { "view (relation)" };
            (v.def.schema.clone(), None, k)
        } else {
            return Err(WeirError::plan_at(
                format!("unknown stream, table or view '{name}'"),
                span,
            ));
        };
        let mut cols = Vec::new();
        let mut types = Vec::new();
        let mut notes = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            cols.push(f.name().clone());
            types.push(sql_type_name(f.data_type()));
            notes.push(if Some(i) == time_col {
                let delay = self.streams.get(name).map(|s| s.def.watermark_delay).unwrap_or(0);
                format!("{kind} event time, watermark delay {delay}")
            } else {
                kind.to_string()
            });
        }
        Ok(text_rows(&["column", "type", "notes"], vec![cols, types, notes]))
    }
}

/// The subscriber's end of query `id`'s output channel.
fn subscription(
    id: u64,
    plan: &LogicalPlan,
    rx: std::sync::mpsc::Receiver<Result<ChangeBatch>>,
) -> Subscription {
    Subscription {
        id,
        schema: weir_exec::compile::exec_schema(&plan.schema()),
        kind: plan.kind(),
        domain: plan.time_domain().unwrap_or(TimeDomain::Ticks),
        rx,
        closed: std::cell::Cell::new(false),
        failure: std::cell::RefCell::new(None),
    }
}

/// A source for statistics: what it reads, how far, and whether it ended or failed.
fn describe_source(s: &SourceState) -> String {
    let r = &s.reader;
    let mut text = format!("{}: {} records", r.spec.describe(), r.records_read);
    match r.bytes_total {
        Some(total) => text += &format!(", {} of {} bytes", r.bytes_read, total),
        None => text += &format!(", {} bytes", r.bytes_read),
    }
    if let Some(e) = &s.failed {
        text += &format!(", failed: {e}");
    } else if r.ended {
        text += ", ended";
    } else if !r.started() {
        text += ", waiting for a query";
    }
    text
}

/// Names a query reads directly (streams, tables, views), for dependency tracking.
fn referenced_names(q: &CqlQuery) -> Vec<String> {
    let mut names: Vec<String> = q.windows.iter().map(|w| w.stream.clone()).collect();
    weir_sql::binder::collect_relation_names(&q.query, &mut names);
    names.sort();
    names.dedup();
    names
}

/// Rows repeated by their multiplicity.
fn expand(b: &ChangeBatch) -> Result<RecordBatch> {
    if b.diffs.iter().all(|&d| d == 1) {
        return Ok(b.data.clone());
    }
    let mut idx = Vec::new();
    for (i, &d) in b.diffs.iter().enumerate() {
        for _ in 0..d.max(0) {
            idx.push(i as u32);
        }
    }
    Ok(b.take(&idx)?.data)
}

/// One value converted to a column's type: `cannot read 'x' as BIGINT` if it does not fit.
fn cast_value(f: &Field, col: &ArrayRef) -> std::result::Result<ArrayRef, String> {
    if col.data_type() == f.data_type() {
        return Ok(col.clone());
    }
    let opts = arrow::compute::CastOptions { safe: false, ..Default::default() };
    arrow::compute::cast_with_options(col, f.data_type(), &opts).map_err(|_| {
        let shown = crate::format::value_as_text(col, 0).unwrap_or_default();
        format!("cannot read '{shown}' as {}", sql_type_name(f.data_type()))
    })
}

fn cast_column(stream: &str, f: &Field, col: &ArrayRef) -> Result<ArrayRef> {
    if col.data_type() == f.data_type() {
        return Ok(col.clone());
    }
    let opts = arrow::compute::CastOptions { safe: false, ..Default::default() };
    arrow::compute::cast_with_options(col, f.data_type(), &opts).map_err(|e| {
        WeirError::Input(format!(
            "'{stream}' column '{}': cannot convert {} to {}: {e}",
            f.name(),
            col.data_type(),
            sql_type_name(f.data_type())
        ))
    })
}

/// Puts inserted rows into the target's column order; unnamed columns are NULL.
fn arrange_columns(
    target: &str,
    schema: &SchemaRef,
    columns: &[String],
    rows: &RecordBatch,
    span: Option<weir_common::Span>,
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

/// The event time of every row, in the stream's ticks (None where it is NULL).
fn event_times(def: &StreamDef, data: &RecordBatch) -> Result<Vec<Option<Time>>> {
    let col = data.column(def.time_column);
    Ok(match col.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => col
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| WeirError::internal("timestamp column"))?
            .iter()
            .collect(),
        _ => {
            let c = arrow::compute::cast(col, &DataType::Int64)?;
            c.as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| WeirError::internal("int column"))?
                .iter()
                .collect()
        }
    })
}

/// A watermark for people: `-inf` before anything is promised, `closed` after the end.
pub fn format_watermark(w: Watermark, domain: TimeDomain) -> String {
    if w == WATERMARK_MIN {
        "-inf".into()
    } else if w == WATERMARK_CLOSED {
        "closed".into()
    } else if w > Time::MAX as Watermark {
        "+inf".into()
    } else {
        format_time(clamp(w), domain)
    }
}

fn text_rows(names: &[&str], cols: Vec<Vec<String>>) -> ExecResult {
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

/// SQL spelling of an Arrow type, for DESCRIBE and messages.
pub fn sql_type_name(t: &DataType) -> String {
    match t {
        DataType::Int64 => "BIGINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Float32 => "REAL".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Date32 => "DATE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        other => other.to_string(),
    }
}
