//! The progress bar shown on standard error while files are loaded into streams.
//!
//! A file source that a statement starts is read in the foreground (the REPL) or after the
//! script (`weir run`); while it reads, one line on the terminal shows the bytes read of the
//! total, the throughput in bytes and rows per second, and which streams are loading. It
//! disappears when the files are read. Followed files and standard input have no end and get
//! no bar.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use weir::SourceProgress;

/// The sources a bar tracks: started, bounded, still reading.
pub fn loading(progress: &[SourceProgress]) -> Vec<&SourceProgress> {
    progress
        .iter()
        .filter(|p| p.started && !p.ended && !p.failed && !p.unbounded && p.bytes_total.is_some())
        .collect()
}

/// One progress bar over every loading source. See the module docs.
#[derive(Debug)]
pub struct LoadBar {
    bar: ProgressBar,
    started: Instant,
    /// (bytes, records) already read when the bar started, per stream.
    base: Vec<(String, u64, u64)>,
}

impl LoadBar {
    /// A bar on standard error, hidden if it is not a terminal.
    pub fn new(progress: &[SourceProgress]) -> LoadBar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(8));
        let style = ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {prefix}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        let base = progress.iter().map(|p| (p.stream.clone(), p.bytes_read, p.records)).collect();
        let mut b = LoadBar { bar, started: Instant::now(), base };
        b.update(progress);
        b
    }

    /// Redraws from the sources' current progress.
    pub fn update(&mut self, progress: &[SourceProgress]) {
        let active = loading(progress);
        if active.is_empty() {
            return; // done: the bar is about to go
        }
        let total: u64 = active.iter().filter_map(|p| p.bytes_total).sum();
        let read: u64 = active.iter().map(|p| p.bytes_read).sum();
        let records: u64 =
            active.iter().map(|p| p.records.saturating_sub(self.base_records(p))).sum();
        self.bar.set_length(total.max(read));
        self.bar.set_position(read);
        let names: Vec<&str> = active.iter().map(|p| p.stream.as_str()).collect();
        self.bar.set_message(format!("loading {}", names.join(", ")));
        self.bar.set_prefix(rows_per_second(records, self.started.elapsed().as_secs_f64()));
    }

    fn base_records(&self, p: &SourceProgress) -> u64 {
        self.base.iter().find(|(s, _, _)| *s == p.stream).map_or(0, |b| b.2)
    }

    /// Runs `f` (which prints) with the bar out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Removes the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// `1.2M rows/s`, for the bar.
pub fn rows_per_second(rows: u64, seconds: f64) -> String {
    if seconds <= 0.0 {
        return String::new();
    }
    let rate = rows as f64 / seconds;
    let (value, unit) = if rate >= 1e6 {
        (rate / 1e6, "M")
    } else if rate >= 1e3 {
        (rate / 1e3, "k")
    } else {
        (rate, "")
    };
    format!("{value:.1}{unit} rows/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(
        stream: &str,
        read: u64,
        total: Option<u64>,
        ended: bool,
        unbounded: bool,
    ) -> SourceProgress {
        SourceProgress {
            stream: stream.into(),
            bytes_read: read,
            bytes_total: total,
            records: read / 10,
            started: true,
            ended,
            failed: false,
            unbounded,
        }
    }

    #[test]
    fn only_bounded_unfinished_sources_get_a_bar() {
        let all = [
            p("a", 10, Some(100), false, false),
            p("b", 100, Some(100), true, false),
            p("c", 5, None, false, true),
            p("d", 5, Some(50), false, true),
        ];
        let names: Vec<&str> = loading(&all).iter().map(|p| p.stream.as_str()).collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn rates_read_well() {
        assert_eq!(rows_per_second(2_500_000, 2.0), "1.2M rows/s");
        assert_eq!(rows_per_second(1500, 1.0), "1.5k rows/s");
        assert_eq!(rows_per_second(12, 4.0), "3.0 rows/s");
        assert_eq!(rows_per_second(12, 0.0), "");
    }
}
