//! Aggregates per TUMBLE/HOP/CUMULATE window, computed over the plain window with the bounds
//! added after.
//!
//! `TUMBLE(TABLE s, DESCRIPTOR(ts), T)` is `s [RANGE T SLIDE T]` with two more columns,
//! `window_start` and `window_end`, the bounds of the window current at each instant. Every row
//! of the windowed relation carries the same bounds at an instant, and they change for all rows
//! at once when the window moves: −(every row, old bounds) +(every row still inside, new
//! bounds). An aggregate grouped by those columns therefore sees each element retracted and
//! inserted once per window it is in (`size / slide` times for `HOP`), where the same aggregate
//! over the plain window sees it enter once and leave once.
//!
//! `CUMULATE(TABLE s, DESCRIPTOR(ts), step, size)` is the same with a cumulating window: its
//! windows [k·size, k·size + j·step) grow one slice of `step` ticks at a time, so with the
//! bounds on every row an element is retracted and inserted once per window it is in (up to
//! `size / step` times); over the plain cumulating window it enters once (at the end of its
//! slice) and leaves once (when the next period's first window becomes current). The rewrite
//! below is the same for both kinds of window.
//!
//! [`lift_window_bounds`] rewrites
//!
//! ```text
//! Aggregate(group: K ∪ {window_start, window_end}, aggs)
//!   Filter / Project / Rename ...            (not reading the bounds, but to pass them on)
//!     Window [RANGE T SLIDE S] with window_start, window_end
//! ```
//!
//! into
//!
//! ```text
//! Project (the aggregate's columns, in its order)
//!   WindowBounds [RANGE T SLIDE S]            (appends the current bounds)
//!     Aggregate(group: K, aggs)
//!       Filter / Project / Rename ...          (without the bounds)
//!         Window [RANGE T SLIDE S]
//! ```
//!
//! Exact, never a change of meaning: with W(τ) the window's elements at τ and b(τ) its bounds,
//! the windowed relation is W(τ) × {b(τ)}; filters, projections and renames that do not read
//! the bounds commute with appending them, and grouping W(τ) × {b(τ)} by K plus the bounds
//! gives the groups of W(τ) by K, each with b(τ) appended. A group exists only while it has
//! rows, so with no key but the bounds the lifted aggregate groups by a constant (an empty
//! window has no row, where a scalar aggregate would have one). Grouping by `window_start`
//! alone is the same as by both bounds (one window at a time), so either or both may be keys.
//!
//! The plan is left as it is when anything else reads the bounds (a filter on `window_end`,
//! an aggregate's argument, a key computed from them), when something other than filters,
//! projections and renames stands between the aggregate and the window, or for sketch
//! aggregates (which apply windows themselves).
//!
//! Under `ISTREAM` (the usual way to read such an aggregate: each window's rows once, when it
//! closes) the bounds' retractions are wasted work: when the window moves, every row leaves
//! with the old bounds and the rows still there come back with the new ones, and if a bound
//! that changed reaches the ISTREAM as a column, no row leaving can cancel a row entering, so
//! the ISTREAM drops every one of them. When only filters, renames and projections stand
//! between the ISTREAM and the bounds, and they pass at least one bound on as a plain column,
//! the `WindowBounds` node is told which (`istream_sees`), and at a move where one of those
//! changes it leaves the retractions out. The stream is the same; the work of a move halves.

use std::sync::Arc;

use datafusion_common::{Column, DFSchema, DFSchemaRef, ScalarValue, TableReference};
use datafusion_expr::Expr;
use weir_common::{Result, WeirError};

use crate::plan::{LogicalPlan, WindowSpec, R2S};
use crate::prune::{expr_columns, select_fields};

type Cols = std::collections::BTreeSet<usize>;

/// `plan` with every aggregate per TUMBLE/HOP window that can be lifted rewritten (see the
/// module docs).
pub fn lift_window_bounds(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    let node = plan.map_inputs(&mut |i| lift_window_bounds(i))?;
    if let LogicalPlan::Aggregate { group, aggs, input, schema } = &node {
        if let Some(lifted) = lift(group, aggs, input, schema)? {
            return Ok(lifted);
        }
    }
    Ok(Arc::new(node))
}

/// `plan` with every `WindowBounds` read by an `ISTREAM` through filters, renames and
/// projections told which bounds the ISTREAM sees (see the module docs). Run after
/// [`lift_window_bounds`], on the plan with its relation-to-stream operator.
pub fn mark_istream_bounds(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    if let LogicalPlan::ToStream { op: R2S::Istream, input } = plan.as_ref() {
        if let Some(bounds) = reaching(input) {
            let mut seen = [false; 2];
            for (_, w) in &bounds.at {
                seen[*w] = true;
            }
            let input = seen_by_istream(input, seen)?;
            return Ok(Arc::new(LogicalPlan::ToStream { op: R2S::Istream, input }));
        }
    }
    Ok(Arc::new(plan.map_inputs(&mut |i| mark_istream_bounds(i))?))
}

/// Where the bounds of a [`LogicalPlan::WindowBounds`] below `plan` sit in its output, if
/// only filters, renames and projections stand between them and at least one bound is passed
/// on as a plain column.
fn reaching(plan: &LogicalPlan) -> Option<Bounds> {
    let bounds = match plan {
        LogicalPlan::WindowBounds { schema, .. } => {
            let n = schema.fields().len();
            Bounds { at: vec![(n.checked_sub(2)?, 0), (n - 1, 1)] }
        }
        LogicalPlan::Filter { input, .. } | LogicalPlan::Rename { input, .. } => reaching(input)?,
        LogicalPlan::Project { exprs, input, .. } => {
            let below = reaching(input)?;
            let in_schema = input.schema();
            let at = exprs
                .iter()
                .enumerate()
                .filter_map(|(i, e)| Some((i, bound_ref(e, &in_schema, &below)?)))
                .collect();
            Bounds { at }
        }
        _ => return None,
    };
    (!bounds.at.is_empty()).then_some(bounds)
}

/// `plan` (a chain that [`reaching`] accepted) with its window bounds told which bounds the
/// ISTREAM above sees.
fn seen_by_istream(plan: &Arc<LogicalPlan>, seen: [bool; 2]) -> Result<Arc<LogicalPlan>> {
    Ok(match plan.as_ref() {
        LogicalPlan::WindowBounds { spec, input, schema, .. } => {
            Arc::new(LogicalPlan::WindowBounds {
                spec: spec.clone(),
                input: input.clone(),
                schema: schema.clone(),
                istream_sees: seen,
            })
        }
        LogicalPlan::Filter { .. } | LogicalPlan::Rename { .. } | LogicalPlan::Project { .. } => {
            Arc::new(plan.map_inputs(&mut |i| seen_by_istream(i, seen))?)
        }
        _ => plan.clone(),
    })
}

/// The positions of the two bounds columns in a node's output, if both are passed on.
#[derive(Debug, Clone, Default)]
struct Bounds {
    /// Output positions holding `window_start` (0) or `window_end` (1).
    at: Vec<(usize, usize)>,
}

impl Bounds {
    fn which(&self, pos: usize) -> Option<usize> {
        self.at.iter().find(|(p, _)| *p == pos).map(|(_, w)| *w)
    }
    fn positions(&self) -> Cols {
        self.at.iter().map(|(p, _)| *p).collect()
    }
}

/// The bounds column (0 start, 1 end) that `e` is a plain reference to, if it is one.
fn bound_ref(e: &Expr, schema: &DFSchema, bounds: &Bounds) -> Option<usize> {
    let inner = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    let Expr::Column(_) = inner else { return None };
    let mut cols = Cols::new();
    expr_columns(inner, schema, &mut cols);
    match cols.iter().copied().collect::<Vec<_>>().as_slice() {
        [p] => bounds.which(*p),
        _ => None,
    }
}

/// Whether `e` reads none of the bounds columns.
fn reads_no_bound(e: &Expr, schema: &DFSchema, bounds: &Bounds) -> bool {
    let mut cols = Cols::new();
    expr_columns(e, schema, &mut cols);
    cols.is_disjoint(&bounds.positions())
}

/// A chain under the aggregate rewritten without the bounds columns: the new node, and where
/// the bounds sat in the old node's output. `None` if the chain cannot be lifted.
struct Lifted {
    plan: Arc<LogicalPlan>,
    bounds: Bounds,
    /// The window (`[RANGE T SLIDE S]` or cumulating).
    spec: WindowSpec,
    /// The window's two bounds fields (qualifier and field), for the rebuilt output.
    fields: Vec<(Option<TableReference>, Arc<arrow::datatypes::Field>)>,
}

fn without(schema: &DFSchemaRef, drop: &Cols) -> Result<DFSchemaRef> {
    let keep: Vec<usize> = (0..schema.fields().len()).filter(|i| !drop.contains(i)).collect();
    select_fields(schema, &keep)
}

fn lift_chain(plan: &Arc<LogicalPlan>) -> Result<Option<Lifted>> {
    Ok(match plan.as_ref() {
        LogicalPlan::Window {
            spec: spec @ (WindowSpec::RangeSlide { .. } | WindowSpec::Cumulate { .. }),
            input,
            schema,
            bounds_columns: true,
        } => {
            let n = schema.fields().len();
            if n < 2 {
                return Err(WeirError::internal("a window with bounds columns has no bounds"));
            }
            let bounds = Bounds { at: vec![(n - 2, 0), (n - 1, 1)] };
            let fields = (n - 2..n)
                .map(|i| {
                    let (q, f) = schema.qualified_field(i);
                    (q.cloned(), f.clone())
                })
                .collect();
            let plain = LogicalPlan::Window {
                spec: spec.clone(),
                input: input.clone(),
                schema: without(schema, &bounds.positions())?,
                bounds_columns: false,
            };
            Some(Lifted { plan: Arc::new(plain), bounds, spec: spec.clone(), fields })
        }
        LogicalPlan::Filter { predicate, input } => {
            let Some(l) = lift_chain(input)? else { return Ok(None) };
            if !reads_no_bound(predicate, &input.schema(), &l.bounds) {
                return Ok(None);
            }
            let plan =
                Arc::new(LogicalPlan::Filter { predicate: predicate.clone(), input: l.plan });
            Some(Lifted { plan, ..l })
        }
        LogicalPlan::Rename { input, schema } => {
            let Some(l) = lift_chain(input)? else { return Ok(None) };
            let schema = without(schema, &l.bounds.positions())?;
            Some(Lifted { plan: Arc::new(LogicalPlan::Rename { input: l.plan, schema }), ..l })
        }
        LogicalPlan::Project { exprs, input, schema } => {
            let Some(l) = lift_chain(input)? else { return Ok(None) };
            let in_schema = input.schema();
            let mut at = Vec::new();
            let mut kept = Vec::new();
            for (i, e) in exprs.iter().enumerate() {
                if let Some(w) = bound_ref(e, &in_schema, &l.bounds) {
                    at.push((i, w));
                } else if reads_no_bound(e, &in_schema, &l.bounds) {
                    kept.push(i);
                } else {
                    return Ok(None);
                }
            }
            let bounds = Bounds { at };
            let schema = without(schema, &bounds.positions())?;
            let exprs = kept.iter().map(|&i| exprs[i].clone()).collect();
            let plan = Arc::new(LogicalPlan::Project { exprs, input: l.plan, schema });
            Some(Lifted { plan, bounds, ..l })
        }
        _ => None,
    })
}

/// The rewrite of one aggregate (see the module docs), if it applies.
fn lift(
    group: &[Expr],
    aggs: &[crate::plan::AggCall],
    input: &Arc<LogicalPlan>,
    schema: &DFSchemaRef,
) -> Result<Option<Arc<LogicalPlan>>> {
    if aggs.iter().any(|a| a.func.is_sketch()) {
        return Ok(None);
    }
    let Some(l) = lift_chain(input)? else { return Ok(None) };
    let in_schema = input.schema();
    // Each group key: a bounds column (0/1) or a key kept.
    let mut keys: Vec<Option<usize>> = Vec::with_capacity(group.len());
    for g in group {
        if let Some(w) = bound_ref(g, &in_schema, &l.bounds) {
            keys.push(Some(w));
        } else if reads_no_bound(g, &in_schema, &l.bounds) {
            keys.push(None);
        } else {
            return Ok(None);
        }
    }
    if keys.iter().all(Option::is_none) {
        return Ok(None); // not grouped by the window
    }
    if !aggs.iter().all(|a| a.exprs().all(|e| reads_no_bound(e, &in_schema, &l.bounds))) {
        return Ok(None);
    }
    // The lifted aggregate: the kept keys (or a constant), then the aggregates.
    let kept: Vec<usize> = (0..group.len()).filter(|&i| keys[i].is_none()).collect();
    let bound_keys: Cols = (0..group.len()).filter(|&i| keys[i].is_some()).collect();
    let mut agg_schema = without(schema, &bound_keys)?;
    let mut new_group: Vec<Expr> = kept.iter().map(|&i| group[i].clone()).collect();
    let constant_key = new_group.is_empty();
    if constant_key {
        new_group.push(Expr::Literal(ScalarValue::Boolean(Some(true)), None).alias("__window"));
        let mut fields = vec![(
            None,
            Arc::new(arrow::datatypes::Field::new(
                "__window",
                arrow::datatypes::DataType::Boolean,
                false,
            )),
        )];
        fields.extend(agg_schema.iter().map(|(q, f)| (q.cloned(), f.clone())).collect::<Vec<_>>());
        agg_schema = Arc::new(
            DFSchema::new_with_metadata(fields, Default::default())
                .map_err(|e| WeirError::internal(format!("window bounds: {e}")))?,
        );
    }
    let n_agg_cols = agg_schema.fields().len();
    let aggregate = Arc::new(LogicalPlan::Aggregate {
        group: new_group,
        aggs: aggs.to_vec(),
        input: l.plan,
        schema: agg_schema.clone(),
    });
    // WindowBounds appends the bounds, under names of their own (nothing else below may be
    // called so: the lifted aggregate's columns are its keys and aggregates).
    let mut fields: Vec<(Option<TableReference>, Arc<arrow::datatypes::Field>)> =
        agg_schema.iter().map(|(q, f)| (q.cloned(), f.clone())).collect();
    for (i, (_, f)) in l.fields.iter().enumerate() {
        let name = ["__window_start", "__window_end"][i];
        fields.push((None, Arc::new(f.as_ref().clone().with_name(name))));
    }
    let bounds_schema = Arc::new(
        DFSchema::new_with_metadata(fields, Default::default())
            .map_err(|e| WeirError::internal(format!("window bounds: {e}")))?,
    );
    let bounded = Arc::new(LogicalPlan::WindowBounds {
        spec: l.spec,
        input: aggregate,
        schema: bounds_schema.clone(),
        istream_sees: [false; 2],
    });
    // The aggregate's columns in their order: keys (bounds or kept), then aggregates.
    let col = |i: usize| {
        let (q, f) = bounds_schema.qualified_field(i);
        Expr::Column(Column::new(q.cloned(), f.name()))
    };
    let offset = usize::from(constant_key);
    let mut exprs = Vec::with_capacity(schema.fields().len());
    let mut next_kept = 0;
    for k in &keys {
        match k {
            Some(w) => exprs.push(col(n_agg_cols + w)),
            None => {
                exprs.push(col(offset + next_kept));
                next_kept += 1;
            }
        }
    }
    for a in 0..aggs.len() {
        exprs.push(col(offset + kept.len() + a));
    }
    Ok(Some(Arc::new(LogicalPlan::Project { exprs, input: bounded, schema: schema.clone() })))
}
