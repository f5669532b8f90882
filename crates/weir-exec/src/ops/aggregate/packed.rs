//! Packed marks: the DISTINCT set of an insert-only input over 64-bit values small enough to
//! share one word with their marks (ids, counts, any BIGINT from 0 to below 2^(64-bits)), hashed
//! once the values spread too far for [`super::dense`]'s bit array: each entry is the value
//! shifted left by the marks' bits, the marks (bit m: member m has seen the value) below.
//!
//! An entry is 8 bytes where a [`super::distinct::SeenMap::WordMarks`] entry takes 16, so a
//! set takes about half the memory. This is what q16's sets of a channel that few bids go
//! through become (a hundred values picked among many ids): ten thousand such channels, two
//! sets each, take 23 MB packed where they took 44 MB, which decides whether they stay in
//! the last-level cache.
//!
//! A value that does not fit (a negative number, a double's bits, anything whose top bits are
//! used), or whose encoding is not the 9-byte one with the set's first byte, makes the caller
//! turn the set into words for good ([`PackedMarks::entries`]).

use hashbrown::HashTable;

use crate::heap::{hash_table, HeapSize};

/// A set's values and their marks, packed into one word per value (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct PackedMarks {
    /// The first byte of every value's encoding (the set's first value's).
    tag: u8,
    /// Bits of marks in an entry: the set's members rounded up to a power of two, at most 8.
    bits: u32,
    /// `value << bits | marks` for each value with a mark.
    entries: HashTable<u64>,
}

/// The bit flipped between a 64-bit value's encoding and the value: a BIGINT's encoding is
/// its two's complement with the sign bit flipped, so non-negative numbers pack.
const SIGN: u64 = 1 << 63;

/// A 64-bit hash of a value whose low bits and top bits both depend on the whole value (the
/// table indexes by the low bits and tags by the top ones): the two halves of a 128-bit
/// product folded together.
fn hash(value: u64) -> u64 {
    let p = u128::from(value ^ 0x243f_6a88_85a3_08d3) * 0x9e37_79b9_7f4a_7c15;
    (p as u64) ^ ((p >> 64) as u64)
}

impl PackedMarks {
    /// An empty set whose entries have room for `bits` marks (1, 2, 4 or 8).
    pub(super) fn new(bits: u32) -> Self {
        PackedMarks { bits: bits.clamp(1, 8).next_power_of_two(), ..Self::default() }
    }

    /// The set of `entries` (row encodings with their marks, as
    /// [`super::dense::DenseMarks::entries`] gives them), marks of `bits` bits; None if one of
    /// them does not pack.
    pub(super) fn of(bits: u32, entries: impl Iterator<Item = ([u8; 9], u64)>) -> Option<Self> {
        let mut set = PackedMarks::new(bits);
        for (v, marks) in entries {
            let value = set.value(&v)?;
            set.update(value, |m| *m = marks);
        }
        Some(set)
    }

    /// Value `v` (a row encoding) as this set keeps it; None if it does not pack.
    pub(super) fn value(&mut self, v: &[u8]) -> Option<u64> {
        let (&tag, rest) = v.split_first()?;
        let value = u64::from_be_bytes(rest.try_into().ok()?) ^ SIGN;
        if self.entries.is_empty() {
            self.tag = tag;
        }
        (tag == self.tag && value >> (64 - self.bits) == 0).then_some(value)
    }

    fn mask(&self) -> u64 {
        (1 << self.bits) - 1
    }

    /// Applies `f` to the marks of `value` (from [`PackedMarks::value`]; 0 if it is new) and
    /// keeps them (a new value only if `f` set a mark), returning `f`'s result.
    pub(super) fn update<R>(&mut self, value: u64, f: impl FnOnce(&mut u64) -> R) -> R {
        let (bits, mask) = (self.bits, self.mask());
        let found = self.entries.entry(hash(value), |e| *e >> bits == value, |e| hash(*e >> bits));
        match found {
            hashbrown::hash_table::Entry::Occupied(mut entry) => {
                let e = entry.get_mut();
                let mut marks = *e & mask;
                let result = f(&mut marks);
                *e = value << bits | (marks & mask);
                result
            }
            hashbrown::hash_table::Entry::Vacant(entry) => {
                let mut marks = 0;
                let result = f(&mut marks);
                if marks & mask != 0 {
                    entry.insert(value << bits | (marks & mask));
                }
                result
            }
        }
    }

    /// The entry of value `v` (a row encoding), read without changing anything, 0 if absent:
    /// see [`super::distinct::SeenMap::peek`].
    pub(super) fn peek(&self, v: &[u8]) -> u64 {
        let Some((&tag, rest)) = v.split_first() else { return 0 };
        let Ok(bytes) = <[u8; 8]>::try_from(rest) else { return 0 };
        let value = u64::from_be_bytes(bytes) ^ SIGN;
        if tag != self.tag || value >> (64 - self.bits) != 0 {
            return 0;
        }
        let bits = self.bits;
        self.entries.find(hash(value), |e| *e >> bits == value).copied().unwrap_or(0)
    }

    /// The number of values with a mark.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every value with a mark, as its row encoding, with its marks, in no particular order.
    pub(super) fn entries(&self) -> impl Iterator<Item = ([u8; 9], u64)> + '_ {
        let (tag, bits, mask) = (self.tag, self.bits, self.mask());
        self.entries.iter().map(move |e| {
            let mut enc = [tag; 9];
            enc[1..].copy_from_slice(&((e >> bits) ^ SIGN).to_be_bytes());
            (enc, e & mask)
        })
    }

    /// Empties the set.
    pub(super) fn clear(&mut self) {
        *self = PackedMarks::new(self.bits);
    }
}

impl HeapSize for PackedMarks {
    fn heap_bytes(&self) -> usize {
        hash_table(self.entries.capacity(), size_of::<u64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding of BIGINT `n`: the valid byte, then its bits with the sign flipped.
    fn enc(n: i64) -> [u8; 9] {
        let mut e = [1u8; 9];
        e[1..].copy_from_slice(&((n as u64) ^ SIGN).to_be_bytes());
        e
    }

    /// Marks member m of BIGINT n; whether it was new (None: n does not pack).
    fn mark(set: &mut PackedMarks, n: i64, m: u32) -> Option<bool> {
        let value = set.value(&enc(n))?;
        Some(set.update(value, |marks| {
            let fresh = *marks & 1 << m == 0;
            *marks |= 1 << m;
            fresh
        }))
    }

    #[test]
    fn marks_are_kept_beside_their_values_as_a_map_keeps_them() {
        let mut set = PackedMarks::new(3);
        assert_eq!(set.bits, 4);
        let mut want = std::collections::BTreeMap::new();
        // Values scattered over a wide range, each seen by a few members, some twice.
        for i in 0..5000i64 {
            let n = (i * 7_919_993) % 100_003 + (i % 7) * (1 << 40);
            let m = (i % 3) as u32;
            let fresh = want.get(&n).is_none_or(|marks: &u64| marks & 1 << m == 0);
            assert_eq!(mark(&mut set, n, m), Some(fresh), "value {n}");
            *want.entry(n).or_insert(0u64) |= 1 << m;
        }
        let mut got: Vec<(i64, u64)> = set
            .entries()
            .map(|(e, marks)| {
                ((u64::from_be_bytes(e[1..].try_into().unwrap()) ^ SIGN) as i64, marks)
            })
            .collect();
        got.sort();
        assert_eq!(got, want.iter().map(|(n, m)| (*n, *m)).collect::<Vec<_>>());
        assert_eq!(set.len(), want.len());
        for (n, marks) in &want {
            assert_eq!(set.peek(&enc(*n)) & set.mask(), *marks, "peek {n}");
        }
        assert!(set.heap_bytes() < 16 * want.len() * 2, "{} bytes", set.heap_bytes());
    }

    #[test]
    fn a_value_that_does_not_pack_is_refused_and_nothing_changes() {
        let mut set = PackedMarks::new(4);
        assert_eq!(mark(&mut set, 0, 0), Some(true));
        assert_eq!(mark(&mut set, (1 << 60) - 1, 1), Some(true));
        // The top 4 bits hold the marks: 2^60 and negative numbers do not pack.
        assert_eq!(mark(&mut set, 1 << 60, 0), None);
        assert_eq!(mark(&mut set, -1, 0), None);
        let mut other_tag = enc(5);
        other_tag[0] = 0;
        assert_eq!(set.value(&other_tag), None, "another first byte");
        assert_eq!(set.value(&[1, 2, 3]), None, "not a word");
        assert_eq!(set.peek(&other_tag), 0);
        assert_eq!(set.peek(&enc(-1)), 0);
        assert_eq!(set.len(), 2);
        // A change that marks nothing keeps no entry.
        let value = set.value(&enc(77)).unwrap();
        assert!(!set.update(value, |_| false));
        assert_eq!((set.len(), set.peek(&enc(77))), (2, 0));
        // Eight members fill a byte; rebuilt from its entries, a set is the same set.
        let mut wide = PackedMarks::new(8);
        for m in 0..8 {
            assert_eq!(mark(&mut wide, 42, m), Some(true));
        }
        assert_eq!(wide.entries().collect::<Vec<_>>(), [(enc(42), 0xff)]);
        let again = PackedMarks::of(4, set.entries()).unwrap();
        let sorted = |s: &PackedMarks| {
            let mut v: Vec<_> = s.entries().collect();
            v.sort();
            v
        };
        assert_eq!(sorted(&again), sorted(&set));
        assert!(PackedMarks::of(8, set.entries()).is_none(), "2^60 - 1 leaves no room for 8 marks");
        assert!(PackedMarks::of(8, [(enc(-3), 1)].into_iter()).is_none());
        wide.clear();
        assert_eq!((wide.len(), wide.heap_bytes()), (0, 0));
    }
}
