//! Intake: how streams take in elements. Per stream it owns the time (watermark, largest
//! timestamp, closed, idle), the declared policies, the accounting (accepted, late and bad
//! counts, elements buffered until every reader has passed them) and the source, if any.
//!
//! The decision about one arrival is [`admit::admit`], a function of the stream's definition,
//! policies, watermark and the arrival; [`Intake::admit`] applies it to the stream's state and
//! returns what the dataflow must be given: the accepted elements for `s`, the late ones for
//! `s$late`, the unreadable ones for `s$errors` (see [`companions`]).
//!
//! Time: `WATERMARK FOR ts AS ts - d` sets W = (largest timestamp seen) − d; a heartbeat
//! `ADVANCE s TO τ` completes τ (W ≥ τ+1); `CLOSE s` sets W = +∞. A stream silent for longer
//! than its idle timeout (processing time) is *idle*: its queries' frontiers leave it out, and
//! [`Intake::settle`] raises its watermark to what those queries have evaluated, so an element
//! below that is late when the stream speaks again, never silently out of order.

pub(crate) mod admit;
pub(crate) mod buffered;
pub mod companions;
pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration as WallDuration;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, TimestampMicrosecondArray};

use weir_common::{
    ChangeBatch, Result, Time, Watermark, WeirError, WATERMARK_CLOSED, WATERMARK_MIN,
};
use weir_sql::StreamDef;

pub use admit::format_watermark;
pub(crate) use admit::{batch_arrival, values_arrival, Arrival};
use buffered::Buffered;
pub(crate) use companions::clamp;
pub use companions::{companion_base, is_or_companion_of, ERRORS_SUFFIX, LATE_SUFFIX};
use companions::{errors_batch, errors_def, late_batch, late_def};
pub use policy::{BadRowPolicy, LatePolicy, StreamPolicy, StreamStats};

use crate::source::{SourceReader, SourceSpec};

/// One stream's intake state. See the module docs.
#[derive(Debug)]
pub(crate) struct StreamState {
    pub def: StreamDef,
    pub watermark: Watermark,
    pub max_seen: Option<Time>,
    pub closed: bool,
    pub accepted: u64,
    /// For a companion (`s$late`, `s$errors`): `s`. A companion's watermark is its base's.
    pub companion_of: Option<String>,
    pub policy: StreamPolicy,
    pub late: u64,
    pub bad: u64,
    /// Processing time of the last element or heartbeat, for the idle timeout.
    pub last_activity: WallDuration,
    pub idle: bool,
    /// Accepted elements by time, not yet released to every query reading the stream.
    pub buffered: Buffered,
    pub source: Option<SourceState>,
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

    /// Counts accepted elements: buffering, largest timestamp, activity.
    fn note_accepted(&mut self, times: &[Time], now: WallDuration) {
        let Some(max) = times.iter().copied().max() else { return };
        self.accepted += times.len() as u64;
        self.buffered.add(times);
        self.active(now);
        self.max_seen = Some(self.max_seen.map_or(max, |m| m.max(max)));
    }

    fn active(&mut self, now: WallDuration) {
        self.last_activity = now;
        self.idle = false;
    }

    /// The `PROCTIME()` stamp of an arrival when the processing clock reads `clock`: for a
    /// stream stamped on arrival, never below what it already stamped or completed (a
    /// restored watermark may be ahead of a manual clock that starts again at the epoch).
    fn arrival_stamp(&self, clock: Time) -> Time {
        if !self.def.stamped_on_arrival() {
            return clock;
        }
        clock.max(self.max_seen.unwrap_or(Time::MIN)).max(clamp(self.watermark))
    }
}

/// An arrival's rows (in the stream's input schema, without its `PROCTIME()` column) with
/// that column, at position `p`, filled with `stamp`.
fn stamp_arrival(
    def: &StreamDef,
    data: &RecordBatch,
    p: usize,
    stamp: Time,
) -> Result<RecordBatch> {
    let n = data.num_rows();
    let mut cols: Vec<ArrayRef> = data.columns().to_vec();
    cols.insert(p, Arc::new(TimestampMicrosecondArray::from_value(stamp, n)));
    let options = RecordBatchOptions::new().with_row_count(Some(n));
    Ok(RecordBatch::try_new_with_options(def.schema.clone(), cols, &options)?)
}

/// A stream's source and whether it failed.
#[derive(Debug)]
pub(crate) struct SourceState {
    pub reader: SourceReader,
    pub failed: Option<String>,
}

impl SourceState {
    /// What it reads, how far, and whether it ended or failed, for statistics.
    fn describe(&self) -> String {
        let r = &self.reader;
        let mut text = format!("{}: {} records", r.spec.describe(), r.records_read);
        match r.bytes_total {
            Some(total) => text += &format!(", {} of {} bytes", r.bytes_read, total),
            None => text += &format!(", {} bytes", r.bytes_read),
        }
        if let Some(e) = &self.failed {
            text += &format!(", failed: {e}");
        } else if r.ended {
            text += ", ended";
        } else if !r.started() {
            text += ", waiting for a query";
        }
        text
    }
}

/// Processing (wall-clock) time, for idle timeouts and `PROCTIME()` stamps. Tests use a manual
/// clock.
#[derive(Debug)]
enum ProcessingClock {
    /// The machine's clock: monotonic time since the engine started, and the calendar time
    /// (since the Unix epoch) it started at.
    System { start: std::time::Instant, epoch_at_start: WallDuration },
    /// Moved only by [`Intake::advance_processing_time`]; it starts at the Unix epoch
    /// (1970-01-01 00:00:00), so a test's `PROCTIME()` stamps do not depend on when it ran.
    Manual(WallDuration),
}

impl Default for ProcessingClock {
    fn default() -> Self {
        let epoch_at_start =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        ProcessingClock::System { start: std::time::Instant::now(), epoch_at_start }
    }
}

impl ProcessingClock {
    /// Time since the clock started (the idle timeouts' measure).
    fn now(&self) -> WallDuration {
        match self {
            ProcessingClock::System { start, .. } => start.elapsed(),
            ProcessingClock::Manual(t) => *t,
        }
    }

    /// Calendar time now, in microseconds since the Unix epoch: the `PROCTIME()` stamp. It
    /// never goes back while the engine runs (the system variant counts monotonic time from
    /// its start).
    fn epoch_micros(&self) -> Time {
        let t = match self {
            ProcessingClock::System { start, epoch_at_start } => *epoch_at_start + start.elapsed(),
            ProcessingClock::Manual(t) => *t,
        };
        Time::try_from(t.as_micros()).unwrap_or(Time::MAX - 1)
    }
}

/// What one admitted arrival gives the dataflow.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// Changes to hand to the queries reading each stream (`s`, `s$late`, `s$errors`).
    pub forward: Vec<(String, ChangeBatch)>,
    /// The largest accepted timestamp, for the engine's clock.
    pub max_time: Option<Time>,
    /// The error of the record a policy refused (the records before it were admitted).
    pub fatal: Option<WeirError>,
}

/// Every stream's intake. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Intake {
    streams: BTreeMap<String, StreamState>,
    processing: ProcessingClock,
}

impl Intake {
    /// Registers a stream and its companions `s$late` and `s$errors`.
    pub fn add_stream(
        &mut self,
        def: StreamDef,
        policy: StreamPolicy,
        source: Option<SourceSpec>,
    ) -> Result<()> {
        let late = late_def(&def)?;
        let errors = errors_def(&def);
        let now = self.now();
        let name = def.name.clone();
        let mut st = StreamState::new(def, policy, now);
        if let Some(spec) = source {
            let reader = SourceReader::new(spec, st.def.input_schema(), st.def.input_time_column())
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

    /// The definitions of the companions `add_stream` would register for `def`.
    pub fn companion_defs(def: &StreamDef) -> Result<[StreamDef; 2]> {
        Ok([late_def(def)?, errors_def(def)])
    }

    /// Forgets a stream and its companions.
    pub fn remove_stream(&mut self, name: &str) {
        self.streams.retain(|n, s| n != name && s.companion_of.as_deref() != Some(name));
    }

    pub fn get(&self, name: &str) -> Option<&StreamState> {
        self.streams.get(name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut StreamState> {
        self.streams.get_mut(name)
    }

    /// Every stream, companions included, by name.
    pub fn streams(&self) -> impl Iterator<Item = (&String, &StreamState)> {
        self.streams.iter()
    }

    /// The stream `name` if elements may be appended to it (`written`: the name as given).
    pub fn writable(&self, name: &str, written: &str) -> Result<&StreamState> {
        let st = self
            .streams
            .get(name)
            .ok_or_else(|| WeirError::exec(format!("unknown stream '{written}'")))?;
        if let Some(base) = &st.companion_of {
            return Err(WeirError::exec(format!(
                "stream '{name}' is written by the engine from '{base}'; it cannot be appended to"
            )));
        }
        if st.closed {
            return Err(WeirError::exec(format!("stream '{name}' is closed")));
        }
        Ok(st)
    }

    /// Takes in an arrival at stream `name` (see [`admit::admit`]): counts what it accepted,
    /// routed and refused, moves the watermark, and returns what the dataflow must be given.
    /// An arrival refused whole (a push under a strict policy) changes nothing.
    pub fn admit(&mut self, name: &str, mut a: Arrival) -> Result<Admitted> {
        let now = self.now();
        let st =
            self.streams.get_mut(name).ok_or_else(|| WeirError::internal("stream vanished"))?;
        if let Some(p) = st.def.proctime {
            let stamp = st.arrival_stamp(self.processing.epoch_micros());
            a.data = stamp_arrival(&st.def, &a.data, p, stamp)?;
        }
        let origin = a.origin.clone();
        let before = admit::Progress { watermark: st.watermark, max_seen: st.max_seen };
        let adm = admit::admit(&st.def, &st.policy, before, a)?;
        st.note_accepted(&adm.accepted_times, now);
        st.watermark = st.watermark.max(adm.watermark);
        st.late += adm.missed.len() as u64;
        st.bad += adm.bad.len() as u64;
        if !adm.missed.is_empty() || !adm.bad.is_empty() {
            st.active(now);
        }
        let max_time = adm.accepted_times.iter().copied().max();
        let mut forward = Vec::new();
        if !adm.missed.is_empty() {
            let late_name = format!("{name}{LATE_SUFFIX}");
            if let Some(late) = self.streams.get(&late_name) {
                let batch = late_batch(&late.def, &adm.late, &adm.missed)?;
                let n = adm.missed.len();
                forward.push((late_name, ChangeBatch::new(batch, adm.missed, vec![1; n])));
            }
        }
        if !adm.accepted_times.is_empty() {
            let n = adm.accepted_times.len();
            forward.push((
                name.to_string(),
                ChangeBatch::new(adm.accepted, adm.accepted_times, vec![1; n]),
            ));
        }
        if !adm.bad.is_empty() {
            let errors_name = format!("{name}{ERRORS_SUFFIX}");
            if let Some(errors) = self.streams.get(&errors_name) {
                let batch = errors_batch(&errors.def, &origin, &adm.bad, &adm.detected_at)?;
                let n = adm.bad.len();
                forward.push((errors_name, ChangeBatch::new(batch, adm.detected_at, vec![1; n])));
            }
        }
        Ok(Admitted { forward, max_time, fatal: adm.fatal })
    }

    /// Heartbeat: instant `t` of stream `name` is complete.
    pub fn advance(&mut self, name: &str, t: Time) -> Result<()> {
        let now = self.now();
        let st = self
            .streams
            .get_mut(name)
            .ok_or_else(|| WeirError::exec(format!("unknown stream '{name}'")))?;
        st.watermark = st.watermark.max(t as Watermark + 1);
        st.active(now);
        Ok(())
    }

    /// End of input: the watermark becomes +∞. Companions end with their base, not alone.
    pub fn close(&mut self, name: &str, written: &str) -> Result<()> {
        if let Some(base) = self.streams.get(name).and_then(|s| s.companion_of.clone()) {
            return Err(WeirError::exec(format!(
                "stream '{name}' ends when '{base}' does; close '{base}' instead"
            )));
        }
        let st = self
            .streams
            .get_mut(name)
            .ok_or_else(|| WeirError::exec(format!("unknown stream '{written}'")))?;
        st.closed = true;
        st.watermark = WATERMARK_CLOSED;
        Ok(())
    }

    /// Closes every stream.
    pub fn close_all(&mut self) {
        for st in self.streams.values_mut() {
            st.closed = true;
            st.watermark = WATERMARK_CLOSED;
        }
    }

    /// The watermark of a stream (a companion has its base's).
    pub fn watermark(&self, name: &str) -> Option<Watermark> {
        self.input_time(name).map(|(w, _)| w)
    }

    /// The watermark and idleness that count for a query reading `name`: its own, or for a
    /// companion its base stream's.
    pub fn input_time(&self, name: &str) -> Option<(Watermark, bool)> {
        let st = self.streams.get(name)?;
        let base = st.companion_of.as_ref().and_then(|b| self.streams.get(b)).unwrap_or(st);
        Some((base.watermark, base.idle))
    }

    /// Follows the processing clock: marks streams idle whose idle timeout has passed without
    /// an element or heartbeat, and moves the watermark of every stream stamped on arrival
    /// (`PROCTIME()`) to the clock: every instant before now is complete. Returns the clock
    /// (as a `PROCTIME()` stamp) if some open stream is stamped on arrival.
    pub fn refresh_processing_time(&mut self) -> Option<Time> {
        let now = self.now();
        let stamp = self.processing.epoch_micros();
        let mut on_arrival = None;
        for st in self.streams.values_mut() {
            if let Some(timeout) = st.policy.idle_timeout {
                st.idle = !st.closed && now.saturating_sub(st.last_activity) >= timeout;
            }
            if st.def.stamped_on_arrival() && !st.closed {
                st.watermark = st.watermark.max(stamp as Watermark);
                on_arrival = Some(clamp(st.watermark));
            }
        }
        on_arrival
    }

    /// After the queries' frontiers are known: `readers` holds, per stream that some query
    /// reads, the smallest and largest frontier of those queries. An idle stream's watermark
    /// rises to the largest (what its readers evaluated is complete); buffered elements below
    /// the smallest are released; a stream no query reads buffers nothing.
    pub fn settle(&mut self, readers: &HashMap<String, (Watermark, Watermark)>) {
        for (name, &(_, largest)) in readers {
            let Some(base) = self.streams.get(name).map(|s| s.companion_of.clone()) else {
                continue;
            };
            let base = base.unwrap_or_else(|| name.clone());
            if let Some(st) = self.streams.get_mut(&base).filter(|s| s.idle) {
                st.watermark = st.watermark.max(largest);
            }
        }
        for (name, st) in self.streams.iter_mut() {
            match readers.get(name) {
                Some(&(f, _)) if f < WATERMARK_CLOSED => st.buffered.release(clamp(f)),
                _ => st.buffered.clear(),
            }
        }
    }

    /// Statistics of every stream (companions are counted in their base's `late` and `bad`).
    pub fn stats(&self) -> Vec<StreamStats> {
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
                source: s.source.as_ref().map(SourceState::describe),
            })
            .collect()
    }

    /// Declares or replaces a stream's policies.
    pub fn set_policy(&mut self, name: &str, written: &str, policy: StreamPolicy) -> Result<()> {
        self.writable(name, written)?;
        if let Some(st) = self.streams.get_mut(name) {
            st.policy = policy;
        }
        Ok(())
    }

    /// Attaches a source to a stream (replacing one not yet started).
    pub fn set_source(&mut self, name: &str, written: &str, spec: SourceSpec) -> Result<()> {
        self.writable(name, written)?;
        let st = self.streams.get_mut(name).ok_or_else(|| WeirError::internal("stream"))?;
        if st.source.as_ref().is_some_and(|s| s.reader.started()) {
            return Err(WeirError::exec(format!("stream '{name}' is already reading its source")));
        }
        let reader = SourceReader::new(spec, st.def.input_schema(), st.def.input_time_column())
            .map_err(WeirError::plan)?;
        st.source = Some(SourceState { reader, failed: None });
        Ok(())
    }

    pub fn source_mut(&mut self, name: &str) -> Option<&mut SourceState> {
        self.streams.get_mut(name).and_then(|s| s.source.as_mut())
    }

    /// The streams whose source has neither ended nor failed.
    pub fn live_sources(&self) -> Vec<String> {
        self.streams
            .iter()
            .filter(|(_, s)| {
                s.source.as_ref().is_some_and(|src| src.failed.is_none() && !src.reader.ended)
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Processing time now (see [`Intake::use_manual_processing_time`]).
    pub fn now(&self) -> WallDuration {
        self.processing.now()
    }

    /// Idle timeouts and `PROCTIME()` stamps follow [`Intake::advance_processing_time`]
    /// instead of the wall clock, from the Unix epoch on. Every stream counts as active now.
    pub fn use_manual_processing_time(&mut self) {
        self.processing = ProcessingClock::Manual(WallDuration::ZERO);
        for st in self.streams.values_mut() {
            st.last_activity = WallDuration::ZERO;
        }
    }

    pub fn advance_processing_time(&mut self, by: WallDuration) {
        if let ProcessingClock::Manual(t) = &mut self.processing {
            *t += by;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use weir_common::TimeDomain;

    use super::*;

    fn intake(policy: StreamPolicy) -> Intake {
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, true)]));
        let def = StreamDef {
            name: "s".into(),
            schema,
            time_column: 0,
            domain: TimeDomain::Ticks,
            watermark_delay: 1,
            primary_key: vec![],
            row_kind: None,
            proctime: None,
        };
        let mut i = Intake::default();
        i.use_manual_processing_time();
        i.add_stream(def, policy, None).unwrap();
        i
    }

    fn times(i: &Intake, ts: &[i64]) -> Arrival {
        let schema = i.get("s").unwrap().def.schema.clone();
        let data =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ts.to_vec()))]).unwrap();
        Arrival::pushed(data, "push")
    }

    /// The admitted changes go to `s` and `s$late`; counters and watermark follow.
    #[test]
    fn admits_accepts_and_routes_late_elements() {
        let mut i = intake(StreamPolicy::default());
        let a = times(&i, &[5, 9, 3]);
        let out = i.admit("s", a).unwrap();
        let routed: Vec<(&str, Vec<Time>)> =
            out.forward.iter().map(|(n, b)| (n.as_str(), b.times.clone())).collect();
        assert_eq!(routed, [("s$late", vec![8]), ("s", vec![5, 9])]);
        assert_eq!(out.max_time, Some(9));
        let st = i.get("s").unwrap();
        assert_eq!((st.accepted, st.late, st.bad, st.watermark), (2, 1, 0, 8));
        assert_eq!(i.watermark("s$late"), Some(8), "a companion has its base's watermark");
        assert_eq!(i.stats()[0].buffered, 2);
    }

    #[test]
    fn companions_cannot_be_written_or_closed() {
        let mut i = intake(StreamPolicy::default());
        assert!(i.writable("s$late", "s$late").unwrap_err().to_string().contains("written by"));
        assert!(i.close("s$errors", "s$errors").unwrap_err().to_string().contains("close 's'"));
        i.close("s", "s").unwrap();
        assert!(i.writable("s", "S").unwrap_err().to_string().contains("closed"));
        assert_eq!(i.watermark("s$late"), Some(WATERMARK_CLOSED));
    }

    /// An idle stream rises to the largest frontier of its readers; buffered elements are
    /// released below the smallest.
    #[test]
    fn idle_streams_rise_to_their_readers_frontier() {
        let mut i = intake(StreamPolicy {
            idle_timeout: Some(WallDuration::from_secs(5)),
            ..Default::default()
        });
        let a = times(&i, &[2, 4]);
        i.admit("s", a).unwrap();
        i.advance_processing_time(WallDuration::from_secs(6));
        i.refresh_processing_time();
        assert_eq!(i.input_time("s"), Some((3, true)));
        let readers = HashMap::from([("s".to_string(), (3, 10))]);
        i.settle(&readers);
        assert_eq!(i.watermark("s"), Some(10));
        assert_eq!(i.stats()[0].buffered, 1, "4 is not below the smallest frontier");
        // A late element after the rise goes to s$late.
        let a = times(&i, &[7]);
        let out = i.admit("s", a).unwrap();
        assert_eq!(out.forward[0].0, "s$late");
        assert!(!i.get("s").unwrap().idle, "speaking again ends idleness");
    }
}
