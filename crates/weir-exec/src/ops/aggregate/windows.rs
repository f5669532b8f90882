//! Window aggregation read by an `ISTREAM`: each `[RANGE T SLIDE S]` or cumulating window's
//! groups once, with the window's bounds, when the window closes (the plan's
//! `WindowAggregate`; when the planner uses it: `weir_plan::window_aggregate`).
//!
//! Input: a stream of pane rows (a [`super::panes::PaneAggregate`]'s output: a pane's rows
//! stamped at its last tick). Windows are [w, b) for the window ends b = kS + O, with
//! w = b − T (a cumulating window of step S and size Z: w the start of b − 1's period,
//! Z·⌊(b − 1 − O)/Z⌋ + O). Delta semantics: the output is a stream; at the instant b − 1 at
//! which window [w, b) becomes current, it inserts, for each group (equal keys, NULLs equal)
//! with a pane row stamped in the window, one element: the keys, the merge aggregates over the
//! group's pane rows in the window, then `window_start` = w and `window_end` = b (clamped to
//! the 64-bit range); at
//! every other instant nothing. Without a merge aggregate (a tumbling window, whose pane rows
//! are the groups already), the window's pane rows themselves, each with the bounds.
//!
//! That is exactly `ISTREAM` of the plan it replaces, `WindowBounds(Aggregate(Window(panes)))`
//! with the ISTREAM seeing `window_end`: the windowed aggregate changes only where the window
//! moves, and at a move `window_end` takes a new value (b grows by S, and only b = 2^63 is
//! clamped), so no row of the new window can cancel one of the old, and the ISTREAM emits
//! every row of the new window once. What is not done: the window's entries and exits, the
//! aggregate's retractions and insertions per group and move, the copy of the aggregate kept
//! to re-emit it with new bounds, and the ISTREAM's consolidation. Each window is aggregated
//! afresh from its panes (up to T/P pane rows per group, P the pane: COUNT(*) over `HOP` 10 s
//! by 2 s merges five pane rows per auction and window).
//!
//! State: the first instant not yet evaluated, and the pane rows that a window still to come
//! may hold, in time order, each batch as it arrived with each row's group in the merge
//! aggregate, found once when the row arrives. The aggregate keeps a group while a held row
//! is in it (a count per group), and each window resets the groups it touches as it first
//! touches them, so a window costs its rows' accumulator updates and its groups' output, with
//! no lookup. Checkpointed as sections `window_aggregate` (column `next`, NULL before the
//! first step) and `window_aggregate.rows` (the rows, with their times and diffs); the groups
//! are found again on restore.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use super::{Aggregate, Prepared};
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::ops::window_bounds::clamp;
use crate::ops::window_time::TimeBounds;
use crate::route::Placement;
use crate::state::{invalid, opt_i64_col, signature, StateReader, StateWriter};

/// Pane rows as they arrived, from `start` on (the rows before it left every window), with
/// the merge aggregate's preparation of them and each row's group slot, found once (a row is
/// merged into every window that holds it).
struct Held {
    rows: ChangeBatch,
    start: usize,
    merge: Option<(Prepared, Vec<u32>)>,
}

impl Held {
    /// The live rows' times.
    fn times(&self) -> &[Time] {
        &self.rows.times[self.start..]
    }

    /// The live rows stamped in [lo, hi), as indices into `rows`.
    fn within(&self, lo: i128, hi: i128) -> std::ops::Range<usize> {
        let times = self.times();
        let a = times.partition_point(|&x| (x as i128) < lo);
        let b = times.partition_point(|&x| (x as i128) < hi);
        self.start + a..self.start + b
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("rows", &(self.rows.len() - self.start)).finish()
    }
}

#[derive(Debug)]
pub struct WindowAggregate {
    /// The windows: `[RANGE T SLIDE S OFFSET O]` or cumulating.
    bounds: TimeBounds,
    /// How far a window's end moves at each move (the slide, or the cumulating step), and
    /// the ends' remainder modulo it, in [0, step).
    step: Time,
    offset: Time,
    /// The merge aggregate (its groups stay while a held row is in them), or none: the pane
    /// rows are the groups.
    groups: Option<Aggregate>,
    /// The pane rows' columns.
    data_schema: SchemaRef,
    /// The output: the aggregate's (or the pane rows') columns, then the two bounds.
    schema: SchemaRef,
    /// Pane rows that a window to come may hold, in time order.
    held: VecDeque<Held>,
    /// Per group slot of the merge aggregate: how many held rows are its (released at 0).
    refs: Vec<u32>,
    /// The first instant not yet evaluated.
    next: Option<Time>,
}

impl WindowAggregate {
    /// The windows of `bounds` (sliding or cumulating) over rows of `data_schema`, merged by
    /// `groups` if given; `schema` is the output's.
    pub fn new(
        bounds: TimeBounds,
        groups: Option<Aggregate>,
        data_schema: SchemaRef,
        schema: SchemaRef,
    ) -> Result<Self> {
        let (step, offset) = match bounds {
            TimeBounds::Slide { range, slide, offset } if range > 0 && slide > 0 => (slide, offset),
            TimeBounds::Cumulate { step, size, offset } if step > 0 && size > 0 => (step, offset),
            _ => {
                return Err(WeirError::internal(
                    "a window aggregate over a window that does not move",
                ))
            }
        };
        Ok(WindowAggregate {
            bounds,
            step,
            offset: offset.rem_euclid(step),
            groups: groups.map(|g| g.with_append_only(true)),
            data_schema,
            schema,
            held: VecDeque::new(),
            refs: Vec::new(),
            next: None,
        })
    }

    /// The first window end b > t: the earliest window that can hold an element at t ends
    /// there (it holds it if its start is at most t).
    fn end_after(&self, t: i128) -> i128 {
        let (s, o) = (self.step as i128, self.offset as i128);
        s * (t - o).div_euclid(s) + o + s
    }

    /// The start of the window that ends at b: b − T, or the start of b − 1's cumulating
    /// period.
    fn start_of(&self, b: i128) -> i128 {
        match self.bounds {
            TimeBounds::Cumulate { size, offset, .. } => {
                let (z, o) = (size as i128, offset as i128);
                z * (b - 1 - o).div_euclid(z) + o
            }
            TimeBounds::Slide { range, .. } => b - range as i128,
            TimeBounds::Unbounded | TimeBounds::Range(_) => i128::MIN,
        }
    }

    /// The earliest held row's time.
    fn first_time(&self) -> Option<Time> {
        self.held.front().and_then(|h| h.times().first().copied())
    }

    /// Holds `rows` (pane rows, in time order), each found its group.
    fn hold(&mut self, rows: ChangeBatch) -> Result<()> {
        let merge = match self.groups.as_mut() {
            Some(groups) => {
                let prepared = groups.prepare(&rows)?;
                let slots = groups.slots_of(&prepared, rows.len());
                for &id in &slots {
                    let id = id as usize;
                    if id >= self.refs.len() {
                        self.refs.resize(id + 1, 0);
                    }
                    self.refs[id] += 1;
                }
                Some((prepared, slots))
            }
            None => None,
        };
        self.held.push_back(Held { rows, start: 0, merge });
        Ok(())
    }

    /// Drops the held rows stamped before `t`, and the groups no held row is in.
    fn drop_before(&mut self, t: i128) {
        while let Some(front) = self.held.front_mut() {
            let gone = front.times().partition_point(|&x| (x as i128) < t);
            if gone == 0 {
                break;
            }
            if let (Some(groups), Some((_, slots))) = (self.groups.as_mut(), &front.merge) {
                for &id in &slots[front.start..front.start + gone] {
                    let refs = &mut self.refs[id as usize];
                    *refs -= 1;
                    if *refs == 0 {
                        groups.release(id);
                    }
                }
            }
            front.start += gone;
            if front.start == front.rows.len() {
                self.held.pop_front();
            }
        }
    }

    /// The first window end after `after` (if any) whose window can hold the earliest held
    /// row: it holds it unless the row is before the window's start.
    fn candidate_end(&self, after: Option<i128>) -> Option<i128> {
        let b = self.end_after(self.first_time()? as i128);
        Some(after.map_or(b, |a| b.max(self.end_after(a))))
    }

    /// The next window end b > `after` whose window holds a held row (it closes at b − 1),
    /// dropping the rows that no such window holds.
    fn next_end(&mut self, after: i128) -> Option<i128> {
        loop {
            let t0 = self.first_time()? as i128;
            let b = self.candidate_end(Some(after))?;
            let start = self.start_of(b);
            if start <= t0 {
                return Some(b);
            }
            // No window from b on holds t0 (or anything before b's window starts).
            self.drop_before(start);
        }
    }

    /// The window that ends at b, [`Self::start_of`] b to b, emitted at b − 1.
    fn emit(&mut self, b: i128) -> Result<ChangeBatch> {
        let lo = self.start_of(b);
        let t = Time::try_from(b - 1).map_err(|_| WeirError::internal("a window past time"))?;
        let mut out = match self.groups.as_mut() {
            Some(groups) => {
                groups.begin_window();
                for h in &self.held {
                    let range = h.within(lo, b);
                    if range.is_empty() {
                        if range.start == h.rows.len() {
                            continue;
                        }
                        break;
                    }
                    let Some((p, slots)) = &h.merge else {
                        return Err(WeirError::internal("held rows without their groups"));
                    };
                    for i in range {
                        groups.add_in_window(slots[i], p, i)?;
                    }
                }
                groups.window_rows(t)?
            }
            None => {
                let mut parts = Vec::new();
                for h in &self.held {
                    let range = h.within(lo, b);
                    if !range.is_empty() {
                        let rows = h.rows.slice(range.start, range.len());
                        parts.push(ChangeBatch::new(rows.data, vec![t; range.len()], rows.diffs));
                    }
                }
                ChangeBatch::concat(&self.data_schema, &parts)?
            }
        };
        let n = out.len();
        let mut cols: Vec<ArrayRef> = out.data.columns().to_vec();
        for v in [lo, b] {
            cols.push(Arc::new(Int64Array::from(vec![clamp(v); n])));
        }
        out.data = batch_of(&self.schema, cols, n)?;
        Ok(out)
    }

    fn signature(&self) -> String {
        let merged = self.groups.as_ref().map(|g| g.schema.fields().len());
        signature("window_aggregate", &self.schema, (self.bounds, merged))
    }
}

impl Operator for WindowAggregate {
    /// The step's pane rows are held; every window that closes in the step and holds any is
    /// emitted at its last tick, in time order (see the module docs).
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        if d.diffs.iter().any(|&x| x <= 0) {
            return Err(WeirError::internal("a window aggregate's input retracted a row"));
        }
        if !d.is_empty() {
            self.hold(d.with_schema(self.data_schema.clone())?)?;
        }
        let mut parts = Vec::new();
        // Windows closing at b − 1 ≥ lo, then each after the last.
        let mut after = step.lo as i128;
        while let Some(b) = self.next_end(after) {
            if b - 1 > step.hi as i128 {
                break;
            }
            let out = self.emit(b)?;
            if !out.is_empty() {
                parts.push(out);
            }
            after = b;
        }
        self.next = Time::try_from(step.hi as i128 + 1).ok();
        match parts.len() {
            0 => Ok(ChangeBatch::empty(self.schema.clone())),
            1 => Ok(parts.remove(0)),
            _ => ChangeBatch::concat(&self.schema, &parts),
        }
    }

    /// The last tick of the next window that holds a pane row (rows that no window holds, in
    /// a gap where T < S, are dropped at the next step).
    fn next_wakeup(&self) -> Option<Time> {
        let b = self.candidate_end(self.next.map(i128::from))?;
        Time::try_from(b - 1).ok()
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A group's pane rows meet on one worker, as for the aggregate it replaces (without a
    /// merge aggregate, the rows are groups already placed by their pane aggregate).
    fn placement(&self, input: usize) -> Result<Placement> {
        match &self.groups {
            Some(g) => g.placement(input),
            None => Ok(Placement::Local),
        }
    }

    /// The held pane rows, and the merge aggregate's groups.
    fn state_bytes(&self) -> usize {
        self.held.iter().map(|h| h.rows.heap_bytes()).sum::<usize>()
            + self.refs.heap_bytes()
            + self.groups.as_ref().map_or(0, Operator::state_bytes)
    }

    /// State: see the module docs.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        w.put("window_aggregate", &sig, 1, vec![("next", opt_i64_col([self.next]))])?;
        let batches: Vec<ChangeBatch> =
            self.held.iter().map(|h| h.rows.slice(h.start, h.rows.len() - h.start)).collect();
        w.put_changes("window_aggregate.rows", &sig, &self.data_schema, &batches)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let next = r.take("window_aggregate", &sig)?.opt_i64s("next")?;
        let [next] = next.as_slice() else {
            return Err(invalid("section 'window_aggregate' holds one row"));
        };
        self.next = *next;
        let rows = r.take("window_aggregate.rows", &sig)?.changes(Some(&self.data_schema))?;
        if !rows.is_empty() {
            self.hold(rows)?;
        }
        Ok(())
    }

    /// The pane rows of the windows to come.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;
    use weir_plan::AggFunc;

    use super::WindowAggregate;
    use crate::expr::ScalarExpr;
    use crate::operator::{EvalCtx, Operator, Step};
    use crate::ops::aggregate::{AggSpec, Aggregate};
    use crate::ops::window_time::TimeBounds;
    use crate::testing::{checkpoint_into, drive, fed, kv, kv_schema, run_spans, Tick};

    /// (k, v or SUM(v), window_start, window_end).
    fn out_schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new("window_start", DataType::Int64, false),
            Field::new("window_end", DataType::Int64, false),
        ]))
    }

    /// Windows [RANGE range SLIDE slide OFFSET offset] over (k, v) rows, SUM(v) per k if
    /// `merged`, else the rows themselves.
    fn op(range: i64, slide: i64, offset: i64, merged: bool) -> WindowAggregate {
        let groups = merged.then(|| {
            let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
            let column = |name: &str| ScalarExpr::compile(&col(name), &df).unwrap();
            let aggs =
                vec![AggSpec::plain(AggFunc::Sum, Some(column("v")), DataType::Int64, false)];
            let schema = Arc::new(Schema::new(out_schema().fields()[..2].to_vec()));
            Aggregate::new(vec![column("k")], vec![DataType::Utf8], aggs, schema).unwrap()
        });
        let bounds = TimeBounds::Slide { range, slide, offset: offset.rem_euclid(slide) };
        WindowAggregate::new(bounds, groups, kv_schema(), out_schema()).unwrap()
    }

    /// Pane rows at 1, 3, 5, 9 and 10 (a pane of 2 ends at each odd tick; 10 is a row of its
    /// own, as if from a pane of 1).
    fn panes() -> Vec<Tick> {
        vec![
            kv(1, "+1 a 1, +1 b 2"),
            kv(3, "+1 a 3"),
            kv(5, "+1 b 4, +1 c 5"),
            kv(9, "+1 a 6"),
            kv(10, "+1 a 7"),
        ]
    }

    #[test]
    fn each_window_is_emitted_once_at_its_last_tick_with_its_bounds() {
        // [2j-4, 2j) at 2j-1: [-2,2) a1 b2; [0,4) a1+3 b2; [2,6) a3 b4 c5; [4,8) b4 c5;
        // [6,10) a6; [8,12) a6+7; [10,14) a7.
        let want = [
            "@1 +1 a 1 -2 2",
            "@1 +1 b 2 -2 2",
            "@3 +1 a 4 0 4",
            "@3 +1 b 2 0 4",
            "@5 +1 a 3 2 6",
            "@5 +1 b 4 2 6",
            "@5 +1 c 5 2 6",
            "@7 +1 b 4 4 8",
            "@7 +1 c 5 4 8",
            "@9 +1 a 6 6 10",
            "@11 +1 a 13 8 12",
            "@13 +1 a 7 10 14",
        ];
        for width in [0, 2, 1024] {
            // (A span's rows are rendered sorted as text: "@11" before "@9".)
            let mut got = run_spans(&mut fed(op(4, 2, 0, true), [panes()]), width);
            let mut want = want.to_vec();
            got.sort();
            want.sort();
            assert_eq!(got, want, "spans of {width}");
        }
    }

    #[test]
    fn without_a_merge_the_rows_come_out_as_they_are_and_gaps_are_dropped() {
        // [RANGE 2 SLIDE 4 OFFSET 1]: windows [4j-1, 4j+1) at 4j: [-1,1) none; [3,5) a3;
        // [7,9) none; [11,13) none. The rows at 1, 5, 9 and 10 are in gaps.
        let got = run_spans(&mut fed(op(2, 4, 1, false), [panes()]), 0);
        assert_eq!(got, ["@4 +1 a 3 3 5"]);
        // A tumbling window: each row in the window of its own time.
        let got = run_spans(&mut fed(op(4, 4, 0, false), [panes()]), 0);
        assert_eq!(
            got,
            [
                "@3 +1 a 1 0 4",
                "@3 +1 a 3 0 4",
                "@3 +1 b 2 0 4",
                "@7 +1 b 4 4 8",
                "@7 +1 c 5 4 8",
                "@11 +1 a 6 8 12",
                "@11 +1 a 7 8 12"
            ]
        );
    }

    #[test]
    fn a_checkpoint_between_windows_continues_the_same() {
        let whole = drive(&mut op(4, 2, 0, true), &mut panes().into_iter().peekable(), None);
        for stop in [2, 4, 6, 10, 12] {
            let mut first = op(4, 2, 0, true);
            let mut feed = panes().into_iter().peekable();
            let mut got = drive(&mut first, &mut feed, Some(stop));
            let mut restored = op(4, 2, 0, true);
            checkpoint_into(&first, &mut restored);
            assert_eq!(restored.next_wakeup(), first.next_wakeup(), "stop {stop}");
            got.extend(drive(&mut restored, &mut feed, None));
            assert_eq!(got, whole, "stop {stop}");
        }
    }

    #[test]
    fn a_group_lives_while_a_held_row_is_in_it() {
        let mut op = op(4, 2, 0, true);
        let groups = |op: &WindowAggregate| op.groups.as_ref().map_or(0, |g| g.index.len());
        let mut feed = panes().into_iter().peekable();
        // After 5 (the window [2, 6)), no window to come holds the rows at 1 and 3: a goes,
        // b stays for its row at 5, c comes.
        drive(&mut op, &mut feed, Some(6));
        assert_eq!(groups(&op), 2);
        // After 7 ([4, 8)), none holds the rows at 5 either.
        drive(&mut op, &mut feed, Some(8));
        assert_eq!(groups(&op), 0);
        // a comes back at 9; by the end nothing is held.
        drive(&mut op, &mut feed, Some(10));
        assert_eq!(groups(&op), 1);
        drive(&mut op, &mut feed, None);
        assert_eq!(groups(&op), 0);
        assert!(op.held.is_empty());
    }

    #[test]
    fn a_retraction_is_an_internal_error() {
        let mut op = op(4, 2, 0, true);
        let ctx = EvalCtx::default();
        let step = Step { lo: 1, hi: 1, ctx: &ctx, input_wakeup: None };
        let err = op.eval(&step, vec![kv(1, "-1 a 1").1]).unwrap_err();
        assert!(err.to_string().contains("retracted"), "{err}");
    }
}
