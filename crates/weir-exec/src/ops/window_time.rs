//! Time-based windows: `[NOW]`, `[RANGE T]`, `[RANGE T SLIDE S [OFFSET O]]`, `[UNBOUNDED]` and
//! cumulating windows.
//!
//! At instant τ the window holds the stream elements with timestamp in [lo(τ), hi(τ)):
//! - `[RANGE T]`: (τ−T, τ], i.e. [τ−T+1, τ+1); an element stamped τ' is in it for exactly T
//!   ticks and leaves at τ'+T (`[NOW]` is `[RANGE 1]`);
//! - `[RANGE T SLIDE S]`: [b−T, b) with b = S·⌊(τ+1)/S⌋: window [kS−T, kS) becomes current at
//!   its last tick kS−1;
//! - `[UNBOUNDED]`: (−∞, τ];
//! - a cumulating window (`CUMULATE(..., step, size)`): [w, b) with b = step·⌊(τ+1)/step⌋ and
//!   w = size·⌊(b−1)/size⌋, the largest multiple of size below b. Window [k·size, k·size +
//!   j·step) becomes current at its last tick, k·size + j·step − 1, so the windows of a period
//!   grow one slice of `step` ticks at a time, and the next period's first window replaces the
//!   last one;
//! - with an offset O (`[RANGE T SLIDE S OFFSET O]`, TUMBLE/HOP/CUMULATE's last argument),
//!   every multiple of S (of step and size) above is that multiple plus O: window ends move
//!   by O, nothing else changes. O is kept in [0, S) ([0, size) for a cumulating window).
//!
//! Delta semantics: at τ the output is +e for each element that enters [lo, hi) and −e for each
//! that leaves it (with the element's multiplicity). In a cumulating window an element stamped
//! e enters once, at the last tick of its slice, step·(⌊e/step⌋+1) − 1, and leaves once, at
//! size·(⌊e/size⌋+1) + step − 1, where the next period's first window becomes current: a
//! window is the union of its slices, and an element is in one slice, so its cost does not
//! grow with size/step. Both bounds only move forward, so the
//! elements form a time-ordered queue: entering elements are taken from the unentered tail,
//! leaving ones popped from the head; each element is touched twice in its life, whatever the
//! T/S ratio. The operator asks to be woken at the next tick where an element enters (a slide
//! boundary) or leaves (an expiry), so those ticks become instants. Elements that fall into a
//! gap between sliding windows (T < S) are never in any window and are dropped on arrival.
//! State: the elements not yet expired. `[UNBOUNDED]` keeps none. Checkpointed as the
//! unexpired elements' changes in order with the count of those already entered (the cursors,
//! normalized to one batch), and, with bounds columns, the per-instant elements, the entered
//! count and the current bounds; see [`TimeWindow::save_state`](Operator::save_state).
//!
//! The elements are kept as the batches they arrived in, with two cursors: the first element
//! not yet entered and the first not yet expired. A step [lo, hi] is evaluated at once, one
//! instant or a span alike: the elements whose entry tick is ≤ hi enter, stamped with their
//! entry tick, and those whose exit tick is ≤ hi leave, stamped with their exit tick; within a
//! tick entries come before exits, as instant by instant (which is the span [τ, τ]).
//!
//! With bounds columns (the TUMBLE/HOP/CUMULATE table functions), each row also carries the
//! current window's `window_start` (b−T; w for a cumulating window) and `window_end` = b. When the window slides, every row still
//! inside changes (its bounds do), so the output is −(old rows, old bounds) +(new rows, new
//! bounds): proportional to the window's contents, which is the size of the change itself.
//! Its output changes only at slide boundaries, so a step, one instant or a span alike, admits
//! its elements and then moves the window to each boundary in it that changes the output; the
//! ticks in between cost nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::ArrayRef;

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::heap::HeapSize;
use crate::operator::{min_wakeup, take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::route::Placement;
use crate::state::{bool_col, i64_col, invalid, opt_i128_col, signature, StateReader, StateWriter};

/// Which bounds the window has.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TimeBounds {
    Unbounded,
    /// `[RANGE T]` (and `[NOW]` = `[RANGE 1]`).
    Range(Time),
    /// `[RANGE range SLIDE slide OFFSET offset]`: windows [kS + O − T, kS + O), with the
    /// offset O in [0, slide).
    Slide {
        range: Time,
        slide: Time,
        offset: Time,
    },
    /// Cumulating windows [k·size + O, k·size + O + j·step), j = 1..size/step (`size` a
    /// multiple of `step`), with the offset O in [0, size).
    Cumulate {
        step: Time,
        size: Time,
        offset: Time,
    },
}

/// Written as before offsets existed when the offset is 0, so that the signatures of
/// checkpointed state stay the same.
impl std::fmt::Debug for TimeBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            TimeBounds::Unbounded => write!(f, "Unbounded"),
            TimeBounds::Range(r) => write!(f, "Range({r})"),
            TimeBounds::Slide { range, slide, offset: 0 } => {
                write!(f, "Slide {{ range: {range}, slide: {slide} }}")
            }
            TimeBounds::Slide { range, slide, offset } => {
                write!(f, "Slide {{ range: {range}, slide: {slide}, offset: {offset} }}")
            }
            TimeBounds::Cumulate { step, size, offset: 0 } => {
                write!(f, "Cumulate {{ step: {step}, size: {size} }}")
            }
            TimeBounds::Cumulate { step, size, offset } => {
                write!(f, "Cumulate {{ step: {step}, size: {size}, offset: {offset} }}")
            }
        }
    }
}

/// ⌊(x − offset) / n⌋·n + offset: the largest tick ≤ x on the grid of multiples of n shifted
/// by offset.
fn floor_to(x: i128, n: Time, offset: Time) -> i128 {
    let (n, o) = (n as i128, offset as i128);
    n * (x - o).div_euclid(n) + o
}

/// In `[RANGE range SLIDE slide OFFSET offset]`, the tick at which an element stamped `e`
/// first lies in the window: the last tick b − 1 of the first window [b − range, b) holding it
/// (b the first window end after `e`). None if it is in a gap between windows, or that tick is
/// past the domain's end (the element is then in no window).
pub(crate) fn slide_entry(range: Time, slide: Time, offset: Time, e: Time) -> Option<Time> {
    let e = e as i128;
    let b = floor_to(e, slide, offset) + slide as i128;
    if b - range as i128 > e {
        return None;
    }
    Time::try_from(b - 1).ok()
}

impl TimeBounds {
    /// `[RANGE range SLIDE slide]` without an offset.
    pub fn slide(range: Time, slide: Time) -> Self {
        TimeBounds::Slide { range, slide, offset: 0 }
    }

    /// [lo, hi) at instant t. Computed in i128: bounds may lie outside the i64 tick domain
    /// (a window at the domain's ends), and must not be clamped into it.
    pub(crate) fn at(self, t: Time) -> (i128, i128) {
        let t = t as i128;
        match self {
            TimeBounds::Unbounded => (i128::MIN, t + 1),
            TimeBounds::Range(r) => (t - r as i128 + 1, t + 1),
            TimeBounds::Slide { range, slide, offset } => {
                let b = floor_to(t + 1, slide, offset);
                (b - range as i128, b)
            }
            TimeBounds::Cumulate { step, size, offset } => {
                let b = floor_to(t + 1, step, offset);
                (floor_to(b - 1, size, offset), b)
            }
        }
    }

    /// How far the window's end moves at each move (`None` for windows that move every tick).
    pub(crate) fn step(self) -> Option<Time> {
        match self {
            TimeBounds::Unbounded | TimeBounds::Range(_) => None,
            TimeBounds::Slide { slide, .. } => Some(slide),
            TimeBounds::Cumulate { step, .. } => Some(step),
        }
    }
}

#[derive(Debug)]
struct Elements {
    time: Time,
    batch: ChangeBatch,
    inside: bool,
}

/// The rows of an arrival instant: a slice of its step's input, which shares its buffers with
/// the step's other instants, so counted by the bytes of its own rows.
impl HeapSize for Elements {
    fn heap_bytes(&self) -> usize {
        let b = &self.batch;
        let rows: usize = b
            .data
            .columns()
            .iter()
            .map(|c| {
                c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size())
            })
            .sum();
        rows + b.times.heap_bytes() + b.diffs.heap_bytes()
    }
}

#[derive(Debug)]
pub struct TimeWindow {
    bounds: TimeBounds,
    schema: SchemaRef,
    /// Unexpired elements, one entry per arrival instant, oldest first.
    elems: VecDeque<Elements>,
    /// How many entries at the head have been passed by `hi` (entered, or skipped).
    entered: usize,
    /// The input's columns (`schema` less the bounds columns, if any).
    data_schema: SchemaRef,
    /// Whether rows carry `window_start`/`window_end`.
    bounds_columns: bool,
    /// The bounds [lo, hi) at the last instant.
    current: Option<(i128, i128)>,
    /// Without bounds columns: the unexpired elements, as the batches they arrived in (rows
    /// sorted by time; elements in a gap dropped).
    queue: VecDeque<ChangeBatch>,
    /// (batch, row) of the first element not yet entered.
    enter: (usize, usize),
    /// Rows of the front batch already expired.
    exit_row: usize,
}

impl TimeWindow {
    pub fn new(bounds: TimeBounds, schema: SchemaRef) -> Self {
        TimeWindow {
            bounds,
            data_schema: schema.clone(),
            schema,
            elems: VecDeque::new(),
            entered: 0,
            bounds_columns: false,
            current: None,
            queue: VecDeque::new(),
            enter: (0, 0),
            exit_row: 0,
        }
    }

    /// A window whose rows carry `window_start` and `window_end`, the last two columns of
    /// `schema`.
    pub fn with_bounds_columns(bounds: TimeBounds, schema: SchemaRef) -> Self {
        let n = schema.fields().len().saturating_sub(2);
        let data_schema = Arc::new(arrow::datatypes::Schema::new(schema.fields()[..n].to_vec()));
        TimeWindow { data_schema, bounds_columns: true, ..TimeWindow::new(bounds, schema) }
    }

    /// Rows of `batches` with constant bounds columns appended, and diffs times `sign`.
    fn with_bounds(
        &self,
        batches: &[ChangeBatch],
        bounds: (i128, i128),
        sign: i64,
    ) -> Result<ChangeBatch> {
        let all = ChangeBatch::concat(&self.data_schema, batches)?;
        let n = all.len();
        let clamp = |v: i128| v.clamp(Time::MIN as i128, Time::MAX as i128) as i64;
        let mut cols = all.data.columns().to_vec();
        for v in [bounds.0, bounds.1] {
            cols.push(Arc::new(arrow::array::Int64Array::from(vec![clamp(v); n])) as ArrayRef);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(data, all.times, all.diffs.iter().map(|d| d * sign).collect()))
    }

    fn inside(&self) -> Vec<ChangeBatch> {
        self.elems.iter().filter(|e| e.inside).map(|e| e.batch.clone()).collect()
    }

    /// The tick at which an element stamped `e` first lies in the window, if ever.
    fn entry_tick(&self, e: Time) -> Option<Time> {
        match self.bounds {
            TimeBounds::Unbounded | TimeBounds::Range(_) => Some(e),
            TimeBounds::Slide { range, slide, offset } => slide_entry(range, slide, offset, e),
            TimeBounds::Cumulate { step, offset, .. } => {
                // The end of e's slice.
                Time::try_from(floor_to(e as i128, step, offset) + step as i128 - 1).ok()
            }
        }
    }

    /// The tick at which an element stamped `e`, now inside, leaves.
    /// `None` if that tick lies past the end of the time domain (it never leaves).
    fn exit_tick(&self, e: Time) -> Option<Time> {
        let tick = match self.bounds {
            TimeBounds::Unbounded => return None,
            TimeBounds::Range(r) => e as i128 + r as i128,
            TimeBounds::Slide { range, slide, offset } => {
                floor_to(e as i128 + range as i128, slide, offset) + slide as i128 - 1
            }
            TimeBounds::Cumulate { step, size, offset } => {
                // When the next period's first window becomes current.
                floor_to(e as i128, size, offset) + size as i128 + step as i128 - 1
            }
        };
        Time::try_from(tick).ok()
    }
}

/// The rows of `entries` and of `exits` (each a sequence of batches in time order) as one
/// batch in time order, entries before exits within a tick, with one copy of the rows.
fn merge_by_time(
    schema: &SchemaRef,
    entries: &[ChangeBatch],
    exits: &[ChangeBatch],
) -> Result<ChangeBatch> {
    let last = |parts: &[ChangeBatch]| parts.last().and_then(|p| p.times.last().copied());
    let first = |parts: &[ChangeBatch]| parts.first().and_then(|p| p.times.first().copied());
    let ordered = match (last(entries), first(exits)) {
        (Some(e), Some(x)) => e <= x,
        _ => true,
    };
    if ordered {
        let all: Vec<ChangeBatch> = entries.iter().chain(exits).cloned().collect();
        return match all.as_slice() {
            [one] => Ok(one.clone()),
            _ => ChangeBatch::concat(schema, &all),
        };
    }
    // (part, row) of each output row; the parts are the entries', then the exits'.
    let n: usize = entries.iter().chain(exits).map(ChangeBatch::len).sum();
    let mut at: Vec<(usize, usize)> = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    let mut diffs = Vec::with_capacity(n);
    let rows = |parts: &[ChangeBatch], base: usize| {
        parts
            .iter()
            .enumerate()
            .flat_map(move |(p, b)| (0..b.len()).map(move |r| (base + p, r)))
            .collect::<Vec<_>>()
    };
    let (ins, outs) = (rows(entries, 0), rows(exits, entries.len()));
    let all: Vec<&ChangeBatch> = entries.iter().chain(exits).collect();
    let time = |(p, r): (usize, usize)| all[p].times[r];
    let (mut i, mut j) = (0, 0);
    while i < ins.len() || j < outs.len() {
        let take_entry = j == outs.len() || (i < ins.len() && time(ins[i]) <= time(outs[j]));
        let (p, r) = if take_entry {
            i += 1;
            ins[i - 1]
        } else {
            j += 1;
            outs[j - 1]
        };
        at.push((p, r));
        times.push(all[p].times[r]);
        diffs.push(all[p].diffs[r]);
    }
    let columns = (0..schema.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn arrow::array::Array> =
                all.iter().map(|b| b.data.column(c).as_ref()).collect();
            arrow::compute::interleave(&arrays, &at)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let data = batch_of(schema, columns, n)?;
    Ok(ChangeBatch::new(data, times, diffs))
}

impl TimeWindow {
    fn signature(&self) -> String {
        signature("time_window", &self.schema, (self.bounds, self.bounds_columns))
    }

    /// The changes of a window without bounds columns over the instants [lo, hi], given the
    /// input changes `d` stamped in [lo, hi] (see the module docs).
    fn plain_step(&mut self, hi: Time, d: ChangeBatch) -> Result<ChangeBatch> {
        if !d.is_empty() {
            let gaps =
                matches!(self.bounds, TimeBounds::Slide { range, slide, .. } if range < slide);
            let d = if gaps {
                let keep: Vec<u32> = (0..d.len() as u32)
                    .filter(|&i| self.entry_tick(d.times[i as usize]).is_some())
                    .collect();
                if keep.len() == d.len() {
                    d
                } else {
                    d.take(&keep)?
                }
            } else {
                d
            };
            if !d.is_empty() {
                self.queue.push_back(d);
            }
        }
        let mut parts = Vec::new();
        let mut exits = Vec::new();
        // Entries: the rows from the enter cursor on whose entry tick is ≤ hi.
        let (mut ci, mut ri) = self.enter;
        while let Some(c) = self.queue.get(ci) {
            let start = ri;
            let mut ticks = Vec::new();
            while ri < c.len() {
                match self.entry_tick(c.times[ri]) {
                    Some(x) if x <= hi => ticks.push(x),
                    _ => break,
                }
                ri += 1;
            }
            if ri > start {
                let diffs = c.diffs[start..ri].to_vec();
                parts.push(ChangeBatch::new(c.data.slice(start, ri - start), ticks, diffs));
            }
            if ri < c.len() {
                break;
            }
            ci += 1;
            ri = 0;
        }
        self.enter = (ci, ri);
        // Exits: entered rows whose exit tick is ≤ hi, from the front.
        while let Some(c) = self.queue.front() {
            let limit = if self.enter.0 == 0 { self.enter.1 } else { c.len() };
            let start = self.exit_row;
            let mut ticks = Vec::new();
            let mut r = start;
            while r < limit {
                match self.exit_tick(c.times[r]) {
                    Some(x) if x <= hi => ticks.push(x),
                    _ => break,
                }
                r += 1;
            }
            if r > start {
                let diffs = c.diffs[start..r].iter().map(|d| -d).collect();
                exits.push(ChangeBatch::new(c.data.slice(start, r - start), ticks, diffs));
            }
            if r == c.len() {
                self.queue.pop_front();
                self.exit_row = 0;
                self.enter.0 = self.enter.0.saturating_sub(1);
            } else {
                self.exit_row = r;
                break;
            }
        }
        let all = merge_by_time(&self.data_schema, &parts, &exits)?;
        let data = batch_of(&self.schema, all.data.columns().to_vec(), all.len())?;
        Ok(ChangeBatch::new(data, all.times, all.diffs))
    }

    fn plain_wakeup(&self) -> Option<Time> {
        let (ci, ri) = self.enter;
        let entry = self.queue.get(ci).and_then(|c| self.entry_tick(c.times[ri]));
        let has_entered = self.enter.0 > 0 || self.enter.1 > self.exit_row;
        let exit = self
            .queue
            .front()
            .filter(|_| has_entered)
            .and_then(|c| self.exit_tick(c.times[self.exit_row]));
        min_wakeup([entry, exit])
    }

    /// The changes of a window with bounds columns over the instants [lo, hi], given the input
    /// changes `d` stamped in [lo, hi] (see the module docs). Every element is admitted first;
    /// then the window is moved to each tick of the step at which its output changes (a slide
    /// boundary with rows inside before or after it), in order, exactly as instant-by-instant
    /// evaluation moves it at those instants, and at no other tick: between two boundaries the
    /// contents and the bounds stay as they are.
    fn bounds_step(&mut self, lo: Time, hi: Time, d: ChangeBatch) -> Result<ChangeBatch> {
        for (start, end) in runs(&d.times) {
            let t = d.times[start];
            if self.entry_tick(t).is_some() {
                self.elems.push_back(Elements {
                    time: t,
                    batch: d.slice(start, end - start),
                    inside: false,
                });
            }
        }
        let mut parts = Vec::new();
        let mut last = None::<Time>;
        while let Some(x) = self.next_change(lo).filter(|&x| x <= hi) {
            if last.is_some_and(|l| x <= l) {
                return Err(WeirError::internal("a TUMBLE/HOP window did not advance"));
            }
            let out = self.move_to(x)?;
            if !out.is_empty() {
                parts.push(out);
            }
            last = Some(x);
        }
        // The instants of the step after the last change see the same window.
        self.current = Some(self.bounds.at(hi));
        match parts.len() {
            0 => Ok(ChangeBatch::empty(self.schema.clone())),
            1 => Ok(parts.remove(0)),
            _ => ChangeBatch::concat(&self.schema, &parts),
        }
    }

    /// The first tick from `from` on at which the window's output can change: a queued element
    /// enters, or the window with rows inside slides on (which is also when its rows leave).
    fn next_change(&self, from: Time) -> Option<Time> {
        let entry = self.elems.get(self.entered).and_then(|e| self.entry_tick(e.time));
        let slide = match (self.bounds.step(), self.current) {
            (Some(slide), Some((_, hi))) if self.elems.front().is_some_and(|e| e.inside) => {
                Time::try_from(hi + slide as i128 - 1).ok()
            }
            _ => None,
        };
        min_wakeup([entry, slide]).map(|t| t.max(from))
    }

    /// Moves the window to its position at instant `t`: if it slid, −(the rows inside, old
    /// bounds) +(the rows inside now, new bounds); else +(the rows that entered). Stamped `t`.
    fn move_to(&mut self, t: Time) -> Result<ChangeBatch> {
        let (lo, hi) = self.bounds.at(t);
        let slid = self.current.is_some_and(|c| c != (lo, hi));
        let before = if slid { self.inside() } else { vec![] };
        let old_bounds = self.current.unwrap_or((lo, hi));
        self.current = Some((lo, hi));
        let mut out = Vec::new();
        while self.entered < self.elems.len() && (self.elems[self.entered].time as i128) < hi {
            let e = &mut self.elems[self.entered];
            if e.time as i128 >= lo {
                e.inside = true;
                out.push(e.batch.clone());
            }
            self.entered += 1;
        }
        while self.entered > 0 && self.elems.front().is_some_and(|e| (e.time as i128) < lo) {
            if let Some(e) = self.elems.pop_front() {
                if e.inside && !slid {
                    out.push(e.batch.negate());
                }
            }
            self.entered -= 1;
        }
        let mut all = if slid {
            let old = self.with_bounds(&before, old_bounds, -1)?;
            let new = self.with_bounds(&self.inside(), (lo, hi), 1)?;
            ChangeBatch::concat(&self.schema, &[old, new])?
        } else {
            self.with_bounds(&out, (lo, hi), 1)?
        };
        all.times.iter_mut().for_each(|x| *x = t);
        Ok(all)
    }
}

/// (start, end) of each run of equal times in `times` (which is sorted).
fn runs(times: &[Time]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let ends = crate::operator::time_runs(times);
    let starts = std::iter::once(0).chain(ends.clone());
    starts.zip(ends)
}

impl Operator for TimeWindow {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let d = d.with_schema(self.data_schema.clone())?;
        if self.bounds == TimeBounds::Unbounded {
            return Ok(d);
        }
        if !self.bounds_columns {
            return self.plain_step(step.hi, d);
        }
        self.bounds_step(step.lo, step.hi, d)
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// The unexpired elements: the batches they arrived in, or with bounds columns, per
    /// arrival instant.
    fn state_bytes(&self) -> usize {
        self.queue.heap_bytes() + self.elems.heap_bytes()
    }

    /// State (see the module docs): section `time_window` (one row: `entered`, the queued
    /// rows already entered; `elems_entered`; `current_lo`, `current_hi` as 16-byte Binary),
    /// `time_window.queue` (the unexpired elements' changes, in order), and, with bounds
    /// columns, `time_window.elems` (per arrival instant: `time`, `inside`, `rows`) and
    /// `time_window.elem_rows` (their changes, concatenated).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        // The queue from the first unexpired row on, as one batch, and how many of its rows
        // have entered.
        let mut rest = Vec::with_capacity(self.queue.len());
        let mut entered = 0;
        for (i, c) in self.queue.iter().enumerate() {
            let from = if i == 0 { self.exit_row.min(c.len()) } else { 0 };
            rest.push(c.slice(from, c.len() - from));
            if i < self.enter.0 {
                entered += c.len() - from;
            } else if i == self.enter.0 {
                entered += self.enter.1.saturating_sub(from);
            }
        }
        let (lo, hi) = (self.current.map(|c| c.0), self.current.map(|c| c.1));
        w.put(
            "time_window",
            &sig,
            1,
            vec![
                ("entered", i64_col([entered as i64])),
                ("elems_entered", i64_col([self.entered as i64])),
                ("current_lo", opt_i128_col([lo])),
                ("current_hi", opt_i128_col([hi])),
            ],
        )?;
        w.put_changes("time_window.queue", &sig, &self.data_schema, &rest)?;
        let n = self.elems.len();
        w.put(
            "time_window.elems",
            &sig,
            n,
            vec![
                ("time", i64_col(self.elems.iter().map(|e| e.time))),
                ("inside", bool_col(self.elems.iter().map(|e| e.inside))),
                ("rows", i64_col(self.elems.iter().map(|e| e.batch.len() as i64))),
            ],
        )?;
        let batches: Vec<ChangeBatch> = self.elems.iter().map(|e| e.batch.clone()).collect();
        w.put_changes("time_window.elem_rows", &sig, &self.data_schema, &batches)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let s = r.take("time_window", &sig)?;
        let entered = s.scalar_i64("entered")?;
        let elems_entered = s.scalar_i64("elems_entered")?;
        let lo = s.opt_i128s("current_lo")?;
        let hi = s.opt_i128s("current_hi")?;
        self.current = match (lo.as_slice(), hi.as_slice()) {
            ([Some(lo)], [Some(hi)]) => Some((*lo, *hi)),
            ([None], [None]) => None,
            _ => return Err(invalid("section 'time_window': bad current bounds")),
        };
        let queue = r.take("time_window.queue", &sig)?.changes(Some(&self.data_schema))?;
        let entered = usize::try_from(entered)
            .ok()
            .filter(|&e| e <= queue.len())
            .ok_or_else(|| invalid("section 'time_window': bad entered count"))?;
        self.queue.clear();
        self.exit_row = 0;
        self.enter = if entered < queue.len() { (0, entered) } else { (1, 0) };
        if !queue.is_empty() {
            self.queue.push_back(queue);
        } else {
            self.enter = (0, 0);
        }
        let e = r.take("time_window.elems", &sig)?;
        let (times, inside, rows) = (e.i64s("time")?, e.bools("inside")?, e.i64s("rows")?);
        let all = r.take("time_window.elem_rows", &sig)?.changes(Some(&self.data_schema))?;
        self.elems.clear();
        let mut at = 0usize;
        for ((time, inside), n) in times.into_iter().zip(inside).zip(rows) {
            let n = usize::try_from(n)
                .ok()
                .filter(|n| at + n <= all.len())
                .ok_or_else(|| invalid("section 'time_window.elems': bad row count"))?;
            self.elems.push_back(Elements { time, batch: all.slice(at, n), inside });
            at += n;
        }
        if at != all.len() {
            return Err(invalid("section 'time_window.elem_rows': rows left over"));
        }
        self.entered = usize::try_from(elems_entered)
            .ok()
            .filter(|&e| e <= self.elems.len())
            .ok_or_else(|| invalid("section 'time_window': bad elems_entered"))?;
        Ok(())
    }

    /// The unexpired elements: what the window bounds ([UNBOUNDED] keeps none).
    fn saves_whole_as_changes(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Time> {
        if !self.bounds_columns {
            return if self.bounds == TimeBounds::Unbounded { None } else { self.plain_wakeup() };
        }
        // With bounds columns, rows inside change at every slide (their bounds do).
        let next_slide = match (self.bounds.step(), self.current) {
            (Some(slide), Some((_, hi))) if self.elems.front().is_some_and(|e| e.inside) => {
                Time::try_from(hi + slide as i128 - 1).ok()
            }
            _ => None,
        };
        min_wakeup([
            self.elems.get(self.entered).and_then(|e| self.entry_tick(e.time)),
            self.elems.front().filter(|e| e.inside).and_then(|e| self.exit_tick(e.time)),
            next_slide,
        ])
    }

    /// A row's windows (when it enters and leaves) follow from its own time alone.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Local)
    }

    /// Each output row is an element as it arrived, with the bounds columns after it.
    fn passes_rows(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::EvalCtx;
    use crate::testing::{fed, kv, kv_schema, run, Tick};

    fn window(bounds: TimeBounds, input: Vec<Tick>) -> Vec<String> {
        run(&mut fed(TimeWindow::new(bounds, kv_schema()), [input]))
    }

    #[test]
    fn range_keeps_each_element_exactly_t_ticks() {
        let out =
            window(TimeBounds::Range(2), vec![kv(1, "+1 a 1"), kv(2, "+1 b 2"), kv(4, "+1 c 4")]);
        assert_eq!(
            out,
            ["@1 +1 a 1", "@2 +1 b 2", "@3 -1 a 1", "@4 +1 c 4", "@4 -1 b 2", "@6 -1 c 4"]
        );
    }

    #[test]
    fn slide_windows_become_current_at_their_last_tick() {
        // [RANGE 10 SLIDE 5]: windows [kS−10, kS) current at kS−1.
        let out = window(
            TimeBounds::slide(10, 5),
            vec![kv(1, "+1 x 1"), kv(4, "+1 x 4"), kv(6, "+1 x 6"), kv(12, "+1 x 12")],
        );
        assert_eq!(
            out,
            [
                "@4 +1 x 1",
                "@4 +1 x 4",
                "@9 +1 x 6",
                "@14 +1 x 12",
                "@14 -1 x 1",
                "@14 -1 x 4",
                "@19 -1 x 6",
                "@24 -1 x 12"
            ]
        );
    }

    #[test]
    fn slide_not_dividing_range() {
        // [RANGE 5 SLIDE 3]: windows [3k−5, 3k) current at 3k−1; x@4 is in [1,6) (at 5) and
        // [4,9) (at 8), and leaves at 11 when [7,12) becomes current.
        let out = window(TimeBounds::slide(5, 3), vec![kv(4, "+1 x 4")]);
        assert_eq!(out, ["@5 +1 x 4", "@11 -1 x 4"]);
    }

    #[test]
    fn elements_in_a_gap_are_never_in_a_window() {
        // [RANGE 2 SLIDE 5]: windows [5k−2, 5k); x@1 is in no window, y@4 is in [3,5).
        let out = window(TimeBounds::slide(2, 5), vec![kv(1, "+1 x 1"), kv(4, "+1 y 4")]);
        assert_eq!(out, ["@4 +1 y 4", "@9 -1 y 4"]);
    }

    #[test]
    fn multiplicities_enter_and_leave_together() {
        let out = window(TimeBounds::Range(3), vec![kv(0, "+2 a 0")]);
        assert_eq!(out, ["@0 +2 a 0", "@3 -2 a 0"]);
    }

    /// Every change in output order (not sorted within an instant), as `@t +d k`.
    fn raw(d: &ChangeBatch) -> Vec<String> {
        let keys = d.data.column(0).as_any().downcast_ref::<arrow::array::StringArray>().unwrap();
        (0..d.len())
            .map(|i| format!("@{} {:+} {}", d.times[i], d.diffs[i], keys.value(i)))
            .collect()
    }

    #[test]
    fn a_span_interleaves_entries_and_exits_as_instants_do() {
        // One element per tick (two at tick 4): over a span, entries and exits of many ticks
        // are merged in time order, a tick's entries before its exits, exactly as instant by
        // instant evaluation orders them.
        let ticks =
            || -> Vec<Tick> {
                (0..12)
                    .map(|t| {
                        if t == 4 {
                            kv(t, "+1 p 4, +2 q 4")
                        } else {
                            kv(t, &format!("+1 e{t} {t}"))
                        }
                    })
                    .collect()
            };
        for bounds in [TimeBounds::Range(3), TimeBounds::slide(4, 2)] {
            let ctx = EvalCtx::default();
            let flow = || fed(TimeWindow::new(bounds, kv_schema()), [ticks()]);
            let mut one = flow();
            let mut want = vec![];
            while let Some(t) = one.next_wakeup() {
                want.extend(raw(&one.eval(t, t, &ctx).unwrap()));
            }
            assert!(want.iter().any(|r| r.starts_with("@7 -1")), "{want:?}");
            for width in [0, 1, 3, 20] {
                let mut w = flow();
                let mut got = vec![];
                while let Some(lo) = w.next_wakeup() {
                    got.extend(raw(&w.eval(lo, lo + width, &ctx).unwrap()));
                }
                assert_eq!(got, want, "{bounds:?} width {width}");
            }
        }
    }

    /// TUMBLE/HOP's bounds columns, from scratch: the rows at instant τ are the elements
    /// stamped in the window current at τ, each with that window's bounds; the output at τ is
    /// what changed since τ−1.
    fn bounds_oracle(bounds: TimeBounds, elems: &[(Time, &str)], end: Time) -> Vec<String> {
        let at = |t: Time| -> std::collections::BTreeMap<String, i64> {
            let (lo, hi) = bounds.at(t);
            let mut m = std::collections::BTreeMap::new();
            for &(e, k) in elems {
                if (e as i128) >= lo && (e as i128) < hi && e <= t {
                    *m.entry(format!("{k} {e} {lo} {hi}")).or_insert(0) += 1;
                }
            }
            m
        };
        let mut out = vec![];
        let mut prev = std::collections::BTreeMap::new();
        for t in 0..=end {
            let now = at(t);
            let mut rows = vec![];
            for (row, n) in &now {
                let d = n - prev.get(row).copied().unwrap_or(0);
                if d != 0 {
                    rows.push(format!("@{t} {d:+} {row}"));
                }
            }
            for (row, n) in &prev {
                if !now.contains_key(row) {
                    rows.push(format!("@{t} {:+} {row}", -n));
                }
            }
            rows.sort();
            out.extend(rows);
            prev = now;
        }
        out
    }

    #[test]
    fn bounds_columns_follow_their_definition_instant_by_instant_and_over_spans() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("window_start", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("window_end", arrow::datatypes::DataType::Int64, true),
        ]));
        // Elements at ticks with gaps (no element between 9 and 23), two at once at 4.
        let elems: Vec<(Time, &str)> =
            vec![(0, "a"), (1, "b"), (4, "c"), (4, "d"), (6, "e"), (9, "f"), (23, "g"), (24, "h")];
        let ticks = || -> Vec<Tick> {
            let mut by: std::collections::BTreeMap<Time, Vec<String>> = Default::default();
            for &(t, k) in &elems {
                by.entry(t).or_default().push(format!("+1 {k} {t}"));
            }
            by.into_iter().map(|(t, rows)| kv(t, &rows.join(", "))).collect()
        };
        // TUMBLE 5, HOP 2/6 (slide divides), HOP 4/6 (does not), HOP 5/3 (gaps), CUMULATE
        // 2/6, 3/9 and 5/5 (a tumbling window).
        let all = [
            TimeBounds::slide(5, 5),
            TimeBounds::slide(6, 2),
            TimeBounds::slide(6, 4),
            TimeBounds::slide(3, 5),
            TimeBounds::Cumulate { step: 2, size: 6, offset: 0 },
            TimeBounds::Cumulate { step: 3, size: 9, offset: 0 },
            TimeBounds::Cumulate { step: 5, size: 5, offset: 0 },
            // Offsets: HOP 4/6 with its ends at 4k + 1, CUMULATE 2/6 with periods from 6k + 3.
            TimeBounds::Slide { range: 6, slide: 4, offset: 1 },
            TimeBounds::Slide { range: 5, slide: 5, offset: 2 },
            TimeBounds::Cumulate { step: 2, size: 6, offset: 3 },
        ];
        for bounds in all {
            let mut want = bounds_oracle(bounds, &elems, 60);
            want.sort();
            assert!(!want.is_empty());
            for width in [0, 1, 3, 7, 100] {
                let op = TimeWindow::with_bounds_columns(bounds, schema.clone());
                let mut got = crate::testing::run_spans(&mut fed(op, [ticks()]), width);
                got.sort();
                assert_eq!(got, want, "{bounds:?}, spans of {width}");
            }
        }
    }

    #[test]
    fn cumulate_elements_enter_at_their_slice_end_and_leave_when_the_next_period_begins() {
        // CUMULATE step 2, size 6: x@1 is in slice [0,2), current from 1; y@4 in [4,6), from
        // 5; both leave at 7, when [6,8) becomes current. z@6 enters at 7 and leaves at 13.
        let out = window(
            TimeBounds::Cumulate { step: 2, size: 6, offset: 0 },
            vec![kv(1, "+1 x 1"), kv(4, "+1 y 4"), kv(6, "+1 z 6")],
        );
        assert_eq!(
            out,
            ["@1 +1 x 1", "@5 +1 y 4", "@7 +1 z 6", "@7 -1 x 1", "@7 -1 y 4", "@13 -1 z 6"]
        );
    }

    #[test]
    fn cumulate_bounds_grow_by_a_step_within_a_period() {
        let c = TimeBounds::Cumulate { step: 2, size: 6, offset: 0 };
        let at: Vec<(i128, i128)> =
            [-1, 0, 1, 2, 3, 5, 6, 7, 11].iter().map(|&t| c.at(t)).collect();
        assert_eq!(at, [(-6, 0), (-6, 0), (0, 2), (0, 2), (0, 4), (0, 6), (0, 6), (6, 8), (6, 12)]);
    }

    /// The figure grows with the unexpired elements and falls back once they have left (to
    /// the queue's empty allocation), without and with bounds columns.
    #[test]
    fn state_bytes_follow_the_unexpired_elements() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("window_start", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("window_end", arrow::datatypes::DataType::Int64, true),
        ]));
        let ops = [
            TimeWindow::new(TimeBounds::Range(2), kv_schema()),
            TimeWindow::with_bounds_columns(TimeBounds::slide(2, 2), schema),
        ];
        for mut op in ops {
            assert_eq!(op.state_bytes(), 0);
            let mut feed = vec![kv(1, "+1 a 1"), kv(2, "+1 b 2, +1 c 3")].into_iter().peekable();
            crate::testing::drive(&mut op, &mut feed, Some(2));
            let one = op.state_bytes();
            assert!(one > 0);
            crate::testing::drive(&mut op, &mut feed, Some(3));
            let two = op.state_bytes();
            assert!(two > one, "{two} after {one}");
            crate::testing::drive(&mut op, &mut feed, None);
            assert!(op.queue.is_empty() && op.elems.is_empty());
            assert!(
                op.state_bytes() < one,
                "{} at the end, {one} with one element",
                op.state_bytes()
            );
        }
    }
}
