//! Linear: the operator shell of every stateless, linear operator (filter, project, rename).
//!
//! Delta semantics: Δf(R) = f(ΔR), where f maps a batch of changes row by row (keeping or
//! dropping a row, or computing new columns from it) and never looks at another instant. Such
//! an f commutes with splitting the changes by instant, so a span is mapped in one call, and
//! the operator keeps no state and never wakes up on its own. The row mapping is a
//! [`RowMap`]; this module holds what every such operator does alike.

use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{take_inputs, Operator, Step};
use crate::route::Placement;
use crate::state::{StateReader, StateWriter};

/// A row-by-row mapping of changes: the output keeps each kept row's time and diff.
pub trait RowMap: Send + std::fmt::Debug {
    fn map(&self, d: ChangeBatch) -> Result<ChangeBatch>;
}

/// A [`RowMap`] applied to its input's changes. See the module docs.
#[derive(Debug)]
pub struct Linear<M> {
    map: M,
}

impl<M: RowMap> Linear<M> {
    pub fn new(map: M) -> Self {
        Linear { map }
    }
}

impl<M: RowMap> Operator for Linear<M> {
    /// The mapping runs on the step's changes at once, whatever the span.
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        self.map.map(d)
    }

    fn state_bytes(&self) -> usize {
        0
    }

    /// Stateless: saves nothing.
    fn save_state(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore_state(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    /// No state: its changes are nothing.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }

    fn stateless(&self) -> bool {
        true
    }

    /// Row by row: a row can be mapped on any worker.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Local)
    }

    fn keeps_instants(&self) -> bool {
        true
    }
}
