//! Interval joins: which rows of an inner join its time condition rules out for good.
//!
//! In an inner join of two append-only inputs (unbounded windows over streams, and what
//! filters and projects them), each side's rows enter at their elements' event time, so after
//! instant τ is evaluated every row still to come on side X has `X.t > τ`. A conjunct of the
//! join's condition `X.t <= e(Y)` (or `X.t < e(Y)`, or the upper bound of `X.t BETWEEN ...`),
//! with `e` an expression over side Y's columns only and of `X.t`'s type, then fails for every
//! X row still to come once τ ≥ e(y): the row y can match nothing more. [`expiry_bounds`] finds
//! those expressions; the join operator drops the rows (weir-exec's `ops::join::expiry`), and
//! EXPLAIN shows them.

use arrow::datatypes::DataType;
use datafusion_common::DFSchema;
use datafusion_expr::{Between, BinaryExpr, Expr, ExprSchemable, Operator as Op};

use crate::plan::{JoinKind, LogicalPlan, WindowSpec};

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
