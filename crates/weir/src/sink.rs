//! File sinks: a continuous query's output appended to a CSV, JSON-lines or Parquet file.
//!
//! `CREATE SINK top WITH (path = 'out/top.csv') AS SELECT ...` runs the query and appends each
//! output change to the file as it is produced: a stream's elements as `_time, columns...`
//! (an element of multiplicity n written n times), a relation's changes as
//! `_time, _diff, columns...`. Rows are written with arrow's CSV and JSON writers; a CSV file
//! starts with a header. The sink knows how many bytes it has written, so that a checkpoint
//! can record a committed position to truncate back to on recovery.
//!
//! A Parquet sink writes the same columns with the `parquet` crate's Arrow writer, a row group
//! every [`PARQUET_ROW_GROUP`] rows. A Parquet file is readable only once its footer is
//! written, when the sink ends (`DROP SINK`, or the engine shutting down), and it cannot be
//! cut back to a checkpoint and appended to, so a Parquet sink is refused where checkpoints
//! are taken (an engine with a data directory).

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use weir_common::{ChangeBatch, Result, TimeDomain, WeirError};
use weir_plan::PlanKind;
use weir_sql::parser::{OptionValue, StreamOption};

/// How a sink writes rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFormat {
    Csv,
    JsonLines,
    Parquet,
}

/// A Parquet sink starts a new row group after this many rows.
pub const PARQUET_ROW_GROUP: usize = 65_536;

/// A sink's declared target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkSpec {
    pub path: String,
    pub format: SinkFormat,
}

impl SinkSpec {
    /// The options of `CREATE SINK ... WITH (path = '...', format = 'csv' | 'json')`.
    pub(crate) fn from_options(
        options: &[StreamOption],
        span: Option<weir_common::Span>,
    ) -> Result<Self> {
        let mut path = None;
        let mut format = None;
        for o in options {
            match (o.key.as_str(), &o.value) {
                ("path", OptionValue::Text(p)) => path = Some(p.clone()),
                ("format", OptionValue::Text(f)) => {
                    format = Some(match f.to_ascii_lowercase().as_str() {
                        "csv" => SinkFormat::Csv,
                        "json" | "jsonl" | "ndjson" => SinkFormat::JsonLines,
                        "parquet" => SinkFormat::Parquet,
                        other => {
                            return Err(WeirError::plan_at(
                                format!("format must be 'csv', 'json' or 'parquet', not '{other}'"),
                                o.span,
                            ))
                        }
                    })
                }
                ("path" | "format", v) => {
                    return Err(WeirError::plan_at(
                        format!("option {} must be quoted text, not {v}", o.key),
                        o.span,
                    ))
                }
                (other, _) => {
                    return Err(WeirError::plan_at(
                        format!("unknown sink option '{other}' (known: path, format)"),
                        o.span,
                    ))
                }
            }
        }
        let Some(path) = path else {
            return Err(WeirError::plan_at("a sink needs WITH (path = '...')", span));
        };
        let format = match format {
            Some(f) => f,
            None => match crate::source::format_by_extension(&path) {
                Ok(Some(crate::source::Format::JsonLines)) => SinkFormat::JsonLines,
                Ok(Some(crate::source::Format::Parquet)) => SinkFormat::Parquet,
                Ok(_) => SinkFormat::Csv,
                Err(e) => {
                    let at = options.iter().find(|o| o.key == "path").and_then(|o| o.span);
                    return Err(WeirError::plan_at(e, at.or(span)));
                }
            },
        };
        Ok(SinkSpec { path, format })
    }
}

/// An open file sink. See the module docs.
#[derive(Debug)]
pub(crate) struct FileSink {
    pub spec: SinkSpec,
    writer: Writer,
    /// Bytes written so far (what a checkpoint commits).
    pub written: u64,
    schema: SchemaRef,
    kind: PlanKind,
}

/// Where a sink's rows go.
enum Writer {
    Text(BufWriter<File>),
    /// `None` once the file is finished.
    Parquet(Option<Box<ArrowWriter<File>>>),
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Writer::Text(w) => w.fmt(f),
            Writer::Parquet(_) => f.write_str("ArrowWriter"),
        }
    }
}

impl FileSink {
    /// Creates (or truncates) the file. `schema` is the query's output, `kind` whether it is a
    /// stream or a relation, `domain` how its instants are written. With `resume_at` (a
    /// checkpoint's committed position), the existing file is cut back to that length and
    /// appended to instead: what was written after the checkpoint is written again, the same.
    pub fn open(
        spec: SinkSpec,
        file_path: PathBuf,
        query_schema: &SchemaRef,
        kind: PlanKind,
        domain: TimeDomain,
        resume_at: Option<u64>,
    ) -> Result<Self> {
        let fail = |what: &str, e: std::io::Error| {
            WeirError::exec(format!("sink '{}': {what}: {e}", spec.path))
        };
        if let Some(dir) = file_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail("cannot create its directory", e))?;
        }
        if spec.format == SinkFormat::Parquet && resume_at.is_some() {
            return Err(WeirError::exec(format!(
                "sink '{}': a Parquet sink cannot resume from a checkpoint",
                spec.path
            )));
        }
        let file = match resume_at {
            None => File::create(&file_path).map_err(|e| fail("cannot create the file", e))?,
            Some(committed) => {
                let what_to_do = "put the file back as it was, or delete the data directory \
                                  to start over";
                let mut file = match std::fs::OpenOptions::new().write(true).open(&file_path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(WeirError::exec(format!(
                            "sink '{}': the file is missing, but the checkpoint holds its first \
                             {committed} bytes as written: {what_to_do}",
                            spec.path
                        )))
                    }
                    Err(e) => return Err(fail("cannot reopen the file", e)),
                };
                let len = file.metadata().map_err(|e| fail("cannot read the file", e))?.len();
                if len < committed {
                    return Err(WeirError::exec(format!(
                        "sink '{}': the file has {len} bytes, fewer than the {committed} the \
                         checkpoint committed; it was changed outside Weir: {what_to_do}",
                        spec.path
                    )));
                }
                file.set_len(committed).map_err(|e| fail("cannot truncate the file", e))?;
                file.seek(std::io::SeekFrom::End(0)).map_err(|e| fail("cannot seek", e))?;
                file
            }
        };
        let time_type = match domain {
            TimeDomain::Micros => DataType::Timestamp(TimeUnit::Microsecond, None),
            TimeDomain::Ticks => DataType::Int64,
        };
        let mut fields = vec![Field::new("_time", time_type, false)];
        if kind == PlanKind::Relation {
            fields.push(Field::new("_diff", DataType::Int64, false));
        }
        fields.extend(query_schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)));
        let schema = Arc::new(Schema::new(fields));
        let writer = match spec.format {
            SinkFormat::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_max_row_group_row_count(Some(PARQUET_ROW_GROUP))
                    .build();
                let w = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(|e| {
                    WeirError::exec(format!("sink '{}': cannot start the file: {e}", spec.path))
                })?;
                Writer::Parquet(Some(Box::new(w)))
            }
            SinkFormat::Csv | SinkFormat::JsonLines => Writer::Text(BufWriter::new(file)),
        };
        let mut sink = FileSink { spec, writer, written: resume_at.unwrap_or(0), schema, kind };
        if sink.spec.format == SinkFormat::Csv && resume_at.is_none() {
            let header: Vec<&str> =
                sink.schema.fields().iter().map(|f| f.name().as_str()).collect();
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(&header).map_err(|e| WeirError::internal(e.to_string()))?;
            let bytes = w.into_inner().map_err(|e| WeirError::internal(e.to_string()))?;
            sink.write_bytes(&bytes)?;
        }
        Ok(sink)
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let Writer::Text(writer) = &mut self.writer else {
            return Err(WeirError::internal("text written to a Parquet sink"));
        };
        writer.write_all(bytes).and_then(|_| writer.flush()).map_err(|e| {
            WeirError::exec(format!("sink '{}': cannot write: {e}", self.spec.path))
        })?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Appends one output batch.
    pub fn write(&mut self, changes: &ChangeBatch) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        // A stream element of multiplicity n is written n times; relation changes keep _diff.
        let (data, times, diffs) = if self.kind == PlanKind::Stream
            && changes.diffs.iter().all(|&d| d == 1)
        {
            // Every element once (nearly always): the batch's own columns, not a copy.
            (changes.data.columns().to_vec(), changes.times.clone(), None)
        } else if self.kind == PlanKind::Stream {
            let mut idx = Vec::new();
            for (i, &d) in changes.diffs.iter().enumerate() {
                idx.extend(std::iter::repeat_n(i as u32, d.max(0) as usize));
            }
            let expanded = changes.take(&idx)?;
            (expanded.data.columns().to_vec(), expanded.times, None)
        } else {
            (changes.data.columns().to_vec(), changes.times.clone(), Some(changes.diffs.clone()))
        };
        let n = times.len();
        let time_col: ArrayRef = match self.schema.field(0).data_type() {
            DataType::Timestamp(_, _) => Arc::new(TimestampMicrosecondArray::from(times)),
            _ => Arc::new(Int64Array::from(times)),
        };
        let mut cols = vec![time_col];
        if let Some(d) = diffs {
            cols.push(Arc::new(Int64Array::from(d)));
        }
        cols.extend(data);
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        if let Writer::Parquet(w) = &mut self.writer {
            let Some(w) = w.as_mut() else {
                return Err(WeirError::exec(format!(
                    "sink '{}': already finished",
                    self.spec.path
                )));
            };
            w.write(&batch).map_err(|e| {
                WeirError::exec(format!("sink '{}': cannot write: {e}", self.spec.path))
            })?;
            self.written = w.bytes_written() as u64;
            return Ok(());
        }
        let mut bytes = Vec::new();
        match self.spec.format {
            SinkFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new().with_header(false).build(&mut bytes);
                w.write(&batch)?;
            }
            SinkFormat::JsonLines => {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut bytes);
                w.write(&batch)?;
                w.finish()?;
            }
            SinkFormat::Parquet => {}
        }
        self.write_bytes(&bytes)
    }

    /// Makes everything written durable; returns the position a checkpoint commits.
    pub fn sync(&mut self) -> Result<u64> {
        let Writer::Text(writer) = &mut self.writer else {
            return Err(WeirError::exec(format!(
                "sink '{}': a Parquet sink cannot be checkpointed",
                self.spec.path
            )));
        };
        writer
            .flush()
            .and_then(|_| writer.get_ref().sync_data())
            .map_err(|e| WeirError::exec(format!("sink '{}': cannot sync: {e}", self.spec.path)))?;
        Ok(self.written)
    }

    /// Ends the file: for Parquet, writes what is buffered and the footer, which makes the
    /// file readable. Writing after it is an error.
    pub fn finish(&mut self) -> Result<()> {
        match &mut self.writer {
            Writer::Text(w) => w.flush().map_err(|e| {
                WeirError::exec(format!("sink '{}': cannot write: {e}", self.spec.path))
            }),
            Writer::Parquet(w) => match w.take() {
                None => Ok(()),
                Some(mut w) => {
                    w.finish().map_err(|e| {
                        WeirError::exec(format!(
                            "sink '{}': cannot finish the file: {e}",
                            self.spec.path
                        ))
                    })?;
                    self.written = w.bytes_written() as u64;
                    Ok(())
                }
            },
        }
    }
}

impl Drop for FileSink {
    /// A Parquet file is finished when its sink ends, however it ends.
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
