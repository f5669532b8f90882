//! The CSV fast path: runs of records with no quoted field, split into fields eight bytes at a
//! time and parsed straight into the stream's columns.
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
        let widths = self.first_record_widths(bytes);
        let mut columns: Vec<Box<dyn Column>> = self
            .schema
            .fields()
            .iter()
            .zip(&widths)
            .map(|(f, &width)| column_sized(f.data_type(), records, width))
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
    /// string columns take their room: a guess from a record's width of 16 bytes grew the
    /// buffers of the bids' URLs (about 80 bytes) three times a run, a tenth of the decoding.
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

/// The positions of every delimiter and newline in a run, in order: what
/// `memchr::memchr2_iter(delimiter, b'\n', bytes)` gives, found eight bytes at a time with word
/// arithmetic. A record's fields are about twenty bytes, so most searches end within a few
/// words; `memchr`'s vector search pays its setup on each of them, and that was a quarter of
/// the cost of reading a CSV file (see docs/benchmarks.md, "The fields found a word at a
/// time").
struct Ends<'a> {
    bytes: &'a [u8],
    /// The offset in `bytes` of the word `found` describes.
    at: usize,
    /// One bit per byte of that word (its high bit) that is a delimiter or a newline, and that
    /// was not given yet.
    found: u64,
    /// Those of `found` that are newlines.
    newlines: u64,
    delimiter: u64,
}

impl<'a> Ends<'a> {
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const ONES: u64 = 0x0101_0101_0101_0101;
    const NEWLINE: u64 = Self::ONES * b'\n' as u64;

    fn new(bytes: &'a [u8], delimiter: u8) -> Self {
        let delimiter = Self::ONES * u64::from(delimiter);
        let mut ends = Ends { bytes, at: 0, found: 0, newlines: 0, delimiter };
        (ends.found, ends.newlines) = ends.word_at(0);
        ends
    }

    /// The high bit of each byte of the word at `at` (read little-endian, so that bit order is
    /// byte order) that is the delimiter or a newline, and of each that is a newline; bytes
    /// past the run's end are neither.
    fn word_at(&self, at: usize) -> (u64, u64) {
        let (word, valid) = match self.bytes.get(at..at + 8) {
            Some(w) => (u64::from_le_bytes(w.try_into().unwrap_or_default()), u64::MAX),
            None => {
                let rest = self.bytes.get(at..).unwrap_or_default();
                let mut w = [0u8; 8];
                w[..rest.len()].copy_from_slice(rest);
                (u64::from_le_bytes(w), (1u64 << (8 * rest.len() as u32)).wrapping_sub(1))
            }
        };
        // A byte of `x` is nonzero exactly when the high bit of `((x & LOW) + LOW) | x` is set
        // (the addition cannot carry out of a byte); a byte is wanted when it is zero after
        // xor with either pattern.
        let nonzero = |x: u64| ((x & Self::LOW) + Self::LOW) | x;
        let not_newline = nonzero(word ^ Self::NEWLINE);
        let found = !((nonzero(word ^ self.delimiter) & not_newline) | Self::LOW) & valid;
        (found, !(not_newline | Self::LOW) & valid)
    }
}

impl Iterator for Ends<'_> {
    type Item = FieldEnd;

    #[inline]
    fn next(&mut self) -> Option<FieldEnd> {
        while self.found == 0 {
            self.at += 8;
            if self.at >= self.bytes.len() {
                return None;
            }
            (self.found, self.newlines) = self.word_at(self.at);
        }
        let pos = self.at + (self.found.trailing_zeros() / 8) as usize;
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
pub(crate) fn column(t: &DataType, rows: usize) -> Option<Box<dyn Column>> {
    column_sized(t, rows, 16)
}

/// [`column`], a string column's text taking about `width` bytes a row.
fn column_sized(t: &DataType, rows: usize, width: usize) -> Option<Box<dyn Column>> {
    fn primitive<T: ArrowPrimitiveType + Parser>(rows: usize) -> Option<Box<dyn Column>> {
        Some(Box::new(PrimitiveBuilder::<T>::with_capacity(rows)))
    }
    match t {
        DataType::Int8 => primitive::<Int8Type>(rows),
        DataType::Int16 => primitive::<Int16Type>(rows),
        DataType::Int32 => primitive::<Int32Type>(rows),
        DataType::Int64 => Some(Box::new(Int64s(PrimitiveBuilder::with_capacity(rows)))),
        DataType::UInt8 => primitive::<UInt8Type>(rows),
        DataType::UInt16 => primitive::<UInt16Type>(rows),
        DataType::UInt32 => primitive::<UInt32Type>(rows),
        DataType::UInt64 => primitive::<UInt64Type>(rows),
        DataType::Float32 => primitive::<Float32Type>(rows),
        DataType::Float64 => primitive::<Float64Type>(rows),
        DataType::Utf8 => {
            // A quarter more than the sample, for the rows whose text is longer.
            let room = rows.saturating_mul(width.max(8) + width / 4);
            Some(Box::new(StringBuilder::with_capacity(rows, room)))
        }
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

/// A BIGINT column. A field of up to 18 digits (no sign, no spaces) cannot overflow and is
/// read here, a digit at a time without checks; any other field goes to arrow's parser, which
/// reads signs, surrounding spaces and the limits of the range.
struct Int64s(PrimitiveBuilder<Int64Type>);

impl Column for Int64s {
    fn push(&mut self, field: &str, epoch: EpochUnit) -> bool {
        let digits = field.as_bytes();
        if (1..=18).contains(&digits.len()) {
            let (mut n, mut all_digits) = (0i64, true);
            for &b in digits {
                let d = b.wrapping_sub(b'0');
                all_digits &= d < 10;
                n = n.wrapping_mul(10).wrapping_add(i64::from(d));
            }
            if all_digits {
                self.0.append_value(n);
                return true;
            }
        }
        Column::push(&mut self.0, field, epoch)
    }

    fn finish(&mut self) -> ArrayRef {
        Column::finish(&mut self.0)
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

    /// The BIGINT column reads what arrow's parser reads, its own way for plain digits.
    #[test]
    fn bigint_fields_read_as_arrow_reads_them() {
        let epoch = EpochUnit { scale: 1, name: "s" };
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
        let mut ours = Int64s(PrimitiveBuilder::new());
        let mut arrows = PrimitiveBuilder::<Int64Type>::new();
        for f in fields {
            let parsed = Int64Type::parse(f);
            let taken = ours.push(f, epoch);
            assert_eq!(taken, f.is_empty() || parsed.is_some(), "{f:?}");
            if !taken {
                ours.0.append_null();
            }
            arrows.append_option(parsed);
        }
        assert_eq!(ours.finish().as_ref(), &arrows.finish() as &dyn Array);
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
