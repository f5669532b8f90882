//! Pane aggregation: a stream's elements aggregated pane by pane, under a time window's
//! aggregate (the plan's `PaneAggregate`; why and when the planner puts it there:
//! `weir_plan::panes`).
//!
//! Panes are the spans [O + jP, O + (j+1)P) of timestamps. Delta semantics: the output is a
//! stream; at the pane's last tick L = O + (j+1)P − 1 it inserts, for each group (equal keys,
//! NULLs equal) with an element stamped in the pane, one element: the keys, then each
//! aggregate over the group's elements in the pane, in key order; at every other instant it
//! outputs nothing. A pane whose last tick lies past the end of the time domain is never
//! output (a window never holds its elements either), so its elements are dropped.
//!
//! The input is a stream, so its changes are insertions in time order, and a step holds every
//! element stamped in [lo, hi]: once a step reaches a pane's last tick, the pane is complete.
//! Between steps at most one pane is open (the one holding the last evaluated instant), kept
//! as an insert-only [`Aggregate`] fed as the elements arrive: the work of a pane is done as
//! its elements arrive, and emitting it costs its groups. The operator asks to be woken at the
//! open pane's last tick. That tick is an instant of the plan (what RSTREAM reports at) only if
//! the window above takes the pane in there, where the window without panes would have taken
//! its elements in: where the window current at the tick ends with the pane. Otherwise the
//! window holds the pane's rows until it moves over them (an instant of its own), or never
//! takes them (a pane in the gap of a window whose range is shorter than its slide).
//!
//! State: the open pane's last tick (section `pane_aggregate`, column `open`, NULL when no
//! pane is open) and its groups, as the aggregate's own sections.

use weir_common::{ChangeBatch, Result, Time, WeirError};

use super::Aggregate;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::window_time::TimeBounds;
use crate::route::Placement;
use crate::state::{opt_i64_col, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct PaneAggregate {
    pane: Time,
    offset: Time,
    /// The open pane's groups (insert-only).
    groups: Aggregate,
    /// The last tick of the open pane, if one is open.
    open: Option<Time>,
    /// The window above, if known: a pane's last tick is an instant only where it moves.
    window: Option<TimeBounds>,
    /// Whether an aggregate above merges the output rows per group (see [`Self::merged`]).
    merged: bool,
}

impl PaneAggregate {
    /// Panes of `pane` ticks (at least 1) starting at `offset` plus multiples of `pane`; each
    /// pane's groups computed by `groups`, whose output is this operator's.
    pub fn new(pane: Time, offset: Time, groups: Aggregate) -> Result<Self> {
        if pane < 1 {
            return Err(WeirError::internal(format!("panes of {pane} ticks")));
        }
        Ok(PaneAggregate {
            pane,
            offset: offset.rem_euclid(pane),
            groups: groups.with_append_only(true),
            open: None,
            window: None,
            merged: false,
        })
    }

    /// The operator whose output an aggregate above merges per group: its rows need not hold
    /// a whole group, so on several workers it runs where its input is (no exchange below
    /// it), each worker's rows are the partials of the elements it holds, and only those move
    /// to the group's worker, for the merge: two-phase aggregation. A hot group costs each
    /// worker its share of the elements, and the merge one row per worker and pane.
    pub fn merged(mut self, merged: bool) -> Self {
        self.merged = merged;
        self
    }

    /// The operator under `window`, whose moves are the plan's instants among the panes' last
    /// ticks (see the module docs). Without one, every pane's last tick is an instant.
    pub fn under(mut self, window: TimeBounds) -> Self {
        self.window = Some(window);
        self
    }

    /// The last tick of the pane holding `t`, if it lies in the time domain.
    fn last_tick(&self, t: Time) -> Option<Time> {
        let (p, o) = (self.pane as i128, self.offset as i128);
        let start = p * (t as i128 - o).div_euclid(p) + o;
        Time::try_from(start + p - 1).ok()
    }

    /// Emits the open pane, if any, into `out`.
    fn close(&mut self, out: &mut Vec<ChangeBatch>) -> Result<()> {
        if let Some(last) = self.open.take() {
            out.push(self.groups.drain(last)?);
        }
        Ok(())
    }
}

impl Operator for PaneAggregate {
    /// The step's elements, in time order, feed their panes; each pane is emitted when the
    /// step has reached its last tick (see the module docs).
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let mut out = Vec::new();
        if !d.is_empty() {
            let prepared = self.groups.prepare(&d)?;
            let mut start = 0;
            while start < d.len() {
                let last = self.last_tick(d.times[start]);
                // The run of elements in the same pane (the times are sorted).
                let end = match last {
                    Some(l) => start + d.times[start..].partition_point(|&t| t <= l),
                    None => d.len(),
                };
                if self.open.is_some() && self.open != last {
                    self.close(&mut out)?;
                }
                if last.is_some() {
                    self.groups.absorb(&d, &prepared, start..end)?;
                    self.open = last;
                }
                start = end;
            }
        }
        if self.open.is_some_and(|l| l <= step.hi) {
            self.close(&mut out)?;
        }
        let schema = &self.groups.schema;
        match out.len() {
            0 => Ok(ChangeBatch::empty(schema.clone())),
            1 => Ok(out.pop().unwrap_or_else(|| ChangeBatch::empty(schema.clone()))),
            _ => ChangeBatch::concat(schema, &out),
        }
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.open
    }

    /// The open pane's last tick L if the window current at L ends at L + 1 (it takes the pane
    /// in at L), else none.
    fn next_instant(&self) -> Option<Time> {
        let last = self.open?;
        match self.window {
            Some(w) if w.at(last).1 != last as i128 + 1 => None,
            _ => Some(last),
        }
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A group's elements meet on one worker, as for the aggregate above.
    fn placement(&self, input: usize) -> Result<Placement> {
        if self.merged {
            return Ok(Placement::Local);
        }
        self.groups.placement(input)
    }

    /// The keys are the output's first columns, of the types they were routed by (none when
    /// merged above: the rows stay where their elements were).
    fn output_key_columns(&self) -> Option<Vec<(usize, arrow::datatypes::DataType)>> {
        let types = self.groups.key_codec.types();
        (!types.is_empty() && !self.merged).then(|| types.iter().cloned().enumerate().collect())
    }

    /// The open pane's groups.
    fn state_bytes(&self) -> usize {
        self.groups.state_bytes()
    }

    /// State: see the module docs.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = signature("pane_aggregate", &self.groups.schema, (self.pane, self.offset));
        w.put("pane_aggregate", &sig, 1, vec![("open", opt_i64_col([self.open]))])?;
        self.groups.save_state(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = signature("pane_aggregate", &self.groups.schema, (self.pane, self.offset));
        let s = r.take("pane_aggregate", &sig)?;
        let open = s.opt_i64s("open")?;
        let [open] = open.as_slice() else {
            return Err(crate::state::invalid("pane_aggregate holds one row"));
        };
        self.open = *open;
        self.groups.restore_state(r)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;
    use weir_common::{ChangeBatch, Time};
    use weir_plan::AggFunc;

    use super::PaneAggregate;
    use crate::expr::ScalarExpr;
    use crate::operator::{EvalCtx, Operator, Step};
    use crate::ops::aggregate::{AggSpec, Aggregate};
    use crate::state::{StateReader, StateWriter};

    fn schema(names: &[&str]) -> Arc<Schema> {
        Arc::new(Schema::new(
            names.iter().map(|n| Field::new(*n, DataType::Int64, true)).collect::<Vec<_>>(),
        ))
    }

    /// Elements (k, v) stamped `times`.
    fn elements(rows: &[(i64, i64, Time)]) -> ChangeBatch {
        let k: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
        let v: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
        let data = RecordBatch::try_new(schema(&["k", "v"]), vec![k, v]).unwrap();
        ChangeBatch::new(data, rows.iter().map(|r| r.2).collect(), vec![1; rows.len()])
    }

    /// Panes of 5 offset 1 ([1, 6), [6, 11), ...), grouped by k: COUNT(*), MAX(v).
    fn op() -> PaneAggregate {
        let df = DFSchema::try_from(schema(&["k", "v"]).as_ref().clone()).unwrap();
        let column = |name: &str| ScalarExpr::compile(&col(name), &df).unwrap();
        let aggs = vec![
            AggSpec::plain(AggFunc::CountStar, None, DataType::Null, false),
            AggSpec::plain(AggFunc::Max, Some(column("v")), DataType::Int64, false),
        ];
        let out = schema(&["k", "n", "top"]);
        let groups = Aggregate::new(vec![column("k")], vec![DataType::Int64], aggs, out);
        PaneAggregate::new(5, 6, groups.unwrap()).unwrap()
    }

    /// (time, k, n, top, diff) of each output row.
    fn rows(b: &ChangeBatch) -> Vec<(Time, i64, i64, i64, i64)> {
        let col = |i: usize| {
            b.data.column(i).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
        };
        let (k, n, top) = (col(0), col(1), col(2));
        (0..b.len()).map(|i| (b.times[i], k[i], n[i], top[i], b.diffs[i])).collect()
    }

    fn eval(op: &mut PaneAggregate, lo: Time, hi: Time, d: ChangeBatch) -> ChangeBatch {
        let ctx = EvalCtx::default();
        let step = Step { lo, hi, ctx: &ctx, input_wakeup: None };
        op.eval(&step, vec![d]).unwrap()
    }

    #[test]
    fn a_pane_is_emitted_once_at_its_last_tick_and_not_before() {
        let mut op = op();
        // [1, 6): k=1 twice, k=2 once, over two steps.
        let out = eval(&mut op, 1, 3, elements(&[(2, 7, 1), (1, 3, 2), (1, 9, 3)]));
        assert!(out.is_empty());
        assert_eq!(op.next_wakeup(), Some(5));
        let out = eval(&mut op, 4, 4, elements(&[(1, 4, 4)]));
        assert!(out.is_empty());
        // A step without input at the last tick closes the pane.
        let out = eval(&mut op, 5, 5, elements(&[]));
        assert_eq!(rows(&out), vec![(5, 1, 3, 9, 1), (5, 2, 1, 7, 1)]);
        assert_eq!(op.next_wakeup(), None);
    }

    #[test]
    fn a_span_closes_every_pane_it_passes_in_time_order() {
        let mut op = op();
        // Panes [1, 6), [11, 16) and the open [16, 21); none in [6, 11).
        let out = eval(
            &mut op,
            0,
            17,
            elements(&[(3, 1, 0), (1, 5, 5), (2, 8, 12), (2, 6, 15), (1, 2, 16), (4, 4, 17)]),
        );
        // 0 is in the pane [-4, 1), whose last tick is 0.
        assert_eq!(rows(&out), vec![(0, 3, 1, 1, 1), (5, 1, 1, 5, 1), (15, 2, 2, 8, 1)],);
        assert_eq!(op.next_wakeup(), Some(20));
        // The open pane survives a checkpoint.
        let mut w = StateWriter::new();
        op.save_state(&mut w).unwrap();
        let mut restored = super::tests::op();
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        restored.restore_state(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(restored.next_wakeup(), Some(20));
        let out = eval(&mut restored, 18, 25, elements(&[(1, 7, 18)]));
        assert_eq!(rows(&out), vec![(20, 1, 2, 7, 1), (20, 4, 1, 4, 1)]);
    }

    /// The same elements evaluated instant by instant and in spans of any width give the same
    /// panes at the same ticks.
    #[test]
    fn spans_of_any_width_give_the_instant_by_instant_output() {
        use crate::testing::{fed, kv, kv_schema, run, run_spans};
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let column = |name: &str| ScalarExpr::compile(&col(name), &df).unwrap();
        let make = || {
            let aggs = vec![
                AggSpec::plain(AggFunc::CountStar, None, DataType::Null, false),
                AggSpec::plain(AggFunc::Max, Some(column("v")), DataType::Int64, false),
                AggSpec::plain(AggFunc::Sum, Some(column("v")), DataType::Int64, false),
            ];
            let out = Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("n", DataType::Int64, true),
                Field::new("top", DataType::Int64, true),
                Field::new("total", DataType::Int64, true),
            ]));
            let groups = Aggregate::new(vec![column("k")], vec![DataType::Utf8], aggs, out);
            let op = PaneAggregate::new(3, 1, groups.unwrap()).unwrap();
            let input = vec![
                kv(0, "+1 a 1, +1 b _"),
                kv(1, "+1 a 4"),
                kv(3, "+1 b 2, +1 a 0"),
                kv(4, "+1 c 9"),
                kv(9, "+1 a 5"),
                kv(10, "+1 a 6, +1 _ 7"),
                kv(20, "+1 b 1"),
            ];
            fed(op, [input])
        };
        let expected = run(&mut make());
        assert_eq!(
            expected,
            [
                "@0 +1 a 1 1 1",
                "@0 +1 b 1 _ _",
                "@3 +1 a 2 4 4",
                "@3 +1 b 1 2 2",
                "@6 +1 c 1 9 9",
                "@9 +1 a 1 5 5",
                "@12 +1 _ 1 7 7",
                "@12 +1 a 1 6 6",
                "@21 +1 b 1 1 1",
            ]
        );
        // The harness renders a step's rows sorted as text: order them by instant.
        let by_instant = |mut lines: Vec<String>| {
            let at = |l: &String| l[1..].split(' ').next().and_then(|t| t.parse::<i64>().ok());
            lines.sort_by(|a, b| at(a).cmp(&at(b)).then_with(|| a.cmp(b)));
            lines
        };
        for width in [1, 2, 5, 11, 100] {
            assert_eq!(by_instant(run_spans(&mut make(), width)), expected, "spans of {width}");
        }
    }

    #[test]
    fn a_pane_is_emitted_in_key_order_past_the_keys_first_bytes() {
        use arrow::array::StringArray;
        // Keys sharing their first 20 bytes, so their order is decided past the 16 bytes of
        // the prefix the sort compares first.
        let fields =
            vec![Field::new("k", DataType::Utf8, true), Field::new("v", DataType::Int64, true)];
        let input = Arc::new(Schema::new(fields));
        let df = DFSchema::try_from(input.as_ref().clone()).unwrap();
        let column = |name: &str| ScalarExpr::compile(&col(name), &df).unwrap();
        let aggs = vec![AggSpec::plain(AggFunc::CountStar, None, DataType::Null, false)];
        let out = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let groups = Aggregate::new(vec![column("k")], vec![DataType::Utf8], aggs, out);
        let mut op = PaneAggregate::new(5, 0, groups.unwrap()).unwrap();
        let common = "channel-of-twenty-by";
        let keys: Vec<String> =
            ["zz", "b", "a", "zz", "ab", "", "b"].iter().map(|s| format!("{common}{s}")).collect();
        let k: ArrayRef = Arc::new(StringArray::from_iter_values(&keys));
        let v: ArrayRef = Arc::new(Int64Array::from_iter_values(0..keys.len() as i64));
        let data = RecordBatch::try_new(input, vec![k, v]).unwrap();
        let n = keys.len();
        let d = ChangeBatch::new(data, (0..n as Time).map(|i| i / 2).collect(), vec![1; n]);
        let out = eval(&mut op, 0, 4, d);
        let k = out.data.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let emitted: Vec<&str> = k.iter().map(|s| &s.unwrap()[common.len()..]).collect();
        assert_eq!(emitted, ["", "a", "ab", "b", "zz"]);
        let counts = out.data.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(counts.values().to_vec(), [1, 1, 1, 2, 2]);
    }

    #[test]
    fn panes_past_the_end_of_time_are_dropped() {
        let mut op = op();
        // The pane holding Time::MAX − 1 ends past Time::MAX (offset 1, panes of 5).
        let top = Time::MAX - 1;
        assert!(op.last_tick(top).is_none());
        let out = eval(&mut op, top, top, elements(&[(1, 1, top)]));
        assert!(out.is_empty());
        assert_eq!(op.next_wakeup(), None);
    }
}
