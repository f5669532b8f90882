//! Weir's values on the wire: the PostgreSQL type of each Arrow type, and rows of Arrow
//! batches encoded as PostgreSQL data rows, in text or binary format.
//!
//! | Weir (Arrow) | PostgreSQL |
//! | --- | --- |
//! | BIGINT (Int64), Int32, SMALLINT (Int16), TINYINT (Int8 → int2) | int8, int4, int2 |
//! | UInt8, UInt16 → int4; UInt32 → int8; UInt64 → numeric | |
//! | DOUBLE (Float64), REAL (Float32) | float8, float4 |
//! | DECIMAL(p,s) (Decimal128) | numeric |
//! | VARCHAR (Utf8, LargeUtf8, Utf8View) | text |
//! | BOOLEAN | bool |
//! | TIMESTAMP (microseconds, no zone) | timestamp |
//! | DATE (Date32) | date |
//! | anything else (intervals, NULL-typed columns, lists) | text, as Weir prints it |
//!
//! The encoding of each value is `postgres-types`' (through pgwire's encoder), so text and
//! binary formats are exactly what PostgreSQL clients decode.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, RecordBatch, TimestampMicrosecondArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    Schema, TimeUnit, UInt16Type, UInt32Type, UInt8Type,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use pgwire::api::results::{CopyEncoder, DataRowEncoder, FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::types::ToSqlText;
use postgres_types::ToSql;
use rust_decimal::Decimal;

/// The PostgreSQL type a column of `t` is sent as.
pub(crate) fn pg_type(t: &DataType) -> Type {
    match t {
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::Int32 | DataType::UInt16 | DataType::UInt8 => Type::INT4,
        DataType::Int16 | DataType::Int8 => Type::INT2,
        DataType::Float64 => Type::FLOAT8,
        DataType::Float32 => Type::FLOAT4,
        DataType::Decimal128(_, _) | DataType::UInt64 => Type::NUMERIC,
        DataType::Boolean => Type::BOOL,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Date32 => Type::DATE,
        _ => Type::TEXT,
    }
}

/// The result columns of `schema`, each in the format the client asked for (`format(i)`).
pub(crate) fn fields(schema: &Schema, format: impl Fn(usize) -> FieldFormat) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(f.name().clone(), None, None, pg_type(f.data_type()), format(i))
        })
        .collect()
}

/// One column of a batch, ready to encode value by value.
enum Column<'a> {
    I64(&'a arrow::array::PrimitiveArray<Int64Type>),
    I32(&'a arrow::array::PrimitiveArray<Int32Type>),
    I16(&'a arrow::array::PrimitiveArray<Int16Type>),
    I8(&'a arrow::array::PrimitiveArray<Int8Type>),
    U8(&'a arrow::array::PrimitiveArray<UInt8Type>),
    U16(&'a arrow::array::PrimitiveArray<UInt16Type>),
    U32(&'a arrow::array::PrimitiveArray<UInt32Type>),
    F64(&'a arrow::array::PrimitiveArray<Float64Type>),
    F32(&'a arrow::array::PrimitiveArray<Float32Type>),
    Bool(&'a arrow::array::BooleanArray),
    Str(&'a dyn Array),
    Timestamp(&'a TimestampMicrosecondArray),
    Date(&'a arrow::array::PrimitiveArray<Date32Type>),
    Decimal(&'a Decimal128Array, u32),
    /// As Weir prints it (also UInt64, which may not fit an int8: sent as numeric text).
    Text(&'a dyn Array, ArrayFormatter<'a>),
}

impl<'a> Column<'a> {
    fn new(col: &'a ArrayRef, options: &'a FormatOptions<'a>) -> PgWireResult<Self> {
        Ok(match col.data_type() {
            DataType::Int64 => Column::I64(col.as_primitive()),
            DataType::Int32 => Column::I32(col.as_primitive()),
            DataType::Int16 => Column::I16(col.as_primitive()),
            DataType::Int8 => Column::I8(col.as_primitive()),
            DataType::UInt8 => Column::U8(col.as_primitive()),
            DataType::UInt16 => Column::U16(col.as_primitive()),
            DataType::UInt32 => Column::U32(col.as_primitive()),
            DataType::Float64 => Column::F64(col.as_primitive()),
            DataType::Float32 => Column::F32(col.as_primitive()),
            DataType::Boolean => Column::Bool(col.as_boolean()),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Column::Str(col.as_ref()),
            DataType::Timestamp(TimeUnit::Microsecond, None) => {
                Column::Timestamp(col.as_primitive())
            }
            DataType::Date32 => Column::Date(col.as_primitive()),
            DataType::Decimal128(_, s) if *s >= 0 => Column::Decimal(col.as_primitive(), *s as u32),
            _ => Column::Text(
                col.as_ref(),
                ArrayFormatter::try_new(col.as_ref(), options)
                    .map_err(|e| PgWireError::ApiError(Box::new(e)))?,
            ),
        })
    }

    fn is_null(&self, row: usize) -> bool {
        match self {
            Column::I64(a) => a.is_null(row),
            Column::I32(a) => a.is_null(row),
            Column::I16(a) => a.is_null(row),
            Column::I8(a) => a.is_null(row),
            Column::U8(a) => a.is_null(row),
            Column::U16(a) => a.is_null(row),
            Column::U32(a) => a.is_null(row),
            Column::F64(a) => a.is_null(row),
            Column::F32(a) => a.is_null(row),
            Column::Bool(a) => a.is_null(row),
            Column::Str(a) | Column::Text(a, _) => a.is_null(row),
            Column::Timestamp(a) => a.is_null(row),
            Column::Date(a) => a.is_null(row),
            Column::Decimal(a, _) => a.is_null(row),
        }
    }

    fn encode(&self, row: usize, enc: &mut impl FieldOut) -> PgWireResult<()> {
        if self.is_null(row) {
            return enc.put(&None::<i64>);
        }
        match self {
            Column::I64(a) => enc.put(&a.value(row)),
            Column::I32(a) => enc.put(&a.value(row)),
            Column::I16(a) => enc.put(&a.value(row)),
            Column::I8(a) => enc.put(&i16::from(a.value(row))),
            Column::U8(a) => enc.put(&i32::from(a.value(row))),
            Column::U16(a) => enc.put(&i32::from(a.value(row))),
            Column::U32(a) => enc.put(&i64::from(a.value(row))),
            Column::F64(a) => enc.put(&a.value(row)),
            Column::F32(a) => enc.put(&a.value(row)),
            Column::Bool(a) => enc.put(&a.value(row)),
            Column::Str(a) => enc.put(&string_value(*a, row)),
            Column::Timestamp(a) => enc.put(&Timestamp(timestamp(a.value(row))?)),
            Column::Date(a) => enc.put(&date(a.value(row))?),
            Column::Decimal(a, scale) => {
                let d = Decimal::try_from_i128_with_scale(a.value(row), *scale).map_err(|_| {
                    user_error(format!(
                        "the value {} does not fit PostgreSQL's numeric encoding here (at most \
                         28 significant digits)",
                        a.value_as_string(row)
                    ))
                })?;
                enc.put(&d)
            }
            Column::Text(_, f) => enc.put(&f.value(row).to_string()),
        }
    }
}

fn string_value(a: &dyn Array, row: usize) -> &str {
    match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(row),
        DataType::LargeUtf8 => a.as_string::<i64>().value(row),
        _ => a.as_string_view().value(row),
    }
}

/// Microseconds since the epoch as a timestamp without zone.
pub(crate) fn timestamp(micros: i64) -> PgWireResult<NaiveDateTime> {
    DateTime::from_timestamp_micros(micros)
        .map(|t| t.naive_utc())
        .ok_or_else(|| user_error(format!("timestamp {micros} µs is out of range")))
}

/// A timestamp spelled as PostgreSQL spells it in text: fractional seconds only when there
/// are some, without trailing zeros (`2024-01-01 00:00:01.5`).
#[derive(Debug)]
pub(crate) struct Timestamp(pub NaiveDateTime);

impl ToSql for Timestamp {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <NaiveDateTime as ToSql>::accepts(ty)
    }

    postgres_types::to_sql_checked!();
}

impl ToSqlText for Timestamp {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _options: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        let text = self.0.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
        let text = match text.split_once('.') {
            Some((whole, frac)) => {
                let frac = frac.trim_end_matches('0');
                if frac.is_empty() {
                    whole.to_string()
                } else {
                    format!("{whole}.{frac}")
                }
            }
            None => text,
        };
        out.put_slice(text.as_bytes());
        Ok(postgres_types::IsNull::No)
    }
}

fn date(days: i32) -> PgWireResult<NaiveDate> {
    NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|epoch| epoch.checked_add_signed(chrono::Duration::days(i64::from(days))))
        .ok_or_else(|| user_error(format!("date {days} days from 1970-01-01 is out of range")))
}

fn user_error(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "ERROR".into(),
        "22003".into(),
        message,
    )))
}

/// Where encoded values go: a data row, or a line of `COPY TO STDOUT`.
pub(crate) trait FieldOut {
    fn put<T: ToSql + ToSqlText>(&mut self, value: &T) -> PgWireResult<()>;
}

impl FieldOut for DataRowEncoder {
    fn put<T: ToSql + ToSqlText>(&mut self, value: &T) -> PgWireResult<()> {
        self.encode_field(value)
    }
}

impl FieldOut for CopyEncoder {
    fn put<T: ToSql + ToSqlText>(&mut self, value: &T) -> PgWireResult<()> {
        self.encode_field(value)
    }
}

/// The columns of one batch, ready to encode row by row.
pub(crate) struct Columns<'a> {
    columns: Vec<Column<'a>>,
}

impl<'a> Columns<'a> {
    pub fn new(batch: &'a RecordBatch, options: &'a FormatOptions<'a>) -> PgWireResult<Self> {
        let columns =
            batch.columns().iter().map(|c| Column::new(c, options)).collect::<PgWireResult<_>>()?;
        Ok(Columns { columns })
    }

    /// Encodes every value of `row`.
    pub fn encode(&self, row: usize, out: &mut impl FieldOut) -> PgWireResult<()> {
        self.columns.iter().try_for_each(|c| c.encode(row, out))
    }
}

/// The rows of `batch` as data rows of `fields`.
pub(crate) fn data_rows(
    batch: &RecordBatch,
    fields: &Arc<Vec<FieldInfo>>,
) -> PgWireResult<Vec<DataRow>> {
    let options = FormatOptions::default();
    let columns = Columns::new(batch, &options)?;
    let mut enc = DataRowEncoder::new(fields.clone());
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        columns.encode(row, &mut enc)?;
        out.push(enc.take_row());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Date32Array, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::Field;

    fn text_of(row: &DataRow) -> Vec<Option<String>> {
        // A data row is, per field, a 4-byte length (-1 for NULL) then the bytes.
        let mut out = Vec::new();
        let mut b = &row.data[..];
        while b.len() >= 4 {
            let n = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            b = &b[4..];
            if n < 0 {
                out.push(None);
            } else {
                let (v, rest) = b.split_at(n as usize);
                out.push(Some(String::from_utf8_lossy(v).into_owned()));
                b = rest;
            }
        }
        out
    }

    /// Each type is sent as the PostgreSQL type of the table in the module docs, with
    /// PostgreSQL's text spelling of its values (booleans `t`/`f`, NULL as a null field).
    #[test]
    fn values_are_sent_in_postgresql_text_format() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Float64, true),
            Field::new("c", DataType::Utf8, true),
            Field::new("d", DataType::Boolean, true),
            Field::new("e", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("f", DataType::Date32, true),
            Field::new("g", DataType::Decimal128(10, 2), true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(-7), None])),
                Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN)])),
                Arc::new(StringArray::from(vec![Some("x y"), Some("")])),
                Arc::new(BooleanArray::from(vec![Some(true), Some(false)])),
                Arc::new(TimestampMicrosecondArray::from(vec![Some(1_500_000), Some(0)])),
                Arc::new(Date32Array::from(vec![Some(1), None])),
                Arc::new(
                    Decimal128Array::from(vec![Some(12345), Some(-5)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let fields = fields(&schema, |_| FieldFormat::Text);
        let types: Vec<Type> = fields.iter().map(|f| f.datatype().clone()).collect();
        assert_eq!(
            types,
            [
                Type::INT8,
                Type::FLOAT8,
                Type::TEXT,
                Type::BOOL,
                Type::TIMESTAMP,
                Type::DATE,
                Type::NUMERIC
            ]
        );
        let rows = data_rows(&batch, &Arc::new(fields)).unwrap();
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            text_of(&rows[0]),
            [
                s("-7"),
                s("1.5"),
                s("x y"),
                s("t"),
                s("1970-01-01 00:00:01.5"),
                s("1970-01-02"),
                s("123.45")
            ]
        );
        assert_eq!(
            text_of(&rows[1]),
            [None, s("NaN"), s(""), s("f"), s("1970-01-01 00:00:00"), None, s("-0.05")]
        );
    }
}
