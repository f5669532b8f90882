//! Session windows: `[SESSION gap [PARTITION BY k, ...]]` and `TABLE(SESSION(...))`.
//!
//! A session of a key is a maximal run of that key's elements, in timestamp order, in which
//! each element follows the one before it by less than `gap` ticks: an element stamped
//! exactly `last + gap` starts a new session. A session spans [start, end) with start = its
//! first element's timestamp and end = its last element's timestamp + gap. Its last tick,
//! end − 1, is the first instant at which no element can still join it, so that is when it
//! appears: R(τ) holds the elements of every session whose end − 1 = τ (each with
//! `window_start` = start and `window_end` = end when the window has bounds columns), and
//! nothing else. A session is in the relation for exactly one instant.
//!
//! Delta semantics. Elements reach the operator in timestamp order (the query buffers them
//! until the watermark completes their instant), so an out-of-order element within the
//! watermark's delay is simply an element in its place: one that falls between two runs of a
//! key closer than `gap` to both makes them one session, and neither was shown before. At
//! instant τ, in this order:
//! 1. the sessions shown at τ − 1 leave: −e for each of their elements;
//! 2. each element stamped τ joins its key's open session (it is < gap after the session's
//!    last element, since a session whose last tick has passed is closed) or opens one;
//! 3. every open session whose last tick is τ closes and is shown: +e for each element.
//!
//! The operator wakes at each open session's last tick and at the tick after a session was
//! shown, so those ticks become instants. A session whose last tick lies past the end of the
//! time domain never closes. Input retractions are refused (windows apply to streams).
//!
//! State: per key, the open session (start, last timestamp, its elements as encoded rows with
//! multiplicities, consecutive equal rows kept once), an index of open sessions by last tick, and the sessions shown at the
//! last instant until they leave. Closed sessions are dropped once they have left. Checkpointed
//! as sections `session_window` (one row per session: `key`, `start`, `last`, `rows` counts,
//! `shown` — the instant it was shown, NULL for an open session) and `session_window.rows`
//! (`row` Binary and `diff`, the sessions' elements concatenated in the same order).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::heap::{allocation, HeapSize};
use crate::operator::{min_wakeup, take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::route::{KeyRoute, Placement};
use crate::row::{RowBytes, RowCodec};
use crate::state::{
    binary_col, i64_col, invalid, opt_i64_col, signature, StateReader, StateWriter,
};

#[derive(Debug)]
struct Session {
    start: Time,
    last: Time,
    /// The session's elements (encoded input rows) with their multiplicities, in arrival
    /// order.
    rows: Vec<(RowBytes, i64)>,
}

impl HeapSize for Session {
    fn heap_bytes(&self) -> usize {
        self.rows.heap_bytes()
    }
}

/// A shown session: held by the operator alone between steps, so its allocation (with the
/// two reference counts) and its rows count in full.
impl HeapSize for Arc<Session> {
    fn heap_bytes(&self) -> usize {
        allocation(2 * size_of::<usize>() + size_of::<Session>()) + (**self).heap_bytes()
    }
}

#[derive(Debug)]
pub struct SessionWindow {
    gap: Time,
    by: Vec<usize>,
    /// The output schema: the input's columns, then `window_start` and `window_end` if
    /// `bounds_columns`.
    schema: SchemaRef,
    data_schema: SchemaRef,
    bounds_columns: bool,
    row_codec: RowCodec,
    key_codec: RowCodec,
    /// The open session of each key.
    open: HashMap<RowBytes, Session>,
    /// The keys of the open sessions by last tick (those that close within the time domain),
    /// each tick's keys in key order.
    closing: BTreeMap<Time, BTreeSet<RowBytes>>,
    /// The sessions shown at `shown_at`, which leave at the next tick.
    shown: Vec<(RowBytes, Arc<Session>)>,
    shown_at: Option<Time>,
}

/// A change of one output row: the element, its session's bounds, the instant, the diff.
struct Change<'a> {
    row: &'a [u8],
    start: Time,
    end: i128,
    time: Time,
    diff: i64,
}

impl SessionWindow {
    /// A session window with `gap` (> 0) over the input columns `by`; with `bounds_columns`,
    /// `schema` ends with `window_start` and `window_end`.
    pub fn new(gap: Time, by: Vec<usize>, bounds_columns: bool, schema: SchemaRef) -> Result<Self> {
        if gap <= 0 {
            return Err(WeirError::internal("a session window with a gap that is not positive"));
        }
        let n = schema.fields().len();
        let data_n = if bounds_columns {
            n.checked_sub(2)
                .ok_or_else(|| WeirError::internal("session window bounds without columns"))?
        } else {
            n
        };
        let data_schema =
            Arc::new(arrow::datatypes::Schema::new(schema.fields()[..data_n].to_vec()));
        let row_codec = RowCodec::for_schema(&data_schema)?;
        let key_types = by
            .iter()
            .map(|&i| data_schema.fields().get(i).map(|f| f.data_type().clone()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| WeirError::internal("a session partition column past the row"))?;
        Ok(SessionWindow {
            gap,
            by,
            schema,
            data_schema,
            bounds_columns,
            row_codec,
            key_codec: RowCodec::new(key_types)?,
            open: HashMap::new(),
            closing: BTreeMap::new(),
            shown: Vec::new(),
            shown_at: None,
        })
    }

    fn signature(&self) -> String {
        signature("session_window", &self.schema, (self.gap, &self.by, self.bounds_columns))
    }

    /// The last tick of a session whose last element is stamped `last`: last + gap − 1,
    /// `None` past the end of the time domain.
    fn last_tick(&self, last: Time) -> Option<Time> {
        Time::try_from(last as i128 + self.gap as i128 - 1).ok()
    }

    /// Adds element `row` (key `key`, multiplicity `diff`) stamped `t` to its key's session.
    fn admit(&mut self, key: &[u8], row: &[u8], t: Time, diff: i64) {
        let gap = self.gap;
        match self.open.get_mut(key) {
            Some(s) if (t as i128) - (s.last as i128) < gap as i128 => {
                if t > s.last {
                    let old = Time::try_from(s.last as i128 + gap as i128 - 1).ok();
                    s.last = t;
                    let new = Time::try_from(t as i128 + gap as i128 - 1).ok();
                    // Move the key's entry to its new tick, reusing its bytes.
                    let mut owned = None;
                    if let Some(old) = old {
                        if let Some(keys) = self.closing.get_mut(&old) {
                            owned = keys.take(key);
                            if keys.is_empty() {
                                self.closing.remove(&old);
                            }
                        }
                    }
                    if let Some(new) = new {
                        let owned = owned.unwrap_or_else(|| key.into());
                        self.closing.entry(new).or_default().insert(owned);
                    }
                }
                match s.rows.last_mut() {
                    // Equal rows in a row are kept once, with their multiplicity (after
                    // column pruning, often the whole session: see `weir_plan::prune`).
                    Some((last, n)) if last[..] == *row => *n += diff,
                    _ => s.rows.push((row.into(), diff)),
                }
            }
            _ => {
                // No open session (one that ended before t was closed at its last tick).
                let s = Session { start: t, last: t, rows: vec![(row.into(), diff)] };
                if let Some(tick) = self.last_tick(t) {
                    self.closing.entry(tick).or_default().insert(key.into());
                }
                self.open.insert(key.into(), s);
            }
        }
    }

    /// The output batch of `changes` (in time order).
    fn output(&self, changes: &[Change<'_>]) -> Result<ChangeBatch> {
        let n = changes.len();
        let data = self.row_codec.decode_batch(&self.data_schema, changes.iter().map(|c| c.row))?;
        let mut cols = data.columns().to_vec();
        if self.bounds_columns {
            let clamp = |v: i128| v.clamp(Time::MIN as i128, Time::MAX as i128) as i64;
            let starts: Int64Array = changes.iter().map(|c| Some(c.start)).collect();
            let ends: Int64Array = changes.iter().map(|c| Some(clamp(c.end))).collect();
            cols.push(Arc::new(starts) as ArrayRef);
            cols.push(Arc::new(ends) as ArrayRef);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(
            data,
            changes.iter().map(|c| c.time).collect(),
            changes.iter().map(|c| c.diff).collect(),
        ))
    }
}

impl Operator for SessionWindow {
    /// Walks the ticks of the step at which something happens (an input instant, a session's
    /// last tick, the tick after sessions were shown) in order, each as the module docs say.
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        if let Some(i) = d.diffs.iter().position(|&x| x < 0) {
            return Err(WeirError::internal(format!(
                "a session window over a retraction at {}",
                d.times[i]
            )));
        }
        let rows = self.row_codec.encode(d.data.columns(), d.len())?;
        let key_cols: Vec<ArrayRef> = self.by.iter().map(|&i| d.data.column(i).clone()).collect();
        let keys = self.key_codec.encode(&key_cols, d.len())?;
        // Each session that appears (+1) or leaves (−1) in this step, with the instant, in
        // time order, departures before appearances within an instant.
        let mut moves: Vec<(Arc<Session>, Time, i64)> = Vec::new();
        let mut i = 0;
        loop {
            let next_input = d.times.get(i).copied();
            let next_close = self.closing.keys().next().copied();
            let next_leave = self.shown_at.and_then(|t| t.checked_add(1));
            let Some(x) = min_wakeup([next_input, next_close, next_leave]) else { break };
            if x > step.hi {
                break;
            }
            if x < step.lo {
                return Err(WeirError::internal("a session window fell behind its instants"));
            }
            // 1. The sessions shown at x − 1 leave.
            if next_leave == Some(x) {
                for (_, s) in std::mem::take(&mut self.shown) {
                    moves.push((s, x, -1));
                }
                self.shown_at = None;
            }
            // 2. The elements stamped x join their sessions.
            while i < d.len() && d.times[i] == x {
                self.admit(keys.get(i), rows.get(i), x, d.diffs[i]);
                i += 1;
            }
            // 3. Sessions whose last tick is x close and are shown.
            // (The elements just admitted may have moved or added tick x's entry.)
            let closed = match self.closing.first_key_value() {
                Some((&t, _)) if t == x => {
                    self.closing.pop_first().map(|(_, keys)| keys).unwrap_or_default()
                }
                _ => BTreeSet::new(),
            };
            for key in closed {
                let s = self
                    .open
                    .remove(&key)
                    .ok_or_else(|| WeirError::internal("a closing session that is not open"))?;
                let s = Arc::new(s);
                moves.push((s.clone(), x, 1));
                self.shown.push((key, s));
                self.shown_at = Some(x);
            }
        }
        let mut changes: Vec<Change<'_>> = Vec::new();
        for (s, at, sign) in &moves {
            let end = s.last as i128 + self.gap as i128;
            for (row, diff) in &s.rows {
                changes.push(Change { row, start: s.start, end, time: *at, diff: diff * sign });
            }
        }
        self.output(&changes)
    }

    fn next_wakeup(&self) -> Option<Time> {
        min_wakeup([
            self.closing.keys().next().copied(),
            self.shown_at.and_then(|t| t.checked_add(1)),
        ])
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// The open sessions with their elements, their index by last tick, and the sessions
    /// shown at the last instant.
    fn state_bytes(&self) -> usize {
        self.open.heap_bytes() + self.closing.heap_bytes() + self.shown.heap_bytes()
    }

    /// A key's elements meet on one worker, by the hash of the partition columns; without
    /// PARTITION BY (one session sequence) on worker 0.
    fn placement(&self, _input: usize) -> Result<Placement> {
        if self.by.is_empty() {
            return Ok(Placement::Single);
        }
        Ok(Placement::Keyed(KeyRoute::columns(&self.by, &self.data_schema)?))
    }

    /// State (see the module docs): the shown sessions, then the open ones sorted by key.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let mut open: Vec<(&RowBytes, &Session)> = self.open.iter().collect();
        open.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let all: Vec<(&RowBytes, &Session, Option<Time>)> = self
            .shown
            .iter()
            .map(|(k, s)| (k, s.as_ref(), self.shown_at))
            .chain(open.into_iter().map(|(k, s)| (k, s, None)))
            .collect();
        w.put(
            "session_window",
            &self.signature(),
            all.len(),
            vec![
                ("key", binary_col(all.iter().map(|(k, _, _)| &k[..]))),
                ("start", i64_col(all.iter().map(|(_, s, _)| s.start))),
                ("last", i64_col(all.iter().map(|(_, s, _)| s.last))),
                ("rows", i64_col(all.iter().map(|(_, s, _)| s.rows.len() as i64))),
                ("shown", opt_i64_col(all.iter().map(|(_, _, at)| *at))),
            ],
        )?;
        let rows = all.iter().flat_map(|(_, s, _)| s.rows.iter());
        let n = all.iter().map(|(_, s, _)| s.rows.len()).sum();
        w.put(
            "session_window.rows",
            &self.signature(),
            n,
            vec![
                ("row", binary_col(rows.clone().map(|(r, _)| &r[..]))),
                ("diff", i64_col(rows.map(|(_, d)| *d))),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let s = r.take("session_window", &sig)?;
        let (keys, starts, lasts) = (s.binary("key")?, s.i64s("start")?, s.i64s("last")?);
        let (counts, shown) = (s.i64s("rows")?, s.opt_i64s("shown")?);
        let rows = r.take("session_window.rows", &sig)?;
        let (row_bytes, diffs) = (rows.binary("row")?, rows.i64s("diff")?);
        self.open.clear();
        self.closing.clear();
        self.shown.clear();
        self.shown_at = None;
        let mut at = 0usize;
        for i in 0..keys.len() {
            let n = usize::try_from(counts[i])
                .ok()
                .filter(|n| at + n <= row_bytes.len())
                .ok_or_else(|| invalid("section 'session_window': bad row count"))?;
            let session_rows = (at..at + n).map(|j| (RowBytes::from(row_bytes[j]), diffs[j]));
            let session =
                Session { start: starts[i], last: lasts[i], rows: session_rows.collect() };
            at += n;
            if session.start > session.last {
                return Err(invalid("section 'session_window': a session ends before it starts"));
            }
            let key = RowBytes::from(keys[i]);
            match shown[i] {
                Some(t) => {
                    if self.shown_at.is_some_and(|s| s != t) {
                        return Err(invalid("section 'session_window': shown at two instants"));
                    }
                    self.shown_at = Some(t);
                    self.shown.push((key, Arc::new(session)));
                }
                None => {
                    if let Some(tick) = self.last_tick(session.last) {
                        self.closing.entry(tick).or_default().insert(key.clone());
                    }
                    if self.open.insert(key, session).is_some() {
                        return Err(invalid("section 'session_window': a key opened twice"));
                    }
                }
            }
        }
        if at != row_bytes.len() {
            return Err(invalid("section 'session_window.rows': rows left over"));
        }
        Ok(())
    }

    /// The open sessions and those closing.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        checkpoint_into, drive, fed, kv, kv_schema, run, run_spans, state_bytes_at, Tick,
    };

    fn by_key(gap: Time) -> SessionWindow {
        SessionWindow::new(gap, vec![0], false, kv_schema()).expect("session window")
    }

    #[test]
    fn a_session_is_shown_at_its_last_tick_and_leaves_at_the_next() {
        // Gap 3: a@1 a@3 are one session [1, 6), shown at 5; b@2 is [2, 5), shown at 4; a@6
        // is exactly a gap after a@3, so it starts [6, 9), shown at 8.
        let input = vec![kv(1, "+1 a 1"), kv(2, "+1 b 2"), kv(3, "+1 a 3"), kv(6, "+1 a 6")];
        let out = run(&mut fed(by_key(3), [input]));
        assert_eq!(
            out,
            [
                "@4 +1 b 2",
                "@5 +1 a 1",
                "@5 +1 a 3",
                "@5 -1 b 2",
                "@6 -1 a 1",
                "@6 -1 a 3",
                "@8 +1 a 6",
                "@9 -1 a 6"
            ]
        );
    }

    #[test]
    fn an_element_at_the_last_tick_extends_the_session() {
        // Gap 2: a@1 would close at 2, but a@2 joins it ([1, 4), shown at 3). Gap 1: every
        // element is a session of its own, shown at its own tick.
        let input = || vec![kv(1, "+1 a 1"), kv(2, "+1 a 2, +1 b 2")];
        let out = run(&mut fed(by_key(2), [input()]));
        assert_eq!(
            out,
            ["@3 +1 a 1", "@3 +1 a 2", "@3 +1 b 2", "@4 -1 a 1", "@4 -1 a 2", "@4 -1 b 2"]
        );
        let out = run(&mut fed(by_key(1), [input()]));
        assert_eq!(
            out,
            ["@1 +1 a 1", "@2 +1 a 2", "@2 +1 b 2", "@2 -1 a 1", "@3 -1 a 2", "@3 -1 b 2"]
        );
    }

    #[test]
    fn without_partition_every_element_is_in_one_sequence() {
        let op = SessionWindow::new(2, vec![], false, kv_schema()).expect("session window");
        let out = run(&mut fed(op, [vec![kv(0, "+2 a 0"), kv(1, "+1 b 1"), kv(5, "+1 c 5")]]));
        assert_eq!(
            out,
            ["@2 +1 b 1", "@2 +2 a 0", "@3 -1 b 1", "@3 -2 a 0", "@6 +1 c 5", "@7 -1 c 5"]
        );
    }

    #[test]
    fn bounds_columns_carry_the_session() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("window_start", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("window_end", arrow::datatypes::DataType::Int64, true),
        ]));
        let op = SessionWindow::new(4, vec![0], true, schema).expect("session window");
        let out = run(&mut fed(op, [vec![kv(10, "+1 a 1"), kv(13, "+1 a 2")]]));
        assert_eq!(
            out,
            ["@16 +1 a 1 10 17", "@16 +1 a 2 10 17", "@17 -1 a 1 10 17", "@17 -1 a 2 10 17"]
        );
    }

    /// Random-ish input: spans of any width give what instant-by-instant evaluation gives, and
    /// a checkpoint taken at any instant and restored into a fresh operator changes nothing.
    #[test]
    fn spans_and_checkpoints_change_nothing() {
        let ticks = || -> Vec<Tick> {
            let mut v = vec![];
            for t in 0..40i64 {
                if (t * 7 + 3) % 5 < 2 {
                    let k = ["a", "b", "c"][(t % 3) as usize];
                    v.push(kv(t, &format!("+1 {k} {t}, +1 a {}", t + 100)));
                }
            }
            v
        };
        let want = run(&mut fed(by_key(3), [ticks()]));
        assert!(!want.is_empty());
        // A span's rows are rendered sorted as text, across its instants: compare as sets.
        let mut sorted = want.clone();
        sorted.sort();
        for width in [1, 2, 5, 100] {
            let mut got = run_spans(&mut fed(by_key(3), [ticks()]), width);
            got.sort();
            assert_eq!(got, sorted, "width {width}");
        }
        for cut in 0..45 {
            let mut feed = ticks().into_iter().peekable();
            let mut first = by_key(3);
            let mut got = drive(&mut first, &mut feed, Some(cut));
            let mut second = by_key(3);
            checkpoint_into(&first, &mut second);
            got.extend(drive(&mut second, &mut feed, None));
            assert_eq!(got, want, "checkpoint before {cut}");
        }
    }

    /// The figure grows with the open sessions' elements, holds the shown ones until they
    /// leave, and falls back then (to the map's empty buckets).
    #[test]
    fn state_bytes_follow_the_sessions_until_they_leave() {
        let mut op = by_key(3);
        assert_eq!(op.state_bytes(), 0);
        let input = vec![kv(1, "+1 a 1, +1 b 1"), kv(2, "+1 a 2, +1 c 2, +1 d 2")];
        // b's session is shown at 3 and leaves at 4: still held at 3.
        let [one, two, three, end] =
            state_bytes_at(&mut op, input, [Some(2), Some(3), Some(4), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert!(three > 0);
        assert!(op.open.is_empty() && op.closing.is_empty() && op.shown.is_empty());
        assert!(end < one, "{end} at the end, {one} with two elements");
    }
}
