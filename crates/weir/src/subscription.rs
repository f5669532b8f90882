//! Subscriptions: the output changes of a continuous query, as they are produced.
//!
//! A stream output is a sequence of elements, each with its instant (diff = multiplicity); a
//! relation output is a sequence of changes, each with its instant and a `+1`/`-1` diff (or a
//! larger weight), consolidated per instant like Materialize's SUBSCRIBE.
//!
//! Three ways to read them, all over one channel from the engine:
//! - [`Subscription::poll`] takes what is there without waiting (the engine and the reader on
//!   one thread: push, advance, then poll);
//! - [`Subscription::recv`] and [`Subscription::iter`] wait for the next batch (the reader on
//!   its own thread, while another drives the engine);
//! - [`Subscription`] is a [`futures::Stream`] of batches for async code.
//!
//! Batches can be read as Arrow data ([`ChangeBatch`]), as text ([`Change`]) or as typed
//! values ([`Row`], whose values are [`crate::Value`]s).

use std::cell::RefCell;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use datafusion_common::ScalarValue;
use futures::StreamExt;
use futures_channel::mpsc::{TryRecvError, UnboundedReceiver, UnboundedSender};
use weir_common::{format_time, ChangeBatch, Result, Time, TimeDomain, WeirError};
use weir_plan::PlanKind;

use crate::format::rows_as_text;

/// The engine's end of a subscription's channel.
pub(crate) type OutputSender = UnboundedSender<Result<ChangeBatch>>;
/// The subscriber's end.
pub(crate) type OutputReceiver = UnboundedReceiver<Result<ChangeBatch>>;

/// A new output channel. It is unbounded: a subscriber that never reads keeps every change
/// (the engine never waits for a reader, so one slow subscriber cannot stop the others).
pub(crate) fn output_channel() -> (OutputSender, OutputReceiver) {
    futures_channel::mpsc::unbounded()
}

/// Sends one item; false once the subscriber is gone.
pub(crate) fn send(tx: &OutputSender, item: Result<ChangeBatch>) -> bool {
    tx.unbounded_send(item).is_ok()
}

/// One row of output with its instant and diff, values already formatted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub values: Vec<String>,
    pub time: Time,
    /// Rendered instant (ticks, or ISO-8601 for TIMESTAMP streams).
    pub time_text: String,
    pub diff: i64,
    pub kind: PlanKind,
}

impl fmt::Display for Change {
    /// `@τ v1 v2` for stream elements, `@τ +1 v1 v2` for relation changes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.time_text)?;
        if self.kind == PlanKind::Relation {
            write!(f, " {:+}", self.diff)?;
        }
        for v in &self.values {
            write!(f, " {v}")?;
        }
        Ok(())
    }
}

/// One row of output with its instant and diff, as typed values: a BIGINT column gives
/// `Value::Int64`, VARCHAR `Value::Utf8`, TIMESTAMP `Value::TimestampMicrosecond`, NULL the
/// type's `None`. `i64::try_from(row.values[0].clone())` and the like take them out.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub values: Vec<ScalarValue>,
    pub time: Time,
    /// +1/-1 (or a weight) for relation changes; stream elements are repeated, diff 1 each.
    pub diff: i64,
}

/// The receiving end of a continuous query. Dropping it stops the query.
///
/// It can be moved to another thread (it is `Send`), so one thread can block in
/// [`Subscription::recv`] while another drives the engine.
#[derive(Debug)]
pub struct Subscription {
    pub id: u64,
    pub schema: SchemaRef,
    pub kind: PlanKind,
    pub domain: TimeDomain,
    /// What a reader should know about the query as it starts, e.g. that a stream it reads
    /// has already ended, so it will see none of that stream's elements.
    pub notices: Vec<String>,
    pub(crate) rx: RefCell<OutputReceiver>,
    /// Set once the engine has stopped the query (its input was dropped, or it failed).
    pub(crate) closed: std::cell::Cell<bool>,
    /// A failure received after output in the same poll: returned by the next poll, so the
    /// output before it is not lost.
    pub(crate) failure: std::cell::RefCell<Option<WeirError>>,
}

impl Subscription {
    /// Every change batch produced since the last poll, in time order. An error means the
    /// query failed; it produces nothing after that.
    pub fn poll(&self) -> Result<Vec<ChangeBatch>> {
        if let Some(e) = self.failure.borrow_mut().take() {
            return Err(e);
        }
        let mut out = Vec::new();
        let mut rx = self.rx.borrow_mut();
        loop {
            match rx.try_recv() {
                Ok(Ok(b)) => out.push(b),
                Ok(Err(e)) => {
                    self.closed.set(true);
                    if out.is_empty() {
                        return Err(e);
                    }
                    *self.failure.borrow_mut() = Some(e);
                    return Ok(out);
                }
                Err(TryRecvError::Empty) => return Ok(out),
                Err(TryRecvError::Closed) => {
                    self.closed.set(true);
                    return Ok(out);
                }
            }
        }
    }

    /// Waits for the next change batch. `Ok(None)` once the query has stopped for good and
    /// everything it produced has been read; an error once if it failed (after its earlier
    /// output). Blocking: call it on a thread other than the one driving the engine, or it
    /// waits forever.
    pub fn recv(&self) -> Result<Option<ChangeBatch>> {
        if let Some(e) = self.failure.borrow_mut().take() {
            return Err(e);
        }
        if self.closed.get() {
            // After the failure or the end nothing more is sent (the engine may still hold
            // its end for a while, so waiting could last forever).
            return Ok(None);
        }
        let next = futures::executor::block_on(self.rx.borrow_mut().next());
        self.settle(next)
    }

    /// A blocking iterator over the change batches (see [`Subscription::recv`]); it ends when
    /// the query stops, after yielding its failure if it failed.
    pub fn iter(&self) -> Batches<'_> {
        Batches { sub: self }
    }

    /// What one received item means: a batch, the end, or the failure (which closes).
    fn settle(&self, next: Option<Result<ChangeBatch>>) -> Result<Option<ChangeBatch>> {
        match next {
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) => {
                self.closed.set(true);
                Err(e)
            }
            None => {
                self.closed.set(true);
                Ok(None)
            }
        }
    }

    /// Like [`Subscription::poll`], as rows of typed values. Stream elements with
    /// multiplicity n are repeated n times (diff 1 each).
    pub fn poll_rows(&self) -> Result<Vec<Row>> {
        let mut out = Vec::new();
        for b in self.poll()? {
            out.extend(self.rows(&b)?);
        }
        Ok(out)
    }

    /// One change batch as rows of typed values.
    pub fn rows(&self, b: &ChangeBatch) -> Result<Vec<Row>> {
        let columns = b.data.columns();
        let mut out = Vec::with_capacity(b.len());
        for i in 0..b.data.num_rows() {
            let values = columns
                .iter()
                .map(|c| ScalarValue::try_from_array(c, i))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| WeirError::exec(format!("reading output row {i}: {e}")))?;
            let time = b.times[i];
            self.expand(values, b.diffs[i], &mut out, |values, diff| Row { values, time, diff })?;
        }
        Ok(out)
    }

    /// Pushes the rows one output row stands for: a relation change as it is, a stream
    /// element of multiplicity n as n rows of diff 1.
    fn expand<V: Clone, R>(
        &self,
        values: V,
        diff: i64,
        out: &mut Vec<R>,
        row: impl Fn(V, i64) -> R,
    ) -> Result<()> {
        if self.kind != PlanKind::Stream {
            out.push(row(values, diff));
            return Ok(());
        }
        if diff < 0 {
            return Err(WeirError::internal("negative multiplicity in a stream"));
        }
        for _ in 1..diff {
            out.push(row(values.clone(), 1));
        }
        if diff > 0 {
            out.push(row(values, 1));
        }
        Ok(())
    }

    /// Like [`Subscription::poll`], as rows of text. Stream elements with multiplicity n are
    /// repeated n times (diff 1 each).
    pub fn poll_changes(&self) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        for b in self.poll()? {
            out.extend(self.changes(&b)?);
        }
        Ok(out)
    }

    /// Renders one change batch.
    pub fn changes(&self, b: &ChangeBatch) -> Result<Vec<Change>> {
        let rows = rows_as_text(&b.data)?;
        let mut out = Vec::with_capacity(rows.len());
        for (i, values) in rows.into_iter().enumerate() {
            let time = b.times[i];
            let time_text = format_time(time, self.domain);
            let kind = self.kind;
            self.expand(values, b.diffs[i], &mut out, |values, diff| Change {
                values,
                time,
                time_text: time_text.clone(),
                diff,
                kind,
            })?;
        }
        Ok(out)
    }

    /// Whether the query has stopped for good (seen by the last poll): a stream or table it
    /// read was dropped, or it failed. Its remaining output has been delivered.
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Column names of the output.
    pub fn column_names(&self) -> Vec<String> {
        self.schema.fields().iter().map(|f| f.name().clone()).collect()
    }
}

/// The blocking iterator of [`Subscription::iter`].
#[derive(Debug)]
pub struct Batches<'a> {
    sub: &'a Subscription,
}

impl Iterator for Batches<'_> {
    type Item = Result<ChangeBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.sub.recv().transpose()
    }
}

impl<'a> IntoIterator for &'a Subscription {
    type Item = Result<ChangeBatch>;
    type IntoIter = Batches<'a>;

    fn into_iter(self) -> Batches<'a> {
        self.iter()
    }
}

/// An async stream of change batches: each item is a batch, or the query's failure (the last
/// item); the stream ends when the query stops. Wakes when the engine delivers output, from
/// whatever thread drives it.
impl futures::Stream for Subscription {
    type Item = Result<ChangeBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(e) = this.failure.get_mut().take() {
            return Poll::Ready(Some(Err(e)));
        }
        if this.closed.get() {
            return Poll::Ready(None);
        }
        match this.rx.get_mut().poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(next) => Poll::Ready(this.settle(next).transpose()),
        }
    }
}
