//! Distinct: δ(R), each distinct row once.
//!
//! Delta semantics: with c(r) the multiplicity of r in R, Δδ(R) at τ is +r where c(r) goes from
//! ≤ 0 to > 0 and −r where it goes from > 0 to ≤ 0; rows whose count stays on one side produce
//! nothing. State: the multiplicity of every row currently present, checkpointed as section
//! `distinct` (`row` Binary, `count` Int64, sorted by row); its changes since the last
//! checkpoint as section `distinct.changes`, the same columns for each row whose multiplicity
//! changed, 0 for a row no longer present.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::consolidate::{net_diffs, to_batch};
use crate::dirty::DirtyKeys;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::route::{KeyRoute, Placement};
use crate::row::{RowBytes, RowCodec};
use crate::state::{
    binary_col, i64_col, put_counts, signature, take_counts, StateReader, StateWriter,
};

#[derive(Debug)]
pub struct Distinct {
    schema: SchemaRef,
    codec: RowCodec,
    counts: HashMap<RowBytes, i64>,
    /// The rows whose multiplicity changed since the last checkpoint.
    dirty: DirtyKeys<RowBytes>,
}

impl Distinct {
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let codec = RowCodec::for_schema(&schema)?;
        Ok(Distinct { schema, codec, counts: HashMap::new(), dirty: DirtyKeys::default() })
    }
}

impl Operator for Distinct {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let t = step.instant()?;
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut out = Vec::new();
        for (row, diff) in net_diffs(&self.codec, &d)? {
            if diff == 0 {
                continue;
            }
            let old = self.counts.get(&row).copied().unwrap_or(0);
            let new = old + diff;
            match (old > 0, new > 0) {
                (false, true) => out.push((row.clone(), 1)),
                (true, false) => out.push((row.clone(), -1)),
                _ => {}
            }
            self.dirty.note(&row[..], self.counts.len());
            if new == 0 {
                self.counts.remove(&row);
            } else {
                self.counts.insert(row, new);
            }
        }
        to_batch(&self.codec, &self.schema, out, t)
    }

    /// Each distinct row's multiplicity.
    fn state_bytes(&self) -> usize {
        self.counts.heap_bytes() + self.dirty.heap_bytes()
    }

    /// State: section `distinct`, the multiplicity of every present row (`row`, `count`).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        put_counts(w, "distinct", &signature("distinct", &self.schema, ()), &self.counts)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.counts = take_counts(r, "distinct", &signature("distinct", &self.schema, ()))?;
        Ok(())
    }

    /// Changes: section `distinct.changes` (see the module docs).
    fn save_changes(&mut self, w: &mut StateWriter) -> Result<bool> {
        let Some(rows) = self.dirty.take() else { return Ok(false) };
        let counts: Vec<i64> =
            rows.iter().map(|r| self.counts.get(r).copied().unwrap_or(0)).collect();
        let sig = signature("distinct", &self.schema, ());
        w.put(
            "distinct.changes",
            &sig,
            rows.len(),
            vec![("row", binary_col(rows.iter().map(|r| &r[..]))), ("count", i64_col(counts))],
        )?;
        Ok(true)
    }

    fn restore_changes(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("distinct.changes", &signature("distinct", &self.schema, ()))?;
        for (row, count) in s.binary("row")?.into_iter().zip(s.i64s("count")?) {
            if count == 0 {
                self.counts.remove(row);
            } else {
                self.counts.insert(RowBytes::from(row), count);
            }
        }
        Ok(())
    }

    fn track_changes(&mut self) {
        self.dirty.start();
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    /// Equal rows meet on one worker.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Keyed(KeyRoute::whole_row(&self.schema)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{changes_round_trip, fed, kv, kv_schema, run};

    #[test]
    fn emits_only_when_presence_changes() {
        let input = vec![kv(1, "+1 a 1, +1 a 1"), kv(2, "-1 a 1"), kv(3, "-1 a 1, +1 b 2")];
        let mut flow = fed(Distinct::new(kv_schema()).unwrap(), [input]);
        assert_eq!(run(&mut flow), ["@1 +1 a 1", "@3 +1 b 2", "@3 -1 a 1"]);
    }

    #[test]
    fn changes_restore_the_same_state() {
        let make = || Box::new(Distinct::new(kv_schema()).unwrap()) as Box<dyn Operator>;
        let mut input = vec![];
        for t in 1..=40 {
            // 20 rows, of which some are retracted later and some come back.
            let mut text = vec![format!("+1 k{} {}", t % 20, t % 3)];
            if t > 10 {
                text.push(format!("-1 k{} {}", (t - 10) % 20, (t - 10) % 3));
            }
            input.push(kv(t, &text.join(", ")));
        }
        let more = vec![kv(50, "+1 k1 1, -1 k2 2, +1 new 1")];
        let sizes = changes_round_trip(make, vec![input], vec![more], &[10, 20, 25, 25, 39]);
        assert_eq!(sizes.len(), 5);
        let empty = sizes[2];
        assert!(sizes.iter().all(|s| *s >= empty), "{sizes:?}");
    }
}
