//! The graph: a compiled query as a flat graph of operators (the query's dataflow), and the walk that evaluates it.
//!
//! Nodes live in a vector in topological order: a node's inputs are earlier nodes, named by
//! index, and the root, the query's output, is the last node. Usually each node's output is
//! read by one consumer and the graph is a tree; a sub-plan the plan shares
//! ([`weir_plan::share_subplans`]: a CTE read twice) is one node with several consumers.
//! [`crate::compile`] builds one node per distinct plan node, inputs first.
//!
//! A step ([`Graph::eval`]) walks the nodes once, in order: each node gets its inputs'
//! outputs (a `Vec` in plan input order), moved out of their slots by their last reader and
//! copied for the others, and leaves its own output in its slot for its consumers. No
//! recursion: a plan thousands of nodes deep needs no stack to evaluate. Before the walk, each
//! node's [`Step::input_wakeup`] is taken from the wake-ups of the nodes below it, so an
//! operator that asks whether the plan below has an instant of its own (RSTREAM) never reaches
//! into another operator.
//!
//! The query's next wake-up is the earliest over all nodes; it can evaluate spans if every
//! node can. State is saved and restored node by node in pre-order from the root (each node
//! before its inputs, inputs in plan order, a shared node at its first visit only), each node
//! writing its own sections only.

use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::operator::{min_wakeup, prefix_before_failure, EvalCtx, Operator, Step};
use crate::state::{StateReader, StateWriter};

/// A step that failed: the error, the first instant it failed at, and the query's output at
/// the instants before it (None: nothing of the step is known to be right).
#[derive(Debug)]
pub struct Failure {
    pub error: WeirError,
    pub at: Time,
    pub output: Option<ChangeBatch>,
}

/// One node: its operator and the nodes whose outputs it reads, in plan input order.
#[derive(Debug)]
struct Node {
    op: Box<dyn Operator>,
    inputs: Vec<usize>,
}

/// A compiled query. See the module docs.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    /// Per node, how many times nodes read its output (a node reading it twice counts twice).
    readers: Vec<usize>,
    /// Per node, what it is in the plan (its EXPLAIN line; empty if not given).
    labels: Vec<String>,
    /// Scratch kept for its allocations: each node's output until its last reader takes it.
    outputs: Vec<Option<ChangeBatch>>,
    /// Scratch: per node, the earliest wake-up below it and in its subtree (itself included).
    wakeups: Vec<(Option<Time>, Option<Time>)>,
    /// Scratch: per node, the reads of its output still to come in this step.
    unread: Vec<usize>,
}

impl Graph {
    pub fn new() -> Self {
        Graph::default()
    }

    /// Adds a node reading the outputs of `inputs` (earlier nodes, each possibly read by other
    /// nodes too) and returns its index. The last node added is the root.
    pub fn add(&mut self, op: Box<dyn Operator>, inputs: Vec<usize>) -> Result<usize> {
        if let Some(i) = inputs.iter().find(|&&i| i >= self.nodes.len()) {
            return Err(WeirError::internal(format!("node {i} read before it exists")));
        }
        for &i in &inputs {
            self.readers[i] += 1;
        }
        self.nodes.push(Node { op, inputs });
        self.readers.push(0);
        self.labels.push(String::new());
        Ok(self.nodes.len() - 1)
    }

    /// Names node `i` by what it is in the plan (its EXPLAIN line), for reports.
    pub fn set_label(&mut self, i: usize, label: String) {
        if let Some(l) = self.labels.get_mut(i) {
            *l = label;
        }
    }

    /// Per node, what it is in the plan (see [`Graph::set_label`]).
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Per node, an estimate of the bytes its operator's state holds
    /// ([`Operator::state_bytes`]).
    pub fn state_bytes(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| n.op.state_bytes()).collect()
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The operator of node `i`.
    pub fn operator(&self, i: usize) -> Option<&dyn Operator> {
        self.nodes.get(i).map(|n| n.op.as_ref())
    }

    /// The operator of node `i`, mutable.
    pub fn operator_mut(&mut self, i: usize) -> Option<&mut dyn Operator> {
        match self.nodes.get_mut(i) {
            Some(n) => Some(n.op.as_mut()),
            None => None,
        }
    }

    /// The nodes whose outputs node `i` reads, in plan input order.
    pub fn inputs(&self, i: usize) -> &[usize] {
        self.nodes.get(i).map_or(&[], |n| &n.inputs)
    }

    /// The nodes, each operator with the nodes it reads, for a runtime that hosts each node on
    /// its own (see `weir-workers`).
    pub fn into_nodes(self) -> Vec<(Box<dyn Operator>, Vec<usize>)> {
        self.nodes.into_iter().map(|n| (n.op, n.inputs)).collect()
    }

    /// The earliest instant after the last evaluated one at which the query's output can
    /// change without new input: the earliest wake-up of any node.
    pub fn next_wakeup(&self) -> Option<Time> {
        min_wakeup(self.nodes.iter().map(|n| n.op.next_wakeup()))
    }

    /// Whether every node can evaluate spans of instants.
    pub fn span_capable(&self) -> bool {
        self.nodes.iter().all(|n| n.op.span_capable())
    }

    /// The query's output changes at the instants [lo, hi] (lo = hi instant by instant; a span
    /// only if [`Graph::span_capable`]), given the source changes of the step in `ctx`.
    pub fn eval(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        self.eval_until_failure(lo, hi, ctx).map_err(|f| f.error)
    }

    /// [`Graph::eval`], which on a failure within a span also gives the output at the instants
    /// before the first failing one, exactly as evaluating instant by instant would have
    /// delivered it. A stateless node that fails (a division by zero in a projection) is
    /// evaluated again on the prefixes of its input to find the first instant it fails at
    /// ([`crate::operator::prefix_before_failure`]); the walk goes on with its output before
    /// that instant, the nodes after it evaluate the step only up to there, and the root's
    /// output is cut there. An output change at τ depends only on
    /// input at instants up to τ, so what is kept is exact; the state of the nodes is not, and
    /// the query stops. A stateful node that fails loses the whole step's output.
    pub fn eval_until_failure(
        &mut self,
        lo: Time,
        hi: Time,
        ctx: &EvalCtx,
    ) -> std::result::Result<ChangeBatch, Box<Failure>> {
        let fail = |error: WeirError| Box::new(Failure { error, at: lo, output: None });
        let n = self.nodes.len();
        if n == 0 {
            return Err(fail(WeirError::internal("an empty graph evaluated")));
        }
        // The plan's instants before the step, below each node and including it (a node's
        // wake-ups change as it evaluates).
        self.wakeups.clear();
        for node in &self.nodes {
            let below = min_wakeup(node.inputs.iter().map(|&i| self.wakeups[i].1));
            self.wakeups.push((below, min_wakeup([below, node.op.next_instant()])));
        }
        self.outputs.clear();
        self.outputs.resize_with(n, || None);
        self.unread.clear();
        self.unread.extend_from_slice(&self.readers);
        // The first instant a node failed at so far, and its error.
        let mut failed: Option<(Time, WeirError)> = None;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            // After a failure at `at`, the nodes that follow evaluate only the instants before
            // it, on their inputs cut there: what is kept is exact, and no node walks a span
            // its input no longer reaches the end of (a window moving over empty ticks to the
            // end of time).
            let step_hi = failed.as_ref().map_or(hi, |(at, _)| hi.min(at - 1));
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for &j in &node.inputs {
                // The last reader of a node's output takes it; the others get a copy.
                self.unread[j] -= 1;
                let out = if self.unread[j] == 0 {
                    self.outputs[j].take()
                } else {
                    self.outputs[j].clone()
                };
                let out = out.ok_or_else(|| fail(WeirError::internal("an input not evaluated")))?;
                let out = match &failed {
                    Some((at, _)) => out.before(*at).map_err(fail)?,
                    None => out,
                };
                inputs.push(out);
            }
            let step = Step { lo, hi: step_hi, ctx, input_wakeup: self.wakeups[i].0 };
            let kept = (lo < step_hi && node.op.stateless()).then(|| inputs.clone());
            match node.op.eval(&step, inputs) {
                Ok(out) => self.outputs[i] = Some(out),
                Err(e) => {
                    let prefix = kept
                        .and_then(|k| prefix_before_failure(node.op.as_mut(), &step, &k))
                        .filter(|(at, _)| *at > lo);
                    let Some((at, out)) = prefix else { return Err(fail(e)) };
                    if failed.as_ref().is_none_or(|(t, _)| at < *t) {
                        failed = Some((at, e));
                    }
                    self.outputs[i] = Some(out);
                }
            }
        }
        let root = self.outputs[n - 1]
            .take()
            .ok_or_else(|| fail(WeirError::internal("the root not evaluated")))?;
        match failed {
            None => Ok(root),
            Some((at, error)) => {
                let output = root.before(at).map_err(fail)?;
                Err(Box::new(Failure { error, at, output: Some(output) }))
            }
        }
    }

    /// The nodes in the order their state is saved: pre-order from the root, inputs in plan
    /// order, a node read by several at its first visit only (for a tree, every node once).
    fn state_order(&self) -> Result<Vec<usize>> {
        let n = self.nodes.len();
        let mut order = Vec::with_capacity(n);
        let mut visited = vec![false; n];
        let mut stack: Vec<usize> = n.checked_sub(1).into_iter().collect();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut visited[i], true) {
                continue;
            }
            order.push(i);
            stack.extend(self.nodes[i].inputs.iter().rev());
        }
        if order.len() != n {
            return Err(WeirError::internal("a graph node is not below the root"));
        }
        Ok(order)
    }

    /// Writes every node's state between steps (see [`crate::state`]), in pre-order from the
    /// root.
    pub fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        for i in self.state_order()? {
            self.nodes[i].op.save_state(w)?;
        }
        Ok(())
    }

    /// Restores what [`Graph::save_state`] wrote, into a graph freshly compiled from the
    /// same plan.
    pub fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        for i in self.state_order()? {
            self.nodes[i].op.restore_state(r)?;
        }
        Ok(())
    }

    /// Incremental checkpoints (see [`crate::dirty`]): writes every node's changes since the
    /// last checkpoint, in the order of [`Graph::save_state`]; false if a node cannot say
    /// (what was written is then to be dropped, and the graph saved whole).
    pub fn save_changes(&mut self, w: &mut StateWriter) -> Result<bool> {
        for i in self.state_order()? {
            if !self.nodes[i].op.save_changes(w)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Applies what [`Graph::save_changes`] wrote to the state of the previous checkpoint.
    pub fn restore_changes(&mut self, r: &mut StateReader) -> Result<()> {
        for i in self.state_order()? {
            self.nodes[i].op.restore_changes(r)?;
        }
        Ok(())
    }

    /// The state as it is now was checkpointed whole or restored: every node that can starts
    /// recording its changes.
    pub fn track_changes(&mut self) {
        for node in &mut self.nodes {
            node.op.track_changes();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::testing::{kv_schema, run};

    /// An operator that logs each step it evaluates (its instant, its number of inputs and the
    /// wake-up below it), passes its first input on, and wakes once at `wakeup`.
    #[derive(Debug)]
    struct Probe {
        name: &'static str,
        wakeup: Option<Time>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Operator for Probe {
        fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
            let (name, n, below) = (self.name, inputs.len(), step.input_wakeup);
            self.log.lock().expect("log").push(format!("@{} {name} {n} below {below:?}", step.lo));
            if self.wakeup.is_some_and(|w| w <= step.hi) {
                self.wakeup = None;
            }
            Ok(inputs.into_iter().next().unwrap_or_else(|| ChangeBatch::empty(kv_schema())))
        }

        fn next_wakeup(&self) -> Option<Time> {
            self.wakeup
        }

        fn state_bytes(&self) -> usize {
            0
        }

        fn save_state(&self, w: &mut StateWriter) -> Result<()> {
            w.put(self.name, "", 0, vec![])
        }

        fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
            r.take(self.name, "").map(|_| ())
        }
    }

    #[test]
    fn nodes_run_in_order_each_told_the_wake_up_below_it() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let probe = |name, wakeup| Box::new(Probe { name, wakeup, log: log.clone() });
        //        c@9
        //      /     \
        //    a@5      b
        //     |       |
        //     l      m@3
        let mut flow = Graph::new();
        let l = flow.add(probe("l", None), vec![]).unwrap();
        let a = flow.add(probe("a", Some(5)), vec![l]).unwrap();
        let m = flow.add(probe("m", Some(3)), vec![]).unwrap();
        let b = flow.add(probe("b", None), vec![m]).unwrap();
        assert!(flow.add(probe("x", None), vec![b, 7]).is_err(), "no node 7");
        let c = flow.add(probe("c", Some(9)), vec![a, b]).unwrap();
        assert_eq!((c, flow.len()), (4, 5));
        assert_eq!(flow.inputs(c), [a, b]);
        assert_eq!(flow.next_wakeup(), Some(3));
        assert!(!flow.span_capable());
        assert!(run(&mut flow).is_empty());
        let steps = log.lock().unwrap().clone();
        assert_eq!(
            steps,
            [
                "@3 l 0 below None",
                "@3 a 1 below None",
                "@3 m 0 below None",
                "@3 b 1 below Some(3)",
                "@3 c 2 below Some(3)",
                "@5 l 0 below None",
                "@5 a 1 below None",
                "@5 m 0 below None",
                "@5 b 1 below None",
                "@5 c 2 below Some(5)",
                "@9 l 0 below None",
                "@9 a 1 below None",
                "@9 m 0 below None",
                "@9 b 1 below None",
                "@9 c 2 below None",
            ]
        );
    }

    #[test]
    fn state_is_saved_root_first_then_each_input_in_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let probe = |name| Box::new(Probe { name, wakeup: None, log: log.clone() });
        let mut flow = Graph::new();
        let l = flow.add(probe("l"), vec![]).unwrap();
        let a = flow.add(probe("a"), vec![l]).unwrap();
        let m = flow.add(probe("m"), vec![]).unwrap();
        flow.add(probe("c"), vec![a, m]).unwrap();
        let mut w = StateWriter::new();
        flow.save_state(&mut w).expect("save");
        let bytes = w.into_bytes().expect("bytes");
        let mut r = StateReader::from_bytes(&bytes).expect("read");
        for name in ["c", "a", "l", "m"] {
            r.take(name, "").expect(name);
        }
        r.finish().expect("nothing else");
        let mut r = StateReader::from_bytes(&bytes).expect("read");
        flow.restore_state(&mut r).expect("restore");
        r.finish().expect("everything taken");
    }

    #[test]
    fn a_node_read_twice_is_evaluated_once_and_each_reader_gets_its_output() {
        use crate::ops::union::UnionAll;
        use crate::testing::{kv, Feed};
        let log = Arc::new(Mutex::new(Vec::new()));
        // union(probe(feed), feed): the feed's rows reach the union twice.
        let mut flow = Graph::new();
        let feed =
            flow.add(Box::new(Feed::new(vec![kv(1, "+1 a 1"), kv(2, "+1 b 2")])), vec![]).unwrap();
        let p = Box::new(Probe { name: "p", wakeup: None, log: log.clone() });
        let p = flow.add(p, vec![feed]).unwrap();
        flow.add(Box::new(UnionAll::new(kv_schema())), vec![p, feed]).unwrap();
        assert_eq!(flow.inputs(2), [p, feed]);
        assert_eq!(run(&mut flow), ["@1 +1 a 1", "@1 +1 a 1", "@2 +1 b 2", "@2 +1 b 2"]);
        assert_eq!(log.lock().unwrap().len(), 2, "the probe runs once a step");
        // A node read by itself twice (a self-join of a CTE) gets two equal inputs.
        let mut flow = Graph::new();
        let feed = flow.add(Box::new(Feed::new(vec![kv(3, "+1 c 3")])), vec![]).unwrap();
        flow.add(Box::new(UnionAll::new(kv_schema())), vec![feed, feed]).unwrap();
        assert_eq!(run(&mut flow), ["@3 +1 c 3", "@3 +1 c 3"]);
    }

    #[test]
    fn a_shared_node_saves_its_state_once_at_its_first_visit() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let probe = |name| Box::new(Probe { name, wakeup: None, log: log.clone() });
        // c(a(l), l): l is visited under a first, and not again.
        let mut flow = Graph::new();
        let l = flow.add(probe("l"), vec![]).unwrap();
        let a = flow.add(probe("a"), vec![l]).unwrap();
        flow.add(probe("c"), vec![a, l]).unwrap();
        let mut w = StateWriter::new();
        flow.save_state(&mut w).expect("save");
        let bytes = w.into_bytes().expect("bytes");
        let mut r = StateReader::from_bytes(&bytes).expect("read");
        for name in ["c", "a", "l"] {
            r.take(name, "").expect(name);
        }
        r.finish().expect("nothing else");
        let mut r = StateReader::from_bytes(&bytes).expect("read");
        flow.restore_state(&mut r).expect("restore");
        r.finish().expect("everything taken");
    }

    #[test]
    fn a_node_not_below_the_root_is_an_error() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut flow = Graph::new();
        for name in ["l", "m"] {
            flow.add(Box::new(Probe { name, wakeup: None, log: log.clone() }), vec![]).unwrap();
        }
        let err = flow.save_state(&mut StateWriter::new()).expect_err("two roots");
        assert!(err.to_string().contains("not below the root"), "{err}");
        assert!(Graph::new().eval(0, 0, &EvalCtx::default()).is_err());
    }
}
