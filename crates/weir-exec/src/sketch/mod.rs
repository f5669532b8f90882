//! Sketches: small, mergeable summaries of a bag of values that answer one question about it
//! approximately, with a known error, in bounded memory.
//!
//! - [`hll`]: HyperLogLog, the number of distinct values (`APPROX_COUNT_DISTINCT`).
//! - [`quantile`]: a t-digest, quantiles (`APPROX_PERCENTILE`, `APPROX_MEDIAN`).
//! - [`topk`]: a mergeable Misra-Gries summary, the most frequent values (`APPROX_TOP_K`).
//! - [`bloom`]: a rotating Bloom filter, keys seen before (`[DEDUPLICATE ...]`).
//! - [`counting_bloom`]: a counting Bloom filter, keys of a relation that deletes rows
//!   (`MIGHT_CONTAIN`).
//!
//! `[SAMPLE N ROWS]` (bottom-k sampling by a seeded hash) keeps its elements themselves: see
//! [`crate::ops::window_sample`].
//!
//! A HyperLogLog is a function of the *set* of values it was given (not of their order,
//! batching or worker); a t-digest and a Misra-Gries summary of the sequence of the multisets
//! of values they were given per instant. Two sketches merge into a sketch of all their values; so a window's
//! sketch is the merge of its slices' sketches, in slice order (see
//! [`crate::ops::sketch_aggregate::SketchAggregate`]). HyperLogLog's values are hashed with a
//! fixed hash of their row encoding ([`value_hash`]), the same on every machine and every run;
//! a t-digest's are numbers; a Misra-Gries summary keys its counts by the row encoding. A sketch restored from a checkpoint goes on exactly as the one
//! that was saved.

pub mod bloom;
pub mod counting_bloom;
pub mod hll;
pub mod quantile;
pub mod topk;

/// The 64-bit hash a sketch sees of a value: the router's fixed hash of its row encoding,
/// mixed once more with a constant of its own, so that its bits are independent of the bits
/// that choose a row's worker.
pub fn value_hash(row: &[u8]) -> u64 {
    crate::route::mix(crate::route::hash_bytes(row) ^ 0x6A09_E667_F3BC_C908)
}

/// A distinct 16-byte test key per (i, seed): the membership filters' tests insert and probe
/// these.
#[cfg(test)]
pub(crate) fn test_key(i: u64, seed: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.to_le_bytes());
    k[8..].copy_from_slice(&seed.to_le_bytes());
    k
}

/// Reads little-endian numbers off the front of a byte slice: how the sketches read their
/// checkpoint bytes back. What is left is `.0`.
pub(crate) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    /// The next `n` bytes, `None` if fewer are left.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }

    pub fn i64(&mut self) -> Option<i64> {
        self.take(8)?.try_into().ok().map(i64::from_le_bytes)
    }

    pub fn f64(&mut self) -> Option<f64> {
        self.take(8)?.try_into().ok().map(f64::from_le_bytes)
    }
}

/// `bytes` as little-endian 64-bit words (a trailing part shorter than 8 bytes is ignored:
/// callers check the length first).
pub(crate) fn le_words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}
