//! Compiling a [`LogicalPlan`] into a [`Graph`]: one node per distinct plan node (a node the plan
//! shares, once), inputs first.
//!
//! Schemas in the executor are the plan's schemas with every field nullable: the planner's
//! nullability is a guess that data (outer joins, aggregates over empty groups) may contradict.
//!
//! The correlated subqueries that Apply evaluates row by row are compiled here too, when Apply
//! evaluates them: the compiler hands Apply [`eval_subquery`] as it builds it, so the
//! operators never call back into the compiler.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::DFSchema;
use datafusion_expr::ExprSchemable;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{JoinKind, LogicalPlan, RankMode, WindowSpec};

use crate::consolidate::consolidate;
use crate::expr::ScalarExpr;
use crate::graph::Graph;
use crate::operator::{EvalCtx, Operator};
use crate::ops::aggregate::panes::PaneAggregate;
use crate::ops::aggregate::windows::WindowAggregate;
use crate::ops::aggregate::{AggSpec, Aggregate};
use crate::ops::apply::{Apply, SubqueryEval};
use crate::ops::distinct::Distinct;
use crate::ops::filter::Filter;
use crate::ops::join::held::Held;
use crate::ops::join::might_contain::MightContain;
use crate::ops::join::temporal::TemporalJoin;
use crate::ops::join::{Join, JoinSide};
use crate::ops::linear::Linear;
use crate::ops::over::agg::{OverAgg, OverAggSpec};
use crate::ops::over::dedup::Dedup;
use crate::ops::over::rank::Ranking;
use crate::ops::over::OverKeys;
use crate::ops::project::Project;
use crate::ops::r2s::ToStream;
use crate::ops::rename::Rename;
use crate::ops::scan::Scan;
use crate::ops::sketch_aggregate::SketchAggregate;
use crate::ops::topk::{SortKey, TopK};
use crate::ops::union::UnionAll;
use crate::ops::values::Values;
use crate::ops::window_bounds::WindowBounds;
use crate::ops::window_dedup::DedupWindow;
use crate::ops::window_rows::RowsWindow;
use crate::ops::window_sample::SampleWindow;
use crate::ops::window_sample_slide::SlideSampleWindow;
use crate::ops::window_session::SessionWindow;
use crate::ops::window_time::{TimeBounds, TimeWindow};
use crate::row::RowCodec;
use weir_plan::interval::expiry_bounds;

/// The executor's (all-nullable) Arrow schema for a plan schema.
pub fn exec_schema(schema: &DFSchema) -> SchemaRef {
    let fields: Vec<Field> =
        schema.fields().iter().map(|f| Field::new(f.name(), f.data_type().clone(), true)).collect();
    Arc::new(Schema::new(fields))
}

pub(crate) fn expr_type(e: &datafusion_expr::Expr, schema: &DFSchema) -> Result<DataType> {
    e.get_type(schema).map_err(|err| WeirError::internal(format!("type of {e}: {err}")))
}

/// Compiles `plan` into a graph: one node per distinct plan node, a node the plan shares
/// (the same `Arc` under several parents: [`weir_plan::share_subplans`]) once, read by each
/// parent. The nodes are added in [`weir_plan::post_order`]'s order.
pub fn compile(plan: &LogicalPlan) -> Result<Graph> {
    let mut build = Build::default();
    add(plan, &mut build)?;
    Ok(build.flow)
}

/// The graph being built, and per plan node already added (by address) its node.
#[derive(Default)]
struct Build {
    flow: Graph,
    done: HashMap<*const LogicalPlan, usize>,
    /// Plans made while compiling (a sketch aggregate's rows), kept alive to the end so that
    /// no address in `done` is reused.
    made: Vec<Arc<LogicalPlan>>,
}

/// Adds the nodes of `plan` to `flow`, its inputs' first (in [`LogicalPlan::inputs`] order),
/// and returns the index of its own node; a node added before is not added again. A deep plan
/// (a 64-way join) recurses through this small stack frame only, not through the large one
/// that [`build`] needs.
fn add(plan: &LogicalPlan, b: &mut Build) -> Result<usize> {
    if let Some(node) = b.added(plan) {
        return Ok(node);
    }
    if has_sketch(plan) {
        return add_sketch_aggregate(plan, b);
    }
    let mut inputs = Vec::new();
    for input in plan.inputs() {
        inputs.push(add(input, b)?);
    }
    b.build_node(inputs, plan)
}

impl Build {
    /// `plan`'s node, if it was added. Its own function, so that [`add`]'s stack frame stays
    /// small.
    #[inline(never)]
    fn added(&self, plan: &LogicalPlan) -> Option<usize> {
        self.done.get(&(plan as *const LogicalPlan)).copied()
    }

    /// Builds `plan`'s operator and adds it as its node. Its own function, so that [`add`]'s
    /// stack frame stays small.
    #[inline(never)]
    fn build_node(&mut self, inputs: Vec<usize>, plan: &LogicalPlan) -> Result<usize> {
        let op = build(plan)?;
        self.add_node(op, inputs, plan)
    }

    /// Adds `op` as `plan`'s node, named after its EXPLAIN line.
    fn add_node(
        &mut self,
        op: Box<dyn Operator>,
        inputs: Vec<usize>,
        plan: &LogicalPlan,
    ) -> Result<usize> {
        let node = self.flow.add(op, inputs)?;
        self.flow.set_label(node, weir_plan::explain::label(plan));
        self.done.insert(plan as *const LogicalPlan, node);
        Ok(node)
    }
}

/// Whether `plan` is an aggregate with a sketch (its own function: see [`add_sketch_aggregate`]).
#[inline(never)]
fn has_sketch(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Aggregate { aggs, .. } if aggs.iter().any(|a| a.func.is_sketch()))
}

/// Adds an aggregate with a sketch: a [`SketchAggregate`] over the plan of its rows (the
/// window, if any, is applied by the aggregate itself, slice by slice). Its own function, so
/// that [`add`]'s stack frame stays small.
#[inline(never)]
fn add_sketch_aggregate(plan: &LogicalPlan, b: &mut Build) -> Result<usize> {
    let LogicalPlan::Aggregate { group, aggs, input, .. } = plan else {
        return Err(WeirError::internal("a sketch aggregate that is not an aggregate"));
    };
    let (window, rows) = weir_plan::sketch_input(input).ok_or_else(|| {
        WeirError::internal("a sketch aggregate over an input that can delete rows")
    })?;
    let in_schema = input.schema();
    let keys = group.iter().map(|e| ScalarExpr::compile(e, &in_schema)).collect::<Result<_>>()?;
    let key_types = group.iter().map(|e| expr_type(e, &in_schema)).collect::<Result<_>>()?;
    let specs = aggs.iter().map(|a| AggSpec::compile(a, &in_schema)).collect::<Result<_>>()?;
    let op = SketchAggregate::new(window, keys, key_types, specs, exec_schema(&plan.schema()))?;
    let input = add(&rows, b)?;
    b.made.push(rows);
    b.add_node(Box::new(op), vec![input], plan)
}

/// Apply's [`SubqueryEval`]: compiles a bound subquery and evaluates it at `t`, consolidated.
fn eval_subquery(plan: &LogicalPlan, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
    let mut flow = compile(plan)?;
    let schema = exec_schema(&plan.schema());
    let out = flow.eval(t, t, ctx)?;
    consolidate(&RowCodec::for_schema(&schema)?, &schema, &out, t)
}

/// A session window's operator (its own function, so that [`build`]'s frame stays small).
#[inline(never)]
fn session_window(
    gap: Time,
    by: &[usize],
    bounds_columns: bool,
    schema: SchemaRef,
) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SessionWindow::new(gap, by.to_vec(), bounds_columns, schema)?))
}

/// The bounds of a window that TUMBLE/HOP/CUMULATE's bounds columns can follow.
#[inline(never)]
fn time_bounds(spec: &WindowSpec) -> Result<TimeBounds> {
    match spec {
        WindowSpec::RangeSlide { range, slide, offset } => {
            if *range <= 0 || *slide <= 0 {
                return Err(WeirError::internal("a sliding window out of shape"));
            }
            Ok(TimeBounds::Slide {
                range: *range,
                slide: *slide,
                offset: offset.rem_euclid(*slide),
            })
        }
        WindowSpec::Cumulate { step, size, offset } => {
            if *step <= 0 || *size <= 0 || size % step != 0 {
                return Err(WeirError::internal("a cumulating window out of shape"));
            }
            Ok(TimeBounds::Cumulate { step: *step, size: *size, offset: offset.rem_euclid(*size) })
        }
        _ => Err(WeirError::internal("window bounds columns without RANGE ... SLIDE or CUMULATE")),
    }
}

/// A time window whose rows carry `window_start` and `window_end` (TUMBLE/HOP/CUMULATE).
#[inline(never)]
fn bounds_time_window(spec: &WindowSpec, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    Ok(Box::new(TimeWindow::with_bounds_columns(time_bounds(spec)?, schema)))
}

/// A time window without bounds columns for `spec` (a cumulating window's plain form).
#[inline(never)]
fn plain_time_window(spec: &WindowSpec, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    Ok(Box::new(TimeWindow::new(time_bounds(spec)?, schema)))
}

/// A [`WindowBounds`] operator for `spec` (its own function, so that [`build`]'s frame stays
/// small).
#[inline(never)]
fn window_bounds(
    spec: &WindowSpec,
    istream_sees: [bool; 2],
    schema: SchemaRef,
) -> Result<Box<dyn Operator>> {
    Ok(Box::new(match time_bounds(spec)? {
        b @ (TimeBounds::Cumulate { .. } | TimeBounds::Slide { .. }) => {
            WindowBounds::of(b, schema)?.seen_by_istream(istream_sees)
        }
        _ => return Err(WeirError::internal("window bounds of a window that does not move")),
    }))
}

/// A `[DEDUPLICATE ...]` or `[SAMPLE ...]` window (its own function, so that [`build`]'s frame
/// stays small).
#[inline(never)]
fn sketch_window(spec: &WindowSpec, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    Ok(match spec {
        WindowSpec::Deduplicate { by, capacity, error } => {
            Box::new(DedupWindow::new(by.clone(), *capacity, error.get(), schema)?)
        }
        WindowSpec::Sample { rows, seed, over: None } => {
            Box::new(SampleWindow::new(*rows, *seed, schema)?)
        }
        WindowSpec::Sample { rows, seed, over: Some(o) } => {
            Box::new(SlideSampleWindow::new(*rows, *seed, *o, schema)?)
        }
        _ => return Err(WeirError::internal("a sketch window of another kind")),
    })
}

/// A window without bounds columns (its own function, so that [`build`]'s frame stays small:
/// [`add`] recurses through a plan's depth, and `build` runs on top at the deepest node).
#[inline(never)]
fn window(spec: &WindowSpec, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    Ok(match spec {
        WindowSpec::Unbounded => Box::new(TimeWindow::new(TimeBounds::Unbounded, schema)),
        WindowSpec::Now => Box::new(TimeWindow::new(TimeBounds::Range(1), schema)),
        WindowSpec::Range(r) => Box::new(TimeWindow::new(TimeBounds::Range(*r), schema)),
        WindowSpec::RangeSlide { .. } => plain_time_window(spec, schema)?,
        WindowSpec::Rows(n) => Box::new(RowsWindow::new(vec![], *n, schema)?),
        WindowSpec::PartitionRows { by, rows } => {
            Box::new(RowsWindow::new(by.clone(), *rows, schema)?)
        }
        WindowSpec::Session { .. } => {
            return Err(WeirError::internal("a session window missed its own arm"))
        }
        WindowSpec::Cumulate { .. } => plain_time_window(spec, schema)?,
        WindowSpec::Deduplicate { .. } | WindowSpec::Sample { .. } => sketch_window(spec, schema)?,
    })
}

/// A join's operator: [`Join`], [`TemporalJoin`] for [`JoinKind::Temporal`], or
/// [`MightContain`] for [`JoinKind::MightContain`]. Apart from
/// [`build`], so that its locals do not enlarge `build`'s frame (see [`add`]).
#[inline(never)]
fn build_join(plan: &LogicalPlan, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    let LogicalPlan::Join { kind, left, right, on, filter, nulls_equal, held, .. } = plan else {
        return Err(WeirError::internal("build_join on another node"));
    };
    let (plan_left, plan_right, plan_filter) = (left.clone(), right.clone(), filter.clone());
    // A held window's side is its rows as the join sees them (with its bounds, if it has any).
    let side_schema = |input: &LogicalPlan, held: &Option<weir_plan::HeldWindow>| {
        held.as_ref().map_or_else(|| input.schema(), |h| h.schema.clone())
    };
    let (ls, rs) = (side_schema(left, &held[0]), side_schema(right, &held[1]));
    let mut key_types = Vec::new();
    let mut lkeys = Vec::new();
    let mut rkeys = Vec::new();
    for (l, r) in on {
        key_types.push(expr_type(l, &ls)?);
        lkeys.push(ScalarExpr::compile(l, &ls)?);
        rkeys.push(ScalarExpr::compile(r, &rs)?);
    }
    let lschema = exec_schema(&ls);
    let rschema = exec_schema(&rs);
    // The residual predicate sees both sides' columns, whatever the join outputs
    // (a semi join outputs the left side only).
    let both = ls.join(&rs).map_err(|e| WeirError::internal(e.to_string()))?;
    let filter = match filter {
        Some(f) => Some(ScalarExpr::compile(f, &both)?),
        None => None,
    };
    let left =
        JoinSide { keys: lkeys, row_codec: RowCodec::for_schema(&lschema)?, schema: lschema };
    let right =
        JoinSide { keys: rkeys, row_codec: RowCodec::for_schema(&rschema)?, schema: rschema };
    let key_codec = RowCodec::new(key_types)?;
    Ok(match kind {
        JoinKind::Temporal { outer } => {
            Box::new(TemporalJoin::new(*outer, left, right, key_codec, filter, schema))
        }
        JoinKind::MightContain { test, capacity, error } => {
            if filter.is_some() {
                return Err(WeirError::internal("MIGHT_CONTAIN with a residual condition"));
            }
            Box::new(MightContain::new(*test, *capacity, *error, left, right, key_codec, schema)?)
        }
        _ if held.iter().any(Option::is_some) => {
            if *kind != JoinKind::Inner {
                return Err(WeirError::internal(format!("a {kind} join holding a window")));
            }
            let held = held.each_ref().map(|h| match h {
                Some(h) => match h.spec {
                    WindowSpec::RangeSlide { range, slide, offset } => {
                        let held = Held::new(range, slide, offset)?;
                        Ok(Some(held.with_bounds_columns(h.bounds_columns)))
                    }
                    ref spec => {
                        Err(WeirError::internal(format!("a join holding a {spec:?} window")))
                    }
                },
                None => Ok(None),
            });
            let [lh, rh] = held;
            let join = Join::new(*kind, *nulls_equal, left, right, key_codec, filter, schema);
            Box::new(join.with_held([lh?, rh?]))
        }
        _ => {
            // An interval join: rows its time condition rules out for good leave its state.
            let [lb, rb] = expiry_bounds(*kind, &plan_left, &plan_right, plan_filter.as_ref());
            let lb = lb.map(|e| ScalarExpr::compile(&e, &ls)).transpose()?;
            let rb = rb.map(|e| ScalarExpr::compile(&e, &rs)).transpose()?;
            let join = Join::new(*kind, *nulls_equal, left, right, key_codec, filter, schema);
            Box::new(join.with_expiry(lb, rb))
        }
    })
}

/// The operator for one plan node (its inputs are the nodes of [`LogicalPlan::inputs`]).
#[inline(never)]
fn build(plan: &LogicalPlan) -> Result<Box<dyn Operator>> {
    let schema = exec_schema(&plan.schema());
    Ok(match plan {
        LogicalPlan::StreamScan { name, .. } | LogicalPlan::TableScan { name, .. } => {
            Box::new(Scan::new(name.clone(), schema))
        }
        LogicalPlan::Window { spec: WindowSpec::Session { gap, by }, bounds_columns, .. } => {
            session_window(*gap, by, *bounds_columns, schema)?
        }
        LogicalPlan::Window { spec, bounds_columns: true, .. } => bounds_time_window(spec, schema)?,
        LogicalPlan::WindowBounds { spec, istream_sees, .. } => {
            window_bounds(spec, *istream_sees, schema)?
        }
        LogicalPlan::Window { spec, .. } => window(spec, schema)?,
        LogicalPlan::TimeWindows { column, size, slide, .. } => Box::new(Linear::new(
            crate::ops::time_windows::TimeWindows::new(*column, *size, *slide, schema)?,
        )),
        LogicalPlan::Filter { predicate, input } => {
            let p = ScalarExpr::compile(predicate, &input.schema())?;
            Box::new(Linear::new(Filter::new(p)))
        }
        LogicalPlan::Project { exprs, input, .. } => {
            let in_schema = input.schema();
            let exprs =
                exprs.iter().map(|e| ScalarExpr::compile(e, &in_schema)).collect::<Result<_>>()?;
            Box::new(Linear::new(Project::new(exprs, schema)))
        }
        LogicalPlan::Join { .. } => build_join(plan, schema)?,
        LogicalPlan::Aggregate { group, aggs, input, .. } => {
            Box::new(grouped(group, aggs, input, schema)?.with_append_only(input.is_monotonic()))
        }
        LogicalPlan::PaneAggregate { .. } => pane_aggregate(plan, schema)?,
        LogicalPlan::WindowAggregate { .. } => window_aggregate(plan, schema)?,
        LogicalPlan::Distinct { .. } => Box::new(Distinct::new(schema)?),
        LogicalPlan::UnionAll { .. } => Box::new(UnionAll::new(schema)),
        LogicalPlan::Values { rows, schema: df } => {
            Box::new(Values::new(values_batch(rows, df)?, schema))
        }
        LogicalPlan::ToStream { op, input } => {
            Box::new(ToStream::new(*op, schema, input.sources())?)
        }
        LogicalPlan::Rename { .. } => Box::new(Linear::new(Rename::new(schema))),
        LogicalPlan::Apply { input, subqueries, .. } => {
            let evaluate: SubqueryEval = eval_subquery;
            Box::new(Apply::new(&input.schema(), subqueries, schema, evaluate)?)
        }
        LogicalPlan::TopK { order, skip, fetch, with_ties, input } => {
            let in_schema = input.schema();
            let keys = order
                .iter()
                .map(|o| {
                    Ok(SortKey {
                        expr: ScalarExpr::compile(&o.expr, &in_schema)?,
                        data_type: expr_type(&o.expr, &in_schema)?,
                        descending: !o.asc,
                        nulls_first: o.nulls_first,
                    })
                })
                .collect::<Result<_>>()?;
            Box::new(TopK::new(keys, *skip, *fetch, schema)?.with_ties(*with_ties))
        }
        LogicalPlan::OverAggregate { .. } => build_over_aggregate(plan, schema)?,
        LogicalPlan::OverRelation { .. } => crate::ops::over::frames::build(plan, schema)?,
        LogicalPlan::Ranking { partition_by, order_by, funcs, mode, input, .. } => {
            let in_schema = input.schema();
            let partition = partition_by
                .iter()
                .map(|e| Ok((ScalarExpr::compile(e, &in_schema)?, expr_type(e, &in_schema)?)))
                .collect::<Result<_>>()?;
            let order = order_by
                .iter()
                .map(|o| {
                    Ok(SortKey {
                        expr: ScalarExpr::compile(&o.expr, &in_schema)?,
                        data_type: expr_type(&o.expr, &in_schema)?,
                        descending: !o.asc,
                        nulls_first: o.nulls_first,
                    })
                })
                .collect::<Result<_>>()?;
            let keys = OverKeys::new(partition, order, exec_schema(&in_schema))?;
            match mode {
                RankMode::KeepFirst => Box::new(Dedup::new(keys, false, schema)),
                RankMode::KeepLast => Box::new(Dedup::new(keys, true, schema)),
                RankMode::Full | RankMode::Top { .. } => Box::new(
                    Ranking::new(keys, funcs.clone(), *mode, schema)?
                        .with_append_only(input.is_monotonic()),
                ),
            }
        }
    })
}

/// The [`Aggregate`] grouping `input` by `group` and computing `aggs`, output as `schema`
/// (its own function: `build`'s stack frame must stay small, see `add`).
#[inline(never)]
fn grouped(
    group: &[datafusion_expr::Expr],
    aggs: &[weir_plan::AggCall],
    input: &LogicalPlan,
    schema: SchemaRef,
) -> Result<Aggregate> {
    let in_schema = input.schema();
    let keys = group.iter().map(|e| ScalarExpr::compile(e, &in_schema)).collect::<Result<_>>()?;
    let key_types = group.iter().map(|e| expr_type(e, &in_schema)).collect::<Result<_>>()?;
    let specs = aggs.iter().map(|a| AggSpec::compile(a, &in_schema)).collect::<Result<_>>()?;
    Aggregate::new(keys, key_types, specs, schema)
}

/// The operator of a [`LogicalPlan::PaneAggregate`] (its own function, as [`grouped`]).
#[inline(never)]
fn pane_aggregate(plan: &LogicalPlan, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    let LogicalPlan::PaneAggregate { pane, offset, merged, window, group, aggs, input, .. } = plan
    else {
        return Err(WeirError::internal("pane aggregate expected"));
    };
    let groups = grouped(group, aggs, input, schema)?;
    let op = PaneAggregate::new(*pane, *offset, groups)?.merged(*merged);
    Ok(Box::new(op.under(time_bounds(window)?)))
}

/// The operator of a [`LogicalPlan::WindowAggregate`] (its own function, as [`grouped`]).
#[inline(never)]
fn window_aggregate(plan: &LogicalPlan, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    let LogicalPlan::WindowAggregate { spec, merge, input, .. } = plan else {
        return Err(WeirError::internal("window aggregate expected"));
    };
    let bounds = time_bounds(spec)?;
    let n = schema
        .fields()
        .len()
        .checked_sub(2)
        .ok_or_else(|| WeirError::internal("a window aggregate without its bounds columns"))?;
    let rows = Arc::new(arrow::datatypes::Schema::new(schema.fields()[..n].to_vec()));
    let groups = match merge {
        Some((group, aggs)) => Some(grouped(group, aggs, input, rows)?),
        None => None,
    };
    let data_schema = exec_schema(&input.schema());
    Ok(Box::new(WindowAggregate::new(bounds, groups, data_schema, schema)?))
}

/// The operator of a [`LogicalPlan::OverAggregate`] (its own function: `build`'s stack frame
/// must stay small, see `add`).
#[inline(never)]
fn build_over_aggregate(plan: &LogicalPlan, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    let LogicalPlan::OverAggregate { partition_by, order_by, frame, aggs, input, .. } = plan else {
        return Err(WeirError::internal("OVER aggregate expected"));
    };
    let [order_by] = order_by.as_slice() else {
        return Err(WeirError::internal("OVER aggregate with one ORDER BY term expected"));
    };

    let in_schema = input.schema();
    let partition = partition_by
        .iter()
        .map(|e| Ok((ScalarExpr::compile(e, &in_schema)?, expr_type(e, &in_schema)?)))
        .collect::<Result<_>>()?;
    let ts = ScalarExpr::compile(&order_by.expr, &in_schema)?;
    let order = vec![SortKey {
        expr: ts.clone(),
        data_type: expr_type(&order_by.expr, &in_schema)?,
        descending: !order_by.asc,
        nulls_first: order_by.nulls_first,
    }];
    let nin = in_schema.fields().len();
    let specs = aggs
        .iter()
        .enumerate()
        .map(|(j, a)| {
            let out_type = schema
                .fields()
                .get(nin + j)
                .map(|f| f.data_type().clone())
                .ok_or_else(|| WeirError::internal("OVER aggregate without a column"))?;
            Ok(OverAggSpec {
                func: a.func,
                arg: a.arg.as_ref().map(|e| ScalarExpr::compile(e, &in_schema)).transpose()?,
                default: a
                    .default
                    .as_ref()
                    .map(|e| ScalarExpr::compile(e, &in_schema))
                    .transpose()?,
                arg_type: match &a.arg {
                    Some(e) => expr_type(e, &in_schema)?,
                    None => DataType::Int64,
                },
                out_type,
            })
        })
        .collect::<Result<_>>()?;
    let keys = OverKeys::new(partition, order, exec_schema(&in_schema))?;
    Ok(Box::new(OverAgg::new(keys, ts, *frame, specs, schema)?))
}

/// Evaluates the constant rows of a VALUES node.
fn values_batch(rows: &[Vec<datafusion_expr::Expr>], df: &DFSchema) -> Result<RecordBatch> {
    let schema = exec_schema(df);
    let one = weir_common::change::empty_columns(1)?;
    let empty = DFSchema::empty();
    let mut columns: Vec<Vec<arrow::array::ArrayRef>> = vec![vec![]; schema.fields().len()];
    for row in rows {
        for (c, e) in row.iter().enumerate() {
            let ty = schema.field(c).data_type();
            columns[c].push(ScalarExpr::compile(e, &empty)?.eval_as(&one, ty)?);
        }
    }
    let cols = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(parts, f)| {
            if parts.is_empty() {
                return Ok(arrow::array::new_empty_array(f.data_type()));
            }
            let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
            arrow::compute::concat(&refs)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema,
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use weir_common::{ChangeBatch, TimeDomain};
    use weir_plan::LogicalPlan;

    use super::compile;
    use crate::operator::EvalCtx;

    /// A plan thousands of nodes deep compiles on a 1 MiB stack: the recursion goes through
    /// `add`'s small frame only (it took ~23 KB per level in debug builds when each node was
    /// built in the recursive function, so a 64-way join overflowed a 2 MiB test thread). It
    /// also runs there: the graph walks its nodes without recursing.
    const DEPTH: usize = 1000;

    #[test]
    fn deep_plans_compile_and_run_in_a_small_stack() {
        let schema = Schema::new(vec![Field::new("t", DataType::Int64, false)]);
        let schema = Arc::new(DFSchema::try_from_qualified_schema("s", &schema).unwrap());
        let mut plan = Arc::new(LogicalPlan::StreamScan {
            name: "s".into(),
            schema,
            time_column: 0,
            domain: TimeDomain::Ticks,
        });
        for _ in 0..DEPTH {
            plan = Arc::new(LogicalPlan::Distinct { input: plan });
        }
        let out = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || -> weir_common::Result<ChangeBatch> {
                let mut flow = compile(&plan)?;
                let t: ArrayRef = Arc::new(Int64Array::from(vec![7]));
                let fields = vec![Field::new("t", DataType::Int64, true)];
                let data = RecordBatch::try_new(Arc::new(Schema::new(fields)), vec![t])?;
                let mut ctx = EvalCtx::default();
                ctx.inputs.insert("s".into(), ChangeBatch::uniform(data, 7, 1));
                let out = flow.eval(7, 7, &ctx);
                // Dropping the plan recurses too; do it on this stack.
                drop(plan);
                out
            })
            .unwrap()
            .join()
            .expect("compiling or running overflowed the stack")
            .expect("runs");
        assert_eq!((out.times, out.diffs), (vec![7], vec![1]));
    }
}
