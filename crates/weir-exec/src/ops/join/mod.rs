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
//!
//! **Steps.** A step, one instant or a span of them alike, is evaluated in three passes, with
//! the same result as evaluating its instants one by one: (1) both inputs' changes are encoded once, and the
//! instants walked in order, each joining its left changes with the right index, applying
//! them, joining its right changes with the left index and applying those, which collects the
//! candidate pairs of every instant (the indexes never depend on θ); (2) θ is evaluated once
//! over all candidates; (3) the instants are walked again to emit the matched pairs and update
//! the tracked match counts. Pairs name their rows by number: a delta row by its place in the
//! span's changes, an indexed row by a copy in a per-span arena, so no pair allocates and a
//! row removed from an index later in the span stays readable. Output columns are decoded once
//! per span.
//!
//! Files: this one holds the indexes, the tracked rows and the three passes of a step;
//! `rows.rs` how a step names its rows, instants, pairs and output; `bucket.rs` the rows of
//! one key; `checkpoint.rs` the state's sections; `tests.rs` the tests.

use datafusion_common::hash_map::EntryRef;
use datafusion_common::{HashMap, HashSet};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};
use weir_plan::JoinKind;

use crate::dirty::DirtyKeys;
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::route::{KeyRoute, Placement};
use crate::row::{Probe, RowBytes, RowCodec};
use bucket::Bucket;
use expiry::Expiry;
use held::Held;
use rows::{
    instants, side_columns, Arena, DeltaRow, EncodedSide, Instant, Out, Pair, Seen, SideRows,
    ROOM_PER_CHANGE,
};

mod bucket;
mod checkpoint;
pub mod expiry;
pub mod held;
pub mod might_contain;
mod rows;
pub mod temporal;
#[cfg(test)]
mod tests;

/// An encoded join key, inline up to 16 bytes (one or two numbers): a lookup that finds a
/// candidate compares keys without following a pointer to the heap.
type Key = smallvec::SmallVec<[u8; 16]>;

type Index = HashMap<Key, Bucket>;

/// What [`add_to`] did to a key of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Added {
    /// The key was not in the index: it is now, with the row.
    NewKey,
    /// The key's rows cancelled out: it left the index.
    KeyLeft,
    /// The key's rows changed.
    Changed,
}

/// Adds `diff` (not zero) to the count of `row` under `key`, with one lookup: a key or row is
/// copied only when it is new to the index, and a key whose rows cancel out leaves it.
fn add_to(index: &mut Index, key: &[u8], row: &[u8], diff: i64) -> Added {
    match index.entry_ref(&Probe(key)) {
        EntryRef::Occupied(mut bucket) => {
            if bucket.get_mut().add(row, diff) {
                bucket.remove();
                return Added::KeyLeft;
            }
            Added::Changed
        }
        EntryRef::Vacant(place) => {
            place.insert_with_key(Key::from_slice(key), Bucket::One(RowBytes::from(row), diff));
            Added::NewKey
        }
    }
}

/// Per side, the changes of a step that never enter its index (empty: none; see
/// `Join::enqueue`).
type Passing = [Vec<bool>; 2];

/// One side of the join: how its input's rows are keyed and encoded.
#[derive(Debug)]
pub struct JoinSide {
    pub keys: Vec<ScalarExpr>,
    pub row_codec: RowCodec,
    pub schema: SchemaRef,
}

impl HeapSize for Tracked {
    const FLAT: bool = true;
    fn heap_bytes(&self) -> usize {
        0
    }
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
    /// The rows of each side's index changed since the last checkpoint, as
    /// [`checkpoint::entry`] pairs of key and row (a hot key's bucket is not written whole
    /// for one row's change).
    dirty_keys: [DirtyKeys<Vec<u8>>; 2],
    /// The tracked rows of each side changed since the last checkpoint.
    dirty_rows: [DirtyKeys<RowBytes>; 2],
    /// Interval joins (see [`expiry`]): per side, when its rows can match nothing more.
    expiry: [Option<Expiry>; 2],
    /// For the null-aware anti join: right rows in total, and with a NULL key.
    right_total: i64,
    right_null: i64,
    /// Per side, the window it is held as, if any (see [`held`]).
    held: [Option<Held>; 2],
    /// Per side, the room of a step's copies of indexed rows (see [`SideRows`]).
    arenas: [Arena; 2],
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
            dirty_keys: Default::default(),
            dirty_rows: Default::default(),
            expiry: [None, None],
            right_total: 0,
            right_null: 0,
            held: [None, None],
            arenas: Default::default(),
        }
    }

    /// An inner join whose sides' inputs are streams held as the windows `held` (see
    /// [`held`]), where given.
    pub fn with_held(mut self, held: [Option<Held>; 2]) -> Self {
        self.held = held;
        self
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

    /// An interval join (see [`expiry`]): the left side's rows expire at the value of `left`,
    /// the right's at the value of `right`, each over its own side's columns.
    pub fn with_expiry(mut self, left: Option<ScalarExpr>, right: Option<ScalarExpr>) -> Self {
        self.expiry = [left.map(Expiry::new), right.map(Expiry::new)];
        self
    }

    /// Queues the rows of the step's changes that enter an index and expire after `hi`.
    ///
    /// Returns, per side, which changes never enter its index (`pass`), and the rows that
    /// enter it but expire by `hi` (side, row number), which leave at the step's end. A row
    /// can match only rows at instants up to its expiry (see [`expiry`]), so a right row that
    /// expires by its own instant has found every partner there (R_new ⋈ ΔS reads the
    /// instant's left changes), and a left row that expires before its own instant has found
    /// every partner in the right index (ΔR ⋈ S_old): neither needs to be indexed at all (a
    /// q9 bid). A left row expiring at its own instant is indexed for that instant's right
    /// changes.
    fn enqueue(
        &mut self,
        d: [(&ChangeBatch, &[DeltaRow<'_>]); 2],
        hi: Time,
    ) -> Result<(Passing, Vec<(usize, usize)>)> {
        let mut now = Vec::new();
        let mut pass = [Vec::new(), Vec::new()];
        for (side, (batch, rows)) in d.into_iter().enumerate() {
            let Some(exp) = self.expiry[side].as_mut() else { continue };
            if rows.is_empty() {
                continue;
            }
            let instants = exp.instants(&batch.data)?;
            let passes = &mut pass[side];
            for (i, ((row, at), &t)) in rows.iter().zip(instants).zip(&batch.times).enumerate() {
                let (Some(key), Some(at)) = (row.key, at) else { continue };
                if row.diff <= 0 {
                    continue;
                }
                if at < t || (side == 1 && at == t) {
                    if passes.is_empty() {
                        passes.resize(rows.len(), false);
                    }
                    passes[i] = true;
                } else if at <= hi {
                    now.push((side, i));
                } else {
                    exp.enter(at, key, row.row, row.diff);
                }
            }
        }
        Ok((pass, now))
    }

    fn tracks_right(&self) -> bool {
        matches!(self.kind, JoinKind::Right | JoinKind::Full)
    }

    fn apply(index: &mut Index, dirty: &mut DirtyKeys<Vec<u8>>, delta: &[DeltaRow<'_>]) {
        Self::apply_except(index, dirty, delta, &[]);
    }

    /// [`Join::apply`] but for the changes `pass` marks (indexed as `delta`; empty: none).
    fn apply_except(
        index: &mut Index,
        dirty: &mut DirtyKeys<Vec<u8>>,
        delta: &[DeltaRow<'_>],
        pass: &[bool],
    ) {
        for (i, d) in delta.iter().enumerate() {
            let Some(key) = d.key else { continue };
            if d.diff == 0 || pass.get(i).copied().unwrap_or(false) {
                continue;
            }
            if dirty.recording() {
                dirty.note(&checkpoint::entry(key, d.row)[..], index.len());
            }
            add_to(index, key, d.row, d.diff);
        }
    }

    /// Updates the tracked rows of one side at one instant, given the side's changes there and
    /// the matched pairs seen from it; returns each touched row's state before.
    fn track(
        rows: &mut HashMap<RowBytes, Tracked>,
        delta: &[DeltaRow<'_>],
        matched: &[Seen<'_>],
    ) -> HashMap<RowBytes, Tracked> {
        let mut before: HashMap<RowBytes, Tracked> = HashMap::new();
        let mut touch = |rows: &HashMap<RowBytes, Tracked>, r: &[u8]| {
            if !before.contains_key(r) {
                before.insert(RowBytes::from(r), rows.get(r).copied().unwrap_or_default());
            }
        };
        for d in delta {
            touch(rows, d.row);
        }
        for p in matched {
            touch(rows, p.0);
        }
        // Match counts of rows new at this instant come from the pairs with the other side's
        // old contents (each distinct partner once); existing rows only gain the pairs with
        // the other side's delta.
        let mut seen: HashSet<(&[u8], &[u8])> = HashSet::new();
        for &(row, partner, partner_count, from_own_delta) in matched {
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
        for d in delta {
            let e = match rows.get_mut(d.row) {
                Some(e) => e,
                None => rows.entry(RowBytes::from(d.row)).or_default(),
            };
            e.count += d.diff;
            e.null_key = d.key.is_none();
        }
        for r in before.keys() {
            if rows.get(r).is_some_and(|t| t.count == 0) {
                rows.remove(r);
            }
        }
        before
    }

    /// The output changes for input changes `dl` and `dr`, each sorted by time: every instant
    /// at which either has a change, in order (see the module docs).
    ///
    /// In an interval join, `hi` is the step's last instant: rows of the step that expire by
    /// then leave at its end without waiting in a queue (a q9 bid: at its own instant).
    fn run(&mut self, dl: &ChangeBatch, dr: &ChangeBatch, hi: Time) -> Result<ChangeBatch> {
        let moves = self.held.iter().flatten().any(|h| h.next_move().is_some_and(|t| t <= hi));
        if dl.is_empty() && dr.is_empty() && !moves {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let (bl, br) = (self.side_input(0, dl)?, self.side_input(1, dr)?);
        let (dl, dr) = (bl.as_ref().unwrap_or(dl), br.as_ref().unwrap_or(dr));
        let el = EncodedSide::new(&self.left, &self.key_codec, dl, self.nulls_equal)?;
        let er = EncodedSide::new(&self.right, &self.key_codec, dr, self.nulls_equal)?;
        let lrows = el.delta_rows(&dl.diffs);
        let rrows = er.delta_rows(&dr.diffs);
        let (pass, now) = self.enqueue([(dl, &lrows), (dr, &rrows)], hi)?;
        let out = self.step(&lrows, &rrows, dl, dr, hi, &pass)?;
        for (side, i) in now {
            let (row, index) = match side {
                0 => (&lrows[i], &mut self.left_index),
                _ => (&rrows[i], &mut self.right_index),
            };
            if let Some(key) = row.key {
                Expiry::leave(index, &mut self.dirty_keys[side], key, row.row, row.diff);
            }
        }
        Ok(out)
    }

    /// [`Join::run`] once the changes are encoded.
    fn step(
        &mut self,
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        dl: &ChangeBatch,
        dr: &ChangeBatch,
        hi: Time,
        pass: &Passing,
    ) -> Result<ChangeBatch> {
        let [la, ra] = std::mem::take(&mut self.arenas);
        let mut ls = SideRows::in_room(lrows, la);
        let mut rs = SideRows::in_room(rrows, ra);
        let result = self.step_in(lrows, rrows, dl, dr, hi, pass, &mut ls, &mut rs);
        self.arenas = [ls.room(), rs.room()];
        result
    }

    /// [`Join::step`] with the rows its pairs name.
    #[allow(clippy::too_many_arguments)]
    fn step_in<'a>(
        &mut self,
        lrows: &'a [DeltaRow<'a>],
        rrows: &'a [DeltaRow<'a>],
        dl: &ChangeBatch,
        dr: &ChangeBatch,
        hi: Time,
        pass: &Passing,
        ls: &mut SideRows<'a>,
        rs: &mut SideRows<'a>,
    ) -> Result<ChangeBatch> {
        let mut out = Out::default();
        if matches!(self.kind, JoinKind::IntersectAll | JoinKind::ExceptAll) {
            for inst in &instants(&dl.times, &dr.times) {
                self.bag_step(inst, lrows, rrows, ls, &mut out)?;
            }
        } else {
            let (insts, pairs) = if self.holds() {
                let times = [&dl.times[..], &dr.times[..]];
                self.held_candidates(times, hi, lrows, rrows, ls, rs)?
            } else {
                let insts = instants(&dl.times, &dr.times);
                let pairs = self.candidates(&insts, lrows, rrows, pass, ls, rs);
                (insts, pairs)
            };
            let theta = self.matching(&pairs, ls, rs)?;
            if let (JoinKind::Inner, Some((mask, full))) = (self.kind, &theta) {
                // The output is the candidates θ kept, already decoded.
                return self.inner_output(&insts, &pairs, mask, full);
            }
            let mask: Vec<bool> = match theta {
                Some((m, _)) => (0..pairs.len()).map(|i| m.value(i)).collect(),
                None => vec![true; pairs.len()],
            };
            self.emit(&insts, &pairs, &mask, lrows, rrows, ls, rs, &mut out);
        }
        self.output(out, ls, rs)
    }

    /// An inner join's output: the decoded candidates (both sides' columns) that θ kept, with
    /// their instants and diffs.
    fn inner_output(
        &self,
        insts: &[Instant],
        pairs: &[Pair],
        mask: &arrow::array::BooleanArray,
        full: &RecordBatch,
    ) -> Result<ChangeBatch> {
        let kept = arrow::compute::filter_record_batch(full, mask)?;
        let (times, diffs): (Vec<Time>, Vec<i64>) = pairs
            .iter()
            .enumerate()
            .filter(|(i, _)| mask.value(*i))
            .map(|(_, p)| (insts[p.inst as usize].t, p.lc * p.rc))
            .unzip();
        let data = batch_of(&self.schema, kept.columns().to_vec(), times.len())?;
        Ok(ChangeBatch::new(data, times, diffs))
    }

    /// Pass 1: the candidate pairs of every instant, updating both indexes on the way.
    fn candidates(
        &mut self,
        insts: &[Instant],
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        pass: &Passing,
        ls: &mut SideRows<'_>,
        rs: &mut SideRows<'_>,
    ) -> Vec<Pair> {
        // Room for a pair per delta row (an interval join's usual).
        let mut pairs = Vec::with_capacity((lrows.len() + rrows.len()).min(ROOM_PER_CHANGE));
        let passing = |side: usize, r: &std::ops::Range<usize>| -> &[bool] {
            pass[side].get(r.clone()).unwrap_or(&[])
        };
        for (k, inst) in insts.iter().enumerate() {
            let k = k as u32;
            let (l, r) = (inst.left.clone(), inst.right.clone());
            // ΔR ⋈ S_old
            self.left_delta_pairs(k, &lrows[l.clone()], l.start, rs, &mut pairs);
            let index = &mut self.left_index;
            Self::apply_except(index, &mut self.dirty_keys[0], &lrows[l.clone()], passing(0, &l));
            // R_new ⋈ ΔS
            self.right_delta_pairs(k, &rrows[r.clone()], r.start, ls, &mut pairs);
            // S_new, once nothing reads S_old any more.
            let index = &mut self.right_index;
            Self::apply_except(index, &mut self.dirty_keys[1], &rrows[r.clone()], passing(1, &r));
        }
        pairs
    }

    /// ΔR ⋈ S at instant number `k`: the pairs of the left changes `delta` (numbered from
    /// `start` in the step's changes) with the right index.
    fn left_delta_pairs(
        &self,
        k: u32,
        delta: &[DeltaRow<'_>],
        start: usize,
        rs: &mut SideRows<'_>,
        pairs: &mut Vec<Pair>,
    ) {
        for (i, d) in delta.iter().enumerate() {
            let Some(bucket) = d.key.and_then(|key| self.right_index.get(&Probe(key))) else {
                continue;
            };
            for (r, rc) in bucket.iter() {
                let r = rs.copy(r);
                let l = (start + i) as u32;
                pairs.push(Pair { inst: k, l, r, lc: d.diff, rc, from_left_delta: true });
            }
        }
    }

    /// R ⋈ ΔS at instant number `k`: the pairs of the right changes `delta` (numbered from
    /// `start` in the step's changes) with the left index.
    fn right_delta_pairs(
        &self,
        k: u32,
        delta: &[DeltaRow<'_>],
        start: usize,
        ls: &mut SideRows<'_>,
        pairs: &mut Vec<Pair>,
    ) {
        for (j, d) in delta.iter().enumerate() {
            let Some(bucket) = d.key.and_then(|key| self.left_index.get(&Probe(key))) else {
                continue;
            };
            for (l, lc) in bucket.iter() {
                let l = ls.copy(l);
                let r = (start + j) as u32;
                pairs.push(Pair { inst: k, l, r, lc, rc: d.diff, from_left_delta: false });
            }
        }
    }

    /// Pass 2: whether each candidate pair satisfies the residual predicate, with the
    /// candidates decoded to evaluate it (both sides' columns); `None` if there is none.
    fn matching(
        &self,
        pairs: &[Pair],
        ls: &SideRows<'_>,
        rs: &SideRows<'_>,
    ) -> Result<Option<(arrow::array::BooleanArray, RecordBatch)>> {
        let Some(f) = &self.filter else { return Ok(None) };
        let n = pairs.len();
        let mut cols = self.left.row_codec.decode(pairs.iter().map(|p| ls.get(p.l)))?;
        cols.extend(self.right.row_codec.decode(pairs.iter().map(|p| rs.get(p.r)))?);
        let fields: Vec<arrow::datatypes::FieldRef> = self
            .left
            .schema
            .fields()
            .iter()
            .chain(self.right.schema.fields().iter())
            .cloned()
            .collect();
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
        let full = RecordBatch::try_new_with_options(
            schema,
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let mask = f.eval_predicate(&full)?;
        Ok(Some((mask, full)))
    }

    /// Pass 3: per instant, the matched pairs and the padding, semi, anti or mark rows that
    /// the tracked match counts change.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        insts: &[Instant],
        pairs: &[Pair],
        mask: &[bool],
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        ls: &mut SideRows<'_>,
        rs: &mut SideRows<'_>,
        out: &mut Out,
    ) {
        let (track_left, track_right) = (self.tracks_left(), self.tracks_right());
        let left_only = self.left_only();
        let mut p = 0;
        for (k, inst) in insts.iter().enumerate() {
            let start = p;
            while p < pairs.len() && pairs[p].inst == k as u32 {
                p += 1;
            }
            let matched: Vec<&Pair> = (start..p).filter(|&i| mask[i]).map(|i| &pairs[i]).collect();
            if !left_only {
                for m in &matched {
                    out.push(Some(m.l), Some(m.r), inst.t, m.lc * m.rc);
                }
            }
            if !track_left && !track_right {
                continue;
            }
            let mut pads: Vec<(RowBytes, bool, i64)> = Vec::new(); // (row, is_left, diff)
            let mut marks: Vec<(RowBytes, i64, bool)> = Vec::new(); // (row, diff, mark)
            if track_left {
                let seen: Vec<Seen<'_>> = matched
                    .iter()
                    .map(|m| (ls.get(m.l), rs.get(m.r), m.rc, m.from_left_delta))
                    .collect();
                let before = Self::track(&mut self.left_rows, &lrows[inst.left.clone()], &seen);
                for r in before.keys() {
                    self.dirty_rows[0].note(&r[..], self.left_rows.len());
                }
                self.left_changes(before, &rrows[inst.right.clone()], &mut pads, &mut marks);
            }
            if track_right {
                let seen: Vec<Seen<'_>> = matched
                    .iter()
                    .map(|m| (rs.get(m.r), ls.get(m.l), m.lc, !m.from_left_delta))
                    .collect();
                let before = Self::track(&mut self.right_rows, &rrows[inst.right.clone()], &seen);
                for r in before.keys() {
                    self.dirty_rows[1].note(&r[..], self.right_rows.len());
                }
                for (r, old) in before {
                    let new = self.right_rows.get(&r).copied().unwrap_or_default();
                    let pad = |tr: Tracked| if tr.matches == 0 { tr.count } else { 0 };
                    let d = pad(new) - pad(old);
                    if d != 0 {
                        pads.push((r, false, d));
                    }
                }
            }
            for (r, is_left, d) in pads {
                if is_left {
                    out.push(Some(ls.copy(&r)), None, inst.t, d);
                } else {
                    out.push(None, Some(rs.copy(&r)), inst.t, d);
                }
            }
            for (r, d, mark) in marks {
                out.push(Some(ls.copy(&r)), None, inst.t, d);
                out.marks.push(mark);
            }
        }
    }

    /// The left side's contribution changes at one instant, from its tracked rows' states
    /// before (`before`) and now: padding, semi or anti rows into `pads`, or a mark join's
    /// (row, mark) changes into `marks`. `right` is the right side's changes at the instant
    /// (the null-aware anti join counts them).
    fn left_changes(
        &mut self,
        before: HashMap<RowBytes, Tracked>,
        right: &[DeltaRow<'_>],
        pads: &mut Vec<(RowBytes, bool, i64)>,
        marks: &mut Vec<(RowBytes, i64, bool)>,
    ) {
        let null_aware = matches!(self.kind, JoinKind::LeftAnti { null_aware: true });
        let (old_total, old_null) = (self.right_total, self.right_null);
        if null_aware {
            for d in right {
                self.right_total += d.diff;
                if d.key.is_none() {
                    self.right_null += d.diff;
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
                pads.push((r, true, d));
            }
        }
    }

    /// `INTERSECT ALL` / `EXCEPT ALL` at one instant: the key is the whole row, so a key's
    /// left bucket holds its m copies on the left and its right bucket its n copies on the
    /// right; the output holds the row f(m, n) times (min(m, n), or max(m − n, 0)). For each
    /// key the instant's changes touch, emits f(m_new, n_new) − f(m_old, n_old) copies of it.
    fn bag_step(
        &mut self,
        inst: &Instant,
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        ls: &mut SideRows<'_>,
        out: &mut Out,
    ) -> Result<()> {
        let count = |index: &Index, key: &[u8]| -> i64 { index.get(key).map_or(0, Bucket::total) };
        // (key, the number of a left change with it)
        let mut touched: Vec<(&[u8], Option<u32>)> = Vec::new();
        let mut at: HashMap<&[u8], usize> = HashMap::new();
        let changes = inst
            .left
            .clone()
            .map(|i| (lrows[i].key, Some(i as u32)))
            .chain(inst.right.clone().map(|j| (rrows[j].key, None)));
        for (key, left_row) in changes {
            let Some(key) = key else { continue };
            match at.get(key) {
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
        Self::apply(&mut self.left_index, &mut self.dirty_keys[0], &lrows[inst.left.clone()]);
        Self::apply(&mut self.right_index, &mut self.dirty_keys[1], &rrows[inst.right.clone()]);
        let intersect = self.kind == JoinKind::IntersectAll;
        let f = |(m, n): (i64, i64)| -> i64 {
            if intersect {
                m.min(n).max(0)
            } else {
                (m - n).max(0)
            }
        };
        for ((key, row), before) in touched.iter().zip(old) {
            let after = (count(&self.left_index, key), count(&self.right_index, key));
            let d = f(after) - f(before);
            if d == 0 {
                continue;
            }
            // The output is a left row with the key (the key is the whole row): one of the
            // instant's changes, or one still in the index. f changes only while the left side
            // has one.
            let id = match row {
                Some(i) => *i,
                None => {
                    let indexed =
                        self.left_index.get(*key).and_then(|b| b.iter().next().map(|(r, _)| r));
                    let Some(r) = indexed else {
                        return Err(weir_common::WeirError::internal(
                            "bag set operation without a row",
                        ));
                    };
                    ls.copy(r)
                }
            };
            out.push(Some(id), None, inst.t, d);
        }
        Ok(())
    }

    /// The output batch: each side's rows decoded once.
    fn output(&self, out: Out, ls: &SideRows<'_>, rs: &SideRows<'_>) -> Result<ChangeBatch> {
        let n = out.rows.len();
        if n == 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let lefts: Vec<Option<&[u8]>> = out.rows.iter().map(|r| r.0.map(|id| ls.get(id))).collect();
        let mut cols = side_columns(&self.left.row_codec, &self.left.schema, &lefts)?;
        if self.kind == JoinKind::LeftMark {
            cols.push(std::sync::Arc::new(arrow::array::BooleanArray::from(out.marks)));
        } else if !self.left_only() {
            let rights: Vec<Option<&[u8]>> =
                out.rows.iter().map(|r| r.1.map(|id| rs.get(id))).collect();
            cols.extend(side_columns(&self.right.row_codec, &self.right.schema, &rights)?);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(data, out.times, out.diffs))
    }
}

impl Operator for Join {
    /// Inputs: the left side's changes, then the right's.
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [dl, dr] = take_inputs::<2>(inputs)?;
        if self.expiry.iter().all(Option::is_none) {
            return self.run(&dl, &dr, step.hi);
        }
        let [le, re] = &mut self.expiry;
        if let Some(e) = le {
            e.rebuild(&self.left_index, &self.left.row_codec, &self.left.schema)?;
        }
        if let Some(e) = re {
            e.rebuild(&self.right_index, &self.right.row_codec, &self.right.schema)?;
        }
        let out = self.run(&dl, &dr, step.hi)?;
        // Rows that nothing still to come can match leave (see [`expiry`]).
        let [le, re] = &mut self.expiry;
        let [ld, rd] = &mut self.dirty_keys;
        if let Some(e) = le {
            e.expire(step.hi, &mut self.left_index, ld);
        }
        if let Some(e) = re {
            e.expire(step.hi, &mut self.right_index, rd);
        }
        Ok(out)
    }

    /// A held window's next move (see [`held`]).
    fn next_wakeup(&self) -> Option<Time> {
        self.held.iter().flatten().filter_map(Held::next_move).min()
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// Both sides' rows by key, and the rows an outer or semi side tracks.
    fn state_bytes(&self) -> usize {
        self.left_index.heap_bytes()
            + self.right_index.heap_bytes()
            + self.left_rows.heap_bytes()
            + self.right_rows.heap_bytes()
            + self.dirty_keys.iter().map(HeapSize::heap_bytes).sum::<usize>()
            + self.dirty_rows.iter().map(HeapSize::heap_bytes).sum::<usize>()
            + self.expiry.iter().flatten().map(HeapSize::heap_bytes).sum::<usize>()
            + self.held.iter().flatten().map(HeapSize::heap_bytes).sum::<usize>()
    }

    /// State: the join's own sections (see [`checkpoint`]).
    fn save_state(&self, w: &mut crate::state::StateWriter) -> Result<()> {
        self.save_own(w)
    }

    /// Rows waiting to expire are not saved: they are rebuilt from the restored indexes.
    fn restore_state(&mut self, r: &mut crate::state::StateReader) -> Result<()> {
        self.expiry.iter_mut().flatten().for_each(Expiry::mark_stale);
        self.restore_own(r)
    }

    /// Changes: see [`checkpoint`].
    fn save_changes(&mut self, w: &mut crate::state::StateWriter) -> Result<bool> {
        let [left, right] = &mut self.dirty_keys;
        let [left_rows, right_rows] = &mut self.dirty_rows;
        let (Some(l), Some(r), Some(lr), Some(rr)) =
            (left.take(), right.take(), left_rows.take(), right_rows.take())
        else {
            return Ok(false);
        };
        self.save_changed(w, [l, r], [lr, rr])?;
        Ok(true)
    }

    fn restore_changes(&mut self, r: &mut crate::state::StateReader) -> Result<()> {
        self.expiry.iter_mut().flatten().for_each(Expiry::mark_stale);
        self.restore_changed(r)
    }

    fn track_changes(&mut self) {
        self.dirty_keys.iter_mut().for_each(DirtyKeys::start);
        self.dirty_rows.iter_mut().for_each(DirtyKeys::start);
    }

    /// Rows with equal join keys meet on one worker, both sides routed by the same key codec
    /// (a join without equality keys, on one worker). The null-aware anti join (`NOT IN`)
    /// counts the right side's NULL keys over all keys, so it runs on one worker.
    fn placement(&self, input: usize) -> Result<Placement> {
        if matches!(self.kind, JoinKind::LeftAnti { null_aware: true }) {
            return Ok(Placement::Single);
        }
        let side = if input == 0 { &self.left } else { &self.right };
        if self.held.iter().flatten().any(Held::has_bounds) {
            // Rows are routed before the join appends a held window's bounds to them.
            let keys = self.routed_keys();
            if keys.is_empty() {
                return Ok(Placement::Single);
            }
            let exprs = keys.iter().map(|&k| side.keys[k].clone()).collect();
            let types = keys.iter().map(|&k| self.key_codec.types()[k].clone()).collect();
            return Ok(Placement::Keyed(KeyRoute::new(exprs, types)?));
        }
        Ok(Placement::Keyed(KeyRoute::new(side.keys.clone(), self.key_codec.types().to_vec())?))
    }
}
