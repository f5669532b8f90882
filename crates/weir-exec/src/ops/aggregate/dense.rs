//! Dense marks: the DISTINCT set of an insert-only input over 64-bit values lying close
//! together (ids handed out in sequence, such as q16's bidders and auctions), as a bit array
//! over the range of values seen: a few bits per value of the range (each member's mark, the
//! member count rounded up to a power of two) instead of a hash-map entry of 16 bytes per value
//! present. A probe is an index, never a cache miss into a large table, and the array of a set
//! of 60 000 ids fits in 30 KB.
//!
//! The array stays only while it is small for what it holds: at most
//! [`DenseMarks::FLOOR_WORDS`] words, or two words (16 bytes, less than a hash-map entry with
//! its control byte and spare room) per value present. A value that would stretch the range
//! past that, that does not fit the 64-bit range, or whose encoding is not the 9-byte one of
//! the set's first value (a NULL, a 32-bit number) makes the caller turn the set into a hash map
//! for good ([`DenseMarks::entries`]): a set never takes much more memory dense than hashed.

use crate::heap::HeapSize;

/// A set's values (as the big-endian number after the encoding's first byte) and their marks,
/// in a bit array: value `base + s` has the `bits` bits of slot s.
#[derive(Debug, Clone, Default)]
pub(super) struct DenseMarks {
    /// The first byte of every value's encoding (the set's first value's).
    tag: u8,
    /// The value of slot 0, a multiple of the slots per word (so that moving the range moves
    /// whole words).
    base: u64,
    /// Bits per slot: the set's members rounded up to a power of two, at most 8.
    bits: u32,
    words: Vec<u64>,
    /// The slots with at least one mark.
    present: usize,
}

/// Where a value's marks are: the word, and the shift of the slot's bits in it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    word: usize,
    shift: u32,
}

impl DenseMarks {
    /// The most members a dense set has marks for.
    pub(super) const MAX_MEMBERS: usize = 8;

    /// The array's size a set may reach whatever it holds (256 bytes).
    const FLOOR_WORDS: u64 = 32;

    /// An empty set of `members` (1 to [`DenseMarks::MAX_MEMBERS`]) marks per value.
    pub(super) fn new(members: usize) -> Self {
        DenseMarks {
            bits: members.clamp(1, Self::MAX_MEMBERS).next_power_of_two() as u32,
            ..Self::default()
        }
    }

    /// Bits of marks per value (the members rounded up to a power of two).
    pub(super) fn bits(&self) -> u32 {
        self.bits
    }

    fn per_word(&self) -> u64 {
        u64::from(64 / self.bits)
    }

    fn mask(&self) -> u64 {
        (1 << self.bits) - 1
    }

    /// The slot of value `v` (a row encoding), the range grown to hold it if need be; None if
    /// the set cannot hold it densely (see the module docs).
    pub(super) fn slot(&mut self, v: &[u8]) -> Option<Slot> {
        let (&tag, rest) = v.split_first()?;
        let n = u64::from_be_bytes(rest.try_into().ok()?);
        if self.words.is_empty() {
            self.tag = tag;
        }
        if tag != self.tag {
            return None;
        }
        let per_word = self.per_word();
        let slots = self.words.len() as u64 * per_word;
        if n < self.base || n - self.base >= slots {
            self.grow(n)?;
        }
        let pos = (n - self.base) * u64::from(self.bits);
        Some(Slot { word: (pos / 64) as usize, shift: (pos % 64) as u32 })
    }

    /// Stretches the range to take in `n`, with room to spare on the side `n` lies (the
    /// array at least doubles, so a range growing value by value is copied O(1) times per
    /// value); None if the array would be too large for what the set holds.
    fn grow(&mut self, n: u64) -> Option<()> {
        let per_word = self.per_word();
        let at = n - n % per_word;
        let (lo, end) = if self.words.is_empty() {
            (at, at.checked_add(per_word)?)
        } else {
            let end = self.base.checked_add(self.words.len() as u64 * per_word)?;
            (self.base.min(at), end.max(at.checked_add(per_word)?))
        };
        let needed = (end - lo) / per_word;
        let allowance = Self::FLOOR_WORDS.max(2 * (self.present as u64 + 1));
        if needed > allowance {
            return None;
        }
        let size = needed.max((2 * self.words.len() as u64).min(allowance));
        let spare = (size - needed) * per_word;
        // The spare room goes where the new value came from: below for a value under the
        // range (within what the 64-bit range allows), above otherwise.
        let new_base =
            if !self.words.is_empty() && n < self.base { lo.saturating_sub(spare) } else { lo };
        new_base.checked_add(size * per_word)?;
        let mut words = vec![0u64; size as usize];
        let offset = ((self.base.max(new_base) - new_base) / per_word) as usize;
        if !self.words.is_empty() {
            words[offset..offset + self.words.len()].copy_from_slice(&self.words);
        }
        self.words = words;
        self.base = new_base;
        Some(())
    }

    /// The marks of a slot (bit m: member m's).
    pub(super) fn get(&self, s: Slot) -> u64 {
        (self.words[s.word] >> s.shift) & self.mask()
    }

    /// Sets the marks of a slot (only the slot's bits of `marks` are kept).
    pub(super) fn set(&mut self, s: Slot, marks: u64) {
        let mask = self.mask();
        let before = (self.words[s.word] >> s.shift) & mask;
        let after = marks & mask;
        if before == 0 && after != 0 {
            self.present += 1;
        } else if before != 0 && after == 0 {
            self.present -= 1;
        }
        self.words[s.word] = (self.words[s.word] & !(mask << s.shift)) | (after << s.shift);
    }

    /// The number of values with a mark.
    pub(super) fn len(&self) -> usize {
        self.present
    }

    /// The word holding value `v`'s marks, read without changing anything (0 if the range
    /// does not hold it): see [`super::distinct::SeenMap::peek`].
    pub(super) fn peek(&self, v: &[u8]) -> u64 {
        let Some((&tag, rest)) = v.split_first() else { return 0 };
        let Ok(bytes) = <[u8; 8]>::try_from(rest) else { return 0 };
        let n = u64::from_be_bytes(bytes);
        if tag != self.tag || n < self.base {
            return 0;
        }
        let word = (n - self.base) / self.per_word();
        usize::try_from(word).ok().and_then(|w| self.words.get(w)).copied().unwrap_or(0)
    }

    /// Every value with a mark, as its row encoding, with its marks, in value order.
    pub(super) fn entries(&self) -> impl Iterator<Item = ([u8; 9], u64)> + '_ {
        let (bits, mask, per_word) = (self.bits, self.mask(), self.per_word());
        self.words.iter().enumerate().filter(|(_, w)| **w != 0).flat_map(move |(i, &w)| {
            (0..per_word).filter_map(move |k| {
                let marks = (w >> (k as u32 * bits)) & mask;
                (marks != 0).then(|| {
                    let n = self.base + i as u64 * per_word + k;
                    let mut enc = [self.tag; 9];
                    enc[1..].copy_from_slice(&n.to_be_bytes());
                    (enc, marks)
                })
            })
        })
    }

    /// Empties the set.
    pub(super) fn clear(&mut self) {
        *self = DenseMarks::new(self.bits as usize);
    }
}

impl HeapSize for DenseMarks {
    fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(n: u64) -> [u8; 9] {
        let mut e = [1u8; 9];
        e[1..].copy_from_slice(&n.to_be_bytes());
        e
    }

    /// Marks member m of value n; whether it was new.
    fn mark(set: &mut DenseMarks, n: u64, m: u32) -> Option<bool> {
        let s = set.slot(&enc(n))?;
        let marks = set.get(s);
        set.set(s, marks | 1 << m);
        Some(marks & 1 << m == 0)
    }

    #[test]
    fn a_peek_reads_the_word_of_a_value_in_the_range_and_nothing_else() {
        let mut set = DenseMarks::new(4);
        assert_eq!(set.peek(&enc(100)), 0, "an empty set");
        assert_eq!(mark(&mut set, 100, 2), Some(true));
        let word = set.peek(&enc(100));
        assert_ne!(word, 0);
        // 4 bits a slot, 16 slots a word: 101 shares 100's word, 1000 lies past the range.
        assert_eq!(set.peek(&enc(101)), word);
        assert_eq!(set.peek(&enc(1000)), 0);
        assert_eq!(set.peek(&enc(0)), 0, "below the range");
        let mut other_tag = enc(100);
        other_tag[0] = 0;
        assert_eq!(set.peek(&other_tag), 0, "another first byte");
        assert_eq!(set.peek(&[1, 2, 3]), 0, "not a word");
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn values_up_and_down_the_range_keep_their_marks() {
        let mut set = DenseMarks::new(3);
        assert_eq!(set.bits, 4);
        let values = [1000u64, 1001, 1063, 999, 900, 1200, 1000, 800, 1240];
        let mut want = std::collections::BTreeMap::new();
        for (i, &n) in values.iter().enumerate() {
            let m = (i % 3) as u32;
            let fresh = want.get(&n).is_none_or(|marks: &u64| marks & 1 << m == 0);
            assert_eq!(mark(&mut set, n, m), Some(fresh), "value {n}");
            *want.entry(n).or_insert(0) |= 1 << m;
            let got: Vec<(u64, u64)> = set
                .entries()
                .map(|(e, marks)| (u64::from_be_bytes(e[1..].try_into().unwrap()), marks))
                .collect();
            assert_eq!(got, want.iter().map(|(n, m)| (*n, *m)).collect::<Vec<_>>(), "after {n}");
            assert_eq!(set.present, want.len());
        }
        assert!(set.base.is_multiple_of(set.per_word()));
        // 800 took the array to the 32 words allowed for so few values (16 slots each, the
        // spare ones below 800): 1300 or 64 would take more.
        assert_eq!(set.words.len(), 32);
        assert_eq!(mark(&mut set, 1300, 0), None);
        assert_eq!(mark(&mut set, 64, 0), None);
    }

    #[test]
    fn a_range_too_wide_for_what_it_holds_is_refused() {
        let mut set = DenseMarks::new(4);
        assert_eq!(mark(&mut set, 5, 0), Some(true));
        // 32 words of 16 slots: values up to 511 fit beside 5, 100 000 does not.
        assert_eq!(mark(&mut set, 511, 1), Some(true));
        assert_eq!(mark(&mut set, 100_000, 0), None);
        // Two words per value present: 1000 values spread over 2000 fit.
        let mut set = DenseMarks::new(4);
        for n in (0..2000).step_by(2) {
            assert_eq!(mark(&mut set, n, 0), Some(true));
        }
        assert!(set.words.len() <= 2 * 1000 + 2);
        assert_eq!(mark(&mut set, 1_000_000, 0), None);
        // The ends of the 64-bit range, another first byte, another length.
        let mut set = DenseMarks::new(1);
        assert_eq!(mark(&mut set, u64::MAX, 0), None);
        assert_eq!(mark(&mut set, u64::MAX - 100, 0), Some(true));
        assert_eq!(mark(&mut set, 3, 0), None);
        assert!(set.slot(&[0; 9]).is_none());
        assert!(set.slot(&[1; 5]).is_none());
        let mut set = DenseMarks::new(1);
        assert_eq!(mark(&mut set, 0, 0), Some(true));
        assert_eq!(mark(&mut set, 1, 0), Some(true));
    }

    #[test]
    fn marks_of_eight_members_fill_a_byte() {
        let mut set = DenseMarks::new(8);
        for m in 0..8 {
            assert_eq!(mark(&mut set, 42, m), Some(true));
            assert_eq!(mark(&mut set, 42, m), Some(false));
        }
        assert_eq!(set.entries().collect::<Vec<_>>(), [(enc(42), 0xff)]);
        set.clear();
        assert_eq!(set.entries().count(), 0);
        assert_eq!(set.heap_bytes(), 0);
    }
}
