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

/// Slots of [`EMPTY`].
const EMPTY_SLOTS: usize = 64;

thread_local! {
    /// Empty batches built on this thread, each in the slot its schema's address picks (a new
    /// schema replaces the one there). A batch holds its schema, so an address found here is
    /// that schema's, never a freed one's reused. At most [`EMPTY_SLOTS`] schemas and their
    /// empty arrays are kept.
    static EMPTY: std::cell::RefCell<[Option<RecordBatch>; EMPTY_SLOTS]> =
        const { std::cell::RefCell::new([const { None }; EMPTY_SLOTS]) };
}

/// Rows with their instant and diff. See the module docs.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    pub data: RecordBatch,
    pub times: Vec<Time>,
    pub diffs: Vec<i64>,
}

impl ChangeBatch {
    /// An empty batch of the given schema.
    ///
    /// Every operator returns one for each step in which it has nothing to say, and building
    /// one allocates an empty array per column (about a microsecond for a few columns), so the
    /// last ones built on this thread are kept by their schema's address and cloned (see
    /// [`EMPTY`]).
    pub fn empty(schema: SchemaRef) -> Self {
        let data = EMPTY.with(|cache| {
            let mut cache = cache.borrow_mut();
            let slot = (Arc::as_ptr(&schema) as *const u8 as usize >> 4) % EMPTY_SLOTS;
            match &cache[slot] {
                Some(batch) if Arc::ptr_eq(batch.schema_ref(), &schema) => batch.clone(),
                _ => {
                    let batch = RecordBatch::new_empty(schema);
                    cache[slot] = Some(batch.clone());
                    batch
                }
            }
        });
        ChangeBatch { data, times: vec![], diffs: vec![] }
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

    /// The rows stamped before `at`, in their order: a slice when the batch is sorted by time.
    pub fn before(&self, at: Time) -> Result<ChangeBatch> {
        if self.times.is_sorted() {
            return Ok(self.slice(0, self.times.partition_point(|&t| t < at)));
        }
        let idx: Vec<u32> =
            (0..self.len() as u32).filter(|&i| self.times[i as usize] < at).collect();
        self.take(&idx)
    }

    /// Rows `[offset, offset + len)` (zero-copy for the data columns).
    ///
    /// Panics if the range is out of bounds, as slicing does: callers slice ranges they
    /// computed from the batch's own length.
    pub fn slice(&self, offset: usize, len: usize) -> ChangeBatch {
        ChangeBatch {
            data: self.data.slice(offset, len),
            times: self.times[offset..offset + len].to_vec(),
            diffs: self.diffs[offset..offset + len].to_vec(),
        }
    }

    /// The batch stably sorted by time: rows sharing an instant keep their order. A batch
    /// already sorted is returned as it is, without copying.
    pub fn sort_by_time(self) -> Result<ChangeBatch> {
        if self.times.windows(2).all(|w| w[0] <= w[1]) {
            return Ok(self);
        }
        let mut idx: Vec<u32> = (0..self.len() as u32).collect();
        idx.sort_by_key(|&i| self.times[i as usize]);
        self.take(&idx)
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn empty_batches_have_their_own_schema_whatever_was_cached() {
        // More schemas than slots, each asked for twice (the second time from the cache, or
        // rebuilt if another schema took its slot): every batch has the schema asked for.
        let schemas: Vec<_> = (0..200)
            .map(|i| {
                let fields: Vec<Field> = (0..i % 4 + 1)
                    .map(|c| Field::new(format!("c{c}"), DataType::Int64, true))
                    .collect();
                Arc::new(Schema::new(fields))
            })
            .collect();
        for _ in 0..2 {
            for schema in &schemas {
                let b = ChangeBatch::empty(schema.clone());
                assert!(Arc::ptr_eq(&b.data.schema(), schema));
                assert_eq!(b.data.num_columns(), schema.fields().len());
                assert!(b.is_empty() && b.times.is_empty() && b.diffs.is_empty());
            }
        }
        // An equal schema at another address gets a batch of its own.
        let twin = Arc::new(schemas[0].as_ref().clone());
        assert!(Arc::ptr_eq(&ChangeBatch::empty(twin.clone()).data.schema(), &twin));
    }

    #[test]
    fn before_keeps_the_rows_stamped_earlier_sorted_or_not() {
        assert_eq!(batch(&[1, 2, 3], &[1, 2, 2]).before(2).expect("before").times, [1]);
        let b = batch(&[1, 2, 3, 4], &[3, 1, 5, 2]).before(3).expect("before");
        assert_eq!((b.times, b.diffs), (vec![1, 2], vec![20, 40]));
        assert!(batch(&[1], &[7]).before(7).expect("before").is_empty());
    }

    /// Values `v` at `times`, each with diff `10 * v`, so every row can be checked by eye.
    fn batch(values: &[i64], times: &[Time]) -> ChangeBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let col: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        let data = RecordBatch::try_new(schema, vec![col]).expect("batch");
        ChangeBatch::new(data, times.to_vec(), values.iter().map(|v| 10 * v).collect())
    }

    /// `(value, time, diff)` of every row, in order.
    fn rows(b: &ChangeBatch) -> Vec<(i64, Time, i64)> {
        let col = b.data.column(0).as_any().downcast_ref::<Int64Array>().expect("Int64");
        assert_eq!(col.len(), b.len());
        (0..b.len()).map(|i| (col.value(i), b.times[i], b.diffs[i])).collect()
    }

    #[test]
    fn slice_keeps_times_and_diffs_with_their_rows() {
        let b = batch(&[1, 2, 3, 4], &[5, 5, 6, 7]);
        assert_eq!(rows(&b.slice(1, 2)), [(2, 5, 20), (3, 6, 30)]);
        assert!(rows(&b.slice(4, 0)).is_empty());
        assert_eq!(rows(&b.slice(0, 4)), rows(&b));
    }

    #[test]
    fn sort_by_time_is_stable() {
        let b = batch(&[1, 2, 3, 4, 5], &[7, 5, 7, 5, 6]);
        let sorted = b.sort_by_time().expect("sort");
        assert_eq!(rows(&sorted), [(2, 5, 20), (4, 5, 40), (5, 6, 50), (1, 7, 10), (3, 7, 30)]);
    }

    #[test]
    fn sort_by_time_leaves_a_sorted_batch_as_it_is() {
        let b = batch(&[3, 1, 2], &[1, 1, 2]);
        let column = b.data.column(0).clone();
        let sorted = b.sort_by_time().expect("sort");
        assert_eq!(rows(&sorted), [(3, 1, 30), (1, 1, 10), (2, 2, 20)]);
        // The very same arrays: no copy.
        assert!(Arc::ptr_eq(&column, sorted.data.column(0)));
        assert!(rows(&batch(&[], &[]).sort_by_time().expect("sort")).is_empty());
    }
}
