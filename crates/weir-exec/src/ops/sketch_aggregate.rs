//! Sketch aggregation: γ_{keys; aggs}(W(S)) for sketch aggregates (`APPROX_COUNT_DISTINCT`)
//! beside `COUNT`, over a time window W of a stream S, or over an append-only input.
//!
//! A sketch can be merged but not taken apart: rows cannot be retracted from it. So the
//! window is not applied upstream (where it would retract every row that leaves) but here:
//! time is cut into *slices* of g = gcd(T, S) ticks (`[RANGE T SLIDE S]`; `[RANGE T]` is
//! S = 1, `[NOW]` T = S = 1), and each group keeps one partial state per slice that holds
//! rows: a count, a sketch. The window [b−T, b) current at τ (b = S·⌊(τ+1)/S⌋) is exactly the
//! slices in it, so its value is the merge of their partials. An arriving row costs O(1) (one
//! insert into its slice's sketch), whatever the window/slide ratio; each slice is merged into
//! the T/S windows that contain it, once per window, and dropped when the window has passed it.
//! Over an append-only input (`[UNBOUNDED]`) there is one slice that never leaves.
//!
//! Delta semantics: the output is the relation of (key, aggregates) over the current window;
//! at an instant where the window's slices change (a slice enters or leaves: the operator asks
//! to be woken there) or, unbounded, where rows arrive, each group whose values change gives
//! −(old) +(new), a group appears when it has rows in the window and disappears when it has
//! none. Without GROUP BY the one row exists from the query's first instant (COUNT and
//! APPROX_COUNT_DISTINCT are 0 over an empty window). Output sorted by key. Elements that fall
//! into a gap between windows (T < S) are dropped on arrival. The input only inserts (the
//! binder refuses an input that can delete rows); a retraction is an internal error.
//!
//! Determinism: a sketch is a function of the set of hashed values (see [`crate::sketch`]), so
//! the output does not depend on batching, on the arrival order within an instant, or on the
//! worker a group is on. State: per slice and group, its row count and partials; the current
//! output; the instants still to evaluate. Checkpointed as the sections `sketch_aggregate`
//! (`started`), `sketch_aggregate.slices` (`slice` Int64, `key` Binary, `rows` Int64, and per
//! aggregate `a` a Binary `p{a}`: a count as 8 bytes little-endian, a sketch as
//! [`Hll::to_bytes`]), `sketch_aggregate.current` (`key`, per aggregate `v{a}` Int64) and
//! `sketch_aggregate.pending` (`t` Int64), each sorted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::HashMap;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{AggFunc, SketchWindow};

use crate::expr::ScalarExpr;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::aggregate::AggSpec;
use crate::ops::batch_of;
use crate::route::{KeyRoute, Placement};
use crate::row::{EncodedRows, RowCodec};
use crate::sketch::hll::Hll;
use crate::sketch::value_hash;
use crate::state::{binary_col, bool_col, i64_col, invalid, signature, StateReader, StateWriter};

/// One aggregate's partial state over one slice of one group.
#[derive(Debug, Clone)]
enum Partial {
    /// COUNT(*), COUNT(x).
    Count(i64),
    /// APPROX_COUNT_DISTINCT.
    Hll(Hll),
}

impl Partial {
    fn merge(&mut self, other: &Partial) -> Result<()> {
        match (self, other) {
            (Partial::Count(a), Partial::Count(b)) => *a += b,
            (Partial::Hll(a), Partial::Hll(b)) => a.merge(b)?,
            _ => return Err(WeirError::internal("merging partials of different aggregates")),
        }
        Ok(())
    }

    fn value(&self) -> i64 {
        match self {
            Partial::Count(n) => *n,
            Partial::Hll(h) => h.estimate() as i64,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        match self {
            Partial::Count(n) => n.to_le_bytes().to_vec(),
            Partial::Hll(h) => h.to_bytes(),
        }
    }
}

/// A group's partial states over one slice (or, merged, over a window).
#[derive(Debug, Clone)]
struct Partials {
    rows: i64,
    accs: Vec<Partial>,
}

#[derive(Debug)]
pub struct SketchAggregate {
    window: SketchWindow,
    /// The slice width g (1 when unbounded).
    slice: Time,
    keys: Vec<ScalarExpr>,
    key_codec: RowCodec,
    aggs: Vec<AggSpec>,
    /// Per aggregate: the codec its argument is hashed through (None: COUNT(*)).
    value_codecs: Vec<Option<RowCodec>>,
    schema: SchemaRef,
    /// Slice number (start / g; 0 when unbounded) -> group key -> partials.
    slices: BTreeMap<i64, HashMap<Vec<u8>, Partials>>,
    /// The output at the last evaluated instant, by key.
    current: BTreeMap<Vec<u8>, Vec<i64>>,
    /// Instants after the last evaluated one at which the window's slices change.
    pending: BTreeSet<Time>,
    started: bool,
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl SketchAggregate {
    pub fn new(
        window: SketchWindow,
        keys: Vec<ScalarExpr>,
        key_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let slice = match window {
            SketchWindow::Unbounded => 1,
            SketchWindow::Slide { range, slide } if range > 0 && slide > 0 => gcd(range, slide),
            SketchWindow::Slide { .. } => {
                return Err(WeirError::internal("a sketch window of a non-positive duration"))
            }
        };
        for a in &aggs {
            if !(a.func.is_sketch() || matches!(a.func, AggFunc::CountStar | AggFunc::Count)) {
                return Err(WeirError::internal(format!("{} in a sketch aggregate", a.func)));
            }
        }
        let value_codecs = aggs
            .iter()
            .map(|a| match a.arg {
                Some(_) => RowCodec::new(vec![a.arg_type.clone()]).map(Some),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        Ok(SketchAggregate {
            window,
            slice,
            keys,
            key_codec: RowCodec::new(key_types)?,
            aggs,
            value_codecs,
            schema,
            slices: BTreeMap::new(),
            current: BTreeMap::new(),
            pending: BTreeSet::new(),
            started: false,
        })
    }

    fn fresh(&self) -> Partials {
        let accs = self
            .aggs
            .iter()
            .map(|a| match a.func {
                AggFunc::ApproxCountDistinct { precision } => Partial::Hll(Hll::new(precision)),
                _ => Partial::Count(0),
            })
            .collect();
        Partials { rows: 0, accs }
    }

    /// The slice a row stamped `t` belongs to, and the instants at which that slice enters
    /// and leaves the current window (None: never, past the end of time); None if the slice
    /// falls into a gap between windows.
    fn slice_of(&self, t: Time) -> Option<(i64, Option<Time>, Option<Time>)> {
        let SketchWindow::Slide { range, slide } = self.window else {
            return Some((0, None, None));
        };
        let (g, s, r) = (self.slice as i128, slide as i128, range as i128);
        let idx = (t as i128).div_euclid(g);
        let start = idx * g;
        // The first window end b (a multiple of S) after the slice's start; the window
        // [b−T, b) holds the slice iff b − T <= start.
        let enter = s * (start.div_euclid(s) + 1);
        if enter - r > start {
            return None;
        }
        let leave = s * ((start + r).div_euclid(s) + 1);
        let instant = |b: i128| i64::try_from(b - 1).ok();
        Some((idx as i64, instant(enter), instant(leave)))
    }

    /// The slice numbers [lo, hi) of the window current at `t`.
    fn window_at(&self, t: Time) -> (i64, i64) {
        let SketchWindow::Slide { range, slide } = self.window else {
            return (i64::MIN, i64::MAX);
        };
        let (g, s) = (self.slice as i128, slide as i128);
        let b = s * (t as i128 + 1).div_euclid(s);
        let lo = (b - range as i128).div_euclid(g);
        let hi = b.div_euclid(g);
        let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        (clamp(lo), clamp(hi))
    }

    /// Applies the rows `range` of `d` (all at one instant) to their slices. Returns the
    /// touched group keys (for an unbounded window, where only they can change).
    fn apply(
        &mut self,
        d: &ChangeBatch,
        p: &Prepared,
        range: std::ops::Range<usize>,
        touched: &mut BTreeSet<Vec<u8>>,
    ) -> Result<()> {
        for i in range {
            let diff = d.diffs[i];
            if diff < 0 {
                return Err(WeirError::internal(
                    "a sketch aggregate was given a retraction (its input must only insert)",
                ));
            }
            let Some((idx, enter, leave)) = self.slice_of(d.times[i]) else { continue };
            if let std::collections::btree_map::Entry::Vacant(e) = self.slices.entry(idx) {
                e.insert(HashMap::new());
                self.pending.extend(enter);
                self.pending.extend(leave);
            }
            let key = p.keys.get(i);
            let absent = !self.slices.get(&idx).is_some_and(|s| s.contains_key(key));
            let fresh = absent.then(|| self.fresh());
            let slice = self.slices.get_mut(&idx).ok_or_else(|| WeirError::internal("slice"))?;
            if let Some(f) = fresh {
                slice.insert(key.to_vec(), f);
            }
            let group = slice.get_mut(key).ok_or_else(|| WeirError::internal("group"))?;
            group.rows += diff;
            for (a, acc) in group.accs.iter_mut().enumerate() {
                if p.filters[a].as_ref().is_some_and(|f| !f.value(i)) {
                    continue;
                }
                match (acc, &p.values[a]) {
                    (Partial::Count(n), None) => *n += diff,
                    (Partial::Count(n), Some((col, _))) => {
                        if !col.is_null(i) {
                            *n += diff;
                        }
                    }
                    (Partial::Hll(h), Some((col, rows))) => {
                        if !col.is_null(i) {
                            h.insert(value_hash(rows.get(i)));
                        }
                    }
                    (Partial::Hll(_), None) => {
                        return Err(WeirError::internal("APPROX_COUNT_DISTINCT without argument"))
                    }
                }
            }
            if matches!(self.window, SketchWindow::Unbounded) && !touched.contains(key) {
                touched.insert(key.to_vec());
            }
        }
        Ok(())
    }

    /// The merged partials of the window current at `t`, by group (only `only`'s keys, when
    /// given).
    fn merged(
        &self,
        t: Time,
        only: Option<&BTreeSet<Vec<u8>>>,
    ) -> Result<BTreeMap<Vec<u8>, Partials>> {
        let (lo, hi) = self.window_at(t);
        let mut out: BTreeMap<Vec<u8>, Partials> = BTreeMap::new();
        for groups in self.slices.range(lo..hi).map(|(_, g)| g) {
            match only {
                Some(keys) => {
                    for k in keys {
                        if let Some(p) = groups.get(k) {
                            merge_into(&mut out, k, p)?;
                        }
                    }
                }
                None => {
                    for (k, p) in groups {
                        merge_into(&mut out, k, p)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Evaluates instant `t`: the changes of the groups whose values differ from the current
    /// output, into `out`. With `only`, just those groups are looked at (the others cannot
    /// have changed).
    fn evaluate(
        &mut self,
        t: Time,
        only: Option<&BTreeSet<Vec<u8>>>,
        out: &mut Emitted,
    ) -> Result<()> {
        let merged = self.merged(t, only)?;
        let scalar = self.keys.is_empty();
        let mut new: BTreeMap<Vec<u8>, Vec<i64>> = BTreeMap::new();
        for (k, p) in &merged {
            if p.rows > 0 {
                new.insert(k.clone(), p.accs.iter().map(Partial::value).collect());
            }
        }
        if scalar && !new.contains_key(&[][..]) {
            new.insert(vec![], self.fresh().accs.iter().map(Partial::value).collect());
        }
        // The keys to compare: every key of the old output and of the new (or just `only`).
        let keys: BTreeSet<Vec<u8>> = match only {
            Some(keys) => keys.iter().chain(new.keys()).cloned().collect(),
            None => self.current.keys().chain(new.keys()).cloned().collect(),
        };
        for k in keys {
            let before = self.current.get(&k);
            let after = new.get(&k);
            if before == after {
                continue;
            }
            if let Some(v) = before {
                out.push(&k, v, t, -1);
            }
            match new.remove(&k) {
                Some(v) => {
                    out.push(&k, &v, t, 1);
                    self.current.insert(k, v);
                }
                None => {
                    self.current.remove(&k);
                }
            }
        }
        // Slices that no later window holds.
        let (lo, _) = self.window_at(t);
        while self.slices.first_key_value().is_some_and(|(idx, _)| *idx < lo) {
            self.slices.pop_first();
        }
        Ok(())
    }

    fn prepare(&self, d: &ChangeBatch) -> Result<Prepared> {
        let key_cols: Vec<ArrayRef> =
            self.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
        let keys = self.key_codec.encode(&key_cols, d.len())?;
        let mut values = Vec::with_capacity(self.aggs.len());
        let mut filters = Vec::with_capacity(self.aggs.len());
        for (spec, codec) in self.aggs.iter().zip(&self.value_codecs) {
            values.push(match (&spec.arg, codec) {
                (Some(e), Some(codec)) => {
                    let col = e.eval_as(&d.data, &spec.arg_type)?;
                    let rows = codec.encode(std::slice::from_ref(&col), d.len())?;
                    Some((col, rows))
                }
                _ => None,
            });
            filters.push(spec.filter.as_ref().map(|f| f.eval_predicate(&d.data)).transpose()?);
        }
        Ok(Prepared { keys, values, filters })
    }

    fn signature(&self) -> String {
        let aggs: Vec<_> =
            self.aggs.iter().map(|a| (a.func, &a.arg_type, a.filter.is_some())).collect();
        signature("sketch_aggregate", &self.schema, (self.window, self.keys.len(), aggs))
    }

    fn partial_from_bytes(&self, a: usize, b: &[u8]) -> Result<Partial> {
        match self.aggs[a].func {
            AggFunc::ApproxCountDistinct { precision } => {
                Ok(Partial::Hll(Hll::from_bytes(precision, b)?))
            }
            _ => {
                let w: [u8; 8] = b
                    .try_into()
                    .map_err(|_| invalid("section 'sketch_aggregate.slices': a bad count"))?;
                Ok(Partial::Count(i64::from_le_bytes(w)))
            }
        }
    }

    /// Memory held by the slices' partials, in bytes (an estimate, for the benchmark).
    pub fn state_bytes(&self) -> usize {
        self.slices
            .values()
            .flat_map(|g| g.iter())
            .map(|(k, p)| {
                k.len()
                    + 48
                    + p.accs
                        .iter()
                        .map(|a| match a {
                            Partial::Count(_) => 16,
                            Partial::Hll(h) => h.bytes(),
                        })
                        .sum::<usize>()
            })
            .sum()
    }
}

fn merge_into(out: &mut BTreeMap<Vec<u8>, Partials>, k: &[u8], p: &Partials) -> Result<()> {
    match out.get_mut(k) {
        Some(m) => {
            m.rows += p.rows;
            for (a, b) in m.accs.iter_mut().zip(&p.accs) {
                a.merge(b)?;
            }
        }
        None => {
            out.insert(k.to_vec(), p.clone());
        }
    }
    Ok(())
}

/// An input batch evaluated for the partials.
struct Prepared {
    keys: EncodedRows,
    /// Per aggregate: its argument and the argument's row encoding (None: COUNT(*)).
    values: Vec<Option<(ArrayRef, EncodedRows)>>,
    filters: Vec<Option<BooleanArray>>,
}

/// Output rows collected over a step.
#[derive(Debug, Default)]
struct Emitted {
    keys: Vec<Vec<u8>>,
    cols: Vec<Vec<i64>>,
    times: Vec<Time>,
    diffs: Vec<i64>,
}

impl Emitted {
    fn push(&mut self, key: &[u8], vals: &[i64], t: Time, diff: i64) {
        self.keys.push(key.to_vec());
        self.cols.resize_with(vals.len(), Vec::new);
        for (col, v) in self.cols.iter_mut().zip(vals) {
            col.push(*v);
        }
        self.times.push(t);
        self.diffs.push(diff);
    }
}

impl Operator for SketchAggregate {
    /// Walks the step's rows and the instants at which the window changes in time order: the
    /// rows of an instant are applied before the instant is evaluated.
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let p = if d.is_empty() { None } else { Some(self.prepare(&d)?) };
        let mut out = Emitted::default();
        let unbounded = matches!(self.window, SketchWindow::Unbounded);
        // The scalar row exists from the query's first instant.
        let mut first = None;
        if !self.started {
            self.started = true;
            if self.keys.is_empty() {
                first = Some(step.lo);
            }
        }
        // Instants a wake-up asked for but the runner did not make (none expected) are
        // looked at with the step's first instant.
        let mut stale = false;
        while self.pending.first().is_some_and(|t| *t < step.lo) {
            self.pending.pop_first();
            stale = true;
        }
        if stale {
            first = Some(step.lo);
        }
        let mut i = 0;
        loop {
            let next_row = d.times.get(i).copied();
            let next_pending = self.pending.first().copied().filter(|t| *t <= step.hi);
            let next_first = first;
            let t = match [next_row, next_pending, next_first].into_iter().flatten().min() {
                Some(t) => t,
                None => break,
            };
            let mut touched = BTreeSet::new();
            let mut end = i;
            while end < d.len() && d.times[end] == t {
                end += 1;
            }
            if let Some(p) = &p {
                self.apply(&d, p, i..end, &mut touched)?;
            }
            i = end;
            // The rows at t may have added t itself as a pending instant.
            let due = self.pending.first() == Some(&t);
            if due {
                self.pending.pop_first();
            }
            if first == Some(t) {
                first = None;
                if self.keys.is_empty() {
                    touched.insert(vec![]);
                }
                self.evaluate(t, if unbounded { Some(&touched) } else { None }, &mut out)?;
            } else if unbounded {
                if !touched.is_empty() {
                    self.evaluate(t, Some(&touched), &mut out)?;
                }
            } else if due {
                self.evaluate(t, None, &mut out)?;
            }
        }
        let n = out.diffs.len();
        if n == 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut cols = self.key_codec.decode(out.keys.iter().map(|k| &k[..]))?;
        for vals in out.cols {
            cols.push(Arc::new(Int64Array::from(vals)) as ArrayRef);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(data, out.times, out.diffs))
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.pending.first().copied()
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A group's rows meet on one worker (without GROUP BY, every row on one worker).
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Keyed(KeyRoute::new(self.keys.clone(), self.key_codec.types().to_vec())?))
    }

    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        w.put("sketch_aggregate", &sig, 1, vec![("started", bool_col([self.started]))])?;
        let mut rows: Vec<(i64, &Vec<u8>, &Partials)> = Vec::new();
        for (idx, groups) in &self.slices {
            let mut g: Vec<_> = groups.iter().collect();
            g.sort_unstable_by(|a, b| a.0.cmp(b.0));
            rows.extend(g.into_iter().map(|(k, p)| (*idx, k, p)));
        }
        let names: Vec<String> = (0..self.aggs.len()).map(|a| format!("p{a}")).collect();
        let parts: Vec<Vec<Vec<u8>>> = (0..self.aggs.len())
            .map(|a| rows.iter().map(|(_, _, p)| p.accs[a].to_bytes()).collect())
            .collect();
        let mut cols = vec![
            ("slice", i64_col(rows.iter().map(|r| r.0))),
            ("key", binary_col(rows.iter().map(|r| &r.1[..]))),
            ("rows", i64_col(rows.iter().map(|r| r.2.rows))),
        ];
        for (name, part) in names.iter().zip(&parts) {
            cols.push((name, binary_col(part.iter().map(|b| &b[..]))));
        }
        w.put("sketch_aggregate.slices", &sig, rows.len(), cols)?;
        let vnames: Vec<String> = (0..self.aggs.len()).map(|a| format!("v{a}")).collect();
        let mut cols = vec![("key", binary_col(self.current.keys().map(|k| &k[..])))];
        for (a, name) in vnames.iter().enumerate() {
            cols.push((name, i64_col(self.current.values().map(|v| v[a]))));
        }
        w.put("sketch_aggregate.current", &sig, self.current.len(), cols)?;
        w.put(
            "sketch_aggregate.pending",
            &sig,
            self.pending.len(),
            vec![("t", i64_col(self.pending.iter().copied()))],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let s = r.take("sketch_aggregate", &sig)?;
        let started = s.bools("started")?;
        self.started = started.first().copied().unwrap_or(false);
        let s = r.take("sketch_aggregate.slices", &sig)?;
        let (idxs, keys, rows) = (s.i64s("slice")?, s.binary("key")?, s.i64s("rows")?);
        let parts: Vec<Vec<&[u8]>> =
            (0..self.aggs.len()).map(|a| s.binary(&format!("p{a}"))).collect::<Result<_>>()?;
        let mut slices: BTreeMap<i64, HashMap<Vec<u8>, Partials>> = BTreeMap::new();
        for (i, ((idx, key), rows)) in idxs.iter().zip(&keys).zip(&rows).enumerate() {
            let accs = (0..self.aggs.len())
                .map(|a| self.partial_from_bytes(a, parts[a][i]))
                .collect::<Result<_>>()?;
            slices.entry(*idx).or_default().insert(key.to_vec(), Partials { rows: *rows, accs });
        }
        let s = r.take("sketch_aggregate.current", &sig)?;
        let keys = s.binary("key")?;
        let vals: Vec<Vec<i64>> =
            (0..self.aggs.len()).map(|a| s.i64s(&format!("v{a}"))).collect::<Result<_>>()?;
        let mut current = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            current.insert(k.to_vec(), vals.iter().map(|v| v[i]).collect());
        }
        let s = r.take("sketch_aggregate.pending", &sig)?;
        self.pending = s.i64s("t")?.into_iter().collect();
        self.slices = slices;
        self.current = current;
        Ok(())
    }
}
