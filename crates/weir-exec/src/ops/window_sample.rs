//! A uniform sample of a stream: `s [SAMPLE N ROWS [SEED s]]`.
//!
//! Each element gets a priority: a 64-bit hash, seeded by s, of its timestamp, its row and its
//! occurrence (0 for the first of several identical rows at one instant, 1 for the next, ...,
//! so that duplicates are distinct elements). R(τ) holds the N elements stamped ≤ τ with the
//! smallest priorities (ties, which need a 64-bit collision, by timestamp, row, occurrence):
//! bottom-k sampling, a uniform sample of N elements without replacement, the same one for the
//! same input and seed whatever the batching, the arrival order within an instant, or the
//! number of workers. A different seed gives an independent sample.
//!
//! Delta semantics: at each instant, each element of the instant that is among the N smallest
//! priorities at its end gives +e, and each earlier element it displaced gives −e (an element
//! that enters and is displaced at the same instant gives nothing). No wake-ups. The input only inserts (a stream); a retraction is an
//! internal error. All elements meet on one worker. State: the N kept elements, checkpointed as
//! the section `sample_window` (`t` Int64, `occurrence` Int64, `row` Binary), by priority.

use std::collections::{BTreeSet, HashMap};

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};

use crate::heap::{b_tree, HeapSize};
use crate::operator::{take_inputs, Operator, Step};
use crate::row::{RowBytes, RowCodec};
use crate::sketch::value_hash;
use crate::state::{binary_col, i64_col, invalid, signature, StateReader, StateWriter};

/// One element: its priority, timestamp, row and occurrence.
pub(crate) type Element = (u64, Time, RowBytes, u64);

#[derive(Debug)]
pub struct SampleWindow {
    rows: u64,
    seed: u64,
    schema: SchemaRef,
    row_codec: RowCodec,
    kept: BTreeSet<Element>,
}

/// The priority of the `occurrence`-th element `row` stamped `t`, under `seed`.
pub fn priority(seed: u64, t: Time, row: &[u8], occurrence: u64) -> u64 {
    let mut b = Vec::with_capacity(24 + row.len());
    b.extend_from_slice(&seed.to_le_bytes());
    b.extend_from_slice(&t.to_le_bytes());
    b.extend_from_slice(&occurrence.to_le_bytes());
    b.extend_from_slice(row);
    value_hash(&b)
}

/// The bytes of a set of kept elements: its B-tree and each element's row.
pub(crate) fn kept_bytes(kept: &BTreeSet<Element>) -> usize {
    b_tree(kept.len(), size_of::<Element>()) + kept.iter().map(|e| e.2.heap_bytes()).sum::<usize>()
}

/// Offers `e` to `kept`, the `n` smallest elements so far: whether `e` is among them now, and
/// the element it displaced, if any (the largest, when `kept` was full).
pub(crate) fn keep_smallest(
    kept: &mut BTreeSet<Element>,
    e: Element,
    n: u64,
) -> (bool, Option<Element>) {
    if (kept.len() as u64) < n {
        kept.insert(e);
        (true, None)
    } else if kept.last().is_some_and(|last| e < *last) {
        kept.insert(e);
        (true, kept.pop_last())
    } else {
        (false, None)
    }
}

/// The elements of `d`, the changes of instant `t` (insertions only), each with its priority
/// under `seed` and its occurrence among the identical rows of the instant, in input order.
pub(crate) fn elements(
    seed: u64,
    t: Time,
    d: &ChangeBatch,
    codec: &RowCodec,
) -> Result<Vec<Element>> {
    let rows = codec.encode(d.data.columns(), d.len())?;
    // Occurrences per distinct row of the instant.
    let mut seen: HashMap<&[u8], u64> = HashMap::new();
    let mut out = Vec::with_capacity(d.len());
    for i in 0..d.len() {
        let diff = d.diffs[i];
        if diff < 0 {
            return Err(WeirError::internal("a SAMPLE window was given a retraction"));
        }
        let row = rows.get(i);
        let n = seen.entry(row).or_insert(0);
        for _ in 0..diff {
            out.push((priority(seed, t, row, *n), t, row.into(), *n));
            *n += 1;
        }
    }
    Ok(out)
}

impl SampleWindow {
    pub fn new(rows: u64, seed: u64, schema: SchemaRef) -> Result<Self> {
        let row_codec = RowCodec::for_schema(&schema)?;
        Ok(SampleWindow { rows, seed, schema, row_codec, kept: BTreeSet::new() })
    }

    fn signature(&self) -> String {
        signature("sample_window", &self.schema, (self.rows, self.seed))
    }
}

impl Operator for SampleWindow {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let t = step.instant()?;
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut out: Vec<(RowBytes, i64)> = Vec::new();
        // Elements of this instant taken in (they give +e at the end if still kept).
        let mut fresh: Vec<Element> = Vec::new();
        for e in elements(self.seed, t, &d, &self.row_codec)? {
            let (entered, gone) = keep_smallest(&mut self.kept, e.clone(), self.rows);
            if entered {
                fresh.push(e);
            }
            // One of this instant's own elements leaves without a trace.
            if let Some(gone) = gone.filter(|g| g.1 != t) {
                out.push((gone.2, -1));
            }
        }
        for e in fresh {
            if self.kept.contains(&e) {
                out.push((e.2, 1));
            }
        }
        let data = self.row_codec.decode_batch(&self.schema, out.iter().map(|(r, _)| &r[..]))?;
        let diffs: Vec<i64> = out.iter().map(|(_, d)| *d).collect();
        Ok(ChangeBatch::new(data, vec![t; diffs.len()], diffs))
    }

    /// Every element on one worker: one sample, whatever the worker count.
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        Ok(crate::route::Placement::Single)
    }

    /// The kept elements (at most N).
    fn state_bytes(&self) -> usize {
        kept_bytes(&self.kept)
    }

    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let k = &self.kept;
        w.put(
            "sample_window",
            &self.signature(),
            k.len(),
            vec![
                ("t", i64_col(k.iter().map(|e| e.1))),
                ("occurrence", i64_col(k.iter().map(|e| e.3 as i64))),
                ("row", binary_col(k.iter().map(|e| &e.2[..]))),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("sample_window", &self.signature())?;
        let (ts, occs, rows) = (s.i64s("t")?, s.i64s("occurrence")?, s.binary("row")?);
        if ts.len() as u64 > self.rows || occs.len() != ts.len() || rows.len() != ts.len() {
            return Err(invalid("section 'sample_window': more elements than the sample holds"));
        }
        self.kept = ts
            .iter()
            .zip(&occs)
            .zip(&rows)
            .map(|((t, o), row)| {
                (priority(self.seed, *t, row, *o as u64), *t, (*row).into(), *o as u64)
            })
            .collect();
        Ok(())
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{drive, fed, kv, kv_schema, run};

    /// A sample at least as large as the stream holds all of it.
    #[test]
    fn a_large_sample_is_the_whole_stream() {
        let input = vec![kv(1, "+1 a 1, +2 b 1"), kv(2, "+1 a 1")];
        let mut w = fed(SampleWindow::new(10, 0, kv_schema()).unwrap(), [input]);
        assert_eq!(run(&mut w), ["@1 +1 a 1", "@1 +1 b 1", "@1 +1 b 1", "@2 +1 a 1"]);
    }

    /// Uniform: over 300 seeds, each of 100 elements (over 5 instants, with copies) is in a
    /// sample of 10 about 30 times; each count lies within 4.5 standard deviations of that, and
    /// the chi-square statistic of the counts is well below its 1-in-100 000 level.
    #[test]
    fn every_element_is_equally_likely() {
        let text: Vec<Vec<String>> = (0..5)
            .map(|t| (0..20).map(|i| format!("+1 k{} {}", (i + t) % 6, i % 4 + 10 * t)).collect())
            .collect();
        let input: Vec<_> =
            text.iter().enumerate().map(|(t, rows)| kv(t as Time, &rows.join(", "))).collect();
        // Elements named by (instant, row, occurrence): the sample's rows at its end. A row's
        // value tells its instant, so a row that leaves names its element (or a copy of it).
        let mut counts: HashMap<(Time, String, u64), u64> = HashMap::new();
        let seeds = 300u64;
        for seed in 0..seeds {
            let mut w = fed(SampleWindow::new(10, seed, kv_schema()).unwrap(), [input.clone()]);
            let mut kept: Vec<(Time, String)> = Vec::new();
            for line in run(&mut w) {
                let (t, rest) = line.trim_start_matches('@').split_once(' ').unwrap();
                let (diff, row) = rest.split_once(' ').unwrap();
                let key = (t.parse::<Time>().unwrap(), row.to_string());
                if diff == "+1" {
                    kept.push(key);
                } else {
                    // The element leaves: one of its copies from before.
                    let at = kept.iter().position(|k| k.1 == key.1 && k.0 < key.0).unwrap();
                    kept.remove(at);
                }
            }
            assert_eq!(kept.len(), 10);
            kept.sort();
            let mut occ: HashMap<(Time, String), u64> = HashMap::new();
            for (t, row) in kept {
                let n = occ.entry((t, row.clone())).or_insert(0);
                *counts.entry((t, row, *n)).or_insert(0) += 1;
                *n += 1;
            }
        }
        // Copies share their rows' text: their counts add, so compare per (instant, row).
        let mut per_row: HashMap<(Time, String), (u64, u64)> = HashMap::new();
        for (t, rows) in text.iter().enumerate() {
            for r in rows {
                let row = r.trim_start_matches("+1 ").to_string();
                per_row.entry((t as Time, row)).or_insert((0, 0)).1 += 1;
            }
        }
        for ((t, row, _), c) in &counts {
            per_row.get_mut(&(*t, row.clone())).unwrap().0 += c;
        }
        let p = 10.0 / 100.0;
        let mut chi2 = 0.0;
        for ((t, row), (c, copies)) in &per_row {
            let expected = seeds as f64 * p * *copies as f64;
            let sd = (expected * (1.0 - p)).sqrt();
            assert!(
                (*c as f64 - expected).abs() <= 4.5 * sd,
                "@{t} {row}: {c} samples, {expected} expected"
            );
            chi2 += (*c as f64 - expected).powi(2) / expected;
        }
        // Degrees of freedom: the distinct rows less one.
        let df = per_row.len() as f64 - 1.0;
        assert!(chi2 < df + 6.0 * (2.0 * df).sqrt(), "chi-square {chi2} over {df} degrees");
    }

    /// Of the stream's elements, the sample holds the ones of smallest priority, computed here.
    #[test]
    fn the_sample_is_the_bottom_k_of_the_priorities() {
        let codec = RowCodec::for_schema(&kv_schema()).unwrap();
        let text: Vec<String> = (0..50).map(|i| format!("+1 k{} {}", i % 7, i % 5)).collect();
        let input = vec![kv(3, &text.join(", "))];
        for seed in [0u64, 1, 99] {
            let mut w = fed(SampleWindow::new(4, seed, kv_schema()).unwrap(), [input.clone()]);
            let out = run(&mut w);
            // The expected bottom 4, by the priorities of the 50 elements (duplicates counted).
            let mut occ: HashMap<(u64, u64), u64> = HashMap::new();
            let mut prios: Vec<(u64, String)> = (0..50u64)
                .map(|i| {
                    let (k, v) = (i % 7, i % 5);
                    let kv_batch = kv(0, &format!("+1 k{k} {v}")).1;
                    let row = codec.encode(kv_batch.data.columns(), 1).unwrap();
                    let n = occ.entry((k, v)).or_insert(0);
                    let p = priority(seed, 3, row.get(0), *n);
                    *n += 1;
                    (p, format!("@3 +1 k{k} {v}"))
                })
                .collect();
            prios.sort();
            let mut want: Vec<String> = prios.into_iter().take(4).map(|(_, s)| s).collect();
            want.sort();
            assert_eq!(out, want, "seed {seed}");
        }
    }

    /// The figure grows with the sample until it holds N elements, then stays there: a
    /// displaced element takes its bytes with it.
    #[test]
    fn state_bytes_grow_to_the_sample_and_stay_there() {
        let mut op = SampleWindow::new(4, 7, kv_schema()).unwrap();
        assert_eq!(op.state_bytes(), 0);
        let ticks: Vec<_> = (0..40).map(|t| kv(t, &format!("+1 k{t} {t}, +1 j{t} {t}"))).collect();
        let mut feed = ticks.into_iter().peekable();
        drive(&mut op, &mut feed, Some(1));
        let two = op.state_bytes();
        assert!(two > 0);
        drive(&mut op, &mut feed, Some(2));
        let full = op.state_bytes();
        assert_eq!(op.kept.len(), 4);
        assert!(full > two, "{full} after {two}");
        drive(&mut op, &mut feed, None);
        assert_eq!(op.kept.len(), 4);
        // Every row encodes to as many bytes here: the same figure.
        assert_eq!(op.state_bytes(), full);
    }
}
