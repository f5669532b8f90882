//! Join ordering: Weir's own rewrite of trees of inner and cross joins.
//!
//! SQL's comma joins (`FROM t1, t2, ..., tn WHERE ...`) reach the optimizer as a left-deep tree
//! of cross joins under one filter, in the order the FROM clause names the tables. Evaluated
//! as written, most of those joins are cross products. [`ReorderJoins`] rebuilds each such
//! tree so that, wherever the predicates allow it, every join has an equality key:
//!
//! 1. **Flatten** a maximal tree of inner joins (with or without keys) and the filters inside
//!    and directly above it into its *leaves* (every other plan: scans, outer/semi/anti joins,
//!    aggregates...) and one list of *conjuncts*: the filters' predicates split at `AND`, each
//!    join's `ON` keys as equalities `l = r` and its residual filter.
//! 2. **Classify** each conjunct by the leaves whose columns it reads. A conjunct on one leaf is
//!    pushed onto that leaf as a filter; one on no leaf (a constant) onto the first leaf; one on
//!    several leaves is a join predicate. A conjunct that holds a subquery, is volatile
//!    (`random()`), or reads a column no leaf has stays in a filter above the whole tree, where
//!    the original plan evaluated it.
//! 3. **Order greedily**, left-deep: start with the first leaf that has a filter (else the
//!    first leaf); then repeatedly join the remaining leaf ranked highest by (joined by an
//!    equality with the leaves already joined, has a filter of its own, joined by some other
//!    predicate), ties broken by FROM order. Each join gets every join predicate whose leaves
//!    are now all joined: an equality between an expression of the joined leaves and one of
//!    the new leaf (of the same type) becomes an equi-join key, anything else the join's
//!    residual filter.
//! 4. If the leaves' columns now come out in another order, a projection restores the original
//!    order, so the rewrite never changes the tree's schema.
//!
//! Inner joins and filters commute, so the result denotes the same bag of rows as the original
//! tree: every conjunct is evaluated exactly once, over rows that have every column it reads.
//! Without statistics the order is a heuristic, but equality-driven: a chain or star of
//! equi-joins is evaluated without any cross product, in any FROM order.
//!
//! Cost: flattening and rebuilding are linear in the size of the tree; the greedy choice is
//! O(leaves × conjuncts × leaves per conjunct); each join's schema is built once. The greedy
//! order is a fixed point: reordering an ordered tree gives the same tree. Trees of fewer than three leaves are left to
//! DataFusion's filter push-down and equi-join extraction.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::{Column, NullEquality, Result as DfResult};
use datafusion_expr::logical_plan::{Filter, Join, JoinConstraint, Projection};
use datafusion_expr::utils::{conjunction, split_conjunction};
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, JoinType, LogicalPlan, Operator};

/// Rewrites every maximal inner-join tree of `plan` (and of its uncorrelated subqueries). It
/// replaces DataFusion's `EliminateCrossJoin`, whose search is quadratic to cubic in the number
/// of tables, and runs once, between subquery decorrelation and filter push-down.
pub fn reorder(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    if let Some(flat) = Flat::of(&plan) {
        if flat.leaves.len() >= 3 {
            return flat.rebuild(plan.schema().clone()).map(Transformed::yes);
        }
    }
    let t = plan
        .map_uncorrelated_subqueries(reorder)?
        .transform_sibling(|p| p.map_children(reorder))?;
    if t.transformed {
        t.map_data(|p| p.recompute_schema())
    } else {
        Ok(t)
    }
}

/// An inner join that can be flattened: keys never match NULLs (SQL equality), so the keys
/// are ordinary conjuncts. (Set operations' NULL-equal joins are semi/anti joins anyway.)
fn flattenable(plan: &LogicalPlan) -> Option<&Join> {
    match plan {
        LogicalPlan::Join(j)
            if j.join_type == JoinType::Inner
                && (j.on.is_empty() || j.null_equality == NullEquality::NullEqualsNothing)
                && !versioned(&j.right) =>
        {
            Some(j)
        }
        _ => None,
    }
}

/// Whether a join's right side is the versioned side of a temporal join (`FOR SYSTEM_TIME AS
/// OF`): such a join pairs each element with the version at its instant, so it stays whole,
/// a leaf of the tree around it.
fn versioned(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(s) => {
            s.table_name.table().starts_with(crate::parser::VERSIONED_PREFIX)
        }
        LogicalPlan::SubqueryAlias(a) => versioned(&a.input),
        LogicalPlan::Filter(f) => versioned(&f.input),
        LogicalPlan::Projection(p) => versioned(&p.input),
        _ => false,
    }
}

/// A flattened inner-join tree: its leaves in FROM order and its conjuncts.
struct Flat {
    leaves: Vec<Arc<LogicalPlan>>,
    conjuncts: Vec<Expr>,
}

impl Flat {
    /// Flattens `plan` if it is an inner join, or a filter directly over one.
    fn of(plan: &LogicalPlan) -> Option<Flat> {
        let mut flat = Flat { leaves: vec![], conjuncts: vec![] };
        // An explicit stack, so a 64-table tree costs no deep recursion; right children are
        // pushed first so that leaves come out in FROM order.
        let mut stack: Vec<&Arc<LogicalPlan>> = Vec::new();
        match plan {
            LogicalPlan::Filter(f) if flattenable(&f.input).is_some() => {
                flat.conjuncts.extend(split_conjunction(&f.predicate).into_iter().cloned());
                stack.push(&f.input);
            }
            _ => flat.add_join(flattenable(plan)?, &mut stack),
        }
        while let Some(p) = stack.pop() {
            match p.as_ref() {
                LogicalPlan::Filter(f) if flattenable(&f.input).is_some() => {
                    flat.conjuncts.extend(split_conjunction(&f.predicate).into_iter().cloned());
                    stack.push(&f.input);
                }
                other => match flattenable(other) {
                    Some(j) => flat.add_join(j, &mut stack),
                    None => flat.leaves.push(p.clone()),
                },
            }
        }
        Some(flat)
    }

    /// Takes a join's keys and residual filter as conjuncts and stacks its inputs.
    fn add_join<'a>(&mut self, j: &'a Join, stack: &mut Vec<&'a Arc<LogicalPlan>>) {
        for (l, r) in &j.on {
            self.conjuncts.push(l.clone().eq(r.clone()));
        }
        if let Some(f) = &j.filter {
            self.conjuncts.extend(split_conjunction(f).into_iter().cloned());
        }
        stack.push(&j.right);
        stack.push(&j.left);
    }

    /// The reordered plan, with `schema`'s column order.
    fn rebuild(self, schema: datafusion_common::DFSchemaRef) -> DfResult<LogicalPlan> {
        let n = self.leaves.len();
        // Which leaf provides each column.
        let mut owner: HashMap<&Column, usize> = HashMap::new();
        let columns: Vec<Vec<Column>> = self.leaves.iter().map(|l| l.schema().columns()).collect();
        for (i, cols) in columns.iter().enumerate() {
            for c in cols {
                owner.entry(c).or_insert(i);
            }
        }
        let leaves_of = |e: &Expr| -> Option<Vec<usize>> {
            let mut v = Vec::new();
            for c in e.column_refs() {
                v.push(*owner.get(c)?);
            }
            v.sort_unstable();
            v.dedup();
            Some(v)
        };

        let mut top: Vec<Expr> = Vec::new();
        let mut constant: Vec<Expr> = Vec::new();
        let mut local: Vec<Vec<Expr>> = vec![Vec::new(); n];
        let mut preds: Vec<Pred> = Vec::new();
        for e in self.conjuncts {
            let movable = !e.is_volatile() && !has_subquery(&e);
            match leaves_of(&e).filter(|_| movable) {
                None => top.push(e),
                Some(ls) if ls.is_empty() => constant.push(e),
                Some(ls) if ls.len() == 1 => local[ls[0]].push(e),
                Some(leaves) => {
                    let sides = match &e {
                        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => {
                            match (leaves_of(left), leaves_of(right)) {
                                (Some(l), Some(r)) if !l.is_empty() && !r.is_empty() => {
                                    Some((l, r))
                                }
                                _ => None,
                            }
                        }
                        _ => None,
                    };
                    preds.push(Pred { expr: e, leaves, sides, placed: false });
                }
            }
        }

        // A leaf that is itself a filter counts as filtered, so that an ordered tree orders
        // the same way again.
        let filtered: Vec<bool> = (0..n)
            .map(|i| {
                !local[i].is_empty() || matches!(self.leaves[i].as_ref(), LogicalPlan::Filter(_))
            })
            .collect();
        if let Some(first) = (0..n).find(|&i| filtered[i]) {
            local[first].append(&mut constant);
        } else {
            local[0].append(&mut constant);
        }

        // Each leaf under its filter, its own join trees reordered too.
        let mut leaves: Vec<Option<Arc<LogicalPlan>>> = Vec::with_capacity(n);
        for (leaf, conjuncts) in self.leaves.into_iter().zip(&mut local) {
            let leaf = Arc::new(reorder(Arc::unwrap_or_clone(leaf))?.data);
            leaves.push(Some(match conjunction(std::mem::take(conjuncts)) {
                Some(predicate) => Arc::new(LogicalPlan::Filter(Filter::try_new(predicate, leaf)?)),
                None => leaf,
            }));
        }
        let mut builder =
            Builder { leaves, preds, in_tree: vec![false; n], in_right: vec![false; n] };

        // One left-deep tree per component of the equi-join graph, then their cross product
        // (with the predicates that span components), components with a filter first.
        let mut components = equi_components(n, &builder.preds);
        components.sort_by_key(|c| (!c.iter().any(|&i| filtered[i]), c[0]));
        let mut tree: Option<(Arc<LogicalPlan>, Vec<usize>)> = None;
        for component in components {
            let sub = builder.component(&component, &filtered)?;
            tree = Some(match tree {
                None => (sub, component),
                Some((left, mut left_leaves)) => {
                    let joined = builder.join(left, &left_leaves, sub, &component)?;
                    left_leaves.extend(component);
                    (joined, left_leaves)
                }
            });
        }
        let (mut tree, _) = tree.ok_or_else(|| internal("join order: no leaves"))?;
        if let Some(predicate) = conjunction(top) {
            tree = Arc::new(LogicalPlan::Filter(Filter::try_new(predicate, tree)?));
        }
        let same_order = tree
            .schema()
            .iter()
            .map(|(q, f)| (q, f.name()))
            .eq(schema.iter().map(|(q, f)| (q, f.name())));
        if same_order {
            return Ok(Arc::unwrap_or_clone(tree));
        }
        let exprs = schema.columns().into_iter().map(Expr::Column).collect();
        Ok(LogicalPlan::Projection(Projection::try_new(exprs, tree)?))
    }
}

/// A predicate over two or more leaves.
struct Pred {
    expr: Expr,
    /// The leaves it reads, sorted.
    leaves: Vec<usize>,
    /// For `l = r`: the leaves of each side, if both sides read some.
    sides: Option<(Vec<usize>, Vec<usize>)>,
    placed: bool,
}

impl Pred {
    /// Whether this predicate is an equi-join key between the `joined` leaves and the leaves
    /// `new`: `Some(true)` if its left side reads only joined leaves and its right side only
    /// new ones, `Some(false)` for the mirror image.
    fn equi_side(&self, joined: &[bool], new: &[usize]) -> Option<bool> {
        let (l, r) = self.sides.as_ref()?;
        let in_joined = |s: &[usize]| s.iter().all(|&i| joined[i]);
        let in_new = |s: &[usize]| s.iter().all(|i| new.contains(i));
        if in_joined(l) && in_new(r) {
            Some(true)
        } else if in_joined(r) && in_new(l) {
            Some(false)
        } else {
            None
        }
    }

    /// As [`Pred::equi_side`], with both sides given as membership sets.
    fn split(&self, left: &[bool], right: &[bool]) -> Option<bool> {
        let (l, r) = self.sides.as_ref()?;
        let all = |s: &[usize], set: &[bool]| s.iter().all(|&i| set[i]);
        if all(l, left) && all(r, right) {
            Some(true)
        } else if all(r, left) && all(l, right) {
            Some(false)
        } else {
            None
        }
    }
}

fn internal(msg: &str) -> datafusion_common::DataFusionError {
    datafusion_common::DataFusionError::Internal(msg.to_string())
}

/// The connected components of the graph whose edges are the equality predicates between two
/// sets of leaves, each component's leaves in FROM order, components by their first leaf.
fn equi_components(n: usize, preds: &[Pred]) -> Vec<Vec<usize>> {
    // Union-find with path halving.
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for p in preds.iter().filter(|p| p.sides.is_some()) {
        let first = root(&mut parent, p.leaves[0]);
        for &l in &p.leaves[1..] {
            let r = root(&mut parent, l);
            parent[r] = first;
        }
    }
    let mut by_root: HashMap<usize, usize> = HashMap::new();
    let mut components: Vec<Vec<usize>> = Vec::new();
    for i in 0..n {
        let r = root(&mut parent, i);
        let c = *by_root.entry(r).or_insert_with(|| {
            components.push(Vec::new());
            components.len() - 1
        });
        components[c].push(i);
    }
    components
}

/// Builds join trees from the filtered leaves, placing each predicate at the first join whose
/// inputs have all the leaves it reads.
struct Builder {
    leaves: Vec<Option<Arc<LogicalPlan>>>,
    preds: Vec<Pred>,
    /// Scratch membership sets for [`Builder::join`].
    in_tree: Vec<bool>,
    in_right: Vec<bool>,
}

impl Builder {
    /// A left-deep tree of one component: from its first filtered leaf (else its first leaf),
    /// each step joins the remaining leaf ranked highest by (equi-joined to the tree, filtered),
    /// ties broken by FROM order.
    fn component(&mut self, leaves: &[usize], filtered: &[bool]) -> DfResult<Arc<LogicalPlan>> {
        let start = leaves.iter().copied().find(|&i| filtered[i]).unwrap_or(leaves[0]);
        let mut tree = self.take(start)?;
        let mut members = vec![start];
        let mut joined = vec![false; self.leaves.len()];
        joined[start] = true;
        for _ in 1..leaves.len() {
            let mut equi = vec![false; self.leaves.len()];
            for p in self.preds.iter().filter(|p| !p.placed) {
                let mut missing = p.leaves.iter().filter(|&&l| !joined[l]);
                let (Some(&c), None) = (missing.next(), missing.next()) else { continue };
                if p.equi_side(&joined, &[c]).is_some() {
                    equi[c] = true;
                }
            }
            let next = leaves
                .iter()
                .copied()
                .filter(|&i| !joined[i])
                .max_by_key(|&i| ((equi[i], filtered[i]), std::cmp::Reverse(i)))
                .ok_or_else(|| internal("join order: no leaf left"))?;
            let right = self.take(next)?;
            tree = self.join(tree, &members, right, &[next])?;
            members.push(next);
            joined[next] = true;
        }
        Ok(tree)
    }

    fn take(&mut self, i: usize) -> DfResult<Arc<LogicalPlan>> {
        self.leaves[i].take().ok_or_else(|| internal("join order: leaf used twice"))
    }

    /// `left ⋈ right` with every unplaced predicate over their leaves: equalities between the
    /// two sides (of one type) as keys, the rest as the residual filter.
    fn join(
        &mut self,
        left: Arc<LogicalPlan>,
        left_leaves: &[usize],
        right: Arc<LogicalPlan>,
        right_leaves: &[usize],
    ) -> DfResult<Arc<LogicalPlan>> {
        for &l in left_leaves {
            self.in_tree[l] = true;
        }
        for &r in right_leaves {
            self.in_right[r] = true;
        }
        let mut on = Vec::new();
        let mut residual = Vec::new();
        for p in self.preds.iter_mut().filter(|p| !p.placed) {
            if !p.leaves.iter().all(|&l| self.in_tree[l] || self.in_right[l]) {
                continue;
            }
            p.placed = true;
            let key = match (&p.expr, p.split(&self.in_tree, &self.in_right)) {
                (Expr::BinaryExpr(b), Some(left_first)) => {
                    let (l, r) = if left_first {
                        (b.left.as_ref(), b.right.as_ref())
                    } else {
                        (b.right.as_ref(), b.left.as_ref())
                    };
                    match (l.get_type(left.schema()), r.get_type(right.schema())) {
                        (Ok(lt), Ok(rt)) if lt == rt => Some((l.clone(), r.clone())),
                        _ => None,
                    }
                }
                _ => None,
            };
            match key {
                Some(k) => on.push(k),
                None => residual.push(p.expr.clone()),
            }
        }
        for &l in left_leaves {
            self.in_tree[l] = false;
        }
        for &r in right_leaves {
            self.in_right[r] = false;
        }
        Ok(Arc::new(LogicalPlan::Join(Join::try_new(
            left,
            right,
            on,
            conjunction(residual),
            JoinType::Inner,
            JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?)))
    }
}

fn has_subquery(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|x| {
        if matches!(
            x,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::SetComparison(_)
        ) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_expr::logical_plan::builder::{table_scan, LogicalPlanBuilder};
    use datafusion_expr::{col, lit};

    use super::*;

    fn scan(name: &str) -> LogicalPlanBuilder {
        let schema = Schema::new(vec![
            Field::new(format!("a{name}"), DataType::Int64, true),
            Field::new(format!("b{name}"), DataType::Int64, true),
        ]);
        table_scan(Some(format!("t{name}")), &schema, None).unwrap()
    }

    /// `FROM t0, t1, ..., WHERE pred`, as SqlToRel plans it.
    fn comma_join(n: usize, pred: Expr) -> LogicalPlan {
        let mut b = scan("0");
        for i in 1..n {
            b = b.cross_join(scan(&i.to_string()).build().unwrap()).unwrap();
        }
        b.filter(pred).unwrap().build().unwrap()
    }

    /// (number of joins, number of them without an equi-key).
    fn joins(plan: &LogicalPlan) -> (usize, usize) {
        let mut counts = (0, 0);
        plan.apply(|p| {
            if let LogicalPlan::Join(j) = p {
                counts.0 += 1;
                if j.on.is_empty() {
                    counts.1 += 1;
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        counts
    }

    #[test]
    fn a_chain_in_any_from_order_joins_on_keys_only() {
        // t0.b = t2.a, t2.b = t1.a, t1.b = t3.a: FROM order t0, t1, t2, t3 has a cross product.
        let pred = col("t0.b0")
            .eq(col("t2.a2"))
            .and(col("t2.b2").eq(col("t1.a1")))
            .and(col("t1.b1").eq(col("t3.a3")))
            .and(col("t3.b3").eq(lit(5i64)));
        let plan = comma_join(4, pred);
        let schema = plan.schema().clone();
        let out = reorder(plan).unwrap().data;
        assert_eq!(joins(&out), (3, 0), "{}", out.display_indent());
        // Same columns in the same order as before.
        assert_eq!(out.schema().as_ref(), schema.as_ref());
        // The filtered leaf starts the tree, under its own filter.
        let text = out.display_indent().to_string();
        assert!(text.contains("Filter: t3.b3 = Int64(5)"), "{text}");
    }

    #[test]
    fn unfiltered_equi_joined_leaves_join_each_other_before_the_cross_product() {
        // t1 = t3 on keys, t0 and t2 filtered: (t0 x t2) x (t1 JOIN t3), never t0 x t1 x ...
        let pred = col("t0.a0")
            .eq(lit(5i64))
            .and(col("t2.b2").eq(lit(7i64)))
            .and(col("t1.a1").eq(col("t3.a3")));
        let out = reorder(comma_join(4, pred)).unwrap().data;
        let LogicalPlan::Projection(p) = &out else { panic!("{}", out.display_indent()) };
        let LogicalPlan::Join(root) = p.input.as_ref() else { panic!("{}", out.display_indent()) };
        let LogicalPlan::Join(right) = root.right.as_ref() else {
            panic!("{}", out.display_indent())
        };
        assert_eq!(right.on.len(), 1, "{}", out.display_indent());
        assert_eq!(joins(&out), (3, 2));
    }

    #[test]
    fn subqueries_and_volatile_predicates_stay_on_top() {
        let pred = col("t0.a0").eq(col("t1.a1")).and(col("t1.a1").eq(col("t2.a2"))).and(
            datafusion_expr::Expr::ScalarFunction(datafusion_expr::expr::ScalarFunction::new_udf(
                datafusion_functions::math::random(),
                vec![],
            ))
            .gt(lit(0.5)),
        );
        let out = reorder(comma_join(3, pred)).unwrap().data;
        let LogicalPlan::Filter(f) = &out else { panic!("{}", out.display_indent()) };
        assert!(f.predicate.is_volatile());
        assert_eq!(joins(&out), (2, 0));
    }

    #[test]
    fn reordering_is_a_fixed_point() {
        let pred = col("t3.b3")
            .eq(col("t0.a0"))
            .and(col("t1.a1").eq(col("t2.b2")))
            .and(col("t0.b0").lt(col("t2.a2")))
            .and(col("t1.b1").eq(lit(1i64)));
        let once = reorder(comma_join(4, pred)).unwrap().data;
        let twice = reorder(once.clone()).unwrap().data;
        assert_eq!(once, twice);
    }

    #[test]
    fn sixty_four_tables_reorder_quickly() {
        // A chain t0 - t1 - ... - t63 given in reverse; debug builds too must be fast.
        let mut pred = col("t0.a0").eq(lit(1i64));
        for i in (1..64).rev() {
            pred = pred.and(col(format!("t{i}.a{i}")).eq(col(format!("t{}.b{}", i - 1, i - 1))));
        }
        let started = std::time::Instant::now();
        let out = reorder(comma_join(64, pred)).unwrap().data;
        assert_eq!(joins(&out), (63, 0));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
