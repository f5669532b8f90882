//! Routing rows to workers: where an operator needs its input's rows to be when the dataflow
//! runs on several workers.
//!
//! On one worker nothing here is used. On N workers every worker runs every node of the graph
//! over a part of each input, and an operator's result over the union of the parts must be its
//! result over the whole input. Each operator says, per input, what that takes
//! ([`crate::operator::Operator::placement`]):
//! - [`Placement::Local`]: nothing; the operator treats each row on its own (row maps, filters,
//!   time windows, UNION ALL), so a row can stay on the worker that has it;
//! - [`Placement::Keyed`]: rows with equal keys must meet on one worker (grouping, join and
//!   DISTINCT keys), so each row goes to the worker its key's hash names;
//! - [`Placement::ByInstant`]: the rows of one instant must meet on one worker, whatever their
//!   key (ISTREAM and DSTREAM consolidate and order each instant's changes); the sources are
//!   split among the workers that way ([`instant_worker`]), so a plan that reaches such an
//!   operator without an exchange on a key keeps its rows where they are;
//! - [`Placement::Single`]: every row on one worker, worker 0 (an order over the whole input,
//!   such as a `ROWS` window or an unpartitioned top-k, or a view of every instant, as
//!   RSTREAM has).
//!
//! The hash is a function of the key's encoded row (Arrow's row format, the same bytes the
//! operator groups by), with fixed constants: every process of a cluster routes a key alike,
//! and so does every run.

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use weir_common::Result;

use crate::expr::ScalarExpr;
use crate::row::{EncodedRows, RowCodec};

/// Where one input's rows must be (see the module docs).
#[derive(Debug)]
pub enum Placement {
    Local,
    Keyed(KeyRoute),
    ByInstant,
    Single,
}

/// The worker that holds the rows stamped `t` among `peers` workers when rows are split by
/// instant (a source's rows, and the input of a [`Placement::ByInstant`] operator).
pub fn instant_worker(t: weir_common::Time, peers: usize) -> usize {
    if peers <= 1 {
        return 0;
    }
    (mix(t as u64) % peers as u64) as usize
}

/// How an input's rows are keyed for routing: the key expressions and the codec their values
/// are encoded with.
#[derive(Debug)]
pub struct KeyRoute {
    key: Key,
    codec: RowCodec,
}

#[derive(Debug)]
enum Key {
    WholeRow,
    Exprs(Vec<ScalarExpr>),
    /// Columns of the row, by position, and their names (for EXPLAIN).
    Columns(Vec<usize>, Vec<String>),
}

impl KeyRoute {
    /// Rows keyed by `exprs`, whose values are encoded as `types` (cast first if they differ,
    /// as the operator's own key codec does).
    pub fn new(exprs: Vec<ScalarExpr>, types: Vec<DataType>) -> Result<Self> {
        Ok(KeyRoute { key: Key::Exprs(exprs), codec: RowCodec::new(types)? })
    }

    /// Rows keyed by their whole value.
    pub fn whole_row(schema: &SchemaRef) -> Result<Self> {
        Ok(KeyRoute { key: Key::WholeRow, codec: RowCodec::for_schema(schema)? })
    }

    /// Rows of `schema` keyed by the columns at `by`.
    pub fn columns(by: &[usize], schema: &SchemaRef) -> Result<Self> {
        let types = by
            .iter()
            .map(|&i| schema.fields().get(i).map(|f| f.data_type().clone()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| weir_common::WeirError::internal("a key column past the row"))?;
        let names = by.iter().filter_map(|&i| schema.fields().get(i)).map(|f| f.name().clone());
        let key = Key::Columns(by.to_vec(), names.collect());
        Ok(KeyRoute { key, codec: RowCodec::new(types)? })
    }

    /// Whether the key has no columns: every row goes to one worker (an aggregate without
    /// GROUP BY, a join without equality keys), which is then the only one that runs the
    /// operator.
    pub fn is_constant(&self) -> bool {
        match &self.key {
            Key::WholeRow => false,
            Key::Exprs(e) => e.is_empty(),
            Key::Columns(c, _) => c.is_empty(),
        }
    }

    /// The key as columns of the row, by position, each with the type its values are hashed
    /// as; None if some part of the key is computed (or it is the whole row).
    pub fn columns_hashed(&self) -> Option<Vec<(usize, DataType)>> {
        let positions: Vec<usize> = match &self.key {
            Key::WholeRow => return None,
            Key::Exprs(e) => e.iter().map(ScalarExpr::column_index).collect::<Option<_>>()?,
            Key::Columns(by, _) => by.clone(),
        };
        Some(positions.into_iter().zip(self.codec.types().iter().cloned()).collect())
    }

    /// The key, for EXPLAIN: its expressions in SQL, or `the whole row`.
    pub fn describe(&self) -> String {
        match &self.key {
            Key::WholeRow => "the whole row".to_string(),
            Key::Exprs(e) => e.iter().map(|e| e.text().to_string()).collect::<Vec<_>>().join(", "),
            Key::Columns(_, names) => names.join(", "),
        }
    }

    /// The key hash of each row of `data`.
    pub fn hashes(&self, data: &RecordBatch) -> Result<Vec<u64>> {
        let n = data.num_rows();
        let columns = match &self.key {
            Key::WholeRow => data.columns().to_vec(),
            Key::Exprs(exprs) => exprs.iter().map(|e| e.eval(data)).collect::<Result<Vec<_>>>()?,
            Key::Columns(by, _) => by
                .iter()
                .map(|&i| data.columns().get(i).cloned())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| weir_common::WeirError::internal("a key column past the row"))?,
        };
        let rows = self.codec.encode(&columns, n)?;
        Ok(match &rows {
            EncodedRows::Empty(n) => vec![0; *n],
            EncodedRows::Rows(_) => (0..n).map(|i| hash_bytes(rows.get(i))).collect(),
        })
    }
}

/// A fixed, fast hash of a byte string: each 8-byte word (the last padded with zeros) is
/// mixed into the state with a full avalanche ([`mix`]), starting from a mix of the length. So
/// every output bit depends on every input bit: keys that differ only in a few bytes (small
/// integers, whose encodings share all but their last bytes) spread over all 2^64 values. (A
/// multiply per word without the avalanche, used before, let a byte in a word's high end reach
/// only the high bits of the product: 65 536 consecutive integers got 2048 hashes.)
///
/// Workers route rows by it and sketches keep it in their state, so its values must never
/// change (a checkpoint holds them): `hash_values_are_fixed` pins them.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = mix(bytes.len() as u64 ^ K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        h = mix(h ^ u64::from_le_bytes(a));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        // The last word, little-endian and zero-padded, built without a copy of unknown length.
        let w = tail.iter().rev().fold(0u64, |w, &b| w << 8 | u64::from(b));
        h = mix(h ^ w);
    }
    h
}

/// A final avalanche of a 64-bit value (the finalizer of SplitMix64).
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    /// The first form of [`hash_bytes`]: every word padded and read the same way.
    fn hash_bytes_by_chunks(bytes: &[u8]) -> u64 {
        bytes.chunks(8).fold(mix(bytes.len() as u64 ^ 0x9E37_79B9_7F4A_7C15), |h, c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            mix(h ^ u64::from_le_bytes(w))
        })
    }

    /// Routing and sketches' state depend on the hash's values: they are pinned, for strings
    /// of every length up to 40 (each tail length, several words), against the first form of
    /// the function and against fixed values.
    #[test]
    fn hash_values_are_fixed() {
        let bytes: Vec<u8> = (0..40u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..=bytes.len() {
            assert_eq!(hash_bytes(&bytes[..len]), hash_bytes_by_chunks(&bytes[..len]), "{len}");
        }
        assert_eq!(hash_bytes(b""), 0xE220_A839_7B1D_CDAF);
        assert_eq!(hash_bytes(b"a"), 0xDA39_2E04_1ECC_1ABE);
        assert_eq!(hash_bytes(b"0123456789"), 0x9BAC_BD11_651E_B3EB);
    }

    /// Consecutive integers, whose encodings differ in their last bytes only, get distinct
    /// hashes, and their low bits (which pick a worker) and high bits spread evenly.
    #[test]
    fn keys_differing_in_few_bytes_hash_apart() {
        let codec = RowCodec::new(vec![DataType::Int64]).unwrap();
        let n = 1 << 16;
        let ints: arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(0..n as i64));
        let rows = codec.encode(&[ints], n).unwrap();
        let mut hashes: Vec<u64> = (0..n).map(|i| hash_bytes(rows.get(i))).collect();
        for bits in [|h: u64| h & 7, |h: u64| h >> 61] {
            let mut counts = [0usize; 8];
            for h in &hashes {
                counts[bits(*h) as usize] += 1;
            }
            // 8192 expected in each of 8 buckets; 5 standard deviations is about 450.
            assert!(counts.iter().all(|c| c.abs_diff(n / 8) < 450), "{counts:?}");
        }
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), n);
    }

    #[test]
    fn equal_keys_hash_alike_and_keys_spread() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let keys: Vec<String> = (0..1000).map(|i| format!("k{}", i % 100)).collect();
        let data = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(keys.clone())),
                Arc::new(Int64Array::from_iter_values(0..1000)),
            ],
        )
        .expect("batch");
        let key_only = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)])),
            vec![data.column(0).clone()],
        )
        .expect("batch");
        let h = KeyRoute::whole_row(&key_only.schema()).expect("route").hashes(&key_only);
        let h = h.expect("hashes");
        for i in 0..1000 {
            assert_eq!(h[i], h[i % 100], "equal keys, equal hashes");
        }
        let on_worker_0 = (0..100).filter(|&i| h[i].is_multiple_of(2)).count();
        assert!((30..=70).contains(&on_worker_0), "keys spread over two workers: {on_worker_0}");
        let rows = KeyRoute::whole_row(&schema).expect("route").hashes(&data).expect("hashes");
        assert_eq!(rows.len(), 1000);
        assert_ne!(rows[0], rows[100], "whole rows differ in v");
    }

    #[test]
    fn no_key_sends_every_row_to_one_place() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let data = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..5))])
            .expect("batch");
        let route = KeyRoute::new(vec![], vec![]).expect("route");
        assert_eq!(route.hashes(&data).expect("hashes"), vec![0; 5]);
    }
}
