//! Running one continuous query: buffering, instants, frontier.
//!
//! The [`QueryRunner`] owns a compiled dataflow and, per input, the changes not yet evaluated,
//! ordered by (time, arrival). [`QueryRunner::advance`] is given the query's frontier (the
//! minimum of its inputs' watermarks: every instant below it is complete) and evaluates, in
//! order, every instant below it: a buffered input time, a heartbeat, or an operator wake-up.
//! Because instants are evaluated in time order and each exactly once, the output does not
//! depend on how inputs interleaved on arrival or how they were batched.
//!
//! A relation output is consolidated per instant (equal rows' diffs summed, zeros dropped);
//! stream outputs come consolidated from their relation-to-stream operator.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError};
use weir_plan::{LogicalPlan, PlanKind};

use crate::compile::{compile, exec_schema};
use crate::consolidate::consolidate;
use crate::operator::{EvalCtx, Operator};
use crate::row::RowCodec;

/// Whether subscribers see a stream (elements with instants) or a relation's changes.
pub type OutputKind = PlanKind;

/// One running continuous query. See the module docs.
#[derive(Debug)]
pub struct QueryRunner {
    root: Box<dyn Operator>,
    kind: OutputKind,
    schema: SchemaRef,
    codec: RowCodec,
    sources: Vec<String>,
    pending: HashMap<String, BTreeMap<Time, Vec<ChangeBatch>>>,
    /// Heartbeat instants, with the sources they came from.
    heartbeats: BTreeMap<Time, BTreeSet<String>>,
    last: Option<Time>,
}

impl QueryRunner {
    pub fn new(plan: &LogicalPlan) -> Result<Self> {
        let schema = exec_schema(&plan.schema());
        Ok(QueryRunner {
            root: compile(plan)?,
            kind: plan.kind(),
            codec: RowCodec::for_schema(&schema)?,
            schema,
            sources: plan.sources(),
            pending: HashMap::new(),
            heartbeats: BTreeMap::new(),
            last: None,
        })
    }

    /// Output schema (all fields nullable).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn kind(&self) -> OutputKind {
        self.kind
    }

    /// Names of the base streams and tables the query reads.
    pub fn sources(&self) -> &[String] {
        &self.sources
    }

    /// The last instant evaluated.
    pub fn last_instant(&self) -> Option<Time> {
        self.last
    }

    /// Buffers changes of `source`. Times must be after the last evaluated instant.
    pub fn push(&mut self, source: &str, batch: ChangeBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if let (Some(last), Some(min)) = (self.last, batch.times.iter().min()) {
            if *min <= last {
                return Err(WeirError::internal(format!(
                    "change at {min} reached a query already evaluated up to {last}"
                )));
            }
        }
        let buf = self.pending.entry(source.to_string()).or_default();
        let first = batch.times[0];
        if batch.times.iter().all(|&t| t == first) {
            buf.entry(first).or_default().push(batch);
            return Ok(());
        }
        // Split by time, keeping arrival order within each time.
        let mut idx: Vec<u32> = (0..batch.len() as u32).collect();
        idx.sort_by_key(|&i| batch.times[i as usize]);
        let mut start = 0;
        while start < idx.len() {
            let t = batch.times[idx[start] as usize];
            let mut end = start;
            while end < idx.len() && batch.times[idx[end] as usize] == t {
                end += 1;
            }
            buf.entry(t).or_default().push(batch.take(&idx[start..end])?);
            start = end;
        }
        Ok(())
    }

    /// Makes `t` an instant of the query (a heartbeat on `source`), if it is still in the
    /// future.
    pub fn heartbeat(&mut self, source: &str, t: Time) {
        if self.last.is_none_or(|l| t > l) {
            self.heartbeats.entry(t).or_default().insert(source.to_string());
        }
    }

    /// The next instant to evaluate, if any.
    fn next_instant(&self) -> Option<Time> {
        let pending = self.pending.values().filter_map(|b| b.keys().next().copied()).min();
        [pending, self.heartbeats.keys().next().copied(), self.root.next_wakeup()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Evaluates every instant below `frontier`, appending the output changes to `out` in time
    /// order. On an error, `out` keeps the output of the instants evaluated before it.
    pub fn advance(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        while let Some(t) = self.next_instant() {
            if t as Watermark >= frontier {
                break;
            }
            if self.last.is_some_and(|l| t <= l) {
                return Err(WeirError::internal(format!("instant {t} evaluated twice")));
            }
            let mut ctx = EvalCtx::default();
            for (name, buf) in &mut self.pending {
                if let Some(batches) = buf.remove(&t) {
                    let schema = batches[0].schema();
                    ctx.inputs.insert(name.clone(), ChangeBatch::concat(&schema, &batches)?);
                    ctx.active.insert(name.clone());
                }
            }
            self.pending.retain(|_, b| !b.is_empty());
            while let Some(entry) = self.heartbeats.first_entry() {
                if *entry.key() > t {
                    break;
                }
                let (h, sources) = entry.remove_entry();
                if h == t {
                    ctx.active.extend(sources);
                }
            }
            let d = self.root.eval(t, &ctx)?;
            self.last = Some(t);
            let d = match self.kind {
                PlanKind::Relation if !d.is_empty() => {
                    consolidate(&self.codec, &self.schema, &d, t)?
                }
                _ => d,
            };
            if !d.is_empty() {
                out.push(d);
            }
        }
        Ok(())
    }
}

/// Evaluates a plan over tables once: the relation it denotes given the tables' contents.
/// Returns rows with their multiplicities (diff > 0): as the operators produced them if
/// `as_produced` (an `INSERT ... VALUES` keeps its row order, which `ROWS` windows can see) or
/// the plan has an ORDER BY; else consolidated and sorted by value.
pub fn evaluate_once(
    plan: &LogicalPlan,
    tables: HashMap<String, ChangeBatch>,
    as_produced: bool,
) -> Result<ChangeBatch> {
    let mut root = compile(plan)?;
    let schema = exec_schema(&plan.schema());
    let codec = RowCodec::for_schema(&schema)?;
    let mut ctx = EvalCtx::default();
    for (name, mut b) in tables {
        b.times.iter_mut().for_each(|t| *t = 0);
        ctx.inputs.insert(name, b);
    }
    let d = root.eval(0, &ctx)?;
    if as_produced || plan.is_ordered() {
        // Every change of a first evaluation is an insertion; keep the operator's order.
        if d.diffs.iter().any(|&n| n < 0) {
            return Err(WeirError::internal("retraction in a one-shot evaluation"));
        }
        return Ok(d);
    }
    consolidate(&codec, &schema, &d, 0)
}
