//! Top-k: `ORDER BY ... [OFFSET s] LIMIT k`, and `ORDER BY` alone.
//!
//! Delta semantics: with a limit, the output relation is the rows ranked s+1 ..= s+k by the
//! sort key (ties broken by the rows' values, so the result is deterministic). At each instant
//! the operator compares the ranked window before and after applying ΔR and emits −r for rows
//! that left it and +r for rows that entered: O(s+k) work per changed instant, plus O(log n)
//! per changed row. With ties (`FETCH FIRST k ROWS WITH TIES`) the window also holds every
//! further row whose sort key equals that of the row ranked s+k, so a row entering above the
//! k-th can push out a whole group of tied rows, and one leaving can bring one in (the work
//! grows with the size of the last tied group). State: every row of the input, ordered by (sort key, row); checkpointed as
//! section `topk` (`key`, `row` Binary, `count` Int64) in that order.
//! Without a limit, the output relation is the input relation: changes pass through, sorted by
//! the key, which is what gives a one-shot `ORDER BY` its order. No state.

use std::collections::BTreeMap;

use arrow::array::ArrayRef;
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::row::{RowBytes, RowCodec};
use crate::state::{binary_col, i64_col, invalid, nonzero, signature, StateReader, StateWriter};

/// One sort key: expression, type and direction.
#[derive(Debug)]
pub struct SortKey {
    pub expr: ScalarExpr,
    pub data_type: DataType,
    pub descending: bool,
    pub nulls_first: bool,
}

/// A row converter whose byte order is `keys`' sort order (directions and NULL placement),
/// or None for no keys.
pub(crate) fn sort_key_converter(keys: &[SortKey]) -> Result<Option<RowConverter>> {
    if keys.is_empty() {
        return Ok(None);
    }
    let fields = keys
        .iter()
        .map(|k| {
            SortField::new_with_options(
                k.data_type.clone(),
                SortOptions { descending: k.descending, nulls_first: k.nulls_first },
            )
        })
        .collect();
    Ok(Some(RowConverter::new(fields)?))
}

#[derive(Debug)]
pub struct TopK {
    keys: Vec<ScalarExpr>,
    key_converter: Option<RowConverter>,
    key_types: Vec<DataType>,
    skip: usize,
    fetch: Option<usize>,
    /// Whether rows tied with the last one of the window on the sort key are in it too.
    with_ties: bool,
    schema: SchemaRef,
    codec: RowCodec,
    rows: BTreeMap<(RowBytes, RowBytes), i64>,
}

impl TopK {
    pub fn new(
        keys: Vec<SortKey>,
        skip: usize,
        fetch: Option<usize>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let key_types: Vec<DataType> = keys.iter().map(|k| k.data_type.clone()).collect();
        let key_converter = sort_key_converter(&keys)?;
        Ok(TopK {
            keys: keys.into_iter().map(|k| k.expr).collect(),
            key_converter,
            key_types,
            skip,
            fetch,
            with_ties: false,
            codec: RowCodec::for_schema(&schema)?,
            schema,
            rows: BTreeMap::new(),
        })
    }

    /// The same top-k keeping (`true`) the rows tied with its last row.
    pub fn with_ties(mut self, with_ties: bool) -> Self {
        self.with_ties = with_ties;
        self
    }

    fn signature(&self) -> String {
        // Without ties, the signature of checkpoints written before ties existed.
        let sig = signature("topk", &self.schema, (&self.key_types, self.skip, self.fetch));
        if self.with_ties {
            format!("{sig} with ties")
        } else {
            sig
        }
    }

    /// (sort key, row) of every change, in input order.
    fn encode(&self, d: &ChangeBatch) -> Result<Vec<(RowBytes, RowBytes)>> {
        let rows = self.codec.encode(d.data.columns(), d.len())?;
        let keys = match &self.key_converter {
            None => None,
            Some(conv) => {
                let cols: Vec<ArrayRef> = self
                    .keys
                    .iter()
                    .zip(&self.key_types)
                    .map(|(k, t)| k.eval_as(&d.data, t))
                    .collect::<Result<_>>()?;
                Some(conv.convert_columns(&cols)?)
            }
        };
        Ok((0..d.len())
            .map(|i| {
                let key: RowBytes = match &keys {
                    Some(k) => k.row(i).data().into(),
                    None => RowBytes::from(&[][..]),
                };
                (key, RowBytes::from(rows.get(i)))
            })
            .collect())
    }

    /// The ranked window skip+1 ..= skip+fetch, with multiplicities.
    fn window(&self) -> Vec<((RowBytes, RowBytes), i64)> {
        let Some(fetch) = self.fetch else { return vec![] };
        let mut to_skip = self.skip as i64;
        let mut left = fetch as i64;
        let mut out: Vec<((RowBytes, RowBytes), i64)> = Vec::new();
        for (k, &n) in &self.rows {
            if left == 0 {
                // Past the k-th row: with ties, the rows of its sort key are in too.
                match out.last() {
                    Some(((last, _), _)) if self.with_ties && *last == k.0 => {
                        out.push((k.clone(), n));
                        continue;
                    }
                    _ => break,
                }
            }
            let mut n = n;
            let skipped = n.min(to_skip);
            to_skip -= skipped;
            n -= skipped;
            let taken = n.min(left);
            if taken > 0 {
                // With ties, the copies of a row past the k-th are tied with it: in too.
                out.push((k.clone(), if self.with_ties { n } else { taken }));
                left -= taken;
            }
        }
        out
    }

    fn emit(&self, rows: Vec<(RowBytes, i64)>, t: Time) -> Result<ChangeBatch> {
        let data = self.codec.decode_batch(&self.schema, rows.iter().map(|(r, _)| &r[..]))?;
        let diffs: Vec<i64> = rows.iter().map(|(_, d)| *d).collect();
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }
}

impl Operator for TopK {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let t = step.instant()?;
        let [d] = take_inputs::<1>(inputs)?;
        if self.fetch.is_none() && self.skip == 0 {
            // ORDER BY alone: the same relation, changes sorted by key (then value).
            if d.is_empty() {
                return Ok(d);
            }
            let mut changes: Vec<((RowBytes, RowBytes), i64)> =
                self.encode(&d)?.into_iter().zip(d.diffs.iter().copied()).collect();
            changes.sort();
            return self.emit(changes.into_iter().map(|((_, r), n)| (r, n)).collect(), t);
        }
        if self.fetch.is_none() {
            return Err(WeirError::plan("OFFSET without LIMIT is not supported yet"));
        }
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let before = self.window();
        for (k, n) in self.encode(&d)?.into_iter().zip(d.diffs.iter().copied()) {
            let c = self.rows.entry(k.clone()).or_insert(0);
            *c += n;
            if *c == 0 {
                self.rows.remove(&k);
            }
        }
        let after = self.window();
        // Multiset difference of two sorted lists.
        let mut net: BTreeMap<(RowBytes, RowBytes), i64> = BTreeMap::new();
        for (k, n) in after {
            *net.entry(k).or_insert(0) += n;
        }
        for (k, n) in before {
            *net.entry(k).or_insert(0) -= n;
        }
        let (mut dels, mut ins): (Vec<_>, Vec<_>) = net
            .into_iter()
            .filter(|(_, n)| *n != 0)
            .map(|((_, r), n)| (r, n))
            .partition(|(_, n)| *n < 0);
        dels.append(&mut ins);
        self.emit(dels, t)
    }

    /// Every row of the input relation, by sort key.
    fn state_bytes(&self) -> usize {
        self.rows.heap_bytes()
    }

    /// State: section `topk`, every input row with its sort key (`key`, `row` Binary,
    /// `count` Int64), in rank order.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        w.put(
            "topk",
            &self.signature(),
            self.rows.len(),
            vec![
                ("key", binary_col(self.rows.keys().map(|(k, _)| &k[..]))),
                ("row", binary_col(self.rows.keys().map(|(_, r)| &r[..]))),
                ("count", i64_col(self.rows.values().copied())),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("topk", &self.signature())?;
        let (keys, rows, counts) = (s.binary("key")?, s.binary("row")?, s.i64s("count")?);
        self.rows.clear();
        for ((k, row), c) in keys.into_iter().zip(rows).zip(counts) {
            let entry = (RowBytes::from(k), RowBytes::from(row));
            if self.rows.insert(entry, nonzero("topk", c)?).is_some() {
                return Err(invalid("section 'topk': a row appears twice"));
            }
        }
        Ok(())
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}

#[cfg(test)]
mod tests {
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{fed, kv, kv_schema, run, Tick};

    fn topk(descending: bool, skip: usize, fetch: Option<usize>, input: Vec<Tick>) -> Vec<String> {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let key = SortKey {
            expr: ScalarExpr::compile(&col("v"), &df).unwrap(),
            data_type: DataType::Int64,
            descending,
            nulls_first: false,
        };
        let op = TopK::new(vec![key], skip, fetch, kv_schema()).unwrap();
        run(&mut fed(op, [input]))
    }

    #[test]
    fn top_two_by_value_descending_follows_deletions() {
        let out = topk(
            true,
            0,
            Some(2),
            vec![kv(1, "+1 a 5, +1 b 9, +1 c 7"), kv(2, "-1 b 9"), kv(3, "+1 d 1")],
        );
        assert_eq!(out, ["@1 +1 b 9", "@1 +1 c 7", "@2 +1 a 5", "@2 -1 b 9"]);
    }

    #[test]
    fn with_ties_keeps_every_copy_of_a_row_tied_with_the_last() {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let top = |fetch, ties| {
            let key = SortKey {
                expr: ScalarExpr::compile(&col("v"), &df).unwrap(),
                data_type: DataType::Int64,
                descending: true,
                nulls_first: false,
            };
            TopK::new(vec![key], 0, Some(fetch), kv_schema()).unwrap().with_ties(ties)
        };
        // b 7 is there three times: the second row of the top 2 is a copy of it, and so are
        // the two after it, tied with it.
        let input = || vec![kv(1, "+1 a 9, +3 b 7, +1 d 5"), kv(2, "-1 b 7")];
        assert_eq!(run(&mut fed(top(2, true), [input()])), ["@1 +1 a 9", "@1 +3 b 7", "@2 -1 b 7"]);
        // Without ties, one copy; and a top 1 with ties does not reach them.
        assert_eq!(run(&mut fed(top(2, false), [input()])), ["@1 +1 a 9", "@1 +1 b 7"]);
        assert_eq!(run(&mut fed(top(1, true), [input()])), ["@1 +1 a 9"]);
    }

    #[test]
    fn with_ties_keeps_the_rows_tied_with_the_last() {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let key = SortKey {
            expr: ScalarExpr::compile(&col("v"), &df).unwrap(),
            data_type: DataType::Int64,
            descending: true,
            nulls_first: false,
        };
        let op = TopK::new(vec![key], 0, Some(2), kv_schema()).unwrap().with_ties(true);
        let input = vec![
            // 9, then 7 twice: both 7s are tied with the second row.
            kv(1, "+1 a 9, +1 b 7, +1 c 7, +1 d 5"),
            // 8 enters second: the 7s leave together.
            kv(2, "+1 e 8"),
            // 9 leaves: 8 is first, the 7s are tied second.
            kv(3, "-1 a 9"),
        ];
        assert_eq!(
            run(&mut fed(op, [input])),
            [
                "@1 +1 a 9",
                "@1 +1 b 7",
                "@1 +1 c 7",
                "@2 +1 e 8",
                "@2 -1 b 7",
                "@2 -1 c 7",
                "@3 +1 b 7",
                "@3 +1 c 7",
                "@3 -1 a 9",
            ]
        );
    }

    #[test]
    fn offset_skips_the_first_ranks() {
        let out = topk(false, 1, Some(1), vec![kv(1, "+1 a 5, +1 b 9, +1 c 7")]);
        assert_eq!(out, ["@1 +1 c 7"]);
    }
}
