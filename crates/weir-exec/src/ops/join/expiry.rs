//! Interval joins: rows of a join's state that its time condition rules out for good.
//!
//! In an inner join of two append-only inputs (unbounded windows over streams, and what
//! filters and projects them), each side's rows enter at their elements' event time, so after
//! instant τ is evaluated every row still to come on side X has `X.t > τ`. A conjunct of the
//! join's condition `X.t <= e(Y)` (or `X.t < e(Y)`, or the upper bound of `X.t BETWEEN ...`),
//! with `e` an expression over side Y's columns only, then fails for every X row still to come
//! once τ ≥ e(y): the row y of Y can match nothing more, and leaves the join's state at the
//! end of the step that evaluates instant e(y). Its pairs already emitted stay (the inputs
//! never retract). NEXMark q9's `b.date_time BETWEEN a.date_time AND a.expires` makes a bid
//! leave at its own instant (`a.date_time <= b.date_time`: no auction to come starts before it)
//! and an auction at its `expires`, as Flink's interval join does. A NULL bound never expires.
//!
//! The rows waiting to expire are kept per side in time order, (key, row, count) each; they
//! are not checkpointed but rebuilt from the restored index, evaluating `e` on its rows.

use std::collections::BTreeMap;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::DFSchema;
use datafusion_expr::{Between, BinaryExpr, Expr, ExprSchemable, Operator as Op};
use weir_common::{Result, Time, WeirError};
use weir_plan::{JoinKind, LogicalPlan, WindowSpec};

use super::{Bucket, Index, Key};
use crate::dirty::DirtyKeys;
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::row::{RowBytes, RowCodec};

/// One side's expiry: when its rows can match nothing more, and the rows waiting for it.
#[derive(Debug)]
pub(super) struct Expiry {
    /// e(Y), over the side's columns: its value is the instant a row expires at.
    at: ScalarExpr,
    /// Rows waiting to expire, by instant: (key, row, count) as they entered.
    pub(super) queue: BTreeMap<Time, Vec<(Key, RowBytes, i64)>>,
    /// Whether the queue must be rebuilt from the index (after a restore).
    stale: bool,
}

impl HeapSize for Expiry {
    fn heap_bytes(&self) -> usize {
        self.queue.heap_bytes()
    }
}

impl Expiry {
    pub fn new(at: ScalarExpr) -> Self {
        Expiry { at, queue: BTreeMap::new(), stale: false }
    }

    /// The instant each row of `data` (the side's columns) expires at; None for a NULL bound.
    pub fn instants(&self, data: &RecordBatch) -> Result<Vec<Option<Time>>> {
        let a = self.at.eval_as(data, &DataType::Int64)?;
        let a = a
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("an expiry bound that is not an instant"))?;
        Ok((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect())
    }

    /// A row entered the side's index `count` times; it expires at `at`.
    pub(super) fn enter(&mut self, at: Time, key: &[u8], row: &[u8], count: i64) {
        self.queue.entry(at).or_default().push((Key::from_slice(key), RowBytes::from(row), count));
    }

    /// Removes from `index` the rows expired once instant `hi` is evaluated, noting each as
    /// changed.
    pub(super) fn expire(&mut self, hi: Time, index: &mut Index, dirty: &mut DirtyKeys<Vec<u8>>) {
        while let Some(entry) = self.queue.first_entry() {
            if *entry.key() > hi {
                break;
            }
            for (key, row, count) in entry.remove() {
                Self::leave(index, dirty, &key, &row, count);
            }
        }
    }

    /// Takes `count` copies of `row` (under `key`) out of `index`, noting the change.
    pub(super) fn leave(
        index: &mut Index,
        dirty: &mut DirtyKeys<Vec<u8>>,
        key: &[u8],
        row: &[u8],
        count: i64,
    ) {
        let len = index.len();
        let Some(bucket) = index.get_mut(key) else { return };
        let take = count.min(bucket.count(row));
        if take <= 0 {
            return;
        }
        if dirty.recording() {
            dirty.note(&super::checkpoint::entry(key, row)[..], len);
        }
        if bucket.add(row, -take) {
            index.remove(key);
        }
    }

    /// The queue is to be rebuilt from the index before the next step (after a restore).
    pub fn mark_stale(&mut self) {
        self.stale = true;
        self.queue.clear();
    }

    /// Rebuilds the queue from the rows of `index` (encoded with `codec` over `schema`), if
    /// it is stale.
    pub(super) fn rebuild(
        &mut self,
        index: &Index,
        codec: &RowCodec,
        schema: &SchemaRef,
    ) -> Result<()> {
        if !self.stale {
            return Ok(());
        }
        self.stale = false;
        let rows: Vec<(&[u8], &RowBytes, i64)> = index
            .iter()
            .flat_map(|(k, b): (&Key, &Bucket)| b.iter().map(move |(r, c)| (&k[..], r, c)))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let data = codec.decode_batch(schema, rows.iter().map(|r| &r.1[..]))?;
        for ((key, row, count), at) in rows.iter().zip(self.instants(&data)?) {
            if let Some(at) = at {
                self.enter(at, key, row, *count);
            }
        }
        Ok(())
    }
}

/// The output column of `plan` that holds its rows' event time, for a relation whose rows
/// enter at their element's event time and never leave: an unbounded window over a stream,
/// seen through filters, projections and renames.
fn event_time_column(plan: &LogicalPlan) -> Option<usize> {
    match plan {
        LogicalPlan::Window {
            spec: WindowSpec::Unbounded, input, bounds_columns: false, ..
        } => stream_time_column(input),
        LogicalPlan::Filter { input, .. } | LogicalPlan::Rename { input, .. } => {
            event_time_column(input)
        }
        LogicalPlan::Project { exprs, input, .. } => {
            projected(exprs, input, event_time_column(input)?)
        }
        _ => None,
    }
}

/// A stream's time column, seen through projections and renames.
fn stream_time_column(plan: &LogicalPlan) -> Option<usize> {
    match plan {
        LogicalPlan::StreamScan { time_column, .. } => Some(*time_column),
        LogicalPlan::Rename { input, .. } => stream_time_column(input),
        LogicalPlan::Project { exprs, input, .. } => {
            projected(exprs, input, stream_time_column(input)?)
        }
        _ => None,
    }
}

/// The output position of a projection that passes input column `col` on unchanged.
fn projected(exprs: &[Expr], input: &LogicalPlan, col: usize) -> Option<usize> {
    let schema = input.schema();
    exprs.iter().position(|e| {
        let e = match e {
            Expr::Alias(a) => &*a.expr,
            e => e,
        };
        matches!(e, Expr::Column(c) if schema.index_of_column(c).ok() == Some(col))
    })
}

/// For an inner join of append-only inputs, per side (left, right), the expression e(Y) over
/// that side's columns at whose value its rows expire (see the module docs), from the first
/// conjunct of `filter` (over the left's columns, then the right's) that bounds the other
/// side's event time from above by it.
pub fn expiry_bounds(
    kind: JoinKind,
    left: &LogicalPlan,
    right: &LogicalPlan,
    filter: Option<&Expr>,
) -> [Option<Expr>; 2] {
    let none = [None, None];
    let Some(filter) = filter else { return none };
    if kind != JoinKind::Inner || !left.is_monotonic() || !right.is_monotonic() {
        return none;
    }
    let (ls, rs) = (left.schema(), right.schema());
    let times = [event_time_column(left), event_time_column(right)];
    let schemas: [&DFSchema; 2] = [&ls, &rs];
    // Whether `e` is side `x`'s event-time column; whether it reads side `y`'s columns only.
    let is_time = |e: &Expr, x: usize| match (e, times[x]) {
        (Expr::Column(c), Some(t)) => {
            schemas[x].index_of_column(c).ok() == Some(t) && !schemas[1 - x].has_column(c)
        }
        _ => false,
    };
    let over = |e: &Expr, y: usize| {
        let cols = e.column_refs();
        !cols.is_empty()
            && cols.iter().all(|c| schemas[y].has_column(c) && !schemas[1 - y].has_column(c))
    };
    // `x_time <= bound`, bound over side 1 - x, of the same type: side 1 - x expires.
    let mut out: [Option<Expr>; 2] = none;
    let mut upper = |x_time: &Expr, bound: &Expr| {
        for x in 0..2 {
            let y = 1 - x;
            if out[y].is_none() && is_time(x_time, x) && over(bound, y) {
                let same_type = match (x_time.get_type(schemas[x]), bound.get_type(schemas[y])) {
                    (Ok(a), Ok(b)) => {
                        a == b && matches!(a, DataType::Int64 | DataType::Timestamp(..))
                    }
                    _ => false,
                };
                if same_type {
                    out[y] = Some(bound.clone());
                }
            }
        }
    };
    for c in datafusion_expr::utils::split_conjunction(filter) {
        match c {
            Expr::BinaryExpr(BinaryExpr { left: l, op: Op::LtEq | Op::Lt, right: r }) => {
                upper(l, r)
            }
            Expr::BinaryExpr(BinaryExpr { left: l, op: Op::GtEq | Op::Gt, right: r }) => {
                upper(r, l)
            }
            Expr::Between(Between { expr, negated: false, high, .. }) => upper(expr, high),
            _ => {}
        }
    }
    out
}
