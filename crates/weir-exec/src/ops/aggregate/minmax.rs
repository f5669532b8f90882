//! The multiset of a MIN or MAX over `i64` order keys, with its extreme at hand.
//!
//! A multiset (value -> count) that any change may touch: inserting or deleting any value,
//! with any multiplicity. Under a window the deletions almost always take the oldest values
//! first (the window expires elements in arrival order), so the set starts as a queue in
//! arrival order with a monotonic deque of the positions of its running extremes (each
//! position's value is the extreme of everything from it to the back): inserting pushes at the
//! back, deleting the front value pops it, and the extreme is the deque's front, all in O(1)
//! amortized with memory touched only at the ends. Equal values inserted one after another
//! share one entry. Any other deletion (a value not at the front, more copies than the front
//! holds, a value not present) turns the set into an ordered map (O(n log n) once, then
//! O(log n) per change), which is exact for any change; a map that empties turns back into a
//! queue. Both forms hold the same multiset, so the extreme does not depend on the form.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};

use crate::heap::HeapSize;

#[derive(Debug, Clone)]
pub(super) enum KeySet {
    Fifo {
        /// (value, count > 0) in arrival order; equal neighbours are merged.
        queue: VecDeque<(i64, i64)>,
        /// How many entries have left the front: entry `i` of `queue` has position
        /// `popped + i`.
        popped: u64,
        /// Positions of the entries that are the extreme of their suffix of `queue`, oldest
        /// first; their values are strictly decreasing in extremeness order, so the front is
        /// the extreme of the whole set.
        mono: VecDeque<u64>,
    },
    /// value -> count (never 0; negative after deleting what was not there).
    Sorted(BTreeMap<i64, i64>),
}

impl HeapSize for KeySet {
    fn heap_bytes(&self) -> usize {
        match self {
            KeySet::Fifo { queue, mono, .. } => queue.heap_bytes() + mono.heap_bytes(),
            KeySet::Sorted(values) => values.heap_bytes(),
        }
    }
}

impl KeySet {
    pub(super) fn new() -> Self {
        KeySet::Fifo { queue: VecDeque::new(), popped: 0, mono: VecDeque::new() }
    }

    /// Sets the count of `k`, as read from a checkpoint (which does not keep the arrival
    /// order, so the set becomes an ordered map). Returns whether `k` already had a count.
    pub(super) fn insert_restored(&mut self, k: i64, count: i64) -> bool {
        if let KeySet::Fifo { queue, .. } = self {
            let mut map = BTreeMap::new();
            for &(v, c) in queue.iter() {
                *map.entry(v).or_insert(0) += c;
            }
            *self = KeySet::Sorted(map);
        }
        match self {
            KeySet::Sorted(map) => map.insert(k, count).is_some(),
            KeySet::Fifo { .. } => false,
        }
    }

    /// Whether `a` is more extreme than `b` (greater for MAX, smaller for MIN).
    pub(super) fn beats(max: bool, a: i64, b: i64) -> bool {
        if max {
            a > b
        } else {
            a < b
        }
    }

    /// Adds `diff` copies of `k` (removes −diff copies if negative).
    pub(super) fn update(&mut self, k: i64, diff: i64, max: bool) {
        match self {
            KeySet::Fifo { queue, popped, mono } => {
                if diff > 0 {
                    if let Some(back) = queue.back_mut().filter(|b| b.0 == k) {
                        back.1 += diff;
                        return;
                    }
                    let at = *popped + queue.len() as u64;
                    queue.push_back((k, diff));
                    while let Some(&m) = mono.back() {
                        if Self::beats(max, queue[(m - *popped) as usize].0, k) {
                            break;
                        }
                        mono.pop_back();
                    }
                    mono.push_back(at);
                    return;
                }
                if diff == 0 {
                    return;
                }
                match queue.front_mut() {
                    Some(front) if front.0 == k && front.1 >= -diff => {
                        front.1 += diff;
                        if front.1 == 0 {
                            queue.pop_front();
                            if mono.front() == Some(popped) {
                                mono.pop_front();
                            }
                            *popped += 1;
                        }
                        return;
                    }
                    _ => {}
                }
                let mut map = BTreeMap::new();
                for &(v, c) in queue.iter() {
                    *map.entry(v).or_insert(0) += c;
                }
                *self = KeySet::Sorted(map);
                self.update(k, diff, max);
            }
            KeySet::Sorted(map) => {
                match map.entry(k) {
                    Entry::Occupied(mut e) => {
                        *e.get_mut() += diff;
                        if *e.get() == 0 {
                            e.remove();
                        }
                    }
                    Entry::Vacant(e) => {
                        if diff != 0 {
                            e.insert(diff);
                        }
                    }
                }
                if map.is_empty() {
                    *self = KeySet::new();
                }
            }
        }
    }

    /// The most extreme value present (the greatest for MAX, the least for MIN).
    pub(super) fn extreme(&self, max: bool) -> Option<i64> {
        match self {
            KeySet::Fifo { queue, popped, mono } => {
                mono.front().map(|&m| queue[(m - popped) as usize].0)
            }
            KeySet::Sorted(map) if max => map.keys().next_back().copied(),
            KeySet::Sorted(map) => map.keys().next().copied(),
        }
    }

    /// The (value, count) pairs in value order, equal values merged.
    pub(super) fn sorted(&self) -> Vec<(i64, i64)> {
        match self {
            KeySet::Fifo { queue, .. } => {
                let mut v: Vec<(i64, i64)> = queue.iter().copied().collect();
                v.sort_unstable_by_key(|e| e.0);
                let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
                for (k, c) in v {
                    match out.last_mut() {
                        Some(last) if last.0 == k => last.1 += c,
                        _ => out.push((k, c)),
                    }
                }
                out
            }
            KeySet::Sorted(map) => map.iter().map(|(k, c)| (*k, *c)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Applies changes to a KeySet and to a plain map, checking the extreme and the contents
    /// after each.
    fn check(changes: &[(i64, i64)], max: bool) {
        let mut set = KeySet::new();
        let mut oracle: BTreeMap<i64, i64> = BTreeMap::new();
        for &(k, diff) in changes {
            set.update(k, diff, max);
            let c = oracle.entry(k).or_insert(0);
            *c += diff;
            if *c == 0 {
                oracle.remove(&k);
            }
            let want = if max { oracle.keys().next_back() } else { oracle.keys().next() };
            assert_eq!(set.extreme(max), want.copied(), "after {k} {diff:+}");
            let contents: Vec<(i64, i64)> = oracle.iter().map(|(k, c)| (*k, *c)).collect();
            assert_eq!(set.sorted(), contents);
        }
    }

    #[test]
    fn fifo_deletions_stay_a_queue() {
        let mut set = KeySet::new();
        for (k, d) in [(5, 1), (3, 1), (5, 1), (4, 2), (5, -1), (3, -1), (5, -1), (4, -1)] {
            set.update(k, d, true);
        }
        assert!(matches!(set, KeySet::Fifo { .. }));
        assert_eq!(set.extreme(true), Some(4));
        set.update(4, -1, true);
        assert_eq!(set.extreme(true), None);
        assert!(matches!(set, KeySet::Fifo { .. }));
    }

    #[test]
    fn deleting_a_value_not_at_the_front_is_exact() {
        // MAX 9 is deleted while 1 is older: the set must fall back, not lose track.
        check(&[(1, 1), (9, 1), (4, 1), (9, -1), (1, -1)], true);
        check(&[(1, 1), (9, 1), (4, 1), (4, -1), (1, -1), (9, -1)], false);
        // More copies than the front holds; a value never inserted.
        check(&[(2, 1), (2, 1), (3, 1), (2, 1), (2, -3), (7, -1), (7, 1)], true);
    }

    #[test]
    fn an_emptied_map_becomes_a_queue_again() {
        let mut set = KeySet::new();
        set.update(1, 1, true);
        set.update(2, 1, true);
        set.update(2, -1, true);
        assert!(matches!(set, KeySet::Sorted(_)));
        set.update(1, -1, true);
        assert!(matches!(set, KeySet::Fifo { .. }));
    }

    proptest! {
        #[test]
        fn matches_a_plain_multiset(
            changes in proptest::collection::vec((0i64..6, prop_oneof![Just(1i64), Just(-1), Just(2), Just(-2)]), 0..60),
            max in any::<bool>(),
        ) {
            check(&changes, max);
        }

        #[test]
        fn matches_under_window_like_changes(values in proptest::collection::vec(0i64..20, 1..80), w in 1usize..10, max in any::<bool>()) {
            // Insert each value, delete it w steps later (oldest first), as a window does.
            let mut changes = vec![];
            for (i, v) in values.iter().enumerate() {
                changes.push((*v, 1));
                if i >= w {
                    changes.push((values[i - w], -1));
                }
            }
            check(&changes, max);
        }
    }
}
