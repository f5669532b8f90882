//! The CSV fast path: runs of records with no quoted field, split with `memchr` and parsed
//! straight into the stream's columns.
//!
//! Arrow's CSV decoder runs every byte through a general state machine (quotes, escapes, any
//! terminator) into an intermediate buffer, then parses the columns from it, and Weir then
//! parses TIMESTAMP columns from the text arrow built; in a profile of reading the bids file
//! that was two thirds of the time. Nearly every file a stream reads has no quotes at all:
//! then a record is its fields between delimiters, and each field can be parsed where it lies.
//!
//! [`FastCsv::decode`] takes a run only if it can decode all of it to exactly what the general
//! path gives: no quote byte anywhere in the run, no carriage return except just before a
//! newline, valid UTF-8, every record with the layout's number of fields, and every field
//! readable as its column, parsed with arrow's own parsers (empty is NULL, as arrow reads it)
//! and TIMESTAMP fields with [`super::decode::parse_timestamp`]. Anything else declines the
//! whole run (None), and the caller decodes it with arrow, whose errors lead to the per-record
//! checks that locate bad rows. Columns of other types leave a stream without a fast path.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, PrimitiveBuilder, RecordBatch, StringBuilder};
use arrow::compute::kernels::cast_utils::Parser;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, SchemaRef, TimeUnit, TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};

use super::decode::{parse_timestamp_on, DayCache};

/// How TIMESTAMP fields are read: epoch numbers' scale and unit name (see
/// [`parse_timestamp`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EpochUnit {
    pub scale: i64,
    pub name: &'static str,
}

/// A stream's fast CSV decoder, for one file layout. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct FastCsv {
    schema: SchemaRef,
    delimiter: u8,
    quote: u8,
    /// Fields per record.
    fields: usize,
    /// For each field of a record, the stream column it fills, if any.
    column_of_field: Vec<Option<usize>>,
    /// The stream's event-time column: a run with an empty one is declined.
    time_column: Option<usize>,
    epoch: EpochUnit,
}

impl FastCsv {
    /// The fast decoder for records of `fields` fields whose field `index[c]` is stream column
    /// `c`; None if a column's type has no fast parser or the delimiter could be mistaken for
    /// a terminator.
    pub fn new(
        schema: SchemaRef,
        time_column: Option<usize>,
        delimiter: u8,
        quote: u8,
        fields: usize,
        index: &[usize],
        epoch: EpochUnit,
    ) -> Option<Self> {
        if !delimiter.is_ascii() || matches!(delimiter, b'\n' | b'\r') || delimiter == quote {
            return None;
        }
        if !schema.fields().iter().all(|f| column(f.data_type(), 0).is_some()) {
            return None;
        }
        let mut column_of_field = vec![None; fields];
        for (c, &i) in index.iter().enumerate() {
            *column_of_field.get_mut(i)? = Some(c);
        }
        Some(FastCsv { schema, delimiter, quote, fields, column_of_field, time_column, epoch })
    }

    /// The rows of a run of `records` complete records (each ending with `\n`), in the
    /// stream's schema; None if the run is not one the fast path takes (see the module docs).
    pub fn decode(&self, bytes: &[u8], records: usize) -> Option<RecordBatch> {
        // One pass looks for a quote (the run is declined) and a carriage return: only a run
        // holding one needs its fields split on three bytes rather than two.
        let crs = match memchr::memchr2(self.quote, b'\r', bytes) {
            Some(at) if bytes[at] == self.quote => return None,
            Some(at) => {
                if memchr::memchr(self.quote, &bytes[at..]).is_some() {
                    return None;
                }
                true
            }
            None => false,
        };
        if crs {
            self.split(bytes, records, memchr::memchr3_iter(self.delimiter, b'\n', b'\r', bytes))
        } else {
            self.split(bytes, records, memchr::memchr2_iter(self.delimiter, b'\n', bytes))
        }
    }

    /// Decodes the run `bytes` of `records` records, its field ends being the positions
    /// `ends` gives: every delimiter, newline and carriage return.
    fn split(
        &self,
        bytes: &[u8],
        records: usize,
        ends: impl Iterator<Item = usize>,
    ) -> Option<RecordBatch> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut columns: Vec<Box<dyn Column>> = self
            .schema
            .fields()
            .iter()
            .map(|f| column(f.data_type(), records))
            .collect::<Option<_>>()?;
        let (mut field, mut start, mut rows) = (0, 0, 0);
        for at in ends {
            let end = match bytes[at] {
                b'\r' if bytes.get(at + 1) == Some(&b'\n') => continue,
                b'\r' => return None,
                b'\n' if at > start && bytes[at - 1] == b'\r' => at - 1,
                _ => at,
            };
            if let Some(c) = *self.column_of_field.get(field)? {
                if !columns[c].push(text.get(start..end)?, self.epoch) {
                    return None;
                }
            }
            field += 1;
            start = at + 1;
            if bytes[at] == b'\n' {
                if field != self.fields {
                    return None;
                }
                (field, rows) = (0, rows + 1);
            }
        }
        if rows != records || start != bytes.len() {
            return None;
        }
        let arrays: Vec<ArrayRef> = columns.iter_mut().map(|c| c.finish()).collect();
        run_batch(&self.schema, self.time_column, arrays)
    }
}

/// A fast path's decoded run as a batch of `schema`; None (the run declined, for the general
/// path to report) if the event-time column `time_column` has an empty value.
pub(crate) fn run_batch(
    schema: &SchemaRef,
    time_column: Option<usize>,
    arrays: Vec<ArrayRef>,
) -> Option<RecordBatch> {
    if time_column.is_some_and(|t| arrays[t].null_count() > 0) {
        return None;
    }
    RecordBatch::try_new(schema.clone(), arrays).ok()
}

/// A column being built from fields.
pub(crate) trait Column {
    /// Appends one field (empty: NULL); false if it cannot be read as the column's type.
    fn push(&mut self, field: &str, epoch: EpochUnit) -> bool;
    fn finish(&mut self) -> ArrayRef;
}

/// A builder for a column of type `t` with room for `rows`; None for a type without a fast
/// parser.
pub(crate) fn column(t: &DataType, rows: usize) -> Option<Box<dyn Column>> {
    fn primitive<T: ArrowPrimitiveType + Parser>(rows: usize) -> Option<Box<dyn Column>> {
        Some(Box::new(PrimitiveBuilder::<T>::with_capacity(rows)))
    }
    match t {
        DataType::Int8 => primitive::<Int8Type>(rows),
        DataType::Int16 => primitive::<Int16Type>(rows),
        DataType::Int32 => primitive::<Int32Type>(rows),
        DataType::Int64 => primitive::<Int64Type>(rows),
        DataType::UInt8 => primitive::<UInt8Type>(rows),
        DataType::UInt16 => primitive::<UInt16Type>(rows),
        DataType::UInt32 => primitive::<UInt32Type>(rows),
        DataType::UInt64 => primitive::<UInt64Type>(rows),
        DataType::Float32 => primitive::<Float32Type>(rows),
        DataType::Float64 => primitive::<Float64Type>(rows),
        DataType::Utf8 => Some(Box::new(StringBuilder::with_capacity(rows, rows * 16))),
        DataType::Timestamp(TimeUnit::Microsecond, tz) => Some(Box::new(Timestamps {
            values: PrimitiveBuilder::with_capacity(rows),
            tz: tz.clone(),
            days: DayCache::default(),
        })),
        _ => None,
    }
}

impl<T: ArrowPrimitiveType + Parser> Column for PrimitiveBuilder<T> {
    fn push(&mut self, field: &str, _: EpochUnit) -> bool {
        if field.is_empty() {
            self.append_null();
            return true;
        }
        match T::parse(field) {
            Some(v) => self.append_value(v),
            None => return false,
        }
        true
    }

    fn finish(&mut self) -> ArrayRef {
        Arc::new(PrimitiveBuilder::finish(self))
    }
}

impl Column for StringBuilder {
    fn push(&mut self, field: &str, _: EpochUnit) -> bool {
        if field.is_empty() {
            self.append_null();
        } else {
            self.append_value(field);
        }
        true
    }

    fn finish(&mut self) -> ArrayRef {
        Arc::new(StringBuilder::finish(self))
    }
}

/// A TIMESTAMP column: ISO-8601 text or epoch numbers, as [`parse_timestamp`] reads them.
struct Timestamps {
    values: PrimitiveBuilder<TimestampMicrosecondType>,
    tz: Option<Arc<str>>,
    days: DayCache,
}

impl Column for Timestamps {
    fn push(&mut self, field: &str, epoch: EpochUnit) -> bool {
        if field.is_empty() {
            self.values.append_null();
            return true;
        }
        match parse_timestamp_on(field, epoch.scale, epoch.name, &mut self.days) {
            Ok(v) => self.values.append_value(v),
            Err(_) => return false,
        }
        true
    }

    fn finish(&mut self) -> ArrayRef {
        Arc::new(self.values.finish().with_timezone_opt(self.tz.clone()))
    }
}
