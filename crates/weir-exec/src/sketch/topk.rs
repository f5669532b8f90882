//! Heavy hitters (`APPROX_TOP_K`): the mergeable Misra-Gries summary ("Finding repeated
//! elements", Misra and Gries 1982; merged as in Agarwal, Cormode, Huang, Phillips, Wei, Yi,
//! "Mergeable summaries", 2012), the counter-based dual of SpaceSaving.
//!
//! A summary of capacity m keeps a count per value for at most m values after each
//! [`TopK::settle`] (up to 2m between two: pruning is lazy, so that its cost is amortised over
//! the values that made it necessary). Each count is a *lower bound* of the value's true
//! count, at most [`TopK::error`] below it, and `error` is at most n/(m+1) for n values
//! counted: a prune subtracts the (m+1)-th largest count d from every count and drops the counts
//! that reach 0, which takes at least (m+1)·d out of a total of at most n. A value counted more
//! than n/(m+1) times is therefore always kept. While no prune has happened (at most 2m
//! distinct values were seen) the counts are exact.
//!
//! Deterministic: counts add, and a prune depends on the multiset of counts only (every count
//! tied with the (m+1)-th largest goes, never a chosen one of them), so a summary is a function
//! of the sequence of the multisets of values it was given between settles: not of their order,
//! batching or worker. [`TopK::merge`] adds counts and errors: the merge of summaries of
//! disjoint bags is a summary of their union, with the error bound of the sum. Not invertible.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use datafusion_common::HashMap;
use smallvec::SmallVec;

use weir_common::{Result, WeirError};

use super::Reader;
use crate::heap::HeapSize;

/// A value's row encoding, inline up to 16 bytes.
type Value = SmallVec<[u8; 16]>;

/// The order of a top list: the larger count first, then the smaller value (SQL's order).
fn ranked(a: (&[u8], i64), b: (&[u8], i64)) -> std::cmp::Ordering {
    b.1.cmp(&a.1).then(a.0.cmp(b.0))
}

/// A Misra-Gries summary over values given as their row encodings.
#[derive(Debug, Clone)]
pub struct TopK {
    capacity: usize,
    /// Value -> its count less the decrements it took (always > 0), while the summary takes
    /// values. Values of up to 16 bytes (a number's encoding, a short text) sit in the map's
    /// own slots: no allocation each.
    counts: HashMap<Value, i64>,
    /// The same counts, once [`TopK::seal`]ed (and `counts` empty): sorted by value, in a
    /// vector of their exact number, about half a map's memory, and ready for
    /// [`TopK::top_of_sum`]'s merge by value.
    sealed: Vec<(Value, i64)>,
    /// The sum of the decrements: how far below its true count any count (or any value's
    /// absent count, 0) can be.
    error: i64,
    /// Values counted.
    n: i64,
}

/// Two summaries are equal when their counts are, however they are held.
impl PartialEq for TopK {
    fn eq(&self, other: &TopK) -> bool {
        (self.capacity, self.error, self.n) == (other.capacity, other.error, other.n)
            && self.sorted() == other.sorted()
    }
}

impl Eq for TopK {}

/// The counts, in the map or sealed, with the values that do not fit inline.
impl HeapSize for TopK {
    fn heap_bytes(&self) -> usize {
        self.counts.heap_bytes() + self.sealed.heap_bytes()
    }
}

impl TopK {
    /// An empty summary of `capacity` counters (at least 1).
    pub fn new(capacity: u32) -> Self {
        TopK {
            capacity: capacity.max(1) as usize,
            counts: HashMap::new(),
            sealed: Vec::new(),
            error: 0,
            n: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Every (value, count), in no particular order.
    fn entries(&self) -> impl Iterator<Item = (&Value, i64)> {
        self.counts.iter().map(|(v, c)| (v, *c)).chain(self.sealed.iter().map(|(v, c)| (v, *c)))
    }

    fn distinct(&self) -> usize {
        self.counts.len() + self.sealed.len()
    }

    /// Every (value, count), by value.
    fn sorted(&self) -> Vec<(&Value, i64)> {
        let mut all: Vec<(&Value, i64)> = self.entries().collect();
        if !self.counts.is_empty() {
            all.sort_unstable();
        }
        all
    }

    /// The count kept for `value` (0 if none).
    pub fn count(&self, value: &[u8]) -> i64 {
        match self.counts.get(value) {
            Some(c) => *c,
            None => match self.sealed.binary_search_by(|(v, _)| v.as_slice().cmp(value)) {
                Ok(i) => self.sealed[i].1,
                Err(_) => 0,
            },
        }
    }

    /// The counts in the map again, if they were sealed.
    fn unseal(&mut self) {
        if !self.sealed.is_empty() {
            self.counts = std::mem::take(&mut self.sealed).into_iter().collect();
        }
    }

    /// Holds the counts sorted by value in a vector of their exact size (the summary is done
    /// taking values: its slice is complete). The counts are unchanged; a later insert unseals.
    pub fn seal(&mut self) {
        if self.counts.is_empty() {
            return;
        }
        let mut all: Vec<(Value, i64)> = std::mem::take(&mut self.counts).into_iter().collect();
        all.sort_unstable();
        self.sealed = all;
    }

    /// Counts `value` `weight` times (weight > 0).
    pub fn insert(&mut self, value: &[u8], weight: i64) {
        self.unseal();
        self.n += weight;
        match self.counts.get_mut(value) {
            Some(c) => *c += weight,
            None => {
                self.counts.insert(Value::from_slice(value), weight);
            }
        }
    }

    /// Ends a batch of insertions (an instant): prunes to at most `capacity` counts if more
    /// than twice that many are held.
    pub fn settle(&mut self) {
        if self.distinct() > 2 * self.capacity {
            self.prune();
        }
    }

    /// Subtracts the (m+1)-th largest count from every count and drops those left at 0 or
    /// below: at most m counts remain.
    fn prune(&mut self) {
        let m = self.capacity;
        if self.distinct() <= m {
            return;
        }
        self.unseal();
        let mut cs: Vec<i64> = self.counts.values().copied().collect();
        let (_, d, _) = cs.select_nth_unstable_by(m, |a, b| b.cmp(a));
        let d = *d;
        self.counts.retain(|_, c| {
            *c -= d;
            *c > 0
        });
        self.error += d;
    }

    /// Adds `other`'s counts: a summary of both bags (not pruned; [`TopK::settle`] prunes).
    pub fn merge(&mut self, other: &TopK) {
        self.unseal();
        self.n += other.n;
        self.error += other.error;
        for (v, c) in other.entries() {
            match self.counts.get_mut(v) {
                Some(mine) => *mine += c,
                None => {
                    self.counts.insert(v.clone(), c);
                }
            }
        }
    }

    /// The sum of `parts` (addition commutes: their order does not matter), not pruned.
    pub fn merge_all(capacity: u32, parts: &[&TopK]) -> TopK {
        // Start from a copy of the largest part and add the others into it.
        let Some((big, _)) = parts.iter().enumerate().max_by_key(|(i, p)| (p.distinct(), *i))
        else {
            return TopK::new(capacity);
        };
        let mut out = parts[big].clone();
        for (i, p) in parts.iter().enumerate() {
            if i != big {
                out.merge(p);
            }
        }
        out
    }

    /// `TopK::merge_all(parts).top(k)`, without building the merged summary when every part
    /// is sealed: their sorted counts are merged by value, each value's sum offered to a heap
    /// of the k best so far. The same list, in the same order.
    pub fn top_of_sum(capacity: u32, parts: &[&TopK], k: usize) -> Vec<(Vec<u8>, i64)> {
        if parts.iter().any(|p| !p.counts.is_empty()) || k == 0 {
            return TopK::merge_all(capacity, parts).top(k);
        }
        // Cursors into the parts, smallest value first.
        let mut heads: BinaryHeap<Reverse<(&[u8], usize)>> = BinaryHeap::new();
        let mut pos = vec![0usize; parts.len()];
        for (i, p) in parts.iter().enumerate() {
            if let Some((v, _)) = p.sealed.first() {
                heads.push(Reverse((v, i)));
            }
        }
        // The best k so far, the worst on top: fewer counts, then the larger value, is worse.
        type Ranked<'a> = Reverse<(i64, Reverse<&'a [u8]>)>;
        let mut best: BinaryHeap<Ranked<'_>> = BinaryHeap::new();
        while let Some(Reverse((v, _))) = heads.peek().copied() {
            let mut sum = 0;
            while let Some(Reverse((w, i))) = heads.peek().copied() {
                if w != v {
                    break;
                }
                heads.pop();
                sum += parts[i].sealed[pos[i]].1;
                pos[i] += 1;
                if let Some((next, _)) = parts[i].sealed.get(pos[i]) {
                    heads.push(Reverse((next, i)));
                }
            }
            let entry = Reverse((sum, Reverse(v)));
            if best.len() < k {
                best.push(entry);
            } else if best.peek().is_some_and(|worst| entry < *worst) {
                best.pop();
                best.push(entry);
            }
        }
        let mut top: Vec<(Vec<u8>, i64)> =
            best.into_iter().map(|Reverse((c, Reverse(v)))| (v.to_vec(), c)).collect();
        top.sort_unstable_by(|a, b| ranked((&a.0, a.1), (&b.0, b.1)));
        top
    }

    /// The k values with the largest counts, most frequent first, ties by encoding (the
    /// values' SQL order): (value, count).
    pub fn top(&self, k: usize) -> Vec<(Vec<u8>, i64)> {
        let mut all: Vec<(&Value, i64)> = self.entries().collect();
        let order = |a: &(&Value, i64), b: &(&Value, i64)| ranked((a.0, a.1), (b.0, b.1));
        if all.len() > k {
            all.select_nth_unstable_by(k, order);
            all.truncate(k);
        }
        all.sort_unstable_by(order);
        all.into_iter().map(|(v, c)| (v.to_vec(), c)).collect()
    }

    /// How far below its true count any count can be (at most n/(capacity+1)).
    pub fn error(&self) -> i64 {
        self.error
    }

    /// The number of values counted.
    pub fn len(&self) -> i64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The summary as bytes, for checkpoints: n and error (8 bytes each, little-endian), then
    /// per value, in encoding order, its length (4 bytes), its bytes and its count.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.distinct() * 24);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&self.error.to_le_bytes());
        for (v, c) in self.sorted() {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    /// Reads [`TopK::to_bytes`] back; errors (never panics) on bytes that are not a summary.
    pub fn from_bytes(capacity: u32, bytes: &[u8]) -> Result<TopK> {
        let bad = || WeirError::exec("checkpoint: an APPROX_TOP_K summary is malformed");
        let mut r = Reader(bytes);
        let mut t = TopK::new(capacity);
        t.n = r.i64().ok_or_else(bad)?;
        t.error = r.i64().ok_or_else(bad)?;
        while !r.0.is_empty() {
            let len = r.u32().ok_or_else(bad)? as usize;
            let v = Value::from_slice(r.take(len).ok_or_else(bad)?);
            let c = r.i64().ok_or_else(bad)?;
            if c <= 0 || t.counts.insert(v, c).is_some() {
                return Err(bad());
            }
        }
        if t.n < 0 || t.error < 0 {
            return Err(bad());
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::mix;

    /// A value drawn from a Zipf-like law over `distinct` values (rank r with probability about
    /// proportional to 1/r): the rank of a uniform point on a log scale.
    fn zipf(seed: u64, distinct: u64) -> u64 {
        let u = (mix(seed) >> 11) as f64 / (1u64 << 53) as f64;
        ((distinct as f64).powf(u) as u64).min(distinct - 1)
    }

    /// A summary of `values`, settled every `per_instant` values; and the exact counts.
    fn run(capacity: u32, values: &[u64], per_instant: usize) -> (TopK, HashMap<Vec<u8>, i64>) {
        let mut t = TopK::new(capacity);
        let mut exact = HashMap::new();
        for chunk in values.chunks(per_instant) {
            for v in chunk {
                t.insert(&v.to_be_bytes(), 1);
                *exact.entry(v.to_be_bytes().to_vec()).or_insert(0) += 1;
            }
            t.settle();
        }
        (t, exact)
    }

    /// The stated guarantees, which hold always (not just mostly): each count is at most
    /// `error` below the true count and never above it, `error` is at most n/(m+1), at most m
    /// counts are kept after a prune, and each of the top k has a true count at least the true
    /// k-th largest count less `error`.
    fn check(t: &TopK, exact: &HashMap<Vec<u8>, i64>, k: usize, what: &str) {
        let n: i64 = exact.values().sum();
        assert_eq!(t.len(), n);
        assert!(t.error() * (t.capacity() as i64 + 1) <= n, "{what}: error {} of n {n}", t.error());
        for (v, f) in exact {
            let c = t.count(v);
            assert!(c <= *f && *f <= c + t.error(), "{what}: {v:?} true {f} counted {c}");
        }
        let mut truth: Vec<i64> = exact.values().copied().collect();
        truth.sort_unstable_by(|a, b| b.cmp(a));
        let kth = truth.get(k - 1).copied().unwrap_or(0);
        for (v, _) in t.top(k) {
            assert!(exact[&v] >= kth - t.error(), "{what}: {v:?} is not among the top {k}");
        }
    }

    #[test]
    fn small_inputs_are_counted_exactly() {
        let (t, _) = run(4, &[3, 1, 3, 2, 3, 1, 5, 6], 3);
        assert_eq!(t.error(), 0);
        let top: Vec<(u64, i64)> = t
            .top(3)
            .into_iter()
            .map(|(v, c)| (u64::from_be_bytes(v.try_into().expect("8 bytes")), c))
            .collect();
        // 3 three times, 1 twice, then 2, 5 and 6 once each: the smallest value wins the tie.
        assert_eq!(top, vec![(3, 3), (1, 2), (2, 1)]);
        assert!(TopK::new(10).top(3).is_empty());
    }

    /// Over many seeds, capacities and instant sizes, uniform and skewed inputs.
    #[test]
    fn counts_lie_within_the_stated_error() {
        let runs: u64 =
            std::env::var("WEIR_SKETCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
        for seed in 0..runs {
            let distinct = [50, 2_000, 100_000][seed as usize % 3];
            let skewed = seed % 2 == 0;
            let values: Vec<u64> = (0..20_000u64)
                .map(|i| {
                    let s = i.wrapping_add(seed << 32);
                    if skewed {
                        zipf(s, distinct)
                    } else {
                        mix(s) % distinct
                    }
                })
                .collect();
            let capacity = [8, 100, 1_000][(seed / 3) as usize % 3];
            let per_instant = [1, 37, 5_000][(seed / 9) as usize % 3];
            let (t, exact) = run(capacity, &values, per_instant);
            check(&t, &exact, 10, &format!("seed {seed}"));
            if exact.len() <= 2 * capacity as usize {
                assert_eq!(t.error(), 0, "seed {seed}: no prune, exact");
            }
        }
    }

    /// Per-slice summaries merged: within the error of the merge, the sum of theirs.
    #[test]
    fn merged_slices_keep_the_bound() {
        for seed in 0..20u64 {
            let values: Vec<u64> = (0..30_000u64).map(|i| zipf(i ^ (seed << 40), 5_000)).collect();
            let slices: Vec<(TopK, HashMap<Vec<u8>, i64>)> =
                values.chunks(3_000).map(|c| run(50, c, 100)).collect();
            let parts: Vec<&TopK> = slices.iter().map(|s| &s.0).collect();
            let merged = TopK::merge_all(50, &parts);
            let mut exact = HashMap::new();
            for (_, e) in &slices {
                for (v, c) in e {
                    *exact.entry(v.clone()).or_insert(0) += c;
                }
            }
            assert_eq!(merged.error(), slices.iter().map(|s| s.0.error()).sum::<i64>());
            check(&merged, &exact, 5, &format!("seed {seed}"));
            // The order of the parts does not matter.
            let rev: Vec<&TopK> = parts.iter().rev().copied().collect();
            assert_eq!(TopK::merge_all(50, &rev), merged);
        }
    }

    /// The same multisets between settles, in any order, give the same summary.
    #[test]
    fn order_within_an_instant_does_not_matter() {
        let values: Vec<u64> = (0..10_000u64).map(|i| zipf(i, 3_000)).collect();
        let (a, _) = run(20, &values, 500);
        let mut shuffled = Vec::new();
        for chunk in values.chunks(500) {
            let mut c = chunk.to_vec();
            c.sort_by_key(|v| mix(*v ^ 77));
            shuffled.extend(c);
        }
        let (b, _) = run(20, &shuffled, 500);
        assert_eq!(a, b);
        assert!(a.error() > 0, "the test must prune");
    }

    /// Sealed summaries hold the same counts (equal, the same bytes, the same top), take
    /// values again (unsealed), and their top of a sum is the merged summary's top, ties
    /// included, whatever the parts.
    #[test]
    fn sealed_summaries_answer_as_open_ones() {
        for seed in 0..20u64 {
            let parts: Vec<TopK> = (0..1 + seed % 7)
                .map(|p| {
                    run(
                        5 + (seed % 4) as u32,
                        &(0..200 + 37 * p)
                            .map(|i| zipf(seed * 100 + p * 7 + i, 60))
                            .collect::<Vec<_>>(),
                        13,
                    )
                    .0
                })
                .collect();
            let mut sealed = parts.clone();
            for s in &mut sealed {
                s.seal();
            }
            for (o, s) in parts.iter().zip(&sealed) {
                assert_eq!(o, s);
                assert_eq!(o.to_bytes(), s.to_bytes());
                assert_eq!(o.top(4), s.top(4));
            }
            let open: Vec<&TopK> = parts.iter().collect();
            let closed: Vec<&TopK> = sealed.iter().collect();
            for k in [0, 1, 3, 10, 1000] {
                let want = TopK::merge_all(5, &open).top(k);
                assert_eq!(TopK::top_of_sum(5, &closed, k), want, "seed {seed} k {k}");
                assert_eq!(TopK::top_of_sum(5, &open, k), want, "seed {seed} k {k}");
            }
            let mut again = sealed[0].clone();
            let mut open_again = parts[0].clone();
            for v in [1u64, 2, 99] {
                again.insert(&v.to_le_bytes(), 2);
                open_again.insert(&v.to_le_bytes(), 2);
            }
            again.settle();
            open_again.settle();
            assert_eq!(again, open_again);
        }
    }

    #[test]
    fn bytes_round_trip_and_bad_bytes_are_refused() {
        for n in [0usize, 5, 3_000] {
            let values: Vec<u64> = (0..n as u64).map(|i| zipf(i, 700)).collect();
            let (t, _) = run(30, &values, 64);
            assert_eq!(TopK::from_bytes(30, &t.to_bytes()).expect("round trip"), t);
        }
        assert!(TopK::from_bytes(3, &[]).is_err());
        assert!(TopK::from_bytes(3, &[0; 15]).is_err());
        let (t, _) = run(3, &[1, 2, 2], 3);
        let mut b = t.to_bytes();
        b.pop();
        assert!(TopK::from_bytes(3, &b).is_err());
        let mut b = t.to_bytes();
        let last = b.len() - 8;
        b[last..].copy_from_slice(&0i64.to_le_bytes());
        assert!(TopK::from_bytes(3, &b).is_err(), "a count of 0");
    }

    #[test]
    fn heap_bytes_grow_with_the_values_counted() {
        let mut t = TopK::new(4);
        assert_eq!(t.heap_bytes(), 0);
        t.insert(&1u64.to_le_bytes(), 1);
        let one = t.heap_bytes();
        assert!(one > 0);
        // A value longer than 16 bytes is not inline: its bytes count too.
        for v in 2..8u64 {
            t.insert(&[v as u8; 40], 1);
        }
        assert!(t.heap_bytes() >= one + 6 * 40, "{}", t.heap_bytes());
        // Sealed: a vector of the counts' exact number.
        t.seal();
        assert!(t.heap_bytes() >= 7 * std::mem::size_of::<(Value, i64)>() + 6 * 40);
    }
}
