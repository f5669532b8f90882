//! Aggregates over sliding, tumbling and cumulating windows, pre-aggregated pane by pane as
//! the elements arrive.
//!
//! `s [RANGE T SLIDE S]` changes only when it slides: at tick kS − 1 the elements stamped in
//! [kS − T, kS) are the window, and everything that entered since the last slide enters at
//! once. An aggregate over it therefore does all of a slide's work in the step that closes
//! it: for a 10-second tumbling window over 100 000 events a second, a million insertions
//! and a million retractions in one step, while the events themselves arrived spread over
//! the ten seconds before. [`pre_aggregate_panes`] moves that work to where the events
//! arrive, as Flink's slice-shared window aggregation does:
//!
//! ```text
//! Aggregate(group: K, aggs)
//!   Filter / Project / Rename ...
//!     Window [RANGE T SLIDE S OFFSET O]   (or a cumulating window)
//!       s
//! ```
//!
//! becomes
//!
//! ```text
//! Project (each aggregate from its merged partials, in the aggregate's columns)
//!   Aggregate(group: K, merges of the partials)
//!     Window [RANGE T SLIDE S OFFSET O]
//!       PaneAggregate(panes of P offset O, group: K, partial aggs)
//!         Filter / Project / Rename ...
//!           Rename (the window's column names)
//!             s
//! ```
//!
//! with the pane P = gcd(T, S) (a cumulating window's step). The pane aggregate keeps the partial
//! aggregates of the current pane as its elements arrive, and at the pane's last tick emits one
//! element per group of the pane; the window then holds those elements instead of the stream's, and
//! the aggregate above merges them: a slide costs the groups of the panes that enter and leave, not
//! their elements. When a window is one pane (T divides S: a tumbling window, or one with gaps
//! between windows; a cumulating window whose step is its size) and the aggregate has a GROUP BY,
//! the window holds one partial row per group, which is that group's row: the merging aggregate is
//! left out, and the Project reads the window.
//!
//! Exact, never a change of meaning:
//! - every window bound (kS + O and kS + O − T; a cumulating window's k·size + O + j·step) is
//!   O plus a multiple of P, so whether an element stamped e is in the window current at any
//!   instant depends only on e's pane; the pane's elements and its partial rows, stamped with
//!   the pane's last tick, enter and leave every window at the same ticks (a pane in a gap
//!   between windows, T < S, is in none, like its elements; a pane whose last tick is past
//!   the end of the time domain is in none either, like its elements);
//! - filters, projections and renames map each element on its own and keep its timestamp, so
//!   they commute with a time window (volatile expressions excluded: they are left where they
//!   are);
//! - the window's contents at τ are the union of whole panes, so each group's aggregate is a
//!   merge of the panes' partials: COUNT and COUNT(*) are the SUM of the partial counts, SUM
//!   the SUM of the partial sums, MIN, MAX, BOOL_AND and BOOL_OR the same function of the
//!   partials, AVG the merged sum over the merged count. Integer sums are kept as
//!   DECIMAL(38, 0) in between, so no partial overflows where the window's sum would not,
//!   and the result is cast back to the aggregate's type: the sum is exact, the average is
//!   the exact sum over the count, as before. `FILTER (WHERE ...)` applies to the partials.
//!   A group exists while some element of it is in the window, so its merge runs over at
//!   least one partial; only a scalar aggregate (no GROUP BY) sees an empty window, where the
//!   merged counts are NULL and are read as 0.
//!
//! The plan is left as it is for aggregates that do not merge exactly or at all (DISTINCT,
//! ordered aggregates, sums and averages of floating-point numbers, whose result depends on
//! the order of additions, and of decimals), sketches (which slice windows themselves), panes
//! of one tick (nothing to pre-aggregate), and anything but filters, projections and renames
//! between the aggregate and the window.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field};
use datafusion_common::{Column, DFSchema, DFSchemaRef, ScalarValue, TableReference};
use datafusion_expr::expr::{Case, Cast};
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, Operator};
use weir_common::{Result, Time, WeirError};

use crate::plan::{AggCall, AggFunc, LogicalPlan, PlanKind, WindowSpec};

/// `plan` with every aggregate over a sliding, tumbling or cumulating window that can be
/// pre-aggregated rewritten (see the module docs).
pub fn pre_aggregate_panes(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    let node = plan.map_inputs(&mut |i| pre_aggregate_panes(i))?;
    if let LogicalPlan::Aggregate { group, aggs, input, schema } = &node {
        if let Some(rewritten) = rewrite(group, aggs, input, schema)? {
            return Ok(rewritten);
        }
    }
    Ok(Arc::new(node))
}

/// The panes of a window: their length and offset, if longer than one tick.
fn panes(spec: &WindowSpec) -> Option<(Time, Time)> {
    let (pane, offset) = match *spec {
        WindowSpec::RangeSlide { range, slide, offset } if range > 0 && slide > 0 => {
            (gcd(range, slide), offset)
        }
        WindowSpec::Cumulate { step, size, offset } if step > 0 && size > 0 && size % step == 0 => {
            (step, offset)
        }
        _ => return None,
    };
    (pane > 1).then(|| (pane, offset.rem_euclid(pane)))
}

fn gcd(mut a: Time, mut b: Time) -> Time {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The window under an aggregate, through filters, projections and renames: the chain's
/// nodes from the top, and the window node. None if anything else stands between them.
pub(crate) fn window_under(
    plan: &Arc<LogicalPlan>,
) -> Option<(Vec<Arc<LogicalPlan>>, Arc<LogicalPlan>)> {
    let mut chain = Vec::new();
    let mut node = plan.clone();
    loop {
        let movable = match node.as_ref() {
            LogicalPlan::Window { bounds_columns: false, input, .. }
                if input.kind() == PlanKind::Stream =>
            {
                return Some((chain, node));
            }
            LogicalPlan::Filter { predicate, .. } => !predicate.is_volatile(),
            LogicalPlan::Project { exprs, .. } => !exprs.iter().any(Expr::is_volatile),
            LogicalPlan::Rename { .. } => true,
            _ => false,
        };
        let next = node.inputs().first().map(|i| Arc::clone(i)).filter(|_| movable)?;
        chain.push(node);
        node = next;
    }
}

/// The chain of [`window_under`] moved under its window, onto the window's `stream` (named as
/// the window names it, `window_schema`): the same rows at the same times, before the window.
pub(crate) fn chain_onto_stream(
    chain: &[Arc<LogicalPlan>],
    stream: &Arc<LogicalPlan>,
    window_schema: &DFSchemaRef,
) -> Result<Arc<LogicalPlan>> {
    let mut base = if window_schema == &stream.schema() {
        stream.clone()
    } else {
        Arc::new(LogicalPlan::Rename { input: stream.clone(), schema: window_schema.clone() })
    };
    for node in chain.iter().rev() {
        let below = base.clone();
        base = Arc::new(node.map_inputs(&mut |_| Ok(below.clone()))?);
    }
    Ok(base)
}

/// How one aggregate is computed from panes.
enum Merge {
    /// COUNT(*), COUNT(x): the SUM of the partial counts (a scalar aggregate's NULL is 0).
    Count,
    /// An integer SUM: partial sums as DECIMAL(38, 0), their SUM cast to the aggregate's type.
    Sum,
    /// AVG of integers: partial sums (as for `Sum`) and counts; the merged sum over the
    /// merged count, as DOUBLE.
    Avg,
    /// MIN, MAX, BOOL_AND, BOOL_OR: the same function of the partials.
    Same,
}

fn signed_int(t: &DataType) -> bool {
    matches!(t, DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64)
}

const WIDE: DataType = DataType::Decimal128(38, 0);

/// How `call` merges, given its argument's type; None if it does not (see the module docs).
fn merge_of(call: &AggCall, arg_type: Option<&DataType>) -> Option<Merge> {
    if call.distinct || !call.order_by.is_empty() {
        return None;
    }
    match (call.func, arg_type) {
        (AggFunc::CountStar | AggFunc::Count, _) => Some(Merge::Count),
        (AggFunc::Sum, Some(t)) if signed_int(t) => Some(Merge::Sum),
        (AggFunc::Avg, Some(t)) if signed_int(t) => Some(Merge::Avg),
        (AggFunc::Min | AggFunc::Max | AggFunc::BoolAnd | AggFunc::BoolOr, Some(_)) => {
            Some(Merge::Same)
        }
        _ => None,
    }
}

fn cast(e: Expr, t: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(e), t))
}

/// `e` (of type `from`) as `to`.
fn cast_unless(e: Expr, from: &DataType, to: DataType) -> Expr {
    if *from == to {
        e
    } else {
        cast(e, to)
    }
}

fn field(name: String, t: DataType) -> (Option<TableReference>, Arc<Field>) {
    (None, Arc::new(Field::new(name, t, true)))
}

fn schema_of(fields: Vec<(Option<TableReference>, Arc<Field>)>) -> Result<DFSchemaRef> {
    Ok(Arc::new(
        DFSchema::new_with_metadata(fields, Default::default())
            .map_err(|e| WeirError::internal(format!("pane aggregate: {e}")))?,
    ))
}

fn column(schema: &DFSchema, i: usize) -> Expr {
    let (q, f) = schema.qualified_field(i);
    Expr::Column(Column::new(q.cloned(), f.name()))
}

/// The rewrite of one aggregate (see the module docs), if it applies.
fn rewrite(
    group: &[Expr],
    aggs: &[AggCall],
    input: &Arc<LogicalPlan>,
    schema: &DFSchemaRef,
) -> Result<Option<Arc<LogicalPlan>>> {
    let Some((chain, window)) = window_under(input) else { return Ok(None) };
    let LogicalPlan::Window { spec, input: stream, schema: window_schema, .. } = window.as_ref()
    else {
        return Ok(None);
    };
    let Some((pane, offset)) = panes(spec) else { return Ok(None) };
    // Already pre-aggregated: a view's plan is rewritten when the view is created, and again
    // as part of each query that reads it.
    if matches!(stream.as_ref(), LogicalPlan::PaneAggregate { .. }) {
        return Ok(None);
    }
    let in_schema = input.schema();
    let type_of = |e: &Expr| {
        e.get_type(&in_schema).map_err(|err| WeirError::internal(format!("type of {e}: {err}")))
    };
    let mut merges = Vec::with_capacity(aggs.len());
    for call in aggs {
        let arg_type = call.arg.as_ref().map(type_of).transpose()?;
        match merge_of(call, arg_type.as_ref()) {
            Some(m) => merges.push((m, arg_type)),
            None => return Ok(None),
        }
    }
    let keys = group.len();
    let key_fields = || {
        (0..keys)
            .map(|i| {
                let (q, f) = schema.qualified_field(i);
                (q.cloned(), f.clone())
            })
            .collect::<Vec<_>>()
    };

    let base = chain_onto_stream(&chain, stream, window_schema)?;

    // The partials: per aggregate, one or two (AVG: the sum, then the count), each computed
    // once however many aggregates read it (SUM(v) and AVG(v) share the sum).
    let mut partials: Vec<AggCall> = Vec::new();
    let mut pane_fields = key_fields();
    let mut reads: Vec<(usize, Option<usize>)> = Vec::with_capacity(aggs.len());
    for (call, (m, arg_type)) in aggs.iter().zip(&merges) {
        let wide_arg = || call.arg.clone().map(|a| cast(a, WIDE));
        let mut push = |c: AggCall, t: DataType| {
            let same = |p: &AggCall| {
                p.func == c.func && p.arg == c.arg && p.filter == c.filter && !p.distinct
            };
            if let Some(at) = partials.iter().position(same) {
                return at;
            }
            pane_fields.push(field(format!("__pane_{}", partials.len()), t));
            partials.push(c);
            partials.len() - 1
        };
        reads.push(match m {
            Merge::Count => (push(call.clone(), DataType::Int64), None),
            Merge::Sum => (push(AggCall { arg: wide_arg(), ..call.clone() }, WIDE), None),
            Merge::Avg => {
                let sum =
                    push(AggCall { func: AggFunc::Sum, arg: wide_arg(), ..call.clone() }, WIDE);
                let n = push(AggCall { func: AggFunc::Count, ..call.clone() }, DataType::Int64);
                (sum, Some(n))
            }
            Merge::Same => (push(call.clone(), arg_type.clone().unwrap_or(DataType::Null)), None),
        });
    }
    let pane_schema = schema_of(pane_fields)?;
    // A window of one pane (its range divides its slide: a tumbling window, or one with gaps)
    // holds one partial row per group: those rows are the groups, and nothing is merged.
    let single_pane = match *spec {
        WindowSpec::RangeSlide { range, .. } => range == pane,
        WindowSpec::Cumulate { step, size, .. } => step == size,
        _ => false,
    };
    let merged = !(single_pane && keys > 0);
    let pane_aggregate = Arc::new(LogicalPlan::PaneAggregate {
        pane,
        offset,
        merged,
        window: spec.clone(),
        group: group.to_vec(),
        aggs: partials.clone(),
        input: base,
        schema: pane_schema.clone(),
    });
    let windowed = Arc::new(LogicalPlan::Window {
        spec: spec.clone(),
        input: pane_aggregate,
        schema: pane_schema.clone(),
        bounds_columns: false,
    });

    if !merged {
        let exprs = finals(&merges, &reads, keys, schema, &pane_schema);
        let plan = LogicalPlan::Project { exprs, input: windowed, schema: schema.clone() };
        return Ok(Some(Arc::new(plan)));
    }

    // The merges: one per partial, over the partial's column.
    let mut merged_fields = key_fields();
    let mut merged = Vec::with_capacity(partials.len());
    for (p, call) in partials.iter().enumerate() {
        let arg = column(&pane_schema, keys + p);
        let func = match call.func {
            AggFunc::CountStar | AggFunc::Count | AggFunc::Sum => AggFunc::Sum,
            f => f,
        };
        merged_fields
            .push(field(format!("__window_{p}"), pane_schema.field(keys + p).data_type().clone()));
        merged.push(AggCall::new(func, Some(arg), false));
    }
    let merged_schema = schema_of(merged_fields)?;
    let aggregate = Arc::new(LogicalPlan::Aggregate {
        group: (0..keys).map(|i| column(&pane_schema, i)).collect(),
        aggs: merged,
        input: windowed,
        schema: merged_schema.clone(),
    });

    let exprs = finals(&merges, &reads, keys, schema, &merged_schema);
    Ok(Some(Arc::new(LogicalPlan::Project { exprs, input: aggregate, schema: schema.clone() })))
}

/// Each aggregate's value (the aggregate's columns, `schema`) from its merged partials, the
/// columns of `merged` (the keys, then one per partial): `reads` says which partials each
/// aggregate reads.
fn finals(
    merges: &[(Merge, Option<DataType>)],
    reads: &[(usize, Option<usize>)],
    keys: usize,
    schema: &DFSchema,
    merged: &DFSchema,
) -> Vec<Expr> {
    let mut exprs: Vec<Expr> = (0..keys).map(|i| column(merged, i)).collect();
    for (a, ((m, _), (part, count))) in merges.iter().zip(reads).enumerate() {
        let out_type = schema.field(keys + a).data_type().clone();
        let p = keys + part;
        let at = column(merged, p);
        exprs.push(match m {
            Merge::Count if keys == 0 => Expr::Case(Case {
                expr: None,
                when_then_expr: vec![(
                    Box::new(at.clone().is_null()),
                    Box::new(Expr::Literal(ScalarValue::Int64(Some(0)), None)),
                )],
                else_expr: Some(Box::new(at)),
            }),
            Merge::Count | Merge::Same | Merge::Sum => {
                cast_unless(at, merged.field(p).data_type(), out_type)
            }
            Merge::Avg => {
                let n = column(merged, keys + count.unwrap_or(*part));
                let quotient = Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(cast(at, DataType::Float64)),
                    Operator::Divide,
                    Box::new(cast(n, DataType::Float64)),
                ));
                cast_unless(quotient, &DataType::Float64, out_type)
            }
        });
    }
    exprs
}
