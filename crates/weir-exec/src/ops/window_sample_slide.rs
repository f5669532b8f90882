//! A uniform sample of each window of a sliding (or tumbling) time window:
//! `s [RANGE T SLIDE S [OFFSET O] SAMPLE N ROWS [SEED s]]`.
//!
//! Elements get the priorities of `[SAMPLE N ROWS]` ([`super::window_sample`]): a 64-bit hash,
//! seeded by s, of (timestamp, row, occurrence). The `[RANGE T SLIDE S OFFSET O]` window current
//! at τ holds the elements stamped in [b − T, b), b = the largest kS + O ≤ τ + 1; R(τ) holds the
//! N of them with the smallest priorities (all of them while there are at most N): a uniform
//! sample without replacement of each window, the same for the same input and seed whatever
//! the batching, the arrival order within the watermark bound, or the worker count.
//!
//! Delta semantics: R changes only at a window's last tick b − 1, when the window [b − T, b)
//! becomes current: −e for each element of the previous sample not in the new one, +e for each
//! element of the new sample not in the previous one. An element that is in two consecutive
//! windows' samples stays, with no change. Between boundaries nothing is output: an element
//! stamped τ belongs to windows that are not current yet.
//!
//! Cost: the windows are unions of slices of g = gcd(T, S) ticks. Each slice keeps only its N
//! elements of smallest priority (an element that is not among them can be in no window's
//! sample, since a window holds the whole slice), so an element costs a hash and O(log N); a
//! window's sample is merged from its T/g slices at its boundary, O((T/g)·N·log N) per
//! window, not per element. A slice is dropped once no window to come holds it.
//!
//! State: the slices' kept elements and the current sample, and the last evaluated instant,
//! checkpointed as sections `sample_slide.slices` and `sample_slide.current` (`t` Int64,
//! `occurrence` Int64, `row` Binary), and `sample_slide.at` (`last` Int64, one row, NULL
//! before any instant). All elements meet on one worker.

use std::collections::{BTreeMap, BTreeSet};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::SampleOver;

use super::window_sample::{elements, keep_smallest, kept_bytes, priority, Element};
use crate::heap::b_tree;
use crate::operator::{take_inputs, Operator, Step};
use crate::row::{RowBytes, RowCodec};
use crate::state::{binary_col, i64_col, invalid, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct SlideSampleWindow {
    rows: u64,
    seed: u64,
    range: i128,
    slide: i128,
    /// The window boundaries are kS + offset (offset in [0, S)).
    offset: i128,
    /// The slice length, gcd(T, S); slice j covers [j·g + phase, (j + 1)·g + phase).
    slice: i128,
    phase: i128,
    schema: SchemaRef,
    row_codec: RowCodec,
    /// Per slice (by index), its kept elements: at most `rows`, those of smallest priority.
    slices: BTreeMap<i128, BTreeSet<Element>>,
    /// The current window's sample.
    current: BTreeSet<Element>,
    /// The last instant evaluated.
    last: Option<Time>,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl SlideSampleWindow {
    pub fn new(rows: u64, seed: u64, over: SampleOver, schema: SchemaRef) -> Result<Self> {
        if over.range <= 0 || over.slide <= 0 || rows == 0 {
            return Err(WeirError::internal("a SAMPLE over a time window out of shape"));
        }
        let (range, slide) = (i128::from(over.range), i128::from(over.slide));
        let offset = i128::from(over.offset).rem_euclid(slide);
        let g = gcd(range, slide);
        Ok(SlideSampleWindow {
            rows,
            seed,
            range,
            slide,
            offset,
            slice: g,
            phase: offset.rem_euclid(g),
            row_codec: RowCodec::for_schema(&schema)?,
            schema,
            slices: BTreeMap::new(),
            current: BTreeSet::new(),
            last: None,
        })
    }

    fn signature(&self) -> String {
        let over = (self.range, self.slide, self.offset);
        signature("sample_slide", &self.schema, (self.rows, self.seed, over))
    }

    /// The index of the slice holding tick `t`.
    fn slice_of(&self, t: i128) -> i128 {
        (t - self.phase).div_euclid(self.slice)
    }

    /// The first tick of slice `j`.
    fn slice_start(&self, j: i128) -> i128 {
        j * self.slice + self.phase
    }

    /// The smallest window end (a boundary kS + offset) greater than `x`.
    fn boundary_after(&self, x: i128) -> i128 {
        ((x - self.offset).div_euclid(self.slide) + 1) * self.slide + self.offset
    }

    /// Adds `e` to its slice, keeping the slice's `rows` smallest.
    fn keep(&mut self, e: Element) {
        let j = self.slice_of(i128::from(e.1));
        let rows = self.rows;
        keep_smallest(self.slices.entry(j).or_default(), e, rows);
    }

    /// The sample of the window [end − T, end): the `rows` smallest of its slices' elements.
    fn sample_of(&self, end: i128) -> BTreeSet<Element> {
        let (lo, hi) = (self.slice_of(end - self.range), self.slice_of(end));
        let mut all: Vec<&Element> = self.slices.range(lo..hi).flat_map(|(_, s)| s).collect();
        all.sort_unstable();
        all.into_iter().take(self.rows as usize).cloned().collect()
    }
}

impl Operator for SlideSampleWindow {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let t = step.instant()?;
        let [d] = take_inputs::<1>(inputs)?;
        for e in elements(self.seed, t, &d, &self.row_codec)? {
            self.keep(e);
        }
        self.last = Some(t);
        let end = i128::from(t) + 1;
        if (end - self.offset).rem_euclid(self.slide) != 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        // A window becomes current: its sample replaces the previous one.
        let next = self.sample_of(end);
        let mut out: Vec<(&RowBytes, i64)> = Vec::new();
        out.extend(self.current.difference(&next).map(|e| (&e.2, -1)));
        out.extend(next.difference(&self.current).map(|e| (&e.2, 1)));
        let data = self.row_codec.decode_batch(&self.schema, out.iter().map(|(r, _)| &r[..]))?;
        let diffs: Vec<i64> = out.iter().map(|(_, d)| *d).collect();
        self.current = next;
        // Slices that start before the next window's start are in no window to come.
        let keep_from = self.slice_of(end + self.slide - self.range);
        self.slices = self.slices.split_off(&keep_from);
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }

    /// Every element on one worker: one sample per window, whatever the worker count.
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        Ok(crate::route::Placement::Single)
    }

    /// The slices' kept elements (at most N a slice) and the current sample.
    fn state_bytes(&self) -> usize {
        let slices = b_tree(self.slices.len(), size_of::<(i128, BTreeSet<Element>)>());
        slices + self.slices.values().map(kept_bytes).sum::<usize>() + kept_bytes(&self.current)
    }

    /// The last tick of the next window that takes a slice in or lets one go.
    fn next_wakeup(&self) -> Option<Time> {
        let last = i128::from(self.last?);
        // The window current at `last` ends at `now`; slices from there on have not entered.
        let now = self.boundary_after(last + 1 - self.slide);
        let enter = self
            .slices
            .range(self.slice_of(now)..)
            .next()
            .map(|(j, _)| self.boundary_after(self.slice_start(*j)));
        let leave = self
            .slices
            .keys()
            .next()
            .map(|j| self.boundary_after(self.slice_start(*j) + self.range));
        // An element of the current sample whose slice was dropped (no window to come holds
        // it) leaves at the next boundary.
        let gone = self.current.iter().map(|e| self.slice_of(i128::from(e.1))).min().map(|j| {
            self.boundary_after(self.slice_start(j) + self.range).min(self.boundary_after(last + 1))
        });
        [enter, leave, gone]
            .into_iter()
            .flatten()
            .map(|b| b - 1)
            .filter(|w| *w > last)
            .min()
            .and_then(|w| Time::try_from(w).ok())
    }

    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        let sliced: Vec<&Element> = self.slices.values().flatten().collect();
        for (name, es) in [
            ("sample_slide.slices", sliced),
            ("sample_slide.current", self.current.iter().collect()),
        ] {
            w.put(
                name,
                &sig,
                es.len(),
                vec![
                    ("t", i64_col(es.iter().map(|e| e.1))),
                    ("occurrence", i64_col(es.iter().map(|e| e.3 as i64))),
                    ("row", binary_col(es.iter().map(|e| &e.2[..]))),
                ],
            )?;
        }
        let last: arrow::array::Int64Array = [self.last].into_iter().collect();
        w.put("sample_slide.at", &sig, 1, vec![("last", std::sync::Arc::new(last))])
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let mut read = |name: &str| -> Result<Vec<Element>> {
            let s = r.take(name, &sig)?;
            let (ts, occs, rows) = (s.i64s("t")?, s.i64s("occurrence")?, s.binary("row")?);
            if occs.len() != ts.len() || rows.len() != ts.len() {
                return Err(invalid(format!("section '{name}': columns of unequal lengths")));
            }
            Ok(ts
                .iter()
                .zip(&occs)
                .zip(&rows)
                .map(|((t, o), row)| {
                    (priority(self.seed, *t, row, *o as u64), *t, (*row).into(), *o as u64)
                })
                .collect())
        };
        let sliced = read("sample_slide.slices")?;
        let current = read("sample_slide.current")?;
        if current.len() as u64 > self.rows {
            return Err(invalid("section 'sample_slide.current': more elements than the sample"));
        }
        let at = r.take("sample_slide.at", &sig)?;
        let last = at.opt_i64s("last")?;
        let [last] = last[..] else {
            return Err(invalid("section 'sample_slide.at': not one row"));
        };
        self.slices.clear();
        for e in sliced {
            self.keep(e);
        }
        self.current = current.into_iter().collect();
        self.last = last;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::testing::{
        checkpoint_into, drive, fed, kv, kv_schema, render, run, state_bytes_at, Tick,
    };

    fn over(range: Time, slide: Time, offset: Time) -> SampleOver {
        SampleOver { range, slide, offset }
    }

    /// The sample of each window computed from scratch: the `n` elements of smallest
    /// priority among those stamped in [b − T, b), output as the differences between
    /// consecutive windows, at each boundary's last tick.
    fn oracle(input: &[Tick], n: usize, seed: u64, o: SampleOver, until: Time) -> Vec<String> {
        let codec = RowCodec::for_schema(&kv_schema()).unwrap();
        let mut all: Vec<(Element, String)> = Vec::new();
        for (t, batch) in input {
            let es = elements(seed, *t, batch, &codec).unwrap();
            // Each row's text, in input order ("@t +d k v" without "@t +d ").
            let texts: Vec<String> = (0..batch.len())
                .map(|i| {
                    let line = render(&batch.slice(i, 1)).remove(0);
                    line.splitn(3, ' ').nth(2).unwrap_or_default().to_string()
                })
                .collect();
            let mut i = 0;
            for (row, diff) in texts.iter().zip(&batch.diffs) {
                for _ in 0..*diff {
                    all.push((es[i].clone(), row.clone()));
                    i += 1;
                }
            }
        }
        let mut out = Vec::new();
        let mut prev: Vec<(Element, String)> = Vec::new();
        for tau in 0..=until {
            let end = tau + 1;
            if (end - o.offset).rem_euclid(o.slide) != 0 {
                continue;
            }
            let mut w: Vec<(Element, String)> =
                all.iter().filter(|(e, _)| e.1 >= end - o.range && e.1 < end).cloned().collect();
            w.sort();
            w.truncate(n);
            let mut lines: Vec<String> = Vec::new();
            for (e, row) in &prev {
                if !w.iter().any(|(x, _)| x == e) {
                    lines.push(format!("@{tau} -1 {row}"));
                }
            }
            for (e, row) in &w {
                if !prev.iter().any(|(x, _)| x == e) {
                    lines.push(format!("@{tau} +1 {row}"));
                }
            }
            lines.sort();
            out.extend(lines);
            prev = w;
        }
        out
    }

    fn input() -> Vec<Tick> {
        (0..23)
            .filter(|t| t % 5 != 3)
            .map(|t| {
                let rows: Vec<String> =
                    (0..(t % 4 + 1)).map(|i| format!("+1 k{} {}", (t + i) % 3, i % 2)).collect();
                kv(t, &rows.join(", "))
            })
            .collect()
    }

    /// Against the from-scratch sample of every window, for tumbling, hopping (with a slide
    /// that does not divide the range) and offset windows, several seeds and sample sizes.
    #[test]
    fn each_window_is_sampled_as_from_scratch() {
        for (o, n, seed) in [
            (over(4, 4, 0), 2, 0),
            (over(6, 2, 0), 3, 7),
            (over(6, 4, 0), 2, 1),
            (over(5, 3, 1), 4, 2),
            (over(3, 3, 2), 1, 9),
            (over(10, 5, 0), 100, 3),
        ] {
            let op = SlideSampleWindow::new(n as u64, seed, o, kv_schema()).unwrap();
            let got = run(&mut fed(op, [input()]));
            assert_eq!(got, oracle(&input(), n, seed, o, 40), "{o:?} N={n} seed={seed}");
        }
    }

    /// Each element of a window is equally likely to be in its sample: over 400 seeds, every
    /// element of one tumbling window of 24 elements (with copies) is in a sample of 6 about
    /// 100 times.
    #[test]
    fn every_element_of_a_window_is_equally_likely() {
        let input = vec![
            kv(0, "+1 a 1, +1 b 2, +2 c 3, +1 d 4"),
            kv(1, "+1 a 1, +1 e 5, +1 f 6, +1 g 7, +1 h 8"),
            kv(2, "+1 i 9, +1 j 10, +1 k 11, +1 l 12, +1 m 13, +1 n 14"),
            kv(3, "+1 o 15, +1 p 16, +1 q 17, +1 r 18, +1 s 19, +1 t 20, +1 u 21, +1 v 22"),
        ];
        let seeds = 400u64;
        let mut counts: HashMap<String, u64> = HashMap::new();
        for seed in 0..seeds {
            let op = SlideSampleWindow::new(6, seed, over(4, 4, 0), kv_schema()).unwrap();
            // The window [0, 4) at 3; the next, empty, takes the sample back at 7.
            let out: Vec<String> = run(&mut fed(op, [input.clone()]))
                .into_iter()
                .filter(|l| l.starts_with("@3 "))
                .collect();
            assert_eq!(out.len(), 6);
            for line in out {
                *counts.entry(line.trim_start_matches("@3 +1 ").to_string()).or_insert(0) += 1;
            }
        }
        let p = 6.0 / 24.0;
        for (row, copies) in
            [("a 1", 2.0), ("c 3", 2.0), ("b 2", 1.0), ("j 10", 1.0), ("v 22", 1.0)]
        {
            let expected = seeds as f64 * p * copies;
            let sd = (expected * (1.0 - p)).sqrt();
            let c = counts.get(row).copied().unwrap_or(0) as f64;
            assert!((c - expected).abs() <= 4.5 * sd, "{row}: {c} samples, {expected} expected");
        }
    }

    /// A checkpoint taken after any instant restores to the same output as running through.
    #[test]
    fn a_restored_window_goes_on_as_before() {
        let o = over(6, 4, 1);
        let whole = run(&mut fed(SlideSampleWindow::new(2, 5, o, kv_schema()).unwrap(), [input()]));
        let new = || SlideSampleWindow::new(2, 5, o, kv_schema()).unwrap();
        for cut in 0..30 {
            let mut feed = input().into_iter().peekable();
            let mut first = new();
            let mut got = drive(&mut first, &mut feed, Some(cut));
            let mut second = new();
            checkpoint_into(&first, &mut second);
            got.extend(drive(&mut second, &mut feed, None));
            assert_eq!(got, whole, "checkpoint before {cut}");
        }
    }

    /// The figure grows with the slices' elements and falls to nothing once the window has
    /// passed them and its sample is empty.
    #[test]
    fn state_bytes_follow_the_slices_and_the_sample() {
        let mut op = SlideSampleWindow::new(2, 3, over(4, 4, 0), kv_schema()).unwrap();
        assert_eq!(op.state_bytes(), 0);
        let input = vec![kv(0, "+1 a 0"), kv(1, "+1 b 1, +1 c 1, +1 d 1")];
        // At 3 the window [0, 4) takes its sample and lets its slice go; at 7 the empty
        // window [4, 8) takes the sample back.
        let [one, two, end] = state_bytes_at(&mut op, input, [Some(1), Some(2), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert!(op.slices.is_empty() && op.current.is_empty());
        assert_eq!(end, 0);
    }
}
