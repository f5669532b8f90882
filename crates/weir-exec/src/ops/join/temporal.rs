//! Temporal join: `s JOIN t FOR SYSTEM_TIME AS OF s.ts ON ...` (and `LEFT JOIN`), each element
//! of a stream joined with the version of a relation valid at the element's instant.
//!
//! Delta semantics. The left input L is append-only (a stream read whole: its change at τ is
//! the elements stamped τ, all insertions); the right input R is a relation (a table, whose
//! versions are its contents at each instant, or a stream with a primary key as its latest
//! element per key). With ΔL(τ) the elements stamped τ and R(τ) the right relation after its
//! changes at τ, the output change at τ is
//!
//! Δout(τ) = { (l, r) : l ∈ ΔL(τ), r ∈ R(τ), key(l) = key(r) and θ(l, r) }
//!
//! with multiplicity mult(l) · mult(r), stamped τ; for the outer join, each l ∈ ΔL(τ) with no
//! such r also gives (l, NULL...). A change of R at τ contributes nothing by itself: output
//! already emitted is never retracted, so the result only grows (it is a stream). A version
//! "valid at τ" is the latest change at or before τ, which is what R(τ) holds; an element
//! stamped before every version of its key finds no row (no output, or padding). Rows whose
//! key has a NULL never match. The runner evaluates instants in order and only below the
//! frontier, so when instant τ is evaluated every version at or before τ that can still come
//! (a stream's, by its watermark) has come: an element is held exactly until then.
//!
//! State: R(τ) only, indexed by key (per key, its rows with multiplicities: one row inline,
//! several in a map, as the join's [`Bucket`]); L is not kept. A version older than the
//! current one of its key is never needed again (the instants before the current one are
//! evaluated), so it is dropped when replaced: the state is one row per key of a keyed
//! relation. Checkpointed as section `temporal.index` (`key`, `row` Binary, `count` Int64),
//! sorted by key then row.
//!
//! Steps: a span [lo, hi] walks its instants in order, applying R's changes at τ before
//! joining L's elements at τ, so a span gives what its instants give one by one.

use arrow::array::{Array, UInt32Array};
use arrow::datatypes::SchemaRef;
use datafusion_common::HashMap;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use super::bucket::Bucket;
use super::rows::{encode_keys, side_columns};
use super::{JoinSide, Key};
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::route::{KeyRoute, Placement};
use crate::row::{RowBytes, RowCodec};
use crate::state::{binary_col, i64_col, invalid, nonzero, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct TemporalJoin {
    outer: bool,
    left: JoinSide,
    right: JoinSide,
    key_codec: RowCodec,
    filter: Option<ScalarExpr>,
    schema: SchemaRef,
    /// R now: per key, its rows and their multiplicities (one row inline: a keyed relation's
    /// case).
    index: HashMap<Key, Bucket>,
}

/// A candidate output row: a left row (by its place in the step's changes) with a right row
/// (a copy of the version it met, or padding), and its diff.
struct Pair {
    left: usize,
    right: Option<RowBytes>,
    diff: i64,
}

impl TemporalJoin {
    pub fn new(
        outer: bool,
        left: JoinSide,
        right: JoinSide,
        key_codec: RowCodec,
        filter: Option<ScalarExpr>,
        schema: SchemaRef,
    ) -> Self {
        TemporalJoin { outer, left, right, key_codec, filter, schema, index: HashMap::new() }
    }

    /// Each row's encoded key, `None` where a key column is NULL.
    fn keys(&self, side: &JoinSide, d: &ChangeBatch) -> Result<Vec<Option<Key>>> {
        let (keys, null_key) = encode_keys(side, &self.key_codec, d, false)?;
        Ok(null_key
            .iter()
            .enumerate()
            .map(|(i, &null)| (!null).then(|| Key::from_slice(keys.get(i))))
            .collect())
    }

    /// Applies one change of R to the index.
    fn apply(&mut self, key: Key, row: &[u8], diff: i64) {
        if diff == 0 {
            return;
        }
        match self.index.get_mut(&key) {
            Some(rows) => {
                if rows.add(row, diff) {
                    self.index.remove(&key);
                }
            }
            None => {
                self.index.insert(key, Bucket::One(RowBytes::from(row), diff));
            }
        }
    }

    /// The output rows of `pairs` (left rows from `l`), stamped with their left rows' times.
    fn output(&self, l: &ChangeBatch, pairs: &[Pair]) -> Result<ChangeBatch> {
        let take = UInt32Array::from_iter_values(pairs.iter().map(|p| p.left as u32));
        let mut cols: Vec<_> = l
            .data
            .columns()
            .iter()
            .map(|c| arrow::compute::take(c.as_ref(), &take, None))
            .collect::<std::result::Result<_, _>>()?;
        let rights: Vec<Option<&[u8]>> = pairs.iter().map(|p| p.right.as_deref()).collect();
        cols.extend(side_columns(&self.right.row_codec, &self.right.schema, &rights)?);
        let data = batch_of(&self.schema, cols, pairs.len())?;
        let times = pairs.iter().map(|p| l.times[p.left]).collect();
        Ok(ChangeBatch::new(data, times, pairs.iter().map(|p| p.diff).collect()))
    }
}

impl Operator for TemporalJoin {
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [l, r] = take_inputs::<2>(inputs)?;
        if l.is_empty() && r.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let lkeys = self.keys(&self.left, &l)?;
        let rkeys = self.keys(&self.right, &r)?;
        let rrows = self.right.row_codec.encode(r.data.columns(), r.len())?;
        // Walk the instants: R's changes at τ, then L's elements at τ.
        let mut candidates: Vec<Pair> = Vec::new();
        let mut ri = 0;
        for (li, lkey) in lkeys.iter().enumerate() {
            let t = l.times[li];
            while ri < r.len() && r.times[ri] <= t {
                if let Some(k) = &rkeys[ri] {
                    self.apply(k.clone(), rrows.get(ri), r.diffs[ri]);
                }
                ri += 1;
            }
            let diff = l.diffs[li];
            if diff < 0 {
                return Err(WeirError::internal(
                    "the stream of a temporal join retracted an element",
                ));
            }
            if let Some(rows) = lkey.as_ref().and_then(|k| self.index.get(k)) {
                for (row, m) in rows.iter() {
                    candidates.push(Pair { left: li, right: Some(row.clone()), diff: diff * m });
                }
            }
        }
        while ri < r.len() {
            if let Some(k) = &rkeys[ri] {
                self.apply(k.clone(), rrows.get(ri), r.diffs[ri]);
            }
            ri += 1;
        }
        // θ over every candidate at once.
        if let Some(theta) = &self.filter {
            if !candidates.is_empty() {
                let keep = theta.eval_predicate(&self.output(&l, &candidates)?.data)?;
                let mut i = 0;
                candidates.retain(|_| {
                    i += 1;
                    keep.is_valid(i - 1) && keep.value(i - 1)
                });
            }
        }
        // Padding for the elements left without a match, in the elements' order.
        let pairs = if self.outer {
            let mut out = Vec::with_capacity(candidates.len());
            let mut next = candidates.into_iter().peekable();
            for li in 0..l.len() {
                let mut matched = false;
                while let Some(p) = next.next_if(|p| p.left == li) {
                    matched = true;
                    out.push(p);
                }
                if !matched {
                    out.push(Pair { left: li, right: None, diff: l.diffs[li] });
                }
            }
            out
        } else {
            candidates
        };
        if pairs.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        self.output(&l, &pairs)
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// Both sides by key: an element meets the versions of its key on one worker. Without
    /// keys, everything on one worker.
    fn placement(&self, input: usize) -> Result<Placement> {
        if self.left.keys.is_empty() {
            return Ok(Placement::Single);
        }
        let side = if input == 0 { &self.left } else { &self.right };
        Ok(Placement::Keyed(KeyRoute::new(side.keys.clone(), self.key_codec.types().to_vec())?))
    }

    /// The versioned side's current rows by key.
    fn state_bytes(&self) -> usize {
        self.index.heap_bytes()
    }

    /// State: section `temporal.index` (see the module docs).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let mut rows: Vec<(&[u8], &RowBytes, i64)> = self
            .index
            .iter()
            .flat_map(|(k, rows)| rows.iter().map(move |(r, c)| (&k[..], r, c)))
            .collect();
        rows.sort_unstable();
        w.put(
            "temporal.index",
            &self.signature(),
            rows.len(),
            vec![
                ("key", binary_col(rows.iter().map(|r| r.0))),
                ("row", binary_col(rows.iter().map(|r| &r.1[..]))),
                ("count", i64_col(rows.iter().map(|r| r.2))),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("temporal.index", &self.signature())?;
        let (keys, rows, counts) = (s.binary("key")?, s.binary("row")?, s.i64s("count")?);
        self.index.clear();
        for ((k, row), c) in keys.into_iter().zip(rows).zip(counts) {
            let c = nonzero("a temporal join's row count", c)?;
            let key = Key::from_slice(k);
            if self.index.get(&key).is_some_and(|rows| rows.iter().any(|(r, _)| **r == *row)) {
                return Err(invalid("a temporal join's row is saved twice"));
            }
            self.apply(key, row, c);
        }
        Ok(())
    }
}

impl TemporalJoin {
    fn signature(&self) -> String {
        signature(
            "temporal",
            &self.schema,
            (
                self.outer,
                format!("{:?}", self.key_codec.types()),
                self.left.schema.fields().len(),
                self.right.schema.fields().len(),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::{col, lit};

    use super::*;
    use crate::state::{StateReader, StateWriter};
    use crate::testing::{fed, kv, kv_schema, run, run_spans, Tick};

    fn op(outer: bool, theta: bool) -> TemporalJoin {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = || JoinSide {
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
        // θ: the version's value is at most 100 (v2 <= 100), over the joined row.
        let both = DFSchema::try_from(schema.as_ref().clone()).unwrap();
        let filter =
            theta.then(|| ScalarExpr::compile(&col("v2").lt_eq(lit(100i64)), &both).unwrap());
        TemporalJoin::new(
            outer,
            side(),
            side(),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            filter,
            schema,
        )
    }

    fn join(outer: bool, left: Vec<Tick>, right: Vec<Tick>) -> Vec<String> {
        run(&mut fed(op(outer, false), [left, right]))
    }

    #[test]
    fn each_element_meets_the_version_at_its_instant() {
        // a=10 from 1, a=20 from 3 (an update: -10 +20), deleted at 5.
        let right = vec![kv(1, "+1 a 10"), kv(3, "-1 a 10, +1 a 20"), kv(5, "-1 a 20")];
        let left = vec![
            kv(0, "+1 a 0"), // before every version: nothing
            kv(2, "+1 a 2"),
            kv(3, "+1 a 3"), // the version changed at 3 counts at 3
            kv(4, "+1 b 4, +1 a 4"),
            kv(6, "+1 a 6"), // deleted
        ];
        assert_eq!(
            join(false, left.clone(), right.clone()),
            ["@2 +1 a 2 a 10", "@3 +1 a 3 a 20", "@4 +1 a 4 a 20"]
        );
        assert_eq!(
            join(true, left, right),
            [
                "@0 +1 a 0 _ _",
                "@2 +1 a 2 a 10",
                "@3 +1 a 3 a 20",
                "@4 +1 a 4 a 20",
                "@4 +1 b 4 _ _",
                "@6 +1 a 6 _ _"
            ]
        );
    }

    #[test]
    fn null_keys_pad_and_duplicates_multiply() {
        let right = vec![kv(1, "+2 a 10, +1 _ 5")];
        let left = vec![kv(2, "+1 a 1, +1 _ 2, +3 a 1")];
        assert_eq!(join(true, left, right), ["@2 +1 _ 2 _ _", "@2 +2 a 1 a 10", "@2 +6 a 1 a 10"]);
    }

    /// A key with several rows (a relation without a primary key) joins each; as rows leave,
    /// the key holds the rest, and one row left is one row again.
    #[test]
    fn a_key_with_several_rows_joins_each() {
        let right = vec![
            kv(1, "+1 a 10, +1 a 20, +1 a 15"),
            kv(2, "-1 a 10, -1 a 15"),
            kv(3, "-1 a 20, +2 a 30"),
            kv(4, "-2 a 30"),
        ];
        let left = vec![kv(1, "+1 a 1"), kv(2, "+1 a 2"), kv(3, "+1 a 3"), kv(4, "+1 a 4")];
        assert_eq!(
            join(false, left, right),
            [
                "@1 +1 a 1 a 10",
                "@1 +1 a 1 a 15",
                "@1 +1 a 1 a 20",
                "@2 +1 a 2 a 20",
                "@3 +2 a 3 a 30"
            ]
        );
    }

    #[test]
    fn theta_decides_matches_and_padding() {
        let right = vec![kv(1, "+1 a 10, +1 a 200, +1 b 300")];
        let left = vec![kv(2, "+1 a 1, +1 b 2")];
        let out = run(&mut fed(op(true, true), [left, right]));
        assert_eq!(out, ["@2 +1 a 1 a 10", "@2 +1 b 2 _ _"]);
    }

    #[test]
    fn spans_give_what_instants_give_and_state_restores() {
        let right = vec![kv(1, "+1 a 10"), kv(3, "-1 a 10, +1 a 20"), kv(4, "+1 b 1")];
        let left = vec![kv(1, "+1 a 1"), kv(2, "+1 a 2"), kv(3, "+1 a 3"), kv(4, "+1 b 4")];
        let one_by_one = join(true, left.clone(), right.clone());
        for width in [1, 2, 10] {
            let mut flow = fed(op(true, false), [left.clone(), right.clone()]);
            assert_eq!(run_spans(&mut flow, width), one_by_one, "width {width}");
        }
        // The index after instant 3, saved and restored into a fresh operator, joins b@4 and a@5
        // as the original does.
        let mut first = op(false, false);
        let ctx = crate::operator::EvalCtx::default();
        let step = |t| Step { lo: t, hi: t, ctx: &ctx, input_wakeup: None };
        for (t, r) in [kv(1, "+1 a 10"), kv(3, "-1 a 10, +1 a 20, +1 b 7")] {
            first.eval(&step(t), vec![ChangeBatch::empty(kv_schema()), r]).unwrap();
        }
        let mut w = StateWriter::new();
        first.save_state(&mut w).unwrap();
        let mut second = op(false, false);
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        second.restore_state(&mut r).unwrap();
        r.finish().unwrap();
        for o in [&mut first, &mut second] {
            let (_, l) = kv(5, "+1 a 5, +1 b 5");
            let out = o.eval(&step(5), vec![l, ChangeBatch::empty(kv_schema())]).unwrap();
            assert_eq!(crate::testing::render(&out), ["@5 +1 a 5 a 20", "@5 +1 b 5 b 7"]);
        }
    }
}
