//! Admission: what one arrival at a stream means under the stream's policies, decided without
//! an engine. [`admit`] is a function of the stream's definition, its policies, its watermark
//! and the arrival; it sorts the arrival's records into accepted, late and bad, and says which
//! record (if any) a policy refuses.
//!
//! - **Bad**: a record the source could not read, a row without an event time, or a changelog
//!   row whose `ROW KIND` is not one of the kinds (see [`weir_sql::RowKind`]).
//! - **Late**: a row whose time is below the watermark left by the rows before it, in this
//!   arrival and earlier ones. Lateness is decided row by row in arrival order, so it never
//!   depends on how arrivals were batched; each late row carries the watermark it missed.
//! - **Accepted**: every other row; it raises the watermark to its time minus the stream's
//!   delay.
//!
//! Under `bad_rows = 'fail'` the first bad record, and under `late = 'error'` the first late
//! one, is *fatal*. An arrival that is not `partial` (a push or INSERT) is then refused whole;
//! a partial one (a source read) keeps the records before the fatal one.

use arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use weir_common::time::format_time;
use weir_common::{
    Result, Time, TimeDomain, Watermark, WeirError, WATERMARK_CLOSED, WATERMARK_MIN,
};
use weir_sql::types::sql_type_name;
use weir_sql::{RowKind, StreamDef};

use super::companions::clamp;
use super::policy::{BadRowPolicy, LatePolicy, StreamPolicy};
use crate::source::BadRow;

/// The records of one arrival at a stream: pushed, inserted, or read by its source.
#[derive(Debug)]
pub(crate) struct Arrival {
    /// The readable records' rows, in the stream's schema.
    pub data: RecordBatch,
    /// For each row of `data`, its record number in the arrival (rows and bad records share
    /// one numbering, so a policy can stop at the first offending record).
    pub rows_from: Vec<usize>,
    /// Records that could not be read, by record number.
    pub bad: Vec<(usize, BadRow)>,
    /// `push`, `INSERT`, or the file the records came from.
    pub origin: String,
    /// The line of each record (sources), for messages; otherwise record i is row i+1.
    pub lines: Option<Vec<u64>>,
    /// Whether the records before a fatal one are accepted (sources) or the whole arrival is
    /// refused (push, INSERT).
    pub partial: bool,
}

impl Arrival {
    /// A pushed or inserted batch: every row readable, record i is row i.
    pub fn pushed(data: RecordBatch, origin: &str) -> Arrival {
        Arrival {
            rows_from: (0..data.num_rows()).collect(),
            data,
            bad: Vec::new(),
            origin: origin.to_string(),
            lines: None,
            partial: false,
        }
    }

    /// Records decoded from a source or a COPY (`origin`, a file or `COPY`), each at its line:
    /// the records before a fatal one are taken in.
    pub fn decoded(decoded: crate::source::Decoded, origin: String, lines: Vec<u64>) -> Arrival {
        Arrival {
            data: decoded.batch,
            rows_from: decoded.rows_from,
            bad: decoded.bad,
            origin,
            lines: Some(lines),
            partial: true,
        }
    }

    /// The line of record `record`, for messages.
    fn line_of(&self, record: usize) -> u64 {
        match &self.lines {
            Some(lines) => lines.get(record).copied().unwrap_or(0),
            None => record as u64 + 1,
        }
    }

    /// Where record `record` came from, for messages.
    fn locate_record(&self, record: usize) -> String {
        if self.lines.is_some() && self.origin == "COPY" {
            format!("COPY line {}", self.line_of(record))
        } else if self.lines.is_some() {
            format!("source '{}' line {}", self.origin, self.line_of(record))
        } else {
            format!("row {}", self.line_of(record))
        }
    }
}

/// What [`admit`] decided about an arrival.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Accepted rows and their event times, in arrival order.
    pub accepted: RecordBatch,
    pub accepted_times: Vec<Time>,
    /// Late rows and, for each, the watermark it missed (as an instant).
    pub late: RecordBatch,
    pub missed: Vec<Time>,
    /// Unreadable records and rows without an event time, in record order, each with the
    /// instant it was detected at (see [`detection_stamps`]).
    pub bad: Vec<BadRow>,
    pub detected_at: Vec<Time>,
    /// The watermark after the accepted rows.
    pub watermark: Watermark,
    /// The error of the first record a policy refused; only the records before it are in
    /// this admission (a partial arrival).
    pub fatal: Option<WeirError>,
}

/// The stream's time before an arrival: its watermark and the largest timestamp it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub watermark: Watermark,
    pub max_seen: Option<Time>,
}

/// Decides an arrival (see the module docs), given the stream's progress before it. Fails,
/// admitting nothing, when a policy refuses a record of an arrival that is not partial.
pub(crate) fn admit(
    def: &StreamDef,
    policy: &StreamPolicy,
    before: Progress,
    mut a: Arrival,
) -> Result<Admission> {
    let watermark = before.watermark;
    let times = EventTimes::of(def, &a.data)?;
    // The one lateness loop: each row against the watermark the rows before it left.
    let delay = def.watermark_delay as Watermark;
    let mut progress = watermark;
    let mut missed_at: Vec<(usize, Watermark)> = Vec::new();
    for (row, t) in times.iter() {
        if (t as Watermark) < progress {
            missed_at.push((row, progress));
        } else {
            progress = progress.max(t as Watermark - delay);
        }
    }
    if a.bad.is_empty() && times.all_valid() && missed_at.is_empty() {
        // The common case: everything is accepted as it came.
        return Ok(Admission {
            late: a.data.slice(0, 0),
            accepted: a.data,
            accepted_times: times.values,
            missed: Vec::new(),
            bad: Vec::new(),
            detected_at: Vec::new(),
            watermark: progress,
            fatal: None,
        });
    }
    let mut bad = std::mem::take(&mut a.bad);
    if !times.all_valid() {
        let time_field = def.schema.field(def.time_column).name().clone();
        let texts = crate::format::rows_as_text(&a.data)?;
        for row in (0..a.data.num_rows()).filter(|&r| !times.valid(r)) {
            let record = a.rows_from[row];
            let (field, reason) = match times.bad_kind.binary_search_by_key(&row, |b| b.0) {
                Ok(i) => {
                    let k = def.row_kind.map(|k| def.schema.field(k).name().clone());
                    let text = match &times.bad_kind[i].1 {
                        Some(t) => format!("'{t}'"),
                        None => "NULL".into(),
                    };
                    let reason = format!("row kind {text} is not one of {}", RowKind::accepted());
                    (k.unwrap_or_default(), reason)
                }
                Err(_) => (time_field.clone(), "no event time".into()),
            };
            bad.push((
                record,
                BadRow {
                    line: a.line_of(record),
                    offset: Some(0),
                    field,
                    reason,
                    raw: texts.get(row).map(|r| r.join(", ")).unwrap_or_default(),
                },
            ));
        }
    }
    bad.sort_by_key(|(i, _)| *i);
    // The first record a policy refuses, and why.
    let mut fatal: Option<(usize, WeirError)> = None;
    if policy.bad_rows == BadRowPolicy::Fail {
        if let Some((i, b)) = bad.first() {
            let origin = if a.lines.is_some() { a.origin.as_str() } else { "push" };
            fatal = Some((*i, WeirError::input(bad_row_message(&def.name, origin, b))));
        }
    }
    if policy.late == LatePolicy::Error {
        if let Some(&(row, missed)) = missed_at.first() {
            let record = a.rows_from[row];
            if fatal.as_ref().is_none_or(|(i, _)| record < *i) {
                let msg = format!(
                    "stream '{}' {}: late element at {} is below the watermark {}",
                    def.name,
                    a.locate_record(record),
                    format_time(times.values[row], def.domain),
                    format_watermark(missed, def.domain),
                );
                fatal = Some((record, WeirError::exec(msg)));
            }
        }
    }
    if !a.partial {
        if let Some((_, e)) = fatal {
            const NOTE: &str = "(nothing in this batch was accepted)";
            return Err(match e {
                WeirError::Execution(m) => WeirError::exec(format!("{m} {NOTE}")),
                WeirError::Input(m) => WeirError::input(format!("{m} {NOTE}")),
                e => e,
            });
        }
    }
    let cut = fatal.as_ref().map_or(usize::MAX, |(record, _)| *record);
    let mut late_rows = Vec::new();
    let mut missed = Vec::new();
    let mut accepted_rows = Vec::new();
    let mut accepted_times = Vec::new();
    let mut late_iter = missed_at.iter().peekable();
    let mut watermark_after = watermark;
    for (row, t) in times.iter() {
        let is_late = late_iter.peek().filter(|(r, _)| *r == row).copied();
        if is_late.is_some() {
            late_iter.next();
        }
        if a.rows_from[row] >= cut {
            continue;
        }
        match is_late {
            Some((_, w)) => {
                late_rows.push(row as u32);
                missed.push(clamp(*w));
            }
            None => {
                accepted_rows.push(row as u32);
                accepted_times.push(t);
                watermark_after = watermark_after.max(t as Watermark - delay);
            }
        }
    }
    bad.retain(|(i, _)| *i < cut);
    let accepted_records: Vec<usize> =
        accepted_rows.iter().map(|&r| a.rows_from[r as usize]).collect();
    let detected_at = detection_stamps(def, before, &accepted_records, &accepted_times, &bad);
    Ok(Admission {
        accepted: take_rows(&a.data, &accepted_rows)?,
        accepted_times,
        late: take_rows(&a.data, &late_rows)?,
        missed,
        bad: bad.into_iter().map(|(_, b)| b).collect(),
        detected_at,
        watermark: watermark_after,
        fatal: fatal.map(|(_, e)| e),
    })
}

/// The instant each bad record is detected at (its `detected_at` in `s$errors`): the larger of
/// the stream's watermark and its largest accepted timestamp after the records that precede
/// it in arrival order (0 before anything is known). It depends only on those records, never
/// on how the input was cut into reads, so a restored source and stdin stamp as a file does.
/// Stamps never decrease, and none is below the watermark a query could have passed.
fn detection_stamps(
    def: &StreamDef,
    before: Progress,
    accepted_records: &[usize],
    accepted_times: &[Time],
    bad: &[(usize, BadRow)],
) -> Vec<Time> {
    let delay = def.watermark_delay as Watermark;
    let mut progress = before;
    let mut next = 0;
    let mut stamps = Vec::with_capacity(bad.len());
    for (record, _) in bad {
        while next < accepted_records.len() && accepted_records[next] < *record {
            let t = accepted_times[next];
            progress.watermark = progress.watermark.max(t as Watermark - delay);
            progress.max_seen = Some(progress.max_seen.map_or(t, |m| m.max(t)));
            next += 1;
        }
        stamps.push(match progress.max_seen {
            None if progress.watermark == WATERMARK_MIN => 0,
            m => clamp(progress.watermark).max(m.unwrap_or(Time::MIN)),
        });
    }
    stamps
}

fn take_rows(data: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
    if rows.len() == data.num_rows() {
        return Ok(data.clone());
    }
    let idx = arrow::array::UInt32Array::from(rows.to_vec());
    Ok(arrow::compute::take_record_batch(data, &idx)?)
}

/// The event times of an arrival's rows, in the stream's ticks; `valid` is None when every
/// row has one and, for a changelog with a `ROW KIND` column, a kind.
struct EventTimes {
    values: Vec<Time>,
    valid: Option<Vec<bool>>,
    /// The rows (ascending) that have an event time but no valid row kind, with the kind's
    /// text (`None`: NULL).
    bad_kind: Vec<(usize, Option<String>)>,
}

impl EventTimes {
    fn of(def: &StreamDef, data: &RecordBatch) -> Result<EventTimes> {
        let col = data.column(def.time_column);
        let col = match col.data_type() {
            DataType::Timestamp(TimeUnit::Microsecond, _) | DataType::Int64 => col.clone(),
            _ => arrow::compute::cast(col, &DataType::Int64)?,
        };
        let values = match col.data_type() {
            DataType::Timestamp(..) => col
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .ok_or_else(|| WeirError::internal("timestamp column"))?
                .values()
                .to_vec(),
            _ => col
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| WeirError::internal("int column"))?
                .values()
                .to_vec(),
        };
        let mut valid: Option<Vec<bool>> =
            (col.null_count() > 0).then(|| (0..col.len()).map(|i| col.is_valid(i)).collect());
        let mut bad_kind = Vec::new();
        if let Some(k) = def.row_kind {
            let kinds = arrow::compute::cast(data.column(k), &DataType::Utf8)?;
            let kinds = kinds
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| WeirError::internal("row kind column"))?;
            for r in 0..kinds.len() {
                let text = kinds.is_valid(r).then(|| kinds.value(r));
                if text.and_then(RowKind::parse).is_some() || !col.is_valid(r) {
                    continue;
                }
                valid.get_or_insert_with(|| vec![true; kinds.len()])[r] = false;
                bad_kind.push((r, text.map(str::to_string)));
            }
        }
        Ok(EventTimes { values, valid, bad_kind })
    }

    fn all_valid(&self) -> bool {
        self.valid.is_none()
    }

    fn valid(&self, row: usize) -> bool {
        self.valid.as_ref().is_none_or(|v| v[row])
    }

    /// (row, time) of the rows that have an event time.
    fn iter(&self) -> impl Iterator<Item = (usize, Time)> + '_ {
        self.values.iter().copied().enumerate().filter(|(r, _)| self.valid(*r))
    }
}

/// Where a bad row came from, for messages: `row 3` (a push), `COPY line 4` (`COPY FROM
/// STDIN`) or `source 'data/b.csv' line 7`.
pub(crate) fn locate(origin: &str, bad: &BadRow) -> String {
    if origin == "push" || origin == "INSERT" {
        format!("row {}", bad.line)
    } else if origin == "COPY" {
        format!("COPY line {}", bad.line)
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

/// A watermark for people: `-inf` before anything is promised, `closed` after the end.
pub fn format_watermark(w: Watermark, domain: TimeDomain) -> String {
    if w == WATERMARK_MIN {
        "-inf".into()
    } else if w == WATERMARK_CLOSED {
        "closed".into()
    } else if w > Time::MAX as Watermark {
        "+inf".into()
    } else {
        format_time(clamp(w), domain)
    }
}

/// A pushed column converted to its field's type, or an error naming stream and column.
pub(crate) fn cast_column(stream: &str, f: &Field, col: &ArrayRef) -> Result<ArrayRef> {
    if col.data_type() == f.data_type() {
        return Ok(col.clone());
    }
    let opts = arrow::compute::CastOptions { safe: false, ..Default::default() };
    arrow::compute::cast_with_options(col, f.data_type(), &opts).map_err(|e| {
        WeirError::input(format!(
            "'{stream}' column '{}': cannot convert {} to {}: {e}",
            f.name(),
            col.data_type(),
            sql_type_name(f.data_type())
        ))
    })
}

/// One value converted to a column's type: `cannot read 'x' as BIGINT` if it does not fit.
fn cast_value(f: &Field, col: &ArrayRef) -> std::result::Result<ArrayRef, String> {
    if col.data_type() == f.data_type() {
        return Ok(col.clone());
    }
    let opts = arrow::compute::CastOptions { safe: false, ..Default::default() };
    arrow::compute::cast_with_options(col, f.data_type(), &opts).map_err(|_| {
        let shown = crate::format::value_as_text(col, 0).unwrap_or_default();
        format!("cannot read '{shown}' as {}", sql_type_name(f.data_type()))
    })
}

/// A pushed batch in the stream's schema (columns converted to its types), as an arrival.
pub(crate) fn batch_arrival(
    stream: &str,
    schema: &SchemaRef,
    batch: RecordBatch,
    origin: &str,
) -> Result<Arrival> {
    if batch.num_columns() != schema.fields().len() {
        return Err(WeirError::input(format!(
            "stream '{stream}': expected {} columns, got {}",
            schema.fields().len(),
            batch.num_columns()
        )));
    }
    let mut cols = Vec::with_capacity(batch.num_columns());
    for (i, f) in schema.fields().iter().enumerate() {
        cols.push(cast_column(stream, f, batch.column(i))?);
    }
    Ok(Arrival::pushed(RecordBatch::try_new(schema.clone(), cols)?, origin))
}

/// Rows given as values, one `Vec` per row in the stream's column order, as an arrival: a row
/// whose values do not fit the columns is a bad record (under the stream's policy).
pub(crate) fn values_arrival(
    schema: &SchemaRef,
    rows: &[Vec<datafusion_common::ScalarValue>],
) -> Result<Arrival> {
    let width = schema.fields().len();
    let mut good: Vec<Vec<ArrayRef>> = Vec::with_capacity(rows.len());
    let mut rows_from = Vec::with_capacity(rows.len());
    let mut bad = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let raw = r.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        let bad_row = |field: &str, reason: String| BadRow {
            line: i as u64 + 1,
            offset: Some(0),
            field: field.to_string(),
            reason,
            raw: raw.clone(),
        };
        if r.len() != width {
            bad.push((i, bad_row("", format!("expected {width} values, got {}", r.len()))));
            continue;
        }
        let mut values = Vec::with_capacity(width);
        let mut failed = None;
        for (v, f) in r.iter().zip(schema.fields()) {
            let converted = v
                .to_array()
                .map_err(|e| e.to_string())
                .and_then(|a| cast_value(f, &a).map_err(|e| e.to_string()));
            match converted {
                Ok(a) => values.push(a),
                Err(reason) => {
                    failed = Some(bad_row(f.name(), reason));
                    break;
                }
            }
        }
        match failed {
            Some(b) => bad.push((i, b)),
            None => {
                good.push(values);
                rows_from.push(i);
            }
        }
    }
    let mut cols = Vec::with_capacity(width);
    for (c, f) in schema.fields().iter().enumerate() {
        let refs: Vec<&dyn Array> = good.iter().map(|r| r[c].as_ref()).collect();
        cols.push(if refs.is_empty() {
            arrow::array::new_empty_array(f.data_type())
        } else {
            arrow::compute::concat(&refs)?
        });
    }
    let data = RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(good.len())),
    )?;
    Ok(Arrival { data, rows_from, bad, origin: "push".into(), lines: None, partial: false })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::Schema;

    use super::*;

    /// `s (k BIGINT, t BIGINT, WATERMARK FOR t AS t - delay)`.
    fn def(delay: Time) -> StreamDef {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("t", DataType::Int64, true),
        ]));
        StreamDef {
            name: "s".into(),
            schema,
            time_column: 1,
            domain: TimeDomain::Ticks,
            watermark_delay: delay,
            primary_key: vec![],
            row_kind: None,
            proctime: None,
        }
    }

    /// An arrival of (k, t) rows; a `None` time is a row without an event time.
    fn arrival(rows: &[(i64, Option<i64>)], partial: bool) -> Arrival {
        let d = def(0);
        let k = Int64Array::from_iter_values(rows.iter().map(|r| r.0));
        let t = Int64Array::from_iter(rows.iter().map(|r| r.1));
        let data = RecordBatch::try_new(d.schema, vec![Arc::new(k), Arc::new(t)]).unwrap();
        let mut a = Arrival::pushed(data, if partial { "f.csv" } else { "push" });
        if partial {
            a.partial = true;
            a.lines = Some((0..rows.len() as u64).map(|i| i + 2).collect());
        }
        a
    }

    fn keys(b: &RecordBatch) -> Vec<i64> {
        b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
    }

    /// A stream's progress with nothing accepted yet.
    fn start(watermark: Watermark) -> Progress {
        Progress { watermark, max_seen: None }
    }

    fn policy(late: LatePolicy, bad_rows: BadRowPolicy) -> StreamPolicy {
        StreamPolicy { late, bad_rows, idle_timeout: None }
    }

    #[test]
    fn in_order_rows_are_accepted_and_raise_the_watermark() {
        let a = arrival(&[(1, Some(3)), (2, Some(5)), (3, Some(5))], false);
        let adm = admit(&def(2), &StreamPolicy::default(), start(WATERMARK_MIN), a).unwrap();
        assert_eq!(keys(&adm.accepted), [1, 2, 3]);
        assert_eq!(adm.accepted_times, [3, 5, 5]);
        assert_eq!(adm.watermark, 3);
        assert_eq!(adm.late.num_rows(), 0);
        assert!(adm.bad.is_empty() && adm.fatal.is_none());
    }

    /// Each row is compared with the watermark the rows before it left, not the arrival's
    /// final one: with delay 1, 9 raises the watermark to 8, so the 7 after it is late while
    /// the 7 before it was not.
    #[test]
    fn lateness_is_decided_row_by_row_in_arrival_order() {
        let a = arrival(&[(1, Some(7)), (2, Some(9)), (3, Some(7)), (4, Some(8))], false);
        let adm = admit(&def(1), &StreamPolicy::default(), start(5), a).unwrap();
        assert_eq!(keys(&adm.accepted), [1, 2, 4]);
        assert_eq!(keys(&adm.late), [3]);
        assert_eq!(adm.missed, [8]);
        assert_eq!(adm.watermark, 8);
    }

    /// Splitting an arrival anywhere gives the same decisions and the same detection stamps,
    /// given the progress each part leaves for the next.
    #[test]
    fn batching_never_changes_the_outcome() {
        let times =
            [Some(4), Some(2), None, Some(9), Some(3), None, Some(10), Some(1), Some(12), None];
        let rows: Vec<(i64, Option<i64>)> =
            times.iter().enumerate().map(|(i, &t)| (i as i64, t)).collect();
        let skip = policy(LatePolicy::Route, BadRowPolicy::Skip);
        let whole = admit(&def(2), &skip, start(WATERMARK_MIN), arrival(&rows, false)).unwrap();
        assert_eq!(whole.detected_at, [4, 9, 12], "each from the rows before it");
        for cut in 0..=rows.len() {
            let first =
                admit(&def(2), &skip, start(WATERMARK_MIN), arrival(&rows[..cut], false)).unwrap();
            let after = Progress {
                watermark: first.watermark,
                max_seen: first.accepted_times.iter().copied().max(),
            };
            let second = admit(&def(2), &skip, after, arrival(&rows[cut..], false)).unwrap();
            let accepted = [keys(&first.accepted), keys(&second.accepted)].concat();
            let late = [keys(&first.late), keys(&second.late)].concat();
            assert_eq!(accepted, keys(&whole.accepted), "cut at {cut}");
            assert_eq!(late, keys(&whole.late), "cut at {cut}");
            assert_eq!([first.missed, second.missed].concat(), whole.missed, "cut at {cut}");
            let stamps = [first.detected_at, second.detected_at].concat();
            assert_eq!(stamps, whole.detected_at, "cut at {cut}");
            assert_eq!(second.watermark, whole.watermark);
        }
    }

    /// Before anything is known a bad record is stamped 0; then by the watermark or the
    /// largest timestamp, whichever is larger.
    #[test]
    fn detection_stamps_follow_the_stream_s_progress() {
        let skip = policy(LatePolicy::Route, BadRowPolicy::Skip);
        let rows = [(1, None), (2, Some(7)), (3, None)];
        let adm = admit(&def(3), &skip, start(WATERMARK_MIN), arrival(&rows, false)).unwrap();
        assert_eq!(adm.detected_at, [0, 7]);
        let after_heartbeat = Progress { watermark: 11, max_seen: Some(7) };
        let adm = admit(&def(3), &skip, after_heartbeat, arrival(&[(4, None)], false)).unwrap();
        assert_eq!(adm.detected_at, [11]);
    }

    #[test]
    fn a_row_without_event_time_is_bad_and_fails_a_push_whole() {
        let rows = [(1, Some(1)), (2, None), (3, Some(2))];
        let err =
            admit(&def(0), &StreamPolicy::default(), start(WATERMARK_MIN), arrival(&rows, false))
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad input: stream 's' row 2, field 't': no event time (nothing in this batch was \
             accepted)"
        );
        let skip = policy(LatePolicy::Route, BadRowPolicy::Skip);
        let adm = admit(&def(0), &skip, start(WATERMARK_MIN), arrival(&rows, false)).unwrap();
        assert_eq!(keys(&adm.accepted), [1, 3]);
        assert_eq!(adm.bad.len(), 1);
        assert_eq!((adm.bad[0].field.as_str(), adm.bad[0].raw.as_str()), ("t", "2, NULL"));
    }

    /// A source's arrival keeps the records before the fatal one, which names its file line.
    #[test]
    fn a_partial_arrival_keeps_what_precedes_the_fatal_record() {
        let rows = [(1, Some(5)), (2, Some(6)), (3, Some(1)), (4, Some(7))];
        let strict = policy(LatePolicy::Error, BadRowPolicy::Fail);
        let adm = admit(&def(0), &strict, start(WATERMARK_MIN), arrival(&rows, true)).unwrap();
        assert_eq!(keys(&adm.accepted), [1, 2]);
        assert_eq!(adm.late.num_rows(), 0);
        assert_eq!(adm.watermark, 6);
        let fatal = adm.fatal.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            fatal,
            "stream 's' source 'f.csv' line 4: late element at 1 is below the watermark 6"
        );
        let err = admit(&def(0), &strict, start(WATERMARK_MIN), arrival(&rows, false)).unwrap_err();
        assert!(err.to_string().ends_with("(nothing in this batch was accepted)"), "{err}");
    }

    /// Of a bad record and a late one, the earlier decides what a policy refuses.
    #[test]
    fn the_first_offending_record_is_fatal() {
        let strict = policy(LatePolicy::Error, BadRowPolicy::Fail);
        let rows = [(1, Some(5)), (2, Some(1)), (3, None)];
        let adm = admit(&def(0), &strict, start(WATERMARK_MIN), arrival(&rows, true)).unwrap();
        assert!(adm.fatal.unwrap().to_string().contains("late element at 1"));
        let rows = [(1, Some(5)), (2, None), (3, Some(1))];
        let adm = admit(&def(0), &strict, start(WATERMARK_MIN), arrival(&rows, true)).unwrap();
        assert!(adm.fatal.unwrap().to_string().contains("no event time"));
        assert!(adm.bad.is_empty(), "records from the fatal one on are not admitted");
    }

    #[test]
    fn values_that_do_not_fit_are_bad_records() {
        use datafusion_common::ScalarValue as V;
        let d = def(0);
        let rows = vec![
            vec![V::Int64(Some(1)), V::Int64(Some(1))],
            vec![V::Utf8(Some("x".into())), V::Int64(Some(2))],
            vec![V::Int64(Some(3))],
        ];
        let a = values_arrival(&d.schema, &rows).unwrap();
        assert_eq!(a.data.num_rows(), 1);
        let reasons: Vec<String> = a.bad.iter().map(|(i, b)| format!("{i} {}", b.reason)).collect();
        assert_eq!(reasons, ["1 cannot read 'x' as BIGINT", "2 expected 2 values, got 1"]);
    }
}
