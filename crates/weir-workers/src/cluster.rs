//! Several processes as one set of workers: how they connect, and what the engine's process
//! sends to the workers of the others.
//!
//! A cluster is `P` processes with `T` workers each, listed in one address list (`host:port`
//! per process, the same list and order in every process). Worker `w` runs in process `w / T`;
//! workers 0..T, with the engine, in process 0. Timely's TCP allocator carries every exchange
//! between processes (parts travel as Arrow IPC, see [`crate::part`]).
//!
//! **Connecting** ([`connect`]). Process `p` listens on its own address and connects to every
//! process before it, each connection opening with a greeting that names the sender's index
//! and the cluster's shape, so a process started with another list or worker count is refused
//! with an error saying so (timely's own connection code prints to stdout, where Weir writes
//! query output, and retries forever: this one is quiet and gives up after a deadline).
//!
//! **Control.** The engine's commands reach a worker of process 0 by a channel, as with one
//! process. A command for a worker of another process is handed to a worker of process 0
//! (always the same one for the same destination, so a worker's commands stay in the order
//! sent), which gives it to a *control dataflow* built first on every worker: its input is
//! exchanged to the destination worker, whose loop takes the command as if it had come by
//! channel. Replies (a checkpoint's state, a query's size, a plan check) come back the same
//! way, to worker 0, which hands each to the channel the engine waits on ([`Tickets`]).
//!
//! **Plans.** A plan holds DataFusion expressions, which have no wire form here, so a query
//! goes to another process as a *recipe* the engine writes (its SQL text and the catalog it
//! was planned against) and a [`Resolver`] the other process was started with plans again.
//! Before any worker installs a query, every other process plans it and compares the plan's
//! [`fingerprint`] with process 0's, so a query that would run differently somewhere is
//! refused before any dataflow exists (all workers must build the same dataflows).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir_common::{Result, Time, Watermark, WeirError};
use weir_plan::LogicalPlan;

use crate::part::Part;
use crate::runtime::Cut;

/// Where this process sits in a cluster of processes (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// This process's index in `addresses`.
    pub process: usize,
    /// Every process's `host:port`, in process order.
    pub addresses: Vec<String>,
    /// Workers per process.
    pub threads: usize,
    /// How long to wait for every process to connect.
    pub deadline: Duration,
}

impl Cluster {
    /// A cluster description, checked: at least one address, `process` among them, at least
    /// one worker per process.
    pub fn new(process: usize, addresses: Vec<String>, threads: usize) -> Result<Cluster> {
        if addresses.is_empty() {
            return Err(WeirError::plan("a cluster needs at least one process address"));
        }
        if process >= addresses.len() {
            return Err(WeirError::plan(format!(
                "process index {process} is not below the number of processes ({})",
                addresses.len()
            )));
        }
        if threads == 0 {
            return Err(WeirError::plan("the number of workers must be at least 1"));
        }
        Ok(Cluster { process, addresses, threads, deadline: Duration::from_secs(60) })
    }

    /// The number of processes.
    pub fn processes(&self) -> usize {
        self.addresses.len()
    }

    /// Every worker of the cluster.
    pub fn peers(&self) -> usize {
        self.threads * self.addresses.len()
    }
}

/// Plans a query again from the recipe process 0 wrote for it (see the module docs).
pub type Resolver = Arc<dyn Fn(&[u8]) -> Result<Arc<LogicalPlan>> + Send + Sync>;

/// What identifies a plan across processes of one build: a hash of its whole debug form.
/// Two processes that planned a recipe alike have equal fingerprints.
pub fn fingerprint(plan: &LogicalPlan) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{plan:?}").hash(&mut h);
    h.finish()
}

/// The greeting's fixed start.
const HELLO: &[u8; 8] = b"weir-cl1";

fn greeting(c: &Cluster, from: usize) -> [u8; 32] {
    let mut g = [0u8; 32];
    g[..8].copy_from_slice(HELLO);
    g[8..16].copy_from_slice(&(from as u64).to_be_bytes());
    g[16..24].copy_from_slice(&(c.processes() as u64).to_be_bytes());
    g[24..32].copy_from_slice(&(c.threads as u64).to_be_bytes());
    g
}

/// Connects this process to every other (see the module docs): per process index, its
/// socket, None at this process's own index.
pub(crate) fn connect(c: &Cluster) -> Result<Vec<Option<TcpStream>>> {
    let me = c.process;
    let n = c.processes();
    let until = Instant::now() + c.deadline;
    let cluster_err = |what: String| {
        WeirError::exec(format!("forming the cluster (process {me} of {n}): {what}"))
    };
    let mut sockets: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let listener = if me + 1 < n {
        let l = TcpListener::bind(&c.addresses[me])
            .map_err(|e| cluster_err(format!("listening on {}: {e}", c.addresses[me])))?;
        l.set_nonblocking(true).map_err(|e| cluster_err(e.to_string()))?;
        Some(l)
    } else {
        None
    };
    // Connect to every process before this one, retrying while it starts.
    for (p, addr) in c.addresses.iter().enumerate().take(me) {
        let stream = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= until => {
                    return Err(cluster_err(format!("process {p} at {addr} did not answer: {e}")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut stream = stream;
        stream.set_nodelay(true).map_err(|e| cluster_err(e.to_string()))?;
        stream.write_all(&greeting(c, me)).map_err(|e| cluster_err(e.to_string()))?;
        sockets[p] = Some(stream);
    }
    // Accept every process after this one.
    if let Some(l) = listener {
        let mut missing = n - me - 1;
        while missing > 0 {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(|e| cluster_err(e.to_string()))?;
                    s.set_nodelay(true).map_err(|e| cluster_err(e.to_string()))?;
                    s.set_read_timeout(Some(Duration::from_secs(10)))
                        .map_err(|e| cluster_err(e.to_string()))?;
                    let mut g = [0u8; 32];
                    s.read_exact(&mut g)
                        .map_err(|e| cluster_err(format!("reading a greeting: {e}")))?;
                    s.set_read_timeout(None).map_err(|e| cluster_err(e.to_string()))?;
                    let from = u64::from_be_bytes(g[8..16].try_into().unwrap_or_default());
                    let from = usize::try_from(from).unwrap_or(usize::MAX);
                    if g[..8] != HELLO[..] {
                        return Err(cluster_err("a connection that is not a Weir process".into()));
                    }
                    if g[16..] != greeting(c, from)[16..] {
                        let (ps, ts) = (
                            u64::from_be_bytes(g[16..24].try_into().unwrap_or_default()),
                            u64::from_be_bytes(g[24..32].try_into().unwrap_or_default()),
                        );
                        return Err(cluster_err(format!(
                            "process {from} was started for {ps} processes of {ts} workers, this \
                             one for {n} of {}: give every process the same address list and \
                             --workers",
                            c.threads
                        )));
                    }
                    match sockets.get_mut(from) {
                        Some(slot @ None) if from > me => *slot = Some(s),
                        _ => {
                            return Err(cluster_err(format!(
                                "two processes claim index {from}, or it is not after {me}"
                            )))
                        }
                    }
                    missing -= 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= until {
                        let absent: Vec<String> = (me + 1..n)
                            .filter(|p| sockets[*p].is_none())
                            .map(|p| format!("{p} ({})", c.addresses[p]))
                            .collect();
                        return Err(cluster_err(format!(
                            "processes {} did not connect",
                            absent.join(", ")
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(cluster_err(format!("accepting: {e}"))),
            }
        }
    }
    Ok(sockets)
}

/// A command for a worker of another process (see [`crate::runtime`]'s `Command`, whose
/// local values it stands for: a recipe for a plan, a ticket for a reply channel).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Control {
    /// Plan recipe `recipe` on this process and check it against `fingerprint`; reply with
    /// nothing, or the error. The plan is kept for the `Install` of query `id`.
    Check {
        id: u64,
        recipe: Vec<u8>,
        fingerprint: u64,
        ticket: u64,
    },
    Install {
        id: u64,
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
    Save {
        id: u64,
        cut: Cut,
        ticket: u64,
    },
    Measure {
        id: u64,
        ticket: u64,
    },
    Restore {
        id: u64,
        bytes: Vec<u8>,
        changes: bool,
        ticket: u64,
    },
    Remove {
        id: u64,
    },
    /// The engine is gone: leave the worker loop.
    Shutdown,
}

/// A [`Control`] with the worker it is for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Addressed {
    pub to: u32,
    pub control: Control,
}

/// A worker's reply to a ticketed [`Control`], on its way to worker 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reply {
    pub worker: u32,
    pub ticket: u64,
    pub result: std::result::Result<Vec<u8>, WireError>,
}

/// A [`WeirError`] across processes: its category and message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WireError {
    kind: u8,
    message: String,
}

impl From<&WeirError> for WireError {
    fn from(e: &WeirError) -> WireError {
        let (kind, message) = match e {
            WeirError::Syntax(d) | WeirError::Plan(d) => (0, d.to_string()),
            WeirError::Execution(m) => (1, m.clone()),
            WeirError::Input(m) => (2, m.clone()),
            WeirError::Internal(m) => (3, m.clone()),
        };
        WireError { kind, message }
    }
}

impl From<WireError> for WeirError {
    fn from(e: WireError) -> WeirError {
        match e.kind {
            0 => WeirError::plan(e.message),
            1 => WeirError::exec(e.message),
            2 => WeirError::input(e.message),
            _ => WeirError::internal(e.message),
        }
    }
}

/// What a worker's output sink tells worker 0 when a round is complete there (clusters only):
/// the round's output gathered on worker 0 (none elsewhere), and what its process's workers
/// saw: the last instant evaluated, the earliest failure, and what they sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Report {
    pub round: u64,
    pub parts: Vec<Part>,
    pub last: Option<Time>,
    pub failure: Option<(WireError, Option<Time>)>,
    /// Rows and bytes the workers of another process sent since its last report (see
    /// [`crate::Traffic`]); nothing from process 0's own workers, which count where they are.
    pub traffic: (u64, u64),
}

/// Reply channels waiting for replies from other processes, by ticket (shared by the
/// threads of process 0).
pub(crate) type ReplyTo = Sender<(usize, Result<Vec<u8>>)>;

#[derive(Debug, Default)]
pub(crate) struct Tickets {
    next: u64,
    waiting: HashMap<u64, ReplyTo>,
}

impl Tickets {
    pub fn issue(&mut self, to: ReplyTo) -> u64 {
        let t = self.next;
        self.next += 1;
        self.waiting.insert(t, to);
        t
    }

    pub fn answer(&mut self, reply: Reply) {
        if let Some(to) = self.waiting.remove(&reply.ticket) {
            let _ = to.send((reply.worker as usize, reply.result.map_err(WeirError::from)));
        }
    }
}

pub(crate) type SharedTickets = Arc<Mutex<Tickets>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn local(n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                let l = TcpListener::bind("127.0.0.1:0").expect("bind");
                l.local_addr().expect("addr").to_string()
            })
            .collect()
    }

    #[test]
    fn three_processes_connect_each_pair_once() {
        let addresses = local(3);
        let handles: Vec<_> = (0..3)
            .map(|p| {
                let c = Cluster::new(p, addresses.clone(), 2).expect("cluster");
                std::thread::spawn(move || {
                    connect(&c).map(|s| s.iter().map(Option::is_some).collect::<Vec<_>>())
                })
            })
            .collect();
        for (p, h) in handles.into_iter().enumerate() {
            let got = h.join().expect("thread").expect("connects");
            let want: Vec<bool> = (0..3).map(|q| q != p).collect();
            assert_eq!(got, want, "process {p}");
        }
    }

    #[test]
    fn a_process_of_another_shape_is_refused_by_name() {
        let addresses = local(2);
        let c0 = Cluster::new(0, addresses.clone(), 2).expect("cluster");
        let mut c1 = Cluster::new(1, addresses, 3).expect("cluster");
        c1.deadline = Duration::from_secs(5);
        let h = std::thread::spawn(move || connect(&c1).map(|_| ()));
        let e = connect(&c0).expect_err("refused").to_string();
        assert!(e.contains("process 1 was started for 2 processes of 3 workers"), "{e}");
        let _ = h.join();
    }

    #[test]
    fn a_missing_process_is_named_after_the_deadline() {
        let addresses = local(2);
        let mut c0 = Cluster::new(0, addresses, 1).expect("cluster");
        c0.deadline = Duration::from_millis(200);
        let e = connect(&c0).expect_err("nobody came").to_string();
        assert!(e.contains("processes 1 (127.0.0.1:"), "{e}");
        assert!(Cluster::new(2, vec!["a:1".into(), "b:1".into()], 1).is_err());
    }
}
