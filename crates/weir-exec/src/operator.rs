//! The operator interface.
//!
//! Operators are evaluated instant by instant, in increasing order, by the
//! [`crate::QueryRunner`]. At instant τ, [`Operator::eval`] returns the change of the operator's
//! output at τ (every row stamped τ), computed from its inputs' changes at τ and its own state.
//! Between input events, an operator that can change on its own (a window whose contents expire
//! or slide) says when through [`Operator::next_wakeup`]; the runner makes that tick an instant.
//! Operators do not know how they are scheduled and never reach into each other: all traffic is
//! change batches.

use std::collections::{HashMap, HashSet};

use weir_common::{ChangeBatch, Result, Time};

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
}

/// The minimum of optional wake-ups.
pub fn min_wakeup(items: impl IntoIterator<Item = Option<Time>>) -> Option<Time> {
    items.into_iter().flatten().min()
}
