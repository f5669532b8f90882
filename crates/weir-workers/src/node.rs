//! One node of a compiled graph hosted on one worker: the instants it evaluates, given what
//! its inputs sent it, and where its output goes.
//!
//! A [`NodeHost`] is the runtime-side twin of [`weir_exec::Graph`]'s walk for a single node:
//! it keeps each input's rows not yet evaluated (stamped with their instants), and when a round
//! of the dataflow is complete it evaluates, in order, every instant below the round's
//! frontier that the node has: a buffered input time, an instant its inputs announced (ticks),
//! or its operator's own wake-up. It is a plain struct, free of timely types, so the
//! semantics are tested here on their own; `runtime.rs` connects it to timely.
//!
//! **Instants.** A node of a one-worker graph is evaluated at every instant of the query. A
//! hosted node is evaluated at every instant of the plan below it: its inputs' rows, the
//! ticks they sent (the instants at which they were evaluated), and its own wake-ups. For an
//! operator that only changes when its input changes or when it wakes, the two agree; RSTREAM,
//! which reports at every instant of the plan below it, is told of them by ticks (as
//! [`weir_exec::Step::input_wakeup`]). In a query evaluated in spans, a node tells its
//! consumers the first instant of each step it evaluated, so each consumer's span starts
//! where the one-worker span would (an aggregate without GROUP BY enters its empty group at
//! the query's first instant); within a span, a span-capable operator's output follows from
//! its input rows and its wake-ups.
//!
//! **Order.** Rows of one instant are taken in (round, sender, arrival) order, so what a node
//! sees does not depend on how messages from different workers interleaved.

use std::collections::{BTreeMap, BTreeSet};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, Watermark, WeirError};
use weir_exec::heap::HeapSize;
use weir_exec::operator::prefix_before_failure;
use weir_exec::query::check_after;
use weir_exec::route::{instant_worker, KeyRoute, Placement};
use weir_exec::state::{
    binary_col, bool_col, i64_col, invalid, opt_i64_col, StateReader, StateWriter,
};
use weir_exec::{EvalCtx, Operator, Step};

use crate::part::Part;

/// Where a node's output goes: decided by its consumer's [`Placement`] of that input.
#[derive(Debug)]
pub(crate) enum Route {
    /// To the consumer on this worker.
    Here,
    /// To the consumer on worker 0 (a placement on one worker, or the query's output).
    Worker0,
    /// To the worker its key's hash names.
    Keyed(KeyRoute),
    /// To the worker its instant names ([`instant_worker`]).
    ByInstant,
}

impl Route {
    /// The route to a consumer that places this input so, from a producer whose output is
    /// split by instant already (`by_instant`) or not.
    pub fn of(placement: Placement, by_instant: bool) -> Route {
        match placement {
            Placement::Local => Route::Here,
            Placement::ByInstant if by_instant => Route::Here,
            Placement::ByInstant => Route::ByInstant,
            Placement::Single => Route::Worker0,
            Placement::Keyed(k) if k.is_constant() => Route::Worker0,
            Placement::Keyed(k) => Route::Keyed(k),
        }
    }
}

/// Whether a node with these input placements (a leaf: its source's) runs on every worker;
/// otherwise it runs on worker 0 alone, where all its input rows are sent.
pub(crate) fn runs_everywhere(placements: &[Placement]) -> bool {
    placements.iter().all(|p| match p {
        Placement::Local | Placement::ByInstant => true,
        Placement::Keyed(k) => !k.is_constant(),
        Placement::Single => false,
    })
}

/// One received batch, sorted by time, of which the rows from `pos` on are not yet evaluated.
#[derive(Debug)]
struct Chunk {
    order: (u64, u32, u64),
    batch: ChangeBatch,
    pos: usize,
}

/// One input's rows not yet evaluated.
#[derive(Debug, Default)]
struct Stash {
    chunks: Vec<Chunk>,
    sorted: bool,
}

impl Stash {
    fn push(&mut self, order: (u64, u32, u64), batch: ChangeBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let batch = if batch.times.is_sorted() { batch } else { batch.sort_by_time()? };
        if self.chunks.last().is_some_and(|c| c.order > order) {
            self.sorted = false;
        }
        self.chunks.push(Chunk { order, batch, pos: 0 });
        Ok(())
    }

    fn min_time(&self) -> Option<Time> {
        self.chunks.iter().filter_map(|c| c.batch.times.get(c.pos).copied()).min()
    }

    /// The rows stamped at most `hi`, sorted by time, in (round, sender, arrival) order
    /// within a time; None if there are none.
    fn take_upto(&mut self, hi: Time) -> Result<Option<ChangeBatch>> {
        if !self.sorted {
            self.chunks.sort_by_key(|c| c.order);
            self.sorted = true;
        }
        let mut parts = Vec::new();
        for c in self.chunks.iter_mut() {
            let rest = &c.batch.times[c.pos..];
            let n = rest.partition_point(|&t| t <= hi);
            if n > 0 {
                parts.push(c.batch.slice(c.pos, n));
                c.pos += n;
            }
        }
        self.chunks.retain(|c| c.pos < c.batch.len());
        match parts.len() {
            0 => Ok(None),
            1 => Ok(parts.pop()),
            _ => {
                let schema = parts[0].schema();
                Ok(Some(ChangeBatch::concat(&schema, &parts)?.sort_by_time()?))
            }
        }
    }
}

/// An error a node met, with the first instant it failed at (None: nothing of the round is
/// right).
pub(crate) type Failed = (WeirError, Option<Time>);

/// A node of a query's graph on one worker. See the module docs.
#[derive(Debug)]
pub(crate) struct NodeHost {
    op: Box<dyn Operator>,
    /// For a leaf: the query's sources, by index (its input is the query's feed).
    leaf_sources: Option<Vec<String>>,
    /// Per input (a leaf: per source), the rows not yet evaluated.
    stash: Vec<Stash>,
    /// The executor schema of each input (for an empty input's batch).
    schemas: Vec<SchemaRef>,
    /// For a leaf, the sources (by index) it reads: their instants are the leaf's own.
    own_sources: BTreeSet<u32>,
    /// Instants announced by the inputs, not yet evaluated.
    ticks: BTreeMap<Time, Tick>,
    last: Option<Time>,
    span: bool,
    /// Whether this worker evaluates the node (see [`runs_everywhere`]).
    active: bool,
    /// Per reader of the node's output (usually one; a node the plan shares has several), how
    /// its output reaches that reader.
    routes: Vec<Route>,
    me: u32,
    peers: u32,
    seq: u64,
    /// Added to the rounds of received parts: after a restore, the stash holds rows of the
    /// old dataflow's rounds (renumbered 0), which come before those of the new one.
    round_base: u64,
    failed: bool,
}

impl NodeHost {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        op: Box<dyn Operator>,
        schemas: Vec<SchemaRef>,
        leaf_sources: Option<(Vec<String>, BTreeSet<u32>)>,
        span: bool,
        active: bool,
        routes: Vec<Route>,
        me: u32,
        peers: u32,
    ) -> Self {
        let n = leaf_sources.as_ref().map_or(schemas.len(), |s| s.0.len());
        let (leaf_sources, own_sources) = match leaf_sources {
            Some((names, own)) => (Some(names), own),
            None => (None, BTreeSet::new()),
        };
        NodeHost {
            op,
            leaf_sources,
            stash: (0..n).map(|_| Stash::default()).collect(),
            schemas,
            own_sources,
            ticks: BTreeMap::new(),
            last: None,
            span,
            active,
            routes,
            me,
            peers,
            seq: 0,
            round_base: 0,
            failed: false,
        }
    }

    /// Takes in a part received on input `input` (a leaf: its feed) in round `round`.
    pub fn receive(&mut self, input: usize, round: u64, part: Part) -> Result<()> {
        if self.failed || !self.active {
            return Ok(());
        }
        let slot = if self.leaf_sources.is_some() { part.source as usize } else { input };
        self.seq += 1;
        let leaf = self.leaf_sources.is_some();
        for (t, below) in part.ticks {
            if self.last.is_none_or(|l| t > l) {
                let tick = self.ticks.entry(t).or_default();
                if leaf {
                    tick.sources.insert(part.source);
                    tick.below |= self.own_sources.contains(&part.source);
                } else {
                    tick.ticked = true;
                    tick.below |= below;
                }
            }
        }
        if let Some(b) = part.batch {
            check_after(self.last, &b.times, "a node")?;
            let stash = self
                .stash
                .get_mut(slot)
                .ok_or_else(|| WeirError::internal(format!("a part for input {slot}")))?;
            stash.push((round + self.round_base, part.from, self.seq), b)?;
        }
        Ok(())
    }

    /// The next instant the node has, if any.
    fn next_instant(&self) -> Option<Time> {
        let rows = self.stash.iter().filter_map(Stash::min_time).min();
        [rows, self.ticks.keys().next().copied(), self.op.next_wakeup()].into_iter().flatten().min()
    }

    /// Evaluates every instant the node has below `frontier` and returns its output parts, per
    /// reader (in the order of its routes) one per destination worker, and the error it met,
    /// if any, with the first instant it failed at (the parts hold its output before that
    /// instant; None: nothing of the round is right). After an error the node evaluates
    /// nothing more (its query is failed) and returns the error once.
    pub fn process(&mut self, frontier: Watermark) -> (Vec<Vec<Part>>, Option<Failed>) {
        if self.failed || !self.active {
            return (Vec::new(), None);
        }
        let mut out = Outbox::default();
        let r = if self.span {
            self.eval_span(frontier, &mut out)
        } else {
            self.eval_instants(frontier, &mut out)
        };
        let failure = match r {
            Ok(()) => None,
            Err((e, at)) => {
                self.failed = true;
                Some((e, at))
            }
        };
        match self.parts(out) {
            Ok(parts) => (parts, failure),
            Err(e) => (Vec::new(), Some((e, None))),
        }
    }

    /// Instant by instant: a failure at t leaves the output of the instants before it.
    fn eval_instants(
        &mut self,
        frontier: Watermark,
        out: &mut Outbox,
    ) -> std::result::Result<(), (WeirError, Option<Time>)> {
        while let Some(t) = self.next_instant() {
            self.eval_instant(t, frontier, out).map_err(|e| (e, Some(t)))?;
            if self.last != Some(t) {
                break;
            }
        }
        Ok(())
    }

    /// Evaluates instant `t` if it is below `frontier` (else leaves `last` as it was).
    fn eval_instant(&mut self, t: Time, frontier: Watermark, out: &mut Outbox) -> Result<()> {
        if t as Watermark >= frontier {
            return Ok(());
        }
        if self.last.is_some_and(|l| t <= l) {
            return Err(WeirError::internal(format!("instant {t} evaluated twice")));
        }
        let mut ticked = Tick::default();
        while let Some(entry) = self.ticks.first_entry() {
            if *entry.key() > t {
                break;
            }
            let (at, tick) = entry.remove_entry();
            if at == t {
                ticked = tick;
            }
        }
        let mut ctx = EvalCtx::default();
        let mut inputs = Vec::new();
        let mut below = ticked.below;
        for (k, stash) in self.stash.iter_mut().enumerate() {
            let rows = stash.take_upto(t)?;
            match &self.leaf_sources {
                Some(names) => {
                    below |= rows.is_some() && self.own_sources.contains(&(k as u32));
                    if rows.is_some() || ticked.sources.contains(&(k as u32)) {
                        ctx.active.insert(names[k].clone());
                    }
                    if let Some(b) = rows {
                        ctx.inputs.insert(names[k].clone(), b);
                    }
                }
                // Rows make t an instant of the plan below, unless their senders' ticks for t
                // all say it is not one (a pane aggregate's rows at a tick no window takes
                // them in at).
                None => {
                    below |= rows.is_some() && (ticked.below || !ticked.ticked);
                    inputs.push(rows);
                }
            }
        }
        let inputs = self.fill(inputs)?;
        let wakes = self.op.next_wakeup() == Some(t);
        let instant = self.op.next_instant() == Some(t);
        let step = Step { lo: t, hi: t, ctx: &ctx, input_wakeup: below.then_some(t) };
        let d = self.op.eval(&step, inputs)?;
        self.last = Some(t);
        // For the consumer, t is an instant of the plan below it if it is one below this
        // node, this node's own wake-up, or a change of this node's output; but not for a
        // wake-up that is no instant of the semantics (a pane closing that no window takes
        // in at t), whatever it outputs.
        let own = below || instant || (!d.is_empty() && !wakes);
        out.push(d, Some((t, own)));
        Ok(())
    }

    /// One span: a failure of a stateless operator leaves its output before the first instant
    /// it fails at ([`weir_exec::operator::prefix_before_failure`]).
    fn eval_span(
        &mut self,
        frontier: Watermark,
        out: &mut Outbox,
    ) -> std::result::Result<(), (WeirError, Option<Time>)> {
        let step = self.span_inputs(frontier).map_err(|e| (e, None))?;
        let Some((lo, hi, ctx, inputs)) = step else { return Ok(()) };
        let step = Step { lo, hi, ctx: &ctx, input_wakeup: None };
        let kept = self.op.stateless().then(|| inputs.clone());
        let d = match self.op.eval(&step, inputs) {
            Ok(d) => d,
            Err(e) => {
                let prefix = kept.and_then(|k| prefix_before_failure(self.op.as_mut(), &step, &k));
                return match prefix {
                    Some((at, d)) if at > lo => {
                        out.push(d, Some((lo, true)));
                        Err((e, Some(at)))
                    }
                    _ => Err((e, Some(lo))),
                };
            }
        };
        self.last = Some(hi);
        // The step's first instant, for the consumers' own steps: an operator may act at the
        // first instant of its query (an aggregate without GROUP BY enters its empty group).
        out.push(d, Some((lo, true)));
        Ok(())
    }

    /// The span to evaluate below `frontier`, if any: its bounds, the leaves' context and the
    /// inputs, taken off the stash.
    #[allow(clippy::type_complexity)]
    fn span_inputs(
        &mut self,
        frontier: Watermark,
    ) -> Result<Option<(Time, Time, EvalCtx, Vec<ChangeBatch>)>> {
        let Some(lo) = self.next_instant() else { return Ok(None) };
        if lo as Watermark >= frontier {
            return Ok(None);
        }
        if self.last.is_some_and(|l| lo <= l) {
            return Err(WeirError::internal(format!("instant {lo} evaluated twice")));
        }
        let hi = (frontier - 1).min(Time::MAX as Watermark) as Time;
        let mut ctx = EvalCtx::default();
        let mut inputs = Vec::new();
        let mut active = BTreeSet::new();
        while let Some(entry) = self.ticks.first_entry() {
            if *entry.key() > hi {
                break;
            }
            active.extend(entry.remove().sources);
        }
        for (k, stash) in self.stash.iter_mut().enumerate() {
            let rows = stash.take_upto(hi)?;
            match &self.leaf_sources {
                Some(names) => {
                    if rows.is_some() || active.contains(&(k as u32)) {
                        ctx.active.insert(names[k].clone());
                    }
                    if let Some(b) = rows {
                        ctx.inputs.insert(names[k].clone(), b);
                    }
                }
                None => inputs.push(rows),
            }
        }
        let inputs = self.fill(inputs)?;
        Ok(Some((lo, hi, ctx, inputs)))
    }

    /// Input changes for an evaluation, an empty batch for an input without rows (of the
    /// schema a later batch will have: the operator reads columns by position only).
    fn fill(&self, inputs: Vec<Option<ChangeBatch>>) -> Result<Vec<ChangeBatch>> {
        inputs
            .into_iter()
            .enumerate()
            .map(|(k, b)| match b {
                Some(b) => Ok(b),
                None => self.empty_input(k),
            })
            .collect()
    }

    fn empty_input(&self, k: usize) -> Result<ChangeBatch> {
        self.schemas
            .get(k)
            .map(|s| ChangeBatch::empty(s.clone()))
            .ok_or_else(|| WeirError::internal(format!("no schema for input {k}")))
    }

    /// The last instant this node evaluated.
    pub fn last(&self) -> Option<Time> {
        self.last
    }

    /// Splits the round's output by destination, for each reader by its route.
    fn parts(&self, out: Outbox) -> Result<Vec<Vec<Part>>> {
        let batch = match out.batches.len() {
            0 => None,
            1 => out.batches.into_iter().next(),
            _ => {
                let schema = out.batches[0].schema();
                Some(ChangeBatch::concat(&schema, &out.batches)?)
            }
        };
        let mut batch = batch.filter(|b| !b.is_empty());
        let wanted = |p: &Part| p.batch.is_some() || !p.ticks.is_empty();
        let mut per_reader = Vec::with_capacity(self.routes.len());
        for (r, route) in self.routes.iter().enumerate() {
            // The last reader takes the batch; the others get a copy (its columns are shared).
            let batch = if r + 1 == self.routes.len() { batch.take() } else { batch.clone() };
            let parts = self.route_parts(route, batch, &out.ticks)?;
            per_reader.push(parts.into_iter().filter(wanted).collect());
        }
        Ok(per_reader)
    }

    /// The parts of one reader: `batch` split by `route`, each with the round's ticks.
    fn route_parts(
        &self,
        route: &Route,
        batch: Option<ChangeBatch>,
        ticks: &[(Time, bool)],
    ) -> Result<Vec<Part>> {
        let part = |dest: u32, batch: Option<ChangeBatch>| Part {
            dest,
            from: self.me,
            source: 0,
            batch,
            ticks: ticks.to_vec(),
        };
        Ok(match route {
            Route::Here => vec![part(self.me, batch)],
            Route::Worker0 => vec![part(0, batch)],
            Route::ByInstant => {
                let mut per: Vec<Vec<u32>> = vec![Vec::new(); self.peers as usize];
                if let Some(b) = &batch {
                    for (i, &t) in b.times.iter().enumerate() {
                        per[instant_worker(t, self.peers as usize)].push(i as u32);
                    }
                }
                let mut parts = Vec::with_capacity(per.len());
                for (dest, idx) in per.into_iter().enumerate() {
                    let rows = match &batch {
                        Some(b) if idx.len() == b.len() => Some(b.clone()),
                        Some(b) if !idx.is_empty() => Some(b.take(&idx)?),
                        _ => None,
                    };
                    parts.push(part(dest as u32, rows));
                }
                parts
            }
            Route::Keyed(route) => {
                let mut per: Vec<Vec<u32>> = vec![Vec::new(); self.peers as usize];
                if let Some(b) = &batch {
                    for (i, h) in route.hashes(&b.data)?.into_iter().enumerate() {
                        per[(h % self.peers as u64) as usize].push(i as u32);
                    }
                }
                let mut parts = Vec::with_capacity(per.len());
                for (dest, idx) in per.into_iter().enumerate() {
                    let rows = match &batch {
                        Some(b) if !idx.is_empty() => Some(b.take(&idx)?),
                        _ => None,
                    };
                    parts.push(part(dest as u32, rows));
                }
                parts
            }
        })
    }
}

impl NodeHost {
    fn signature(&self, index: usize) -> String {
        let leaf = self.leaf_sources.as_ref().map(|s| s.len());
        format!("node {index} {:?}", (self.stash.len(), leaf, self.span, self.active, self.me))
    }

    /// An estimate of the bytes this node holds on this worker: its operator's state and the
    /// input rows it has not evaluated yet.
    pub fn state_bytes(&self) -> usize {
        let stashed: usize =
            self.stash.iter().flat_map(|s| &s.chunks).map(|c| c.batch.heap_bytes()).sum();
        self.op.state_bytes() + stashed
    }

    /// Writes the node's state between rounds (a checkpoint of a query on the workers; see
    /// [`crate::runtime`]): sections `node` (one row: `last`, NULL before the first instant,
    /// and `failed`), `node.ticks` (`time`, `below`, `sources`: the leaf's sources that have
    /// the instant, as little-endian u32s), `node.stash` (per input, per chunk in taking order:
    /// `input`, `rows`), one `node.chunk` per chunk (its rows not yet evaluated), then the
    /// operator's own sections.
    pub fn save_state(&self, index: usize, w: &mut StateWriter) -> Result<()> {
        self.save_own(index, w)?;
        self.op.save_state(w)
    }

    /// Incremental checkpoints (see [`weir_exec::dirty`]): the host's own sections, as in
    /// [`NodeHost::save_state`], then the operator's changes since the last checkpoint; false
    /// if it cannot say (the query is then saved whole).
    pub fn save_changes(&mut self, index: usize, w: &mut StateWriter) -> Result<bool> {
        self.save_own(index, w)?;
        self.op.save_changes(w)
    }

    /// The state as it is now was checkpointed whole: the operator starts recording changes.
    pub fn track_changes(&mut self) {
        self.op.track_changes();
    }

    /// The host's own sections (see [`NodeHost::save_state`]).
    fn save_own(&self, index: usize, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature(index);
        w.put(
            "node",
            &sig,
            1,
            vec![("last", opt_i64_col([self.last])), ("failed", bool_col([self.failed]))],
        )?;
        let sources: Vec<Vec<u8>> = self
            .ticks
            .values()
            .map(|t| t.sources.iter().flat_map(|s| s.to_le_bytes()).collect())
            .collect();
        w.put(
            "node.ticks",
            &sig,
            self.ticks.len(),
            vec![
                ("time", i64_col(self.ticks.keys().copied())),
                ("below", bool_col(self.ticks.values().map(|t| t.below))),
                ("sources", binary_col(sources.iter().map(Vec::as_slice))),
            ],
        )?;
        let mut chunks: Vec<(usize, ChangeBatch)> = Vec::new();
        for (k, stash) in self.stash.iter().enumerate() {
            let mut order: Vec<&Chunk> = stash.chunks.iter().collect();
            order.sort_by_key(|c| c.order);
            for c in order {
                if c.pos < c.batch.len() {
                    chunks.push((k, c.batch.slice(c.pos, c.batch.len() - c.pos)));
                }
            }
        }
        w.put(
            "node.stash",
            &sig,
            chunks.len(),
            vec![
                ("input", i64_col(chunks.iter().map(|c| c.0 as i64))),
                ("rows", i64_col(chunks.iter().map(|c| c.1.len() as i64))),
            ],
        )?;
        for (_, c) in &chunks {
            w.put_changes("node.chunk", &sig, &c.schema(), std::slice::from_ref(c))?;
        }
        Ok(())
    }

    /// Restores what [`NodeHost::save_state`] wrote into a host freshly built for the same
    /// node, before it receives anything. Errors (never panics) on sections that do not fit.
    pub fn restore_state(&mut self, index: usize, r: &mut StateReader) -> Result<()> {
        if self.last.is_some() || self.seq > 0 {
            return Err(WeirError::internal("node state restored into a node already in use"));
        }
        self.take_own(index, r)?;
        self.op.restore_state(r)?;
        self.op.track_changes();
        Ok(())
    }

    /// Applies what [`NodeHost::save_changes`] wrote to the state of the previous checkpoint
    /// (restored, with the changes before these), before the node receives anything.
    pub fn restore_changes(&mut self, index: usize, r: &mut StateReader) -> Result<()> {
        for stash in &mut self.stash {
            stash.chunks.clear();
            stash.sorted = true;
        }
        self.seq = 0;
        self.take_own(index, r)?;
        self.op.restore_changes(r)?;
        self.op.track_changes();
        Ok(())
    }

    /// Reads the host's own sections into this host, whose stashes are empty.
    fn take_own(&mut self, index: usize, r: &mut StateReader) -> Result<()> {
        let sig = self.signature(index);
        let head = r.take("node", &sig)?;
        let (lasts, fails) = (head.opt_i64s("last")?, head.bools("failed")?);
        let (last, failed) = match (lasts.as_slice(), fails.as_slice()) {
            ([last], [failed]) => (*last, *failed),
            _ => return Err(invalid("section 'node' should have one row")),
        };
        let t = r.take("node.ticks", &sig)?;
        let mut ticks = BTreeMap::new();
        for ((time, below), sources) in
            t.i64s("time")?.into_iter().zip(t.bools("below")?).zip(t.binary("sources")?)
        {
            if last.is_some_and(|l| time <= l) || sources.len() % 4 != 0 {
                return Err(invalid("a node's tick does not fit"));
            }
            let sources = sources
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            // A saved tick came from a sender (a leaf's from its sources).
            ticks.insert(time, Tick { below, ticked: true, sources });
        }
        let s = r.take("node.stash", &sig)?;
        for (input, rows) in s.i64s("input")?.into_iter().zip(s.i64s("rows")?) {
            let batch = r.take("node.chunk", &sig)?.changes(None)?;
            let stash = usize::try_from(input).ok().and_then(|k| self.stash.get_mut(k));
            let Some(stash) = stash else {
                return Err(invalid("a node's stashed rows are for an input it does not have"));
            };
            if batch.len() as i64 != rows || batch.is_empty() {
                return Err(invalid("a node's stashed chunk has the wrong number of rows"));
            }
            check_after(last, &batch.times, "a restored node")
                .map_err(|_| invalid("a node's stashed rows are at an instant it evaluated"))?;
            self.seq += 1;
            stash.push((0, 0, self.seq), batch)?;
        }
        self.last = last;
        self.failed = failed;
        self.ticks = ticks;
        self.round_base = 1;
        Ok(())
    }
}

/// What the inputs said of one instant: whether it is one of the plan below (see
/// [`Part`]), and for a leaf, the sources that have it.
#[derive(Debug, Default)]
struct Tick {
    below: bool,
    /// Whether a sender sent a tick for the instant (with `below` as its word on it).
    ticked: bool,
    sources: BTreeSet<u32>,
}

/// A round's output before it is split by destination.
#[derive(Debug, Default)]
struct Outbox {
    batches: Vec<ChangeBatch>,
    ticks: Vec<(Time, bool)>,
}

impl Outbox {
    fn push(&mut self, d: ChangeBatch, tick: Option<(Time, bool)>) {
        if !d.is_empty() {
            self.batches.push(d);
        }
        self.ticks.extend(tick);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]))
    }

    fn batch(rows: &[(i64, Time)]) -> ChangeBatch {
        let data = RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)))],
        )
        .expect("batch");
        ChangeBatch::new(data, rows.iter().map(|r| r.1).collect(), vec![1; rows.len()])
    }

    /// Logs each step (its instant, its input rows' values, whether the plan below has the
    /// instant), passes its input on, and wakes once at `wakeup`.
    #[derive(Debug)]
    struct Probe {
        wakeup: Option<Time>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Operator for Probe {
        fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
            let d = inputs.into_iter().next().unwrap_or_else(|| ChangeBatch::empty(schema()));
            let col =
                d.data.column(0).as_any().downcast_ref::<Int64Array>().map(|a| a.values().to_vec());
            self.log.lock().expect("log").push(format!(
                "@{} {:?} below {:?}",
                step.lo,
                col.unwrap_or_default(),
                step.input_wakeup
            ));
            if self.wakeup.is_some_and(|w| w <= step.hi) {
                self.wakeup = None;
            }
            Ok(d)
        }
        fn next_wakeup(&self) -> Option<Time> {
            self.wakeup
        }
        fn state_bytes(&self) -> usize {
            0
        }
        fn save_state(&self, _w: &mut StateWriter) -> Result<()> {
            Ok(())
        }
        fn restore_state(&mut self, _r: &mut StateReader) -> Result<()> {
            Ok(())
        }
    }

    /// The parts of a round that did not fail, for the node's one reader.
    fn processed(r: (Vec<Vec<Part>>, Option<Failed>)) -> Vec<Part> {
        assert!(r.1.is_none(), "{:?}", r.1);
        assert!(r.0.len() <= 1, "one reader");
        r.0.into_iter().next().unwrap_or_default()
    }

    fn part(from: u32, rows: &[(i64, Time)], ticks: &[(Time, bool)]) -> Part {
        let batch = (!rows.is_empty()).then(|| batch(rows));
        Part { dest: 0, from, source: 0, batch, ticks: ticks.to_vec() }
    }

    #[test]
    fn instants_in_order_from_rows_ticks_and_wake_ups_rows_in_sender_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let op = Box::new(Probe { wakeup: Some(4), log: log.clone() });
        let mut host =
            NodeHost::new(op, vec![schema()], None, false, true, vec![Route::Here], 0, 2);
        // Sender 1's rows arrive first, but sender 0's are taken first within an instant.
        host.receive(0, 0, part(1, &[(10, 2), (11, 6)], &[])).expect("receive");
        host.receive(0, 0, part(0, &[(20, 2)], &[(3, true), (5, false)])).expect("receive");
        let out = processed(host.process(6));
        assert_eq!(
            *log.lock().expect("log"),
            [
                "@2 [20, 10] below Some(2)",
                "@3 [] below Some(3)",
                "@4 [] below None",
                "@5 [] below None"
            ]
        );
        // Instant 6 is not complete (the frontier is 6); the output goes to this worker, with
        // the instants evaluated: 2 (rows), 3 (below), 4 (a wake-up), 5 (only the query's).
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ticks, [(2, true), (3, true), (4, true), (5, false)]);
        assert_eq!(out[0].batch.as_ref().map(|b| b.times.clone()), Some(vec![2, 2]));
        assert_eq!(host.last(), Some(5));
        processed(host.process(7));
        assert_eq!(
            log.lock().expect("log").last().map(String::as_str),
            Some("@6 [11] below Some(6)")
        );
        // A row at an instant already evaluated is a bug, reported, never evaluated.
        assert!(host.receive(0, 1, part(0, &[(1, 5)], &[])).is_err());
    }

    #[test]
    fn keyed_output_goes_to_the_key_s_worker_with_ticks_for_every_worker() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let op = Box::new(Probe { wakeup: None, log });
        let route = Route::Keyed(KeyRoute::whole_row(&schema()).expect("route"));
        let mut host = NodeHost::new(op, vec![schema()], None, false, true, vec![route], 1, 2);
        let rows: Vec<(i64, Time)> = (0..100).map(|v| (v, 1)).collect();
        host.receive(0, 0, part(0, &rows, &[])).expect("receive");
        let out = processed(host.process(2));
        assert_eq!(out.iter().map(|p| p.dest).collect::<Vec<_>>(), [0, 1]);
        let sizes: Vec<usize> =
            out.iter().map(|p| p.batch.as_ref().map_or(0, |b| b.len())).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 100);
        assert!(sizes.iter().all(|&n| n > 20), "keys spread: {sizes:?}");
        assert!(out.iter().all(|p| p.ticks == [(1, true)] && p.from == 1));
    }

    #[test]
    fn a_restored_node_goes_on_as_the_saved_one() {
        let run = |restore: bool| {
            let log = Arc::new(Mutex::new(Vec::new()));
            let op = Box::new(Probe { wakeup: Some(7), log: log.clone() });
            let mut host =
                NodeHost::new(op, vec![schema()], None, false, true, vec![Route::Here], 0, 2);
            host.receive(0, 0, part(1, &[(10, 2), (11, 6)], &[(8, true)])).expect("receive");
            host.receive(0, 0, part(0, &[(20, 6)], &[(5, false)])).expect("receive");
            processed(host.process(4));
            if restore {
                let mut w = StateWriter::new();
                host.save_state(3, &mut w).expect("save");
                let bytes = w.into_bytes().expect("bytes");
                let op = Box::new(Probe { wakeup: Some(7), log: log.clone() });
                let mut fresh =
                    NodeHost::new(op, vec![schema()], None, false, true, vec![Route::Here], 0, 2);
                let mut r = StateReader::from_bytes(&bytes).expect("read");
                assert!(fresh.restore_state(2, &mut r).is_err(), "another node's state");
                let op = Box::new(Probe { wakeup: Some(7), log: log.clone() });
                host =
                    NodeHost::new(op, vec![schema()], None, false, true, vec![Route::Here], 0, 2);
                let mut r = StateReader::from_bytes(&bytes).expect("read");
                host.restore_state(3, &mut r).expect("restore");
                r.finish().expect("every section taken");
                assert_eq!(host.last(), Some(2));
            }
            // A later round's rows at 6 come after the saved ones, whoever sent them; after a
            // restore, the new dataflow numbers its rounds from 0 again.
            let round = if restore { 0 } else { 1 };
            host.receive(0, round, part(0, &[(30, 6)], &[])).expect("receive");
            let out = processed(host.process(9));
            let seen = log.lock().expect("log").clone();
            (seen, out[0].ticks.clone())
        };
        assert_eq!(run(true), run(false));
        let (log, ticks) = run(true);
        assert_eq!(
            log,
            [
                "@2 [10] below Some(2)",
                "@5 [] below None",
                "@6 [20, 11, 30] below Some(6)",
                "@7 [] below None",
                "@8 [] below Some(8)"
            ]
        );
        assert_eq!(ticks, [(5, false), (6, true), (7, true), (8, true)]);
    }

    #[test]
    fn a_node_on_worker_0_only_ignores_what_reaches_it_elsewhere() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let op = Box::new(Probe { wakeup: Some(1), log: log.clone() });
        let mut host =
            NodeHost::new(op, vec![schema()], None, false, false, vec![Route::Worker0], 1, 2);
        host.receive(0, 0, part(0, &[(1, 1)], &[])).expect("receive");
        assert!(processed(host.process(10)).is_empty());
        assert!(log.lock().expect("log").is_empty());
    }
}
