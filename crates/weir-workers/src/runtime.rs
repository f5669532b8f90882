//! The worker runtime: timely-dataflow worker threads, each hosting every running query's
//! graph, driven by commands from the engine's thread.
//!
//! [`Workers::start`] starts `n` timely workers in this process (`timely::execute` with
//! `Config::process(n)`). Each worker owns a command channel; after sending a command the
//! engine unparks the worker through a timely `SyncActivator`, so an idle worker costs
//! nothing. Commands of one worker are handled in the order sent, and every worker gets the
//! same `Install`s in the same order, so every worker builds the same timely dataflows (timely
//! requires it: channels are matched by construction order).
//!
//! **A query on the workers.** `Install` compiles the plan on each worker and builds one
//! timely operator per graph node ([`crate::node::NodeHost`]), inputs connected as in the
//! graph: by a pipeline when the consumer's placement is local, by an exchange on the part's
//! destination otherwise (see [`weir_exec::route`]); the leaves read the query's feed, a timely
//! input on each worker. The root's output is exchanged to worker 0, where a sink collects it.
//!
//! **Rounds.** Timely's timestamps here are *rounds*: one per [`crate::Runner::advance`] call,
//! numbered from 0, each carrying the query's frontier (a watermark) in a map every worker
//! shares between its nodes. A round's pushes are sent on the feed before the round's
//! `Advance`, which records the frontier and closes the round on the feed. A node evaluates a
//! round once all its inputs have passed it (timely's frontier), every instant below the
//! round's frontier that it has, and it always holds a capability for its next round, so a
//! consumer learns that a round is complete only when every worker's producer is done with it.
//! When the sink on worker 0 sees round r complete, it replies `Done(r)` with the round's
//! output. Weir's own instants travel inside the change batches, so a round may evaluate an
//! instant below an earlier round's frontier (a table change stamped at the query's next
//! instant), exactly as the one-worker runner does.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::DataType;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::Input;
use timely::dataflow::{InputHandle, Scope, Stream};
use timely::progress::frontier::MutableAntichain;
use timely::scheduling::SyncActivator;
use timely::worker::Worker;
use timely::WorkerConfig;
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError, WATERMARK_MIN};
use weir_exec::compile::{compile, exec_schema};
use weir_exec::query::runs_in_spans;
use weir_exec::route::Placement;
use weir_exec::state::{StateReader, StateWriter};
use weir_plan::LogicalPlan;

use crate::cluster::{
    connect, fingerprint, Addressed, Cluster, Control, Reply, Report, Resolver, SharedTickets,
    WireError,
};
use crate::node::{runs_everywhere, NodeHost, Route};
use crate::part::Part;

/// What a query's workers share: the last instant any of its nodes evaluated, and the error
/// one of them met at the earliest instant, with that instant (the query's output before it
/// is exact; None: none of the round's output is).
#[derive(Debug, Default)]
pub(crate) struct Status {
    pub last: Mutex<Option<Time>>,
    pub error: Mutex<Option<(WeirError, Option<Time>)>>,
}

impl Status {
    fn evaluated(&self, t: Option<Time>) {
        if let (Some(t), Ok(mut last)) = (t, self.last.lock()) {
            *last = Some(last.map_or(t, |l| l.max(t)));
        }
    }

    /// How far a node may evaluate in a round whose frontier is `frontier`: the instants
    /// before the earliest one a node of the query failed at, and none once a failure left
    /// nothing of the round right. (A node below a failure may otherwise walk the round's
    /// whole span on input cut short, e.g. a window moving over empty ticks to the end of
    /// time.)
    fn cap(&self, frontier: Watermark) -> Watermark {
        let failed_at = self.error.lock().ok().and_then(|slot| slot.as_ref().map(|(_, at)| *at));
        match failed_at {
            None => frontier,
            Some(Some(at)) => frontier.min(at as Watermark),
            Some(None) => WATERMARK_MIN,
        }
    }

    /// A failure with nothing of the round known to be right.
    pub fn fail(&self, e: WeirError) {
        self.fail_at(e, None);
    }

    /// A failure at instant `at` (None: of the whole round): kept if it is the earliest.
    pub fn fail_at(&self, e: WeirError, at: Option<Time>) {
        if let Ok(mut slot) = self.error.lock() {
            let earlier = match (&*slot, at) {
                (None, _) => true,
                (Some((_, Some(t))), Some(at)) => at < *t,
                (Some((_, Some(_))), None) => true,
                (Some((_, None)), _) => false,
            };
            if earlier {
                *slot = Some((e, at));
            }
        }
    }
}

pub(crate) enum Command {
    Install {
        id: u64,
        plan: Arc<LogicalPlan>,
        status: Arc<Status>,
        /// The query's parts (see [`Workers::install`]).
        parts: u32,
    },
    Feed {
        id: u64,
        part: Part,
    },
    Advance {
        id: u64,
        frontier: Watermark,
    },
    /// Write this worker's state of query `id` (between rounds: see [`Workers::save`]).
    Save {
        id: u64,
        cut: Cut,
        reply: Sender<(usize, Result<Vec<u8>>)>,
    },
    /// Measure this worker's state of query `id`: per node, its bytes as a little-endian u64.
    Measure {
        id: u64,
        reply: Sender<(usize, Result<Vec<u8>>)>,
    },
    /// Put back what `Save` wrote, into the query just installed: its whole state, or (with
    /// `changes`) the changes written after the state put back before.
    Restore {
        id: u64,
        bytes: Vec<u8>,
        changes: bool,
        reply: Sender<(usize, Result<Vec<u8>>)>,
    },
    Remove {
        id: u64,
    },
    /// Hand `control` to the control dataflow, for a worker of another process.
    Forward(Addressed),
}

/// What a [`Command::Save`] writes (incremental checkpoints: see [`weir_exec::dirty`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Cut {
    /// The whole state.
    Whole,
    /// The changes since the last checkpoint; no bytes at all (never a valid state) if a
    /// node cannot say.
    Changes,
    /// Nothing: the state as it is now was just checkpointed whole, and nodes that can start
    /// recording their changes.
    Track,
}

#[derive(Debug)]
pub(crate) struct Done {
    pub id: u64,
    pub round: u64,
    pub batches: Vec<ChangeBatch>,
}

/// A running set of timely workers in this process. See the module docs.
pub struct Workers {
    peers: usize,
    /// The workers of this process: 0..local (all of them but in a cluster).
    local: usize,
    inner: Mutex<Inner>,
    traffic: Arc<Traffic>,
}

/// What moved between workers, over every query: the rows and bytes of the parts a node sent
/// to another worker (exchanges by key or instant, rows to worker 0, the output gathered
/// there). Bytes are the Arrow buffers of the rows sent plus 16 per row (time and diff): about
/// what a part takes on the wire between processes.
#[derive(Debug, Default)]
pub struct Traffic {
    pub rows: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
}

impl Traffic {
    /// What was counted since the last take, reset to nothing.
    pub(crate) fn take(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.rows.swap(0, Relaxed), self.bytes.swap(0, Relaxed))
    }

    /// Adds what another process's workers sent.
    pub(crate) fn add(&self, (rows, bytes): (u64, u64)) {
        use std::sync::atomic::Ordering::Relaxed;
        self.rows.fetch_add(rows, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts `parts` that leave worker `me` of `peers` (a part goes to the worker its
    /// destination part is hosted on: see [`Workers::install`]).
    pub(crate) fn count(&self, me: u32, peers: u32, parts: &[Part]) {
        use std::sync::atomic::Ordering::Relaxed;
        for p in parts.iter().filter(|p| p.dest % peers.max(1) != me) {
            if let Some(b) = &p.batch {
                let data: usize = b
                    .data
                    .columns()
                    .iter()
                    .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
                    .sum();
                self.rows.fetch_add(b.len() as u64, Relaxed);
                self.bytes.fetch_add((data + 16 * b.len()) as u64, Relaxed);
            }
        }
    }
}

struct Inner {
    to: Vec<Sender<Command>>,
    wake: Vec<SyncActivator>,
    replies: Receiver<Done>,
    /// Replies that arrived for a query other than the one waited for.
    mailbox: HashMap<u64, VecDeque<Done>>,
    next_id: u64,
    guards: Option<timely::communication::WorkerGuards<()>>,
    /// The workers of this process (0..local); the others are reached through the control
    /// dataflow (see [`crate::cluster`]).
    local: usize,
    /// Whether some workers run in other processes (see [`Workers::spans_processes`]).
    spans_processes: bool,
    /// Reply channels waiting for other processes.
    tickets: SharedTickets,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Workers({})", self.peers)
    }
}

impl Workers {
    /// Starts `n` workers (threads of this process).
    pub fn start(n: usize) -> Result<Arc<Workers>> {
        if n == 0 {
            return Err(WeirError::plan("the number of workers must be at least 1"));
        }
        let (builders, others) = timely::CommunicationConfig::Process(n)
            .try_build()
            .map_err(|e| WeirError::exec(format!("starting {n} workers: {e}")))?;
        Workers::launch(builders, others, n, n, None)
    }

    /// Starts process 0 of a cluster: its workers, connected to those of the other processes
    /// (see [`crate::cluster`]), driven from this process like local workers. The other
    /// processes run [`Workers::serve`].
    pub fn start_cluster(cluster: &Cluster, resolver: Resolver) -> Result<Arc<Workers>> {
        if cluster.process != 0 {
            return Err(WeirError::internal("only process 0 of a cluster drives its workers"));
        }
        let (builders, others) = cluster_builders(cluster)?;
        Workers::launch(builders, others, cluster.peers(), cluster.threads, Some(resolver))
    }

    /// Runs process `cluster.process` (not 0) of a cluster: its workers take their commands
    /// from process 0 until it shuts them down. Returns once they have.
    pub fn serve(cluster: &Cluster, resolver: Resolver) -> Result<()> {
        if cluster.process == 0 {
            return Err(WeirError::internal("process 0 of a cluster drives, it does not serve"));
        }
        let (builders, others) = cluster_builders(cluster)?;
        let traffic = Arc::new(Traffic::default());
        let shared = Arc::new(Mutex::new(Shared::default()));
        let tickets = SharedTickets::default();
        let threads = cluster.threads;
        let guards = timely::execute::execute_from(
            builders,
            others,
            WorkerConfig::default(),
            move |worker| {
                let (replies, _) = channel::<Done>();
                let net = Net {
                    resolver: resolver.clone(),
                    shared: shared.clone(),
                    tickets: tickets.clone(),
                    threads,
                };
                run_worker(worker, None, replies, traffic.clone(), Some(net));
            },
        )
        .map_err(|e| WeirError::exec(format!("starting the workers of a cluster: {e}")))?;
        let joined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| guards.join()))
            .map_err(|_| {
                WeirError::exec("the connection to another process of the cluster failed")
            })?;
        joined.into_iter().try_for_each(|r| {
            r.map_err(|e| WeirError::exec(format!("a worker of this process stopped: {e}")))
        })
    }

    fn launch(
        builders: Vec<timely::communication::AllocatorBuilder>,
        others: Box<dyn std::any::Any + Send>,
        peers: usize,
        local: usize,
        resolver: Option<Resolver>,
    ) -> Result<Arc<Workers>> {
        let (reply_tx, replies) = channel::<Done>();
        let (setup_tx, setup_rx) = channel::<(usize, SyncActivator)>();
        let mut to = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 0..local {
            let (tx, rx) = channel::<Command>();
            to.push(tx);
            inboxes.push(Some(rx));
        }
        let inboxes = Arc::new(Mutex::new(inboxes));
        let reply_tx = Mutex::new(reply_tx);
        let setup_tx = Mutex::new(setup_tx);
        let traffic = Arc::new(Traffic::default());
        let counted = traffic.clone();
        let tickets = SharedTickets::default();
        let net_tickets = tickets.clone();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let guards = timely::execute::execute_from(
            builders,
            others,
            WorkerConfig::default(),
            move |worker| {
                let index = worker.index();
                let inbox =
                    inboxes.lock().ok().and_then(|mut v| v.get_mut(index).and_then(Option::take));
                let (Some(inbox), Ok(replies), Ok(setup)) =
                    (inbox, reply_tx.lock().map(|r| r.clone()), setup_tx.lock().map(|s| s.clone()))
                else {
                    return;
                };
                // A path no dataflow has: activating it only unparks the thread.
                let _ = setup.send((index, worker.sync_activator_for(vec![usize::MAX])));
                drop(setup);
                let net = resolver.as_ref().map(|r| Net {
                    resolver: r.clone(),
                    shared: shared.clone(),
                    tickets: net_tickets.clone(),
                    threads: local,
                });
                run_worker(worker, Some(inbox), replies, counted.clone(), net);
            },
        )
        .map_err(|e| WeirError::exec(format!("starting {peers} workers: {e}")))?;
        let mut wake: Vec<Option<SyncActivator>> = (0..local).map(|_| None).collect();
        for _ in 0..local {
            let (i, a) = setup_rx
                .recv_timeout(Duration::from_secs(30))
                .map_err(|_| WeirError::exec("the workers did not start"))?;
            if let Some(slot) = wake.get_mut(i) {
                *slot = Some(a);
            }
        }
        let wake = wake.into_iter().flatten().collect();
        Ok(Arc::new(Workers {
            peers,
            local,
            traffic,
            inner: Mutex::new(Inner {
                to,
                wake,
                replies,
                mailbox: HashMap::new(),
                next_id: 0,
                guards: Some(guards),
                local,
                spans_processes: local < peers,
                tickets,
            }),
        }))
    }

    /// The number of workers.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// Whether some of the workers run in other processes (a cluster: see
    /// [`crate::cluster`]).
    pub fn spans_processes(&self) -> bool {
        self.local < self.peers
    }

    /// Rows and bytes sent between workers so far (see [`Traffic`]).
    pub fn traffic(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.traffic.rows.load(Relaxed), self.traffic.bytes.load(Relaxed))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| WeirError::internal("the worker runtime's lock is poisoned"))
    }

    /// Installs `plan` on every worker, as `parts` parts: the query runs as it would on
    /// `parts` workers, part v hosted by worker v mod the worker count (so a query restored
    /// from a checkpoint of another worker count runs on these workers as the parts it was
    /// saved as). In a cluster, every other process first plans `recipe` (see
    /// [`crate::cluster`]) and must get the same plan.
    pub(crate) fn install(
        &self,
        plan: Arc<LogicalPlan>,
        status: Arc<Status>,
        recipe: Option<&[u8]>,
        parts: usize,
    ) -> Result<u64> {
        let parts = u32::try_from(parts.max(1))
            .map_err(|_| WeirError::plan("a query's parts must number below 2^32"))?;
        let id = {
            let mut inner = self.lock()?;
            inner.next_id += 1;
            inner.next_id - 1
        };
        if self.local < self.peers {
            self.check_elsewhere(id, &plan, recipe)?;
        }
        let mut inner = self.lock()?;
        for w in 0..self.peers {
            let (plan, status) = (plan.clone(), status.clone());
            inner.send(w, Command::Install { id, plan, status, parts })?;
        }
        Ok(id)
    }

    /// Has the first worker of every other process plan `recipe` for query `id`, and fails
    /// if one cannot or gets another plan than `plan`.
    fn check_elsewhere(&self, id: u64, plan: &LogicalPlan, recipe: Option<&[u8]>) -> Result<()> {
        let recipe = recipe.ok_or_else(|| {
            WeirError::plan(
                "this query cannot run on a cluster of processes: it was not started from SQL \
                 text the other processes can plan",
            )
        })?;
        let fingerprint = fingerprint(plan);
        let (tx, rx) = channel();
        let firsts: Vec<usize> = (self.local..self.peers).step_by(self.local).collect();
        {
            let mut inner = self.lock()?;
            for &w in &firsts {
                let ticket = inner.ticket(tx.clone())?;
                let control = Control::Check { id, recipe: recipe.to_vec(), fingerprint, ticket };
                inner.forward(w, control)?;
            }
        }
        drop(tx);
        for _ in &firsts {
            let (w, r) = rx
                .recv_timeout(Duration::from_secs(120))
                .map_err(|_| WeirError::exec("a process of the cluster did not answer"))?;
            if let Err(e) = r {
                return Err(WeirError::plan(format!(
                    "process {} of the cluster cannot run this query: {e}",
                    w / self.local
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn feed(&self, worker: usize, id: u64, part: Part) -> Result<()> {
        self.lock()?.send(worker, Command::Feed { id, part })
    }

    pub(crate) fn remove(&self, id: u64) {
        if let Ok(mut inner) = self.lock() {
            for w in 0..self.peers {
                let _ = inner.send(w, Command::Remove { id });
            }
            inner.mailbox.remove(&id);
        }
    }

    /// Each worker's state of query `id`, in worker order. Called between rounds (after an
    /// [`Workers::advance`] returned and before the next round's input is fed), when no part
    /// is in flight: every node has evaluated every round so far, so each worker's nodes,
    /// saved one after another, are one consistent cut of the dataflow.
    pub(crate) fn save(&self, id: u64, cut: Cut) -> Result<Vec<Vec<u8>>> {
        self.each_worker(|_, reply| Command::Save { id, cut, reply })
    }

    /// Per node of query `id` (in graph order), the bytes its state holds, summed over the
    /// workers (see [`NodeHost::state_bytes`]). Called between rounds, as [`Workers::save`].
    pub(crate) fn measure(&self, id: u64) -> Result<Vec<usize>> {
        let mut total: Vec<usize> = Vec::new();
        for reply in self.each_worker(|_, reply| Command::Measure { id, reply })? {
            let nodes = reply.chunks_exact(8).map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                u64::from_le_bytes(b) as usize
            });
            for (i, bytes) in nodes.enumerate() {
                match total.get_mut(i) {
                    Some(t) => *t += bytes,
                    None => total.push(bytes),
                }
            }
        }
        Ok(total)
    }

    /// Puts each worker's saved state (from [`Workers::save`], in worker order) into query
    /// `id`, installed just before and not yet fed.
    /// With `changes`, the states are changes ([`Cut::Changes`]) applied to what was put
    /// back before.
    pub(crate) fn restore(&self, id: u64, states: Vec<Vec<u8>>, changes: bool) -> Result<()> {
        if states.len() != self.peers {
            return Err(WeirError::internal("a state per worker is needed"));
        }
        let mut states = states.into_iter();
        self.each_worker(|_, reply| Command::Restore {
            id,
            bytes: states.next().unwrap_or_default(),
            changes,
            reply,
        })
        .map(drop)
    }

    /// Sends every worker the command `make` builds around a reply channel, and collects the
    /// replies in worker order.
    fn each_worker(
        &self,
        mut make: impl FnMut(usize, Sender<(usize, Result<Vec<u8>>)>) -> Command,
    ) -> Result<Vec<Vec<u8>>> {
        let (tx, rx) = channel();
        {
            let mut inner = self.lock()?;
            for w in 0..self.peers {
                inner.send(w, make(w, tx.clone()))?;
            }
        }
        drop(tx);
        let mut out: Vec<Option<Vec<u8>>> = vec![None; self.peers];
        for _ in 0..self.peers {
            let (w, r) = rx.recv_timeout(Duration::from_secs(120)).map_err(|e| match e {
                RecvTimeoutError::Disconnected => self.stopped(),
                RecvTimeoutError::Timeout if self.spans_processes() => {
                    WeirError::exec("a process of the cluster did not answer")
                }
                RecvTimeoutError::Timeout => WeirError::internal("a worker did not answer"),
            })?;
            if let Some(slot) = out.get_mut(w) {
                *slot = Some(r?);
            }
        }
        out.into_iter()
            .map(|s| s.ok_or_else(|| WeirError::internal("a worker answered twice")))
            .collect()
    }

    /// Closes round `round` of query `id` at `frontier` and waits for its output.
    pub(crate) fn advance(&self, id: u64, round: u64, frontier: Watermark) -> Result<Done> {
        let mut inner = self.lock()?;
        for w in 0..self.peers {
            inner.send(w, Command::Advance { id, frontier })?;
        }
        if let Some(done) = inner.mailbox.get_mut(&id).and_then(VecDeque::pop_front) {
            return check_round(done, round);
        }
        loop {
            match inner.replies.recv_timeout(Duration::from_secs(1)) {
                Ok(done) if done.id == id => return check_round(done, round),
                Ok(done) => inner.mailbox.entry(done.id).or_default().push_back(done),
                Err(RecvTimeoutError::Timeout) => {
                    if inner.guards.is_none() {
                        return Err(self.stopped());
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.stopped()),
            }
        }
    }
}

impl Workers {
    /// The error for workers that stopped answering: in a cluster, a process or a connection
    /// between processes failed; in one process, a worker thread ended, which is a bug.
    fn stopped(&self) -> WeirError {
        workers_stopped(self.spans_processes())
    }
}

/// See [`Workers::stopped`].
fn workers_stopped(spans_processes: bool) -> WeirError {
    if spans_processes {
        WeirError::exec(
            "the workers stopped: a process of the cluster ended or lost its connection",
        )
    } else {
        WeirError::internal("the workers stopped (a worker thread ended)")
    }
}

fn check_round(done: Done, round: u64) -> Result<Done> {
    if done.round == round {
        Ok(done)
    } else {
        Err(WeirError::internal(format!(
            "the workers completed round {} where round {round} was expected",
            done.round
        )))
    }
}

impl Inner {
    fn send(&mut self, w: usize, cmd: Command) -> Result<()> {
        if w >= self.local {
            let control = match cmd {
                Command::Install { id, parts, .. } => Control::Install { id, parts },
                Command::Feed { id, part } => Control::Feed { id, part },
                Command::Advance { id, frontier } => Control::Advance { id, frontier },
                Command::Save { id, cut, reply } => {
                    Control::Save { id, cut, ticket: self.ticket(reply)? }
                }
                Command::Measure { id, reply } => {
                    Control::Measure { id, ticket: self.ticket(reply)? }
                }
                Command::Restore { id, bytes, changes, reply } => {
                    Control::Restore { id, bytes, changes, ticket: self.ticket(reply)? }
                }
                Command::Remove { id } => Control::Remove { id },
                Command::Forward(_) => return Err(WeirError::internal("a forward forwarded")),
            };
            return self.forward(w, control);
        }
        let to = self.to.get(w).ok_or_else(|| WeirError::internal(format!("no worker {w}")))?;
        to.send(cmd).map_err(|_| workers_stopped(self.spans_processes))?;
        if let Some(a) = self.wake.get(w) {
            let _ = a.activate();
        }
        Ok(())
    }

    /// Sends `control` to worker `w` of another process, through the local worker that
    /// forwards everything for `w` (so `w`'s commands stay in order).
    fn forward(&mut self, w: usize, control: Control) -> Result<()> {
        let by = w % self.local.max(1);
        self.send(by, Command::Forward(Addressed { to: w as u32, control }))
    }

    fn ticket(&mut self, reply: crate::cluster::ReplyTo) -> Result<u64> {
        self.tickets
            .lock()
            .map(|mut t| t.issue(reply))
            .map_err(|_| WeirError::internal("the cluster's reply tickets are poisoned"))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.inner.lock() {
            // The other processes' workers leave their loops when told; closing the command
            // channels ends each local worker's loop; then join the threads.
            for w in inner.local..self.peers {
                let _ = inner.forward(w, Control::Shutdown);
            }
            inner.to.clear();
            for a in &inner.wake {
                let _ = a.activate();
            }
            if let Some(g) = inner.guards.take() {
                // Timely's network threads panic when a connection fails, and joining them
                // then panics again: the failure was reported, the process only ends.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.join()));
            }
        }
    }
}

/// A query as installed on one worker.
struct Installed {
    feed: InputHandle<u64, CapacityContainerBuilder<Vec<Part>>>,
    frontiers: Rc<RefCell<BTreeMap<u64, Watermark>>>,
    /// Each node's next round, to forget the frontiers of rounds every node is done with.
    progress: Vec<Rc<Cell<u64>>>,
    /// Per part this worker hosts, the graph's nodes in graph order (empty if the plan did
    /// not compile here).
    hosts: Vec<(u32, Vec<Rc<RefCell<NodeHost>>>)>,
    /// Whether it compiled.
    compiled: bool,
    status: Arc<Status>,
    dataflow: usize,
}

impl Installed {
    /// This worker's part of a checkpoint: per part it hosts, every node's state (or its
    /// changes, see [`Cut`]), in graph order, packed with the part's index ([`pack`]); no
    /// bytes at all if a node cannot say what changed.
    fn save(&self, cut: Cut) -> Result<Vec<u8>> {
        if !self.compiled {
            return Err(WeirError::internal("a query that did not compile on a worker"));
        }
        let mut states = Vec::with_capacity(self.hosts.len());
        for (v, nodes) in &self.hosts {
            let mut w = StateWriter::new();
            for (i, host) in nodes.iter().enumerate() {
                let mut host = host.try_borrow_mut().map_err(|_| busy())?;
                match cut {
                    Cut::Whole => host.save_state(i, &mut w)?,
                    Cut::Changes => {
                        if !host.save_changes(i, &mut w)? {
                            return Ok(Vec::new());
                        }
                    }
                    Cut::Track => host.track_changes(),
                }
            }
            if cut != Cut::Track {
                states.push((*v, w.into_bytes()?));
            }
        }
        if cut == Cut::Track {
            return Ok(Vec::new());
        }
        Ok(pack(&states))
    }

    /// This worker's share of [`Workers::measure`]: per node, its bytes over the parts it
    /// hosts, as a little-endian u64.
    fn measure(&self) -> Result<Vec<u8>> {
        let nodes = self.hosts.first().map_or(0, |(_, n)| n.len());
        let mut out = Vec::with_capacity(nodes * 8);
        for i in 0..nodes {
            let mut bytes = 0;
            for (_, hosts) in &self.hosts {
                if let Some(h) = hosts.get(i) {
                    bytes += h.try_borrow().map_err(|_| busy())?.state_bytes();
                }
            }
            out.extend_from_slice(&(bytes as u64).to_le_bytes());
        }
        Ok(out)
    }

    /// Puts back what [`Installed::save`] wrote for the parts this worker hosts.
    fn restore(&self, bytes: &[u8], changes: bool) -> Result<()> {
        if !self.compiled {
            return Err(WeirError::internal("a query that did not compile on a worker"));
        }
        let states = unpack(bytes)?;
        if states.len() != self.hosts.len()
            || states.iter().zip(&self.hosts).any(|((v, _), (h, _))| v != h)
        {
            return Err(WeirError::internal(
                "a worker was given the state of parts it does not host",
            ));
        }
        for ((_, state), (_, nodes)) in states.iter().zip(&self.hosts) {
            let mut r = StateReader::from_bytes(state)?;
            for (i, host) in nodes.iter().enumerate() {
                let mut host = host.try_borrow_mut().map_err(|_| busy())?;
                if changes {
                    host.restore_changes(i, &mut r)?;
                } else {
                    host.restore_state(i, &mut r)?;
                }
                self.status.evaluated(host.last());
            }
            r.finish()?;
        }
        Ok(())
    }
}

/// Parts' states as one byte string: per part, its index (u32), its state's length (u64) and
/// the state, little-endian.
pub(crate) fn pack(states: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(states.iter().map(|(_, s)| s.len() + 12).sum());
    for (v, state) in states {
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&(state.len() as u64).to_le_bytes());
        out.extend_from_slice(state);
    }
    out
}

/// What [`pack`] wrote; an error, never a panic, on bytes that are not that.
pub(crate) fn unpack(mut bytes: &[u8]) -> Result<Vec<(u32, Vec<u8>)>> {
    let bad = || WeirError::exec("a worker's checkpoint state is cut short or malformed");
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (v, rest) = bytes.split_first_chunk::<4>().ok_or_else(bad)?;
        let (len, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad())?;
        let state = rest.get(..len).ok_or_else(bad)?;
        out.push((u32::from_le_bytes(*v), state.to_vec()));
        bytes = &rest[len..];
    }
    Ok(out)
}

fn busy() -> WeirError {
    WeirError::internal("a node's state was asked for while it ran")
}

/// What a worker of a cluster has beyond a lone process's (see [`crate::cluster`]).
struct Net {
    resolver: Resolver,
    /// Shared by the threads of this process.
    shared: Arc<Mutex<Shared>>,
    /// Reply channels waiting on process 0.
    tickets: SharedTickets,
    /// Workers per process.
    threads: usize,
}

/// What the workers of one process of a cluster share about each query: its plan, checked
/// once for the process and taken by each worker's install, and its status.
#[derive(Default)]
struct Shared {
    plans: HashMap<u64, (Arc<LogicalPlan>, usize)>,
    statuses: HashMap<u64, (Arc<Status>, usize)>,
}

/// The control dataflow's ends on one worker (see [`crate::cluster`]).
struct Wires {
    control: InputHandle<u64, CapacityContainerBuilder<Vec<Addressed>>>,
    replies: InputHandle<u64, CapacityContainerBuilder<Vec<Reply>>>,
    arrived: Rc<RefCell<VecDeque<Control>>>,
    /// Whether anything was given to either input since its time was last closed.
    sent: bool,
}

/// Builds the control dataflow, the first on every worker of a cluster.
fn build_wires(worker: &mut Worker, tickets: &SharedTickets) -> Wires {
    let mut control = InputHandle::new();
    let mut replies = InputHandle::new();
    let arrived: Rc<RefCell<VecDeque<Control>>> = Rc::default();
    let into = arrived.clone();
    let tickets = tickets.clone();
    worker.dataflow::<u64, _, _>(|scope| {
        use timely::dataflow::operators::generic::Operator;
        scope.input_from(&mut control).sink(
            Exchange::new(|a: &Addressed| a.to as u64),
            "weir control",
            move |(input, _)| {
                input.for_each(|_, data| {
                    into.borrow_mut().extend(data.drain(..).map(|a| a.control));
                });
            },
        );
        scope.input_from(&mut replies).sink(
            Exchange::new(|_: &Reply| 0),
            "weir replies",
            move |(input, _)| {
                input.for_each(|_, data| {
                    if let Ok(mut t) = tickets.lock() {
                        for r in data.drain(..) {
                            t.answer(r);
                        }
                    }
                });
            },
        );
    });
    Wires { control, replies, arrived, sent: false }
}

fn run_worker(
    worker: &mut Worker,
    inbox: Option<Receiver<Command>>,
    replies: Sender<Done>,
    traffic: Arc<Traffic>,
    net: Option<Net>,
) {
    let mut queries: HashMap<u64, Installed> = HashMap::new();
    let mut wires = net.as_ref().map(|n| build_wires(worker, &n.tickets));
    let cluster = net.is_some();
    loop {
        if let Some(inbox) = &inbox {
            loop {
                match inbox.try_recv() {
                    Ok(Command::Forward(a)) => {
                        if let Some(w) = wires.as_mut() {
                            w.control.send(a);
                            w.sent = true;
                        }
                    }
                    Ok(cmd) => handle(worker, &mut queries, cmd, &replies, &traffic, cluster),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
        }
        if let (Some(w), Some(net)) = (wires.as_mut(), net.as_ref()) {
            loop {
                let next = w.arrived.borrow_mut().pop_front();
                let Some(control) = next else { break };
                if let Control::Shutdown = control {
                    return;
                }
                take_control(worker, &mut queries, control, net, w, &traffic);
            }
            // Only closing a time makes the exchange send what it holds; a time closed with
            // nothing in it would still cost every worker a round of progress messages.
            if std::mem::take(&mut w.sent) {
                let next = *w.control.time() + 1;
                w.control.advance_to(next);
                w.replies.advance_to(next);
            }
        }
        worker.step_or_park(None);
        for q in queries.values() {
            let done = q.progress.iter().map(|p| p.get()).min().unwrap_or(0);
            let mut f = q.frontiers.borrow_mut();
            while f.first_key_value().is_some_and(|(r, _)| *r < done) {
                f.pop_first();
            }
        }
    }
}

/// A worker of a process other than 0 takes a command from process 0.
fn take_control(
    worker: &mut Worker,
    queries: &mut HashMap<u64, Installed>,
    control: Control,
    net: &Net,
    wires: &mut Wires,
    traffic: &Arc<Traffic>,
) {
    let me = worker.index() as u32;
    let mut reply = |ticket: u64, result: Result<Vec<u8>>| {
        let result = result.map_err(|e| WireError::from(&e));
        wires.replies.send(Reply { worker: me, ticket, result });
        wires.sent = true;
    };
    match control {
        Control::Check { id, recipe, fingerprint: expected, ticket } => {
            let planned = (net.resolver)(&recipe).and_then(|plan| {
                if fingerprint(&plan) == expected {
                    Ok(plan)
                } else {
                    Err(WeirError::exec(
                        "it plans the query differently from process 0 (are they the same \
                         build of weir?)",
                    ))
                }
            });
            let r = planned.and_then(|plan| {
                let mut shared = net.shared.lock().map_err(|_| poisoned())?;
                shared.plans.insert(id, (plan, 0));
                Ok(Vec::new())
            });
            reply(ticket, r);
        }
        Control::Install { id, parts } => {
            let (plan, status) = {
                let Ok(mut shared) = net.shared.lock() else { return };
                let plan = match shared.plans.get_mut(&id) {
                    Some((plan, taken)) => {
                        *taken += 1;
                        Some(plan.clone())
                    }
                    None => None,
                };
                if shared.plans.get(&id).is_some_and(|(_, taken)| *taken >= net.threads) {
                    shared.plans.remove(&id);
                }
                let status = shared.statuses.entry(id).or_default().0.clone();
                (plan, status)
            };
            // Process 0 installs only what every process checked, so the plan is here.
            let Some(plan) = plan else {
                status.fail(WeirError::internal(format!("query {id} was not checked here")));
                return;
            };
            let (done, _) = channel();
            let q = install(worker, id, &plan, status, done, traffic.clone(), Some(false), parts);
            queries.insert(id, q);
        }
        Control::Feed { id, part } => feed(queries, id, part),
        Control::Advance { id, frontier } => {
            if let Some(q) = queries.get_mut(&id) {
                advance(q, frontier);
            }
        }
        Control::Save { id, cut, ticket } => reply(ticket, answer(queries, id, Ask::Save(cut))),
        Control::Measure { id, ticket } => reply(ticket, answer(queries, id, Ask::Measure)),
        Control::Restore { id, bytes, changes, ticket } => {
            reply(ticket, answer(queries, id, Ask::Restore(&bytes, changes)))
        }
        Control::Remove { id } => {
            remove(worker, queries, id);
            if let Ok(mut shared) = net.shared.lock() {
                let gone = match shared.statuses.get_mut(&id) {
                    Some((_, removed)) => {
                        *removed += 1;
                        *removed >= net.threads
                    }
                    None => false,
                };
                if gone {
                    shared.statuses.remove(&id);
                }
            }
        }
        Control::Shutdown => {}
    }
}

fn poisoned() -> WeirError {
    WeirError::internal("a cluster process's shared query table is poisoned")
}

/// What the engine asks of a worker's part of a query, with a reply.
enum Ask<'a> {
    Save(Cut),
    Measure,
    Restore(&'a [u8], bool),
}

/// This worker's answer to `ask` about query `id`.
fn answer(queries: &HashMap<u64, Installed>, id: u64, ask: Ask) -> Result<Vec<u8>> {
    let q = queries
        .get(&id)
        .ok_or_else(|| WeirError::internal(format!("no query {id} on this worker")))?;
    match ask {
        Ask::Save(cut) => q.save(cut),
        Ask::Measure => q.measure(),
        Ask::Restore(bytes, changes) => q.restore(bytes, changes).map(|()| Vec::new()),
    }
}

fn feed(queries: &mut HashMap<u64, Installed>, id: u64, part: Part) {
    if let Some(q) = queries.get_mut(&id) {
        q.feed.send(part);
    }
}

fn remove(worker: &mut Worker, queries: &mut HashMap<u64, Installed>, id: u64) {
    if let Some(q) = queries.remove(&id) {
        drop(q.feed);
        worker.drop_dataflow(q.dataflow);
    }
}

/// Closes the feed's round at `frontier`.
fn advance(q: &mut Installed, frontier: Watermark) {
    let round = *q.feed.time();
    q.frontiers.borrow_mut().insert(round, frontier);
    q.feed.advance_to(round + 1);
}

fn handle(
    worker: &mut Worker,
    queries: &mut HashMap<u64, Installed>,
    cmd: Command,
    replies: &Sender<Done>,
    traffic: &Arc<Traffic>,
    cluster: bool,
) {
    match cmd {
        Command::Install { id, plan, status, parts } => {
            let home = cluster.then_some(true);
            let (replies, traffic) = (replies.clone(), traffic.clone());
            let q = install(worker, id, &plan, status, replies, traffic, home, parts);
            queries.insert(id, q);
        }
        Command::Feed { id, part } => feed(queries, id, part),
        Command::Advance { id, frontier } => {
            if let Some(q) = queries.get_mut(&id) {
                advance(q, frontier);
            }
        }
        Command::Save { id, cut, reply } => {
            let _ = reply.send((worker.index(), answer(queries, id, Ask::Save(cut))));
        }
        Command::Measure { id, reply } => {
            let _ = reply.send((worker.index(), answer(queries, id, Ask::Measure)));
        }
        Command::Restore { id, bytes, changes, reply } => {
            let _ =
                reply.send((worker.index(), answer(queries, id, Ask::Restore(&bytes, changes))));
        }
        Command::Remove { id } => remove(worker, queries, id),
        // Taken by the worker loop.
        Command::Forward(_) => {}
    }
}

/// The allocators of this process's workers in `cluster`, connected to the other processes.
fn cluster_builders(
    cluster: &Cluster,
) -> Result<(Vec<timely::communication::AllocatorBuilder>, Box<dyn std::any::Any + Send>)> {
    use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
    use timely::communication::allocator::ProcessBuilder;
    use timely::communication::{AllocatorBuilder, Hooks};
    let sockets = connect(cluster)?;
    let hooks = Hooks::default();
    let process = ProcessBuilder::new_typed_vector(
        cluster.threads,
        hooks.refill.clone(),
        hooks.spill.clone(),
    );
    let (builders, guard) = initialize_networking_from_sockets(
        process,
        sockets,
        cluster.process,
        cluster.threads,
        hooks,
    )
    .map_err(|e| WeirError::exec(format!("connecting the cluster's workers: {e}")))?;
    Ok((builders.into_iter().map(AllocatorBuilder::Tcp).collect(), Box::new(guard)))
}

/// Per node of the plan, in the order `compile` adds them (inputs first): its executor schema
/// and the base streams and tables it reads.
fn node_facts(plan: &LogicalPlan) -> Vec<(arrow::datatypes::SchemaRef, Vec<String>)> {
    weir_plan::post_order(plan)
        .into_iter()
        .map(|node| (exec_schema(&node.schema()), node.sources()))
        .collect()
}

/// Builds query `id`'s dataflow on this worker; `cluster` says whether it is one of a cluster
/// of processes, and if so whether this is process 0 (see [`build_cluster_sink`]). A plan that does not compile here (it did on
/// the engine's thread, so this is a bug) still gets a dataflow of the same shape, a feed and
/// a sink, so that the workers' channels stay matched; the error fails the query.
fn install(
    worker: &mut Worker,
    id: u64,
    plan: &LogicalPlan,
    status: Arc<Status>,
    replies: Sender<Done>,
    traffic: Arc<Traffic>,
    cluster: Option<bool>,
    parts: u32,
) -> Installed {
    let me = worker.index() as u32;
    let peers = worker.peers() as u32;
    let frontiers: Rc<RefCell<BTreeMap<u64, Watermark>>> = Rc::default();
    let mut progress = Vec::new();
    let mut hosts = Vec::new();
    let sources = plan.sources();
    let graph = compile(plan);
    let mut compiled = false;
    // The parts this worker hosts: those whose index is this worker's modulo the workers.
    let owned: Result<Vec<(u32, weir_exec::Graph)>> =
        (0..parts).filter(|v| v % peers.max(1) == me).map(|v| Ok((v, compile(plan)?))).collect();
    let facts = node_facts(plan);
    let dataflow = worker.next_dataflow_index();
    let mut feed = InputHandle::new();
    worker.dataflow::<u64, _, _>(|scope| {
        let feed_stream = scope.input_from(&mut feed);
        let root = match graph.and_then(|g| Ok((g, owned?))) {
            Ok((graph, owned)) => {
                compiled = true;
                let span = runs_in_spans(plan, &graph);
                build_nodes(
                    scope,
                    graph,
                    owned,
                    &facts,
                    &sources,
                    span,
                    (me, peers, parts),
                    &feed_stream,
                    &frontiers,
                    &status,
                    &mut progress,
                    &mut hosts,
                    &traffic,
                )
            }
            Err(e) => {
                status.fail(e);
                None
            }
        };
        let root = root.unwrap_or(feed_stream);
        if let Some(home) = cluster {
            let traffic = traffic.clone();
            let sink = (id, me, home, &frontiers, &status, &traffic, replies);
            progress.extend(build_cluster_sink(scope, root, sink));
        } else {
            progress.push(build_sink(scope, root, id, me, &frontiers, replies));
        }
    });
    Installed { feed, frontiers, progress, hosts, status, dataflow, compiled }
}

/// A stream of parts between two nodes of a query's dataflow.
type PartStream<'s> = Stream<'s, u64, Vec<Part>>;

#[allow(clippy::too_many_arguments)]
fn build_nodes<'s>(
    scope: Scope<'s, u64>,
    shape: weir_exec::Graph,
    graphs: Vec<(u32, weir_exec::Graph)>,
    facts: &[(arrow::datatypes::SchemaRef, Vec<String>)],
    sources: &[String],
    span: bool,
    (me, peers, parts): (u32, u32, u32),
    feed: &Stream<'s, u64, Vec<Part>>,
    frontiers: &Rc<RefCell<BTreeMap<u64, Watermark>>>,
    status: &Arc<Status>,
    progress: &mut Vec<Rc<Cell<u64>>>,
    hosts: &mut Vec<(u32, Vec<Rc<RefCell<NodeHost>>>)>,
    traffic: &Arc<Traffic>,
) -> Option<Stream<'s, u64, Vec<Part>>> {
    // A layout that fails fails the query (and builds nothing more).
    let laid_out = |nodes: &[(Box<dyn weir_exec::Operator>, Vec<usize>)]| {
        layout(nodes).map_err(|e| status.fail(e)).ok()
    };
    let nodes = shape.into_nodes();
    let n = nodes.len();
    let (_, everywhere) = laid_out(&nodes)?;
    let readers = readers(&nodes);
    // Per part this worker hosts, its graph's operators and their routes (per reader), node by
    // node.
    type Hosted = std::vec::IntoIter<(Box<dyn weir_exec::Operator>, Vec<Route>)>;
    let mut ops: Vec<(u32, Hosted)> = Vec::new();
    for (v, g) in graphs {
        let nodes = g.into_nodes();
        let (routes, _) = laid_out(&nodes)?;
        let hosted: Vec<_> = nodes.into_iter().map(|(op, _)| op).zip(routes).collect();
        ops.push((v, hosted.into_iter()));
    }
    let base = hosts.len();
    hosts.extend(ops.iter().map(|(v, _)| (*v, Vec::new())));
    // Per node, per reader of its output, the stream that reader takes.
    let mut streams: Vec<Vec<Option<PartStream<'s>>>> = (0..n).map(|_| Vec::new()).collect();
    for (i, ((_, inputs), everywhere)) in nodes.into_iter().zip(everywhere).enumerate() {
        let input_schemas: Vec<_> =
            inputs.iter().filter_map(|&j| facts.get(j).map(|f| f.0.clone())).collect();
        let leaf = inputs.is_empty().then(|| {
            let reads = facts.get(i).map(|f| f.1.as_slice()).unwrap_or_default();
            let own = sources
                .iter()
                .enumerate()
                .filter(|(_, s)| reads.contains(s))
                .map(|(k, _)| k as u32)
                .collect();
            (sources.to_vec(), own)
        });
        // One host per part: each is the node as worker `v` of `parts` runs it.
        let mut node_hosts: Vec<(u32, Rc<RefCell<NodeHost>>)> = Vec::new();
        for (k, (v, next_op)) in ops.iter_mut().enumerate() {
            let (op, route) = next_op.next()?;
            let host = Rc::new(RefCell::new(NodeHost::new(
                op,
                input_schemas.clone(),
                leaf.clone(),
                span,
                *v == 0 || everywhere,
                route,
                *v,
                parts,
            )));
            hosts[base + k].1.push(host.clone());
            node_hosts.push((*v, host));
        }
        let mut b = OperatorBuilder::new(format!("weir node {i}"), scope);
        let mut handles = Vec::new();
        // Every edge is an exchange on the part's destination; a local placement addresses
        // this worker, which timely delivers without leaving the thread's queue.
        if inputs.is_empty() {
            handles.push(b.new_input(feed.clone(), Exchange::new(|p: &Part| p.dest as u64)));
        } else {
            for (k, &j) in inputs.iter().enumerate() {
                let edge = readers[j].iter().position(|&r| r == (i, k))?;
                let s = streams[j].get_mut(edge)?.take()?;
                handles.push(b.new_input(s, Exchange::new(|p: &Part| p.dest as u64)));
            }
        }
        // One output per reader (the root's: the query's output), each with its own route.
        let mut outputs = Vec::new();
        for _ in 0..readers[i].len().max(1) {
            let (output, stream) = b.new_output::<Vec<Part>>();
            outputs.push(timely::dataflow::operators::generic::OutputBuilder::from(output));
            streams[i].push(Some(stream));
        }
        let next = Rc::new(Cell::new(0u64));
        progress.push(next.clone());
        let frontiers = frontiers.clone();
        let status = status.clone();
        let traffic = traffic.clone();
        b.build(move |caps| {
            // One capability per output, all at the same round.
            let mut caps = Some(caps);
            move |input_frontiers: &[MutableAntichain<u64>]| {
                for (k, h) in handles.iter_mut().enumerate() {
                    h.for_each(|c, data| {
                        let round = c.least().copied().unwrap_or(0);
                        for part in data.drain(..) {
                            let host = node_hosts.iter().find(|(v, _)| *v == part.dest);
                            let Some(Ok(mut host)) = host.map(|(_, h)| h.try_borrow_mut()) else {
                                status.fail(WeirError::internal(format!(
                                    "a part for part {} reached worker {me}, which does not host it",
                                    part.dest
                                )));
                                continue;
                            };
                            if let Err(e) = host.receive(k, round, part) {
                                status.fail(e);
                            }
                        }
                    });
                }
                let upto = input_frontiers
                    .iter()
                    .map(|f| f.frontier().first().copied().unwrap_or(u64::MAX))
                    .min()
                    .unwrap_or(u64::MAX);
                let Some(cs) = caps.as_mut() else { return };
                let rounds: Vec<(u64, Watermark)> =
                    frontiers.borrow().range(next.get()..upto).map(|(r, f)| (*r, *f)).collect();
                for (round, frontier) in rounds {
                    for c in cs.iter_mut() {
                        c.downgrade(&round);
                    }
                    for (_, host) in &node_hosts {
                        let Ok(mut host) = host.try_borrow_mut() else {
                            status.fail(busy());
                            return;
                        };
                        let (sent, failure) = host.process(status.cap(frontier));
                        for ((sent, output), c) in sent.into_iter().zip(&mut outputs).zip(&*cs) {
                            traffic.count(me, peers, &sent);
                            if !sent.is_empty() {
                                let mut out = output.activate();
                                let mut session = out.session(c);
                                for p in sent {
                                    session.give(p);
                                }
                            }
                        }
                        if let Some((e, at)) = failure {
                            status.fail_at(e, at);
                        }
                        status.evaluated(host.last());
                    }
                    next.set(round + 1);
                }
                if upto == u64::MAX {
                    caps = None;
                } else {
                    for c in cs.iter_mut() {
                        if next.get() > *c.time() {
                            c.downgrade(&next.get());
                        }
                    }
                }
            }
        });
    }
    // The root's one stream: the query's output.
    streams.pop().and_then(|mut s| s.pop()).flatten()
}

/// The exchanges of `plan`'s dataflow on several workers, for EXPLAIN: per node of the plan in
/// post-order (the order `compile` adds them), per reader of its output (in
/// [`weir_plan::explain::explain_with`]'s order), how the output reaches that reader if it
/// leaves the worker that made it. (The root's output is always gathered on worker 0, which
/// is not listed.)
pub fn exchanges(plan: &LogicalPlan) -> Result<Vec<Vec<Option<String>>>> {
    let nodes = compile(plan)?.into_nodes();
    let (routes, _) = layout(&nodes)?;
    let root = routes.len().saturating_sub(1);
    Ok(routes
        .iter()
        .enumerate()
        .map(|(i, per_reader)| {
            per_reader
                .iter()
                .map(|r| match r {
                    _ if i == root => None,
                    Route::Here => None,
                    Route::Worker0 => Some("Exchange: all rows to one worker".to_string()),
                    Route::ByInstant => Some("Exchange: by instant".to_string()),
                    Route::Keyed(k) => Some(format!("Exchange: by hash of {}", k.describe())),
                })
                .collect()
        })
        .collect())
}

/// Per node, the nodes that read its output and which of their inputs it is, in node order
/// (a node the plan shares has several; the root none).
fn readers(nodes: &[(Box<dyn weir_exec::Operator>, Vec<usize>)]) -> Vec<Vec<(usize, usize)>> {
    let mut readers = vec![Vec::new(); nodes.len()];
    for (c, (_, inputs)) in nodes.iter().enumerate() {
        for (k, &i) in inputs.iter().enumerate() {
            if let Some(r) = readers.get_mut(i) {
                r.push((c, k));
            }
        }
    }
    readers
}

/// Where each node's output goes, per reader (in [`readers`]' order; the root's one route is to
/// worker 0), and whether each node runs on every worker (else on worker 0 only), from the
/// operators' placements of their inputs. A node's output is split by instant (every row of
/// an instant on one worker) if it runs on worker 0 only, or if its output rows at τ come from
/// its input rows at τ ([`weir_exec::Operator::keeps_instants`]: a scan of a source, which is
/// split so, a row map, a union) and each input reached it split by instant; a reader that
/// needs its input so ([`Placement::ByInstant`]) then gets it without an exchange. Rows already
/// on the worker their reader's key names (a keyed operator's output that carries its key,
/// [`weir_exec::Operator::output_key_columns`], seen through windows that pass rows on) reach
/// it without an exchange too.
fn layout(
    nodes: &[(Box<dyn weir_exec::Operator>, Vec<usize>)],
) -> Result<(Vec<Vec<Route>>, Vec<bool>)> {
    let n = nodes.len();
    let readers = readers(nodes);
    let mut everywhere = Vec::with_capacity(n);
    let mut split = Vec::with_capacity(n);
    // Per node, per input: whether that input reaches it split by instant.
    let mut arrives_split: Vec<Vec<bool>> =
        nodes.iter().map(|(_, inputs)| vec![false; inputs.len()]).collect();
    let mut routes: Vec<Vec<Route>> = Vec::with_capacity(n);
    // Per node: the output columns (and hashed types) whose key names the worker each output
    // row is on, if known.
    let mut keyed_by: Vec<Option<Vec<(usize, DataType)>>> = Vec::with_capacity(n);
    for (i, (op, inputs)) in nodes.iter().enumerate() {
        let placements: Vec<Placement> = if inputs.is_empty() {
            vec![op.placement(0)?]
        } else {
            (0..inputs.len()).map(|k| op.placement(k)).collect::<Result<_>>()?
        };
        let all = runs_everywhere(&placements);
        everywhere.push(all);
        split.push(!all || (op.keeps_instants() && arrives_split[i].iter().all(|&s| s)));
        keyed_by.push(match (inputs.as_slice(), placements.as_slice()) {
            ([_], [Placement::Keyed(k)]) if all && !k.is_constant() => op.output_key_columns(),
            ([input], [Placement::Local]) if op.passes_rows() => {
                let edge = readers[*input].iter().position(|&r| r == (i, 0));
                match edge.map(|e| &routes[*input][e]) {
                    Some(Route::Here) => keyed_by[*input].clone(),
                    _ => None,
                }
            }
            _ => None,
        });
        if readers[i].is_empty() {
            routes.push(vec![Route::Worker0]);
            continue;
        }
        let mut out = Vec::with_capacity(readers[i].len());
        for &(c, k) in &readers[i] {
            let placement = nodes[c].0.placement(k)?;
            // Rows already on the worker of the key their reader is keyed by stay there.
            let placed = match (&placement, &keyed_by[i]) {
                (Placement::Keyed(key), Some(cols)) if !key.is_constant() => {
                    key.columns_hashed().as_ref() == Some(cols)
                }
                _ => false,
            };
            let route = if placed { Route::Here } else { Route::of(placement, split[i]) };
            arrives_split[c][k] = match route {
                Route::Here => split[i],
                Route::ByInstant | Route::Worker0 => true,
                Route::Keyed(_) => false,
            };
            out.push(route);
        }
        routes.push(out);
    }
    Ok((routes, everywhere))
}

/// The query's output on worker 0: collects each round's parts and replies when the round is
/// complete.
fn build_sink<'s>(
    scope: Scope<'s, u64>,
    root: Stream<'s, u64, Vec<Part>>,
    id: u64,
    me: u32,
    frontiers: &Rc<RefCell<BTreeMap<u64, Watermark>>>,
    replies: Sender<Done>,
) -> Rc<Cell<u64>> {
    let mut b = OperatorBuilder::new("weir output".to_string(), scope);
    let mut input = b.new_input(root, Exchange::new(|p: &Part| p.dest as u64));
    let frontiers = frontiers.clone();
    let next = Rc::new(Cell::new(0u64));
    let progress = next.clone();
    b.build(move |_caps| {
        let mut pending: BTreeMap<u64, Vec<ChangeBatch>> = BTreeMap::new();
        move |input_frontiers: &[MutableAntichain<u64>]| {
            input.for_each(|c, data| {
                let round = c.least().copied().unwrap_or(0);
                let slot = pending.entry(round).or_default();
                slot.extend(data.drain(..).filter_map(|p| p.batch));
            });
            let upto = input_frontiers[0].frontier().first().copied().unwrap_or(u64::MAX);
            let rounds: Vec<u64> =
                frontiers.borrow().range(next.get()..upto).map(|(r, _)| *r).collect();
            for round in rounds {
                let batches = drain_upto(&mut pending, round);
                if me == 0 {
                    let _ = replies.send(Done { id, round, batches });
                }
                next.set(round + 1);
            }
        }
    });
    progress
}

/// The query's output in a cluster: every worker's sink reports each complete round to
/// worker 0 (the output gathered there, and what its process's workers evaluated and met),
/// and worker 0 replies once every worker's report for the round is in, after taking the
/// other processes' failures into the query's status. Returns both operators' progress.
#[allow(clippy::type_complexity)]
fn build_cluster_sink<'s>(
    scope: Scope<'s, u64>,
    root: Stream<'s, u64, Vec<Part>>,
    (id, me, home, frontiers, status, traffic, replies): (
        u64,
        u32,
        bool,
        &Rc<RefCell<BTreeMap<u64, Watermark>>>,
        &Arc<Status>,
        &Arc<Traffic>,
        Sender<Done>,
    ),
) -> [Rc<Cell<u64>>; 2] {
    use timely::dataflow::operators::generic::Operator;
    let mut b = OperatorBuilder::new("weir output".to_string(), scope);
    let mut input = b.new_input(root, Exchange::new(|p: &Part| p.dest as u64));
    let (output, reports) = b.new_output::<Vec<Report>>();
    let mut output = timely::dataflow::operators::generic::OutputBuilder::from(output);
    let sunk = Rc::new(Cell::new(0u64));
    {
        let frontiers = frontiers.clone();
        let next = sunk.clone();
        let status = status.clone();
        let traffic = traffic.clone();
        b.build(move |mut caps| {
            let mut cap = caps.pop();
            let mut pending: BTreeMap<u64, Vec<Part>> = BTreeMap::new();
            move |input_frontiers: &[MutableAntichain<u64>]| {
                input.for_each(|c, data| {
                    let round = c.least().copied().unwrap_or(0);
                    pending.entry(round).or_default().append(data);
                });
                let upto = input_frontiers[0].frontier().first().copied().unwrap_or(u64::MAX);
                let Some(c) = cap.as_mut() else { return };
                let rounds: Vec<u64> =
                    frontiers.borrow().range(next.get()..upto).map(|(r, _)| *r).collect();
                for round in rounds {
                    let parts = drain_upto(&mut pending, round);
                    let last = status.last.lock().ok().and_then(|l| *l);
                    let failure = status
                        .error
                        .lock()
                        .ok()
                        .and_then(|e| e.as_ref().map(|(e, at)| (WireError::from(e), *at)));
                    // Process 0's workers count their sends where they are.
                    let sent = if home { (0, 0) } else { traffic.take() };
                    c.downgrade(&round);
                    let mut out = output.activate();
                    out.session(c).give(Report { round, parts, last, failure, traffic: sent });
                    next.set(round + 1);
                }
                if upto == u64::MAX {
                    cap = None;
                } else if next.get() > *c.time() {
                    c.downgrade(&next.get());
                }
            }
        });
    }
    let gathered = Rc::new(Cell::new(0u64));
    let next = gathered.clone();
    let frontiers = frontiers.clone();
    let status = status.clone();
    let traffic = traffic.clone();
    let mut pending: BTreeMap<u64, Vec<Report>> = BTreeMap::new();
    reports.sink(Exchange::new(|_: &Report| 0), "weir gather", move |(input, frontier)| {
        input.for_each(|c, data| {
            let round = c.least().copied().unwrap_or(0);
            pending.entry(round).or_default().append(data);
        });
        let upto = frontier.frontier().first().copied().unwrap_or(u64::MAX);
        let rounds: Vec<u64> =
            frontiers.borrow().range(next.get()..upto).map(|(r, _)| *r).collect();
        for round in rounds {
            let mut batches = Vec::new();
            for report in drain_upto(&mut pending, round) {
                if let Some((e, at)) = report.failure {
                    status.fail_at(e.into(), at);
                }
                status.evaluated(report.last);
                traffic.add(report.traffic);
                batches.extend(report.parts.into_iter().filter_map(|p| p.batch));
            }
            if me == 0 {
                let _ = replies.send(Done { id, round, batches });
            }
            next.set(round + 1);
        }
    });
    [sunk, gathered]
}

/// What arrived in rounds up to `round`, in round order, taken out of `pending`.
fn drain_upto<T>(pending: &mut BTreeMap<u64, Vec<T>>, round: u64) -> Vec<T> {
    let mut out = Vec::new();
    while pending.first_key_value().is_some_and(|(r, _)| *r <= round) {
        if let Some((_, items)) = pending.pop_first() {
            out.extend(items);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_states_pack_and_unpack_and_refuse_cut_bytes() {
        let states = vec![(0, b"abc".to_vec()), (2, Vec::new()), (4, vec![7; 300])];
        let bytes = pack(&states);
        assert_eq!(unpack(&bytes).expect("unpacks"), states);
        assert_eq!(unpack(&[]).expect("nothing"), Vec::<(u32, Vec<u8>)>::new());
        for cut in 1..bytes.len() {
            if let Ok(got) = unpack(&bytes[..cut]) {
                // Only a cut between two parts reads as fewer parts.
                assert!(got.len() < states.len() && states.starts_with(&got), "cut at {cut}");
            }
        }
        let mut huge = pack(&[(1, vec![1])]);
        huge[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(unpack(&huge).is_err());
    }
}
