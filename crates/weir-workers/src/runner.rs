//! A running query as the engine holds it: on the engine's own thread (one worker) or on the
//! timely workers, behind one interface.
//!
//! With one worker a query runs in a [`weir_exec::QueryRunner`] on the caller's thread: the
//! operators are the same, and no thread or channel is paid for. With more, it is installed on
//! every worker ([`crate::runtime`]) and each [`Runner::advance`] is one round there.
//!
//! **Where input goes.** A pushed batch is split by instant: every row of one instant goes to
//! one worker (the instant's hash names it), so rows of an instant keep their arrival order
//! through the local part of the plan, and the order-sensitive operators (ROWS windows, keep-
//! first deduplication among equal timestamps) see what one worker would. In a query
//! evaluated instant by instant, worker 0 is also told every instant the batch has, which
//! makes its leaves see every instant of the query, as constant relations need (VALUES enters
//! at the query's first instant); in one evaluated in spans, every worker is told the batch's
//! first instant, where its spans start. Heartbeats go to every worker.
//!
//! **Output.** The sink on worker 0 gathers the root's output; a relation's changes are
//! consolidated per instant as the one-worker runner does, so subscribers, views and sinks see
//! the same changes whatever the worker count.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError};
use weir_exec::compile::{compile, exec_schema};
use weir_exec::consolidate::consolidate_runs;
use weir_exec::query::{check_after, runs_in_spans};
use weir_exec::route::instant_worker;
use weir_exec::row::RowCodec;
use weir_exec::{OutputKind, QueryRunner};
use weir_plan::{LogicalPlan, PlanKind};

use crate::part::Part;
use crate::runtime::{Status, Workers};

/// One running continuous query (see the module docs). Its methods are those of
/// [`QueryRunner`].
#[derive(Debug)]
pub enum Runner {
    Local(QueryRunner),
    Hosted(Hosted),
}

/// A query installed on the workers.
#[derive(Debug)]
pub struct Hosted {
    workers: Arc<Workers>,
    id: u64,
    schema: SchemaRef,
    kind: OutputKind,
    codec: RowCodec,
    sources: Vec<String>,
    span: bool,
    round: u64,
    last: Option<Time>,
    status: Arc<Status>,
}

impl Runner {
    /// A runner for `plan`: on the workers if there are more than one, else on this thread.
    pub fn new(plan: &Arc<LogicalPlan>, workers: Option<&Arc<Workers>>) -> Result<Runner> {
        let Some(workers) = workers.filter(|w| w.peers() > 1) else {
            return Ok(Runner::Local(QueryRunner::new(plan)?));
        };
        // Compiled here first: a plan that does not compile fails before any worker sees it.
        let graph = compile(plan)?;
        let span = runs_in_spans(plan, &graph);
        drop(graph);
        let schema = exec_schema(&plan.schema());
        let status = Arc::new(Status::default());
        let id = workers.install(plan.clone(), status.clone())?;
        Ok(Runner::Hosted(Hosted {
            workers: workers.clone(),
            id,
            codec: RowCodec::for_schema(&schema)?,
            schema,
            kind: plan.kind(),
            sources: plan.sources(),
            span,
            round: 0,
            last: None,
            status,
        }))
    }

    pub fn schema(&self) -> SchemaRef {
        match self {
            Runner::Local(r) => r.schema(),
            Runner::Hosted(h) => h.schema.clone(),
        }
    }

    pub fn kind(&self) -> OutputKind {
        match self {
            Runner::Local(r) => r.kind(),
            Runner::Hosted(h) => h.kind,
        }
    }

    /// Names of the base streams and tables the query reads.
    pub fn sources(&self) -> &[String] {
        match self {
            Runner::Local(r) => r.sources(),
            Runner::Hosted(h) => &h.sources,
        }
    }

    /// The last instant evaluated.
    pub fn last_instant(&self) -> Option<Time> {
        match self {
            Runner::Local(r) => r.last_instant(),
            Runner::Hosted(h) => h.last,
        }
    }

    /// Buffers changes of `source`. Times must be after the last evaluated instant.
    pub fn push(&mut self, source: &str, batch: ChangeBatch) -> Result<()> {
        match self {
            Runner::Local(r) => r.push(source, batch),
            Runner::Hosted(h) => h.push(source, batch),
        }
    }

    /// Makes `t` an instant of the query (a heartbeat on `source`), if it is still in the
    /// future.
    pub fn heartbeat(&mut self, source: &str, t: Time) {
        match self {
            Runner::Local(r) => r.heartbeat(source, t),
            // A heartbeat the workers cannot take fails the query at its next advance.
            Runner::Hosted(h) => {
                if let Err(e) = h.heartbeat(source, t) {
                    h.status.fail(e);
                }
            }
        }
    }

    /// Evaluates every instant below `frontier`, appending the output changes to `out` in time
    /// order.
    pub fn advance(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        match self {
            Runner::Local(r) => r.advance(frontier, out),
            Runner::Hosted(h) => h.advance(frontier, out),
        }
    }

    /// The runner's state as checkpoint bytes (see [`QueryRunner::save_state`]).
    pub fn save_state(&self) -> Result<Vec<u8>> {
        match self {
            Runner::Local(r) => r.save_state(),
            Runner::Hosted(_) => Err(multi_worker_checkpoints()),
        }
    }

    /// Restores [`Runner::save_state`] output into a fresh runner of the same plan.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            Runner::Local(r) => r.restore_state(bytes),
            Runner::Hosted(_) => Err(multi_worker_checkpoints()),
        }
    }
}

impl Runner {
    /// The error for a checkpoint of a query on more than one worker.
    pub fn multi_worker_checkpoints() -> WeirError {
        multi_worker_checkpoints()
    }
}

fn multi_worker_checkpoints() -> WeirError {
    WeirError::plan(
        "checkpoints of queries on more than one worker are not supported yet: run with \
         --workers 1 to checkpoint (--data-dir)",
    )
}

impl Hosted {
    fn source_index(&self, source: &str) -> Result<u32> {
        self.sources
            .iter()
            .position(|s| s == source)
            .map(|i| i as u32)
            .ok_or_else(|| WeirError::internal(format!("the query does not read '{source}'")))
    }

    fn check_alive(&self) -> Result<()> {
        match self.status.error.lock() {
            Ok(mut e) => match e.take() {
                Some(e) => Err(e),
                None => Ok(()),
            },
            Err(_) => Err(WeirError::internal("a worker failed while reporting an error")),
        }
    }

    fn push(&mut self, source: &str, batch: ChangeBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        check_after(self.last, &batch.times, "a query")?;
        let source = self.source_index(source)?;
        let batch = batch.sort_by_time()?;
        let first = batch.times[0];
        // Instant by instant, worker 0 is told every instant of the batch.
        let mut instants: Vec<Time> = Vec::new();
        if !self.span {
            instants = batch.times.clone();
            instants.dedup();
        }
        let peers = self.workers.peers();
        // Each row's worker by its instant; the batch reordered so that each worker's rows are
        // one slice (a stable order: by time within a worker), which costs one copy of the
        // rows and none when they all go to one worker.
        let dest: Vec<usize> = batch.times.iter().map(|&t| instant_worker(t, peers)).collect();
        let mut counts = vec![0usize; peers];
        for &d in &dest {
            counts[d] += 1;
        }
        let batch = if counts.iter().filter(|&&c| c > 0).count() > 1 {
            let mut start = vec![0usize; peers];
            for w in 1..peers {
                start[w] = start[w - 1] + counts[w - 1];
            }
            let mut order = vec![0u32; batch.len()];
            let mut next = start.clone();
            for (i, &d) in dest.iter().enumerate() {
                order[next[d]] = i as u32;
                next[d] += 1;
            }
            batch.take(&order)?
        } else {
            batch
        };
        let mut offset = 0;
        for (w, &count) in counts.iter().enumerate() {
            let rows = (count > 0).then(|| batch.slice(offset, count));
            offset += count;
            let ticks: Vec<(Time, bool)> = if self.span {
                vec![(first, true)]
            } else if w == 0 {
                std::mem::take(&mut instants).into_iter().map(|t| (t, true)).collect()
            } else {
                Vec::new()
            };
            if rows.is_none() && ticks.is_empty() {
                continue;
            }
            let part = Part { dest: w as u32, from: 0, source, batch: rows, ticks };
            self.workers.feed(w, self.id, part)?;
        }
        Ok(())
    }

    fn heartbeat(&mut self, source: &str, t: Time) -> Result<()> {
        if self.last.is_some_and(|l| t <= l) {
            return Ok(());
        }
        let source = self.source_index(source)?;
        for w in 0..self.workers.peers() {
            let part =
                Part { dest: w as u32, from: 0, source, batch: None, ticks: vec![(t, true)] };
            self.workers.feed(w, self.id, part)?;
        }
        Ok(())
    }

    fn advance(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        let done = self.workers.advance(self.id, self.round, frontier)?;
        self.round += 1;
        self.check_alive()?;
        if let Ok(last) = self.status.last.lock() {
            self.last = *last;
        }
        let batches: Vec<ChangeBatch> =
            done.batches.into_iter().filter(|b| !b.is_empty()).collect();
        if batches.is_empty() {
            return Ok(());
        }
        let all = if batches.len() == 1 {
            batches.into_iter().next().unwrap_or_else(|| ChangeBatch::empty(self.schema.clone()))
        } else {
            ChangeBatch::concat(&self.schema, &batches)?.sort_by_time()?
        };
        let all = match self.kind {
            PlanKind::Relation => consolidate_runs(&self.codec, &all)?,
            _ => all,
        };
        if !all.is_empty() {
            out.push(all);
        }
        Ok(())
    }
}

impl Drop for Hosted {
    fn drop(&mut self) {
        self.workers.remove(self.id);
    }
}
