//! Membership tests between a text or binary literal and numbers.
//!
//! Weir is statically typed: `x IN (...)` compares the probe and the set in one common type, and
//! DataFusion's coercion picks the numeric type when text meets numbers, casting the text. A
//! literal that is no number (`'hello'`, `'1.5'` against integers) or a binary literal
//! (`x'303132'`) would make that cast fail and the whole query an error. SQLite, dynamically
//! typed, answers instead: such a value equals no number. Weir answers the same way, because
//! that is what the comparison means: no integer is equal to the text `'hello'`.
//!
//! So, before type coercion, for a probe that is such a literal and a numeric set:
//!
//! - `lit IN (SELECT c ...)` becomes `CASE WHEN EXISTS (SELECT c ... WHERE c IS NULL) THEN NULL
//!   ELSE false END` (and `true` for `NOT IN`): the literal matches no value, so by SQL's NULL
//!   rules the result is unknown if the set holds a NULL, and false (true) otherwise, also when
//!   the set is empty;
//! - `lit IN (v1, v2, ...)` with only numeric or NULL literals in the list becomes NULL if the
//!   list holds a NULL, else false (true for `NOT IN`).
//!
//! A text literal that does convert to the set's type (`'12' IN (SELECT int_column ...)`) keeps
//! DataFusion's numeric comparison. Ordering comparisons (`<`, `>`) between text and numbers
//! are not rewritten: there SQLite's answer depends on its cross-type sort order, not on
//! equality.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, Result as DfResult, ScalarValue};
use datafusion_expr::expr::{Exists, InList, InSubquery};
use datafusion_expr::expr_rewriter::NamePreserver;
use datafusion_expr::logical_plan::{Filter, LogicalPlan, Subquery};
use datafusion_expr::{lit, when, Expr};

/// Rewrites every such membership test in `plan` and its subqueries. See the module docs.
pub fn rewrite(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            // Output columns keep the name of the expression they were written as. Naming
            // costs a formatting of the expression: only candidates pay it.
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let candidate =
                    e.exists(|x| Ok(matches!(x, Expr::InSubquery(_) | Expr::InList(_))))?;
                if !candidate {
                    return Ok(Transformed::no(e));
                }
                let name = names.save(&e);
                Ok(e.transform_up(rewrite_expr)?.update_data(|e| name.restore(e)))
            })
        })?
        .data)
}

fn rewrite_expr(e: Expr) -> DfResult<Transformed<Expr>> {
    match e {
        Expr::InSubquery(InSubquery { expr, subquery, negated })
            if subquery.subquery.schema().fields().len() == 1
                && never_equal(&expr, subquery.subquery.schema().field(0).data_type()) =>
        {
            let plan = &subquery.subquery;
            let column = Expr::Column(Column::from(plan.schema().qualified_field(0)));
            let nulls = LogicalPlan::Filter(Filter::try_new(column.is_null(), plan.clone())?);
            let exists = Expr::Exists(Exists {
                subquery: Subquery {
                    subquery: Arc::new(nulls),
                    outer_ref_columns: subquery.outer_ref_columns,
                    spans: subquery.spans,
                },
                negated: false,
            });
            let unknown = lit(ScalarValue::Boolean(None));
            Ok(Transformed::yes(when(exists, unknown).otherwise(lit(negated))?))
        }
        Expr::InList(InList { expr, list, negated })
            if !list.is_empty()
                && list.iter().all(|v| matches!(v, Expr::Literal(s, _) if numeric_or_null(s)))
                && list.iter().any(|v| matches!(v, Expr::Literal(s, _) if !s.is_null()))
                && list_type(&list).is_some_and(|t| never_equal(&expr, &t)) =>
        {
            let has_null = list.iter().any(|v| matches!(v, Expr::Literal(s, _) if s.is_null()));
            Ok(Transformed::yes(if has_null {
                lit(ScalarValue::Boolean(None))
            } else {
                lit(negated)
            }))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// Whether `probe` is a literal that equals no value of the numeric type `ty`: binary data, or
/// text that does not convert to `ty`.
fn never_equal(probe: &Expr, ty: &DataType) -> bool {
    if !ty.is_numeric() {
        return false;
    }
    match probe {
        Expr::Literal(
            v @ (ScalarValue::Utf8(Some(_))
            | ScalarValue::LargeUtf8(Some(_))
            | ScalarValue::Utf8View(Some(_))),
            _,
        ) => v.cast_to(ty).is_err(),
        Expr::Literal(
            ScalarValue::Binary(Some(_))
            | ScalarValue::LargeBinary(Some(_))
            | ScalarValue::BinaryView(Some(_))
            | ScalarValue::FixedSizeBinary(_, Some(_)),
            _,
        ) => true,
        _ => false,
    }
}

fn numeric_or_null(v: &ScalarValue) -> bool {
    v.is_null() || v.data_type().is_numeric()
}

/// The type of the list's non-NULL literals, if they share one.
fn list_type(list: &[Expr]) -> Option<DataType> {
    let mut types = list.iter().filter_map(|v| match v {
        Expr::Literal(s, _) if !s.is_null() => Some(s.data_type()),
        _ => None,
    });
    let first = types.next()?;
    types.all(|t| t == first).then_some(first)
}
