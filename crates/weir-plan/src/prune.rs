//! Column pruning: each join input, and the input of each window that keeps rows, narrowed to
//! the columns used above it.
//!
//! A join keeps every row of both inputs in its state, encoded whole, so a column that nothing
//! above the join reads still costs memory and encoding work on every change. [`prune`] walks
//! the plan from the root, computing which output columns of each node its ancestors read, and
//! puts a [`LogicalPlan::Project`] under each join input that would otherwise carry more: the
//! join's output columns its ancestors read, plus its key and residual-filter columns. The
//! join's (and each [`LogicalPlan::Rename`]'s) schema shrinks to the columns kept. An input
//! that is itself a join (or holds one) gets no Project: its own inputs are narrowed, so it
//! outputs the columns read above plus only its own key and filter columns, and deep join
//! trees get no deeper.
//!
//! Exact by construction, never a change of meaning:
//! - a projection keeps duplicates, and whether two rows match depends only on the key and
//!   filter columns, so inner, outer, semi, anti and mark joins give the same rows, with the
//!   same multiplicities, over the narrowed inputs; a side that needs no column at all keeps
//!   one (its cheapest), so its rows are still counted;
//! - nodes that compare or order whole rows keep every input column: `Distinct`, the bag set
//!   operations (`IntersectAll`, `ExceptAll`), `UnionAll`, `TopK` (ties are broken by value),
//!   relation-to-stream operators, and [`LogicalPlan::Apply`] (its subqueries see the row);
//! - a window function over a relation (`Ranking`, `OverRelation`) keeps every input row in its
//!   state, so its input is narrowed like a join input, to the columns read above plus those
//!   the function reads. Its tiebreak among `ORDER BY` peers is the row's value, so it is the
//!   narrowed row's: rows that differ only in columns nothing reads are peers that nothing
//!   can tell apart, and their numbers are interchangeable;
//! - a `Window` keeps its input whole and in place (its input stays a stream, `PARTITION BY`
//!   and the event-time column keep their positions): narrowing happens above it; so does a
//!   `TimeWindows` (its time column keeps its position). The exception is a window that keeps
//!   its elements' rows (`[NOW]`, `[RANGE]`, `[ROWS]`, `[PARTITION BY ... ROWS]`, sessions,
//!   cumulating windows): its input is narrowed like a join input, to the columns read above
//!   plus `PARTITION BY`, since which elements it holds depends only on those columns, the
//!   timestamps (which elements carry beside their rows) and the arrival order;
//! - a `Project` drops only output columns that are plain column references nothing reads;
//!   computed expressions stay, so an expression that would fail still fails;
//! - the root keeps all its columns: the query's output schema is unchanged.
//!
//! A plan without a join, a window that keeps rows or a window function over a relation is
//! returned unchanged.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion_common::tree_node::TreeNode;
use datafusion_common::{Column, DFSchema, DFSchemaRef, TableReference};
use datafusion_expr::Expr;
use weir_common::{Result, WeirError};

use crate::plan::{AggCall, JoinKind, LogicalPlan, Membership, OverCall, WindowSpec};

/// `plan` with each join input narrowed to the columns used above it. See the module docs.
pub fn prune(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    if !contains_join(plan) && !contains_stateful_window(plan) && !contains_over(plan) {
        return Ok(plan.clone());
    }
    let all = all_columns(&plan.schema());
    let (pruned, kept) = narrow(plan, &all)?;
    if kept.len() != all.len() {
        return Err(WeirError::internal("column pruning dropped a column of the query's output"));
    }
    Ok(pruned)
}

fn contains_join(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Join { .. }) || plan.inputs().iter().any(|i| contains_join(i))
}

fn contains_stateful_window(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Window { spec, .. } if keeps_rows(spec))
        || plan.inputs().iter().any(|i| contains_stateful_window(i))
}

fn contains_over(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Ranking { .. } | LogicalPlan::OverRelation { .. })
        || plan.inputs().iter().any(|i| contains_over(i))
}

/// Positions of a node's output columns.
type Cols = BTreeSet<usize>;

fn all_columns(schema: &DFSchema) -> Cols {
    (0..schema.fields().len()).collect()
}

/// Narrows `plan` given the positions `required` of its output columns that its ancestors
/// read. Returns the new plan and the positions (in `plan`'s output, ascending) of the columns
/// it still outputs, in that order: a superset of `required`.
fn narrow(plan: &Arc<LogicalPlan>, required: &Cols) -> Result<(Arc<LogicalPlan>, Vec<usize>)> {
    let schema = plan.schema();
    let unchanged = |p: LogicalPlan| Ok((Arc::new(p), (0..schema.fields().len()).collect()));
    match plan.as_ref() {
        LogicalPlan::StreamScan { .. }
        | LogicalPlan::TableScan { .. }
        | LogicalPlan::Values { .. } => Ok((plan.clone(), (0..schema.fields().len()).collect())),
        LogicalPlan::Window { spec, input, schema: s, bounds_columns } if keeps_rows(spec) => {
            narrow_window(spec, input, s, *bounds_columns, required)
        }
        // Nodes that keep their input's columns whole.
        LogicalPlan::Window { spec, input, schema: s, bounds_columns } => {
            unchanged(LogicalPlan::Window {
                spec: spec.clone(),
                input: whole(input)?,
                schema: s.clone(),
                bounds_columns: *bounds_columns,
            })
        }
        LogicalPlan::TimeWindows { column, size, slide, domain, input, schema: s } => {
            unchanged(LogicalPlan::TimeWindows {
                column: *column,
                size: *size,
                slide: *slide,
                domain: *domain,
                input: whole(input)?,
                schema: s.clone(),
            })
        }
        LogicalPlan::WindowBounds { spec, input, schema: s, istream_sees } => {
            unchanged(LogicalPlan::WindowBounds {
                spec: spec.clone(),
                input: whole(input)?,
                schema: s.clone(),
                istream_sees: *istream_sees,
            })
        }
        LogicalPlan::WindowAggregate { spec, merge, input, schema: s } => {
            unchanged(LogicalPlan::WindowAggregate {
                spec: spec.clone(),
                merge: merge.clone(),
                input: whole(input)?,
                schema: s.clone(),
            })
        }
        LogicalPlan::Distinct { input } => {
            unchanged(LogicalPlan::Distinct { input: whole(input)? })
        }
        LogicalPlan::ToStream { op, input } => {
            unchanged(LogicalPlan::ToStream { op: *op, input: whole(input)? })
        }
        LogicalPlan::TopK { order, skip, fetch, with_ties, input } => {
            unchanged(LogicalPlan::TopK {
                order: order.clone(),
                skip: *skip,
                fetch: *fetch,
                with_ties: *with_ties,
                input: whole(input)?,
            })
        }
        LogicalPlan::Ranking { partition_by, order_by, funcs, mode, input, schema: s } => {
            let reads = over_reads(partition_by, order_by, &[], &input.schema());
            let (input, schema, kept) = narrow_over(input, s, required, reads)?;
            let plan = LogicalPlan::Ranking {
                partition_by: partition_by.clone(),
                order_by: order_by.clone(),
                funcs: funcs.clone(),
                mode: *mode,
                input,
                schema,
            };
            Ok((Arc::new(plan), kept))
        }
        LogicalPlan::OverRelation { partition_by, order_by, calls, input, schema: s } => {
            let reads = over_reads(partition_by, order_by, calls, &input.schema());
            let (input, schema, kept) = narrow_over(input, s, required, reads)?;
            let plan = LogicalPlan::OverRelation {
                partition_by: partition_by.clone(),
                order_by: order_by.clone(),
                calls: calls.clone(),
                input,
                schema,
            };
            Ok((Arc::new(plan), kept))
        }
        LogicalPlan::OverAggregate { partition_by, order_by, frame, aggs, input, schema: s } => {
            unchanged(LogicalPlan::OverAggregate {
                partition_by: partition_by.clone(),
                order_by: order_by.clone(),
                frame: *frame,
                aggs: aggs.clone(),
                input: whole(input)?,
                schema: s.clone(),
            })
        }
        LogicalPlan::UnionAll { inputs, schema: s } => unchanged(LogicalPlan::UnionAll {
            inputs: inputs.iter().map(whole).collect::<Result<_>>()?,
            schema: s.clone(),
        }),
        LogicalPlan::Apply { input, subqueries, schema: s } => unchanged(LogicalPlan::Apply {
            input: whole(input)?,
            subqueries: subqueries.clone(),
            schema: s.clone(),
        }),
        LogicalPlan::Aggregate { group, aggs, input, schema: s } => {
            let (input, _) = narrow(input, &aggregate_reads(group, aggs, &input.schema()))?;
            unchanged(LogicalPlan::Aggregate {
                group: group.clone(),
                aggs: aggs.clone(),
                input,
                schema: s.clone(),
            })
        }
        LogicalPlan::PaneAggregate {
            pane,
            offset,
            merged,
            window,
            group,
            aggs,
            input,
            schema: s,
        } => {
            let (input, _) = narrow(input, &aggregate_reads(group, aggs, &input.schema()))?;
            unchanged(LogicalPlan::PaneAggregate {
                pane: *pane,
                offset: *offset,
                merged: *merged,
                window: window.clone(),
                group: group.clone(),
                aggs: aggs.clone(),
                input,
                schema: s.clone(),
            })
        }
        LogicalPlan::Filter { predicate, input } => {
            let mut need = required.clone();
            expr_columns(predicate, &input.schema(), &mut need);
            let (input, kept) = narrow(input, &need)?;
            Ok((Arc::new(LogicalPlan::Filter { predicate: predicate.clone(), input }), kept))
        }
        LogicalPlan::Rename { input, schema: s } => {
            let (input, kept) = narrow(input, required)?;
            let schema = select_fields(s, &kept)?;
            Ok((Arc::new(LogicalPlan::Rename { input, schema }), kept))
        }
        LogicalPlan::Project { exprs, input, schema: s } => {
            narrow_project(exprs, input, s, required)
        }
        LogicalPlan::Join { kind: JoinKind::IntersectAll | JoinKind::ExceptAll, .. } => {
            // Keyed on every column of both sides.
            let LogicalPlan::Join { kind, left, right, on, filter, nulls_equal, schema: s, held } =
                plan.as_ref()
            else {
                return Err(WeirError::internal("join expected"));
            };
            unchanged(LogicalPlan::Join {
                kind: *kind,
                left: whole(left)?,
                right: whole(right)?,
                on: on.clone(),
                filter: filter.clone(),
                nulls_equal: *nulls_equal,
                schema: s.clone(),
                held: held.clone(),
            })
        }
        LogicalPlan::Join { .. } => narrow_join(plan, required),
    }
}

/// Whether a window keeps its elements' rows in its state until they leave (every window but
/// `[UNBOUNDED]`, which keeps none, and those whose result depends on whole rows: a
/// `DEDUPLICATE` without `BY` compares them, a `SAMPLE` hashes them).
/// The input columns an aggregate's keys and aggregates read.
fn aggregate_reads(group: &[Expr], aggs: &[AggCall], schema: &DFSchema) -> Cols {
    let mut need = Cols::new();
    for e in group.iter().chain(aggs.iter().flat_map(|a| a.exprs())) {
        expr_columns(e, schema, &mut need);
    }
    need
}

fn keeps_rows(spec: &WindowSpec) -> bool {
    match spec {
        WindowSpec::Now
        | WindowSpec::Range(_)
        | WindowSpec::RangeSlide { .. }
        | WindowSpec::Rows(_)
        | WindowSpec::PartitionRows { .. }
        | WindowSpec::Session { .. }
        | WindowSpec::Cumulate { .. } => true,
        WindowSpec::Unbounded | WindowSpec::Deduplicate { .. } | WindowSpec::Sample { .. } => false,
    }
}

/// The case of [`narrow`] for a window that keeps rows ([`keeps_rows`]): its input narrowed
/// to the columns read above it plus its `PARTITION BY` columns (a `Project` under the
/// window). The window holds every element's row until it leaves (a session's until the
/// session closes), so a column nothing reads would cost state and work per element. Which
/// elements are in the window depends only on their timestamps, which elements carry beside
/// their rows, their arrival order and the partition columns, so the event-time column goes
/// too when nothing above reads it.
fn narrow_window(
    spec: &WindowSpec,
    input: &Arc<LogicalPlan>,
    schema: &DFSchemaRef,
    bounds_columns: bool,
    required: &Cols,
) -> Result<(Arc<LogicalPlan>, Vec<usize>)> {
    let n_in = input.schema().fields().len();
    let by: &[usize] = match spec {
        WindowSpec::PartitionRows { by, .. } | WindowSpec::Session { by, .. } => by,
        _ => &[],
    };
    let mut need: Cols = required.iter().copied().filter(|i| *i < n_in).collect();
    need.extend(by.iter().copied());
    let (input, kept) = narrow_input(input, &need)?;
    let by = positions_in(&kept, by, "a PARTITION BY column")?;
    let spec = match spec {
        WindowSpec::PartitionRows { rows, .. } => WindowSpec::PartitionRows { by, rows: *rows },
        WindowSpec::Session { gap, .. } => WindowSpec::Session { gap: *gap, by },
        other => other.clone(),
    };
    let mut out: Vec<usize> = kept.clone();
    if bounds_columns {
        out.extend([n_in, n_in + 1]);
    }
    let schema = select_fields(schema, &out)?;
    Ok((Arc::new(LogicalPlan::Window { spec, input, schema, bounds_columns }), out))
}

/// The input columns a window function over a relation reads itself: its `PARTITION BY`,
/// `ORDER BY`, arguments and defaults.
fn over_reads(
    partition_by: &[Expr],
    order_by: &[datafusion_expr::SortExpr],
    calls: &[OverCall],
    schema: &DFSchema,
) -> Cols {
    let mut need = Cols::new();
    let exprs = partition_by.iter().chain(order_by.iter().map(|o| &o.expr));
    let args = calls.iter().flat_map(|c| c.arg.iter().chain(c.default.iter()));
    for e in exprs.chain(args) {
        expr_columns(e, schema, &mut need);
    }
    need
}

/// The case of [`narrow`] for a window function over a relation (`Ranking`, `OverRelation`):
/// its input narrowed to the columns read above it plus those the function reads (`reads`),
/// since it keeps every input row (encoded whole) in its state and outputs each row followed
/// by its function values. Its ties in `ORDER BY` are broken by the row's value (see the
/// module docs): by the narrowed row, so by the columns the query reads. Returns the new input,
/// the narrowed schema and the kept positions of the node's output (the input's kept columns,
/// then every function column).
fn narrow_over(
    input: &Arc<LogicalPlan>,
    schema: &DFSchemaRef,
    required: &Cols,
    reads: Cols,
) -> Result<(Arc<LogicalPlan>, DFSchemaRef, Vec<usize>)> {
    let n_in = input.schema().fields().len();
    let mut need: Cols = required.iter().copied().filter(|i| *i < n_in).collect();
    need.extend(reads);
    let (input, mut kept) = narrow_input(input, &need)?;
    kept.extend(n_in..schema.fields().len());
    let schema = select_fields(schema, &kept)?;
    Ok((input, schema, kept))
}

/// The general join case of [`narrow`]: each input narrowed to the columns read above the join
/// plus its key and filter columns. (Its own function to keep `narrow`'s frame small: deep
/// join trees recurse through both.)
fn narrow_join(plan: &Arc<LogicalPlan>, required: &Cols) -> Result<(Arc<LogicalPlan>, Vec<usize>)> {
    let LogicalPlan::Join { kind, left, right, on, filter, nulls_equal, schema: s, held } =
        plan.as_ref()
    else {
        return Err(WeirError::internal("join expected"));
    };
    let (ls, rs) = (left.schema(), right.schema());
    let nl = ls.fields().len();
    let nr = rs.fields().len();
    // Where each side's columns sit in the join's output.
    let (right_out, mark) = match kind {
        JoinKind::Inner
        | JoinKind::Left
        | JoinKind::Right
        | JoinKind::Full
        | JoinKind::Temporal { .. } => (true, false),
        JoinKind::LeftSemi | JoinKind::LeftAnti { .. } => (false, false),
        JoinKind::LeftMark | JoinKind::MightContain { test: Membership::Mark, .. } => (false, true),
        JoinKind::MightContain { .. } => (false, false),
        JoinKind::IntersectAll | JoinKind::ExceptAll => {
            return Err(WeirError::internal("set operation join reached the general case"))
        }
    };
    let expected = nl + if right_out { nr } else { 0 } + usize::from(mark);
    if s.fields().len() != expected {
        return Err(WeirError::internal(format!(
            "join schema has {} columns, its inputs {nl} + {nr}",
            s.fields().len()
        )));
    }
    let mut lneed: Cols = required.iter().copied().filter(|i| *i < nl).collect();
    let mut rneed: Cols = if right_out {
        required.iter().filter(|i| **i >= nl && **i < nl + nr).map(|i| i - nl).collect()
    } else {
        Cols::new()
    };
    for (l, r) in on {
        expr_columns(l, &ls, &mut lneed);
        expr_columns(r, &rs, &mut rneed);
    }
    if let Some(f) = filter {
        let both = ls.join(&rs).map_err(|e| WeirError::internal(e.to_string()))?;
        let mut need = Cols::new();
        expr_columns(f, &both, &mut need);
        for i in need {
            if i < nl {
                lneed.insert(i);
            } else {
                rneed.insert(i - nl);
            }
        }
    }
    let (left, lkept) = narrow_input(left, &lneed)?;
    let (right, rkept) = narrow_input(right, &rneed)?;
    let mut kept: Vec<usize> = lkept.clone();
    if right_out {
        kept.extend(rkept.iter().map(|i| nl + i));
    }
    if mark {
        kept.push(nl);
    }
    let schema = select_fields(s, &kept)?;
    Ok((
        Arc::new(LogicalPlan::Join {
            kind: *kind,
            left,
            right,
            on: on.clone(),
            filter: filter.clone(),
            nulls_equal: *nulls_equal,
            schema,
            held: held.clone(),
        }),
        kept,
    ))
}

/// The `Project` case of [`narrow`]: output columns that are plain (a column or a constant)
/// and unread go; computed expressions stay, so one that would fail still fails. A Project of
/// plain columns over another Project becomes one Project.
fn narrow_project(
    exprs: &[Expr],
    input: &Arc<LogicalPlan>,
    schema: &DFSchemaRef,
    required: &Cols,
) -> Result<(Arc<LogicalPlan>, Vec<usize>)> {
    let mut keep: Vec<usize> =
        (0..exprs.len()).filter(|i| required.contains(i) || !is_plain(&exprs[*i])).collect();
    if keep.is_empty() {
        keep = cheapest(schema, &(0..exprs.len()).collect::<Vec<_>>()).into_iter().collect();
    }
    let in_schema = input.schema();
    let mut need = Cols::new();
    for i in &keep {
        expr_columns(&exprs[*i], &in_schema, &mut need);
    }
    let (input, _) = narrow(input, &need)?;
    let exprs: Vec<Expr> = keep.iter().map(|i| exprs[*i].clone()).collect();
    let schema = select_fields(schema, &keep)?;
    let exprs = match merged_exprs(&exprs, &input) {
        Some((merged, below)) => {
            return Ok((
                Arc::new(LogicalPlan::Project { exprs: merged, input: below, schema }),
                keep,
            ))
        }
        None => exprs,
    };
    Ok((Arc::new(LogicalPlan::Project { exprs, input, schema }), keep))
}

/// When `exprs` are all column references into a `Project` `input` and read each of its
/// expressions that is not plain, the same columns computed by one Project directly over
/// `input`'s input: its expressions and that input.
fn merged_exprs(exprs: &[Expr], input: &LogicalPlan) -> Option<(Vec<Expr>, Arc<LogicalPlan>)> {
    let LogicalPlan::Project { exprs: inner, input: below, schema: inner_schema } = input else {
        return None;
    };
    let mut read = vec![false; inner.len()];
    let mut merged = Vec::with_capacity(exprs.len());
    for e in exprs {
        let Expr::Column(c) = e else { return None };
        let mut at = Cols::new();
        expr_columns(e, inner_schema, &mut at);
        let [i] = at.into_iter().collect::<Vec<_>>()[..] else { return None };
        let field = inner_schema.qualified_field(i);
        if field.1.name() != &c.name {
            return None;
        }
        read[i] = true;
        merged.push(inner.get(i)?.clone());
    }
    if inner.iter().zip(&read).any(|(e, r)| !r && !is_plain(e)) {
        return None;
    }
    Some((merged, below.clone()))
}

/// `plan` narrowed with all its output columns kept.
fn whole(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    let all = all_columns(&plan.schema());
    let (p, kept) = narrow(plan, &all)?;
    if kept.len() != all.len() {
        return Err(WeirError::internal("column pruning dropped a column that is read"));
    }
    Ok(p)
}

/// A join input narrowed to the columns `need` (its cheapest column if `need` is empty): a
/// `Project` goes on top when the narrowed input still outputs more, unless it is a join.
fn narrow_input(plan: &Arc<LogicalPlan>, need: &Cols) -> Result<(Arc<LogicalPlan>, Vec<usize>)> {
    let (p, kept) = narrow(plan, need)?;
    let want: Vec<usize> = if need.is_empty() {
        cheapest(&plan.schema(), &kept).into_iter().collect()
    } else {
        need.iter().copied().collect()
    };
    // Over a join, no Project: that join's own inputs are narrowed, so it carries only the
    // columns used here plus its own key and filter columns, and a chain of n joins stays n
    // nodes deep (the executor compiles and evaluates the plan recursively).
    if kept == want || want.is_empty() || contains_join(&p) {
        return Ok((p, kept));
    }
    // Positions of the wanted columns in the narrowed input's output.
    let positions = positions_in(&kept, &want, "a needed column")?;
    let in_schema = p.schema();
    let exprs = positions
        .iter()
        .map(|i| {
            let (q, f) = in_schema.qualified_field(*i);
            Expr::Column(Column::new(q.cloned(), f.name()))
        })
        .collect();
    let schema = select_fields(&in_schema, &positions)?;
    Ok((Arc::new(LogicalPlan::Project { exprs, input: p, schema }), want))
}

/// Where each of the columns `wanted` sits among the columns `kept` (both as positions in the
/// same node's output); an internal error naming `what` if one was not kept.
fn positions_in(kept: &[usize], wanted: &[usize], what: &str) -> Result<Vec<usize>> {
    wanted
        .iter()
        .map(|w| {
            kept.iter()
                .position(|k| k == w)
                .ok_or_else(|| WeirError::internal(format!("column pruning lost {what}")))
        })
        .collect()
}

/// The column among `candidates` that is cheapest to carry: the narrowest fixed-width type,
/// else the first.
fn cheapest(schema: &DFSchema, candidates: &[usize]) -> Option<usize> {
    candidates
        .iter()
        .copied()
        .min_by_key(|i| schema.field(*i).data_type().primitive_width().unwrap_or(usize::MAX))
}

/// The schema of `schema`'s columns at `positions`, in that order, with their qualifiers.
pub(crate) fn select_fields(schema: &DFSchemaRef, positions: &[usize]) -> Result<DFSchemaRef> {
    if positions.len() == schema.fields().len()
        && positions.iter().enumerate().all(|(i, p)| i == *p)
    {
        return Ok(schema.clone());
    }
    let fields: Vec<(Option<TableReference>, Arc<arrow::datatypes::Field>)> = positions
        .iter()
        .map(|i| {
            if *i >= schema.fields().len() {
                return Err(WeirError::internal("column pruning: position out of range"));
            }
            let (q, f) = schema.qualified_field(*i);
            Ok((q.cloned(), f.clone()))
        })
        .collect::<Result<_>>()?;
    DFSchema::new_with_metadata(fields, schema.metadata().clone())
        .map(Arc::new)
        .map_err(|e| WeirError::internal(e.to_string()))
}

/// A column reference or a constant, possibly renamed: nothing to compute, nothing to fail.
fn is_plain(e: &Expr) -> bool {
    match e {
        Expr::Column(_) | Expr::Literal(..) => true,
        Expr::Alias(a) => is_plain(&a.expr),
        _ => false,
    }
}

/// Adds the positions in `schema` of the columns `e` reads. Conservative: a column that
/// cannot be placed exactly (unknown, or unqualified and matching several) adds every
/// candidate, and an expression holding a subquery (whose outer references are not plain
/// columns) reads everything.
pub(crate) fn expr_columns(e: &Expr, schema: &DFSchema, out: &mut Cols) {
    let has_subquery = e
        .exists(|x| {
            Ok(matches!(
                x,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::OuterReferenceColumn(..)
            ))
        })
        .unwrap_or(true);
    if has_subquery {
        out.extend(0..schema.fields().len());
        return;
    }
    for c in e.column_refs() {
        let matches: Vec<usize> = (0..schema.fields().len())
            .filter(|i| {
                let (q, f) = schema.qualified_field(*i);
                f.name() == &c.name
                    && match (&c.relation, q) {
                        (Some(r), Some(q)) => r.resolved_eq(q),
                        (Some(_), None) => false,
                        (None, _) => true,
                    }
            })
            .collect();
        if matches.is_empty() {
            out.extend(0..schema.fields().len());
        } else {
            out.extend(matches);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain;
    use crate::plan::{AggCall, AggFunc, WindowSpec, R2S};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_expr::{col, lit};
    use weir_common::TimeDomain;

    fn scan(name: &str, cols: &[(&str, DataType)]) -> Arc<LogicalPlan> {
        let schema = Schema::new(
            cols.iter().map(|(n, t)| Field::new(*n, t.clone(), true)).collect::<Vec<_>>(),
        );
        let df = Arc::new(DFSchema::try_from_qualified_schema(name, &schema).unwrap());
        let stream = Arc::new(LogicalPlan::StreamScan {
            name: name.into(),
            schema: df.clone(),
            time_column: 0,
            domain: TimeDomain::Ticks,
        });
        Arc::new(LogicalPlan::Window {
            spec: WindowSpec::Unbounded,
            input: stream,
            schema: df,
            bounds_columns: false,
        })
    }

    fn a() -> Arc<LogicalPlan> {
        scan(
            "a",
            &[
                ("t", DataType::Int64),
                ("id", DataType::Int64),
                ("name", DataType::Utf8),
                ("extra", DataType::Utf8),
            ],
        )
    }

    fn b() -> Arc<LogicalPlan> {
        scan("b", &[("t", DataType::Int64), ("aid", DataType::Int64), ("price", DataType::Int64)])
    }

    fn join(
        kind: JoinKind,
        l: Arc<LogicalPlan>,
        r: Arc<LogicalPlan>,
        on: (Expr, Expr),
    ) -> Arc<LogicalPlan> {
        let schema = match kind {
            JoinKind::LeftSemi | JoinKind::LeftAnti { .. } => l.schema(),
            _ => Arc::new(l.schema().join(&r.schema()).unwrap()),
        };
        Arc::new(LogicalPlan::Join {
            kind,
            left: l,
            right: r,
            on: vec![on],
            filter: None,
            nulls_equal: false,
            schema,
            held: [None, None],
        })
    }

    fn project(exprs: Vec<Expr>, input: Arc<LogicalPlan>) -> Arc<LogicalPlan> {
        let in_schema = input.schema();
        let fields = exprs
            .iter()
            .map(|e| match e {
                Expr::Column(c) => {
                    let i = in_schema.index_of_column(c).unwrap();
                    let (q, f) = in_schema.qualified_field(i);
                    (q.cloned(), f.clone())
                }
                _ => panic!("test projects columns only"),
            })
            .collect();
        let schema = Arc::new(DFSchema::new_with_metadata(fields, Default::default()).unwrap());
        Arc::new(LogicalPlan::Project { exprs, input, schema })
    }

    fn names(p: &LogicalPlan) -> Vec<String> {
        p.schema().columns().iter().map(|c| c.flat_name()).collect()
    }

    #[test]
    fn join_inputs_keep_only_used_and_key_columns() {
        let j = join(JoinKind::Inner, a(), b(), (col("a.id"), col("b.aid")));
        let plan = project(vec![col("a.name"), col("b.price")], j);
        let pruned = prune(&plan).unwrap();
        assert_eq!(
            explain(&pruned),
            "Project: a.name, b.price  -> relation
  Join: inner on a.id = b.aid  -> relation
    Project: a.id, a.name  -> relation
      Window: [UNBOUNDED]  -> relation
        StreamScan: a  -> stream
    Project: b.aid, b.price  -> relation
      Window: [UNBOUNDED]  -> relation
        StreamScan: b  -> stream
"
        );
        let LogicalPlan::Project { input, .. } = pruned.as_ref() else { panic!() };
        assert_eq!(names(input), ["a.id", "a.name", "b.aid", "b.price"]);
        assert_eq!(names(&pruned), names(&plan));
    }

    #[test]
    fn root_columns_are_all_kept() {
        let plan = join(JoinKind::Inner, a(), b(), (col("a.id"), col("b.aid")));
        let pruned = prune(&plan).unwrap();
        assert_eq!(names(&pruned), names(&plan));
        assert_eq!(explain(&pruned), explain(&plan));
    }

    #[test]
    fn count_star_over_a_join_keeps_the_keys_and_a_semi_join_drops_the_right_side() {
        let j = join(JoinKind::LeftSemi, a(), b(), (col("a.id"), col("b.aid")));
        let plan = Arc::new(LogicalPlan::Aggregate {
            group: vec![],
            aggs: vec![AggCall::new(AggFunc::CountStar, None, false)],
            schema: Arc::new(
                DFSchema::try_from(Schema::new(vec![Field::new("c", DataType::Int64, true)]))
                    .unwrap(),
            ),
            input: j,
        });
        let pruned = prune(&plan).unwrap();
        let LogicalPlan::Aggregate { input, .. } = pruned.as_ref() else { panic!() };
        assert_eq!(names(input), ["a.id"]);
        let LogicalPlan::Join { right, .. } = input.as_ref() else { panic!() };
        assert_eq!(names(right), ["b.aid"]);
    }

    #[test]
    fn a_side_without_needed_columns_keeps_its_cheapest() {
        let cross = Arc::new(LogicalPlan::Join {
            kind: JoinKind::Inner,
            left: a(),
            right: b(),
            on: vec![],
            filter: None,
            nulls_equal: false,
            schema: Arc::new(a().schema().join(&b().schema()).unwrap()),
            held: [None, None],
        });
        let plan = project(vec![col("a.name")], cross);
        let pruned = prune(&plan).unwrap();
        let LogicalPlan::Project { input, .. } = pruned.as_ref() else { panic!() };
        assert_eq!(names(input), ["a.name", "b.t"]);
    }

    #[test]
    fn distinct_and_streams_keep_every_column() {
        let j = join(JoinKind::Inner, a(), b(), (col("a.id"), col("b.aid")));
        let plan = Arc::new(LogicalPlan::Distinct { input: j.clone() });
        let pruned = prune(&plan).unwrap();
        assert_eq!(explain(&pruned), explain(&plan));
        let plan = Arc::new(LogicalPlan::ToStream { op: R2S::Istream, input: j });
        assert_eq!(explain(&prune(&plan).unwrap()), explain(&plan));
    }

    #[test]
    fn residual_filter_and_filters_above_keep_their_columns() {
        let mut j = join(JoinKind::Left, a(), b(), (col("a.id"), col("b.aid")));
        if let LogicalPlan::Join { filter, .. } = Arc::make_mut(&mut j) {
            *filter = Some(col("b.t").gt(col("a.t")));
        }
        let f = Arc::new(LogicalPlan::Filter { predicate: col("a.extra").eq(lit("x")), input: j });
        let plan = project(vec![col("b.price")], f);
        let pruned = prune(&plan).unwrap();
        let LogicalPlan::Project { input: f, .. } = pruned.as_ref() else { panic!() };
        assert_eq!(names(f), ["a.t", "a.id", "a.extra", "b.t", "b.aid", "b.price"]);
    }

    #[test]
    fn a_join_over_a_join_gets_no_project_but_its_inputs_do() {
        let c =
            scan("c", &[("t", DataType::Int64), ("bid", DataType::Int64), ("z", DataType::Utf8)]);
        let ab = join(JoinKind::Inner, a(), b(), (col("a.id"), col("b.aid")));
        let abc = join(JoinKind::Inner, ab, c, (col("b.price"), col("c.bid")));
        let plan = project(vec![col("a.name"), col("c.z")], abc);
        let pruned = prune(&plan).unwrap();
        let LogicalPlan::Project { input: abc, .. } = pruned.as_ref() else { panic!() };
        let LogicalPlan::Join { left: ab, right: c, .. } = abc.as_ref() else { panic!() };
        assert!(matches!(ab.as_ref(), LogicalPlan::Join { .. }));
        // The lower join's keys a.id and b.aid ride along; a.t, a.extra and b.t do not.
        assert_eq!(names(ab), ["a.id", "a.name", "b.aid", "b.price"]);
        assert_eq!(names(c), ["c.bid", "c.z"]);
        assert_eq!(names(abc), ["a.id", "a.name", "b.aid", "b.price", "c.bid", "c.z"]);
    }

    #[test]
    fn unread_plain_columns_go_computed_ones_stay_and_projects_merge() {
        let j = join(JoinKind::Inner, a(), b(), (col("a.id"), col("b.aid")));
        let in_schema = j.schema();
        let inner_exprs = vec![
            col("a.name"),
            lit(1i64).alias("one"),
            (col("b.price") + lit(1i64)).alias("p1"),
            col("a.extra"),
        ];
        let mut fields: Vec<_> = ["a.name"]
            .iter()
            .map(|n| {
                let i = in_schema.index_of_column(&Column::from_qualified_name(*n)).unwrap();
                let (q, f) = in_schema.qualified_field(i);
                (q.cloned(), f.clone())
            })
            .collect();
        fields.push((None, Arc::new(Field::new("one", DataType::Int64, false))));
        fields.push((None, Arc::new(Field::new("p1", DataType::Int64, true))));
        fields.push((
            Some(TableReference::bare("a")),
            Arc::new(Field::new("extra", DataType::Utf8, true)),
        ));
        let inner = Arc::new(LogicalPlan::Project {
            exprs: inner_exprs,
            input: j,
            schema: Arc::new(DFSchema::new_with_metadata(fields, Default::default()).unwrap()),
        });
        // Reads a.name only: "one" and a.extra go, p1 (computed) stays and is evaluated.
        let plan = project(vec![col("a.name")], inner.clone());
        let pruned = prune(&plan).unwrap();
        let LogicalPlan::Project { input: inner2, .. } = pruned.as_ref() else { panic!() };
        assert_eq!(names(inner2), ["a.name", "p1"]);
        let LogicalPlan::Project { input: j2, .. } = inner2.as_ref() else { panic!() };
        assert_eq!(names(j2), ["a.id", "a.name", "b.aid", "b.price"]);
        // Reads a.name and p1: the two Projects become one.
        let plan = project(vec![col("p1"), col("a.name")], inner);
        let pruned = prune(&plan).unwrap();
        assert_eq!(names(&pruned), ["p1", "a.name"]);
        let LogicalPlan::Project { exprs, input, .. } = pruned.as_ref() else { panic!() };
        assert_eq!(exprs[0].to_string(), "b.price + Int64(1) AS p1");
        assert!(matches!(input.as_ref(), LogicalPlan::Join { .. }));
    }

    #[test]
    fn a_plan_without_joins_is_unchanged() {
        let plan = project(vec![col("a.name")], a());
        assert!(Arc::ptr_eq(&prune(&plan).unwrap(), &plan));
    }
}
