//! How a stream takes in elements: its policies for late and bad rows, idleness, and the two
//! companion streams that account for what it did not accept.
//!
//! For every stream `s` the engine keeps two streams that queries can read like any other:
//! - `s$late`: the late elements (timestamp below `s`'s watermark when they arrived), with all
//!   of `s`'s columns plus `missed_watermark`, the watermark they missed. Its event time is
//!   `missed_watermark`, so late elements form an in-order stream of their own.
//! - `s$errors`: rows that could not be read (`source`, `line`, `byte_offset`, `field`,
//!   `reason`, `raw`), stamped `detected_at`: the larger of `s`'s watermark and its largest
//!   timestamp when the row was read.
//!
//! Both have the watermark of `s`: they never hold a query back more than `s` itself does.

use std::sync::Arc;
use std::time::Duration as WallDuration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use weir_common::{Result, Time, TimeDomain, Watermark, WeirError};
use weir_sql::parser::{Duration as SqlDuration, OptionValue, StreamOption};
use weir_sql::StreamDef;

use crate::source::{BadRow, Format, Input, SourceSpec};

/// What to do with an element whose timestamp is below its stream's watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatePolicy {
    /// Count it and append it to `s$late` (the default).
    #[default]
    Route,
    /// Refuse it with an error (a push is then refused whole; a source stops there).
    Error,
}

/// What to do with a row that cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadRowPolicy {
    /// Stop: the push fails, or the source stops and the queries reading it fail, with a
    /// message naming the source, line, field and reason (the default).
    #[default]
    Fail,
    /// Count it, append it to `s$errors` and go on.
    Skip,
}

/// A stream's declared input policies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamPolicy {
    pub late: LatePolicy,
    pub bad_rows: BadRowPolicy,
    /// After this long without elements or heartbeats (processing time), the stream stops
    /// holding back the queries that read it together with other streams.
    pub idle_timeout: Option<WallDuration>,
}

/// Per-stream counters, for `SHOW STREAM STATS` and [`crate::Engine::stream_stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStats {
    pub stream: String,
    pub accepted: u64,
    pub late: u64,
    pub bad: u64,
    /// Every instant below it is complete.
    pub watermark: Watermark,
    /// Accepted elements not yet released to every query that reads the stream.
    pub buffered: u64,
    pub idle: bool,
    /// The source, with how far it has read (`None`: elements are pushed).
    pub source: Option<String>,
}

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

/// Bad rows as elements of `s$errors`, detected at `at`.
pub(crate) fn errors_batch(
    errors: &StreamDef,
    origin: &str,
    bad: &[BadRow],
    at: Time,
) -> Result<RecordBatch> {
    let n = bad.len();
    let line: Int64Array = bad.iter().map(|b| (b.line > 0).then_some(b.line as i64)).collect();
    let offset: Int64Array = bad.iter().map(|b| (b.line > 0).then_some(b.offset as i64)).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![origin; n])),
        Arc::new(line),
        Arc::new(offset),
        Arc::new(StringArray::from_iter(
            bad.iter().map(|b| (!b.field.is_empty()).then_some(b.field.as_str())),
        )),
        Arc::new(StringArray::from_iter_values(bad.iter().map(|b| b.reason.as_str()))),
        Arc::new(StringArray::from_iter_values(bad.iter().map(|b| b.raw.as_str()))),
        time_array(errors.domain, vec![at; n]),
    ];
    Ok(RecordBatch::try_new(errors.schema.clone(), cols)?)
}

/// Where a row came from, for messages: `row 3` (a push) or `'data/b.csv' line 7`.
pub(crate) fn locate(origin: &str, bad: &BadRow) -> String {
    if origin == "push" || origin == "INSERT" {
        format!("row {}", bad.line)
    } else {
        format!("source '{origin}' line {}", bad.line)
    }
}

/// The message of a bad row under the `fail` policy.
pub(crate) fn bad_row_message(stream: &str, origin: &str, bad: &BadRow) -> String {
    let field =
        if bad.field.is_empty() { String::new() } else { format!(", field '{}'", bad.field) };
    format!("stream '{stream}' {}{field}: {}", locate(origin, bad), bad.reason)
}

/// The stream options of `CREATE STREAM ... WITH (...)`: its policies and optional source.
pub(crate) fn parse_options(
    def: &StreamDef,
    options: &[StreamOption],
) -> Result<(StreamPolicy, Option<SourceSpec>)> {
    const KNOWN: &str = "source, path, format, header, delimiter, follow, epoch, late, bad_rows, \
                         idle_timeout";
    let mut policy = StreamPolicy::default();
    let mut source: Option<String> = None;
    let mut path = None;
    let mut format = None;
    let mut header = None;
    let mut delimiter = None;
    let mut follow = None;
    let mut epoch = None;
    for o in options {
        let bad = |what: &str| {
            WeirError::plan_at(format!("option {} must be {what}, not {}", o.key, o.value), o.span)
        };
        let text = || match &o.value {
            OptionValue::Text(t) => Ok(t.to_ascii_lowercase()),
            _ => Err(bad("text")),
        };
        let flag = || match &o.value {
            OptionValue::Bool(b) => Ok(*b),
            _ => Err(bad("TRUE or FALSE")),
        };
        match o.key.as_str() {
            "source" => source = Some(text()?),
            "path" => match &o.value {
                OptionValue::Text(t) => path = Some(t.clone()),
                _ => return Err(bad("a quoted path")),
            },
            "format" => format = Some(text()?),
            "header" => header = Some(flag()?),
            "follow" => follow = Some(flag()?),
            "delimiter" => match &o.value {
                OptionValue::Text(t) if t.len() == 1 => delimiter = Some(t.as_bytes()[0]),
                OptionValue::Text(t) if t == "\\t" => delimiter = Some(b'\t'),
                _ => return Err(bad("one character, e.g. ';' or '\\t'")),
            },
            "epoch" => match text()?.as_str() {
                u @ ("s" | "ms" | "us") => epoch = Some(u.to_string()),
                _ => return Err(bad("'s', 'ms' or 'us'")),
            },
            "late" => {
                policy.late = match text()?.as_str() {
                    "route" => LatePolicy::Route,
                    "error" => LatePolicy::Error,
                    _ => return Err(bad("'route' or 'error'")),
                }
            }
            "bad_rows" => {
                policy.bad_rows = match text()?.as_str() {
                    "fail" => BadRowPolicy::Fail,
                    "skip" => BadRowPolicy::Skip,
                    _ => return Err(bad("'fail' or 'skip'")),
                }
            }
            "idle_timeout" => match &o.value {
                OptionValue::Duration(SqlDuration::Micros(us)) if *us > 0 => {
                    policy.idle_timeout = Some(WallDuration::from_micros(*us as u64))
                }
                _ => return Err(bad("a positive duration, e.g. INTERVAL '10' SECOND")),
            },
            other => {
                return Err(WeirError::plan_at(
                    format!("unknown stream option '{other}' (known: {KNOWN})"),
                    o.span,
                ))
            }
        }
    }
    let span_of = |key: &str| options.iter().find(|o| o.key == key).and_then(|o| o.span);
    let input = match source.as_deref() {
        None => {
            for key in ["path", "format", "header", "delimiter", "follow", "epoch"] {
                if options.iter().any(|o| o.key == key) {
                    return Err(WeirError::plan_at(
                        format!("option {key} needs a source, e.g. source = 'file'"),
                        span_of(key),
                    ));
                }
            }
            return Ok((policy, None));
        }
        Some("file") => {
            let Some(path) = path.clone() else {
                return Err(WeirError::plan_at(
                    "source = 'file' needs path = '...'",
                    span_of("source"),
                ));
            };
            Input::Files { path, follow: follow.unwrap_or(false) }
        }
        Some("stdin") => {
            if path.is_some() || follow.is_some() {
                let key = if path.is_some() { "path" } else { "follow" };
                return Err(WeirError::plan_at(
                    format!("option {key} applies to source = 'file', not 'stdin'"),
                    span_of(key),
                ));
            }
            Input::Stdin
        }
        Some(other) => {
            return Err(WeirError::plan_at(
                format!("source must be 'file' or 'stdin', not '{other}'"),
                span_of("source"),
            ))
        }
    };
    let by_extension = path.as_deref().is_some_and(crate::source::is_json_path);
    let format = match format.as_deref() {
        Some("csv") => {
            Format::Csv { header: header.unwrap_or(true), delimiter: delimiter.unwrap_or(b',') }
        }
        Some("json" | "jsonl" | "ndjson") => Format::JsonLines,
        None if by_extension => Format::JsonLines,
        None => {
            Format::Csv { header: header.unwrap_or(true), delimiter: delimiter.unwrap_or(b',') }
        }
        Some(other) => {
            return Err(WeirError::plan_at(
                format!("format must be 'csv' or 'json', not '{other}'"),
                span_of("format"),
            ))
        }
    };
    if format == Format::JsonLines {
        for key in ["header", "delimiter"] {
            if options.iter().any(|o| o.key == key) {
                return Err(WeirError::plan_at(
                    format!("option {key} applies to CSV, not JSON lines"),
                    span_of(key),
                ));
            }
        }
    }
    if epoch.is_some() && def.domain == TimeDomain::Ticks {
        return Err(WeirError::plan_at(
            "option epoch applies to TIMESTAMP event times; this stream counts integer ticks",
            span_of("epoch"),
        ));
    }
    let spec = SourceSpec { input, format, epoch_unit: epoch.unwrap_or_else(|| "s".into()) };
    Ok((policy, Some(spec)))
}
