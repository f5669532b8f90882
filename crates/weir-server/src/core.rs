//! The engine thread: one [`Engine`] shared by every connection.
//!
//! Connections never touch the engine: they send a [`Request`] over a channel and await its
//! reply. The thread takes requests in arrival order, one at a time, so each statement sees the
//! effects of every statement answered before it, from whichever connection. Between requests
//! it reads the streams' sources and takes checkpoints (with `--data-dir`), as `weir run` does.
//!
//! After every request and every source read, it moves each subscription's new changes from the
//! engine into the subscription's [`Feed`], from which the connection writes them to its client.
//! A feed is bounded in rows: a client that reads more slowly than its query produces cannot
//! make the engine hold more than `subscriber_buffer` rows for it (or one batch, if a single
//! step of the engine produced more). When a feed is full the
//! subscription ends with an error for that client alone, and the query stops; the engine and
//! every other client go on (see docs/server.md). A client that disconnects drops its feed,
//! and the query stops at the next delivery.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use tokio::sync::{mpsc, oneshot};
use weir::{
    ChangeBatch, CopyIn, CopyReport, Engine, ExecResult, Format, PlanKind, Subscription,
    TimeDomain, WeirError,
};

/// What one statement did, as a connection reports it.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A command tag (`CREATE STREAM`, `INSERT 3`).
    Done(String),
    /// A result set.
    Rows { schema: SchemaRef, batches: Vec<arrow::array::RecordBatch> },
    /// EXPLAIN text.
    Explain(String),
    /// A continuous query: its changes arrive on the feed.
    Subscribed(Feed),
}

/// A request to the engine thread. Each carries where to send its answer.
#[derive(Debug)]
pub(crate) enum Request {
    /// Run one statement of Weir SQL (the text may hold several: all run, up to an error).
    Execute { sql: String, reply: oneshot::Sender<Result<Vec<Outcome>, WeirError>> },
    /// Start a continuous query, or subscribe to a view or stream by name.
    Subscribe { query: String, reply: oneshot::Sender<Result<Feed, WeirError>> },
    /// Begin `COPY stream FROM STDIN`.
    CopyBegin { stream: String, format: Format, reply: oneshot::Sender<Result<u64, WeirError>> },
    /// The next chunk of a COPY.
    CopyData { id: u64, bytes: Vec<u8>, reply: oneshot::Sender<Result<(), WeirError>> },
    /// The end of a COPY.
    CopyDone { id: u64, reply: oneshot::Sender<Result<CopyReport, WeirError>> },
    /// A COPY the client abandoned: what it sent so far stays taken in.
    CopyAbort { id: u64 },
    /// The catalog's objects and their columns (to type a prepared statement's parameters).
    Catalog { reply: oneshot::Sender<Vec<weir::CatalogObject>> },
    /// What a statement would return, without running it.
    Describe { sql: String, reply: oneshot::Sender<Result<Option<weir::QueryShape>, WeirError>> },
    /// What a subscription would stream, without starting it.
    DescribeSubscription {
        query: String,
        reply: oneshot::Sender<Result<weir::QueryShape, WeirError>>,
    },
    /// How many continuous queries are running (subscriptions, views, sinks).
    RunningQueries { reply: oneshot::Sender<usize> },
}

/// The connections' side of the engine thread.
#[derive(Debug, Clone)]
pub(crate) struct CoreHandle {
    tx: Sender<Request>,
}

impl CoreHandle {
    /// Sends a request and waits for its answer. Fails only if the engine thread is gone.
    pub async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, WeirError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())
    }

    /// Sends a request that has no answer.
    pub fn tell(&self, request: Request) {
        let _ = self.tx.send(request);
    }
}

fn gone() -> WeirError {
    WeirError::internal("the engine thread has stopped")
}

/// One item of a subscription's feed.
#[derive(Debug)]
pub(crate) enum FeedItem {
    Changes(ChangeBatch),
    /// The query failed (or its feed overflowed); nothing follows.
    Failed(WeirError),
    /// The query ended: every stream it reads is closed (its output is complete), or one was
    /// dropped. Nothing follows.
    Ended,
}

/// The receiving end of a subscription, held by a connection. Dropping it stops the query.
#[derive(Debug)]
pub(crate) struct Feed {
    pub schema: SchemaRef,
    pub kind: PlanKind,
    pub domain: TimeDomain,
    pub rx: mpsc::UnboundedReceiver<FeedItem>,
    /// Rows sent and not yet taken: the connection subtracts what it takes.
    pub buffered: Arc<AtomicUsize>,
}

impl Feed {
    /// The next item, once available; `None` once the engine side is gone.
    pub async fn next(&mut self) -> Option<FeedItem> {
        let item = self.rx.recv().await?;
        self.taken(&item);
        Some(item)
    }

    /// The next item if one is ready.
    pub fn try_next(&mut self) -> Option<FeedItem> {
        let item = self.rx.try_recv().ok()?;
        self.taken(&item);
        Some(item)
    }

    fn taken(&self, item: &FeedItem) {
        if let FeedItem::Changes(b) = item {
            self.buffered.fetch_sub(b.data.num_rows(), Ordering::Relaxed);
        }
    }
}

/// The engine thread's side of a subscription.
struct Delivery {
    sub: Subscription,
    tx: mpsc::UnboundedSender<FeedItem>,
    buffered: Arc<AtomicUsize>,
}

/// How the engine thread runs.
#[derive(Debug, Clone)]
pub(crate) struct CoreConfig {
    /// Rows a subscription may have waiting for its client before it is ended.
    pub subscriber_buffer: usize,
}

/// Starts the engine thread over `engine`.
pub(crate) fn start(engine: Engine, config: CoreConfig) -> std::io::Result<CoreHandle> {
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("weir-engine".into())
        .spawn(move || Core::new(engine, config).run(rx))?;
    Ok(CoreHandle { tx })
}

struct Core {
    engine: Engine,
    config: CoreConfig,
    deliveries: Vec<Delivery>,
    copies: HashMap<u64, CopyIn>,
    next_copy: u64,
}

impl Core {
    fn new(engine: Engine, config: CoreConfig) -> Self {
        Core { engine, config, deliveries: Vec::new(), copies: HashMap::new(), next_copy: 1 }
    }

    fn run(mut self, rx: Receiver<Request>) {
        let mut busy = false;
        loop {
            // Sources with data waiting are read again at once; otherwise wait for a request
            // (followed files and stdin are looked at every 50 ms).
            let wait = if busy { Duration::ZERO } else { Duration::from_millis(50) };
            match rx.recv_timeout(wait) {
                Ok(request) => {
                    self.handle(request);
                    while let Ok(request) = rx.try_recv() {
                        self.handle(request);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            busy = match self.engine.poll_sources(1 << 20) {
                Ok(poll) => !poll.idle(),
                // The queries reading a failed source fail with the error; their clients see
                // it. The server goes on.
                Err(_) => true,
            };
            self.deliver();
        }
    }

    fn handle(&mut self, request: Request) {
        match request {
            Request::Execute { sql, reply } => {
                let result = self.execute(&sql);
                let _ = reply.send(result);
            }
            Request::Subscribe { query, reply } => {
                let result = self.engine.subscribe(&query).map(|s| self.feed(s));
                let _ = reply.send(result);
            }
            Request::CopyBegin { stream, format, reply } => {
                let result = self.engine.copy_in(&stream, format, "us").map(|c| {
                    let id = self.next_copy;
                    self.next_copy += 1;
                    self.copies.insert(id, c);
                    id
                });
                let _ = reply.send(result);
            }
            Request::CopyData { id, bytes, reply } => {
                let result = match self.copies.get_mut(&id) {
                    Some(copy) => {
                        let r = self.engine.copy_data(copy, &bytes);
                        if r.is_err() {
                            self.copies.remove(&id);
                        }
                        r
                    }
                    None => Err(WeirError::exec("no COPY in progress")),
                };
                let _ = reply.send(result);
            }
            Request::CopyDone { id, reply } => {
                let result = match self.copies.remove(&id) {
                    Some(copy) => self.engine.copy_done(copy),
                    None => Err(WeirError::exec("no COPY in progress")),
                };
                let _ = reply.send(result);
            }
            Request::CopyAbort { id } => {
                self.copies.remove(&id);
            }
            Request::Catalog { reply } => {
                let _ = reply.send(self.engine.catalog());
            }
            Request::Describe { sql, reply } => {
                let _ = reply.send(self.engine.describe(&sql));
            }
            Request::DescribeSubscription { query, reply } => {
                let _ = reply.send(self.engine.describe_subscription(&query));
            }
            Request::RunningQueries { reply } => {
                // Deliver first, so subscriptions whose client has gone are counted out.
                self.deliver();
                let _ = reply.send(self.engine.running_queries());
            }
        }
        self.deliver();
    }

    fn execute(&mut self, sql: &str) -> Result<Vec<Outcome>, WeirError> {
        let statements = weir_sql::parse_script(sql)?;
        let mut out = Vec::with_capacity(statements.len());
        for s in statements {
            let r = self.engine.execute_statement(s).map_err(|e| e.with_source(sql))?;
            out.push(match r {
                ExecResult::Done(tag) => Outcome::Done(tag),
                ExecResult::Rows { schema, batches } => Outcome::Rows { schema, batches },
                ExecResult::Explain(text) => Outcome::Explain(text),
                ExecResult::Subscribed(sub) => Outcome::Subscribed(self.feed(sub)),
            });
        }
        Ok(out)
    }

    /// Registers a subscription for delivery and gives its receiving end.
    fn feed(&mut self, sub: Subscription) -> Feed {
        let (tx, rx) = mpsc::unbounded_channel();
        let buffered = Arc::new(AtomicUsize::new(0));
        let feed = Feed {
            schema: sub.schema.clone(),
            kind: sub.kind,
            domain: sub.domain,
            rx,
            buffered: buffered.clone(),
        };
        self.deliveries.push(Delivery { sub, tx, buffered });
        feed
    }

    /// Moves every subscription's new changes into its feed; ends the ones whose client has
    /// gone, whose feed is full, or whose query has stopped.
    fn deliver(&mut self) {
        let limit = self.config.subscriber_buffer;
        let mut ended = Vec::new();
        let engine = &self.engine;
        self.deliveries.retain(|d| {
            let mut keep = Self::deliver_one(d, limit);
            // Everything a query over closed streams will ever produce has been delivered.
            if keep && engine.is_complete(d.sub.id) {
                let _ = d.tx.send(FeedItem::Ended);
                keep = false;
            }
            if !keep {
                ended.push(d.sub.id);
            }
            keep
        });
        for id in ended {
            self.engine.unsubscribe(id);
        }
    }

    /// Whether the subscription goes on after delivering what it has.
    fn deliver_one(d: &Delivery, limit: usize) -> bool {
        if d.tx.is_closed() {
            return false;
        }
        let batches = match d.sub.poll() {
            Ok(b) => b,
            Err(e) => {
                let _ = d.tx.send(FeedItem::Failed(e));
                return false;
            }
        };
        for b in batches {
            let rows = b.data.num_rows();
            let before = d.buffered.fetch_add(rows, Ordering::Relaxed);
            let waiting = before + rows;
            // A batch is what one step of the engine produced, already in memory: one that
            // is larger than the limit on its own still goes to a client that has read
            // everything before it.
            if before > 0 && waiting > limit {
                let _ = d.tx.send(FeedItem::Failed(WeirError::exec(format!(
                    "the subscription fell behind: its client has not read {waiting} rows \
                         (the limit is {limit}); the query was stopped"
                ))));
                return false;
            }
            if d.tx.send(FeedItem::Changes(b)).is_err() {
                return false;
            }
        }
        if d.sub.is_closed() {
            let _ = d.tx.send(FeedItem::Ended);
            return false;
        }
        true
    }
}
