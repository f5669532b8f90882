//! Decoding framed records (CSV or JSON lines) into a stream's Arrow batches, row by row
//! accountable.
//!
//! The fast path decodes a whole run of records at once: a CSV run with no quoted field with
//! [`super::csv_fast`] (fields parsed where they lie), any other run with arrow's CSV or JSON
//! decoder, converting the `TIMESTAMP` columns (read as text) with [`parse_timestamp`]:
//! ISO-8601 text or an epoch number. If anything in the run fails, the slow path checks each
//! record on its own, so that
//! a bad row is reported with its line, byte offset, field and reason and the good rows around
//! it are kept; the good rows are then decoded together by the fast path again.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::compute::kernels::cast_utils::string_to_datetime;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::csv_fast::{EpochUnit, FastCsv};
use super::framing::Records;
use super::json_fast::FastJson;
use weir_sql::types::sql_type_name;

/// How a source's bytes are laid out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Comma-separated values (RFC 4180 quoting). With `header`, each file's first record names
    /// its columns, matched to the stream's by name (extra columns are ignored); without, the
    /// fields are the stream's columns in order.
    Csv { header: bool, delimiter: u8 },
    /// One JSON object per line; keys are the stream's column names, missing keys are NULL.
    JsonLines,
    /// Apache Parquet files: typed columns matched to the stream's by name (see
    /// [`super::parquet`]). Files only, never followed.
    Parquet,
}

/// A record that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BadRow {
    pub line: u64,
    /// Where the record starts in its file; None where bytes do not locate it (Parquet).
    pub offset: Option<u64>,
    /// The column at fault, or empty if the record as a whole is malformed.
    pub field: String,
    pub reason: String,
    /// The record's text (invalid UTF-8 replaced).
    pub raw: String,
}

/// The result of decoding a run of records.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The good rows, in the stream's schema, in record order.
    pub batch: RecordBatch,
    /// For each row of `batch`, the index of its record.
    pub rows_from: Vec<usize>,
    /// The bad records, by index, in order.
    pub bad: Vec<(usize, BadRow)>,
}

/// Where a stream's columns are in a CSV file's fields.
#[derive(Debug, Clone)]
struct CsvLayout {
    fields: usize,
    /// For each stream column, its field index.
    index: Vec<usize>,
    /// Field names (the header's, or the stream's), for arrow's file schema.
    names: Vec<String>,
}

/// Decodes records of one source into a stream's batches. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct RowDecoder {
    schema: SchemaRef,
    /// A stream's event-time column, which may not be empty; None for a table.
    time_column: Option<usize>,
    /// Microseconds per unit of an epoch number in a TIMESTAMP field.
    epoch_scale: i64,
    epoch_unit: &'static str,
    format: Format,
    layout: Option<CsvLayout>,
    /// The CSV fast path for `layout`, if the stream's column types have one.
    fast_csv: Option<FastCsv>,
    /// The JSON-lines fast path, if the format is JSON lines and the column types have one.
    fast_json: Option<FastJson>,
}

/// Arrow reads TIMESTAMP columns as text; [`parse_timestamp`] converts them.
fn read_type(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(_, _) => DataType::Utf8,
        t => t.clone(),
    }
}

impl RowDecoder {
    /// `epoch_unit` is `s`, `ms` or `us`: how epoch numbers in TIMESTAMP fields are read.
    pub fn new(
        schema: SchemaRef,
        time_column: Option<usize>,
        format: Format,
        epoch_unit: &str,
    ) -> Result<Self, String> {
        let (epoch_scale, epoch_unit) = match epoch_unit {
            "s" => (1_000_000, "seconds"),
            "ms" => (1_000, "milliseconds"),
            "us" => (1, "microseconds"),
            other => return Err(format!("epoch must be 's', 'ms' or 'us', not '{other}'")),
        };
        let layout = match &format {
            Format::Csv { header: false, .. } => Some(CsvLayout {
                fields: schema.fields().len(),
                index: (0..schema.fields().len()).collect(),
                names: schema.fields().iter().map(|f| f.name().clone()).collect(),
            }),
            _ => None,
        };
        let fast_json = match format {
            Format::JsonLines => FastJson::new(
                schema.clone(),
                time_column,
                EpochUnit { scale: epoch_scale, name: epoch_unit },
            ),
            _ => None,
        };
        let mut decoder = RowDecoder {
            schema,
            time_column,
            epoch_scale,
            epoch_unit,
            format,
            layout: None,
            fast_csv: None,
            fast_json,
        };
        if let Some(layout) = layout {
            decoder.set_layout(layout);
        }
        Ok(decoder)
    }

    /// Where the stream's columns are in a CSV record, and the fast path for that layout.
    fn set_layout(&mut self, layout: CsvLayout) {
        self.fast_csv = match self.format {
            Format::Csv { delimiter, .. } => FastCsv::new(
                self.schema.clone(),
                self.time_column,
                delimiter,
                b'"',
                layout.fields,
                &layout.index,
                EpochUnit { scale: self.epoch_scale, name: self.epoch_unit },
            ),
            Format::JsonLines | Format::Parquet => None,
        };
        self.layout = Some(layout);
    }

    /// The stream's (or table's) schema the rows are decoded into.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The stream's event-time column, if any.
    pub fn time_column(&self) -> Option<usize> {
        self.time_column
    }

    /// Whether the next file's first record is a header to pass to [`Self::set_header`].
    pub fn wants_header(&self) -> bool {
        matches!(self.format, Format::Csv { header: true, .. })
    }

    /// Reads a CSV header: every stream column must be named in it (case-insensitively).
    pub fn set_header(&mut self, record: &[u8]) -> Result<(), String> {
        let Format::Csv { delimiter, .. } = self.format else {
            return Ok(());
        };
        let fields = CsvSplitter::new(delimiter).split(record);
        let names: Vec<String> = fields
            .iter()
            .map(|f| String::from_utf8_lossy(f).trim().trim_start_matches('\u{feff}').to_string())
            .collect();
        let mut index = Vec::new();
        for f in self.schema.fields() {
            match names.iter().position(|n| n.eq_ignore_ascii_case(f.name())) {
                Some(i) => index.push(i),
                None => {
                    return Err(format!(
                        "the header has no column '{}' (it has: {})",
                        f.name(),
                        names.join(", ")
                    ))
                }
            }
        }
        self.set_layout(CsvLayout { fields: names.len(), index, names });
        Ok(())
    }

    /// Decodes a run of records; never fails as a whole: what cannot be read is a bad row.
    pub fn decode(&self, recs: &Records) -> Decoded {
        if recs.is_empty() {
            return Decoded {
                batch: RecordBatch::new_empty(self.schema.clone()),
                rows_from: vec![],
                bad: vec![],
            };
        }
        if !recs.any_malformed() {
            if let Ok(batch) = self.decode_fast(&recs.bytes, recs.len(), true) {
                if batch.num_rows() == recs.len() {
                    return Decoded { batch, rows_from: (0..recs.len()).collect(), bad: vec![] };
                }
            }
        }
        self.decode_slow(recs)
    }

    fn decode_slow(&self, recs: &Records) -> Decoded {
        let mut bad = Vec::new();
        let mut good = Vec::new();
        let delimiter = match self.format {
            Format::Csv { delimiter, .. } => delimiter,
            Format::JsonLines | Format::Parquet => b',',
        };
        let mut splitter = CsvSplitter::new(delimiter);
        for i in 0..recs.len() {
            if let Some(reason) = recs.malformed[i] {
                bad.push((i, self.bad_row(recs, i, String::new(), reason.to_string())));
                continue;
            }
            match self.check(recs.record(i), &mut splitter) {
                Ok(()) => good.push(i),
                Err((field, reason)) => bad.push((i, self.bad_row(recs, i, field, reason))),
            }
        }
        let keep: std::collections::HashSet<usize> = good.iter().copied().collect();
        let subset = recs.filtered(|i| keep.contains(&i));
        if let Ok(batch) = self.decode_fast(&subset.bytes, subset.len(), false) {
            if batch.num_rows() == good.len() {
                return Decoded { batch, rows_from: good, bad };
            }
        }
        // The checks and arrow disagree: decode the rest one record at a time.
        let mut batches = Vec::new();
        let mut rows_from = Vec::new();
        for &i in &good {
            match self.decode_fast(recs.record(i), 1, false) {
                Ok(b) if b.num_rows() == 1 => {
                    batches.push(b);
                    rows_from.push(i);
                }
                Ok(_) => bad.push((i, self.bad_row(recs, i, String::new(), "unreadable".into()))),
                Err(e) => bad.push((i, self.bad_row(recs, i, String::new(), e))),
            }
        }
        bad.sort_by_key(|(i, _)| *i);
        let batch = arrow::compute::concat_batches(&self.schema, &batches)
            .unwrap_or_else(|_| RecordBatch::new_empty(self.schema.clone()));
        if batch.num_rows() != rows_from.len() {
            // Unreachable in practice (same schema throughout); never lose track of a row.
            let reason = "rows could not be assembled".to_string();
            for i in rows_from {
                bad.push((i, self.bad_row(recs, i, String::new(), reason.clone())));
            }
            bad.sort_by_key(|(i, _)| *i);
            return Decoded {
                batch: RecordBatch::new_empty(self.schema.clone()),
                rows_from: vec![],
                bad,
            };
        }
        Decoded { batch, rows_from, bad }
    }

    fn bad_row(&self, recs: &Records, i: usize, field: String, reason: String) -> BadRow {
        BadRow {
            line: recs.lines[i],
            offset: Some(recs.offsets[i]),
            field,
            reason,
            raw: recs.text(i),
        }
    }

    /// A run of whole records at once: the CSV or JSON fast path if it takes the run, else
    /// arrow's decoder. Both read a number too large for its type (`1e400`) as infinity; with
    /// `no_infinity`, any infinite float sends the run to the slow path, whose checks tell a
    /// written infinity (`inf`, `-Infinity`) from an out-of-range number.
    fn decode_fast(
        &self,
        bytes: &[u8],
        records: usize,
        no_infinity: bool,
    ) -> Result<RecordBatch, String> {
        let fast = match (&self.fast_csv, &self.fast_json) {
            (Some(csv), _) => csv.decode(bytes, records),
            (None, Some(json)) => json.decode(bytes, records),
            (None, None) => None,
        };
        let batch = match fast {
            Some(batch) => batch,
            None => self.decode_with_arrow(bytes, records)?,
        };
        if no_infinity && has_infinity(&batch) {
            return Err("an infinite float".into());
        }
        Ok(batch)
    }

    /// Arrow's CSV or JSON decoder over whole records, then [`Self::finish`]: the TIMESTAMP
    /// conversion and the event-time check.
    fn decode_with_arrow(&self, bytes: &[u8], records: usize) -> Result<RecordBatch, String> {
        let batch_size = records.max(1);
        let raw = match &self.format {
            Format::Csv { delimiter, .. } => {
                let layout = self.layout.as_ref().ok_or("no CSV header read yet")?;
                let mut fields: Vec<Field> = layout
                    .names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| Field::new(format!("{i}:{n}"), DataType::Utf8, true))
                    .collect();
                for (c, &i) in layout.index.iter().enumerate() {
                    let t = read_type(self.schema.field(c).data_type());
                    fields[i] = Field::new(format!("{i}:{}", layout.names[i]), t, true);
                }
                let decoder = arrow::csv::ReaderBuilder::new(Arc::new(Schema::new(fields)))
                    .with_header(false)
                    .with_delimiter(*delimiter)
                    .with_batch_size(batch_size)
                    .with_projection(layout.index.clone())
                    .build_decoder();
                run_decoder(decoder, bytes)?
            }
            Format::JsonLines => {
                let fields: Vec<Field> = self
                    .schema
                    .fields()
                    .iter()
                    .map(|f| Field::new(f.name(), read_type(f.data_type()), true))
                    .collect();
                let decoder = arrow::json::ReaderBuilder::new(Arc::new(Schema::new(fields)))
                    .with_batch_size(batch_size)
                    .with_coerce_primitive(true)
                    .build_decoder()
                    .map_err(|e| e.to_string())?;
                run_json_decoder(decoder, bytes)?
            }
            Format::Parquet => return Err("Parquet is not read as text".into()),
        };
        self.finish(raw).map_err(|(_, _, e)| e)
    }

    /// Converts text TIMESTAMP columns and checks every row has an event time.
    fn finish(&self, raw: RecordBatch) -> Result<RecordBatch, (usize, usize, String)> {
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(raw.num_columns());
        for (c, f) in self.schema.fields().iter().enumerate() {
            let col = raw.column(c);
            let col = match f.data_type() {
                DataType::Timestamp(TimeUnit::Microsecond, tz) => {
                    let text = col.as_any().downcast_ref::<StringArray>().ok_or((
                        0,
                        c,
                        "timestamp read as text".to_string(),
                    ))?;
                    let mut values = Vec::with_capacity(text.len());
                    for row in 0..text.len() {
                        values.push(if text.is_null(row) {
                            0
                        } else {
                            parse_timestamp(text.value(row), self.epoch_scale, self.epoch_unit)
                                .map_err(|e| (row, c, e))?
                        });
                    }
                    let a = TimestampMicrosecondArray::new(values.into(), text.nulls().cloned())
                        .with_timezone_opt(tz.clone());
                    Arc::new(a) as ArrayRef
                }
                t if col.data_type() != t => arrow::compute::cast(col, t)
                    .map_err(|e| (0, c, format!("cannot convert column: {e}")))?,
                _ => col.clone(),
            };
            cols.push(col);
        }
        if let Some(t) = self.time_column.filter(|&t| cols[t].null_count() > 0) {
            if let Some(row) = (0..raw.num_rows()).find(|&r| cols[t].is_null(r)) {
                return Err((row, t, "no event time".into()));
            }
        }
        RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| (0, 0, e.to_string()))
    }

    /// Checks one record on its own: `Err((field, reason))` says what is wrong with it.
    fn check(&self, record: &[u8], splitter: &mut CsvSplitter) -> Result<(), (String, String)> {
        match &self.format {
            Format::Csv { delimiter, .. } => {
                let layout = self.layout.as_ref().ok_or((String::new(), "no header".into()))?;
                let _ = delimiter;
                let fields = splitter.split(record);
                if fields.len() != layout.fields {
                    return Err((
                        String::new(),
                        format!("expected {} fields, found {}", layout.fields, fields.len()),
                    ));
                }
                for (c, &i) in layout.index.iter().enumerate() {
                    let name = self.schema.field(c).name().clone();
                    let text = std::str::from_utf8(&fields[i])
                        .map_err(|_| (name.clone(), "invalid UTF-8".to_string()))?;
                    self.check_value(c, (!text.is_empty()).then_some(text))
                        .map_err(|e| (name, e))?;
                }
                Ok(())
            }
            Format::JsonLines => {
                let record = record.strip_suffix(b"\n").unwrap_or(record);
                let record = record.strip_suffix(b"\r").unwrap_or(record);
                let v: serde_json::Value = serde_json::from_slice(record)
                    .map_err(|e| (String::new(), format!("invalid JSON: {e}")))?;
                let obj =
                    v.as_object().ok_or((String::new(), "expected a JSON object".to_string()))?;
                for (c, f) in self.schema.fields().iter().enumerate() {
                    let text = match obj.get(f.name()) {
                        None | Some(serde_json::Value::Null) => None,
                        Some(serde_json::Value::String(s)) => Some(s.clone()),
                        Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                            Some(v.to_string())
                        }
                        Some(_) => {
                            return Err((f.name().clone(), "expected a scalar value".into()))
                        }
                    };
                    self.check_value(c, text.as_deref()).map_err(|e| (f.name().clone(), e))?;
                }
                Ok(())
            }
            Format::Parquet => Err((String::new(), "Parquet is not read as text".into())),
        }
    }

    /// A batch read from a Parquet file (its first row being row `first_row` of the file,
    /// from 0) in the stream's schema; see [`super::parquet::convert`].
    pub fn convert_parquet(&self, raw: &RecordBatch, first_row: u64) -> Decoded {
        super::parquet::convert(
            raw,
            &self.schema,
            self.time_column,
            self.epoch_scale,
            self.epoch_unit,
            first_row,
        )
    }

    /// Whether one field's text (None: empty or missing) fits its column.
    fn check_value(&self, c: usize, text: Option<&str>) -> Result<(), String> {
        let Some(text) = text else {
            return if Some(c) == self.time_column { Err("no event time".into()) } else { Ok(()) };
        };
        let t = self.schema.field(c).data_type();
        if matches!(t, DataType::Timestamp(_, _)) {
            return parse_timestamp(text, self.epoch_scale, self.epoch_unit).map(|_| ());
        }
        let bad = || format!("cannot read {} as {}", quoted(text), sql_type_name(t));
        // The common types are checked without building arrays (this runs once per field of
        // every record in a run that holds a bad row).
        let v = text.trim();
        match t {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => return Ok(()),
            DataType::Int64 => return v.parse::<i64>().map(|_| ()).map_err(|_| bad()),
            DataType::Int32 => return v.parse::<i32>().map(|_| ()).map_err(|_| bad()),
            DataType::Int16 => return v.parse::<i16>().map(|_| ()).map_err(|_| bad()),
            DataType::Int8 => return v.parse::<i8>().map(|_| ()).map_err(|_| bad()),
            DataType::Float64 | DataType::Float32 => {
                let x = v.parse::<f64>().map_err(|_| bad())?;
                let written_infinity = matches!(
                    v.trim_start_matches(['+', '-']).to_ascii_lowercase().as_str(),
                    "inf" | "infinity"
                );
                let too_large = x.is_infinite()
                    || (*t == DataType::Float32 && x.is_finite() && x.abs() > f64::from(f32::MAX));
                if too_large && !written_infinity {
                    return Err(format!(
                        "{} is out of range for {}",
                        quoted(text),
                        sql_type_name(t)
                    ));
                }
                return Ok(());
            }
            _ => {}
        }
        let arr: ArrayRef = Arc::new(StringArray::from(vec![text.trim()]));
        let opts = arrow::compute::CastOptions { safe: false, ..Default::default() };
        arrow::compute::cast_with_options(&arr, t, &opts)
            .map(|_| ())
            .map_err(|_| format!("cannot read {} as {}", quoted(text), sql_type_name(t)))
    }
}

/// Whether a float column of the batch holds an infinity.
fn has_infinity(batch: &RecordBatch) -> bool {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float32Type, Float64Type};
    batch.columns().iter().any(|c| match c.data_type() {
        DataType::Float64 => c.as_primitive::<Float64Type>().iter().flatten().any(f64::is_infinite),
        DataType::Float32 => c.as_primitive::<Float32Type>().iter().flatten().any(f32::is_infinite),
        _ => false,
    })
}

fn run_decoder(mut d: arrow::csv::reader::Decoder, bytes: &[u8]) -> Result<RecordBatch, String> {
    let mut batches = Vec::new();
    let mut pos = 0;
    loop {
        let n = d.decode(&bytes[pos..]).map_err(|e| e.to_string())?;
        pos += n;
        if n == 0 || d.capacity() == 0 {
            if let Some(b) = d.flush().map_err(|e| e.to_string())? {
                batches.push(b);
            }
        }
        if n == 0 && pos >= bytes.len() {
            break;
        }
        if n == 0 && d.capacity() > 0 {
            // No progress on remaining bytes: signal end of input to finish the last record.
            d.decode(&[]).map_err(|e| e.to_string())?;
            if let Some(b) = d.flush().map_err(|e| e.to_string())? {
                batches.push(b);
            }
            break;
        }
    }
    concat(batches)
}

fn run_json_decoder(
    mut d: arrow::json::reader::Decoder,
    bytes: &[u8],
) -> Result<RecordBatch, String> {
    let mut batches = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let n = d.decode(&bytes[pos..]).map_err(|e| e.to_string())?;
        pos += n;
        if let Some(b) = d.flush().map_err(|e| e.to_string())? {
            batches.push(b);
        }
        if n == 0 {
            break;
        }
    }
    if let Some(b) = d.flush().map_err(|e| e.to_string())? {
        batches.push(b);
    }
    concat(batches)
}

fn concat(batches: Vec<RecordBatch>) -> Result<RecordBatch, String> {
    match batches.first() {
        None => Err("no rows".into()),
        Some(b) => arrow::compute::concat_batches(&b.schema(), &batches).map_err(|e| e.to_string()),
    }
}

/// A field's text for a message: quoted, control characters escaped, long text shortened.
fn quoted(text: &str) -> String {
    let mut out: String = text.chars().take(40).flat_map(char::escape_debug).collect();
    if text.chars().count() > 40 {
        out.push_str("...");
    }
    format!("'{out}'")
}

/// Splits CSV records into unquoted fields, reusing one parser (building a csv-core reader
/// costs far more than splitting a record).
#[derive(Debug)]
pub(crate) struct CsvSplitter {
    reader: csv_core::Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
}

impl CsvSplitter {
    pub fn new(delimiter: u8) -> Self {
        CsvSplitter {
            reader: csv_core::ReaderBuilder::new().delimiter(delimiter).build(),
            out: vec![0; 256],
            ends: vec![0; 16],
        }
    }

    /// The fields of one record.
    pub fn split(&mut self, record: &[u8]) -> Vec<Vec<u8>> {
        use csv_core::ReadRecordResult as R;
        self.reader.reset();
        let (mut input, mut nout, mut nends) = (record, 0, 0);
        let mut ended = false;
        loop {
            let (res, nin, o, e) =
                self.reader.read_record(input, &mut self.out[nout..], &mut self.ends[nends..]);
            input = &input[nin..];
            nout += o;
            nends += e;
            match res {
                R::InputEmpty if !ended => {
                    // No more input: an empty read ends the record.
                    ended = input.is_empty();
                }
                R::OutputFull => self.out.resize(self.out.len() * 2, 0),
                R::OutputEndsFull => self.ends.resize(self.ends.len() * 2, 0),
                R::Record | R::End | R::InputEmpty => break,
            }
        }
        let mut start = 0;
        self.ends[..nends]
            .iter()
            .map(|&end| {
                let f = self.out[start..end].to_vec();
                start = end;
                f
            })
            .collect()
    }
}

/// Reads an event time: ISO-8601 / RFC 3339 text (`2024-01-01T00:00:05Z`, `2024-01-01
/// 00:00:05.250`, a zone offset converts to UTC) or an epoch number in the source's unit
/// (`1704067205`, `1704067205.25`). Returns microseconds since the epoch.
pub(crate) fn parse_timestamp(s: &str, scale: i64, unit: &str) -> Result<i64, String> {
    parse_timestamp_on(s, scale, unit, &mut DayCache::default())
}

/// [`parse_timestamp`], with the day of the last ISO date read kept in `days`: a column of
/// timestamps, mostly on one day, checks and converts each date once.
pub(crate) fn parse_timestamp_on(
    s: &str,
    scale: i64,
    unit: &str,
    days: &mut DayCache,
) -> Result<i64, String> {
    let t = s.trim();
    if let Some(micros) = iso_micros(t.as_bytes(), days) {
        return Ok(micros);
    }
    parse_timestamp_general(s, scale, unit)
}

/// The last valid `YYYY-MM-DD` an ISO timestamp began with, and its day since the Unix epoch.
#[derive(Debug, Default, Clone)]
pub(crate) struct DayCache {
    last: Option<([u8; 10], i64)>,
}

/// [`parse_timestamp`] without its fast path: every form it reads.
fn parse_timestamp_general(s: &str, scale: i64, unit: &str) -> Result<i64, String> {
    let t = s.trim();
    let err =
        || format!("cannot read {} as a timestamp (ISO-8601 text or epoch {unit})", quoted(s));
    if let Ok(n) = t.parse::<i64>() {
        return n.checked_mul(scale).ok_or_else(err);
    }
    if t.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')) {
        if let Ok(f) = t.parse::<f64>() {
            let v = (f * scale as f64).round();
            if v.is_finite() && v.abs() < 9.2e18 {
                return Ok(v as i64);
            }
        }
        return Err(err());
    }
    let utc: arrow::array::timezone::Tz = "+00:00".parse().map_err(|_| err())?;
    string_to_datetime(&utc, t).map(|d| d.timestamp_micros()).map_err(|_| err())
}

/// The fast path of [`parse_timestamp`], for the form nearly every file writes:
/// `YYYY-MM-DD` then `T`, `t` or a space, `HH:MM:SS`, an optional fraction of 1 to 9 digits
/// (cut to microseconds, as arrow's parser cuts it) and an optional `Z`. A valid date and time
/// in that form gives microseconds since the epoch; anything else (another form, an invalid
/// date, a zone offset, a leap second) gives None and is left to the general parser, which
/// then decides. Written by hand because the general parser, with its time-zone handling,
/// was a third of the cost of reading a CSV file.
fn iso_micros(b: &[u8], cache: &mut DayCache) -> Option<i64> {
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        b[from..to]
            .iter()
            .try_fold(0i64, |n, &d| d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0')))
    };
    let days = match cache.last {
        Some((date, days)) if b[..10] == date => days,
        _ => {
            let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
            // None for an invalid date (month 13, April 31, February 29 of a common year).
            let date = chrono::NaiveDate::from_ymd_opt(year as i32, month as u32, day as u32)?;
            let days =
                i64::from(chrono::Datelike::num_days_from_ce(&date)) - UNIX_EPOCH_DAYS_FROM_CE;
            let mut text = [0u8; 10];
            text.copy_from_slice(&b[..10]);
            cache.last = Some((text, days));
            days
        }
    };
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut micros = 0;
    if let Some((b'.', frac)) = rest.split_first() {
        let digits = frac.iter().take_while(|d| d.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let kept = digits.min(6);
        for &d in &frac[..kept] {
            micros = micros * 10 + i64::from(d - b'0');
        }
        micros *= [100_000, 10_000, 1_000, 100, 10, 1][kept - 1];
        rest = &frac[digits..];
    }
    if !(rest.is_empty() || rest == b"Z" || rest == b"z") {
        return None;
    }
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(seconds * 1_000_000 + micros)
}

/// Days from 0001-01-01 (day 1 of chrono's count) to 1970-01-01.
pub(crate) const UNIX_EPOCH_DAYS_FROM_CE: i64 = 719_163;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::framing::{Framer, Framing};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]))
    }

    fn frame(text: &str, csv: bool) -> Records {
        let framing =
            if csv { Framing::Csv { quote: b'"', delimiter: b',' } } else { Framing::Lines };
        Framer::new(framing).feed(text.as_bytes(), true)
    }

    fn show(d: &Decoded) -> (Vec<String>, Vec<String>) {
        let rows = crate::format::rows_as_text(&d.batch).unwrap_or_default();
        let bad = d
            .bad
            .iter()
            .map(|(i, b)| {
                format!(
                    "#{i} line {} @{} [{}] {} | {}",
                    b.line,
                    b.offset.unwrap_or(0),
                    b.field,
                    b.reason,
                    b.raw
                )
            })
            .collect();
        (rows.into_iter().map(|r| r.join(",")).collect(), bad)
    }

    #[test]
    fn timestamps_from_iso_text_and_epoch_numbers() {
        let p = |s| parse_timestamp(s, 1_000_000, "seconds");
        assert_eq!(p("1970-01-01T00:00:01Z"), Ok(1_000_000));
        assert_eq!(p("1970-01-01 00:00:01.5"), Ok(1_500_000));
        assert_eq!(p("1970-01-01T01:00:01+01:00"), Ok(1_000_000));
        assert_eq!(p("2"), Ok(2_000_000));
        assert_eq!(p(" 2.25 "), Ok(2_250_000));
        assert_eq!(parse_timestamp("1500", 1_000, "milliseconds"), Ok(1_500_000));
        assert_eq!(
            p("yesterday"),
            Err("cannot read 'yesterday' as a timestamp (ISO-8601 text or epoch seconds)".into())
        );
        assert!(p("99999999999999999999").is_err());
    }

    #[test]
    fn a_column_of_timestamps_reads_each_as_it_would_alone() {
        // One day cache across the column: a date seen before, a new one, one that does not
        // exist after one that does, a bad time on a cached day, epoch numbers between.
        let texts = [
            "2024-02-29 23:59:59.5",
            "2024-02-29T00:00:00Z",
            "2023-02-29 00:00:00",
            "2024-02-29 24:00:00",
            "2024-02-29 12:00:00+01:00",
            "17",
            "2024-03-01 00:00:00",
            "2024-02-29 00:00:01",
            "2024-02-2x 00:00:01",
        ];
        let mut days = DayCache::default();
        for t in texts {
            let column = parse_timestamp_on(t, 1_000_000, "seconds", &mut days);
            assert_eq!(column, parse_timestamp(t, 1_000_000, "seconds"), "{t}");
            assert_eq!(column, parse_timestamp_general(t, 1_000_000, "seconds"), "{t}");
        }
    }

    /// The fast ISO path gives what the general parser gives, on text in its form and on
    /// text just outside it (bad dates, leap days, zone offsets, long fractions, blanks).
    #[test]
    fn the_fast_iso_path_agrees_with_the_general_parser() {
        use proptest::prelude::*;
        let part =
            |lo: u32, hi: u32, width: usize| (lo..=hi).prop_map(move |n| format!("{n:0width$}"));
        let text = (
            (part(0, 9999, 4), part(0, 13, 2), part(0, 32, 2)),
            prop::sample::select(vec!["T", "t", " ", "_", "  "]),
            (part(0, 25, 2), part(0, 61, 2), part(0, 61, 2)),
            prop::sample::select(vec![
                "",
                ".",
                ".5",
                ".25",
                ".123456",
                ".1234567",
                ".123456789",
                ".1234567891",
                ".x",
            ]),
            prop::sample::select(vec!["", "Z", "z", "+01:00", "-05:30", " ", "ZZ", "x"]),
        )
            .prop_map(|((y, mo, d), sep, (h, mi, s), frac, zone)| {
                format!("{y}-{mo}-{d}{sep}{h}:{mi}:{s}{frac}{zone}")
            });
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&text, |t| {
                let fast = parse_timestamp(&t, 1_000_000, "seconds");
                let general = parse_timestamp_general(&t, 1_000_000, "seconds");
                prop_assert_eq!(&fast, &general, "{}", t);
                Ok(())
            })
            .unwrap();
        for t in [
            "1970-01-01T00:00:00",
            "1969-12-31 23:59:59.999999",
            "2000-02-29T12:00:00Z",
            "1900-02-28 00:00:00",
            "0000-03-01T00:00:00",
            "9999-12-31T23:59:59.999999999",
            "2026-01-01T00:00:00.000100",
            "2024-02-29 23:59:59.5z",
        ] {
            let fast = iso_micros(t.as_bytes(), &mut DayCache::default());
            assert!(fast.is_some(), "{t} takes the fast path");
            assert_eq!(Ok(fast.unwrap_or_default()), parse_timestamp_general(t, 1, "us"), "{t}");
        }
        for t in [
            "1900-02-29 00:00:00",
            "2023-02-29T00:00:00",
            "2026-04-31T00:00:00",
            "2026-01-01T24:00:00",
            "2026-01-01T00:00:60",
            "2026-01-01T00:00:00+00:00",
        ] {
            assert_eq!(
                iso_micros(t.as_bytes(), &mut DayCache::default()),
                None,
                "{t} is left to the general parser"
            );
        }
    }

    /// The CSV fast path decodes a run to exactly what arrow's decoder gives, bad rows and
    /// all (it declines what it cannot, and the general path decides), over random records of
    /// good, bad and empty fields, CRLF endings, stray carriage returns, quotes and wrong field
    /// counts; and it does take a clean run.
    #[test]
    fn the_csv_fast_path_agrees_with_arrows_decoder() {
        use proptest::prelude::*;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("v", DataType::Float64, true),
            Field::new("u", DataType::UInt8, true),
        ]));
        let format = Format::Csv { header: false, delimiter: b',' };
        let fast = RowDecoder::new(schema.clone(), Some(2), format.clone(), "s").unwrap();
        assert!(fast.fast_csv.is_some());
        let mut general = RowDecoder::new(schema, Some(2), format, "s").unwrap();
        general.fast_csv = None;
        let pick = |values: &'static [&'static str]| prop::sample::select(values.to_vec());
        let good = ["7", "bob", "2024-02-29 10:00:00.5", "1.5", "255"];
        let record = (
            pick(&[
                "1",
                "-5",
                "",
                "x",
                "99999999999999999999",
                " 7",
                "+3",
                "7 ",
                "0007",
                "1x",
                "999999999999999999",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
            ]),
            pick(&["a", "", "hello world", "\u{fc}", "x\ry", "q\"q"]),
            pick(&[
                "1970-01-01T00:00:01Z",
                "2024-02-29 10:00:00.5",
                "2024-02-29 10:00:00.123456",
                "2024-02-29 10:00:00.1234567",
                "1999-12-31T23:59:59.000001",
                "1500",
                "1.5",
                "",
                "nope",
                "2023-02-29 00:00:00",
                "2024-01-01T00:00:00+01:00",
            ]),
            pick(&["1.5", "-0", "", "1e400", "inf", "NaN", "abc", " 2.5"]),
            pick(&["255", "256", "-1", "", "0"]),
            pick(&["\n", "\r\n", ",extra\n", "\n"]),
        )
            .prop_map(|(a, b, c, d, e, end)| format!("{a},{b},{c},{d},{e}{end}"));
        let run = prop::collection::vec(
            prop_oneof![3 => Just(good.join(",") + "\n"), 2 => record],
            1..12,
        );
        proptest!(|(records in run)| {
            let text = records.concat();
            let recs = frame(&text, true);
            prop_assert_eq!(show(&fast.decode(&recs)), show(&general.decode(&recs)), "{:?}", text);
        });
        let clean = frame(&(good.join(",") + "\n").repeat(3), true);
        let taken = fast.fast_csv.as_ref().and_then(|f| f.decode(&clean.bytes, 3));
        assert_eq!(taken.map(|b| b.num_rows()), Some(3), "a clean run takes the fast path");
    }

    /// The JSON-lines fast path decodes a run to exactly what arrow's decoder gives, bad rows
    /// and all (it declines what it cannot, and the general path decides), over random objects
    /// of good and bad values, missing, repeated and unknown keys, escapes, nested values,
    /// whitespace and CRLF endings; and it does take a clean run.
    #[test]
    fn the_json_fast_path_agrees_with_arrows_decoder() {
        use proptest::prelude::*;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("v", DataType::Float64, true),
            Field::new("u", DataType::UInt8, true),
            Field::new("ok", DataType::Boolean, true),
        ]));
        let fast = RowDecoder::new(schema.clone(), Some(2), Format::JsonLines, "s").unwrap();
        assert!(fast.fast_json.is_some());
        let mut general = RowDecoder::new(schema, Some(2), Format::JsonLines, "s").unwrap();
        general.fast_json = None;
        let pick = |values: &'static [&'static str]| prop::sample::select(values.to_vec());
        let good = r#"{"id": 7, "name": "bob", "ts": "2024-02-29 10:00:00.5", "v": 1.5, "u": 255, "ok": true}"#;
        let member = prop_oneof![
            pick(&[
                r#""id": 1"#,
                r#""id": -5"#,
                r#""id": null"#,
                r#""id": "7""#,
                r#""id": 1.5"#,
                r#""id": 1e3"#,
                r#""id": 99999999999999999999"#,
                r#""id": 01"#,
                r#""id": -"#,
                r#""id": true"#,
            ]),
            pick(&[
                r#""name": "a""#,
                r#""name": """#,
                r#""name": "x\"y""#,
                r#""name": "\u00fc\n""#,
                r#""name": "\ud800""#,
                r#""name": 5"#,
                r#""name": null"#,
                "\"name\": \"tab\tin\"",
                "\"name\": \"\u{fc}\"",
                r#""name": [1]"#,
            ]),
            pick(&[
                r#""ts": "1970-01-01T00:00:01Z""#,
                r#""ts": 1500"#,
                r#""ts": 1.5"#,
                r#""ts": """#,
                r#""ts": "nope""#,
                r#""ts": null"#,
                r#""ts": "2024-01-01T00:00:00+01:00""#,
                r#""ts": -2e3"#,
            ]),
            pick(&[
                r#""v": 1.5"#,
                r#""v": -0"#,
                r#""v": 1E2"#,
                r#""v": 1e400"#,
                r#""v": "2.5""#,
                r#""v": null"#,
                r#""v": .5"#,
                r#""v": 3"#,
            ]),
            pick(&[r#""u": 255"#, r#""u": 256"#, r#""u": -1"#, r#""u": 0"#, r#""u": null"#]),
            pick(&[r#""ok": true"#, r#""ok": false"#, r#""ok": "true""#, r#""ok": 1"#]),
            pick(&[
                r#""other": 1"#,
                r#""other": "x""#,
                r#""other": {"a": 1}"#,
                r#""ID": 3"#,
                r#""i\u0064": 4"#,
                r#""idx": 5"#,
                r#""i": 6"#,
                r#""name2": "n""#,
            ]),
        ];
        let record = (
            prop::collection::vec(member, 0..8),
            pick(&["", " ", "\t"]),
            pick(&["\n", "\r\n", " \n", "x\n"]),
        )
            .prop_map(|(members, pad, end)| {
                format!("{pad}{{{pad}{}}}{end}", members.join(&format!(",{pad}")))
            });
        let run =
            prop::collection::vec(prop_oneof![3 => Just(format!("{good}\n")), 2 => record], 1..12);
        proptest!(|(records in run)| {
            let text = records.concat();
            let recs = frame(&text, false);
            prop_assert_eq!(show(&fast.decode(&recs)), show(&general.decode(&recs)), "{:?}", text);
        });
        let clean = frame(&format!("{good}\n").repeat(3), false);
        let taken = fast.fast_json.as_ref().and_then(|f| f.decode(&clean.bytes, 3));
        assert_eq!(taken.map(|b| b.num_rows()), Some(3), "a clean run takes the fast path");
    }

    #[test]
    fn csv_by_header_with_bad_rows_located() {
        let mut d =
            RowDecoder::new(schema(), Some(2), Format::Csv { header: true, delimiter: b',' }, "s")
                .unwrap();
        let recs = frame(
            "ts,extra,name,id\n\
             1970-01-01T00:00:01Z,x,\"a, b\",1\n\
             5,x,b,two\n\
             7,x,c\n\
             ,x,d,4\n\
             8,x,\"multi\nline\",5\n",
            true,
        );
        d.set_header(recs.record(0)).unwrap();
        let got = show(&d.decode(&recs.split_off(1)));
        assert_eq!(got.0, vec!["1,a, b,1970-01-01T00:00:01", "5,multi\nline,1970-01-01T00:00:08"]);
        assert_eq!(
            got.1,
            vec![
                "#1 line 3 @49 [id] cannot read 'two' as BIGINT | 5,x,b,two",
                "#2 line 4 @59 [] expected 4 fields, found 3 | 7,x,c",
                "#3 line 5 @65 [ts] no event time | ,x,d,4",
            ]
        );
        let mut d2 =
            RowDecoder::new(schema(), Some(2), Format::Csv { header: true, delimiter: b',' }, "s")
                .unwrap();
        assert_eq!(
            d2.set_header(b"id,ts\n"),
            Err("the header has no column 'name' (it has: id, ts)".into())
        );
    }

    /// A number too large for its float type is a bad row, as a literal is in SQL; a written
    /// infinity is a value (PostgreSQL reads `inf` and `Infinity` too). JSON likewise.
    #[test]
    fn floats_out_of_range_are_bad_rows_and_written_infinities_are_values() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("y", DataType::Float32, true),
            Field::new("t", DataType::Int64, true),
        ]));
        let d = RowDecoder::new(
            schema.clone(),
            Some(2),
            Format::Csv { header: false, delimiter: b',' },
            "s",
        )
        .unwrap();
        let got =
            show(&d.decode(&frame("1e400,1,1\n2.5,1e39,2\n-Infinity,inf,3\n1.5,2.5,4\n", true)));
        assert_eq!(got.0, vec!["-inf,inf,3", "1.5,2.5,4"]);
        assert_eq!(
            got.1,
            vec![
                "#0 line 1 @0 [x] '1e400' is out of range for DOUBLE | 1e400,1,1",
                "#1 line 2 @10 [y] '1e39' is out of range for REAL | 2.5,1e39,2",
            ]
        );
        let j = RowDecoder::new(schema, Some(2), Format::JsonLines, "s").unwrap();
        let got =
            show(&j.decode(&frame("{\"x\": 1e400, \"t\": 1}\n{\"x\": 2, \"t\": 2}\n", false)));
        assert_eq!(got.0, vec!["2.0,NULL,2"]);
        assert_eq!(got.1.len(), 1, "{:?}", got.1);
        assert!(got.1[0].starts_with("#0 line 1 @0 [] invalid JSON"), "{:?}", got.1);
    }

    #[test]
    fn csv_without_header_and_invalid_utf8() {
        let d = RowDecoder::new(
            schema(),
            Some(2),
            Format::Csv { header: false, delimiter: b';' },
            "ms",
        )
        .unwrap();
        let mut recs = frame("1;x;1000\n", true);
        let bad = Framer::new(Framing::Csv { quote: b'"', delimiter: b';' })
            .feed(b"2;\xff\xfe;2000\n3;z;3000\n", true);
        recs = {
            let mut all = recs.split_off(0);
            for i in 0..bad.len() {
                all.push_marked(bad.record(i), bad.lines[i], bad.offsets[i], bad.malformed[i]);
            }
            all
        };
        let got = show(&d.decode(&recs));
        assert_eq!(got.0, vec!["1,x,1970-01-01T00:00:01", "3,z,1970-01-01T00:00:03"]);
        assert_eq!(got.1, vec!["#1 line 1 @0 [name] invalid UTF-8 | 2;\u{fffd}\u{fffd};2000"]);
    }

    #[test]
    fn json_lines_with_missing_keys_numbers_and_bad_lines() {
        let d = RowDecoder::new(schema(), Some(2), Format::JsonLines, "s").unwrap();
        let recs = frame(
            "{\"id\": 1, \"name\": \"a\", \"ts\": \"1970-01-01T00:00:02Z\"}\n\
             {\"id\": 2, \"ts\": 3}\n\
             {\"id\": \"x\", \"ts\": 4}\n\
             {\"id\": 3\n\
             [1, 2]\n\
             {\"id\": 4, \"ts\": \"soon\"}\n\
             {\"id\": 5, \"name\": \"e\", \"ts\": 6.5}\n",
            false,
        );
        let got = show(&d.decode(&recs));
        assert_eq!(
            got.0,
            vec![
                "1,a,1970-01-01T00:00:02",
                "2,NULL,1970-01-01T00:00:03",
                "5,e,1970-01-01T00:00:06.500"
            ]
        );
        assert_eq!(got.1.len(), 4, "{:?}", got.1);
        assert!(
            got.1[0].starts_with("#2 line 3 @72 [id] cannot read 'x' as BIGINT"),
            "{:?}",
            got.1
        );
        assert!(got.1[1].starts_with("#3 line 4 @93 [] invalid JSON: EOF"), "{:?}", got.1);
        assert!(got.1[2].starts_with("#4 line 5 @102 [] expected a JSON object"), "{:?}", got.1);
        assert!(got.1[3].starts_with("#5 line 6 @109 [ts] cannot read 'soon'"), "{:?}", got.1);
    }
}
