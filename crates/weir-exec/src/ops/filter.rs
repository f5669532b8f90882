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

impl Operator for Filter {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval(t, ctx)?;
        if d.is_empty() {
            return Ok(d);
        }
        let mask = self.predicate.eval_predicate(&d.data)?;
        let keep: Vec<u32> = (0..d.len()).filter(|&i| mask.value(i)).map(|i| i as u32).collect();
        if keep.len() == d.len() {
            return Ok(d);
        }
        d.take(&keep)
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.input.next_wakeup()
    }
}
