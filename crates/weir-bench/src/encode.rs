//! The sink benchmark: how fast a file sink writes a stream's rows as CSV or JSON lines,
//! beside arrow's writer alone on the same rows in the same run.
//!
//! [`encode`] reads the `bid` file of a NEXMark data directory into memory (untimed), then, in
//! turn, `runs` times each:
//!
//! - **Weir with a sink**: an engine with the `bid` stream and `CREATE SINK out WITH (path =
//!   ..., format = 'csv' | 'json') AS SELECT * FROM bid`; every batch pushed, the streams
//!   closed and the engine dropped (which flushes the file).
//! - **Weir without**: the same with `SELECT auction FROM bid WHERE auction < 0` instead of
//!   the sink: the cost of admitting the rows, which the difference takes out.
//! - **Arrow alone**: arrow's CSV or JSON-lines writer over the same batches into a file, the
//!   sink's columns but `_time`: what a sink built on it would cost at least.
//!
//! The sink's own rate is rows / (with − without); each side's fastest run is taken.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Result};
use arrow::record_batch::RecordBatch;
use weir::Engine;

use crate::files::{read_stream, Format};

/// What [`encode`] measured.
#[derive(Debug, Clone)]
pub struct EncodeReport {
    pub format: Format,
    pub rows: u64,
    /// Bytes of the sink's file.
    pub bytes: u64,
    /// Fastest run with the sink, in seconds.
    pub with_sink: f64,
    /// Fastest run without it.
    pub without: f64,
    /// Fastest run of arrow's writer alone.
    pub arrow: f64,
}

impl EncodeReport {
    /// One line: format, rows, the file's size, each run's time, the sink's own rate and
    /// arrow's, their ratio.
    pub fn line(&self) -> String {
        let rate = |s: f64| self.rows as f64 / s.max(1e-9);
        let sink = (self.with_sink - self.without).max(1e-9);
        format!(
            "encode {:<5} rows {:>9}  {:>7.1} MB  with sink {:>7.3} s  without {:>7.3} s  \
             sink {:>11.0} rows/s {:>6.0} MB/s  arrow alone {:>7.3} s {:>11.0} rows/s  \
             sink/arrow {:.2}",
            self.format.extension(),
            self.rows,
            self.bytes as f64 / 1e6,
            self.with_sink,
            self.without,
            rate(sink),
            self.bytes as f64 / 1e6 / sink,
            self.arrow,
            rate(self.arrow),
            rate(sink) / rate(self.arrow),
        )
    }
}

/// Times a sink over `dir`'s `bid` rows against the same engine without it and arrow's writer
/// alone, `runs` times each in turn. See the module docs.
pub fn encode(dir: &Path, format: Format, runs: usize) -> Result<EncodeReport> {
    let batches: Vec<RecordBatch> =
        read_stream(dir, "bid", Format::Csv, 8192)?.collect::<Result<_>>()?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    let out = dir.join(format!("sink-bench.{}", format.extension()));
    let (mut with_sink, mut without, mut arrow) = (f64::MAX, f64::MAX, f64::MAX);
    let mut bytes = 0;
    for _ in 0..runs.max(1) {
        with_sink = with_sink.min(weir_run(&batches, Some((&out, format)))?);
        bytes = std::fs::metadata(&out)?.len();
        without = without.min(weir_run(&batches, None)?);
        arrow = arrow.min(arrow_run(&batches, &out, format)?);
    }
    let _ = std::fs::remove_file(&out);
    Ok(EncodeReport { format, rows, bytes, with_sink, without, arrow })
}

/// One run of an engine fed `batches`, with a sink into `sink` or a query that keeps nothing.
fn weir_run(batches: &[RecordBatch], sink: Option<(&PathBuf, Format)>) -> Result<f64> {
    let mut engine = Engine::new();
    engine.execute(&format!(
        "CREATE STREAM bid ({}, WATERMARK FOR date_time AS date_time)",
        crate::generator::bid_columns()
    ))?;
    let sub = match sink {
        Some((path, format)) => {
            let _ = std::fs::remove_file(path);
            engine.execute(&format!(
                "CREATE SINK out WITH (path = '{}', format = '{}') AS SELECT * FROM bid",
                path.display(),
                format.extension()
            ))?;
            None
        }
        None => Some(engine.subscribe("SELECT auction FROM bid WHERE auction < 0")?),
    };
    let start = Instant::now();
    for b in batches {
        engine.push("bid", b.clone())?;
    }
    engine.close_all()?;
    if let Some(sub) = &sub {
        let kept: usize = sub.poll()?.iter().map(|b| b.len()).sum();
        ensure!(kept == 0, "the query kept {kept} rows");
    }
    drop(sub);
    drop(engine);
    Ok(start.elapsed().as_secs_f64())
}

/// One run of arrow's writer alone over `batches` into `path`.
fn arrow_run(batches: &[RecordBatch], path: &Path, format: Format) -> Result<f64> {
    let start = Instant::now();
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    match format {
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(file);
            for b in batches {
                w.write(b)?;
            }
        }
        Format::Json => {
            let mut w = arrow::json::LineDelimitedWriter::new(file);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}
