//! Interval joins: rows of a join's state that its time condition rules out for good.
//!
//! In an inner join of two append-only inputs (unbounded windows over streams, and what
//! filters and projects them), each side's rows enter at their elements' event time, so after
//! instant τ is evaluated every row still to come on side X has `X.t > τ`. A conjunct of the
//! join's condition `X.t <= e(Y)` (or `X.t < e(Y)`, or the upper bound of `X.t BETWEEN ...`),
//! with `e` an expression over side Y's columns only, then fails for every X row still to come
//! once τ ≥ e(y): the row y of Y can match nothing more, and leaves the join's state at the
//! end of the step that evaluates instant e(y). Its pairs already emitted stay (the inputs
//! never retract). NEXMark q9's `b.date_time BETWEEN a.date_time AND a.expires` makes a bid
//! leave at its own instant (`a.date_time <= b.date_time`: no auction to come starts before it)
//! and an auction at its `expires`, as Flink's interval join does. A NULL bound never expires.
//! A row that expires by its own instant (by it, for the right side, whose changes at an
//! instant are joined after the left's) finds all its partners when it enters and is never
//! indexed (see `Join::enqueue`).
//!
//! Which conjunct gives which bound is the plan's business ([`weir_plan::interval`]); here the
//! rows waiting to expire are kept per side in time order, (key, row, count) each; they are not
//! checkpointed but rebuilt from the restored index, evaluating `e` on its rows.

use std::collections::BTreeMap;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use weir_common::{Result, Time, WeirError};

use super::rows::DeltaRow;
use super::{Bucket, Index, Join, Key};
use crate::dirty::DirtyKeys;
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::row::{RowBytes, RowCodec};

/// One side's expiry: when its rows can match nothing more, and the rows waiting for it.
#[derive(Debug)]
pub(super) struct Expiry {
    /// e(Y), over the side's columns: its value is the instant a row expires at.
    at: ScalarExpr,
    /// Rows waiting to expire, by instant: (key, row, count) as they entered.
    pub(super) queue: BTreeMap<Time, Vec<(Key, RowBytes, i64)>>,
    /// Whether the queue must be rebuilt from the index (after a restore).
    stale: bool,
}

impl HeapSize for Expiry {
    fn heap_bytes(&self) -> usize {
        self.queue.heap_bytes()
    }
}

impl Expiry {
    pub fn new(at: ScalarExpr) -> Self {
        Expiry { at, queue: BTreeMap::new(), stale: false }
    }

    /// The instant each row of `data` (the side's columns) expires at; None for a NULL bound.
    pub fn instants(&self, data: &RecordBatch) -> Result<Vec<Option<Time>>> {
        let a = self.at.eval_as(data, &DataType::Int64)?;
        let a = a
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("an expiry bound that is not an instant"))?;
        Ok((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect())
    }

    /// A row entered the side's index `count` times; it expires at `at`.
    pub(super) fn enter(&mut self, at: Time, key: &[u8], row: &[u8], count: i64) {
        self.queue.entry(at).or_default().push((Key::from_slice(key), RowBytes::from(row), count));
    }

    /// Removes from `index` the rows expired once instant `hi` is evaluated, noting each as
    /// changed.
    pub(super) fn expire(&mut self, hi: Time, index: &mut Index, dirty: &mut DirtyKeys<Vec<u8>>) {
        while let Some(entry) = self.queue.first_entry() {
            if *entry.key() > hi {
                break;
            }
            for (key, row, count) in entry.remove() {
                Self::leave(index, dirty, &key, &row, count);
            }
        }
    }

    /// Takes `count` copies of `row` (under `key`) out of `index`, noting the change.
    pub(super) fn leave(
        index: &mut Index,
        dirty: &mut DirtyKeys<Vec<u8>>,
        key: &[u8],
        row: &[u8],
        count: i64,
    ) {
        let take = index.get(key).map_or(0, |b| count.min(b.count(row)));
        if take > 0 {
            Join::apply(index, dirty, &[DeltaRow { key: Some(key), row, diff: -take }]);
        }
    }

    /// The queue is to be rebuilt from the index before the next step (after a restore).
    pub fn mark_stale(&mut self) {
        self.stale = true;
        self.queue.clear();
    }

    /// Rebuilds the queue from the rows of `index` (encoded with `codec` over `schema`), if
    /// it is stale.
    pub(super) fn rebuild(
        &mut self,
        index: &Index,
        codec: &RowCodec,
        schema: &SchemaRef,
    ) -> Result<()> {
        if !self.stale {
            return Ok(());
        }
        self.stale = false;
        let rows: Vec<(&[u8], &RowBytes, i64)> = index
            .iter()
            .flat_map(|(k, b): (&Key, &Bucket)| b.iter().map(move |(r, c)| (&k[..], r, c)))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let data = codec.decode_batch(schema, rows.iter().map(|r| &r.1[..]))?;
        for ((key, row, count), at) in rows.iter().zip(self.instants(&data)?) {
            if let Some(at) = at {
                self.enter(at, key, row, *count);
            }
        }
        Ok(())
    }
}
