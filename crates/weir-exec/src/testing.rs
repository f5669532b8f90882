//! Test support: operators fed from text, and outputs rendered as text, so operator tests read
//! like the semantics they check (`+1 a 3` is row (a, 3) inserted).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::{ChangeBatch, Result, Time, WeirError};

/// The graph operator tests run in (re-exported so that tests under `ops/` import nothing but
/// this harness from outside `ops/`).
pub use crate::graph::Graph;
use crate::heap::HeapSize;
use crate::operator::{EvalCtx, Operator, Step};
use crate::state::{StateReader, StateWriter};

/// A schema of (k VARCHAR, v BIGINT).
pub fn kv_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// Changes at one instant (an empty batch still makes the instant happen).
pub type Tick = (Time, ChangeBatch);

/// Parses `"+1 a 3, -1 b 4"` into (k, v) changes at instant `t`. `_` is NULL.
pub fn kv(t: Time, text: &str) -> Tick {
    let mut ks: Vec<Option<String>> = vec![];
    let mut vs: Vec<Option<i64>> = vec![];
    let mut diffs = vec![];
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split_whitespace().collect();
        diffs.push(parts[0].parse::<i64>().expect("diff"));
        ks.push((parts[1] != "_").then(|| parts[1].to_string()));
        vs.push((parts[2] != "_").then(|| parts[2].parse().expect("value")));
    }
    let cols: Vec<ArrayRef> = vec![Arc::new(StringArray::from(ks)), Arc::new(Int64Array::from(vs))];
    let data = RecordBatch::try_new(kv_schema(), cols).expect("batch");
    let n = diffs.len();
    (t, ChangeBatch::new(data, vec![t; n], diffs))
}

/// A leaf that replays fixed (k, v) changes per instant, or over a span of instants.
#[derive(Debug)]
pub struct Feed {
    changes: BTreeMap<Time, ChangeBatch>,
}

impl Feed {
    pub fn new(ticks: Vec<Tick>) -> Self {
        Feed { changes: ticks.into_iter().collect() }
    }
}

impl Operator for Feed {
    /// The changes stamped in [lo, hi], in time order.
    fn eval(&mut self, step: &Step<'_>, _inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let times: Vec<Time> = self.changes.range(step.lo..=step.hi).map(|(t, _)| *t).collect();
        let parts: Vec<ChangeBatch> = times.iter().filter_map(|t| self.changes.remove(t)).collect();
        ChangeBatch::concat(&kv_schema(), &parts)
    }

    fn span_capable(&self) -> bool {
        true
    }

    fn state_bytes(&self) -> usize {
        self.changes.values().map(HeapSize::heap_bytes).sum()
    }

    fn save_state(&self, _w: &mut StateWriter) -> Result<()> {
        Err(WeirError::internal("test feeds are not checkpointed"))
    }

    fn restore_state(&mut self, _r: &mut StateReader) -> Result<()> {
        Err(WeirError::internal("test feeds are not checkpointed"))
    }

    fn next_wakeup(&self) -> Option<Time> {
        self.changes.keys().next().copied()
    }
}

/// A graph of `op` reading one [`Feed`] per input, in order, each replaying its ticks.
pub fn fed(op: impl Operator + 'static, inputs: impl IntoIterator<Item = Vec<Tick>>) -> Graph {
    let mut flow = Graph::new();
    let feeds: Vec<usize> = inputs
        .into_iter()
        .map(|ticks| flow.add(Box::new(Feed::new(ticks)), vec![]).expect("feed"))
        .collect();
    flow.add(Box::new(op), feeds).expect("operator");
    flow
}

/// Runs `flow` instant by instant (input times and wake-ups) until nothing is left, rendering
/// each instant's output as `@t +d v1 v2`, sorted within the instant.
pub fn run(flow: &mut Graph) -> Vec<String> {
    run_spans(flow, 0)
}

/// `@t +d v1 v2` per row, in the batch's order (floats with their sign and NaN as written).
pub fn render_in_order(d: &ChangeBatch) -> Vec<String> {
    let opts = arrow::util::display::FormatOptions::default().with_null("_");
    let fmts: Vec<_> = d
        .data
        .columns()
        .iter()
        .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &opts).expect("fmt"))
        .collect();
    (0..d.len())
        .map(|i| {
            let vals: Vec<String> = fmts.iter().map(|f| f.value(i).to_string()).collect();
            format!("@{} {:+} {}", d.times[i], d.diffs[i], vals.join(" "))
        })
        .collect()
}

/// `@t +d v1 v2` per row, sorted within each instant.
pub fn render(d: &ChangeBatch) -> Vec<String> {
    let mut rows = render_in_order(d);
    rows.sort();
    rows
}

/// Runs `flow` over spans: from each next wake-up, every instant up to `width` ticks later in
/// one step (`width` 0: instant by instant), rendered like [`run`].
pub fn run_spans(flow: &mut Graph, width: Time) -> Vec<String> {
    let ctx = EvalCtx::default();
    let mut out = vec![];
    let mut guard = 0;
    while let Some(lo) = flow.next_wakeup() {
        guard += 1;
        assert!(guard < 10_000, "operator never settles");
        let d = flow.eval(lo, lo + width, &ctx).expect("eval");
        assert!(d.times.windows(2).all(|w| w[0] <= w[1]), "span output not sorted by time");
        out.extend(render(&d));
    }
    out
}

/// Drives `op` through `input` ([`drive`]), stopping before each instant of `stops` in turn
/// (None: to the end), and gives its [`Operator::state_bytes`] at each stop.
pub fn state_bytes_at<const N: usize>(
    op: &mut dyn Operator,
    input: Vec<Tick>,
    stops: [Option<Time>; N],
) -> [usize; N] {
    let mut feed = input.into_iter().peekable();
    stops.map(|until| {
        drive(op, &mut feed, until);
        op.state_bytes()
    })
}

/// Evaluates `op` alone, instant by instant, on the ticks of `feed` and its own wake-ups, before
/// `until` (all of them if `None`), rendering its output like [`run`].
pub fn drive(
    op: &mut dyn Operator,
    feed: &mut std::iter::Peekable<std::vec::IntoIter<Tick>>,
    until: Option<Time>,
) -> Vec<String> {
    drive_n(op, std::slice::from_mut(feed), until)
}

/// [`drive`] for an operator of several inputs, each fed from its own ticks.
pub fn drive_n(
    op: &mut dyn Operator,
    feeds: &mut [std::iter::Peekable<std::vec::IntoIter<Tick>>],
    until: Option<Time>,
) -> Vec<String> {
    let ctx = EvalCtx::default();
    let mut out = vec![];
    loop {
        let next_in = feeds.iter_mut().filter_map(|f| f.peek().map(|(t, _)| *t)).min();
        let next = crate::operator::min_wakeup([next_in, op.next_wakeup()]);
        let Some(t) = next.filter(|&t| until.is_none_or(|u| t < u)) else {
            break;
        };
        let ds = feeds
            .iter_mut()
            .map(|feed| match feed.next_if(|(x, _)| *x == t) {
                Some((_, d)) => d,
                None => ChangeBatch::empty(kv_schema()),
            })
            .collect();
        let step = Step { lo: t, hi: t, ctx: &ctx, input_wakeup: None };
        out.extend(render(&op.eval(&step, ds).expect("eval")));
    }
    out
}

/// Checkpoints `from` and restores the state into `into`, a fresh operator of the same plan,
/// checking that every section is read back.
pub fn checkpoint_into(from: &dyn Operator, into: &mut dyn Operator) {
    let mut w = StateWriter::new();
    from.save_state(&mut w).expect("save");
    let bytes = w.into_bytes().expect("bytes");
    let mut r = StateReader::from_bytes(&bytes).expect("read");
    into.restore_state(&mut r).expect("restore");
    r.finish().expect("all read");
}

/// Incremental checkpoints: drives a fresh operator of `make` through `input`, checkpointing
/// it whole before the instant `stops[0]`, then its changes before each later stop and at the
/// end; restores the whole state and applies the changes in order into another fresh one, and
/// checks that both hold the same state (the same whole-state bytes), and go on to give the
/// same output. Returns the sizes of the changes written, in bytes.
pub fn changes_round_trip(
    make: impl Fn() -> Box<dyn Operator>,
    input: Vec<Vec<Tick>>,
    more: Vec<Vec<Tick>>,
    stops: &[Time],
) -> Vec<usize> {
    let feeds = |ticks: Vec<Vec<Tick>>| -> Vec<_> {
        ticks.into_iter().map(|t| t.into_iter().peekable()).collect()
    };
    let whole = |op: &dyn Operator| {
        let mut w = StateWriter::new();
        op.save_state(&mut w).expect("save");
        w.into_bytes().expect("bytes")
    };
    let mut a = make();
    let mut feed = feeds(input);
    let (first, later) = stops.split_first().expect("a stop");
    drive_n(a.as_mut(), &mut feed, Some(*first));
    let base = whole(a.as_ref());
    a.track_changes();
    let mut pieces = vec![];
    for until in later.iter().map(|t| Some(*t)).chain([None]) {
        drive_n(a.as_mut(), &mut feed, until);
        let mut w = StateWriter::new();
        assert!(a.save_changes(&mut w).expect("save changes"), "changes recorded");
        pieces.push(w.into_bytes().expect("bytes"));
    }
    let mut b = make();
    let mut r = StateReader::from_bytes(&base).expect("read");
    b.restore_state(&mut r).expect("restore");
    r.finish().expect("all read");
    for p in &pieces {
        let mut r = StateReader::from_bytes(p).expect("read");
        b.restore_changes(&mut r).expect("restore changes");
        r.finish().expect("all read");
    }
    assert!(whole(a.as_ref()) == whole(b.as_ref()), "the state restored from changes differs");
    let more_a = drive_n(a.as_mut(), &mut feeds(more.clone()), None);
    let more_b = drive_n(b.as_mut(), &mut feeds(more), None);
    assert_eq!(more_a, more_b);
    pieces.iter().map(Vec::len).collect()
}
