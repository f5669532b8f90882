//! Sketches: small, mergeable summaries of a bag of values that answer one question about it
//! approximately, with a known error, in bounded memory.
//!
//! - [`hll`]: HyperLogLog, the number of distinct values (`APPROX_COUNT_DISTINCT`).
//!
//! A sketch is a function of the *set* of values it was given (not of their order, batching or
//! worker), and two sketches merge into the sketch of the union of their values; so a window's
//! sketch is the merge of its slices' sketches (see
//! [`crate::ops::sketch_aggregate::SketchAggregate`]). Values are hashed with a fixed hash of
//! their row encoding ([`value_hash`]), the same on every machine and every run, so a sketch
//! restored from a checkpoint goes on exactly as the one that was saved.

pub mod hll;

/// The 64-bit hash a sketch sees of a value: the router's fixed hash of its row encoding,
/// mixed once more with a constant of its own, so that its bits are independent of the bits
/// that choose a row's worker.
pub fn value_hash(row: &[u8]) -> u64 {
    crate::route::mix(crate::route::hash_bytes(row) ^ 0x6A09_E667_F3BC_C908)
}
