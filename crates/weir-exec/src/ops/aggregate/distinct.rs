//! The DISTINCT sets of a group: for each argument of DISTINCT aggregates (q16's
//! `COUNT(DISTINCT bidder)` with and without each `FILTER`), the values the group holds, and
//! for each aggregate sharing the argument (a *member*) whether it sees the value.
//!
//! A member's aggregate is fed a value when the value becomes present for that member and
//! loses it when it leaves, so what a set keeps per value depends on the input:
//! - over an input that may retract, each member's multiplicity of the value
//!   ([`SeenMap::Counts`]): the value leaves a member when its count returns to 0, and the
//!   entry goes when every count is 0;
//! - over an insert-only input, nothing ever leaves, so one bit per member says whether it has
//!   seen the value ([`SeenMap::Marks`], up to 64 members): a word per value instead of a count
//!   per member, a quarter of the memory for q16's sets of four; and 64-bit values lying close
//!   together (ids handed out in sequence) are first kept as a bit array over their range
//!   ([`SeenMap::Dense`], see [`super::dense`]), which becomes a hash map when the values
//!   spread: of 8-byte entries, each value with its marks in one word, while the values are
//!   small enough to leave room for them ([`SeenMap::Packed`], see [`super::packed`]), of
//!   16-byte ones beyond.
//!
//! Values are keyed by their row encoding ([`SeenKey`]), held inline when it is at most 15
//! bytes long (any number, a date, a short string), so that a probe compares two words and an
//! entry needs no allocation of its own; longer encodings are boxed. The marks of a 64-bit
//! argument (BIGINT, DOUBLE, TIMESTAMP: 9-byte encodings) are keyed by the 9 bytes themselves
//! ([`SeenMap::WordMarks`]). Memory per value, plus a control byte: 16 bytes for the marks of
//! a 64-bit value, 8 for those of a value that packs, 32 for other marks, 72 for the counts of
//! up to four members; dense marks take at most 16 bytes per value, and half a byte for the
//! four members of q16's sets of ids.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use datafusion_common::HashMap;
use hashbrown::Equivalent;
use weir_common::{Result, WeirError};

use super::dense::DenseMarks;
use super::packed::PackedMarks;
use crate::heap::{allocation, hash_table, HeapSize};

/// Bytes of an encoding held inline; the last byte of a [`SeenKey::Short`] is its length.
const INLINE: usize = 15;

/// A DISTINCT value's row encoding: inline up to [`INLINE`] bytes, boxed beyond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SeenKey {
    /// The encoding's bytes, zero-padded, with its length in the last byte.
    Short([u8; INLINE + 1]),
    Long(Box<[u8]>),
}

/// A probe for a value: a [`SeenKey`] that borrows a long encoding instead of boxing it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SeenRef<'a> {
    Short([u8; INLINE + 1]),
    Long(&'a [u8]),
}

impl<'a> SeenRef<'a> {
    fn of(v: &'a [u8]) -> Self {
        if v.len() <= INLINE {
            let mut a = [0u8; INLINE + 1];
            a[..v.len()].copy_from_slice(v);
            a[INLINE] = v.len() as u8;
            SeenRef::Short(a)
        } else {
            SeenRef::Long(v)
        }
    }

    /// The value's entry in `map`, made with `fresh` if missing, in one probe (a long key is
    /// boxed only when missing).
    fn slot<V>(self, map: &mut HashMap<SeenKey, V>, fresh: impl FnOnce() -> V) -> &mut V {
        map.raw_entry_mut().from_key(&self).or_insert_with(|| (self.to_key(), fresh())).1
    }

    fn to_key(self) -> SeenKey {
        match self {
            SeenRef::Short(a) => SeenKey::Short(a),
            SeenRef::Long(v) => SeenKey::Long(v.into()),
        }
    }
}

impl SeenKey {
    /// The key as a probe (a long key borrowed).
    fn probe(&self) -> SeenRef<'_> {
        match self {
            SeenKey::Short(a) => SeenRef::Short(*a),
            SeenKey::Long(v) => SeenRef::Long(v),
        }
    }

    /// The row encoding.
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            SeenKey::Short(a) => &a[..a[INLINE] as usize],
            SeenKey::Long(v) => v,
        }
    }
}

// A key hashes as its probe does.
impl Hash for SeenKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.probe().hash(state)
    }
}

// A short value as one 128-bit word, a long one as its bytes (which of the two a value is
// depends only on its length).
impl Hash for SeenRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            SeenRef::Short(a) => state.write_u128(u128::from_ne_bytes(*a)),
            SeenRef::Long(v) => state.write(v),
        }
    }
}

impl Equivalent<SeenKey> for SeenRef<'_> {
    fn equivalent(&self, key: &SeenKey) -> bool {
        *self == key.probe()
    }
}

impl HeapSize for SeenKey {
    fn heap_bytes(&self) -> usize {
        match self {
            SeenKey::Short(_) => 0,
            SeenKey::Long(v) => allocation(v.len()),
        }
    }
}

/// A value's multiplicity per member of its DISTINCT set, inline up to 4 members.
pub(super) type SeenCounts = smallvec::SmallVec<[i64; 4]>;

/// The most members a [`SeenMap::Marks`] set can have: one bit each in a word.
const MARK_BITS: usize = 64;

/// The length of a 64-bit number's row encoding (a null byte, then the 8 bytes).
pub(super) const WORD: usize = 9;

/// The most members a [`SeenMap::WordMarks`] set can have.
const WORD_MARK_BITS: usize = 32;

/// One DISTINCT set of a group (see the module docs).
#[derive(Debug, Clone)]
pub(super) enum SeenMap {
    /// Each value present, with its multiplicity as each member sees it (a FILTER makes them
    /// differ). An entry leaves when all its counts are 0.
    Counts(HashMap<SeenKey, SeenCounts>),
    /// Insert-only input: each value seen, with bit m set once member m has seen it.
    Marks(HashMap<SeenKey, u64>),
    /// [`SeenMap::Marks`] of values encoded in [`WORD`] bytes (BIGINT, DOUBLE, TIMESTAMP...),
    /// of at most 32 members: the encoding itself is the key, 16 bytes an entry with its marks.
    /// A value of another length turns the set into [`SeenMap::Marks`].
    WordMarks(HashMap<[u8; WORD], u32>),
    /// Insert-only input, values encoded in [`WORD`] bytes, at most
    /// [`DenseMarks::MAX_MEMBERS`] members: the marks as a bit array over the range of the
    /// values, while it stays small for what it holds; then a [`SeenMap::Packed`] set.
    Dense(DenseMarks),
    /// What a [`SeenMap::Dense`] set becomes when its values spread: each value with its
    /// marks in one word, hashed, while the values leave room for the marks; then a
    /// [`SeenMap::WordMarks`] set.
    Packed(PackedMarks),
}

impl SeenMap {
    /// An empty set of `members` aggregates, over an insert-only input if `append_only`, of
    /// values encoded in [`WORD`] bytes if `words`.
    pub(super) fn new(append_only: bool, members: usize, words: bool) -> Self {
        if append_only && words && members <= DenseMarks::MAX_MEMBERS {
            SeenMap::Dense(DenseMarks::new(members))
        } else if append_only && words && members <= WORD_MARK_BITS {
            SeenMap::WordMarks(HashMap::default())
        } else if append_only && members <= MARK_BITS {
            SeenMap::Marks(HashMap::default())
        } else {
            SeenMap::Counts(HashMap::default())
        }
    }

    /// The number of values the set holds (read from its header alone).
    pub(super) fn len(&self) -> usize {
        match self {
            SeenMap::Dense(dense) => dense.len(),
            SeenMap::Packed(packed) => packed.len(),
            SeenMap::WordMarks(map) => map.len(),
            SeenMap::Marks(map) => map.len(),
            SeenMap::Counts(map) => map.len(),
        }
    }

    /// Reads where value `v` is kept, changing nothing, and returns a word of what it read:
    /// a read ahead of [`SeenMap::change`] that brings the set's memory for `v` into the cache
    /// (see `Aggregate::warm`).
    pub(super) fn peek(&self, v: &[u8]) -> u64 {
        match self {
            SeenMap::Dense(dense) => dense.peek(v),
            SeenMap::Packed(packed) => packed.peek(v),
            SeenMap::WordMarks(map) => <[u8; WORD]>::try_from(v)
                .ok()
                .and_then(|k| map.get(&k))
                .map_or(0, |m| u64::from(*m)),
            SeenMap::Marks(map) => map.get(&SeenRef::of(v)).copied().unwrap_or(0),
            SeenMap::Counts(map) => map.get(&SeenRef::of(v)).map_or(0, |c| c.len() as u64),
        }
    }

    /// Applies `f` to the marks of value `v` (none if it is new) in a set of 64-bit values,
    /// [`SeenMap::Dense`], [`SeenMap::Packed`] or [`SeenMap::WordMarks`], and returns its
    /// result; `None` for any other set. A dense set that cannot hold `v` becomes a packed set
    /// first (a set of words if its values do not pack), a packed set that cannot a set of
    /// words, and a set of words becomes [`SeenMap::Marks`] when `v` is not a word.
    fn mark_word<R>(&mut self, v: &[u8], f: impl FnOnce(&mut u64) -> R) -> Option<R> {
        if let SeenMap::Dense(dense) = self {
            if let Some(slot) = dense.slot(v) {
                let mut marks = dense.get(slot);
                let result = f(&mut marks);
                dense.set(slot, marks);
                return Some(result);
            }
            *self = match PackedMarks::of(dense.bits(), dense.entries()) {
                Some(packed) => SeenMap::Packed(packed),
                None => word_marks(dense.entries()),
            };
        }
        if let SeenMap::Packed(packed) = self {
            if let Some(value) = packed.value(v) {
                return Some(packed.update(value, f));
            }
            *self = word_marks(packed.entries());
        }
        if v.len() != WORD {
            if let SeenMap::WordMarks(map) = self {
                let wide =
                    map.drain().map(|(k, marks)| (SeenRef::of(&k).to_key(), u64::from(marks)));
                *self = SeenMap::Marks(wide.collect());
            }
        }
        let SeenMap::WordMarks(map) = self else { return None };
        let marks = map.entry(<[u8; WORD]>::try_from(v).ok()?).or_insert(0);
        let mut wide = u64::from(*marks);
        let result = f(&mut wide);
        // At most 32 members: the marks fit.
        *marks = wide as u32;
        Some(result)
    }

    /// Changes value `v`'s multiplicity by `diff` (a zero changes nothing) for each member m of
    /// the `members` for which `reaches(m)`, and calls `flip(m, 1)` for each whose count turns
    /// positive, `flip(m, -1)` for each whose count returns to 0, in member order.
    pub(super) fn change(
        &mut self,
        v: &[u8],
        members: usize,
        diff: i64,
        reaches: impl Fn(usize) -> bool,
        mut flip: impl FnMut(usize, i64) -> Result<()>,
    ) -> Result<()> {
        if diff == 0 {
            return Ok(());
        }
        if diff < 0 && !matches!(self, SeenMap::Counts(_)) {
            return Err(WeirError::internal(
                "a DISTINCT set over an insert-only input saw a retraction",
            ));
        }
        // Bit m of `marks` set for each member m that reaches it, flipping those it was not.
        let mut mark = |marks: &mut u64| {
            for m in 0..members {
                if reaches(m) && set_mark(marks, m) {
                    flip(m, 1)?;
                }
            }
            Ok(())
        };
        if let Some(result) = self.mark_word(v, &mut mark) {
            return result;
        }
        let probe = SeenRef::of(v);
        match self {
            SeenMap::Marks(map) => mark(probe.slot(map, || 0))?,
            SeenMap::WordMarks(_) | SeenMap::Dense(_) | SeenMap::Packed(_) => {
                return Err(WeirError::internal("a DISTINCT set of words not widened"))
            }
            SeenMap::Counts(map) => {
                let counts = probe.slot(map, || SeenCounts::from_elem(0, members));
                for (m, count) in counts.iter_mut().enumerate() {
                    if !reaches(m) {
                        continue;
                    }
                    let before = *count;
                    *count += diff;
                    match (before > 0, *count > 0) {
                        (false, true) => flip(m, 1)?,
                        (true, false) => flip(m, -1)?,
                        _ => {}
                    }
                }
                if counts.iter().all(|c| *c == 0) {
                    map.remove(&probe);
                }
            }
        }
        Ok(())
    }

    /// Member m's values with their multiplicities (1 for a mark), in no particular order.
    pub(super) fn member(&self, m: usize) -> Vec<(Cow<'_, [u8]>, i64)> {
        match self {
            SeenMap::Counts(map) => map
                .iter()
                .filter(|(_, c)| c[m] != 0)
                .map(|(v, c)| (Cow::Borrowed(v.bytes()), c[m]))
                .collect(),
            SeenMap::Marks(map) => map
                .iter()
                .filter(|(_, marks)| *marks & (1 << m) != 0)
                .map(|(v, _)| (Cow::Borrowed(v.bytes()), 1))
                .collect(),
            SeenMap::WordMarks(map) => map
                .iter()
                .filter(|(_, marks)| *marks & (1 << m) != 0)
                .map(|(v, _)| (Cow::Borrowed(&v[..]), 1))
                .collect(),
            SeenMap::Dense(dense) => marked(dense.entries(), m),
            SeenMap::Packed(packed) => marked(packed.entries(), m),
        }
    }

    /// Restores member m's multiplicity `count` (non-zero) of value `v`, of a set of `members`;
    /// false if the member already has the value.
    pub(super) fn restore(&mut self, v: &[u8], members: usize, m: usize, count: i64) -> bool {
        if let Some(fresh) = self.mark_word(v, |marks| set_mark(marks, m)) {
            return fresh;
        }
        let probe = SeenRef::of(v);
        match self {
            SeenMap::Counts(map) => {
                let counts = probe.slot(map, || SeenCounts::from_elem(0, members));
                let fresh = counts[m] == 0;
                counts[m] = count;
                fresh
            }
            SeenMap::Marks(map) => set_mark(probe.slot(map, || 0), m),
            // `mark_word` answered for a set of words, dense and packed ones included.
            SeenMap::WordMarks(_) | SeenMap::Dense(_) | SeenMap::Packed(_) => false,
        }
    }

    /// Empties the set, keeping its kind.
    pub(super) fn clear(&mut self) {
        match self {
            SeenMap::Counts(map) => *map = HashMap::default(),
            SeenMap::Marks(map) => *map = HashMap::default(),
            SeenMap::WordMarks(map) => *map = HashMap::default(),
            SeenMap::Dense(dense) => dense.clear(),
            SeenMap::Packed(packed) => packed.clear(),
        }
    }
}

/// The values of `entries` (row encodings of 64-bit values with their marks) that member m
/// has seen, each once.
fn marked(
    entries: impl Iterator<Item = ([u8; WORD], u64)>,
    m: usize,
) -> Vec<(Cow<'static, [u8]>, i64)> {
    entries
        .filter(|(_, marks)| *marks & (1 << m) != 0)
        .map(|(v, _)| (Cow::Owned(v.to_vec()), 1))
        .collect()
}

/// A [`SeenMap::WordMarks`] set of `entries` (of at most 32 members: the marks fit).
fn word_marks(entries: impl Iterator<Item = ([u8; WORD], u64)>) -> SeenMap {
    SeenMap::WordMarks(entries.map(|(k, marks)| (k, marks as u32)).collect())
}

/// Sets bit m of `marks`; true if it was not set.
fn set_mark(marks: &mut u64, m: usize) -> bool {
    let fresh = *marks & (1 << m) == 0;
    *marks |= 1 << m;
    fresh
}

impl HeapSize for SeenMap {
    fn heap_bytes(&self) -> usize {
        match self {
            SeenMap::Counts(map) => map.heap_bytes(),
            SeenMap::Marks(map) => {
                hash_table(map.capacity(), size_of::<(SeenKey, u64)>())
                    + map.keys().map(HeapSize::heap_bytes).sum::<usize>()
            }
            SeenMap::WordMarks(map) => hash_table(map.capacity(), size_of::<([u8; WORD], u32)>()),
            SeenMap::Dense(dense) => dense.heap_bytes(),
            SeenMap::Packed(packed) => packed.heap_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_small_and_keep_their_bytes() {
        assert_eq!(size_of::<SeenKey>(), 24);
        assert_eq!(size_of::<(SeenKey, u64)>(), 32);
        for len in [0, 1, 9, 15, 16, 40] {
            let v: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37) | 1).collect();
            let key = SeenRef::of(&v).to_key();
            assert_eq!(matches!(key, SeenKey::Short(_)), len <= INLINE, "{len}");
            assert_eq!(key.bytes(), &v[..]);
        }
        // A shorter encoding padded with zeros is not the longer one.
        assert_ne!(SeenRef::of(&[1, 0]).to_key(), SeenRef::of(&[1]).to_key());
    }

    /// Every flip of a change, as (member, ±1).
    fn flips(set: &mut SeenMap, v: &[u8], diff: i64, reach: &[usize]) -> Vec<(usize, i64)> {
        let mut out = vec![];
        let flip = |m, d| {
            out.push((m, d));
            Ok(())
        };
        set.change(v, 3, diff, |m| reach.contains(&m), flip).unwrap();
        out
    }

    #[test]
    fn a_peek_reads_a_value_where_it_is_kept_and_changes_nothing() {
        let (w1, w2) = ([1u8, 0, 0, 0, 0, 0, 0, 0, 5], [1u8, 0, 0, 0, 0, 0, 0, 0, 9]);
        let far = [1u8, 0, 0, 0, 0, 0, 1, 0, 0];
        for (kind, mut set) in [
            ("dense", SeenMap::new(true, 3, true)),
            ("words", SeenMap::WordMarks(HashMap::default())),
            ("marks", SeenMap::new(true, 3, false)),
            ("counts", SeenMap::new(false, 3, true)),
        ] {
            assert_eq!(set.peek(&w1), 0, "{kind}: an empty set");
            flips(&mut set, &w1, 1, &[1]);
            let before = (set.len(), sorted_members(&set));
            assert_ne!(set.peek(&w1), 0, "{kind}: a value present");
            // A value beside it shares a dense set's word; elsewhere it is absent.
            if !matches!(set, SeenMap::Dense(_)) {
                assert_eq!(set.peek(&w2), 0, "{kind}: a value absent");
            }
            assert_eq!(set.peek(&far), 0, "{kind}: a value far from the others");
            assert_eq!(set.peek(b"a"), 0, "{kind}: a value of another length");
            assert_eq!((set.len(), sorted_members(&set)), before, "{kind}: peeks change nothing");
            assert_eq!(set.len(), 1, "{kind}");
        }
    }

    fn sorted_members(set: &SeenMap) -> Vec<Vec<Vec<u8>>> {
        (0..3)
            .map(|m| {
                let mut vs: Vec<Vec<u8>> = set.member(m).iter().map(|(v, _)| v.to_vec()).collect();
                vs.sort();
                vs
            })
            .collect()
    }

    #[test]
    fn marks_flip_once_per_member_as_counts_do_over_insertions() {
        let long = [7u8; 20];
        let (w1, w2) = ([1u8, 0, 0, 0, 0, 0, 0, 0, 5], [1u8, 0, 0, 0, 0, 0, 0, 0, 9]);
        // Words, then other lengths: a set of words widens at the first of those.
        let inputs: [(&[u8], i64, &[usize]); 9] = [
            (&w1, 1, &[0]),
            (&w2, 2, &[0, 1]),
            (&w1, 1, &[0, 1, 2]),
            (b"a", 1, &[0]),
            (&w2, 1, &[2]),
            (b"a", 2, &[0, 1]),
            (&long, 1, &[2]),
            (&long, 3, &[0, 2]),
            (b"b", 1, &[]),
        ];
        let mut dense = SeenMap::new(true, 3, true);
        let mut words = SeenMap::WordMarks(HashMap::default());
        let mut marks = SeenMap::new(true, 3, false);
        let mut counts = SeenMap::new(false, 3, true);
        assert!(matches!(dense, SeenMap::Dense(_)));
        assert!(matches!(marks, SeenMap::Marks(_)) && matches!(counts, SeenMap::Counts(_)));
        let sorted = |set: &SeenMap, m: usize| {
            let mut vs: Vec<Vec<u8>> = set.member(m).iter().map(|(v, _)| v.to_vec()).collect();
            vs.sort();
            vs
        };
        for (i, (v, diff, reach)) in inputs.into_iter().enumerate() {
            let want = flips(&mut counts, v, diff, reach);
            assert_eq!(flips(&mut marks, v, diff, reach), want, "input {i}");
            assert_eq!(flips(&mut words, v, diff, reach), want, "input {i}");
            assert_eq!(flips(&mut dense, v, diff, reach), want, "input {i}");
            assert_eq!(matches!(words, SeenMap::WordMarks(_)), i < 3, "input {i}");
            // Two near words stay dense; a value of another length makes the set a hash map.
            assert_eq!(matches!(dense, SeenMap::Dense(_)), i < 3, "input {i}");
            for m in 0..3 {
                assert_eq!(sorted(&words, m), sorted(&counts, m), "input {i}, member {m}");
                assert_eq!(sorted(&dense, m), sorted(&counts, m), "input {i}, member {m}");
            }
        }
        assert!(marks.change(b"a", 3, -1, |_| true, |_, _| Ok(())).is_err());
        // A zero multiplicity is no value: nothing is marked.
        for set in [&mut marks, &mut words, &mut counts] {
            assert_eq!(flips(set, b"new", 0, &[0, 1, 2]), []);
            assert!((0..3).all(|m| set.member(m).iter().all(|(v, _)| **v != *b"new")));
        }
        let mut dense = SeenMap::new(true, 3, true);
        assert!(dense.change(&w1, 3, -1, |_| true, |_, _| Ok(())).is_err());
        assert!(matches!(dense, SeenMap::Dense(_)));
    }

    /// The encoding of BIGINT `n` (given by its bits): the valid byte, then its 8 bytes with
    /// the sign bit flipped.
    fn word(n: u64) -> [u8; WORD] {
        let mut w = [1u8; WORD];
        w[1..].copy_from_slice(&(n ^ 1 << 63).to_be_bytes());
        w
    }

    #[test]
    fn dense_marks_flip_as_counts_do_and_turn_into_a_hash_map_when_values_spread() {
        // Ids close together (each among the 50 newest, as NEXMark's bids pick recent
        // auctions), then ever wider apart, then negative: the set leaves its dense form once,
        // for a packed one, which turns into words at the first negative number; flips and
        // members are those of counts throughout.
        let mut values: Vec<u64> = (0..3000u64).map(|i| 1_000 + i / 2 + (i * 7919) % 50).collect();
        values.extend((0..200u64).map(|i| 1 << (i % 60)));
        values.extend((0..100u64).map(|i| (i * 7 % 30) as i64 - 15).map(|n| n as u64));
        let mut dense = SeenMap::new(true, 4, true);
        let mut counts = SeenMap::new(false, 4, true);
        let mut was_dense = vec![];
        let mut kinds = vec![];
        let flips = |set: &mut SeenMap, v: &[u8], i: usize| {
            let mut out = vec![];
            let reach = |m: usize| !(i + m).is_multiple_of(3);
            set.change(v, 4, 1, reach, |m, d| {
                out.push((m, d));
                Ok(())
            })
            .unwrap();
            out
        };
        for (i, n) in values.iter().enumerate() {
            let v = word(*n);
            assert_eq!(flips(&mut dense, &v, i), flips(&mut counts, &v, i), "value {i}");
            was_dense.push(matches!(dense, SeenMap::Dense(_)));
            let kind = match dense {
                SeenMap::Dense(_) => "dense",
                SeenMap::Packed(_) => "packed",
                SeenMap::WordMarks(_) => "words",
                _ => "other",
            };
            if kinds.last() != Some(&kind) {
                kinds.push(kind);
            }
        }
        assert!(was_dense[..3000].iter().all(|d| *d), "ids among the newest stay dense");
        assert!(!was_dense[3199], "values spread over 2^60 are hashed");
        assert_eq!(kinds, ["dense", "packed", "words"]);
        let sorted = |set: &SeenMap, m: usize| {
            let mut vs: Vec<Vec<u8>> = set.member(m).iter().map(|(v, _)| v.to_vec()).collect();
            vs.sort();
            vs
        };
        for m in 0..4 {
            assert_eq!(sorted(&dense, m), sorted(&counts, m), "member {m}");
        }
        // Dense, the 4 marks of 1500 ids take 750 bytes, where a hash map takes 16 each.
        let mut dense = SeenMap::new(true, 4, true);
        for i in 0..1500u64 {
            dense.change(&word(1_000 + i), 4, 1, |_| true, |_, _| Ok(())).unwrap();
        }
        assert!(matches!(dense, SeenMap::Dense(_)));
        assert!(dense.heap_bytes() <= 1024, "{}", dense.heap_bytes());
        // Restored as it was saved: the same members, dense.
        let mut restored = SeenMap::new(true, 4, true);
        for m in 0..4 {
            for (v, count) in dense.member(m) {
                assert!(restored.restore(&v, 4, m, count));
            }
        }
        assert!(matches!(restored, SeenMap::Dense(_)));
        for m in 0..4 {
            assert_eq!(sorted(&restored, m), sorted(&dense, m), "member {m}");
        }
    }

    #[test]
    fn word_marks_restore_and_widen_as_marks_do() {
        let w = [1u8, 0, 0, 0, 0, 0, 0, 0, 5];
        let mut words = SeenMap::WordMarks(HashMap::default());
        assert!(words.restore(&w, 2, 1, 3));
        assert!(!words.restore(&w, 2, 1, 1), "a value restored twice for a member");
        assert!(words.restore(&w, 2, 0, 1));
        assert!(matches!(words, SeenMap::WordMarks(_)));
        assert!(words.restore(b"xy", 2, 0, 1));
        assert!(matches!(words, SeenMap::Marks(_)));
        assert!(!words.restore(&w, 2, 0, 1));
        let members = |m| {
            let mut vs: Vec<Vec<u8>> = words.member(m).iter().map(|(v, _)| v.to_vec()).collect();
            vs.sort();
            vs
        };
        assert_eq!(members(0), [w.to_vec(), b"xy".to_vec()]);
        assert_eq!(members(1), [w.to_vec()]);
        // More members than dense marks hold: words; more than the words' marks hold: marks
        // of 64.
        assert!(matches!(SeenMap::new(true, 9, true), SeenMap::WordMarks(_)));
        assert!(matches!(SeenMap::new(true, 33, true), SeenMap::Marks(_)));
        assert_eq!(size_of::<([u8; WORD], u32)>(), 16);
    }

    #[test]
    fn packed_marks_peek_restore_and_widen_as_marks_do() {
        let (five, minus_one) = (word(5), word(u64::MAX));
        let mut set = SeenMap::Packed(PackedMarks::new(2));
        assert_eq!(set.peek(&five), 0);
        assert!(set.restore(&five, 2, 1, 3));
        assert!(!set.restore(&five, 2, 1, 1), "a value restored twice for a member");
        assert!(set.restore(&five, 2, 0, 1));
        assert!(matches!(set, SeenMap::Packed(_)));
        assert_ne!(set.peek(&five), 0);
        assert_eq!(set.peek(&word(6)), 0);
        assert_eq!(set.peek(&minus_one), 0, "a value that does not pack");
        // -1 leaves no room for marks: the set becomes words, then marks at a string.
        assert_eq!(flips(&mut set, &minus_one, 1, &[0]), [(0, 1)]);
        assert!(matches!(set, SeenMap::WordMarks(_)));
        assert!(set.restore(b"xy", 2, 1, 1));
        assert!(matches!(set, SeenMap::Marks(_)));
        let members = |m| {
            let mut vs: Vec<Vec<u8>> = set.member(m).iter().map(|(v, _)| v.to_vec()).collect();
            vs.sort();
            vs
        };
        assert_eq!(members(0), [minus_one.to_vec(), five.to_vec()]);
        assert_eq!(members(1), [five.to_vec(), b"xy".to_vec()]);
    }

    #[test]
    fn counts_flip_back_and_leave_at_zero() {
        let mut set = SeenMap::new(false, 3, false);
        assert_eq!(flips(&mut set, b"x", 2, &[0, 1]), [(0, 1), (1, 1)]);
        assert_eq!(flips(&mut set, b"x", -1, &[0]), []);
        assert_eq!(flips(&mut set, b"x", -1, &[0, 1]), [(0, -1)]);
        assert_eq!(flips(&mut set, b"x", -1, &[1]), [(1, -1)]);
        let SeenMap::Counts(map) = &set else { unreachable!() };
        assert!(map.is_empty());
        // More members than a word has bits: counts, even over an insert-only input.
        assert!(matches!(SeenMap::new(true, 65, false), SeenMap::Counts(_)));
    }
}
