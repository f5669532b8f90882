//! Consolidation: sums the diffs of equal rows within one instant and drops rows whose diffs
//! cancel. The result is sorted by the rows' encoded bytes (SQL order of the values), which makes
//! every output deterministic whatever order the operators produced it in.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::row::{RowBytes, RowCodec};

/// A map with a fast (non-DoS-resistant) hash: keys are the engine's own row encodings.
type FastMap<K, V> = datafusion_common::HashMap<K, V>;

/// Runs of at most this many rows are consolidated by sorting instead of hashing.
const SMALL_RUN: usize = 32;

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
/// is already consolidated; only instants with several changes are sorted, on their columns
/// when every instant is short and the columns compare as their encoding sorts, else encoded.
/// Rows keep their original arrays (taken, not decoded). A batch whose instants are already
/// in that order, each row once and no diff zero (as operators that sort their output give
/// it), is returned as it is after one comparison per neighbouring pair.
pub fn consolidate_runs(codec: &RowCodec, batch: ChangeBatch) -> Result<ChangeBatch> {
    let ends = crate::operator::time_runs(&batch.times);
    let runs = || ends.iter().zip(std::iter::once(&0).chain(&ends)).map(|(e, s)| e - s);
    let multi = runs().any(|n| n > 1);
    if !multi && batch.diffs.iter().all(|&d| d != 0) {
        return Ok(batch);
    }
    // How the rows of an instant are ordered: on their columns when every instant is short
    // and the columns compare as their encoding sorts (no encoding at all), else encoded.
    let columns =
        if multi && runs().all(|n| n <= SMALL_RUN) { RowOrder::of(&batch)? } else { None };
    let order = match columns {
        Some(columns) => Some(Order::Columns(columns)),
        None if multi => Some(Order::Encoded(codec.encode(batch.data.columns(), batch.len())?)),
        None => None,
    };
    if let Some(order) = &order {
        if batch.diffs.iter().all(|&d| d != 0) && strictly_sorted(order, &ends) {
            return Ok(batch);
        }
    }
    let mut idx: Vec<u32> = Vec::with_capacity(batch.len());
    let mut diffs: Vec<i64> = Vec::with_capacity(batch.len());
    let mut times: Vec<Time> = Vec::with_capacity(batch.len());
    let mut start = 0;
    let mut net: FastMap<&[u8], (u32, i64)> = FastMap::default();
    let mut run: Vec<(u32, i64)> = Vec::new();
    for end in ends {
        let t = batch.times[start];
        run.clear();
        match &order {
            Some(order) if end - start > 1 && end - start <= SMALL_RUN => {
                // Few rows: sort them (stable, so the first of equal rows leads) and merge
                // neighbours; cheaper than hashing for the common -old/+new pair.
                run.extend((start..end).map(|i| (i as u32, batch.diffs[i])));
                run.sort_by(|a, b| order.cmp(a.0, b.0));
                run.dedup_by(|later, kept| {
                    let same = order.cmp(later.0, kept.0).is_eq();
                    if same {
                        kept.1 += later.1;
                    }
                    same
                });
            }
            Some(Order::Encoded(rows)) if end - start > 1 => {
                // Two sorted runs (a window's close) merge in one pass; anything else is
                // hashed and sorted.
                if !merge_two_runs(rows, &batch.diffs, (start, end), &mut run) {
                    net.clear();
                    for i in start..end {
                        let e = net.entry(rows.get(i)).or_insert((i as u32, 0));
                        e.1 += batch.diffs[i];
                    }
                    let mut keyed: Vec<(&[u8], u32, i64)> =
                        net.iter().map(|(k, v)| (*k, v.0, v.1)).collect();
                    keyed.sort_unstable_by(|a, b| a.0.cmp(b.0));
                    run.extend(keyed.into_iter().map(|(_, i, d)| (i, d)));
                }
            }
            _ => run.extend((start..end).map(|i| (i as u32, batch.diffs[i]))),
        }
        for &(i, d) in run.iter().filter(|(_, d)| *d != 0) {
            idx.push(i);
            diffs.push(d);
            times.push(t);
        }
        start = end;
    }
    let taken = batch.take(&idx)?;
    Ok(ChangeBatch::new(taken.data, times, diffs))
}

/// If rows `start..end` are at most two runs each in strictly increasing encoding (what a
/// window that replaces its contents gives: the old rows' retractions in order, then the new
/// rows' insertions in order), puts them into `run` in encoding order, equal rows as one with
/// their diffs summed and the first one's index, as hashing and sorting them would; false,
/// `run` untouched, if they are not. Linear, where hashing and sorting costs a hash insertion
/// per row and a sort.
fn merge_two_runs(
    rows: &crate::row::EncodedRows,
    diffs: &[i64],
    (start, end): (usize, usize),
    run: &mut Vec<(u32, i64)>,
) -> bool {
    let row = |i: usize| rows.get(i);
    let split = (start + 1..end).find(|&i| row(i - 1) >= row(i)).unwrap_or(end);
    if !(split + 1..end).all(|i| row(i - 1) < row(i)) {
        return false;
    }
    let (mut i, mut j) = (start, split);
    while i < split || j < end {
        let order = match (i < split, j < end) {
            (true, true) => row(i).cmp(row(j)),
            (true, false) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                run.push((i as u32, diffs[i]));
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                run.push((j as u32, diffs[j]));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                run.push((i as u32, diffs[i] + diffs[j]));
                i += 1;
                j += 1;
            }
        }
    }
    true
}

/// Whether the rows of every run (`ends`: where each ends) are in strictly increasing `order`.
fn strictly_sorted(order: &Order, ends: &[usize]) -> bool {
    let mut start = 0;
    for &end in ends {
        for i in start + 1..end {
            if !order.cmp(i as u32 - 1, i as u32).is_lt() {
                return false;
            }
        }
        start = end;
    }
    true
}

/// How [`consolidate_runs`] orders the rows of an instant.
enum Order {
    /// By their row encoding.
    Encoded(crate::row::EncodedRows),
    /// On their columns, which sort as their encoding would ([`RowOrder`]).
    Columns(RowOrder),
}

impl Order {
    fn cmp(&self, i: u32, j: u32) -> std::cmp::Ordering {
        match self {
            Order::Encoded(rows) => rows.get(i as usize).cmp(rows.get(j as usize)),
            Order::Columns(columns) => columns.cmp(i as usize, j as usize),
        }
    }
}

/// The order of a batch's rows as their row encoding sorts them (column by column, ascending,
/// NULL first; floats in IEEE total order, strings and bytes bytewise), compared on the
/// columns themselves: for batches whose columns are all of types for which the two orders are
/// the same.
struct RowOrder(Vec<arrow::array::DynComparator>);

impl RowOrder {
    /// The comparators of `batch`'s columns, or None if a column's type is not one whose
    /// comparator is known to sort as its row encoding does.
    fn of(batch: &ChangeBatch) -> Result<Option<RowOrder>> {
        use arrow::datatypes::DataType as T;
        let mut cmps = Vec::with_capacity(batch.data.num_columns());
        for c in batch.data.columns() {
            let plain = matches!(
                c.data_type(),
                T::Boolean
                    | T::Int8
                    | T::Int16
                    | T::Int32
                    | T::Int64
                    | T::UInt8
                    | T::UInt16
                    | T::UInt32
                    | T::UInt64
                    | T::Float32
                    | T::Float64
                    | T::Utf8
                    | T::LargeUtf8
                    | T::Binary
                    | T::Date32
                    | T::Date64
                    | T::Timestamp(..)
                    | T::Decimal128(..)
            );
            if !plain {
                return Ok(None);
            }
            let opts = arrow::compute::SortOptions::default();
            cmps.push(arrow::array::make_comparator(c.as_ref(), c.as_ref(), opts)?);
        }
        Ok(Some(RowOrder(cmps)))
    }

    fn cmp(&self, i: usize, j: usize) -> std::cmp::Ordering {
        self.0.iter().map(|c| c(i, j)).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema};
    use arrow::datatypes::DataType;
    use proptest::prelude::*;

    /// Rows of `d` in their order (unlike the harness's `render`, which sorts), as `@t +d k v`.
    fn rows(d: &ChangeBatch) -> Vec<String> {
        let k = d.data.column(0).as_any().downcast_ref::<arrow::array::StringArray>().unwrap();
        let v = d.data.column(1).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap();
        (0..d.len())
            .map(|i| format!("@{} {:+} {} {}", d.times[i], d.diffs[i], k.value(i), v.value(i)))
            .collect()
    }

    proptest! {
        /// Consolidating every run of a multi-instant batch equals consolidating each instant on
        /// its own, for runs short enough to sort and long enough to hash, and consolidating
        /// the result again changes nothing.
        #[test]
        fn runs_match_per_instant(
            changes in proptest::collection::vec((0i64..3, 0u8..4, 0i64..3, -2i64..3), 0..120),
        ) {
            let mut changes = changes;
            changes.sort_by_key(|c| c.0);
            let codec = RowCodec::new(vec![DataType::Utf8, DataType::Int64]).unwrap();
            let schema = kv_schema();
            let mut expected = Vec::new();
            let mut parts = Vec::new();
            for t in 0..3i64 {
                let text: Vec<String> = changes
                    .iter()
                    .filter(|c| c.0 == t)
                    .map(|c| format!("{:+} k{} {}", c.3, c.1, c.2))
                    .collect();
                let (_, b) = kv(t, &text.join(", "));
                expected.extend(rows(&consolidate(&codec, &schema, &b, t).unwrap()));
                parts.push(b);
            }
            let all = ChangeBatch::concat(&schema, &parts).unwrap();
            let once = consolidate_runs(&codec, all.clone()).unwrap();
            prop_assert_eq!(rows(&once), expected.clone());
            // Already consolidated: passed through as it is.
            prop_assert_eq!(rows(&consolidate_runs(&codec, once.clone()).unwrap()), expected);
        }

        /// An instant made of two runs each strictly in encoding order (a window's retractions
        /// then its insertions), merged without hashing, gives what consolidating it on its
        /// own gives: rows in both runs netted, zero nets dropped, the rest in order.
        #[test]
        fn two_sorted_runs_merge_as_consolidation(
            left in proptest::collection::btree_map((0u8..6, 0i64..10), -2i64..3, 0..40),
            right in proptest::collection::btree_map((0u8..6, 0i64..10), -2i64..3, 0..40),
            swap in any::<bool>(),
        ) {
            let codec = RowCodec::new(vec![DataType::Utf8, DataType::Int64]).unwrap();
            let schema = kv_schema();
            let text = |m: &std::collections::BTreeMap<(u8, i64), i64>| -> Vec<String> {
                m.iter().map(|((k, v), d)| format!("{d:+} k{k} {v}")).collect()
            };
            let (a, b) = if swap { (&right, &left) } else { (&left, &right) };
            let mut changes = text(a);
            changes.extend(text(b));
            // Another instant before, so that the batch has several.
            let (_, before) = kv(0, "+1 k9 1, -1 k9 1, +2 k8 0");
            let (_, now) = kv(1, &changes.join(", "));
            let expected: Vec<String> = rows(&consolidate(&codec, &schema, &before, 0).unwrap())
                .into_iter()
                .chain(rows(&consolidate(&codec, &schema, &now, 1).unwrap()))
                .collect();
            let all = ChangeBatch::concat(&schema, &[before, now]).unwrap();
            prop_assert_eq!(rows(&consolidate_runs(&codec, all.clone()).unwrap()), expected);
        }

        /// Instants of up to six changes (compared on their columns, not encoded) give what
        /// encoding and sorting gives, over strings, NULLs and the floats whose order is
        /// subtle (-0.0 and 0.0, NaN, infinities).
        #[test]
        fn small_runs_match_the_encoded_order(
            changes in proptest::collection::vec(
                (1usize..7, proptest::collection::vec((0u8..4, 0usize..7, -2i64..3), 6)),
                0..40,
            ),
        ) {
            use arrow::array::{Float64Array, StringArray};
            use arrow::datatypes::{Field, Schema};
            let floats = [f64::NAN, -0.0, 0.0, 1.5, f64::INFINITY, f64::NEG_INFINITY, -2.0];
            let schema = std::sync::Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("x", DataType::Float64, true),
            ]));
            let codec = RowCodec::for_schema(&schema).unwrap();
            let (mut ks, mut xs, mut diffs, mut times) = (vec![], vec![], vec![], vec![]);
            for (t, (n, rows)) in changes.iter().enumerate() {
                for &(k, x, d) in rows.iter().take(*n) {
                    ks.push((k != 3).then(|| format!("k{k}")));
                    xs.push((x != 6).then(|| floats[x]));
                    diffs.push(d);
                    times.push(t as Time);
                }
            }
            let data = arrow::record_batch::RecordBatch::try_new(
                schema.clone(),
                vec![
                    std::sync::Arc::new(StringArray::from(ks)),
                    std::sync::Arc::new(Float64Array::from(xs)),
                ],
            )
            .unwrap();
            let all = ChangeBatch::new(data, times, diffs);
            let show = |d: &ChangeBatch| -> Vec<String> {
                crate::testing::render_in_order(d)
            };
            let mut expected = Vec::new();
            for end in crate::operator::time_runs(&all.times) {
                let start = expected_start(&all, end);
                let part = all.slice(start, end - start);
                let t = all.times[start];
                expected.extend(show(&consolidate(&codec, &schema, &part, t).unwrap()));
            }
            prop_assert_eq!(show(&consolidate_runs(&codec, all.clone()).unwrap()), expected);
        }
    }

    /// Where the run ending at `end` starts.
    fn expected_start(b: &ChangeBatch, end: usize) -> usize {
        let t = b.times[end - 1];
        b.times[..end].iter().rposition(|&x| x != t).map_or(0, |i| i + 1)
    }
}
