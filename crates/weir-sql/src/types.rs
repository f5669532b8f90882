//! SQL column types and Arrow types, both ways: the Arrow type a declared column is stored as
//! (`CREATE STREAM`, `CREATE TABLE`), and the SQL name of an Arrow type (`DESCRIBE`, messages).

use arrow::datatypes::{DataType, TimeUnit};
use sqlparser::ast::{self as sql, ExactNumberInfo};
use weir_common::{Result, Span, WeirError};

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
            return Err(WeirError::plan_at(format!("column type {other} is not supported"), span))
        }
    })
}

/// The SQL spelling of an Arrow type, for DESCRIBE and messages (the inverse of
/// [`arrow_type`] on the types it produces).
pub fn sql_type_name(t: &DataType) -> String {
    match t {
        DataType::Int64 => "BIGINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Float32 => "REAL".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Date32 => "DATE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every type a column can be declared as is named back as SQL that declares it again.
    #[test]
    fn declared_types_name_back() {
        for (sql, name) in [
            (sql::DataType::BigInt(None), "BIGINT"),
            (sql::DataType::SmallInt(None), "SMALLINT"),
            (sql::DataType::Real, "REAL"),
            (sql::DataType::Double(sql::ExactNumberInfo::None), "DOUBLE"),
            (sql::DataType::Text, "VARCHAR"),
            (sql::DataType::Boolean, "BOOLEAN"),
            (sql::DataType::Date, "DATE"),
            (sql::DataType::Timestamp(None, sql::TimezoneInfo::None), "TIMESTAMP"),
            (sql::DataType::Decimal(ExactNumberInfo::PrecisionAndScale(10, 2)), "DECIMAL(10,2)"),
        ] {
            let arrow = arrow_type(&sql, None).unwrap();
            assert_eq!(sql_type_name(&arrow), name, "{sql}");
        }
    }
}
