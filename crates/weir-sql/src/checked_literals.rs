//! Integer arithmetic on literals, folded with overflow checks before DataFusion's simplifier
//! folds it with wrapping arithmetic.
//!
//! At run time Weir's integer `+`, `-` and `*` fail on overflow, as in PostgreSQL
//! (`weir_exec::expr`). DataFusion's constant folding would otherwise evaluate
//! `9223372036854775807 + 1` at plan time with wrapping kernels and plan the literal
//! `-9223372036854775808`. This rewrite runs after type coercion and before the optimizer:
//! it folds each `literal op literal` of one integer type, bottom up, and refuses an overflow
//! with the type's name, as PostgreSQL's "bigint out of range" does. Everything else is left to
//! DataFusion.

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion_expr::logical_plan::LogicalPlan;
use datafusion_expr::{BinaryExpr, Expr, Operator};

/// Folds integer literal arithmetic in `plan` and its subqueries. See the module docs.
pub fn rewrite(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| node.map_expressions(|e| e.transform_up(fold)))?
        .data)
}

/// `a op b` for two integer literals of one type, checked.
fn fold(e: Expr) -> DfResult<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    let (Expr::Literal(a, _), Expr::Literal(b, _)) = (left.as_ref(), right.as_ref()) else {
        return Ok(Transformed::no(e));
    };
    macro_rules! checked {
        ($variant:ident, $x:expr, $y:expr, $name:literal) => {{
            let r = match op {
                Operator::Plus => $x.checked_add(*$y),
                Operator::Minus => $x.checked_sub(*$y),
                Operator::Multiply => $x.checked_mul(*$y),
                _ => return Ok(Transformed::no(e)),
            };
            match r {
                Some(v) => {
                    Ok(Transformed::yes(Expr::Literal(ScalarValue::$variant(Some(v)), None)))
                }
                None => Err(DataFusionError::Plan(format!(
                    "{} out of range: {} {op} {}",
                    $name, $x, $y
                ))),
            }
        }};
    }
    match (a, b) {
        (ScalarValue::Int64(Some(x)), ScalarValue::Int64(Some(y))) => {
            checked!(Int64, x, y, "BIGINT")
        }
        (ScalarValue::Int32(Some(x)), ScalarValue::Int32(Some(y))) => checked!(Int32, x, y, "INT"),
        (ScalarValue::Int16(Some(x)), ScalarValue::Int16(Some(y))) => {
            checked!(Int16, x, y, "SMALLINT")
        }
        (ScalarValue::Int8(Some(x)), ScalarValue::Int8(Some(y))) => checked!(Int8, x, y, "TINYINT"),
        _ => Ok(Transformed::no(e)),
    }
}

#[cfg(test)]
mod tests {
    use datafusion_expr::lit;

    use super::*;

    fn folded(e: Expr) -> Result<Expr, String> {
        e.transform_up(fold).map(|t| t.data).map_err(|e| e.strip_backtrace())
    }

    #[test]
    fn folds_in_range_and_refuses_overflow() {
        assert_eq!(folded(lit(3i64) * lit(4i64) - lit(2i64)), Ok(lit(10i64)));
        let err = folded(lit(i64::MAX) + lit(1i64)).unwrap_err();
        assert!(err.contains("BIGINT out of range: 9223372036854775807 + 1"), "{err}");
        let err = folded(lit(i64::MIN) - lit(1i64)).unwrap_err();
        assert!(err.contains("BIGINT out of range: -9223372036854775808 - 1"), "{err}");
        let err = folded(lit(i16::MAX) * lit(2i16)).unwrap_err();
        assert!(err.contains("SMALLINT out of range"), "{err}");
        // Mixed types and non-arithmetic operators are DataFusion's.
        assert_eq!(folded(lit(1i64) + lit(1.5f64)), Ok(lit(1i64) + lit(1.5f64)));
        assert_eq!(folded(lit(7i64) / lit(2i64)), Ok(lit(7i64) / lit(2i64)));
    }
}
