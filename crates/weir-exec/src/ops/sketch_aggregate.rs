//! Sketch aggregation: γ_{keys; aggs}(W(S)) for sketch aggregates (`APPROX_COUNT_DISTINCT`,
//! `APPROX_PERCENTILE`, `APPROX_MEDIAN`, `APPROX_TOP_K`) beside `COUNT`, over a time window W of
//! a stream S, or over an append-only input.
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
//! APPROX_COUNT_DISTINCT are 0 over an empty window, a percentile NULL). Output sorted by key.
//! Elements that fall into a gap between windows (T < S) are dropped on arrival. The input only inserts (the
//! binder refuses an input that can delete rows); a retraction is an internal error.
//!
//! Determinism: a HyperLogLog is a function of the set of hashed values, a t-digest and a
//! Misra-Gries summary of the multisets of values of each instant, settled once per instant
//! after its rows (see [`crate::sketch`]); a window merges its slices in slice order. So the output does not depend
//! on batching, on the arrival order within the watermark bound, or on the worker a group is
//! on. State: per slice and group, its row count and partials; the current output; the
//! instants still to evaluate. Checkpointed as the sections `sketch_aggregate` (`started`),
//! `sketch_aggregate.slices` (`slice` Int64, `key` Binary, `rows` Int64, and per aggregate `a`
//! a Binary `p{a}`: a count as 8 bytes little-endian, a sketch as [`Hll::to_bytes`],
//! [`Quantiles::to_bytes`] or [`TopK::to_bytes`]), `sketch_aggregate.current` (`key`, per
//! aggregate `v{a}`, Int64 for a count, Float64 for a percentile, Binary for a top-k list) and
//! `sketch_aggregate.pending` (`t` Int64), each sorted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, ListArray, StructArray,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::HashMap;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{AggFunc, SketchWindow};

use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::aggregate::AggSpec;
use crate::ops::batch_of;
use crate::route::{KeyRoute, Placement};
use crate::row::{EncodedRows, RowCodec};
use crate::sketch::hll::Hll;
use crate::sketch::quantile::Quantiles;
use crate::sketch::topk::TopK;
use crate::sketch::value_hash;
use crate::state::{
    binary_col, bool_col, i64_col, invalid, opt_f64_col, signature, StateReader, StateWriter,
};

/// One aggregate's partial state over one slice of one group.
#[derive(Debug, Clone)]
enum Partial {
    /// COUNT(*), COUNT(x).
    Count(i64),
    /// APPROX_COUNT_DISTINCT.
    Hll(Hll),
    /// APPROX_PERCENTILE, APPROX_MEDIAN: the sketch and the quantile p asked for.
    Quantiles(Quantiles, f64),
    /// APPROX_TOP_K: the summary and the k asked for.
    TopK(TopK, usize),
}

/// One aggregate's value in the output.
#[derive(Debug, Clone)]
enum Value {
    /// COUNT, APPROX_COUNT_DISTINCT.
    Int(i64),
    /// A percentile (NULL over no values).
    Float(Option<f64>),
    /// APPROX_TOP_K: (value's row encoding, count), most frequent first.
    Top(Vec<(Vec<u8>, i64)>),
}

/// The type of an aggregate's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Top,
}

impl PartialEq for Value {
    /// Equal when the same bits (an output row changes exactly when its value does).
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.map(f64::to_bits) == b.map(f64::to_bits),
            (Value::Top(a), Value::Top(b)) => a == b,
            _ => false,
        }
    }
}

impl Partial {
    /// The merge of `parts` (one aggregate's partials over a window's slices, in slice order).
    fn merge_all(parts: &[&Partial]) -> Result<Partial> {
        let mixed = || WeirError::internal("merging partials of different aggregates");
        let Some(first) = parts.first() else {
            return Err(WeirError::internal("merging no partials"));
        };
        Ok(match first {
            Partial::Count(_) => {
                let mut n = 0;
                for p in parts {
                    let Partial::Count(c) = p else { return Err(mixed()) };
                    n += c;
                }
                Partial::Count(n)
            }
            Partial::Hll(h) => {
                let mut out = h.clone();
                for p in &parts[1..] {
                    let Partial::Hll(h) = p else { return Err(mixed()) };
                    out.merge(h)?;
                }
                Partial::Hll(out)
            }
            Partial::Quantiles(q, p) => {
                let sketches = parts
                    .iter()
                    .map(|p| match p {
                        Partial::Quantiles(q, _) => Ok(q),
                        _ => Err(mixed()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Partial::Quantiles(Quantiles::merge_all(q.compression(), sketches), *p)
            }
            Partial::TopK(t, k) => {
                Partial::TopK(TopK::merge_all(t.capacity() as u32, &Partial::summaries(parts)?), *k)
            }
        })
    }

    /// The top-k summaries of `parts` (one APPROX_TOP_K's partials).
    fn summaries<'a>(parts: &[&'a Partial]) -> Result<Vec<&'a TopK>> {
        parts
            .iter()
            .map(|p| match p {
                Partial::TopK(t, _) => Ok(t),
                _ => Err(WeirError::internal("merging partials of different aggregates")),
            })
            .collect()
    }

    /// The value over a window of `parts` (one aggregate's partials over its slices, in slice
    /// order): the merge's value, but a top-k list is taken from sealed summaries without
    /// building their merge ([`TopK::top_of_sum`]).
    fn window_value(parts: &[&Partial]) -> Result<Value> {
        if let Some(Partial::TopK(t, k)) = parts.first() {
            let summaries = Partial::summaries(parts)?;
            return Ok(Value::Top(TopK::top_of_sum(t.capacity() as u32, &summaries, *k)));
        }
        Ok(Partial::merge_all(parts)?.value())
    }

    fn value(&self) -> Value {
        match self {
            Partial::Count(n) => Value::Int(*n),
            Partial::Hll(h) => Value::Int(h.estimate() as i64),
            Partial::Quantiles(q, p) => Value::Float(q.estimate(*p)),
            Partial::TopK(t, k) => Value::Top(t.top(*k)),
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        match self {
            Partial::Count(n) => n.to_le_bytes().to_vec(),
            Partial::Hll(h) => h.to_bytes(),
            Partial::Quantiles(q, _) => q.to_bytes(),
            Partial::TopK(t, _) => t.to_bytes(),
        }
    }
}

/// A group's partial states over one slice (or, merged, over a window).
#[derive(Debug, Clone)]
struct Partials {
    rows: i64,
    accs: Vec<Partial>,
}

/// The sketch's own memory (a count holds none).
impl HeapSize for Partial {
    fn heap_bytes(&self) -> usize {
        match self {
            Partial::Count(_) => 0,
            Partial::Hll(h) => h.heap_bytes(),
            Partial::Quantiles(q, _) => q.heap_bytes(),
            Partial::TopK(t, _) => t.heap_bytes(),
        }
    }
}

impl HeapSize for Partials {
    fn heap_bytes(&self) -> usize {
        self.accs.heap_bytes()
    }
}

/// A top-k list's values and counts (a number holds none).
impl HeapSize for Value {
    fn heap_bytes(&self) -> usize {
        match self {
            Value::Int(_) | Value::Float(_) => 0,
            Value::Top(top) => top.heap_bytes(),
        }
    }
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
    current: BTreeMap<Vec<u8>, Vec<Value>>,
    /// Instants after the last evaluated one at which the window's slices change.
    pending: BTreeSet<Time>,
    started: bool,
    /// Whether an aggregate is `APPROX_TOP_K` (whose slices are sealed once complete).
    has_top_k: bool,
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
        let has_top_k = aggs.iter().any(|a| matches!(a.func, AggFunc::ApproxTopK { .. }));
        Ok(SketchAggregate {
            has_top_k,
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
                AggFunc::ApproxPercentile { p, compression, .. } => {
                    Partial::Quantiles(Quantiles::new(compression), p.get())
                }
                AggFunc::ApproxTopK { k, capacity } => {
                    Partial::TopK(TopK::new(capacity), k as usize)
                }
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

    /// Applies the rows `range` of `d` (all at one instant, so in one slice) to their slice,
    /// then settles the t-digests they reached (see [`Quantiles::settle`]). Adds the touched
    /// group keys to `touched` (for an unbounded window, where only they can change).
    fn apply(
        &mut self,
        d: &ChangeBatch,
        p: &Prepared,
        range: std::ops::Range<usize>,
        touched: &mut BTreeSet<Vec<u8>>,
    ) -> Result<()> {
        // The (slice, group) whose t-digests got values at this instant.
        let mut unsettled: BTreeSet<(i64, &[u8])> = BTreeSet::new();
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
                    (Partial::Count(n), Arg::None) => *n += diff,
                    (Partial::Count(n), Arg::Hashed(col, _)) => {
                        if !col.is_null(i) {
                            *n += diff;
                        }
                    }
                    (Partial::Hll(h), Arg::Hashed(col, rows)) => {
                        if !col.is_null(i) {
                            h.insert(value_hash(rows.get(i)));
                        }
                    }
                    (Partial::TopK(t, _), Arg::Hashed(col, rows)) => {
                        if !col.is_null(i) {
                            t.insert(rows.get(i), diff);
                            unsettled.insert((idx, key));
                        }
                    }
                    (Partial::Quantiles(q, _), Arg::Numbers(col)) => {
                        if !col.is_null(i) {
                            for _ in 0..diff {
                                q.insert(col.value(i));
                            }
                            unsettled.insert((idx, key));
                        }
                    }
                    (acc, _) => {
                        return Err(WeirError::internal(format!(
                            "a sketch aggregate's argument does not suit its partial {acc:?}"
                        )))
                    }
                }
            }
            if matches!(self.window, SketchWindow::Unbounded) && !touched.contains(key) {
                touched.insert(key.to_vec());
            }
        }
        for (idx, key) in unsettled {
            let group = self.slices.get_mut(&idx).and_then(|s| s.get_mut(key));
            let group = group.ok_or_else(|| WeirError::internal("settling a missing group"))?;
            for acc in &mut group.accs {
                match acc {
                    Partial::Quantiles(q, _) => q.settle(),
                    Partial::TopK(t, _) => t.settle(),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The values over the window current at `t`, by group (only `only`'s keys, when given),
    /// of the groups with rows in it.
    fn window_values(
        &self,
        t: Time,
        only: Option<&BTreeSet<Vec<u8>>>,
    ) -> Result<BTreeMap<Vec<u8>, Vec<Value>>> {
        let (lo, hi) = self.window_at(t);
        // Each group's partials over the window's slices, in slice order.
        let mut parts: BTreeMap<&[u8], Vec<&Partials>> = BTreeMap::new();
        for groups in self.slices.range(lo..hi).map(|(_, g)| g) {
            match only {
                Some(keys) => {
                    for k in keys {
                        if let Some(p) = groups.get(k) {
                            parts.entry(&k[..]).or_default().push(p);
                        }
                    }
                }
                None => {
                    for (k, p) in groups {
                        parts.entry(&k[..]).or_default().push(p);
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        for (k, ps) in parts {
            if ps.iter().map(|p| p.rows).sum::<i64>() <= 0 {
                continue;
            }
            let values = (0..self.aggs.len())
                .map(|a| Partial::window_value(&ps.iter().map(|p| &p.accs[a]).collect::<Vec<_>>()))
                .collect::<Result<_>>()?;
            out.insert(k.to_vec(), values);
        }
        Ok(out)
    }

    /// Seals the top-k summaries of the slices of the window current at `t`: every row of
    /// them has come (they end at or before `t`), so they take no more values, and a sealed
    /// summary holds its counts sorted in about half a map's memory.
    fn seal_window(&mut self, t: Time) {
        if matches!(self.window, SketchWindow::Unbounded) {
            return;
        }
        let (lo, hi) = self.window_at(t);
        for groups in self.slices.range_mut(lo..hi).map(|(_, g)| g) {
            for p in groups.values_mut() {
                for acc in &mut p.accs {
                    if let Partial::TopK(t, _) = acc {
                        t.seal();
                    }
                }
            }
        }
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
        if self.has_top_k {
            self.seal_window(t);
        }
        let mut new = self.window_values(t, only)?;
        let scalar = self.keys.is_empty();
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
                (Some(e), _) if matches!(spec.func, AggFunc::ApproxPercentile { .. }) => {
                    let col = e.eval_as(&d.data, &DataType::Float64)?;
                    let col =
                        col.as_any().downcast_ref::<Float64Array>().cloned().ok_or_else(|| {
                            WeirError::internal("a percentile's argument is not a DOUBLE")
                        })?;
                    Arg::Numbers(col)
                }
                (Some(e), Some(codec)) => {
                    let col = e.eval_as(&d.data, &spec.arg_type)?;
                    let rows = codec.encode(std::slice::from_ref(&col), d.len())?;
                    Arg::Hashed(col, rows)
                }
                _ => Arg::None,
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
            AggFunc::ApproxPercentile { p, compression, .. } => {
                Ok(Partial::Quantiles(Quantiles::from_bytes(compression, b)?, p.get()))
            }
            AggFunc::ApproxTopK { k, capacity } => {
                Ok(Partial::TopK(TopK::from_bytes(capacity, b)?, k as usize))
            }
            _ => {
                let w: [u8; 8] = b
                    .try_into()
                    .map_err(|_| invalid("section 'sketch_aggregate.slices': a bad count"))?;
                Ok(Partial::Count(i64::from_le_bytes(w)))
            }
        }
    }

    /// The type of aggregate `a`'s values.
    fn kind(&self, a: usize) -> Kind {
        match self.aggs[a].func {
            AggFunc::ApproxPercentile { .. } => Kind::Float,
            AggFunc::ApproxTopK { .. } => Kind::Top,
            _ => Kind::Int,
        }
    }

    /// Aggregate `a`'s values as an output column.
    fn column(&self, a: usize, vals: &[Value]) -> Result<ArrayRef> {
        let wrong = || WeirError::internal("a sketch aggregate's value of the wrong type");
        Ok(match self.kind(a) {
            Kind::Float => {
                let v: Vec<Option<f64>> = vals
                    .iter()
                    .map(|v| match v {
                        Value::Float(f) => Ok(*f),
                        _ => Err(wrong()),
                    })
                    .collect::<Result<_>>()?;
                opt_f64_col(v)
            }
            Kind::Int => {
                let v: Vec<i64> = vals
                    .iter()
                    .map(|v| match v {
                        Value::Int(n) => Ok(*n),
                        _ => Err(wrong()),
                    })
                    .collect::<Result<_>>()?;
                Arc::new(Int64Array::from(v)) as ArrayRef
            }
            Kind::Top => self.top_column(a, vals)?,
        })
    }

    /// APPROX_TOP_K's values as a list of `{value, count}` structs, of the type of the
    /// aggregate's output field.
    fn top_column(&self, a: usize, vals: &[Value]) -> Result<ArrayRef> {
        let wrong = || WeirError::internal("APPROX_TOP_K's output is not a list of structs");
        let field = self.schema.field(self.keys.len() + a);
        let DataType::List(item) = field.data_type() else { return Err(wrong()) };
        let DataType::Struct(fields) = item.data_type() else { return Err(wrong()) };
        let [vf, _] = &fields.iter().collect::<Vec<_>>()[..] else { return Err(wrong()) };
        let codec = self.value_codecs[a].as_ref().ok_or_else(wrong)?;
        let mut offsets = vec![0i32];
        let mut encoded: Vec<&[u8]> = Vec::new();
        let mut counts: Vec<i64> = Vec::new();
        for v in vals {
            let Value::Top(top) = v else { return Err(wrong()) };
            for (e, c) in top {
                encoded.push(e);
                counts.push(*c);
            }
            let end = i32::try_from(encoded.len()).map_err(|_| {
                WeirError::exec("APPROX_TOP_K: an output batch of over 2^31 values")
            })?;
            offsets.push(end);
        }
        let values = match codec.decode(encoded)?.pop() {
            Some(v) if v.data_type() == vf.data_type() => v,
            Some(v) => arrow::compute::cast(&v, vf.data_type())?,
            None => return Err(wrong()),
        };
        let counts = Arc::new(Int64Array::from(counts)) as ArrayRef;
        let structs = StructArray::try_new(fields.clone(), vec![values, counts], None)?;
        let list = ListArray::try_new(
            item.clone(),
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Arc::new(structs),
            None,
        )?;
        Ok(Arc::new(list))
    }

    /// Aggregate `a`'s values as they are checkpointed: as [`Self::column`], but APPROX_TOP_K's
    /// as Binary (per entry: the value's length, 4 bytes little-endian, its row encoding and its
    /// count, 8 bytes).
    fn saved_column(&self, a: usize, vals: &[Value]) -> Result<ArrayRef> {
        if self.kind(a) != Kind::Top {
            return self.column(a, vals);
        }
        let mut out = Vec::with_capacity(vals.len());
        for v in vals {
            let Value::Top(top) = v else {
                return Err(WeirError::internal("APPROX_TOP_K's value of the wrong type"));
            };
            let mut b = Vec::new();
            for (e, c) in top {
                b.extend_from_slice(&(e.len() as u32).to_le_bytes());
                b.extend_from_slice(e);
                b.extend_from_slice(&c.to_le_bytes());
            }
            out.push(b);
        }
        Ok(binary_col(out.iter().map(|b| &b[..])))
    }
}

/// Reads [`SketchAggregate::saved_column`]'s bytes of one APPROX_TOP_K value.
fn top_from_bytes(mut b: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
    let bad = || invalid("section 'sketch_aggregate.current': a bad APPROX_TOP_K value");
    let mut out = Vec::new();
    while !b.is_empty() {
        let (len, rest) = b.split_at_checked(4).ok_or_else(bad)?;
        let len = u32::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
        let (v, rest) = rest.split_at_checked(len).ok_or_else(bad)?;
        let (c, rest) = rest.split_at_checked(8).ok_or_else(bad)?;
        out.push((v.to_vec(), i64::from_le_bytes(c.try_into().map_err(|_| bad())?)));
        b = rest;
    }
    Ok(out)
}

/// An input batch evaluated for the partials.
struct Prepared {
    keys: EncodedRows,
    /// Per aggregate: its argument.
    values: Vec<Arg>,
    filters: Vec<Option<BooleanArray>>,
}

/// An aggregate's argument over an input batch.
enum Arg {
    /// COUNT(*).
    None,
    /// The argument and its row encoding (COUNT(x), APPROX_COUNT_DISTINCT).
    Hashed(ArrayRef, EncodedRows),
    /// The argument as numbers (a percentile).
    Numbers(Float64Array),
}

/// Output rows collected over a step.
#[derive(Debug, Default)]
struct Emitted {
    keys: Vec<Vec<u8>>,
    cols: Vec<Vec<Value>>,
    times: Vec<Time>,
    diffs: Vec<i64>,
}

impl Emitted {
    fn push(&mut self, key: &[u8], vals: &[Value], t: Time, diff: i64) {
        self.keys.push(key.to_vec());
        self.cols.resize_with(vals.len(), Vec::new);
        for (col, v) in self.cols.iter_mut().zip(vals) {
            col.push(v.clone());
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
        for (a, vals) in out.cols.iter().enumerate() {
            cols.push(self.column(a, vals)?);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(data, out.times, out.diffs))
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.pending.first().copied()
    }

    /// Per slice and group, its partials; the current output; the instants still to
    /// evaluate.
    fn state_bytes(&self) -> usize {
        self.slices.heap_bytes() + self.current.heap_bytes() + self.pending.heap_bytes()
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
            let vals: Vec<Value> = self.current.values().map(|v| v[a].clone()).collect();
            cols.push((name, self.saved_column(a, &vals)?));
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
        let vals: Vec<Vec<Value>> = (0..self.aggs.len())
            .map(|a| {
                let name = format!("v{a}");
                Ok(match self.kind(a) {
                    Kind::Float => s.opt_f64s(&name)?.into_iter().map(Value::Float).collect(),
                    Kind::Int => s.i64s(&name)?.into_iter().map(Value::Int).collect(),
                    Kind::Top => s
                        .binary(&name)?
                        .into_iter()
                        .map(|b| top_from_bytes(b).map(Value::Top))
                        .collect::<Result<_>>()?,
                })
            })
            .collect::<Result<_>>()?;
        if vals.iter().any(|v| v.len() != keys.len()) {
            return Err(invalid("section 'sketch_aggregate.current': columns of unequal lengths"));
        }
        let mut current = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            current.insert(k.to_vec(), vals.iter().map(|v| v[i].clone()).collect());
        }
        let s = r.take("sketch_aggregate.pending", &sig)?;
        self.pending = s.i64s("t")?.into_iter().collect();
        self.slices = slices;
        self.current = current;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{kv, kv_schema, state_bytes_at};

    /// APPROX_COUNT_DISTINCT(v) (2^8 registers) and COUNT(*) per k over `window`.
    fn distinct_per_key(window: SketchWindow) -> SketchAggregate {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let column = |name: &str| ScalarExpr::compile(&col(name), &df).unwrap();
        let aggs = vec![
            AggSpec::plain(
                AggFunc::ApproxCountDistinct { precision: 8 },
                Some(column("v")),
                DataType::Int64,
                false,
            ),
            AggSpec::plain(AggFunc::CountStar, None, DataType::Null, false),
        ];
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("d", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
        ]));
        SketchAggregate::new(window, vec![column("k")], vec![DataType::Utf8], aggs, schema).unwrap()
    }

    /// The figure grows with the slices' sketches and the output, and falls to nothing once
    /// the window has passed every slice.
    #[test]
    fn state_bytes_follow_the_slices_in_the_window() {
        // [RANGE 4 SLIDE 2]: slices of 2 ticks; [0, 2) is in the windows current at 1 and 3,
        // [2, 4) at 3 and 5.
        let mut op = distinct_per_key(SketchWindow::Slide { range: 4, slide: 2 });
        assert_eq!(op.state_bytes(), 0);
        let input = vec![kv(1, "+1 a 1, +1 b 2"), kv(2, "+1 a 3, +1 a 4, +1 c 5")];
        let [one, two, end] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert!(op.slices.is_empty() && op.current.is_empty() && op.pending.is_empty());
        assert_eq!(end, 0);
    }
}
