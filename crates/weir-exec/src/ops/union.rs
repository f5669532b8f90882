//! Union all: R ⊎ S.
//!
//! Delta semantics: Δ(R ⊎ S) = ΔR ⊎ ΔS: changes of every input pass through with their diffs.
//! Linear and stateless.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{min_wakeup, EvalCtx, Operator};
use crate::ops::batch_of;

#[derive(Debug)]
pub struct UnionAll {
    inputs: Vec<Box<dyn Operator>>,
    schema: SchemaRef,
}

impl UnionAll {
    pub fn new(inputs: Vec<Box<dyn Operator>>, schema: SchemaRef) -> Self {
        UnionAll { inputs, schema }
    }
}

impl Operator for UnionAll {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let mut parts = Vec::with_capacity(self.inputs.len());
        for input in &mut self.inputs {
            let d = input.eval(t, ctx)?;
            let data = batch_of(&self.schema, d.data.columns().to_vec(), d.len())?;
            parts.push(ChangeBatch::new(data, d.times, d.diffs));
        }
        let schema = parts.first().map(|p| p.schema()).unwrap_or_else(|| self.schema.clone());
        ChangeBatch::concat(&schema, &parts)
    }

    /// Stateless: saves its inputs' states, in order.
    fn save_state(&self, w: &mut crate::state::StateWriter) -> Result<()> {
        self.inputs.iter().try_for_each(|i| i.save_state(w))
    }

    fn restore_state(&mut self, r: &mut crate::state::StateReader) -> Result<()> {
        self.inputs.iter_mut().try_for_each(|i| i.restore_state(r))
    }

    fn next_wakeup(&self) -> Option<Time> {
        min_wakeup(self.inputs.iter().map(|i| i.next_wakeup()))
    }

    fn span_capable(&self) -> bool {
        self.inputs.iter().all(|i| i.span_capable())
    }

    /// The inputs' spans concatenated, then stably sorted by time: within an instant, the
    /// first input's rows come first, as instant by instant.
    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let mut parts = Vec::with_capacity(self.inputs.len());
        for input in &mut self.inputs {
            let d = input.eval_span(lo, hi, ctx)?;
            let data = batch_of(&self.schema, d.data.columns().to_vec(), d.len())?;
            parts.push(ChangeBatch::new(data, d.times, d.diffs));
        }
        let schema = parts.first().map(|p| p.schema()).unwrap_or_else(|| self.schema.clone());
        ChangeBatch::concat(&schema, &parts)?.sort_by_time()
    }
}
