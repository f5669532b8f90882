//! Reading Parquet files into a stream's (or table's) rows.
//!
//! A Parquet file is typed and columnar, so it is not framed into records like CSV and JSON
//! lines: it is read a batch of rows at a time with the `parquet` crate's Arrow reader, only
//! the columns the stream declares (matched by name, case-insensitively, extra columns
//! ignored), and each column is converted to the stream's type. A value that does not convert
//! (text that is not a number for a BIGINT column, a missing event time) makes its row a bad
//! row, reported with the file, the row's number (from 1, as `line`) and the field, like a bad
//! CSV record; the rest of the batch is kept. A column whose type cannot convert at all (a
//! list for a BIGINT) is an error when the file is opened.
//!
//! Event times: a Parquet timestamp of any unit (and any zone: the instant is kept) is read as
//! microseconds since the epoch; integers are epoch numbers in the source's `epoch` unit, and
//! text is parsed as in CSV.
//!
//! A source's position in a Parquet file is the number of rows taken in, so a checkpoint
//! resumes at the next row.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampMicrosecondType};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use weir_sql::types::sql_type_name;

use super::decode::{parse_timestamp, BadRow, Decoded};

/// Rows read per batch.
pub(crate) const BATCH_ROWS: usize = 8192;

/// An open Parquet file being read. See the module docs.
pub(crate) struct ParquetFile {
    pub name: String,
    reader: ParquetRecordBatchReader,
    /// Rows taken in from this file so far (its position).
    pub rows_read: u64,
    pub total_rows: u64,
    pub file_len: u64,
}

impl std::fmt::Debug for ParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetFile")
            .field("name", &self.name)
            .field("rows_read", &self.rows_read)
            .field("total_rows", &self.total_rows)
            .finish()
    }
}

impl ParquetFile {
    /// Opens `file` (shown as `name`), skipping its first `skip` rows, for a stream or table
    /// of `schema`. Fails if the file is not Parquet, lacks one of the columns, or has a
    /// column of a type that cannot be read as the declared one.
    pub fn open(file: File, name: &str, schema: &SchemaRef, skip: u64) -> Result<Self, String> {
        let fail =
            |e: &dyn std::fmt::Display| format!("'{name}' is not a readable Parquet file: {e}");
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| fail(&e))?;
        let file_schema = builder.schema().clone();
        let mut roots = Vec::new();
        for f in schema.fields() {
            let found =
                file_schema.fields().iter().position(|c| c.name() == f.name()).or_else(|| {
                    file_schema
                        .fields()
                        .iter()
                        .position(|c| c.name().eq_ignore_ascii_case(f.name()))
                });
            let Some(i) = found else {
                let names: Vec<&str> =
                    file_schema.fields().iter().map(|c| c.name().as_str()).collect();
                return Err(format!(
                    "'{name}' has no column '{}' (it has: {})",
                    f.name(),
                    names.join(", ")
                ));
            };
            let from = file_schema.field(i).data_type();
            if !convertible(from, f.data_type()) {
                return Err(format!(
                    "'{name}': column '{}' holds {from} values, which cannot be read as {}",
                    file_schema.field(i).name(),
                    sql_type_name(f.data_type())
                ));
            }
            roots.push(i);
        }
        let total_rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .with_offset(usize::try_from(skip).unwrap_or(usize::MAX))
            .build()
            .map_err(|e| fail(&e))?;
        Ok(ParquetFile { name: name.to_string(), reader, rows_read: skip, total_rows, file_len })
    }

    /// The next batch of rows as the file has them, or `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, String> {
        match self.reader.next() {
            None => Ok(None),
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) => Err(format!("reading '{}': {e}", self.name)),
        }
    }
}

/// Whether values of type `from` can be read as `to` (value by value, some may still fail).
fn convertible(from: &DataType, to: &DataType) -> bool {
    match to {
        DataType::Timestamp(_, _) => {
            from.is_integer()
                || matches!(
                    from,
                    DataType::Timestamp(_, _)
                        | DataType::Date32
                        | DataType::Date64
                        | DataType::Utf8
                        | DataType::LargeUtf8
                        | DataType::Utf8View
                )
        }
        _ => arrow::compute::can_cast_types(from, to),
    }
}

/// Converts a batch read from a Parquet file (its first row being row `first_row` of the
/// file, from 0) to `schema`, making the rows whose values do not convert bad rows.
pub(crate) fn convert(
    raw: &RecordBatch,
    schema: &SchemaRef,
    time_column: Option<usize>,
    epoch_scale: i64,
    epoch_unit: &str,
    first_row: u64,
) -> Decoded {
    let n = raw.num_rows();
    // For each row, the first field that did not convert and why.
    let mut faults: Vec<Option<(String, String)>> = vec![None; n];
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (c, f) in schema.fields().iter().enumerate() {
        let Some(src) = column(raw, f.name()) else {
            // Checked when the file was opened; a batch without it would be a reader bug.
            for fault in faults.iter_mut().filter(|x| x.is_none()) {
                *fault = Some((f.name().clone(), "the column is missing".into()));
            }
            cols.push(arrow::array::new_null_array(f.data_type(), n));
            continue;
        };
        let (col, failed) = convert_column(src, f.data_type(), epoch_scale, epoch_unit);
        for (row, reason) in failed {
            if faults[row].is_none() {
                faults[row] = Some((f.name().clone(), reason));
            }
        }
        if Some(c) == time_column {
            for (row, fault) in faults.iter_mut().enumerate() {
                if fault.is_none() && col.is_null(row) {
                    *fault = Some((f.name().clone(), "no event time".into()));
                }
            }
        }
        cols.push(col);
    }
    let mut good = Vec::with_capacity(n);
    let mut bad = Vec::new();
    for (row, fault) in faults.into_iter().enumerate() {
        match fault {
            None => good.push(row),
            Some((field, reason)) => bad.push((row, bad_row(raw, first_row, row, field, reason))),
        }
    }
    let all = RecordBatch::try_new(schema.clone(), cols);
    let batch = match all {
        Ok(b) if bad.is_empty() => b,
        Ok(b) => {
            let idx = arrow::array::UInt32Array::from_iter_values(good.iter().map(|&r| r as u32));
            match arrow::compute::take_record_batch(&b, &idx) {
                Ok(kept) => kept,
                Err(e) => return all_bad(raw, first_row, &e.to_string()),
            }
        }
        Err(e) => return all_bad(raw, first_row, &e.to_string()),
    };
    Decoded { batch, rows_from: good, bad }
}

/// A batch none of whose rows could be taken (cannot happen for a consistent file).
fn all_bad(raw: &RecordBatch, first_row: u64, reason: &str) -> Decoded {
    let bad = (0..raw.num_rows())
        .map(|row| (row, bad_row(raw, first_row, row, String::new(), reason.into())))
        .collect();
    Decoded { batch: RecordBatch::new_empty(raw.schema()), rows_from: vec![], bad }
}

/// Row `row` of a batch whose first row is row `first_row` of the file (from 0), as a bad
/// row: located by its row number from 1, with no byte offset.
fn bad_row(raw: &RecordBatch, first_row: u64, row: usize, field: String, reason: String) -> BadRow {
    BadRow {
        line: first_row + row as u64 + 1,
        offset: None,
        field,
        reason,
        raw: render_row(raw, row),
    }
}

/// The column named `name` (exactly, else case-insensitively).
fn column<'a>(raw: &'a RecordBatch, name: &str) -> Option<&'a ArrayRef> {
    let s = raw.schema();
    let i = s
        .fields()
        .iter()
        .position(|c| c.name() == name)
        .or_else(|| s.fields().iter().position(|c| c.name().eq_ignore_ascii_case(name)))?;
    Some(raw.column(i))
}

/// `src` as type `to`, and the rows whose value did not convert, with the reason.
fn convert_column(
    src: &ArrayRef,
    to: &DataType,
    epoch_scale: i64,
    epoch_unit: &str,
) -> (ArrayRef, Vec<(usize, String)>) {
    let mut failed = Vec::new();
    if src.data_type() == to {
        return (src.clone(), failed);
    }
    if let DataType::Timestamp(_, _) = to {
        let micros: Vec<Option<i64>> = match src.data_type() {
            DataType::Timestamp(_, tz) => {
                // The instant is kept whatever the zone: reinterpret, do not shift.
                let target = DataType::Timestamp(TimeUnit::Microsecond, tz.clone());
                match cast_with_options(src, &target, &CastOptions::default()) {
                    Ok(a) => a.as_primitive::<TimestampMicrosecondType>().iter().collect(),
                    Err(e) => return all_failed(src, to, &e.to_string()),
                }
            }
            t if t.is_integer() => {
                match cast_with_options(src, &DataType::Int64, &CastOptions::default()) {
                    Ok(a) => a
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .iter()
                        .enumerate()
                        .map(|(row, v)| {
                            let v = v?;
                            let m = v.checked_mul(epoch_scale);
                            if m.is_none() {
                                failed.push((
                                    row,
                                    format!("{v} is out of range as epoch {epoch_unit}"),
                                ));
                            }
                            m
                        })
                        .collect(),
                    Err(e) => return all_failed(src, to, &e.to_string()),
                }
            }
            DataType::Date32 | DataType::Date64 => {
                let target = DataType::Timestamp(TimeUnit::Microsecond, None);
                match cast_with_options(src, &target, &CastOptions::default()) {
                    Ok(a) => a.as_primitive::<TimestampMicrosecondType>().iter().collect(),
                    Err(e) => return all_failed(src, to, &e.to_string()),
                }
            }
            _ => {
                let text = match cast_with_options(src, &DataType::Utf8, &CastOptions::default()) {
                    Ok(a) => a,
                    Err(e) => return all_failed(src, to, &e.to_string()),
                };
                text.as_string::<i32>()
                    .iter()
                    .enumerate()
                    .map(|(row, v)| match parse_timestamp(v?, epoch_scale, epoch_unit) {
                        Ok(t) => Some(t),
                        Err(reason) => {
                            failed.push((row, reason));
                            None
                        }
                    })
                    .collect()
            }
        };
        return (Arc::new(TimestampMicrosecondArray::from(micros)), failed);
    }
    let safe = CastOptions { safe: true, ..CastOptions::default() };
    match cast_with_options(src, to, &safe) {
        Ok(out) => {
            let shown = FormatOptions::default();
            let formatter = ArrayFormatter::try_new(src.as_ref(), &shown).ok();
            for row in 0..src.len() {
                if src.is_valid(row) && out.is_null(row) {
                    let value =
                        formatter.as_ref().map(|f| f.value(row).to_string()).unwrap_or_default();
                    failed.push((row, format!("cannot read '{value}' as {}", sql_type_name(to))));
                }
            }
            (out, failed)
        }
        Err(e) => all_failed(src, to, &e.to_string()),
    }
}

/// Every non-null row of `src` failed with `reason`.
fn all_failed(src: &ArrayRef, to: &DataType, reason: &str) -> (ArrayRef, Vec<(usize, String)>) {
    let failed = (0..src.len())
        .filter(|&r| src.is_valid(r))
        .map(|r| (r, format!("cannot read as {}: {reason}", sql_type_name(to))))
        .collect();
    (arrow::array::new_null_array(to, src.len()), failed)
}

/// Row `row` as text for a bad row's `raw`: `name=value` pairs.
fn render_row(raw: &RecordBatch, row: usize) -> String {
    let shown = FormatOptions::default().with_null("NULL");
    let schema = raw.schema();
    let mut parts = Vec::with_capacity(raw.num_columns());
    for (i, col) in raw.columns().iter().enumerate() {
        let v = ArrayFormatter::try_new(col.as_ref(), &shown)
            .map(|f| f.value(row).to_string())
            .unwrap_or_default();
        parts.push(format!("{}={v}", schema.field(i).name()));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use parquet::arrow::ArrowWriter;

    fn stream_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]))
    }

    /// A Parquet file with the given batch, in a temporary directory.
    fn write(batch: &RecordBatch) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let mut w =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
        (dir, path)
    }

    #[test]
    fn columns_are_matched_by_name_and_converted_and_bad_values_are_bad_rows() {
        // The file's columns in another order, with another case, an extra one, the price
        // as text and the time in milliseconds with a zone.
        let file_schema = Arc::new(Schema::new(vec![
            Field::new("Price", DataType::Utf8, true),
            Field::new("extra", DataType::Int64, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, Some("+05:00".into())),
                true,
            ),
            Field::new("auction", DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(
            file_schema,
            vec![
                Arc::new(StringArray::from(vec![Some("10"), Some("x"), Some("30"), None])),
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(
                    arrow::array::TimestampMillisecondArray::from(vec![
                        Some(1000),
                        Some(2000),
                        None,
                        Some(4000),
                    ])
                    .with_timezone("+05:00"),
                ),
                Arc::new(arrow::array::Int32Array::from(vec![7, 8, 9, 10])),
            ],
        )
        .unwrap();
        let (_dir, path) = write(&batch);
        let schema = stream_schema();
        let mut f = ParquetFile::open(File::open(&path).unwrap(), "f.parquet", &schema, 0).unwrap();
        assert_eq!(f.total_rows, 4);
        let raw = f.next_batch().unwrap().unwrap();
        let d = convert(&raw, &schema, Some(2), 1_000_000, "seconds", 0);
        assert_eq!(d.rows_from, vec![0, 3]);
        let auctions = d.batch.column(0).as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(auctions.values().to_vec(), vec![7, 10]);
        // The instant is kept: 1000 ms after the epoch, whatever the zone.
        let ts = d.batch.column(2).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.values().to_vec(), vec![1_000_000, 4_000_000]);
        // A NULL price is a NULL, not a bad row.
        assert!(d.batch.column(1).is_null(1));
        let bad: Vec<String> = d
            .bad
            .iter()
            .map(|(i, b)| format!("{i} line {} [{}] {} | {}", b.line, b.field, b.reason, b.raw))
            .collect();
        assert_eq!(
            bad,
            [
                "1 line 2 [price] cannot read 'x' as BIGINT | Price=x, ts=1970-01-01T05:00:02+05:00, auction=8",
                "2 line 3 [ts] no event time | Price=30, ts=NULL, auction=9",
            ]
        );
        assert!(f.next_batch().unwrap().is_none());
    }

    #[test]
    fn a_position_skips_the_rows_taken_in() {
        let schema = stream_schema();
        let n = 20_000i64;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i * 2))),
                Arc::new(TimestampMicrosecondArray::from_iter_values(0..n)),
            ],
        )
        .unwrap();
        let (_dir, path) = write(&batch);
        let mut f = ParquetFile::open(File::open(&path).unwrap(), "f", &schema, 12_345).unwrap();
        let first = f.next_batch().unwrap().unwrap();
        let d = convert(&first, &schema, Some(2), 1, "microseconds", 12_345);
        assert_eq!(
            d.batch.column(0).as_primitive::<arrow::datatypes::Int64Type>().value(0),
            12_345
        );
        let mut rows = first.num_rows();
        while let Some(b) = f.next_batch().unwrap() {
            rows += b.num_rows();
        }
        assert_eq!(rows as i64, n - 12_345);
    }

    #[test]
    fn missing_and_unconvertible_columns_are_refused_at_open() {
        let file_schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("ts", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            file_schema,
            vec![Arc::new(Int64Array::from(vec![1])), Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        let (_dir, path) = write(&batch);
        let e = ParquetFile::open(File::open(&path).unwrap(), "f.parquet", &stream_schema(), 0)
            .unwrap_err();
        assert_eq!(e, "'f.parquet' has no column 'price' (it has: auction, ts)");
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("t.parquet");
        std::fs::write(&text, "auction,price\n1,2\n").unwrap();
        let e = ParquetFile::open(File::open(&text).unwrap(), "t.parquet", &stream_schema(), 0)
            .unwrap_err();
        assert!(e.starts_with("'t.parquet' is not a readable Parquet file: "), "{e}");
    }
}
