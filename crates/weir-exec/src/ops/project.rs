//! Project: π_e1..en.
//!
//! Delta semantics: Δπ(R) = π(ΔR): each changed row maps to one output row with the same diff
//! (bag semantics: no deduplication). Linear and stateless (run by
//! [`crate::ops::linear::Linear`]); expressions run on whole batches.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result};

use crate::expr::ScalarExpr;
use crate::ops::batch_of;
use crate::ops::linear::RowMap;

#[derive(Debug)]
pub struct Project {
    exprs: Vec<ScalarExpr>,
    schema: SchemaRef,
}

impl Project {
    pub fn new(exprs: Vec<ScalarExpr>, schema: SchemaRef) -> Self {
        Project { exprs, schema }
    }
}

impl RowMap for Project {
    fn map(&self, d: ChangeBatch) -> Result<ChangeBatch> {
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let cols = self.exprs.iter().map(|e| e.eval(&d.data)).collect::<Result<Vec<_>>>()?;
        let data = batch_of(&self.schema, cols, d.len())?;
        Ok(ChangeBatch::new(data, d.times, d.diffs))
    }
}
