//! The operator interface: what one node of a [`crate::graph::Graph`] does on its own.
//!
//! A compiled query is a flat graph of nodes, inputs before their consumers, owned and driven
//! by a [`crate::graph::Graph`]. An operator never sees another operator: it is handed
//! its inputs' output changes for a *step* and returns its own output changes for it, says
//! when it wants to be woken without input, whether it can evaluate a run of instants at once,
//! and saves and restores its own state. The graph does the rest: the order of evaluation,
//! moving outputs to consumers, the query's wake-up and span capability, and the order of the
//! state's sections.
//!
//! **Steps.** A step is a range [lo, hi] of instants, evaluated in increasing order, each
//! instant exactly once. Evaluated instant by instant, lo = hi = τ: the inputs hold their
//! changes at τ (every row stamped τ) and the operator returns its change at τ, computed from
//! them and its own state. A query whose every operator is [`Operator::span_capable`] is
//! evaluated in spans instead: one step covers every complete instant, the inputs hold every
//! change stamped in [lo, hi], sorted by time, and the output must hold every output change at
//! the instants in [lo, hi], each stamped with its instant, sorted by time, exactly the
//! concatenation of what instant-by-instant evaluation would give. Linear operators work on
//! the whole batch; stateful ones walk its runs of equal time in order. A step of one instant
//! is the span [τ, τ], so a span-capable operator has one code path for both; an operator that
//! cannot span is only ever given lo = hi.
//!
//! **Wake-ups.** Between input events, an operator that can change on its own (a window whose
//! contents expire or slide) says when through [`Operator::next_wakeup`]; the runner makes that
//! tick an instant.

use std::collections::{HashMap, HashSet};

use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::route::Placement;
use crate::state::{StateReader, StateWriter};

/// Input changes of the step being evaluated, by source name: what leaves (scans) read.
#[derive(Debug, Default)]
pub struct EvalCtx {
    pub inputs: HashMap<String, ChangeBatch>,
    /// Sources that have changes or a heartbeat in this step.
    pub active: HashSet<String>,
}

/// What a node is told about the step it evaluates, besides its inputs' changes.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The first instant of the step (an instant of the query, the first not yet evaluated).
    pub lo: Time,
    /// The last instant of the step; equal to `lo` unless the query runs in spans.
    pub hi: Time,
    /// The source changes and active sources of the step (for leaves).
    pub ctx: &'a EvalCtx,
    /// The earliest wake-up of the nodes below this one (its inputs, theirs, and so on), as it
    /// was before the step: whether the plan below has an instant of its own at `lo`.
    pub input_wakeup: Option<Time>,
}

impl Step<'_> {
    /// The step's instant, for an operator that evaluates one instant at a time; an internal
    /// error if the step is a span (the graph gave a span to an operator that cannot span).
    pub fn instant(&self) -> Result<Time> {
        if self.lo == self.hi {
            Ok(self.lo)
        } else {
            Err(WeirError::internal(format!(
                "a span [{}, {}] given to an operator that evaluates one instant at a time",
                self.lo, self.hi
            )))
        }
    }
}

/// One node of a compiled graph: the operator's own behaviour only (see the module docs).
pub trait Operator: Send + std::fmt::Debug {
    /// The output changes at the instants of `step`, given each input's output changes at
    /// them, in plan input order (none for a leaf). Called once per step, in increasing time;
    /// with `lo < hi` only if [`Operator::span_capable`].
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch>;

    /// The earliest instant after the last evaluated one at which this operator's output can
    /// change without new input, if any.
    fn next_wakeup(&self) -> Option<Time>;

    /// The earliest instant at which this operator wakes that is an instant of the plan it
    /// belongs to, as the semantics define the plan's instants (its sources' elements, its
    /// windows' moves): [`Operator::next_wakeup`], except for an operator that also wakes for
    /// work of its own that no instant of the semantics calls for (a pane aggregate closing a
    /// pane that no window takes in at that tick). RSTREAM reports at these instants
    /// ([`Step::input_wakeup`]).
    fn next_instant(&self) -> Option<Time> {
        self.next_wakeup()
    }

    /// Whether [`Operator::eval`] accepts spans of instants (see the module docs).
    fn span_capable(&self) -> bool {
        false
    }

    /// Whether the operator keeps no state and maps each row on its own, so that evaluating it
    /// again on a prefix of a step's input is harmless (see [`prefix_before_failure`]).
    fn stateless(&self) -> bool {
        false
    }

    /// Where the rows of input `input` must be when the graph runs on several workers (see
    /// [`crate::route`]); for a leaf, input 0 is its source. The default, every row on worker
    /// 0, is right for any operator; an operator that can run in parallel says so.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Single)
    }

    /// With its input routed by key ([`Placement::Keyed`]), the output columns that hold that
    /// key, in key order, each with the type it is hashed as: every output row is then on the
    /// worker its key names, so a consumer keyed by the same columns needs no exchange. None
    /// (the default) if the output does not carry the key so.
    fn output_key_columns(&self) -> Option<Vec<(usize, arrow::datatypes::DataType)>> {
        None
    }

    /// Whether each output row is an input row, its columns in place (more may follow), kept
    /// on the worker it arrived at (a window), so that a key its input rows are placed by
    /// places its output rows too.
    fn passes_rows(&self) -> bool {
        false
    }

    /// Whether each output row at τ comes from input rows at τ alone (a row map, a union, a
    /// scan), so that input split among workers by instant gives output split by instant. An
    /// operator with state that changes its output later (a window's expiry) does not.
    fn keeps_instants(&self) -> bool {
        false
    }

    /// An estimate of the bytes this operator's state holds between steps (see
    /// [`crate::heap`]): what `SHOW QUERIES` reports and the engine's memory limit is checked
    /// against. Costs a walk of the state; stateless operators hold none.
    fn state_bytes(&self) -> usize;

    /// Writes this operator's own state between steps, as sections (see [`crate::state`]).
    /// Stateless operators write nothing.
    fn save_state(&self, w: &mut StateWriter) -> Result<()>;

    /// Restores what [`Operator::save_state`] wrote, into an operator freshly compiled from
    /// the same plan: reads the same sections back in the same order. Errors (never panics)
    /// on sections that do not fit.
    fn restore_state(&mut self, r: &mut StateReader) -> Result<()>;

    /// Incremental checkpoints (see [`crate::dirty`]): writes what changed in the state since
    /// it was last checkpointed (whole or in changes), as sections, and starts recording
    /// again; returns false, having written nothing, if it cannot say (it does not record
    /// changes, or recorded too many): the query is then checkpointed whole.
    ///
    /// The default writes the whole state if [`Operator::saves_whole_as_changes`], else
    /// nothing (and returns false).
    fn save_changes(&mut self, w: &mut StateWriter) -> Result<bool> {
        if self.saves_whole_as_changes() {
            self.save_state(w)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Applies what [`Operator::save_changes`] wrote to the state as it was at the previous
    /// checkpoint. Errors (never panics) on sections that do not fit.
    fn restore_changes(&mut self, r: &mut StateReader) -> Result<()> {
        if self.saves_whole_as_changes() {
            return self.restore_state(r);
        }
        Err(WeirError::internal("changes restored into an operator that never saves them"))
    }

    /// Whether the operator's changes since a checkpoint are best written as its whole state:
    /// it holds none, or little (what its window bounds), and its
    /// [`Operator::restore_state`] replaces whatever state it holds. Then an incremental
    /// checkpoint writes its whole state each time, and the rest of its query its changes.
    fn saves_whole_as_changes(&self) -> bool {
        false
    }

    /// The state as it is now was checkpointed whole (or restored): an operator that can
    /// save its changes starts recording them.
    fn track_changes(&mut self) {}
}

/// The changes of a node's `N` inputs, or an internal error if the graph gave it another
/// number of inputs.
pub fn take_inputs<const N: usize>(inputs: Vec<ChangeBatch>) -> Result<[ChangeBatch; N]> {
    let n = inputs.len();
    inputs
        .try_into()
        .map_err(|_| WeirError::internal(format!("an operator of {N} inputs was given {n}")))
}

/// After a stateless operator failed on the span of `step`, given a copy of the inputs it
/// failed on: the first instant at which it fails, and its output at the instants before it
/// (what evaluating instant by instant would have delivered before the error). Found by
/// bisection over the inputs' instants, evaluating prefixes of them again; None if the step
/// is one instant, the operator keeps state, or the failure is not in its rows.
pub fn prefix_before_failure(
    op: &mut dyn Operator,
    step: &Step<'_>,
    inputs: &[ChangeBatch],
) -> Option<(Time, ChangeBatch)> {
    if step.lo >= step.hi || !op.stateless() || inputs.iter().any(|b| !b.times.is_sorted()) {
        return None;
    }
    let mut instants: Vec<Time> = inputs.iter().flat_map(|b| b.times.iter().copied()).collect();
    instants.sort_unstable();
    instants.dedup();
    let before = |t: Time| -> Vec<ChangeBatch> {
        inputs.iter().map(|b| b.slice(0, b.times.partition_point(|&x| x < t))).collect()
    };
    // ok(j): the rows before instants[j] map without error; ok(0) holds (no rows) and
    // ok(len) does not (every row: the failed call).
    let (mut good, mut bad) = (0usize, instants.len());
    let mut best: Option<ChangeBatch> = None;
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        match op.eval(step, before(instants[mid])) {
            Ok(out) => {
                good = mid;
                best = Some(out);
            }
            Err(_) => bad = mid,
        }
    }
    let at = *instants.get(good)?;
    let out = match best {
        Some(out) => out,
        None => op.eval(step, before(at)).ok()?,
    };
    Some((at, out))
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
