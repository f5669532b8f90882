//! Grouped aggregation: γ_{keys; aggs}(R), with retraction.
//!
//! Delta semantics: for each group g touched by ΔR at τ, the output changes by
//! −(g, aggs_old) +(g, aggs_new), and by nothing when the values are equal. A group appears
//! when its row count becomes positive and disappears when it returns to zero. Without GROUP BY
//! the single row always exists from the query's first instant on (`COUNT(*)` = 0, `SUM` =
//! NULL over an empty relation, as SQL says).
//!
//! Retraction: COUNT, SUM and AVG are invertible and retract in O(1) (floating-point sums may
//! differ from a fresh sum in the last digits). MIN and MAX keep an ordered multiset of values
//! (value -> count), so deleting any value, not only the oldest, is exact. DISTINCT variants
//! keep a value -> count map and feed the inner aggregate only when a value appears or
//! disappears. State: per group, its row count and one accumulator per aggregate.
//!
//! Checkpointed as sections (see [`Aggregate::save_own`]): `aggregate` (one row: `started`),
//! `aggregate.groups` (per group sorted by key: `key` Binary, `rows` Int64, and per aggregate
//! `a` the columns `n{a}` Int64 (COUNT's count, SUM's and AVG's non-NULL count), `isum{a}`
//! (an integer or decimal SUM, 16-byte Binary), `fsum{a}` (a float SUM or AVG's sum, Float64)),
//! `aggregate.values` (MIN/MAX multisets) and `aggregate.seen` (DISTINCT value counts), both
//! as rows of `group` (index into the groups), `agg`, `value` Binary and `count` Int64.
//!
//! A span of instants is evaluated run by run: each run of input changes sharing an instant is
//! one step, exactly as if that instant were evaluated alone.

use std::collections::BTreeMap;

use datafusion_common::HashMap;

use arrow::array::{Array, ArrayRef, Decimal128Array, Float64Array, Int64Array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::AggFunc;

use crate::expr::ScalarExpr;
use crate::operator::{time_runs, EvalCtx, Operator};
use crate::ops::batch_of;
use crate::row::{RowBytes, RowCodec};
use crate::state::{
    binary_col, bool_col, i64_col, invalid, nonzero, opt_f64_col, opt_i128_col, opt_i64_col,
    signature, StateReader, StateWriter,
};

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
    Dec(i128, u8, i8),
}

#[derive(Debug, Clone)]
enum Acc {
    Count(i64),
    Sum { sum: Sum, n: i64 },
    Avg { sum: f64, n: i64 },
    MinMax { values: BTreeMap<RowBytes, i64>, max: bool },
}

#[derive(Debug, Clone)]
struct AccState {
    acc: Acc,
    /// For DISTINCT: multiplicity of each value.
    seen: Option<HashMap<RowBytes, i64>>,
}

#[derive(Debug, Clone)]
struct Group {
    rows: i64,
    accs: Vec<AccState>,
}

/// An argument column viewed in the accumulator's working type.
enum ArgView {
    None,
    Int(Int64Array),
    Float(Float64Array),
    Dec(Decimal128Array),
    /// Only the encoded value is used (MIN/MAX, COUNT).
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

#[derive(Debug)]
pub struct Aggregate {
    input: Box<dyn Operator>,
    keys: Vec<ScalarExpr>,
    key_codec: RowCodec,
    aggs: Vec<AggSpec>,
    /// Per aggregate: codec of its argument (MIN/MAX ordering, DISTINCT identity).
    value_codecs: Vec<Option<RowCodec>>,
    schema: SchemaRef,
    groups: HashMap<RowBytes, Group>,
    started: bool,
}

impl Aggregate {
    pub fn new(
        input: Box<dyn Operator>,
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
        Ok(Aggregate {
            input,
            keys,
            key_codec: RowCodec::new(key_types)?,
            aggs,
            value_codecs,
            schema,
            groups: HashMap::new(),
            started: false,
        })
    }

    fn new_group(&self) -> Group {
        let accs = self
            .aggs
            .iter()
            .map(|a| {
                let acc = match a.func {
                    AggFunc::CountStar | AggFunc::Count => Acc::Count(0),
                    AggFunc::Sum => Acc::Sum {
                        sum: match &a.arg_type {
                            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                                Sum::Float(0.0)
                            }
                            DataType::Decimal128(p, s) => Sum::Dec(0, *p, *s),
                            _ => Sum::Int(0),
                        },
                        n: 0,
                    },
                    AggFunc::Avg => Acc::Avg { sum: 0.0, n: 0 },
                    AggFunc::Min => Acc::MinMax { values: BTreeMap::new(), max: false },
                    AggFunc::Max => Acc::MinMax { values: BTreeMap::new(), max: true },
                };
                AccState { acc, seen: a.distinct.then(HashMap::new) }
            })
            .collect();
        Group { rows: 0, accs }
    }

    fn view(spec: &AggSpec, col: Option<&ArrayRef>) -> Result<ArgView> {
        let Some(col) = col else { return Ok(ArgView::None) };
        Ok(match spec.func {
            AggFunc::Sum | AggFunc::Avg => match col.data_type() {
                DataType::Decimal128(..) if spec.func == AggFunc::Sum => {
                    let a = col.as_any().downcast_ref::<Decimal128Array>().cloned();
                    ArgView::Dec(a.ok_or_else(|| WeirError::internal("decimal view"))?)
                }
                DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Decimal128(..) => {
                    let a = arrow::compute::cast(col, &DataType::Float64)?;
                    ArgView::Float(
                        a.as_any()
                            .downcast_ref::<Float64Array>()
                            .cloned()
                            .ok_or_else(|| WeirError::internal("float view"))?,
                    )
                }
                t if t.is_integer() || *t == DataType::Null || *t == DataType::Boolean => {
                    let a = arrow::compute::cast(col, &DataType::Int64)?;
                    let a = a.as_any().downcast_ref::<Int64Array>().cloned();
                    let a = a.ok_or_else(|| WeirError::internal("int view"))?;
                    if spec.func == AggFunc::Avg {
                        ArgView::Float(
                            arrow::compute::cast(&a, &DataType::Float64)?
                                .as_any()
                                .downcast_ref::<Float64Array>()
                                .cloned()
                                .ok_or_else(|| WeirError::internal("float view"))?,
                        )
                    } else {
                        ArgView::Int(a)
                    }
                }
                t => {
                    return Err(WeirError::Execution(format!(
                        "{} over {t} is not supported",
                        spec.func
                    )))
                }
            },
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
                    (Sum::Dec(s, _, _), ArgView::Dec(a)) => *s += a.value(i) * diff as i128,
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
                let c = values.entry(v.into()).or_insert(0);
                *c += diff;
                if *c == 0 {
                    values.remove(v);
                }
            }
        }
        Ok(())
    }

    /// The current output values of a group.
    fn output(&self, g: &Group) -> Result<Vec<ScalarValue>> {
        let mut out = Vec::with_capacity(self.aggs.len());
        for (k, (spec, st)) in self.aggs.iter().zip(&g.accs).enumerate() {
            let v = match &st.acc {
                Acc::Count(n) => {
                    if spec.func == AggFunc::CountStar {
                        ScalarValue::Int64(Some(g.rows))
                    } else {
                        ScalarValue::Int64(Some(*n))
                    }
                }
                Acc::Sum { sum, n } => match sum {
                    Sum::Int(s) if *n > 0 => ScalarValue::Int64(Some(
                        i64::try_from(*s)
                            .map_err(|_| WeirError::Execution("integer overflow in SUM".into()))?,
                    )),
                    Sum::Int(_) => ScalarValue::Int64(None),
                    Sum::Float(s) => ScalarValue::Float64((*n > 0).then_some(*s)),
                    Sum::Dec(s, p, sc) => ScalarValue::Decimal128((*n > 0).then_some(*s), *p, *sc),
                },
                Acc::Avg { sum, n } => ScalarValue::Float64((*n > 0).then(|| *sum / *n as f64)),
                Acc::MinMax { values, max } => {
                    let v = if *max { values.keys().next_back() } else { values.keys().next() };
                    match (v, &self.value_codecs[k]) {
                        (Some(v), Some(codec)) => {
                            let arr = codec.decode([&v[..]])?;
                            ScalarValue::try_from_array(&arr[0], 0)
                                .map_err(|e| WeirError::internal(e.to_string()))?
                        }
                        _ => ScalarValue::try_from(&spec.arg_type).unwrap_or(ScalarValue::Null),
                    }
                }
            };
            out.push(v);
        }
        Ok(out)
    }

    fn exists(&self, g: &Group) -> bool {
        self.keys.is_empty() || g.rows > 0
    }
}

impl Operator for Aggregate {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval(t, ctx)?;
        self.step(t, d)
    }

    /// State: see [`Aggregate::save_own`].
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        self.save_own(w)?;
        self.input.save_state(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.restore_own(r)?;
        self.input.restore_state(r)
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.input.next_wakeup()
    }

    fn span_capable(&self) -> bool {
        self.input.span_capable()
    }

    fn eval_span(&mut self, lo: Time, hi: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        let d = self.input.eval_span(lo, hi, ctx)?;
        let mut parts = Vec::new();
        // The first instant of the query is `lo`; the scalar aggregate's row exists from it.
        if !self.started && d.times.first() != Some(&lo) {
            parts.push(self.step(lo, ChangeBatch::empty(d.schema()))?);
        }
        let mut start = 0;
        for end in time_runs(&d.times) {
            let run = if start == 0 && end == d.len() {
                d.clone()
            } else {
                crate::query::slice(&d, start, end - start)
            };
            parts.push(self.step(d.times[start], run)?);
            start = end;
        }
        ChangeBatch::concat(&self.schema, &parts)
    }
}

impl Aggregate {
    fn signature(&self) -> String {
        let aggs: Vec<_> = self.aggs.iter().map(|a| (a.func, a.distinct, &a.arg_type)).collect();
        signature("aggregate", &self.schema, (self.keys.len(), aggs))
    }

    /// Writes the groups and accumulators (see the module docs for the layout).
    fn save_own(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        w.put("aggregate", &sig, 1, vec![("started", bool_col([self.started]))])?;
        let mut groups: Vec<(&RowBytes, &Group)> = self.groups.iter().collect();
        groups.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let names: Vec<[String; 3]> = (0..self.aggs.len())
            .map(|a| [format!("n{a}"), format!("isum{a}"), format!("fsum{a}")])
            .collect();
        let mut cols = vec![
            ("key", binary_col(groups.iter().map(|(k, _)| &k[..]))),
            ("rows", i64_col(groups.iter().map(|(_, g)| g.rows))),
        ];
        // (group, agg, value, count) of the MIN/MAX multisets and of the DISTINCT maps.
        let mut values: Vec<(i64, i64, &[u8], i64)> = Vec::new();
        let mut seen: Vec<(i64, i64, &[u8], i64)> = Vec::new();
        for (a, [n, isum, fsum]) in names.iter().enumerate() {
            let accs = || groups.iter().map(move |(_, g)| g.accs.get(a).map(|s| &s.acc));
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
                    | Some(Acc::Sum { sum: Sum::Dec(s, ..), .. }) => Some(*s),
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
            for (g, (_, group)) in groups.iter().enumerate() {
                let Some(st) = group.accs.get(a) else { continue };
                if let Acc::MinMax { values: vs, .. } = &st.acc {
                    values.extend(vs.iter().map(|(v, c)| (g as i64, a as i64, &v[..], *c)));
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
        let mut groups: Vec<(RowBytes, Group)> = Vec::with_capacity(keys.len());
        for (key, rows) in keys.iter().zip(&rows) {
            let mut g = self.new_group();
            g.rows = *rows;
            groups.push((RowBytes::from(*key), g));
        }
        let bad =
            |a: usize| invalid(format!("section 'aggregate.groups': aggregate {a} does not fit"));
        for a in 0..self.aggs.len() {
            let ns = s.opt_i64s(&format!("n{a}"))?;
            let isums = s.opt_i128s(&format!("isum{a}"))?;
            let fsums = s.opt_f64s(&format!("fsum{a}"))?;
            for (g, (_, group)) in groups.iter_mut().enumerate() {
                let st = group.accs.get_mut(a).ok_or_else(|| bad(a))?;
                let (n, isum, fsum) = (
                    ns.get(g).copied().flatten(),
                    isums.get(g).copied().flatten(),
                    fsums.get(g).copied().flatten(),
                );
                match (&mut st.acc, n, isum, fsum) {
                    (Acc::Count(c), Some(n), None, None) => *c = n,
                    (
                        Acc::Sum { sum: Sum::Int(s) | Sum::Dec(s, ..), n: c },
                        Some(n),
                        Some(v),
                        None,
                    ) => (*s, *c) = (v, n),
                    (Acc::Sum { sum: Sum::Float(s), n: c }, Some(n), None, Some(v))
                    | (Acc::Avg { sum: s, n: c }, Some(n), None, Some(v)) => (*s, *c) = (v, n),
                    (Acc::MinMax { .. }, None, None, None) => {}
                    _ => return Err(bad(a)),
                }
            }
        }
        for name in ["aggregate.values", "aggregate.seen"] {
            let s = r.take(name, &sig)?;
            let (gs, aggs, vals, counts) =
                (s.i64s("group")?, s.i64s("agg")?, s.binary("value")?, s.i64s("count")?);
            for i in 0..gs.len() {
                let group = usize::try_from(gs[i]).ok().and_then(|g| groups.get_mut(g));
                let st = group.and_then(|(_, g)| {
                    usize::try_from(aggs[i]).ok().and_then(|a| g.accs.get_mut(a))
                });
                let map_entry = match (name, st) {
                    (
                        "aggregate.values",
                        Some(AccState { acc: Acc::MinMax { values, .. }, .. }),
                    ) => values.insert(RowBytes::from(vals[i]), nonzero(name, counts[i])?),
                    ("aggregate.seen", Some(AccState { seen: Some(seen), .. })) => {
                        seen.insert(RowBytes::from(vals[i]), nonzero(name, counts[i])?)
                    }
                    _ => return Err(invalid(format!("section '{name}': row {i} does not fit"))),
                };
                if map_entry.is_some() {
                    return Err(invalid(format!("section '{name}': a value appears twice")));
                }
            }
        }
        self.started = started;
        self.groups = groups.into_iter().collect();
        Ok(())
    }

    /// The output change at `t` given the input change `d` at `t`.
    /// The order (and multiplicity) in which an instant's input rows are applied: as given,
    /// unless a floating-point sum is kept (SUM of floats, AVG). Float addition is not
    /// associative, so such sums would depend on the order rows arrive in (a join's output
    /// order, the batching of the input): then equal rows are merged and applied in the order
    /// of their encoded bytes, the same whatever the arrival.
    fn apply_order(
        &self,
        d: &ChangeBatch,
        keys: &crate::row::EncodedRows,
    ) -> Result<Vec<(usize, i64)>> {
        let float = self.aggs.iter().any(|s| {
            s.func == AggFunc::Avg
                || (s.func == AggFunc::Sum
                    && matches!(
                        s.arg_type,
                        DataType::Float16 | DataType::Float32 | DataType::Float64
                    ))
        });
        if !float {
            return Ok(d.diffs.iter().copied().enumerate().collect());
        }
        let rows = RowCodec::for_schema(&d.data.schema())?.encode(d.data.columns(), d.len())?;
        let mut idx: Vec<usize> = (0..d.len()).collect();
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

    fn step(&mut self, t: Time, d: ChangeBatch) -> Result<ChangeBatch> {
        // Old output of each group touched at this instant (None: the group did not exist).
        let mut touched: HashMap<RowBytes, Option<Vec<ScalarValue>>> = HashMap::new();
        if !self.started {
            self.started = true;
            if self.keys.is_empty() {
                touched.insert(RowBytes::from(&[][..]), None);
                let g = self.new_group();
                self.groups.insert(RowBytes::from(&[][..]), g);
            }
        }
        if !d.is_empty() {
            let key_cols: Vec<ArrayRef> =
                self.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
            let keys = self.key_codec.encode(&key_cols, d.len())?;
            let mut views = Vec::with_capacity(self.aggs.len());
            let mut values = Vec::with_capacity(self.aggs.len());
            for (spec, codec) in self.aggs.iter().zip(&self.value_codecs) {
                let col = match &spec.arg {
                    Some(e) => Some(e.eval_as(&d.data, &spec.arg_type)?),
                    None => None,
                };
                values.push(match (&col, codec) {
                    (Some(c), Some(codec)) => Some(codec.encode(std::slice::from_ref(c), d.len())?),
                    _ => None,
                });
                views.push(Self::view(spec, col.as_ref())?);
            }
            for (i, diff) in self.apply_order(&d, &keys)? {
                let key = keys.get(i);
                if !touched.contains_key(key) {
                    let old = match self.groups.get(key) {
                        Some(g) if self.exists(g) => Some(self.output(g)?),
                        _ => None,
                    };
                    touched.insert(key.into(), old);
                }
                if !self.groups.contains_key(key) {
                    let g = self.new_group();
                    self.groups.insert(key.into(), g);
                }
                let group = self.groups.get_mut(key).ok_or_else(|| WeirError::internal("group"))?;
                group.rows += diff;
                for (a, st) in group.accs.iter_mut().enumerate() {
                    let view = &views[a];
                    if self.aggs[a].func == AggFunc::CountStar {
                        continue;
                    }
                    if view.is_null(i) {
                        continue;
                    }
                    let value = values[a].as_ref().map(|v| v.get(i));
                    match &mut st.seen {
                        None => Self::update(&mut st.acc, view, i, value, diff)?,
                        Some(seen) => {
                            let v = value.ok_or_else(|| WeirError::internal("distinct value"))?;
                            let c = seen.entry(v.into()).or_insert(0);
                            let before = *c;
                            *c += diff;
                            let after = *c;
                            if after == 0 {
                                seen.remove(v);
                            }
                            if before <= 0 && after > 0 {
                                Self::update(&mut st.acc, view, i, value, 1)?;
                            } else if before > 0 && after <= 0 {
                                Self::update(&mut st.acc, view, i, value, -1)?;
                            }
                        }
                    }
                }
            }
        }
        let mut touched: Vec<(RowBytes, Option<Vec<ScalarValue>>)> = touched.into_iter().collect();
        touched.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out_keys: Vec<RowBytes> = Vec::new();
        let mut out_vals: Vec<Vec<ScalarValue>> = Vec::new();
        let mut diffs = Vec::new();
        for (key, old) in touched {
            let new = match self.groups.get(&key) {
                Some(g) if self.exists(g) => Some(self.output(g)?),
                _ => None,
            };
            if !self.keys.is_empty() && self.groups.get(&key).is_some_and(|g| g.rows == 0) {
                self.groups.remove(&key);
            }
            if old == new {
                continue;
            }
            if let Some(old) = old {
                out_keys.push(key.clone());
                out_vals.push(old);
                diffs.push(-1);
            }
            if let Some(new) = new {
                out_keys.push(key);
                out_vals.push(new);
                diffs.push(1);
            }
        }
        if diffs.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut cols = self.key_codec.decode(out_keys.iter().map(|k| &k[..]))?;
        for a in 0..self.aggs.len() {
            let field_type = self.schema.field(self.keys.len() + a).data_type();
            let vals: Vec<ScalarValue> = out_vals.iter().map(|v| v[a].clone()).collect();
            let arr = scalars_to_array(vals, field_type)?;
            cols.push(arr);
        }
        let data = batch_of(&self.schema, cols, diffs.len())?;
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }
}

/// Builds an array of `ty` from scalars (casting each to `ty`; NULLs of any type allowed).
fn scalars_to_array(vals: Vec<ScalarValue>, ty: &DataType) -> Result<ArrayRef> {
    let vals = vals
        .into_iter()
        .map(|v| {
            if v.is_null() {
                ScalarValue::try_from(ty)
            } else if &v.data_type() == ty {
                Ok(v)
            } else {
                v.cast_to(ty)
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| WeirError::internal(e.to_string()))?;
    ScalarValue::iter_to_array(vals).map_err(|e| WeirError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{kv, kv_schema, run, Feed, Tick};

    fn agg(grouped: bool, aggs: &[(AggFunc, bool)], input: Vec<Tick>) -> Vec<String> {
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
                    _ => (Some(ScalarExpr::compile(&col("v"), &df).unwrap()), DataType::Int64),
                };
                let out = if *f == AggFunc::Avg { DataType::Float64 } else { DataType::Int64 };
                fields.push(Field::new(format!("{f}"), out, true));
                AggSpec { func: *f, arg, arg_type: ty, distinct: *distinct }
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let key_types = if grouped { vec![DataType::Utf8] } else { vec![] };
        let mut op =
            Aggregate::new(Feed::new(kv_schema(), input), keys, key_types, specs, schema).unwrap();
        run(&mut op)
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
}
