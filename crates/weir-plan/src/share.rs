//! Sub-plan sharing: a sub-plan that occurs more than once in a query is made one node, so the
//! dataflow computes it once and each of its consumers reads its output.
//!
//! A common table expression read twice is the usual case (NEXMark q5: `WITH c AS (... COUNT(*)
//! ... GROUP BY auction) SELECT ... FROM c JOIN (SELECT MAX(num) FROM c) ...`): the binder
//! inlines it at each reference, and without sharing each copy keeps the same windowed
//! aggregate over the same stream, doing every event's work twice. A view read twice, or the
//! same subquery written twice, is the same.
//!
//! [`share_subplans`] walks the plan bottom-up and keeps one node of each kind it has seen: a
//! node equal to one seen before, field for field and with the same (already shared) inputs,
//! is replaced by that one, so equal sub-plans become the same `Arc`. The compiler in weir-exec
//! builds one dataflow node per distinct `Arc` ([`post_order`] gives them in its order), so the
//! plan stops being a tree where sharing found something: a node can have several consumers.
//!
//! Exact, never a change of meaning: each operator's output is a function of its inputs'
//! changes and of the step (the same instants and the same processing time for every node), so
//! two equal nodes over the same inputs output the same changes. The exceptions are left
//! unshared: a node with a volatile expression (`random()`: each occurrence draws its own
//! values, as a view read twice does in PostgreSQL), and `Apply`, whose subqueries are
//! evaluated row by row. Column pruning runs before and may narrow the two occurrences of a
//! CTE differently; then only their common part below the narrowing is shared (in q5, the
//! aggregate and everything under it).

use std::collections::HashMap;
use std::mem::discriminant;
use std::sync::Arc;

use datafusion_expr::Expr;
use weir_common::Result;

use crate::plan::LogicalPlan;

/// `plan` with each sub-plan that occurs more than once made one node (see the module docs).
pub fn share_subplans(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    let mut seen = Seen::default();
    seen.share(plan)
}

/// The distinct nodes of `plan` (by identity: a shared node once), inputs first: a node's
/// inputs in [`LogicalPlan::inputs`] order, each before it, a node already listed skipped.
/// This is the order in which weir-exec compiles them, the last being `plan` itself.
pub fn post_order(plan: &LogicalPlan) -> Vec<&LogicalPlan> {
    indexed_post_order(plan).0
}

/// [`post_order`], with each node's index there by its address.
pub(crate) fn indexed_post_order(
    plan: &LogicalPlan,
) -> (Vec<&LogicalPlan>, HashMap<*const LogicalPlan, usize>) {
    let mut order = Vec::new();
    let mut index = HashMap::new();
    visit(plan, &mut order, &mut index);
    (order, index)
}

/// Adds `plan`'s subtree to `order` (see [`post_order`]). A deep plan recurses through this
/// small frame only.
fn visit<'a>(
    plan: &'a LogicalPlan,
    order: &mut Vec<&'a LogicalPlan>,
    index: &mut HashMap<*const LogicalPlan, usize>,
) {
    if index.contains_key(&(plan as *const LogicalPlan)) {
        return;
    }
    for input in plan.inputs() {
        visit(input, order, index);
    }
    index.insert(plan as *const LogicalPlan, order.len());
    order.push(plan);
}

/// A node's kind and its inputs' addresses: equal nodes have equal shapes.
type Shape = (std::mem::Discriminant<LogicalPlan>, Vec<usize>);

/// The nodes kept so far, by their kind and their inputs' addresses.
#[derive(Default)]
struct Seen {
    /// Per node of the input plan (by address), the node it became.
    done: HashMap<*const LogicalPlan, Arc<LogicalPlan>>,
    /// The nodes kept, by kind and inputs.
    kept: HashMap<Shape, Vec<Arc<LogicalPlan>>>,
}

impl Seen {
    fn share(&mut self, plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
        if let Some(done) = self.done.get(&Arc::as_ptr(plan)) {
            return Ok(done.clone());
        }
        let mut changed = false;
        let node = plan.map_inputs(&mut |input| {
            let shared = self.share(input)?;
            changed |= !Arc::ptr_eq(&shared, input);
            Ok(shared)
        })?;
        let node = if changed { Arc::new(node) } else { plan.clone() };
        let node = if shareable(&node) {
            let inputs = node.inputs().iter().map(|i| Arc::as_ptr(i) as usize).collect();
            let same = self.kept.entry((discriminant(node.as_ref()), inputs)).or_default();
            // Inputs are compared by address first (`Arc`'s equality for an `Eq` type), so
            // this compares the two nodes' own fields only.
            match same.iter().find(|k| **k == node) {
                Some(k) => k.clone(),
                None => {
                    same.push(node.clone());
                    node
                }
            }
        } else {
            node
        };
        self.done.insert(Arc::as_ptr(plan), node.clone());
        Ok(node)
    }
}

/// Whether two equal occurrences of `plan` may be one node: no volatile expression of its own,
/// and not an `Apply` (see the module docs).
fn shareable(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Apply { .. } => false,
        LogicalPlan::StreamScan { .. }
        | LogicalPlan::TableScan { .. }
        | LogicalPlan::Window { .. }
        | LogicalPlan::TimeWindows { .. }
        | LogicalPlan::WindowBounds { .. }
        | LogicalPlan::Distinct { .. }
        | LogicalPlan::UnionAll { .. }
        | LogicalPlan::ToStream { .. }
        | LogicalPlan::Rename { .. } => true,
        LogicalPlan::WindowAggregate { merge, .. } => match merge {
            Some((group, aggs)) => {
                !volatile(group.iter().chain(aggs.iter().flat_map(|a| a.exprs())))
            }
            None => true,
        },
        LogicalPlan::Filter { predicate, .. } => !predicate.is_volatile(),
        LogicalPlan::Project { exprs, .. } => !volatile(exprs.iter()),
        LogicalPlan::Join { on, filter, .. } => {
            !volatile(on.iter().flat_map(|(l, r)| [l, r]).chain(filter.iter()))
        }
        LogicalPlan::Aggregate { group, aggs, .. }
        | LogicalPlan::PaneAggregate { group, aggs, .. } => {
            !volatile(group.iter().chain(aggs.iter().flat_map(|a| a.exprs())))
        }
        LogicalPlan::Values { rows, .. } => !volatile(rows.iter().flatten()),
        LogicalPlan::TopK { order, .. } => !volatile(order.iter().map(|o| &o.expr)),
        LogicalPlan::OverAggregate { partition_by, order_by, aggs: calls, .. }
        | LogicalPlan::OverRelation { partition_by, order_by, calls, .. } => !volatile(
            partition_by
                .iter()
                .chain(order_by.iter().map(|o| &o.expr))
                .chain(calls.iter().flat_map(|c| c.arg.iter().chain(c.default.iter()))),
        ),
        LogicalPlan::Ranking { partition_by, order_by, .. } => {
            !volatile(partition_by.iter().chain(order_by.iter().map(|o| &o.expr)))
        }
    }
}

/// Whether any of `exprs` is volatile.
fn volatile<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> bool {
    exprs.into_iter().any(Expr::is_volatile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::{col, create_udf, lit, ColumnarValue, Volatility};
    use weir_common::TimeDomain;

    /// A base stream `s(t, k)` (a new `Arc` at each call).
    fn stream() -> Arc<LogicalPlan> {
        let fields =
            vec![Field::new("t", DataType::Int64, true), Field::new("k", DataType::Int64, true)];
        let schema =
            Arc::new(DFSchema::try_from_qualified_schema("s", &Schema::new(fields)).unwrap());
        Arc::new(LogicalPlan::StreamScan {
            name: "s".into(),
            schema,
            time_column: 0,
            domain: TimeDomain::Ticks,
        })
    }

    fn filter(predicate: Expr, input: Arc<LogicalPlan>) -> Arc<LogicalPlan> {
        Arc::new(LogicalPlan::Filter { predicate, input })
    }

    fn union(inputs: Vec<Arc<LogicalPlan>>) -> Arc<LogicalPlan> {
        let schema = inputs[0].schema();
        Arc::new(LogicalPlan::UnionAll { inputs, schema })
    }

    fn inputs(plan: &LogicalPlan) -> Vec<Arc<LogicalPlan>> {
        plan.inputs().into_iter().cloned().collect()
    }

    #[test]
    fn equal_subplans_become_one_node_and_different_ones_share_what_is_equal_below() {
        let k = |n: i64| col("s.k").gt(lit(n));
        // Equal filters over equal streams: one filter, one stream.
        let plan = union(vec![filter(k(1), stream()), filter(k(1), stream())]);
        let shared = share_subplans(&plan).unwrap();
        let [l, r] = &inputs(&shared)[..] else { panic!("two inputs") };
        assert!(Arc::ptr_eq(l, r));
        assert_eq!(post_order(&shared).len(), 3);
        assert_eq!(*shared, *plan, "the same plan, by value");
        // Different filters over equal streams: the stream only.
        let plan = union(vec![filter(k(1), stream()), filter(k(2), stream())]);
        let shared = share_subplans(&plan).unwrap();
        let [l, r] = &inputs(&shared)[..] else { panic!("two inputs") };
        assert!(!Arc::ptr_eq(l, r));
        assert!(Arc::ptr_eq(&inputs(l)[0], &inputs(r)[0]));
        assert_eq!(post_order(&shared).len(), 4);
        // Shown whole once, then as the same node.
        assert_eq!(
            explain(&shared),
            "UnionAll  -> relation\n  Filter: s.k > Int64(1)  -> relation\n    StreamScan: s  -> \
             stream  (shared: 2 readers)\n  Filter: s.k > Int64(2)  -> relation\n    StreamScan: \
             s  -> stream  (the same node as above)\n"
        );
        // A plan with nothing to share comes back as it was.
        let plan = union(vec![filter(k(1), stream())]);
        assert!(Arc::ptr_eq(&share_subplans(&plan).unwrap(), &plan));
    }

    #[test]
    fn a_volatile_node_is_not_shared() {
        let fun = Arc::new(|_: &[ColumnarValue]| -> datafusion_common::Result<ColumnarValue> {
            Ok(ColumnarValue::Scalar(datafusion_common::ScalarValue::Float64(Some(0.5))))
        });
        let random = create_udf("random", vec![], DataType::Float64, Volatility::Volatile, fun);
        let p = || random.call(vec![]).gt(lit(0.5));
        let plan = union(vec![filter(p(), stream()), filter(p(), stream())]);
        let shared = share_subplans(&plan).unwrap();
        let [l, r] = &inputs(&shared)[..] else { panic!("two inputs") };
        assert!(!Arc::ptr_eq(l, r), "each draws its own values");
        assert!(Arc::ptr_eq(&inputs(l)[0], &inputs(r)[0]), "the stream below is shared");
    }

    #[test]
    fn post_order_lists_each_node_once_inputs_first() {
        let s = stream();
        let f = filter(col("s.k").gt(lit(1)), s.clone());
        let plan = union(vec![f.clone(), s.clone(), f.clone()]);
        let order: Vec<*const LogicalPlan> =
            post_order(&plan).into_iter().map(|n| n as *const LogicalPlan).collect();
        assert_eq!(order, [Arc::as_ptr(&s), Arc::as_ptr(&f), Arc::as_ptr(&plan)]);
    }
}
