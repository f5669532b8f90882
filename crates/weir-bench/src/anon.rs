//! The process's anonymous memory: its resident pages less those mapped from files
//! (`/proc/self/statm`: resident − shared). That is the heap, what the allocator keeps for
//! reuse, and the stacks, without the binary's mapped code, which a run touches about 40 MB of
//! and which the peak RSS counts. Linux keeps no high-water mark of it, so [`AnonPeak`] samples
//! it every millisecond on a thread of its own (a read of one small file: the run's thread does
//! not wait for it) and keeps the largest value; a peak shorter than that can be missed, which
//! a run whose state grows and then holds steady does not have.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes a page (x86-64 and aarch64 Linux).
const PAGE: u64 = 4096;

/// The process's anonymous resident memory now, in bytes (0 if unknown).
pub fn anon_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut fields = statm.split_whitespace().skip(1).map(|f| f.parse::<u64>().unwrap_or(0));
    let (resident, shared) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    resident.saturating_sub(shared) * PAGE
}

/// A sampler of the anonymous memory's peak, from its start to [`AnonPeak::finish`].
pub struct AnonPeak {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    start: u64,
}

impl AnonPeak {
    /// Starts sampling.
    pub fn start() -> AnonPeak {
        let start = anon_bytes();
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(start));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::Builder::new()
            .name("anon-peak".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    p.fetch_max(anon_bytes(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .ok();
        AnonPeak { stop, peak, thread, start }
    }

    /// Stops sampling: (the peak, the value at the start), in MB (2^20 bytes, the unit of the
    /// RSS figures beside them).
    pub fn finish(mut self) -> (f64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let peak = self.peak.load(Ordering::Relaxed).max(anon_bytes());
        let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
        (mb(peak), mb(self.start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 64 MB written and held show in the peak; the mapped binary does not.
    #[test]
    fn held_memory_shows_in_the_peak() {
        let sampler = AnonPeak::start();
        let held: Vec<u8> = vec![1; 64 << 20];
        std::thread::sleep(Duration::from_millis(20));
        let (peak, start) = sampler.finish();
        assert!(held.iter().step_by(4096).all(|&b| b == 1));
        if anon_bytes() > 0 {
            assert!(peak - start >= 60.0, "peak {peak} MB, start {start} MB");
        }
    }
}
