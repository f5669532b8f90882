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
use weir_exec::heap::{HeapSize, StateSize, WAITING_INPUT};
use weir_exec::query::{check_after, runs_in_spans};
use weir_exec::route::instant_worker;
use weir_exec::row::RowCodec;
use weir_exec::state::{
    binary_col, i64_col, invalid, opt_i64_col, signature, str_col, StateReader, StateWriter,
};
use weir_exec::{OutputKind, QueryRunner};
use weir_plan::{LogicalPlan, PlanKind};

use crate::part::Part;
use crate::runtime::{Cut, Status, Workers};

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
    /// The parts the query runs as (see [`Workers::install`]): the worker count it started
    /// on, or the one of the checkpoint it was restored from.
    parts: usize,
    plan: Arc<LogicalPlan>,
    recipe: Option<Vec<u8>>,
    schema: SchemaRef,
    kind: OutputKind,
    codec: RowCodec,
    sources: Vec<String>,
    span: bool,
    round: u64,
    last: Option<Time>,
    status: Arc<Status>,
    /// Per node of the graph, its EXPLAIN line (for [`Runner::state_size`]).
    labels: Vec<String>,
    /// Pushes and heartbeats since the last advance, in arrival order: they are fed to the
    /// workers as the next round begins, so that between rounds nothing is in flight and a
    /// checkpoint is one consistent cut.
    queued: Vec<Queued>,
    /// Whether anything was taken in or evaluated since the state was last checkpointed or
    /// restored.
    changed: bool,
}

/// Input of the next round, not yet fed to the workers.
#[derive(Debug)]
enum Queued {
    Rows(u32, ChangeBatch),
    Heartbeat(u32, Time),
}

impl Runner {
    /// A runner for `plan`: on the workers if there are more than one, else on this thread.
    /// On a cluster of processes, `recipe` is what the other processes plan it from (see
    /// [`crate::cluster`]); elsewhere it is not read.
    pub fn new(
        plan: &Arc<LogicalPlan>,
        workers: Option<&Arc<Workers>>,
        recipe: Option<&[u8]>,
    ) -> Result<Runner> {
        let Some(workers) = workers.filter(|w| w.peers() > 1) else {
            return Ok(Runner::Local(QueryRunner::new(plan)?));
        };
        Runner::hosted(plan, workers, recipe)
    }

    /// A runner for `plan` on `workers`, whatever their number (one worker too: a query
    /// restored from a checkpoint of several workers runs as its parts on one).
    pub fn hosted(
        plan: &Arc<LogicalPlan>,
        workers: &Arc<Workers>,
        recipe: Option<&[u8]>,
    ) -> Result<Runner> {
        // Compiled here first: a plan that does not compile fails before any worker sees it.
        let graph = compile(plan)?;
        let span = runs_in_spans(plan, &graph);
        let labels = graph.labels().to_vec();
        drop(graph);
        let schema = exec_schema(&plan.schema());
        let status = Arc::new(Status::default());
        let parts = workers.peers();
        let id = workers.install(plan.clone(), status.clone(), recipe, parts)?;
        Ok(Runner::Hosted(Hosted {
            workers: workers.clone(),
            id,
            parts,
            plan: plan.clone(),
            recipe: recipe.map(<[u8]>::to_vec),
            codec: RowCodec::for_schema(&schema)?,
            schema,
            kind: plan.kind(),
            sources: plan.sources(),
            span,
            round: 0,
            last: None,
            status,
            labels,
            queued: Vec::new(),
            changed: true,
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

    /// What the query's state holds, by node (over every worker) and in its waiting input:
    /// estimates (see [`weir_exec::heap`]). On workers, asked between rounds.
    pub fn state_size(&self) -> Result<StateSize> {
        match self {
            Runner::Local(r) => Ok(r.state_size()),
            Runner::Hosted(h) => {
                let nodes = h.workers.measure(h.id)?;
                let mut parts: Vec<(String, usize)> = h.labels.iter().cloned().zip(nodes).collect();
                let waiting = h
                    .queued
                    .iter()
                    .map(|q| match q {
                        Queued::Rows(_, b) => b.heap_bytes(),
                        Queued::Heartbeat(..) => 0,
                    })
                    .sum();
                parts.push((WAITING_INPUT.to_string(), waiting));
                Ok(StateSize { parts })
            }
        }
    }

    /// The runner's state as checkpoint bytes: on one worker [`QueryRunner::save_state`]'s;
    /// on several, see [`Hosted::save_state`].
    pub fn save_state(&self) -> Result<Vec<u8>> {
        match self {
            Runner::Local(r) => r.save_state(),
            Runner::Hosted(h) => h.save_state(),
        }
    }

    /// Incremental checkpoints (see [`weir_exec::dirty`]): the state's changes since it was
    /// last checkpointed or restored, as checkpoint bytes; None if the query cannot say (it has
    /// an operator that does not record its changes, or too much changed): it must then be
    /// saved whole ([`Runner::save_state`], then [`Runner::track_changes`]).
    pub fn save_changes(&mut self) -> Result<Option<Vec<u8>>> {
        match self {
            Runner::Local(r) => r.save_changes(),
            Runner::Hosted(h) => {
                let saved = h.save_cut(Cut::Changes)?;
                h.changed = false;
                Ok(saved)
            }
        }
    }

    /// The state as it is now was checkpointed whole: operators that can start recording
    /// their changes.
    pub fn track_changes(&mut self) -> Result<()> {
        match self {
            Runner::Local(r) => r.track_changes(),
            Runner::Hosted(h) => {
                h.workers.save(h.id, Cut::Track)?;
                h.changed = false;
            }
        }
        Ok(())
    }

    /// Whether anything was taken in or evaluated since the state was last checkpointed or
    /// restored: if not, the last checkpoint holds it as it is.
    pub fn changed(&self) -> bool {
        match self {
            Runner::Local(r) => r.changed(),
            Runner::Hosted(h) => h.changed,
        }
    }

    /// Applies [`Runner::save_changes`] output to the state restored before (whole, then the
    /// changes written after it, in order).
    pub fn restore_changes(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            Runner::Local(r) => r.restore_changes(bytes),
            Runner::Hosted(h) => h.restore_cut(bytes, true),
        }
    }

    /// Restores [`Runner::save_state`] output into a fresh runner of the same plan: state
    /// saved on one worker into a local runner, state saved on several into a hosted one,
    /// which then runs as the parts it was saved as, hosted by the workers there are
    /// ([`Workers::install`]). [`saved_workers`] says which to make.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        let saved = saved_workers(bytes)?;
        match (&*self, saved) {
            (Runner::Local(_), 1) | (Runner::Hosted(_), 2..) => {}
            (Runner::Local(_), _) => return Err(other_worker_count(saved, 1)),
            (Runner::Hosted(h), _) => return Err(other_worker_count(saved, h.workers.peers())),
        }
        match self {
            Runner::Local(r) => r.restore_state(bytes),
            Runner::Hosted(h) => h.restore_state(bytes),
        }
    }
}

/// The error for state saved on `saved` workers put into a runner that cannot take it (one
/// worker's state into a hosted runner, several workers' into a local one): a bug, since
/// [`saved_workers`] says which runner to make.
fn other_worker_count(saved: usize, here: usize) -> WeirError {
    WeirError::internal(format!(
        "the state of a query saved on {saved} worker(s) was put into a runner of {here}"
    ))
}

/// The number of workers a runner's state was saved on: that of the `hosted` section that
/// begins a hosted runner's state, else 1.
pub fn saved_workers(bytes: &[u8]) -> Result<usize> {
    let mut r = StateReader::from_bytes(bytes)?;
    if r.peek_name() != Some(HOSTED) {
        return Ok(1);
    }
    hosted_parts(&mut r)
}

/// The part count the `hosted` section that begins a hosted runner's state holds (it is the
/// number of workers it was saved on, or, restored, the parts it ran as).
fn hosted_parts(r: &mut StateReader) -> Result<usize> {
    usize::try_from(r.take(HOSTED, HOSTED_SIG)?.scalar_i64("workers")?)
        .ok()
        .filter(|&n| n > 1)
        .ok_or_else(|| invalid("the number of workers of a checkpoint is not above 1"))
}

/// The first section of a hosted runner's state, and its signature (the rest of the state is
/// checked section by section, each with its own signature).
const HOSTED: &str = "hosted";
const HOSTED_SIG: &str = "hosted";

impl Hosted {
    fn source_index(&self, source: &str) -> Result<u32> {
        self.sources
            .iter()
            .position(|s| s == source)
            .map(|i| i as u32)
            .ok_or_else(|| WeirError::internal(format!("the query does not read '{source}'")))
    }

    fn check_alive(&self) -> Result<()> {
        match self.take_failure()? {
            Some((e, _)) => Err(e),
            None => Ok(()),
        }
    }

    /// The failure a worker reported, with the instant before which the output is exact.
    fn take_failure(&self) -> Result<Option<(WeirError, Option<Time>)>> {
        match self.status.error.lock() {
            Ok(mut e) => Ok(e.take()),
            Err(_) => Err(WeirError::internal("a worker failed while reporting an error")),
        }
    }

    fn push(&mut self, source: &str, batch: ChangeBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        check_after(self.last, &batch.times, "a query")?;
        let source = self.source_index(source)?;
        self.queued.push(Queued::Rows(source, batch.sort_by_time()?));
        Ok(())
    }

    fn heartbeat(&mut self, source: &str, t: Time) -> Result<()> {
        if self.last.is_some_and(|l| t <= l) {
            return Ok(());
        }
        let source = self.source_index(source)?;
        self.queued.push(Queued::Heartbeat(source, t));
        Ok(())
    }

    /// Feeds the queued input to the workers, in arrival order.
    fn feed(&mut self) -> Result<()> {
        for q in std::mem::take(&mut self.queued) {
            match q {
                Queued::Rows(source, batch) => self.feed_rows(source, batch)?,
                Queued::Heartbeat(source, t) => self.feed_heartbeat(source, t)?,
            }
        }
        Ok(())
    }

    fn feed_rows(&mut self, source: u32, batch: ChangeBatch) -> Result<()> {
        let Some(&first) = batch.times.first() else { return Ok(()) };
        // Instant by instant, worker 0 is told every instant of the batch.
        let mut instants: Vec<Time> = Vec::new();
        if !self.span {
            instants = batch.times.clone();
            instants.dedup();
        }
        let peers = self.parts;
        // Each row's part by its instant; the batch reordered so that each part's rows are
        // one slice (a stable order: by time within a part), which costs one copy of the
        // rows and none when they all go to one part.
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
            self.workers.feed(w % self.workers.peers(), self.id, part)?;
        }
        Ok(())
    }

    fn feed_heartbeat(&mut self, source: u32, t: Time) -> Result<()> {
        for v in 0..self.parts {
            let part =
                Part { dest: v as u32, from: 0, source, batch: None, ticks: vec![(t, true)] };
            self.workers.feed(v % self.workers.peers(), self.id, part)?;
        }
        Ok(())
    }

    fn advance(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        // Nodes change only with input or an evaluated instant, which moves `last`.
        self.changed |= !self.queued.is_empty();
        self.feed()?;
        let done = self.workers.advance(self.id, self.round, frontier)?;
        self.round += 1;
        let failure = self.take_failure()?;
        if let Ok(last) = self.status.last.lock() {
            self.changed |= self.last != *last;
            self.last = *last;
        }
        let batches: Vec<ChangeBatch> =
            done.batches.into_iter().filter(|b| !b.is_empty()).collect();
        if let Some((e, at)) = failure {
            // What the instants before the first failing one gave is exact: deliver it.
            let Some(at) = at else { return Err(e) };
            let before = batches.iter().map(|b| b.before(at)).collect::<Result<Vec<_>>>()?;
            self.deliver(before.into_iter().filter(|b| !b.is_empty()).collect(), out)?;
            return Err(e);
        }
        self.deliver(batches, out)
    }

    /// The round's output, in time order (a relation's consolidated per instant), into `out`.
    fn deliver(&self, batches: Vec<ChangeBatch>, out: &mut Vec<ChangeBatch>) -> Result<()> {
        if batches.is_empty() {
            return Ok(());
        }
        let all = if batches.len() == 1 {
            batches.into_iter().next().unwrap_or_else(|| ChangeBatch::empty(self.schema.clone()))
        } else {
            ChangeBatch::concat(&self.schema, &batches)?.sort_by_time()?
        };
        let all = match self.kind {
            PlanKind::Relation => consolidate_runs(&self.codec, all)?,
            _ => all,
        };
        if !all.is_empty() {
            out.push(all);
        }
        Ok(())
    }
}

impl Hosted {
    fn signature(&self) -> String {
        signature("hosted", &self.schema, (self.kind, &self.sources, self.span))
    }

    /// The query's state between rounds, as checkpoint bytes: sections `hosted` (one row:
    /// `workers`, the worker count), `hosted.last` (one row: `last`), `hosted.queued` (the
    /// input not yet fed, in arrival order: `source` by name, `heartbeat`, the instant of a
    /// heartbeat or NULL for rows, and `rows`), one `hosted.chunk` per queued batch, then
    /// `hosted.workers`: one row per worker, in worker order, whose `state` is that worker's
    /// nodes' states ([`Workers::save`]). Between rounds nothing is in flight, so the
    /// workers' states and the queue are one consistent cut.
    fn save_state(&self) -> Result<Vec<u8>> {
        self.save_cut(Cut::Whole)?.ok_or_else(|| WeirError::internal("no state saved"))
    }

    /// [`Hosted::save_state`], with the workers' whole states or their changes ([`Cut`]);
    /// None if a worker's node cannot say what changed.
    fn save_cut(&self, cut: Cut) -> Result<Option<Vec<u8>>> {
        self.check_alive_keep()?;
        let sig = self.signature();
        let mut w = StateWriter::new();
        w.put(HOSTED, HOSTED_SIG, 1, vec![("workers", i64_col([self.parts as i64]))])?;
        w.put("hosted.last", &sig, 1, vec![("last", opt_i64_col([self.last]))])?;
        let name = |s: u32| self.sources.get(s as usize).map(String::as_str).unwrap_or("");
        let (mut names, mut beats, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        for q in &self.queued {
            match q {
                Queued::Rows(s, b) => {
                    names.push(name(*s));
                    beats.push(None);
                    rows.push(b.len() as i64);
                }
                Queued::Heartbeat(s, t) => {
                    names.push(name(*s));
                    beats.push(Some(*t));
                    rows.push(0);
                }
            }
        }
        w.put(
            "hosted.queued",
            &sig,
            names.len(),
            vec![
                ("source", str_col(names)),
                ("heartbeat", opt_i64_col(beats)),
                ("rows", i64_col(rows)),
            ],
        )?;
        for q in &self.queued {
            if let Queued::Rows(_, b) = q {
                w.put_changes("hosted.chunk", &sig, &b.schema(), std::slice::from_ref(b))?;
            }
        }
        let packed = self.workers.save(self.id, cut)?;
        // Each worker's reply holds the parts it hosts (a worker beyond the parts, none), or
        // nothing at all if a node could not say what changed.
        let mut states: Vec<Option<Vec<u8>>> = vec![None; self.parts];
        for (w, bytes) in packed.iter().enumerate() {
            if bytes.is_empty() && w < self.parts {
                return Ok(None);
            }
            for (v, state) in crate::runtime::unpack(bytes)? {
                match states.get_mut(v as usize) {
                    Some(slot @ None) => *slot = Some(state),
                    _ => {
                        return Err(WeirError::internal(
                            "a part's state came twice or from nowhere",
                        ))
                    }
                }
            }
        }
        let states: Vec<Vec<u8>> = states
            .into_iter()
            .map(|s| s.ok_or_else(|| WeirError::internal("a part's state is missing")))
            .collect::<Result<_>>()?;
        w.put(
            "hosted.workers",
            &sig,
            states.len(),
            vec![("state", binary_col(states.iter().map(Vec::as_slice)))],
        )?;
        w.into_bytes().map(Some)
    }

    /// Restores [`Hosted::save_state`] output (of as many workers) into a query just
    /// installed and not yet fed.
    fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        if self.round > 0 || self.last.is_some() || !self.queued.is_empty() {
            return Err(WeirError::internal("query state restored into a runner already in use"));
        }
        self.restore_cut(bytes, false)
    }

    /// Restores [`Hosted::save_state`] output, or (with `changes`) applies what
    /// [`Hosted::save_cut`] wrote as changes to the state restored before.
    fn restore_cut(&mut self, bytes: &[u8], changes: bool) -> Result<()> {
        if self.round > 0 {
            return Err(WeirError::internal("query state restored into a runner already in use"));
        }
        let sig = self.signature();
        let mut r = StateReader::from_bytes(bytes)?;
        let parts = hosted_parts(&mut r)?;
        if parts != self.parts {
            // Saved as other parts than it was installed as: installed again, as those (only
            // a runner nothing was fed to gets here, see `restore_state`).
            if changes {
                return Err(WeirError::internal("changes of other parts than the state restored"));
            }
            self.workers.remove(self.id);
            let recipe = self.recipe.as_deref();
            self.id =
                self.workers.install(self.plan.clone(), self.status.clone(), recipe, parts)?;
            self.parts = parts;
        }
        let last = match r.take("hosted.last", &sig)?.opt_i64s("last")?.as_slice() {
            [last] => *last,
            _ => return Err(invalid("section 'hosted.last' should have one row")),
        };
        let q = r.take("hosted.queued", &sig)?;
        let mut queued = Vec::new();
        for ((name, beat), rows) in
            q.strs("source")?.into_iter().zip(q.opt_i64s("heartbeat")?).zip(q.i64s("rows")?)
        {
            let source = self.sources.iter().position(|s| s == name).ok_or_else(|| {
                invalid(format!("queued input of '{name}', which it does not read"))
            })? as u32;
            match beat {
                Some(t) => queued.push(Queued::Heartbeat(source, t)),
                None => {
                    let batch = r.take("hosted.chunk", &sig)?.changes(None)?;
                    if batch.len() as i64 != rows || batch.is_empty() {
                        return Err(invalid("a queued chunk has the wrong number of rows"));
                    }
                    check_after(last, &batch.times, "a restored query")
                        .map_err(|_| invalid("queued input at an instant already evaluated"))?;
                    queued.push(Queued::Rows(source, batch.sort_by_time()?));
                }
            }
        }
        let w = r.take("hosted.workers", &sig)?;
        let states = w.binary("state")?;
        r.finish()?;
        if states.len() != self.parts {
            return Err(invalid("a checkpoint holds another number of parts than it says"));
        }
        // Each worker gets the states of the parts it hosts.
        let peers = self.workers.peers();
        let mut per_worker: Vec<Vec<(u32, Vec<u8>)>> = vec![Vec::new(); peers];
        for (v, state) in states.into_iter().enumerate() {
            per_worker[v % peers].push((v as u32, state.to_vec()));
        }
        let packed = per_worker.iter().map(|s| crate::runtime::pack(s)).collect();
        self.workers.restore(self.id, packed, changes)?;
        self.check_alive()?;
        self.last = last;
        self.queued = queued;
        self.changed = false;
        Ok(())
    }

    /// An error if a worker failed the query, leaving it reported.
    fn check_alive_keep(&self) -> Result<()> {
        match self.status.error.lock() {
            Ok(e) => match &*e {
                Some((e, _)) => Err(e.clone()),
                None => Ok(()),
            },
            Err(_) => Err(WeirError::internal("a worker failed while reporting an error")),
        }
    }
}

impl Drop for Hosted {
    fn drop(&mut self) {
        self.workers.remove(self.id);
    }
}
