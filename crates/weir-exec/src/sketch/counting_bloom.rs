//! Approximate membership in a relation that deletes rows (`MIGHT_CONTAIN`): a counting Bloom
//! filter (Fan, Cao, Almeida and Broder, "Summary cache", 2000).
//!
//! m counters and k probes sized for `capacity` distinct keys at a false-positive rate p
//! ([`super::bloom::sized`]: about 9.6 counters and 7 probes a key at 1 %). Adding a key with
//! multiplicity d adds d to each of its k counters; removing it subtracts. A key is *contained*
//! if all its counters are non-zero. So a key present (added more times than removed) is always
//! contained: no false negatives. A key absent is contained with probability
//! (1 − e^(−k·n/m))^k with n distinct keys present, at most p while n ≤ `capacity`; past the
//! capacity the rate grows (about 16 % at twice the capacity, 1 % asked), it never fails.
//!
//! Counters are exact: a counter is one byte, and a count of 255 or more lives in a small side
//! map (only cells probed by hundreds of occurrences get there: a key repeated that often, or a
//! filter far past its capacity). So the counters are a function of the bag of keys present
//! alone, not of the order or batching of the changes that made it, and a key removed as often
//! as it was added leaves no trace. Removing a key more often than it was added cannot happen
//! for a relation's changes; it is reported as an internal error and leaves the filter as it
//! was.
//!
//! Deterministic: keys are hashed with [`super::value_hash`] (fixed, the same on every machine
//! and run) of their row encoding.

use std::collections::BTreeMap;

use smallvec::SmallVec;
use weir_common::{Result, WeirError};

use super::bloom::{cells, sized};
use super::{value_hash, Reader};
use crate::heap::HeapSize;

/// The byte a counter holds when its count is in the side map.
const SPILLED: u8 = u8::MAX;

/// A counting Bloom filter of keys given as bytes (their row encodings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountingBloom {
    /// Counters.
    m: u64,
    /// Probes per key.
    k: u32,
    counters: Vec<u8>,
    /// The counts of the counters at [`SPILLED`] (each at least 255).
    spilled: BTreeMap<u64, u64>,
}

/// The counters and the side map of spilled counts.
impl HeapSize for CountingBloom {
    fn heap_bytes(&self) -> usize {
        self.counters.heap_bytes() + self.spilled.heap_bytes()
    }
}

impl CountingBloom {
    /// An empty filter for `capacity` distinct keys at false-positive rate `p` (in (0, 1);
    /// the binder checks).
    pub fn new(capacity: u64, p: f64) -> Self {
        let (m, k) = sized(capacity, p);
        CountingBloom { m, k, counters: vec![0; m as usize], spilled: BTreeMap::new() }
    }

    fn count(&self, cell: u64) -> u64 {
        match self.counters.get(cell as usize) {
            Some(&SPILLED) => self.spilled.get(&cell).copied().unwrap_or(u64::from(SPILLED)),
            Some(&c) => u64::from(c),
            None => 0,
        }
    }

    fn set(&mut self, cell: u64, count: u64) {
        let Some(c) = self.counters.get_mut(cell as usize) else { return };
        if count >= u64::from(SPILLED) {
            *c = SPILLED;
            self.spilled.insert(cell, count);
        } else {
            if *c == SPILLED {
                self.spilled.remove(&cell);
            }
            *c = count as u8;
        }
    }

    /// Adds `diff` occurrences of `key` (removes them if negative). Errors, changing nothing,
    /// if that would take a counter below zero (more removals than additions).
    pub fn add(&mut self, key: &[u8], diff: i64) -> Result<()> {
        let mut probes: SmallVec<[u64; 16]> = cells(value_hash(key), self.m, self.k).collect();
        probes.sort_unstable();
        // Each cell once, with its new count (a key's probes can repeat a cell).
        let mut new: SmallVec<[(u64, u64); 16]> = SmallVec::new();
        for run in probes.chunk_by(|a, b| a == b) {
            let c = i128::from(self.count(run[0])) + i128::from(diff) * run.len() as i128;
            let c = u64::try_from(c).map_err(|_| {
                WeirError::internal("a counting Bloom filter lost a key it was never given")
            })?;
            new.push((run[0], c));
        }
        for (cell, c) in new {
            self.set(cell, c);
        }
        Ok(())
    }

    /// Whether `key` is (probably) present: always for a key present, with probability at most
    /// p (while at most `capacity` distinct keys are) for another.
    pub fn contains(&self, key: &[u8]) -> bool {
        cells(value_hash(key), self.m, self.k)
            .all(|c| self.counters.get(c as usize).is_some_and(|&x| x != 0))
    }

    /// Counters and probes per key.
    pub fn shape(&self) -> (u64, u32) {
        (self.m, self.k)
    }

    /// The filter as bytes, for checkpoints: the m counters (a byte each), the number of
    /// spilled counts (8 bytes, little-endian), then each as its cell and its count (8 bytes
    /// each), by cell.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.counters.len() + 8 + 16 * self.spilled.len());
        out.extend_from_slice(&self.counters);
        out.extend_from_slice(&(self.spilled.len() as u64).to_le_bytes());
        for (cell, count) in &self.spilled {
            out.extend_from_slice(&cell.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        out
    }

    /// Reads [`CountingBloom::to_bytes`] back into a filter of `capacity` and `p`; errors (never
    /// panics) on bytes that are not such a filter.
    pub fn from_bytes(capacity: u64, p: f64, bytes: &[u8]) -> Result<CountingBloom> {
        let bad = || WeirError::exec("checkpoint: a counting Bloom filter does not fit its size");
        let mut b = CountingBloom::new(capacity, p);
        let mut r = Reader(bytes);
        let counters = r.take(b.counters.len()).ok_or_else(bad)?;
        b.counters.copy_from_slice(counters);
        let n = r.i64().and_then(|n| usize::try_from(n).ok()).ok_or_else(bad)?;
        if r.0.len() != n.checked_mul(16).ok_or_else(bad)? {
            return Err(bad());
        }
        for _ in 0..n {
            let (cell, count) = (r.i64().ok_or_else(bad)? as u64, r.i64().ok_or_else(bad)? as u64);
            let fits = b.counters.get(cell as usize) == Some(&SPILLED)
                && count >= u64::from(SPILLED)
                && b.spilled.insert(cell, count).is_none();
            if !fits {
                return Err(bad());
            }
        }
        if b.counters.iter().filter(|&&c| c == SPILLED).count() != b.spilled.len() {
            return Err(bad());
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_key as key;
    use super::*;

    #[test]
    fn present_keys_are_contained_and_removed_ones_leave_no_trace() {
        let mut b = CountingBloom::new(1_000, 0.01);
        let empty = b.clone();
        for i in 0..1_000 {
            b.add(&key(i, 1), 1 + (i % 3) as i64).unwrap();
        }
        assert!((0..1_000).all(|i| b.contains(&key(i, 1))));
        // The odd keys go (all their occurrences), in another order than they came.
        for i in (0..1_000).rev().filter(|i| i % 2 == 1) {
            b.add(&key(i, 1), -(1 + (i % 3) as i64)).unwrap();
        }
        assert!((0..1_000).filter(|i| i % 2 == 0).all(|i| b.contains(&key(i, 1))));
        for i in (0..1_000).filter(|i| i % 2 == 0) {
            b.add(&key(i, 1), -(1 + (i % 3) as i64)).unwrap();
        }
        assert_eq!(b, empty, "every key removed: every counter back to zero");
    }

    /// Counts of 255 and more are exact: a key added 1000 times and removed 1000 times in
    /// steps of different sizes is gone, and the counters are zero.
    #[test]
    fn large_counts_spill_and_come_back() {
        let mut b = CountingBloom::new(100, 0.01);
        let empty = b.clone();
        b.add(&key(7, 0), 1).unwrap();
        for _ in 0..999 {
            b.add(&key(1, 0), 1).unwrap();
        }
        b.add(&key(1, 0), 1).unwrap();
        assert!(!b.spilled.is_empty());
        b.add(&key(1, 0), -700).unwrap();
        assert!(b.contains(&key(1, 0)));
        b.add(&key(1, 0), -299).unwrap();
        assert!(b.contains(&key(1, 0)) && b.spilled.is_empty());
        b.add(&key(1, 0), -1).unwrap();
        b.add(&key(7, 0), -1).unwrap();
        assert_eq!(b, empty);
    }

    #[test]
    fn removing_what_was_never_added_is_an_error_and_changes_nothing() {
        let mut b = CountingBloom::new(100, 0.01);
        b.add(&key(1, 0), 2).unwrap();
        let before = b.clone();
        assert!(b.add(&key(1, 0), -3).is_err());
        assert!(b.add(&key(2, 0), -1).is_err());
        assert_eq!(b, before);
    }

    /// Over many seeds, with `capacity` keys present after as many more came and went, the
    /// share of absent keys taken as present stays below the stated rate (the rate over all
    /// runs is at most p plus three standard errors), and is not far below it (the filter is
    /// not oversized).
    #[test]
    fn false_positives_stay_below_the_stated_rate() {
        let runs: u64 =
            std::env::var("WEIR_SKETCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
        for p in [0.1, 0.01, 0.001] {
            let (mut fp, mut probes) = (0u64, 0u64);
            for seed in 0..runs {
                let mut b = CountingBloom::new(2_000, p);
                for i in 0..4_000 {
                    b.add(&key(i, seed), 1).unwrap();
                }
                for i in (0..4_000).filter(|i| i % 2 == 1) {
                    b.add(&key(i, seed), -1).unwrap();
                }
                for j in 0..20_000u64 {
                    fp += b.contains(&key(j, seed ^ 0xFFFF_0000)) as u64;
                }
                // The keys removed are absent too.
                for i in (0..4_000).filter(|i| i % 2 == 1) {
                    fp += b.contains(&key(i, seed)) as u64;
                }
                probes += 22_000;
            }
            let rate = fp as f64 / probes as f64;
            let se = (p / probes as f64).sqrt();
            assert!(rate <= p + 3.0 * se, "p = {p}: measured {rate}");
            assert!(rate >= p / 4.0, "p = {p}: measured {rate}: the filter is oversized");
        }
    }

    /// Keys as the engine gives them: the encodings of consecutive even integers, which share
    /// all but their last bytes. Their probes must spread like random keys' (a weak row hash
    /// once gave these 10 000 keys 2048 hashes, and every odd integer was found).
    #[test]
    fn encoded_integers_spread_over_the_counters() {
        use crate::row::RowCodec;
        use arrow::array::{ArrayRef, Int64Array};
        let codec = RowCodec::new(vec![arrow::datatypes::DataType::Int64]).unwrap();
        let ints = |f: fn(i64) -> i64, n: usize| -> ArrayRef {
            std::sync::Arc::new(Int64Array::from_iter_values((0..n as i64).map(f)))
        };
        let present = codec.encode(&[ints(|i| 2 * i, 10_000)], 10_000).unwrap();
        let absent = codec.encode(&[ints(|i| 2 * i + 1, 10_000)], 10_000).unwrap();
        let mut b = CountingBloom::new(10_000, 0.01);
        for i in 0..10_000 {
            b.add(present.get(i), 1).unwrap();
        }
        assert!((0..10_000).all(|i| b.contains(present.get(i))));
        let found = (0..10_000).filter(|&i| b.contains(absent.get(i))).count();
        // At most 1 % expected: 100 of 10 000, three standard errors 30 more.
        assert!(found <= 130, "{found} of 10000 absent integers found");
    }

    #[test]
    fn bytes_round_trip_and_bad_bytes_are_refused() {
        let mut b = CountingBloom::new(100, 0.05);
        for i in 0..150 {
            b.add(&key(i, 3), 1).unwrap();
        }
        b.add(&key(5, 3), 400).unwrap();
        let bytes = b.to_bytes();
        assert_eq!(CountingBloom::from_bytes(100, 0.05, &bytes).expect("round trip"), b);
        assert!(CountingBloom::from_bytes(1_000, 0.05, &bytes).is_err(), "another size");
        assert!(CountingBloom::from_bytes(100, 0.05, &bytes[..bytes.len() - 1]).is_err());
        assert!(CountingBloom::from_bytes(100, 0.05, &[]).is_err());
        let mut spill_lost = bytes.clone();
        let n = b.counters.len();
        spill_lost[n..n + 8].copy_from_slice(&0u64.to_le_bytes());
        spill_lost.truncate(n + 8);
        assert!(CountingBloom::from_bytes(100, 0.05, &spill_lost).is_err());
        let fresh = CountingBloom::new(100, 0.05);
        assert_eq!(CountingBloom::from_bytes(100, 0.05, &fresh.to_bytes()).expect("empty"), fresh);
    }

    #[test]
    fn heap_bytes_count_the_counters_and_the_spilled_counts() {
        let mut b = CountingBloom::new(100, 0.01);
        let counters = b.heap_bytes();
        assert_eq!(counters, b.counters.len().next_multiple_of(8));
        // A key 300 times: its counters spill into the side map, and leave it with the key.
        b.add(&key(1, 2), 300).unwrap();
        assert!(b.heap_bytes() > counters, "{}", b.heap_bytes());
        b.add(&key(1, 2), -300).unwrap();
        assert_eq!(b.heap_bytes(), counters);
    }
}
