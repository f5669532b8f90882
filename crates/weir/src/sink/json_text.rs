//! A sink's JSON lines, written straight from the batch's columns.
//!
//! The same idea as [`super::csv_text`]: each value goes into the output once, with no
//! intermediate text. Keys are encoded once per batch; integers are written with `itoa`,
//! booleans as words, decimals as arrow's display writes them ([`super::decimal`]), zoneless
//! TIMESTAMP columns with [`super::IsoText`] in quotes, and strings
//! copied between quotes when they hold nothing JSON escapes, else escaped by `serde_json`
//! (which is what arrow's JSON writer uses for every string).
//!
//! The bytes are exactly what `arrow::json::LineDelimitedWriter` writes (a property test holds
//! them equal): one object per row, keys in column order, a NULL value's key left out, `\n`
//! after each object. A batch with a column of any other type, or a timestamp outside the years
//! [`super::IsoText`] writes, is written by arrow's writer instead ([`write_json`] says so by
//! returning false, before writing anything).

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};

use super::ints::Ints;
use super::{IsoText, ISO_FIRST_MICROS, ISO_LAST_MICROS};

/// Appends the JSON lines of `batch` to `out` and returns true, or returns false without
/// writing if a column is of a type this writer leaves to arrow's (see the module docs).
pub(crate) fn write_json(batch: &RecordBatch, out: &mut Vec<u8>) -> bool {
    let schema = batch.schema();
    let Some(columns) = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            let mut key = Vec::with_capacity(f.name().len() + 3);
            string(f.name(), &mut key);
            key.push(b':');
            Some((key, Value::new(c)?))
        })
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    if !columns.iter().all(|(_, v)| v.in_range()) {
        return false;
    }
    let mut columns = columns;
    for row in 0..batch.num_rows() {
        out.push(b'{');
        let mut first = true;
        for (key, value) in columns.iter_mut() {
            if value.is_null(row) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(key);
            value.write(row, out);
        }
        out.extend_from_slice(b"}\n");
    }
    true
}

/// One column's values as JSON values.
enum Value<'a> {
    Int(Ints<'a>),
    Str(&'a arrow::array::StringArray),
    Bool(&'a arrow::array::BooleanArray),
    Time(&'a arrow::array::TimestampMicrosecondArray, IsoText),
    /// A number, as arrow writes a decimal ([`super::decimal`]).
    Decimal(&'a arrow::array::Decimal128Array, usize, i8),
}

impl<'a> Value<'a> {
    fn new(c: &'a ArrayRef) -> Option<Self> {
        if let Some(ints) = Ints::of(c) {
            return Some(Value::Int(ints));
        }
        Some(match c.data_type() {
            DataType::Utf8 => Value::Str(c.as_string::<i32>()),
            DataType::Boolean => Value::Bool(c.as_boolean()),
            DataType::Decimal128(precision, scale) => Value::Decimal(
                c.as_primitive::<arrow::datatypes::Decimal128Type>(),
                *precision as usize,
                *scale,
            ),
            DataType::Timestamp(TimeUnit::Microsecond, None) => {
                Value::Time(c.as_primitive::<TimestampMicrosecondType>(), IsoText::default())
            }
            _ => return None,
        })
    }

    /// Whether every value is one this writer writes (a timestamp [`IsoText`] can write).
    fn in_range(&self) -> bool {
        match self {
            Value::Time(a, _) => {
                a.iter().flatten().all(|v| (ISO_FIRST_MICROS..=ISO_LAST_MICROS).contains(&v))
            }
            _ => true,
        }
    }

    fn is_null(&self, row: usize) -> bool {
        match self {
            Value::Int(a) => a.is_null(row),
            Value::Str(a) => a.is_null(row),
            Value::Bool(a) => a.is_null(row),
            Value::Time(a, _) => a.is_null(row),
            Value::Decimal(a, ..) => a.is_null(row),
        }
    }

    /// Appends row `row`'s value (not NULL).
    fn write(&mut self, row: usize, out: &mut Vec<u8>) {
        let mut digits = itoa::Buffer::new();
        let text = match self {
            Value::Int(a) => a.text(row, &mut digits),
            Value::Str(a) => return string(a.value(row), out),
            Value::Decimal(a, precision, scale) => {
                return super::decimal(digits.format(a.value(row)), *precision, *scale, out)
            }
            Value::Bool(a) => {
                if a.value(row) {
                    "true"
                } else {
                    "false"
                }
            }
            Value::Time(a, iso) => {
                // in_range checked every value first.
                let t = iso.write_bytes(a.value(row)).unwrap_or_default();
                out.push(b'"');
                out.extend_from_slice(t);
                out.push(b'"');
                return;
            }
        };
        out.extend_from_slice(text.as_bytes());
    }
}

/// Appends `s` as a JSON string: between quotes as it is when nothing in it needs escaping,
/// else escaped by `serde_json`, as arrow's writer escapes it.
fn string(s: &str, out: &mut Vec<u8>) {
    // A fold rather than `any`: it has no early exit, so it runs on whole vectors of bytes.
    let plain =
        !s.bytes().fold(false, |special, b| special | (b < 0x20) | (b == b'"') | (b == b'\\'));
    if plain {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    let mut serializer = serde_json::Serializer::new(&mut *out);
    // Writing into a Vec cannot fail.
    let _ = serde::Serializer::serialize_str(&mut serializer, s);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is a failed test
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Decimal128Array, Float64Array, Int32Array, Int64Array, StringArray,
        TimestampMicrosecondArray, UInt8Array,
    };
    use arrow::datatypes::{Field, Schema};
    use proptest::prelude::*;
    use std::sync::Arc;

    fn arrows(batch: &RecordBatch) -> String {
        let mut out = Vec::new();
        let mut w = arrow::json::LineDelimitedWriter::new(&mut out);
        w.write(batch).unwrap();
        w.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Random rows of integers, strings (with everything JSON escapes), booleans and
    /// timestamps, NULLs anywhere and keys that need escaping: the same bytes as arrow's JSON
    /// writer. A timestamp out of the years written by hand, or a float column, leaves the
    /// batch to arrow.
    #[test]
    fn the_same_bytes_as_arrows_json_writer() {
        let text = prop::collection::vec(
            prop::sample::select(vec!["a", "\"", "\\", "\n", "\u{1}", "\u{7f}", "\u{fc}", "/", ""]),
            0..4,
        )
        .prop_map(|parts| parts.concat());
        let time = prop_oneof![
            // The years 0-9999 (in range) and out of them on either side.
            50 => -60_000_000_000_000_000i64..200_000_000_000_000_000,
            1 => Just(300_000_000_000_000_000i64),
            1 => Just(-62_167_219_200_000_001i64),
            3 => Just(0),
            3 => Just(1_500),
        ];
        let row = (
            prop::option::of(any::<i64>()),
            prop::option::of(any::<i32>()),
            prop::option::of(any::<u8>()),
            prop::option::of(text),
            prop::option::of(any::<bool>()),
            prop::option::of(time),
            prop::option::of(any::<i128>()),
        );
        let floats = any::<bool>();
        proptest!(|(rows in prop::collection::vec(row, 0..20), with_float in floats)| {
            let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
            let mut fields = vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b\"q", DataType::Int32, true),
                Field::new("c", DataType::UInt8, true),
                Field::new("d", DataType::Utf8, true),
                Field::new("e", DataType::Boolean, true),
                Field::new("_time", ts, true),
                Field::new("g", DataType::Decimal128(20, 3), true),
            ];
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(rows.iter().map(|x| x.0).collect::<Int64Array>()),
                Arc::new(rows.iter().map(|x| x.1).collect::<Int32Array>()),
                Arc::new(rows.iter().map(|x| x.2).collect::<UInt8Array>()),
                Arc::new(rows.iter().map(|x| x.3.clone()).collect::<StringArray>()),
                Arc::new(rows.iter().map(|x| x.4).collect::<BooleanArray>()),
                Arc::new(rows.iter().map(|x| x.5).collect::<TimestampMicrosecondArray>()),
                Arc::new(
                    rows.iter()
                        .map(|x| x.6.map(|v| if v % 2 == 0 { v % 100_000 } else { v }))
                        .collect::<Decimal128Array>()
                        .with_precision_and_scale(20, 3)
                        .unwrap(),
                ),
            ];
            if with_float {
                fields.push(Field::new("f", DataType::Float64, true));
                columns.push(Arc::new(Float64Array::from(vec![Some(0.5); rows.len()])));
            }
            let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
            let mut out = Vec::new();
            if write_json(&batch, &mut out) {
                prop_assert!(!with_float);
                prop_assert_eq!(String::from_utf8(out).unwrap(), arrows(&batch));
            } else {
                prop_assert!(out.is_empty());
                let far = rows.iter().flat_map(|r| r.5).any(|t| IsoText::default().write(t).is_none());
                prop_assert!(with_float || far);
            }
        });
        let clean = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("t", Arc::new(TimestampMicrosecondArray::from(vec![0, 1_500])) as ArrayRef),
        ])
        .unwrap();
        let mut out = Vec::new();
        assert!(write_json(&clean, &mut out), "a batch of integers and timestamps is written here");
        assert_eq!(String::from_utf8(out).unwrap(), arrows(&clean));
    }
}
