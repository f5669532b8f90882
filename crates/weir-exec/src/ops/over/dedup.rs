//! Deduplication: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY ts ASC|DESC) = 1` over an
//! append-only stream (a stream under `[UNBOUNDED]`) ordered by its event-time column `ts`.
//!
//! Output: the relation of the rank-1 row of each partition (the input row, then its
//! ROW_NUMBER, always 1), the same relation as the full ranking filtered on `= 1`: rows stamped
//! τ arrive at instant τ, instants are evaluated in time order, so a row arriving later never
//! sorts before (ASC) the rows already seen, and always sorts before (DESC) them.
//!
//! Delta semantics, per instant τ and partition with new rows: the candidate is the smallest
//! new row by (order key, row), the ranking's tiebreak among rows stamped with the same τ.
//! - keep first (ASC): if the partition has never been seen, +(candidate, 1); otherwise
//!   nothing (later rows are dropped). The output only grows (append-only: a plan with it is
//!   monotonic). State: the partition key only, a constant per key (a set of keys: 52
//!   bytes a BIGINT key at 10^6 keys, docs/benchmarks.md).
//! - keep last (DESC): +(candidate, 1), and −(previous, 1) if there was one. State: the
//!   current row of each partition (with its order key).
//!
//! A retraction in the input is an error: the planner chooses this operator only over
//! append-only input. Checkpointed as section `dedup` (`part`, `key`, `row` Binary; `key`
//! and `row` empty when keeping the first), sorted by `part`.

use datafusion_common::{HashMap, HashSet};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use super::{eval_by_instant, Encoded, OverKeys};
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::row::RowBytes;
use crate::state::{binary_col, invalid, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct Dedup {
    keys: OverKeys,
    schema: SchemaRef,
    kept: Kept,
}

/// What a deduplication keeps per partition.
#[derive(Debug)]
enum Kept {
    /// Keeping the first row: the partitions seen (a key alone: 16 bytes a bucket and the
    /// key's box; a map with an empty slot for a row took three times that).
    First(HashSet<RowBytes>),
    /// Keeping the last row: per partition, its current (order key, row).
    Last(HashMap<RowBytes, (RowBytes, RowBytes)>),
}

impl Dedup {
    pub fn new(keys: OverKeys, keep_last: bool, schema: SchemaRef) -> Self {
        let kept = if keep_last { Kept::Last(HashMap::new()) } else { Kept::First(HashSet::new()) };
        Dedup { keys, schema, kept }
    }

    fn keeps_last(&self) -> bool {
        matches!(self.kept, Kept::Last(_))
    }

    fn signature(&self) -> String {
        signature("dedup", &self.schema, (self.keys.params(), self.keeps_last()))
    }

    /// The output changes (row, diff) of one run of changes at one instant.
    fn eval_run(&mut self, encoded: impl Iterator<Item = Encoded>) -> Result<Vec<(RowBytes, i64)>> {
        // The run sorted by (partition, order key, row): each partition's first is its
        // candidate. (A sorted Vec, not a map: most runs hold one row.)
        let mut run: Vec<(RowBytes, (RowBytes, RowBytes))> = Vec::new();
        for (p, e, n) in encoded {
            if n < 0 {
                return Err(WeirError::exec(
                    "deduplication: its input retracted a row, but it was planned over an \
                     append-only stream",
                ));
            }
            if n > 0 {
                run.push((p, e));
            }
        }
        run.sort_unstable();
        run.dedup_by(|later, first| later.0 == first.0);
        let best = run;
        let mut rows: Vec<(RowBytes, i64)> = Vec::new();
        for (p, cand) in best {
            let last = match &mut self.kept {
                Kept::First(first) => {
                    // One lookup: the key goes in only if it is new.
                    if first.insert(p) {
                        rows.push((cand.1, 1));
                    }
                    continue;
                }
                Kept::Last(last) => last,
            };
            match last.get_mut(&p) {
                None => {
                    rows.push((cand.1.clone(), 1));
                    last.insert(p, cand);
                }
                Some(old) if cand < *old => {
                    rows.push((cand.1.clone(), 1));
                    let old = std::mem::replace(old, cand);
                    rows.push((old.1, -1));
                }
                Some(_) => {}
            }
        }
        rows.sort_by(|a, b| (a.1 > 0, &a.0).cmp(&(b.1 > 0, &b.0)));
        Ok(rows)
    }
}

impl Operator for Dedup {
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let encoded = self.keys.encode(&d, 0, d.len())?;
        let (rows, times) = eval_by_instant(encoded, &d.times, |run| self.eval_run(run))?;
        let refs: Vec<(&[u8], [i64; 1], i64)> =
            rows.iter().map(|(r, n)| (&r[..], [1], *n)).collect();
        self.keys.output(&self.schema, &refs, times, 1)
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A partition's rows meet on one worker (see [`OverKeys::placement`]).
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        self.keys.placement()
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    /// Per partition its key, and keeping the last row, that row.
    fn state_bytes(&self) -> usize {
        match &self.kept {
            Kept::First(first) => first.heap_bytes(),
            Kept::Last(last) => last.heap_bytes(),
        }
    }

    /// State: section `dedup`, one row per partition (`part`, `key`, `row`), sorted by `part`.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let empty: &[u8] = &[];
        let mut parts: Vec<(&[u8], &[u8], &[u8])> = match &self.kept {
            Kept::Last(last) => last.iter().map(|(p, (k, r))| (&p[..], &k[..], &r[..])).collect(),
            Kept::First(first) => first.iter().map(|p| (&p[..], empty, empty)).collect(),
        };
        parts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        w.put(
            "dedup",
            &self.signature(),
            parts.len(),
            vec![
                ("part", binary_col(parts.iter().map(|(p, _, _)| *p))),
                ("key", binary_col(parts.iter().map(|(_, k, _)| *k))),
                ("row", binary_col(parts.iter().map(|(_, _, r)| *r))),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("dedup", &self.signature())?;
        let (parts, keys, rows) = (s.binary("part")?, s.binary("key")?, s.binary("row")?);
        match &mut self.kept {
            Kept::First(first) => first.clear(),
            Kept::Last(last) => last.clear(),
        }
        for ((p, k), row) in parts.into_iter().zip(keys).zip(rows) {
            let again = match &mut self.kept {
                Kept::Last(last) => {
                    let e = (RowBytes::from(k), RowBytes::from(row));
                    last.insert(RowBytes::from(p), e).is_some()
                }
                Kept::First(first) => !first.insert(RowBytes::from(p)),
            };
            if again {
                return Err(invalid("section 'dedup': a partition appears twice"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::over::test_support::{k_by_v, out_schema};
    use crate::testing::{kv, state_bytes_at};

    /// The figure grows with the partitions, and keeping the last row, a partition's new
    /// row takes the place of the old one (of the same size here).
    #[test]
    fn state_bytes_grow_with_partitions_not_with_their_rows() {
        let mut op = Dedup::new(k_by_v(true), true, out_schema(1));
        assert_eq!(op.state_bytes(), 0);
        let input = vec![kv(1, "+1 a 1"), kv(2, "+1 b 2"), kv(3, "+1 a 3"), kv(4, "+1 a 4")];
        let [one, two, end] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert_eq!(end, two);
    }

    /// A checkpoint of either kind, taken before instant 3 and restored into a fresh
    /// operator, gives what the uninterrupted operator gives from there on.
    #[test]
    fn checkpoints_restore_both_kinds() {
        use crate::testing::{checkpoint_into, drive};
        let ticks = vec![
            kv(1, "+1 a 5, +1 b 1"),
            kv(2, "+1 a 2"),
            kv(3, "+1 c 7, +1 b 0"),
            kv(4, "+1 a 1, +1 c 9, +1 d 3"),
        ];
        for keep_last in [false, true] {
            let make = || Dedup::new(k_by_v(keep_last), keep_last, out_schema(1));
            let mut whole = make();
            let all = drive(&mut whole, &mut ticks.clone().into_iter().peekable(), None);
            let mut first = make();
            let mut feed = ticks.clone().into_iter().peekable();
            let before = drive(&mut first, &mut feed, Some(3));
            let mut restored = make();
            checkpoint_into(&first, &mut restored);
            let after = drive(&mut restored, &mut feed, None);
            assert_eq!([before, after].concat(), all, "keep_last {keep_last}");
            assert!(all.iter().any(|l| l.starts_with("@4")), "{all:?}");
        }
    }

    /// Keeping the first row, the figure grows with the partitions and not at all with a
    /// partition's later rows.
    #[test]
    fn keeping_the_first_row_holds_the_partitions_alone() {
        let mut op = Dedup::new(k_by_v(false), false, out_schema(1));
        let input = vec![kv(1, "+1 a 1"), kv(2, "+1 b 2"), kv(3, "+1 a 3"), kv(4, "+1 a 4")];
        let [one, two, end] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert_eq!(end, two);
        assert!(matches!(&op.kept, Kept::First(first) if first.len() == 2), "{:?}", op.kept);
    }
}
