//! Row-based windows: `[ROWS N]` and `[PARTITION BY k ROWS N]`.
//!
//! At instant τ the window holds, per partition, the N elements with the largest
//! (timestamp, arrival sequence) among those stamped ≤ τ; `[ROWS N]` is one partition.
//!
//! Delta semantics: each arriving element (in arrival order) is appended to its partition's
//! queue (+e); when the queue exceeds N its oldest element is evicted (−e). An element that
//! arrives and is evicted at the same instant yields +e and −e, which consolidation cancels; a
//! replacement by an identical tuple likewise produces no visible change. No wake-ups: the
//! contents change only when elements arrive. State: at most N encoded rows per partition,
//! checkpointed as section `rows_window` (`key`, `row` Binary): each partition's queue oldest
//! first, partitions sorted by key.

use std::collections::{HashMap, VecDeque};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::row::{RowBytes, RowCodec};
use crate::state::{binary_col, invalid, runs, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct RowsWindow {
    by: Vec<usize>,
    rows: u64,
    schema: SchemaRef,
    row_codec: RowCodec,
    key_codec: RowCodec,
    parts: HashMap<RowBytes, VecDeque<RowBytes>>,
}

impl RowsWindow {
    pub fn new(by: Vec<usize>, rows: u64, schema: SchemaRef) -> Result<Self> {
        let row_codec = RowCodec::for_schema(&schema)?;
        let key_codec =
            RowCodec::new(by.iter().map(|&i| schema.field(i).data_type().clone()).collect())?;
        Ok(RowsWindow { by, rows, schema, row_codec, key_codec, parts: HashMap::new() })
    }
}

impl RowsWindow {
    fn signature(&self) -> String {
        signature("rows_window", &self.schema, (&self.by, self.rows))
    }
}

impl Operator for RowsWindow {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let t = step.instant()?;
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let rows = self.row_codec.encode(d.data.columns(), d.len())?;
        let key_cols: Vec<_> = self.by.iter().map(|&i| d.data.column(i).clone()).collect();
        let keys = self.key_codec.encode(&key_cols, d.len())?;
        let mut out: Vec<(RowBytes, i64)> = Vec::new();
        for i in 0..d.len() {
            if d.diffs[i] < 0 {
                return Err(WeirError::internal("ROWS window over a retraction"));
            }
            let part = self.parts.entry(keys.get(i).into()).or_default();
            for _ in 0..d.diffs[i] {
                let row: RowBytes = rows.get(i).into();
                out.push((row.clone(), 1));
                part.push_back(row);
                if part.len() as u64 > self.rows {
                    if let Some(old) = part.pop_front() {
                        out.push((old, -1));
                    }
                }
            }
        }
        self.parts.retain(|_, q| !q.is_empty());
        let data = self.row_codec.decode_batch(&self.schema, out.iter().map(|(r, _)| &r[..]))?;
        let diffs: Vec<i64> = out.iter().map(|(_, d)| *d).collect();
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }

    /// A partition's elements meet on one worker, by the hash of the partition key; `[ROWS N]`
    /// (one partition) runs on worker 0. An instant's elements reach a worker in the order
    /// they arrived (they come from the one worker the instant's rows were split to).
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        if self.by.is_empty() {
            return Ok(crate::route::Placement::Single);
        }
        let key = crate::route::KeyRoute::columns(&self.by, &self.schema)?;
        Ok(crate::route::Placement::Keyed(key))
    }

    /// Each partition's last rows.
    fn state_bytes(&self) -> usize {
        self.parts.heap_bytes()
    }

    /// State: section `rows_window`, every partition's queue (`key`, `row` Binary), oldest
    /// first within a partition, partitions sorted by key.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let mut parts: Vec<(&RowBytes, &VecDeque<RowBytes>)> = self.parts.iter().collect();
        parts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let keys = parts.iter().flat_map(|(k, q)| q.iter().map(|_| &k[..]));
        let rows = parts.iter().flat_map(|(_, q)| q.iter().map(|r| &r[..]));
        let n = parts.iter().map(|(_, q)| q.len()).sum();
        w.put(
            "rows_window",
            &self.signature(),
            n,
            vec![("key", binary_col(keys)), ("row", binary_col(rows))],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("rows_window", &self.signature())?;
        let (keys, rows) = (s.binary("key")?, s.binary("row")?);
        self.parts.clear();
        for (start, end) in runs(&keys) {
            let q: VecDeque<RowBytes> =
                rows[start..end].iter().map(|r| RowBytes::from(*r)).collect();
            if q.len() as u64 > self.rows || self.parts.insert(keys[start].into(), q).is_some() {
                return Err(invalid("section 'rows_window': a partition is too long or repeated"));
            }
        }
        Ok(())
    }

    /// At most N rows per partition.
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
    use crate::testing::{fed, kv, kv_schema, run};

    #[test]
    fn rows_evicts_oldest_by_arrival_within_a_timestamp() {
        let input = vec![kv(1, "+1 a 1, +1 b 1, +1 c 1"), kv(2, "+1 d 2")];
        let mut w = fed(RowsWindow::new(vec![], 2, kv_schema()).unwrap(), [input]);
        // At 1, a arrives then is evicted by c (+a −a cancel downstream); at 2, d evicts b.
        assert_eq!(
            run(&mut w),
            ["@1 +1 a 1", "@1 +1 b 1", "@1 +1 c 1", "@1 -1 a 1", "@2 +1 d 2", "@2 -1 b 1"]
        );
    }

    #[test]
    fn partitions_are_independent() {
        let input = vec![kv(1, "+1 a 1, +1 b 5"), kv(3, "+1 a 3")];
        let mut w = fed(RowsWindow::new(vec![0], 1, kv_schema()).unwrap(), [input]);
        assert_eq!(run(&mut w), ["@1 +1 a 1", "@1 +1 b 5", "@3 +1 a 3", "@3 -1 a 1"]);
    }

    #[test]
    fn rows_zero_is_always_empty() {
        let mut w = fed(RowsWindow::new(vec![], 0, kv_schema()).unwrap(), [vec![kv(1, "+1 a 1")]]);
        assert_eq!(run(&mut w), ["@1 +1 a 1", "@1 -1 a 1"]);
    }
}
