//! PerInstant: an operator evaluated instant by instant (a join), inside a span.
//!
//! Delta semantics: those of the wrapped operator, unchanged. The wrapped operator reads its
//! inputs through [`FeedReader`]s instead of its own subtrees; `PerInstant` evaluates the
//! subtrees (over a whole span if they can), hands each instant's changes to the readers, and
//! evaluates the wrapped operator at every instant where some input changed. That is exact
//! for an operator whose output and state change only when an input does (joins: an empty
//! change on both sides joins to nothing), which is the only kind `compile` wraps. State: the
//! subtrees' outputs of the current span, consumed instant by instant; checkpointed by each
//! [`FeedReader`] as section `feed` (what is fed and not yet read, empty between instants).

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::operator::{min_wakeup, time_runs, EvalCtx, Operator};
use crate::query::slice;
use crate::state::{signature, StateReader, StateWriter};

/// The changes a subtree produced, not yet handed to the wrapped operator.
#[derive(Debug, Default)]
pub struct Fed {
    batch: Option<ChangeBatch>,
    pos: usize,
}

/// What a [`FeedReader`] and its [`PerInstant`] share.
pub type SharedFeed = Arc<Mutex<Fed>>;

/// The input of a wrapped operator: returns, at τ, the fed changes stamped τ.
#[derive(Debug)]
pub struct FeedReader {
    fed: SharedFeed,
    schema: SchemaRef,
}

impl FeedReader {
    pub fn new(fed: SharedFeed, schema: SchemaRef) -> Self {
        FeedReader { fed, schema }
    }
}

fn poisoned<T>(_: T) -> WeirError {
    WeirError::internal("a feed's lock was poisoned")
}

impl Operator for FeedReader {
    fn eval(&mut self, t: Time, _ctx: &EvalCtx) -> Result<ChangeBatch> {
        let mut fed = self.fed.lock().map_err(poisoned)?;
        let pos = fed.pos;
        let Some(b) = fed.batch.as_ref() else {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        };
        let n = b.times[pos..].iter().take_while(|&&x| x == t).count();
        if n == 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let out = if pos == 0 && n == b.len() { b.clone() } else { slice(b, pos, n) };
        fed.pos += n;
        Ok(out)
    }

    /// State: section `feed`, the fed changes not yet read (`time`, `diff` and the rows'
    /// columns); empty between instants, since every instant fed is evaluated at once.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let fed = self.fed.lock().map_err(poisoned)?;
        let rest = match fed.batch.as_ref() {
            Some(b) if fed.pos < b.len() => vec![slice(b, fed.pos, b.len() - fed.pos)],
            _ => vec![],
        };
        let sig = signature("feed", &self.schema, ());
        w.put_changes("feed", &sig, &self.schema, &rest)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("feed", &signature("feed", &self.schema, ()))?;
        let rest = s.changes(Some(&self.schema))?;
        let mut fed = self.fed.lock().map_err(poisoned)?;
        fed.batch = (!rest.is_empty()).then_some(rest);
        fed.pos = 0;
        Ok(())
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}

#[derive(Debug)]
pub struct PerInstant {
    op: Box<dyn Operator>,
    inputs: Vec<(Box<dyn Operator>, SharedFeed)>,
    schema: SchemaRef,
}

impl PerInstant {
    /// `op` reads each of `inputs`' outputs through a [`FeedReader`] on the paired feed.
    pub fn new(
        op: Box<dyn Operator>,
        inputs: Vec<(Box<dyn Operator>, SharedFeed)>,
        schema: SchemaRef,
    ) -> Self {
        PerInstant { op, inputs, schema }
    }

    fn feed(fed: &SharedFeed, batch: ChangeBatch) -> Result<()> {
        let mut f = fed.lock().map_err(poisoned)?;
        f.batch = Some(batch);
        f.pos = 0;
        Ok(())
    }
}

impl Operator for PerInstant {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        for (input, fed) in &mut self.inputs {
            let d = input.eval(t, ctx)?;
            Self::feed(fed, d)?;
        }
        self.op.eval(t, ctx)
    }

    /// No state of its own: saves its inputs' subtrees in order, then the wrapped operator
    /// (whose [`FeedReader`]s save what is fed and not yet read).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        for (input, _) in &self.inputs {
            input.save_state(w)?;
        }
        self.op.save_state(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        for (input, _) in &mut self.inputs {
            input.restore_state(r)?;
        }
        self.op.restore_state(r)
    }

    fn next_wakeup(&self) -> Option<Time> {
        min_wakeup(self.inputs.iter().map(|(i, _)| i.next_wakeup()).chain([self.op.next_wakeup()]))
    }

    fn span_capable(&self) -> bool {
        self.inputs.iter().all(|(i, _)| i.span_capable())
    }

    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let mut instants: Vec<Time> = Vec::new();
        for (input, fed) in &mut self.inputs {
            let d = input.eval_span(lo, hi, ctx)?;
            let mut start = 0;
            for end in time_runs(&d.times) {
                instants.push(d.times[start]);
                start = end;
            }
            Self::feed(fed, d)?;
        }
        instants.sort_unstable();
        instants.dedup();
        let mut parts = Vec::with_capacity(instants.len());
        for t in instants {
            let d = self.op.eval(t, ctx)?;
            if !d.is_empty() {
                parts.push(d);
            }
        }
        ChangeBatch::concat(&self.schema, &parts)
    }
}
