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
pub fn compile(plan: &LogicalPlan) -> Result<Box<dyn Operator>> {
    let schema = exec_schema(&plan.schema());
    Ok(match plan {
        LogicalPlan::StreamScan { name, .. } | LogicalPlan::TableScan { name, .. } => {
            Box::new(Scan::new(name.clone(), schema))
        }
        LogicalPlan::Window { spec, input, bounds_columns: true, .. } => {
            let WindowSpec::RangeSlide { range, slide } = spec else {
                return Err(WeirError::internal("window bounds columns without RANGE ... SLIDE"));
            };
            let bounds = TimeBounds::Slide { range: *range, slide: *slide };
            Box::new(TimeWindow::with_bounds_columns(compile(input)?, bounds, schema))
        }
        LogicalPlan::Window { spec, input, .. } => {
            let child = compile(input)?;
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
            Box::new(Linear::new(compile(input)?, Filter::new(p)))
        }
        LogicalPlan::Project { exprs, input, .. } => {
            let in_schema = input.schema();
            let exprs =
                exprs.iter().map(|e| ScalarExpr::compile(e, &in_schema)).collect::<Result<_>>()?;
            Box::new(Linear::new(compile(input)?, Project::new(exprs, schema)))
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
                    input: compile(left)?,
                    keys: lkeys,
                    row_codec: RowCodec::for_schema(&lschema)?,
                    schema: lschema,
                },
                JoinSide {
                    input: compile(right)?,
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
            Box::new(Aggregate::new(compile(input)?, keys, key_types, specs, schema)?)
        }
        LogicalPlan::Distinct { input } => Box::new(Distinct::new(compile(input)?, schema)?),
        LogicalPlan::UnionAll { inputs, .. } => Box::new(UnionAll::new(
            inputs.iter().map(|i| compile(i)).collect::<Result<_>>()?,
            schema,
        )),
        LogicalPlan::Values { rows, schema: df } => {
            Box::new(Values::new(values_batch(rows, df)?, schema))
        }
        LogicalPlan::ToStream { op, input } => {
            Box::new(ToStream::new(compile(input)?, *op, schema, input.sources())?)
        }
        LogicalPlan::Rename { input, .. } => {
            Box::new(Linear::new(compile(input)?, Rename::new(schema)))
        }
        LogicalPlan::Apply { input, subqueries, .. } => {
            Box::new(Apply::new(compile(input)?, &input.schema(), subqueries, schema)?)
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
            Box::new(TopK::new(compile(input)?, keys, *skip, *fetch, schema)?)
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
