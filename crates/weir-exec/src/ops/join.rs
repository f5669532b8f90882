//! Join: inner, left/right/full outer, left semi and left anti, on equality keys plus an
//! optional residual predicate θ.
//!
//! Delta semantics of the matched pairs: Δ(R ⋈ S) = ΔR ⋈ S_old + R_new ⋈ ΔS, where S_old is the
//! right input before this instant's changes and R_new the left input after them; a pair's
//! diff is the product of its rows' diffs/multiplicities. Rows whose key contains NULL never
//! match (SQL equality).
//!
//! The other kinds follow from each row's match count m(r) = Σ multiplicities of the rows of
//! the other side that it matches (key equal and θ true): a left row with multiplicity c
//! contributes c padded rows (r, NULL...) to a left outer join while m(r) = 0, c rows to a semi
//! join while m(r) > 0, and c rows to an anti join while m(r) = 0. At each instant the
//! operator updates m for the rows the matched-pair delta touches and emits the difference of
//! those contributions before and after, so a row gains or loses its padding exactly when its
//! last match leaves or its first arrives. The null-aware anti join (`NOT IN`) also empties
//! when the right side holds a NULL key, and excludes NULL-keyed left rows unless the right
//! side is empty; when those conditions flip, every left row is re-examined.
//!
//! State: per input, an index from key to the multiset of rows with that key (work per change
//! is proportional to the rows it matches; a theta join without keys keeps one bucket); for
//! outer, semi and anti joins, each tracked row's multiplicity and match count.
//! Checkpointed as the indexes, the tracked rows and the null-aware totals, in sections laid
//! out in [`checkpoint`].

use datafusion_common::{HashMap, HashSet};

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};
use weir_plan::JoinKind;

use crate::expr::ScalarExpr;
use crate::operator::{min_wakeup, EvalCtx, Operator};
use crate::ops::batch_of;
use crate::row::{RowBytes, RowCodec};

type Index = HashMap<RowBytes, HashMap<RowBytes, i64>>;

mod checkpoint;

/// One side of the join.
#[derive(Debug)]
pub struct JoinSide {
    pub input: Box<dyn Operator>,
    pub keys: Vec<ScalarExpr>,
    pub row_codec: RowCodec,
    pub schema: SchemaRef,
}

/// Multiplicity, match count and whether the key is NULL, of a row of a tracked side.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tracked {
    count: i64,
    matches: i64,
    null_key: bool,
}

#[derive(Debug)]
pub struct Join {
    kind: JoinKind,
    /// NULL keys match each other (set operations) instead of never matching.
    nulls_equal: bool,
    left: JoinSide,
    right: JoinSide,
    key_codec: RowCodec,
    filter: Option<ScalarExpr>,
    schema: SchemaRef,
    left_index: Index,
    right_index: Index,
    left_rows: HashMap<RowBytes, Tracked>,
    right_rows: HashMap<RowBytes, Tracked>,
    /// For the null-aware anti join: right rows in total, and with a NULL key.
    right_total: i64,
    right_null: i64,
}

/// One side's columns for output rows; `None` rows are NULL (outer-join padding).
fn side_columns(
    codec: &RowCodec,
    schema: &SchemaRef,
    rows: &[Option<&[u8]>],
) -> Result<Vec<ArrayRef>> {
    let n = rows.len();
    if rows.iter().all(|r| r.is_some()) {
        return codec.decode(rows.iter().flatten().copied());
    }
    let decoded = codec.decode(rows.iter().flatten().copied())?;
    let mut pos = 0;
    let idx: Vec<(usize, usize)> = rows
        .iter()
        .map(|r| {
            if r.is_some() {
                pos += 1;
                (0, pos - 1)
            } else {
                (1, 0)
            }
        })
        .collect();
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| {
            let nulls = new_null_array(f.data_type(), 1);
            if decoded.is_empty() || pos == 0 {
                return Ok(new_null_array(f.data_type(), n));
            }
            let sources: [&dyn arrow::array::Array; 2] = [decoded[c].as_ref(), nulls.as_ref()];
            Ok(arrow::compute::interleave(&sources, &idx)?)
        })
        .collect()
}

/// An output row as (left row, right row); `None` is that side's NULL padding.
type OutRow<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// A delta side, encoded: (key, or None if a key is NULL; row; diff).
type Encoded = Vec<(Option<RowBytes>, RowBytes, i64)>;

/// A candidate pair: rows (borrowed from the deltas and the indexes, so a pair costs no
/// allocation), their diff/multiplicity factors, and which delta produced it.
struct Pair<'a> {
    l: &'a [u8],
    r: &'a [u8],
    lc: i64,
    rc: i64,
    from_left_delta: bool,
}

impl Join {
    pub fn new(
        kind: JoinKind,
        nulls_equal: bool,
        left: JoinSide,
        right: JoinSide,
        key_codec: RowCodec,
        filter: Option<ScalarExpr>,
        schema: SchemaRef,
    ) -> Self {
        Join {
            kind,
            nulls_equal,
            left,
            right,
            key_codec,
            filter,
            schema,
            left_index: Index::new(),
            right_index: Index::new(),
            left_rows: HashMap::new(),
            right_rows: HashMap::new(),
            right_total: 0,
            right_null: 0,
        }
    }

    fn tracks_left(&self) -> bool {
        matches!(
            self.kind,
            JoinKind::Left
                | JoinKind::Full
                | JoinKind::LeftSemi
                | JoinKind::LeftAnti { .. }
                | JoinKind::LeftMark
        )
    }

    /// Whether the output has the left side's columns only (plus `mark` for a mark join).
    fn left_only(&self) -> bool {
        matches!(
            self.kind,
            JoinKind::LeftSemi
                | JoinKind::LeftAnti { .. }
                | JoinKind::LeftMark
                | JoinKind::IntersectAll
                | JoinKind::ExceptAll
        )
    }

    fn tracks_right(&self) -> bool {
        matches!(self.kind, JoinKind::Right | JoinKind::Full)
    }

    fn encode(
        side: &JoinSide,
        key_codec: &RowCodec,
        d: &ChangeBatch,
        nulls_equal: bool,
    ) -> Result<Encoded> {
        if d.is_empty() {
            return Ok(vec![]);
        }
        let key_cols: Vec<ArrayRef> =
            side.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
        let keys = key_codec.encode(&key_cols, d.len())?;
        let rows = side.row_codec.encode(d.data.columns(), d.len())?;
        Ok((0..d.len())
            .map(|i| {
                let null_key = !nulls_equal && key_cols.iter().any(|c| c.is_null(i));
                let key = (!null_key).then(|| RowBytes::from(keys.get(i)));
                (key, RowBytes::from(rows.get(i)), d.diffs[i])
            })
            .collect())
    }

    fn apply(index: &mut Index, delta: &Encoded) {
        for (key, row, diff) in delta {
            let Some(key) = key else { continue };
            // One lookup per row; a key or row is copied only when it is new to the index.
            match index.get_mut(key) {
                Some(bucket) => {
                    match bucket.get_mut(row) {
                        Some(c) => {
                            *c += diff;
                            if *c == 0 {
                                bucket.remove(row);
                            }
                        }
                        None if *diff != 0 => {
                            bucket.insert(row.clone(), *diff);
                        }
                        None => {}
                    }
                    if bucket.is_empty() {
                        index.remove(key);
                    }
                }
                None if *diff != 0 => {
                    index.insert(key.clone(), HashMap::from([(row.clone(), *diff)]));
                }
                None => {}
            }
        }
    }

    /// Joined rows (left columns then right columns) for (left, right) row pairs; `None` pads
    /// that side with NULLs.
    fn joined(&self, rows: &[OutRow<'_>]) -> Result<RecordBatch> {
        let n = rows.len();
        let lefts: Vec<Option<&[u8]>> = rows.iter().map(|r| r.0).collect();
        let mut cols = side_columns(&self.left.row_codec, &self.left.schema, &lefts)?;
        if !self.left_only() {
            let rights: Vec<Option<&[u8]>> = rows.iter().map(|r| r.1).collect();
            cols.extend(side_columns(&self.right.row_codec, &self.right.schema, &rights)?);
        }
        batch_of(&self.schema, cols, n)
    }

    /// Updates the tracked rows of one side; returns each touched row's state before.
    fn track<'a>(
        rows: &mut HashMap<RowBytes, Tracked>,
        delta: &Encoded,
        matched: &[&Pair<'a>],
        own: impl Fn(&Pair<'a>) -> (&'a [u8], &'a [u8], i64, bool),
    ) -> HashMap<RowBytes, Tracked> {
        let mut before: HashMap<RowBytes, Tracked> = HashMap::new();
        let mut touch = |rows: &HashMap<RowBytes, Tracked>, r: &[u8]| {
            if !before.contains_key(r) {
                before.insert(RowBytes::from(r), rows.get(r).copied().unwrap_or_default());
            }
        };
        for (_, r, _) in delta {
            touch(rows, r);
        }
        for p in matched {
            touch(rows, own(p).0);
        }
        // Match counts of rows new at this instant come from the pairs with the other side's
        // old contents (each distinct partner once); existing rows only gain the pairs with
        // the other side's delta.
        let mut seen: HashSet<(&[u8], &[u8])> = HashSet::new();
        for p in matched {
            let (row, partner, partner_count, from_own_delta) = own(p);
            let was_present = before.get(row).is_some_and(|t| t.count > 0);
            let gain = if !from_own_delta || (!was_present && seen.insert((row, partner))) {
                partner_count
            } else {
                0
            };
            match rows.get_mut(row) {
                Some(e) => e.matches += gain,
                None => {
                    rows.insert(
                        RowBytes::from(row),
                        Tracked { matches: gain, ..Tracked::default() },
                    );
                }
            }
        }
        for (key, r, d) in delta {
            let e = rows.entry(r.clone()).or_default();
            e.count += d;
            e.null_key = key.is_none();
        }
        for r in before.keys() {
            if rows.get(r).is_some_and(|t| t.count == 0) {
                rows.remove(r);
            }
        }
        before
    }
}

impl Operator for Join {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let dl = self.left.input.eval(t, ctx)?;
        let dr = self.right.input.eval(t, ctx)?;
        let el = Self::encode(&self.left, &self.key_codec, &dl, self.nulls_equal)?;
        let er = Self::encode(&self.right, &self.key_codec, &dr, self.nulls_equal)?;
        if matches!(self.kind, JoinKind::IntersectAll | JoinKind::ExceptAll) {
            return self.bag_delta(t, &el, &er);
        }
        let out = self.delta(t, &el, &er);
        // S_new, once nothing reads S_old any more.
        Self::apply(&mut self.right_index, &er);
        out
    }

    fn next_wakeup(&self) -> Option<Time> {
        min_wakeup([self.left.input.next_wakeup(), self.right.input.next_wakeup()])
    }

    /// State: the join's own sections (see [`checkpoint`]), then the left input's, then the
    /// right's.
    fn save_state(&self, w: &mut crate::state::StateWriter) -> Result<()> {
        self.save_own(w)?;
        self.left.input.save_state(w)?;
        self.right.input.save_state(w)
    }

    fn restore_state(&mut self, r: &mut crate::state::StateReader) -> Result<()> {
        self.restore_own(r)?;
        self.left.input.restore_state(r)?;
        self.right.input.restore_state(r)
    }
}

impl Join {
    /// `INTERSECT ALL` / `EXCEPT ALL`: the key is the whole row, so a key's left bucket holds
    /// its m copies on the left and its right bucket its n copies on the right; the output
    /// holds the row f(m, n) times (min(m, n), or max(m − n, 0)). For each key a delta touches,
    /// emits f(m_new, n_new) − f(m_old, n_old) copies of it.
    fn bag_delta(&mut self, t: Time, el: &Encoded, er: &Encoded) -> Result<ChangeBatch> {
        let count = |index: &Index, key: &RowBytes| -> i64 {
            index.get(key).map_or(0, |bucket| bucket.values().sum())
        };
        // (key, a left row of the delta with it)
        let mut touched: Vec<(&RowBytes, Option<&RowBytes>)> = Vec::new();
        let mut at: HashMap<&[u8], usize> = HashMap::new();
        for (i, (key, row, _)) in el.iter().chain(er).enumerate() {
            let Some(key) = key else { continue };
            let left_row = (i < el.len()).then_some(row);
            match at.get(&key[..]) {
                Some(&j) => {
                    if touched[j].1.is_none() {
                        touched[j].1 = left_row;
                    }
                }
                None => {
                    at.insert(key, touched.len());
                    touched.push((key, left_row));
                }
            }
        }
        let old: Vec<(i64, i64)> = touched
            .iter()
            .map(|(k, _)| (count(&self.left_index, k), count(&self.right_index, k)))
            .collect();
        Self::apply(&mut self.left_index, el);
        Self::apply(&mut self.right_index, er);
        let f = |(m, n): (i64, i64)| -> i64 {
            if self.kind == JoinKind::IntersectAll {
                m.min(n).max(0)
            } else {
                (m - n).max(0)
            }
        };
        let mut rows: Vec<Option<&[u8]>> = Vec::new();
        let mut diffs: Vec<i64> = Vec::new();
        for ((key, row), before) in touched.iter().zip(old) {
            let after = (count(&self.left_index, key), count(&self.right_index, key));
            let d = f(after) - f(before);
            if d == 0 {
                continue;
            }
            // The output is a left row with the key (the key is the whole row): one of the
            // delta's, or one still in the index. f changes only while the left side has one.
            let indexed = self.left_index.get(*key).and_then(|b| b.keys().next());
            let Some(row) = (*row).or(indexed) else {
                return Err(weir_common::WeirError::internal("bag set operation without a row"));
            };
            rows.push(Some(&row[..]));
            diffs.push(d);
        }
        if rows.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let cols = side_columns(&self.left.row_codec, &self.left.schema, &rows)?;
        let data = batch_of(&self.schema, cols, rows.len())?;
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }

    /// The output change at `t` for the encoded deltas: everything but the update of the right
    /// index, which the pairs borrow as S_old.
    fn delta(&mut self, t: Time, el: &Encoded, er: &Encoded) -> Result<ChangeBatch> {
        let mut pairs: Vec<Pair<'_>> = Vec::new();
        // ΔR ⋈ S_old
        let right_index = &self.right_index;
        for (key, l, ld) in el {
            let Some(bucket) = key.as_ref().and_then(|k| right_index.get(k)) else { continue };
            for (r, rc) in bucket {
                pairs.push(Pair { l, r, lc: *ld, rc: *rc, from_left_delta: true });
            }
        }
        Self::apply(&mut self.left_index, el);
        // R_new ⋈ ΔS
        let left_index = &self.left_index;
        for (key, r, rd) in er {
            let Some(bucket) = key.as_ref().and_then(|k| left_index.get(k)) else { continue };
            for (l, lc) in bucket {
                pairs.push(Pair { l, r, lc: *lc, rc: *rd, from_left_delta: false });
            }
        }

        // The residual predicate, on whole candidate pairs at once.
        let matched: Vec<&Pair> = match (&self.filter, pairs.is_empty()) {
            (Some(f), false) => {
                let rows: Vec<OutRow<'_>> = pairs.iter().map(|p| (Some(p.l), Some(p.r))).collect();
                let full = self.joined_full(&rows)?;
                let mask = f.eval_predicate(&full)?;
                pairs.iter().enumerate().filter(|(i, _)| mask.value(*i)).map(|(_, p)| p).collect()
            }
            _ => pairs.iter().collect(),
        };

        let mut out_rows: Vec<OutRow<'_>> = Vec::new();
        let mut diffs: Vec<i64> = Vec::new();
        if !self.left_only() {
            for p in &matched {
                out_rows.push((Some(p.l), Some(p.r)));
                diffs.push(p.lc * p.rc);
            }
        }

        // Padding, semi and anti rows from the tracked match counts.
        let mut owned: Vec<(RowBytes, bool, i64)> = Vec::new(); // (row, is_left, diff)
        let mut marks: Vec<(RowBytes, i64, bool)> = Vec::new(); // mark join: (row, diff, mark)
        if self.tracks_left() {
            let before = Self::track(&mut self.left_rows, el, &matched, |p| {
                (p.l, p.r, p.rc, p.from_left_delta)
            });
            let null_aware = matches!(self.kind, JoinKind::LeftAnti { null_aware: true });
            let (old_total, old_null) = (self.right_total, self.right_null);
            if null_aware {
                for (k, _, d) in er {
                    self.right_total += d;
                    if k.is_none() {
                        self.right_null += d;
                    }
                }
            }
            let contributes = |kind: JoinKind, tr: Tracked, total: i64, nulls: i64| -> i64 {
                let unmatched = tr.matches == 0;
                let on = match kind {
                    JoinKind::LeftSemi => !unmatched,
                    JoinKind::LeftAnti { null_aware: true } => {
                        unmatched && (total == 0 || (nulls == 0 && !tr.null_key))
                    }
                    _ => unmatched,
                };
                if on {
                    tr.count
                } else {
                    0
                }
            };
            let flipped = null_aware
                && ((old_total == 0) != (self.right_total == 0)
                    || (old_null == 0) != (self.right_null == 0));
            let mut touched: Vec<(RowBytes, Tracked)> = before.into_iter().collect();
            if flipped {
                let already: HashSet<RowBytes> = touched.iter().map(|(r, _)| r.clone()).collect();
                for (r, tr) in &self.left_rows {
                    if !already.contains(r) {
                        touched.push((r.clone(), *tr));
                    }
                }
            }
            for (r, old) in touched {
                let new = self.left_rows.get(&r).copied().unwrap_or_default();
                if self.kind == JoinKind::LeftMark {
                    // (row, mark) with the row's multiplicity: the mark flips with the first
                    // match and the last.
                    let (old_mark, new_mark) = (old.matches > 0, new.matches > 0);
                    if old_mark == new_mark {
                        if new.count != old.count {
                            marks.push((r, new.count - old.count, new_mark));
                        }
                    } else {
                        if old.count != 0 {
                            marks.push((r.clone(), -old.count, old_mark));
                        }
                        if new.count != 0 {
                            marks.push((r, new.count, new_mark));
                        }
                    }
                    continue;
                }
                let d = contributes(self.kind, new, self.right_total, self.right_null)
                    - contributes(self.kind, old, old_total, old_null);
                if d != 0 {
                    owned.push((r, true, d));
                }
            }
        }
        if self.tracks_right() {
            let before = Self::track(&mut self.right_rows, er, &matched, |p| {
                (p.r, p.l, p.lc, !p.from_left_delta)
            });
            for (r, old) in before {
                let new = self.right_rows.get(&r).copied().unwrap_or_default();
                let pad = |tr: Tracked| if tr.matches == 0 { tr.count } else { 0 };
                let d = pad(new) - pad(old);
                if d != 0 {
                    owned.push((r, false, d));
                }
            }
        }
        for (r, is_left, d) in &owned {
            out_rows.push(if *is_left { (Some(&r[..]), None) } else { (None, Some(&r[..])) });
            diffs.push(*d);
        }
        if self.kind == JoinKind::LeftMark {
            if marks.is_empty() {
                return Ok(ChangeBatch::empty(self.schema.clone()));
            }
            let lefts: Vec<Option<&[u8]>> = marks.iter().map(|m| Some(&m.0[..])).collect();
            let mut cols = side_columns(&self.left.row_codec, &self.left.schema, &lefts)?;
            let flags =
                arrow::array::BooleanArray::from(marks.iter().map(|m| m.2).collect::<Vec<_>>());
            cols.push(std::sync::Arc::new(flags));
            let data = batch_of(&self.schema, cols, marks.len())?;
            let diffs: Vec<i64> = marks.iter().map(|m| m.1).collect();
            return Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs));
        }
        if out_rows.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let data = self.joined(&out_rows)?;
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }

    /// Both sides' columns for candidate pairs, whatever the join's output shape (the residual
    /// predicate is over the joined row).
    fn joined_full(&self, rows: &[OutRow<'_>]) -> Result<RecordBatch> {
        let n = rows.len();
        let mut cols = self.left.row_codec.decode(rows.iter().filter_map(|r| r.0))?;
        cols.extend(self.right.row_codec.decode(rows.iter().filter_map(|r| r.1))?);
        let fields: Vec<arrow::datatypes::FieldRef> = self
            .left
            .schema
            .fields()
            .iter()
            .chain(self.right.schema.fields().iter())
            .cloned()
            .collect();
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
        Ok(RecordBatch::try_new_with_options(
            schema,
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
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

    fn join(kind: JoinKind, left: Vec<Tick>, right: Vec<Tick>) -> Vec<String> {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = |input| JoinSide {
            input,
            keys: vec![ScalarExpr::compile(&col("k"), &df).unwrap()],
            row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
            schema: kv_schema(),
        };
        let schema = if matches!(kind, JoinKind::LeftSemi | JoinKind::LeftAnti { .. }) {
            kv_schema()
        } else {
            Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("v", DataType::Int64, true),
                Field::new("k2", DataType::Utf8, true),
                Field::new("v2", DataType::Int64, true),
            ]))
        };
        let mut op = Join::new(
            kind,
            false,
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
        let out = join(
            JoinKind::Inner,
            vec![kv(1, "+1 a 1"), kv(3, "-1 a 1")],
            vec![kv(1, "+1 a 10"), kv(2, "+1 a 20")],
        );
        assert_eq!(out, ["@1 +1 a 1 a 10", "@2 +1 a 1 a 20", "@3 -1 a 1 a 10", "@3 -1 a 1 a 20"]);
    }

    #[test]
    fn null_keys_never_match() {
        let out =
            join(JoinKind::Inner, vec![kv(1, "+1 _ 1, +1 b 2")], vec![kv(1, "+1 _ 3, +1 b 4")]);
        assert_eq!(out, ["@1 +1 b 2 b 4"]);
    }

    #[test]
    fn multiplicities_multiply() {
        let out = join(JoinKind::Inner, vec![kv(1, "+2 a 1")], vec![kv(1, "+3 a 2")]);
        assert_eq!(out, ["@1 +6 a 1 a 2"]);
    }

    #[test]
    fn left_outer_pads_while_unmatched() {
        // x is padded until its match arrives at 2, and again after it leaves at 3.
        let out = join(
            JoinKind::Left,
            vec![kv(1, "+1 x 1, +1 _ 9")],
            vec![kv(2, "+1 x 5"), kv(3, "-1 x 5")],
        );
        assert_eq!(
            out,
            [
                "@1 +1 _ 9 _ _",
                "@1 +1 x 1 _ _",
                "@2 +1 x 1 x 5",
                "@2 -1 x 1 _ _",
                "@3 +1 x 1 _ _",
                "@3 -1 x 1 x 5"
            ]
        );
    }

    #[test]
    fn full_outer_pads_both_sides() {
        let out =
            join(JoinKind::Full, vec![kv(1, "+1 a 1")], vec![kv(1, "+1 b 2"), kv(2, "+1 a 3")]);
        assert_eq!(
            out,
            // (a,3) matches a1 as it arrives, so it is never padded.
            ["@1 +1 _ _ b 2", "@1 +1 a 1 _ _", "@2 +1 a 1 a 3", "@2 -1 a 1 _ _"]
        );
    }

    #[test]
    fn semi_and_anti_follow_the_first_and_last_match() {
        let left = || vec![kv(1, "+2 a 1, +1 b 2")];
        let right = || vec![kv(2, "+1 a 7, +1 a 8"), kv(3, "-1 a 7"), kv(4, "-1 a 8")];
        assert_eq!(join(JoinKind::LeftSemi, left(), right()), ["@2 +2 a 1", "@4 -2 a 1"]);
        assert_eq!(
            join(JoinKind::LeftAnti { null_aware: false }, left(), right()),
            ["@1 +1 b 2", "@1 +2 a 1", "@2 -2 a 1", "@4 +2 a 1"]
        );
    }

    #[test]
    fn null_aware_anti_join_follows_not_in() {
        // x NOT IN (R): empty R keeps everything (NULL x too); a NULL in R empties the result.
        let out = join(
            JoinKind::LeftAnti { null_aware: true },
            vec![kv(1, "+1 a 1, +1 _ 2")],
            vec![kv(2, "+1 b 0"), kv(3, "+1 _ 0"), kv(4, "-1 _ 0")],
        );
        assert_eq!(out, ["@1 +1 _ 2", "@1 +1 a 1", "@2 -1 _ 2", "@3 -1 a 1", "@4 +1 a 1"]);
    }
}

#[cfg(test)]
mod mark_tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{kv, kv_schema, run, Feed};

    #[test]
    fn mark_join_flags_rows_with_a_match() {
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
            Field::new("mark", DataType::Boolean, true),
        ]));
        let mut op = Join::new(
            JoinKind::LeftMark,
            false,
            side(Feed::new(kv_schema(), vec![kv(1, "+1 a 1, +1 b 2")])),
            side(Feed::new(kv_schema(), vec![kv(1, "+1 a 9"), kv(2, "+1 b 3")])),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            None,
            schema,
        );
        assert_eq!(
            run(&mut op),
            ["@1 +1 a 1 true", "@1 +1 b 2 false", "@2 +1 b 2 true", "@2 -1 b 2 false"]
        );
    }
}
