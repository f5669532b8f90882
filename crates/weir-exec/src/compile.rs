//! Compiling a [`LogicalPlan`] into a tree of [`Operator`]s, one per plan node.
//!
//! Schemas in the executor are the plan's schemas with every field nullable: the planner's
//! nullability is a guess that data (outer joins, aggregates over empty groups) may contradict.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::DFSchema;
use datafusion_expr::ExprSchemable;
use weir_common::{Result, WeirError};
use weir_plan::{LogicalPlan, WindowSpec};

use crate::expr::ScalarExpr;
use crate::operator::Operator;
use crate::ops::aggregate::{AggSpec, Aggregate};
use crate::ops::apply::Apply;
use crate::ops::distinct::Distinct;
use crate::ops::filter::Filter;
use crate::ops::join::{Join, JoinSide};
use crate::ops::linear::Linear;
use crate::ops::project::Project;
use crate::ops::r2s::ToStream;
use crate::ops::rename::Rename;
use crate::ops::scan::Scan;
use crate::ops::topk::{SortKey, TopK};
use crate::ops::union::UnionAll;
use crate::ops::values::Values;
use crate::ops::window_rows::RowsWindow;
use crate::ops::window_time::{TimeBounds, TimeWindow};
use crate::row::RowCodec;

/// The executor's (all-nullable) Arrow schema for a plan schema.
pub fn exec_schema(schema: &DFSchema) -> SchemaRef {
    let fields: Vec<Field> =
        schema.fields().iter().map(|f| Field::new(f.name(), f.data_type().clone(), true)).collect();
    Arc::new(Schema::new(fields))
}

fn expr_type(e: &datafusion_expr::Expr, schema: &DFSchema) -> Result<DataType> {
    e.get_type(schema).map_err(|err| WeirError::internal(format!("type of {e}: {err}")))
}

/// Compiles `plan` into an operator tree.
///
/// The inputs are compiled first, here, and the node built from them by [`build`]: a deep
/// plan (a 64-way join) recurses through this small stack frame only, not through the large
/// one that building every kind of node needs.
pub fn compile(plan: &LogicalPlan) -> Result<Box<dyn Operator>> {
    let mut inputs = Vec::new();
    for input in plan.inputs() {
        inputs.push(compile(input)?);
    }
    build(plan, inputs)
}

/// The operator for one plan node, given its inputs' operators in [`LogicalPlan::inputs`]
/// order.
#[inline(never)]
fn build(plan: &LogicalPlan, inputs: Vec<Box<dyn Operator>>) -> Result<Box<dyn Operator>> {
    let schema = exec_schema(&plan.schema());
    let mut compiled = inputs.into_iter();
    let mut next =
        || compiled.next().ok_or_else(|| WeirError::internal("a plan input was not compiled"));
    Ok(match plan {
        LogicalPlan::StreamScan { name, .. } | LogicalPlan::TableScan { name, .. } => {
            Box::new(Scan::new(name.clone(), schema))
        }
        LogicalPlan::Window { spec, bounds_columns: true, .. } => {
            let WindowSpec::RangeSlide { range, slide } = spec else {
                return Err(WeirError::internal("window bounds columns without RANGE ... SLIDE"));
            };
            let bounds = TimeBounds::Slide { range: *range, slide: *slide };
            Box::new(TimeWindow::with_bounds_columns(next()?, bounds, schema))
        }
        LogicalPlan::Window { spec, .. } => {
            let child = next()?;
            match spec {
                WindowSpec::Unbounded => {
                    Box::new(TimeWindow::new(child, TimeBounds::Unbounded, schema))
                }
                WindowSpec::Now => Box::new(TimeWindow::new(child, TimeBounds::Range(1), schema)),
                WindowSpec::Range(r) => {
                    Box::new(TimeWindow::new(child, TimeBounds::Range(*r), schema))
                }
                WindowSpec::RangeSlide { range, slide } => Box::new(TimeWindow::new(
                    child,
                    TimeBounds::Slide { range: *range, slide: *slide },
                    schema,
                )),
                WindowSpec::Rows(n) => Box::new(RowsWindow::new(child, vec![], *n, schema)?),
                WindowSpec::PartitionRows { by, rows } => {
                    Box::new(RowsWindow::new(child, by.clone(), *rows, schema)?)
                }
            }
        }
        LogicalPlan::Filter { predicate, input } => {
            let p = ScalarExpr::compile(predicate, &input.schema())?;
            Box::new(Linear::new(next()?, Filter::new(p)))
        }
        LogicalPlan::Project { exprs, input, .. } => {
            let in_schema = input.schema();
            let exprs =
                exprs.iter().map(|e| ScalarExpr::compile(e, &in_schema)).collect::<Result<_>>()?;
            Box::new(Linear::new(next()?, Project::new(exprs, schema)))
        }
        LogicalPlan::Join { kind, left, right, on, filter, nulls_equal, .. } => {
            let (ls, rs) = (left.schema(), right.schema());
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
            Box::new(Join::new(
                *kind,
                *nulls_equal,
                JoinSide {
                    input: next()?,
                    keys: lkeys,
                    row_codec: RowCodec::for_schema(&lschema)?,
                    schema: lschema,
                },
                JoinSide {
                    input: next()?,
                    keys: rkeys,
                    row_codec: RowCodec::for_schema(&rschema)?,
                    schema: rschema,
                },
                RowCodec::new(key_types)?,
                filter,
                schema,
            ))
        }
        LogicalPlan::Aggregate { group, aggs, input, .. } => {
            let in_schema = input.schema();
            let keys =
                group.iter().map(|e| ScalarExpr::compile(e, &in_schema)).collect::<Result<_>>()?;
            let key_types =
                group.iter().map(|e| expr_type(e, &in_schema)).collect::<Result<_>>()?;
            let specs = aggs
                .iter()
                .map(|a| {
                    Ok(AggSpec {
                        func: a.func,
                        arg: a
                            .arg
                            .as_ref()
                            .map(|e| ScalarExpr::compile(e, &in_schema))
                            .transpose()?,
                        arg_type: match &a.arg {
                            Some(e) => expr_type(e, &in_schema)?,
                            None => DataType::Null,
                        },
                        distinct: a.distinct,
                    })
                })
                .collect::<Result<_>>()?;
            Box::new(Aggregate::new(next()?, keys, key_types, specs, schema)?)
        }
        LogicalPlan::Distinct { .. } => Box::new(Distinct::new(next()?, schema)?),
        LogicalPlan::UnionAll { .. } => {
            Box::new(UnionAll::new(compiled.by_ref().collect(), schema))
        }
        LogicalPlan::Values { rows, schema: df } => {
            Box::new(Values::new(values_batch(rows, df)?, schema))
        }
        LogicalPlan::ToStream { op, input } => {
            Box::new(ToStream::new(next()?, *op, schema, input.sources())?)
        }
        LogicalPlan::Rename { .. } => Box::new(Linear::new(next()?, Rename::new(schema))),
        LogicalPlan::Apply { input, subqueries, .. } => {
            Box::new(Apply::new(next()?, &input.schema(), subqueries, schema)?)
        }
        LogicalPlan::TopK { order, skip, fetch, input } => {
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
            Box::new(TopK::new(next()?, keys, *skip, *fetch, schema)?)
        }
    })
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

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use weir_common::TimeDomain;
    use weir_plan::LogicalPlan;

    use super::compile;

    /// A plan thousands of nodes deep compiles on a 1 MiB stack: the recursion goes through
    /// `compile`'s small frame only (it took ~23 KB per level in debug builds when each node
    /// was built in the recursive function, so a 64-way join overflowed a 2 MiB test thread).
    const DEPTH: usize = 1000;

    #[test]
    fn deep_plans_compile_in_a_small_stack() {
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
        let compiled = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                let op = compile(&plan).map(|_| ());
                // Dropping the plan and the operators recurses too; do it on this stack.
                drop(plan);
                op
            })
            .unwrap()
            .join()
            .expect("compiling overflowed the stack");
        assert!(compiled.is_ok());
    }
}
