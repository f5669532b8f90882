//! Running a query through the embedding API and measuring it.
//!
//! [`run`] creates a fresh [`Engine`], the three NEXMark streams and one continuous query, then
//! feeds events in chunks: each chunk's events of every stream the query reads are pushed with
//! [`Engine::push`] (streams the query does not read are not pushed, but their events count,
//! as in the reference harnesses), and the subscription is polled after each push. At the end
//! every stream is closed and the last output polled. Only the time spent in the engine (push,
//! poll, close, and in file modes reading and parsing the files) is counted; generating events
//! in memory is not.
//!
//! Latency (memory mode): an output at instant τ is caused by the first chunk holding an event
//! stamped after τ (the event that completed instant τ: a watermark equal to the largest
//! timestamp completes the instants below it); its latency is the time from the
//! start of that chunk's push to the poll that returned the output. One sample per output
//! instant.
//!
//! [`paced`] measures latency as a live source sees it: chunks arrive on a schedule (a fixed
//! rate of events per second of wall-clock time), and an output's latency runs from the
//! scheduled arrival of the chunk that caused it, not from when the driver got round to
//! pushing it, so a run that falls behind its schedule shows the delay it built up
//! (coordinated omission corrected).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow::array::{Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema};
use weir::{ChangeBatch, Engine, Subscription};

use crate::files::{read_stream, BatchReader, Format};
use crate::generator::{Config, Generator};
use crate::queries::{Params, Query};
use weir_common::rng::SplitMix64;

/// Where events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Generated in memory, chunk by chunk.
    Memory,
    /// Read from files written beforehand (see [`crate::files`]).
    Files(Format, PathBuf),
}

/// One benchmark run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub query: Query,
    pub events: u64,
    /// Events generated (or rows read per file) per chunk.
    pub chunk: usize,
    pub generator: Config,
    pub params: Params,
    pub input: Input,
    /// Timely workers the query runs on (1: the engine's thread).
    pub workers: usize,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub query: Query,
    pub input: String,
    pub events: u64,
    pub seconds: f64,
    pub outputs: u64,
    pub peak_rss_mb: f64,
    /// p50 and p99 latency (memory mode), if there was output.
    pub latency: Option<(Duration, Duration)>,
    /// On several workers: rows and bytes sent from one worker to another
    /// ([`weir::Engine::worker_traffic`]).
    pub traffic: Option<(u64, u64)>,
}

impl Report {
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.seconds.max(1e-9)
    }

    /// One line: query, input, events, seconds, events/s, peak RSS, latency, outputs.
    pub fn line(&self) -> String {
        let lat = match self.latency {
            Some((p50, p99)) => format!(
                "p50 {:.2} ms  p99 {:.2} ms",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            ),
            None => "latency -".into(),
        };
        let mut line = format!(
            "{:<3} {:<6} events {:>10}  {:>8.3} s  {:>12.0} events/s  peak RSS {:>7.1} MB  {lat}  outputs {}",
            self.query.name(),
            self.input,
            self.events,
            self.seconds,
            self.events_per_sec(),
            self.peak_rss_mb,
            self.outputs
        );
        if let Some((rows, bytes)) = self.traffic {
            let per = |n: u64| n as f64 / self.events.max(1) as f64;
            line.push_str(&format!(
                "  exchanged {:.2} rows/event {:.1} B/event",
                per(rows),
                per(bytes)
            ));
        }
        line
    }
}

/// The process's peak resident set size in MB (`VmHWM` in `/proc/self/status`; 0 if unknown).
pub fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The CPU time the process has used, every thread's, in seconds (`utime` + `stime` of
/// `/proc/self/stat`, in Linux's fixed 100 ticks a second; 0 if unknown).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(14) + ticks(15)) / 100.0
}

/// Resets the peak RSS counter (Linux: writing 5 to `/proc/self/clear_refs`), so that each run
/// of `--query all` reports its own peak. Best effort.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Output counting and latency samples.
struct Sink<'a> {
    sub: &'a Subscription,
    outputs: u64,
    /// (largest timestamp in the chunk, when its push started), in chunk order.
    chunks: Vec<(i64, Instant)>,
    /// Latencies, each with the number of output instants that had it (the instants of one
    /// poll that one chunk caused share a latency: one entry, not one per instant, which
    /// would grow by an entry per event inside the timed part of the run).
    samples: Vec<(Duration, u64)>,
    measure_latency: bool,
}

impl Sink<'_> {
    fn poll(&mut self) -> Result<()> {
        let batches = self.sub.poll()?;
        if batches.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        for b in &batches {
            self.outputs += b.diffs.iter().map(|d| d.unsigned_abs()).sum::<u64>();
            if self.measure_latency {
                self.sample(b, now);
            }
        }
        Ok(())
    }

    fn sample(&mut self, b: &ChangeBatch, now: Instant) {
        let mut last: Option<(i64, usize)> = None;
        for &t in &b.times {
            if last.is_some_and(|(l, _)| l == t) {
                continue;
            }
            let i = chunk_completing(&self.chunks, t, last);
            last = Some((t, i));
            let start = self.chunks.get(i).or(self.chunks.last()).map(|c| c.1);
            if let Some(start) = start {
                let latency = now.saturating_duration_since(start);
                match self.samples.last_mut() {
                    Some((l, n)) if *l == latency => *n += 1,
                    _ => self.samples.push((latency, 1)),
                }
            }
        }
    }

    fn latency(&mut self) -> Option<(Duration, Duration)> {
        let p = Percentiles::of(&mut self.samples)?;
        Some((p.p50, p.p99))
    }
}

/// The chunk that completes instant `t`: the first whose largest timestamp is after it (an
/// instant is complete once an event stamped after it has arrived: the watermark is the
/// largest timestamp, and instants below it are evaluated); `chunks.len()` if none is.
/// `chunks` ascend by their largest timestamp. `after` is the instant before `t` in the same
/// batch with its chunk: a batch's instants ascend, so the search steps forward from there
/// (a binary search per instant was most of q0's measured time, with an output instant per
/// event); without it, or for an instant before it, the search is binary.
fn chunk_completing(chunks: &[(i64, Instant)], t: i64, after: Option<(i64, usize)>) -> usize {
    match after {
        Some((l, mut i)) if l <= t => {
            while chunks.get(i).is_some_and(|(max, _)| *max <= t) {
                i += 1;
            }
            i
        }
        _ => chunks.partition_point(|(max, _)| *max <= t),
    }
}

/// Latency percentiles of a run's samples.
#[derive(Debug, Clone, Copy)]
pub struct Percentiles {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
}

impl Percentiles {
    /// The nearest-rank percentiles of `samples`, each (latency, how many times it was seen)
    /// (sorted in place); None if there are none.
    pub fn of(samples: &mut [(Duration, u64)]) -> Option<Percentiles> {
        samples.sort_unstable();
        let total: u64 = samples.iter().map(|(_, n)| n).sum();
        let last = samples.iter().rev().find(|(_, n)| *n > 0)?.0;
        let at = |q: f64| {
            let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
            let mut seen = 0;
            for &(d, n) in samples.iter() {
                seen += n;
                if seen >= rank {
                    return d;
                }
            }
            last
        };
        Some(Percentiles {
            samples: total as usize,
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: last,
        })
    }
}

/// The largest `date_time` of a NEXMark batch (column named `date_time`).
fn max_time(batch: &RecordBatch) -> Option<i64> {
    let col = batch.column_by_name("date_time")?;
    let a = col.as_any().downcast_ref::<TimestampMicrosecondArray>()?;
    arrow::compute::max(a)
}

fn first_time(batch: &RecordBatch) -> Option<i64> {
    let col = batch.column_by_name("date_time")?;
    let a = col.as_any().downcast_ref::<TimestampMicrosecondArray>()?;
    (!a.is_empty()).then(|| a.value(0))
}

/// Runs one query. See the module docs.
pub fn run(cfg: &RunConfig) -> Result<Report> {
    let mut engine = Engine::new();
    engine.set_workers(cfg.workers)?;
    engine.execute(cfg.query.ddl())?;
    if let Some(setup) = cfg.query.setup() {
        engine.execute(&setup).with_context(|| format!("setting up {}", cfg.query))?;
    }
    let sql = cfg.query.sql(&cfg.params);
    let sub = engine.subscribe(&sql).with_context(|| format!("starting {}: {sql}", cfg.query))?;
    let streams = cfg.query.streams();
    let mut sink = Sink {
        sub: &sub,
        outputs: 0,
        chunks: Vec::new(),
        samples: Vec::new(),
        // Output instants of processing time say nothing about which chunk caused them.
        measure_latency: cfg.input == Input::Memory && !cfg.query.on_processing_time(),
    };
    let mut busy = Duration::ZERO;
    let input_name;
    match &cfg.input {
        Input::Memory => {
            input_name = "memory".to_string();
            let mut g = Generator::new(cfg.generator.clone());
            let mut left = cfg.events;
            while left > 0 {
                let n = left.min(cfg.chunk as u64);
                left -= n;
                let b = g.next_events(n)?;
                let start = Instant::now();
                let max = g.time_of(g.events_so_far() - 1);
                sink.chunks.push((max, start));
                for s in streams {
                    if let Some(batch) = b.get(s).filter(|b| b.num_rows() > 0) {
                        engine.push(s, batch.clone())?;
                        sink.poll()?;
                    }
                }
                busy += start.elapsed();
            }
        }
        Input::Files(format, dir) => {
            input_name = format.extension().to_string();
            let start = Instant::now();
            let mut readers: Vec<(&str, BatchReader)> = streams
                .iter()
                .map(|s| Ok((*s, read_stream(dir, s, *format, cfg.chunk)?)))
                .collect::<Result<_>>()?;
            // Push the stream whose next batch starts earliest, so that every stream's
            // watermark keeps up and the query's frontier advances.
            let mut heads: Vec<Option<RecordBatch>> = Vec::new();
            for (_, r) in readers.iter_mut() {
                heads.push(r.next().transpose()?);
            }
            loop {
                let next = heads
                    .iter()
                    .enumerate()
                    .filter_map(|(i, h)| h.as_ref().map(|b| (first_time(b).unwrap_or(i64::MAX), i)))
                    .min();
                let Some((_, i)) = next else { break };
                if let Some(batch) = heads[i].take() {
                    if let Some(m) = max_time(&batch) {
                        sink.chunks.push((m, Instant::now()));
                    }
                    engine.push(readers[i].0, batch)?;
                    sink.poll()?;
                }
                heads[i] = readers[i].1.next().transpose()?;
            }
            busy += start.elapsed();
        }
    }
    let start = Instant::now();
    sink.chunks.push((i64::MAX, start));
    engine.close_all()?;
    sink.poll()?;
    busy += start.elapsed();
    Ok(Report {
        query: cfg.query,
        input: input_name,
        events: cfg.events,
        seconds: busy.as_secs_f64(),
        outputs: sink.outputs,
        peak_rss_mb: peak_rss_mb(),
        latency: sink.latency(),
        traffic: (cfg.workers > 1).then(|| engine.worker_traffic()),
    })
}

/// What a paced run measured (see [`paced`]).
#[derive(Debug, Clone)]
pub struct PacedReport {
    pub query: Query,
    pub events: u64,
    /// The schedule: events per second of wall-clock time, in chunks of `chunk` events.
    pub rate: f64,
    pub chunk: usize,
    /// The wall-clock time of the run, from the first chunk's arrival to the last output.
    pub seconds: f64,
    /// The longest a chunk's push started after its scheduled arrival.
    pub max_behind: Duration,
    pub outputs: u64,
    pub latency: Option<Percentiles>,
}

impl PacedReport {
    /// One line: query, schedule, events, percentiles, how far behind the schedule, outputs.
    pub fn line(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let lat = match &self.latency {
            Some(p) => format!(
                "p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms  ({} samples)",
                ms(p.p50),
                ms(p.p99),
                ms(p.p999),
                ms(p.max),
                p.samples
            ),
            None => "latency -".into(),
        };
        format!(
            "{:<3} paced {:.0} events/s in chunks of {}  events {}  {:.2} s  {lat}  behind schedule at most {:.3} ms  outputs {}",
            self.query.name(),
            self.rate,
            self.chunk,
            self.events,
            self.seconds,
            ms(self.max_behind),
            self.outputs
        )
    }
}

/// Runs one query with its events arriving at `rate` events per second of wall-clock time:
/// chunk i (of `cfg.chunk` events) is due at i·chunk/rate seconds after the start. The events
/// are generated before the clock starts. The driver waits for each chunk's time (sleeping,
/// then spinning the last stretch while it polls the output), pushes it and polls; an output
/// at instant τ gets one sample, from the scheduled arrival of the first chunk holding an
/// event stamped after τ to the poll that returned it. Memory input only; queries on
/// processing time are refused (their instants are not caused by a chunk).
pub fn paced(cfg: &RunConfig, rate: f64) -> Result<PacedReport> {
    anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--pace must be a positive rate");
    anyhow::ensure!(
        !cfg.query.on_processing_time(),
        "{} runs on processing time: its outputs are not caused by an event's arrival",
        cfg.query
    );
    let mut engine = Engine::new();
    engine.set_workers(cfg.workers)?;
    engine.execute(cfg.query.ddl())?;
    if let Some(setup) = cfg.query.setup() {
        engine.execute(&setup).with_context(|| format!("setting up {}", cfg.query))?;
    }
    let sql = cfg.query.sql(&cfg.params);
    let sub = engine.subscribe(&sql).with_context(|| format!("starting {}: {sql}", cfg.query))?;
    let streams = cfg.query.streams();
    // Every chunk, generated up front: (its largest timestamp, its batches of the query's
    // streams).
    let mut g = Generator::new(cfg.generator.clone());
    let mut chunks: Vec<(i64, Vec<(&str, RecordBatch)>)> = Vec::new();
    let mut left = cfg.events;
    while left > 0 {
        let n = left.min(cfg.chunk as u64);
        left -= n;
        let b = g.next_events(n)?;
        let max = g.time_of(g.events_so_far() - 1);
        let batches = streams
            .iter()
            .filter_map(|s| b.get(s).filter(|b| b.num_rows() > 0).map(|b| (*s, b.clone())))
            .collect();
        chunks.push((max, batches));
    }
    let mut sink = Sink {
        sub: &sub,
        outputs: 0,
        chunks: Vec::with_capacity(chunks.len() + 1),
        samples: Vec::new(),
        measure_latency: true,
    };
    let period = cfg.chunk as f64 / rate;
    let start = Instant::now();
    let mut max_behind = Duration::ZERO;
    for (i, (max, batches)) in chunks.into_iter().enumerate() {
        let due = start + Duration::from_secs_f64(i as f64 * period);
        // Sleep to within a millisecond of the arrival, then spin on the output.
        loop {
            let now = Instant::now();
            if now >= due {
                max_behind = max_behind.max(now - due);
                break;
            }
            if due - now > Duration::from_millis(1) {
                std::thread::sleep(due - now - Duration::from_millis(1));
            } else {
                sink.poll()?;
            }
        }
        sink.chunks.push((max, due));
        for (s, batch) in batches {
            engine.push(s, batch)?;
            sink.poll()?;
        }
    }
    let due = start + Duration::from_secs_f64(sink.chunks.len() as f64 * period);
    while Instant::now() < due {
        sink.poll()?;
    }
    sink.chunks.push((i64::MAX, due));
    engine.close_all()?;
    sink.poll()?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(PacedReport {
        query: cfg.query,
        events: cfg.events,
        rate,
        chunk: cfg.chunk,
        seconds,
        max_behind,
        outputs: sink.outputs,
        latency: Percentiles::of(&mut sink.samples),
    })
}

/// One point of the scaling benchmark.
#[derive(Debug, Clone)]
pub struct ScalingPoint {
    pub ratio: i64,
    pub range: i64,
    pub slide: i64,
    pub events: u64,
    /// Time to push every event and poll the output, window contents evolving as in a
    /// stream that never ends.
    pub steady_seconds: f64,
    /// Outputs while the events were pushed.
    pub steady_outputs: u64,
    /// Time of the final `CLOSE`, which slides the window until it is empty: w/s slides at
    /// once, an artefact of a finite run that grows with w/s (at w/s = 3600 it emits as many
    /// slides as 36 000 ticks of input would).
    pub drain_seconds: f64,
    pub drain_outputs: u64,
}

impl ScalingPoint {
    /// Engine time per event while events flow (the drain excluded; see
    /// [`ScalingPoint::drain_seconds`]).
    pub fn ns_per_event(&self) -> f64 {
        self.steady_seconds * 1e9 / self.events.max(1) as f64
    }

    pub fn line(&self) -> String {
        format!(
            "w/s {:>5}  [RANGE {} SLIDE {}]  events {}  {:.3} s  {:>8.1} ns/event  {:>10.0} events/s  outputs {}  drain {:.3} s  {} outputs",
            self.ratio,
            self.range,
            self.slide,
            self.events,
            self.steady_seconds,
            self.ns_per_event(),
            self.events as f64 / self.steady_seconds.max(1e-9),
            self.steady_outputs,
            self.drain_seconds,
            self.drain_outputs,
        )
    }
}

/// The scaling benchmark: `SELECT ISTREAM k, COUNT(*), MAX(v) FROM s [RANGE w SLIDE s] GROUP
/// BY k` over a tick stream with `per_tick` events per tick and `keys` keys, for each w/s ratio
/// (slide `slide` ticks). Counts only time in the engine, the final drain apart.
pub fn scaling(
    ratio: i64,
    slide: i64,
    events: u64,
    per_tick: u64,
    keys: u64,
    chunk: usize,
) -> Result<ScalingPoint> {
    let range = slide * ratio;
    let mut engine = Engine::new();
    engine.execute("CREATE STREAM s (k BIGINT, v BIGINT, t BIGINT, WATERMARK FOR t AS t)")?;
    let sub = engine.subscribe(&format!(
        "SELECT ISTREAM k, COUNT(*) AS n, MAX(v) AS top FROM s [RANGE {range} SLIDE {slide}] GROUP BY k"
    ))?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let mut rng = SplitMix64::new(7);
    let mut busy = Duration::ZERO;
    let mut outputs = 0u64;
    let mut next = 0u64;
    let per_tick = per_tick.max(1);
    while next < events {
        let n = (events - next).min(chunk as u64);
        let ks: Vec<i64> = (0..n).map(|_| rng.below(keys) as i64).collect();
        let vs: Vec<i64> = (0..n).map(|_| rng.below(1_000_000) as i64).collect();
        let ts: Vec<i64> = (next..next + n).map(|i| (i / per_tick) as i64).collect();
        next += n;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ks)),
                Arc::new(Int64Array::from(vs)),
                Arc::new(Int64Array::from(ts)),
            ],
        )?;
        let start = Instant::now();
        engine.push("s", batch)?;
        outputs += sub.poll()?.iter().map(|b| b.len() as u64).sum::<u64>();
        busy += start.elapsed();
    }
    let start = Instant::now();
    engine.close_all()?;
    let drain_outputs = sub.poll()?.iter().map(|b| b.len() as u64).sum::<u64>();
    let drain = start.elapsed();
    Ok(ScalingPoint {
        ratio,
        range,
        slide,
        events,
        steady_seconds: busy.as_secs_f64(),
        steady_outputs: outputs,
        drain_seconds: drain.as_secs_f64(),
        drain_outputs,
    })
}

/// One run of the sketch benchmark (see [`sketch`]).
#[derive(Debug)]
pub struct SketchPoint {
    pub query: String,
    pub events: u64,
    pub seconds: f64,
    pub peak_rss_mb: f64,
    /// The RSS when the run started (the process's baseline, in the peak too).
    pub start_rss_mb: f64,
    /// The peak of the process's anonymous memory during the run (its RSS less the mapped
    /// binary), and its value when the run started ([`crate::anon`]).
    pub peak_anon_mb: f64,
    pub start_anon_mb: f64,
    pub outputs: u64,
    /// Before the streams are closed: the queries' state as the engine accounts it
    /// (`SHOW MEMORY`), the time that walk took, and the process's anonymous memory then.
    pub state_mb: f64,
    pub walk_ms: f64,
    pub anon_mb: f64,
}

impl SketchPoint {
    pub fn line(&self) -> String {
        format!(
            "{:<58} events {}  {:.3} s  {:>10.0} events/s  peak RSS {:>8.1} MB (at start {:.1} MB)  peak anon {:>8.1} MB (at start {:.1} MB)  outputs {}  state accounted {:.1} MB (walk {:.1} ms) with anon {:.1} MB",
            self.query,
            self.events,
            self.seconds,
            self.events as f64 / self.seconds.max(1e-9),
            self.peak_rss_mb,
            self.start_rss_mb,
            self.peak_anon_mb,
            self.start_anon_mb,
            self.outputs,
            self.state_mb,
            self.walk_ms,
            self.anon_mb,
        )
    }
}

/// How the sketch benchmark draws its keys below `keys`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyLaw {
    /// Each key equally likely.
    Uniform,
    /// Zipf-like (exponent 1): key r with probability about proportional to 1/(r+1), drawn as
    /// ⌊keys^u⌋ − 1 for u uniform in [0, 1) (so key 0 is ln 2/ln keys of the events: 5 % of 10^6 keys' events).
    Zipf,
    /// Zipf with this exponent s: key r with probability proportional to 1/(r+1)^s, drawn
    /// from the cumulative distribution (with 1 000 keys, key 0 has 39 % of the events at
    /// s = 1.5, 61 % at s = 2).
    ZipfExp(f64),
}

/// Draws keys below `keys` by the cumulative distribution of Zipf's law with exponent `s`.
struct ZipfTable(Vec<f64>);

impl ZipfTable {
    fn new(keys: u64, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (0..keys.max(1))
            .map(|r| {
                acc += 1.0 / ((r + 1) as f64).powf(s);
                acc
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= acc);
        ZipfTable(cdf)
    }

    /// The key whose cumulative share first reaches `u` in [0, 1).
    fn key(&self, u: f64) -> i64 {
        self.0.partition_point(|&c| c <= u).min(self.0.len() - 1) as i64
    }

    /// The share of the events key 0 gets.
    fn top_share(&self) -> f64 {
        self.0[0]
    }
}

/// The skew benchmark's query: a count, a sum and a maximum per key over a minute sliding by
/// ten seconds (a tick is a second), pre-aggregated pane by pane (on several workers, each
/// worker's partials merged by key).
pub const SKEW_QUERY: &str =
    "SELECT ISTREAM k, COUNT(*), SUM(t), MAX(t) FROM s [RANGE 60 SLIDE 10] GROUP BY k";

/// The skew benchmark: [`SKEW_QUERY`] over `events` events, 1 000 a tick, on `workers`
/// workers, keys below `keys` uniform and then by Zipf's law with exponent `s`. Returns each
/// run's figures and key 0's share under Zipf.
pub fn skew(
    events: u64,
    keys: u64,
    s: f64,
    chunk: usize,
    workers: usize,
) -> Result<(Vec<SketchPoint>, f64)> {
    let top = ZipfTable::new(keys, s).top_share();
    let mut points = Vec::new();
    for law in [KeyLaw::Uniform, KeyLaw::ZipfExp(s)] {
        let mut p = sketch_query(&[], SKEW_QUERY, events, keys, law, 1000, chunk, None, workers)?;
        p.query = match law {
            KeyLaw::ZipfExp(s) => format!("{} [zipf {s}, {workers} worker(s)]", p.query),
            _ => format!("{} [uniform, {workers} worker(s)]", p.query),
        };
        points.push(p);
    }
    Ok((points, top))
}

/// The sketch benchmark: `SELECT ISTREAM <agg> FROM s [RANGE 3600 SLIDE 60]` (an hour sliding
/// by a minute, one tick a second) over `events` events, `per_tick` per tick, keys uniform
/// below `keys`. Times the engine (pushes, the final drain included); the peak RSS is the
/// process's, reset before the run.
pub fn sketch(
    agg: &str,
    events: u64,
    keys: u64,
    per_tick: u64,
    chunk: usize,
) -> Result<SketchPoint> {
    let query = format!("SELECT ISTREAM {agg} FROM s [RANGE 3600 SLIDE 60]");
    sketch_query(&[], &query, events, keys, KeyLaw::Uniform, per_tick, chunk, None, 1)
}

/// The membership benchmark: `keys` keys (the even numbers below 2·keys) loaded into a table
/// `m (k BIGINT)` from a CSV file written into `dir`, then `events` elements of `s`, keys
/// uniform below 2·keys (so half are present), each looked up as it arrives: exactly, by a
/// temporal join with the table, or by `MIGHT_CONTAIN` against a filter of capacity `keys` at
/// 1 %. The table's loading is not timed; its rows are in both runs' memory.
pub fn membership(
    exact: bool,
    events: u64,
    keys: u64,
    chunk: usize,
    dir: &std::path::Path,
) -> Result<SketchPoint> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("membership-keys-{keys}.csv"));
    if !path.exists() {
        let mut text = String::with_capacity(keys as usize * 8 + 2);
        text.push_str("k\n");
        for i in 0..keys {
            text.push_str(&(2 * i).to_string());
            text.push('\n');
        }
        std::fs::write(&path, text)?;
    }
    let table = format!(
        "CREATE TABLE m (k BIGINT) WITH (source = 'file', path = '{}', header = true)",
        path.display()
    );
    let query = if exact {
        "SELECT ISTREAM s.k FROM s JOIN m FOR SYSTEM_TIME AS OF s.t ON s.k = m.k".to_string()
    } else {
        format!(
            "SELECT ISTREAM k FROM s WHERE MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(k, {keys}, \
             0.01) FROM m), k)"
        )
    };
    sketch_query(&[table], &query, events, 2 * keys, KeyLaw::Uniform, 1000, chunk, None, 1)
}

/// The sketch benchmark's driver for any query over `s (k BIGINT, t BIGINT)`: `setup`
/// statements run after `s` is created (not timed), then `events` events, `per_tick` per tick,
/// keys below `keys` drawn by `law`. With `wal`, the engine keeps its checkpoints in the
/// directory given (emptied first) and logs every push with the sync policy given. The query
/// runs on `workers` workers.
#[allow(clippy::too_many_arguments)]
pub fn sketch_query(
    setup: &[String],
    query: &str,
    events: u64,
    keys: u64,
    law: KeyLaw,
    per_tick: u64,
    chunk: usize,
    wal: Option<(weir::WalSync, &std::path::Path)>,
    workers: usize,
) -> Result<SketchPoint> {
    reset_peak_rss();
    let start_rss_mb = peak_rss_mb();
    let anon = crate::anon::AnonPeak::start();
    let mut engine = match wal {
        Some((sync, dir)) => {
            let _ = std::fs::remove_dir_all(dir);
            let (mut e, _) = Engine::open(dir)?;
            e.set_wal(Some(sync))?;
            e
        }
        None => Engine::new(),
    };
    engine.set_workers(workers)?;
    engine.execute("CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t)")?;
    for stmt in setup {
        engine.execute(stmt)?;
    }
    let query = query.to_string();
    let sub = engine.subscribe(&query)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let mut rng = SplitMix64::new(11);
    let zipf = match law {
        KeyLaw::ZipfExp(s) => Some(ZipfTable::new(keys, s)),
        _ => None,
    };
    let mut busy = Duration::ZERO;
    let mut outputs = 0u64;
    let mut next = 0u64;
    let per_tick = per_tick.max(1);
    while next < events {
        let n = (events - next).min(chunk as u64);
        let ks: Vec<i64> = (0..n)
            .map(|_| match law {
                KeyLaw::Uniform => rng.below(keys) as i64,
                KeyLaw::Zipf => {
                    ((keys as f64).powf(rng.unit()) as i64 - 1).clamp(0, keys as i64 - 1)
                }
                KeyLaw::ZipfExp(_) => zipf.as_ref().map_or(0, |z| z.key(rng.unit())),
            })
            .collect();
        let ts: Vec<i64> = (next..next + n).map(|i| (i / per_tick) as i64).collect();
        next += n;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(ks)), Arc::new(Int64Array::from(ts))],
        )?;
        let start = Instant::now();
        engine.push("s", batch)?;
        outputs += sub.poll()?.iter().map(|b| b.len() as u64).sum::<u64>();
        busy += start.elapsed();
    }
    let anon_mb = crate::anon::anon_bytes() as f64 / 1e6;
    let walk = Instant::now();
    let state_mb = accounted_state(&mut engine)? as f64 / 1e6;
    let walk_ms = walk.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    engine.close_all()?;
    outputs += sub.poll()?.iter().map(|b| b.len() as u64).sum::<u64>();
    busy += start.elapsed();
    let (peak_anon_mb, start_anon_mb) = anon.finish();
    Ok(SketchPoint {
        query,
        events,
        seconds: busy.as_secs_f64(),
        peak_rss_mb: peak_rss_mb(),
        start_rss_mb,
        peak_anon_mb,
        start_anon_mb,
        outputs,
        state_mb,
        walk_ms,
        anon_mb,
    })
}

/// The bytes of state the engine accounts to its queries: `SHOW MEMORY`'s total.
fn accounted_state(engine: &mut Engine) -> Result<u64> {
    let rows = match engine.execute("SHOW MEMORY")?.pop() {
        Some(weir::ExecResult::Rows { batches, .. }) => batches,
        _ => return Err(anyhow::anyhow!("SHOW MEMORY gave no rows")),
    };
    for b in &rows {
        for row in weir::format::rows_as_text(b)? {
            if row.first().map(String::as_str) == Some("total") {
                return Ok(row.get(2).and_then(|v| v.parse().ok()).unwrap_or(0));
            }
        }
    }
    Err(anyhow::anyhow!("SHOW MEMORY gave no total"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn zipf_keys_follow_their_law() {
        let z = ZipfTable::new(1000, 1.5);
        assert!((z.top_share() - 0.3917).abs() < 0.001, "{}", z.top_share());
        assert!((ZipfTable::new(1000, 2.0).top_share() - 0.6087).abs() < 0.001);
        assert_eq!(z.key(0.0), 0);
        assert_eq!(z.key(0.39), 0);
        assert_eq!(z.key(0.40), 1);
        assert_eq!(z.key(0.999_999_999), 999);
        // Drawn keys: key 0's share and key 1's (1/2^1.5 of key 0's) within a percent.
        let mut rng = SplitMix64::new(3);
        let draws = 100_000;
        let mut counts = [0u32; 2];
        for _ in 0..draws {
            match z.key(rng.unit()) {
                0 => counts[0] += 1,
                1 => counts[1] += 1,
                _ => {}
            }
        }
        let share = |c: u32| f64::from(c) / draws as f64;
        assert!((share(counts[0]) - 0.3917).abs() < 0.01, "{counts:?}");
        assert!((share(counts[1]) - 0.3917 / 2f64.powf(1.5)).abs() < 0.01, "{counts:?}");
    }

    #[test]
    fn the_chunk_completing_an_instant_is_found_stepping_forward_as_by_search() {
        let now = Instant::now();
        // Largest timestamps ascending, with repeats (chunks with equal maxima).
        let maxima = [3, 3, 7, 10, 10, 10, 15, 40];
        let chunks: Vec<(i64, Instant)> = maxima.iter().map(|&m| (m, now)).collect();
        let search = |t: i64| chunks.partition_point(|(max, _)| *max <= t);
        // Ascending instants, then one going back, as a batch's and the next batch's could.
        let mut last = None;
        for t in [-5, 0, 3, 4, 7, 9, 10, 11, 15, 39, 40, 41, 2, 8, 50] {
            let i = chunk_completing(&chunks, t, last);
            assert_eq!(i, search(t), "instant {t}");
            last = Some((t, i));
        }
        assert_eq!(chunk_completing(&chunks, 40, None), chunks.len());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut ms: Vec<(Duration, u64)> =
            (1..=1000).rev().map(|m| (Duration::from_millis(m), 1)).collect();
        let p = Percentiles::of(&mut ms).unwrap();
        assert_eq!(p.samples, 1000);
        assert_eq!([p.p50, p.p99, p.p999, p.max].map(|d| d.as_millis()), [500, 990, 999, 1000]);
        let mut one = vec![(Duration::from_micros(7), 1)];
        let p = Percentiles::of(&mut one).unwrap();
        assert_eq!([p.p50, p.p999, p.max], [Duration::from_micros(7); 3]);
        assert!(Percentiles::of(&mut []).is_none());
        // Weighted: 990 instants at 1 ms, 9 at 5 ms, 1 at 9 ms (as 1000 samples would give).
        let mut w = vec![(Duration::from_millis(5), 9), (Duration::from_millis(1), 990)];
        w.push((Duration::from_millis(9), 1));
        let p = Percentiles::of(&mut w).unwrap();
        assert_eq!(p.samples, 1000);
        assert_eq!([p.p50, p.p99, p.p999, p.max].map(|d| d.as_millis()), [1, 1, 5, 9]);
    }
}
