//! The change batch: what flows between operators.
//!
//! A [`ChangeBatch`] is an Arrow [`RecordBatch`] plus, for each row, the instant at which the
//! change happens and its signed multiplicity (`+1` inserted, `-1` deleted, or a larger weight).
//! Rows are sorted by time. A stream is a change batch whose diffs are all positive; a relation
//! is the running sum (integral) of its change batches.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute;
use arrow::datatypes::SchemaRef;

use crate::error::Result;
use crate::time::Time;

/// Rows with their instant and diff. See the module docs.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    pub data: RecordBatch,
    pub times: Vec<Time>,
    pub diffs: Vec<i64>,
}

impl ChangeBatch {
    /// An empty batch of the given schema.
    pub fn empty(schema: SchemaRef) -> Self {
        ChangeBatch { data: RecordBatch::new_empty(schema), times: vec![], diffs: vec![] }
    }

    /// All rows at one instant with one diff.
    pub fn uniform(data: RecordBatch, time: Time, diff: i64) -> Self {
        let n = data.num_rows();
        ChangeBatch { data, times: vec![time; n], diffs: vec![diff; n] }
    }

    pub fn new(data: RecordBatch, times: Vec<Time>, diffs: Vec<i64>) -> Self {
        debug_assert_eq!(data.num_rows(), times.len());
        debug_assert_eq!(data.num_rows(), diffs.len());
        ChangeBatch { data, times, diffs }
    }

    pub fn schema(&self) -> SchemaRef {
        self.data.schema()
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// Concatenates batches of one schema, keeping row order.
    pub fn concat(schema: &SchemaRef, batches: &[ChangeBatch]) -> Result<ChangeBatch> {
        let non_empty: Vec<&ChangeBatch> = batches.iter().filter(|b| !b.is_empty()).collect();
        match non_empty.len() {
            0 => return Ok(ChangeBatch::empty(schema.clone())),
            1 => return Ok(non_empty[0].clone()),
            _ => {}
        }
        let data = compute::concat_batches(schema, non_empty.iter().map(|b| &b.data))?;
        let mut times = Vec::with_capacity(data.num_rows());
        let mut diffs = Vec::with_capacity(data.num_rows());
        for b in non_empty {
            times.extend_from_slice(&b.times);
            diffs.extend_from_slice(&b.diffs);
        }
        Ok(ChangeBatch { data, times, diffs })
    }

    /// Keeps the rows whose index is listed, in that order.
    pub fn take(&self, indices: &[u32]) -> Result<ChangeBatch> {
        let idx = arrow::array::UInt32Array::from(indices.to_vec());
        let columns: Vec<ArrayRef> = self
            .data
            .columns()
            .iter()
            .map(|c| compute::take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<_, _>>()?;
        let data = RecordBatch::try_new_with_options(
            self.data.schema(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(indices.len())),
        )?;
        let times = indices.iter().map(|&i| self.times[i as usize]).collect();
        let diffs = indices.iter().map(|&i| self.diffs[i as usize]).collect();
        Ok(ChangeBatch { data, times, diffs })
    }

    /// The same rows with every diff negated (a retraction of this batch).
    pub fn negate(mut self) -> ChangeBatch {
        for d in &mut self.diffs {
            *d = -*d;
        }
        self
    }

    /// Replaces the data columns, keeping times and diffs (used by projections).
    pub fn with_data(&self, data: RecordBatch) -> ChangeBatch {
        ChangeBatch { data, times: self.times.clone(), diffs: self.diffs.clone() }
    }

    /// Rebuilds the batch with a new schema over the same columns (renaming fields).
    pub fn with_schema(self, schema: SchemaRef) -> Result<ChangeBatch> {
        let n = self.data.num_rows();
        let data = RecordBatch::try_new_with_options(
            schema,
            self.data.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        Ok(ChangeBatch { data, times: self.times, diffs: self.diffs })
    }
}

/// A record batch with `n` rows and no columns (the input of `SELECT 1`-style projections).
pub fn empty_columns(n: usize) -> Result<RecordBatch> {
    let schema = Arc::new(arrow::datatypes::Schema::empty());
    Ok(RecordBatch::try_new_with_options(
        schema,
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )?)
}
