//! Filter: σ_p.
//!
//! Delta semantics: Δσ_p(R) = σ_p(ΔR): an inserted or deleted row passes iff `p` is true on it
//! (NULL counts as false), with its diff unchanged. Linear and stateless.

use weir_common::{ChangeBatch, Result, Time};

use crate::expr::ScalarExpr;
use crate::operator::{EvalCtx, Operator};

#[derive(Debug)]
pub struct Filter {
    input: Box<dyn Operator>,
    predicate: ScalarExpr,
}

impl Filter {
    pub fn new(input: Box<dyn Operator>, predicate: ScalarExpr) -> Self {
        Filter { input, predicate }
    }
}

impl Filter {
    /// The rows of `d` on which the predicate is true.
    fn apply(&self, d: ChangeBatch) -> Result<ChangeBatch> {
        if d.is_empty() {
            return Ok(d);
        }
        let mask = self.predicate.eval_predicate(&d.data)?;
        let kept = mask.true_count();
        if kept == d.len() {
            return Ok(d);
        }
        let data = arrow::compute::filter_record_batch(&d.data, &mask)?;
        let mut times = Vec::with_capacity(kept);
        let mut diffs = Vec::with_capacity(kept);
        for i in 0..d.len() {
            if mask.value(i) {
                times.push(d.times[i]);
                diffs.push(d.diffs[i]);
            }
        }
        Ok(ChangeBatch::new(data, times, diffs))
    }
}

impl Operator for Filter {
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

    /// Linear: the predicate runs on the whole span's changes at once.
    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval_span(lo, hi, ctx)?;
        self.apply(d)
    }
}
