//! Scalar expressions: DataFusion `Expr` trees (already type-coerced by the binder) compiled to
//! physical expressions and evaluated on whole Arrow batches, never row by row.
//!
//! Integer `+`, `-` and `*` that overflow are errors, as in PostgreSQL (DataFusion's kernels
//! wrap by default: `9223372036854775807 + 1` would be a large negative number).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::DFSchema;
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::Expr;
use datafusion_physical_expr::expressions::BinaryExpr;
use datafusion_physical_expr::{create_physical_expr, PhysicalExpr};
use weir_common::{Result, WeirError};

/// A compiled scalar expression.
#[derive(Debug, Clone)]
pub struct ScalarExpr {
    phys: Arc<dyn PhysicalExpr>,
    /// The expression in SQL, for errors.
    text: String,
    /// The SQL name of the result type if it is an integer or a decimal (for overflow errors).
    range_type: Option<&'static str>,
}

impl ScalarExpr {
    /// Compiles `expr` over rows of `schema`.
    pub fn compile(expr: &Expr, schema: &DFSchema) -> Result<Self> {
        let props = ExecutionProps::new();
        let phys = create_physical_expr(expr, schema, &props, &PhysicalPlanningContext::default())
            .and_then(checked_arithmetic)
            .map_err(|e| {
                WeirError::plan(format!("cannot evaluate {expr}: {}", e.strip_backtrace()))
            })?;
        // Named for errors in SQL (`t.v / 0`), not with DataFusion's typed literals
        // (`t.v / Int64(0)`) or the output column's alias.
        let shown = match expr {
            Expr::Alias(a) => &*a.expr,
            e => e,
        };
        let text = datafusion_sql::unparser::expr_to_sql(shown)
            .map(|e| match e {
                sqlparser::ast::Expr::Nested(inner) => inner.to_string(),
                e => e.to_string(),
            })
            .unwrap_or_else(|_| shown.human_display().to_string());
        let range_type = range_type(&phys, schema.as_arrow());
        Ok(ScalarExpr { phys, text, range_type })
    }

    /// Whether `other` is the same expression (so gives the same values on the same rows).
    pub fn same_as(&self, other: &ScalarExpr) -> bool {
        *self.phys == *other.phys
    }

    /// The input column this expression reads and returns unchanged, if that is all it does.
    pub fn column_index(&self) -> Option<usize> {
        self.phys.downcast_ref::<datafusion_physical_expr::expressions::Column>().map(|c| c.index())
    }

    /// The input columns this expression reads.
    pub fn columns(&self) -> Vec<usize> {
        let mut cols: Vec<usize> = datafusion_physical_expr::utils::collect_columns(&self.phys)
            .iter()
            .map(|c| c.index())
            .collect();
        cols.sort_unstable();
        cols
    }

    /// The expression in SQL.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Evaluates on every row of `batch`.
    pub fn eval(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        let v = self.phys.evaluate(batch).map_err(|e| self.error(e))?;
        v.into_array(batch.num_rows()).map_err(|e| self.error(e))
    }

    /// Evaluates and casts to `ty` when the result type differs.
    pub fn eval_as(&self, batch: &RecordBatch, ty: &DataType) -> Result<ArrayRef> {
        let a = self.eval(batch)?;
        if a.data_type() == ty {
            Ok(a)
        } else {
            Ok(arrow::compute::cast(&a, ty)?)
        }
    }

    /// Evaluates a predicate; NULL counts as false.
    pub fn eval_predicate(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let a = self.eval_as(batch, &DataType::Boolean)?;
        let b = a
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| WeirError::internal("predicate did not give booleans"))?;
        if b.null_count() == 0 {
            Ok(b.clone())
        } else {
            Ok(arrow::compute::prep_null_mask_filter(b))
        }
    }

    fn error(&self, e: datafusion_common::DataFusionError) -> WeirError {
        use arrow::error::ArrowError;
        use datafusion_common::DataFusionError;
        // PostgreSQL's words for the common failures; Arrow's own message otherwise.
        let what = match e.find_root() {
            DataFusionError::ArrowError(a, _) if matches!(**a, ArrowError::DivideByZero) => {
                "division by zero".to_string()
            }
            DataFusionError::ArrowError(a, _) => match &**a {
                ArrowError::ArithmeticOverflow(m) => {
                    let operation = m.trim_start_matches("Overflow happened on: ");
                    format!("{} out of range: {operation}", self.range_type.unwrap_or("number"))
                }
                ArrowError::ComputeError(m) => m.clone(),
                ArrowError::CastError(m) => format!("cannot cast: {m}"),
                other => other.to_string(),
            },
            other => other.strip_backtrace(),
        };
        WeirError::exec(format!("{what}, evaluating {}", self.text))
    }
}

/// The SQL name of the type an overflow of `phys` is in: the result type of its outermost
/// arithmetic that is an integer or a decimal (`v * 2 <> 0` overflows as a BIGINT).
fn range_type(
    phys: &Arc<dyn PhysicalExpr>,
    schema: &arrow::datatypes::Schema,
) -> Option<&'static str> {
    use datafusion_common::tree_node::TreeNodeRecursion;
    let name = |e: &Arc<dyn PhysicalExpr>| match e.data_type(schema) {
        Ok(DataType::Int64) => Some("BIGINT"),
        Ok(DataType::Int32) => Some("INTEGER"),
        Ok(DataType::Int16) => Some("SMALLINT"),
        Ok(DataType::Int8) => Some("TINYINT"),
        Ok(DataType::Decimal128(..)) => Some("DECIMAL"),
        _ => None,
    };
    let mut found = name(phys);
    if found.is_none() {
        let _ = phys.apply(|e| {
            let arithmetic =
                e.downcast_ref::<BinaryExpr>().is_some_and(|b| b.op().is_numerical_operators());
            if arithmetic {
                found = name(e);
            }
            Ok(if found.is_some() { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        });
    }
    found
}

/// Every binary operator of a physical expression, with overflow an error instead of a wrap.
fn checked_arithmetic(
    phys: Arc<dyn PhysicalExpr>,
) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
    phys.transform_up(|e| {
        let Some(b) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        let checked = BinaryExpr::new(b.left().clone(), *b.op(), b.right().clone())
            .with_fail_on_overflow(true);
        Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>))
    })
    .map(|t| t.data)
}
