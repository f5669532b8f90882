//! Union all: R ⊎ S.
//!
//! Delta semantics: Δ(R ⊎ S) = ΔR ⊎ ΔS: changes of every input pass through with their diffs.
//! Linear and stateless.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{Operator, Step};
use crate::ops::batch_of;
use crate::route::Placement;

#[derive(Debug)]
pub struct UnionAll {
    schema: SchemaRef,
}

impl UnionAll {
    pub fn new(schema: SchemaRef) -> Self {
        UnionAll { schema }
    }
}

impl Operator for UnionAll {
    /// The inputs' changes concatenated, then stably sorted by time: within an instant, the
    /// first input's rows come first (at one instant, the sort finds them sorted).
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let mut parts = Vec::with_capacity(inputs.len());
        for d in inputs {
            let data = batch_of(&self.schema, d.data.columns().to_vec(), d.len())?;
            parts.push(ChangeBatch::new(data, d.times, d.diffs));
        }
        let schema = parts.first().map(|p| p.schema()).unwrap_or_else(|| self.schema.clone());
        ChangeBatch::concat(&schema, &parts)?.sort_by_time()
    }

    fn state_bytes(&self) -> usize {
        0
    }

    /// Stateless: saves nothing.
    fn save_state(&self, _w: &mut crate::state::StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore_state(&mut self, _r: &mut crate::state::StateReader) -> Result<()> {
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

    /// Each input's rows pass through on the worker that has them.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Local)
    }

    fn keeps_instants(&self) -> bool {
        true
    }
}
