//! Consolidation: sums the diffs of equal rows within one instant and drops rows whose diffs
//! cancel. The result is sorted by the rows' encoded bytes (SQL order of the values), which makes
//! every output deterministic whatever order the operators produced it in.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::row::{RowBytes, RowCodec};

/// Consolidates `batch`, whose rows are all at instant `t`.
pub fn consolidate(
    codec: &RowCodec,
    schema: &SchemaRef,
    batch: &ChangeBatch,
    t: Time,
) -> Result<ChangeBatch> {
    let net = net_diffs(codec, batch)?;
    to_batch(codec, schema, net.into_iter().filter(|(_, d)| *d != 0).collect(), t)
}

/// Sums diffs per distinct row.
pub fn net_diffs(codec: &RowCodec, batch: &ChangeBatch) -> Result<HashMap<RowBytes, i64>> {
    let rows = codec.encode(batch.data.columns(), batch.len())?;
    let mut net: HashMap<RowBytes, i64> = HashMap::with_capacity(batch.len());
    for (i, d) in batch.diffs.iter().enumerate() {
        *net.entry(rows.get(i).into()).or_insert(0) += d;
    }
    Ok(net)
}

/// Builds a batch at instant `t` from (row, diff) pairs, sorted by row.
pub fn to_batch(
    codec: &RowCodec,
    schema: &SchemaRef,
    mut rows: Vec<(RowBytes, i64)>,
    t: Time,
) -> Result<ChangeBatch> {
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let data = codec.decode_batch(schema, rows.iter().map(|(r, _)| &r[..]))?;
    let diffs: Vec<i64> = rows.iter().map(|(_, d)| *d).collect();
    Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
}
