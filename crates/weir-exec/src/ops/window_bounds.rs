//! Window bounds: a relation with the bounds of the current `[RANGE T SLIDE S]` or cumulating
//! window appended.
//!
//! Input: a relation A. Output: A(τ) × {(lo(τ), hi(τ))}, the input's rows each with the
//! `window_start` lo and `window_end` hi of the window current at τ, [b−T, b) with
//! b = S·⌊(τ+1)/S⌋, or for a cumulating window [w, b) with b = step·⌊(τ+1)/step⌋ and w the
//! largest multiple of size below b (see [`crate::ops::window_time`]); the bounds are the last
//! two columns.
//!
//! Delta semantics: at an instant τ where the window is the one current at the last instant,
//! the output is ΔA(τ) with the current bounds appended. At an instant where the window has
//! moved, it is −(every row of A before τ, old bounds) +(every row of A at τ, new bounds):
//! rows that stay change their bounds, the others leave or enter. The window moves at ticks
//! kS−1 (for a cumulating window at each k·step − 1), so while A holds rows the operator asks
//! to be woken at the next of them.
//!
//! The planner uses it for an aggregate per TUMBLE/HOP/CUMULATE window (`weir_plan::window_bounds`):
//! there A is the aggregate over the plain window, which changes only where the window moves,
//! so each move costs one retraction and one insertion per group, and each element enters and
//! leaves the aggregate once, whatever T/S is.
//!
//! Under an ISTREAM that sees some of the bounds unchanged ([`WindowBounds::seen_by_istream`]),
//! a move where one of those bounds changes leaves out the −(every row, old bounds) part: no
//! row with the old value of that column can cancel a row with the new one in the ISTREAM's
//! consolidation, so the ISTREAM would drop them all, and its output is the same without them.
//! (A bound is clamped to the 64-bit range, so two windows near the ends of time can share a
//! `window_start`; the operator compares the values it would emit.)
//!
//! State: the multiset A (encoded rows with their counts, kept in row order, which is the
//! order rows are emitted in at a move) and the bounds at the last instant. A is a sorted
//! vector, and an instant's changes are netted by sorting them (no hashing, no copy of a row
//! that is already there) and merged into it in one pass: O(|A| + |ΔA|) for an instant with
//! changes, which a move costs anyway, since it emits all of A. The planner's inputs change
//! only where the window moves (an aggregate over the same window), so every instant with
//! changes is one; an input that changed between moves would pay the merge each time.
//! Checkpointed as sections `window_bounds` (one row: `current_lo`, `current_hi`, 16-byte
//! Binary, NULL before the first instant) and `window_bounds.rows` (`row`, `count`).

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::heap::HeapSize;
use crate::operator::{take_inputs, time_runs, Operator, Step};
use crate::ops::batch_of;
use crate::ops::window_time::TimeBounds;
use crate::route::Placement;
use crate::row::{sort_by_encoding, RowBytes, RowCodec};
use crate::state::{
    invalid, opt_i128_col, put_counts, signature, take_counts, StateReader, StateWriter,
};

/// A bound as emitted: clamped to the 64-bit range of the columns.
pub(crate) fn clamp(v: i128) -> i64 {
    v.clamp(Time::MIN as i128, Time::MAX as i128) as i64
}

#[derive(Debug)]
pub struct WindowBounds {
    bounds: TimeBounds,
    /// The input's columns then `window_start`, `window_end`.
    schema: SchemaRef,
    /// The input's columns.
    data_schema: SchemaRef,
    codec: RowCodec,
    /// A: every input row present, with its multiplicity, in row order.
    rows: Vec<(RowBytes, i64)>,
    /// The bounds [lo, hi) at the last instant.
    current: Option<(i128, i128)>,
    /// Which bounds (`window_start`, `window_end`) an ISTREAM above receives unchanged.
    istream_sees: [bool; 2],
}

impl WindowBounds {
    /// Bounds of `[RANGE range SLIDE slide]` appended to rows of `schema` less its last two
    /// columns.
    pub fn new(range: Time, slide: Time, schema: SchemaRef) -> Result<Self> {
        if range <= 0 || slide <= 0 {
            return Err(WeirError::internal("window bounds of a window that is not positive"));
        }
        Self::of(TimeBounds::slide(range, slide), schema)
    }

    /// Bounds of the cumulating window with `step` and `size` (a multiple of `step`).
    pub fn cumulate(step: Time, size: Time, schema: SchemaRef) -> Result<Self> {
        if step <= 0 || size <= 0 || size % step != 0 {
            return Err(WeirError::internal("window bounds of a cumulating window out of shape"));
        }
        Self::of(TimeBounds::Cumulate { step, size, offset: 0 }, schema)
    }

    /// Bounds of any moving window (`[RANGE T SLIDE S]` or cumulating, with an offset).
    pub fn of(bounds: TimeBounds, schema: SchemaRef) -> Result<Self> {
        let n = schema.fields().len().checked_sub(2).ok_or_else(|| {
            WeirError::internal("window bounds: a schema without the two bounds columns")
        })?;
        let data_schema = Arc::new(arrow::datatypes::Schema::new(schema.fields()[..n].to_vec()));
        let codec = RowCodec::for_schema(&data_schema)?;
        Ok(WindowBounds {
            bounds,
            schema,
            data_schema,
            codec,
            rows: Vec::new(),
            current: None,
            istream_sees: [false; 2],
        })
    }

    /// The operator under an ISTREAM that receives the bounds marked in `seen` (`window_start`,
    /// `window_end`) as columns, through filters, renames and projections only: at a move where
    /// one of them changes, the rows leaving with the old bounds are not emitted (see the
    /// module docs).
    pub fn seen_by_istream(mut self, seen: [bool; 2]) -> Self {
        self.istream_sees = seen;
        self
    }

    /// Whether the retractions of a move from `old` to `now` can be left out: a bound the
    /// ISTREAM sees takes a new value.
    fn retractions_unseen(&self, old: (i128, i128), now: (i128, i128)) -> bool {
        let changed = [clamp(old.0) != clamp(now.0), clamp(old.1) != clamp(now.1)];
        changed.iter().zip(self.istream_sees).any(|(c, s)| *c && s)
    }

    fn bounds(&self) -> TimeBounds {
        self.bounds
    }

    /// The state's signature (a `[RANGE T SLIDE S]` window's is the one it always had).
    fn signature(&self) -> String {
        match self.bounds {
            TimeBounds::Slide { range, slide, offset: 0 } => {
                signature("window_bounds", &self.schema, (range, slide))
            }
            b => signature("window_bounds", &self.schema, b),
        }
    }

    /// `data` (rows of the input's columns) with the bounds appended, each row's diff taken
    /// from `diffs`, stamped `t`.
    fn with_bounds(
        &self,
        data: Vec<ArrayRef>,
        n: usize,
        bounds: (i128, i128),
        diffs: Vec<i64>,
        t: Time,
    ) -> Result<ChangeBatch> {
        let mut cols = data;
        for v in [bounds.0, bounds.1] {
            cols.push(Arc::new(arrow::array::Int64Array::from(vec![clamp(v); n])) as ArrayRef);
        }
        Ok(ChangeBatch::new(batch_of(&self.schema, cols, n)?, vec![t; n], diffs))
    }

    /// Every row of A with `bounds`, each with its count times `sign`, stamped `t`.
    fn all_rows(&self, bounds: (i128, i128), sign: i64, t: Time) -> Result<ChangeBatch> {
        let data = self.codec.decode(self.rows.iter().map(|(r, _)| &r[..]))?;
        let diffs = self.rows.iter().map(|(_, c)| *c * sign).collect();
        self.with_bounds(data, self.rows.len(), bounds, diffs, t)
    }

    /// Adds the changes `d` (all at one instant) to A: netted in row order, then merged.
    fn apply(&mut self, d: &ChangeBatch) -> Result<()> {
        let rows = self.codec.encode(d.data.columns(), d.len())?;
        let mut order = Vec::with_capacity(d.len());
        sort_by_encoding(&rows, 0..d.len(), &mut order);
        let row = |k: usize| rows.get(order[k].index as usize);
        let old = std::mem::take(&mut self.rows);
        let mut merged = Vec::with_capacity(old.len() + order.len());
        let mut old = old.into_iter().peekable();
        let mut i = 0;
        while i < order.len() {
            let (first, mut diff) = (i, 0);
            while i < order.len() && order[i].same_prefix(&order[first]) && row(i) == row(first) {
                diff += d.diffs[order[i].index as usize];
                i += 1;
            }
            let row = row(first);
            while let Some(kept) = old.next_if(|(r, _)| &r[..] < row) {
                merged.push(kept);
            }
            match old.next_if(|(r, _)| &r[..] == row) {
                Some((r, c)) if c + diff != 0 => merged.push((r, c + diff)),
                Some(_) => {}
                None if diff != 0 => merged.push((RowBytes::from(row), diff)),
                None => {}
            }
        }
        merged.extend(old);
        // (Room left over by rows that left is given back: the state is the rows present.)
        if merged.capacity() > 2 * merged.len() {
            merged.shrink_to_fit();
        }
        self.rows = merged;
        Ok(())
    }

    /// The next tick at which the window moves, if A holds rows (else nothing can change
    /// without input).
    fn next_move(&self) -> Option<Time> {
        let (_, hi) = self.current?;
        if self.rows.is_empty() {
            return None;
        }
        let step = self.bounds.step()?;
        Time::try_from(hi + step as i128 - 1).ok()
    }
}

impl Operator for WindowBounds {
    /// The output at each instant of the step: the input's instants, and each tick in between
    /// where the window moves while A holds rows (see the module docs).
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let d = d.with_schema(self.data_schema.clone())?;
        let ends = time_runs(&d.times);
        let mut parts = Vec::new();
        let (mut run, mut start) = (0usize, 0usize);
        loop {
            let next_input = ends.get(run).map(|_| d.times[start]);
            let next_move = self.next_move().map(|t| t.max(step.lo));
            let Some(t) = [next_input, next_move].into_iter().flatten().min() else { break };
            if t > step.hi {
                break;
            }
            let now = self.bounds().at(t);
            let moved = self.current.is_some_and(|c| c != now);
            if moved && !self.rows.is_empty() {
                if let Some(old) = self.current.filter(|old| !self.retractions_unseen(*old, now)) {
                    parts.push(self.all_rows(old, -1, t)?);
                }
            }
            let changes = if next_input == Some(t) {
                let end = ends[run];
                let c = d.slice(start, end - start);
                run += 1;
                start = end;
                Some(c)
            } else {
                None
            };
            if let Some(c) = &changes {
                self.apply(c)?;
            }
            self.current = Some(now);
            if moved {
                if !self.rows.is_empty() {
                    parts.push(self.all_rows(now, 1, t)?);
                }
            } else if let Some(c) = changes {
                let n = c.len();
                parts.push(self.with_bounds(c.data.columns().to_vec(), n, now, c.diffs, t)?);
            }
        }
        self.current = Some(self.bounds().at(step.hi));
        match parts.len() {
            0 => Ok(ChangeBatch::empty(self.schema.clone())),
            1 => Ok(parts.remove(0)),
            _ => ChangeBatch::concat(&self.schema, &parts),
        }
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.next_move()
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// The multiset A: each row present, with its count.
    fn state_bytes(&self) -> usize {
        self.rows.heap_bytes()
    }

    /// Each row gets the bounds on its own: rows stay where they are.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Local)
    }

    /// State (see the module docs): sections `window_bounds` and `window_bounds.rows`.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        w.put(
            "window_bounds",
            &sig,
            1,
            vec![
                ("current_lo", opt_i128_col([self.current.map(|c| c.0)])),
                ("current_hi", opt_i128_col([self.current.map(|c| c.1)])),
            ],
        )?;
        put_counts(w, "window_bounds.rows", &sig, self.rows.iter().map(|(r, c)| (r, c)))
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let s = r.take("window_bounds", &sig)?;
        let (lo, hi) = (s.opt_i128s("current_lo")?, s.opt_i128s("current_hi")?);
        self.current = match (lo.as_slice(), hi.as_slice()) {
            ([Some(lo)], [Some(hi)]) => Some((*lo, *hi)),
            ([None], [None]) => None,
            _ => return Err(invalid("section 'window_bounds': bad current bounds")),
        };
        let mut rows: Vec<(RowBytes, i64)> =
            take_counts(r, "window_bounds.rows", &sig)?.into_iter().collect();
        rows.sort_unstable();
        self.rows = rows;
        Ok(())
    }

    /// The rows of the current window.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fed, kv, kv_schema, run_spans, state_bytes_at, Tick};
    use arrow::datatypes::{DataType, Field, Schema};

    fn schema() -> SchemaRef {
        let mut fields: Vec<Field> =
            kv_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("window_start", DataType::Int64, true));
        fields.push(Field::new("window_end", DataType::Int64, true));
        Arc::new(Schema::new(fields))
    }

    fn bounds(range: Time, slide: Time, input: Vec<Tick>, width: Time) -> Vec<String> {
        let op = WindowBounds::new(range, slide, schema()).unwrap();
        let mut out = run_spans(&mut fed(op, [input]), width);
        out.sort();
        out
    }

    #[test]
    fn rows_take_the_bounds_of_the_current_window_and_change_them_when_it_moves() {
        // TUMBLE 5: windows [0,5) current at 4..8, [5,10) at 9..13, [10,15) at 14..18.
        let input = || {
            vec![
                kv(4, "+1 a 1"),
                kv(6, "+1 b 2"),
                kv(9, "-1 a 1, +1 c 3"),
                kv(15, "-1 b 2, -1 c 3"),
            ]
        };
        let mut want = vec![
            "@4 +1 a 1 0 5",
            "@6 +1 b 2 0 5",
            // the window moves at 9: everything at the old bounds out, A at 9 in
            "@9 -1 a 1 0 5",
            "@9 -1 b 2 0 5",
            "@9 +1 b 2 5 10",
            "@9 +1 c 3 5 10",
            // no input at 14: the rows move on their own
            "@14 -1 b 2 5 10",
            "@14 -1 c 3 5 10",
            "@14 +1 b 2 10 15",
            "@14 +1 c 3 10 15",
            // the window has not moved since 14: the changes take its bounds; then A is empty
            // and nothing moves any more
            "@15 -1 b 2 10 15",
            "@15 -1 c 3 10 15",
        ];
        want.sort();
        for width in [0, 2, 7] {
            let got = bounds(5, 5, input(), width);
            assert_eq!(got, want, "spans of {width}");
        }
    }

    /// A holds a multiset: a row present twice moves with its count, and keeps the rest of it
    /// when one copy leaves; a row's changes in one instant net, whatever their order (d, in
    /// and out at 4, is not in A at 9; b's four changes at 9 leave it as it was).
    #[test]
    fn copies_of_a_row_move_with_their_count() {
        // TUMBLE 5: [0,5) current at 4, [5,10) at 9, [10,15) at 14.
        let input = vec![
            kv(4, "+1 a 1, +1 b 2, +1 a 1, +1 d 4, -1 d 4"),
            kv(9, "-1 a 1, +1 c 3, +1 b 2, -1 b 2, -1 b 2, +1 b 2"),
            kv(14, "-1 a 1, +2 c 3, -1 c 3"),
            kv(15, "-2 c 3, -1 b 2"),
        ];
        for width in [0, 3] {
            assert_eq!(
                bounds(5, 5, input.clone(), width),
                [
                    "@14 +1 b 2 10 15",
                    "@14 +2 c 3 10 15",
                    "@14 -1 a 1 5 10",
                    "@14 -1 b 2 5 10",
                    "@14 -1 c 3 5 10",
                    "@15 -1 b 2 10 15",
                    "@15 -2 c 3 10 15",
                    // an instant where the window does not move passes its changes on
                    "@4 +1 a 1 0 5",
                    "@4 +1 a 1 0 5",
                    "@4 +1 b 2 0 5",
                    "@4 +1 d 4 0 5",
                    "@4 -1 d 4 0 5",
                    "@9 +1 a 1 5 10",
                    "@9 +1 b 2 5 10",
                    "@9 +1 c 3 5 10",
                    "@9 -1 b 2 0 5",
                    "@9 -2 a 1 0 5",
                ],
                "spans of {width}"
            );
        }
    }

    #[test]
    fn cumulating_bounds_grow_by_a_step_and_restart_each_period() {
        // CUMULATE step 2, size 4: [0,2) current at 1..2, [0,4) at 3..4, [4,6) at 5..6.
        let input = vec![kv(1, "+1 a 1"), kv(5, "-1 a 1")];
        for width in [0, 3] {
            let mut out = run_spans(
                &mut fed(WindowBounds::cumulate(2, 4, schema()).unwrap(), [input.clone()]),
                width,
            );
            out.sort();
            assert_eq!(
                out,
                ["@1 +1 a 1 0 2", "@3 +1 a 1 0 4", "@3 -1 a 1 0 2", "@5 -1 a 1 0 4"],
                "spans of {width}"
            );
        }
        assert!(WindowBounds::cumulate(2, 5, schema()).is_err());
    }

    #[test]
    fn under_an_istream_that_sees_a_changed_bound_a_move_emits_no_retractions() {
        // CUMULATE step 2, size 4: [0,2) at 1, [0,4) at 3, [4,6) at 5. window_start stays 0
        // from 1 to 3, so an ISTREAM that sees only it needs the retractions there.
        let input = || vec![kv(1, "+1 a 1"), kv(3, "+1 b 2"), kv(5, "-1 a 1, -1 b 2")];
        let run = |seen: [bool; 2]| {
            let op = WindowBounds::cumulate(2, 4, schema()).unwrap().seen_by_istream(seen);
            let mut out = run_spans(&mut fed(op, [input()]), 0);
            out.sort();
            out
        };
        assert_eq!(run([false, true]), ["@1 +1 a 1 0 2", "@3 +1 a 1 0 4", "@3 +1 b 2 0 4"]);
        // At 5 window_start changes too: the retractions there are left out.
        assert_eq!(
            run([true, false]),
            ["@1 +1 a 1 0 2", "@3 +1 a 1 0 4", "@3 +1 b 2 0 4", "@3 -1 a 1 0 2"]
        );
        assert_eq!(
            run([false, false]),
            [
                "@1 +1 a 1 0 2",
                "@3 +1 a 1 0 4",
                "@3 +1 b 2 0 4",
                "@3 -1 a 1 0 2",
                "@5 -1 a 1 0 4",
                "@5 -1 b 2 0 4"
            ]
        );
    }

    #[test]
    fn an_empty_relation_asks_for_no_wakeup() {
        let op = WindowBounds::new(10, 2, schema()).unwrap();
        let mut flow = fed(op, [vec![kv(3, "+1 a 1"), kv(4, "-1 a 1")]]);
        let out = run_spans(&mut flow, 0);
        // HOP 2/10 at 3: window [-6, 4); at 4 the rows are gone, nothing moves after.
        assert_eq!(out, ["@3 +1 a 1 -6 4", "@4 -1 a 1 -6 4"]);
    }

    #[test]
    fn state_round_trips() {
        let mut a = WindowBounds::new(5, 5, schema()).unwrap();
        let ctx = crate::operator::EvalCtx::default();
        let (_, d) = kv(4, "+2 a 1, +1 b 2");
        let step = Step { lo: 4, hi: 4, ctx: &ctx, input_wakeup: None };
        a.eval(&step, vec![d]).unwrap();
        let mut w = StateWriter::new();
        a.save_state(&mut w).unwrap();
        let mut b = WindowBounds::new(5, 5, schema()).unwrap();
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        b.restore_state(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(b.rows, a.rows);
        assert_eq!(b.current, a.current);
        assert_eq!(b.next_wakeup(), Some(9));
    }

    #[test]
    fn state_bytes_follow_the_rows_present() {
        let mut op = WindowBounds::new(5, 5, schema()).unwrap();
        assert_eq!(op.state_bytes(), 0);
        let input = vec![kv(1, "+1 a 1"), kv(2, "+1 b 2, +1 c 3"), kv(3, "-1 a 1, -1 b 2, -1 c 3")];
        let [one, two, end] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert_eq!(end, 0);
    }
}
