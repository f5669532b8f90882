//! Approximate de-duplication: `s [DEDUPLICATE [BY k, ...] [CAPACITY n] [ERROR p]]`.
//!
//! R(τ) holds the elements of S stamped ≤ τ whose key (the `BY` columns, the whole row
//! without `BY`) had not been seen before them, as judged by a rotating Bloom filter
//! ([`Bloom`]): a key seen before is always dropped while remembered (for at least n and at most
//! 2n new keys after it), a new key is dropped by mistake with probability at most p.
//!
//! Delta semantics: rows only enter. At each instant the instant's elements are taken in the
//! order of their (key, row) encodings (so neither arrival order nor batching matters): each
//! whose key the filter has not seen gives +e once (however many times it occurs) and enters the
//! filter; the others give nothing. No wake-ups. The input only inserts (a stream); a
//! retraction is an internal error. All elements meet on one worker, so the filter, and the
//! output, do not depend on the worker count. State: the filter, checkpointed as the section
//! `dedup_window` (one row, `filter` Binary: [`Bloom::to_bytes`]).

use arrow::array::UInt32Array;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::row::RowCodec;
use crate::sketch::bloom::Bloom;
use crate::state::{binary_col, invalid, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct DedupWindow {
    by: Vec<usize>,
    capacity: u64,
    error: f64,
    schema: SchemaRef,
    row_codec: RowCodec,
    key_codec: RowCodec,
    filter: Bloom,
}

impl DedupWindow {
    pub fn new(by: Vec<usize>, capacity: u64, error: f64, schema: SchemaRef) -> Result<Self> {
        if !(capacity > 0 && error > 0.0 && error < 1.0) {
            return Err(WeirError::internal("a DEDUPLICATE window of a bad capacity or error"));
        }
        let row_codec = RowCodec::for_schema(&schema)?;
        let key_codec =
            RowCodec::new(by.iter().map(|&i| schema.field(i).data_type().clone()).collect())?;
        Ok(DedupWindow {
            by,
            capacity,
            error,
            schema,
            row_codec,
            key_codec,
            filter: Bloom::new(capacity, error),
        })
    }

    fn signature(&self) -> String {
        signature("dedup_window", &self.schema, (&self.by, self.capacity, self.error.to_bits()))
    }
}

impl Operator for DedupWindow {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let t = step.instant()?;
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        if d.diffs.iter().any(|x| *x < 0) {
            return Err(WeirError::internal("a DEDUPLICATE window was given a retraction"));
        }
        let rows = self.row_codec.encode(d.data.columns(), d.len())?;
        let key_cols: Vec<_> = self.by.iter().map(|&i| d.data.column(i).clone()).collect();
        let keys = self.key_codec.encode(&key_cols, d.len())?;
        let key = |i: usize| if self.by.is_empty() { rows.get(i) } else { keys.get(i) };
        let mut order: Vec<usize> = (0..d.len()).collect();
        order.sort_unstable_by(|&a, &b| key(a).cmp(key(b)).then(rows.get(a).cmp(rows.get(b))));
        let mut kept: Vec<u32> = Vec::new();
        for i in order {
            let k = if self.by.is_empty() { rows.get(i) } else { keys.get(i) };
            if !self.filter.check_and_insert(k) {
                kept.push(i as u32);
            }
        }
        let n = kept.len();
        let data = arrow::compute::take_record_batch(&d.data, &UInt32Array::from(kept))?;
        Ok(ChangeBatch::new(data, vec![t; n], vec![1; n]))
    }

    /// Every element on one worker: one filter, whatever the worker count.
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        Ok(crate::route::Placement::Single)
    }

    /// The filter: one generation, two once the first is full.
    fn state_bytes(&self) -> usize {
        self.filter.heap_bytes()
    }

    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let bytes = self.filter.to_bytes();
        w.put("dedup_window", &self.signature(), 1, vec![("filter", binary_col([&bytes[..]]))])
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("dedup_window", &self.signature())?;
        let filters = s.binary("filter")?;
        let [bytes] = filters[..] else {
            return Err(invalid("section 'dedup_window': not one filter"));
        };
        self.filter = Bloom::from_bytes(self.capacity, self.error, bytes)?;
        Ok(())
    }

    /// One filter of the window's capacity.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{drive, fed, kv, kv_schema, run};

    #[test]
    fn duplicates_are_dropped_whatever_their_instant() {
        let input = vec![kv(1, "+1 a 1, +1 b 1, +2 a 1"), kv(2, "+1 a 1, +1 a 2"), kv(4, "+1 b 1")];
        let mut w = fed(DedupWindow::new(vec![], 100, 0.01, kv_schema()).unwrap(), [input]);
        assert_eq!(run(&mut w), ["@1 +1 a 1", "@1 +1 b 1", "@2 +1 a 2"]);
    }

    #[test]
    fn by_a_key_the_smallest_row_of_an_instant_is_kept() {
        let input = vec![kv(1, "+1 a 5, +1 a 3, +1 b 9"), kv(2, "+1 b 1, +1 c 0")];
        let mut w = fed(DedupWindow::new(vec![0], 100, 0.01, kv_schema()).unwrap(), [input]);
        assert_eq!(run(&mut w), ["@1 +1 a 3", "@1 +1 b 9", "@2 +1 c 0"]);
    }

    /// The filter holds one generation, a second once the first is full, and never more,
    /// however many keys come.
    #[test]
    fn state_bytes_are_two_generations_at_most() {
        let mut op = DedupWindow::new(vec![], 4, 0.01, kv_schema()).unwrap();
        let one = op.state_bytes();
        assert!(one > 0);
        let ticks: Vec<_> = (0..30).map(|t| kv(t, &format!("+1 k{t} {t}"))).collect();
        let mut feed = ticks.into_iter().peekable();
        drive(&mut op, &mut feed, Some(6));
        assert_eq!(op.state_bytes(), 2 * one);
        drive(&mut op, &mut feed, None);
        assert_eq!(op.state_bytes(), 2 * one);
    }
}
