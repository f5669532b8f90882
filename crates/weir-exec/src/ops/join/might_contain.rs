//! `MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(c) FROM r ...), x)`: each element of an append-only
//! input looked up, once, at its instant, in a counting Bloom filter of a relation's key.
//!
//! Delta semantics. The left input L is append-only (its change at τ is the rows entering at
//! τ, all insertions); the right input R is a relation with one key expression c. With ΔL(τ)
//! the rows entering L at τ and F(τ) the counting Bloom filter ([`CountingBloom`]) of the bag
//! of R(τ)'s non-NULL keys (after R's changes at τ), the output change at τ holds, for each
//! l ∈ ΔL(τ) with its multiplicity, stamped τ:
//!
//! - semi: l, if x(l) is not NULL and F(τ) contains it;
//! - anti: l, if x(l) is not NULL and F(τ) does not contain it;
//! - mark: (l, found), found NULL for a NULL x(l).
//!
//! A change of R gives no output by itself: output already emitted is never retracted, so the
//! result only grows (a stream). F(τ) contains every key of R(τ) (no false negatives) and an
//! absent key with probability at most the error rate while R(τ) holds at most the capacity's
//! distinct keys. The filter's counters are a function of the bag R(τ) alone, so the output
//! depends neither on batching nor on the order of changes within an instant, and all rows
//! meet on one worker (one filter, whatever the worker count). The runner evaluates instants
//! in order and only below the frontier, so an element waits until R's changes at or before its
//! instant are in.
//!
//! State: F only (a byte a counter: about 9.6 bytes a key of capacity at 1 %); L is not kept.
//! Checkpointed as section `might_contain` (one row, `filter` Binary:
//! [`CountingBloom::to_bytes`]).
//!
//! Steps: a span [lo, hi] walks its instants in order, applying R's changes at τ before looking
//! up L's rows at τ, so a span gives what its instants give one by one.

use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{Fraction, Membership};

use super::rows::encode_keys;
use super::JoinSide;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::route::Placement;
use crate::row::RowCodec;
use crate::sketch::counting_bloom::CountingBloom;
use crate::state::{binary_col, invalid, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct MightContain {
    test: Membership,
    capacity: u64,
    error: Fraction,
    left: JoinSide,
    right: JoinSide,
    key_codec: RowCodec,
    schema: SchemaRef,
    filter: CountingBloom,
}

impl MightContain {
    pub fn new(
        test: Membership,
        capacity: u64,
        error: Fraction,
        left: JoinSide,
        right: JoinSide,
        key_codec: RowCodec,
        schema: SchemaRef,
    ) -> Result<Self> {
        let p = error.get();
        if !(capacity > 0 && p > 0.0 && p < 1.0) {
            return Err(WeirError::internal("MIGHT_CONTAIN with a bad capacity or error"));
        }
        if left.keys.len() != 1 || right.keys.len() != 1 {
            return Err(WeirError::internal("MIGHT_CONTAIN looks up one key"));
        }
        let filter = CountingBloom::new(capacity, p);
        Ok(MightContain { test, capacity, error, left, right, key_codec, schema, filter })
    }

    fn signature(&self) -> String {
        signature(
            "might_contain",
            &self.schema,
            (
                format!("{:?}", self.test),
                self.capacity,
                self.error.get().to_bits(),
                format!("{:?}", self.key_codec.types()),
            ),
        )
    }
}

impl Operator for MightContain {
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [l, r] = take_inputs::<2>(inputs)?;
        if l.diffs.iter().any(|d| *d < 0) {
            return Err(WeirError::internal("the input of MIGHT_CONTAIN retracted a row"));
        }
        let (rkeys, rnull) = encode_keys(&self.right, &self.key_codec, &r, false)?;
        let (lkeys, lnull) = encode_keys(&self.left, &self.key_codec, &l, false)?;
        // Walk the instants: R's changes at τ, then L's rows at τ.
        let mut found: Vec<Option<bool>> = Vec::with_capacity(l.len());
        let mut ri = 0;
        let mut apply_until = |t: Option<Time>, filter: &mut CountingBloom| -> Result<()> {
            while ri < r.len() && t.is_none_or(|t| r.times[ri] <= t) {
                if !rnull[ri] {
                    filter.add(rkeys.get(ri), r.diffs[ri])?;
                }
                ri += 1;
            }
            Ok(())
        };
        for (li, (&t, &null)) in l.times.iter().zip(&lnull).enumerate() {
            apply_until(Some(t), &mut self.filter)?;
            found.push((!null).then(|| self.filter.contains(lkeys.get(li))));
        }
        apply_until(None, &mut self.filter)?;
        if l.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        if self.test == Membership::Mark {
            let mut cols = l.data.columns().to_vec();
            cols.push(Arc::new(BooleanArray::from(found)));
            let data = batch_of(&self.schema, cols, l.len())?;
            return Ok(ChangeBatch::new(data, l.times, l.diffs));
        }
        let want = self.test == Membership::Semi;
        let kept: Vec<u32> =
            (0..l.len() as u32).filter(|&i| found[i as usize] == Some(want)).collect();
        if kept.len() == l.len() {
            return Ok(l);
        }
        l.take(&kept)
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// Every row on one worker: one filter, so the same false positives whatever the worker
    /// count.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Single)
    }

    /// The counting filter.
    fn state_bytes(&self) -> usize {
        self.filter.heap_bytes()
    }

    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let bytes = self.filter.to_bytes();
        w.put("might_contain", &self.signature(), 1, vec![("filter", binary_col([&bytes[..]]))])
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("might_contain", &self.signature())?;
        let filters = s.binary("filter")?;
        let [bytes] = filters[..] else {
            return Err(invalid("section 'might_contain': not one filter"));
        };
        self.filter = CountingBloom::from_bytes(self.capacity, self.error.get(), bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::expr::ScalarExpr;
    use crate::operator::EvalCtx;
    use crate::testing::{fed, kv, kv_schema, render, run, run_spans, Tick};

    fn op(test: Membership) -> MightContain {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = || JoinSide {
            keys: vec![ScalarExpr::compile(&col("k"), &df).unwrap()],
            row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
            schema: kv_schema(),
        };
        let schema = match test {
            Membership::Mark => {
                let mut fields = kv_schema().fields().to_vec();
                fields.push(Arc::new(Field::new("mark", DataType::Boolean, true)));
                Arc::new(Schema::new(fields))
            }
            _ => kv_schema(),
        };
        MightContain::new(
            test,
            1_000,
            Fraction::new(0.001).unwrap(),
            side(),
            side(),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            schema,
        )
        .unwrap()
    }

    fn lookups(test: Membership, left: Vec<Tick>, right: Vec<Tick>) -> Vec<String> {
        run(&mut fed(op(test), [left, right]))
    }

    /// The right side: a from 1 (twice), b from 2 to 4, a once removed at 3 (still present),
    /// the last a removed at 5.
    fn right() -> Vec<Tick> {
        vec![
            kv(1, "+2 a 10"),
            kv(2, "+1 b 20"),
            kv(3, "-1 a 10"),
            kv(4, "-1 b 20"),
            kv(5, "-1 a 10"),
        ]
    }

    fn left() -> Vec<Tick> {
        vec![
            kv(0, "+1 a 0"), // before any key: not found
            kv(1, "+1 a 1, +2 b 1"),
            kv(2, "+1 b 2"), // b's insertion at 2 counts at 2
            kv(3, "+1 a 3, +1 _ 3"),
            kv(4, "+1 b 4"), // b removed at 4
            kv(6, "+1 a 6"),
        ]
    }

    #[test]
    fn each_element_is_looked_up_at_its_instant() {
        assert_eq!(
            lookups(Membership::Semi, left(), right()),
            ["@1 +1 a 1", "@2 +1 b 2", "@3 +1 a 3"]
        );
        assert_eq!(
            lookups(Membership::Anti, left(), right()),
            ["@0 +1 a 0", "@1 +2 b 1", "@4 +1 b 4", "@6 +1 a 6"]
        );
        assert_eq!(
            lookups(Membership::Mark, left(), right()),
            [
                "@0 +1 a 0 false",
                "@1 +1 a 1 true",
                "@1 +2 b 1 false",
                "@2 +1 b 2 true",
                "@3 +1 _ 3 _",
                "@3 +1 a 3 true",
                "@4 +1 b 4 false",
                "@6 +1 a 6 false"
            ]
        );
    }

    #[test]
    fn spans_give_what_instants_give_and_state_restores() {
        let one_by_one = lookups(Membership::Mark, left(), right());
        for width in [1, 2, 10] {
            let mut flow = fed(op(Membership::Mark), [left(), right()]);
            assert_eq!(run_spans(&mut flow, width), one_by_one, "width {width}");
        }
        // The filter after instant 3, saved and restored into a fresh operator, answers as the
        // original does.
        let mut first = op(Membership::Semi);
        let ctx = EvalCtx::default();
        let step = |t| Step { lo: t, hi: t, ctx: &ctx, input_wakeup: None };
        for (t, r) in [kv(1, "+2 a 10, +1 c 1"), kv(3, "-1 a 10, -1 c 1")] {
            first.eval(&step(t), vec![ChangeBatch::empty(kv_schema()), r]).unwrap();
        }
        let mut w = StateWriter::new();
        first.save_state(&mut w).unwrap();
        let mut second = op(Membership::Semi);
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        second.restore_state(&mut r).unwrap();
        r.finish().unwrap();
        for o in [&mut first, &mut second] {
            let (_, l) = kv(5, "+1 a 5, +1 c 5");
            let out = o.eval(&step(5), vec![l, ChangeBatch::empty(kv_schema())]).unwrap();
            assert_eq!(render(&out), ["@5 +1 a 5"]);
        }
        // Another capacity does not restore it.
        let mut w = StateWriter::new();
        first.save_state(&mut w).unwrap();
        let mut other = op(Membership::Anti);
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        assert!(other.restore_state(&mut r).is_err());
    }

    #[test]
    fn a_retracted_element_is_an_internal_error() {
        let mut o = op(Membership::Semi);
        let ctx = EvalCtx::default();
        let (_, l) = kv(1, "-1 a 1");
        let step = Step { lo: 1, hi: 1, ctx: &ctx, input_wakeup: None };
        assert!(o.eval(&step, vec![l, ChangeBatch::empty(kv_schema())]).is_err());
    }
}
