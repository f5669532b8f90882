//! The operator interface.
//!
//! Operators are evaluated instant by instant, in increasing order, by the
//! [`crate::QueryRunner`]. At instant τ, [`Operator::eval`] returns the change of the operator's
//! output at τ (every row stamped τ), computed from its inputs' changes at τ and its own state.
//! Between input events, an operator that can change on its own (a window whose contents expire
//! or slide) says when through [`Operator::next_wakeup`]; the runner makes that tick an instant.
//! Operators do not know how they are scheduled and never reach into each other: all traffic is
//! change batches.
//!
//! **Spans.** Evaluating instant by instant costs a walk of the whole tree per instant, which
//! dominates when most instants carry one element. An operator that can say what it outputs
//! over a whole run of instants at once implements [`Operator::eval_span`] and returns true
//! from [`Operator::span_capable`] (only if its inputs are span-capable too). The runner then
//! evaluates every complete instant in one call: the inputs hold every change stamped in
//! [lo, hi], sorted by time, and the output holds every output change at the instants in
//! [lo, hi], each stamped with its instant, sorted by time. The result must be exactly the
//! concatenation of what instant-by-instant evaluation would give: linear operators work on the
//! whole batch, stateful ones walk its runs of equal time in order.

use std::collections::{HashMap, HashSet};

use weir_common::{ChangeBatch, Result, Time};

use crate::state::{StateReader, StateWriter};

/// Input changes at the instant being evaluated, by source name.
#[derive(Debug, Default)]
pub struct EvalCtx {
    pub inputs: HashMap<String, ChangeBatch>,
    /// Sources that have changes or a heartbeat at this instant.
    pub active: HashSet<String>,
}

/// One node of a compiled dataflow.
pub trait Operator: Send + std::fmt::Debug {
    /// The output change at instant `t`. Called once per instant of the query, in increasing `t`.
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch>;

    /// The earliest instant after the last evaluated one at which this subtree's output can
    /// change without new input, if any.
    fn next_wakeup(&self) -> Option<Time>;

    /// Whether this subtree implements [`Operator::eval_span`] (see the module docs).
    fn span_capable(&self) -> bool {
        false
    }

    /// The output changes at every instant in [lo, hi] (`lo` is an instant of the query, the
    /// first one not yet evaluated), given the input changes stamped in [lo, hi] in `ctx`,
    /// sorted by time. Called only if [`Operator::span_capable`].
    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let _ = (lo, hi, ctx);
        Err(weir_common::WeirError::internal("eval_span on an operator that cannot span"))
    }

    /// Writes this subtree's state between instants (see [`crate::state`]): the operator's
    /// own sections, then each input's, in a fixed order. Stateless operators only recurse.
    fn save_state(&self, w: &mut StateWriter) -> Result<()>;

    /// Restores what [`Operator::save_state`] wrote, into an operator freshly compiled from
    /// the same plan: reads the sections back in the same order. Errors (never panics) on
    /// sections that do not fit.
    fn restore_state(&mut self, r: &mut StateReader) -> Result<()>;
}

/// The end (exclusive) of each run of equal times in `times` (which is sorted).
pub fn time_runs(times: &[Time]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut i = 0;
    while i < times.len() {
        let t = times[i];
        let mut end = i + 1;
        while end < times.len() && times[end] == t {
            end += 1;
        }
        ends.push(end);
        i = end;
    }
    ends
}

/// The minimum of optional wake-ups.
pub fn min_wakeup(items: impl IntoIterator<Item = Option<Time>>) -> Option<Time> {
    items.into_iter().flatten().min()
}
