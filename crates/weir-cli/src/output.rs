//! Rendering results as text: one-shot rows, EXPLAIN, and the changes of continuous queries,
//! in the three output formats (`table`, `csv`, `jsonl`).
//!
//! Continuous queries are numbered from 1 in the order they start (`N` below); every change
//! carries its instant (`_time`: the tick, or an ISO-8601 instant such as
//! `2024-01-01T12:00:05` for TIMESTAMP streams) and, for relation outputs, its diff (`_diff`:
//! `+1` inserted, `-1` retracted, or a larger weight). A stream element with multiplicity n is
//! printed as n identical changes, each with diff 1, in every format.
//!
//! `table` (the default, for people):
//! - in a script (`weir run`), a query first prints `[N] ` and its SQL on one line (shortened
//!   past 100 characters), so a reader knows which query `[N]` is;
//! - a query prints `[N] _time | _diff | col...` once, when it starts (no `_diff` for stream
//!   outputs), then one line per change `[N] 3     | +1    | a | 2`; cells are padded to the
//!   width of their column's type (TIMESTAMP instants to 26 characters, text to 10, BIGINT to
//!   8, ...: see `type_width`) or their header if wider; a value wider than that widens its
//!   column from its line on (the header is not printed again). Values are as in
//!   `weir::format` (NULL as `NULL`), with line breaks and tabs in strings written `\n`, `\r`,
//!   `\t`;
//! - one-shot rows are a boxed table followed by `(1 row)` / `(N rows)`;
//! - EXPLAIN prints its text; statement tags (`INSERT 3`) print only in the REPL.
//!
//! `csv`:
//! - a query prints its header `_query,_time,[_diff,]col...` when it starts, then one record
//!   per change `N,time,[diff,]values...`. Diffs are plain integers; NULL is an empty field;
//!   quoting follows RFC 4180 (the `csv` crate). In a script, standard output holds one
//!   continuous query's CSV and nothing after it (a second is refused, see `script.rs`); with
//!   `--output-dir` each query's changes go to `DIR/query-N.csv` instead, without `_query`
//!   (the columns of a CSV sink), listed in `DIR/queries.csv`. In the REPL queries may
//!   interleave, told apart by `_query`;
//! - one-shot rows are a header and records; EXPLAIN prints its text; tags print nothing.
//!
//! `jsonl`:
//! - each change is one object `{"_query":N,"_time":...,"_diff":d,"col":value,...}` with typed
//!   values (numbers, strings, booleans, null), `_time` a number for tick streams and an
//!   ISO-8601 string for TIMESTAMP streams, `_diff` always present (1 for stream elements);
//!   with `--output-dir`, in `DIR/query-N.jsonl`, without `_query`;
//! - one-shot rows are one object per row; EXPLAIN is `{"explain":"..."}`; tags print nothing.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow::array::{
    ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir::{ChangeBatch, PlanKind, Subscription, TimeDomain};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Jsonl,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "table" => Ok(Format::Table),
            "csv" => Ok(Format::Csv),
            "jsonl" | "json" | "ndjson" => Ok(Format::Jsonl),
            _ => Err(format!("unknown format '{s}' (expected table, csv or jsonl)")),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Table => "table",
            Format::Csv => "csv",
            Format::Jsonl => "jsonl",
        })
    }
}

/// The printing state of one continuous query.
#[derive(Debug)]
pub struct QueryOutput {
    /// 1-based, in start order.
    pub number: usize,
    columns: Vec<String>,
    kind: PlanKind,
    domain: TimeDomain,
    /// Table format: the width of each cell (`_time`, `_diff`, columns), the widest so far.
    widths: Vec<usize>,
    /// CSV and JSON lines: whether each change starts with the query's number (`_query`).
    query_column: bool,
}

/// The width a table column of type `t` is given before any value is seen (see
/// [`QueryOutput::reserve_value_widths`]).
fn type_width(t: &DataType) -> usize {
    match t {
        DataType::Boolean => 5,
        DataType::Int8 | DataType::UInt8 => 4,
        DataType::Int16 | DataType::UInt16 => 6,
        t if t.is_integer() => 8,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => 10,
        // Digits, sign and decimal point.
        DataType::Decimal128(p, _) | DataType::Decimal256(p, _) => usize::from(*p) + 2,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => 10,
        DataType::Date32 | DataType::Date64 => 10,
        // `2024-01-01T12:00:05`, then the fraction its unit can have.
        DataType::Timestamp(unit, tz) => {
            let fraction = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 4,
                TimeUnit::Microsecond => 7,
                TimeUnit::Nanosecond => 10,
            };
            // An offset such as `+05:30`.
            19 + fraction + if tz.is_some() { 6 } else { 0 }
        }
        DataType::Time32(_) | DataType::Time64(_) => 15,
        _ => 0,
    }
}

/// Width of `2024-01-01T12:00:04.999999`, the widest instant of a TIMESTAMP stream (a
/// microsecond before a window boundary, where windows close): the `_time` cells of TIMESTAMP
/// queries are this wide from the start.
const TIMESTAMP_WIDTH: usize = 26;

impl QueryOutput {
    /// The printing state of `sub`'s output, its columns as wide as their types need.
    pub fn new(number: usize, sub: &Subscription) -> Self {
        let mut q = Self::with_shape(number, sub.column_names(), sub.kind, sub.domain);
        q.reserve_value_widths(&sub.schema);
        q
    }

    pub fn with_shape(
        number: usize,
        columns: Vec<String>,
        kind: PlanKind,
        domain: TimeDomain,
    ) -> Self {
        let mut q =
            QueryOutput { number, columns, kind, domain, widths: vec![], query_column: true };
        q.widths = q.header_cells().iter().map(|c| text_width(c)).collect();
        if let (TimeDomain::Micros, Some(w)) = (domain, q.widths.first_mut()) {
            *w = (*w).max(TIMESTAMP_WIDTH);
        }
        q
    }

    /// Leaves out the `_query` column of CSV and the `_query` field of JSON lines: the output
    /// goes to a file of the query's own (`--output-dir`).
    pub fn without_query_column(mut self) -> Self {
        self.query_column = false;
        self
    }

    /// Pads each column to the width its type needs: the widest value of types whose values
    /// have a bounded width (booleans, small integers, dates, timestamps, decimals), a typical
    /// width for the others (8 for larger integers, 10 for floating point and text). The
    /// header is printed once, so a value wider than its column widens it from its line on.
    fn reserve_value_widths(&mut self, schema: &Schema) {
        let first = if self.is_relation() { 2 } else { 1 };
        for (i, f) in schema.fields().iter().enumerate() {
            if let Some(w) = self.widths.get_mut(first + i) {
                *w = (*w).max(type_width(f.data_type()));
            }
        }
    }

    fn is_relation(&self) -> bool {
        self.kind == PlanKind::Relation
    }

    /// `_time`, `_diff` (relations only) and the query's columns.
    fn header_cells(&self) -> Vec<String> {
        let mut cells = vec!["_time".to_string()];
        if self.is_relation() {
            cells.push("_diff".to_string());
        }
        cells.extend(self.columns.iter().cloned());
        cells
    }

    /// What is printed when the query starts, or when the format changes (may be empty).
    pub fn header(&mut self, format: Format) -> Result<String> {
        match format {
            Format::Table => {
                let cells = vec![self.header_cells()];
                self.fit(&cells);
                Ok(self.render(&cells))
            }
            Format::Csv => {
                let mut cells = Vec::new();
                if self.query_column {
                    cells.push("_query".to_string());
                }
                cells.extend(self.header_cells());
                csv_records(std::iter::once(cells))
            }
            Format::Jsonl => Ok(String::new()),
        }
    }

    /// The text for batches of the query's output.
    pub fn changes(
        &mut self,
        format: Format,
        sub: &Subscription,
        batches: &[ChangeBatch],
    ) -> Result<String> {
        let mut out = String::new();
        match format {
            Format::Table => {
                let mut lines = Vec::new();
                for batch in batches {
                    for c in sub.changes(batch)? {
                        let mut cells = vec![c.time_text];
                        if self.is_relation() {
                            cells.push(format!("{:+}", c.diff));
                        }
                        cells.extend(c.values.into_iter().map(table_cell));
                        lines.push(cells);
                    }
                }
                out.push_str(&self.table_lines(&lines));
            }
            Format::Csv => {
                for batch in batches {
                    let b = self.annotated(batch, self.is_relation())?;
                    out.push_str(&csv_records(format_rows(&b, "")?)?);
                }
            }
            Format::Jsonl => {
                for batch in batches {
                    out.push_str(&json_lines(&self.annotated(batch, true)?)?);
                }
            }
        }
        Ok(out)
    }

    /// Widens the columns to fit `lines`.
    fn fit(&mut self, lines: &[Vec<String>]) {
        for cells in lines {
            for (i, cell) in cells.iter().enumerate() {
                let w = text_width(cell);
                match self.widths.get_mut(i) {
                    Some(width) => *width = (*width).max(w),
                    None => self.widths.push(w),
                }
            }
        }
    }

    /// Table-format lines `[N] a | b | c`, every cell but the last padded to its column's
    /// width.
    fn render(&self, lines: &[Vec<String>]) -> String {
        let mut out = String::new();
        for cells in lines {
            let _ = write!(out, "[{}] ", self.number);
            for (i, cell) in cells.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                out.push_str(cell);
                if i + 1 < cells.len() {
                    let width = self.widths.get(i).copied().unwrap_or(0);
                    out.extend(std::iter::repeat_n(' ', width.saturating_sub(text_width(cell))));
                }
            }
            out.push('\n');
        }
        out
    }

    /// Table-format lines aligned with what was printed before. The header is not printed
    /// again: a value wider than its column widens the column from its line on.
    fn table_lines(&mut self, lines: &[Vec<String>]) -> String {
        let mut out = String::new();
        for line in lines {
            self.fit(std::slice::from_ref(line));
            out.push_str(&self.render(std::slice::from_ref(line)));
        }
        out
    }

    /// The batch with `_query` (unless left out), `_time` and (if `with_diff`) `_diff`
    /// columns in front, stream
    /// elements repeated by their multiplicity.
    fn annotated(&self, batch: &ChangeBatch, with_diff: bool) -> Result<RecordBatch> {
        let (data, times, diffs) = if self.is_relation() {
            (batch.data.clone(), batch.times.clone(), batch.diffs.clone())
        } else {
            let mut idx = Vec::with_capacity(batch.len());
            for (i, &d) in batch.diffs.iter().enumerate() {
                if d < 0 {
                    bail!("internal error: negative multiplicity {d} in a stream output");
                }
                let i = u32::try_from(i).context("batch too large")?;
                idx.extend(std::iter::repeat_n(i, usize::try_from(d).unwrap_or(0)));
            }
            let taken = batch.take(&idx)?;
            let n = taken.len();
            (taken.data, taken.times, vec![1; n])
        };
        let n = data.num_rows();
        let time: (DataType, ArrayRef) = match self.domain {
            TimeDomain::Ticks => (DataType::Int64, Arc::new(Int64Array::from(times))),
            TimeDomain::Micros => (
                DataType::Timestamp(TimeUnit::Microsecond, None),
                Arc::new(TimestampMicrosecondArray::from(times)),
            ),
        };
        let mut fields = vec![
            Field::new("_query", DataType::Int64, false),
            Field::new("_time", time.0, false),
            Field::new("_diff", DataType::Int64, false),
        ];
        let query = i64::try_from(self.number).unwrap_or(i64::MAX);
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![query; n])),
            time.1,
            Arc::new(Int64Array::from(diffs)),
        ];
        if !with_diff {
            fields.remove(2);
            columns.remove(2);
        }
        if !self.query_column {
            fields.remove(0);
            columns.remove(0);
        }
        fields.extend(data.schema().fields().iter().map(|f| f.as_ref().clone()));
        columns.extend(data.columns().iter().cloned());
        let schema = Arc::new(Schema::new(fields));
        Ok(RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// Width of a cell on a terminal (wide characters count two columns).
/// A statement's text on one line (runs of white space as one space), shortened to 100
/// characters with `...`.
pub fn one_line(sql: &str) -> String {
    let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= 100 {
        return flat;
    }
    let mut short: String = flat.chars().take(97).collect();
    short.push_str("...");
    short
}

fn text_width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// A value as a table cell: line breaks and tabs spelled `\n`, `\r`, `\t` so each row stays
/// on one line.
pub fn table_cell(s: String) -> String {
    if !s.contains(['\n', '\r', '\t']) {
        return s;
    }
    s.replace('\n', "\\n").replace('\r', "\\r").replace('\t', "\\t")
}

/// Rows of a one-shot query (SELECT over tables, SHOW, DESCRIBE).
pub fn rows(format: Format, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<String> {
    match format {
        Format::Table => {
            let header: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
            let mut body = Vec::new();
            for b in batches {
                for row in weir::format::rows_as_text(b)? {
                    body.push(row.into_iter().map(table_cell).collect());
                }
            }
            Ok(boxed_table(&header, &body))
        }
        Format::Csv => {
            let header: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
            let mut records = vec![header];
            for b in batches {
                records.extend(format_rows(b, "")?);
            }
            csv_records(records)
        }
        Format::Jsonl => {
            let mut out = String::new();
            for b in batches {
                out.push_str(&json_lines(b)?);
            }
            Ok(out)
        }
    }
}

/// EXPLAIN output.
pub fn explain(format: Format, text: &str) -> Result<String> {
    match format {
        Format::Table | Format::Csv => {
            let mut s = text.trim_end_matches('\n').to_string();
            s.push('\n');
            Ok(s)
        }
        Format::Jsonl => {
            let v = serde_json::json!({ "explain": text.trim_end_matches('\n') });
            Ok(format!("{v}\n"))
        }
    }
}

/// A statement tag such as `INSERT 3`: shown only in the REPL's table format.
pub fn done(format: Format, tag: &str, interactive: bool) -> String {
    if interactive && format == Format::Table {
        format!("{tag}\n")
    } else {
        String::new()
    }
}

/// A boxed table followed by a row count.
pub fn boxed_table(header: &[String], body: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| text_width(h)).collect();
    for row in body {
        for (i, v) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(text_width(v));
            }
        }
    }
    let mut rule = String::from("+");
    for w in &widths {
        rule.push_str(&"-".repeat(w + 2));
        rule.push('+');
    }
    rule.push('\n');
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (i, w) in widths.iter().enumerate() {
            let v = cells.get(i).map(String::as_str).unwrap_or("");
            let _ = write!(s, " {v}{} |", " ".repeat(w.saturating_sub(text_width(v))));
        }
        s.push('\n');
        s
    };
    let mut out = rule.clone();
    out.push_str(&line(header));
    out.push_str(&rule);
    for row in body {
        out.push_str(&line(row));
    }
    if !body.is_empty() {
        out.push_str(&rule);
    }
    let n = body.len();
    let _ = writeln!(out, "({n} {})", if n == 1 { "row" } else { "rows" });
    out
}

/// Every value of every row as text, NULL as `null_text`.
fn format_rows(batch: &RecordBatch, null_text: &str) -> Result<Vec<Vec<String>>> {
    Ok(weir::format::rows_as_text_with_null(batch, null_text)?)
}

/// CSV records, RFC 4180 quoting, `\n` line ends.
pub fn csv_records<I, R>(records: I) -> Result<String>
where
    I: IntoIterator<Item = R>,
    R: IntoIterator,
    R::Item: AsRef<[u8]>,
{
    let mut w = csv::WriterBuilder::new().flexible(true).from_writer(Vec::new());
    for r in records {
        w.write_record(r)?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("csv: {}", e.error()))?;
    Ok(String::from_utf8(bytes)?)
}

/// One JSON object per row, typed values, NULL as `null`.
pub fn json_lines(batch: &RecordBatch) -> Result<String> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
        w.write(batch)?;
        w.finish()?;
    }
    Ok(String::from_utf8(buf)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Float64Array, StringArray};

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).unwrap()
    }

    #[test]
    fn parses_formats() {
        assert_eq!("CSV".parse::<Format>(), Ok(Format::Csv));
        assert_eq!("jsonl".parse::<Format>(), Ok(Format::Jsonl));
        assert_eq!("table".parse::<Format>(), Ok(Format::Table));
        assert!("xml".parse::<Format>().unwrap_err().contains("unknown format 'xml'"));
    }

    #[test]
    fn boxed_table_pads_and_counts() {
        let header = vec!["item".to_string(), "price".to_string()];
        let body = vec![vec!["widget".into(), "1".into()], vec!["x".into(), "NULL".into()]];
        assert_eq!(
            boxed_table(&header, &body),
            "+--------+-------+\n\
             | item   | price |\n\
             +--------+-------+\n\
             | widget | 1     |\n\
             | x      | NULL  |\n\
             +--------+-------+\n\
             (2 rows)\n"
        );
        assert_eq!(
            boxed_table(&header, &[]),
            "+------+-------+\n| item | price |\n+------+-------+\n(0 rows)\n"
        );
        assert!(boxed_table(&header, &body[..1]).ends_with("(1 row)\n"));
    }

    #[test]
    fn the_header_is_printed_once_and_wide_values_widen_their_column() {
        let mut q = QueryOutput::with_shape(
            2,
            vec!["k".into(), "n".into()],
            PlanKind::Relation,
            TimeDomain::Ticks,
        );
        assert_eq!(q.header(Format::Table).unwrap(), "[2] _time | _diff | k | n\n");
        let lines = q.table_lines(&[vec!["3".into(), "+1".into(), "a".into(), "7".into()]]);
        assert_eq!(lines, "[2] 3     | +1    | a | 7\n");
        // `abc` is wider than `k`: no second header; the lines from it on are aligned.
        let lines = q.table_lines(&[
            vec!["4".into(), "-1".into(), "a".into(), "7".into()],
            vec!["4".into(), "+1".into(), "abc".into(), "8".into()],
            vec!["5".into(), "-1".into(), "ab".into(), "8".into()],
        ]);
        assert_eq!(
            lines,
            "[2] 4     | -1    | a | 7\n[2] 4     | +1    | abc | 8\n[2] 5     | -1    | ab  | 8\n"
        );
    }

    #[test]
    fn columns_are_as_wide_as_their_types_from_the_start() {
        let schema = Schema::new(vec![
            Field::new("item", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("last", DataType::Int64, true),
        ]);
        let mut q = QueryOutput::with_shape(
            1,
            schema.fields().iter().map(|f| f.name().clone()).collect(),
            PlanKind::Relation,
            TimeDomain::Micros,
        );
        q.reserve_value_widths(&schema);
        assert_eq!(
            q.header(Format::Table).unwrap(),
            "[1] _time                      | _diff | item       | n        | ok    | at                      | last\n"
        );
        assert_eq!(q.header(Format::Csv).unwrap(), "_query,_time,_diff,item,n,ok,at,last\n");
        // An instant with microseconds, a 9-character string, a millisecond timestamp: they fit.
        let line = vec![
            "2024-05-01T12:00:04.999999".to_string(),
            "+1".to_string(),
            "telescope".to_string(),
            "12345678".to_string(),
            "false".to_string(),
            "2024-05-01T12:00:01.500".to_string(),
            "1".to_string(),
        ];
        assert_eq!(
            q.table_lines(&[line]),
            "[1] 2024-05-01T12:00:04.999999 | +1    | telescope  | 12345678 | false | 2024-05-01T12:00:01.500 | 1\n"
        );
        assert_eq!(type_width(&DataType::Timestamp(TimeUnit::Second, Some("+05:30".into()))), 25);
        assert_eq!(type_width(&DataType::Decimal128(10, 2)), 12);
        let mut q = q.without_query_column();
        assert_eq!(q.header(Format::Csv).unwrap(), "_time,_diff,item,n,ok,at,last\n");
    }

    #[test]
    fn cells_stay_on_one_line_and_wide_characters_count_twice() {
        assert_eq!(table_cell("a\nb\tc".into()), "a\\nb\\tc");
        assert_eq!(text_width("名前"), 4);
        let t = boxed_table(&["名前".to_string()], &[vec!["ü".to_string()]]);
        assert_eq!(t, "+------+\n| 名前 |\n+------+\n| ü    |\n+------+\n(1 row)\n");
    }

    #[test]
    fn csv_quotes_when_needed() {
        let s = csv_records(vec![vec!["a,b", "say \"hi\"", "", "plain"]]).unwrap();
        assert_eq!(s, "\"a,b\",\"say \"\"hi\"\"\",,plain\n");
    }

    #[test]
    fn json_lines_are_typed() {
        let b = batch(vec![
            ("n", Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec![Some("x\"y"), Some("z")])) as ArrayRef),
            ("f", Arc::new(Float64Array::from(vec![1.5, 2.0])) as ArrayRef),
            ("b", Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef),
        ]);
        assert_eq!(
            json_lines(&b).unwrap(),
            "{\"n\":1,\"s\":\"x\\\"y\",\"f\":1.5,\"b\":true}\n\
             {\"n\":null,\"s\":\"z\",\"f\":2.0,\"b\":false}\n"
        );
    }

    #[test]
    fn changes_get_query_time_and_diff() {
        let data = batch(vec![("a", Arc::new(Int64Array::from(vec![5, 6])) as ArrayRef)]);
        let changes = ChangeBatch::new(data, vec![1, 2], vec![2, -1]);
        let rel =
            QueryOutput::with_shape(3, vec!["a".into()], PlanKind::Relation, TimeDomain::Ticks);
        let b = rel.annotated(&changes, true).unwrap();
        assert_eq!(
            json_lines(&b).unwrap(),
            "{\"_query\":3,\"_time\":1,\"_diff\":2,\"a\":5}\n{\"_query\":3,\"_time\":2,\"_diff\":-1,\"a\":6}\n"
        );
        assert_eq!(csv_records(format_rows(&b, "").unwrap()).unwrap(), "3,1,2,5\n3,2,-1,6\n");
    }

    #[test]
    fn stream_elements_repeat_by_multiplicity() {
        let data = batch(vec![("a", Arc::new(Int64Array::from(vec![5, 6])) as ArrayRef)]);
        let changes = ChangeBatch::new(data, vec![1_500_000, 2_000_000], vec![2, 1]);
        let s = QueryOutput::with_shape(1, vec!["a".into()], PlanKind::Stream, TimeDomain::Micros);
        let b = s.annotated(&changes, false).unwrap();
        assert_eq!(
            csv_records(format_rows(&b, "").unwrap()).unwrap(),
            "1,1970-01-01T00:00:01.500,5\n1,1970-01-01T00:00:01.500,5\n1,1970-01-01T00:00:02,6\n"
        );
        let b = s.annotated(&changes, true).unwrap();
        assert_eq!(
            json_lines(&b).unwrap().lines().next().unwrap(),
            "{\"_query\":1,\"_time\":\"1970-01-01T00:00:01.500\",\"_diff\":1,\"a\":5}"
        );
        let bad = ChangeBatch::new(changes.data.clone(), vec![1, 2], vec![1, -1]);
        assert!(s.annotated(&bad, false).is_err());
    }

    #[test]
    fn explain_and_tags() {
        assert_eq!(explain(Format::Table, "Project\n  Scan\n").unwrap(), "Project\n  Scan\n");
        assert_eq!(
            explain(Format::Jsonl, "Project\n  Scan").unwrap(),
            "{\"explain\":\"Project\\n  Scan\"}\n"
        );
        assert_eq!(done(Format::Table, "INSERT 3", true), "INSERT 3\n");
        assert_eq!(done(Format::Table, "INSERT 3", false), "");
        assert_eq!(done(Format::Csv, "INSERT 3", true), "");
    }
}
