//! Counting a stream's elements not yet released to every query that reads it.
//!
//! For `SHOW STREAM STATS`: an element is buffered until the frontier of every query reading
//! its stream has passed its timestamp. Elements arrive in batches, mostly in time order, so
//! each arrival keeps its times sorted in one vector; a release drops the arrivals wholly
//! below the frontier and trims the others now and then. Costs one sort and one vector per
//! arrival, not a map insertion per element.

use std::collections::VecDeque;

use weir_common::Time;

#[derive(Debug, Default, Clone)]
pub(crate) struct Buffered {
    /// Sorted times of each arrival still holding buffered elements.
    arrivals: VecDeque<Vec<Time>>,
    /// Elements with a time below this are released.
    below: Option<Time>,
}

impl Buffered {
    /// Counts an arrival's accepted elements.
    pub fn add(&mut self, times: &[Time]) {
        if times.is_empty() {
            return;
        }
        let mut sorted = times.to_vec();
        if !sorted.is_sorted() {
            sorted.sort_unstable();
        }
        self.arrivals.push_back(sorted);
    }

    /// Every element below `frontier` has been released.
    pub fn release(&mut self, frontier: Time) {
        self.below = Some(self.below.map_or(frontier, |b| b.max(frontier)));
        let below = frontier;
        self.arrivals.retain_mut(|a| {
            let released = a.partition_point(|&t| t < below);
            if released == a.len() {
                return false;
            }
            if released > a.len() / 2 {
                a.drain(..released);
            }
            true
        });
    }

    /// Nothing reads the stream: nothing is held back.
    pub fn clear(&mut self) {
        self.arrivals.clear();
    }

    /// How many elements are buffered.
    pub fn count(&self) -> u64 {
        let below = self.below.unwrap_or(Time::MIN);
        self.arrivals.iter().map(|a| (a.len() - a.partition_point(|&t| t < below)) as u64).sum()
    }

    /// (time, count) pairs, for checkpoints.
    pub fn entries(&self) -> Vec<(Time, u64)> {
        let below = self.below.unwrap_or(Time::MIN);
        let mut all: Vec<Time> =
            self.arrivals.iter().flatten().copied().filter(|&t| t >= below).collect();
        all.sort_unstable();
        let mut out: Vec<(Time, u64)> = Vec::new();
        for t in all {
            match out.last_mut() {
                Some((u, n)) if *u == t => *n += 1,
                _ => out.push((t, 1)),
            }
        }
        out
    }

    /// Rebuilds from [`Self::entries`].
    pub fn from_entries(entries: &[(Time, u64)]) -> Self {
        let mut times = Vec::new();
        for &(t, n) in entries {
            times.extend(std::iter::repeat_n(t, n as usize));
        }
        let mut b = Buffered::default();
        b.add(&times);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_not_yet_released() {
        let mut b = Buffered::default();
        b.add(&[5, 3, 9]);
        b.add(&[4, 12]);
        assert_eq!(b.count(), 5);
        b.release(5);
        assert_eq!(b.count(), 3);
        assert_eq!(b.entries(), [(5, 1), (9, 1), (12, 1)]);
        b.release(10);
        assert_eq!(b.count(), 1);
        let c = Buffered::from_entries(&b.entries());
        assert_eq!(c.count(), 1);
        b.clear();
        assert_eq!(b.count(), 0);
    }
}
