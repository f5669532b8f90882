//! Filter: σ_p.
//!
//! Delta semantics: Δσ_p(R) = σ_p(ΔR): an inserted or deleted row passes iff `p` is true on it
//! (NULL counts as false), with its diff unchanged. Linear and stateless (run by
//! [`crate::ops::linear::Linear`]).

use weir_common::{ChangeBatch, Result};

use crate::expr::ScalarExpr;
use crate::ops::linear::RowMap;

#[derive(Debug)]
pub struct Filter {
    predicate: ScalarExpr,
}

impl Filter {
    pub fn new(predicate: ScalarExpr) -> Self {
        Filter { predicate }
    }
}

impl RowMap for Filter {
    /// The rows of `d` on which the predicate is true.
    fn map(&self, d: ChangeBatch) -> Result<ChangeBatch> {
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
