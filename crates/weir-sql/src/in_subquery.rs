//! `x [NOT] IN (subquery)` inside a larger filter condition, with SQL's three-valued result.
//!
//! A filter conjunct that *is* `x IN (S)` or `x NOT IN (S)` is evaluated by a semi join or a
//! null-aware anti join, which is exact because a filter keeps only true rows. Nested in a
//! larger condition (`... OR x IN (S)`, `(x IN (S)) IS NULL`, `CASE`), DataFusion decorrelates
//! it into a mark join whose mark is two-valued: it says false where SQL says unknown. So before
//! decorrelation, each such nested test is rewritten into EXISTS tests, whose marks are exact:
//!
//! ```text
//! x IN (S)  =  CASE WHEN EXISTS (S WHERE c = x)                       THEN true
//!                   WHEN EXISTS (S WHERE c IS NULL)
//!                        OR (x IS NULL AND EXISTS (S))                  THEN NULL
//!                   ELSE false END
//! ```
//! where `c` is S's column. That is SQL's definition: true if some value equals x; otherwise
//! unknown if S holds a NULL or x is NULL over a non-empty S; otherwise (S empty, or no value
//! equal and no NULL) false. `NOT IN` swaps true and false. Each EXISTS becomes a mark join, so
//! the rewrite keeps the query incremental.
//!
//! A filter conjunct `x NOT IN (S)` whose S is correlated (reads the outer row) must apply
//! NOT IN's NULL rules to each row's own S, which the null-aware anti join cannot (it applies
//! them over all of S). It becomes the anti join of its definition: x NOT IN S holds iff no
//! value c of S makes `c = x` true or unknown, i.e.
//!
//! ```text
//! x NOT IN (S)  =  NOT EXISTS (S WHERE c = x OR c IS NULL OR x IS NULL)
//! ```
//! (true for an empty S whatever x is). A top-level `x IN (S)` needs nothing: a semi join is
//! exact in a filter.
//!
//! A probe that reads columns of an enclosing query (an outer reference) or holds a subquery is
//! left as it is, and so is a rewritten `MIGHT_CONTAIN` (its mark join is what it means).

use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, DFSchema, ExprSchema, Result as DfResult, ScalarValue};
use datafusion_expr::expr::InSubquery;
use datafusion_expr::logical_plan::{Filter, LogicalPlan};
use datafusion_expr::utils::{conjunction, split_conjunction_owned};
use datafusion_expr::{exists, lit, not_exists, when, Expr};

/// Rewrites the nested IN tests of every filter in `plan` and its subqueries.
pub fn rewrite(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::Filter(f) => {
                let schema = f.input.schema().clone();
                let mut changed = false;
                let mut conjuncts = Vec::new();
                for c in split_conjunction_owned(f.predicate.clone()) {
                    if let Expr::InSubquery(i) = c {
                        let t = correlated_not_in(i, &schema)?;
                        changed |= t.transformed;
                        conjuncts.push(t.data);
                        continue;
                    }
                    let t = c.transform_up(|e| nested_in(e, &schema))?;
                    changed |= t.transformed;
                    conjuncts.push(t.data);
                }
                if !changed {
                    return Ok(Transformed::no(LogicalPlan::Filter(f)));
                }
                let predicate = conjunction(conjuncts).unwrap_or_else(|| lit(true));
                Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(predicate, f.input)?)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// A filter conjunct `x NOT IN (S)` over a correlated S -> `NOT EXISTS (S WHERE c = x OR c IS
/// NULL OR x IS NULL)`; anything else unchanged.
fn correlated_not_in(i: InSubquery, outer: &DFSchema) -> DfResult<Transformed<Expr>> {
    if !i.negated || i.subquery.outer_ref_columns.is_empty() || approximate(&i.subquery.subquery) {
        return Ok(Transformed::no(Expr::InSubquery(i)));
    }
    let Some(probe) = outer_probe(&i.expr, &i.subquery.subquery, outer)? else {
        return Ok(Transformed::no(Expr::InSubquery(i)));
    };
    let plan = &i.subquery.subquery;
    let column = Expr::Column(Column::from(plan.schema().qualified_field(0)));
    let excluded = column.clone().eq(probe.clone()).or(column.is_null()).or(probe.is_null());
    let excluding = Arc::new(LogicalPlan::Filter(Filter::try_new(excluded, plan.clone())?));
    Ok(Transformed::yes(not_exists(excluding)))
}

/// The probe `x` as S sees it (its columns as outer references), if S has one column and x
/// reads only the filter's input (no outer reference of its own, no subquery).
fn outer_probe(x: &Expr, plan: &LogicalPlan, outer: &DFSchema) -> DfResult<Option<Expr>> {
    let simple = !x.contains_outer()
        && !x.exists(|e| {
            Ok(matches!(e, Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)))
        })?;
    if plan.schema().fields().len() != 1 || !simple {
        return Ok(None);
    }
    let probe = x
        .clone()
        .transform(|e| match e {
            Expr::Column(c) => {
                let field = outer.field_from_column(&c)?;
                Ok(Transformed::yes(Expr::OuterReferenceColumn(Arc::clone(field), c)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data;
    Ok(Some(probe))
}

/// Whether S is a rewritten `MIGHT_CONTAIN` (see `binder::might_contain`): a two-valued
/// approximate test, which stays an IN for DataFusion to decorrelate into a join.
fn approximate(plan: &LogicalPlan) -> bool {
    plan.schema().fields().iter().any(|f| crate::binder::might_contain::is_probe_column(f.name()))
}

/// `x [NOT] IN (S)` -> the CASE of the module docs; anything else unchanged.
fn nested_in(e: Expr, outer: &DFSchema) -> DfResult<Transformed<Expr>> {
    let Expr::InSubquery(InSubquery { expr, subquery, negated }) = e else {
        return Ok(Transformed::no(e));
    };
    let plan = &subquery.subquery;
    if approximate(plan) {
        return Ok(Transformed::no(Expr::InSubquery(InSubquery { expr, subquery, negated })));
    }
    let Some(probe) = outer_probe(&expr, plan, outer)? else {
        return Ok(Transformed::no(Expr::InSubquery(InSubquery { expr, subquery, negated })));
    };
    let column = Expr::Column(Column::from(plan.schema().qualified_field(0)));
    let filtered = |predicate: Expr| -> DfResult<Arc<LogicalPlan>> {
        Ok(Arc::new(LogicalPlan::Filter(Filter::try_new(predicate, plan.clone())?)))
    };
    let matched = exists(filtered(column.clone().eq(probe))?);
    let has_null = exists(filtered(column.is_null())?);
    let non_empty = exists(plan.clone());
    let unknown = has_null.or(expr.as_ref().clone().is_null().and(non_empty));
    Ok(Transformed::yes(
        when(matched, lit(!negated))
            .when(unknown, lit(ScalarValue::Boolean(None)))
            .otherwise(lit(negated))?,
    ))
}
