//! Window functions (`f() OVER (PARTITION BY ... ORDER BY ...)`) over relations.
//!
//! - [`rank`]: `ROW_NUMBER`, `RANK`, `DENSE_RANK` maintained incrementally per partition, and
//!   the top-N form (the rank filtered by the enclosing query);
//! - [`dedup`]: `ROW_NUMBER() ... = 1` over an append-only stream ordered by its event time:
//!   keep the first or the last row of each partition, with constant state per partition;
//! - [`agg`]: aggregates with `OVER` on such a stream (Flink's OVER aggregation);
//! - [`frames`]: `LAG`, `LEAD`, `FIRST_VALUE`, `LAST_VALUE` and aggregates over row frames on a
//!   relation, with [`frame_agg`] computing the aggregates over each row's frame.
//!
//! All order a partition by (ORDER BY key, row): the ORDER BY key encoded with each term's
//! direction and NULL placement, then the whole input row encoded in Arrow's row format
//! (ascending, column by column, NULL before any value). That second part is the tiebreak that
//! makes ROW_NUMBER among ORDER BY ties deterministic: among tied rows, the row whose values
//! sort first gets the smallest number, so replays give byte-identical output. The input row
//! holds only the columns the query reads (the planner narrows the input, see
//! `weir_plan::prune`), so ties are broken by those. PARTITION BY
//! values are encoded the same way, so NULLs form one partition, as in SQL.

pub mod agg;
pub mod dedup;
mod frame_agg;
pub mod frames;
mod partition;
pub mod rank;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, Rows};
use std::sync::Arc;
use weir_common::{ChangeBatch, Result, Time};

use crate::expr::ScalarExpr;
use crate::ops::topk::{sort_key_converter, SortKey};
use crate::route::{KeyRoute, Placement};
use crate::row::{cmp_bytes, eq_bytes, EncodedRows, RowBytes, RowCodec};

/// The encodings shared by the window-function operators: partition key, order key, row.
#[derive(Debug)]
pub struct OverKeys {
    partition: Vec<ScalarExpr>,
    part_types: Vec<DataType>,
    part_codec: RowCodec,
    order: Vec<ScalarExpr>,
    order_types: Vec<DataType>,
    order_dirs: Vec<(bool, bool)>,
    order_conv: Option<RowConverter>,
    /// The input's rows.
    codec: RowCodec,
}

/// One encoded change: partition key, (order key, row), diff.
pub type Encoded = (RowBytes, (RowBytes, RowBytes), i64);

/// A batch's changes encoded, each encoding in one buffer for the whole batch (no allocation
/// per row): partition keys, order keys, rows, diffs.
pub struct EncodedBatch {
    parts: EncodedRows,
    /// `None`: no ORDER BY (every order key is empty).
    keys: Option<Rows>,
    rows: EncodedRows,
    diffs: Vec<i64>,
}

impl EncodedBatch {
    /// Change `i`'s partition key.
    pub fn part(&self, i: usize) -> &[u8] {
        self.parts.get(i)
    }

    /// Change `i`'s (order key, row).
    pub fn entry(&self, i: usize) -> (&[u8], &[u8]) {
        let key = match &self.keys {
            Some(k) => k.row(i).data(),
            None => crate::row::empty_row(),
        };
        (key, self.rows.get(i))
    }

    pub fn diff(&self, i: usize) -> i64 {
        self.diffs[i]
    }

    /// The bytes of every encoded row.
    pub fn row_bytes(&self) -> usize {
        (0..self.diffs.len()).map(|i| self.rows.get(i).len()).sum()
    }
}

impl OverKeys {
    pub fn new(
        partition: Vec<(ScalarExpr, DataType)>,
        order: Vec<SortKey>,
        in_schema: SchemaRef,
    ) -> Result<Self> {
        let part_types: Vec<DataType> = partition.iter().map(|(_, t)| t.clone()).collect();
        let order_types: Vec<DataType> = order.iter().map(|k| k.data_type.clone()).collect();
        let order_dirs: Vec<(bool, bool)> =
            order.iter().map(|k| (k.descending, k.nulls_first)).collect();
        let order_conv = sort_key_converter(&order)?;
        Ok(OverKeys {
            part_codec: RowCodec::new(part_types.clone())?,
            partition: partition.into_iter().map(|(e, _)| e).collect(),
            part_types,
            order: order.into_iter().map(|k| k.expr).collect(),
            order_types,
            order_dirs,
            order_conv,
            codec: RowCodec::for_schema(&in_schema)?,
        })
    }

    /// Where the operator's input rows must be on several workers: a partition's rows on one
    /// worker, by the hash of the partition key; without PARTITION BY, every row on worker 0.
    pub fn placement(&self) -> Result<Placement> {
        if self.partition.is_empty() {
            return Ok(Placement::Single);
        }
        Ok(Placement::Keyed(KeyRoute::new(self.partition.clone(), self.part_types.clone())?))
    }

    /// What a checkpoint signature must pin: the key types and directions.
    pub fn params(&self) -> String {
        format!("{:?} {:?} {:?}", self.part_types, self.order_types, self.order_dirs)
    }

    /// Every change of `d` encoded, in input order.
    pub fn encode_batch(&self, d: &ChangeBatch) -> Result<EncodedBatch> {
        let n = d.len();
        let eval = |exprs: &[ScalarExpr], types: &[DataType]| -> Result<Vec<ArrayRef>> {
            exprs.iter().zip(types).map(|(e, t)| e.eval_as(&d.data, t)).collect()
        };
        let parts = self.part_codec.encode(&eval(&self.partition, &self.part_types)?, n)?;
        let rows = self.codec.encode(d.data.columns(), n)?;
        let keys = match &self.order_conv {
            None => None,
            Some(conv) => Some(conv.convert_columns(&eval(&self.order, &self.order_types)?)?),
        };
        Ok(EncodedBatch { parts, keys, rows, diffs: d.diffs.clone() })
    }

    /// Every change of `d[start..end]` encoded, in input order, each encoding owned.
    pub fn encode(&self, d: &ChangeBatch, start: usize, end: usize) -> Result<Vec<Encoded>> {
        let enc = self.encode_batch(&d.slice(start, end - start))?;
        Ok((0..end - start)
            .map(|i| {
                let (key, row) = enc.entry(i);
                (
                    RowBytes::from(enc.part(i)),
                    (RowBytes::from(key), RowBytes::from(row)),
                    enc.diff(i),
                )
            })
            .collect())
    }

    /// Decodes encoded input rows into the input's columns.
    pub fn decode_rows<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>> {
        self.codec.decode(rows)
    }

    /// Output changes at `times`: each input row followed by its function values.
    pub fn output<R: AsRef<[u8]>, V: AsRef<[i64]>>(
        &self,
        schema: &SchemaRef,
        rows: &[(R, V, i64)],
        times: Vec<weir_common::Time>,
        nfuncs: usize,
    ) -> Result<ChangeBatch> {
        let mut cols = self.codec.decode(rows.iter().map(|(r, _, _)| r.as_ref()))?;
        for f in 0..nfuncs {
            let vals: Int64Array =
                rows.iter().map(|(_, v, _)| v.as_ref().get(f).copied()).collect();
            cols.push(Arc::new(vals) as ArrayRef);
        }
        let data = crate::ops::batch_of(schema, cols, rows.len())?;
        Ok(ChangeBatch::new(data, times, rows.iter().map(|(_, _, d)| *d).collect()))
    }
}

/// One partition entry's netted change, as [`for_each_partition`] collects it: the entry
/// (order key, row), its summed diff, and the index of one of its changes in the batch (the
/// frame operator reads that row's kept arguments; the ranking does not need it).
pub(crate) type NetChange<'e> = (partition::Key<'e>, i64, usize);

/// The error of a row retracted more often than it was inserted.
pub(crate) fn retracted() -> weir_common::WeirError {
    weir_common::WeirError::exec(
        "window function: a row was retracted more often than it was inserted",
    )
}

/// The changes `rows` of one instant (indices into `enc`) sorted by (partition, entry) and
/// netted per entry (a sorted vector, not a map: most instants hold a row or two): `each` gets
/// every partition they touch, in order, with its changes in entry order, none zero. `order`
/// and `changes` are buffers kept across calls.
pub(crate) fn for_each_partition<'e>(
    enc: &'e EncodedBatch,
    rows: std::ops::Range<usize>,
    order: &mut Vec<usize>,
    changes: &mut Vec<NetChange<'e>>,
    mut each: impl FnMut(&'e [u8], &[NetChange<'e>]) -> Result<()>,
) -> Result<()> {
    order.clear();
    order.extend(rows);
    order.sort_unstable_by(|&a, &b| {
        cmp_bytes(enc.part(a), enc.part(b)).then_with(|| cmp_key(enc.entry(a), enc.entry(b)))
    });
    let mut i = 0;
    while i < order.len() {
        let p = enc.part(order[i]);
        changes.clear();
        while i < order.len() && eq_bytes(enc.part(order[i]), p) {
            let (e, n, at) = (enc.entry(order[i]), enc.diff(order[i]), order[i]);
            match changes.last_mut() {
                Some((le, ln, _)) if *le == e => *ln += n,
                _ => changes.push((e, n, at)),
            }
            i += 1;
        }
        changes.retain(|(_, n, _)| *n != 0);
        if !changes.is_empty() {
            each(p, changes)?;
        }
    }
    Ok(())
}

/// Orders two (order key, row) as the tuples order, comparing bytes inline (see
/// [`cmp_bytes`]).
#[inline]
pub(crate) fn cmp_key((k, r): (&[u8], &[u8]), (k2, r2): (&[u8], &[u8])) -> std::cmp::Ordering {
    cmp_bytes(k, k2).then_with(|| cmp_bytes(r, r2))
}

/// Hands `run` the rows of a step's input one instant at a time, in time order (`times` are
/// the rows' instants), as the range of their indices; `run` says how many output rows it
/// added. Returns the instant of each output row.
pub(crate) fn by_instant(
    times: &[Time],
    mut run: impl FnMut(std::ops::Range<usize>) -> Result<usize>,
) -> Result<Vec<Time>> {
    let mut start = 0;
    let mut out_times = Vec::new();
    for end in crate::operator::time_runs(times) {
        let added = run(start..end)?;
        out_times.extend(std::iter::repeat_n(times[start], added));
        start = end;
    }
    Ok(out_times)
}

/// [`by_instant`] over a step's input encoded once for the whole step: `run` gets each
/// instant's encoded rows and returns its output rows. Returns them, with their instants.
pub(crate) fn eval_by_instant<T>(
    encoded: Vec<Encoded>,
    times: &[Time],
    mut run: impl FnMut(&mut dyn Iterator<Item = Encoded>) -> Result<Vec<T>>,
) -> Result<(Vec<T>, Vec<Time>)> {
    let mut encoded = encoded.into_iter();
    let mut rows = Vec::new();
    let out_times = by_instant(times, |r| {
        let out = run(&mut encoded.by_ref().take(r.len()))?;
        let added = out.len();
        rows.extend(out);
        Ok(added)
    })?;
    Ok((rows, out_times))
}

/// Test support: `PARTITION BY k ORDER BY v` (NULLs first) over `kv` rows, and the output
/// schema of `kv` followed by one Int64 column per function.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::OverKeys;
    use crate::expr::ScalarExpr;
    use crate::ops::topk::SortKey;
    use crate::testing::kv_schema;

    /// Column `name` of `kv`, compiled.
    pub fn kv_col(name: &str) -> ScalarExpr {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).expect("schema");
        ScalarExpr::compile(&col(name), &df).expect("column")
    }

    pub fn k_by_v(descending: bool) -> OverKeys {
        let order = vec![SortKey {
            expr: kv_col("v"),
            data_type: DataType::Int64,
            descending,
            nulls_first: true,
        }];
        OverKeys::new(vec![(kv_col("k"), DataType::Utf8)], order, kv_schema()).expect("keys")
    }

    pub fn out_schema(funcs: usize) -> SchemaRef {
        let mut fields: Vec<Field> = kv_schema().fields().iter().map(|f| (**f).clone()).collect();
        for i in 0..funcs {
            fields.push(Field::new(format!("f{i}"), DataType::Int64, true));
        }
        Arc::new(Schema::new(fields))
    }
}
