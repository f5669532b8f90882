//! Linear: the operator shell of every stateless, linear operator (filter, project, rename).
//!
//! Delta semantics: Δf(R) = f(ΔR), where f maps a batch of changes row by row (keeping or
//! dropping a row, or computing new columns from it) and never looks at another instant. Such
//! an f commutes with splitting the changes by instant, so a span is mapped in one call, and
//! the operator keeps no state: it checkpoints only its input. The row mapping is a [`RowMap`];
//! this module holds what every such operator does alike (forwarding evaluation, wake-ups and
//! state to its input).

use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{EvalCtx, Operator};
use crate::state::{StateReader, StateWriter};

/// A row-by-row mapping of changes: the output keeps each kept row's time and diff.
pub trait RowMap: Send + std::fmt::Debug {
    fn map(&self, d: ChangeBatch) -> Result<ChangeBatch>;
}

/// A [`RowMap`] applied to its input's changes. See the module docs.
#[derive(Debug)]
pub struct Linear<M> {
    input: Box<dyn Operator>,
    map: M,
}

impl<M: RowMap> Linear<M> {
    pub fn new(input: Box<dyn Operator>, map: M) -> Self {
        Linear { input, map }
    }
}

impl<M: RowMap> Operator for Linear<M> {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval(t, ctx)?;
        self.map.map(d)
    }

    /// Stateless: saves only its input's state.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        self.input.save_state(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.input.restore_state(r)
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.input.next_wakeup()
    }

    fn span_capable(&self) -> bool {
        self.input.span_capable()
    }

    /// The mapping runs on the whole span's changes at once.
    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval_span(lo, hi, ctx)?;
        self.map.map(d)
    }
}
