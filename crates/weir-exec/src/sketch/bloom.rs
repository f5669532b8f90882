//! Approximate membership in bounded memory (`[DEDUPLICATE ...]`): a Bloom filter (Bloom
//! 1970) of two generations.
//!
//! One generation is a Bloom filter sized for `capacity` keys at a false-positive rate of p/2:
//! m = ⌈−capacity·ln(p/2)/ln²2⌉ bits and k = max(1, round(m/capacity·ln 2)) probes (m then
//! grown by 1 % steps until (1 − e^(−k·capacity/m))^k, the rate when full, is at most p/2:
//! k is rounded), the probes
//! of a key being h1 + i·h2 mod m (i < k) for two 32-bit halves of its 64-bit hash (Kirsch and
//! Mitzenmacher, "Less hashing, same performance", 2006). A key is *seen* if all its probes are
//! set in the current generation or in the previous one. New keys go into the current
//! generation; once it holds `capacity` keys it becomes the previous one (the previous one is
//! dropped) and a new, empty, current generation starts. So memory is two filters whatever the
//! stream's length, each at most p/2 false positives while it holds at most `capacity` keys:
//! a key never seen is taken as seen with probability at most p. A key is remembered for at
//! least `capacity` and at most 2·capacity new keys after it was first seen; after that it is
//! forgotten (seen again, it is new).
//!
//! Deterministic: the bits depend on the sequence of keys inserted and on the hash only (the
//! router's fixed hash, [`super::value_hash`]), not on the machine or run.

use weir_common::{Result, WeirError};

use super::value_hash;
use crate::heap::HeapSize;

/// A rotating Bloom filter of keys given as bytes (their row encodings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    capacity: u64,
    /// Bits per generation.
    m: u64,
    /// Probes per key.
    k: u32,
    current: Vec<u64>,
    previous: Option<Vec<u64>>,
    /// Keys inserted into the current generation.
    inserted: u64,
}

/// The bits of one generation for `capacity` keys at false-positive rate `p` (its half is
/// each generation's), and its probes.
pub fn dimensions(capacity: u64, p: f64) -> (u64, u32) {
    sized(capacity, p / 2.0)
}

/// The cells (bits, or counters) and probes of a filter holding `capacity` keys at a
/// false-positive rate of at most `rate`: m = ⌈−n·ln(rate)/ln²2⌉ (at least 64), k =
/// round(m/n·ln 2) in [1, 64], m then grown by 1 % steps until the rate when full is at most
/// `rate` (k is rounded).
pub fn sized(capacity: u64, rate: f64) -> (u64, u32) {
    let n = capacity.max(1) as f64;
    let mut m = weir_plan::bloom_cells(capacity, rate).ceil().max(64.0);
    let k = ((m / n) * std::f64::consts::LN_2).round().clamp(1.0, 64.0);
    while full_rate(m, k, n) > rate {
        m = (m * 1.01).ceil();
    }
    (m as u64, k as u32)
}

/// The false-positive rate of a filter of m cells and k probes holding n keys:
/// (1 − e^(−k·n/m))^k.
pub fn full_rate(m: f64, k: f64, n: f64) -> f64 {
    (1.0 - (-k * n / m).exp()).powf(k)
}

/// The k cells (of m) a key probes, from its 64-bit hash: h1 + i·h2 mod m for i < k, the two
/// halves of the hash (Kirsch and Mitzenmacher; h2 odd).
pub fn cells(hash: u64, m: u64, k: u32) -> impl Iterator<Item = u64> {
    let (h1, h2) = (hash & 0xFFFF_FFFF, (hash >> 32) | 1);
    (0..k as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % m)
}

/// The generations' bit vectors.
impl HeapSize for Bloom {
    fn heap_bytes(&self) -> usize {
        self.current.heap_bytes() + self.previous.heap_bytes()
    }
}

impl Bloom {
    /// An empty filter for `capacity` keys per generation at false-positive rate `p` (in
    /// (0, 1); the binder checks).
    pub fn new(capacity: u64, p: f64) -> Self {
        let (m, k) = dimensions(capacity, p);
        Bloom {
            capacity: capacity.max(1),
            m,
            k,
            current: vec![0; m.div_ceil(64) as usize],
            previous: None,
            inserted: 0,
        }
    }

    fn probes(&self, key: &[u8]) -> impl Iterator<Item = (usize, u64)> + '_ {
        cells(value_hash(key), self.m, self.k).map(|bit| ((bit / 64) as usize, 1u64 << (bit % 64)))
    }

    fn holds(&self, bits: &[u64], key: &[u8]) -> bool {
        self.probes(key).all(|(w, b)| bits.get(w).is_some_and(|x| x & b != 0))
    }

    /// Whether `key` was (probably) seen; if not, it is now. True for a key seen before (unless
    /// forgotten) and, with probability at most p, for a new one.
    pub fn check_and_insert(&mut self, key: &[u8]) -> bool {
        if self.holds(&self.current, key)
            || self.previous.as_ref().is_some_and(|p| self.holds(p, key))
        {
            return true;
        }
        let probes: Vec<(usize, u64)> = self.probes(key).collect();
        for (w, b) in probes {
            if let Some(x) = self.current.get_mut(w) {
                *x |= b;
            }
        }
        self.inserted += 1;
        if self.inserted >= self.capacity {
            let fresh = vec![0; self.current.len()];
            self.previous = Some(std::mem::replace(&mut self.current, fresh));
            self.inserted = 0;
        }
        false
    }

    /// Memory held, in bytes.
    pub fn bytes(&self) -> usize {
        (self.current.len() + self.previous.as_ref().map_or(0, Vec::len)) * 8
    }

    /// Bits per generation and probes per key.
    pub fn shape(&self) -> (u64, u32) {
        (self.m, self.k)
    }

    /// The filter as bytes, for checkpoints: the keys in the current generation (8 bytes,
    /// little-endian), whether there is a previous generation (1 byte), then the current
    /// generation's words and the previous one's (8 bytes each, little-endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.bytes());
        out.extend_from_slice(&self.inserted.to_le_bytes());
        out.push(self.previous.is_some() as u8);
        for w in self.current.iter().chain(self.previous.iter().flatten()) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Reads [`Bloom::to_bytes`] back into a filter of `capacity` and `p`; errors (never
    /// panics) on bytes that are not such a filter.
    pub fn from_bytes(capacity: u64, p: f64, bytes: &[u8]) -> Result<Bloom> {
        let bad = || WeirError::exec("checkpoint: a Bloom filter does not fit its capacity");
        let mut b = Bloom::new(capacity, p);
        let words = b.current.len();
        let (head, rest) = bytes.split_at_checked(9).ok_or_else(bad)?;
        b.inserted = u64::from_le_bytes(head[..8].try_into().map_err(|_| bad())?);
        let gens = match head[8] {
            0 => 1,
            1 => 2,
            _ => return Err(bad()),
        };
        if rest.len() != gens * words * 8 || b.inserted >= b.capacity {
            return Err(bad());
        }
        let all = super::le_words(rest);
        b.current = all[..words].to_vec();
        if gens == 2 {
            b.previous = Some(all[words..].to_vec());
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_key as key;
    use super::*;

    #[test]
    fn dimensions_follow_the_formulas() {
        // 10^6 keys at 1 %: 0.5 % per generation, about 11 bits a key, 8 probes.
        let (m, k) = dimensions(1_000_000, 0.01);
        assert!((11_000_000..11_300_000).contains(&m) && k == 8, "{m} {k}");
        assert!(dimensions(10, 0.5).0 >= 64);
        for n in [1u64, 10, 1_000, 123_457, 10_000_000] {
            for p in [0.5, 0.1, 0.01, 1e-3, 1e-6, 1e-9] {
                let (m, k) = dimensions(n, p);
                assert!(full_rate(m as f64, k as f64, n as f64) <= p / 2.0, "{n} {p}");
            }
        }
    }

    /// Keys seen are always found, while remembered (fewer than `capacity` new keys since).
    #[test]
    fn seen_keys_are_found() {
        let mut b = Bloom::new(1_000, 0.01);
        for i in 0..999 {
            b.check_and_insert(&key(i, 1));
        }
        for i in 0..999 {
            assert!(b.check_and_insert(&key(i, 1)), "{i}");
        }
    }

    /// Over many seeds, the share of new keys taken as seen stays below the stated rate p with
    /// both generations full (the worst case): the rate measured over all runs is at most p
    /// plus three standard errors of the measurement, at several rates.
    #[test]
    fn false_positives_stay_below_the_stated_rate() {
        let runs: u64 =
            std::env::var("WEIR_SKETCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
        for p in [0.1, 0.01, 0.001] {
            let (mut fp, mut probes) = (0u64, 0u64);
            for seed in 0..runs {
                let mut b = Bloom::new(2_000, p);
                // Two generations, the second one full but for one key: the most bits set.
                let mut stored = 0;
                let mut i = 0;
                while stored < 3_999 {
                    if !b.check_and_insert(&key(i, seed)) {
                        stored += 1;
                    }
                    i += 1;
                }
                let before = &b;
                for j in 0..20_000u64 {
                    // Probed without inserting (keys never inserted).
                    let k = key(j, seed ^ 0xFFFF_0000);
                    let seen = before.holds(&before.current, &k)
                        || before.previous.as_ref().is_some_and(|g| before.holds(g, &k));
                    fp += seen as u64;
                }
                probes += 20_000;
            }
            let rate = fp as f64 / probes as f64;
            let se = (p / probes as f64).sqrt();
            assert!(rate <= p + 3.0 * se, "p = {p}: measured {rate}");
            assert!(rate >= p / 4.0, "p = {p}: measured {rate}: the filter is oversized");
        }
    }

    #[test]
    fn generations_rotate_and_forget() {
        let mut b = Bloom::new(10, 0.01);
        for i in 0..10 {
            assert!(!b.check_and_insert(&key(i, 7)));
        }
        assert!(b.previous.is_some());
        assert_eq!(b.inserted, 0);
        for i in 0..10 {
            assert!(b.check_and_insert(&key(i, 7)), "{i} is still in the previous generation");
        }
        // New keys until the current generation is full again and rotates (a new key taken
        // for a seen one by a false positive is not stored, so it may take more than 10).
        let mut i = 10;
        let mut stored = 0;
        while stored < 10 {
            if !b.check_and_insert(&key(i, 7)) {
                stored += 1;
            }
            i += 1;
        }
        assert_eq!(b.inserted, 0);
        // Keys 0..10 were dropped with the generation that held them (but for a false
        // positive, unlikely in 10 probes at 1 %).
        let forgotten = (0..10).filter(|i| !b.clone().check_and_insert(&key(*i, 7))).count();
        assert!(forgotten >= 8, "{forgotten}");
    }

    #[test]
    fn bytes_round_trip_and_bad_bytes_are_refused() {
        let mut b = Bloom::new(100, 0.05);
        for i in 0..150 {
            b.check_and_insert(&key(i, 3));
        }
        let bytes = b.to_bytes();
        assert_eq!(Bloom::from_bytes(100, 0.05, &bytes).expect("round trip"), b);
        assert!(Bloom::from_bytes(1_000, 0.05, &bytes).is_err(), "another size");
        assert!(Bloom::from_bytes(100, 0.05, &bytes[..bytes.len() - 1]).is_err());
        assert!(Bloom::from_bytes(100, 0.05, &[]).is_err());
        let fresh = Bloom::new(100, 0.05);
        assert_eq!(Bloom::from_bytes(100, 0.05, &fresh.to_bytes()).expect("empty"), fresh);
    }

    #[test]
    fn heap_bytes_count_both_generations() {
        let mut b = Bloom::new(10, 0.01);
        let one = b.heap_bytes();
        assert_eq!(one, b.current.len() * 8);
        assert!(one > 0);
        for i in 0..10 {
            b.check_and_insert(&key(i, 9));
        }
        assert!(b.previous.is_some());
        assert_eq!(b.heap_bytes(), 2 * one);
    }
}
