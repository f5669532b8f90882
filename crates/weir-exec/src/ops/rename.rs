//! Rename: the same rows under new column names (a view or subquery alias).
//!
//! Delta semantics: identity on changes. Stateless (run by [`crate::ops::linear::Linear`]).

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result};

use crate::ops::batch_of;
use crate::ops::linear::RowMap;

#[derive(Debug)]
pub struct Rename {
    schema: SchemaRef,
}

impl Rename {
    pub fn new(schema: SchemaRef) -> Self {
        Rename { schema }
    }
}

impl RowMap for Rename {
    fn map(&self, d: ChangeBatch) -> Result<ChangeBatch> {
        let data = batch_of(&self.schema, d.data.columns().to_vec(), d.len())?;
        Ok(ChangeBatch::new(data, d.times, d.diffs))
    }
}
