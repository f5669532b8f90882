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

/// Consolidates each instant of `batch` (sorted by time, possibly many instants), with the same
/// result as [`consolidate`] applied to each instant in turn. An instant with a single change
/// is already consolidated; only instants with several changes are encoded and sorted. Rows
/// keep their original arrays (taken, not decoded).
pub fn consolidate_runs(codec: &RowCodec, batch: &ChangeBatch) -> Result<ChangeBatch> {
    let ends = crate::operator::time_runs(&batch.times);
    let multi = ends.iter().zip(std::iter::once(&0).chain(&ends)).any(|(e, s)| e - s > 1);
    if !multi && batch.diffs.iter().all(|&d| d != 0) {
        return Ok(batch.clone());
    }
    let rows = if multi { Some(codec.encode(batch.data.columns(), batch.len())?) } else { None };
    let mut idx: Vec<u32> = Vec::with_capacity(batch.len());
    let mut diffs: Vec<i64> = Vec::with_capacity(batch.len());
    let mut times: Vec<Time> = Vec::with_capacity(batch.len());
    let mut start = 0;
    let mut net: HashMap<&[u8], (u32, i64)> = HashMap::new();
    for end in ends {
        let t = batch.times[start];
        match &rows {
            Some(rows) if end - start > 1 => {
                net.clear();
                for i in start..end {
                    let e = net.entry(rows.get(i)).or_insert((i as u32, 0));
                    e.1 += batch.diffs[i];
                }
                let mut run: Vec<(&[u8], u32, i64)> =
                    net.iter().filter(|(_, v)| v.1 != 0).map(|(k, v)| (*k, v.0, v.1)).collect();
                run.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (_, i, d) in run {
                    idx.push(i);
                    diffs.push(d);
                    times.push(t);
                }
            }
            _ => {
                for i in start..end {
                    if batch.diffs[i] != 0 {
                        idx.push(i as u32);
                        diffs.push(batch.diffs[i]);
                        times.push(t);
                    }
                }
            }
        }
        start = end;
    }
    let taken = batch.take(&idx)?;
    Ok(ChangeBatch::new(taken.data, times, diffs))
}
