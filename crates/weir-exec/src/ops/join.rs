//! Inner join: R ⋈_θ S, with equality keys and an optional residual predicate.
//!
//! Delta semantics: Δ(R ⋈ S) = ΔR ⋈ S_old + R_new ⋈ ΔS, where S_old is the right input before
//! this instant's changes and R_new the left input after them; each output pair's diff is the
//! product of its inputs' diffs. Rows whose key contains NULL never match (SQL equality).
//! State: per input, an index from key to the multiset of rows with that key, so a change
//! costs work proportional to the rows it matches. A theta join without equality keys keeps one
//! bucket per side and tests the predicate on every pair, as it must.

use std::collections::HashMap;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::expr::ScalarExpr;
use crate::operator::{min_wakeup, EvalCtx, Operator};
use crate::ops::batch_of;
use crate::row::{RowBytes, RowCodec};

type Index = HashMap<RowBytes, HashMap<RowBytes, i64>>;

/// One side of the join.
#[derive(Debug)]
pub struct JoinSide {
    pub input: Box<dyn Operator>,
    pub keys: Vec<ScalarExpr>,
    pub row_codec: RowCodec,
    pub schema: SchemaRef,
}

#[derive(Debug)]
pub struct Join {
    left: JoinSide,
    right: JoinSide,
    key_codec: RowCodec,
    filter: Option<ScalarExpr>,
    schema: SchemaRef,
    left_index: Index,
    right_index: Index,
}

/// A delta side, encoded: (key or None if a key is NULL, row, diff).
struct Encoded {
    rows: Vec<(Option<RowBytes>, RowBytes, i64)>,
}

impl Join {
    pub fn new(
        left: JoinSide,
        right: JoinSide,
        key_codec: RowCodec,
        filter: Option<ScalarExpr>,
        schema: SchemaRef,
    ) -> Self {
        Join {
            left,
            right,
            key_codec,
            filter,
            schema,
            left_index: Index::new(),
            right_index: Index::new(),
        }
    }

    fn encode(side: &JoinSide, key_codec: &RowCodec, d: &ChangeBatch) -> Result<Encoded> {
        if d.is_empty() {
            return Ok(Encoded { rows: vec![] });
        }
        let key_cols: Vec<ArrayRef> =
            side.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
        let keys = key_codec.encode(&key_cols, d.len())?;
        let rows = side.row_codec.encode(d.data.columns(), d.len())?;
        let out = (0..d.len())
            .map(|i| {
                let null_key = key_cols.iter().any(|c| c.is_null(i));
                let key = (!null_key).then(|| RowBytes::from(keys.get(i)));
                (key, RowBytes::from(rows.get(i)), d.diffs[i])
            })
            .collect();
        Ok(Encoded { rows: out })
    }

    fn apply(index: &mut Index, delta: &Encoded) {
        for (key, row, diff) in &delta.rows {
            let Some(key) = key else { continue };
            let bucket = index.entry(key.clone()).or_default();
            let c = bucket.entry(row.clone()).or_insert(0);
            *c += diff;
            if *c == 0 {
                bucket.remove(row);
                if bucket.is_empty() {
                    index.remove(key);
                }
            }
        }
    }
}

impl Operator for Join {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let dl = self.left.input.eval(t, ctx)?;
        let dr = self.right.input.eval(t, ctx)?;
        let el = Self::encode(&self.left, &self.key_codec, &dl)?;
        let er = Self::encode(&self.right, &self.key_codec, &dr)?;
        let mut pairs: Vec<(RowBytes, RowBytes, i64)> = Vec::new();
        // ΔR ⋈ S_old
        for (key, lrow, ld) in &el.rows {
            let Some(bucket) = key.as_ref().and_then(|k| self.right_index.get(k)) else { continue };
            for (rrow, rc) in bucket {
                pairs.push((lrow.clone(), rrow.clone(), ld * rc));
            }
        }
        Self::apply(&mut self.left_index, &el);
        // R_new ⋈ ΔS
        for (key, rrow, rd) in &er.rows {
            let Some(bucket) = key.as_ref().and_then(|k| self.left_index.get(k)) else { continue };
            for (lrow, lc) in bucket {
                pairs.push((lrow.clone(), rrow.clone(), lc * rd));
            }
        }
        Self::apply(&mut self.right_index, &er);
        if pairs.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut cols = self.left.row_codec.decode(pairs.iter().map(|p| &p.0[..]))?;
        cols.extend(self.right.row_codec.decode(pairs.iter().map(|p| &p.1[..]))?);
        let data: RecordBatch = batch_of(&self.schema, cols, pairs.len())?;
        let diffs: Vec<i64> = pairs.iter().map(|p| p.2).collect();
        let out = ChangeBatch::new(data, vec![t; diffs.len()], diffs);
        match &self.filter {
            None => Ok(out),
            Some(f) => {
                let mask = f.eval_predicate(&out.data)?;
                let keep: Vec<u32> =
                    (0..out.len()).filter(|&i| mask.value(i)).map(|i| i as u32).collect();
                out.take(&keep)
            }
        }
    }

    fn next_wakeup(&self) -> Option<Time> {
        min_wakeup([self.left.input.next_wakeup(), self.right.input.next_wakeup()])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{kv, kv_schema, run, Feed, Tick};

    fn join(left: Vec<Tick>, right: Vec<Tick>) -> Vec<String> {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = |input| JoinSide {
            input,
            keys: vec![ScalarExpr::compile(&col("k"), &df).unwrap()],
            row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
            schema: kv_schema(),
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new("k2", DataType::Utf8, true),
            Field::new("v2", DataType::Int64, true),
        ]));
        let mut op = Join::new(
            side(Feed::new(kv_schema(), left)),
            side(Feed::new(kv_schema(), right)),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            None,
            schema,
        );
        run(&mut op)
    }

    #[test]
    fn delta_join_counts_each_pair_once() {
        // Both sides change at instant 1: the pair (a1, a10) must appear exactly once.
        let out =
            join(vec![kv(1, "+1 a 1"), kv(3, "-1 a 1")], vec![kv(1, "+1 a 10"), kv(2, "+1 a 20")]);
        assert_eq!(out, ["@1 +1 a 1 a 10", "@2 +1 a 1 a 20", "@3 -1 a 1 a 10", "@3 -1 a 1 a 20"]);
    }

    #[test]
    fn null_keys_never_match() {
        let out = join(vec![kv(1, "+1 _ 1, +1 b 2")], vec![kv(1, "+1 _ 3, +1 b 4")]);
        assert_eq!(out, ["@1 +1 b 2 b 4"]);
    }

    #[test]
    fn multiplicities_multiply() {
        let out = join(vec![kv(1, "+2 a 1")], vec![kv(1, "+3 a 2")]);
        assert_eq!(out, ["@1 +6 a 1 a 2"]);
    }
}
