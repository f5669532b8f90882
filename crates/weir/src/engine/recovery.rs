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
//! Recovery replays the catalog into a fresh engine (sinks reopen their files cut back to the
//! committed position instead of truncating them), then puts every piece of state back and
//! rewinds the sources. Because evaluation is deterministic, what follows is byte for byte
//! what an uninterrupted run would have produced. Subscribers' queries come back parked: an
//! application takes one over with [`Engine::resume`] and is told the instant it resumes
//! from.

use std::path::PathBuf;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration as WallDuration;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use serde_json::{json, Value as Json};
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError};
use weir_exec::QueryRunner;

use super::{Contents, Engine, RunningQuery, Sink, SourceState};
use crate::checkpoint::store;
use crate::ingest::{BadRowPolicy, LatePolicy, StreamPolicy};
use crate::source::{Format, Input, SourcePosition, SourceReader, SourceSpec};
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
}

fn bad(what: &str) -> WeirError {
    WeirError::Execution(format!("checkpoint: {what}"))
}

/// A batch as Arrow IPC stream bytes.
fn to_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(out)
}

fn from_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    let reader = arrow::ipc::reader::StreamReader::try_new(bytes, None)
        .map_err(|e| bad(&format!("unreadable state: {e}")))?;
    reader.map(|b| b.map_err(|e| bad(&format!("unreadable state: {e}")))).collect()
}

/// A relation's contents as rows plus a `__weir_count` column.
fn contents_to_ipc(c: &Contents, schema: &arrow::datatypes::SchemaRef) -> Result<Vec<u8>> {
    let snap = c.snapshot(schema, 0)?;
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("__weir_count", DataType::Int64, false));
    let mut cols = snap.data.columns().to_vec();
    cols.push(Arc::new(Int64Array::from(snap.diffs.clone())));
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(snap.diffs.len())),
    )?;
    to_ipc(&batch)
}

fn contents_from_ipc(
    c: &mut Contents,
    schema: &arrow::datatypes::SchemaRef,
    bytes: &[u8],
) -> Result<()> {
    for batch in from_ipc(bytes)? {
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
        c.apply(&ChangeBatch::new(data, times, counts))?;
    }
    Ok(())
}

fn spec_to_json(spec: &SourceSpec) -> Json {
    let (kind, path, follow) = match &spec.input {
        Input::Files { path, follow } => ("file", Some(path.clone()), *follow),
        Input::Stdin => ("stdin", None, false),
    };
    let format = match spec.format {
        Format::Csv { header, delimiter } => {
            json!({"kind": "csv", "header": header, "delimiter": delimiter})
        }
        Format::JsonLines => json!({"kind": "json"}),
    };
    json!({"input": kind, "path": path, "follow": follow, "format": format,
           "epoch": spec.epoch_unit})
}

fn spec_from_json(j: &Json) -> Result<SourceSpec> {
    let input = match j["input"].as_str() {
        Some("file") => Input::Files {
            path: j["path"].as_str().ok_or_else(|| bad("a file source without a path"))?.into(),
            follow: j["follow"].as_bool().unwrap_or(false),
        },
        Some("stdin") => Input::Stdin,
        _ => return Err(bad("an unknown source kind")),
    };
    let f = &j["format"];
    let format = match f["kind"].as_str() {
        Some("csv") => Format::Csv {
            header: f["header"].as_bool().unwrap_or(true),
            delimiter: f["delimiter"].as_u64().and_then(|d| u8::try_from(d).ok()).unwrap_or(b','),
        },
        Some("json") => Format::JsonLines,
        _ => return Err(bad("an unknown source format")),
    };
    let epoch_unit = j["epoch"].as_str().unwrap_or("s").to_string();
    Ok(SourceSpec { input, format, epoch_unit })
}

fn policy_to_json(p: &StreamPolicy) -> Json {
    json!({
        "late": if p.late == LatePolicy::Error { "error" } else { "route" },
        "bad_rows": if p.bad_rows == BadRowPolicy::Skip { "skip" } else { "fail" },
        "idle_timeout_us": p.idle_timeout.map(|d| d.as_micros() as u64),
    })
}

fn policy_from_json(j: &Json) -> StreamPolicy {
    StreamPolicy {
        late: if j["late"] == "error" { LatePolicy::Error } else { LatePolicy::Route },
        bad_rows: if j["bad_rows"] == "skip" { BadRowPolicy::Skip } else { BadRowPolicy::Fail },
        idle_timeout: j["idle_timeout_us"].as_u64().map(WallDuration::from_micros),
    }
}

fn position_to_json(p: &SourcePosition) -> Json {
    json!({
        "files": p.files.iter().map(|f| f.to_string_lossy().into_owned()).collect::<Vec<_>>(),
        "file": p.file, "offset": p.offset, "line": p.line,
        "header": p.header.as_ref().map(|h| String::from_utf8_lossy(h).into_owned()),
        "records": p.records_read, "started": p.started, "ended": p.ended,
    })
}

fn position_from_json(j: &Json) -> SourcePosition {
    SourcePosition {
        files: j["files"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f.as_str()).map(PathBuf::from).collect())
            .unwrap_or_default(),
        file: j["file"].as_u64().unwrap_or(0) as usize,
        offset: j["offset"].as_u64().unwrap_or(0),
        line: j["line"].as_u64().unwrap_or(1),
        header: j["header"].as_str().map(|h| h.as_bytes().to_vec()),
        records_read: j["records"].as_u64().unwrap_or(0),
        started: j["started"].as_bool().unwrap_or(false),
        ended: j["ended"].as_bool().unwrap_or(false),
    }
}

fn watermark_to_json(w: Watermark) -> Json {
    Json::String(w.to_string())
}

fn watermark_from_json(j: &Json) -> Result<Watermark> {
    j.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| bad("a watermark is not a number"))
}

/// The key under which a running query's state is saved.
fn query_key(q: &RunningQuery) -> Option<String> {
    match &q.sink {
        Sink::View(v) => Some(format!("view:{v}")),
        Sink::File(s) => Some(format!("sink:{s}")),
        Sink::Subscriber(_) | Sink::Parked => q.sql.as_ref().map(|sql| format!("sub:{sql}")),
    }
}

impl Engine {
    /// An engine that keeps its checkpoints in `dir`, restored from the newest intact one
    /// there (or empty if there is none). Damaged checkpoints are skipped with a warning; one
    /// written by an incompatible version of Weir is refused with an error.
    pub fn open(dir: impl Into<PathBuf>) -> Result<(Engine, Recovery)> {
        let dir = dir.into();
        let (stored, warnings) = store::latest(&dir)?;
        let mut engine = Engine::new();
        engine.data_dir = Some(dir);
        let Some(stored) = stored else {
            return Ok((engine, Recovery { warnings, ..Recovery::default() }));
        };
        engine.checkpoint_sequence = stored.sequence;
        let parked = engine.restore(&stored)?;
        Ok((engine, Recovery { checkpoint: Some(stored.sequence), warnings, parked }))
    }

    /// Keep checkpoints in `dir` from now on (the API equivalent of `weir --data-dir` for an
    /// engine that starts empty).
    pub fn set_data_dir(&mut self, dir: impl Into<PathBuf>) {
        self.data_dir = Some(dir.into());
    }

    /// The directory checkpoints go to, if any.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.data_dir.as_deref()
    }

    /// Take a checkpoint every `interval` (processing time) while sources are read.
    pub fn set_checkpoint_interval(&mut self, interval: Option<WallDuration>) {
        self.checkpoint_interval = interval;
        self.last_checkpoint = self.processing.now();
    }

    /// Takes a checkpoint periodically (see [`Engine::set_checkpoint_interval`]).
    pub(super) fn maybe_checkpoint(&mut self) -> Result<()> {
        let (Some(interval), Some(_)) = (self.checkpoint_interval, &self.data_dir) else {
            return Ok(());
        };
        if self.processing.now().saturating_sub(self.last_checkpoint) >= interval {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Writes a checkpoint of the whole engine to its data directory; returns its sequence
    /// number. See the module docs for what it holds.
    pub fn checkpoint(&mut self) -> Result<u64> {
        let dir = self.data_dir.clone().ok_or_else(|| {
            WeirError::Execution(
                "no data directory: start Weir with --data-dir (or Engine::open) to checkpoint"
                    .into(),
            )
        })?;
        let mut sections: Vec<(String, Vec<u8>)> = Vec::new();
        let mut streams = serde_json::Map::new();
        for (name, st) in self.streams.iter().filter(|(_, s)| s.companion_of.is_none()) {
            let buffered: Vec<Json> =
                st.buffered.entries().iter().map(|(t, n)| json!([t, n])).collect();
            let source = st.source.as_ref().map(|s| {
                json!({"spec": spec_to_json(&s.reader.spec),
                       "position": position_to_json(&s.reader.position()),
                       "failed": s.failed})
            });
            streams.insert(
                name.clone(),
                json!({
                    "watermark": watermark_to_json(st.watermark),
                    "max_seen": st.max_seen, "closed": st.closed,
                    "accepted": st.accepted, "late": st.late, "bad": st.bad,
                    "buffered": buffered, "policy": policy_to_json(&st.policy),
                    "source": source,
                }),
            );
        }
        let mut sinks = serde_json::Map::new();
        for (name, k) in self.sinks.iter_mut() {
            let committed = k.file.sync()?;
            sinks.insert(name.clone(), json!({"committed": committed}));
        }
        for (name, t) in &self.tables {
            sections.push((format!("table:{name}"), contents_to_ipc(&t.contents, &t.def.schema)?));
        }
        for (name, v) in &self.views {
            if let Some(c) = &v.contents {
                sections
                    .push((format!("view:{name}"), contents_to_ipc(&c.contents, &v.def.schema)?));
            }
        }
        let mut queries = Vec::new();
        for q in &self.queries {
            let Some(key) = query_key(q) else { continue };
            queries.push(Json::String(key.clone()));
            sections.push((format!("query:{key}"), q.runner.save_state()?));
        }
        let sequence = self.checkpoint_sequence + 1;
        let manifest = json!({
            "sequence": sequence,
            "clock": self.clock,
            "base_dir": self.base_dir.to_string_lossy(),
            "statements": self.ddl.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>(),
            "streams": streams,
            "sinks": sinks,
            "queries": queries,
        });
        let manifest = serde_json::to_vec(&manifest).map_err(|e| bad(&e.to_string()))?;
        sections.insert(0, ("manifest".into(), manifest));
        store::write(&dir, sequence, &sections)?;
        store::prune(&dir, KEEP);
        self.checkpoint_sequence = sequence;
        self.last_checkpoint = self.processing.now();
        Ok(sequence)
    }

    /// Puts a stored checkpoint into this fresh engine; returns the parked subscribers' texts.
    fn restore(&mut self, stored: &store::Stored) -> Result<Vec<String>> {
        let manifest: Json =
            serde_json::from_slice(stored.section("manifest").ok_or_else(|| bad("no manifest"))?)
                .map_err(|e| bad(&format!("unreadable manifest: {e}")))?;
        self.base_dir = PathBuf::from(manifest["base_dir"].as_str().unwrap_or(""));
        // Sinks reopen their files at the committed position rather than truncating them.
        self.resume_sinks = manifest["sinks"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v["committed"].as_u64().map(|c| (k.clone(), c)))
                    .collect()
            })
            .unwrap_or_default();
        let statements = manifest["statements"].as_array().cloned().unwrap_or_default();
        for s in statements.iter().filter_map(|s| s.as_str()) {
            self.execute(s).map_err(|e| bad(&format!("replaying '{s}': {e}")))?;
        }
        self.resume_sinks.clear();
        self.clock = manifest["clock"].as_i64().unwrap_or(0);
        let now = self.processing.now();
        let base = self.base_dir.clone();
        if let Some(streams) = manifest["streams"].as_object() {
            for (name, j) in streams {
                let st = self
                    .streams
                    .get_mut(name)
                    .ok_or_else(|| bad(&format!("no stream '{name}'")))?;
                st.watermark = watermark_from_json(&j["watermark"])?;
                st.max_seen = j["max_seen"].as_i64();
                st.closed = j["closed"].as_bool().unwrap_or(false);
                st.accepted = j["accepted"].as_u64().unwrap_or(0);
                st.late = j["late"].as_u64().unwrap_or(0);
                st.bad = j["bad"].as_u64().unwrap_or(0);
                st.policy = policy_from_json(&j["policy"]);
                st.last_activity = now;
                let entries: Vec<(Time, u64)> = j["buffered"]
                    .as_array()
                    .map(|a| {
                        a.iter().filter_map(|p| Some((p[0].as_i64()?, p[1].as_u64()?))).collect()
                    })
                    .unwrap_or_default();
                st.buffered = super::Buffered::from_entries(&entries);
                st.source = match j["source"].as_object() {
                    None => None,
                    Some(src) => {
                        let spec = spec_from_json(&src["spec"])?;
                        let mut reader =
                            SourceReader::new(spec, st.def.schema.clone(), st.def.time_column)
                                .map_err(|e| bad(&e))?;
                        reader
                            .restore(&base, position_from_json(&src["position"]))
                            .map_err(|e| bad(&format!("stream '{name}': {e}")))?;
                        let failed = src["failed"].as_str().map(str::to_string);
                        Some(SourceState { reader, failed })
                    }
                };
            }
        }
        for (name, t) in self.tables.iter_mut() {
            if let Some(bytes) = stored.section(&format!("table:{name}")) {
                contents_from_ipc(&mut t.contents, &t.def.schema, bytes)?;
            }
        }
        for (name, v) in self.views.iter_mut() {
            if let (Some(c), Some(bytes)) =
                (v.contents.as_mut(), stored.section(&format!("view:{name}")))
            {
                contents_from_ipc(&mut c.contents, &v.def.schema, bytes)?;
            }
        }
        // Running queries: fresh runners, their state put back.
        let mut parked = Vec::new();
        for key in manifest["queries"].as_array().cloned().unwrap_or_default() {
            let Some(key) = key.as_str() else { continue };
            let bytes = stored
                .section(&format!("query:{key}"))
                .ok_or_else(|| bad(&format!("no state for query '{key}'")))?;
            if let Some(sql) = key.strip_prefix("sub:") {
                let plan = self.subscription_plan(sql)?;
                let mut runner = QueryRunner::new(&plan)?;
                runner.restore_state(bytes)?;
                let id = self.next_id;
                self.next_id += 1;
                let sql = Some(sql.to_string());
                self.queries.push(RunningQuery { id, runner, sink: Sink::Parked, plan, sql });
                parked.push(key["sub:".len()..].to_string());
                continue;
            }
            let q = self
                .queries
                .iter_mut()
                .find(|q| query_key(q).as_deref() == Some(key))
                .ok_or_else(|| bad(&format!("no query for '{key}'")))?;
            let mut runner = QueryRunner::new(&q.plan)?;
            runner.restore_state(bytes)?;
            q.runner = runner;
        }
        self.run_queries();
        Ok(parked)
    }

    /// Takes over a subscriber's query restored from a checkpoint, by its text (as it was
    /// subscribed). Returns the subscription and the instant it resumes from: output at
    /// earlier instants was delivered before the crash and is not repeated; output from this
    /// instant on may repeat what was delivered after the checkpoint.
    pub fn resume(&mut self, sql: &str) -> Result<(Subscription, Option<Time>)> {
        let text = sql.trim().trim_end_matches(';').trim();
        let q = self
            .queries
            .iter_mut()
            .find(|q| matches!(q.sink, Sink::Parked) && q.sql.as_deref() == Some(text))
            .ok_or_else(|| {
                WeirError::Execution(format!("no restored query waits to be resumed as '{text}'"))
            })?;
        let (tx, rx) = channel();
        q.sink = Sink::Subscriber(tx);
        let from = q.runner.last_instant().map(|t| t.saturating_add(1));
        let sub = super::subscription(q.id, &q.plan, rx);
        self.run_queries();
        Ok((sub, from))
    }

    /// The committed position to reopen sink `name` at, during recovery.
    pub(super) fn sink_resume_position(&self, name: &str) -> Option<u64> {
        self.resume_sinks.get(name).copied()
    }
}
