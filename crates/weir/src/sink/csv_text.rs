//! A sink's CSV text, written straight from the batch's columns.
//!
//! Arrow's CSV writer formats every value through its display machinery into a `String`, then
//! hands each record to the `csv` crate, which checks every field for bytes that need quotes
//! and copies it again: in a profile of a CSV sink that was most of the sink's time. Here each
//! column writes its values into the output directly: integers with `itoa`, strings checked
//! for the bytes that need quotes and copied once, booleans as words, zoneless TIMESTAMP
//! columns with [`super::IsoText`]. Any other type is formatted with arrow's own formatter
//! (with the options arrow's CSV writer uses), then quoted the same way.
//!
//! The bytes are exactly what `arrow::csv::WriterBuilder::new().with_header(false)` writes
//! (a property test holds them equal): fields separated by `,`, records ended by `\n`, NULL as
//! an empty field, and a field quoted when it holds `,`, `"`, `\r` or `\n` (as the `csv`
//! crate's `QuoteStyle::Necessary` decides), with its quotes doubled. A batch with a nested
//! column goes to arrow's writer, which refuses it. A record always has at least two fields
//! (`_time` and a column), so an empty field never needs the quotes a lone one would.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use wide::u8x16;

use super::ints::Ints;
use super::IsoText;

/// Appends the CSV records of `batch` (no header) to `out`; see the module docs.
pub(crate) fn write_csv(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    if batch.columns().iter().any(|c| c.data_type().is_nested()) {
        let mut w = arrow::csv::WriterBuilder::new().with_header(false).build(out);
        return w.write(batch);
    }
    let options = FormatOptions::default();
    let mut columns: Vec<ColumnText<'_>> =
        batch.columns().iter().map(|c| ColumnText::new(c, &options)).collect::<Result<_, _>>()?;
    let mut scratch = String::new();
    for row in 0..batch.num_rows() {
        let start = out.len();
        for (i, c) in columns.iter_mut().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            c.write(row, out, &mut scratch)?;
        }
        // A record of one empty field is written `""`, as arrow's writer does: an empty line
        // would read as no record at all.
        if out.len() == start {
            out.extend_from_slice(b"\"\"");
        }
        out.push(b'\n');
    }
    Ok(())
}

/// One column's values as CSV fields.
enum ColumnText<'a> {
    Int(Ints<'a>),
    Str(&'a arrow::array::StringArray),
    Bool(&'a arrow::array::BooleanArray),
    /// `DECIMAL` values, as arrow writes them ([`super::decimal`]).
    Decimal {
        values: &'a arrow::array::Decimal128Array,
        precision: usize,
        scale: i8,
    },
    /// Zoneless microsecond timestamps; values [`IsoText`] does not write go to `other`.
    Time {
        values: &'a arrow::array::TimestampMicrosecondArray,
        text: IsoText,
        other: ArrayFormatter<'a>,
    },
    Other(ArrayFormatter<'a>),
}

impl<'a> ColumnText<'a> {
    fn new(c: &'a ArrayRef, options: &FormatOptions<'a>) -> Result<Self, ArrowError> {
        if let Some(ints) = Ints::of(c) {
            return Ok(ColumnText::Int(ints));
        }
        Ok(match c.data_type() {
            DataType::Utf8 => ColumnText::Str(c.as_string::<i32>()),
            DataType::Boolean => ColumnText::Bool(c.as_boolean()),
            DataType::Decimal128(precision, scale) => ColumnText::Decimal {
                values: c.as_primitive::<arrow::datatypes::Decimal128Type>(),
                precision: *precision as usize,
                scale: *scale,
            },
            DataType::Timestamp(TimeUnit::Microsecond, None) => ColumnText::Time {
                values: c.as_primitive::<TimestampMicrosecondType>(),
                text: IsoText::default(),
                other: ArrayFormatter::try_new(c.as_ref(), options)?,
            },
            _ => ColumnText::Other(ArrayFormatter::try_new(c.as_ref(), options)?),
        })
    }

    /// Appends row `row`'s field (without its delimiter); `scratch` is room for arrow's text.
    fn write(
        &mut self,
        row: usize,
        out: &mut Vec<u8>,
        scratch: &mut String,
    ) -> Result<(), ArrowError> {
        match self {
            ColumnText::Int(ints) => {
                if !ints.is_null(row) {
                    out.extend_from_slice(ints.text(row, &mut itoa::Buffer::new()).as_bytes());
                }
            }
            ColumnText::Str(a) => {
                if a.is_valid(row) {
                    field(a.value(row).as_bytes(), out);
                }
            }
            ColumnText::Bool(a) => {
                if a.is_valid(row) {
                    out.extend_from_slice(if a.value(row) { b"true" } else { b"false" });
                }
            }
            ColumnText::Decimal { values, precision, scale } => {
                if values.is_valid(row) {
                    let mut digits = itoa::Buffer::new();
                    super::decimal(digits.format(values.value(row)), *precision, *scale, out);
                }
            }
            ColumnText::Time { values, text, other } => {
                if values.is_valid(row) {
                    match text.write_bytes(values.value(row)) {
                        Some(t) => out.extend_from_slice(t),
                        None => formatted(other, row, out, scratch)?,
                    }
                }
            }
            ColumnText::Other(f) => formatted(f, row, out, scratch)?,
        }
        Ok(())
    }
}

/// Row `row` of a column arrow formats (NULL as the empty field, as arrow's CSV writer has it).
fn formatted(
    f: &ArrayFormatter<'_>,
    row: usize,
    out: &mut Vec<u8>,
    scratch: &mut String,
) -> Result<(), ArrowError> {
    scratch.clear();
    f.value(row)
        .write(scratch)
        .map_err(|e| ArrowError::CsvError(format!("cannot write a value as CSV: {e}")))?;
    field(scratch.as_bytes(), out);
    Ok(())
}

/// Whether `bytes` holds `,`, `"`, `\r` or `\n`: sixteen bytes at a time (a byte at a time
/// the check was a quarter of the CSV sink's formatting; LLVM does not vectorise it).
fn needs_quotes(bytes: &[u8]) -> bool {
    let specials = [b',', b'"', b'\r', b'\n'].map(u8x16::splat);
    let hit = |lanes: [u8; 16]| {
        let v = u8x16::new(lanes);
        let m = v.cmp_eq(specials[0]) | v.cmp_eq(specials[1]) | v.cmp_eq(specials[2]);
        (m | v.cmp_eq(specials[3])).any()
    };
    let mut chunks = bytes.chunks_exact(16);
    for chunk in &mut chunks {
        let mut lanes = [0u8; 16];
        lanes.copy_from_slice(chunk);
        if hit(lanes) {
            return true;
        }
    }
    // The tail, zero-padded (no special byte is zero).
    let rest = chunks.remainder();
    let mut lanes = [0u8; 16];
    lanes[..rest.len()].copy_from_slice(rest);
    hit(lanes)
}

/// Appends a field's bytes, in quotes (its own doubled) if it holds `,`, `"`, `\r` or `\n`.
fn field(bytes: &[u8], out: &mut Vec<u8>) {
    if !needs_quotes(bytes) {
        out.extend_from_slice(bytes);
        return;
    }
    out.push(b'"');
    let mut rest = bytes;
    while let Some(q) = memchr::memchr(b'"', rest) {
        out.extend_from_slice(&rest[..=q]);
        out.push(b'"');
        rest = &rest[q + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is a failed test
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Decimal128Array, Float64Array, Int64Array, Int8Array, StringArray,
        TimestampMicrosecondArray, UInt64Array,
    };
    use arrow::datatypes::{Field, Schema};
    use proptest::prelude::*;
    use std::sync::Arc;

    proptest! {
        /// The vector check finds what a byte-by-byte one finds, at any place in fields of
        /// any length (whole chunks, a tail, both), bytes with the high bit set included.
        #[test]
        fn needs_quotes_is_a_scan(
            bytes in proptest::collection::vec(
                prop_oneof![8 => Just(b'a'), 1 => Just(b','), 1 => Just(b'"'),
                    1 => Just(b'\r'), 1 => Just(b'\n'), 1 => Just(0u8), 1 => Just(0xacu8),
                    1 => any::<u8>()],
                0..70,
            ),
        ) {
            let scan = bytes.iter().any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n'));
            prop_assert_eq!(needs_quotes(&bytes), scan, "{:?}", bytes);
        }
    }

    /// The text, or that writing failed.
    fn arrows(batch: &RecordBatch) -> Option<String> {
        let mut out = Vec::new();
        let w = arrow::csv::WriterBuilder::new().with_header(false).build(&mut out).write(batch);
        w.ok().map(|_| String::from_utf8(out).unwrap())
    }

    fn ours(batch: &RecordBatch) -> Option<String> {
        let mut out = Vec::new();
        write_csv(batch, &mut out).ok().map(|_| String::from_utf8(out).unwrap())
    }

    /// A one-column record whose field is empty (NULL or an empty string) is `""`, never an
    /// empty line, which a CSV reader would skip as no record.
    #[test]
    fn an_empty_one_field_record_is_quoted() {
        let batch = RecordBatch::try_from_iter([(
            "s",
            Arc::new(StringArray::from(vec![Some("a"), None, Some("")])) as ArrayRef,
        )])
        .unwrap();
        assert_eq!(ours(&batch).unwrap(), "a\n\"\"\n\"\"\n");
        assert_eq!(ours(&batch), arrows(&batch));
    }

    /// Decimals of every precision and scale (negative too), with values beyond their
    /// precision, which arrow cuts short: the same bytes as arrow's writer.
    #[test]
    fn decimals_as_arrows_csv_writer_writes_them() {
        let case =
            (1u8..=38, -5i8..=12, prop::collection::vec(prop::option::of(any::<i128>()), 0..12));
        proptest!(|((precision, scale, values) in case)| {
            let scale = scale.min(precision as i8);
            let small = values.iter().map(|v| v.map(|v| if v % 3 == 0 { v % 1000 } else { v }));
            let array = small
                .collect::<Decimal128Array>()
                .with_precision_and_scale(precision, scale)
                .unwrap();
            let schema = Arc::new(Schema::new(vec![Field::new(
                "d",
                DataType::Decimal128(precision, scale),
                true,
            )]));
            let batch = RecordBatch::try_new(schema, vec![Arc::new(array)]).unwrap();
            prop_assert_eq!(ours(&batch), arrows(&batch), "{:?}", batch);
        });
    }

    /// Random columns of every kind the writer treats on its own, and some it leaves to
    /// arrow's formatter, with NULLs, extreme values and the bytes that need quotes: the same
    /// bytes as arrow's CSV writer, or an error where it fails (a timestamp chrono cannot
    /// represent).
    #[test]
    fn the_same_bytes_as_arrows_csv_writer() {
        let text = prop::collection::vec(
            prop::sample::select(vec!["a", ",", "\"", "\r", "\n", " ", "\u{fc}", "x\"\"y", ""]),
            0..4,
        )
        .prop_map(|parts| parts.concat());
        // Mostly instants chrono can write, in the years 0-9999 and out of them.
        let time = prop_oneof![
            200 => -100_000_000_000_000_000i64..300_000_000_000_000_000,
            1 => Just(i64::MIN),
            1 => Just(i64::MAX),
            5 => Just(0),
            5 => Just(1_500),
            5 => Just(-1),
        ];
        let row = (
            prop::option::of(any::<i64>()),
            prop::option::of(any::<i8>()),
            prop::option::of(any::<u64>()),
            prop::option::of(text),
            prop::option::of(any::<bool>()),
            prop::option::of(time.clone()),
            prop::option::of(prop_oneof![
                any::<f64>(),
                Just(f64::NAN),
                Just(-0.0),
                Just(f64::INFINITY)
            ]),
            prop::option::of(time),
            prop::option::of(any::<i128>().prop_map(|v| v % 10i128.pow(30))),
        );
        proptest!(|(rows in prop::collection::vec(row, 0..20))| {
            let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
            let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("+02:00".into()));
            let schema = Arc::new(Schema::new(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Int8, true),
                Field::new("c", DataType::UInt64, true),
                Field::new("d", DataType::Utf8, true),
                Field::new("e", DataType::Boolean, true),
                Field::new("f", ts, true),
                Field::new("g", DataType::Float64, true),
                Field::new("h", zoned, true),
                Field::new("i", DataType::Decimal128(38, 4), true),
            ]));
            type Rows = Vec<(
                Option<i64>, Option<i8>, Option<u64>, Option<String>, Option<bool>,
                Option<i64>, Option<f64>, Option<i64>, Option<i128>,
            )>;
            let r: &Rows = &rows;
            let batch = RecordBatch::try_new(schema, vec![
                Arc::new(r.iter().map(|x| x.0).collect::<Int64Array>()),
                Arc::new(r.iter().map(|x| x.1).collect::<Int8Array>()),
                Arc::new(r.iter().map(|x| x.2).collect::<UInt64Array>()),
                Arc::new(r.iter().map(|x| x.3.clone()).collect::<StringArray>()),
                Arc::new(r.iter().map(|x| x.4).collect::<BooleanArray>()),
                Arc::new(r.iter().map(|x| x.5).collect::<TimestampMicrosecondArray>()),
                Arc::new(r.iter().map(|x| x.6).collect::<Float64Array>()),
                Arc::new(
                    r.iter().map(|x| x.7).collect::<TimestampMicrosecondArray>()
                        .with_timezone("+02:00"),
                ),
                Arc::new(
                    r.iter().map(|x| x.8).collect::<Decimal128Array>()
                        .with_precision_and_scale(38, 4).unwrap(),
                ),
            ]).unwrap();
            prop_assert_eq!(ours(&batch), arrows(&batch), "{:?}", batch);
        });
    }
}
