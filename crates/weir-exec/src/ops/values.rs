//! Values: a constant relation (`SELECT 1`, `VALUES (...)`).
//!
//! Delta semantics: at the query's first instant, every row enters (+1); nothing changes after.
//! State: whether the first instant has passed.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{EvalCtx, Operator};

#[derive(Debug)]
pub struct Values {
    rows: Option<arrow::array::RecordBatch>,
    schema: SchemaRef,
}

impl Values {
    /// `rows` is the relation's content, computed when the plan is compiled.
    pub fn new(rows: arrow::array::RecordBatch, schema: SchemaRef) -> Self {
        Values { rows: Some(rows), schema }
    }
}

impl Operator for Values {
    fn eval(&mut self, t: Time, _ctx: &EvalCtx) -> Result<ChangeBatch> {
        match self.rows.take() {
            Some(rows) => Ok(ChangeBatch::uniform(rows, t, 1)),
            None => Ok(ChangeBatch::empty(self.schema.clone())),
        }
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}
