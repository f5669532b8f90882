//! Distinct: δ(R), each distinct row once.
//!
//! Delta semantics: with c(r) the multiplicity of r in R, Δδ(R) at τ is +r where c(r) goes from
//! ≤ 0 to > 0 and −r where it goes from > 0 to ≤ 0; rows whose count stays on one side produce
//! nothing. State: the multiplicity of every row currently present, checkpointed as section
//! `distinct` (`row` Binary, `count` Int64, sorted by row).

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::consolidate::{net_diffs, to_batch};
use crate::operator::{EvalCtx, Operator};
use crate::row::{RowBytes, RowCodec};
use crate::state::{put_counts, signature, take_counts, StateReader, StateWriter};

#[derive(Debug)]
pub struct Distinct {
    input: Box<dyn Operator>,
    schema: SchemaRef,
    codec: RowCodec,
    counts: HashMap<RowBytes, i64>,
}

impl Distinct {
    pub fn new(input: Box<dyn Operator>, schema: SchemaRef) -> Result<Self> {
        let codec = RowCodec::for_schema(&schema)?;
        Ok(Distinct { input, schema, codec, counts: HashMap::new() })
    }
}

impl Operator for Distinct {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval(t, ctx)?;
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
            if new == 0 {
                self.counts.remove(&row);
            } else {
                self.counts.insert(row, new);
            }
        }
        to_batch(&self.codec, &self.schema, out, t)
    }

    /// State: section `distinct`, the multiplicity of every present row (`row`, `count`).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        put_counts(w, "distinct", &signature("distinct", &self.schema, ()), &self.counts)?;
        self.input.save_state(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.counts = take_counts(r, "distinct", &signature("distinct", &self.schema, ()))?;
        self.input.restore_state(r)
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.input.next_wakeup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema, run, Feed};

    #[test]
    fn emits_only_when_presence_changes() {
        let input = vec![kv(1, "+1 a 1, +1 a 1"), kv(2, "-1 a 1"), kv(3, "-1 a 1, +1 b 2")];
        let mut op = Distinct::new(Feed::new(kv_schema(), input), kv_schema()).unwrap();
        assert_eq!(run(&mut op), ["@1 +1 a 1", "@3 +1 b 2", "@3 -1 a 1"]);
    }
}
