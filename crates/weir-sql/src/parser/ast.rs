//! The syntax tree of a Weir script: statements, CQL queries with their windows, and
//! durations and instants as written; `Display` prints CQL text that parses back.

use sqlparser::ast as sql;
use weir_common::{Span, Time};
use weir_plan::R2S;

/// A parsed statement with where it sits in the script.
#[derive(Debug, Clone)]
pub struct ParsedStatement {
    pub statement: Statement,
    /// The statement's own text.
    pub text: String,
    /// Where the statement starts in the script.
    pub span: Span,
}

/// A column of `CREATE STREAM` / `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct ColumnAst {
    pub name: String,
    pub data_type: sql::DataType,
    pub span: Option<Span>,
    /// `name AS PROCTIME()` (streams only): a TIMESTAMP the engine fills with each element's
    /// arrival time on the processing clock.
    pub proctime: bool,
}

/// A duration as written: bare integers are ticks, durations with a unit are microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duration {
    Ticks(i64),
    Micros(i64),
}

/// An instant as written: an integer tick or a TIMESTAMP literal (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLit {
    Ticks(Time),
    Micros(Time),
}

/// `WATERMARK FOR col [AS col - delay]`.
#[derive(Debug, Clone)]
pub struct WatermarkAst {
    pub column: String,
    pub delay: Option<Duration>,
    pub span: Option<Span>,
}

/// One `key = value` of `CREATE STREAM ... WITH (...)`. Keys are lower-cased; the engine
/// validates them (sources, formats and policies are its business, not the parser's).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOption {
    pub key: String,
    pub value: OptionValue,
    /// Where the key is written, for messages.
    pub span: Option<Span>,
}

/// The value of a stream option, as written.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// `'text'` (or a bare word such as `csv`).
    Text(String),
    /// A number, as written.
    Number(String),
    Bool(bool),
    /// `INTERVAL '10' SECOND` or `10 SECONDS`.
    Duration(Duration),
}

impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            OptionValue::Number(n) => f.write_str(n),
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Duration(d) => write!(f, "{d}"),
        }
    }
}

/// A window clause as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowKind {
    Unbounded,
    Now,
    Range(Duration),
    RangeSlide(Duration, Duration),
    Rows(u64),
    PartitionRows(Vec<(String, Option<Span>)>, u64),
    /// `TABLE(TUMBLE(TABLE s, DESCRIPTOR(col), size))`: `[RANGE size SLIDE size]` plus
    /// `window_start` and `window_end` columns.
    Tumble {
        column: String,
        size: Duration,
    },
    /// `TABLE(HOP(TABLE s, DESCRIPTOR(col), slide, size))`: `[RANGE size SLIDE slide]` plus
    /// `window_start` and `window_end` columns.
    Hop {
        column: String,
        slide: Duration,
        size: Duration,
    },
    /// `TABLE(CUMULATE(TABLE s, DESCRIPTOR(col), step, size))`: cumulating windows
    /// [k·size, k·size + j·step), j = 1..size/step, plus `window_start` and `window_end`
    /// columns.
    Cumulate {
        column: String,
        step: Duration,
        size: Duration,
    },
    /// Session windows with `gap`, per group of equal `by` columns: the CQL form
    /// `s [SESSION gap [PARTITION BY k, ...]]` (`column` is `None`), or the table function
    /// `TABLE(SESSION(TABLE s [PARTITION BY k, ...], DESCRIPTOR(col), gap))`, which adds
    /// `window_start` and `window_end` columns.
    Session {
        column: Option<String>,
        gap: Duration,
        by: Vec<(String, Option<Span>)>,
    },
    /// `t FOR SYSTEM_TIME AS OF s.ts` on the right of a JOIN: not a window but the version of
    /// `t` valid at each element's event time (a temporal join). `time` is the column as
    /// written: an optional qualifier and the name, with its position.
    AsOf {
        qualifier: Option<String>,
        column: String,
        at: Option<Span>,
    },
    /// `s [DEDUPLICATE [BY k, ...] [CAPACITY n] [ERROR p]]`: approximate de-duplication by a
    /// rotating Bloom filter (`error` as written, checked to lie in (0, 1)).
    Deduplicate {
        by: Vec<(String, Option<Span>)>,
        capacity: Option<u64>,
        error: Option<String>,
    },
    /// `s [SAMPLE n ROWS [SEED s]]`: a uniform sample of n elements; with `over` (range,
    /// slide), `s [RANGE T SLIDE S [OFFSET O] SAMPLE n ROWS [SEED s]]`: of each window's.
    Sample {
        rows: u64,
        seed: Option<u64>,
        over: Option<(Duration, Duration)>,
    },
}

impl WindowKind {
    /// Whether the window adds `window_start` and `window_end` columns (the table functions).
    pub fn has_bounds_columns(&self) -> bool {
        matches!(
            self,
            WindowKind::Tumble { .. }
                | WindowKind::Hop { .. }
                | WindowKind::Cumulate { .. }
                | WindowKind::Session { column: Some(_), .. }
        )
    }

    /// Whether the window also applies to a relation (a table or a relation view), mapping
    /// each row to its windows: `TUMBLE` and `HOP`.
    pub fn maps_relations(&self) -> bool {
        matches!(self, WindowKind::Tumble { .. } | WindowKind::Hop { .. })
    }
}

/// `PARTITION BY a, b` (with a leading space), or nothing for no columns.
fn partition_clause(by: &[(String, Option<Span>)]) -> String {
    if by.is_empty() {
        return String::new();
    }
    let cols: Vec<&str> = by.iter().map(|(c, _)| c.as_str()).collect();
    format!(" PARTITION BY {}", cols.join(", "))
}

/// A primary key: its columns as written, and the clause's position.
#[derive(Debug, Clone, PartialEq)]
pub struct PrimaryKeyAst {
    pub columns: Vec<(String, Option<Span>)>,
    pub span: Option<Span>,
    /// A stream's `ROW KIND col`: the column saying whether an element upserts or deletes
    /// its key's row (streams only).
    pub row_kind: Option<(String, Option<Span>)>,
}

/// A window after a stream name, with the synthetic name that replaced it in the SQL.
#[derive(Debug, Clone)]
pub struct WindowAst {
    pub synthetic: String,
    pub stream: String,
    pub kind: WindowKind,
    /// From the stream name to the closing bracket.
    pub span: Option<Span>,
    /// The offset of `TUMBLE`/`HOP`/`CUMULATE`'s windows (their optional last argument) or of
    /// `[RANGE T SLIDE S OFFSET O]`: window ends move from the multiples of the slide to
    /// those plus the offset.
    pub offset: Option<Duration>,
}

/// A query with its CQL parts taken out.
#[derive(Debug, Clone)]
pub struct CqlQuery {
    /// Plain SQL: windowed streams appear as `__weir_wN`.
    pub query: Box<sql::Query>,
    /// An explicit `ISTREAM`/`DSTREAM`/`RSTREAM` on the top-level SELECT.
    pub r2s: Option<R2S>,
    pub windows: Vec<WindowAst>,
}

/// What kind of object a DROP, SHOW or CREATE names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Stream,
    Table,
    View,
    Sink,
}

/// One statement of a Weir script.
#[derive(Debug, Clone)]
pub enum Statement {
    CreateStream {
        name: String,
        columns: Vec<ColumnAst>,
        watermark: Option<WatermarkAst>,
        /// `PRIMARY KEY (...)`, or `PRIMARY KEY` after one column: a changelog stream.
        primary_key: Option<PrimaryKeyAst>,
        /// `WITH (key = value, ...)`: source, format and policies.
        options: Vec<StreamOption>,
        if_not_exists: bool,
        span: Option<Span>,
    },
    CreateTable {
        name: String,
        columns: Vec<ColumnAst>,
        /// `PRIMARY KEY (...)`, or `PRIMARY KEY` after one column: an INSERT of an existing
        /// key replaces its row.
        primary_key: Option<PrimaryKeyAst>,
        /// `WITH (source = 'file', path = '...', ...)`: a file the table is loaded from.
        options: Vec<StreamOption>,
        if_not_exists: bool,
        span: Option<Span>,
    },
    /// `COPY t FROM 'path' [WITH] [(options)]`: appends a file's rows to table or stream `t`.
    /// Options are PostgreSQL's (`FORMAT csv, HEADER, DELIMITER ';'`) or Weir's
    /// (`format = 'json'`), as for a stream's source.
    Copy {
        target: String,
        path: String,
        options: Vec<StreamOption>,
        span: Option<Span>,
    },
    CreateView {
        name: String,
        query: Box<CqlQuery>,
        sql: String,
        or_replace: bool,
        span: Option<Span>,
    },
    /// `CREATE SINK name WITH (path = '...', format = 'csv') AS query`: a continuous query
    /// whose output is appended to a file.
    CreateSink {
        name: String,
        options: Vec<StreamOption>,
        query: Box<CqlQuery>,
        sql: String,
        span: Option<Span>,
    },
    Drop {
        kind: ObjectKind,
        name: String,
        if_exists: bool,
        span: Option<Span>,
    },
    Show(ObjectKind),
    /// `SHOW STREAM STATS`: per stream, accepted, late and bad rows, watermark, buffering.
    ShowStreamStats,
    /// `SHOW QUERIES`: the continuous queries running, with what they feed.
    ShowQueries,
    /// `SHOW MEMORY`: the state each continuous query holds, and the memory limit.
    ShowMemory,
    /// `SHOW CREATE name`: the statement that created a stream, table, view or sink.
    ShowCreate {
        name: String,
        span: Option<Span>,
    },
    /// `CHECKPOINT`: write a checkpoint of the engine now.
    Checkpoint,
    /// `SET name = value` (or `TO value`); `value` is `None` for `SET name = DEFAULT` and
    /// `RESET name`. The engine knows the settings and checks the name and the value.
    Set {
        name: String,
        value: Option<String>,
        /// Where the name is written.
        span: Option<Span>,
        /// Where the value is written.
        value_span: Option<Span>,
    },
    /// `SHOW name` of a setting.
    ShowSetting {
        name: String,
        span: Option<Span>,
    },
    /// `CREATE INDEX ... ON table (...)`: accepted and ignored (operators index their own
    /// state).
    CreateIndex {
        table: String,
        span: Option<Span>,
    },
    Describe {
        name: String,
        span: Option<Span>,
    },
    /// INSERT into a stream or table; `source` is a plain query (usually VALUES).
    Insert {
        target: String,
        columns: Vec<String>,
        source: Box<sql::Query>,
        at: Option<TimeLit>,
        span: Option<Span>,
    },
    /// DELETE from a table.
    Delete {
        target: String,
        selection: Option<Box<sql::Expr>>,
        at: Option<TimeLit>,
        span: Option<Span>,
    },
    /// Heartbeat: the stream's watermark moves to the instant after τ.
    Advance {
        stream: String,
        to: TimeLit,
        span: Option<Span>,
    },
    /// End of input for a stream (watermark +∞).
    Close {
        stream: Option<String>,
        span: Option<Span>,
    },
    Query(Box<CqlQuery>),
    Explain(Box<CqlQuery>),
}

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Duration::Ticks(t) => write!(f, "{t}"),
            Duration::Micros(us) => write!(f, "INTERVAL '{us}' MICROSECOND"),
        }
    }
}

impl std::fmt::Display for WindowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowKind::Unbounded => write!(f, "[UNBOUNDED]"),
            WindowKind::Now => write!(f, "[NOW]"),
            WindowKind::Range(d) => write!(f, "[RANGE {d}]"),
            WindowKind::RangeSlide(r, s) => write!(f, "[RANGE {r} SLIDE {s}]"),
            WindowKind::Rows(n) => write!(f, "[ROWS {n}]"),
            WindowKind::PartitionRows(cols, n) => {
                let cols: Vec<&str> = cols.iter().map(|(c, _)| c.as_str()).collect();
                write!(f, "[PARTITION BY {} ROWS {n}]", cols.join(", "))
            }
            WindowKind::Tumble { column, size } => {
                write!(f, "TUMBLE(DESCRIPTOR({column}), {size})")
            }
            WindowKind::Hop { column, slide, size } => {
                write!(f, "HOP(DESCRIPTOR({column}), {slide}, {size})")
            }
            WindowKind::Cumulate { column, step, size } => {
                write!(f, "CUMULATE(DESCRIPTOR({column}), {step}, {size})")
            }
            WindowKind::Session { column: None, gap, by } => {
                write!(f, "[SESSION {gap}{}]", partition_clause(by))
            }
            WindowKind::Session { column: Some(column), gap, by } => {
                let by = partition_clause(by);
                let by = if by.is_empty() { by } else { format!("{}, ", by.trim_start()) };
                write!(f, "SESSION({by}DESCRIPTOR({column}), {gap})")
            }
            WindowKind::AsOf { qualifier: Some(q), column, .. } => {
                write!(f, "FOR SYSTEM_TIME AS OF {q}.{column}")
            }
            WindowKind::AsOf { qualifier: None, column, .. } => {
                write!(f, "FOR SYSTEM_TIME AS OF {column}")
            }
            WindowKind::Deduplicate { by, capacity, error } => {
                f.write_str("[DEDUPLICATE")?;
                if !by.is_empty() {
                    let cols: Vec<&str> = by.iter().map(|(c, _)| c.as_str()).collect();
                    write!(f, " BY {}", cols.join(", "))?;
                }
                if let Some(n) = capacity {
                    write!(f, " CAPACITY {n}")?;
                }
                if let Some(p) = error {
                    write!(f, " ERROR {p}")?;
                }
                f.write_str("]")
            }
            WindowKind::Sample { rows, seed, over } => {
                f.write_str("[")?;
                if let Some((r, s)) = over {
                    write!(f, "RANGE {r} SLIDE {s} ")?;
                }
                write!(f, "SAMPLE {rows} ROWS")?;
                if let Some(s) = seed {
                    write!(f, " SEED {s}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl std::fmt::Display for CqlQuery {
    /// CQL text that parses back to this query: windows after their stream names, the
    /// relation-to-stream operator after the top-level SELECT.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = self.query.to_string();
        if let Some(op) = self.r2s {
            if let Some(rest) = text.strip_prefix("SELECT ") {
                text = format!("SELECT {op} {rest}");
            } else if let Some(with) = &self.query.with {
                // WITH ... SELECT: the body follows the WITH clause's text.
                let prefix = format!("{with} ");
                if let Some(rest) =
                    text.strip_prefix(&prefix).and_then(|r| r.strip_prefix("SELECT "))
                {
                    text = format!("{prefix}SELECT {op} {rest}");
                }
            }
        }
        // Replace the longest names first so __weir_w1 never matches inside __weir_w10.
        let mut windows: Vec<&WindowAst> = self.windows.iter().collect();
        windows.sort_by_key(|w| std::cmp::Reverse(w.synthetic.len()));
        for w in windows {
            let off = w.offset.map(|o| format!(", {o}")).unwrap_or_default();
            let replacement = match &w.kind {
                WindowKind::Tumble { column, size } => {
                    format!("TABLE(TUMBLE(TABLE {}, DESCRIPTOR({column}), {size}{off}))", w.stream)
                }
                WindowKind::Hop { column, slide, size } => format!(
                    "TABLE(HOP(TABLE {}, DESCRIPTOR({column}), {slide}, {size}{off}))",
                    w.stream
                ),
                WindowKind::Cumulate { column, step, size } => format!(
                    "TABLE(CUMULATE(TABLE {}, DESCRIPTOR({column}), {step}, {size}{off}))",
                    w.stream
                ),
                WindowKind::RangeSlide(r, s) if w.offset.is_some() => {
                    let o = w.offset.map(|o| o.to_string()).unwrap_or_default();
                    format!("{} [RANGE {r} SLIDE {s} OFFSET {o}]", w.stream)
                }
                WindowKind::Sample { rows, seed, over: Some((r, s)) } if w.offset.is_some() => {
                    let o = w.offset.map(|o| o.to_string()).unwrap_or_default();
                    let seed = seed.map(|s| format!(" SEED {s}")).unwrap_or_default();
                    format!(
                        "{} [RANGE {r} SLIDE {s} OFFSET {o} SAMPLE {rows} ROWS{seed}]",
                        w.stream
                    )
                }
                WindowKind::Session { column: Some(column), gap, by } => format!(
                    "TABLE(SESSION(TABLE {}{}, DESCRIPTOR({column}), {gap}))",
                    w.stream,
                    partition_clause(by)
                ),
                kind => format!("{} {kind}", w.stream),
            };
            text = text.replace(&w.synthetic, &replacement);
        }
        f.write_str(&text)
    }
}
