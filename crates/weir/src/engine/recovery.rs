//! Checkpoints and recovery of the whole engine.
//!
//! A checkpoint is taken between statements or source reads, when every query has evaluated
//! every instant below its frontier: a consistent cut at an instant boundary. It holds
//! - the catalog, as the CREATE statements of what exists, in order, and the base directory;
//! - per stream: watermark, largest timestamp, counters, buffered times, policies, and its
//!   source's position (file and byte offset of the first record not yet taken in);
//! - table contents and maintained view contents (Arrow IPC);
//! - every running query's state (`QueryRunner::save_state`: operator state and buffered
//!   input), keyed by what it feeds: a view, a sink, or a subscriber's query text;
//! - every sink's committed position: its file is synced first, so the position is durable.
//!
//! The manifest (the catalog, streams and sinks) is JSON written and read by serde derives
//! ([`Manifest`]): a field that is missing or of the wrong type is an error, never a default.
//!
//! Recovery replays the catalog into a fresh engine (sinks reopen their files cut back to the
//! committed position instead of truncating them), then puts every piece of state back and
//! rewinds the sources. Because evaluation is deterministic, what follows is byte for byte
//! what an uninterrupted run would have produced. Subscribers' queries come back parked: an
//! application takes one over with [`Engine::resume`] and is told the instant it resumes
//! from.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration as WallDuration;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError};

use super::dataflow::Target;
use super::tables::Contents;
use super::Engine;
use crate::checkpoint::store;
use crate::checkpoint::wal::{self, Header, WalSync};
use crate::intake::buffered::Buffered;
use crate::intake::Arrival;
use crate::intake::{SourceState, StreamPolicy};
use crate::source::{SourcePosition, SourceReader, SourceSpec};
use crate::subscription::Subscription;

/// How many checkpoints are kept on disk.
const KEEP: usize = 3;

/// What [`Engine::open`] found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The sequence number of the checkpoint restored, if any.
    pub checkpoint: Option<u64>,
    /// Checkpoints that were damaged and skipped, one message each.
    pub warnings: Vec<String>,
    /// Subscribers' queries waiting for [`Engine::resume`], by query text.
    pub parked: Vec<String>,
    /// Records of the write-ahead log replayed after the checkpoint (see
    /// [`Engine::set_wal`]).
    pub replayed: usize,
    /// The notes the checkpoint was taken with ([`Engine::set_checkpoint_note`]).
    pub notes: BTreeMap<String, String>,
}

/// Where checkpoints go, how often, and (during recovery) where sinks reopen.
#[derive(Debug, Default)]
pub(super) struct Checkpoints {
    data_dir: Option<PathBuf>,
    interval: Option<WallDuration>,
    sequence: u64,
    /// What the embedding application keeps with each checkpoint.
    notes: BTreeMap<String, String>,
    /// Processing time of the last checkpoint.
    last: WallDuration,
    /// A hash of the last checkpoint's contents (its sequence number left out): a periodic
    /// checkpoint that would write the same is not written.
    last_contents: Option<u64>,
    /// During recovery: each sink's committed position, to reopen its file at.
    resume_sinks: BTreeMap<String, u64>,
    /// Set while recovery replays the catalog: a table created from a file is not loaded
    /// again, its contents come from the checkpoint.
    replaying: bool,
    /// The write-ahead log of pushed input, when on ([`Engine::set_wal`]).
    wal: Option<wal::Wal>,
    /// Set while a logged record is applied (or replayed): what it does inside is not logged
    /// again.
    logging_paused: bool,
    /// Why the last periodic checkpoint could not be written, if it could not.
    failure: Option<WeirError>,
    /// Incremental checkpoints: per state section (`query:<key>`, `table:<name>`,
    /// `view:<name>`), the checkpoints that hold it as of the last one written: its whole
    /// state, then its changes in order.
    pieces: BTreeMap<String, Vec<u64>>,
    /// The generation the last checkpoint written belongs to; None: the next is full.
    generation: Option<Generation>,
    /// The generation to keep as the one before when the next checkpoint is full and no
    /// generation was written before it in this run: the restored checkpoint's, or the one
    /// whose next checkpoint could not be written.
    kept_generation: Option<u64>,
}

/// The checkpoints from a full one up to the next full one: those after the first write
/// only what changed, and name the files that hold the rest (see [`Manifest::pieces`]).
#[derive(Debug, Clone)]
struct Generation {
    /// The full checkpoint that starts it.
    start: u64,
    /// The start of the generation before (None: there was none), whose files are kept.
    previous: Option<u64>,
    /// Bytes of the full checkpoint.
    size: usize,
    /// Bytes written by the checkpoints after it.
    written: usize,
    /// The checkpoints after it.
    checkpoints: usize,
}

/// A generation ends (the next checkpoint is full) once its checkpoints after the full one
/// wrote as much as it (so recovery reads at most twice a full checkpoint, and the files kept
/// hold at most about four), or after this many (each a step of recovery).
const GENERATION_CHECKPOINTS: usize = 64;

impl Generation {
    /// Whether the next checkpoint is full. The first generation of a data directory is its
    /// full checkpoint alone, so that from the second on a damaged file always has an earlier
    /// generation to fall back to.
    fn is_complete(&self) -> bool {
        self.previous.is_none()
            || self.written >= self.size.max(1)
            || self.checkpoints >= GENERATION_CHECKPOINTS
    }
}

/// A hash of bytes, to tell whether contents changed since they were written.
fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl Checkpoints {
    /// Whether recovery is replaying the catalog's statements.
    pub fn replaying(&self) -> bool {
        self.replaying
    }

    /// The committed position to reopen sink `name` at, during recovery.
    pub fn sink_resume_position(&self, name: &str) -> Option<u64> {
        self.resume_sinks.get(name).copied()
    }
}

/// The checkpoint's manifest: everything but the Arrow sections.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    sequence: u64,
    clock: Time,
    base_dir: PathBuf,
    /// The catalog, as the CREATE statements of what exists, in order.
    statements: Vec<String>,
    streams: BTreeMap<String, StreamCheckpoint>,
    /// Each sink's committed position (bytes).
    sinks: BTreeMap<String, u64>,
    /// The keys of the queries whose state is saved, each as section `query:<key>`.
    queries: Vec<String>,
    /// Views and sinks whose query failed, by query key (`view:v`, `sink:k`), with the error:
    /// they stay failed after recovery instead of starting over.
    failed: BTreeMap<String, String>,
    /// The number of workers the queries ran on (their state is per worker); 1 in
    /// checkpoints older than the field.
    #[serde(default = "one_worker")]
    workers: usize,
    /// The application's notes ([`Engine::set_checkpoint_note`]); none in older checkpoints.
    #[serde(default)]
    notes: BTreeMap<String, String>,
    /// Incremental checkpoints: per state section (`query:<key>`, `table:<name>`,
    /// `view:<name>`), the checkpoints whose files hold it: the first its whole state (as
    /// section `<name>`), the others its changes since the one before (as `changes:<name>`),
    /// in order. Empty in checkpoints of format 2: every section is in the checkpoint's file.
    #[serde(default)]
    pieces: BTreeMap<String, Vec<u64>>,
    /// The full checkpoint this one builds on (itself if it is full); 0 in format 2.
    #[serde(default)]
    generation: u64,
    /// The full checkpoint of the generation before, whose files are kept, if any.
    #[serde(default)]
    previous_generation: Option<u64>,
}

fn one_worker() -> usize {
    1
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamCheckpoint {
    /// A 128-bit watermark, in decimal (JSON numbers do not hold it).
    watermark: String,
    max_seen: Option<Time>,
    closed: bool,
    accepted: u64,
    late: u64,
    bad: u64,
    /// (time, count) of the elements not yet released to every reader.
    buffered: Vec<(Time, u64)>,
    policy: StreamPolicy,
    source: Option<SourceCheckpoint>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceCheckpoint {
    spec: SourceSpec,
    position: SourcePosition,
    failed: Option<String>,
}

fn bad(what: &str) -> WeirError {
    WeirError::exec(format!("checkpoint: {what}"))
}

/// A relation's contents as rows plus a `__weir_count` column, as Arrow IPC stream bytes.
fn contents_to_ipc(c: &Contents, schema: &SchemaRef) -> Result<Vec<u8>> {
    rows_to_ipc(&c.snapshot(schema, 0)?, schema)
}

/// Rows with their multiplicities (the diffs of `snap`) as rows plus a `__weir_count`
/// column, as Arrow IPC stream bytes.
fn rows_to_ipc(snap: &ChangeBatch, schema: &SchemaRef) -> Result<Vec<u8>> {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("__weir_count", DataType::Int64, false));
    let mut cols = snap.data.columns().to_vec();
    cols.push(Arc::new(Int64Array::from(snap.diffs.clone())));
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(snap.diffs.len())),
    )?;
    weir_common::ipc::write_stream(&batch)
}

fn contents_from_ipc(c: &mut Contents, schema: &SchemaRef, bytes: &[u8]) -> Result<()> {
    ipc_rows(schema, bytes)?.iter().try_for_each(|b| c.apply(b))
}

/// Applies what [`Contents::take_changes`] gave, as [`rows_to_ipc`] wrote it.
fn changes_from_ipc(c: &mut Contents, schema: &SchemaRef, bytes: &[u8]) -> Result<()> {
    ipc_rows(schema, bytes)?.iter().try_for_each(|b| c.set_rows(b))
}

/// What [`rows_to_ipc`] wrote: rows with their multiplicities as diffs.
fn ipc_rows(schema: &SchemaRef, bytes: &[u8]) -> Result<Vec<ChangeBatch>> {
    let mut out = Vec::new();
    let (_, batches) =
        weir_common::ipc::read_stream(bytes).map_err(|e| bad(&format!("unreadable state: {e}")))?;
    for batch in batches {
        let n = batch.num_columns();
        if n != schema.fields().len() + 1 {
            return Err(bad("a relation's saved columns do not match its schema"));
        }
        let counts = batch
            .column(n - 1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| bad("a relation's counts are not integers"))?
            .values()
            .to_vec();
        let data = RecordBatch::try_new_with_options(
            schema.clone(),
            batch.columns()[..n - 1].to_vec(),
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(counts.len())),
        )?;
        let times = vec![0; counts.len()];
        out.push(ChangeBatch::new(data, times, counts));
    }
    Ok(out)
}

/// The state sections of a checkpoint being written, and where each is (see
/// [`Manifest::pieces`]).
struct Writing {
    sequence: u64,
    /// The pieces as of the last checkpoint, if this one builds on it (empty if it is full).
    earlier: BTreeMap<String, Vec<u64>>,
    pieces: BTreeMap<String, Vec<u64>>,
    sections: Vec<(String, Vec<u8>)>,
}

impl Writing {
    /// A section the last checkpoint holds, unchanged since: where it was.
    fn keep(&mut self, name: String) {
        let chain = self.earlier.get(&name).cloned().unwrap_or_default();
        self.pieces.insert(name, chain);
    }

    /// Whether the last checkpoint holds a section, so that its changes can follow it.
    fn builds_on(&self, name: &str) -> bool {
        self.earlier.contains_key(name)
    }

    /// A section's changes since the last checkpoint.
    fn changes(&mut self, name: String, bytes: Vec<u8>) {
        let chain = self.earlier.get(&name).cloned().unwrap_or_default();
        self.pieces.insert(name.clone(), [&chain[..], &[self.sequence]].concat());
        self.sections.push((format!("changes:{name}"), bytes));
    }

    /// A section written whole.
    fn whole(&mut self, name: String, bytes: Vec<u8>) {
        self.pieces.insert(name.clone(), vec![self.sequence]);
        self.sections.push((name, bytes));
    }

    /// A table's or view's contents: not written if unchanged, their changes if recorded,
    /// else whole.
    fn relation(
        &mut self,
        name: String,
        contents: &mut Contents,
        schema: &SchemaRef,
    ) -> Result<()> {
        if self.builds_on(&name) {
            if contents.unchanged() {
                self.keep(name);
                return Ok(());
            }
            if let Some(changes) = contents.take_changes(schema)? {
                self.changes(name, rows_to_ipc(&changes, schema)?);
                return Ok(());
            }
        }
        self.whole(name, contents_to_ipc(contents, schema)?);
        contents.track_changes();
        Ok(())
    }
}

/// A checkpoint read back with every file it names: its manifest, each state section's whole
/// state, and the changes to apply after it, in order.
struct Loaded {
    manifest: Manifest,
    whole: BTreeMap<String, Vec<u8>>,
    changes: BTreeMap<String, Vec<Vec<u8>>>,
}

/// Reads checkpoint `stored` and the pieces of its state in earlier files (see
/// [`Manifest::pieces`]); an error if one of them is damaged or missing.
fn load(dir: &std::path::Path, stored: store::Stored) -> Result<Loaded> {
    let here = stored.sequence;
    let mut files: BTreeMap<u64, store::Stored> = BTreeMap::new();
    files.insert(here, stored);
    let manifest: Manifest = {
        let m = files[&here].section("manifest").ok_or_else(|| bad("no manifest"))?;
        serde_json::from_slice(m).map_err(|e| bad(&format!("unreadable manifest: {e}")))?
    };
    if manifest.sequence != here {
        return Err(bad(&format!("checkpoint {here} holds the manifest of {}", manifest.sequence)));
    }
    let (mut whole, mut changes) = (BTreeMap::new(), BTreeMap::new());
    if manifest.pieces.is_empty() {
        // Format 2: every section in this file.
        let sections = files.remove(&here).map(|s| s.sections).unwrap_or_default();
        whole.extend(sections.into_iter().filter(|(n, _)| n != "manifest"));
        return Ok(Loaded { manifest, whole, changes });
    }
    for (name, chain) in &manifest.pieces {
        for (i, &seq) in chain.iter().enumerate() {
            if seq > here || (i > 0 && seq <= chain[i - 1]) {
                return Err(bad(&format!("the pieces of '{name}' are out of order")));
            }
            if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(seq) {
                let read = store::read(&store::path_of(dir, seq)).map_err(|e| {
                    WeirError::exec(format!("checkpoint {here} needs checkpoint {seq}: {e}"))
                })?;
                slot.insert(read);
            }
            let section = if i == 0 { name.clone() } else { format!("changes:{name}") };
            let bytes = files[&seq].section(&section).ok_or_else(|| {
                bad(&format!("checkpoint {seq} does not hold '{section}' for checkpoint {here}"))
            })?;
            if i == 0 {
                whole.insert(name.clone(), bytes.to_vec());
            } else {
                changes.entry(name.clone()).or_insert_with(Vec::new).push(bytes.to_vec());
            }
        }
    }
    Ok(Loaded { manifest, whole, changes })
}

/// The newest checkpoint in `dir` that reads back intact with every file it names, with a
/// warning for each newer one that did not. A checkpoint of another format version is an
/// error, not skipped: restoring an older one instead would silently lose everything after it.
fn load_latest(dir: &std::path::Path) -> Result<(Option<Loaded>, Vec<String>)> {
    let mut warnings = Vec::new();
    for path in store::list(dir) {
        match store::read(&path).and_then(|stored| load(dir, stored)) {
            Ok(loaded) => return Ok((Some(loaded), warnings)),
            Err(e) if e.to_string().contains("format version") => return Err(e),
            Err(e) => warnings.push(format!("{e}; using the one before it")),
        }
    }
    Ok((None, warnings))
}

impl Engine {
    /// An engine that keeps its checkpoints in `dir`, restored from the newest intact one
    /// there (or empty if there is none). Damaged checkpoints are skipped with a warning; one
    /// written by an incompatible version of Weir is refused with an error.
    pub fn open(dir: impl Into<PathBuf>) -> Result<(Engine, Recovery)> {
        Engine::open_with_workers(dir, 1)
    }

    /// [`Engine::open`] with the continuous queries on `workers` timely workers (see
    /// [`Engine::set_workers`]). A checkpoint taken on another number of workers restores
    /// too: each query runs as it was saved (docs/recovery.md), and queries started after the
    /// restart run on `workers`.
    pub fn open_with_workers(
        dir: impl Into<PathBuf>,
        workers: usize,
    ) -> Result<(Engine, Recovery)> {
        Engine::open_placed(dir.into(), |engine| engine.set_workers(workers))
    }

    /// [`Engine::open`] with the continuous queries on the workers of a cluster of processes,
    /// this one being process 0 (see [`Engine::join_cluster`]). Any checkpoint restores, as
    /// with [`Engine::open_with_workers`].
    pub fn open_on_cluster(
        dir: impl Into<PathBuf>,
        cluster: &weir_workers::Cluster,
    ) -> Result<(Engine, Recovery)> {
        Engine::open_placed(dir.into(), |engine| engine.join_cluster(cluster))
    }

    fn open_placed(
        dir: PathBuf,
        place: impl FnOnce(&mut Engine) -> Result<()>,
    ) -> Result<(Engine, Recovery)> {
        let (loaded, mut warnings) = load_latest(&dir)?;
        let mut engine = Engine::new();
        place(&mut engine)?;
        engine.checkpoints.data_dir = Some(dir.clone());
        let mut recovery = Recovery::default();
        if let Some(loaded) = loaded {
            let sequence = loaded.manifest.sequence;
            engine.checkpoints.sequence = sequence;
            recovery.parked = engine.restore(loaded)?;
            recovery.notes = engine.checkpoints.notes.clone();
            recovery.checkpoint = Some(sequence);
        }
        // The log's records after the checkpoint restored, in order; then a checkpoint that
        // holds them, after which the logs before it are no longer needed.
        let logs: Vec<_> = wal::files(&dir)
            .into_iter()
            .filter(|(seq, _)| *seq >= engine.checkpoints.sequence)
            .collect();
        for (_, path) in &logs {
            let (records, warning) = wal::read(path)?;
            warnings.extend(warning);
            for record in records {
                engine.replay(record);
                recovery.replayed += 1;
            }
        }
        // The next checkpoint is numbered after every checkpoint file there, damaged or not:
        // a newer checkpoint skipped (damaged, or naming a damaged file) must never find a new
        // file under the number of one it names, and take it for its own.
        let newest = store::list(&dir).first().and_then(|p| store::sequence_of(p));
        engine.checkpoints.sequence = engine.checkpoints.sequence.max(newest.unwrap_or(0));
        if let Some((last, _)) = logs.last() {
            // Numbered after every log, so that none of them follows it: they stay for a
            // recovery that falls back to an older checkpoint, and only for that.
            engine.checkpoints.sequence = engine.checkpoints.sequence.max(*last);
            if let Some(n) = engine.write_checkpoint(false)? {
                recovery.checkpoint = Some(n);
            }
        }
        recovery.warnings = warnings;
        Ok((engine, recovery))
    }

    /// Logs what is pushed to the engine from now on (`push`, `push_rows`, and the `INSERT`,
    /// `DELETE`, `ADVANCE` and `CLOSE` statements) in a write-ahead log in the data directory,
    /// before it is taken in, so that recovery replays what came after the last checkpoint:
    /// pushed input then has the exactly-once guarantee of files (see
    /// [`crate::checkpoint::wal`]). `sync` says when a record is durable; None turns the log
    /// off. The log starts at a checkpoint, written now if anything changed since the last.
    /// With the log on, each statement that creates or drops something is followed by a
    /// checkpoint (so the log only holds input for what a checkpoint knows), and the
    /// checkpoint interval also applies while input is pushed. A subscription started after
    /// the last checkpoint is not in it: after a crash, the application subscribes again.
    pub fn set_wal(&mut self, sync: Option<WalSync>) -> Result<()> {
        let Some(sync) = sync else {
            self.checkpoints.wal = None;
            return Ok(());
        };
        let dir = self.checkpoints.data_dir.clone().ok_or_else(|| {
            WeirError::exec(
                "a write-ahead log needs a data directory: start Weir with --data-dir (or \
                 Engine::open)",
            )
        })?;
        self.checkpoints.wal = None;
        self.write_checkpoint(true)?;
        self.checkpoints.wal = Some(wal::Wal::start(&dir, self.checkpoints.sequence, sync)?);
        Ok(())
    }

    /// The write-ahead log's sync policy, if the log is on.
    pub fn wal(&self) -> Option<WalSync> {
        self.checkpoints.wal.as_ref().map(|w| w.sync())
    }

    /// Whether what is about to be taken in must be logged first.
    fn logging(&self) -> bool {
        self.checkpoints.wal.is_some()
            && !self.checkpoints.logging_paused
            && !self.checkpoints.replaying
    }

    /// Logs a statement about to run, if the log is on; returns whether it did (then the
    /// statement runs with logging paused).
    pub(super) fn log_statement(&mut self, sql: &str) -> Result<bool> {
        if !self.logging() {
            return Ok(false);
        }
        self.append_log(&Header::Statement { sql: sql.to_string(), clock: self.clock }, None)?;
        Ok(true)
    }

    /// Appends a record to the log (nothing if it is off).
    fn append_log(&mut self, header: &Header, rows: Option<&RecordBatch>) -> Result<()> {
        match self.checkpoints.wal.as_mut() {
            Some(w) => w.append(header, rows),
            None => Ok(()),
        }
    }

    /// Logs an arrival about to be taken in at `stream`, if the log is on.
    pub(super) fn log_arrival(&mut self, stream: &str, a: &Arrival) -> Result<()> {
        if !self.logging() {
            return Ok(());
        }
        let identity = a.rows_from.iter().enumerate().all(|(i, r)| i == *r);
        let header = Header::Arrival {
            stream: stream.to_string(),
            origin: a.origin.clone(),
            clock: self.clock,
            partial: a.partial,
            rows_from: (!identity).then(|| a.rows_from.clone()),
            bad: a.bad.clone(),
        };
        self.append_log(&header, Some(&a.data))
    }

    /// Logs a heartbeat (`None`: a close) of `stream` (`None`: every stream) about to be
    /// taken in, if the log is on.
    pub(super) fn log_time(&mut self, stream: Option<&str>, to: Option<Time>) -> Result<()> {
        if !self.logging() {
            return Ok(());
        }
        let header = Header::Time { stream: stream.map(str::to_string), to, clock: self.clock };
        self.append_log(&header, None)
    }

    /// Runs `f` with logging paused: input it takes in was logged already (a statement's
    /// inserted rows), or is read again from a source after a crash.
    pub(super) fn without_logging<T>(&mut self, f: impl FnOnce(&mut Engine) -> T) -> T {
        let was = std::mem::replace(&mut self.checkpoints.logging_paused, true);
        let out = f(self);
        self.checkpoints.logging_paused = was;
        out
    }

    /// After a logged record was applied: the periodic checkpoint, which also starts a new
    /// log (the pushed input is then bounded by the interval).
    pub(super) fn after_logged(&mut self) -> Result<()> {
        if self.checkpoints.wal.is_some() {
            self.maybe_checkpoint()?;
        }
        Ok(())
    }

    /// After a statement that created or dropped something: a checkpoint, if the log is on.
    pub(super) fn after_definition(&mut self) -> Result<()> {
        if self.logging() {
            self.write_checkpoint(true)?;
        }
        Ok(())
    }

    /// Applies a logged record again, as it was applied when it was logged: at the engine
    /// clock it was logged at. A record that failed then fails the same way now, and is
    /// skipped as it was.
    fn replay(&mut self, record: wal::Record) {
        self.without_logging(|e| match record.header {
            Header::Time { stream, to, clock } => {
                e.clock = e.clock.max(clock);
                let _ = match (stream, to) {
                    (Some(s), Some(t)) => e.advance(&s, t),
                    (Some(s), None) => e.close(&s),
                    (None, _) => e.close_all(),
                };
            }
            Header::Statement { sql, clock } => {
                e.clock = e.clock.max(clock);
                let _ = e.execute(&sql);
            }
            Header::Arrival { stream, origin, clock, partial, rows_from, bad } => {
                e.clock = e.clock.max(clock);
                if let Some(data) = record.rows {
                    let rows_from = rows_from.unwrap_or_else(|| (0..data.num_rows()).collect());
                    let arrival = Arrival { data, rows_from, bad, origin, lines: None, partial };
                    let _ = e.ingest(&stream, arrival);
                }
            }
        })
    }

    /// Keeps `value` under `key` in every checkpoint from now on, for the application to read
    /// back from [`Recovery::notes`] (`weir run` keeps a fingerprint of its script, to refuse
    /// resuming after the script was edited).
    pub fn set_checkpoint_note(&mut self, key: &str, value: &str) {
        self.checkpoints.notes.insert(key.to_string(), value.to_string());
    }

    /// Keep checkpoints in `dir` from now on (the API equivalent of `weir --data-dir` for an
    /// engine that starts empty).
    pub fn set_data_dir(&mut self, dir: impl Into<PathBuf>) {
        self.checkpoints.data_dir = Some(dir.into());
    }

    /// The directory checkpoints go to, if any.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.checkpoints.data_dir.as_deref()
    }

    /// Take a checkpoint every `interval` (processing time) while sources are read.
    pub fn set_checkpoint_interval(&mut self, interval: Option<WallDuration>) {
        self.checkpoints.interval = interval;
        self.checkpoints.last = self.intake.now();
    }

    /// Takes a checkpoint periodically (see [`Engine::set_checkpoint_interval`]).
    pub(super) fn maybe_checkpoint(&mut self) -> Result<()> {
        let (Some(interval), Some(_)) = (self.checkpoints.interval, &self.checkpoints.data_dir)
        else {
            return Ok(());
        };
        if self.intake.now().saturating_sub(self.checkpoints.last) >= interval {
            let written = self.write_checkpoint(true);
            self.checkpoints.failure = written.as_ref().err().cloned();
            written?;
        }
        Ok(())
    }

    /// Why the last periodic checkpoint could not be written (the data directory's disk
    /// full, a sink's file that cannot be synced), if it could not: reading on would lose the
    /// guarantee that a restart resumes exactly, so a driver of [`Engine::poll_sources`]
    /// stops ([`Engine::run_sources`] does).
    pub fn checkpoint_failure(&self) -> Option<&WeirError> {
        self.checkpoints.failure.as_ref()
    }

    /// Writes a checkpoint of the whole engine to its data directory; returns its sequence
    /// number. See the module docs for what it holds.
    pub fn checkpoint(&mut self) -> Result<u64> {
        self.write_checkpoint(false).map(|n| n.unwrap_or(self.checkpoints.sequence))
    }

    /// Writes a checkpoint, unless `unless_unchanged` and it would hold exactly what the last
    /// one holds (nothing was taken in, evaluated, written or declared since: an idle server
    /// or a followed file with nothing new); returns the sequence number written.
    fn write_checkpoint(&mut self, unless_unchanged: bool) -> Result<Option<u64>> {
        let dir = self.checkpoints.data_dir.clone().ok_or_else(|| {
            WeirError::exec(
                "no data directory: start Weir with --data-dir (or Engine::open) to checkpoint",
            )
        })?;
        // Paths are stored absolute, so recovery works from any working directory.
        let cwd = std::env::current_dir()
            .map_err(|e| bad(&format!("cannot read the working directory: {e}")))?;
        let absolute = |p: &std::path::Path| cwd.join(p);
        let mut streams = BTreeMap::new();
        for (name, st) in self.intake.streams().filter(|(_, s)| s.companion_of.is_none()) {
            let source = st.source.as_ref().map(|s| {
                let mut position = s.reader.position();
                position.files = position.files.iter().map(|f| absolute(f)).collect();
                SourceCheckpoint { spec: s.reader.spec.clone(), position, failed: s.failed.clone() }
            });
            let checkpoint = StreamCheckpoint {
                watermark: st.watermark.to_string(),
                max_seen: st.max_seen,
                closed: st.closed,
                accepted: st.accepted,
                late: st.late,
                bad: st.bad,
                buffered: st.buffered.entries(),
                policy: st.policy.clone(),
                source,
            };
            streams.insert(name.clone(), checkpoint);
        }
        // Every sink's file holds what its query delivered (a write that failed meanwhile
        // fails its sink, which the checkpoint records).
        self.dataflow.settle_outputs();
        let mut sinks = BTreeMap::new();
        let mut failed = BTreeMap::new();
        for (name, k) in &self.sinks {
            let mut k = k.lock();
            // A failed sink writes nothing more: what it wrote stays as it is, unsynced (its
            // failure may be the very write or sync that cannot be done: a full disk).
            let position = if k.failed.is_some() { k.file.written() } else { k.file.sync()? };
            sinks.insert(name.clone(), position);
            if let Some(e) = &k.failed {
                failed.insert(Target::Sink(name.clone()).key().unwrap_or_default(), e.to_string());
            }
        }
        for (name, v) in self.tables.views() {
            if let Some(e) = &v.lock().failed {
                failed.insert(Target::View(name.clone()).key().unwrap_or_default(), e.to_string());
            }
        }
        let keys: Vec<String> =
            self.dataflow.queries().iter().filter_map(|q| q.target.key()).collect();
        let mut manifest = Manifest {
            sequence: 0,
            clock: self.clock,
            base_dir: absolute(&self.base_dir),
            statements: self.catalog.statements().map(str::to_string).collect(),
            streams,
            sinks,
            queries: keys,
            failed,
            workers: self.workers(),
            notes: self.checkpoints.notes.clone(),
            pieces: BTreeMap::new(),
            generation: 0,
            previous_generation: None,
        };
        let contents =
            content_hash(&serde_json::to_vec(&manifest).map_err(|e| bad(&e.to_string()))?);
        self.checkpoints.last = self.intake.now();
        // The same manifest (its sequence and the pieces left out), no table or view changed,
        // no query that took anything in: the same checkpoint as the last.
        let idle = self.checkpoints.last_contents == Some(contents)
            && self.tables.tables_mut().all(|(_, t)| t.contents.unchanged())
            && self.tables.views().all(|(_, v)| v.lock().contents.unchanged())
            && self.dataflow.queries().iter().all(|q| !q.runner.changed());
        if unless_unchanged && idle {
            return Ok(None);
        }
        let sequence = self.checkpoints.sequence + 1;
        // Incremental checkpoints: a full checkpoint starts a generation; those after it write
        // only what changed, and name the files of the earlier ones for the rest.
        let full = self.checkpoints.generation.as_ref().is_none_or(Generation::is_complete);
        let mut w = Writing {
            sequence,
            earlier: if full { BTreeMap::new() } else { self.checkpoints.pieces.clone() },
            pieces: BTreeMap::new(),
            sections: Vec::new(),
        };
        for (name, t) in self.tables.tables_mut() {
            w.relation(format!("table:{name}"), &mut t.contents, &t.schema)?;
        }
        for (name, v) in self.tables.views() {
            let mut v = v.lock();
            let schema = v.schema.clone();
            w.relation(format!("view:{name}"), &mut v.contents, &schema)?;
        }
        // A query that took nothing in since is not written; one whose operators all record
        // their changes writes those; the others are written whole.
        for q in self.dataflow.queries_mut() {
            let Some(key) = q.target.key() else { continue };
            let name = format!("query:{key}");
            if w.builds_on(&name) {
                if !q.runner.changed() {
                    w.keep(name);
                    continue;
                }
                if let Some(bytes) = q.runner.save_changes()? {
                    w.changes(name, bytes);
                    continue;
                }
            }
            let bytes = q.runner.save_state()?;
            q.runner.track_changes()?;
            w.whole(name, bytes);
        }
        let Writing { pieces, mut sections, .. } = w;
        manifest.sequence = sequence;
        manifest.pieces = pieces.clone();
        // The generation this checkpoint belongs to, and the one before it (kept on disk).
        let (start, previous) = match &self.checkpoints.generation {
            Some(g) if !full => (g.start, g.previous),
            Some(g) => (sequence, Some(g.start)),
            None => (sequence, self.checkpoints.kept_generation),
        };
        manifest.generation = start;
        manifest.previous_generation = previous;
        let manifest = serde_json::to_vec(&manifest).map_err(|e| bad(&e.to_string()))?;
        let bytes: usize = sections.iter().map(|(_, b)| b.len()).sum();
        sections.insert(0, ("manifest".into(), manifest));
        if let Err(e) = store::write(&dir, sequence, sections) {
            // The operators' changes were taken: what follows is written whole, and this
            // generation stays the one before it.
            if let Some(g) = self.checkpoints.generation.take() {
                self.checkpoints.kept_generation = Some(g.start);
            }
            self.checkpoints.pieces.clear();
            return Err(e);
        }
        // Kept: the newest checkpoints, and every file of this generation and of the one
        // before it, so that a damaged file of this one falls back to the last of that one.
        let generation = match self.checkpoints.generation.take() {
            Some(mut g) if !full => {
                g.written += bytes;
                g.checkpoints += 1;
                g
            }
            _ => Generation { start: sequence, previous, size: bytes, written: 0, checkpoints: 0 },
        };
        store::prune(&dir, KEEP, generation.previous.unwrap_or(generation.start));
        self.checkpoints.generation = Some(generation);
        self.checkpoints.sequence = sequence;
        self.checkpoints.last_contents = Some(contents);
        self.checkpoints.pieces = pieces;
        // What was logged is in the checkpoint now: a new log follows it. The logs after the
        // checkpoints still kept stay, for a recovery that falls back to an older one.
        if let Some(sync) = self.wal() {
            self.checkpoints.wal = Some(wal::Wal::start(&dir, sequence, sync)?);
        }
        if let Some(oldest) = store::oldest(&dir) {
            wal::prune(&dir, oldest);
        }
        Ok(Some(sequence))
    }

    /// Puts a stored checkpoint into this fresh engine; returns the parked subscribers' texts.
    fn restore(&mut self, loaded: Loaded) -> Result<Vec<String>> {
        let Loaded { manifest, mut whole, changes } = loaded;
        self.continue_generation(&manifest);
        // Any worker count restores on any other: each query runs as it was saved (on this
        // thread if on one worker, else as its parts; see `Dataflow::runner_for`).
        self.base_dir = manifest.base_dir.clone();
        self.checkpoints.notes = manifest.notes.clone();
        // Sinks reopen their files at the committed position rather than truncating them.
        self.checkpoints.resume_sinks = manifest.sinks.clone();
        self.checkpoints.replaying = true;
        let replayed = manifest.statements.iter().try_for_each(|s| {
            self.execute(s).map(|_| ()).map_err(|e| bad(&format!("replaying '{s}': {e}")))
        });
        self.checkpoints.replaying = false;
        replayed?;
        self.checkpoints.resume_sinks.clear();
        // What had failed stays failed: its query does not start over from here.
        for (key, message) in &manifest.failed {
            let e = WeirError::exec(message.clone());
            if let Some(name) = key.strip_prefix("sink:") {
                let sink = self.sinks.get(name).ok_or_else(|| bad(&format!("no sink '{name}'")))?;
                sink.lock().failed = Some(e);
                self.dataflow.stop_where(|q| q.target == Target::Sink(name.to_string()));
            } else if let Some(name) = key.strip_prefix("view:") {
                if let Some((_, v)) = self.tables.views().find(|(n, _)| n.as_str() == name) {
                    v.lock().failed = Some(e);
                }
                self.dataflow.stop_where(|q| q.target == Target::View(name.to_string()));
            }
        }
        self.clock = manifest.clock;
        let now = self.intake.now();
        let base = self.base_dir.clone();
        for (name, j) in manifest.streams {
            let st =
                self.intake.get_mut(&name).ok_or_else(|| bad(&format!("no stream '{name}'")))?;
            st.watermark = j
                .watermark
                .parse::<Watermark>()
                .map_err(|_| bad(&format!("stream '{name}': the watermark is not a number")))?;
            st.max_seen = j.max_seen;
            st.closed = j.closed;
            st.accepted = j.accepted;
            st.late = j.late;
            st.bad = j.bad;
            st.policy = j.policy;
            st.last_activity = now;
            st.buffered = Buffered::from_entries(&j.buffered);
            st.source = match j.source {
                None => None,
                Some(src) => {
                    let mut reader = SourceReader::new(
                        src.spec,
                        st.def.input_schema(),
                        st.def.input_time_column(),
                    )
                    .map_err(|e| bad(&e))?;
                    reader
                        .restore(&base, src.position)
                        .map_err(|e| bad(&format!("stream '{name}': {e}")))?;
                    Some(SourceState { reader, failed: src.failed })
                }
            };
        }
        // Tables and views: their whole contents, then their changes in order.
        let relation = |name: String, c: &mut Contents, schema: &SchemaRef| -> Result<()> {
            if let Some(bytes) = whole.get(&name) {
                contents_from_ipc(c, schema, bytes)?;
            }
            for bytes in changes.get(&name).into_iter().flatten() {
                changes_from_ipc(c, schema, bytes)?;
            }
            Ok(())
        };
        // What is restored is what the checkpoint holds: changes are recorded from here.
        for (name, t) in self.tables.tables_mut() {
            relation(format!("table:{name}"), &mut t.contents, &t.schema)?;
            t.contents.track_changes();
        }
        for (name, v) in self.tables.views() {
            let mut v = v.lock();
            let schema = v.schema.clone();
            relation(format!("view:{name}"), &mut v.contents, &schema)?;
            v.contents.track_changes();
        }
        // Running queries: fresh runners, their state put back: whole, then the changes
        // written after it, in order.
        let mut parked = Vec::new();
        for key in manifest.queries {
            let name = format!("query:{key}");
            let bytes =
                whole.remove(&name).ok_or_else(|| bad(&format!("no state for query '{key}'")))?;
            let restore = |runner: &mut weir_workers::Runner| -> Result<()> {
                runner.restore_state(&bytes)?;
                for c in changes.get(&name).into_iter().flatten() {
                    runner.restore_changes(c)?;
                }
                Ok(())
            };
            if let Some(sql) = key.strip_prefix("sub:") {
                let plan = self.subscription_plan(sql)?;
                let recipe = self.recipe(&self.subscription_text(sql))?;
                let mut runner = self.dataflow.runner_for(&plan, recipe.as_deref(), &bytes)?;
                restore(&mut runner)?;
                let target = Target::Subscriber(Some(sql.to_string()));
                self.dataflow.add(runner, &plan, recipe, target, None, Vec::new())?;
                parked.push(sql.to_string());
                continue;
            }
            let (plan, recipe) = self
                .dataflow
                .queries()
                .iter()
                .find(|q| q.target.key().as_deref() == Some(key.as_str()))
                .map(|q| (q.plan.clone(), q.recipe.clone()))
                .ok_or_else(|| bad(&format!("no query for '{key}'")))?;
            let mut runner = self.dataflow.runner_for(&plan, recipe.as_deref(), &bytes)?;
            restore(&mut runner)?;
            self.dataflow.replace_runner(&key, runner)?;
        }
        self.run_queries();
        Ok(parked)
    }

    /// After a restore: the checkpoints that follow go on with the restored one's generation
    /// (its pieces, and the sizes of its files so far), so the first is not full. A checkpoint
    /// of format 2 has none: the next is full, and keeps the restored one.
    fn continue_generation(&mut self, manifest: &Manifest) {
        let here = manifest.sequence;
        let dir = self.checkpoints.data_dir.clone();
        let size = |seq: u64| {
            let path = dir.as_ref().map(|d| store::path_of(d, seq));
            path.and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len() as usize)
        };
        let start = manifest.generation;
        if manifest.pieces.is_empty() || start == 0 || start > here {
            self.checkpoints.kept_generation = Some(start);
            return;
        }
        let later: Vec<u64> = (start + 1..=here).filter(|&s| size(s) > 0).collect();
        self.checkpoints.pieces = manifest.pieces.clone();
        self.checkpoints.generation = Some(Generation {
            start,
            previous: manifest.previous_generation,
            size: size(start),
            written: later.iter().map(|&s| size(s)).sum(),
            checkpoints: later.len(),
        });
    }

    /// Takes over a subscriber's query restored from a checkpoint, by its text (as it was
    /// subscribed). Returns the subscription and the instant it resumes from: output at
    /// earlier instants was delivered before the crash and is not repeated; output from this
    /// instant on may repeat what was delivered after the checkpoint.
    pub fn resume(&mut self, sql: &str) -> Result<(Subscription, Option<Time>)> {
        let text = sql.trim().trim_end_matches(';').trim();
        let resumed = self.dataflow.resume(text)?;
        self.run_queries();
        Ok(resumed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Periodic checkpoints are written while something changes and not while the engine is
    /// idle; an explicit CHECKPOINT is always written.
    #[test]
    fn an_idle_engine_writes_no_periodic_checkpoints() {
        let dir = std::env::temp_dir().join(format!("weir-ckpt-idle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut e, _) = Engine::open(&dir).unwrap();
        e.use_manual_processing_time();
        e.set_checkpoint_interval(Some(WallDuration::from_secs(1)));
        e.execute(
            "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t); \
             CREATE VIEW c AS SELECT k, COUNT(*) AS n FROM s [UNBOUNDED] GROUP BY k",
        )
        .unwrap();
        let newest = || store::latest(&dir).unwrap().0.map(|s| s.sequence);
        let tick = |e: &mut Engine| {
            e.advance_processing_time(WallDuration::from_secs(2));
            e.poll_sources(1 << 20).unwrap();
        };
        tick(&mut e);
        assert_eq!(newest(), Some(1));
        for _ in 0..3 {
            tick(&mut e);
        }
        assert_eq!(newest(), Some(1), "nothing changed: no new checkpoint");
        e.execute("INSERT INTO s VALUES ('a', 1), ('a', 2)").unwrap();
        tick(&mut e);
        assert_eq!(newest(), Some(2));
        tick(&mut e);
        assert_eq!(newest(), Some(2));
        e.execute("ADVANCE s TO 5").unwrap();
        tick(&mut e);
        assert_eq!(newest(), Some(3), "a watermark that moved is a change");
        assert_eq!(e.checkpoint().unwrap(), 4, "CHECKPOINT always writes");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A checkpoint taken with a relative base directory stores absolute paths (the base and
    /// the source's files), so a restart from another working directory finds them.
    #[test]
    fn checkpoints_store_absolute_paths() {
        let rel = std::path::PathBuf::from(format!("weir-ckpt-rel-{}", std::process::id()));
        std::fs::create_dir_all(&rel).unwrap();
        std::fs::write(rel.join("in.csv"), "v,t\n1,1\n2,2\n").unwrap();
        let state = std::env::temp_dir().join(format!("weir-ckpt-abs-{}", std::process::id()));
        let (mut e, _) = Engine::open(&state).unwrap();
        e.set_base_dir(&rel);
        e.execute("CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t) WITH (source = 'file', path = 'in.csv')").unwrap();
        let _sub = e.subscribe("SELECT v FROM s").unwrap();
        e.run_sources().unwrap();
        e.checkpoint().unwrap();
        let (stored, _) = store::latest(&state).unwrap();
        let manifest: Manifest =
            serde_json::from_slice(stored.unwrap().section("manifest").unwrap()).unwrap();
        assert!(manifest.base_dir.is_absolute(), "{:?}", manifest.base_dir);
        let files = &manifest.streams["s"].source.as_ref().unwrap().position.files;
        assert!(!files.is_empty() && files.iter().all(|f| f.is_absolute()), "{files:?}");
        let _ = std::fs::remove_dir_all(&rel);
        let _ = std::fs::remove_dir_all(&state);
    }

    /// A manifest with a field missing is refused, not read as zeros.
    #[test]
    fn a_manifest_missing_a_field_is_refused() {
        let full = r#"{"sequence":1,"clock":5,"base_dir":"","statements":[],
            "streams":{"s":{"watermark":"3","max_seen":4,"closed":false,"accepted":2,"late":0,
            "bad":0,"buffered":[[4,1]],"policy":{"late":"route","bad_rows":"fail",
            "idle_timeout":null},"source":null}},"sinks":{"k":10},"queries":[],"failed":{}}"#;
        let m: Manifest = serde_json::from_str(full).unwrap();
        assert_eq!(m.streams["s"].buffered, [(4, 1)]);
        assert_eq!(m.sinks["k"], 10);
        let missing = full.replace(r#""accepted":2,"#, "");
        let err = serde_json::from_str::<Manifest>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `accepted`"), "{err}");
        let unknown = full.replace(r#""clock":5,"#, r#""clock":5,"extra":1,"#);
        assert!(serde_json::from_str::<Manifest>(&unknown).is_err());
    }
}
