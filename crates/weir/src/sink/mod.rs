//! File sinks: a continuous query's output appended to a CSV, JSON-lines or Parquet file.
//!
//! `CREATE SINK top WITH (path = 'out/top.csv') AS SELECT ...` runs the query and appends each
//! output change to the file as it is produced: a stream's elements as `_time, columns...`
//! (an element of multiplicity n written n times), a relation's changes as
//! `_time, _diff, columns...`. CSV rows and JSON lines are written straight from the columns
//! by [`csv_text`] and [`json_text`], to the bytes arrow's CSV and JSON writers would write (a
//! JSON batch with a column of another type goes to arrow's writer); a CSV file starts with a
//! header. The sink knows how many bytes it has written, so that a checkpoint
//! can record a committed position to truncate back to on recovery.
//!
//! While the engine reads sources, a sink formats and writes on a thread of its own
//! ([`pipe`]): [`FileSink::write`] hands the batch over and returns, and
//! [`FileSink::settle`] waits until the file holds every batch handed over (the engine
//! settles its sinks before any call returns, except a poll of sources that goes on: see
//! `Engine::poll_sources`). A batch the engine waits for is written on its own thread, a
//! large one formatted a slice at a time while a helper thread writes the slice before
//! ([`write_sliced`]). Either way a batch's bytes reach the file whole and in order.
//!
//! A Parquet sink writes the same columns with the `parquet` crate's Arrow writer, a row group
//! every [`PARQUET_ROW_GROUP`] rows. A Parquet file is readable only once its footer is
//! written, when the sink ends (`DROP SINK`, or the engine shutting down), and it cannot be
//! cut back to a checkpoint and appended to, so a Parquet sink is refused where checkpoints
//! are taken (an engine with a data directory).

mod csv_text;
mod ints;
mod json_text;
mod pipe;

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use weir_common::{ChangeBatch, Result, TimeDomain, WeirError};
use weir_plan::PlanKind;
use weir_sql::parser::{OptionValue, StreamOption};

use pipe::Pipe;

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
    /// The file's columns: `_time`, `_diff` for a relation, then the query's.
    schema: SchemaRef,
    kind: PlanKind,
    /// The thread that formats and writes the batches handed to it.
    pipe: Pipe,
}

/// What writes a sink's file: owned by the sink's writing thread (see [`pipe`]).
#[derive(Debug)]
struct FileWriter {
    /// The sink's path as declared, for messages.
    path: String,
    format: SinkFormat,
    writer: Writer,
    /// Bytes written so far (what a checkpoint commits), shared with [`FileSink::written`].
    written: Arc<AtomicU64>,
    /// The text of the batch being written, kept from one batch to the next so that its
    /// memory is reused (at most [`TEXT_BUFFER_KEPT`] bytes of it).
    text: Vec<u8>,
    /// The second buffer of a large batch's slices (see [`write_sliced`]), kept likewise.
    spare_text: Vec<u8>,
    /// Whether the file is a regular file, which syncing makes durable (not a device such as
    /// `/dev/null`, or a pipe: nothing of them is kept to be synced).
    regular: bool,
}

/// The largest text buffer a sink keeps between batches.
const TEXT_BUFFER_KEPT: usize = 16 << 20;

/// The rows of a large batch formatted at a time while the text of the slice before is being
/// written (see [`write_sliced`]); a batch of fewer than twice as many is written in one piece.
const SLICE_ROWS: usize = 1024;

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
            // Parquet's writer starts the file as it is made: cut the old one back first.
            None if spec.format == SinkFormat::Parquet => {
                File::create(&file_path).map_err(|e| fail("cannot create the file", e))?
            }
            // Opened as it is, and cut back by the writing thread: dropping a large file's
            // pages (the last run's output, often still being written back) takes the
            // kernel a while, which the engine need not wait for.
            None => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&file_path)
                    .map_err(|e| fail("cannot create the file", e))?;
                return Self::with_file(spec, file, query_schema, kind, domain, None, true);
            }
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
                let meta = file.metadata().map_err(|e| fail("cannot read the file", e))?;
                if !meta.is_file() {
                    // A device or a pipe: nothing to cut back, what follows is appended.
                    return Self::with_file(
                        spec,
                        file,
                        query_schema,
                        kind,
                        domain,
                        resume_at,
                        false,
                    );
                }
                let len = meta.len();
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
        Self::with_file(spec, file, query_schema, kind, domain, resume_at, false)
    }

    /// [`FileSink::open`]'s sink over the file opened (and cut back, when resuming): the
    /// writing thread started, which first empties the file if `truncate` and writes a new
    /// CSV file's header.
    fn with_file(
        spec: SinkSpec,
        file: File,
        query_schema: &SchemaRef,
        kind: PlanKind,
        domain: TimeDomain,
        resume_at: Option<u64>,
        truncate: bool,
    ) -> Result<Self> {
        let regular = file.metadata().is_ok_and(|m| m.is_file());
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
        let writer = FileWriter {
            path: spec.path.clone(),
            format: spec.format,
            writer,
            written: Arc::new(AtomicU64::new(resume_at.unwrap_or(0))),
            text: Vec::new(),
            spare_text: Vec::new(),
            regular,
        };
        let mut header = Vec::new();
        if spec.format == SinkFormat::Csv && resume_at.is_none() {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(&names).map_err(|e| WeirError::internal(e.to_string()))?;
            header = w.into_inner().map_err(|e| WeirError::internal(e.to_string()))?;
        }
        let pipe = Pipe::start(writer, truncate, header)?;
        Ok(FileSink { spec, schema, kind, pipe })
    }

    /// Appends one output batch to the file, after the batches before it. `awaited`: the
    /// caller waits for it, so it is written on this thread, a large batch formatted a slice
    /// at a time while a helper writes the slice before ([`write_sliced`]). Otherwise it is
    /// handed to the sink's writing thread ([`pipe`]), which writes it in one piece while the
    /// engine goes on (a third busy thread for slices only competed on two cores: the hop
    /// query's `weir run` took 7% longer with them); this waits only while
    /// [`pipe::QUEUED`] batches are already waiting. Returns the error of an earlier batch
    /// that could not be written, if one could not (then nothing more is written).
    pub fn write(&mut self, changes: &ChangeBatch, awaited: bool) -> Result<()> {
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
        self.pipe.write(batch, awaited)
    }

    /// Waits until every batch handed over is in the file (not necessarily durable: see
    /// [`FileSink::sync`]); returns the error of one that could not be written.
    pub fn settle(&mut self) -> Result<()> {
        self.pipe.settle()
    }

    /// Bytes written to the file so far, by the batches the thread has finished.
    pub fn written(&self) -> u64 {
        self.pipe.written()
    }

    /// Makes everything handed over written and durable; returns the position a checkpoint
    /// commits.
    pub fn sync(&mut self) -> Result<u64> {
        self.pipe.sync()
    }

    /// Ends the file: for Parquet, writes what is buffered and the footer, which makes the
    /// file readable. Writing after it is an error.
    pub fn finish(&mut self) -> Result<()> {
        self.pipe.finish()
    }
}

impl FileWriter {
    /// The writing thread's first work: empties the file if `truncate` (a regular file: a
    /// device or a pipe has nothing to cut), then writes `header`.
    fn begin(&mut self, truncate: bool, header: &[u8]) -> Result<()> {
        if let (true, Writer::Text(w)) = (truncate && self.regular, &self.writer) {
            let file = w.get_ref();
            // Only a file that has bytes: ext4 flushes a file cut back to nothing as it is
            // closed (so that a crash cannot leave it empty), which slowed a sink writing a
            // new file by 15%.
            let cut =
                file.metadata().and_then(|m| if m.len() > 0 { file.set_len(0) } else { Ok(()) });
            cut.map_err(|e| {
                WeirError::exec(format!("sink '{}': cannot truncate the file: {e}", self.path))
            })?;
        }
        if header.is_empty() {
            return Ok(());
        }
        self.write_bytes(header)
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let Writer::Text(writer) = &mut self.writer else {
            return Err(WeirError::internal("text written to a Parquet sink"));
        };
        writer
            .write_all(bytes)
            .and_then(|_| writer.flush())
            .map_err(|e| cannot_write(&self.path, e))?;
        self.written.fetch_add(bytes.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Appends one batch of the file's columns: all its bytes are in the file, in order, when
    /// this returns (unless it fails). A large batch is formatted a slice at a time while a
    /// helper writes the slice before if `sliced`.
    fn write(&mut self, batch: &RecordBatch, sliced: bool) -> Result<()> {
        if let Writer::Parquet(w) = &mut self.writer {
            let Some(w) = w.as_mut() else {
                return Err(WeirError::exec(format!("sink '{}': already finished", self.path)));
            };
            w.write(batch).map_err(|e| cannot_write(&self.path, e))?;
            self.written.store(w.bytes_written() as u64, Ordering::Release);
            return Ok(());
        }
        let format = self.format;
        let mut bytes = std::mem::take(&mut self.text);
        bytes.clear();
        if !sliced || batch.num_rows() < 2 * SLICE_ROWS {
            format_text(format, batch, &mut bytes)?;
            let written = self.write_bytes(&bytes);
            if bytes.capacity() <= TEXT_BUFFER_KEPT {
                self.text = bytes;
            }
            return written;
        }
        let Writer::Text(writer) = &mut self.writer else {
            return Err(WeirError::internal("text written to a Parquet sink"));
        };
        let spares = [bytes, std::mem::take(&mut self.spare_text)];
        let (result, written, mut spares) = write_sliced(writer, format, batch, spares);
        self.written.fetch_add(written, Ordering::Release);
        self.spare_text = spares.pop().unwrap_or_default();
        self.text = spares.pop().unwrap_or_default();
        result.map_err(|e| match e {
            SliceError::Write(e) => cannot_write(&self.path, e),
            SliceError::Format(e) => e,
        })
    }

    /// Makes everything written durable; returns the position a checkpoint commits.
    fn sync(&mut self) -> Result<u64> {
        let Writer::Text(writer) = &mut self.writer else {
            return Err(WeirError::exec(format!(
                "sink '{}': a Parquet sink cannot be checkpointed",
                self.path
            )));
        };
        let regular = self.regular;
        writer
            .flush()
            .and_then(|_| if regular { writer.get_ref().sync_data() } else { Ok(()) })
            .map_err(|e| WeirError::exec(format!("sink '{}': cannot sync: {e}", self.path)))?;
        Ok(self.written.load(Ordering::Acquire))
    }

    /// See [`FileSink::finish`].
    fn finish(&mut self) -> Result<()> {
        match &mut self.writer {
            Writer::Text(w) => w.flush().map_err(|e| cannot_write(&self.path, e)),
            Writer::Parquet(w) => match w.take() {
                None => Ok(()),
                Some(mut w) => {
                    w.finish().map_err(|e| {
                        WeirError::exec(format!(
                            "sink '{}': cannot finish the file: {e}",
                            self.path
                        ))
                    })?;
                    self.written.store(w.bytes_written() as u64, Ordering::Release);
                    Ok(())
                }
            },
        }
    }
}

/// The error of a sink whose file could not be written.
fn cannot_write(path: &str, e: impl std::fmt::Display) -> WeirError {
    WeirError::exec(format!("sink '{path}': cannot write: {e}"))
}

/// Appends the text of `batch` in `format` (CSV or JSON lines) to `out`.
fn format_text(format: SinkFormat, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
    match format {
        SinkFormat::Csv => csv_text::write_csv(batch, out)?,
        SinkFormat::JsonLines if json_text::write_json(batch, out) => {}
        SinkFormat::JsonLines => {
            let batch = timestamps_as_text(batch.clone())?;
            let mut w = arrow::json::LineDelimitedWriter::new(out);
            w.write(&batch)?;
            w.finish()?;
        }
        SinkFormat::Parquet => {
            return Err(WeirError::internal("a Parquet sink's rows formatted as text"));
        }
    }
    Ok(())
}

/// Why [`write_sliced`] stopped.
#[derive(Debug)]
enum SliceError {
    Format(WeirError),
    Write(std::io::Error),
}

/// Writes the text of `batch` to `writer` (and flushes it) a slice of [`SLICE_ROWS`] rows at a
/// time, formatting each slice on this thread while a helper thread writes the one before: the
/// kernel's copy of the text into the file's pages (more than half of a JSON sink's time on one
/// thread) overlaps the formatting. Every byte is written and flushed when it returns, as in
/// one piece: the file holds the whole batch, in order, unless it returns an error. Returns,
/// beside the outcome, how many bytes reached the writer and the two buffers `spares` (their
/// memory is reused from one batch to the next).
fn write_sliced(
    writer: &mut BufWriter<File>,
    format: SinkFormat,
    batch: &RecordBatch,
    spares: [Vec<u8>; 2],
) -> (std::result::Result<(), SliceError>, u64, Vec<Vec<u8>>) {
    let n = batch.num_rows();
    std::thread::scope(|scope| {
        // Slices go to the writer one at a time; their buffers come back to be filled again.
        let (to_writer, slices) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
        let (give_back, returned) = std::sync::mpsc::channel::<Vec<u8>>();
        let helper = scope.spawn(move || {
            let mut written = 0u64;
            for text in slices {
                if let Err(e) = writer.write_all(&text) {
                    return (Err(e), written);
                }
                written += text.len() as u64;
                // The formatter may have stopped; a buffer it does not take back is dropped.
                let _ = give_back.send(text);
            }
            (writer.flush(), written)
        });
        let mut spare: Vec<Vec<u8>> = spares.into();
        let mut outcome = Ok(());
        for start in (0..n).step_by(SLICE_ROWS) {
            let mut text = match spare.pop() {
                Some(t) => t,
                // Both buffers are out: wait for the writer to finish with one.
                None => match returned.recv() {
                    Ok(t) => t,
                    Err(_) => break,
                },
            };
            text.clear();
            let slice = batch.slice(start, SLICE_ROWS.min(n - start));
            if let Err(e) = format_text(format, &slice, &mut text) {
                outcome = Err(SliceError::Format(e));
                break;
            }
            if to_writer.send(text).is_err() {
                // The writer stopped at an error, reported below.
                break;
            }
        }
        drop(to_writer);
        let (written, write_outcome) = match helper.join() {
            Ok((result, written)) => (written, result.map_err(SliceError::Write)),
            Err(_) => (0, Err(SliceError::Write(std::io::Error::other("the writer panicked")))),
        };
        spare.extend(returned.try_iter());
        spare.truncate(2);
        spare.retain(|t| t.capacity() <= TEXT_BUFFER_KEPT);
        (outcome.and(write_outcome), written, spare)
    })
}

/// The batch with each zoneless TIMESTAMP column turned into the text arrow's CSV and JSON
/// writers would write for it (`2024-01-01T00:00:00`, with `.fff` or `.ffffff` when the
/// fraction needs it). Arrow formats each value through chrono and `fmt`, which was half the
/// cost of a CSV sink's run; this writes the digits directly. A column with a zone, or with a
/// value outside the years 0-9999, is left for arrow to write.
fn timestamps_as_text(batch: RecordBatch) -> Result<RecordBatch> {
    use arrow::array::{Array, AsArray, StringBuilder};
    use arrow::datatypes::TimestampMicrosecondType;
    let text_column = |c: &ArrayRef| {
        if *c.data_type() != DataType::Timestamp(TimeUnit::Microsecond, None) {
            return None;
        }
        let values = c.as_primitive::<TimestampMicrosecondType>();
        let mut out = StringBuilder::with_capacity(values.len(), values.len() * 26);
        let mut text = IsoText::default();
        for v in values.iter() {
            match v {
                Some(v) => out.append_value(text.write(v)?),
                None => out.append_null(),
            }
        }
        Some(Arc::new(out.finish()) as ArrayRef)
    };
    let texts: Vec<Option<ArrayRef>> = batch.columns().iter().map(text_column).collect();
    if texts.iter().all(Option::is_none) {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(texts.len());
    let mut columns = Vec::with_capacity(texts.len());
    for ((field, column), text) in batch.schema().fields().iter().zip(batch.columns()).zip(texts) {
        match text {
            Some(t) => {
                fields.push(Field::new(field.name(), DataType::Utf8, true));
                columns.push(t);
            }
            None => {
                fields.push(field.as_ref().clone());
                columns.push(column.clone());
            }
        }
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

/// 0000-01-01T00:00:00 and 9999-12-31T23:59:59.999999 in microseconds since the epoch: the
/// first and last instants [`IsoText`] writes.
const ISO_FIRST_MICROS: i64 = -62_167_219_200_000_000;
const ISO_LAST_MICROS: i64 = 253_402_300_799_999_999;

/// Writes instants of the years 0-9999 as ISO-8601 text, as
/// chrono's `NaiveDateTime` debug form: a fraction only if there is one, in 3 digits when it
/// is whole milliseconds, else 6. The date and time of day are kept from one value to the next
/// and written again only when the second changes, and the whole text is reused when the value
/// repeats (a sink's rows mostly come in time order, and a window's bounds repeat on each of
/// its rows).
struct IsoText {
    buf: [u8; 26],
    /// The second since the epoch whose date and time `buf[..19]` holds.
    second: i64,
    /// The value whose text is `buf[..len]` (`len` 0: none yet).
    micros: i64,
    len: usize,
}

impl Default for IsoText {
    fn default() -> Self {
        IsoText { buf: *b"0000-00-00T00:00:00.000000", second: i64::MIN, micros: 0, len: 0 }
    }
}

impl IsoText {
    /// The text of `micros`; None outside the years 0-9999.
    fn write(&mut self, micros: i64) -> Option<&str> {
        // Only ASCII digits and separators are ever in the buffer.
        std::str::from_utf8(self.write_bytes(micros)?).ok()
    }

    /// [`IsoText::write`]'s text as bytes.
    fn write_bytes(&mut self, micros: i64) -> Option<&[u8]> {
        if self.len == 0 || micros != self.micros {
            self.len = self.compose(micros)?;
            self.micros = micros;
        }
        Some(&self.buf[..self.len])
    }

    /// Writes the text of `micros` into the buffer and returns its length; None outside the
    /// years 0-9999.
    fn compose(&mut self, micros: i64) -> Option<usize> {
        use chrono::{Datelike, Timelike};
        let second = micros.div_euclid(1_000_000);
        let fraction = micros.rem_euclid(1_000_000) as u32;
        if second != self.second {
            let t = chrono::DateTime::from_timestamp(second, 0)?;
            let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
            self.second = second;
            self.digits(0, year / 100, 2);
            self.digits(2, year % 100, 2);
            self.digits(5, t.month(), 2);
            self.digits(8, t.day(), 2);
            self.digits(11, t.hour(), 2);
            self.digits(14, t.minute(), 2);
            self.digits(17, t.second(), 2);
        }
        Some(match fraction {
            0 => 19,
            f if f % 1000 == 0 => {
                self.digits(20, f / 1000, 3);
                23
            }
            f => {
                self.digits(20, f, 6);
                26
            }
        })
    }

    /// Writes the last `width` decimal digits of `value` at `buf[at..]`.
    fn digits(&mut self, at: usize, mut value: u32, width: usize) {
        for k in (at..at + width).rev() {
            self.buf[k] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
}

impl Drop for FileSink {
    /// A Parquet file is finished when its sink ends, however it ends; the writing thread
    /// writes what it was handed first, and stops.
    fn drop(&mut self) {
        let _ = self.finish();
        self.pipe.stop();
    }
}

/// Appends a decimal's text, from its unscaled value's digits (`value`, with its sign), as
/// arrow's display of a decimal writes it: digits beyond `precision` dropped from the end (only
/// a value out of its type's range has them), then the point placed `scale` digits from the
/// end, with zeros before it as needed (`-0.005`), or `-scale` zeros appended.
pub(crate) fn decimal(value: &str, precision: usize, scale: i8, out: &mut Vec<u8>) {
    let (sign, all) = match value.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", value),
    };
    let digits = &all[..precision.min(all.len())];
    out.extend_from_slice(sign.as_bytes());
    let scale_digits = scale.unsigned_abs() as usize;
    if scale == 0 {
        out.extend_from_slice(digits.as_bytes());
    } else if scale < 0 {
        out.extend_from_slice(digits.as_bytes());
        out.resize(out.len() + scale_digits, b'0');
    } else if all.len() > scale_digits {
        // Arrow compares the digits before cutting them to the precision, so a cut value can
        // start with its point (`.1`).
        let (whole, fraction) = digits.split_at(digits.len().saturating_sub(scale_digits));
        out.extend_from_slice(whole.as_bytes());
        out.push(b'.');
        out.extend_from_slice(fraction.as_bytes());
    } else {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + scale_digits - digits.len(), b'0');
        out.extend_from_slice(digits.as_bytes());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is a failed test
mod tests {
    use super::*;
    use arrow::util::display::{ArrayFormatter, FormatOptions};

    fn arrows_text(micros: i64) -> String {
        let a = TimestampMicrosecondArray::from(vec![micros]);
        let f = ArrayFormatter::try_new(&a, &FormatOptions::default()).unwrap();
        f.value(0).to_string()
    }

    /// The hand-written text is arrow's (chrono's), over the whole range it writes.
    #[test]
    fn iso_text_is_what_arrow_writes() {
        use proptest::prelude::*;
        let mut text = IsoText::default();
        for v in [
            0,
            1,
            -1,
            1_000,
            999_999,
            -86_400_000_000,
            951_782_400_123_000, // 2000-02-29T00:00:00.123
            ISO_FIRST_MICROS,
            ISO_LAST_MICROS,
        ] {
            assert_eq!(text.write(v), Some(arrows_text(v).as_str()), "{v}");
        }
        assert_eq!(text.write(ISO_FIRST_MICROS - 1), None);
        assert_eq!(text.write(ISO_LAST_MICROS + 1), None);
        let micros = prop_oneof![
            ISO_FIRST_MICROS..=ISO_LAST_MICROS,
            (ISO_FIRST_MICROS / 1000..=ISO_LAST_MICROS / 1000).prop_map(|ms| ms * 1000),
            (ISO_FIRST_MICROS / 1_000_000..=ISO_LAST_MICROS / 1_000_000)
                .prop_map(|s| s * 1_000_000),
        ];
        // Runs of values, some within one second (the date and time kept from the last),
        // some repeated (the whole text kept).
        let runs = prop::collection::vec((micros, 0i64..3_000_000), 1..20);
        proptest!(|(run in runs)| {
            let mut text = IsoText::default();
            for (v, step) in run {
                let w = (v + step).min(ISO_LAST_MICROS);
                for w in [v, w, w, v] {
                    let expected = arrows_text(w);
                    prop_assert_eq!(text.write(w), Some(expected.as_str()));
                }
            }
        });
    }

    /// Both writers write the same bytes whether a batch's timestamps were turned into text
    /// first or not: with NULLs, a column out of the range written by hand, and one with a
    /// zone (both left to arrow).
    #[test]
    fn sinks_write_the_same_bytes_with_timestamps_as_text() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", ts.clone(), true),
            Field::new("far", ts, true),
            Field::new(
                "zoned",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+02:00".into())),
                true,
            ),
        ]));
        let t = TimestampMicrosecondArray::from(vec![
            Some(1_500),
            None,
            Some(-1),
            Some(86_400_000_000),
        ]);
        let far = TimestampMicrosecondArray::from(vec![
            Some(0),
            Some(ISO_LAST_MICROS + 1),
            None,
            Some(5),
        ]);
        let zoned = TimestampMicrosecondArray::from(vec![Some(0), Some(1), None, Some(7_000)])
            .with_timezone("+02:00");
        let batch = RecordBatch::try_new(schema, vec![Arc::new(t), Arc::new(far), Arc::new(zoned)])
            .unwrap();
        let converted = timestamps_as_text(batch.clone()).unwrap();
        assert_eq!(converted.schema().field(0).data_type(), &DataType::Utf8);
        assert_ne!(converted.schema().field(1).data_type(), &DataType::Utf8);
        assert_ne!(converted.schema().field(2).data_type(), &DataType::Utf8);
        let csv = |b: &RecordBatch| {
            let mut out = Vec::new();
            arrow::csv::WriterBuilder::new().with_header(false).build(&mut out).write(b).unwrap();
            String::from_utf8(out).unwrap()
        };
        let json = |b: &RecordBatch| {
            let mut out = Vec::new();
            let mut w = arrow::json::LineDelimitedWriter::new(&mut out);
            w.write(b).unwrap();
            w.finish().unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(csv(&converted), csv(&batch));
        assert_eq!(json(&converted), json(&batch));
        assert!(csv(&batch).starts_with("1970-01-01T00:00:00.001500,1970-01-01T00:00:00,"));
    }

    /// A batch of `n` rows: an integer, a string that sometimes needs quoting or escaping, a
    /// timestamp; with `list`, a list column too (which the JSON sink leaves to arrow's writer).
    fn rows(n: usize, list: bool) -> RecordBatch {
        use arrow::array::{ListArray, StringArray};
        let ints: Int64Array =
            (0..n as i64).map(|i| (i % 7 != 3).then_some(i * 1_000_003)).collect();
        let text: StringArray =
            (0..n).map(|i| Some(format!("row {i}{}", ["", ",", "\"q\"", "\n"][i % 4]))).collect();
        let times = TimestampMicrosecondArray::from_iter_values((0..n as i64).map(|i| i * 1_234));
        let mut cols: Vec<ArrayRef> = vec![Arc::new(ints), Arc::new(text), Arc::new(times)];
        if list {
            let lists = ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(
                (0..n as i64).map(|i| Some(vec![Some(i), None])),
            );
            cols.push(Arc::new(lists));
        }
        RecordBatch::try_from_iter(["i", "s", "t", "l"].into_iter().zip(cols)).unwrap()
    }

    /// A large batch written a slice at a time while the slice before is written leaves the
    /// file with the bytes of the batch formatted in one piece, for each text format, with
    /// rows left over after the last whole slice, and its buffers come back for the next batch.
    #[test]
    fn a_batch_written_in_slices_is_the_batch_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        for (format, list) in [
            (SinkFormat::Csv, false),
            (SinkFormat::JsonLines, false),
            (SinkFormat::JsonLines, true),
        ] {
            let batch = rows(3 * SLICE_ROWS + 17, list);
            let mut whole = Vec::new();
            format_text(format, &batch, &mut whole).unwrap();
            let path = dir.path().join(format!("{format:?}-{list}"));
            let mut writer = BufWriter::new(File::create(&path).unwrap());
            writer.write_all(b"before\n").unwrap();
            let (result, written, spares) =
                write_sliced(&mut writer, format, &batch, [Vec::new(), Vec::new()]);
            result.unwrap();
            assert_eq!(written, whole.len() as u64, "{format:?}");
            assert_eq!(spares.len(), 2, "{format:?}: both buffers back");
            let file = std::fs::read(&path).unwrap();
            assert_eq!(&file[..7], b"before\n");
            assert!(file[7..] == whole[..], "{format:?} {list}: the bytes differ");
        }
    }

    /// A writer that fails stops the slices and the error comes back; what reached the file
    /// is counted.
    #[test]
    fn a_failed_write_of_a_slice_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").unwrap();
        let read_only = File::open(&path).unwrap();
        // Writes go straight to the file (no buffer to hide them in).
        let mut writer = BufWriter::with_capacity(0, read_only);
        let batch = rows(2 * SLICE_ROWS, false);
        let (result, written, _) =
            write_sliced(&mut writer, SinkFormat::Csv, &batch, [Vec::new(), Vec::new()]);
        assert!(matches!(result, Err(SliceError::Write(_))), "{result:?}");
        assert_eq!(written, 0);
    }

    /// `batch` as one sink batch at instant `t`, each row once.
    fn changes(batch: &RecordBatch, t: i64) -> ChangeBatch {
        let n = batch.num_rows();
        ChangeBatch::new(batch.clone(), vec![t; n], vec![1; n])
    }

    /// A sink over `path` for batches like `batch`, a stream's, instants as ticks.
    fn sink(path: &std::path::Path, format: SinkFormat, batch: &RecordBatch) -> FileSink {
        let spec = SinkSpec { path: path.display().to_string(), format };
        let schema = batch.schema();
        FileSink::open(spec, path.into(), &schema, PlanKind::Stream, TimeDomain::Ticks, None)
            .unwrap()
    }

    /// Batches handed to the writing thread while the engine goes on (written whole) and
    /// batches it waits for (written in slices) reach the file in order, as one thread
    /// would write them, after the file's old contents are cut away.
    #[test]
    fn batches_handed_to_the_writing_thread_reach_the_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        std::fs::write(&path, "an older run's output\n".repeat(10_000)).unwrap();
        let batch = rows(2 * SLICE_ROWS + 5, false);
        let mut sink = sink(&path, SinkFormat::Csv, &batch);
        let mut expected = b"_time,i,s,t\n".to_vec();
        for (t, awaited) in [(1, false), (2, true), (3, false), (4, false)] {
            sink.write(&changes(&batch, t), awaited).unwrap();
            let mut cols: Vec<ArrayRef> =
                vec![Arc::new(Int64Array::from(vec![t; batch.num_rows()]))];
            cols.extend(batch.columns().iter().cloned());
            let file_batch = RecordBatch::try_new(sink.schema.clone(), cols).unwrap();
            format_text(SinkFormat::Csv, &file_batch, &mut expected).unwrap();
        }
        sink.settle().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert!(file == expected, "the file is not the batches in order");
        assert_eq!(sink.written(), file.len() as u64);
        assert_eq!(sink.sync().unwrap(), file.len() as u64);
    }

    /// A batch the thread cannot write fails the next call on the sink (a settle, a write,
    /// a sync) with the system's message, and nothing more is written.
    #[test]
    fn a_write_that_fails_on_the_thread_fails_the_calls_after_it() {
        let batch = rows(10, false);
        let mut sink = sink(std::path::Path::new("/dev/full"), SinkFormat::JsonLines, &batch);
        sink.write(&changes(&batch, 1), false).unwrap();
        let err = sink.settle().unwrap_err().to_string();
        assert!(err.contains("cannot write: No space left on device"), "{err}");
        assert_eq!(sink.write(&changes(&batch, 2), false).unwrap_err().to_string(), err);
        assert_eq!(sink.sync().unwrap_err().to_string(), err);
        assert_eq!(sink.written(), 0);
    }
}
