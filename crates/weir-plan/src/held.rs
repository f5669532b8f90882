//! Inner joins that hold a tumbling window of a stream themselves, so that its elements are
//! indexed as they arrive instead of when the window closes.
//!
//! `s [RANGE T SLIDE S]` with T ≤ S (a tumbling window, or one with gaps between windows)
//! replaces its whole contents at each slide: at tick kS + O − 1 the elements stamped in
//! [kS + O − T, kS + O) enter and the window before leaves. A join over it therefore does all
//! of a window's work in the step that closes it: for NEXMark q7's 10-second window, 100 000
//! insertions into the join's index and as many removals, in one step, while the events
//! arrived spread over the ten seconds before. [`hold_join_windows`] moves that work to where
//! the events arrive:
//!
//! ```text
//! Join (inner)                          Join (inner, holds left as [RANGE T SLIDE S])
//!   Filter / Project / Rename ...         Filter / Project / Rename ...
//!     Window [RANGE T SLIDE S]      =>      Rename (the window's column names)
//!       s                                     s
//!   right                                 right
//! ```
//!
//! The join indexes the elements of the window still to come apart from the side's current
//! contents, and at the window's last tick swaps the two: the elements enter, and the
//! window before leaves, without touching either index row by row; the pairs the swap makes
//! and ends are found from the other side's keys when it has fewer (weir-exec's
//! `ops::join::held`). Exact, never a change of meaning: filters, projections and renames map
//! each element on its own and keep its timestamp, so they commute with a time window
//! (volatile expressions excluded: they are left where they are, and so is the window), and
//! the side is the same relation at every instant.
//!
//! The same holds for a `TUMBLE` table function's window (range = slide) directly under the
//! join, whose rows carry `window_start` and `window_end`: each element's bounds are its own
//! window's, so the join appends them to the element as it arrives (Flink's window join, `ON
//! l.window_start = r.window_start AND l.window_end = r.window_end AND ...`).
//!
//! Only inner joins of a relation with such a window are rewritten: outer, semi and anti
//! joins track each row's matches, and a join with a stream on the other side is an interval
//! join, which keeps rows by their own times.

use std::sync::Arc;

use weir_common::Result;

use crate::panes::{chain_onto_stream, window_under};
use crate::plan::{HeldWindow, JoinKind, LogicalPlan, PlanKind, WindowSpec};

/// `plan` with every inner join over a tumbling (or gapped) window of a stream holding the
/// window itself (see the module docs).
pub fn hold_join_windows(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    let node = plan.map_inputs(&mut |i| hold_join_windows(i))?;
    let LogicalPlan::Join {
        kind: JoinKind::Inner,
        left,
        right,
        on,
        filter,
        nulls_equal,
        schema,
        held,
    } = &node
    else {
        return Ok(Arc::new(node));
    };
    if held.iter().any(Option::is_some)
        || left.kind() != PlanKind::Relation
        || right.kind() != PlanKind::Relation
    {
        return Ok(Arc::new(node));
    }
    let (left_side, left_spec) = match holdable(left)? {
        Some((side, spec)) => (side, Some(spec)),
        None => (left.clone(), None),
    };
    let (right_side, right_spec) = match holdable(right)? {
        Some((side, spec)) => (side, Some(spec)),
        None => (right.clone(), None),
    };
    if left_spec.is_none() && right_spec.is_none() {
        return Ok(Arc::new(node));
    }
    Ok(Arc::new(LogicalPlan::Join {
        kind: JoinKind::Inner,
        left: left_side,
        right: right_side,
        on: on.clone(),
        filter: filter.clone(),
        nulls_equal: *nulls_equal,
        schema: schema.clone(),
        held: [left_spec, right_spec],
    }))
}

/// Whether a window replaces its whole contents at each move: `[RANGE T SLIDE S]` with
/// T ≤ S, so that an element is in at most one window.
pub fn replaces_whole(spec: &WindowSpec) -> bool {
    matches!(*spec, WindowSpec::RangeSlide { range, slide, .. } if range > 0 && range <= slide)
}

/// A join input that is such a window of a stream: a TUMBLE table function's window (its
/// rows carrying their bounds) directly, or a CQL window seen through filters, projections and
/// renames. The join's side input is then the stream (the chain moved onto it, its schema
/// unchanged), and the window the side holds.
fn holdable(plan: &Arc<LogicalPlan>) -> Result<Option<(Arc<LogicalPlan>, HeldWindow)>> {
    if let LogicalPlan::Window { spec, input, schema, bounds_columns: true } = plan.as_ref() {
        if !replaces_whole(spec) || input.kind() != PlanKind::Stream {
            return Ok(None);
        }
        let held = HeldWindow { spec: spec.clone(), bounds_columns: true, schema: schema.clone() };
        return Ok(Some((input.clone(), held)));
    }
    let Some((chain, window)) = window_under(plan) else { return Ok(None) };
    let LogicalPlan::Window { spec, input: stream, schema: window_schema, .. } = window.as_ref()
    else {
        return Ok(None);
    };
    if !replaces_whole(spec) {
        return Ok(None);
    }
    let side = chain_onto_stream(&chain, stream, window_schema)?;
    let held = HeldWindow { spec: spec.clone(), bounds_columns: false, schema: plan.schema() };
    Ok(Some((side, held)))
}
