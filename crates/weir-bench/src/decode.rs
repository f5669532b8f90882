//! The decoder benchmark: how fast Weir takes in a CSV or JSON-lines file, beside arrow's
//! reader alone on the same file in the same run.
//!
//! [`decode`] reads the `bid` file of a NEXMark data directory ([`crate::files`]: a header,
//! seven columns, an ISO-8601 timestamp) twice, in turn, `runs` times each:
//!
//! - **Weir**: a stream declared over the file (`source = 'file'`, as a user declares one) and
//!   a continuous query that reads it and keeps nothing (`WHERE auction < 0`), driven by
//!   [`Engine::run_sources`] until the file ends. This is the whole intake: reading, cutting
//!   records, decoding into the stream's schema (timestamps included), the event-time checks,
//!   and admitting the rows; the query itself is one vectorised comparison per batch.
//! - **Arrow alone**: arrow's CSV or JSON reader over the same bytes with the stream's schema,
//!   the floor any reader built on it can reach (it reports no bad rows and keeps no record
//!   locations).
//!
//! Each side's fastest run is reported, and their ratio. A file source is read on a helper
//! thread and decoded on one thread per core while the engine takes in the chunks before (the
//! source's read-ahead), so Weir's side also reports the CPU time of its fastest run (every
//! thread's): rows per CPU-second is its rate on one core.

use std::path::Path;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use weir::Engine;

use crate::files::{path_of, read_stream, Format};

/// What [`decode`] measured.
#[derive(Debug, Clone)]
pub struct DecodeReport {
    pub format: Format,
    pub rows: u64,
    pub bytes: u64,
    /// Fastest run of Weir's source, in seconds.
    pub weir: f64,
    /// The CPU time of that run, every thread's, in seconds.
    pub weir_cpu: f64,
    /// Fastest run of arrow's reader alone, in seconds.
    pub arrow: f64,
}

impl DecodeReport {
    /// One line: format, rows, bytes, each side's time and rate, their ratio.
    pub fn line(&self) -> String {
        let rate = |s: f64| self.rows as f64 / s.max(1e-9);
        let mb_s = |s: f64| self.bytes as f64 / 1e6 / s.max(1e-9);
        format!(
            "decode {:<5} rows {:>9}  {:>7.1} MB  weir {:>7.3} s {:>11.0} rows/s {:>6.0} MB/s  \
             (cpu {:.3} s, {:.0} rows per cpu-s)  arrow alone {:>7.3} s {:>11.0} rows/s  \
             weir/arrow {:.2}",
            self.format.extension(),
            self.rows,
            self.bytes as f64 / 1e6,
            self.weir,
            rate(self.weir),
            mb_s(self.weir),
            self.weir_cpu,
            rate(self.weir_cpu),
            self.arrow,
            rate(self.arrow),
            rate(self.weir) / rate(self.arrow),
        )
    }
}

/// Times Weir's file source and arrow's reader over `dir`'s `bid` file, `runs` times each in
/// turn. See the module docs.
pub fn decode(dir: &Path, format: Format, runs: usize) -> Result<DecodeReport> {
    let path = path_of(dir, "bid", format);
    let bytes =
        std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?.len();
    let (mut weir, mut weir_cpu, mut arrow) = (f64::INFINITY, 0.0, f64::INFINITY);
    let mut rows = 0;
    for _ in 0..runs.max(1) {
        let cpu = crate::driver::cpu_seconds();
        let (t, n) = weir_run(&path, format)?;
        if t < weir {
            (weir, weir_cpu) = (t, crate::driver::cpu_seconds() - cpu);
        }
        rows = n;
        let (t, n) = arrow_run(dir, format)?;
        arrow = arrow.min(t);
        ensure!(n == rows, "arrow read {n} rows where Weir read {rows}");
    }
    Ok(DecodeReport { format, rows, bytes, weir, weir_cpu, arrow })
}

/// One run of Weir's source over `path`: seconds and rows taken in.
fn weir_run(path: &Path, format: Format) -> Result<(f64, u64)> {
    let mut engine = Engine::new();
    engine.execute(&format!(
        "CREATE STREAM bid ({}, WATERMARK FOR date_time AS date_time) \
         WITH (source = 'file', path = '{}', format = '{}')",
        crate::generator::bid_columns(),
        path.display(),
        format.extension()
    ))?;
    let sub = engine.subscribe("SELECT auction FROM bid WHERE auction < 0")?;
    let start = Instant::now();
    let polled = engine.run_sources()?;
    let seconds = start.elapsed().as_secs_f64();
    let out: usize = sub.poll()?.iter().map(|b| b.len()).sum();
    ensure!(out == 0, "the query kept {out} rows");
    let progress = engine.source_progress();
    ensure!(progress.iter().all(|p| p.ended), "the source did not reach the end of the file");
    Ok((seconds, polled.records as u64))
}

/// One run of arrow's reader alone over the same file: seconds and rows.
fn arrow_run(dir: &Path, format: Format) -> Result<(f64, u64)> {
    let start = Instant::now();
    let mut rows = 0;
    for b in read_stream(dir, "bid", format, 8192)? {
        rows += b?.num_rows() as u64;
    }
    Ok((start.elapsed().as_secs_f64(), rows))
}
