//! Rename: the same rows under new column names (a view or subquery alias).
//!
//! Delta semantics: identity on changes. Stateless.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{EvalCtx, Operator};
use crate::ops::batch_of;

#[derive(Debug)]
pub struct Rename {
    input: Box<dyn Operator>,
    schema: SchemaRef,
}

impl Rename {
    pub fn new(input: Box<dyn Operator>, schema: SchemaRef) -> Self {
        Rename { input, schema }
    }
}

impl Operator for Rename {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval(t, ctx)?;
        let data = batch_of(&self.schema, d.data.columns().to_vec(), d.len())?;
        Ok(ChangeBatch::new(data, d.times, d.diffs))
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

    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval_span(lo, hi, ctx)?;
        let data = batch_of(&self.schema, d.data.columns().to_vec(), d.len())?;
        Ok(ChangeBatch::new(data, d.times, d.diffs))
    }
}
