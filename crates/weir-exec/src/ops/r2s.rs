//! Relation-to-stream: `ISTREAM`, `DSTREAM`, `RSTREAM`.
//!
//! With R(−1) = ∅ and bag difference −, at each instant τ of the query:
//! - ISTREAM emits R(τ) − R(τ−1): rows whose consolidated diff at τ is positive, that many times;
//! - DSTREAM emits R(τ−1) − R(τ): rows whose consolidated diff is negative;
//! - RSTREAM emits R(τ) whole, at every instant of its own input, even one where R did not
//!   change. Its instants are those of the plan below it (its sources' elements and
//!   heartbeats, its windows' expiries), not those of a query that reads it: a derived stream
//!   is what its view emits, whoever reads it. The graph tells it whether the plan below wakes
//!   at τ ([`Step::input_wakeup`]); its sources' activity is in the step's context.
//!
//! Changes are consolidated per instant first, so an insertion and a deletion of the same tuple
//! at one instant cancel. Output rows carry diff = multiplicity (> 0), sorted by value.
//! State: none for ISTREAM/DSTREAM; RSTREAM keeps the relation's multiset. Checkpointed as
//! section `to_stream` (`row` Binary, `count` Int64, sorted by row; empty but for RSTREAM).
//!
//! ISTREAM and DSTREAM evaluate a step of one instant or a span alike (each run of equal time
//! consolidated on its own); an instant with a single change needs neither encoding nor
//! sorting, so a stream of distinct timestamps passes through with no per-row work, and an
//! instant whose rows come in order, each once, all with the operator's sign (the groups of a
//! window as an aggregate emits them) is checked once and not sorted. RSTREAM
//! reports at every instant of its input, which a span does not list, so it is evaluated
//! instant by instant.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};
use weir_plan::R2S;

use crate::consolidate::{net_diffs, to_batch};
use crate::heap::HeapSize;
use crate::operator::{take_inputs, time_runs, Operator, Step};
use crate::ops::batch_of;
use crate::route::Placement;
use crate::row::{sort_by_encoding, EncodedRows, RowBytes, RowCodec, SortKey};
use crate::state::{put_counts, signature, take_counts, StateReader, StateWriter};

#[derive(Debug)]
pub struct ToStream {
    op: R2S,
    schema: SchemaRef,
    codec: RowCodec,
    relation: HashMap<RowBytes, i64>,
    /// The base streams and tables below this operator.
    sources: Vec<String>,
}

impl ToStream {
    pub fn new(op: R2S, schema: SchemaRef, sources: Vec<String>) -> Result<Self> {
        let codec = RowCodec::for_schema(&schema)?;
        Ok(ToStream { op, schema, codec, relation: HashMap::new(), sources })
    }
}

impl Operator for ToStream {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        if self.op != R2S::Rstream {
            return self.differences(d);
        }
        let t = step.instant()?;
        // Is τ an instant of the plan below? (Decided before the step evaluated it.)
        let own_instant = step.input_wakeup == Some(t)
            || self.sources.iter().any(|s| step.ctx.active.contains(s));
        let net = if d.is_empty() { HashMap::new() } else { net_diffs(&self.codec, &d)? };
        for (r, n) in net {
            let c = self.relation.entry(r.clone()).or_insert(0);
            *c += n;
            if *c == 0 {
                self.relation.remove(&r);
            }
        }
        if !own_instant {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let rows: Vec<(RowBytes, i64)> =
            self.relation.iter().filter(|(_, c)| **c > 0).map(|(r, c)| (r.clone(), *c)).collect();
        to_batch(&self.codec, &self.schema, rows, t)
    }

    /// State: section `to_stream`, RSTREAM's relation (`row`, `count`; empty otherwise).
    /// ISTREAM and DSTREAM consolidate each instant on its own: an instant's rows together.
    /// RSTREAM keeps the relation across instants and reports all of it: on one worker.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(if self.op == R2S::Rstream { Placement::Single } else { Placement::ByInstant })
    }

    /// The relation's rows with their multiplicities.
    fn state_bytes(&self) -> usize {
        self.relation.heap_bytes()
    }

    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        put_counts(w, "to_stream", &self.signature(), &self.relation)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.relation = take_counts(r, "to_stream", &self.signature())?;
        Ok(())
    }

    /// Nothing for ISTREAM and DSTREAM; RSTREAM's relation, written whole.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        self.op != R2S::Rstream
    }
}

impl ToStream {
    fn signature(&self) -> String {
        signature("to_stream", &self.schema, (self.op, &self.sources))
    }

    /// ISTREAM/DSTREAM of `d` (sorted by time), each instant consolidated on its own: the
    /// rows whose net diff has the operator's sign, with |net diff| as multiplicity, sorted by
    /// encoded value within the instant. The rows keep their arrays (taken, not decoded).
    fn differences(&self, d: ChangeBatch) -> Result<ChangeBatch> {
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let sign = if self.op == R2S::Istream { 1 } else { -1 };
        let ends = time_runs(&d.times);
        let multi = ends.iter().zip(std::iter::once(&0).chain(&ends)).any(|(e, s)| e - s > 1);
        let rows = if multi { Some(self.codec.encode(d.data.columns(), d.len())?) } else { None };
        let mut idx: Vec<u32> = Vec::with_capacity(d.len());
        let mut times = Vec::with_capacity(d.len());
        let mut diffs = Vec::with_capacity(d.len());
        let mut run: Vec<SortKey> = Vec::new();
        let mut start = 0;
        for end in ends {
            let t = d.times[start];
            // Rows already in order, each once, every diff with the sign (an aggregate's
            // window of new groups) are what the sort would give: they take the plain path.
            let in_order = |rows: &EncodedRows| {
                (start..end).all(|i| d.diffs[i] * sign > 0)
                    && (start + 1..end).all(|i| rows.get(i - 1) < rows.get(i))
            };
            match &rows {
                Some(rows) if end - start > 1 && !in_order(rows) => {
                    // Equal rows side by side, in arrival order, each kept once, at its
                    // first arrival, if its net diff has the sign.
                    let row = |i: u32| rows.get(i as usize);
                    sort_by_encoding(rows, start..end, &mut run);
                    let mut k = 0;
                    while k < run.len() {
                        let (head, first) = (run[k], run[k].index);
                        let mut net = 0;
                        while k < run.len()
                            && run[k].same_prefix(&head)
                            && row(run[k].index) == row(first)
                        {
                            net += d.diffs[run[k].index as usize];
                            k += 1;
                        }
                        if net * sign > 0 {
                            idx.push(first);
                            times.push(t);
                            diffs.push(net * sign);
                        }
                    }
                }
                _ => {
                    for i in start..end {
                        if d.diffs[i] * sign > 0 {
                            idx.push(i as u32);
                            times.push(t);
                            diffs.push(d.diffs[i] * sign);
                        }
                    }
                }
            }
            start = end;
        }
        let identity =
            idx.len() == d.len() && idx.iter().enumerate().all(|(i, &x)| x as usize == i);
        let data = if identity { d.data } else { d.take(&idx)?.data };
        let data = batch_of(&self.schema, data.columns().to_vec(), idx.len())?;
        Ok(ChangeBatch::new(data, times, diffs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::EvalCtx;
    use crate::testing::{fed, kv, kv_schema, run, Tick};

    fn r2s(op: R2S, input: Vec<Tick>) -> Vec<String> {
        run(&mut fed(ToStream::new(op, kv_schema(), vec![]).unwrap(), [input]))
    }

    fn input() -> Vec<Tick> {
        vec![kv(1, "+1 a 1, +1 b 2"), kv(2, "-1 a 1, +1 a 1, +1 c 3"), kv(3, "-1 b 2"), kv(4, "")]
    }

    #[test]
    fn istream_is_what_entered_after_consolidation() {
        assert_eq!(r2s(R2S::Istream, input()), ["@1 +1 a 1", "@1 +1 b 2", "@2 +1 c 3"]);
    }

    #[test]
    fn dstream_is_what_left() {
        assert_eq!(r2s(R2S::Dstream, input()), ["@3 +1 b 2"]);
    }

    #[test]
    fn rstream_is_the_whole_relation_at_every_instant() {
        assert_eq!(
            r2s(R2S::Rstream, input()),
            [
                "@1 +1 a 1",
                "@1 +1 b 2",
                "@2 +1 a 1",
                "@2 +1 b 2",
                "@2 +1 c 3",
                "@3 +1 a 1",
                "@3 +1 c 3",
                "@4 +1 a 1",
                "@4 +1 c 3"
            ]
        );
    }

    /// Rows in order, each once, all with the operator's sign, pass as they came; a repeated
    /// row, a row of the other sign or rows out of order are netted and sorted: the output
    /// is in value order either way.
    #[test]
    fn rows_in_order_pass_and_the_others_are_sorted() {
        let eval = |op, text: &str| {
            let mut s = fed(ToStream::new(op, kv_schema(), vec![]).unwrap(), [vec![kv(1, text)]]);
            crate::testing::render_in_order(&s.eval(1, 1, &EvalCtx::default()).unwrap())
        };
        let istream = |text| eval(R2S::Istream, text);
        let dstream = |text| eval(R2S::Dstream, text);
        assert_eq!(istream("+1 a 1, +2 a 2, +1 b 1"), ["@1 +1 a 1", "@1 +2 a 2", "@1 +1 b 1"]);
        assert_eq!(istream("+1 b 1, +1 a 2, +1 a 1"), ["@1 +1 a 1", "@1 +1 a 2", "@1 +1 b 1"]);
        assert_eq!(istream("+1 a 1, +1 a 1, +1 b 1"), ["@1 +2 a 1", "@1 +1 b 1"]);
        assert_eq!(istream("+1 a 1, -1 b 1, +1 c 1"), ["@1 +1 a 1", "@1 +1 c 1"]);
        assert_eq!(dstream("-1 a 1, -3 b 1"), ["@1 +1 a 1", "@1 +3 b 1"]);
        assert_eq!(dstream("-1 a 1, +1 b 1, -1 c 1"), ["@1 +1 a 1", "@1 +1 c 1"]);
    }

    #[test]
    fn istream_consolidates_and_sorts_rows_sharing_a_long_prefix() {
        // Keys longer than the 16-byte sort prefix: ties on the prefix fall back to the bytes.
        let long = "abcdefghijklmnopqrstuvwxyz";
        let input = vec![kv(
            1,
            &format!(
                "+1 {long}2 1, +1 {long}1 1, +1 {long}2 1, -1 {long}1 1, +1 {long}10 5, \
                 +1 {long}1 2, +1 {long}1 1, -1 {long}2 1"
            ),
        )];
        let mut s = fed(ToStream::new(R2S::Istream, kv_schema(), vec![]).unwrap(), [input]);
        let d = s.eval(1, 1, &EvalCtx::default()).unwrap();
        let keys = d.data.column(0).as_any().downcast_ref::<arrow::array::StringArray>().unwrap();
        let vals = d.data.column(1).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap();
        let got: Vec<(String, i64, i64)> = (0..d.len())
            .map(|i| (keys.value(i).replace(long, "~"), vals.value(i), d.diffs[i]))
            .collect();
        // In value order (not the rendering's text order): "~1" < "~10" < "~2".
        let want = [("~1", 1, 1), ("~1", 2, 1), ("~10", 5, 1), ("~2", 1, 1)];
        let want: Vec<(String, i64, i64)> =
            want.iter().map(|(k, v, n)| (k.to_string(), *v, *n)).collect();
        assert_eq!(got, want);
    }
}
