//! One ranking partition's rows in rank order, each (order key, row) with its multiplicity:
//! a sorted vector while the partition is small, a B-tree beyond. An entry's order key and
//! row are one allocation ([`Entry`]).
//!
//! Most partitions of a top-N hold a handful of rows (at most N and the rows tied with the
//! last, over an insert-only input), where a B-tree costs a whole node (eleven slots) even for
//! one row, and cutting its tail (`split_off`) allocates a node to drop it. A sorted vector
//! holds exactly its rows, finds an entry by binary search, inserts by moving the entries
//! after it (a few dozen bytes each), and cuts its tail in place. Past [`SMALL`] entries the
//! moves would grow with the partition, so it becomes a B-tree (and stays one). An entry
//! keeps its order key's first 8 bytes inline, so that a B-tree's descent through a large
//! partition compares keys in its nodes instead of one other allocation per comparison.

use std::collections::btree_map::{self, BTreeMap};

use crate::heap::HeapSize;
use crate::row::RowBytes;

/// A partition's entry, borrowed: (order key, row), ordered as the tuple.
pub(super) type Key<'a> = (&'a [u8], &'a [u8]);

/// A partition's entry, owned: the order key and the row in one allocation (an entry is one
/// allocation, not two), ordered as (order key, row), with the order key's first bytes kept
/// inline (32 bytes in its vector or node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// [`prefix`] of the order key. Two entries whose prefixes differ are ordered by them,
    /// so a B-tree's descent through a large partition compares the keys in its nodes and
    /// reads an entry's allocation only on a tie: without it, every comparison on the way
    /// was a cache miss on another allocation (the cost per change grew with the partition).
    prefix: u64,
    bytes: RowBytes,
    /// Where the row starts in `bytes`.
    split: usize,
}

/// The first 8 bytes of an order key, zero-padded, as a big-endian integer. Integers order as
/// the byte strings they come from, up to ties: a zero pad sorts where a shorter key does
/// (before any longer one it begins), and a key whose 8 bytes tie with another's is ordered
/// by the whole entry.
fn prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

impl Entry {
    pub fn new((key, row): Key<'_>) -> Entry {
        let mut bytes = Vec::with_capacity(key.len() + row.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(row);
        Entry { prefix: prefix(key), bytes: bytes.into_boxed_slice(), split: key.len() }
    }

    /// (order key, row).
    pub fn key(&self) -> Key<'_> {
        self.bytes.split_at(self.split)
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| self.key().cmp(&other.key()))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl HeapSize for Entry {
    fn heap_bytes(&self) -> usize {
        self.bytes.heap_bytes()
    }
}

/// The entries a partition keeps in a sorted vector before it becomes a B-tree.
const SMALL: usize = 32;

#[derive(Debug, Clone)]
pub(super) enum Partition {
    Small(Vec<(Entry, i64)>),
    Large(BTreeMap<Entry, i64>),
}

impl Default for Partition {
    fn default() -> Self {
        Partition::Small(Vec::new())
    }
}

/// The entries of a partition in order.
pub(super) enum Iter<'a> {
    Small(std::slice::Iter<'a, (Entry, i64)>),
    Large(btree_map::Iter<'a, Entry, i64>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (Key<'a>, i64);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(i) => i.next().map(|(e, c)| (e.key(), *c)),
            Iter::Large(i) => i.next().map(|(e, c)| (e.key(), *c)),
        }
    }
}

impl Partition {
    pub fn iter(&self) -> Iter<'_> {
        match self {
            Partition::Small(v) => Iter::Small(v.iter()),
            Partition::Large(m) => Iter::Large(m.iter()),
        }
    }

    /// A small partition's entries, in order (`None` for a large one).
    pub fn small(&self) -> Option<&[(Entry, i64)]> {
        match self {
            Partition::Small(v) => Some(v),
            Partition::Large(_) => None,
        }
    }

    /// Where `key` is in a small partition's entries, or would be inserted: (index, found).
    /// `None` for a large partition.
    pub fn locate(&self, key: Key<'_>) -> Option<(usize, bool)> {
        match self {
            Partition::Small(v) => Some(match v.binary_search_by(|(e, _)| e.key().cmp(&key)) {
                Ok(i) => (i, true),
                Err(i) => (i, false),
            }),
            Partition::Large(_) => None,
        }
    }

    /// [`Partition::add`] at `at`, where [`Partition::locate`] found `key` in a small
    /// partition (the entries must not have changed before `at` since); a large partition
    /// finds `key` itself and ignores `at`.
    pub fn add_at(&mut self, at: (usize, bool), key: Key<'_>, n: i64) -> i64 {
        match (self, at) {
            (Partition::Small(v), (i, true)) => {
                v[i].1 += n;
                let c = v[i].1;
                if c == 0 {
                    v.remove(i);
                }
                c
            }
            (this @ Partition::Small(_), (i, false)) => {
                if let Partition::Small(v) = this {
                    v.insert(i, (Entry::new(key), n));
                    if v.len() > SMALL {
                        *this = Partition::Large(std::mem::take(v).into_iter().collect());
                    }
                }
                n
            }
            (Partition::Large(m), _) => match m.entry(Entry::new(key)) {
                btree_map::Entry::Occupied(mut o) => {
                    *o.get_mut() += n;
                    let c = *o.get();
                    if c == 0 {
                        o.remove();
                    }
                    c
                }
                btree_map::Entry::Vacant(v) => *v.insert(n),
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Partition::Small(v) => v.is_empty(),
            Partition::Large(m) => m.is_empty(),
        }
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        match self {
            Partition::Small(v) => v.len(),
            Partition::Large(m) => m.len(),
        }
    }

    /// Applies `changes` (sorted by entry, no entry twice, none zero) by merging them with the
    /// entries in one ordered pass and building the partition again, where [`Partition::add`]
    /// would search for each change (in a large partition, a descent of the B-tree each). For
    /// a step that changes a large share of a partition, such as a window's close that
    /// retracts every row and inserts the next window's. Entries are moved, not copied; a new
    /// entry is allocated as `add` allocates it. Returns false if a multiplicity went below
    /// zero (the partition then holds what the merge made of it).
    pub fn merge_sorted<'k>(&mut self, changes: impl IntoIterator<Item = (Key<'k>, i64)>) -> bool {
        let large = matches!(self, Partition::Large(_));
        let entries: Vec<(Entry, i64)> = match std::mem::take(self) {
            Partition::Small(v) => v,
            Partition::Large(m) => m.into_iter().collect(),
        };
        let mut merged = Vec::with_capacity(entries.len());
        let mut entries = entries.into_iter().peekable();
        let mut ok = true;
        for (key, n) in changes {
            while let Some(e) = entries.next_if(|(e, _)| e.key() < key) {
                merged.push(e);
            }
            let (entry, c) = match entries.next_if(|(e, _)| e.key() == key) {
                Some((e, c)) => (e, c + n),
                None => (Entry::new(key), n),
            };
            ok &= c >= 0;
            if c != 0 {
                merged.push((entry, c));
            }
        }
        merged.extend(entries);
        *self = if large || merged.len() > SMALL {
            // Collected from entries in order: the B-tree is built leaf by leaf.
            Partition::Large(merged.into_iter().collect())
        } else {
            Partition::Small(merged)
        };
        ok
    }

    /// Adds `n` (not zero) to `key`'s multiplicity, removing it at zero; returns the new
    /// multiplicity. An entry is allocated only when it is new.
    pub fn add(&mut self, key: Key<'_>, n: i64) -> i64 {
        // (A large partition has no place to locate: it finds the key itself.)
        let at = self.locate(key).unwrap_or((0, false));
        self.add_at(at, key, n)
    }

    /// Keeps the first `n` entries and drops the rest.
    pub fn truncate(&mut self, n: usize) {
        match self {
            Partition::Small(v) => v.truncate(n),
            Partition::Large(m) => {
                if let Some(cut) = m.keys().nth(n).cloned() {
                    drop(m.split_off(&cut));
                }
            }
        }
    }
}

impl HeapSize for Partition {
    fn heap_bytes(&self) -> usize {
        match self {
            Partition::Small(v) => v.heap_bytes(),
            Partition::Large(m) => m.heap_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 256] = {
        let mut b = [0u8; 256];
        let mut i = 0;
        while i < 256 {
            b[i] = i as u8;
            i += 1;
        }
        b
    };

    fn key(k: u8, row: u8) -> Key<'static> {
        (&BYTES[k as usize..][..1], &BYTES[row as usize..][..1])
    }

    fn entries(p: &Partition) -> Vec<(u8, u8, i64)> {
        p.iter().map(|((k, r), c)| (k[0], r[0], c)).collect()
    }

    /// Both forms give the order, counts and cuts a B-tree gives, through the switch from one
    /// to the other.
    #[test]
    fn a_partition_behaves_as_an_ordered_map_in_either_form() {
        let mut p = Partition::default();
        let mut model: BTreeMap<Key<'static>, i64> = BTreeMap::new();
        let mut x: u32 = 7;
        for step in 0..2000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let (k, r) = ((x >> 8) as u8 % 40, (x >> 16) as u8 % 3);
            let n = if (x >> 24).is_multiple_of(4) { -1 } else { 1 };
            let e = key(k, r);
            let have = model.get(&e).copied().unwrap_or(0);
            if have + n < 0 {
                continue;
            }
            let c = match p.locate(e) {
                Some(at) if step % 2 == 0 => {
                    assert_eq!(at, (model.range(..e).count(), model.contains_key(&e)));
                    p.add_at(at, e, n)
                }
                _ => p.add(e, n),
            };
            assert_eq!(c, have + n, "step {step}");
            if c == 0 {
                model.remove(&e);
            } else {
                model.insert(e, c);
            }
            if step % 500 == 499 {
                p.truncate(20);
                let cut: Vec<Key<'static>> = model.keys().skip(20).cloned().collect();
                for k in &cut {
                    model.remove(k);
                }
            }
            let want: Vec<(u8, u8, i64)> =
                model.iter().map(|((k, r), c)| (k[0], r[0], *c)).collect();
            assert_eq!(entries(&p), want, "step {step}");
        }
        assert!(matches!(p, Partition::Large(_)), "the partition grew past the small form");
    }

    /// Batches of sorted changes merged in give what adding them one by one gives, in either
    /// form and through the growth past the small form, and a retraction of more than is
    /// there is reported.
    #[test]
    fn merging_sorted_changes_equals_adding_them() {
        let mut merged = Partition::default();
        let mut added = Partition::default();
        let mut x: u32 = 3;
        for step in 0..300 {
            let mut batch: BTreeMap<Key<'static>, i64> = BTreeMap::new();
            let size = if step % 10 < 5 { 3 } else { 60 };
            for _ in 0..size {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let e = key((x >> 8) as u8 % 90, (x >> 16) as u8 % 2);
                let have = added.iter().find(|(k, _)| *k == e).map_or(0, |(_, c)| c);
                let n = if (x >> 24).is_multiple_of(3) && have > 0 { -1 } else { 1 };
                if have + batch.get(&e).copied().unwrap_or(0) + n >= 0 {
                    *batch.entry(e).or_insert(0) += n;
                }
            }
            batch.retain(|_, n| *n != 0);
            for (&e, &n) in &batch {
                added.add(e, n);
            }
            assert!(merged.merge_sorted(batch.iter().map(|(&e, &n)| (e, n))), "step {step}");
            assert_eq!(entries(&merged), entries(&added), "step {step}");
            assert_eq!(merged.len(), added.len());
            assert_eq!(
                matches!(merged, Partition::Large(_)),
                matches!(added, Partition::Large(_)),
                "step {step}"
            );
        }
        assert!(matches!(merged, Partition::Large(_)));
        let (k, r, _) = entries(&merged)[0];
        assert!(!merged.merge_sorted([(key(k, r), -1000)]), "a count below zero is reported");
    }

    /// Entries whose order keys tie in their first 8 bytes, or begin one another (zero bytes
    /// against the prefix's zero pad included), in the order of (order key, row).
    #[test]
    fn entries_order_as_their_keys_past_the_inline_prefix() {
        let mut x: u32 = 11;
        let mut next = || {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            x >> 8
        };
        let mut keys: Vec<(Vec<u8>, Vec<u8>)> = (0..600)
            .map(|_| {
                let len = (next() % 12) as usize;
                let key = (0..len).map(|_| [0u8, 1, 255][(next() % 3) as usize]).collect();
                (key, vec![(next() % 3) as u8])
            })
            .collect();
        let mut p = Partition::default();
        for (k, r) in &keys {
            p.add((k, r), 1);
        }
        assert!(matches!(p, Partition::Large(_)));
        keys.sort();
        let mut want: Vec<(&[u8], &[u8], i64)> = Vec::new();
        for (k, r) in &keys {
            match want.last_mut() {
                Some((wk, wr, c)) if *wk == &k[..] && *wr == &r[..] => *c += 1,
                _ => want.push((k, r, 1)),
            }
        }
        let got: Vec<(&[u8], &[u8], i64)> = p.iter().map(|((k, r), c)| (k, r, c)).collect();
        assert_eq!(got, want);
        for (k, r) in &keys {
            p.add((k, r), -1);
        }
        assert!(p.is_empty());
    }

    #[test]
    fn a_small_partition_holds_exactly_its_entries() {
        let mut p = Partition::default();
        assert_eq!(p.heap_bytes(), 0);
        for i in 0..10 {
            p.add(key(i, 0), 1);
        }
        assert!(matches!(p, Partition::Small(_)));
        // Ten entries of 40 bytes (the key's prefix, a boxed order key and row, its split, a
        // count) and their two bytes each (one allocation).
        let Partition::Small(v) = &p else { unreachable!() };
        assert_eq!(p.heap_bytes(), v.capacity() * 40 + 10 * 8);
        p.truncate(3);
        assert_eq!(entries(&p), [(0, 0, 1), (1, 0, 1), (2, 0, 1)]);
    }
}
