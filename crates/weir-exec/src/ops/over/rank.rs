//! Ranking: `ROW_NUMBER()`, `RANK()`, `DENSE_RANK()` `OVER (PARTITION BY p ORDER BY o)` over
//! a relation, and its top-N form.
//!
//! Output: every input row followed by one Int64 per function. Within a partition (rows with
//! equal p, NULLs equal) rows are ordered by (o, row): o with each term's direction and NULL
//! placement, ties in o broken by the whole input row's value, ascending, NULL first (see
//! [`super`]). ROW_NUMBER numbers that order 1, 2, 3, ...; each copy of a duplicated row gets
//! its own number. RANK is 1 + the number of rows whose o sorts strictly before; DENSE_RANK is
//! 1 + the number of distinct o values before. In top-N mode (`Top { func, lo, hi }`) the
//! output is only the rows whose value of function `func` is in lo..=hi.
//!
//! Delta semantics: at each instant τ, for each partition that ΔR touches (and only those),
//! let m be the smallest (o, row) that changes. Every row that sorts before m keeps its values
//! (each value depends only on the rows at or before it), so the operator computes the output
//! rows at or after m before and after applying ΔR, and emits the bag difference: −(row, old
//! values) and +(row, new values) exactly for the rows whose values changed, plus the rows that
//! entered or left. A row entering at position i of a partition of n rows shifts the
//! ROW_NUMBER of the n − i rows after it (RANK: those with a larger o; DENSE_RANK: those with a
//! larger o, only if o is new). Work per touched partition: O(n) to walk it in full mode, but
//! O(hi + log n) in top-N mode, where the walk stops at the first row ranked past hi; rows
//! below the top are kept in state (not output), so when a top row leaves, the next one is
//! refilled from there. Applying the changes to the state costs a search per change, except
//! that a step changing a quarter of a large partition or more (a window's close) is merged
//! into it in one ordered pass, O(n + changes). Other partitions cost nothing.
//!
//! State: every input row, per partition, ordered by (o, row), with its multiplicity; in
//! top-N mode over an insert-only input (a monotonic plan: ranks only grow as rows enter, so
//! a row past the top never comes back), only the rows in the top (O(hi) per partition), and
//! a row that a top-N on ROW_NUMBER would number past hi costs one search of its partition
//! (nothing is output, nothing kept);
//! checkpointed as section `ranking` (`part`, `key`, `row` Binary, `count` Int64), sorted by
//! (part, key, row).

use arrow::datatypes::SchemaRef;
use datafusion_common::HashMap;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{RankFunc, RankMode};

use super::partition::{Key, Partition};
use super::{by_instant, for_each_partition, retracted, EncodedBatch, NetChange, OverKeys};
use crate::dirty::DirtyKeys;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::row::RowBytes;
use crate::state::{binary_col, i64_col, invalid, nonzero, signature, StateReader, StateWriter};

/// A saved entry: partition key, order key, row, count.
type StateEntry<'a> = (&'a [u8], &'a [u8], &'a [u8], i64);

/// One row's function values (ROW_NUMBER, RANK, DENSE_RANK: rarely more than two).
type Vals = smallvec::SmallVec<[i64; 2]>;

/// A step's buffer for a partition's output rows before netting (row, values, diff), kept
/// empty between partitions.
type NetBuf = Vec<(&'static [u8], Vals, i64)>;

/// `v` emptied, its elements borrowing for another lifetime, in the same allocation
/// (collecting a vector's iterator into a vector of the same layout reuses it).
#[allow(clippy::unnecessary_filter_map)]
fn recycle<'b>(mut v: Vec<(&[u8], Vals, i64)>) -> Vec<(&'b [u8], Vals, i64)> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// A step's output changes, their rows copied into one buffer (not one allocation each).
struct OutRows {
    bytes: Vec<u8>,
    /// Each change: where its row is in `bytes`, its function values, its diff.
    rows: Vec<(std::ops::Range<usize>, Vals, i64)>,
}

impl OutRows {
    fn push(&mut self, row: &[u8], vals: Vals, diff: i64) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(row);
        self.rows.push((start..self.bytes.len(), vals, diff));
    }

    /// Room for about `rows` changes of `row_bytes` bytes each.
    fn with_capacity(rows: usize, row_bytes: usize) -> OutRows {
        OutRows { bytes: Vec::with_capacity(rows * row_bytes), rows: Vec::with_capacity(rows) }
    }

    /// Sorts the changes from `start` on by (row, values): the order in which a relation's
    /// output is consolidated (an output row is the input row followed by the values), so
    /// that consolidation finds them in order. (A row is in one partition, and each
    /// partition's changes are netted: no two changes of a run have the same row and values.)
    fn sort_from(&mut self, start: usize) {
        let bytes = &self.bytes;
        self.rows[start..]
            .sort_unstable_by(|a, b| (&bytes[a.0.clone()], &a.1).cmp(&(&bytes[b.0.clone()], &b.1)));
    }

    /// (row, values, diff) of every change.
    fn refs(&self) -> Vec<(&[u8], &Vals, i64)> {
        self.rows.iter().map(|(r, v, d)| (&self.bytes[r.clone()], v, *d)).collect()
    }
}

/// A partition's entries with their multiplicities after a run's netted changes (sorted by
/// entry) are applied, without applying them: the merge of the two, entries whose count
/// becomes 0 left out.
struct Merged<'a> {
    part: std::iter::Peekable<super::partition::Iter<'a>>,
    changes: std::iter::Peekable<std::slice::Iter<'a, NetChange<'a>>>,
}

impl<'a> Iterator for Merged<'a> {
    type Item = (Key<'a>, i64);

    fn next(&mut self) -> Option<(Key<'a>, i64)> {
        loop {
            let next = match (self.part.peek(), self.changes.peek()) {
                (None, None) => return None,
                (Some((k, _)), Some((e, _, _))) => match k.cmp(e) {
                    std::cmp::Ordering::Equal => {
                        let (k, c) = self.part.next()?;
                        let (_, n, _) = self.changes.next()?;
                        (k, c + n)
                    }
                    std::cmp::Ordering::Less => self.part.next()?,
                    std::cmp::Ordering::Greater => self.changes.next().map(|&(e, n, _)| (e, n))?,
                },
                (None, Some(_)) => self.changes.next().map(|&(e, n, _)| (e, n))?,
                (Some(_), None) => self.part.next()?,
            };
            if next.1 != 0 {
                return Some(next);
            }
        }
    }
}

/// [`Merged`] for a small partition whose changes' places are known (`at`, from
/// [`Partition::locate`]): merged by index, without comparing entries.
struct Placed<'a> {
    entries: &'a [(super::partition::Entry, i64)],
    i: usize,
    changes: &'a [NetChange<'a>],
    at: &'a [(usize, bool)],
    j: usize,
}

impl<'a> Iterator for Placed<'a> {
    type Item = (Key<'a>, i64);

    fn next(&mut self) -> Option<(Key<'a>, i64)> {
        loop {
            let next = match (self.changes.get(self.j), self.at.get(self.j)) {
                (Some(&(e, n, _)), Some(&(at, found))) if at == self.i => {
                    self.j += 1;
                    if found {
                        let (entry, c) = self.entries.get(self.i)?;
                        self.i += 1;
                        (entry.key(), c + n)
                    } else {
                        (e, n)
                    }
                }
                _ => {
                    let (entry, c) = self.entries.get(self.i)?;
                    self.i += 1;
                    (entry.key(), *c)
                }
            };
            if next.1 != 0 {
                return Some(next);
            }
        }
    }
}

#[derive(Debug)]
pub struct Ranking {
    keys: OverKeys,
    ranks: Ranks,
    schema: SchemaRef,
    parts: HashMap<RowBytes, Partition>,
    /// The partitions changed since the last checkpoint (see [`crate::dirty`]).
    dirty: DirtyKeys<RowBytes>,
    /// The input only ever inserts (a monotonic plan): in top-N mode, a row ranked past the
    /// top can never come back (ranks only grow as rows enter), so it is dropped from state.
    append_only: bool,
}

impl Ranking {
    pub fn new(
        keys: OverKeys,
        funcs: Vec<RankFunc>,
        mode: RankMode,
        schema: SchemaRef,
    ) -> Result<Self> {
        let top = match mode {
            RankMode::Full => None,
            RankMode::Top { func, lo, hi } => {
                if func >= funcs.len() {
                    return Err(WeirError::internal("top-N on a function that is not computed"));
                }
                Some((func, lo, hi))
            }
            RankMode::KeepFirst | RankMode::KeepLast => {
                return Err(WeirError::internal("deduplication planned as a ranking"))
            }
        };
        Ok(Ranking {
            keys,
            ranks: Ranks { funcs, top },
            schema,
            parts: HashMap::new(),
            dirty: DirtyKeys::default(),
            append_only: false,
        })
    }

    /// Declares the input insert-only (see `append_only`): a top-N then keeps only the rows
    /// in its top, per partition. A retraction in the input becomes an error.
    pub fn with_append_only(mut self, append_only: bool) -> Self {
        self.append_only = append_only;
        self
    }

    fn signature(&self) -> String {
        signature("ranking", &self.schema, (self.keys.params(), &self.ranks.funcs, self.ranks.top))
    }

    /// Evaluates the changes `rows` (indices into `enc`) of one instant into `out`.
    fn eval_run<'e>(
        &mut self,
        enc: &'e EncodedBatch,
        rows: std::ops::Range<usize>,
        order: &mut Vec<usize>,
        changes: &mut Vec<NetChange<'e>>,
        net_buf: &mut NetBuf,
        out: &mut OutRows,
    ) -> Result<()> {
        let first_out = out.rows.len();
        for_each_partition(enc, rows, order, changes, |p, changes| {
            if self.append_only && changes.iter().any(|(_, n, _)| *n < 0) {
                return Err(WeirError::internal(
                    "a top-N planned over an insert-only input saw a retraction",
                ));
            }
            self.dirty.note(p, self.parts.len());
            self.eval_part(p, changes, net_buf, out)
        })?;
        out.sort_from(first_out);
        Ok(())
    }

    /// Applies one partition's netted changes (sorted by entry, none zero) and writes the
    /// output changes they cause into `out`.
    fn eval_part(
        &mut self,
        p: &[u8],
        changes: &[NetChange<'_>],
        net_buf: &mut NetBuf,
        out: &mut OutRows,
    ) -> Result<()> {
        let ranks = &self.ranks;
        // One lookup, the partition made if missing (and removed below if left empty).
        let part = self
            .parts
            .raw_entry_mut()
            .from_key(p)
            .or_insert_with(|| (RowBytes::from(p), Partition::default()))
            .1;
        // In a small partition, where each change goes, found once (the test of the top, the
        // merge below and the application of the changes use it instead of comparing entries
        // again); None in a large one.
        let first_at = changes.first().and_then(|(e, _, _)| part.locate(*e));
        if self.append_only && ranks.past_the_top(part, first_at) {
            if part.is_empty() {
                self.parts.remove(p);
            }
            return Ok(());
        }
        // The entries before the first change keep their values: the walks output the rest.
        let located: Option<smallvec::SmallVec<[(usize, bool); 4]>> = first_at.and_then(|at| {
            let rest = changes.iter().skip(1).map(|(e, _, _)| part.locate(*e));
            std::iter::once(Some(at)).chain(rest).collect()
        });
        // Where the walks start to output: the first change's place in a small partition;
        // in a large one its entry, found by comparing on the way (counting the entries
        // before it would cost O(n) where a top-N walk stops after its top).
        let skip = match &located {
            Some(at) => Start::Index(at[0].0),
            None => Start::Entry(changes[0].0),
        };
        // The rows from the start on with their values, before and after the changes
        // (merged in, not applied, so that both walks borrow the partition), netted.
        let mut net = recycle(std::mem::take(net_buf));
        ranks.walk(part.iter(), skip, &mut net, -1);
        // Only new rows inserted, ROW_NUMBER computed and every entry from the first change on
        // a single copy (`all_moved`): each walked row is numbered at least one more after than
        // before, so no row keeps its values and no row is walked twice; the difference is the
        // two walks as they are (the run's output is sorted once it is complete,
        // `OutRows::sort_from`).
        let all_moved = match (&located, part.small()) {
            (Some(at), Some(entries)) => {
                let merged = Placed { entries, i: 0, changes, at, j: 0 };
                ranks.walk(merged, skip, &mut net, 1);
                ranks.funcs.contains(&RankFunc::RowNumber)
                    && changes.iter().all(|&(_, n, _)| n > 0)
                    && at.iter().all(|&(_, found)| !found)
                    && entries.get(at[0].0..).is_some_and(|e| e.iter().all(|(_, c)| *c == 1))
            }
            _ => {
                let merged =
                    Merged { part: part.iter().peekable(), changes: changes.iter().peekable() };
                ranks.walk(merged, skip, &mut net, 1);
                false
            }
        };
        if all_moved {
            for (row, vals, n) in net.drain(..) {
                out.push(row, vals, n);
            }
        } else {
            net.sort_unstable_by(|a, b| (a.0, &a.1[..]).cmp(&(b.0, &b.1[..])));
        }
        let mut i = 0;
        while i < net.len() {
            let (row, vals) = (net[i].0, &net[i].1);
            let mut n = 0;
            let mut j = i;
            while j < net.len() && net[j].0 == row && net[j].1 == *vals {
                n += net[j].2;
                j += 1;
            }
            if n != 0 {
                out.push(row, vals.clone(), n);
            }
            i = j;
        }
        *net_buf = recycle(net);
        match located {
            // Last change first, so that the places found before stay right.
            Some(at) => {
                for (&(e, n, _), at) in changes.iter().zip(at).rev() {
                    if part.add_at(at, e, n) < 0 {
                        return Err(retracted());
                    }
                }
            }
            // Changes to a quarter of the partition or more (a window's close): merged in one
            // ordered pass, which costs O(n) where a descent per change costs more.
            None if changes.len() * 4 >= part.len() => {
                if !part.merge_sorted(changes.iter().map(|&(e, n, _)| (e, n))) {
                    return Err(retracted());
                }
            }
            // Entry by entry (never a pass over the partition: that would cost O(n)).
            None => {
                for &(e, n, _) in changes {
                    if part.add(e, n) < 0 {
                        return Err(retracted());
                    }
                }
            }
        }
        if self.append_only {
            ranks.prune(part);
        }
        if part.is_empty() {
            self.parts.remove(p);
        }
        Ok(())
    }
}

/// Where a walk over a partition starts to output: at an index, or at an entry.
#[derive(Clone, Copy)]
enum Start<'a> {
    Index(usize),
    Entry(Key<'a>),
}

/// The functions a ranking computes and its top, if any.
#[derive(Debug)]
struct Ranks {
    funcs: Vec<RankFunc>,
    /// `None`: every row; `Some((func, lo, hi))`: top-N on function `func`.
    top: Option<(usize, i64, i64)>,
}

impl Ranks {
    /// Whether a top-N on ROW_NUMBER over an insert-only input leaves `part` as it is when
    /// changes (sorted by entry, all insertions) enter it, the first of which goes to
    /// `first_at` (its place in the small partition, and whether an equal row is there; None
    /// in a large partition): the first change's row is numbered past the top, so every changed
    /// row is, the rows before it keep their values, and the rows after it were past the top
    /// already (and pruned). Most of a top-N's input is such rows (q19: a bid below its
    /// auction's ten highest): they cost a search of the small partition and nothing else.
    fn past_the_top(&self, part: &Partition, first_at: Option<(usize, bool)>) -> bool {
        let Some((f, _, hi)) = self.top else { return false };
        if self.funcs.get(f) != Some(&RankFunc::RowNumber) {
            return false;
        }
        let (Some(entries), Some((at, found))) = (part.small(), first_at) else {
            return false;
        };
        // Copies of an equal row come first: ROW_NUMBER numbers copies in turn.
        let upto = if found { at + 1 } else { at };
        let before = entries.get(..upto).map_or(0, |e| e.iter().map(|(_, c)| *c).sum::<i64>());
        before >= hi
    }

    /// Drops the entries of `part` whose first copy is ranked past the top (append-only input).
    fn prune(&self, part: &mut Partition) {
        let Some((f, _, hi)) = self.top else { return };
        let func = self.funcs[f];
        let (mut pos, mut rank, mut dense) = (0i64, 0i64, 0i64);
        let mut prev: Option<&[u8]> = None;
        let mut cut: Option<usize> = None;
        for (i, ((key, _), c)) in part.iter().enumerate() {
            if func != RankFunc::RowNumber && prev != Some(key) {
                rank = pos + 1;
                dense += 1;
                prev = Some(key);
            }
            let v = match func {
                RankFunc::RowNumber => pos + 1,
                RankFunc::Rank => rank,
                RankFunc::DenseRank => dense,
            };
            if v > hi {
                cut = Some(i);
                break;
            }
            pos += c;
        }
        if let Some(i) = cut {
            part.truncate(i);
        }
    }

    /// The output rows of `part` from `skip` on, with their values and
    /// multiplicities, walking from the partition's first row (see the module docs).
    fn walk<'a>(
        &self,
        part: impl Iterator<Item = (Key<'a>, i64)>,
        skip: Start<'_>,
        out: &mut Vec<(&'a [u8], Vals, i64)>,
        sign: i64,
    ) {
        let numbered = self.funcs.contains(&RankFunc::RowNumber);
        // RANK and DENSE_RANK need to know where a run of peers (equal order keys) starts.
        let peers = self.funcs.iter().any(|f| *f != RankFunc::RowNumber);
        let (mut pos, mut rank, mut dense) = (0i64, 0i64, 0i64);
        let mut prev: Option<&[u8]> = None;
        let value = |f: RankFunc, rn: i64, rank: i64, dense: i64| match f {
            RankFunc::RowNumber => rn,
            RankFunc::Rank => rank,
            RankFunc::DenseRank => dense,
        };
        // Entries come in order: once one is at or after the start, every later one is.
        let mut started = false;
        for (i, ((key, row), c)) in part.enumerate() {
            if peers && prev != Some(key) {
                rank = pos + 1;
                dense += 1;
                prev = Some(key);
            }
            started = started
                || match skip {
                    Start::Index(at) => i >= at,
                    Start::Entry(e) => (key, row) >= e,
                };
            let copies = if numbered { c } else { 1 };
            for j in 0..copies {
                let rn = pos + 1 + j;
                if let Some((f, lo, hi)) = self.top {
                    let v = value(self.funcs[f], rn, rank, dense);
                    if v > hi {
                        return;
                    }
                    if v < lo {
                        continue;
                    }
                }
                if !started {
                    // Values before the start do not change: skip the copies, not the stop test.
                    break;
                }
                let mut v = Vals::new();
                for f in &self.funcs {
                    v.push(value(*f, rn, rank, dense));
                }
                out.push((row, v, sign * if numbered { 1 } else { c }));
            }
            pos += c;
        }
    }
}

impl Operator for Ranking {
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let enc = self.keys.encode_batch(&d)?;
        // An inserted row moves the rows below it: a few changes out per change in (NEXMark
        // q19, a top 10: 2.7); a large batch (a load) reserves for one each.
        let n = d.len();
        let room = if n <= 16_384 { 4 * n } else { n };
        let mut out = OutRows::with_capacity(room, enc.row_bytes() / n + 1);
        let (mut order, mut changes, mut net_buf) = (Vec::new(), Vec::new(), Vec::new());
        let times = by_instant(&d.times, |rows| {
            let before = out.rows.len();
            self.eval_run(&enc, rows, &mut order, &mut changes, &mut net_buf, &mut out)?;
            Ok(out.rows.len() - before)
        })?;
        self.keys.output(&self.schema, &out.refs(), times, self.ranks.funcs.len())
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

    /// Every row kept, per partition (in top-N mode over an insert-only input, the top's).
    fn state_bytes(&self) -> usize {
        self.parts.heap_bytes() + self.dirty.heap_bytes()
    }

    /// State: section `ranking`, every row with its partition and order keys (`part`, `key`,
    /// `row` Binary, `count` Int64), sorted.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let mut parts: Vec<(&RowBytes, &Partition)> = self.parts.iter().collect();
        parts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        self.put_parts(w, "ranking", &parts)
    }

    /// Changes: the partitions changed since the last checkpoint, whole, as section
    /// `ranking.changes` (the layout of `ranking`), then `ranking.gone` (`part`: those now
    /// empty).
    fn save_changes(&mut self, w: &mut StateWriter) -> Result<bool> {
        let Some(changed) = self.dirty.take() else { return Ok(false) };
        let (mut present, mut gone) = (Vec::new(), Vec::new());
        for p in &changed {
            match self.parts.get_key_value(p) {
                Some(part) => present.push(part),
                None => gone.push(&p[..]),
            }
        }
        self.put_parts(w, "ranking.changes", &present)?;
        w.put("ranking.gone", &self.signature(), gone.len(), vec![("part", binary_col(gone))])?;
        Ok(true)
    }

    fn restore_changes(&mut self, r: &mut StateReader) -> Result<()> {
        let changed = self.take_parts(r, "ranking.changes")?;
        let gone = r.take("ranking.gone", &self.signature())?;
        for p in gone.binary("part")? {
            self.parts.remove(p);
        }
        self.parts.extend(changed);
        Ok(())
    }

    fn track_changes(&mut self) {
        self.dirty.start();
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.parts = self.take_parts(r, "ranking")?;
        Ok(())
    }
}

impl Ranking {
    /// Writes partitions' rows, sorted, as section `name` (the layout of `ranking`).
    fn put_parts(
        &self,
        w: &mut StateWriter,
        name: &str,
        parts: &[(&RowBytes, &Partition)],
    ) -> Result<()> {
        let entries: Vec<StateEntry<'_>> = parts
            .iter()
            .flat_map(|(p, part)| part.iter().map(move |((k, r), c)| (&p[..], k, r, c)))
            .collect();
        w.put(
            name,
            &self.signature(),
            entries.len(),
            vec![
                ("part", binary_col(entries.iter().map(|e| e.0))),
                ("key", binary_col(entries.iter().map(|e| e.1))),
                ("row", binary_col(entries.iter().map(|e| e.2))),
                ("count", i64_col(entries.iter().map(|e| e.3))),
            ],
        )
    }

    /// Reads the partitions a section written by [`Ranking::put_parts`] holds.
    fn take_parts(&self, r: &mut StateReader, name: &str) -> Result<HashMap<RowBytes, Partition>> {
        let s = r.take(name, &self.signature())?;
        let (parts, keys, rows, counts) =
            (s.binary("part")?, s.binary("key")?, s.binary("row")?, s.i64s("count")?);
        let mut out: HashMap<RowBytes, Partition> = HashMap::new();
        for (((p, k), row), c) in parts.into_iter().zip(keys).zip(rows).zip(counts) {
            let c = nonzero(name, c)?;
            if c < 0 {
                return Err(invalid(format!("section '{name}': a negative count")));
            }
            let part = out.entry(RowBytes::from(p)).or_default();
            if part.add((k, row), c) != c {
                return Err(invalid(format!("section '{name}': a row appears twice")));
            }
        }
        Ok(out)
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
    use crate::ops::topk::SortKey;
    use crate::testing::{fed, kv, kv_schema, run, run_spans, state_bytes_at, Tick};

    /// (k, v, f...) output schema.
    fn out_schema(funcs: &[RankFunc]) -> SchemaRef {
        let mut fields: Vec<Field> = kv_schema().fields().iter().map(|f| (**f).clone()).collect();
        for (i, _) in funcs.iter().enumerate() {
            fields.push(Field::new(format!("f{i}"), DataType::Int64, true));
        }
        Arc::new(Schema::new(fields))
    }

    /// PARTITION BY k ORDER BY v DESC (NULLS FIRST).
    fn ranking(funcs: Vec<RankFunc>, mode: RankMode) -> Ranking {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let part = vec![(ScalarExpr::compile(&col("k"), &df).unwrap(), DataType::Utf8)];
        let order = vec![SortKey {
            expr: ScalarExpr::compile(&col("v"), &df).unwrap(),
            data_type: DataType::Int64,
            descending: true,
            nulls_first: true,
        }];
        let keys = OverKeys::new(part, order, kv_schema()).unwrap();
        Ranking::new(keys, funcs.clone(), mode, out_schema(&funcs)).unwrap()
    }

    fn input() -> Vec<Tick> {
        vec![
            kv(1, "+1 a 5, +1 b 1"),
            kv(2, "+1 a 9"),
            kv(3, "+1 a 5"),
            kv(4, "-1 a 9"),
            kv(5, "+1 a _"),
        ]
    }

    #[test]
    fn changes_since_a_checkpoint_restore_the_same_state() {
        use crate::testing::changes_round_trip;
        // Partitions gain and lose rows; b empties at 6 for good, c at 8 and comes back at 9.
        let mut ticks = input();
        ticks.extend([kv(6, "-1 b 1, +1 c 2"), kv(7, "+1 a 1, +1 c 7"), kv(8, "-1 c 2, -1 c 7")]);
        let more = vec![vec![kv(9, "+1 a 8, +1 c 2, +1 d 1")]];
        for mode in [RankMode::Full, RankMode::Top { func: 0, lo: 1, hi: 2 }] {
            let make = || {
                Box::new(ranking(vec![RankFunc::RowNumber, RankFunc::DenseRank], mode))
                    as Box<dyn Operator>
            };
            for stops in [&[1, 3, 6][..], &[2, 2, 7][..], &[5][..]] {
                changes_round_trip(make, vec![ticks.clone()], more.clone(), stops);
            }
        }
    }

    #[test]
    fn an_insertion_shifts_only_the_rows_below_it_in_its_partition() {
        let op = ranking(vec![RankFunc::RowNumber, RankFunc::Rank], RankMode::Full);
        let out = run(&mut fed(op, [input()]));
        // Within an instant the harness sorts lines as text (+1 before -1).
        assert_eq!(
            out,
            [
                "@1 +1 a 5 1 1",
                "@1 +1 b 1 1 1",
                // a9 enters above a5: only a5 moves; b is not touched.
                "@2 +1 a 5 2 2",
                "@2 +1 a 9 1 1",
                "@2 -1 a 5 1 1",
                // A second a5: a tie, rank 2 for both, row numbers 2 and 3.
                "@3 +1 a 5 3 2",
                // a9 leaves: both a5 move up.
                "@4 +1 a 5 1 1",
                "@4 +1 a 5 2 1",
                "@4 -1 a 5 2 2",
                "@4 -1 a 5 3 2",
                "@4 -1 a 9 1 1",
                // NULL sorts first under DESC (NULLS FIRST) and pushes both a5 down.
                "@5 +1 a 5 2 2",
                "@5 +1 a 5 3 2",
                "@5 +1 a _ 1 1",
                "@5 -1 a 5 1 1",
                "@5 -1 a 5 2 1",
            ]
        );
    }

    #[test]
    fn top_one_refills_from_state_and_spans_equal_instants() {
        let op = || ranking(vec![RankFunc::RowNumber], RankMode::Top { func: 0, lo: 1, hi: 1 });
        let out = run(&mut fed(op(), [input()]));
        assert_eq!(
            out,
            [
                "@1 +1 a 5 1",
                "@1 +1 b 1 1",
                "@2 +1 a 9 1",
                "@2 -1 a 5 1",
                // a9 leaves: the next row of the partition refills the top.
                "@4 +1 a 5 1",
                "@4 -1 a 9 1",
                "@5 +1 a _ 1",
                "@5 -1 a 5 1",
            ]
        );
        assert_eq!(run_spans(&mut fed(op(), [input()]), 3), out);
    }

    /// A top-3 on ROW_NUMBER over an insert-only input: a row numbered past the top changes
    /// nothing, one numbered 3 still enters (the row before it numbered 2), and a copy of a
    /// row in the top is numbered after that row's copies. Expected output from ROW_NUMBER's
    /// definition (ORDER BY v DESC, NULLS FIRST), not from a run.
    #[test]
    fn rows_past_the_top_of_an_insert_only_input_change_nothing() {
        let op = ranking(vec![RankFunc::RowNumber], RankMode::Top { func: 0, lo: 1, hi: 3 })
            .with_append_only(true);
        let input = vec![
            kv(1, "+1 a 9, +1 a 7, +1 a 5"),
            // 1 would be numbered 4: nothing.
            kv(2, "+1 a 1"),
            // 6 is numbered 3 (two rows before it): 5 leaves the top.
            kv(3, "+1 a 6"),
            // Below the top again, twice in one instant: nothing.
            kv(4, "+1 a 2, +1 a 3"),
            // A second 7 is numbered 3, after the first: 6 leaves.
            kv(5, "+1 a 7"),
            // A third 7 is numbered 4 (the two 7s and 9 before it): nothing.
            kv(6, "+1 a 7"),
            // 8 is numbered 2: the first 7 moves to 3 (as the second was), the second past
            // the top.
            kv(7, "+1 a 8"),
        ];
        let out = run(&mut fed(op, [input]));
        assert_eq!(
            out,
            [
                "@1 +1 a 5 3",
                "@1 +1 a 7 2",
                "@1 +1 a 9 1",
                "@3 +1 a 6 3",
                "@3 -1 a 5 3",
                "@5 +1 a 7 3",
                "@5 -1 a 6 3",
                "@7 +1 a 8 2",
                "@7 -1 a 7 2",
            ]
        );
    }

    /// The figure grows with the rows and falls back when they are retracted (to the map's
    /// empty buckets).
    #[test]
    fn state_bytes_follow_the_rows() {
        let mut op = ranking(vec![RankFunc::RowNumber], RankMode::Full);
        assert_eq!(op.state_bytes(), 0);
        let input = vec![
            kv(1, "+1 a 5, +1 b 1"),
            kv(2, "+1 a 9, +1 c 3, +1 d 4"),
            kv(3, "-1 a 5, -1 b 1, -1 a 9, -1 c 3, -1 d 4"),
        ];
        let [one, two, _] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert!(op.parts.is_empty());
        assert!(op.state_bytes() < one, "{} at the end, {one} with two rows", op.state_bytes());
    }
}
