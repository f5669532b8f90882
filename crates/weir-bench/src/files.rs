//! NEXMark events as files: one CSV (with a header) or JSON-lines file per stream,
//! `person.csv`, `auction.csv`, `bid.csv` (or `.jsonl`), timestamps as ISO-8601 text
//! (`2026-01-01T00:00:00.000100`), written by Arrow's CSV and JSON writers and read back by
//! Arrow's readers with the streams' schemas.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::generator::{auction_schema, bid_schema, person_schema, Config, Generator};

/// The file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Json,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Json => "jsonl",
        }
    }
}

/// The three stream names, in file order.
pub const STREAMS: [&str; 3] = ["person", "auction", "bid"];

/// The schema of a NEXMark stream by name.
pub fn schema_of(stream: &str) -> Option<SchemaRef> {
    match stream {
        "person" => Some(person_schema()),
        "auction" => Some(auction_schema()),
        "bid" => Some(bid_schema()),
        _ => None,
    }
}

/// The path of `stream`'s file in `dir`.
pub fn path_of(dir: &Path, stream: &str, format: Format) -> PathBuf {
    dir.join(format!("{stream}.{}", format.extension()))
}

enum Writer {
    Csv(Box<arrow::csv::Writer<BufWriter<File>>>),
    Json(arrow::json::LineDelimitedWriter<BufWriter<File>>),
}

impl Writer {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            Writer::Csv(w) => w.write(batch)?,
            Writer::Json(w) => w.write(batch)?,
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        match self {
            Writer::Csv(w) => drop(w.into_inner()),
            Writer::Json(mut w) => w.finish()?,
        }
        Ok(())
    }
}

/// Writes the first `events` events of `config`'s generator to `dir` (created if needed).
pub fn write_events(dir: &Path, format: Format, config: &Config, events: u64) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut writers = Vec::new();
    for s in STREAMS {
        let path = path_of(dir, s, format);
        let f = BufWriter::with_capacity(
            1 << 20,
            File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        writers.push(match format {
            Format::Csv => {
                Writer::Csv(Box::new(arrow::csv::WriterBuilder::new().with_header(true).build(f)))
            }
            Format::Json => Writer::Json(arrow::json::LineDelimitedWriter::new(f)),
        });
    }
    let mut g = Generator::new(config.clone());
    let mut left = events;
    while left > 0 {
        let n = left.min(100_000);
        left -= n;
        let b = g.next_events(n)?;
        for (w, batch) in writers.iter_mut().zip([&b.person, &b.auction, &b.bid]) {
            w.write(batch)?;
        }
    }
    for w in writers {
        w.finish()?;
    }
    Ok(())
}

/// Batches read from one stream's file.
pub type BatchReader = Box<dyn Iterator<Item = Result<RecordBatch>>>;

/// Opens `stream`'s file in `dir` and reads it in batches of `batch_size` rows.
pub fn read_stream(
    dir: &Path,
    stream: &str,
    format: Format,
    batch_size: usize,
) -> Result<BatchReader> {
    let schema = schema_of(stream).with_context(|| format!("unknown stream {stream}"))?;
    let path = path_of(dir, stream, format);
    let f = BufReader::with_capacity(
        1 << 20,
        File::open(&path).with_context(|| format!("opening {}", path.display()))?,
    );
    Ok(match format {
        Format::Csv => Box::new(
            arrow::csv::ReaderBuilder::new(schema)
                .with_header(true)
                .with_batch_size(batch_size)
                .build(f)?
                .map(|b| b.map_err(anyhow::Error::from)),
        ),
        Format::Json => Box::new(
            arrow::json::ReaderBuilder::new(schema)
                .with_batch_size(batch_size)
                .build(f)?
                .map(|b| b.map_err(anyhow::Error::from)),
        ),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_to_the_same_batches() {
        let dir = std::env::temp_dir().join(format!("weir-bench-files-{}", std::process::id()));
        let config = Config::default();
        let expected = Generator::new(config.clone()).next_events(500).unwrap();
        for format in [Format::Csv, Format::Json] {
            write_events(&dir, format, &config, 500).unwrap();
            for s in STREAMS {
                let batches: Vec<RecordBatch> =
                    read_stream(&dir, s, format, 64).unwrap().map(|b| b.unwrap()).collect();
                let got = arrow::compute::concat_batches(&schema_of(s).unwrap(), &batches).unwrap();
                assert_eq!(&got, expected.get(s).unwrap(), "{s} as {format:?}");
            }
        }
        let text = std::fs::read_to_string(path_of(&dir, "bid", Format::Csv)).unwrap();
        let first = text.lines().nth(1).unwrap();
        assert!(first.contains("2026-01-01T00:00:00"), "{first}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
