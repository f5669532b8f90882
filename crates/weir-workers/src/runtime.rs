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
}

/// What a [`Command::Save`] writes (incremental checkpoints: see [`weir_exec::dirty`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Counts `parts` that leave worker `me`.
    pub(crate) fn count(&self, me: u32, parts: &[Part]) {
        use std::sync::atomic::Ordering::Relaxed;
        for p in parts.iter().filter(|p| p.dest != me) {
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
        let (reply_tx, replies) = channel::<Done>();
        let (setup_tx, setup_rx) = channel::<(usize, SyncActivator)>();
        let mut to = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 0..n {
            let (tx, rx) = channel::<Command>();
            to.push(tx);
            inboxes.push(Some(rx));
        }
        let inboxes = Arc::new(Mutex::new(inboxes));
        let reply_tx = Mutex::new(reply_tx);
        let setup_tx = Mutex::new(setup_tx);
        let traffic = Arc::new(Traffic::default());
        let counted = traffic.clone();
        let config = timely::Config {
            communication: timely::CommunicationConfig::Process(n),
            worker: WorkerConfig::default(),
        };
        let guards = timely::execute(config, move |worker| {
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
            run_worker(worker, inbox, replies, counted.clone());
        })
        .map_err(|e| WeirError::exec(format!("starting {n} workers: {e}")))?;
        let mut wake: Vec<Option<SyncActivator>> = (0..n).map(|_| None).collect();
        for _ in 0..n {
            let (i, a) = setup_rx
                .recv_timeout(Duration::from_secs(30))
                .map_err(|_| WeirError::exec("the workers did not start"))?;
            wake[i] = Some(a);
        }
        let wake = wake.into_iter().flatten().collect();
        Ok(Arc::new(Workers {
            peers: n,
            traffic,
            inner: Mutex::new(Inner {
                to,
                wake,
                replies,
                mailbox: HashMap::new(),
                next_id: 0,
                guards: Some(guards),
            }),
        }))
    }

    /// The number of workers.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// Rows and bytes sent between workers so far (see [`Traffic`]).
    pub fn traffic(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.traffic.rows.load(Relaxed), self.traffic.bytes.load(Relaxed))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| WeirError::internal("the worker runtime's lock is poisoned"))
    }

    pub(crate) fn install(&self, plan: Arc<LogicalPlan>, status: Arc<Status>) -> Result<u64> {
        let mut inner = self.lock()?;
        let id = inner.next_id;
        inner.next_id += 1;
        for w in 0..self.peers {
            inner.send(w, Command::Install { id, plan: plan.clone(), status: status.clone() })?;
        }
        Ok(id)
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
            let (w, r) = rx
                .recv_timeout(Duration::from_secs(120))
                .map_err(|_| WeirError::internal("a worker did not answer"))?;
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
                        return Err(WeirError::internal("the workers stopped"));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(WeirError::internal("the workers stopped (a worker thread ended)"))
                }
            }
        }
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
        let to = self.to.get(w).ok_or_else(|| WeirError::internal(format!("no worker {w}")))?;
        to.send(cmd).map_err(|_| WeirError::internal("the workers stopped"))?;
        if let Some(a) = self.wake.get(w) {
            let _ = a.activate();
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.inner.lock() {
            // Closing the command channels ends each worker's loop; then join the threads.
            inner.to.clear();
            for a in &inner.wake {
                let _ = a.activate();
            }
            if let Some(g) = inner.guards.take() {
                let _ = g.join();
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
    /// The graph's nodes, in graph order (empty if the plan did not compile here).
    hosts: Vec<Rc<RefCell<NodeHost>>>,
    status: Arc<Status>,
    dataflow: usize,
}

impl Installed {
    /// This worker's part of a checkpoint: every node's state (or its changes, see [`Cut`]),
    /// in graph order.
    fn save(&self, cut: Cut) -> Result<Vec<u8>> {
        if self.hosts.is_empty() {
            return Err(WeirError::internal("a query that did not compile on a worker"));
        }
        let mut w = StateWriter::new();
        for (i, host) in self.hosts.iter().enumerate() {
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
        if cut == Cut::Track {
            return Ok(Vec::new());
        }
        w.into_bytes()
    }

    /// This worker's share of [`Workers::measure`]: per node, its bytes as a little-endian
    /// u64.
    fn measure(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.hosts.len() * 8);
        for host in &self.hosts {
            let bytes = host.try_borrow().map_err(|_| busy())?.state_bytes();
            out.extend_from_slice(&(bytes as u64).to_le_bytes());
        }
        Ok(out)
    }

    fn restore(&self, bytes: &[u8], changes: bool) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(WeirError::internal("a query that did not compile on a worker"));
        }
        let mut r = StateReader::from_bytes(bytes)?;
        for (i, host) in self.hosts.iter().enumerate() {
            let mut host = host.try_borrow_mut().map_err(|_| busy())?;
            if changes {
                host.restore_changes(i, &mut r)?;
            } else {
                host.restore_state(i, &mut r)?;
            }
            self.status.evaluated(host.last());
        }
        r.finish()
    }
}

fn busy() -> WeirError {
    WeirError::internal("a node's state was asked for while it ran")
}

fn run_worker(
    worker: &mut Worker,
    inbox: Receiver<Command>,
    replies: Sender<Done>,
    traffic: Arc<Traffic>,
) {
    let mut queries: HashMap<u64, Installed> = HashMap::new();
    loop {
        loop {
            match inbox.try_recv() {
                Ok(cmd) => handle(worker, &mut queries, cmd, &replies, &traffic),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
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

fn handle(
    worker: &mut Worker,
    queries: &mut HashMap<u64, Installed>,
    cmd: Command,
    replies: &Sender<Done>,
    traffic: &Arc<Traffic>,
) {
    match cmd {
        Command::Install { id, plan, status } => {
            let q = install(worker, id, &plan, status, replies.clone(), traffic.clone());
            queries.insert(id, q);
        }
        Command::Feed { id, part } => {
            if let Some(q) = queries.get_mut(&id) {
                q.feed.send(part);
            }
        }
        Command::Advance { id, frontier } => {
            if let Some(q) = queries.get_mut(&id) {
                let round = *q.feed.time();
                q.frontiers.borrow_mut().insert(round, frontier);
                q.feed.advance_to(round + 1);
            }
        }
        Command::Save { id, cut, reply } => {
            let r = match queries.get(&id) {
                Some(q) => q.save(cut),
                None => Err(WeirError::internal(format!("no query {id} on this worker"))),
            };
            let _ = reply.send((worker.index(), r));
        }
        Command::Measure { id, reply } => {
            let r = match queries.get(&id) {
                Some(q) => q.measure(),
                None => Err(WeirError::internal(format!("no query {id} on this worker"))),
            };
            let _ = reply.send((worker.index(), r));
        }
        Command::Restore { id, bytes, changes, reply } => {
            let r = match queries.get(&id) {
                Some(q) => q.restore(&bytes, changes).map(|()| Vec::new()),
                None => Err(WeirError::internal(format!("no query {id} on this worker"))),
            };
            let _ = reply.send((worker.index(), r));
        }
        Command::Remove { id } => {
            if let Some(q) = queries.remove(&id) {
                drop(q.feed);
                worker.drop_dataflow(q.dataflow);
            }
        }
    }
}

/// Per node of the plan, in the order `compile` adds them (inputs first): its executor schema
/// and the base streams and tables it reads.
fn node_facts(plan: &LogicalPlan, out: &mut Vec<(arrow::datatypes::SchemaRef, Vec<String>)>) {
    for input in plan.inputs() {
        node_facts(input, out);
    }
    out.push((exec_schema(&plan.schema()), plan.sources()));
}

/// Builds query `id`'s dataflow on this worker. A plan that does not compile here (it did on
/// the engine's thread, so this is a bug) still gets a dataflow of the same shape, a feed and
/// a sink, so that the workers' channels stay matched; the error fails the query.
fn install(
    worker: &mut Worker,
    id: u64,
    plan: &LogicalPlan,
    status: Arc<Status>,
    replies: Sender<Done>,
    traffic: Arc<Traffic>,
) -> Installed {
    let me = worker.index() as u32;
    let peers = worker.peers() as u32;
    let frontiers: Rc<RefCell<BTreeMap<u64, Watermark>>> = Rc::default();
    let mut progress = Vec::new();
    let mut hosts = Vec::new();
    let sources = plan.sources();
    let graph = compile(plan);
    let mut facts = Vec::new();
    node_facts(plan, &mut facts);
    let dataflow = worker.next_dataflow_index();
    let mut feed = InputHandle::new();
    worker.dataflow::<u64, _, _>(|scope| {
        let feed_stream = scope.input_from(&mut feed);
        let root = match graph {
            Ok(graph) => {
                let span = runs_in_spans(plan, &graph);
                build_nodes(
                    scope,
                    graph,
                    &facts,
                    &sources,
                    span,
                    (me, peers),
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
        progress.push(build_sink(scope, root, id, me, &frontiers, replies));
    });
    Installed { feed, frontiers, progress, hosts, status, dataflow }
}

#[allow(clippy::too_many_arguments)]
fn build_nodes<'s>(
    scope: Scope<'s, u64>,
    graph: weir_exec::Graph,
    facts: &[(arrow::datatypes::SchemaRef, Vec<String>)],
    sources: &[String],
    span: bool,
    (me, peers): (u32, u32),
    feed: &Stream<'s, u64, Vec<Part>>,
    frontiers: &Rc<RefCell<BTreeMap<u64, Watermark>>>,
    status: &Arc<Status>,
    progress: &mut Vec<Rc<Cell<u64>>>,
    hosts: &mut Vec<Rc<RefCell<NodeHost>>>,
    traffic: &Arc<Traffic>,
) -> Option<Stream<'s, u64, Vec<Part>>> {
    let nodes = graph.into_nodes();
    let n = nodes.len();
    let (routes, everywhere) = match layout(&nodes) {
        Ok(l) => l,
        Err(e) => {
            status.fail(e);
            return None;
        }
    };
    let mut streams: Vec<Option<Stream<'s, u64, Vec<Part>>>> = (0..n).map(|_| None).collect();
    for (i, (((op, inputs), route), everywhere)) in
        nodes.into_iter().zip(routes).zip(everywhere).enumerate()
    {
        let active = me == 0 || everywhere;
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
        let host = Rc::new(RefCell::new(NodeHost::new(
            op,
            input_schemas,
            leaf,
            span,
            active,
            route,
            me,
            peers,
        )));
        hosts.push(host.clone());
        let mut b = OperatorBuilder::new(format!("weir node {i}"), scope);
        let mut handles = Vec::new();
        // Every edge is an exchange on the part's destination; a local placement addresses
        // this worker, which timely delivers without leaving the thread's queue.
        if inputs.is_empty() {
            handles.push(b.new_input(feed.clone(), Exchange::new(|p: &Part| p.dest as u64)));
        } else {
            for &j in &inputs {
                let s = streams[j].take()?;
                handles.push(b.new_input(s, Exchange::new(|p: &Part| p.dest as u64)));
            }
        }
        let (output, stream) = b.new_output::<Vec<Part>>();
        let mut output = timely::dataflow::operators::generic::OutputBuilder::from(output);
        let next = Rc::new(Cell::new(0u64));
        progress.push(next.clone());
        let frontiers = frontiers.clone();
        let status = status.clone();
        let traffic = traffic.clone();
        b.build(move |mut caps| {
            let mut cap = caps.pop();
            move |input_frontiers: &[MutableAntichain<u64>]| {
                let Ok(mut host) = host.try_borrow_mut() else {
                    status.fail(busy());
                    return;
                };
                for (k, h) in handles.iter_mut().enumerate() {
                    h.for_each(|c, data| {
                        let round = c.least().copied().unwrap_or(0);
                        for part in data.drain(..) {
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
                let Some(c) = cap.as_mut() else { return };
                let rounds: Vec<(u64, Watermark)> =
                    frontiers.borrow().range(next.get()..upto).map(|(r, f)| (*r, *f)).collect();
                for (round, frontier) in rounds {
                    c.downgrade(&round);
                    let (parts, failure) = host.process(status.cap(frontier));
                    traffic.count(me, &parts);
                    if !parts.is_empty() {
                        let mut out = output.activate();
                        let mut session = out.session(c);
                        for p in parts {
                            session.give(p);
                        }
                    }
                    if let Some((e, at)) = failure {
                        status.fail_at(e, at);
                    }
                    status.evaluated(host.last());
                    next.set(round + 1);
                }
                if upto == u64::MAX {
                    cap = None;
                } else if next.get() > *c.time() {
                    c.downgrade(&next.get());
                }
            }
        });
        streams[i] = Some(stream);
    }
    streams.pop().flatten()
}

/// The exchanges of `plan`'s dataflow on several workers, for EXPLAIN: per node of the plan in
/// post-order (the order `compile` adds them), how its output reaches its consumer if it
/// leaves the worker that made it. (The root's output is always gathered on worker 0, which
/// is not listed.)
pub fn exchanges(plan: &LogicalPlan) -> Result<Vec<Option<String>>> {
    let nodes = compile(plan)?.into_nodes();
    let (routes, _) = layout(&nodes)?;
    let root = routes.len().saturating_sub(1);
    Ok(routes
        .iter()
        .enumerate()
        .map(|(i, r)| match r {
            _ if i == root => None,
            Route::Here => None,
            Route::Worker0 => Some("Exchange: all rows to one worker".to_string()),
            Route::ByInstant => Some("Exchange: by instant".to_string()),
            Route::Keyed(k) => Some(format!("Exchange: by hash of {}", k.describe())),
        })
        .collect())
}

/// Where each node's output goes, and whether each node runs on every worker (else on worker
/// 0 only), from the operators' placements of their inputs. A node's output is split by
/// instant (every row of an instant on one worker) if it runs on worker 0 only, or if its
/// output rows at τ come from its input rows at τ ([`weir_exec::Operator::keeps_instants`]:
/// a scan of a source, which is split so, a row map, a union) and each input reached it split
/// by instant; a consumer that needs its input so ([`Placement::ByInstant`]) then gets it
/// without an exchange. Rows already on the worker their consumer's key names (a keyed
/// operator's output that carries its key, [`weir_exec::Operator::output_key_columns`], seen
/// through windows that pass rows on) reach it without an exchange too.
fn layout(nodes: &[(Box<dyn weir_exec::Operator>, Vec<usize>)]) -> Result<(Vec<Route>, Vec<bool>)> {
    let n = nodes.len();
    let mut consumer: Vec<Option<(usize, usize)>> = vec![None; n];
    for (c, (_, inputs)) in nodes.iter().enumerate() {
        for (k, &i) in inputs.iter().enumerate() {
            consumer[i] = Some((c, k));
        }
    }
    let mut everywhere = Vec::with_capacity(n);
    let mut split = Vec::with_capacity(n);
    let mut arrives_split: Vec<Vec<bool>> = vec![Vec::new(); n];
    let mut routes: Vec<Route> = Vec::with_capacity(n);
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
            ([input], [Placement::Local]) if op.passes_rows() => match routes[*input] {
                Route::Here => keyed_by[*input].clone(),
                _ => None,
            },
            _ => None,
        });
        let route = match consumer[i] {
            None => Route::Worker0,
            Some((c, k)) => {
                let placement = nodes[c].0.placement(k)?;
                // Rows already on the worker of the key their consumer is keyed by stay there.
                let placed = match (&placement, &keyed_by[i]) {
                    (Placement::Keyed(key), Some(cols)) if !key.is_constant() => {
                        key.columns_hashed().as_ref() == Some(cols)
                    }
                    _ => false,
                };
                let route = if placed { Route::Here } else { Route::of(placement, split[i]) };
                let arrives = match route {
                    Route::Here => split[i],
                    Route::ByInstant | Route::Worker0 => true,
                    Route::Keyed(_) => false,
                };
                arrives_split[c].push(arrives);
                route
            }
        };
        routes.push(route);
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
                let mut batches = Vec::new();
                while pending.first_key_value().is_some_and(|(r, _)| *r <= round) {
                    if let Some((_, b)) = pending.pop_first() {
                        batches.extend(b);
                    }
                }
                if me == 0 {
                    let _ = replies.send(Done { id, round, batches });
                }
                next.set(round + 1);
            }
        }
    });
    progress
}
