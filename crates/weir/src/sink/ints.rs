//! Integer columns of any width, as the sinks' text writers ([`super::csv_text`],
//! [`super::json_text`]) read them: one enum over arrow's typed arrays, so a row's value is
//! written in decimal with `itoa` without a dynamic call per value.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};

/// An integer column of any width.
pub(super) enum Ints<'a> {
    I8(&'a arrow::array::Int8Array),
    I16(&'a arrow::array::Int16Array),
    I32(&'a arrow::array::Int32Array),
    I64(&'a arrow::array::Int64Array),
    U8(&'a arrow::array::UInt8Array),
    U16(&'a arrow::array::UInt16Array),
    U32(&'a arrow::array::UInt32Array),
    U64(&'a arrow::array::UInt64Array),
}

impl<'a> Ints<'a> {
    /// Column `c` as integers, if it is an integer column.
    pub fn of(c: &'a ArrayRef) -> Option<Self> {
        Some(match c.data_type() {
            DataType::Int8 => Ints::I8(c.as_primitive::<Int8Type>()),
            DataType::Int16 => Ints::I16(c.as_primitive::<Int16Type>()),
            DataType::Int32 => Ints::I32(c.as_primitive::<Int32Type>()),
            DataType::Int64 => Ints::I64(c.as_primitive::<Int64Type>()),
            DataType::UInt8 => Ints::U8(c.as_primitive::<UInt8Type>()),
            DataType::UInt16 => Ints::U16(c.as_primitive::<UInt16Type>()),
            DataType::UInt32 => Ints::U32(c.as_primitive::<UInt32Type>()),
            DataType::UInt64 => Ints::U64(c.as_primitive::<UInt64Type>()),
            _ => return None,
        })
    }

    pub fn is_null(&self, row: usize) -> bool {
        match self {
            Ints::I8(a) => a.is_null(row),
            Ints::I16(a) => a.is_null(row),
            Ints::I32(a) => a.is_null(row),
            Ints::I64(a) => a.is_null(row),
            Ints::U8(a) => a.is_null(row),
            Ints::U16(a) => a.is_null(row),
            Ints::U32(a) => a.is_null(row),
            Ints::U64(a) => a.is_null(row),
        }
    }

    /// Row `row`'s value in decimal, written into `digits` (the slot's value for a NULL:
    /// check [`Self::is_null`] first).
    pub fn text<'b>(&self, row: usize, digits: &'b mut itoa::Buffer) -> &'b str {
        match self {
            Ints::I8(a) => digits.format(a.value(row)),
            Ints::I16(a) => digits.format(a.value(row)),
            Ints::I32(a) => digits.format(a.value(row)),
            Ints::I64(a) => digits.format(a.value(row)),
            Ints::U8(a) => digits.format(a.value(row)),
            Ints::U16(a) => digits.format(a.value(row)),
            Ints::U32(a) => digits.format(a.value(row)),
            Ints::U64(a) => digits.format(a.value(row)),
        }
    }
}
