//! `ISTREAM` of an aggregate per TUMBLE/HOP/CUMULATE window, as one operator that emits each
//! window's groups once, when it closes.
//!
//! After [`crate::lift_window_bounds`], [`crate::pre_aggregate_panes`] and
//! [`crate::mark_istream_bounds`], the usual windowed aggregate read as a stream,
//!
//! ```text
//! ISTREAM
//!   Filter / Project / Rename ...
//!     WindowBounds [RANGE T SLIDE S], inserts only (ISTREAM sees window_end)
//!       Project ...                       (optional: the merged aggregates' final form)
//!         Aggregate(group: K, merge aggs)  (none for a tumbling window: panes are groups)
//!           Window [RANGE T SLIDE S]
//!             PaneAggregate (panes of P = gcd(T, S) ticks)
//! ```
//!
//! becomes
//!
//! ```text
//! ISTREAM                                 (over a stream: orders each instant's rows)
//!   Filter / Project / Rename ...         (now over a stream)
//!     Project ..., window_start, window_end (optional, as above, passing the bounds on)
//!       WindowAggregate [RANGE T SLIDE S] group: K, merge aggs
//!         PaneAggregate
//! ```
//!
//! Exact: the aggregate over the window changes only where the window moves, and there the
//! ISTREAM sees a new `window_end` (it grows by S at each move; clamping to the 64-bit range
//! touches only the window ending at 2^63, the last), so no row of the new window can cancel
//! a row of the old one: the ISTREAM emits every row of the window, once, at the move, which
//! is what the window aggregate emits. Filters, projections and renames map rows one by one,
//! over a stream as over a relation's insertions. The ISTREAM is kept over the stream: an
//! ISTREAM of insertions is those insertions, and it gathers each instant's rows on one
//! worker in the order of their encodings, as before, whatever the number of workers.
//!
//! The window aggregate merges a window's pane rows afresh at each move (up to T/P per
//! group), where the plan it replaces adds the entering pane and removes the leaving one; so
//! the rewrite is made only while a window holds at most [`MAX_PANES`] panes (a cumulating
//! window: while its period does). An ISTREAM that sees `window_start` alone keeps the
//! general plan. The argument above holds for `CUMULATE` too: its windows [w, b) end on the
//! step's grid and start at their period's start w, so at each step `window_end` takes a new
//! value.

use std::sync::Arc;

use datafusion_common::{Column, DFSchema};
use datafusion_expr::Expr;
use weir_common::{Result, WeirError};

use crate::plan::{LogicalPlan, WindowSpec, R2S};

/// The most panes a window may hold for the rewrite (see the module docs): a move then merges
/// at most this many pane rows per group, about what the general plan spends per group and
/// move (a pane row in and one out, a retraction and an insertion, and the bounds' copy).
pub const MAX_PANES: i64 = 8;

/// `plan` with every ISTREAM of a windowed aggregate that can be fused rewritten (see the
/// module docs). Run last, on the plan with its relation-to-stream operator.
pub fn fuse_window_aggregates(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    if let LogicalPlan::ToStream { op: R2S::Istream, input } = plan.as_ref() {
        if let Some(fused) = fuse_chain(input)? {
            // The ISTREAM stays, over a stream: it keeps each row with its multiplicity, in the
            // order of their encodings, on one worker, so every worker count gives the order
            // of one.
            return Ok(Arc::new(LogicalPlan::ToStream { op: R2S::Istream, input: fused }));
        }
    }
    Ok(Arc::new(plan.map_inputs(&mut |i| fuse_window_aggregates(i))?))
}

/// The chain of filters, projections and renames over a `WindowBounds` that `ISTREAM` reads,
/// over the window aggregate instead; `None` if it does not fit.
fn fuse_chain(plan: &Arc<LogicalPlan>) -> Result<Option<Arc<LogicalPlan>>> {
    match plan.as_ref() {
        LogicalPlan::WindowBounds {
            spec: spec @ (WindowSpec::RangeSlide { .. } | WindowSpec::Cumulate { .. }),
            input,
            schema,
            istream_sees: [_, true],
        } => fuse_bounds(spec, input, schema),
        LogicalPlan::Filter { input, .. }
        | LogicalPlan::Project { input, .. }
        | LogicalPlan::Rename { input, .. } => {
            let Some(inner) = fuse_chain(input)? else { return Ok(None) };
            Ok(Some(Arc::new(plan.map_inputs(&mut |_| Ok(inner.clone()))?)))
        }
        _ => Ok(None),
    }
}

/// The pane aggregate under `Window [spec]` (`window`), if it is one, with few enough panes
/// per window.
fn panes_under<'a>(window: &'a LogicalPlan, spec: &WindowSpec) -> Option<&'a Arc<LogicalPlan>> {
    let LogicalPlan::Window { spec: w, input, bounds_columns: false, .. } = window else {
        return None;
    };
    let LogicalPlan::PaneAggregate { pane, .. } = input.as_ref() else { return None };
    // The longest window: a sliding window's range, a cumulating window's period.
    let longest = match spec {
        WindowSpec::RangeSlide { range, .. } => *range,
        WindowSpec::Cumulate { size, .. } => *size,
        _ => return None,
    };
    let few = i128::from(longest) <= i128::from(MAX_PANES) * i128::from(*pane);
    (w == spec && *pane > 0 && few).then_some(input)
}

/// `WindowBounds [spec]` over `input`, output `schema`, as a window aggregate (with the
/// projection between them, if any, passing the bounds on).
fn fuse_bounds(
    spec: &WindowSpec,
    input: &Arc<LogicalPlan>,
    schema: &Arc<DFSchema>,
) -> Result<Option<Arc<LogicalPlan>>> {
    // The node under the bounds: a projection of the aggregate (or of the window), or the
    // aggregate (or the window) itself.
    let (project, below) = match input.as_ref() {
        LogicalPlan::Project { exprs, input: below, .. } => (Some(exprs), below),
        _ => (None, input),
    };
    let (merge, panes) = match below.as_ref() {
        LogicalPlan::Aggregate { group, aggs, input: window, .. } => {
            if aggs.iter().any(|a| a.func.is_sketch()) {
                return Ok(None);
            }
            let Some(panes) = panes_under(window, spec) else { return Ok(None) };
            (Some((group.clone(), aggs.clone())), panes)
        }
        window @ LogicalPlan::Window { .. } => {
            let Some(panes) = panes_under(window, spec) else { return Ok(None) };
            (None, panes)
        }
        _ => return Ok(None),
    };
    let Some(project) = project else {
        // The bounds' output is the aggregate's (or the window's) columns, then the bounds.
        return Ok(Some(Arc::new(LogicalPlan::WindowAggregate {
            spec: spec.clone(),
            merge,
            input: panes.clone(),
            schema: schema.clone(),
        })));
    };
    // The aggregate's (or the window's) columns, then the bounds as `WindowBounds` names them.
    let n = schema.fields().len();
    let bounds: Vec<_> = (n
        .checked_sub(2)
        .ok_or_else(|| WeirError::internal("window bounds without their two columns"))?
        ..n)
        .map(|i| {
            let (q, f) = schema.qualified_field(i);
            (q.cloned(), f.clone())
        })
        .collect();
    let mut fields: Vec<_> = below.schema().iter().map(|(q, f)| (q.cloned(), f.clone())).collect();
    fields.extend(bounds.iter().cloned());
    let fused_schema = Arc::new(
        DFSchema::new_with_metadata(fields, Default::default())
            .map_err(|e| WeirError::internal(format!("window aggregate: {e}")))?,
    );
    let fused = Arc::new(LogicalPlan::WindowAggregate {
        spec: spec.clone(),
        merge,
        input: panes.clone(),
        schema: fused_schema,
    });
    let mut exprs = project.clone();
    exprs.extend(bounds.iter().map(|(q, f)| Expr::Column(Column::new(q.clone(), f.name()))));
    Ok(Some(Arc::new(LogicalPlan::Project { exprs, input: fused, schema: schema.clone() })))
}
