//! The CSV fast path: runs of records with no quoted field, split into fields 64 bytes at a
//! time ([`super::byte_masks`]) and parsed straight into the stream's columns.
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

use arrow::array::{
    Array, ArrayRef, BooleanBufferBuilder, Int64Array, PrimitiveBuilder, RecordBatch,
    StringBuilder, TimestampMicrosecondArray,
};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::compute::kernels::cast_utils::Parser;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, SchemaRef, TimeUnit, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};

use super::byte_masks::block_masks;
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
            // A CR ends a field's text only just before a newline; anywhere else the general
            // path decides what it means.
            let ends = memchr::memchr3_iter(self.delimiter, b'\n', b'\r', bytes).filter_map(|at| {
                match bytes[at] {
                    b'\r' if bytes.get(at + 1) == Some(&b'\n') => None,
                    b'\r' => Some(None),
                    b'\n' if at > 0 && bytes[at - 1] == b'\r' => {
                        Some(Some(FieldEnd { text_end: at - 1, next: at + 1, record: true }))
                    }
                    b => Some(Some(FieldEnd { text_end: at, next: at + 1, record: b == b'\n' })),
                }
            });
            self.split(bytes, records, ends)
        } else {
            self.split(bytes, records, Ends::new(bytes, self.delimiter).map(Some))
        }
    }

    /// Decodes the run `bytes` of `records` records, cut into fields where `ends` says (None:
    /// the run is declined).
    fn split(
        &self,
        bytes: &[u8],
        records: usize,
        ends: impl Iterator<Item = Option<FieldEnd>>,
    ) -> Option<RecordBatch> {
        let text = std::str::from_utf8(bytes).ok()?;
        // A first record's field may be far longer than the others': no column takes more
        // room a row than a whole record's average width.
        let widths = self.first_record_widths(bytes);
        let average = bytes.len() / records.max(1);
        let mut columns: Vec<FastColumn> = self
            .schema
            .fields()
            .iter()
            .zip(&widths)
            .map(|(f, &width)| FastColumn::new(f.data_type(), records, width.min(average)))
            .collect::<Option<_>>()?;
        let (mut field, mut start, mut rows) = (0, 0, 0);
        for end in ends {
            let end = end?;
            if let Some(c) = *self.column_of_field.get(field)? {
                if !columns[c].push(text.get(start..end.text_end)?, self.epoch) {
                    return None;
                }
            }
            field += 1;
            start = end.next;
            if end.record {
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

impl FastCsv {
    /// The width in bytes of each column's field in the run's first record, from which its
    /// string columns take their room: with a guess of 16 bytes a row, the buffer of the
    /// bids' URLs (about 80 bytes) grew, and was copied, several times a run.
    fn first_record_widths(&self, bytes: &[u8]) -> Vec<usize> {
        let mut widths = vec![0; self.schema.fields().len()];
        let first = &bytes[..memchr::memchr(b'\n', bytes).map_or(bytes.len(), |n| n + 1)];
        let mut start = 0;
        for (field, end) in Ends::new(first, self.delimiter).enumerate() {
            if let Some(Some(c)) = self.column_of_field.get(field) {
                widths[*c] = end.text_end - start;
            }
            start = end.next;
        }
        widths
    }
}

/// Where a field ends in a run: the end of its text, where the next field starts, and whether
/// it is its record's last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FieldEnd {
    text_end: usize,
    next: usize,
    record: bool,
}

/// The ends of the fields of a run: every delimiter and newline, in order (what
/// `memchr::memchr2_iter(delimiter, b'\n', bytes)` finds), found 64 bytes at a time
/// ([`block_masks`]), each saying whether it ends its record.
struct Ends<'a> {
    bytes: &'a [u8],
    delimiter: u8,
    /// The offset in `bytes` of the block `found` describes.
    at: usize,
    /// One bit per byte of that block that is a delimiter or a newline, not given yet.
    found: u64,
    /// Those of `found` that are newlines.
    newlines: u64,
}

impl<'a> Ends<'a> {
    fn new(bytes: &'a [u8], delimiter: u8) -> Self {
        let mut ends = Ends { bytes, delimiter, at: 0, found: 0, newlines: 0 };
        (ends.found, ends.newlines) = ends.block_at(0);
        ends
    }

    /// The masks of the block at `at`; bytes past the run's end are neither.
    fn block_at(&self, at: usize) -> (u64, u64) {
        let rest = self.bytes.get(at..).unwrap_or_default();
        match rest.first_chunk::<64>() {
            Some(block) => block_masks(block, self.delimiter, b'\n'),
            None => {
                let mut block = [0u8; 64];
                block[..rest.len()].copy_from_slice(rest);
                let valid = (1u64 << rest.len()) - 1;
                let (found, newlines) = block_masks(&block, self.delimiter, b'\n');
                (found & valid, newlines & valid)
            }
        }
    }
}

impl Iterator for Ends<'_> {
    type Item = FieldEnd;

    #[inline]
    fn next(&mut self) -> Option<FieldEnd> {
        while self.found == 0 {
            self.at += 64;
            if self.at >= self.bytes.len() {
                return None;
            }
            (self.found, self.newlines) = self.block_at(self.at);
        }
        let pos = self.at + self.found.trailing_zeros() as usize;
        let bit = self.found & self.found.wrapping_neg();
        self.found ^= bit;
        Some(FieldEnd { text_end: pos, next: pos + 1, record: self.newlines & bit != 0 })
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
pub(crate) fn column(t: &DataType, rows: usize) -> Option<FastColumn> {
    FastColumn::new(t, rows, 16)
}

/// A column the CSV fast path builds: BIGINT, TIMESTAMP and VARCHAR columns inline (a field
/// is pushed without a call through a vtable), other types through arrow's builders.
pub(crate) enum FastColumn {
    Int64(Words),
    Timestamp(Timestamps),
    Utf8(StringBuilder),
    Other(Box<dyn Column>),
}

impl FastColumn {
    /// The builder for type `t` with room for `rows`, a string column's text taking about
    /// `width` bytes a row; None for a type without a fast parser.
    fn new(t: &DataType, rows: usize, width: usize) -> Option<FastColumn> {
        fn primitive<T: ArrowPrimitiveType + Parser>(rows: usize) -> Option<FastColumn> {
            Some(FastColumn::Other(Box::new(PrimitiveBuilder::<T>::with_capacity(rows))))
        }
        match t {
            DataType::Int8 => primitive::<Int8Type>(rows),
            DataType::Int16 => primitive::<Int16Type>(rows),
            DataType::Int32 => primitive::<Int32Type>(rows),
            DataType::Int64 => Some(FastColumn::Int64(Words::with_capacity(rows))),
            DataType::UInt8 => primitive::<UInt8Type>(rows),
            DataType::UInt16 => primitive::<UInt16Type>(rows),
            DataType::UInt32 => primitive::<UInt32Type>(rows),
            DataType::UInt64 => primitive::<UInt64Type>(rows),
            DataType::Float32 => primitive::<Float32Type>(rows),
            DataType::Float64 => primitive::<Float64Type>(rows),
            DataType::Utf8 => {
                // A quarter more than the sample, for the rows whose text is longer.
                let room = rows.saturating_mul(width.max(8) + width / 4);
                Some(FastColumn::Utf8(StringBuilder::with_capacity(rows, room)))
            }
            DataType::Timestamp(TimeUnit::Microsecond, tz) => {
                Some(FastColumn::Timestamp(Timestamps {
                    values: Words::with_capacity(rows),
                    tz: tz.clone(),
                    days: DayCache::default(),
                }))
            }
            _ => None,
        }
    }
}

impl Column for FastColumn {
    #[inline]
    fn push(&mut self, field: &str, epoch: EpochUnit) -> bool {
        match self {
            FastColumn::Int64(c) => push_int64(c, field),
            FastColumn::Timestamp(c) => c.push(field, epoch),
            FastColumn::Utf8(c) => {
                if field.is_empty() {
                    c.append_null();
                } else {
                    c.append_value(field);
                }
                true
            }
            FastColumn::Other(c) => c.push(field, epoch),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            FastColumn::Int64(c) => {
                let (values, nulls) = c.take();
                Arc::new(Int64Array::new(values, nulls))
            }
            FastColumn::Timestamp(c) => c.finish(),
            FastColumn::Utf8(c) => Arc::new(c.finish()),
            FastColumn::Other(c) => c.finish(),
        }
    }
}

/// A column of 64-bit values being built: the values, and their validity only from the first
/// NULL on (a column without NULLs, nearly every one, costs one store a value).
#[derive(Debug, Default)]
pub(crate) struct Words {
    values: Vec<i64>,
    nulls: Option<BooleanBufferBuilder>,
}

impl Words {
    fn with_capacity(rows: usize) -> Self {
        Words { values: Vec::with_capacity(rows), nulls: None }
    }

    #[inline]
    fn push(&mut self, v: i64) {
        self.values.push(v);
        if let Some(n) = &mut self.nulls {
            n.append(true);
        }
    }

    fn push_null(&mut self) {
        let nulls = self.nulls.get_or_insert_with(|| {
            let mut n = BooleanBufferBuilder::new(self.values.capacity());
            n.append_n(self.values.len(), true);
            n
        });
        nulls.append(false);
        self.values.push(0);
    }

    /// The values and their validity so far; the builder is left empty.
    fn take(&mut self) -> (ScalarBuffer<i64>, Option<NullBuffer>) {
        let values = ScalarBuffer::from(std::mem::take(&mut self.values));
        let nulls = self.nulls.take().map(|mut n| NullBuffer::new(n.finish()));
        (values, nulls)
    }
}

/// Appends a BIGINT field (empty: NULL). A field of up to 18 digits (no sign, no spaces)
/// cannot overflow and is read here, a digit at a time without checks; any other goes to
/// arrow's parser, which reads signs, surrounding spaces and the limits of the range.
#[inline]
fn push_int64(c: &mut Words, field: &str) -> bool {
    let digits = field.as_bytes();
    if (1..=18).contains(&digits.len()) {
        let (mut n, mut all_digits) = (0i64, true);
        for &b in digits {
            let d = b.wrapping_sub(b'0');
            all_digits &= d < 10;
            n = n.wrapping_mul(10).wrapping_add(i64::from(d));
        }
        if all_digits {
            c.push(n);
            return true;
        }
    }
    if field.is_empty() {
        c.push_null();
        return true;
    }
    match Int64Type::parse(field) {
        Some(v) => c.push(v),
        None => return false,
    }
    true
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

/// A TIMESTAMP column: ISO-8601 text or epoch numbers, as [`parse_timestamp`] reads them.
pub(crate) struct Timestamps {
    values: Words,
    tz: Option<Arc<str>>,
    days: DayCache,
}

impl Column for Timestamps {
    #[inline]
    fn push(&mut self, field: &str, epoch: EpochUnit) -> bool {
        if field.is_empty() {
            self.values.push_null();
            return true;
        }
        match parse_timestamp_on(field, epoch.scale, epoch.name, &mut self.days) {
            Ok(v) => self.values.push(v),
            Err(_) => return false,
        }
        true
    }

    fn finish(&mut self) -> ArrayRef {
        let (values, nulls) = self.values.take();
        Arc::new(TimestampMicrosecondArray::new(values, nulls).with_timezone_opt(self.tz.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ends_are_every_delimiter_and_newline_in_order() {
        let run = b"1,22,333\n4444,55555,\n,\n";
        let ends: Vec<usize> = Ends::new(run, b',').map(|e| e.text_end).collect();
        assert_eq!(ends, vec![1, 4, 8, 13, 19, 20, 21, 22]);
        assert_eq!(Ends::new(b"", b',').count(), 0);
        assert_eq!(Ends::new(b"abcdefgh", b',').count(), 0);
        let newline = FieldEnd { text_end: 7, next: 8, record: true };
        assert_eq!(Ends::new(b"abcdefg\n", b',').collect::<Vec<_>>(), vec![newline]);
    }

    /// A string column's room is sized from the first record, but never more than a whole
    /// record's average a row: a long first field does not reserve its length for every row.
    #[test]
    fn a_long_first_field_does_not_size_every_row() {
        use arrow::array::AsArray;
        use arrow::datatypes::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let epoch = EpochUnit { scale: 1, name: "s" };
        let fast = FastCsv::new(schema, None, b',', b'"', 2, &[0, 1], epoch).unwrap();
        let mut run = format!("0,{}\n", "x".repeat(100_000));
        for i in 1..1000 {
            run.push_str(&format!("{i},y\n"));
        }
        let batch = fast.decode(run.as_bytes(), 1000).expect("a clean run");
        let strings = batch.column(1).as_string::<i32>();
        assert_eq!(strings.value(0).len(), 100_000);
        assert_eq!(strings.value(999), "y");
        // Room of 1.25 records' average a row at most, not 125 000 bytes a row.
        assert!(strings.values().capacity() <= 2 * run.len(), "{}", strings.values().capacity());
    }

    /// The BIGINT column reads what arrow's parser reads, its own way for plain digits.
    #[test]
    fn bigint_fields_read_as_arrow_reads_them() {
        let fields = [
            "0",
            "7",
            "0007",
            "-5",
            "+3",
            " 7",
            "7 ",
            "1x",
            "x",
            "",
            "١",
            "999999999999999999",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "99999999999999999999",
            "12345678901234567890123",
        ];
        let mut ours = Words::default();
        let mut arrows = PrimitiveBuilder::<Int64Type>::new();
        for f in fields {
            let parsed = Int64Type::parse(f);
            let taken = push_int64(&mut ours, f);
            assert_eq!(taken, f.is_empty() || parsed.is_some(), "{f:?}");
            if !taken {
                ours.push_null();
            }
            arrows.append_option(parsed);
        }
        let (values, nulls) = ours.take();
        assert_eq!(Int64Array::new(values, nulls), arrows.finish());
    }

    proptest! {
        /// Against `memchr2_iter` over runs of any length (every alignment of the last word)
        /// dense with both bytes, their neighbours (which a carry between bytes would turn
        /// into false hits) and bytes with the high bit set, for any ASCII delimiter.
        #[test]
        fn ends_are_what_memchr_finds(
            delimiter in prop_oneof![Just(b','), Just(b'\t'), Just(0u8), 0u8..128],
            run in proptest::collection::vec(
                prop_oneof![Just(b','), Just(b'\n'), Just(b'\t'), Just(0u8), Just(0x80u8),
                    Just(0xffu8), Just(b'+'), Just(b'-'), Just(b'\x0b'), any::<u8>()],
                0..80,
            ),
        ) {
            let ends: Vec<(usize, bool)> =
                Ends::new(&run, delimiter).map(|e| (e.text_end, e.record)).collect();
            let expected: Vec<(usize, bool)> = memchr::memchr2_iter(delimiter, b'\n', &run)
                .map(|at| (at, run[at] == b'\n'))
                .collect();
            prop_assert_eq!(ends, expected);
        }
    }
}
