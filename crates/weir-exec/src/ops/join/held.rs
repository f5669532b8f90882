//! A join side held as a window that replaces its whole contents at each move: `[RANGE T
//! SLIDE S OFFSET O]` with T ≤ S (a tumbling window, or one with gaps), over the side's input
//! stream (the plan's `Join::held`; why and when: `weir_plan::held`).
//!
//! Delta semantics: the side at instant τ is the window current at τ, the elements stamped in
//! [b − T, b) with b = S·⌊(τ + 1 − O)/S⌋ + O, exactly as the window operator under a join
//! would make it. It changes only at the windows' last ticks b − 1: there the elements of
//! [b − T, b) enter and the window before leaves, so ΔX = X_next − X_current, and the join's
//! rule Δ(L ⋈ R) = ΔL ⋈ R_old + L_new ⋈ ΔR holds unchanged. An element in a gap (T < S) is
//! in no window; one whose window ends past the time domain never enters.
//!
//! The elements of the window still to come are indexed by key as they arrive, apart from the
//! side's current contents (the join's index of the side), and at the window's last tick the
//! two are swapped: nothing is inserted or removed row by row. The pairs the move makes and
//! ends are found by probing from the smaller: the other side's keys, or the keys of the two
//! windows. Keys are visited in a fixed order (each window's keys in order of first arrival,
//! the other side's sorted), and a key's rows in order of arrival, so replays give the same
//! output in the same order. The side asks to be woken at the next tick where a window enters
//! or the current one leaves, which are the window's own instants.
//!
//! State: the current window's rows and the next one's, each with its keys in order of first
//! arrival; the last tick of the next window; the tick at which the current one leaves.
//! Checkpointed whole, also in an incremental checkpoint, as a window operator is (sections
//! in [`super::checkpoint`]).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use super::bucket::Bucket;
use super::rows::{DeltaRow, Instant, Pair, SideRows};
use super::{add_to, Added, Index, Join, Key};
use crate::heap::HeapSize;
use crate::ops::batch_of;
use crate::ops::window_time::slide_entry;
use crate::row::RowBytes;

/// A side held as a window (see the module docs).
#[derive(Debug)]
pub struct Held {
    range: Time,
    slide: Time,
    /// Whether the side's rows carry their window's `window_start` and `window_end` (the
    /// side's last two columns), appended to each element as it arrives.
    bounds: bool,
    /// In [0, slide).
    offset: Time,
    /// The keys of the current window (the join's index of the side), in order of first
    /// arrival.
    pub(super) current_keys: Vec<Key>,
    /// The rows of the next window, by key, and its keys in order of first arrival.
    pub(super) pending: Index,
    pub(super) pending_keys: Vec<Key>,
    /// Whether a key left `pending` (its rows cancelled out), so that `pending_keys` may
    /// name it twice.
    pending_left: bool,
    /// The last tick of the window `pending` holds, once an element of it arrived.
    pub(super) pending_at: Option<Time>,
    /// When the current window leaves (the last tick of the window after it), if it holds
    /// anything and that tick is in the time domain.
    pub(super) until: Option<Time>,
    /// The rows of the window that left at the last move, freed a few at a time in the steps
    /// after it: freeing a whole window at once would hold up the move's output.
    leaving: Option<<Index as IntoIterator>::IntoIter>,
}

/// A held window's row in a checkpoint: key, row, count, and whether of the next window.
pub(super) type HeldRow<'a> = (&'a [u8], &'a [u8], i64, bool);

/// Rows of a window that left freed per step, at least, and per element the step admits.
const FREED_PER_STEP: usize = 1024;
const FREED_PER_ELEMENT: usize = 4;

impl HeapSize for Held {
    /// The rows still to be freed are counted at the size of a key and a bucket of one row.
    fn heap_bytes(&self) -> usize {
        let leaving = self.leaving.as_ref().map_or(0, |rows| rows.len());
        self.current_keys.heap_bytes()
            + self.pending.heap_bytes()
            + self.pending_keys.heap_bytes()
            + leaving * (size_of::<Key>() + size_of::<Bucket>())
    }
}

fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Held {
    /// `[RANGE range SLIDE slide OFFSET offset]`; an internal error unless 0 < range ≤ slide.
    pub fn new(range: Time, slide: Time, offset: Time) -> Result<Self> {
        if range < 1 || range > slide {
            return Err(WeirError::internal(format!(
                "a join holds windows of range ≤ slide, not [RANGE {range} SLIDE {slide}]"
            )));
        }
        Ok(Held {
            range,
            slide,
            bounds: false,
            offset: offset.rem_euclid(slide),
            current_keys: Vec::new(),
            pending: Index::new(),
            pending_keys: Vec::new(),
            pending_left: false,
            pending_at: None,
            until: None,
            leaving: None,
        })
    }

    /// A window whose rows carry its bounds (TUMBLE's), the side's last two columns.
    pub fn with_bounds_columns(mut self, bounds: bool) -> Self {
        self.bounds = bounds;
        self
    }

    /// The parameters, for the join's state signature.
    pub(super) fn params(&self) -> (Time, Time, Time, bool) {
        (self.range, self.slide, self.offset, self.bounds)
    }

    /// Whether the side's rows carry their window's bounds (its last two columns).
    pub(super) fn has_bounds(&self) -> bool {
        self.bounds
    }

    /// The elements `d` with their windows' bounds appended, as rows of `schema`: [b − range,
    /// b) for the window whose last tick b − 1 takes each in (an element in no window gets
    /// any bounds: it never enters).
    fn with_bounds(&self, d: &ChangeBatch, schema: &SchemaRef) -> Result<ChangeBatch> {
        let clamp = |v: i128| v.clamp(Time::MIN as i128, Time::MAX as i128) as i64;
        let (mut starts, mut ends) = (Vec::with_capacity(d.len()), Vec::with_capacity(d.len()));
        for &t in &d.times {
            let end = self.close_of(t).map_or(0, |c| c as i128 + 1);
            starts.push(clamp(end - self.range as i128));
            ends.push(clamp(end));
        }
        let mut cols = d.data.columns().to_vec();
        cols.push(Arc::new(Int64Array::from(starts)) as ArrayRef);
        cols.push(Arc::new(Int64Array::from(ends)) as ArrayRef);
        let data = batch_of(schema, cols, d.len())?;
        Ok(ChangeBatch::new(data, d.times.clone(), d.diffs.clone()))
    }

    /// The last tick of the window an element stamped `t` is in; None if it is in a gap
    /// between windows or its window ends past the time domain.
    fn close_of(&self, t: Time) -> Option<Time> {
        slide_entry(self.range, self.slide, self.offset, t)
    }

    /// The next tick at which the side changes: a window enters or the current one leaves.
    pub(super) fn next_move(&self) -> Option<Time> {
        earliest(self.pending_at, self.until)
    }

    /// The ticks in (last evaluated, `hi`] at which the side changes, given the times of the
    /// step's elements (sorted): what [`Held::admit`] and [`Held::swap`] will do, in order.
    fn moves(&self, times: &[Time], hi: Time) -> Vec<Time> {
        let (mut pending, mut until) = (self.pending_at, self.until);
        let mut ticks = Vec::new();
        let mut i = 0;
        loop {
            // The elements up to the next move are in the window that enters there (an
            // element after the current window entered is in the next one, or in a gap).
            while let Some(&t) = times.get(i) {
                if earliest(pending, until).is_some_and(|next| t > next) {
                    break;
                }
                if let Some(c) = self.close_of(t) {
                    pending = Some(c);
                }
                i += 1;
            }
            match earliest(pending, until) {
                Some(t) if t <= hi => {
                    ticks.push(t);
                    if pending == Some(t) {
                        until = t.checked_add(self.slide);
                        pending = None;
                    } else {
                        until = None;
                    }
                }
                _ => return ticks,
            }
        }
    }

    /// Indexes the elements `rows[*from..]` stamped up to `upto` (all of them if None) into
    /// the next window; advances `from`. Elements in gaps are dropped, and those whose key is
    /// NULL only mark their window (they match nothing).
    fn admit(
        &mut self,
        rows: &[DeltaRow<'_>],
        times: &[Time],
        from: &mut usize,
        upto: Option<Time>,
    ) -> Result<()> {
        while let (Some(row), Some(&t)) = (rows.get(*from), times.get(*from)) {
            if upto.is_some_and(|u| t > u) {
                break;
            }
            *from += 1;
            let Some(close) = self.close_of(t) else { continue };
            match self.pending_at {
                Some(p) if p != close => {
                    return Err(WeirError::internal(format!(
                        "a held window's element stamped {t} arrived before the window ending \
                         at {p} moved"
                    )));
                }
                _ => self.pending_at = Some(close),
            }
            let Some(key) = row.key else { continue };
            if row.diff == 0 {
                continue;
            }
            match add_to(&mut self.pending, key, row.row, row.diff) {
                Added::NewKey => self.pending_keys.push(Key::from_slice(key)),
                Added::KeyLeft => self.pending_left = true,
                Added::Changed => {}
            }
        }
        Ok(())
    }

    /// Hands the window that left at a move over to be freed over the next steps (what is
    /// left of the one before is freed now).
    fn leave(&mut self, old: Index) {
        self.leaving = Some(old.into_iter());
    }

    /// Frees up to `n` rows of the window that left last.
    fn free_some(&mut self, n: usize) {
        if let Some(rows) = self.leaving.as_mut() {
            rows.by_ref().take(n).for_each(drop);
            if rows.len() == 0 {
                self.leaving = None;
            }
        }
    }

    /// The move at tick `t`: the next window becomes `index` (the side's contents) if it ends
    /// there, else the side empties; returns the window that left, with its keys.
    fn swap(&mut self, t: Time, index: &mut Index) -> (Index, Vec<Key>) {
        let (next, keys) = if self.pending_at == Some(t) {
            self.pending_at = None;
            self.until = t.checked_add(self.slide);
            let mut keys = std::mem::take(&mut self.pending_keys);
            if std::mem::take(&mut self.pending_left) {
                let mut seen = datafusion_common::HashSet::with_capacity(keys.len());
                keys.retain(|k| seen.insert(k.clone()));
            }
            (std::mem::take(&mut self.pending), keys)
        } else {
            self.until = None;
            (Index::new(), Vec::new())
        };
        let old = std::mem::replace(index, next);
        (old, std::mem::replace(&mut self.current_keys, keys))
    }
}

/// The step's instants with `ticks` (sorted) among them: an instant at a tick that has none
/// holds no changes.
fn with_ticks(insts: Vec<Instant>, ticks: &[Time]) -> Vec<Instant> {
    if ticks.is_empty() {
        return insts;
    }
    let mut out = Vec::with_capacity(insts.len() + ticks.len());
    let (mut l, mut r) = (0, 0);
    let mut ticks = ticks.iter().copied().peekable();
    for inst in insts {
        while let Some(t) = ticks.next_if(|&t| t < inst.t) {
            out.push(Instant { t, left: l..l, right: r..r });
        }
        ticks.next_if_eq(&inst.t);
        (l, r) = (inst.left.end, inst.right.end);
        out.push(inst);
    }
    out.extend(ticks.map(|t| Instant { t, left: l..l, right: r..r }));
    out
}

/// Which side of the join, and its rows and index as a move on it sees them.
struct Moving<'s, 'a, 'b> {
    left: bool,
    own: &'s mut SideRows<'a>,
    other: &'s mut SideRows<'b>,
}

impl Moving<'_, '_, '_> {
    /// A pair of an own row (with `own` its diff) and an other side's row (`other` its
    /// multiplicity) at instant `inst`.
    fn pair(&mut self, inst: u32, own: (&[u8], i64), other: (&[u8], i64)) -> Pair {
        let (o, p) = (self.own.copy(own.0), self.other.copy(other.0));
        if self.left {
            Pair { inst, l: o, r: p, lc: own.1, rc: other.1, from_left_delta: true }
        } else {
            Pair { inst, l: p, r: o, lc: other.1, rc: own.1, from_left_delta: false }
        }
    }
}

/// The pairs a move makes and ends: (old window ⋈ other) with the old rows' multiplicities
/// negated, then (new window ⋈ other), probing from whichever has fewer keys: the other
/// side's keys (sorted, for a fixed order), or each window's own (in order of arrival).
fn move_pairs(
    inst: u32,
    old: (&Index, &[Key]),
    new: (&Index, &[Key]),
    other: &Index,
    sides: &mut Moving<'_, '_, '_>,
    pairs: &mut Vec<Pair>,
) {
    let from_other = other.len() < old.0.len() + new.0.len();
    let mut other_keys: Vec<&Key> = Vec::new();
    if from_other {
        other_keys.extend(other.keys());
        other_keys.sort_unstable();
    }
    // The pairs of one key of a window, its rows' multiplicities times `sign`.
    let mut pairs_of = |window: &Index, key: &Key, sign: i64| {
        let (Some(own), Some(theirs)) = (window.get(key), other.get(key)) else { return };
        for (r, c) in own.iter() {
            for (o, oc) in theirs.iter() {
                pairs.push(sides.pair(inst, (r, sign * c), (o, oc)));
            }
        }
    };
    for ((window, own_keys), sign) in [(old, -1), (new, 1)] {
        if from_other {
            other_keys.iter().for_each(|key| pairs_of(window, key, sign));
        } else {
            own_keys.iter().for_each(|key| pairs_of(window, key, sign));
        }
    }
}

impl Join {
    /// Whether a side is held as a window.
    pub(super) fn holds(&self) -> bool {
        self.held.iter().any(Option::is_some)
    }

    /// Side `side`'s input changes as the join sees them, if not as they are: a held window's
    /// elements with their bounds appended, when its rows carry them.
    pub(super) fn side_input(&self, side: usize, d: &ChangeBatch) -> Result<Option<ChangeBatch>> {
        match &self.held[side] {
            Some(h) if h.bounds => {
                let schema = if side == 0 { &self.left.schema } else { &self.right.schema };
                h.with_bounds(d, schema).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The join keys (positions) that route rows to workers: all of them, except keys that
    /// read a held window's bounds, which its input rows do not have yet.
    pub(super) fn routed_keys(&self) -> Vec<usize> {
        let sides = [&self.left, &self.right];
        // Whether key `k` of side `s` reads the bounds the join appends to that side's rows.
        let reads_bounds = |s: usize, k: usize| {
            let first = sides[s].schema.fields().len().saturating_sub(2);
            self.held[s].as_ref().is_some_and(|h| h.bounds)
                && sides[s].keys[k].columns().iter().any(|&c| c >= first)
        };
        (0..self.left.keys.len()).filter(|&k| !reads_bounds(0, k) && !reads_bounds(1, k)).collect()
    }

    /// Pass 1 of a step of a join that holds a window (see the module docs and
    /// [`Join::candidates`]): the step's instants, its held windows' moves among them, and
    /// the candidate pairs of every instant; both indexes updated on the way, the elements of
    /// held sides indexed into their next windows.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn held_candidates(
        &mut self,
        times: [&[Time]; 2],
        hi: Time,
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        ls: &mut SideRows<'_>,
        rs: &mut SideRows<'_>,
    ) -> Result<(Vec<Instant>, Vec<Pair>)> {
        let none: &[Time] = &[];
        let changes = |side: usize| if self.held[side].is_some() { none } else { times[side] };
        let mut moves: [Vec<Time>; 2] = Default::default();
        for (side, held) in self.held.iter().enumerate() {
            if let Some(h) = held {
                moves[side] = h.moves(times[side], hi);
            }
        }
        let mut ticks: Vec<Time> = moves.iter().flatten().copied().collect();
        ticks.sort_unstable();
        ticks.dedup();
        let insts = with_ticks(super::rows::instants(changes(0), changes(1)), &ticks);
        let mut next = [0usize; 2];
        let mut from = [0usize; 2];
        let mut pairs = Vec::new();
        for (k, inst) in insts.iter().enumerate() {
            let k = k as u32;
            // ΔL ⋈ R_old, then L's changes applied.
            if self.held[0].is_some() {
                if moves[0].get(next[0]) == Some(&inst.t) {
                    next[0] += 1;
                    let mut sides = Moving { left: true, own: ls, other: rs };
                    self.move_side(
                        0,
                        inst.t,
                        k,
                        lrows,
                        times[0],
                        &mut from[0],
                        &mut sides,
                        &mut pairs,
                    )?;
                }
            } else {
                self.left_delta_pairs(
                    k,
                    &lrows[inst.left.clone()],
                    inst.left.start,
                    rs,
                    &mut pairs,
                );
                Self::apply(
                    &mut self.left_index,
                    &mut self.dirty_keys[0],
                    &lrows[inst.left.clone()],
                );
            }
            // L_new ⋈ ΔR, then R's changes applied.
            if self.held[1].is_some() {
                if moves[1].get(next[1]) == Some(&inst.t) {
                    next[1] += 1;
                    let mut sides = Moving { left: false, own: rs, other: ls };
                    self.move_side(
                        1,
                        inst.t,
                        k,
                        rrows,
                        times[1],
                        &mut from[1],
                        &mut sides,
                        &mut pairs,
                    )?;
                }
            } else {
                self.right_delta_pairs(
                    k,
                    &rrows[inst.right.clone()],
                    inst.right.start,
                    ls,
                    &mut pairs,
                );
                Self::apply(
                    &mut self.right_index,
                    &mut self.dirty_keys[1],
                    &rrows[inst.right.clone()],
                );
            }
        }
        // The elements after the step's last move wait for their window.
        for (side, rows) in [lrows, rrows].into_iter().enumerate() {
            if let Some(h) = self.held[side].as_mut() {
                h.admit(rows, times[side], &mut from[side], None)?;
                h.free_some(FREED_PER_STEP.max(FREED_PER_ELEMENT * rows.len()));
            }
        }
        Ok((insts, pairs))
    }

    /// The move of held side `side` at tick `t` (instant number `k`): its elements up to `t`
    /// join the next window, the pairs the move makes and ends go to `pairs`, and the next
    /// window becomes the side's index.
    #[allow(clippy::too_many_arguments)]
    fn move_side(
        &mut self,
        side: usize,
        t: Time,
        k: u32,
        rows: &[DeltaRow<'_>],
        times: &[Time],
        from: &mut usize,
        sides: &mut Moving<'_, '_, '_>,
        pairs: &mut Vec<Pair>,
    ) -> Result<()> {
        let Some(held) = self.held[side].as_mut() else {
            return Err(WeirError::internal("a move of a join side that holds no window"));
        };
        held.admit(rows, times, from, Some(t))?;
        let (own, other) = if side == 0 {
            (&mut self.left_index, &self.right_index)
        } else {
            (&mut self.right_index, &self.left_index)
        };
        let (old, old_keys) = held.swap(t, own);
        move_pairs(k, (&old, &old_keys), (own, &held.current_keys), other, sides, pairs);
        held.leave(old);
        Ok(())
    }

    /// The state of the held sides, for a checkpoint: per side, its current window's rows
    /// and then its next window's, each in key order of first arrival (key, row, count,
    /// whether of the next window).
    pub(super) fn held_rows(&self, side: usize) -> Vec<HeldRow<'_>> {
        let Some(h) = &self.held[side] else { return Vec::new() };
        let index = if side == 0 { &self.left_index } else { &self.right_index };
        let mut rows = Vec::new();
        for (window, keys, next) in
            [(index, &h.current_keys, false), (&h.pending, &h.pending_keys, true)]
        {
            for key in keys {
                if let Some(bucket) = window.get(key) {
                    rows.extend(bucket.iter().map(|(r, c)| (&key[..], &r[..], c, next)));
                }
            }
        }
        rows
    }
}

/// Rebuilds a window's index and its keys' order from checkpointed (key, row, count) rows in
/// key order of first arrival, each key's rows together.
pub(super) fn rebuild<'a>(
    rows: impl Iterator<Item = (&'a [u8], &'a [u8], i64)>,
) -> Result<(Index, Vec<Key>)> {
    let mut index = Index::new();
    let mut keys = Vec::new();
    for (key, row, count) in rows {
        if count < 1 {
            return Err(crate::state::invalid("a held window's row with a count below 1"));
        }
        match index.get_mut(key) {
            Some(bucket) if keys.last().is_some_and(|k: &Key| &k[..] == key) => {
                bucket.add(row, count);
            }
            Some(_) => return Err(crate::state::invalid("a held window's key appears twice")),
            None => {
                keys.push(Key::from_slice(key));
                index.insert(Key::from_slice(key), Bucket::One(RowBytes::from(row), count));
            }
        }
    }
    Ok((index, keys))
}
