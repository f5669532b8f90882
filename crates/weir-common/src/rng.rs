//! A seeded random number generator: SplitMix64 (Steele, Lea and Flood, 2014).
//!
//! Weir needs randomness only where a result must still be reproducible: the benchmark's event
//! generator, the demo's made-up bids, and (later) sampling in the executor, where a seed in
//! the query or the checkpoint must give the same rows again. SplitMix64 suits all three: its
//! whole state is one `u64` (trivial to checkpoint), the sequence for a seed is the same on
//! every platform and release, and it needs no dependency. It is not for anything that needs
//! unpredictable numbers.

/// SplitMix64: a 64-bit state advanced by a fixed odd constant (the golden ratio) and scrambled
/// on output by two xor-shift-multiply rounds. Every seed, 0 included, gives a full-period
/// sequence of 2⁶⁴ values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The generator whose sequence `seed` names.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0), by multiply-shift, with no division. Up to 2³² it
    /// uses the high 32 bits of one draw, so each value's probability is off by less than 2⁻³²;
    /// above, all 64 bits. (The benchmark's event streams depend on the exact values.)
    pub fn below(&mut self, n: u64) -> u64 {
        let x = self.next_u64();
        if n <= 1 << 32 {
            // (x >> 32) * n < 2⁶⁴ here.
            ((x >> 32) * n) >> 32
        } else {
            ((u128::from(x) * u128::from(n)) >> 64) as u64
        }
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`), as `lo + next_u64() % (hi - lo + 1)`: the
    /// modulo's bias is below the span divided by 2⁶⁴.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        // The span in two's complement; 0 when lo..=hi is every i64.
        let span = (hi.wrapping_sub(lo) as u64).wrapping_add(1);
        let x = self.next_u64();
        if hi < lo {
            return lo;
        }
        let offset = if span == 0 { x } else { x % span };
        lo.wrapping_add(offset as i64)
    }

    /// Uniform in [0, 1), with 53 random bits (every double of the form k / 2⁵³).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_sequence() {
        // The published SplitMix64 outputs for seed 0, and the first of seed 1 and 7, which the
        // benchmark and the demo start from: a change here changes their data.
        let mut r = SplitMix64::new(0);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F]);
        assert_eq!(SplitMix64::new(1).next_u64(), 0x910A_2DEC_8902_5CC1);
        let mut a = SplitMix64::new(7);
        let mut b = a.clone();
        assert_eq!(a.next_u64(), b.next_u64());
        assert_eq!(a, b);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = SplitMix64::new(1);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            seen[r.below(7) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
        for n in [(1 << 32) - 1, 1 << 32, (1 << 32) + 1, u64::MAX] {
            for _ in 0..100 {
                assert!(r.below(n) < n, "{n}");
            }
        }
        // Above 2³² the low bits vary too.
        assert!((0..100).any(|_| r.below(u64::MAX) & 0xFFFF_FFFF != 0));
    }

    #[test]
    fn below_is_the_high_bits_times_n() {
        // What the benchmark's sequences were generated with.
        let mut r = SplitMix64::new(42);
        let mut raw = r.clone();
        for n in [1u64, 26, 10_000, 1_000_000, 1 << 32] {
            assert_eq!(r.below(n), ((raw.next_u64() >> 32) * n) >> 32);
        }
    }

    #[test]
    fn between_is_inclusive_and_total() {
        let mut r = SplitMix64::new(3);
        let mut seen = [false; 6];
        for _ in 0..1000 {
            let v = r.between(-2, 3);
            assert!((-2..=3).contains(&v));
            seen[(v + 2) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(r.between(5, 5), 5);
        assert_eq!(r.between(5, 4), 5);
        let _ = r.between(i64::MIN, i64::MAX);
        assert!((0..100).all(|_| r.between(i64::MAX - 1, i64::MAX) >= i64::MAX - 1));
        let mut raw = SplitMix64::new(9);
        let mut r = raw.clone();
        assert_eq!(r.between(100, 550), 100 + (raw.next_u64() % 451) as i64);
    }

    #[test]
    fn unit_is_in_the_unit_interval() {
        let mut r = SplitMix64::new(5);
        let v: Vec<f64> = (0..1000).map(|_| r.unit()).collect();
        assert!(v.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((0.45..0.55).contains(&mean), "{mean}");
    }
}
