//! An aggregate's accumulators: how each aggregate function keeps its values (COUNT, SUM and
//! AVG as sums and counts, BOOL_AND and BOOL_OR as counts of true and false values, MIN and MAX
//! as multisets, the ordered aggregates as ordered multisets of their elements), applies a
//! change of one input row, and gives its current value, first as typed [`Out`] values, then
//! as an Arrow column.

use std::collections::BTreeMap;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array, UInt32Array,
};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use weir_common::{Result, WeirError};
use weir_plan::AggFunc;

use super::minmax::KeySet;
use super::{cast_to, AggSpec, Aggregate, Group};
use crate::heap::HeapSize;
use crate::row::RowBytes;

/// An `i128` kept as two 64-bit halves: 8-byte aligned, so that an accumulator holding one is
/// not padded to 16 bytes (every group keeps one accumulator per aggregate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Wide([u64; 2]);

impl Wide {
    pub(super) fn new(v: i128) -> Self {
        Wide([v as u64, (v >> 64) as u64])
    }

    pub(super) fn get(self) -> i128 {
        ((self.0[1] as i128) << 64) | self.0[0] as i128
    }

    /// Adds `v`; an error if the sum leaves the `i128` range (a decimal sum can).
    pub(super) fn add(&mut self, v: i128) -> Result<()> {
        let sum = self.get().checked_add(v).ok_or_else(|| WeirError::exec("overflow in SUM"))?;
        *self = Wide::new(sum);
        Ok(())
    }
}

/// The accumulator of one aggregate of a group, except the COUNT family's: a group keeps those
/// as bare counts (see [`Place`]).
#[derive(Debug, Clone)]
pub(super) enum Acc {
    /// SUM over integers or decimals: the exact sum (of the integers, or of the decimals'
    /// unscaled values: the argument's type says which) and the count of values summed.
    /// The sums are variants of their own rather than one variant over a sum enum: that
    /// enum's tag made every accumulator 40 bytes instead of 32.
    Sum { sum: Wide, n: i64 },
    /// SUM over floats: the sum and the count.
    SumFloat { sum: f64, n: i64 },
    /// AVG over integers or decimals: the exact sum, as [`Acc::Sum`], and the count.
    Avg { sum: Wide, n: i64 },
    /// AVG over floats: the sum and the count.
    AvgFloat { sum: f64, n: i64 },
    /// MIN/MAX over values kept as their row encoding (of an input that may retract).
    MinMax { values: BTreeMap<RowBytes, i64>, max: bool },
    /// MIN/MAX over values kept as `i64` order keys (see [`Kind::KeyInt`], [`Kind::KeyFloat`]),
    /// of an input that may retract (an append-only one's are [`Acc::Extreme`]).
    MinMaxKey { values: Box<KeySet>, max: bool },
    /// MIN/MAX over `i64` order keys of an append-only input: a value less extreme than the
    /// extreme can never be output, so only the extreme and its count are kept, inline (no
    /// allocation per group): a value that beats the extreme replaces it.
    Extreme { best: Option<(i64, i64)>, max: bool },
    /// MIN/MAX over row-encoded values of an append-only input: the extreme and its count,
    /// as [`Acc::Extreme`] keeps them for order keys.
    ExtremeBytes { best: Option<(RowBytes, i64)>, max: bool },
    /// BOOL_AND/BOOL_OR: how many true and how many false values the group holds.
    Bool { trues: i64, falses: i64 },
    /// STRING_AGG, ARRAY_AGG, FIRST_VALUE, LAST_VALUE: element (the ORDER BY terms then the
    /// value, row-encoded: byte order is the aggregate's order) -> (count, the value).
    Ordered { elements: BTreeMap<RowBytes, (i64, ScalarValue)> },
}

impl Acc {
    /// A MIN/MAX over order keys: its (value, count) pairs in value order (None for any
    /// other accumulator).
    pub(super) fn key_counts(&self) -> Option<Vec<(i64, i64)>> {
        match self {
            Acc::MinMaxKey { values, .. } => Some(values.sorted()),
            Acc::Extreme { best, .. } => Some(best.iter().copied().collect()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct AccState {
    pub(super) acc: Acc,
}

impl Acc {
    /// A word read from the accumulator (whether it is a sum): see `Aggregate::warm`.
    pub(super) fn peek(&self) -> u64 {
        u64::from(matches!(self, Acc::Sum { .. }))
    }
}

/// Where a group keeps the accumulator of an aggregate. COUNT, COUNT(*) with a FILTER and
/// COUNT(DISTINCT) are bare counts, eight bytes each in [`Group::counts`], instead of an
/// [`Acc`] of 32 (q16's thirteen aggregates, twelve of them counts, took seven cache lines a
/// group and now take three); COUNT(*) without a FILTER is the group's row count and keeps
/// nothing; the others are [`Acc`]s in [`Group::accs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Rows,
    Count(u32),
    Acc(u32),
}

impl Place {
    /// Each aggregate's place, the counts and the accumulators numbered in aggregate order.
    pub(super) fn of(aggs: &[AggSpec]) -> Vec<Place> {
        let (mut counts, mut accs) = (0, 0);
        let next = |n: &mut u32| {
            *n += 1;
            *n - 1
        };
        aggs.iter()
            .map(|spec| match spec.func {
                AggFunc::CountStar if spec.filter.is_none() => Place::Rows,
                AggFunc::CountStar | AggFunc::Count => Place::Count(next(&mut counts)),
                _ => Place::Acc(next(&mut accs)),
            })
            .collect()
    }
}

impl HeapSize for Acc {
    fn heap_bytes(&self) -> usize {
        match self {
            Acc::MinMax { values, .. } => values.heap_bytes(),
            Acc::ExtremeBytes { best, .. } => best.as_ref().map_or(0, |(v, _)| v.heap_bytes()),
            Acc::MinMaxKey { values, .. } => values.heap_bytes(),
            Acc::Ordered { elements } => elements.heap_bytes(),
            Acc::Sum { .. }
            | Acc::SumFloat { .. }
            | Acc::Avg { .. }
            | Acc::AvgFloat { .. }
            | Acc::Bool { .. }
            | Acc::Extreme { .. } => 0,
        }
    }
}

impl HeapSize for AccState {
    fn heap_bytes(&self) -> usize {
        self.acc.heap_bytes()
    }
}

impl HeapSize for Out {
    fn heap_bytes(&self) -> usize {
        match self {
            Out::Bytes(b) => b.heap_bytes(),
            Out::Scalar(s) => s.heap_bytes(),
            Out::Null
            | Out::Int(_)
            | Out::Float(_)
            | Out::Dec(..)
            | Out::Short { .. }
            | Out::Bool(_) => 0,
        }
    }
}

/// Offers row-encoded value `v` with count `diff` to an append-only MIN/MAX whose extreme is
/// `best`: it adds to the extreme's count if equal, replaces it if it beats it (greater for
/// MAX), and is dropped otherwise (it can never be the extreme). True if `v` was the extreme.
pub(super) fn bytes_contend(
    best: &mut Option<(RowBytes, i64)>,
    max: bool,
    v: &[u8],
    diff: i64,
) -> bool {
    match best {
        Some((e, c)) if &e[..] == v => {
            *c += diff;
            return true;
        }
        Some((e, _)) if (v > &e[..]) != max => {}
        _ => *best = Some((v.into(), diff)),
    }
    false
}

/// The most extreme of MIN/MAX's row-encoded values (the greatest for MAX).
fn bytes_extreme(values: &BTreeMap<RowBytes, i64>, max: bool) -> Option<&RowBytes> {
    if max {
        values.keys().next_back()
    } else {
        values.keys().next()
    }
}

/// How an aggregate's values are kept and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// COUNT, integer SUM: an `i64` output.
    Int,
    /// Float SUM, AVG: an `f64` output.
    Float,
    /// Decimal SUM and AVG: an `i128` output of this precision and scale.
    Dec(u8, i8),
    /// MIN/MAX over an integer, timestamp or Date64 type: the value as `i64` (the type's
    /// order is the integers').
    KeyInt,
    /// MIN/MAX over Float64: the value's total-order key (see [`f64_key`]).
    KeyFloat,
    /// MIN/MAX over any other type: the value's row encoding.
    Bytes,
    /// BOOL_AND, BOOL_OR: a boolean output.
    Bool,
    /// The ordered aggregates: a `ScalarValue` output.
    Scalar,
}

impl Kind {
    pub(super) fn of(spec: &AggSpec) -> Kind {
        match spec.func {
            // Sketches are evaluated by `SketchAggregate`; `Aggregate::new` refuses them.
            AggFunc::CountStar | AggFunc::Count | AggFunc::ApproxCountDistinct { .. } => Kind::Int,
            AggFunc::Avg => match &spec.arg_type {
                DataType::Decimal128(_, s) => Kind::Dec(38, avg_scale(*s)),
                _ => Kind::Float,
            },
            AggFunc::ApproxPercentile { .. } => Kind::Float,
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
            AggFunc::BoolAnd | AggFunc::BoolOr => Kind::Bool,
            AggFunc::StringAgg
            | AggFunc::ArrayAgg
            | AggFunc::FirstValue
            | AggFunc::LastValue
            | AggFunc::ApproxTopK { .. } => Kind::Scalar,
        }
    }
}

/// The scale of AVG over a decimal of scale `s`: four more digits (DataFusion's result type,
/// as in MySQL), at most 38.
pub(crate) fn avg_scale(s: i8) -> i8 {
    s.saturating_add(4).min(38)
}

/// AVG over a decimal: `sum / n` (the sum at the argument's scale `s`) at [`avg_scale`],
/// rounded half away from zero as PostgreSQL and Flink round a decimal quotient. Exact: the
/// sum is divided first, so only an average beyond 38 digits overflows.
pub(crate) fn decimal_avg(sum: i128, n: i64, s: i8) -> Result<i128> {
    let overflow = || WeirError::exec("decimal overflow in AVG");
    let pow = 10i128.pow(avg_scale(s).saturating_sub(s).max(0) as u32);
    let n = i128::from(n);
    let (q, r) = (sum / n, sum % n);
    // |r| < n <= 2^63 and pow <= 10^4: no overflow.
    let scaled = r * pow;
    let mut fraction = scaled / n;
    if 2 * (scaled % n).abs() >= n {
        fraction += scaled.signum();
    }
    q.checked_mul(pow).and_then(|v| v.checked_add(fraction)).ok_or_else(overflow)
}

/// Whether SUM and AVG take an argument of type `t` as an `i64` (and keep an exact integer sum).
pub(super) fn int_arg(t: &DataType) -> bool {
    t.is_integer() || *t == DataType::Null || *t == DataType::Boolean
}

/// The `i64` whose order is the total order of `f` (−NaN < −∞ < … < −0 < +0 < … < +∞ < NaN),
/// which is also the order of the row encoding of floats. An involution on the bit patterns:
/// [`key_f64`] inverts it.
pub(super) fn f64_key(f: f64) -> i64 {
    let b = f.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

pub(super) fn key_f64(k: i64) -> f64 {
    f64::from_bits((k ^ (((k >> 63) as u64) >> 1) as i64) as u64)
}

/// One output value of an aggregate, typed (floats by their bits, so equality is bitwise as
/// for `ScalarValue`; decimals as two halves, which keeps the enum at 24 bytes). A row
/// encoding (MIN/MAX over strings and other types kept as bytes) is held inline up to
/// [`SHORT_BYTES`] bytes, without an allocation per output (q16's `MAX(to_char(...))` takes
/// two for every bid otherwise); [`Out::bytes`] picks the form, so equal values are equal.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Out {
    Null,
    Int(i64),
    Float(u64),
    Dec(u64, u64),
    Short {
        len: u8,
        bytes: [u8; SHORT_BYTES],
    },
    Bytes(RowBytes),
    Bool(bool),
    /// An ordered aggregate's value, boxed (it is rare, and keeps the enum small).
    Scalar(Box<ScalarValue>),
}

/// The longest row encoding an [`Out`] holds inline.
pub(super) const SHORT_BYTES: usize = 22;

impl Out {
    pub(super) fn dec(v: i128) -> Out {
        Out::Dec(v as u64, (v >> 64) as u64)
    }

    /// A row-encoded value: inline up to [`SHORT_BYTES`] bytes, boxed beyond.
    pub(super) fn bytes(v: &[u8]) -> Out {
        if v.len() <= SHORT_BYTES {
            let mut bytes = [0u8; SHORT_BYTES];
            bytes[..v.len()].copy_from_slice(v);
            Out::Short { len: v.len() as u8, bytes }
        } else {
            Out::Bytes(v.into())
        }
    }

    /// The row encoding of a value made by [`Out::bytes`] (None for any other value).
    pub(super) fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Out::Short { len, bytes } => Some(&bytes[..*len as usize]),
            Out::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// An argument column viewed in the accumulator's working type.
pub(super) enum ArgView {
    None,
    Int(Int64Array),
    Float(Float64Array),
    Dec(Decimal128Array),
    Bool(BooleanArray),
    /// Only the encoded value is used (MIN/MAX over other types, COUNT), or the value itself
    /// (the ordered aggregates).
    Any(ArrayRef),
}

impl ArgView {
    /// Value i as a MIN/MAX order key (see [`Kind::KeyInt`], [`Kind::KeyFloat`]).
    fn order_key(&self, i: usize) -> Result<i64> {
        match self {
            ArgView::Int(a) => Ok(a.value(i)),
            ArgView::Float(a) => Ok(f64_key(a.value(i))),
            _ => Err(WeirError::internal("min/max key view mismatch")),
        }
    }

    /// The number of NULL values.
    pub(super) fn null_count(&self) -> usize {
        match self {
            ArgView::None => 0,
            ArgView::Int(a) => a.null_count(),
            ArgView::Float(a) => a.null_count(),
            ArgView::Dec(a) => a.null_count(),
            ArgView::Bool(a) => a.null_count(),
            ArgView::Any(a) => a.null_count(),
        }
    }

    pub(super) fn is_null(&self, i: usize) -> bool {
        match self {
            ArgView::None => false,
            ArgView::Int(a) => a.is_null(i),
            ArgView::Float(a) => a.is_null(i),
            ArgView::Dec(a) => a.is_null(i),
            ArgView::Bool(a) => a.is_null(i),
            ArgView::Any(a) => a.is_null(i),
        }
    }
}

impl Aggregate {
    /// A group's empty accumulator of aggregate `spec` (over an append-only input with
    /// `append_only`), one kept in [`Place::Acc`] (a COUNT is kept as a bare count).
    pub(super) fn fresh_acc(spec: &AggSpec, kind: Kind, append_only: bool) -> AccState {
        let max = spec.func == AggFunc::Max;
        let acc = match kind {
            _ if spec.func == AggFunc::Avg => {
                if matches!(spec.arg_type, DataType::Decimal128(..)) || int_arg(&spec.arg_type) {
                    Acc::Avg { sum: Wide::default(), n: 0 }
                } else {
                    Acc::AvgFloat { sum: 0.0, n: 0 }
                }
            }
            Kind::Bool => Acc::Bool { trues: 0, falses: 0 },
            Kind::Scalar => Acc::Ordered { elements: BTreeMap::new() },
            Kind::Int | Kind::Dec(..) => Acc::Sum { sum: Wide::default(), n: 0 },
            Kind::Float => Acc::SumFloat { sum: 0.0, n: 0 },
            Kind::KeyInt | Kind::KeyFloat if append_only => Acc::Extreme { best: None, max },
            Kind::KeyInt | Kind::KeyFloat => {
                Acc::MinMaxKey { values: Box::new(KeySet::new()), max }
            }
            Kind::Bytes if append_only => Acc::ExtremeBytes { best: None, max },
            Kind::Bytes => Acc::MinMax { values: BTreeMap::new(), max },
        };
        AccState { acc }
    }

    pub(super) fn view(spec: &AggSpec, kind: Kind, col: Option<&ArrayRef>) -> Result<ArgView> {
        let Some(col) = col else { return Ok(ArgView::None) };
        let float = |a: &dyn Array| -> Result<ArgView> {
            let a = arrow::compute::cast(a, &DataType::Float64)?;
            let a = a.as_any().downcast_ref::<Float64Array>().cloned();
            Ok(ArgView::Float(a.ok_or_else(|| WeirError::internal("float view"))?))
        };
        // Not `safe`: a value that does not fit (an unsigned 64-bit one above BIGINT's range)
        // is an error, never a NULL the aggregate would skip.
        let int = |a: &dyn Array| -> Result<Int64Array> {
            let strict = arrow::compute::CastOptions { safe: false, ..Default::default() };
            let a =
                arrow::compute::cast_with_options(a, &DataType::Int64, &strict).map_err(|e| {
                    WeirError::exec(format!("{} over {}: {e}", spec.func, a.data_type()))
                })?;
            let a = a.as_any().downcast_ref::<Int64Array>().cloned();
            a.ok_or_else(|| WeirError::internal("int view"))
        };
        Ok(match spec.func {
            AggFunc::Sum | AggFunc::Avg => match col.data_type() {
                DataType::Decimal128(..) => {
                    let a = col.as_any().downcast_ref::<Decimal128Array>().cloned();
                    ArgView::Dec(a.ok_or_else(|| WeirError::internal("decimal view"))?)
                }
                DataType::Float16 | DataType::Float32 | DataType::Float64 => float(col.as_ref())?,
                t if int_arg(t) => ArgView::Int(int(col.as_ref())?),
                t => {
                    return Err(WeirError::exec(format!("{} over {t} is not supported", spec.func)))
                }
            },
            AggFunc::Min | AggFunc::Max if kind == Kind::KeyInt => ArgView::Int(int(col.as_ref())?),
            AggFunc::Min | AggFunc::Max if kind == Kind::KeyFloat => float(col.as_ref())?,
            AggFunc::BoolAnd | AggFunc::BoolOr => {
                let a = arrow::compute::cast(col, &DataType::Boolean)?;
                let a = a.as_any().downcast_ref::<BooleanArray>().cloned();
                ArgView::Bool(a.ok_or_else(|| WeirError::internal("boolean view"))?)
            }
            _ => ArgView::Any(col.clone()),
        })
    }

    /// Applies value i of `view` with multiplicity `diff` to an accumulator (an append-only
    /// MIN or MAX, [`Acc::Extreme`] or [`Acc::ExtremeBytes`], keeps only its extreme).
    pub(super) fn update(
        acc: &mut Acc,
        view: &ArgView,
        i: usize,
        value: Option<&[u8]>,
        diff: i64,
    ) -> Result<()> {
        match acc {
            Acc::Sum { sum, n } | Acc::Avg { sum, n } => {
                *n += diff;
                match view {
                    ArgView::Int(a) => sum.add(a.value(i) as i128 * diff as i128)?,
                    ArgView::Dec(a) => {
                        let v = a.value(i).checked_mul(diff as i128);
                        sum.add(v.ok_or_else(|| WeirError::exec("overflow in SUM"))?)?
                    }
                    _ => return Err(WeirError::internal("sum accumulator/view mismatch")),
                }
            }
            Acc::SumFloat { sum, n } | Acc::AvgFloat { sum, n } => {
                *n += diff;
                let ArgView::Float(a) = view else {
                    return Err(WeirError::internal("sum accumulator/view mismatch"));
                };
                *sum += a.value(i) * diff as f64;
            }
            Acc::ExtremeBytes { best, max } => {
                let v = value.ok_or_else(|| WeirError::internal("min/max without value"))?;
                bytes_contend(best, *max, v, diff);
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
            Acc::MinMaxKey { values, max } => values.update(view.order_key(i)?, diff, *max),
            Acc::Extreme { best, max } => {
                let k = view.order_key(i)?;
                match best {
                    Some((e, c)) if *e == k => *c += diff,
                    Some((e, _)) if KeySet::beats(*max, *e, k) => {}
                    _ => *best = Some((k, diff)),
                }
            }
            Acc::Bool { trues, falses } => match view {
                ArgView::Bool(a) if a.value(i) => *trues += diff,
                ArgView::Bool(_) => *falses += diff,
                _ => return Err(WeirError::internal("boolean view mismatch")),
            },
            Acc::Ordered { elements } => {
                let e = value.ok_or_else(|| WeirError::internal("ordered element"))?;
                match elements.get_mut(e) {
                    Some((c, _)) => {
                        *c += diff;
                        if *c == 0 {
                            elements.remove(e);
                        }
                    }
                    None if diff != 0 => {
                        let ArgView::Any(a) = view else {
                            return Err(WeirError::internal("ordered view mismatch"));
                        };
                        let v = ScalarValue::try_from_array(a, i)
                            .map_err(|e| WeirError::internal(e.strip_backtrace()))?;
                        elements.insert(e.into(), (diff, v));
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// Applies value i of `view` with multiplicity `diff` to the accumulator kept `at` among
    /// a group's `counts` and `accs` (a count counts it; the row count is not kept there).
    #[inline]
    pub(super) fn add_to(
        counts: &mut [i64],
        accs: &mut [AccState],
        at: Place,
        view: &ArgView,
        i: usize,
        value: Option<&[u8]>,
        diff: i64,
    ) -> Result<()> {
        match at {
            Place::Rows => Ok(()),
            Place::Count(c) => match counts.get_mut(c as usize) {
                Some(n) => {
                    *n += diff;
                    Ok(())
                }
                None => Err(WeirError::internal("a group's count")),
            },
            Place::Acc(c) => match accs.get_mut(c as usize) {
                Some(st) => Self::update(&mut st.acc, view, i, value, diff),
                None => Err(WeirError::internal("a group's accumulator")),
            },
        }
    }

    /// Appends the current output values of a group to `out`, one per aggregate (of
    /// `aggs`, kept at `places`).
    pub(super) fn output_into(
        aggs: &[AggSpec],
        places: &[Place],
        g: &Group,
        out: &mut Vec<Out>,
    ) -> Result<()> {
        // The values are written into places made first, not pushed: a pushed value is built
        // in a temporary and copied, and the copy's wide load of the temporary's narrower
        // stores stalled (a tenth of q16's time).
        let base = out.len();
        out.resize(base + aggs.len(), Out::Null);
        for ((spec, at), value) in aggs.iter().zip(places).zip(&mut out[base..]) {
            *value = Self::output_value(spec, *at, g)?;
        }
        Ok(())
    }

    /// The current output value of one aggregate of group `g`, kept `at`.
    #[inline(always)]
    pub(super) fn output_value(spec: &AggSpec, at: Place, g: &Group) -> Result<Out> {
        match at {
            Place::Rows => Ok(Out::Int(g.rows)),
            Place::Count(c) => {
                let n = g.counts.get(c as usize);
                n.map(|n| Out::Int(*n)).ok_or_else(|| WeirError::internal("a group's count"))
            }
            Place::Acc(a) => match g.accs.get(a as usize) {
                Some(st) => Self::acc_value(spec, &st.acc),
                None => Err(WeirError::internal("a group's accumulator")),
            },
        }
    }

    /// The current output value of accumulator `acc` of aggregate `spec`.
    #[inline(always)]
    fn acc_value(spec: &AggSpec, acc: &Acc) -> Result<Out> {
        let decimal = matches!(spec.arg_type, DataType::Decimal128(..));
        Ok(match acc {
            Acc::Bool { trues, falses } if *trues + *falses <= 0 => Out::Null,
            Acc::Bool { trues, falses } => {
                Out::Bool(if spec.func == AggFunc::BoolAnd { *falses <= 0 } else { *trues > 0 })
            }
            Acc::Ordered { elements } => ordered_output(spec, elements)?,
            Acc::Sum { sum, n } if decimal && *n > 0 => Out::dec(sum.get()),
            Acc::Avg { sum, n } if decimal && *n > 0 => {
                let DataType::Decimal128(_, scale) = spec.arg_type else { return Ok(Out::Null) };
                Out::dec(decimal_avg(sum.get(), *n, scale)?)
            }
            Acc::MinMax { values, max } => {
                bytes_extreme(values, *max).map_or(Out::Null, |v| Out::bytes(v))
            }
            Acc::ExtremeBytes { best, .. } => {
                best.as_ref().map_or(Out::Null, |(v, _)| Out::bytes(v))
            }
            Acc::SumFloat { .. } | Acc::Avg { .. } | Acc::AvgFloat { .. } => {
                Self::acc_word(spec, acc)?.map_or(Out::Null, Out::Float)
            }
            Acc::Sum { .. } | Acc::MinMaxKey { .. } | Acc::Extreme { .. } => {
                Self::acc_word(spec, acc)?.map_or(Out::Null, |w| Out::Int(w as i64))
            }
        })
    }

    /// The current value of one aggregate of group `g`, kept `at`, as the 64 bits its column
    /// of words holds (see `Emitted`); None for NULL.
    #[inline(always)]
    pub(super) fn word_value(spec: &AggSpec, at: Place, g: &Group) -> Result<Option<u64>> {
        match at {
            Place::Rows => Ok(Some(g.rows as u64)),
            Place::Count(c) => match g.counts.get(c as usize) {
                Some(n) => Ok(Some(*n as u64)),
                None => Err(WeirError::internal("a group's count")),
            },
            Place::Acc(a) => match g.accs.get(a as usize) {
                Some(st) => Self::acc_word(spec, &st.acc),
                None => Err(WeirError::internal("a group's accumulator")),
            },
        }
    }

    /// The value of a numeric accumulator as 64 bits (an integer SUM, a DOUBLE's bits, or a
    /// MIN/MAX order key); None for NULL. Returned in registers: built as an [`Out`] in a
    /// temporary and read back, a value's narrower stores and the wider loads of its copy
    /// stalled each output row (q17, when the compiler merged the match's arms' stores).
    #[inline(always)]
    fn acc_word(spec: &AggSpec, acc: &Acc) -> Result<Option<u64>> {
        let decimal = matches!(spec.arg_type, DataType::Decimal128(..));
        Ok(match acc {
            Acc::Sum { n, .. }
            | Acc::SumFloat { n, .. }
            | Acc::Avg { n, .. }
            | Acc::AvgFloat { n, .. }
                if *n <= 0 =>
            {
                None
            }
            Acc::Sum { sum, .. } if !decimal => Some(
                i64::try_from(sum.get()).map_err(|_| WeirError::exec("integer overflow in SUM"))?
                    as u64,
            ),
            Acc::SumFloat { sum, .. } => Some(sum.to_bits()),
            Acc::Avg { sum, n } if !decimal => Some((sum.get() as f64 / *n as f64).to_bits()),
            Acc::AvgFloat { sum, n } => Some((*sum / *n as f64).to_bits()),
            Acc::MinMaxKey { values, max } => values.extreme(*max).map(|v| v as u64),
            Acc::Extreme { best, .. } => best.map(|(v, _)| v as u64),
            _ => return Err(WeirError::internal("an accumulator without a 64-bit value")),
        })
    }

    /// The output column of aggregate `a` from its [`Out`] values.
    pub(super) fn finish_outs(&self, a: usize, vals: &[Out]) -> Result<ArrayRef> {
        let spec = &self.aggs[a];
        let arr: ArrayRef = match self.kinds[a] {
            Kind::Int | Kind::Float | Kind::KeyInt | Kind::KeyFloat => {
                return Err(WeirError::internal(format!(
                    "aggregate {a}'s values are kept as 64-bit words"
                )))
            }
            Kind::Dec(p, s) => std::sync::Arc::new(
                Decimal128Array::from_iter(vals.iter().map(|v| match v {
                    Out::Dec(lo, hi) => Some(((*hi as i128) << 64) | *lo as i128),
                    _ => None,
                }))
                .with_precision_and_scale(p, s)?,
            ),
            Kind::Bool => {
                std::sync::Arc::new(BooleanArray::from_iter(vals.iter().map(|v| match v {
                    Out::Bool(b) => Some(*b),
                    _ => None,
                })))
            }
            Kind::Scalar => {
                let ty = ordered_type(spec);
                let null =
                    ScalarValue::try_from(&ty).map_err(|e| WeirError::exec(e.to_string()))?;
                let scalars = vals.iter().map(|v| match v {
                    Out::Scalar(s) => s.as_ref().clone(),
                    _ => null.clone(),
                });
                ScalarValue::iter_to_array(scalars).map_err(|e| WeirError::exec(e.to_string()))?
            }
            Kind::Bytes => {
                let codec = self.value_codecs[a]
                    .as_ref()
                    .ok_or_else(|| WeirError::internal("min/max without codec"))?;
                let mut present: Vec<&[u8]> = Vec::with_capacity(vals.len());
                let mut idx: Vec<Option<u32>> = Vec::with_capacity(vals.len());
                for v in vals {
                    match v.as_bytes() {
                        Some(b) => {
                            idx.push(Some(present.len() as u32));
                            present.push(b);
                        }
                        None => idx.push(None),
                    }
                }
                if present.is_empty() {
                    arrow::array::new_null_array(&spec.arg_type, vals.len())
                } else {
                    let all = present.len() == vals.len();
                    let decoded = codec
                        .decode(present)?
                        .pop()
                        .ok_or_else(|| WeirError::internal("min/max decode"))?;
                    // Without a NULL the decoded values are the column, in order.
                    if all {
                        decoded
                    } else {
                        arrow::compute::take(&decoded, &UInt32Array::from(idx), None)?
                    }
                }
            }
        };
        cast_to(arr, self.schema.field(self.keys.len() + a).data_type())
    }

    /// The output column of aggregate `a` from its values as 64-bit words (see
    /// [`super::Emitted`]'s words): an integer or float array over `vals` as they are (an
    /// order key's floats converted first).
    pub(super) fn finish_words(
        &self,
        a: usize,
        vals: Vec<u64>,
        nulls: Option<NullBuffer>,
    ) -> Result<ArrayRef> {
        let ints = |vals: Vec<u64>| {
            let vals: Vec<i64> = vals.into_iter().map(|w| w as i64).collect();
            Int64Array::new(ScalarBuffer::from(vals), nulls.clone())
        };
        let floats = |vals: Vec<f64>| Float64Array::new(ScalarBuffer::from(vals), nulls.clone());
        let arr: ArrayRef = match self.kinds[a] {
            Kind::Int => std::sync::Arc::new(ints(vals)),
            Kind::KeyInt => cast_to(std::sync::Arc::new(ints(vals)), &self.aggs[a].arg_type)?,
            Kind::Float => {
                std::sync::Arc::new(floats(vals.into_iter().map(f64::from_bits).collect()))
            }
            Kind::KeyFloat => {
                std::sync::Arc::new(floats(vals.into_iter().map(|w| key_f64(w as i64)).collect()))
            }
            Kind::Dec(..) | Kind::Bytes | Kind::Bool | Kind::Scalar => {
                return Err(WeirError::internal(format!(
                    "aggregate {a}'s values are not 64-bit words"
                )))
            }
        };
        cast_to(arr, self.schema.field(self.keys.len() + a).data_type())
    }
}

/// The type an ordered aggregate's values are built in (then cast to the output's type).
fn ordered_type(spec: &AggSpec) -> DataType {
    match spec.func {
        AggFunc::StringAgg => DataType::Utf8,
        AggFunc::ArrayAgg => DataType::List(std::sync::Arc::new(
            arrow::datatypes::Field::new_list_field(spec.arg_type.clone(), true),
        )),
        _ => spec.arg_type.clone(),
    }
}

/// The value of an ordered aggregate over its elements, in their order: a NULL over none.
/// O(elements) for STRING_AGG and ARRAY_AGG, O(1) for FIRST_VALUE and LAST_VALUE.
fn ordered_output(
    spec: &AggSpec,
    elements: &BTreeMap<RowBytes, (i64, ScalarValue)>,
) -> Result<Out> {
    let present = || elements.values().filter(|(c, _)| *c > 0);
    let scalar = |v: ScalarValue| Out::Scalar(Box::new(v));
    Ok(match spec.func {
        AggFunc::FirstValue => present().next().map_or(Out::Null, |(_, v)| scalar(v.clone())),
        AggFunc::LastValue => present().next_back().map_or(Out::Null, |(_, v)| scalar(v.clone())),
        AggFunc::StringAgg => {
            let sep = spec.separator.as_deref().unwrap_or("");
            let mut s = String::new();
            let mut any = false;
            for (c, v) in present() {
                let text = match v {
                    ScalarValue::Utf8(Some(t))
                    | ScalarValue::LargeUtf8(Some(t))
                    | ScalarValue::Utf8View(Some(t)) => t.clone(),
                    other => other.to_string(),
                };
                for _ in 0..*c {
                    if any {
                        s.push_str(sep);
                    }
                    s.push_str(&text);
                    any = true;
                }
            }
            if any {
                scalar(ScalarValue::Utf8(Some(s)))
            } else {
                Out::Null
            }
        }
        AggFunc::ArrayAgg => {
            let mut vals = Vec::new();
            for (c, v) in present() {
                for _ in 0..*c {
                    vals.push(v.clone());
                }
            }
            if vals.is_empty() {
                Out::Null
            } else {
                scalar(ScalarValue::List(ScalarValue::new_list_nullable(&vals, &spec.arg_type)))
            }
        }
        other => return Err(WeirError::internal(format!("{other} is not an ordered aggregate"))),
    })
}
