//! The dataflow: every running continuous query, its input, its frontier and where its output
//! goes.
//!
//! A query's *frontier* is the minimum watermark of the streams it reads, leaving out idle
//! ones (unless all are idle); [`Dataflow::advance`] evaluates each query up to its frontier
//! and hands the output to the query's [`Output`]: a subscriber's channel, a maintained view's
//! contents, or a file sink. A query restored from a checkpoint for a subscriber that has not
//! come back yet is *parked*: it has no output, buffers its input and is not evaluated until
//! [`Dataflow::resume`] gives it one.
//!
//! Tables never hold a query back: a table change at an instant the query has already
//! evaluated is applied at the query's next instant ([`Dataflow::forward_table_change`]).

use std::collections::HashMap;
use std::sync::Arc;

use weir_common::{ChangeBatch, Result, Time, TimeDomain, Watermark, WeirError, WATERMARK_CLOSED};
use weir_exec::heap::StateSize;
use weir_plan::LogicalPlan;
use weir_workers::{Runner, Workers};

use super::tables::{Maintained, Shared};
use crate::intake::is_or_companion_of;
use crate::sink::FileSink;
use crate::subscription::{output_channel, send, OutputReceiver, OutputSender, Subscription};

/// Where a running query's output goes.
pub(crate) trait Output: Send + std::fmt::Debug {
    /// Takes the output changes of one advance, in time order, then how the evaluation ended
    /// (output produced before a failure is delivered first). Returns whether the query goes
    /// on: false once the receiver went away or the query or a write failed, which the output
    /// records for whoever reads it.
    fn deliver(&mut self, changes: Vec<ChangeBatch>, outcome: Result<()>) -> bool;

    /// [`Output::deliver`], except that the output may still be taking the changes in when
    /// it returns (a file sink's writing thread writing them) until [`Output::settle`].
    fn deliver_in_flight(&mut self, changes: Vec<ChangeBatch>, outcome: Result<()>) -> bool {
        self.deliver(changes, outcome)
    }

    /// Waits until what was delivered has reached its destination; returns whether the
    /// query goes on, as [`Output::deliver`] does.
    fn settle(&mut self) -> bool {
        true
    }

    /// The bytes this output holds for its query (a maintained view's contents), with what
    /// holds them; none for a subscriber or a sink.
    fn held(&self) -> Option<(String, usize)> {
        None
    }
}

/// A subscriber's channel: the changes, then an error if the query failed.
#[derive(Debug)]
pub(crate) struct Subscriber(pub OutputSender);

impl Output for Subscriber {
    fn deliver(&mut self, changes: Vec<ChangeBatch>, outcome: Result<()>) -> bool {
        let delivered = changes.into_iter().all(|b| send(&self.0, Ok(b)));
        match outcome {
            Ok(()) => delivered,
            Err(e) => {
                send(&self.0, Err(e));
                false
            }
        }
    }
}

impl Output for Shared<Maintained> {
    fn held(&self) -> Option<(String, usize)> {
        Some(("the view's contents".to_string(), self.lock().contents.heap_bytes()))
    }

    /// Applies the changes to the contents and hands them to the view's own subscribers;
    /// a failure reaches them too, and ends them.
    fn deliver(&mut self, changes: Vec<ChangeBatch>, outcome: Result<()>) -> bool {
        let mut view = self.lock();
        let result = changes.iter().try_for_each(|b| view.contents.apply(b)).and(outcome);
        if let Some(t) = changes.iter().filter_map(|b| b.times.iter().max()).max() {
            view.changed_at = Some(view.changed_at.map_or(*t, |c| c.max(*t)));
        }
        let failure = result.as_ref().err().cloned();
        view.taps.retain(|(_, tx)| {
            changes.iter().all(|b| b.is_empty() || send(tx, Ok(b.clone())))
                && failure.as_ref().is_none_or(|e| {
                    send(tx, Err(e.clone()));
                    false
                })
        });
        goes_on(&mut view.failed, result)
    }
}

/// Whether an output that keeps its failure goes on after `result`; a failure is kept.
fn goes_on(failed: &mut Option<WeirError>, result: Result<()>) -> bool {
    match result {
        Ok(()) => true,
        Err(e) => {
            *failed = Some(e);
            false
        }
    }
}

/// A file sink and whether it failed (then it stops, and `SHOW SINKS` says why).
#[derive(Debug)]
pub(crate) struct SinkFile {
    pub file: FileSink,
    /// The file written, absolute.
    pub path: std::path::PathBuf,
    pub failed: Option<WeirError>,
}

impl Output for Shared<SinkFile> {
    /// Writes the changes to the file (each large batch formatted a slice at a time while
    /// the slice before is written, see `FileSink::write`); a write that failed fails the
    /// sink.
    fn deliver(&mut self, changes: Vec<ChangeBatch>, outcome: Result<()>) -> bool {
        let mut sink = self.lock();
        let result = changes
            .iter()
            .try_for_each(|b| sink.file.write(b, true))
            .and_then(|()| sink.file.settle())
            .and(outcome);
        goes_on(&mut sink.failed, result)
    }

    /// Hands the changes to the file's writing thread, which writes them while the engine
    /// goes on; a write that failed (an earlier batch's) fails the sink.
    fn deliver_in_flight(&mut self, changes: Vec<ChangeBatch>, outcome: Result<()>) -> bool {
        let mut sink = self.lock();
        let result = changes.iter().try_for_each(|b| sink.file.write(b, false)).and(outcome);
        goes_on(&mut sink.failed, result)
    }

    fn settle(&mut self) -> bool {
        let mut sink = self.lock();
        let result = sink.file.settle();
        goes_on(&mut sink.failed, result)
    }
}

/// What a running query feeds: by this it is found again after recovery, and stopped when
/// its view or sink is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    View(String),
    Sink(String),
    /// A subscriber, by its query text (None: not resumable, e.g. a REPL query without text).
    Subscriber(Option<String>),
}

impl Target {
    /// What the query feeds, as `SHOW QUERIES` says it: `view v`, `sink k` or `subscriber`.
    pub fn feeds(&self) -> String {
        match self {
            Target::View(v) => format!("view {v}"),
            Target::Sink(s) => format!("sink {s}"),
            Target::Subscriber(_) => "subscriber".to_string(),
        }
    }

    /// The key under which the query's state is saved in a checkpoint.
    pub fn key(&self) -> Option<String> {
        match self {
            Target::View(v) => Some(format!("view:{v}")),
            Target::Sink(s) => Some(format!("sink:{s}")),
            Target::Subscriber(sql) => sql.as_ref().map(|sql| format!("sub:{sql}")),
        }
    }
}

#[derive(Debug)]
pub(crate) struct RunningQuery {
    pub id: u64,
    pub runner: Runner,
    pub plan: Arc<LogicalPlan>,
    pub target: Target,
    /// What other processes of a cluster plan the query from (None on one process).
    pub recipe: Option<Vec<u8>>,
    /// None while parked.
    output: Option<Box<dyn Output>>,
}

/// The running queries. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Dataflow {
    queries: Vec<RunningQuery>,
    next_id: u64,
    /// The timely workers queries run on (None: one worker, the engine's thread).
    workers: Option<Arc<Workers>>,
    /// With one worker: the timely worker that queries restored from a checkpoint of several
    /// run on, as their parts (started when one is restored).
    restored_on: Option<Arc<Workers>>,
}

impl Dataflow {
    /// Starts running `plan` into `output` (None: parked), its tables' current contents
    /// given as `initial` input; returns the query's id. Refuses a plan that needs row-by-row
    /// subquery evaluation, which only one-shot queries can do.
    pub fn launch(
        &mut self,
        plan: &Arc<LogicalPlan>,
        recipe: Option<Vec<u8>>,
        target: Target,
        output: Option<Box<dyn Output>>,
        initial: Vec<(String, ChangeBatch)>,
    ) -> Result<u64> {
        let runner = self.runner(plan, recipe.as_deref())?;
        self.add(runner, plan, recipe, target, output, initial)
    }

    /// A new query or subscription id.
    pub fn allocate_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A fresh runner for a plan a continuous query may run.
    /// Runs every query started from now on `n` workers (1: on the engine's thread).
    pub fn set_workers(&mut self, n: usize) -> Result<()> {
        if n.max(1) == self.workers() {
            return Ok(());
        }
        if !self.queries.is_empty() {
            return Err(WeirError::plan(
                "the number of workers is set before any continuous query starts",
            ));
        }
        self.workers = if n > 1 { Some(Workers::start(n)?) } else { None };
        Ok(())
    }

    /// Runs every query started from now on the workers of `cluster` (this process is its
    /// process 0).
    pub fn set_cluster(&mut self, cluster: &weir_workers::Cluster) -> Result<()> {
        if !self.queries.is_empty() {
            return Err(WeirError::plan("a cluster is joined before any continuous query starts"));
        }
        let workers = Workers::start_cluster(cluster, super::cluster::resolver())?;
        self.workers = Some(workers);
        Ok(())
    }

    /// Whether queries run on workers of other processes too.
    pub fn spans_processes(&self) -> bool {
        self.workers.as_ref().is_some_and(|w| w.spans_processes())
    }

    /// Rows and bytes sent between workers so far, over every query (0 on one worker).
    pub fn traffic(&self) -> (u64, u64) {
        self.workers.as_ref().map_or((0, 0), |w| w.traffic())
    }

    /// The number of workers queries run on.
    pub fn workers(&self) -> usize {
        self.workers.as_ref().map_or(1, |w| w.peers())
    }

    /// A fresh runner for `plan` to restore `state` into: one worker's state on this thread,
    /// several workers' on the workers as the parts it was saved as (see
    /// [`weir_workers::Runner::restore_state`]), whatever the engine's worker count.
    pub fn runner_for(
        &mut self,
        plan: &Arc<LogicalPlan>,
        recipe: Option<&[u8]>,
        state: &[u8],
    ) -> Result<Runner> {
        runnable(plan)?;
        if weir_workers::saved_workers(state)? == 1 {
            return Ok(Runner::Local(weir_exec::QueryRunner::new(plan)?));
        }
        match &self.workers {
            Some(w) if w.peers() > 1 => Runner::new(plan, Some(w), recipe),
            _ => {
                let workers = match &self.restored_on {
                    Some(w) => w.clone(),
                    None => self.restored_on.insert(Workers::start(1)?).clone(),
                };
                Runner::hosted(plan, &workers, recipe)
            }
        }
    }

    pub fn runner(&self, plan: &Arc<LogicalPlan>, recipe: Option<&[u8]>) -> Result<Runner> {
        runnable(plan)?;
        Runner::new(plan, self.workers.as_ref(), recipe)
    }

    /// Adds a query with a runner already built (and perhaps restored from a checkpoint).
    pub fn add(
        &mut self,
        mut runner: Runner,
        plan: &Arc<LogicalPlan>,
        recipe: Option<Vec<u8>>,
        target: Target,
        output: Option<Box<dyn Output>>,
        initial: Vec<(String, ChangeBatch)>,
    ) -> Result<u64> {
        for (source, batch) in initial {
            runner.push(&source, batch)?;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.queries.push(RunningQuery { id, runner, plan: plan.clone(), target, recipe, output });
        Ok(id)
    }

    pub fn len(&self) -> usize {
        self.queries.len()
    }

    pub fn queries(&self) -> &[RunningQuery] {
        &self.queries
    }

    pub fn queries_mut(&mut self) -> &mut [RunningQuery] {
        &mut self.queries
    }

    /// Stops the queries `stop` picks; their subscriptions end.
    pub fn stop_where(&mut self, stop: impl Fn(&RunningQuery) -> bool) {
        self.queries.retain(|q| !stop(q));
    }

    /// Whether any query reads `stream` or its companions.
    pub fn reads(&self, stream: &str) -> bool {
        self.queries
            .iter()
            .any(|q| q.runner.sources().iter().any(|s| is_or_companion_of(s, stream)))
    }

    /// Hands changes of a source to every query reading it (the last one takes the batch).
    pub fn forward(&mut self, source: &str, batch: ChangeBatch) -> Result<()> {
        let readers: Vec<usize> = (0..self.queries.len())
            .filter(|&i| self.queries[i].runner.sources().iter().any(|s| s == source))
            .collect();
        let mut batch = Some(batch);
        for (k, &i) in readers.iter().enumerate() {
            let b = if k + 1 == readers.len() { batch.take() } else { batch.clone() };
            if let Some(b) = b {
                self.queries[i].runner.push(source, b)?;
            }
        }
        Ok(())
    }

    /// Hands a table's changes at `t` to the queries reading it, each at `t` or, if it has
    /// evaluated past `t`, at its next instant. A query that has evaluated the last instant
    /// of time (its streams closed, or an element stamped at the largest tick) has no instant
    /// left for the change to count at: its output is final, and the change passes it by.
    pub fn forward_table_change(
        &mut self,
        table: &str,
        changes: &ChangeBatch,
        t: Time,
    ) -> Result<()> {
        for q in &mut self.queries {
            if q.runner.sources().iter().any(|s| s == table) {
                let at = match q.runner.last_instant() {
                    Some(l) if l >= t => match l.checked_add(1) {
                        Some(next) => next,
                        None => continue,
                    },
                    _ => t,
                };
                let mut c = changes.clone();
                c.times.iter_mut().for_each(|x| *x = at);
                q.runner.push(table, c)?;
            }
        }
        Ok(())
    }

    /// A heartbeat at `t` on `stream`, for the queries reading it.
    pub fn heartbeat(&mut self, stream: &str, t: Time) {
        for q in &mut self.queries {
            if q.runner.sources().iter().any(|s| s == stream) {
                q.runner.heartbeat(stream, t);
            }
        }
    }

    /// Each query's frontier, given each source's watermark and idleness (`input`).
    pub fn frontiers(&self, input: impl Fn(&str) -> Option<(Watermark, bool)>) -> Vec<Watermark> {
        self.queries
            .iter()
            .map(|q| {
                let inputs: Vec<(Watermark, bool)> =
                    q.runner.sources().iter().filter_map(|s| input(s)).collect();
                let active = inputs.iter().filter(|i| !i.1).map(|i| i.0).min();
                active.or(inputs.iter().map(|i| i.0).min()).unwrap_or(WATERMARK_CLOSED)
            })
            .collect()
    }

    /// Per source some query reads: the smallest and largest frontier of its readers.
    pub fn reader_frontiers(
        &self,
        frontiers: &[Watermark],
    ) -> HashMap<String, (Watermark, Watermark)> {
        let mut readers: HashMap<String, (Watermark, Watermark)> = HashMap::new();
        for (q, &f) in self.queries.iter().zip(frontiers) {
            for s in q.runner.sources() {
                let r = readers.entry(s.clone()).or_insert((f, f));
                *r = (r.0.min(f), r.1.max(f));
            }
        }
        readers
    }

    /// Evaluates every query that is not parked up to its frontier (as [`Dataflow::frontiers`]
    /// gave them) and delivers the output, left `in_flight` or not (see
    /// [`Output::deliver_in_flight`]). A query whose output says stop is stopped.
    pub fn advance(&mut self, frontiers: &[Watermark], in_flight: bool) {
        let mut frontiers = frontiers.iter();
        self.queries.retain_mut(|q| {
            let frontier = frontiers.next().copied().unwrap_or(WATERMARK_CLOSED);
            let Some(output) = q.output.as_mut() else { return true };
            let mut batches = Vec::new();
            let outcome = q.runner.advance(frontier, &mut batches);
            if in_flight {
                output.deliver_in_flight(batches, outcome)
            } else {
                output.deliver(batches, outcome)
            }
        });
    }

    /// Waits until every output holds what was delivered to it (see [`Output::settle`]); a
    /// query whose output failed meanwhile (a sink's write) stops.
    pub fn settle_outputs(&mut self) {
        self.queries.retain_mut(|q| q.output.as_mut().is_none_or(|o| o.settle()));
    }

    /// Each query's state (estimated: see [`weir_exec::heap`]), by id, with what it feeds.
    /// A query on workers whose state cannot be measured fails with that error.
    pub fn state_sizes(&mut self) -> Vec<(u64, String, StateSize)> {
        let mut sizes = Vec::new();
        let mut broken = Vec::new();
        for q in &self.queries {
            match q.runner.state_size() {
                Ok(mut size) => {
                    size.parts.extend(q.output.as_ref().and_then(|o| o.held()));
                    sizes.push((q.id, q.target.feeds(), size))
                }
                Err(e) => broken.push((q.id, e)),
            }
        }
        for (id, e) in broken {
            self.fail(id, e);
        }
        sizes
    }

    /// Query `id` fails with `e`: its output gets the error, and it stops.
    pub fn fail(&mut self, id: u64, e: WeirError) {
        self.fail_where(|q| q.id == id, &e);
    }

    /// The queries `fails` picks fail with `e`: each output gets the error, and they stop.
    fn fail_where(&mut self, fails: impl Fn(&RunningQuery) -> bool, e: &WeirError) {
        self.queries.retain_mut(|q| {
            if !fails(q) {
                return true;
            }
            if let Some(output) = q.output.as_mut() {
                output.deliver(Vec::new(), Err(e.clone()));
            }
            false
        });
    }

    /// The queries reading `stream` or its companions fail with `e` (its source failed).
    pub fn fail_readers(&mut self, stream: &str, e: &WeirError) {
        self.fail_where(|q| q.runner.sources().iter().any(|s| is_or_companion_of(s, stream)), e);
    }

    /// Gives a parked query, found by its subscriber's text, a subscriber; returns the
    /// subscription and the instant it resumes from.
    pub fn resume(&mut self, sql: &str) -> Result<(Subscription, Option<Time>)> {
        let q = self
            .queries
            .iter_mut()
            .find(|q| q.output.is_none() && q.target == Target::Subscriber(Some(sql.to_string())))
            .ok_or_else(|| {
                WeirError::exec(format!("no restored query waits to be resumed as '{sql}'"))
            })?;
        let (tx, rx) = output_channel();
        q.output = Some(Box::new(Subscriber(tx)));
        let from = q.runner.last_instant().map(|t| t.saturating_add(1));
        Ok((subscription(q.id, &q.plan, rx), from))
    }

    /// Replaces the runner of the query feeding `target` (restored from a checkpoint).
    pub fn replace_runner(&mut self, key: &str, runner: Runner) -> Result<()> {
        let q = self
            .queries
            .iter_mut()
            .find(|q| q.target.key().as_deref() == Some(key))
            .ok_or_else(|| WeirError::exec(format!("checkpoint: no query for '{key}'")))?;
        q.runner = runner;
        Ok(())
    }
}

/// The subscriber's end of query `id`'s output channel.
pub(crate) fn subscription(id: u64, plan: &LogicalPlan, rx: OutputReceiver) -> Subscription {
    Subscription {
        id,
        schema: weir_exec::compile::exec_schema(&plan.schema()),
        kind: plan.kind(),
        domain: plan.time_domain().unwrap_or(TimeDomain::Ticks),
        notices: Vec::new(),
        rx: std::cell::RefCell::new(rx),
        closed: std::cell::Cell::new(false),
        failure: std::cell::RefCell::new(None),
    }
}

/// An error for a plan no continuous query can run ([`Dataflow::runner`]'s check).
fn runnable(plan: &LogicalPlan) -> Result<()> {
    if plan.contains_apply() {
        return Err(WeirError::plan(
            "this correlated subquery cannot be turned into a join, which a continuous query \
             needs; it works in one-shot queries over tables",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(values: &[i64]) -> ChangeBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let data = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))])
            .unwrap();
        ChangeBatch::uniform(data, 1, 1)
    }

    #[test]
    fn a_subscriber_gets_the_output_then_the_failure() {
        let (tx, mut rx) = output_channel();
        let mut out = Subscriber(tx);
        assert!(out.deliver(vec![batch(&[1])], Ok(())));
        assert!(!out.deliver(vec![batch(&[2])], Err(WeirError::exec("boom"))));
        let got: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|r| match r {
                Ok(b) => format!("{} rows", b.len()),
                Err(e) => e.to_string(),
            })
            .collect();
        assert_eq!(got, ["1 rows", "1 rows", "boom"]);
    }

    #[test]
    fn a_subscriber_that_went_away_stops_its_query() {
        let (tx, rx) = output_channel();
        drop(rx);
        assert!(!Subscriber(tx).deliver(vec![batch(&[1])], Ok(())));
    }

    #[test]
    fn a_view_keeps_what_it_was_given_and_its_failure() {
        let schema = batch(&[]).schema();
        let mut view = Shared::new(Maintained::new(schema).unwrap());
        assert!(view.deliver(vec![batch(&[1, 2])], Ok(())));
        assert!(!view.deliver(vec![], Err(WeirError::exec("cast failed"))));
        let v = view.lock();
        assert_eq!(v.contents.len(), 2);
        assert_eq!(v.failed.as_ref().map(|e| e.to_string()).as_deref(), Some("cast failed"));
    }

    #[test]
    fn targets_name_their_checkpoint_keys() {
        assert_eq!(Target::View("v".into()).key().as_deref(), Some("view:v"));
        assert_eq!(Target::Sink("k".into()).key().as_deref(), Some("sink:k"));
        assert_eq!(
            Target::Subscriber(Some("SELECT 1".into())).key().as_deref(),
            Some("sub:SELECT 1")
        );
        assert_eq!(Target::Subscriber(None).key(), None);
    }
}
