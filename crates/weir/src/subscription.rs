//! Subscriptions: the output changes of a continuous query, as they are produced.
//!
//! A stream output is a sequence of elements, each with its instant (diff = multiplicity); a
//! relation output is a sequence of changes, each with its instant and a `+1`/`-1` diff (or a
//! larger weight), consolidated per instant like Materialize's SUBSCRIBE.

use std::fmt;
use std::sync::mpsc::{Receiver, TryRecvError};

use arrow::datatypes::SchemaRef;
use weir_common::{format_time, ChangeBatch, Result, Time, TimeDomain, WeirError};
use weir_plan::PlanKind;

use crate::format::rows_as_text;

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

/// The receiving end of a continuous query. Dropping it stops the query.
#[derive(Debug)]
pub struct Subscription {
    pub id: u64,
    pub schema: SchemaRef,
    pub kind: PlanKind,
    pub domain: TimeDomain,
    pub(crate) rx: Receiver<Result<ChangeBatch>>,
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
        loop {
            match self.rx.try_recv() {
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
                Err(TryRecvError::Disconnected) => {
                    self.closed.set(true);
                    return Ok(out);
                }
            }
        }
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
            let diff = b.diffs[i];
            if self.kind == PlanKind::Stream {
                if diff < 0 {
                    return Err(WeirError::internal("negative multiplicity in a stream"));
                }
                for _ in 0..diff {
                    out.push(Change {
                        values: values.clone(),
                        time,
                        time_text: time_text.clone(),
                        diff: 1,
                        kind: self.kind,
                    });
                }
            } else {
                out.push(Change { values, time, time_text, diff, kind: self.kind });
            }
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
