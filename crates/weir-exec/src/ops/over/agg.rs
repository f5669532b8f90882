//! OVER aggregation on a stream (Flink's): `agg(x) OVER (PARTITION BY p ORDER BY ts frame)`
//! over an append-only stream ordered by its event-time column `ts`, the frame ending at the
//! current row.
//!
//! Output: every input row, once, at its own instant, followed by one value per aggregate,
//! computed over the row's frame within its partition (equal p, NULLs equal). The order is
//! (ts, row): rows with equal ts are ordered by the whole row's value, ascending (the ranking's
//! tiebreak, see [`super`]).
//! - `ROWS n PRECEDING`: the row and the n rows before it in that order;
//!   `ROWS UNBOUNDED PRECEDING`: the row and every row before it.
//! - `RANGE d PRECEDING`: the rows stamped in [ts − d, ts], including every peer (equal ts),
//!   so rows of one instant in a partition share their values; `RANGE UNBOUNDED PRECEDING`
//!   (SQL's default frame with ORDER BY): every row stamped ≤ ts.
//!
//! COUNT(*) counts rows; the others skip NULLs (SUM, MIN, MAX are NULL over no value, AVG too,
//! COUNT(x) is 0). A SUM that overflows its type is an error.
//! `FIRST_VALUE(x)`/`LAST_VALUE(x)` are x of the frame's first/last row (RANGE: the last peer),
//! NULLs included. `LAG(x, k, d)` (no frame) is x of the row k places before in the
//! partition's (ts, row) order, or d evaluated on the row (NULL without d) when there is none;
//! LEAD needs later rows and is planned on the relation instead ([`super::frames`]).
//!
//! Delta semantics: rows only arrive, each at the instant its ts holds, and every row of a
//! frame is stamped at or before the current row's instant, so a row's values are final when
//! it arrives: at instant τ the output is +(row, values) for each row stamped τ, nothing else
//! (the result only grows: the plan is monotonic, a stream under the implicit ISTREAM). A
//! retraction in the input is an error (the planner chooses this only over append-only input).
//! Work per row: O(frame) for bounded frames (the frame is rescanned), O(1) for unbounded ones.
//! State per partition: the rows of a bounded frame (arguments only, with their ts), or the
//! running aggregates of an unbounded one (with the first and last value); checkpointed as
//! section `over_agg` (`part`, `ts` Int64, `vals` Binary), sorted by partition then position;
//! with LAG also the arguments of the last k rows (k the largest offset), section
//! `over_agg_lag` (`part`, `vals`), in order.

use std::collections::{BTreeMap, HashMap, VecDeque};

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{AggFunc, OverFrame, OverFunc};

use super::OverKeys;
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, time_runs, Operator, Step};
use crate::row::{RowBytes, RowCodec};
use crate::state::{binary_col, i64_col, signature, StateReader, StateWriter};

/// One function: an aggregate, FIRST_VALUE, LAST_VALUE or LAG; argument (none for
/// COUNT(*)), LAG's default, argument and result types.
#[derive(Debug)]
pub struct OverAggSpec {
    pub func: OverFunc,
    pub arg: Option<ScalarExpr>,
    pub default: Option<ScalarExpr>,
    pub arg_type: DataType,
    pub out_type: DataType,
}

/// A running aggregate over the values added to it (also used by [`super::frames`]).
#[derive(Debug, Clone)]
pub(super) struct Acc {
    rows: i64,
    count: i64,
    /// SUM (in the argument's type, and AVG's over a decimal), MIN, MAX, and AVG's sum as a
    /// double.
    sum: ScalarValue,
    min: ScalarValue,
    max: ScalarValue,
    fsum: f64,
    /// The first and the last value added (NULL before any).
    first: ScalarValue,
    last: ScalarValue,
}

/// The values it keeps (a string's or a decimal's bytes).
impl HeapSize for Acc {
    fn heap_bytes(&self) -> usize {
        [&self.sum, &self.min, &self.max, &self.first, &self.last]
            .iter()
            .map(|v| v.heap_bytes())
            .sum()
    }
}

impl Acc {
    pub(super) fn new(arg_type: &DataType) -> Result<Acc> {
        let null = ScalarValue::try_from(arg_type).map_err(df)?;
        Ok(Acc {
            rows: 0,
            count: 0,
            sum: null.clone(),
            min: null.clone(),
            max: null.clone(),
            fsum: 0.0,
            first: null.clone(),
            last: null,
        })
    }

    pub(super) fn add(&mut self, func: AggFunc, v: &ScalarValue) -> Result<()> {
        if self.rows == 0 {
            self.first = v.clone();
        }
        self.last = v.clone();
        self.rows += 1;
        if v.is_null() {
            return Ok(());
        }
        self.count += 1;
        match func {
            // AVG over a decimal keeps an exact sum, divided when the value is read.
            AggFunc::Sum => self.add_to_sum(func, v)?,
            AggFunc::Avg if matches!(v, ScalarValue::Decimal128(..)) => self.add_to_sum(func, v)?,
            AggFunc::Avg => {
                if let ScalarValue::Float64(Some(x)) = v.cast_to(&DataType::Float64).map_err(df)? {
                    self.fsum += x;
                }
            }
            AggFunc::Min => {
                if self.min.is_null() || v.partial_cmp(&self.min) == Some(std::cmp::Ordering::Less)
                {
                    self.min = v.clone();
                }
            }
            AggFunc::Max => {
                if self.max.is_null()
                    || v.partial_cmp(&self.max) == Some(std::cmp::Ordering::Greater)
                {
                    self.max = v.clone();
                }
            }
            AggFunc::CountStar
            | AggFunc::Count
            | AggFunc::BoolAnd
            | AggFunc::BoolOr
            | AggFunc::StringAgg
            | AggFunc::ArrayAgg
            | AggFunc::FirstValue
            | AggFunc::LastValue
            | AggFunc::ApproxCountDistinct { .. }
            | AggFunc::ApproxPercentile { .. }
            | AggFunc::ApproxTopK { .. } => {}
        }
        Ok(())
    }

    fn add_to_sum(&mut self, func: AggFunc, v: &ScalarValue) -> Result<()> {
        self.sum = if self.sum.is_null() {
            v.clone()
        } else {
            self.sum.add_checked(v).map_err(|e| {
                WeirError::exec(format!("{func} over a window: {}", e.strip_backtrace()))
            })?
        };
        Ok(())
    }

    fn result(&self, spec: &OverAggSpec) -> Result<ScalarValue> {
        match spec.func {
            OverFunc::Agg(f) => self.value(f, &spec.out_type),
            OverFunc::FirstValue => self.first.cast_to(&spec.out_type).map_err(df),
            OverFunc::LastValue => self.last.cast_to(&spec.out_type).map_err(df),
            // Set row by row after the frame's values (see `fill_lags`).
            OverFunc::Lag(_) | OverFunc::Lead(_) => {
                ScalarValue::try_from(&spec.out_type).map_err(df)
            }
        }
    }

    /// The aggregate `func` of the values added so far, as `out_type`.
    pub(super) fn value(&self, func: AggFunc, out_type: &DataType) -> Result<ScalarValue> {
        let v = match func {
            AggFunc::CountStar => ScalarValue::Int64(Some(self.rows)),
            AggFunc::Count => ScalarValue::Int64(Some(self.count)),
            AggFunc::Sum => self.sum.clone(),
            AggFunc::Avg if self.count == 0 => ScalarValue::Float64(None),
            AggFunc::Avg => match self.sum {
                ScalarValue::Decimal128(Some(sum), _, scale) => {
                    let avg = crate::ops::aggregate::decimal_avg(sum, self.count, scale)?;
                    ScalarValue::Decimal128(Some(avg), 38, crate::ops::aggregate::avg_scale(scale))
                }
                _ => ScalarValue::Float64(Some(self.fsum / self.count as f64)),
            },
            AggFunc::Min => self.min.clone(),
            AggFunc::Max => self.max.clone(),
            other => return Err(WeirError::internal(format!("{other} is not an OVER aggregate"))),
        };
        v.cast_to(out_type).map_err(df)
    }

    /// The accumulator as scalars of [`acc_types`], and back.
    fn to_scalars(&self) -> Vec<ScalarValue> {
        vec![
            ScalarValue::Int64(Some(self.rows)),
            ScalarValue::Int64(Some(self.count)),
            self.sum.clone(),
            self.min.clone(),
            self.max.clone(),
            ScalarValue::Float64(Some(self.fsum)),
            self.first.clone(),
            self.last.clone(),
        ]
    }

    fn from_scalars(v: &[ScalarValue]) -> Result<Acc> {
        let int = |s: &ScalarValue| match s {
            ScalarValue::Int64(Some(n)) => Ok(*n),
            _ => Err(crate::state::invalid("section 'over_agg': a bad count")),
        };
        match v {
            [rows, count, sum, min, max, ScalarValue::Float64(Some(fsum)), first, last] => {
                Ok(Acc {
                    rows: int(rows)?,
                    count: int(count)?,
                    sum: sum.clone(),
                    min: min.clone(),
                    max: max.clone(),
                    fsum: *fsum,
                    first: first.clone(),
                    last: last.clone(),
                })
            }
            _ => Err(crate::state::invalid("section 'over_agg': a bad accumulator")),
        }
    }
}

/// How many scalars [`Acc::to_scalars`] gives.
const ACC_SCALARS: usize = 8;

/// What an accumulator computes for `f` (LAG: nothing, see `fill_lags`).
fn acc_func(f: OverFunc) -> Option<AggFunc> {
    match f {
        OverFunc::Agg(a) => Some(a),
        OverFunc::FirstValue | OverFunc::LastValue => Some(AggFunc::CountStar),
        OverFunc::Lag(_) | OverFunc::Lead(_) => None,
    }
}

fn acc_types(arg_type: &DataType) -> Vec<DataType> {
    vec![
        DataType::Int64,
        DataType::Int64,
        arg_type.clone(),
        arg_type.clone(),
        arg_type.clone(),
        DataType::Float64,
        arg_type.clone(),
        arg_type.clone(),
    ]
}

/// One partition's state.
#[derive(Debug, Default)]
struct Part {
    /// Bounded frames: the rows that later rows' frames can still see (ts, arguments).
    frame: VecDeque<(Time, Vec<ScalarValue>)>,
    /// Unbounded frames: one running aggregate per aggregate.
    accs: Vec<Acc>,
    /// With LAG: the arguments of the last rows (as many as the largest LAG offset).
    hist: VecDeque<Vec<ScalarValue>>,
}

impl HeapSize for Part {
    fn heap_bytes(&self) -> usize {
        self.frame.heap_bytes() + self.accs.heap_bytes() + self.hist.heap_bytes()
    }
}

#[derive(Debug)]
pub struct OverAgg {
    keys: OverKeys,
    ts: ScalarExpr,
    frame: OverFrame,
    aggs: Vec<OverAggSpec>,
    schema: SchemaRef,
    /// Encodes one row of arguments (bounded) or of accumulators (unbounded) for checkpoints.
    vals_codec: RowCodec,
    /// Encodes one row of arguments (LAG's history) for checkpoints.
    args_codec: RowCodec,
    /// The largest LAG offset (0: no LAG).
    lag_depth: usize,
    parts: HashMap<RowBytes, Part>,
}

impl OverAgg {
    pub fn new(
        keys: OverKeys,
        ts: ScalarExpr,
        frame: OverFrame,
        aggs: Vec<OverAggSpec>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let types: Vec<DataType> = if Self::unbounded_frame(frame) {
            aggs.iter().flat_map(|a| acc_types(&a.arg_type)).collect()
        } else {
            aggs.iter().map(|a| a.arg_type.clone()).collect()
        };
        let lag_depth = aggs
            .iter()
            .map(|a| match a.func {
                OverFunc::Lag(k) => usize::try_from(k).unwrap_or(usize::MAX),
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        if aggs.iter().any(|a| matches!(a.func, OverFunc::Lead(_))) {
            return Err(WeirError::internal("LEAD planned on a stream"));
        }
        Ok(OverAgg {
            keys,
            ts,
            frame,
            args_codec: RowCodec::new(aggs.iter().map(|a| a.arg_type.clone()).collect())?,
            aggs,
            schema,
            vals_codec: RowCodec::new(types)?,
            lag_depth,
            parts: HashMap::new(),
        })
    }

    fn unbounded_frame(frame: OverFrame) -> bool {
        matches!(frame, OverFrame::Rows(None) | OverFrame::Range(None))
    }

    fn signature(&self) -> String {
        let aggs: Vec<String> = self
            .aggs
            .iter()
            .map(|a| format!("{:?} {} {}", a.func, a.arg_type, a.out_type))
            .collect();
        signature("over_agg", &self.schema, (self.keys.params(), self.frame, aggs))
    }

    fn new_accs(&self) -> Result<Vec<Acc>> {
        self.aggs.iter().map(|a| Acc::new(&a.arg_type)).collect()
    }

    /// The aggregates over the rows of a bounded frame.
    fn over_frame(&self, rows: &VecDeque<(Time, Vec<ScalarValue>)>) -> Result<Vec<ScalarValue>> {
        let mut accs = self.new_accs()?;
        for (_, vals) in rows {
            for ((acc, spec), v) in accs.iter_mut().zip(&self.aggs).zip(vals) {
                if let Some(f) = acc_func(spec.func) {
                    acc.add(f, v)?;
                }
            }
        }
        accs.iter().zip(&self.aggs).map(|(a, s)| a.result(s)).collect()
    }

    fn eval_run(&mut self, d: &ChangeBatch, start: usize, end: usize) -> Result<Vec<OutRow>> {
        let slice = d.slice(start, end - start);
        let encoded = self.keys.encode(d, start, end)?;
        let ts = self.ts.eval_as(&slice.data, &DataType::Int64)?;
        let ts = arrow::array::cast::as_primitive_array::<arrow::datatypes::Int64Type>(&ts);
        let args: Vec<Option<ArrayRef>> = self
            .aggs
            .iter()
            .map(|a| a.arg.as_ref().map(|e| e.eval_as(&slice.data, &a.arg_type)).transpose())
            .collect::<Result<_>>()?;
        let defaults: Vec<Option<ArrayRef>> = self
            .aggs
            .iter()
            .map(|a| a.default.as_ref().map(|e| e.eval_as(&slice.data, &a.arg_type)).transpose())
            .collect::<Result<_>>()?;
        // The run's rows per partition, in (order key, row) order, each copy of a duplicate.
        let mut by_part: BTreeMap<RowBytes, Vec<(RowBytes, RowBytes, usize)>> = BTreeMap::new();
        for (i, (p, (k, r), n)) in encoded.into_iter().enumerate() {
            if n < 0 {
                return Err(WeirError::exec(
                    "OVER aggregation: its input retracted a row, but it was planned over an \
                     append-only stream",
                ));
            }
            let group = by_part.entry(p).or_default();
            for _ in 0..n {
                group.push((k.clone(), r.clone(), i));
            }
        }
        let mut out = Vec::new();
        for (p, mut rows) in by_part {
            rows.sort();
            let mut part = match self.parts.remove(&p) {
                Some(part) => part,
                None => {
                    Part { frame: VecDeque::new(), accs: self.new_accs()?, hist: VecDeque::new() }
                }
            };
            let base = out.len();
            let order: Vec<usize> = rows.iter().map(|(_, _, i)| *i).collect();
            let vals_of = |i: usize| -> Result<Vec<ScalarValue>> {
                self.aggs
                    .iter()
                    .zip(&args)
                    .map(|(_, a)| match a {
                        Some(a) => ScalarValue::try_from_array(a, i).map_err(df),
                        None => Ok(ScalarValue::Int64(Some(1))),
                    })
                    .collect()
            };
            let t = |i: usize| -> Result<Time> {
                if ts.is_null(i) {
                    Err(WeirError::exec("OVER aggregation: a row without event time"))
                } else {
                    Ok(ts.value(i))
                }
            };
            match self.frame {
                OverFrame::Rows(None) => {
                    for (_, r, i) in rows {
                        for ((acc, spec), v) in
                            part.accs.iter_mut().zip(&self.aggs).zip(vals_of(i)?)
                        {
                            if let Some(f) = acc_func(spec.func) {
                                acc.add(f, &v)?;
                            }
                        }
                        let values = part
                            .accs
                            .iter()
                            .zip(&self.aggs)
                            .map(|(a, s)| a.result(s))
                            .collect::<Result<_>>()?;
                        out.push((r, values));
                    }
                }
                OverFrame::Range(None) => {
                    for (_, _, i) in &rows {
                        for ((acc, spec), v) in
                            part.accs.iter_mut().zip(&self.aggs).zip(vals_of(*i)?)
                        {
                            if let Some(f) = acc_func(spec.func) {
                                acc.add(f, &v)?;
                            }
                        }
                    }
                    let values: Vec<ScalarValue> = part
                        .accs
                        .iter()
                        .zip(&self.aggs)
                        .map(|(a, s)| a.result(s))
                        .collect::<Result<_>>()?;
                    out.extend(rows.into_iter().map(|(_, r, _)| (r, values.clone())));
                }
                OverFrame::Rows(Some(n)) => {
                    for (_, r, i) in rows {
                        part.frame.push_back((t(i)?, vals_of(i)?));
                        while part.frame.len() as u64 > n.saturating_add(1) {
                            part.frame.pop_front();
                        }
                        out.push((r, self.over_frame(&part.frame)?));
                    }
                }
                OverFrame::Range(Some(dist)) => {
                    let Some(&(_, _, first)) = rows.first() else { continue };
                    let now = t(first)?;
                    for (_, _, i) in &rows {
                        part.frame.push_back((t(*i)?, vals_of(*i)?));
                    }
                    let lo = now.saturating_sub(dist);
                    while part.frame.front().is_some_and(|(ts, _)| *ts < lo) {
                        part.frame.pop_front();
                    }
                    let values = self.over_frame(&part.frame)?;
                    out.extend(rows.into_iter().map(|(_, r, _)| (r, values.clone())));
                }
            }
            if self.lag_depth > 0 {
                // LAG row by row, in order: the argument k rows back, or the default.
                for (n, &i) in order.iter().enumerate() {
                    let vals = vals_of(i)?;
                    for (j, spec) in self.aggs.iter().enumerate() {
                        let OverFunc::Lag(k) = spec.func else { continue };
                        let back = usize::try_from(k).unwrap_or(usize::MAX);
                        let v = if back == 0 {
                            vals[j].clone()
                        } else if part.hist.len() >= back {
                            part.hist[part.hist.len() - back][j].clone()
                        } else {
                            match &defaults[j] {
                                Some(d) => ScalarValue::try_from_array(d, i).map_err(df)?,
                                None => ScalarValue::try_from(&spec.out_type).map_err(df)?,
                            }
                        };
                        if let Some(row) = out.get_mut(base + n) {
                            row.1[j] = v.cast_to(&spec.out_type).map_err(df)?;
                        }
                    }
                    part.hist.push_back(vals);
                    while part.hist.len() > self.lag_depth {
                        part.hist.pop_front();
                    }
                }
            }
            self.parts.insert(p, part);
        }
        Ok(out)
    }
}

/// An output row: the encoded input row and its aggregate values.
type OutRow = (RowBytes, Vec<ScalarValue>);

impl Operator for OverAgg {
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let mut rows: Vec<OutRow> = Vec::new();
        let mut times: Vec<Time> = Vec::new();
        let mut start = 0;
        for end in time_runs(&d.times) {
            let t = d.times[start];
            let out = self.eval_run(&d, start, end)?;
            times.extend(std::iter::repeat_n(t, out.len()));
            rows.extend(out);
            start = end;
        }
        if rows.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut cols = self.keys.decode_rows(rows.iter().map(|(r, _)| &r[..]))?;
        for (j, spec) in self.aggs.iter().enumerate() {
            let vals = rows.iter().map(|(_, v)| v[j].clone());
            let arr = if rows.is_empty() {
                arrow::array::new_empty_array(&spec.out_type)
            } else {
                ScalarValue::iter_to_array(vals).map_err(df)?
            };
            cols.push(arr);
        }
        let data = crate::ops::batch_of(&self.schema, cols, rows.len())?;
        Ok(ChangeBatch::new(data, times, vec![1; rows.len()]))
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A partition's rows meet on one worker (see [`OverKeys::placement`]).
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        self.keys.placement()
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    /// Per partition: a bounded frame's rows, an unbounded one's running aggregates, LAG's
    /// last rows.
    fn state_bytes(&self) -> usize {
        self.parts.heap_bytes()
    }

    /// State: section `over_agg`, per partition (sorted) its frame rows in order (`ts`, `vals`:
    /// the arguments encoded as one row), or one row of its running aggregates (`ts` 0).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let mut parts: Vec<(&RowBytes, &Part)> = self.parts.iter().collect();
        parts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut pk: Vec<&[u8]> = Vec::new();
        let mut ts: Vec<i64> = Vec::new();
        let mut vals: Vec<RowBytes> = Vec::new();
        for (p, part) in parts {
            let rows: Vec<(Time, Vec<ScalarValue>)> = if Self::unbounded_frame(self.frame) {
                vec![(0, part.accs.iter().flat_map(Acc::to_scalars).collect())]
            } else {
                part.frame.iter().cloned().collect()
            };
            for (t, v) in rows {
                pk.push(&p[..]);
                ts.push(t);
                vals.push(encode_scalars(&self.vals_codec, &v)?);
            }
        }
        w.put(
            "over_agg",
            &self.signature(),
            pk.len(),
            vec![
                ("part", binary_col(pk.iter().copied())),
                ("ts", i64_col(ts.iter().copied())),
                ("vals", binary_col(vals.iter().map(|v| &v[..]))),
            ],
        )?;
        if self.lag_depth == 0 {
            return Ok(());
        }
        // LAG's history: section `over_agg_lag` (`part`, `vals`: the arguments as one row),
        // per partition (sorted) its last rows in order.
        let mut parts: Vec<(&RowBytes, &Part)> = self.parts.iter().collect();
        parts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut pk: Vec<&[u8]> = Vec::new();
        let mut vals: Vec<RowBytes> = Vec::new();
        for (p, part) in parts {
            for v in &part.hist {
                pk.push(&p[..]);
                vals.push(encode_scalars(&self.args_codec, v)?);
            }
        }
        w.put(
            "over_agg_lag",
            &self.signature(),
            pk.len(),
            vec![
                ("part", binary_col(pk.iter().copied())),
                ("vals", binary_col(vals.iter().map(|v| &v[..]))),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("over_agg", &self.signature())?;
        let (parts, ts, vals) = (s.binary("part")?, s.i64s("ts")?, s.binary("vals")?);
        self.parts.clear();
        for ((p, t), v) in parts.into_iter().zip(ts).zip(vals) {
            let scalars = decode_scalars(&self.vals_codec, v)?;
            let part = self.parts.entry(RowBytes::from(p)).or_default();
            if Self::unbounded_frame(self.frame) {
                if !part.accs.is_empty() {
                    return Err(crate::state::invalid("section 'over_agg': a partition twice"));
                }
                part.accs =
                    scalars.chunks(ACC_SCALARS).map(Acc::from_scalars).collect::<Result<_>>()?;
            } else {
                part.frame.push_back((t, scalars));
            }
        }
        if self.lag_depth > 0 {
            let s = r.take("over_agg_lag", &self.signature())?;
            for (p, v) in s.binary("part")?.into_iter().zip(s.binary("vals")?) {
                let scalars = decode_scalars(&self.args_codec, v)?;
                let part = self.parts.entry(RowBytes::from(p)).or_default();
                if part.hist.len() >= self.lag_depth {
                    return Err(crate::state::invalid("section 'over_agg_lag': too many rows"));
                }
                part.hist.push_back(scalars);
            }
        }
        Ok(())
    }
}

pub(super) fn df(e: datafusion_common::DataFusionError) -> WeirError {
    WeirError::exec(e.strip_backtrace())
}

fn encode_scalars(codec: &RowCodec, v: &[ScalarValue]) -> Result<RowBytes> {
    let cols: Vec<ArrayRef> = v.iter().map(|s| s.to_array().map_err(df)).collect::<Result<_>>()?;
    let rows = codec.encode(&cols, 1)?;
    Ok(RowBytes::from(rows.get(0)))
}

fn decode_scalars(codec: &RowCodec, bytes: &[u8]) -> Result<Vec<ScalarValue>> {
    let cols = codec.decode([bytes])?;
    cols.iter().map(|c| ScalarValue::try_from_array(c, 0).map_err(df)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::over::test_support::{k_by_v, kv_col, out_schema};
    use crate::testing::{kv, state_bytes_at};

    /// SUM(v) OVER (PARTITION BY k ORDER BY v RANGE 2 PRECEDING), v the event time.
    fn sum_over_range() -> OverAgg {
        let spec = OverAggSpec {
            func: OverFunc::Agg(AggFunc::Sum),
            arg: Some(kv_col("v")),
            default: None,
            arg_type: DataType::Int64,
            out_type: DataType::Int64,
        };
        let frame = OverFrame::Range(Some(2));
        OverAgg::new(k_by_v(false), kv_col("v"), frame, vec![spec], out_schema(1)).unwrap()
    }

    /// The figure grows with the rows a bounded frame keeps and falls back when later rows
    /// push them out of it.
    #[test]
    fn state_bytes_follow_the_frames_rows() {
        let mut op = sum_over_range();
        assert_eq!(op.state_bytes(), 0);
        let input = vec![kv(1, "+1 a 1, +1 a 1, +1 b 1"), kv(2, "+1 a 2"), kv(10, "+1 a 10")];
        // At 10 a's frame is [8, 10]: its three rows leave it.
        let [one, two, _] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert_eq!(op.parts.values().map(|p| p.frame.len()).sum::<usize>(), 2);
        assert!(op.state_bytes() < two, "{} after {two}", op.state_bytes());
    }
}
