//! Rows of BIGINT and DOUBLE columns read and written in place, without Arrow arrays.
//!
//! A [`RowCodec`] row of such columns is, per column, 9 bytes of Arrow's row format: a byte
//! (1 for a value, 0 for NULL) and the value's 8 bytes, big-endian with the sign bit flipped
//! (a DOUBLE's other bits flipped too when negative, so that bytes order as numbers). Going
//! through the codec costs building arrays, which dominates when an operator reads or writes
//! a handful of values at a time (a window frame's neighbours). [`NumericRow`] reads and
//! writes those bytes directly. It is only built after checking that the codec writes exactly
//! these bytes for sample values (NULL, zeros, the ends of the ranges, NaN), so a change of
//! Arrow's format turns the shortcut off instead of corrupting state.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array};
use arrow::datatypes::DataType;
use arrow::row::RowConverter;

use crate::row::RowCodec;

/// Bytes per column.
pub const WIDTH: usize = 9;

/// The column at byte `at` of `row`, its sign bit turned back: an integer's value, a DOUBLE's
/// order-preserving bits (see [`NumericRow::native_bits`]); None for NULL or a short row.
#[inline]
fn raw_bits(row: &[u8], at: usize) -> Option<i64> {
    let b: &[u8; WIDTH] = row.get(at..at + WIDTH)?.try_into().ok()?;
    if b[0] != 1 {
        return None;
    }
    let [_, w @ ..] = *b;
    Some(i64::from_be_bytes(w) ^ i64::MIN)
}

/// A DOUBLE's bits as an Arrow array holds them, from the order-preserving bits [`raw_bits`]
/// reads (a negative value's other bits are flipped back).
#[inline]
fn double_bits(bits: i64) -> i64 {
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// A value of a BIGINT or DOUBLE column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
    Null,
}

impl Num {
    /// The BIGINT value (None: NULL or a DOUBLE).
    pub fn as_int(self) -> Option<i64> {
        match self {
            Num::Int(x) => Some(x),
            _ => None,
        }
    }

    /// The DOUBLE value (None: NULL or a BIGINT).
    pub fn as_float(self) -> Option<f64> {
        match self {
            Num::Float(x) => Some(x),
            _ => None,
        }
    }
}

/// Whether a column is BIGINT or DOUBLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumType {
    Int,
    Float,
}

/// The layout of a codec's rows when every column is BIGINT or DOUBLE (see the module docs).
#[derive(Debug, Clone)]
pub struct NumericRow {
    types: Vec<NumType>,
}

impl NumericRow {
    /// The layout of `codec`'s rows, if every column is BIGINT or DOUBLE and the codec writes
    /// them as this module does.
    pub fn of(codec: &RowCodec) -> Option<NumericRow> {
        let types = codec.types();
        if !types.iter().all(|t| matches!(t, DataType::Int64 | DataType::Float64)) {
            return None;
        }
        match codec.converter() {
            Some(converter) => NumericRow::checked(types, converter),
            None => types.is_empty().then_some(NumericRow { types: vec![] }),
        }
    }

    /// The layout of rows of `types` as `converter` writes them: each column BIGINT, DOUBLE or
    /// a type an Arrow array holds as an i64 (timestamps, DATE64, TIME64, durations), and the
    /// converter seen to write sample values of those types (NULL, zeros, ±1, the ends of the
    /// ranges, -0.0, the infinities) as [`NumericRow::push`] does, the layout reading them
    /// back, and a NaN reading back as a NaN (its payload is the converter's business).
    pub(crate) fn checked(types: &[DataType], converter: &RowConverter) -> Option<NumericRow> {
        let layout = NumericRow { types: types.iter().map(num_type).collect::<Option<_>>()? };
        let (ints, floats) = samples();
        let cols = layout.columns(types, &ints, &floats)?;
        let rows = converter.convert_columns(&cols).ok()?;
        let mut mine = Vec::new();
        for i in 0..ints.len() {
            mine.clear();
            let want: Vec<Num> = (layout.types.iter())
                .map(|t| match t {
                    NumType::Int => ints[i].map_or(Num::Null, Num::Int),
                    NumType::Float => floats[i].map_or(Num::Null, Num::Float),
                })
                .collect();
            want.iter().for_each(|v| Self::push(*v, &mut mine));
            if rows.row(i).data() != &mine[..] {
                return None;
            }
            if !want.iter().enumerate().all(|(c, v)| same(layout.get(&mine, c), *v)) {
                return None;
            }
        }
        let nan = layout.columns(types, &[Some(7)], &[Some(f64::NAN)])?;
        let rows = converter.convert_columns(&nan).ok()?;
        let read_back = (0..types.len()).all(|c| match layout.get(rows.row(0).data(), c) {
            Num::Float(x) => x.is_nan(),
            Num::Int(x) => x == 7,
            Num::Null => false,
        });
        read_back.then_some(layout)
    }

    /// Columns of `types` holding `ints` (cast to an i64-backed type) or `floats`, by this
    /// layout's column types.
    pub(crate) fn columns(
        &self,
        types: &[DataType],
        ints: &[Option<i64>],
        floats: &[Option<f64>],
    ) -> Option<Vec<ArrayRef>> {
        let ints: ArrayRef = Arc::new(Int64Array::from(ints.to_vec()));
        let floats: ArrayRef = Arc::new(Float64Array::from(floats.to_vec()));
        (self.types.iter().zip(types))
            .map(|(k, t)| match k {
                NumType::Int => arrow::compute::cast(&ints, t).ok(),
                NumType::Float => Some(floats.clone()),
            })
            .collect()
    }

    /// The column types.
    pub fn types(&self) -> &[NumType] {
        &self.types
    }

    /// Column `c` of `row` (a row of this layout; a short row reads as NULL).
    #[inline]
    pub fn get(&self, row: &[u8], c: usize) -> Num {
        match (self.native_bits(row, c), self.types[c]) {
            (None, _) => Num::Null,
            (Some(bits), NumType::Int) => Num::Int(bits),
            (Some(bits), NumType::Float) => Num::Float(f64::from_bits(bits as u64)),
        }
    }

    /// Column `c` of `row` as the 8 bytes an Arrow array of its type holds (the i64, or the
    /// DOUBLE's bits); None for NULL (a short row reads as NULL, as in [`NumericRow::get`]).
    #[inline]
    pub fn native_bits(&self, row: &[u8], c: usize) -> Option<i64> {
        let bits = raw_bits(row, c * WIDTH)?;
        Some(match self.types[c] {
            NumType::Int => bits,
            NumType::Float => double_bits(bits),
        })
    }

    /// Column `c` of each of `rows` as [`NumericRow::native_bits`] reads it, appended to
    /// `vals` (0 for NULL); returns how many were NULL. The column's type is looked at once,
    /// not per row.
    pub fn read_column(&self, rows: &[&[u8]], c: usize, vals: &mut Vec<i64>) -> usize {
        let at = c * WIDTH;
        let mut nulls = 0;
        let mut read = |native: fn(i64) -> i64| {
            vals.extend(rows.iter().map(|r| match raw_bits(r, at) {
                Some(bits) => native(bits),
                None => {
                    nulls += 1;
                    0
                }
            }))
        };
        match self.types[c] {
            NumType::Int => read(|bits| bits),
            NumType::Float => read(double_bits),
        }
        nulls
    }

    /// Appends value `v` as a column of its type (BIGINT for `Int`, DOUBLE for `Float`).
    #[inline]
    pub fn push(v: Num, out: &mut Vec<u8>) {
        let bits = match v {
            Num::Null => {
                out.extend_from_slice(&[0; WIDTH]);
                return;
            }
            Num::Int(x) => x,
            Num::Float(x) => float_bits(x),
        };
        let mut w = bits.to_be_bytes();
        w[0] ^= 0x80;
        out.push(1);
        out.extend_from_slice(&w);
    }
}

/// The layout's column type of `t`: a DOUBLE, or an 8-byte integer of some type.
fn num_type(t: &DataType) -> Option<NumType> {
    match t {
        DataType::Float64 => Some(NumType::Float),
        DataType::Int64
        | DataType::Timestamp(..)
        | DataType::Date64
        | DataType::Time64(_)
        | DataType::Duration(_) => Some(NumType::Int),
        _ => None,
    }
}

/// The sample values [`NumericRow::checked`] writes and reads back, as 64-bit integers and
/// as DOUBLEs (the same number of each).
pub(crate) fn samples() -> (Vec<Option<i64>>, Vec<Option<f64>>) {
    let ints = [0, 1, -1, i64::MIN, i64::MAX, 42, -42, 1 << 53];
    let floats = [0.0, -0.0, 1.5, -2.25, f64::MIN, f64::MAX, f64::INFINITY, f64::NEG_INFINITY];
    let ints = std::iter::once(None).chain(ints.map(Some)).collect();
    let floats = std::iter::once(None).chain(floats.map(Some)).collect();
    (ints, floats)
}

/// A DOUBLE's bits as the row format orders them (negative values' magnitude bits flipped).
fn float_bits(x: f64) -> i64 {
    let s = x.to_bits() as i64;
    s ^ (((s >> 63) as u64) >> 1) as i64
}

/// Equal values, bit for bit for DOUBLEs (-0.0 is not 0.0).
fn same(a: Num, b: Num) -> bool {
    match (a, b) {
        (Num::Float(x), Num::Float(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The layout is taken for BIGINT and DOUBLE columns (so the check against the codec
    /// passes with the Arrow in the tree) and for none, and refused for any other column.
    #[test]
    fn the_layout_agrees_with_the_codec_for_bigint_and_double_only() {
        let codec = RowCodec::new(vec![DataType::Int64, DataType::Float64]).unwrap();
        let layout = NumericRow::of(&codec).expect("BIGINT and DOUBLE rows");
        assert_eq!(layout.types(), [NumType::Int, NumType::Float]);
        for other in [DataType::Int32, DataType::Utf8, DataType::Float32] {
            assert!(NumericRow::of(&RowCodec::new(vec![DataType::Int64, other]).unwrap()).is_none());
        }
        assert!(NumericRow::of(&RowCodec::new(vec![]).unwrap()).is_some());
    }

    proptest! {
        /// Any values, NULLs included, are written as the codec writes them and read back.
        #[test]
        fn rows_are_the_codec_s_bytes(
            rows in proptest::collection::vec(
                (proptest::option::of(any::<i64>()), proptest::option::of(any::<f64>())), 1..50)
        ) {
            let codec = RowCodec::new(vec![DataType::Int64, DataType::Float64]).unwrap();
            let layout = NumericRow::of(&codec).unwrap();
            let ints: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
            let floats: ArrayRef =
                Arc::new(Float64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>()));
            let encoded = codec.encode(&[ints, floats], rows.len()).unwrap();
            for (i, (a, b)) in rows.iter().enumerate() {
                let mut mine = Vec::new();
                NumericRow::push(a.map_or(Num::Null, Num::Int), &mut mine);
                NumericRow::push(b.map_or(Num::Null, Num::Float), &mut mine);
                prop_assert_eq!(encoded.get(i), &mine[..]);
                prop_assert_eq!(layout.get(&mine, 0), a.map_or(Num::Null, Num::Int));
                let back = layout.get(&mine, 1);
                prop_assert!(same(back, b.map_or(Num::Null, Num::Float)));
            }
        }
    }
}
