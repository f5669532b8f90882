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

use crate::row::RowCodec;

/// Bytes per column.
pub const WIDTH: usize = 9;

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
        let types: Vec<NumType> = codec
            .types()
            .iter()
            .map(|t| match t {
                DataType::Int64 => Some(NumType::Int),
                DataType::Float64 => Some(NumType::Float),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let layout = NumericRow { types };
        layout.agrees_with(codec).then_some(layout)
    }

    /// Whether `codec` encodes and decodes sample rows as this layout does.
    fn agrees_with(&self, codec: &RowCodec) -> bool {
        let ints = [None, Some(0), Some(1), Some(-1), Some(i64::MIN), Some(i64::MAX), Some(42)];
        let floats = [
            None,
            Some(0.0),
            Some(-0.0),
            Some(1.5),
            Some(-2.25),
            Some(f64::MAX),
            Some(f64::NEG_INFINITY),
        ];
        let n = ints.len();
        let cols: Vec<ArrayRef> = self
            .types
            .iter()
            .map(|t| match t {
                NumType::Int => Arc::new(Int64Array::from(ints.to_vec())) as ArrayRef,
                NumType::Float => Arc::new(Float64Array::from(floats.to_vec())) as ArrayRef,
            })
            .collect();
        let Ok(rows) = codec.encode(&cols, n) else { return false };
        let mut mine = Vec::new();
        for i in 0..n {
            mine.clear();
            for t in &self.types {
                let v = match t {
                    NumType::Int => ints[i].map_or(Num::Null, Num::Int),
                    NumType::Float => floats[i].map_or(Num::Null, Num::Float),
                };
                Self::push(v, &mut mine);
            }
            if rows.get(i) != &mine[..] {
                return false;
            }
            let back = (0..self.types.len()).map(|c| self.get(&mine, c)).collect::<Vec<_>>();
            let want = self.types.iter().map(|t| match t {
                NumType::Int => ints[i].map_or(Num::Null, Num::Int),
                NumType::Float => floats[i].map_or(Num::Null, Num::Float),
            });
            if !back.iter().zip(want).all(|(a, b)| same(*a, b)) {
                return false;
            }
        }
        // A NaN reads back as a NaN (its payload is the codec's business, not compared).
        let nan: Vec<ArrayRef> = self
            .types
            .iter()
            .map(|t| match t {
                NumType::Int => Arc::new(Int64Array::from(vec![7])) as ArrayRef,
                NumType::Float => Arc::new(Float64Array::from(vec![f64::NAN])) as ArrayRef,
            })
            .collect();
        let Ok(rows) = codec.encode(&nan, 1) else { return false };
        (0..self.types.len()).all(|c| match self.get(rows.get(0), c) {
            Num::Float(x) => x.is_nan(),
            Num::Int(x) => x == 7,
            Num::Null => false,
        })
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
        let b = row.get(c * WIDTH..(c + 1) * WIDTH)?;
        if b[0] != 1 {
            return None;
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[1..]);
        w[0] ^= 0x80;
        let bits = i64::from_be_bytes(w);
        Some(match self.types[c] {
            NumType::Int => bits,
            NumType::Float => bits ^ (((bits >> 63) as u64) >> 1) as i64,
        })
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
