//! The two companion streams of every stream `s`, which queries read like any other:
//! - `s$late`: the late elements (timestamp below `s`'s watermark when they arrived), with all
//!   of `s`'s columns plus `missed_watermark`, the watermark they missed. Its event time is
//!   `missed_watermark`, so late elements form an in-order stream of their own.
//! - `s$errors`: rows that could not be read (`source`, `line`, `byte_offset`, `field`,
//!   `reason`, `raw`), stamped `detected_at`: the larger of `s`'s watermark and its largest
//!   timestamp after the records that precede the bad one in arrival order.
//!
//! Both have the watermark of `s`: they never hold a query back more than `s` itself does.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use weir_common::{Result, Time, TimeDomain, Watermark, WeirError};
use weir_sql::StreamDef;

use crate::source::BadRow;

/// Suffix of the late stream's name.
pub const LATE_SUFFIX: &str = "$late";
/// Suffix of the error stream's name.
pub const ERRORS_SUFFIX: &str = "$errors";

/// Whether `name` is `stream` itself or one of its companions.
pub fn is_or_companion_of(name: &str, stream: &str) -> bool {
    name == stream || companion_base(name) == Some(stream)
}

/// The stream a companion name (`s$late`, `s$errors`) belongs to.
pub fn companion_base(name: &str) -> Option<&str> {
    name.strip_suffix(LATE_SUFFIX).or_else(|| name.strip_suffix(ERRORS_SUFFIX))
}

fn time_type(domain: TimeDomain) -> DataType {
    match domain {
        TimeDomain::Micros => DataType::Timestamp(TimeUnit::Microsecond, None),
        TimeDomain::Ticks => DataType::Int64,
    }
}

/// `s$late`: `s`'s columns and `missed_watermark`, its event time.
pub(crate) fn late_def(def: &StreamDef) -> Result<StreamDef> {
    if def.schema.index_of("missed_watermark").is_ok() {
        return Err(WeirError::plan(format!(
            "stream '{}' may not have a column named missed_watermark: its late stream {}{} \
             adds one",
            def.name, def.name, LATE_SUFFIX
        )));
    }
    let mut fields: Vec<Field> = def.schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("missed_watermark", time_type(def.domain), true));
    let time_column = fields.len() - 1;
    Ok(StreamDef {
        name: format!("{}{LATE_SUFFIX}", def.name),
        schema: Arc::new(Schema::new(fields)),
        time_column,
        domain: def.domain,
        watermark_delay: 0,
        primary_key: vec![],
        row_kind: None,
        proctime: None,
    })
}

/// `s$errors`: one row per unreadable record.
pub(crate) fn errors_def(def: &StreamDef) -> StreamDef {
    let fields = vec![
        Field::new("source", DataType::Utf8, true),
        Field::new("line", DataType::Int64, true),
        Field::new("byte_offset", DataType::Int64, true),
        Field::new("field", DataType::Utf8, true),
        Field::new("reason", DataType::Utf8, true),
        Field::new("raw", DataType::Utf8, true),
        Field::new("detected_at", time_type(def.domain), true),
    ];
    StreamDef {
        name: format!("{}{ERRORS_SUFFIX}", def.name),
        schema: Arc::new(Schema::new(fields)),
        time_column: 6,
        domain: def.domain,
        watermark_delay: 0,
        primary_key: vec![],
        row_kind: None,
        proctime: None,
    }
}

/// A watermark as an instant that can stamp an element (clamped to the tick range).
pub(crate) fn clamp(w: Watermark) -> Time {
    w.clamp(Time::MIN as Watermark, Time::MAX as Watermark) as Time
}

fn time_array(domain: TimeDomain, values: Vec<Time>) -> ArrayRef {
    match domain {
        TimeDomain::Micros => Arc::new(TimeStampArray::from(values)),
        TimeDomain::Ticks => Arc::new(Int64Array::from(values)),
    }
}

type TimeStampArray = TimestampMicrosecondArray;

/// Late rows as elements of `s$late`, each with the watermark it missed.
pub(crate) fn late_batch(
    late: &StreamDef,
    rows: &RecordBatch,
    missed: &[Time],
) -> Result<RecordBatch> {
    let mut cols = rows.columns().to_vec();
    cols.push(time_array(late.domain, missed.to_vec()));
    Ok(RecordBatch::try_new(late.schema.clone(), cols)?)
}

/// Bad rows as elements of `s$errors`, each detected at its instant in `at`.
pub(crate) fn errors_batch(
    errors: &StreamDef,
    origin: &str,
    bad: &[BadRow],
    at: &[Time],
) -> Result<RecordBatch> {
    let n = bad.len();
    let line: Int64Array = bad.iter().map(|b| (b.line > 0).then_some(b.line as i64)).collect();
    let offset: Int64Array =
        bad.iter().map(|b| b.offset.filter(|_| b.line > 0).map(|o| o as i64)).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![origin; n])),
        Arc::new(line),
        Arc::new(offset),
        Arc::new(StringArray::from_iter(
            bad.iter().map(|b| (!b.field.is_empty()).then_some(b.field.as_str())),
        )),
        Arc::new(StringArray::from_iter_values(bad.iter().map(|b| b.reason.as_str()))),
        Arc::new(StringArray::from_iter_values(bad.iter().map(|b| b.raw.as_str()))),
        time_array(errors.domain, at.to_vec()),
    ];
    Ok(RecordBatch::try_new(errors.schema.clone(), cols)?)
}
