//! SQL column types to Arrow types, for `CREATE STREAM` and `CREATE TABLE`.

use arrow::datatypes::{DataType, TimeUnit};
use sqlparser::ast::{self as sql, ExactNumberInfo};
use weir_common::{Diagnostic, Result, Span, WeirError};

/// The Arrow type Weir stores a declared SQL type as. Integers are 64-bit unless declared
/// SMALLINT/TINYINT (SQLite's INTEGER is 64-bit too); TIMESTAMP is microseconds, no zone.
pub fn arrow_type(t: &sql::DataType, span: Option<Span>) -> Result<DataType> {
    use sql::DataType as T;
    Ok(match t {
        T::BigInt(_) | T::Int(_) | T::Integer(_) | T::Int64 | T::Int8(_) | T::Int4(_) => {
            DataType::Int64
        }
        T::SmallInt(_) | T::Int2(_) => DataType::Int16,
        T::TinyInt(_) => DataType::Int8,
        T::Real | T::Float4 => DataType::Float32,
        T::Float(_) | T::Double(_) | T::DoublePrecision | T::Float8 | T::Float64 => {
            DataType::Float64
        }
        T::Decimal(info) | T::Numeric(info) => match info {
            ExactNumberInfo::PrecisionAndScale(p, s) => {
                DataType::Decimal128((*p).min(38) as u8, (*s).clamp(0, 38) as i8)
            }
            ExactNumberInfo::Precision(p) => DataType::Decimal128((*p).min(38) as u8, 0),
            ExactNumberInfo::None => DataType::Decimal128(38, 10),
        },
        T::Varchar(_)
        | T::Char(_)
        | T::Character(_)
        | T::CharVarying(_)
        | T::CharacterVarying(_)
        | T::Text
        | T::String(_)
        | T::Nvarchar(_) => DataType::Utf8,
        T::Boolean | T::Bool => DataType::Boolean,
        T::Timestamp(_, _) | T::Datetime(_) => DataType::Timestamp(TimeUnit::Microsecond, None),
        T::Date => DataType::Date32,
        other => {
            return Err(WeirError::Plan(Diagnostic::at(
                format!("column type {other} is not supported"),
                span,
            )))
        }
    })
}
