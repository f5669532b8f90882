//! The rows of one join key with their multiplicities: one row inline, several in arrival
//! order.
//!
//! Several rows are kept in the order they first arrived, with a hash table from each row to
//! its place. Iterating a bucket gives its rows oldest first, so the pairs a join emits when
//! a key's partner arrives or leaves come in the order the rows entered: a windowed input's
//! rows then leave an aggregate above the join oldest first too, which its MIN and MAX keep
//! in O(1) (see `aggregate/minmax.rs`), where hash order forced them into an ordered map. A row
//! leaving the front (the oldest row of a window) costs O(1); one leaving the middle leaves a
//! hole that is dropped when it reaches the front, or when holes outnumber rows.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::heap::{allocation, hash_table, HeapSize};
use crate::row::RowBytes;

/// The rows of one key with their multiplicities (never zero). Most keys have one row, which
/// is kept inline instead of in a table of its own; the table of several is boxed, so that a
/// bucket takes no more room in its index's slot than its one row (24 bytes, not 40).
#[derive(Debug, Clone)]
pub(super) enum Bucket {
    One(RowBytes, i64),
    Many(Box<Rows>),
}

/// Two or more rows of one key, in order of arrival (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct Rows {
    /// (row, multiplicity) in order of arrival; multiplicity 0 is a hole left by a row that
    /// left, its bytes already freed. Never starts with a hole.
    entries: VecDeque<(RowBytes, i64)>,
    /// How many entries have left the front: entry `i` has place `popped + i`.
    popped: u64,
    /// The place of every row present, hashed by its bytes, and `stale` places before
    /// `popped`: a row leaving the front is not looked up in the table (it is compared with
    /// the front entry), and its place is dropped from the table in bulk later.
    places: HashTable<u64>,
    stale: usize,
    hasher: DefaultHashBuilder,
}

impl HeapSize for Bucket {
    fn heap_bytes(&self) -> usize {
        match self {
            Bucket::One(row, _) => row.heap_bytes(),
            Bucket::Many(rows) => allocation(size_of::<Rows>()) + rows.heap_bytes(),
        }
    }
}

impl HeapSize for Rows {
    fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes() + hash_table(self.places.capacity(), size_of::<u64>())
    }
}

/// The entry at place `p` of `entries` (whose first entry has place `popped`), unless the
/// place is stale (its row left the front).
fn at(entries: &VecDeque<(RowBytes, i64)>, popped: u64, p: u64) -> Option<&(RowBytes, i64)> {
    entries.get(usize::try_from(p.checked_sub(popped)?).ok()?)
}

impl Rows {
    /// The rows `a` then `b` (distinct), in that order.
    fn two(a: (RowBytes, i64), b: (RowBytes, i64)) -> Self {
        let mut rows = Rows {
            entries: VecDeque::with_capacity(4),
            popped: 0,
            places: HashTable::with_capacity(4),
            stale: 0,
            hasher: DefaultHashBuilder::default(),
        };
        rows.push(a.0, a.1);
        rows.push(b.0, b.1);
        rows
    }

    /// How many rows are present.
    fn len(&self) -> usize {
        self.places.len() - self.stale
    }

    /// Drops the stale places from the table.
    fn drop_stale(&mut self) {
        let popped = self.popped;
        self.places.retain(|p| *p >= popped);
        self.stale = 0;
    }

    /// Appends a row not present.
    fn push(&mut self, row: RowBytes, count: i64) {
        if self.stale > 0 && self.places.len() == self.places.capacity() {
            // Make room from the stale places before growing the table.
            self.drop_stale();
        }
        let place = self.popped + self.entries.len() as u64;
        let Rows { entries, popped, places, hasher, .. } = self;
        let hash = hasher.hash_one(&row[..]);
        // A rehash moves a stale place anywhere: no lookup looks for it again, and
        // `drop_stale` finds it wherever it is.
        places.insert_unique(hash, place, |&p| {
            at(entries, *popped, p).map_or(0, |e| hasher.hash_one(&e.0[..]))
        });
        entries.push_back((row, count));
    }

    /// Adds `diff` to `row`'s multiplicity (`diff` is not zero).
    fn add(&mut self, row: &[u8], diff: i64) {
        if let Some(front) = self.entries.front_mut().filter(|f| &f.0[..] == row) {
            // The oldest row, as a window's rows leave: no lookup.
            front.1 += diff;
            if front.1 == 0 {
                self.stale += 1;
                self.pop_holes();
                if self.stale > self.len() + 8 {
                    self.drop_stale();
                }
            }
            return;
        }
        let hash = self.hasher.hash_one(row);
        let Rows { entries, popped, places, .. } = self;
        let found =
            places.find_entry(hash, |&p| at(entries, *popped, p).is_some_and(|e| &e.0[..] == row));
        let Ok(found) = found else {
            self.push(RowBytes::from(row), diff);
            return;
        };
        let i = (*found.get() - *popped) as usize;
        let count = &mut entries[i].1;
        *count += diff;
        if *count != 0 {
            return;
        }
        found.remove();
        entries[i].0 = RowBytes::default();
        self.pop_holes();
        if self.entries.len() > 2 * self.len() + 8 {
            self.compact();
        }
    }

    /// Pops the holes at the front (the row there left, or the rows before it).
    fn pop_holes(&mut self) {
        while self.entries.front().is_some_and(|e| e.1 == 0) {
            self.entries.pop_front();
            self.popped += 1;
        }
    }

    /// Drops the holes and the stale places, renumbering the places.
    fn compact(&mut self) {
        self.entries.retain(|e| e.1 != 0);
        self.popped = 0;
        self.stale = 0;
        self.places.clear();
        let Rows { entries, places, hasher, .. } = self;
        for (i, (row, _)) in entries.iter().enumerate() {
            let hash = hasher.hash_one(&row[..]);
            places.insert_unique(hash, i as u64, |&p| {
                at(entries, 0, p).map_or(0, |e| hasher.hash_one(&e.0[..]))
            });
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&RowBytes, i64)> + '_ {
        self.entries.iter().filter(|e| e.1 != 0).map(|(r, c)| (r, *c))
    }

    fn count(&self, row: &[u8]) -> i64 {
        let hash = self.hasher.hash_one(row);
        let Rows { entries, popped, places, .. } = self;
        places
            .find(hash, |&p| at(entries, *popped, p).is_some_and(|e| &e.0[..] == row))
            .and_then(|&p| at(entries, *popped, p))
            .map_or(0, |e| e.1)
    }

    /// The one row left, taken out.
    fn take_single(&mut self) -> Option<(RowBytes, i64)> {
        if self.len() != 1 {
            return None;
        }
        let e = self.entries.iter_mut().find(|e| e.1 != 0)?;
        Some((std::mem::take(&mut e.0), e.1))
    }
}

impl Bucket {
    /// The rows and their multiplicities, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RowBytes, i64)> + '_ {
        let (one, many) = match self {
            Bucket::One(r, c) => (Some((r, *c)), None),
            Bucket::Many(m) => (None, Some(m.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// Adds `diff` to `row`'s multiplicity (`diff` is not zero); returns whether the bucket is
    /// now empty.
    pub(super) fn add(&mut self, row: &[u8], diff: i64) -> bool {
        match self {
            Bucket::One(r, c) if &r[..] == row => {
                *c += diff;
                *c == 0
            }
            Bucket::One(r, c) => {
                let rows = Rows::two((std::mem::take(r), *c), (RowBytes::from(row), diff));
                *self = Bucket::Many(Box::new(rows));
                false
            }
            Bucket::Many(m) => {
                m.add(row, diff);
                if let Some((r, c)) = m.take_single() {
                    *self = Bucket::One(r, c);
                    return false;
                }
                m.len() == 0
            }
        }
    }

    /// The multiplicity of `row` (0 if absent).
    pub(super) fn count(&self, row: &[u8]) -> i64 {
        match self {
            Bucket::One(r, c) => {
                if &r[..] == row {
                    *c
                } else {
                    0
                }
            }
            Bucket::Many(m) => m.count(row),
        }
    }

    /// The sum of the multiplicities.
    pub(super) fn total(&self) -> i64 {
        self.iter().map(|(_, c)| c).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::Bucket;
    use crate::row::RowBytes;

    /// The rows in the bucket's order.
    fn in_order(b: &Bucket) -> Vec<(Vec<u8>, i64)> {
        b.iter().map(|(r, c)| (r.to_vec(), c)).collect()
    }

    fn contents(b: &Bucket) -> Vec<(Vec<u8>, i64)> {
        let mut v: Vec<(Vec<u8>, i64)> = b.iter().map(|(r, c)| (r.to_vec(), c)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_bucket_is_as_small_as_one_row() {
        // A row's encoding and its count; the boxed map fits in their room.
        assert_eq!(std::mem::size_of::<Bucket>(), std::mem::size_of::<(RowBytes, i64)>());
    }

    #[test]
    fn a_bucket_grows_from_one_row_and_empties_exactly() {
        let mut b = Bucket::One(b"a"[..].into(), 1);
        assert!(!b.add(b"a", 2));
        assert_eq!(contents(&b), [(b"a".to_vec(), 3)]);
        assert!(!b.add(b"b", 1));
        assert!(matches!(b, Bucket::Many(_)));
        assert_eq!(contents(&b), [(b"a".to_vec(), 3), (b"b".to_vec(), 1)]);
        assert_eq!(b.total(), 4);
        // Back to one row: kept inline again.
        assert!(!b.add(b"a", -3));
        assert!(matches!(b, Bucket::One(..)));
        assert_eq!(contents(&b), [(b"b".to_vec(), 1)]);
        assert!(b.add(b"b", -1));
    }

    #[test]
    fn rows_iterate_in_arrival_order_whatever_leaves() {
        let row = |i: u32| i.to_be_bytes().to_vec();
        let mut b = Bucket::One(row(0).into(), 1);
        for i in 1..50 {
            assert!(!b.add(&row(i), 1));
        }
        // The oldest leave first (a window), then some from the middle, then one returns.
        for i in 0..10 {
            assert!(!b.add(&row(i), -1));
        }
        for i in (20..40).step_by(3) {
            assert!(!b.add(&row(i), -1));
        }
        assert!(!b.add(&row(3), 2));
        assert!(!b.add(&row(45), 4));
        let mut want: Vec<(Vec<u8>, i64)> = (10..50)
            .filter(|i| !(20..40).contains(i) || (i - 20) % 3 != 0)
            .map(|i| (row(i), if i == 45 { 5 } else { 1 }))
            .collect();
        want.push((row(3), 2));
        assert_eq!(in_order(&b), want);
        assert_eq!(b.count(&row(45)), 5);
        assert_eq!(b.count(&row(20)), 0);
        assert_eq!(b.count(&row(3)), 2);
        assert_eq!(b.total(), want.iter().map(|w| w.1).sum::<i64>());
    }

    /// Against a map of counts under a pseudo-random mix of arrivals, departures from the
    /// front and from anywhere, including rows that were never there (negative counts): the
    /// same multiset at every step, in order of each row's latest arrival, and holes bounded.
    #[test]
    fn rows_match_a_map_of_counts() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut b = Bucket::One(vec![0u8].into(), 1);
        let mut want: BTreeMap<Vec<u8>, i64> = BTreeMap::from([(vec![0u8], 1)]);
        // Each row's latest arrival (when its count left zero).
        let mut arrived: BTreeMap<Vec<u8>, u64> = BTreeMap::from([(vec![0u8], 0)]);
        for step in 1..20_000u64 {
            let row = vec![next(300) as u8, next(2) as u8];
            let diff = match next(4) {
                0 => -1,
                1 => 2,
                _ => 1,
            };
            let old = want.get(&row).copied().unwrap_or(0);
            let new = old + diff;
            if old == 0 {
                arrived.insert(row.clone(), step);
            }
            if new == 0 {
                want.remove(&row);
            } else {
                want.insert(row.clone(), new);
            }
            let empty = b.add(&row, diff);
            assert_eq!(empty, want.is_empty());
            if empty {
                b = Bucket::One(vec![0u8].into(), 1);
                want.insert(vec![0u8], 1);
                arrived.insert(vec![0u8], step);
            }
            if step % 97 == 0 {
                let mut order: Vec<(u64, Vec<u8>)> =
                    want.keys().map(|r| (arrived[r], r.clone())).collect();
                order.sort();
                let expected: Vec<(Vec<u8>, i64)> =
                    order.into_iter().map(|(_, r)| (r.clone(), want[&r])).collect();
                assert_eq!(in_order(&b), expected);
                if let Bucket::Many(rows) = &b {
                    assert!(rows.entries.len() <= 2 * rows.len() + 8);
                    assert!(rows.stale <= rows.len() + 8);
                    assert!(rows.entries.front().is_some_and(|e| e.1 != 0));
                }
            }
        }
    }

    /// Rows leaving from the front as a window's do, while the window widens (so the table
    /// grows with stale places in it) and then narrows: every row present is found, every
    /// row gone is not, in arrival order.
    #[test]
    fn a_sliding_window_of_rows_is_found_exactly() {
        let row = |i: u64| i.to_le_bytes().to_vec();
        let mut b = Bucket::One(row(0).into(), 1);
        let (mut lo, mut hi) = (0u64, 1u64); // rows lo..hi are present
        for step in 0..6000u64 {
            let width = if step < 3000 { 2 + step / 10 } else { 2 + (6000 - step) / 10 };
            assert!(!b.add(&row(hi), 1));
            hi += 1;
            while hi - lo > width {
                assert!(!b.add(&row(lo), -1));
                lo += 1;
            }
            if step % 251 == 0 {
                let want: Vec<(Vec<u8>, i64)> = (lo..hi).map(|i| (row(i), 1)).collect();
                assert_eq!(in_order(&b), want);
                for i in lo.saturating_sub(20)..hi + 5 {
                    assert_eq!(b.count(&row(i)), i64::from((lo..hi).contains(&i)), "row {i}");
                }
                if let Bucket::Many(rows) = &b {
                    assert!(rows.stale <= rows.len() + 8);
                }
            }
        }
    }
}
