//! Running one continuous query: buffering, instants, frontier.
//!
//! The [`QueryRunner`] owns a compiled [`crate::graph::Graph`] and, per input, the changes not yet evaluated,
//! ordered by (time, arrival). [`QueryRunner::advance`] is given the query's frontier (the
//! minimum of its inputs' watermarks: every instant below it is complete) and evaluates, in
//! order, every instant below it: a buffered input time, a heartbeat, or an operator wake-up.
//! Because instants are evaluated in time order and each exactly once, the output does not
//! depend on how inputs interleaved on arrival or how they were batched.
//!
//! A relation output is consolidated per instant (equal rows' diffs summed, zeros dropped);
//! stream outputs come consolidated from their relation-to-stream operator.
//!
//! Buffered changes are kept as the pushed chunks, each sorted by time once on arrival, with a
//! cursor: taking the changes of the next instant (or of every instant up to a bound) is a
//! slice of each chunk's head, never a copy per instant. When every node of the graph is
//! span-capable (see [`crate::operator`]), all complete instants are evaluated in one step
//! instead of one walk of the graph per instant; a span ends early where it would otherwise
//! take a source's rows from two chunks (a copy of both), since any split of the instants into
//! spans evaluates the same.
//!
//! **Queries that read a table.** A table change is applied at its own instant if the query
//! has not evaluated past it, else at the query's next instant (the engine's
//! `forward_table_change`). So the runner's last evaluated instant must be the last instant
//! the query really had, not the end of a span: such a query's span ends at the last instant
//! of its buffered input and heartbeats, and the wake-ups after it (a window's expiry) are
//! evaluated one instant at a time, as without spans. A table change that arrives after the
//! span and before the frontier then counts at its own instant, exactly as it would have
//! instant by instant.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError};
use weir_plan::{LogicalPlan, PlanKind};

use crate::compile::{compile, exec_schema};
use crate::consolidate::{consolidate, consolidate_runs};
use crate::graph::Graph;
use crate::heap::{HeapSize, StateSize, WAITING_INPUT};
use crate::operator::EvalCtx;
use crate::row::RowCodec;
use crate::state::{i64_col, invalid, opt_i64_col, signature, str_col, StateReader, StateWriter};

/// Whether subscribers see a stream (elements with instants) or a relation's changes.
pub type OutputKind = PlanKind;

/// One running continuous query. See the module docs.
#[derive(Debug)]
pub struct QueryRunner {
    flow: Graph,
    kind: OutputKind,
    schema: SchemaRef,
    codec: RowCodec,
    sources: Vec<String>,
    /// Per source, the pushed chunks not yet fully evaluated, in arrival order.
    pending: HashMap<String, Vec<Chunk>>,
    /// Whether instants are evaluated in spans (see the module docs).
    span: bool,
    /// Whether the query reads a table: its spans end at its last known instant (see the
    /// module docs).
    reads_table: bool,
    /// Heartbeat instants, with the sources they came from.
    heartbeats: BTreeMap<Time, BTreeSet<String>>,
    last: Option<Time>,
    /// Whether anything was taken in or evaluated since the state was last checkpointed (or
    /// restored): if not, the last checkpoint holds it as it is.
    changed: bool,
}

/// One pushed batch, sorted by time, of which the rows from `pos` on are not yet evaluated.
#[derive(Debug)]
struct Chunk {
    batch: ChangeBatch,
    pos: usize,
}

impl Chunk {
    fn next_time(&self) -> Option<Time> {
        self.batch.times.get(self.pos).copied()
    }
}

/// Whether the plan reads a table, whose changes may be applied at a later instant than their
/// own (see the module docs).
pub fn reads_table(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::TableScan { .. }) || plan.inputs().iter().any(|p| reads_table(p))
}

/// An internal error if any of `times` is at or before `last`, the last instant `what` (a
/// query, a node) evaluated: changes reach it only at instants it has not evaluated yet.
pub fn check_after(last: Option<Time>, times: &[Time], what: &str) -> Result<()> {
    if let (Some(last), Some(min)) = (last, times.iter().min()) {
        if *min <= last {
            return Err(WeirError::internal(format!(
                "change at {min} reached {what} already evaluated up to {last}"
            )));
        }
    }
    Ok(())
}

/// Whether the query of `plan`, compiled into `flow`, is evaluated in spans of instants on
/// the timely workers: if every node can, and it reads no table. (The workers' spans run to
/// the frontier, so a table change after them could not count at its own instant; the
/// one-worker [`QueryRunner`] ends such a query's spans at its last instant instead.)
pub fn runs_in_spans(plan: &LogicalPlan, flow: &Graph) -> bool {
    flow.span_capable() && !reads_table(plan)
}

/// The last buffered time of `chunks` at most `end`, if any.
fn last_upto(chunks: &[Chunk], end: Time) -> Option<Time> {
    chunks
        .iter()
        .filter_map(|c| {
            let rest = &c.batch.times[c.pos..];
            rest.partition_point(|&t| t <= end).checked_sub(1).map(|i| rest[i])
        })
        .max()
}

/// Where a span may end so that it takes no more of a source than its first chunk: the first
/// chunk's last time, if every other chunk's rows come after it (None if not, or if there is
/// one chunk). A span that ended later would take rows from two chunks, which
/// [`take_upto`] copies into one batch: with a watermark at the newest row, every chunk pushed
/// leaves its last instant's rows behind, and each span would copy the whole next chunk to
/// join them. Two spans evaluate exactly what one would (see the module docs).
fn first_chunk_end(chunks: &[Chunk]) -> Option<Time> {
    let (first, rest) = chunks.split_first()?;
    first.next_time()?;
    let end = *first.batch.times.last()?;
    (!rest.is_empty() && rest.iter().all(|c| c.next_time().is_none_or(|t| t > end))).then_some(end)
}

/// The buffered changes of one source stamped at most `hi`, sorted by time (arrival order
/// within a time), taken off the chunks.
fn take_upto(chunks: &mut Vec<Chunk>, hi: Time) -> Result<Option<ChangeBatch>> {
    let mut parts = Vec::new();
    for c in chunks.iter_mut() {
        let rest = &c.batch.times[c.pos..];
        let n = rest.partition_point(|&t| t <= hi);
        if n > 0 {
            parts.push(c.batch.slice(c.pos, n));
            c.pos += n;
        }
    }
    chunks.retain(|c| c.pos < c.batch.len());
    match parts.len() {
        0 => Ok(None),
        1 => Ok(parts.pop()),
        _ => {
            let schema = parts[0].schema();
            let all = ChangeBatch::concat(&schema, &parts)?;
            Ok(Some(all.sort_by_time()?))
        }
    }
}

impl QueryRunner {
    pub fn new(plan: &LogicalPlan) -> Result<Self> {
        let schema = exec_schema(&plan.schema());
        let flow = compile(plan)?;
        Ok(QueryRunner {
            span: flow.span_capable(),
            reads_table: reads_table(plan),
            flow,
            kind: plan.kind(),
            codec: RowCodec::for_schema(&schema)?,
            schema,
            sources: plan.sources(),
            pending: HashMap::new(),
            heartbeats: BTreeMap::new(),
            last: None,
            changed: true,
        })
    }

    /// What the query's state holds, node by node and in its waiting input (estimates: see
    /// [`crate::heap`]).
    pub fn state_size(&self) -> StateSize {
        let bytes = self.flow.state_bytes();
        let mut parts: Vec<(String, usize)> =
            self.flow.labels().iter().cloned().zip(bytes).collect();
        let waiting: usize =
            self.pending.values().flatten().map(|c| c.batch.heap_bytes()).sum::<usize>()
                + self.heartbeats.heap_bytes();
        parts.push((WAITING_INPUT.to_string(), waiting));
        StateSize { parts }
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
        check_after(self.last, &batch.times, "a query")?;
        let batch = batch.sort_by_time()?;
        self.changed = true;
        self.pending.entry(source.to_string()).or_default().push(Chunk { batch, pos: 0 });
        Ok(())
    }

    /// Makes `t` an instant of the query (a heartbeat on `source`), if it is still in the
    /// future.
    pub fn heartbeat(&mut self, source: &str, t: Time) {
        if self.last.is_none_or(|l| t > l) {
            self.changed = true;
            self.heartbeats.entry(t).or_default().insert(source.to_string());
        }
    }

    /// The next instant to evaluate, if any.
    fn next_instant(&self) -> Option<Time> {
        let pending =
            self.pending.values().flat_map(|cs| cs.iter().filter_map(Chunk::next_time)).min();
        [pending, self.heartbeats.keys().next().copied(), self.flow.next_wakeup()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Evaluates every instant below `frontier`, appending the output changes to `out` in time
    /// order. On an error, `out` keeps the output of the instants evaluated before it.
    pub fn advance(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        let before = self.last;
        let result = if self.span {
            self.advance_span(frontier, out)
        } else {
            self.advance_instants(frontier, out)
        };
        // Operators change only when they evaluate, and each evaluation moves `last`.
        self.changed |= self.last != before;
        result
    }

    /// [`QueryRunner::advance`] one instant at a time.
    fn advance_instants(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        while let Some(t) = self.next_instant() {
            if t as Watermark >= frontier {
                break;
            }
            if self.last.is_some_and(|l| t <= l) {
                return Err(WeirError::internal(format!("instant {t} evaluated twice")));
            }
            let mut ctx = EvalCtx::default();
            for (name, chunks) in &mut self.pending {
                if let Some(b) = take_upto(chunks, t)? {
                    ctx.inputs.insert(name.clone(), b);
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
            let d = self.flow.eval(t, t, &ctx)?;
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

    /// [`QueryRunner::advance`] in spans: one span of every instant from the next one up to
    /// the frontier; for a query that reads a table, one up to its last known instant, then
    /// one step per wake-up after it (see the module docs).
    fn advance_span(&mut self, frontier: Watermark, out: &mut Vec<ChangeBatch>) -> Result<()> {
        while let Some(lo) = self.next_instant() {
            if lo as Watermark >= frontier {
                break;
            }
            let end = (frontier - 1).min(Time::MAX as Watermark) as Time;
            let hi = if self.reads_table {
                self.last_known_instant(end).map_or(lo, |t| t.max(lo))
            } else {
                end
            };
            let hi = self.pending.values().filter_map(|cs| first_chunk_end(cs)).fold(hi, Time::min);
            self.eval_span(lo, hi, out)?;
        }
        Ok(())
    }

    /// The last instant at most `end` of the buffered input and the heartbeats, if any.
    fn last_known_instant(&self, end: Time) -> Option<Time> {
        let input = self.pending.values().filter_map(|cs| last_upto(cs, end)).max();
        let beat = self.heartbeats.range(..=end).next_back().map(|(t, _)| *t);
        input.max(beat)
    }

    /// Evaluates the span [lo, hi] in one step.
    fn eval_span(&mut self, lo: Time, hi: Time, out: &mut Vec<ChangeBatch>) -> Result<()> {
        if self.last.is_some_and(|l| lo <= l) {
            return Err(WeirError::internal(format!("instant {lo} evaluated twice")));
        }
        let mut ctx = EvalCtx::default();
        for (name, chunks) in &mut self.pending {
            if let Some(b) = take_upto(chunks, hi)? {
                ctx.inputs.insert(name.clone(), b);
                ctx.active.insert(name.clone());
            }
        }
        self.pending.retain(|_, b| !b.is_empty());
        while let Some(entry) = self.heartbeats.first_entry() {
            if *entry.key() > hi {
                break;
            }
            let (_, sources) = entry.remove_entry();
            ctx.active.extend(sources);
        }
        let d = match self.flow.eval_until_failure(lo, hi, &ctx) {
            Ok(d) => d,
            Err(f) => {
                // Deliver what the instants before the failing one gave, then fail.
                if let Some(d) = f.output.filter(|d| !d.is_empty()) {
                    let d = match self.kind {
                        PlanKind::Relation => consolidate_runs(&self.codec, d)?,
                        _ => d,
                    };
                    out.push(d);
                }
                return Err(f.error);
            }
        };
        self.last = Some(hi);
        let d = match self.kind {
            PlanKind::Relation if !d.is_empty() => consolidate_runs(&self.codec, d)?,
            _ => d,
        };
        if !d.is_empty() {
            out.push(d);
        }
        Ok(())
    }
}

impl QueryRunner {
    fn signature(&self) -> String {
        signature("runner", &self.schema, (self.kind, &self.sources, self.span))
    }

    /// Everything the runner holds between instants — every operator's state, the buffered
    /// input not yet evaluated (per source, with times and arrival order), heartbeats, the last
    /// evaluated instant — as Arrow IPC stream bytes.
    ///
    /// Sections (see [`crate::state`]): `runner` (one row: `last`, NULL before the first
    /// instant), `runner.heartbeats` (`time`, `source`), `runner.pending` (per buffered chunk,
    /// sources by name, chunks in arrival order: `source`, `rows`) followed by one
    /// `runner.chunk` per chunk (its rows not yet evaluated, as changes), then the operators'
    /// sections, root first, each operator before its inputs.
    pub fn save_state(&self) -> Result<Vec<u8>> {
        let mut w = StateWriter::new();
        self.save_own(&mut w)?;
        self.flow.save_state(&mut w)?;
        w.into_bytes()
    }

    /// Incremental checkpoints (see [`crate::dirty`]): the runner's own sections, as in
    /// [`QueryRunner::save_state`], then every operator's changes since the state was last
    /// checkpointed (whole, or in changes); None if an operator cannot say, and the state
    /// must be saved whole ([`QueryRunner::save_state`], then
    /// [`QueryRunner::track_changes`]). Either way, the runner counts as unchanged from here.
    pub fn save_changes(&mut self) -> Result<Option<Vec<u8>>> {
        let mut w = StateWriter::new();
        self.save_own(&mut w)?;
        let saved = self.flow.save_changes(&mut w)?;
        self.changed = false;
        if saved {
            w.into_bytes().map(Some)
        } else {
            Ok(None)
        }
    }

    /// The state as it is now was checkpointed whole: operators that can start recording
    /// their changes, and the runner counts as unchanged.
    pub fn track_changes(&mut self) {
        self.flow.track_changes();
        self.changed = false;
    }

    /// Whether anything was taken in or evaluated since the state was last checkpointed or
    /// restored.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The runner's own sections: the last instant, heartbeats, buffered input.
    fn save_own(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        w.put("runner", &sig, 1, vec![("last", opt_i64_col([self.last]))])?;
        let beats: Vec<(Time, &str)> = self
            .heartbeats
            .iter()
            .flat_map(|(t, srcs)| srcs.iter().map(move |s| (*t, s.as_str())))
            .collect();
        w.put(
            "runner.heartbeats",
            &sig,
            beats.len(),
            vec![
                ("time", i64_col(beats.iter().map(|b| b.0))),
                ("source", str_col(beats.iter().map(|b| b.1))),
            ],
        )?;
        let mut sources: Vec<&String> = self.pending.keys().collect();
        sources.sort_unstable();
        let mut chunks: Vec<(&str, ChangeBatch)> = Vec::new();
        for src in sources {
            for c in self.pending.get(src).into_iter().flatten() {
                if c.pos < c.batch.len() {
                    chunks.push((src, c.batch.slice(c.pos, c.batch.len() - c.pos)));
                }
            }
        }
        w.put(
            "runner.pending",
            &sig,
            chunks.len(),
            vec![
                ("source", str_col(chunks.iter().map(|c| c.0))),
                ("rows", i64_col(chunks.iter().map(|c| c.1.len() as i64))),
            ],
        )?;
        for (_, c) in &chunks {
            w.put_changes("runner.chunk", &sig, &c.schema(), std::slice::from_ref(c))?;
        }
        Ok(())
    }

    /// Restores [`QueryRunner::save_state`] output into a runner freshly built by
    /// [`QueryRunner::new`] from the same plan. Fails with a clear error (never panics) on
    /// bytes that do not fit the plan; the runner must then be discarded.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        if self.last.is_some() || !self.pending.is_empty() || !self.heartbeats.is_empty() {
            return Err(WeirError::internal("query state restored into a runner already in use"));
        }
        self.restore_from(bytes, false)
    }

    /// Applies [`QueryRunner::save_changes`] output to the state of the checkpoint before it
    /// (restored whole, then with the changes written after it, in order). Fails with a clear
    /// error (never panics) on bytes that do not fit; the runner must then be discarded.
    pub fn restore_changes(&mut self, bytes: &[u8]) -> Result<()> {
        self.restore_from(bytes, true)
    }

    /// Restores a whole state, or (with `changes`) applies changes to the state restored.
    fn restore_from(&mut self, bytes: &[u8], changes: bool) -> Result<()> {
        let mut r = StateReader::from_bytes(bytes)?;
        let (last, heartbeats, pending) = self.take_own(&mut r)?;
        if !changes {
            self.flow.restore_state(&mut r)?;
        } else if self.last.is_some_and(|l| last.is_none_or(|t| t < l)) {
            return Err(invalid("changes from before the state they are applied to"));
        } else {
            self.flow.restore_changes(&mut r)?;
        }
        r.finish()?;
        self.last = last;
        self.heartbeats = heartbeats;
        self.pending = pending;
        self.track_changes();
        Ok(())
    }

    /// Reads what [`QueryRunner::save_own`] wrote.
    #[allow(clippy::type_complexity)]
    fn take_own(
        &self,
        r: &mut StateReader,
    ) -> Result<(Option<Time>, BTreeMap<Time, BTreeSet<String>>, HashMap<String, Vec<Chunk>>)> {
        let sig = self.signature();
        let last = match r.take("runner", &sig)?.opt_i64s("last")?.as_slice() {
            [last] => *last,
            _ => return Err(invalid("section 'runner' should have one row")),
        };
        let h = r.take("runner.heartbeats", &sig)?;
        let mut heartbeats: BTreeMap<Time, BTreeSet<String>> = BTreeMap::new();
        for (t, s) in h.i64s("time")?.into_iter().zip(h.strs("source")?) {
            if last.is_some_and(|l| t <= l) {
                return Err(invalid("a heartbeat at an instant already evaluated"));
            }
            heartbeats.entry(t).or_default().insert(s.to_string());
        }
        let p = r.take("runner.pending", &sig)?;
        let mut pending: HashMap<String, Vec<Chunk>> = HashMap::new();
        for (src, rows) in p.strs("source")?.into_iter().zip(p.i64s("rows")?) {
            let batch = r.take("runner.chunk", &sig)?.changes(None)?;
            if batch.len() as i64 != rows || batch.is_empty() {
                return Err(invalid("a buffered chunk has the wrong number of rows"));
            }
            if let (Some(l), Some(min)) = (last, batch.times.iter().min()) {
                if *min <= l {
                    return Err(invalid("buffered input at an instant already evaluated"));
                }
            }
            let batch = batch.sort_by_time()?;
            pending.entry(src.to_string()).or_default().push(Chunk { batch, pos: 0 });
        }
        Ok((last, heartbeats, pending))
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
    let mut flow = compile(plan)?;
    let schema = exec_schema(&plan.schema());
    let codec = RowCodec::for_schema(&schema)?;
    let mut ctx = EvalCtx::default();
    for (name, mut b) in tables {
        b.times.iter_mut().for_each(|t| *t = 0);
        ctx.inputs.insert(name, b);
    }
    let d = flow.eval(0, 0, &ctx)?;
    if as_produced || plan.is_ordered() {
        // Every change of a first evaluation is an insertion; keep the operator's order.
        if d.diffs.iter().any(|&n| n < 0) {
            return Err(WeirError::internal("retraction in a one-shot evaluation"));
        }
        return Ok(d);
    }
    consolidate(&codec, &schema, &d, 0)
}

#[cfg(test)]
mod tests {
    use weir_common::change::empty_columns;

    use super::*;

    fn chunk(times: &[Time], pos: usize) -> Chunk {
        let data = empty_columns(times.len()).expect("columns");
        Chunk { batch: ChangeBatch::new(data, times.to_vec(), vec![1; times.len()]), pos }
    }

    #[test]
    fn a_span_ends_at_the_first_chunk_when_the_others_come_after_it() {
        // One chunk: no reason to end early.
        assert_eq!(first_chunk_end(&[chunk(&[1, 5, 9], 0)]), None);
        // The leftover of a chunk (its last instant) and a newer chunk: end at the leftover.
        assert_eq!(first_chunk_end(&[chunk(&[1, 5, 9], 2), chunk(&[10, 12], 0)]), Some(9));
        // A later chunk sharing the first chunk's last instant: that instant takes both.
        assert_eq!(first_chunk_end(&[chunk(&[1, 5, 9], 2), chunk(&[9, 12], 0)]), None);
        // Out of order: a later chunk with rows before the first chunk's end.
        assert_eq!(first_chunk_end(&[chunk(&[1, 9], 0), chunk(&[12], 0), chunk(&[3], 0)]), None);
        // Fully taken chunks behind do not constrain.
        assert_eq!(first_chunk_end(&[chunk(&[1, 9], 0), chunk(&[4], 1), chunk(&[11], 0)]), Some(9));
        // A first chunk already taken says nothing.
        assert_eq!(first_chunk_end(&[chunk(&[1, 9], 2), chunk(&[11], 0)]), None);
    }

    #[test]
    fn taking_up_to_the_first_chunks_end_copies_nothing() {
        let mut chunks = vec![chunk(&[1, 5, 9], 2), chunk(&[10, 12], 0)];
        let end = first_chunk_end(&chunks).expect("an end");
        let b = take_upto(&mut chunks, end).expect("take").expect("rows");
        assert_eq!(b.times, vec![9]);
        assert_eq!(chunks.len(), 1);
        let b = take_upto(&mut chunks, 12).expect("take").expect("rows");
        assert_eq!(b.times, vec![10, 12]);
        assert!(chunks.is_empty());
    }
}
