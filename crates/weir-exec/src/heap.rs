//! Estimates of the memory an operator's state holds: what `SHOW QUERIES` reports and what the
//! engine's memory limit is checked against.
//!
//! [`HeapSize::heap_bytes`] is the number of bytes a value holds on the heap beyond its own
//! inline size (`size_of`), estimated from lengths and capacities by one walk of the value:
//! containers count their allocation (hash tables their buckets and control bytes, B-trees
//! their nodes at the fill random inserts give) and then their elements' own heap bytes. An
//! allocation is rounded up to the 8 bytes allocators hand out at the least. The figures are
//! estimates, not the allocator's exact count: within some tens of percent of the process's
//! anonymous memory for the large states that matter (docs/benchmarks.md, "State accounting").
//!
//! The walk costs time proportional to the number of entries (nothing for a container of
//! [`HeapSize::FLAT`] elements), so it runs when asked (`SHOW QUERIES`) or when the process's
//! memory suggests the limit may be near, never per event.
//!
//! The trait is Weir's own: operator state holds Arrow arrays, DataFusion accumulators and
//! scalars, which a crate's trait could not be implemented for here (the orphan rule).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::mem::size_of;

use arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion_common::ScalarValue;
use weir_common::ChangeBatch;

/// What one query's state holds, part by part: each operator by its EXPLAIN line, and the
/// input waiting for its instants. What `SHOW QUERIES` reports and the memory limit checks.
/// Input shared by several queries (a batch of a stream two queries read) counts in each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateSize {
    pub parts: Vec<(String, usize)>,
}

/// The label of the input a query holds until it can evaluate it.
pub const WAITING_INPUT: &str = "input waiting for its instants";

impl StateSize {
    /// The bytes of all parts.
    pub fn total(&self) -> usize {
        self.parts.iter().map(|p| p.1).sum()
    }

    /// The part holding the most bytes (the first of equals), if any holds some.
    pub fn largest(&self) -> Option<(&str, usize)> {
        let mut best: Option<(&str, usize)> = None;
        for (label, bytes) in &self.parts {
            if *bytes > 0 && best.is_none_or(|b| *bytes > b.1) {
                best = Some((label, *bytes));
            }
        }
        best
    }

    /// Adds `other`'s parts to this one's, part by part (the same query on another worker).
    pub fn add(&mut self, other: &StateSize) {
        for (label, bytes) in &other.parts {
            match self.parts.iter_mut().find(|p| &p.0 == label) {
                Some(p) => p.1 += bytes,
                None => self.parts.push((label.clone(), *bytes)),
            }
        }
    }
}

/// Heap bytes held by a value beyond its inline size (see the module docs).
pub trait HeapSize {
    /// Whether values of this type never hold heap memory (containers of them skip the walk).
    const FLAT: bool = false;

    fn heap_bytes(&self) -> usize;
}

/// The bytes an allocation of `n` bytes takes: none for none, else at least 8, in 8s.
pub fn allocation(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.next_multiple_of(8)
    }
}

/// The sum of the heap bytes of `items`' own allocations (nothing if they are flat).
fn elements<'a, T: HeapSize + 'a>(items: impl Iterator<Item = &'a T>) -> usize {
    if T::FLAT {
        0
    } else {
        items.map(HeapSize::heap_bytes).sum()
    }
}

macro_rules! flat {
    ($($t:ty),*) => {$(
        impl HeapSize for $t {
            const FLAT: bool = true;
            fn heap_bytes(&self) -> usize {
                0
            }
        }
    )*};
}

flat!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bool, char, ());

impl HeapSize for Box<[u8]> {
    fn heap_bytes(&self) -> usize {
        allocation(self.len())
    }
}

impl HeapSize for String {
    fn heap_bytes(&self) -> usize {
        allocation(self.capacity())
    }
}

impl<T: HeapSize> HeapSize for Box<T> {
    fn heap_bytes(&self) -> usize {
        allocation(size_of::<T>()) + (**self).heap_bytes()
    }
}

impl<T: HeapSize> HeapSize for Option<T> {
    const FLAT: bool = T::FLAT;
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, HeapSize::heap_bytes)
    }
}

impl<A: HeapSize, B: HeapSize> HeapSize for (A, B) {
    const FLAT: bool = A::FLAT && B::FLAT;
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes()
    }
}

impl<A: HeapSize, B: HeapSize, C: HeapSize> HeapSize for (A, B, C) {
    const FLAT: bool = A::FLAT && B::FLAT && C::FLAT;
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes() + self.2.heap_bytes()
    }
}

impl<A: HeapSize, B: HeapSize, C: HeapSize, D: HeapSize> HeapSize for (A, B, C, D) {
    const FLAT: bool = A::FLAT && B::FLAT && C::FLAT && D::FLAT;
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes() + self.2.heap_bytes() + self.3.heap_bytes()
    }
}

impl<T: HeapSize> HeapSize for Vec<T> {
    fn heap_bytes(&self) -> usize {
        allocation(self.capacity() * size_of::<T>()) + elements(self.iter())
    }
}

impl<T: HeapSize> HeapSize for VecDeque<T> {
    fn heap_bytes(&self) -> usize {
        allocation(self.capacity() * size_of::<T>()) + elements(self.iter())
    }
}

impl<A: smallvec::Array> HeapSize for smallvec::SmallVec<A>
where
    A::Item: HeapSize,
{
    fn heap_bytes(&self) -> usize {
        let own = if self.spilled() { self.capacity() * size_of::<A::Item>() } else { 0 };
        allocation(own) + elements(self.iter())
    }
}

/// The bytes of a SwissTable (std's and hashbrown's maps and sets) with room for `capacity`
/// entries of `entry` bytes: its buckets (a power of two, at most 7/8 full) and a control byte
/// each.
pub fn hash_table(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    allocation(buckets * (entry + 1) + 16)
}

/// The bytes of a B-tree of `len` entries of `entry` bytes: up to 11 entries, one leaf of 11
/// slots (even for one entry); beyond, leaves filled to about two thirds (as random inserts
/// leave them), and an internal node with 12 child pointers per 6 nodes below.
pub fn b_tree(len: usize, entry: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let node = 11 * entry + 16;
    let leaves = if len <= 11 { 1 } else { len.div_ceil(7) };
    let internal = if leaves > 1 { leaves.div_ceil(6) } else { 0 };
    leaves * allocation(node) + internal * allocation(node + 12 * size_of::<usize>())
}

impl<K: HeapSize, V: HeapSize, S> HeapSize for HashMap<K, V, S> {
    fn heap_bytes(&self) -> usize {
        hash_table(self.capacity(), size_of::<(K, V)>())
            + elements(self.keys())
            + elements(self.values())
    }
}

impl<K: HeapSize, S> HeapSize for HashSet<K, S> {
    fn heap_bytes(&self) -> usize {
        hash_table(self.capacity(), size_of::<K>()) + elements(self.iter())
    }
}

impl<K: HeapSize, V: HeapSize, S> HeapSize for datafusion_common::HashMap<K, V, S> {
    fn heap_bytes(&self) -> usize {
        hash_table(self.capacity(), size_of::<(K, V)>())
            + elements(self.keys())
            + elements(self.values())
    }
}

impl<K: HeapSize, S> HeapSize for datafusion_common::HashSet<K, S> {
    fn heap_bytes(&self) -> usize {
        hash_table(self.capacity(), size_of::<K>()) + elements(self.iter())
    }
}

impl<K: HeapSize, V: HeapSize> HeapSize for BTreeMap<K, V> {
    fn heap_bytes(&self) -> usize {
        b_tree(self.len(), size_of::<(K, V)>()) + elements(self.keys()) + elements(self.values())
    }
}

impl<K: HeapSize> HeapSize for BTreeSet<K> {
    fn heap_bytes(&self) -> usize {
        b_tree(self.len(), size_of::<K>()) + elements(self.iter())
    }
}

impl HeapSize for ArrayRef {
    fn heap_bytes(&self) -> usize {
        self.get_array_memory_size()
    }
}

impl HeapSize for RecordBatch {
    fn heap_bytes(&self) -> usize {
        self.get_array_memory_size()
    }
}

impl HeapSize for ChangeBatch {
    fn heap_bytes(&self) -> usize {
        self.data.get_array_memory_size() + self.times.heap_bytes() + self.diffs.heap_bytes()
    }
}

impl HeapSize for ScalarValue {
    fn heap_bytes(&self) -> usize {
        self.size().saturating_sub(size_of::<ScalarValue>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_containers_count_their_allocation_only() {
        let v: Vec<i64> = Vec::with_capacity(10);
        assert_eq!(v.heap_bytes(), 80);
        let empty: Vec<i64> = Vec::new();
        assert_eq!(empty.heap_bytes(), 0);
    }

    #[test]
    fn rows_count_their_own_allocations() {
        let rows: Vec<Box<[u8]>> = vec![vec![1u8; 3].into(), vec![2u8; 9].into()];
        assert_eq!(rows.heap_bytes(), 2 * size_of::<Box<[u8]>>() + 8 + 16);
    }

    #[test]
    fn a_hash_map_counts_buckets_and_keys() {
        let mut m: HashMap<Box<[u8]>, i64> = HashMap::new();
        assert_eq!(m.heap_bytes(), 0);
        for i in 0..1000u32 {
            m.insert(i.to_be_bytes().to_vec().into(), 1);
        }
        let buckets = (m.capacity() * 8 / 7).next_power_of_two();
        assert!(buckets >= 1024);
        assert_eq!(m.heap_bytes(), allocation(buckets * (24 + 1) + 16) + 1000 * 8);
    }

    #[test]
    fn a_b_tree_of_one_entry_is_one_leaf() {
        let mut m: BTreeMap<i64, i64> = BTreeMap::new();
        m.insert(1, 1);
        assert_eq!(m.heap_bytes(), allocation(11 * 16 + 16));
        for i in 0..11 {
            m.insert(i, i);
        }
        assert_eq!(m.heap_bytes(), allocation(11 * 16 + 16));
        for i in 0..700 {
            m.insert(i, i);
        }
        // 100 leaves and 17 internal nodes.
        assert_eq!(m.heap_bytes(), 100 * 192 + 17 * 288);
    }

    #[test]
    fn growth_is_seen() {
        let mut m: HashMap<Box<[u8]>, i64> = HashMap::new();
        let mut last = 0;
        for round in 0..5u32 {
            for i in 0..10_000u32 {
                m.insert((round * 10_000 + i).to_be_bytes().to_vec().into(), 1);
            }
            let now = m.heap_bytes();
            assert!(now > last, "round {round}: {now} after {last}");
            last = now;
        }
        assert!(last > 50_000 * 32, "{last}");
    }
}
