//! Checkpointing an [`Aggregate`]'s state, in the sections laid out in [`super`]'s docs.

use std::borrow::Cow;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array};
use arrow::datatypes::DataType;
use datafusion_common::{HashMap, ScalarValue};
use weir_common::{Result, WeirError};

use super::accumulators::{bytes_contend, f64_key, key_f64, Acc, Kind, Place, Wide};
use super::minmax::KeySet;
use super::{cast_to, Aggregate, Group, GroupKey};
use crate::row::{EncodedRows, RowBytes};
use crate::state::{
    binary_col, bool_col, i64_col, invalid, nonzero, opt_f64_col, opt_i128_col, opt_i64_col,
    signature, StateReader, StateWriter,
};

impl Aggregate {
    /// Aggregate `a`'s accumulator in group `g`: None for a count (see [`Place`]).
    fn acc_of<'g>(&self, g: &'g Group, a: usize) -> Option<&'g Acc> {
        match self.places.get(a)? {
            Place::Acc(c) => g.accs.get(*c as usize).map(|st| &st.acc),
            Place::Rows | Place::Count(_) => None,
        }
    }

    fn acc_of_mut<'g>(&self, g: &'g mut Group, a: usize) -> Option<&'g mut Acc> {
        match self.places.get(a)? {
            Place::Acc(c) => g.accs.get_mut(*c as usize).map(|st| &mut st.acc),
            Place::Rows | Place::Count(_) => None,
        }
    }

    pub(super) fn signature(&self) -> String {
        let aggs: Vec<_> = self.aggs.iter().map(|a| (a.func, a.distinct, &a.arg_type)).collect();
        let sig = signature("aggregate", &self.schema, (self.keys.len(), aggs));
        // FILTER and an aggregate's ORDER BY are added only where present, so that plain
        // aggregates keep the signature of checkpoints written before they existed.
        let extras: Vec<String> = self
            .aggs
            .iter()
            .enumerate()
            .filter(|(_, a)| a.filter.is_some() || !a.order.is_empty())
            .map(|(i, a)| {
                let order: Vec<_> =
                    a.order.iter().map(|k| (&k.data_type, k.descending, k.nulls_first)).collect();
                format!("{i}: filter={} order={order:?}", a.filter.is_some())
            })
            .collect();
        if extras.is_empty() {
            sig
        } else {
            format!("{sig} [{}]", extras.join(", "))
        }
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

    /// The values of row-encoded elements of ordered aggregate `a`; errors on bytes that are
    /// not such elements.
    fn decode_elements(&self, a: usize, rows: &[&[u8]]) -> Result<Vec<ScalarValue>> {
        let Some(conv) = self.element_converters[a].as_ref().filter(|_| !rows.is_empty()) else {
            return Ok(vec![]);
        };
        let bad = || invalid("section 'aggregate.values': an element does not fit its types");
        let parser = conv.parser();
        // Arrow's row parser trusts its input; validate by re-encoding what it decodes.
        let cols = conv.convert_rows(rows.iter().map(|r| parser.parse(r))).map_err(|_| bad())?;
        let again = conv.convert_columns(&cols).map_err(|_| bad())?;
        if rows.iter().enumerate().any(|(i, r)| again.row(i).data() != *r) {
            return Err(bad());
        }
        let col = cols.last().ok_or_else(bad)?;
        (0..col.len()).map(|i| ScalarValue::try_from_array(col, i).map_err(|_| bad())).collect()
    }

    /// Writes the groups and accumulators (see the module docs for the layout).
    pub(super) fn save_own(&self, w: &mut StateWriter) -> Result<()> {
        let mut groups: Vec<&Group> =
            self.index.values().map(|&id| &self.slots[id as usize]).collect();
        groups.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        self.save_groups(w, &groups)
    }

    /// Writes the changes since the last checkpoint, given the keys of the groups touched
    /// since, sorted: those still present as [`Aggregate::save_own`] does, then section
    /// `aggregate.gone` (`key`: those that disappeared).
    pub(super) fn save_changed(&self, w: &mut StateWriter, keys: &[Vec<u8>]) -> Result<()> {
        let (mut present, mut gone) = (Vec::new(), Vec::new());
        for key in keys {
            match self.index.get(&key[..]) {
                Some(&id) => present.push(&self.slots[id as usize]),
                None => gone.push(&key[..]),
            }
        }
        self.save_groups(w, &present)?;
        w.put("aggregate.gone", &self.signature(), gone.len(), vec![("key", binary_col(gone))])
    }

    /// Applies what [`Aggregate::save_changed`] wrote to the state of the previous checkpoint.
    pub(super) fn restore_changed(&mut self, r: &mut StateReader) -> Result<()> {
        let (started, groups) = self.take_groups(r)?;
        let gone = r.take("aggregate.gone", &self.signature())?;
        for key in gone.binary("key")? {
            if let Some(&id) = self.index.get(key) {
                self.release(id);
            }
        }
        for g in groups {
            match self.index.get(&g.key[..]) {
                Some(&id) => self.slots[id as usize] = g,
                None => {
                    let id = self.alloc(&g.key);
                    self.slots[id as usize] = g;
                }
            }
        }
        self.started = started;
        Ok(())
    }

    /// Writes `groups`, sorted by key, in the layout of the module docs.
    fn save_groups(&self, w: &mut StateWriter, groups: &[&Group]) -> Result<()> {
        let sig = self.signature();
        w.put("aggregate", &sig, 1, vec![("started", bool_col([self.started]))])?;
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
            for g in groups {
                if let Some(counts) = self.acc_of(g, a).and_then(Acc::key_counts) {
                    keys.extend(counts.into_iter().map(|(k, _)| k));
                }
            }
            keyed.push(if keys.is_empty() { None } else { Some(self.encode_keys(a, keys)?) });
        }
        // (group, agg, value, count) of the MIN/MAX multisets and of the DISTINCT maps.
        let mut values: Vec<(i64, i64, &[u8], i64)> = Vec::new();
        // DISTINCT values, owned where a set does not keep their encodings (dense marks).
        let mut seen: Vec<(i64, i64, Cow<'_, [u8]>, i64)> = Vec::new();
        let mut cursors: Vec<usize> = vec![0; self.aggs.len()];
        for (a, [n, isum, fsum]) in names.iter().enumerate() {
            let accs = || groups.iter().map(move |g| self.acc_of(g, a));
            // A count is written as its own `n` (COUNT(*) without a FILTER: the row count).
            cols.push((
                n,
                opt_i64_col(groups.iter().zip(accs()).map(|(g, acc)| {
                    match (self.places[a], acc) {
                        (Place::Rows, _) => Some(g.rows),
                        (Place::Count(c), _) => g.counts.get(c as usize).copied(),
                        (_, None) => None,
                        (_, Some(acc)) => match acc {
                            Acc::Sum { n, .. }
                            | Acc::SumFloat { n, .. }
                            | Acc::Avg { n, .. }
                            | Acc::AvgFloat { n, .. }
                            | Acc::Bool { trues: n, .. } => Some(*n),
                            _ => None,
                        },
                    }
                })),
            ));
            cols.push((
                isum,
                opt_i128_col(accs().map(|acc| match acc {
                    Some(Acc::Sum { sum, .. } | Acc::Avg { sum, .. }) => Some(sum.get()),
                    Some(Acc::Bool { falses, .. }) => Some(i128::from(*falses)),
                    _ => None,
                })),
            ));
            cols.push((
                fsum,
                opt_f64_col(accs().map(|acc| match acc {
                    Some(Acc::SumFloat { sum, .. } | Acc::AvgFloat { sum, .. }) => Some(*sum),
                    _ => None,
                })),
            ));
            for (g, group) in groups.iter().enumerate() {
                match self.acc_of(group, a) {
                    None => {}
                    Some(Acc::MinMax { values: vs, .. }) => {
                        values.extend(vs.iter().map(|(v, c)| (g as i64, a as i64, &v[..], *c)));
                    }
                    Some(Acc::ExtremeBytes { best, .. }) => {
                        values.extend(best.iter().map(|(v, c)| (g as i64, a as i64, &v[..], *c)));
                    }
                    Some(Acc::Ordered { elements }) => values.extend(
                        elements.iter().map(|(e, (c, _))| (g as i64, a as i64, &e[..], *c)),
                    ),
                    Some(acc @ (Acc::MinMaxKey { .. } | Acc::Extreme { .. })) => {
                        for (_, c) in acc.key_counts().unwrap_or_default() {
                            let enc = keyed[a]
                                .as_ref()
                                .ok_or_else(|| WeirError::internal("min/max keys"))?;
                            values.push((g as i64, a as i64, enc.get(cursors[a]), c));
                            cursors[a] += 1;
                        }
                    }
                    Some(_) => {}
                }
                if let Some((s, m)) = self.distinct_of[a] {
                    let mut s = group.seen[s].member(m);
                    s.sort_unstable();
                    seen.extend(s.into_iter().map(|(v, c)| (g as i64, a as i64, v, c)));
                }
            }
        }
        w.put("aggregate.groups", &sig, groups.len(), cols)?;
        let seen = seen.iter().map(|(g, a, v, c)| (*g, *a, &v[..], *c)).collect();
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
    pub(super) fn restore_own(&mut self, r: &mut StateReader) -> Result<()> {
        let (started, groups) = self.take_groups(r)?;
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

    /// Reads the sections [`Aggregate::save_groups`] wrote: `started` and the groups.
    fn take_groups(&self, r: &mut StateReader) -> Result<(bool, Vec<Group>)> {
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
                let (n, isum, fsum) = (
                    ns.get(g).copied().flatten(),
                    isums.get(g).copied().flatten(),
                    fsums.get(g).copied().flatten(),
                );
                match (self.places[a], n, isum, fsum) {
                    // The row count, written as COUNT(*)'s own (it is `rows`).
                    (Place::Rows, Some(_), None, None) => continue,
                    (Place::Count(c), Some(n), None, None) => {
                        *group.counts.get_mut(c as usize).ok_or_else(|| bad(a))? = n;
                        continue;
                    }
                    (Place::Acc(_), ..) => {}
                    _ => return Err(bad(a)),
                }
                let st = self.acc_of_mut(group, a).ok_or_else(|| bad(a))?;
                match (st, n, isum, fsum) {
                    (
                        Acc::Sum { sum: s, n: c } | Acc::Avg { sum: s, n: c },
                        Some(n),
                        Some(v),
                        None,
                    ) => (*s, *c) = (Wide::new(v), n),
                    (
                        Acc::SumFloat { sum: s, n: c } | Acc::AvgFloat { sum: s, n: c },
                        Some(n),
                        None,
                        Some(v),
                    ) => (*s, *c) = (v, n),
                    // Written before AVG over decimals kept an exact sum: its float sum of
                    // values of the argument's scale, exact up to 2^53 units of that scale.
                    (Acc::Avg { sum: s, n: c }, Some(n), None, Some(v))
                        if matches!(self.aggs[a].arg_type, DataType::Decimal128(..)) =>
                    {
                        let DataType::Decimal128(_, scale) = self.aggs[a].arg_type else {
                            return Err(bad(a));
                        };
                        let units = (v * 10f64.powi(i32::from(scale))).round();
                        if units.is_nan() || units.abs() >= 2f64.powi(53) {
                            return Err(bad(a));
                        }
                        (*s, *c) = (Wide::new(units as i128), n)
                    }
                    // Written before AVG over integers kept an exact sum: its float sum, which
                    // holds an integer (exactly, up to 2^53).
                    (Acc::Avg { sum: s, n: c }, Some(n), None, Some(v))
                        if v.fract() == 0.0 && v.abs() < 2f64.powi(63) =>
                    {
                        (*s, *c) = (Wide::new(v as i128), n)
                    }
                    (Acc::Bool { trues, falses }, Some(n), Some(v), None) => {
                        *trues = n;
                        *falses = i64::try_from(v).map_err(|_| bad(a))?;
                    }
                    (
                        Acc::MinMax { .. }
                        | Acc::ExtremeBytes { .. }
                        | Acc::MinMaxKey { .. }
                        | Acc::Extreme { .. }
                        | Acc::Ordered { .. },
                        None,
                        None,
                        None,
                    ) => {}
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
            // An ordered aggregate's elements: the value is the element's last column.
            let mut ordered: Vec<std::vec::IntoIter<ScalarValue>> =
                Vec::with_capacity(self.aggs.len());
            for a in 0..self.aggs.len() {
                let mine: Vec<&[u8]> = match &self.element_converters[a] {
                    Some(_) if name == "aggregate.values" => {
                        (0..gs.len()).filter(|&i| agg_of(i) == Some(a)).map(|i| vals[i]).collect()
                    }
                    _ => vec![],
                };
                ordered.push(self.decode_elements(a, &mine)?.into_iter());
            }
            for i in 0..gs.len() {
                let group = usize::try_from(gs[i]).ok().and_then(|g| groups.get_mut(g));
                let a = agg_of(i);
                if name == "aggregate.seen" {
                    let (Some(group), Some((s, m))) = (group, a.and_then(|a| self.distinct_of[a]))
                    else {
                        return Err(invalid(format!("section '{name}': row {i} does not fit")));
                    };
                    let members = self.distinct_sets[s].len();
                    let count = nonzero(name, counts[i])?;
                    if !group.seen[s].restore(vals[i], members, m, count) {
                        return Err(invalid(format!("section '{name}': a value appears twice")));
                    }
                    continue;
                }
                let st = group.and_then(|g| a.and_then(|a| self.acc_of_mut(g, a)));
                let duplicate = match (name, st) {
                    ("aggregate.values", Some(Acc::MinMax { values, .. })) => {
                        values.insert(RowBytes::from(vals[i]), nonzero(name, counts[i])?).is_some()
                    }
                    ("aggregate.values", Some(Acc::MinMaxKey { values, .. })) => {
                        let k = a
                            .and_then(|a| keyed[a].next())
                            .ok_or_else(|| WeirError::internal("min/max keys"))?;
                        values.insert_restored(k, nonzero(name, counts[i])?)
                    }
                    ("aggregate.values", Some(Acc::Extreme { best, max })) => {
                        let k = a
                            .and_then(|a| keyed[a].next())
                            .ok_or_else(|| WeirError::internal("min/max keys"))?;
                        let c = nonzero(name, counts[i])?;
                        // Only the extreme matters to an append-only input's MIN/MAX.
                        match best {
                            Some((e, _)) if *e == k => true,
                            Some((e, _)) if KeySet::beats(*max, *e, k) => false,
                            _ => {
                                *best = Some((k, c));
                                false
                            }
                        }
                    }
                    ("aggregate.values", Some(Acc::ExtremeBytes { best, max })) => {
                        bytes_contend(best, *max, vals[i], nonzero(name, counts[i])?)
                    }
                    ("aggregate.values", Some(Acc::Ordered { elements })) => {
                        let v = a
                            .and_then(|a| ordered[a].next())
                            .ok_or_else(|| WeirError::internal("ordered elements"))?;
                        let c = nonzero(name, counts[i])?;
                        elements.insert(RowBytes::from(vals[i]), (c, v)).is_some()
                    }
                    _ => return Err(invalid(format!("section '{name}': row {i} does not fit"))),
                };
                if duplicate {
                    return Err(invalid(format!("section '{name}': a value appears twice")));
                }
            }
        }
        Ok((started, groups))
    }
}
