//! Project: π_e1..en.
//!
//! Delta semantics: Δπ(R) = π(ΔR): each changed row maps to one output row with the same diff
//! (bag semantics: no deduplication). Linear and stateless; expressions run on whole batches.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::expr::ScalarExpr;
use crate::operator::{EvalCtx, Operator};
use crate::ops::batch_of;

#[derive(Debug)]
pub struct Project {
    input: Box<dyn Operator>,
    exprs: Vec<ScalarExpr>,
    schema: SchemaRef,
}

impl Project {
    pub fn new(input: Box<dyn Operator>, exprs: Vec<ScalarExpr>, schema: SchemaRef) -> Self {
        Project { input, exprs, schema }
    }
}

impl Operator for Project {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval(t, ctx)?;
        self.apply(d)
    }

    /// Stateless: saves only its input's state.
    fn save_state(&self, w: &mut crate::state::StateWriter) -> Result<()> {
        self.input.save_state(w)
    }

    fn restore_state(&mut self, r: &mut crate::state::StateReader) -> Result<()> {
        self.input.restore_state(r)
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.input.next_wakeup()
    }

    fn span_capable(&self) -> bool {
        self.input.span_capable()
    }

    /// Linear: the expressions run on the whole span's changes at once.
    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval_span(lo, hi, ctx)?;
        self.apply(d)
    }
}

impl Project {
    fn apply(&self, d: ChangeBatch) -> Result<ChangeBatch> {
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let cols = self.exprs.iter().map(|e| e.eval(&d.data)).collect::<Result<Vec<_>>>()?;
        let data = batch_of(&self.schema, cols, d.len())?;
        Ok(ChangeBatch::new(data, d.times, d.diffs))
    }
}
