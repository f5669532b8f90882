//! A file sink's writing thread. While the engine reads sources, its thread hands each
//! output batch over and goes on evaluating while this thread formats the batch and writes
//! it (on one thread the two add up: writing the hop query's output was 15% of a `weir
//! run`'s engine thread). A batch the engine waits for anyway (a push's, a statement's) is
//! written on the engine's thread, after those handed over: a round trip to another thread
//! buys nothing there and cost a quarter of a JSON sink's rate.
//!
//! The thread first empties a file being replaced (the kernel takes a while to drop a large
//! file's pages: 0.15 s for a 370 MB one here), then takes jobs in order from a bounded
//! queue: batches to write, and requests to settle (answered once every batch before it is
//! written). The file's writer is shared behind a lock that each side holds while it writes,
//! and the engine's side settles before writing itself, so the file always holds a prefix of
//! the batches in the order they were given. The first batch that cannot be written stops
//! the writing: its error is kept, nothing more is written, and every later call on the sink
//! returns that error (the engine then stops the sink's query). At most [`QUEUED`] batches
//! wait, so a file slower than the query holds the query back instead of letting its output
//! pile up in memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use arrow::array::RecordBatch;
use weir_common::{Result, WeirError};

use super::FileWriter;

/// Batches (and requests) that may wait for the writing thread before the engine's thread
/// waits in turn.
pub(super) const QUEUED: usize = 4;

/// What the writing thread is asked to do, in order.
enum Job {
    Write(RecordBatch),
    /// Answer once every batch before is written.
    Settle(Sender<()>),
}

/// The engine's end of a sink's writing thread. See the module docs.
#[derive(Debug)]
pub(super) struct Pipe {
    /// The sink's path, for messages.
    path: String,
    /// `None` once stopped.
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    writer: Arc<Mutex<FileWriter>>,
    /// The error that stopped the writing, once one did.
    failure: Arc<Mutex<Option<WeirError>>>,
    /// Bytes in the file, as written so far.
    written: Arc<AtomicU64>,
    /// Whether the thread may have work left (the file's start, or batches handed over).
    unsettled: bool,
}

impl Pipe {
    /// Starts the thread that writes with `writer`, which first empties the file if
    /// `truncate` and writes `header` (see [`FileWriter::begin`]).
    pub fn start(writer: FileWriter, truncate: bool, header: Vec<u8>) -> Result<Pipe> {
        let (jobs, queue) = sync_channel(QUEUED);
        let failure = Arc::new(Mutex::new(None));
        let written = writer.written.clone();
        let path = writer.path.clone();
        let writer = Arc::new(Mutex::new(writer));
        let (shared, kept) = (writer.clone(), failure.clone());
        let thread = std::thread::Builder::new()
            .name("weir-sink".into())
            .spawn(move || run(&shared, truncate, &header, queue, &kept))
            .map_err(|e| {
                WeirError::exec(format!("sink '{path}': cannot start its writing thread: {e}"))
            })?;
        Ok(Pipe {
            path,
            jobs: Some(jobs),
            thread: Some(thread),
            writer,
            failure,
            written,
            unsettled: true,
        })
    }

    /// Writes `batch` after the batches before it: on this thread if `awaited` (in slices,
    /// see [`FileWriter::write`]), else handed to the writing thread. Fails with the error
    /// of an earlier batch if one could not be written.
    pub fn write(&mut self, batch: RecordBatch, awaited: bool) -> Result<()> {
        if awaited {
            self.settle()?;
            let written = lock(&self.writer).write(&batch, true);
            return written.map_err(|e| keep(&self.failure, e));
        }
        if let Some(e) = self.failure() {
            return Err(e);
        }
        self.send(Job::Write(batch))?;
        self.unsettled = true;
        Ok(())
    }

    /// Waits until every batch handed over is written; the error that stopped the writing,
    /// if one did.
    pub fn settle(&mut self) -> Result<()> {
        if self.unsettled {
            let (tx, rx) = channel();
            self.send(Job::Settle(tx))?;
            rx.recv().map_err(|_| self.stopped())?;
            self.unsettled = false;
        }
        self.failure().map_or(Ok(()), Err)
    }

    /// Writes everything handed over and makes it durable; the position written.
    pub fn sync(&mut self) -> Result<u64> {
        self.settle()?;
        lock(&self.writer).sync()
    }

    /// Writes everything handed over, then ends the file (see [`super::FileSink::finish`]).
    pub fn finish(&mut self) -> Result<()> {
        self.settle()?;
        lock(&self.writer).finish()
    }

    /// Bytes in the file so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Lets the thread write what it was handed, and waits for it to end.
    pub fn stop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn send(&self, job: Job) -> Result<()> {
        match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|_| self.stopped()),
            None => Err(WeirError::exec(format!("sink '{}': already finished", self.path))),
        }
    }

    fn failure(&self) -> Option<WeirError> {
        lock(&self.failure).clone()
    }

    /// The error of a thread that went away without answering (it cannot, short of a bug).
    fn stopped(&self) -> WeirError {
        self.failure().unwrap_or_else(|| {
            WeirError::internal(format!("sink '{}': its writing thread stopped", self.path))
        })
    }
}

/// The lock's value, whether or not a thread panicked holding it (a writer's state stays
/// consistent: each write either completes or reports its error).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps `e` as the error that stopped the writing; returns it.
fn keep(failure: &Mutex<Option<WeirError>>, e: WeirError) -> WeirError {
    *lock(failure) = Some(e.clone());
    e
}

/// The writing thread: the file's start, then jobs in order until the engine's end goes
/// away.
fn run(
    writer: &Mutex<FileWriter>,
    truncate: bool,
    header: &[u8],
    queue: Receiver<Job>,
    failure: &Mutex<Option<WeirError>>,
) {
    if let Err(e) = lock(writer).begin(truncate, header) {
        keep(failure, e);
    }
    for job in queue {
        match job {
            Job::Write(batch) => {
                if lock(failure).is_some() {
                    continue;
                }
                if let Err(e) = lock(writer).write(&batch, false) {
                    keep(failure, e);
                }
            }
            Job::Settle(reply) => {
                let _ = reply.send(());
            }
        }
    }
}
