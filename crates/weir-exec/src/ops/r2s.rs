//! Relation-to-stream: `ISTREAM`, `DSTREAM`, `RSTREAM`.
//!
//! With R(−1) = ∅ and bag difference −, at each instant τ of the query:
//! - ISTREAM emits R(τ) − R(τ−1): rows whose consolidated diff at τ is positive, that many times;
//! - DSTREAM emits R(τ−1) − R(τ): rows whose consolidated diff is negative;
//! - RSTREAM emits R(τ) whole, at every instant of its own input, even one where R did not
//!   change. Its instants are those of the plan below it (its sources' elements and
//!   heartbeats, its windows' expiries), not those of a query that reads it: a derived stream
//!   is what its view emits, whoever reads it.
//!
//! Changes are consolidated per instant first, so an insertion and a deletion of the same tuple
//! at one instant cancel. Output rows carry diff = multiplicity (> 0), sorted by value.
//! State: none for ISTREAM/DSTREAM; RSTREAM keeps the relation's multiset.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};
use weir_plan::R2S;

use crate::consolidate::{net_diffs, to_batch};
use crate::operator::{EvalCtx, Operator};
use crate::row::{RowBytes, RowCodec};

#[derive(Debug)]
pub struct ToStream {
    input: Box<dyn Operator>,
    op: R2S,
    schema: SchemaRef,
    codec: RowCodec,
    relation: HashMap<RowBytes, i64>,
    /// The base streams and tables below this operator.
    sources: Vec<String>,
}

impl ToStream {
    pub fn new(
        input: Box<dyn Operator>,
        op: R2S,
        schema: SchemaRef,
        sources: Vec<String>,
    ) -> Result<Self> {
        let codec = RowCodec::for_schema(&schema)?;
        Ok(ToStream { input, op, schema, codec, relation: HashMap::new(), sources })
    }
}

impl Operator for ToStream {
    fn eval(&mut self, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch> {
        // Is τ an instant of the plan below? (Decided before evaluating it.)
        let own_instant = self.input.next_wakeup() == Some(t)
            || self.sources.iter().any(|s| ctx.active.contains(s));
        let d = self.input.eval(t, ctx)?;
        let net = if d.is_empty() { HashMap::new() } else { net_diffs(&self.codec, &d)? };
        let rows: Vec<(RowBytes, i64)> = match self.op {
            R2S::Istream => net.into_iter().filter(|(_, n)| *n > 0).collect(),
            R2S::Dstream => net.into_iter().filter(|(_, n)| *n < 0).map(|(r, n)| (r, -n)).collect(),
            R2S::Rstream => {
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
                self.relation
                    .iter()
                    .filter(|(_, c)| **c > 0)
                    .map(|(r, c)| (r.clone(), *c))
                    .collect()
            }
        };
        to_batch(&self.codec, &self.schema, rows, t)
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.input.next_wakeup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema, run, Feed, Tick};

    fn r2s(op: R2S, input: Vec<Tick>) -> Vec<String> {
        let mut s = ToStream::new(Feed::new(kv_schema(), input), op, kv_schema(), vec![]).unwrap();
        run(&mut s)
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
}
