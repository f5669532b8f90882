//! Grouped aggregation: γ_{keys; aggs}(R), with retraction.
//!
//! Delta semantics: for each group g touched by ΔR at τ, the output changes by
//! −(g, aggs_old) +(g, aggs_new), and by nothing when the values are equal. A group appears
//! when its row count becomes positive and disappears when it returns to zero. Without GROUP BY
//! the single row always exists from the query's first instant on (`COUNT(*)` = 0, `SUM` =
//! NULL over an empty relation, as SQL says). Output rows are sorted by group key, each group's
//! old row before its new one.
//!
//! Retraction: COUNT, SUM and AVG are invertible and retract in O(1) (floating-point sums may
//! differ from a fresh sum in the last digits). MIN and MAX keep an ordered multiset of values
//! (value -> count), so deleting any value, not only the oldest, is exact: over integer types
//! (up to 32-bit unsigned), timestamps, Date64 and Float64 the values are kept as `i64` order
//! keys (a float by its total order, the order of its row encoding), over any other type as
//! their row encoding. DISTINCT variants keep a value -> count map and feed the inner aggregate
//! only when a value appears or disappears. State: per group, its row count and one accumulator
//! per aggregate.
//!
//! Groups live in a slab (`slots`) indexed by their encoded key; a slot whose group disappears
//! is reused by the next new group. Each instant marks the groups it touches with its number,
//! so a group's old output is taken once, at its first change in the instant. Output values are kept
//! typed (not as `ScalarValue`s) and built into Arrow arrays once per call.
//!
//! Checkpointed as sections (see [`Aggregate::save_own`]): `aggregate` (one row: `started`),
//! `aggregate.groups` (per group sorted by key: `key` Binary, `rows` Int64, and per aggregate
//! `a` the columns `n{a}` Int64 (COUNT's count, SUM's and AVG's non-NULL count), `isum{a}`
//! (an integer or decimal SUM, 16-byte Binary), `fsum{a}` (a float SUM or AVG's sum, Float64)),
//! `aggregate.values` (MIN/MAX multisets, each value row-encoded whatever its in-memory form,
//! in value order) and `aggregate.seen` (DISTINCT value counts), both as rows of `group` (index
//! into the groups), `agg`, `value` Binary and `count` Int64.
//!
//! A step is evaluated run by run, one instant or a span alike: each run of input changes
//! sharing an instant is applied on its own, exactly as if that instant were evaluated alone;
//! the step's input is encoded once and its output built once. A scalar aggregate's first
//! instant is the step's first (`lo`), even if no change is stamped there.

use std::collections::BTreeMap;
use std::ops::Range;

use datafusion_common::HashMap;

use arrow::array::{Array, ArrayRef, Decimal128Array, Float64Array, Int64Array, UInt32Array};
use arrow::compute::cast_with_options;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::format::DEFAULT_CAST_OPTIONS;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::AggFunc;

use crate::expr::ScalarExpr;
use crate::operator::{take_inputs, time_runs, Operator, Step};
use crate::ops::batch_of;
use crate::row::{EncodedRows, RowBytes, RowCodec};
use crate::state::{
    binary_col, bool_col, i64_col, invalid, nonzero, opt_f64_col, opt_i128_col, opt_i64_col,
    signature, StateReader, StateWriter,
};
use minmax::KeySet;

mod minmax;

/// An encoded group key, inline up to 24 bytes (a few numbers): a probe that finds a
/// candidate compares keys without a trip to the heap.
type GroupKey = smallvec::SmallVec<[u8; 24]>;

/// One aggregate of the operator, compiled.
#[derive(Debug)]
pub struct AggSpec {
    pub func: AggFunc,
    pub arg: Option<ScalarExpr>,
    /// The argument's type (its values are cast to the accumulator's working type).
    pub arg_type: DataType,
    pub distinct: bool,
}

#[derive(Debug, Clone)]
enum Sum {
    Int(i128),
    Float(f64),
    Dec(i128),
}

#[derive(Debug, Clone)]
enum Acc {
    Count(i64),
    Sum {
        sum: Sum,
        n: i64,
    },
    Avg {
        sum: f64,
        n: i64,
    },
    /// MIN/MAX over values kept as their row encoding.
    MinMax {
        values: BTreeMap<RowBytes, i64>,
        max: bool,
    },
    /// MIN/MAX over values kept as `i64` order keys (see [`Kind::KeyInt`], [`Kind::KeyFloat`]).
    MinMaxKey {
        values: KeySet,
        max: bool,
    },
}

#[derive(Debug, Clone)]
struct AccState {
    acc: Acc,
    /// For DISTINCT: multiplicity of each value.
    seen: Option<HashMap<RowBytes, i64>>,
}

#[derive(Debug, Clone)]
struct Group {
    /// The encoded group key (empty while the slot is free).
    key: Vec<u8>,
    rows: i64,
    accs: Vec<AccState>,
    /// The number of the instant that last touched the group (0: none yet).
    mark: u64,
}

/// How an aggregate's values are kept and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// COUNT, integer SUM: an `i64` output.
    Int,
    /// Float SUM, AVG: an `f64` output.
    Float,
    /// Decimal SUM: an `i128` output of this precision and scale.
    Dec(u8, i8),
    /// MIN/MAX over an integer, timestamp or Date64 type: the value as `i64` (the type's
    /// order is the integers').
    KeyInt,
    /// MIN/MAX over Float64: the value's total-order key (see [`f64_key`]).
    KeyFloat,
    /// MIN/MAX over any other type: the value's row encoding.
    Bytes,
}

impl Kind {
    fn of(spec: &AggSpec) -> Kind {
        match spec.func {
            AggFunc::CountStar | AggFunc::Count => Kind::Int,
            AggFunc::Avg => Kind::Float,
            AggFunc::Sum => match &spec.arg_type {
                DataType::Float16 | DataType::Float32 | DataType::Float64 => Kind::Float,
                DataType::Decimal128(p, s) => Kind::Dec(*p, *s),
                _ => Kind::Int,
            },
            AggFunc::Min | AggFunc::Max => match &spec.arg_type {
                DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32
                | DataType::Timestamp(..)
                | DataType::Date64 => Kind::KeyInt,
                DataType::Float64 => Kind::KeyFloat,
                _ => Kind::Bytes,
            },
        }
    }
}

/// The `i64` whose order is the total order of `f` (−NaN < −∞ < … < −0 < +0 < … < +∞ < NaN),
/// which is also the order of the row encoding of floats. An involution on the bit patterns:
/// [`key_f64`] inverts it.
fn f64_key(f: f64) -> i64 {
    let b = f.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

fn key_f64(k: i64) -> f64 {
    f64::from_bits((k ^ (((k >> 63) as u64) >> 1) as i64) as u64)
}

/// One output value of an aggregate, typed (floats by their bits, so equality is bitwise as
/// for `ScalarValue`; decimals as two halves, which keeps the enum at 24 bytes).
#[derive(Debug, Clone, PartialEq)]
enum Out {
    Null,
    Int(i64),
    Float(u64),
    Dec(u64, u64),
    Bytes(RowBytes),
}

impl Out {
    fn dec(v: i128) -> Out {
        Out::Dec(v as u64, (v >> 64) as u64)
    }
}

/// An argument column viewed in the accumulator's working type.
enum ArgView {
    None,
    Int(Int64Array),
    Float(Float64Array),
    Dec(Decimal128Array),
    /// Only the encoded value is used (MIN/MAX over other types, COUNT).
    Any(ArrayRef),
}

impl ArgView {
    fn is_null(&self, i: usize) -> bool {
        match self {
            ArgView::None => false,
            ArgView::Int(a) => a.is_null(i),
            ArgView::Float(a) => a.is_null(i),
            ArgView::Dec(a) => a.is_null(i),
            ArgView::Any(a) => a.is_null(i),
        }
    }
}

/// An input batch evaluated for the accumulators, once per call.
struct Prepared {
    /// The encoded group key of each row.
    keys: EncodedRows,
    /// Per aggregate: its argument in the working type.
    views: Vec<ArgView>,
    /// Per aggregate: its argument row-encoded, where needed (MIN/MAX kept as bytes, DISTINCT).
    values: Vec<Option<EncodedRows>>,
    /// The whole rows encoded, when floating-point sums fix the apply order.
    rows: Option<EncodedRows>,
}

/// Output rows collected over a call: keys as concatenated bytes, values column by column.
/// Kept between calls for its allocations.
#[derive(Debug, Default)]
struct Emitted {
    key_bytes: Vec<u8>,
    key_ends: Vec<usize>,
    cols: Vec<Vec<Out>>,
    times: Vec<Time>,
    diffs: Vec<i64>,
}

impl Emitted {
    /// Empties the buffers for `aggs` aggregates, keeping their capacity (`times` and
    /// `diffs` are handed over with each batch: they get the last batch's length).
    fn clear(&mut self, aggs: usize) {
        self.key_bytes.clear();
        self.key_ends.clear();
        self.cols.resize_with(aggs, Vec::new);
        self.cols.iter_mut().for_each(Vec::clear);
        self.times.clear();
        self.diffs.clear();
    }

    fn push(&mut self, key: &[u8], vals: &[Out], t: Time, diff: i64) {
        self.key_bytes.extend_from_slice(key);
        self.key_ends.push(self.key_bytes.len());
        for (col, v) in self.cols.iter_mut().zip(vals) {
            col.push(v.clone());
        }
        self.times.push(t);
        self.diffs.push(diff);
    }
}

/// A group touched by an instant: its key's [`sort_prefix`], its slot, and where its old output
/// is (None: it did not exist).
type Touched = (u128, u32, Option<u32>);

/// The first 16 bytes of `b`, zero-padded, as a big-endian number: comparing prefixes, then
/// (when equal) the whole byte strings, orders byte strings as comparing them does, with one
/// integer comparison for most pairs.
fn sort_prefix(b: &[u8]) -> u128 {
    let mut p = [0u8; 16];
    let n = b.len().min(16);
    p[..n].copy_from_slice(&b[..n]);
    u128::from_be_bytes(p)
}

/// Casts as `ScalarValue::cast_to` does (an error, not NULL, for a value that does not fit).
fn cast_to(a: ArrayRef, ty: &DataType) -> Result<ArrayRef> {
    if a.data_type() == ty {
        Ok(a)
    } else {
        Ok(cast_with_options(&a, ty, &DEFAULT_CAST_OPTIONS)?)
    }
}

#[derive(Debug)]
pub struct Aggregate {
    keys: Vec<ScalarExpr>,
    key_codec: RowCodec,
    aggs: Vec<AggSpec>,
    kinds: Vec<Kind>,
    /// Per aggregate: codec of its argument (MIN/MAX ordering, DISTINCT identity).
    value_codecs: Vec<Option<RowCodec>>,
    /// Whether a floating-point sum is kept (see [`Aggregate::apply_order`]).
    float_order: bool,
    schema: SchemaRef,
    /// The groups, by slot; free slots are listed in `free`.
    slots: Vec<Group>,
    free: Vec<u32>,
    /// The slot of each existing group, by encoded key.
    index: HashMap<GroupKey, u32>,
    /// The number of instants applied (marks groups touched by the current one).
    epoch: u64,
    started: bool,
    /// Scratch, kept for its allocations: the groups touched by the current instant (the
    /// [`sort_prefix`] of the key, the slot) with the
    /// offset of their old output in `old` (None: the group did not exist), and a new output.
    touched: Vec<Touched>,
    old: Vec<Out>,
    new: Vec<Out>,
    emitted: Emitted,
}

impl Aggregate {
    pub fn new(
        keys: Vec<ScalarExpr>,
        key_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let value_codecs = aggs
            .iter()
            .map(|a| match a.arg {
                Some(_) => RowCodec::new(vec![a.arg_type.clone()]).map(Some),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let float_order = aggs.iter().any(|s| {
            s.func == AggFunc::Avg
                || (s.func == AggFunc::Sum
                    && matches!(
                        s.arg_type,
                        DataType::Float16 | DataType::Float32 | DataType::Float64
                    ))
        });
        Ok(Aggregate {
            keys,
            key_codec: RowCodec::new(key_types)?,
            kinds: aggs.iter().map(Kind::of).collect(),
            aggs,
            value_codecs,
            float_order,
            schema,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            epoch: 0,
            started: false,
            touched: Vec::new(),
            old: Vec::new(),
            new: Vec::new(),
            emitted: Emitted::default(),
        })
    }

    fn fresh_acc(spec: &AggSpec, kind: Kind) -> AccState {
        let max = spec.func == AggFunc::Max;
        let acc = match kind {
            _ if matches!(spec.func, AggFunc::CountStar | AggFunc::Count) => Acc::Count(0),
            _ if spec.func == AggFunc::Avg => Acc::Avg { sum: 0.0, n: 0 },
            Kind::Int => Acc::Sum { sum: Sum::Int(0), n: 0 },
            Kind::Float => Acc::Sum { sum: Sum::Float(0.0), n: 0 },
            Kind::Dec(..) => Acc::Sum { sum: Sum::Dec(0), n: 0 },
            Kind::KeyInt | Kind::KeyFloat => Acc::MinMaxKey { values: KeySet::new(), max },
            Kind::Bytes => Acc::MinMax { values: BTreeMap::new(), max },
        };
        AccState { acc, seen: spec.distinct.then(HashMap::new) }
    }

    fn new_group(&self, key: &[u8]) -> Group {
        let accs = self.aggs.iter().zip(&self.kinds).map(|(a, k)| Self::fresh_acc(a, *k)).collect();
        Group { key: key.to_vec(), rows: 0, accs, mark: 0 }
    }

    /// Puts a new, empty group with `key` into a slot and indexes it.
    fn alloc(&mut self, key: &[u8]) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                let g = &mut self.slots[id as usize];
                g.key.extend_from_slice(key);
                id
            }
            None => {
                let g = self.new_group(key);
                self.slots.push(g);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(GroupKey::from_slice(key), id);
        id
    }

    /// Removes the group in slot `id`, leaving the slot empty for reuse.
    fn release(&mut self, id: u32) {
        let g = &mut self.slots[id as usize];
        self.index.remove(&g.key[..]);
        g.key.clear();
        g.rows = 0;
        g.mark = 0;
        for (st, (spec, kind)) in g.accs.iter_mut().zip(self.aggs.iter().zip(&self.kinds)) {
            *st = Self::fresh_acc(spec, *kind);
        }
        self.free.push(id);
    }

    fn view(spec: &AggSpec, kind: Kind, col: Option<&ArrayRef>) -> Result<ArgView> {
        let Some(col) = col else { return Ok(ArgView::None) };
        let float = |a: &dyn Array| -> Result<ArgView> {
            let a = arrow::compute::cast(a, &DataType::Float64)?;
            let a = a.as_any().downcast_ref::<Float64Array>().cloned();
            Ok(ArgView::Float(a.ok_or_else(|| WeirError::internal("float view"))?))
        };
        let int = |a: &dyn Array| -> Result<Int64Array> {
            let a = arrow::compute::cast(a, &DataType::Int64)?;
            let a = a.as_any().downcast_ref::<Int64Array>().cloned();
            a.ok_or_else(|| WeirError::internal("int view"))
        };
        Ok(match spec.func {
            AggFunc::Sum | AggFunc::Avg => match col.data_type() {
                DataType::Decimal128(..) if spec.func == AggFunc::Sum => {
                    let a = col.as_any().downcast_ref::<Decimal128Array>().cloned();
                    ArgView::Dec(a.ok_or_else(|| WeirError::internal("decimal view"))?)
                }
                DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Decimal128(..) => float(col.as_ref())?,
                t if t.is_integer() || *t == DataType::Null || *t == DataType::Boolean => {
                    let a = int(col.as_ref())?;
                    if spec.func == AggFunc::Avg {
                        float(&a)?
                    } else {
                        ArgView::Int(a)
                    }
                }
                t => {
                    return Err(WeirError::exec(format!("{} over {t} is not supported", spec.func)))
                }
            },
            AggFunc::Min | AggFunc::Max if kind == Kind::KeyInt => ArgView::Int(int(col.as_ref())?),
            AggFunc::Min | AggFunc::Max if kind == Kind::KeyFloat => float(col.as_ref())?,
            _ => ArgView::Any(col.clone()),
        })
    }

    /// Applies value i of `view` with multiplicity `diff` to an accumulator.
    fn update(
        acc: &mut Acc,
        view: &ArgView,
        i: usize,
        value: Option<&[u8]>,
        diff: i64,
    ) -> Result<()> {
        match acc {
            Acc::Count(n) => *n += diff,
            Acc::Sum { sum, n } => {
                *n += diff;
                match (sum, view) {
                    (Sum::Int(s), ArgView::Int(a)) => *s += a.value(i) as i128 * diff as i128,
                    (Sum::Float(s), ArgView::Float(a)) => *s += a.value(i) * diff as f64,
                    (Sum::Dec(s), ArgView::Dec(a)) => *s += a.value(i) * diff as i128,
                    _ => return Err(WeirError::internal("sum accumulator/view mismatch")),
                }
            }
            Acc::Avg { sum, n } => {
                *n += diff;
                match view {
                    ArgView::Float(a) => *sum += a.value(i) * diff as f64,
                    _ => return Err(WeirError::internal("avg view mismatch")),
                }
            }
            Acc::MinMax { values, .. } => {
                let v = value.ok_or_else(|| WeirError::internal("min/max without value"))?;
                match values.get_mut(v) {
                    Some(c) => {
                        *c += diff;
                        if *c == 0 {
                            values.remove(v);
                        }
                    }
                    None if diff != 0 => {
                        values.insert(v.into(), diff);
                    }
                    None => {}
                }
            }
            Acc::MinMaxKey { values, max } => {
                let k = match view {
                    ArgView::Int(a) => a.value(i),
                    ArgView::Float(a) => f64_key(a.value(i)),
                    _ => return Err(WeirError::internal("min/max key view mismatch")),
                };
                values.update(k, diff, *max);
            }
        }
        Ok(())
    }

    /// Appends the current output values of a group to `out`, one per aggregate.
    fn output_into(aggs: &[AggSpec], g: &Group, out: &mut Vec<Out>) -> Result<()> {
        for (spec, st) in aggs.iter().zip(&g.accs) {
            let v = match &st.acc {
                Acc::Count(n) => {
                    if spec.func == AggFunc::CountStar {
                        Out::Int(g.rows)
                    } else {
                        Out::Int(*n)
                    }
                }
                Acc::Sum { n, .. } | Acc::Avg { n, .. } if *n <= 0 => Out::Null,
                Acc::Sum { sum, .. } => match sum {
                    Sum::Int(s) => Out::Int(
                        i64::try_from(*s)
                            .map_err(|_| WeirError::exec("integer overflow in SUM"))?,
                    ),
                    Sum::Float(s) => Out::Float(s.to_bits()),
                    Sum::Dec(s) => Out::dec(*s),
                },
                Acc::Avg { sum, n } => Out::Float((*sum / *n as f64).to_bits()),
                Acc::MinMax { values, max } => {
                    let v = if *max { values.keys().next_back() } else { values.keys().next() };
                    v.map_or(Out::Null, |v| Out::Bytes(v.clone()))
                }
                Acc::MinMaxKey { values, max } => values.extreme(*max).map_or(Out::Null, Out::Int),
            };
            out.push(v);
        }
        Ok(())
    }

    /// The output column of aggregate `a` from its values.
    fn finish_column(&self, a: usize, vals: &[Out]) -> Result<ArrayRef> {
        let spec = &self.aggs[a];
        let ints = || {
            Int64Array::from_iter(vals.iter().map(|v| match v {
                Out::Int(x) => Some(*x),
                _ => None,
            }))
        };
        let arr: ArrayRef = match self.kinds[a] {
            Kind::Int => std::sync::Arc::new(ints()),
            Kind::Float => {
                std::sync::Arc::new(Float64Array::from_iter(vals.iter().map(|v| match v {
                    Out::Float(b) => Some(f64::from_bits(*b)),
                    _ => None,
                })))
            }
            Kind::Dec(p, s) => std::sync::Arc::new(
                Decimal128Array::from_iter(vals.iter().map(|v| match v {
                    Out::Dec(lo, hi) => Some(((*hi as i128) << 64) | *lo as i128),
                    _ => None,
                }))
                .with_precision_and_scale(p, s)?,
            ),
            Kind::KeyInt => cast_to(std::sync::Arc::new(ints()), &spec.arg_type)?,
            Kind::KeyFloat => {
                std::sync::Arc::new(Float64Array::from_iter(vals.iter().map(|v| match v {
                    Out::Int(k) => Some(key_f64(*k)),
                    _ => None,
                })))
            }
            Kind::Bytes => {
                let codec = self.value_codecs[a]
                    .as_ref()
                    .ok_or_else(|| WeirError::internal("min/max without codec"))?;
                let mut present: Vec<&[u8]> = Vec::new();
                let mut idx: Vec<Option<u32>> = Vec::with_capacity(vals.len());
                for v in vals {
                    match v {
                        Out::Bytes(b) => {
                            idx.push(Some(present.len() as u32));
                            present.push(b);
                        }
                        _ => idx.push(None),
                    }
                }
                if present.is_empty() {
                    arrow::array::new_null_array(&spec.arg_type, vals.len())
                } else {
                    let decoded = codec
                        .decode(present)?
                        .pop()
                        .ok_or_else(|| WeirError::internal("min/max decode"))?;
                    arrow::compute::take(&decoded, &UInt32Array::from(idx), None)?
                }
            }
        };
        cast_to(arr, self.schema.field(self.keys.len() + a).data_type())
    }

    fn exists(&self, g: &Group) -> bool {
        self.keys.is_empty() || g.rows > 0
    }
}

impl Operator for Aggregate {
    /// Each run of equal time in the step's changes is applied on its own (see the module
    /// docs). An instant without changes changes no group, so it takes no run, except the
    /// query's first: there the scalar aggregate's row appears.
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let mut runs = Vec::new();
        // The first instant of the query is `lo`; the scalar aggregate's row exists from it.
        if !self.started && d.times.first() != Some(&step.lo) {
            runs.push((step.lo, 0..0));
        }
        let mut start = 0;
        for end in time_runs(&d.times) {
            runs.push((d.times[start], start..end));
            start = end;
        }
        self.process(&d, &runs)
    }

    /// State: see [`Aggregate::save_own`].
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        self.save_own(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.restore_own(r)
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }
}

impl Aggregate {
    fn signature(&self) -> String {
        let aggs: Vec<_> = self.aggs.iter().map(|a| (a.func, a.distinct, &a.arg_type)).collect();
        signature("aggregate", &self.schema, (self.keys.len(), aggs))
    }

    /// Row-encodes MIN/MAX order keys of aggregate `a` (as the argument type's values).
    fn encode_keys(&self, a: usize, keys: Vec<i64>) -> Result<EncodedRows> {
        let codec =
            self.value_codecs[a].as_ref().ok_or_else(|| WeirError::internal("min/max codec"))?;
        let n = keys.len();
        let arr: ArrayRef = match self.kinds[a] {
            Kind::KeyFloat => {
                std::sync::Arc::new(Float64Array::from_iter_values(keys.into_iter().map(key_f64)))
            }
            _ => std::sync::Arc::new(Int64Array::from(keys)),
        };
        codec.encode(&[cast_to(arr, &self.aggs[a].arg_type)?], n)
    }

    /// Decodes row-encoded values of aggregate `a` into MIN/MAX order keys; errors on bytes
    /// that are not one non-NULL value of the argument's type.
    fn decode_keys(&self, a: usize, rows: &[&[u8]]) -> Result<Vec<i64>> {
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let bad = || invalid("section 'aggregate.values': a value does not fit its type");
        let codec =
            self.value_codecs[a].as_ref().ok_or_else(|| WeirError::internal("min/max codec"))?;
        let width = self.aggs[a].arg_type.primitive_width().ok_or_else(bad)?;
        if rows.iter().any(|r| r.len() != 1 + width) {
            return Err(bad());
        }
        let col = codec.decode(rows.iter().copied())?.pop().ok_or_else(bad)?;
        if col.null_count() > 0 {
            return Err(bad());
        }
        Ok(match self.kinds[a] {
            Kind::KeyFloat => {
                let f = arrow::compute::cast(&col, &DataType::Float64)?;
                let f = f.as_any().downcast_ref::<Float64Array>().ok_or_else(bad)?;
                f.values().iter().map(|v| f64_key(*v)).collect()
            }
            _ => {
                let i = arrow::compute::cast(&col, &DataType::Int64)?;
                let i = i.as_any().downcast_ref::<Int64Array>().ok_or_else(bad)?;
                i.values().to_vec()
            }
        })
    }

    /// Writes the groups and accumulators (see the module docs for the layout).
    fn save_own(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        w.put("aggregate", &sig, 1, vec![("started", bool_col([self.started]))])?;
        let mut groups: Vec<&Group> =
            self.index.values().map(|&id| &self.slots[id as usize]).collect();
        groups.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let names: Vec<[String; 3]> = (0..self.aggs.len())
            .map(|a| [format!("n{a}"), format!("isum{a}"), format!("fsum{a}")])
            .collect();
        let mut cols = vec![
            ("key", binary_col(groups.iter().map(|g| &g.key[..]))),
            ("rows", i64_col(groups.iter().map(|g| g.rows))),
        ];
        // MIN/MAX multisets kept as order keys, row-encoded: per aggregate, all groups' values
        // in order.
        let mut keyed: Vec<Option<EncodedRows>> = Vec::with_capacity(self.aggs.len());
        for a in 0..self.aggs.len() {
            let mut keys = Vec::new();
            for g in &groups {
                if let Some(AccState { acc: Acc::MinMaxKey { values, .. }, .. }) = g.accs.get(a) {
                    keys.extend(values.sorted().into_iter().map(|(k, _)| k));
                }
            }
            keyed.push(if keys.is_empty() { None } else { Some(self.encode_keys(a, keys)?) });
        }
        // (group, agg, value, count) of the MIN/MAX multisets and of the DISTINCT maps.
        let mut values: Vec<(i64, i64, &[u8], i64)> = Vec::new();
        let mut seen: Vec<(i64, i64, &[u8], i64)> = Vec::new();
        let mut cursors: Vec<usize> = vec![0; self.aggs.len()];
        for (a, [n, isum, fsum]) in names.iter().enumerate() {
            let accs = || groups.iter().map(move |g| g.accs.get(a).map(|s| &s.acc));
            cols.push((
                n,
                opt_i64_col(accs().map(|acc| match acc {
                    Some(Acc::Count(n)) | Some(Acc::Sum { n, .. }) | Some(Acc::Avg { n, .. }) => {
                        Some(*n)
                    }
                    _ => None,
                })),
            ));
            cols.push((
                isum,
                opt_i128_col(accs().map(|acc| match acc {
                    Some(Acc::Sum { sum: Sum::Int(s), .. })
                    | Some(Acc::Sum { sum: Sum::Dec(s), .. }) => Some(*s),
                    _ => None,
                })),
            ));
            cols.push((
                fsum,
                opt_f64_col(accs().map(|acc| match acc {
                    Some(Acc::Sum { sum: Sum::Float(s), .. }) | Some(Acc::Avg { sum: s, .. }) => {
                        Some(*s)
                    }
                    _ => None,
                })),
            ));
            for (g, group) in groups.iter().enumerate() {
                let Some(st) = group.accs.get(a) else { continue };
                match &st.acc {
                    Acc::MinMax { values: vs, .. } => {
                        values.extend(vs.iter().map(|(v, c)| (g as i64, a as i64, &v[..], *c)));
                    }
                    Acc::MinMaxKey { values: vs, .. } => {
                        for (_, c) in vs.sorted() {
                            let enc = keyed[a]
                                .as_ref()
                                .ok_or_else(|| WeirError::internal("min/max keys"))?;
                            values.push((g as i64, a as i64, enc.get(cursors[a]), c));
                            cursors[a] += 1;
                        }
                    }
                    _ => {}
                }
                if let Some(s) = &st.seen {
                    let mut s: Vec<_> = s.iter().collect();
                    s.sort_unstable();
                    seen.extend(s.into_iter().map(|(v, c)| (g as i64, a as i64, &v[..], *c)));
                }
            }
        }
        w.put("aggregate.groups", &sig, groups.len(), cols)?;
        for (name, rows) in [("aggregate.values", values), ("aggregate.seen", seen)] {
            w.put(
                name,
                &sig,
                rows.len(),
                vec![
                    ("group", i64_col(rows.iter().map(|r| r.0))),
                    ("agg", i64_col(rows.iter().map(|r| r.1))),
                    ("value", binary_col(rows.iter().map(|r| r.2))),
                    ("count", i64_col(rows.iter().map(|r| r.3))),
                ],
            )?;
        }
        Ok(())
    }

    /// Reads what [`Aggregate::save_own`] wrote.
    fn restore_own(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let started = match r.take("aggregate", &sig)?.bools("started")?.as_slice() {
            [s] => *s,
            _ => return Err(invalid("section 'aggregate' should have one row")),
        };
        let s = r.take("aggregate.groups", &sig)?;
        let keys = s.binary("key")?;
        let rows = s.i64s("rows")?;
        let mut groups: Vec<Group> = Vec::with_capacity(keys.len());
        for (key, rows) in keys.iter().zip(&rows) {
            let mut g = self.new_group(key);
            g.rows = *rows;
            groups.push(g);
        }
        let bad =
            |a: usize| invalid(format!("section 'aggregate.groups': aggregate {a} does not fit"));
        for a in 0..self.aggs.len() {
            let ns = s.opt_i64s(&format!("n{a}"))?;
            let isums = s.opt_i128s(&format!("isum{a}"))?;
            let fsums = s.opt_f64s(&format!("fsum{a}"))?;
            for (g, group) in groups.iter_mut().enumerate() {
                let st = group.accs.get_mut(a).ok_or_else(|| bad(a))?;
                let (n, isum, fsum) = (
                    ns.get(g).copied().flatten(),
                    isums.get(g).copied().flatten(),
                    fsums.get(g).copied().flatten(),
                );
                match (&mut st.acc, n, isum, fsum) {
                    (Acc::Count(c), Some(n), None, None) => *c = n,
                    (Acc::Sum { sum: Sum::Int(s) | Sum::Dec(s), n: c }, Some(n), Some(v), None) => {
                        (*s, *c) = (v, n)
                    }
                    (Acc::Sum { sum: Sum::Float(s), n: c }, Some(n), None, Some(v))
                    | (Acc::Avg { sum: s, n: c }, Some(n), None, Some(v)) => (*s, *c) = (v, n),
                    (Acc::MinMax { .. } | Acc::MinMaxKey { .. }, None, None, None) => {}
                    _ => return Err(bad(a)),
                }
            }
        }
        for name in ["aggregate.values", "aggregate.seen"] {
            let s = r.take(name, &sig)?;
            let (gs, aggs, vals, counts) =
                (s.i64s("group")?, s.i64s("agg")?, s.binary("value")?, s.i64s("count")?);
            let agg_of = |i: usize| usize::try_from(aggs[i]).ok().filter(|a| *a < self.aggs.len());
            // MIN/MAX values kept as order keys: decoded per aggregate at once.
            let mut keyed: Vec<std::vec::IntoIter<i64>> = Vec::with_capacity(self.aggs.len());
            for a in 0..self.aggs.len() {
                let mine: Vec<&[u8]> = if name == "aggregate.values"
                    && matches!(self.kinds[a], Kind::KeyInt | Kind::KeyFloat)
                {
                    (0..gs.len()).filter(|&i| agg_of(i) == Some(a)).map(|i| vals[i]).collect()
                } else {
                    vec![]
                };
                keyed.push(self.decode_keys(a, &mine)?.into_iter());
            }
            for i in 0..gs.len() {
                let group = usize::try_from(gs[i]).ok().and_then(|g| groups.get_mut(g));
                let a = agg_of(i);
                let st = group.and_then(|g| a.and_then(|a| g.accs.get_mut(a)));
                let duplicate = match (name, st) {
                    (
                        "aggregate.values",
                        Some(AccState { acc: Acc::MinMax { values, .. }, .. }),
                    ) => {
                        values.insert(RowBytes::from(vals[i]), nonzero(name, counts[i])?).is_some()
                    }
                    (
                        "aggregate.values",
                        Some(AccState { acc: Acc::MinMaxKey { values, .. }, .. }),
                    ) => {
                        let k = a
                            .and_then(|a| keyed[a].next())
                            .ok_or_else(|| WeirError::internal("min/max keys"))?;
                        values.insert_restored(k, nonzero(name, counts[i])?)
                    }
                    ("aggregate.seen", Some(AccState { seen: Some(seen), .. })) => {
                        seen.insert(RowBytes::from(vals[i]), nonzero(name, counts[i])?).is_some()
                    }
                    _ => return Err(invalid(format!("section '{name}': row {i} does not fit"))),
                };
                if duplicate {
                    return Err(invalid(format!("section '{name}': a value appears twice")));
                }
            }
        }
        self.started = started;
        self.index = HashMap::with_capacity(groups.len());
        for (id, g) in groups.iter().enumerate() {
            if self.index.insert(GroupKey::from_slice(&g.key[..]), id as u32).is_some() {
                return Err(invalid("section 'aggregate.groups': a key appears twice"));
            }
        }
        self.slots = groups;
        self.free.clear();
        self.epoch = 0;
        Ok(())
    }

    /// Evaluates `d` for the accumulators: keys, argument views, encodings.
    fn prepare(&self, d: &ChangeBatch) -> Result<Prepared> {
        let key_cols: Vec<ArrayRef> =
            self.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
        let keys = self.key_codec.encode(&key_cols, d.len())?;
        let mut views = Vec::with_capacity(self.aggs.len());
        let mut values = Vec::with_capacity(self.aggs.len());
        for ((spec, codec), kind) in self.aggs.iter().zip(&self.value_codecs).zip(&self.kinds) {
            let col = match &spec.arg {
                Some(e) => Some(e.eval_as(&d.data, &spec.arg_type)?),
                None => None,
            };
            let encode = spec.distinct || *kind == Kind::Bytes;
            values.push(match (&col, codec) {
                (Some(c), Some(codec)) if encode => {
                    Some(codec.encode(std::slice::from_ref(c), d.len())?)
                }
                _ => None,
            });
            views.push(Self::view(spec, *kind, col.as_ref())?);
        }
        let rows = if self.float_order {
            Some(RowCodec::for_schema(&d.data.schema())?.encode(d.data.columns(), d.len())?)
        } else {
            None
        };
        Ok(Prepared { keys, views, values, rows })
    }

    /// The changes of `d` and the order (and multiplicity) to apply them in, over the rows
    /// `range`: as given, unless a floating-point sum is kept (SUM of floats, AVG). Float
    /// addition is not associative, so such sums would depend on the order rows arrive in (a
    /// join's output order, the batching of the input): then equal rows are merged and applied
    /// in the order of their encoded bytes, the same whatever the arrival.
    fn apply_order(
        d: &ChangeBatch,
        p: &Prepared,
        range: Range<usize>,
    ) -> Result<Vec<(usize, i64)>> {
        let Some(rows) = &p.rows else {
            return Ok(range.map(|i| (i, d.diffs[i])).collect());
        };
        let keys = &p.keys;
        let mut idx: Vec<usize> = range.collect();
        idx.sort_by(|&a, &b| {
            keys.get(a).cmp(keys.get(b)).then_with(|| rows.get(a).cmp(rows.get(b)))
        });
        let mut out: Vec<(usize, i64)> = Vec::with_capacity(idx.len());
        for i in idx {
            match out.last_mut() {
                Some((j, diff)) if keys.get(*j) == keys.get(i) && rows.get(*j) == rows.get(i) => {
                    *diff += d.diffs[i];
                }
                _ => out.push((i, d.diffs[i])),
            }
        }
        out.retain(|(_, diff)| *diff != 0);
        Ok(out)
    }

    /// Applies input row i with multiplicity `diff` to its group, taking the group's old
    /// output first if this is the instant's first change to it.
    fn apply(
        &mut self,
        p: &Prepared,
        i: usize,
        diff: i64,
        touched: &mut Vec<Touched>,
        old: &mut Vec<Out>,
    ) -> Result<()> {
        let key = p.keys.get(i);
        let scalar = self.keys.is_empty();
        let id = match self.index.get(key) {
            Some(&id) => id,
            None => self.alloc(key),
        };
        let group = &mut self.slots[id as usize];
        if group.mark != self.epoch {
            group.mark = self.epoch;
            let at = if scalar || group.rows > 0 {
                let at = old.len() as u32;
                Self::output_into(&self.aggs, group, old)?;
                Some(at)
            } else {
                None
            };
            touched.push((sort_prefix(key), id, at));
        }
        group.rows += diff;
        for (a, st) in group.accs.iter_mut().enumerate() {
            if self.aggs[a].func == AggFunc::CountStar {
                continue;
            }
            let view = &p.views[a];
            if view.is_null(i) {
                continue;
            }
            let value = p.values[a].as_ref().map(|v| v.get(i));
            match &mut st.seen {
                None => Self::update(&mut st.acc, view, i, value, diff)?,
                Some(seen) => {
                    let v = value.ok_or_else(|| WeirError::internal("distinct value"))?;
                    let before = seen.get(v).copied().unwrap_or(0);
                    let after = before + diff;
                    if after == 0 {
                        seen.remove(v);
                    } else if let Some(c) = seen.get_mut(v) {
                        *c = after;
                    } else {
                        seen.insert(v.into(), after);
                    }
                    if before <= 0 && after > 0 {
                        Self::update(&mut st.acc, view, i, value, 1)?;
                    } else if before > 0 && after <= 0 {
                        Self::update(&mut st.acc, view, i, value, -1)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// One instant `t`: applies the rows `range` of `d` and emits the touched groups' changes
    /// (sorted by key) into `out`.
    fn instant(
        &mut self,
        t: Time,
        d: &ChangeBatch,
        p: Option<&Prepared>,
        range: Range<usize>,
        out: &mut Emitted,
    ) -> Result<()> {
        self.epoch += 1;
        let mut touched = std::mem::take(&mut self.touched);
        let mut old = std::mem::take(&mut self.old);
        let mut new = std::mem::take(&mut self.new);
        touched.clear();
        old.clear();
        if !self.started {
            self.started = true;
            if self.keys.is_empty() {
                let id = self.alloc(&[]);
                self.slots[id as usize].mark = self.epoch;
                touched.push((sort_prefix(&[]), id, None));
            }
        }
        if let Some(p) = p.filter(|_| !range.is_empty()) {
            if self.float_order {
                for (i, diff) in Self::apply_order(d, p, range)? {
                    self.apply(p, i, diff, &mut touched, &mut old)?;
                }
            } else {
                for i in range {
                    self.apply(p, i, d.diffs[i], &mut touched, &mut old)?;
                }
            }
        }
        let slots = &self.slots;
        touched.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| slots[a.1 as usize].key.cmp(&slots[b.1 as usize].key))
        });
        let n = self.aggs.len();
        for &(_, id, old_at) in &touched {
            let g = &self.slots[id as usize];
            new.clear();
            let exists = self.exists(g);
            if exists {
                Self::output_into(&self.aggs, g, &mut new)?;
            }
            let before = old_at.map(|at| &old[at as usize..at as usize + n]);
            let after = exists.then_some(&new[..]);
            if before != after {
                if let Some(v) = before {
                    out.push(&g.key, v, t, -1);
                }
                if let Some(v) = after {
                    out.push(&g.key, v, t, 1);
                }
            }
            if !self.keys.is_empty() && g.rows == 0 {
                self.release(id);
            }
        }
        self.touched = touched;
        self.old = old;
        self.new = new;
        Ok(())
    }

    /// The output changes of the instants `(t, rows of d)`, in order.
    fn process(&mut self, d: &ChangeBatch, runs: &[(Time, Range<usize>)]) -> Result<ChangeBatch> {
        let p = if d.is_empty() { None } else { Some(self.prepare(d)?) };
        let mut out = std::mem::take(&mut self.emitted);
        out.clear(self.aggs.len());
        let result = self.emit(d, p.as_ref(), runs, &mut out);
        self.emitted = out;
        result
    }

    fn emit(
        &mut self,
        d: &ChangeBatch,
        p: Option<&Prepared>,
        runs: &[(Time, Range<usize>)],
        out: &mut Emitted,
    ) -> Result<ChangeBatch> {
        for (t, range) in runs {
            self.instant(*t, d, p, range.clone(), out)?;
        }
        let n = out.diffs.len();
        if n == 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut start = 0;
        let keys = out.key_ends.iter().map(|&end| {
            let k = &out.key_bytes[start..end];
            start = end;
            k
        });
        let mut cols = self.key_codec.decode(keys)?;
        for (a, vals) in out.cols.iter().enumerate() {
            cols.push(self.finish_column(a, vals)?);
        }
        let data = batch_of(&self.schema, cols, n)?;
        let times = std::mem::replace(&mut out.times, Vec::with_capacity(n));
        let diffs = std::mem::replace(&mut out.diffs, Vec::with_capacity(n));
        Ok(ChangeBatch::new(data, times, diffs))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::{cast, col};

    use super::*;
    use crate::operator::EvalCtx;
    use crate::testing::Dataflow;
    use crate::testing::{fed, kv, kv_schema, render, run, run_spans, Tick};

    fn agg_op(grouped: bool, aggs: &[(AggFunc, bool)], input: Vec<Tick>) -> Dataflow {
        agg_op_as(grouped, aggs, DataType::Int64, input)
    }

    /// [`aggregate`] fed with `input`.
    fn agg_op_as(
        grouped: bool,
        aggs: &[(AggFunc, bool)],
        arg: DataType,
        input: Vec<Tick>,
    ) -> Dataflow {
        fed(aggregate(grouped, aggs, arg), [input])
    }

    /// An aggregate over `kv` with key `k` (if `grouped`) and arguments `v` cast to `arg`.
    fn aggregate(grouped: bool, aggs: &[(AggFunc, bool)], arg: DataType) -> Aggregate {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let keys =
            if grouped { vec![ScalarExpr::compile(&col("k"), &df).unwrap()] } else { vec![] };
        let mut fields = vec![];
        if grouped {
            fields.push(Field::new("k", DataType::Utf8, true));
        }
        let specs = aggs
            .iter()
            .map(|(f, distinct)| {
                let (arg, ty) = match f {
                    AggFunc::CountStar => (None, DataType::Null),
                    _ => {
                        let e = cast(col("v"), arg.clone());
                        (Some(ScalarExpr::compile(&e, &df).unwrap()), arg.clone())
                    }
                };
                let out = match f {
                    AggFunc::Avg => DataType::Float64,
                    AggFunc::Min | AggFunc::Max => ty.clone(),
                    _ => DataType::Int64,
                };
                fields.push(Field::new(format!("{f}"), out, true));
                AggSpec { func: *f, arg, arg_type: ty, distinct: *distinct }
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let key_types = if grouped { vec![DataType::Utf8] } else { vec![] };
        Aggregate::new(keys, key_types, specs, schema).unwrap()
    }

    fn agg(grouped: bool, aggs: &[(AggFunc, bool)], input: Vec<Tick>) -> Vec<String> {
        run(&mut agg_op(grouped, aggs, input))
    }

    /// Evaluates `flow` at `times`, rendering its output.
    fn eval_at(flow: &mut Dataflow, times: &[Time]) -> Vec<String> {
        let ctx = EvalCtx::default();
        times.iter().flat_map(|t| render(&flow.eval(*t, *t, &ctx).unwrap())).collect()
    }

    /// Copies the aggregate's state (not the feed's) through a checkpoint's bytes into `to`.
    fn copy_state(from: &Dataflow, to: &mut Dataflow) {
        let root = from.len() - 1;
        let mut w = StateWriter::new();
        from.operator(root).unwrap().save_state(&mut w).unwrap();
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        to.operator_mut(root).unwrap().restore_state(&mut r).unwrap();
        r.finish().unwrap();
    }

    #[test]
    fn min_max_survive_deleting_the_current_extreme() {
        let out = agg(
            true,
            &[(AggFunc::Min, false), (AggFunc::Max, false)],
            vec![
                kv(1, "+1 a 5, +1 a 1, +1 a 9"),
                kv(2, "-1 a 1"),
                kv(3, "-1 a 9"),
                kv(4, "-1 a 5"),
            ],
        );
        assert_eq!(
            out,
            [
                "@1 +1 a 1 9",
                "@2 +1 a 5 9",
                "@2 -1 a 1 9",
                "@3 +1 a 5 5",
                "@3 -1 a 5 9",
                "@4 -1 a 5 5"
            ]
        );
    }

    #[test]
    fn count_distinct_counts_values_present() {
        let out = agg(
            true,
            &[(AggFunc::Count, true), (AggFunc::CountStar, false)],
            vec![kv(1, "+1 a 1, +1 a 1, +1 a 2"), kv(2, "-1 a 1"), kv(3, "-1 a 1")],
        );
        assert_eq!(
            out,
            ["@1 +1 a 2 3", "@2 +1 a 2 2", "@2 -1 a 2 3", "@3 +1 a 1 1", "@3 -1 a 2 2"]
        );
    }

    #[test]
    fn scalar_aggregate_exists_from_the_first_instant() {
        // No input at the first instant: COUNT(*) = 0, SUM = NULL; then a row comes and goes.
        let out = agg(
            false,
            &[(AggFunc::CountStar, false), (AggFunc::Sum, false)],
            vec![kv(0, ""), kv(1, "+1 a 4"), kv(2, "-1 a 4")],
        );
        assert_eq!(out, ["@0 +1 0 _", "@1 +1 1 4", "@1 -1 0 _", "@2 +1 0 _", "@2 -1 1 4"]);
    }

    #[test]
    fn sum_and_avg_skip_nulls_and_retract() {
        let out = agg(
            true,
            &[(AggFunc::Sum, false), (AggFunc::Avg, false), (AggFunc::Count, false)],
            vec![kv(1, "+1 a 2, +1 a _, +1 a 4"), kv(2, "-1 a 4")],
        );
        assert_eq!(out, ["@1 +1 a 6 3.0 2", "@2 +1 a 2 2.0 1", "@2 -1 a 6 3.0 2"]);
    }

    #[test]
    fn unchanged_values_emit_nothing() {
        // A replacement by an equal value leaves the group's output unchanged.
        let out =
            agg(true, &[(AggFunc::Sum, false)], vec![kv(1, "+1 b 5"), kv(4, "-1 b 5, +1 b 5")]);
        assert_eq!(out, ["@1 +1 b 5"]);
    }

    /// Window-like changes (oldest value out first) and then deletions out of arrival order.
    fn min_max_input() -> Vec<Tick> {
        vec![
            kv(1, "+1 a 5, +1 a 1, +1 b 7, +1 a 9"),
            kv(2, "+1 a 9, -1 a 5, +1 b 2, +2 b 7"),
            kv(3, "-1 a 1, -1 b 7, +1 a _, +1 c _"),
            kv(4, "-1 a 9, +1 a 3"),
            kv(5, "-1 a 9, -1 b 7"),
            kv(6, "-1 a 3, -1 b 2, +1 b 4, -1 a _"),
            kv(7, "-1 b 7, +1 a 0, -1 c _"),
            kv(8, "-1 b 4, -1 a 0"),
        ]
    }

    #[test]
    fn min_max_over_every_kept_form_agree() {
        // Int64 and Int32 (order keys), Float64 (float order keys), Utf8 (row encodings):
        // the same MIN and MAX, whatever the form the multiset is kept in.
        let aggs = [(AggFunc::Min, false), (AggFunc::Max, false), (AggFunc::Count, false)];
        let int = run(&mut agg_op(true, &aggs, min_max_input()));
        assert_eq!(
            int[..6],
            [
                "@1 +1 a 1 9 3",
                "@1 +1 b 7 7 1",
                "@2 +1 b 2 7 4",
                "@2 -1 b 7 7 1",
                "@3 +1 a 9 9 2",
                "@3 +1 b 2 7 3"
            ]
        );
        // (Strings would order "10" before "9"; all the values here are single digits.)
        for ty in [DataType::Int32, DataType::Float64, DataType::Utf8] {
            let other = run(&mut agg_op_as(true, &aggs, ty.clone(), min_max_input()));
            let other: Vec<String> = other.iter().map(|r| r.replace(".0", "")).collect();
            assert_eq!(other, int, "{ty}");
        }
    }

    #[test]
    fn float_order_keys_follow_the_total_order() {
        let vals =
            [f64::NEG_INFINITY, -1.5, -0.0, 0.0, f64::MIN_POSITIVE, 1.0, f64::INFINITY, f64::NAN];
        for w in vals.windows(2) {
            assert!(f64_key(w[0]) < f64_key(w[1]), "{} < {}", w[0], w[1]);
            assert_eq!(w[0].total_cmp(&w[1]), f64_key(w[0]).cmp(&f64_key(w[1])));
        }
        for v in vals.iter().chain(&[-f64::NAN]) {
            assert_eq!(key_f64(f64_key(*v)).to_bits(), v.to_bits());
        }
    }

    #[test]
    fn min_max_checkpoint_round_trips_at_every_instant() {
        let aggs = [
            (AggFunc::Min, false),
            (AggFunc::Max, false),
            (AggFunc::Max, true),
            (AggFunc::CountStar, false),
        ];
        let times: Vec<Time> = (1..=8).collect();
        for ty in [DataType::Int64, DataType::Float64, DataType::Utf8] {
            let whole = eval_at(&mut agg_op_as(true, &aggs, ty.clone(), min_max_input()), &times);
            for cut in 0..times.len() {
                let mut a = agg_op_as(true, &aggs, ty.clone(), min_max_input());
                let mut out = eval_at(&mut a, &times[..cut]);
                let mut b = agg_op_as(true, &aggs, ty.clone(), min_max_input());
                eval_at(&mut b, &times[..cut]); // consumes the feed's first instants
                let mut fresh = agg_op_as(true, &aggs, ty.clone(), vec![]);
                copy_state(&a, &mut fresh);
                copy_state(&fresh, &mut b); // a restored state saves what it restored
                out.extend(eval_at(&mut b, &times[cut..]));
                assert_eq!(out, whole, "{ty} cut at {cut}");
            }
        }
    }

    #[test]
    fn scalar_min_max_without_values_checkpoint() {
        // No GROUP BY: the row exists with NULL MIN/MAX and an empty multiset to save.
        let aggs = [(AggFunc::Min, false), (AggFunc::Max, false)];
        let mut a = agg_op(false, &aggs, vec![kv(1, "+1 a _")]);
        assert_eq!(eval_at(&mut a, &[1]), ["@1 +1 _ _"]);
        let mut b = agg_op(false, &aggs, vec![kv(2, "+1 a 4")]);
        copy_state(&a, &mut b);
        assert_eq!(eval_at(&mut b, &[2]), ["@2 +1 4 4", "@2 -1 _ _"]);
    }

    #[test]
    fn restored_values_that_do_not_fit_are_errors() {
        let aggs = [(AggFunc::Max, false)];
        let mut a = agg_op(true, &aggs, vec![kv(1, "+1 a 4")]);
        eval_at(&mut a, &[1]);
        let mut w = StateWriter::new();
        a.operator(1).unwrap().save_state(&mut w).unwrap();
        // The same state with a value of the wrong width for BIGINT.
        let sig = aggregate(true, &aggs, DataType::Int64).signature();
        let mut bad = StateWriter::new();
        bad.put("aggregate", &sig, 1, vec![("started", bool_col([true]))]).unwrap();
        let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
        r.take("aggregate", &sig).unwrap();
        let groups = r.take("aggregate.groups", &sig).unwrap();
        let keys = groups.binary("key").unwrap();
        bad.put(
            "aggregate.groups",
            &sig,
            1,
            vec![
                ("key", binary_col(keys)),
                ("rows", i64_col([1])),
                ("n0", opt_i64_col([None])),
                ("isum0", opt_i128_col([None])),
                ("fsum0", opt_f64_col([None])),
            ],
        )
        .unwrap();
        for (name, value) in [("aggregate.values", &[1u8, 2, 3][..]), ("aggregate.seen", &[][..])] {
            let n = usize::from(!value.is_empty());
            bad.put(
                name,
                &sig,
                n,
                vec![
                    ("group", i64_col(vec![0; n])),
                    ("agg", i64_col(vec![0; n])),
                    ("value", binary_col(vec![value; n])),
                    ("count", i64_col(vec![1; n])),
                ],
            )
            .unwrap();
        }
        let mut r = StateReader::from_bytes(&bad.into_bytes().unwrap()).unwrap();
        let mut fresh = aggregate(true, &aggs, DataType::Int64);
        let err = fresh.restore_own(&mut r).unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
    }

    #[test]
    fn spans_give_what_instants_give() {
        // Window-like input over many instants, some groups appearing and disappearing, a
        // float sum (which fixes the apply order): any span width, the same changes.
        let ticks = || min_max_input();
        for (grouped, aggs) in [
            (
                true,
                &[(AggFunc::Max, false), (AggFunc::Avg, false), (AggFunc::CountStar, false)][..],
            ),
            (false, &[(AggFunc::Min, false), (AggFunc::Count, true), (AggFunc::Sum, false)][..]),
        ] {
            let make = || agg_op(grouped, aggs, ticks());
            let want = run(&mut make());
            assert!(!want.is_empty());
            for width in [0, 1, 2, 10] {
                assert_eq!(run_spans(&mut make(), width), want, "width {width}");
            }
        }
    }
}
