//! Outer references in a join's `ON` inside a subquery.
//!
//! DataFusion decorrelates an `EXISTS`, `IN` or scalar subquery by pulling its correlated
//! predicates (those that read the outer row) out of the subquery's filters into the join that
//! replaces it; a correlated predicate in a join's `ON` is not pulled, and planning fails
//! ("Accessing outer reference columns is not allowed in the plan"). So before decorrelation:
//!
//! - in an **inner** join, `A JOIN B ON p AND q` is `σ_q(A JOIN B ON p)` (an inner join's `ON`
//!   keeps the same rows as a filter over the cross product), so each conjunct that reads the
//!   outer row moves to a filter right above the join, and the usual decorrelation applies;
//! - in a **LEFT, RIGHT or FULL** join the `ON` decides which rows are padded with NULLs, not
//!   which rows are kept, so moving it would change the result: such a subquery is refused,
//!   with the position of the outer reference.
//!
//! Everything else is left as it is.
//!
//! A quantified comparison's subquery read as a derived table (`x > ALL (SELECT ...)`, see
//! `binder::names::quantified_conditions`) must not refer to the outer query either: a
//! derived table is not decorrelated, and such a subquery is refused with the form that works.

use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::Result as DfResult;
use datafusion_expr::logical_plan::{Filter, Join, LogicalPlan};
use datafusion_expr::utils::{conjunction, split_conjunction_owned};
use datafusion_expr::{Expr, JoinType};
use sqlparser::ast as sql;
use weir_common::{Result, Span, WeirError};

use crate::binder::df_error;

/// Moves the outer references of every inner join's `ON` in `plan`'s subqueries to a filter
/// above the join; refuses one in an outer join's `ON`, placed in `query` (the query `plan` was
/// planned from). See the module docs.
pub fn rewrite(plan: LogicalPlan, query: &sql::Query) -> Result<LogicalPlan> {
    check_outer_joins(&plan, query)?;
    let plan = plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::Join(j)
                if j.join_type == JoinType::Inner
                    && j.filter.as_ref().is_some_and(Expr::contains_outer) =>
            {
                move_outer_conjuncts(j).map(Transformed::yes)
            }
            other => Ok(Transformed::no(other)),
        })
        .map_err(df_error)?;
    Ok(plan.data)
}

/// `σ_outer(A JOIN B ON local)` for `A JOIN B ON local AND outer`.
fn move_outer_conjuncts(j: Join) -> DfResult<LogicalPlan> {
    let Some(filter) = j.filter.clone() else { return Ok(LogicalPlan::Join(j)) };
    let (outer, local): (Vec<Expr>, Vec<Expr>) =
        split_conjunction_owned(filter).into_iter().partition(Expr::contains_outer);
    let join = Join::try_new(
        j.left,
        j.right,
        j.on,
        conjunction(local),
        j.join_type,
        j.join_constraint,
        j.null_equality,
        j.null_aware,
    )?;
    let Some(outer) = conjunction(outer) else { return Ok(LogicalPlan::Join(join)) };
    Ok(LogicalPlan::Filter(Filter::try_new(outer, Arc::new(LogicalPlan::Join(join)))?))
}

/// Refuses a quantified comparison whose subquery, read as the derived table named in
/// `derived` (with where the comparison's left operand is written), refers to the outer query.
pub fn check_quantified_derived(
    plan: &LogicalPlan,
    derived: &[(String, Option<Span>)],
) -> Result<()> {
    if derived.is_empty() {
        return Ok(());
    }
    let mut found: Option<WeirError> = None;
    plan.apply_with_subqueries(|node| {
        let LogicalPlan::SubqueryAlias(a) = node else { return Ok(TreeNodeRecursion::Continue) };
        let Some((_, at)) = derived.iter().find(|(name, _)| a.alias.table() == name) else {
            return Ok(TreeNodeRecursion::Continue);
        };
        if a.input.exists(|n| Ok(n.contains_outer_reference()))? {
            found = Some(WeirError::plan_at(
                "a subquery compared with ALL or ANY that refers to the outer query is supported \
                 when the compared value names its table, as in t.x > ALL (SELECT y FROM u WHERE \
                 u.k = t.k), and the subquery is one SELECT without aggregates, DISTINCT or \
                 LIMIT",
                *at,
            ));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(df_error)?;
    found.map_or(Ok(()), Err)
}

/// The refusal of an outer reference in the `ON` of a LEFT, RIGHT or FULL join.
fn check_outer_joins(plan: &LogicalPlan, query: &sql::Query) -> Result<()> {
    let mut found: Option<WeirError> = None;
    plan.apply_with_subqueries(|node| {
        let LogicalPlan::Join(j) = node else { return Ok(TreeNodeRecursion::Continue) };
        let kind = match j.join_type {
            JoinType::Left => "LEFT",
            JoinType::Right => "RIGHT",
            JoinType::Full => "FULL",
            _ => return Ok(TreeNodeRecursion::Continue),
        };
        let on = j.filter.iter().chain(j.on.iter().flat_map(|(l, r)| [l, r]));
        for e in on {
            if let Some((name, span)) = first_outer_reference(e) {
                let span = span.or_else(|| outer_join_reference_span(query, &name));
                found = Some(WeirError::plan_at(
                    format!(
                        "a {kind} JOIN's ON condition inside a subquery refers to the outer \
                         query ({name}): this is not supported yet, as the condition decides \
                         which rows are padded with NULLs and cannot move out of the join; \
                         only an inner join's ON may refer to the outer query (or move the \
                         condition to the subquery's WHERE, if that is what it means)"
                    ),
                    span,
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(df_error)?;
    found.map_or(Ok(()), Err)
}

/// The first outer column `e` reads, with where it is written.
fn first_outer_reference(e: &Expr) -> Option<(String, Option<Span>)> {
    let mut out = None;
    let _ = e.apply(|x| {
        if let Expr::OuterReferenceColumn(_, c) = x {
            let span = c.spans().first().map(|s| Span {
                line: s.start.line,
                column: s.start.column,
                end_line: s.end.line,
                end_column: s.end.column,
            });
            out = Some((c.flat_name(), span));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// Where `name` (`t1.b`, or just `b` as written) appears in the `ON` of a LEFT, RIGHT or FULL
/// join of a subquery of `query`: DataFusion keeps no position for an outer reference.
fn outer_join_reference_span(query: &sql::Query, name: &str) -> Option<Span> {
    use sql::{JoinConstraint as C, JoinOperator as J, Visit, Visitor};
    use std::ops::ControlFlow;
    struct Find<'a> {
        name: &'a str,
        depth: usize,
    }
    impl Visitor for Find<'_> {
        type Break = Span;
        fn pre_visit_query(&mut self, q: &sql::Query) -> ControlFlow<Span> {
            self.depth += 1;
            let sql::SetExpr::Select(s) = q.body.as_ref() else { return ControlFlow::Continue(()) };
            if self.depth < 2 {
                return ControlFlow::Continue(());
            }
            for j in s.from.iter().flat_map(|t| &t.joins) {
                let (J::Left(C::On(on))
                | J::LeftOuter(C::On(on))
                | J::Right(C::On(on))
                | J::RightOuter(C::On(on))
                | J::FullOuter(C::On(on))) = &j.join_operator
                else {
                    continue;
                };
                let found = sql::visit_expressions(on, |e| {
                    let written = match e {
                        sql::Expr::CompoundIdentifier(parts) => {
                            parts.iter().map(|p| p.value.as_str()).collect::<Vec<_>>().join(".")
                        }
                        sql::Expr::Identifier(i) => i.value.clone(),
                        _ => return ControlFlow::Continue(()),
                    };
                    let last = self.name.rsplit('.').next().unwrap_or(self.name);
                    let matches = written.eq_ignore_ascii_case(self.name)
                        || (!written.contains('.') && written.eq_ignore_ascii_case(last));
                    match Span::from_sql(sql::Spanned::span(e)) {
                        Some(span) if matches => ControlFlow::Break(span),
                        _ => ControlFlow::Continue(()),
                    }
                });
                if let ControlFlow::Break(span) = found {
                    return ControlFlow::Break(span);
                }
            }
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _q: &sql::Query) -> ControlFlow<Span> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
    }
    match query.visit(&mut Find { name, depth: 0 }) {
        ControlFlow::Break(span) => Some(span),
        ControlFlow::Continue(()) => None,
    }
}
