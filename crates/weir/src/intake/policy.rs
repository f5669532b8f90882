//! A stream's declared input policies (late elements, bad rows, idleness), its counters, and
//! the `WITH (...)` options of `CREATE STREAM` that declare them and its source.

use std::time::Duration as WallDuration;

use weir_common::{Result, TimeDomain, Watermark, WeirError};
use weir_sql::parser::{Duration as SqlDuration, OptionValue, StreamOption};
use weir_sql::StreamDef;

use crate::source::{Format, Input, SourceSpec};

/// What to do with an element whose timestamp is below its stream's watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatePolicy {
    /// Count it and append it to `s$late` (the default).
    #[default]
    Route,
    /// Refuse it with an error (a push is then refused whole; a source stops there).
    Error,
}

/// What to do with a row that cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRowPolicy {
    /// Stop: the push fails, or the source stops and the queries reading it fail, with a
    /// message naming the source, line, field and reason (the default).
    #[default]
    Fail,
    /// Count it, append it to `s$errors` and go on.
    Skip,
}

/// A stream's declared input policies.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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

/// The stream options of `CREATE STREAM ... WITH (...)`: its policies and optional source.
pub(crate) fn parse_options(
    def: &StreamDef,
    options: &[StreamOption],
) -> Result<(StreamPolicy, Option<SourceSpec>)> {
    parse_with(Some(def.domain), options)
}

/// The options of `CREATE TABLE ... WITH (...)` and `COPY t FROM 'path' WITH (...)`: the file
/// a table is loaded from, read once. The file options mean what they mean for a stream's
/// source; a stream's policies and `follow` do not apply to a table.
pub(crate) fn parse_table_options(
    options: &[StreamOption],
    needs_source: bool,
) -> Result<Option<SourceSpec>> {
    const KNOWN: &str = "source, path, format, header, delimiter, epoch";
    for o in options {
        match o.key.as_str() {
            "source" | "path" | "format" | "header" | "delimiter" | "epoch" => {}
            "follow" | "late" | "bad_rows" | "idle_timeout" => {
                return Err(WeirError::plan_at(
                    format!(
                        "option {} applies to streams: a table is loaded from its file once, \
                         and a row that cannot be read is an error (known: {KNOWN})",
                        o.key
                    ),
                    o.span,
                ))
            }
            other => {
                return Err(WeirError::plan_at(
                    format!("unknown table option '{other}' (known: {KNOWN})"),
                    o.span,
                ))
            }
        }
    }
    let (_, spec) = parse_with(None, options)?;
    if let Some(SourceSpec { input: Input::Stdin, .. }) = spec {
        let span = options.iter().find(|o| o.key == "source").and_then(|o| o.span);
        return Err(WeirError::plan_at(
            "a table is loaded from a file: source = 'file', path = '...'",
            span,
        ));
    }
    if spec.is_none() && needs_source {
        return Err(WeirError::plan("COPY ... FROM 'path' needs a path"));
    }
    Ok(spec)
}

/// Options of a stream (`domain`: its event-time domain) or of a table (None).
fn parse_with(
    domain: Option<TimeDomain>,
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
    let csv =
        || Format::Csv { header: header.unwrap_or(true), delimiter: delimiter.unwrap_or(b',') };
    let format = match format.as_deref() {
        Some("csv") => csv(),
        Some("json" | "jsonl" | "ndjson") => Format::JsonLines,
        Some("parquet") => Format::Parquet,
        None => match path.as_deref().map(crate::source::format_by_extension).transpose() {
            Ok(known) => known.flatten().unwrap_or_else(csv),
            Err(e) => return Err(WeirError::plan_at(e, span_of("path"))),
        },
        Some(other) => {
            return Err(WeirError::plan_at(
                format!("format must be 'csv', 'json' or 'parquet', not '{other}'"),
                span_of("format"),
            ))
        }
    };
    if format
        != (Format::Csv { header: header.unwrap_or(true), delimiter: delimiter.unwrap_or(b',') })
    {
        let named = if format == Format::Parquet { "Parquet" } else { "JSON lines" };
        for key in ["header", "delimiter"] {
            if options.iter().any(|o| o.key == key) {
                return Err(WeirError::plan_at(
                    format!("option {key} applies to CSV, not {named}"),
                    span_of(key),
                ));
            }
        }
    }
    if format == Format::Parquet {
        if input == Input::Stdin {
            return Err(WeirError::plan_at(
                "format 'parquet' reads files: standard input cannot be read as Parquet (a \
                 Parquet file's index is at its end)",
                span_of("format").or(span_of("source")),
            ));
        }
        if follow == Some(true) {
            return Err(WeirError::plan_at(
                "option follow applies to CSV and JSON lines: a Parquet file can be read only \
                 once it is complete",
                span_of("follow"),
            ));
        }
    }
    if epoch.is_some() && domain == Some(TimeDomain::Ticks) {
        return Err(WeirError::plan_at(
            "option epoch applies to TIMESTAMP event times; this stream counts integer ticks",
            span_of("epoch"),
        ));
    }
    let spec = SourceSpec { input, format, epoch_unit: epoch.unwrap_or_else(|| "s".into()) };
    Ok((policy, Some(spec)))
}
