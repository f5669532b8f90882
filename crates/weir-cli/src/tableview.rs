//! The REPL's table view (`\view N`): a continuous query's current result as a table, redrawn
//! in place as it changes, beside the changelog that the shell prints by default.
//!
//! [`Contents`] follows one query's changes. For a relation it is the relation itself: each
//! `+1` adds a copy of the row and each `-1` removes one, so at every instant the table equals
//! the query's result at that instant. Rows keep the place where they first appeared, and a row
//! that replaces another at the same instant (a group's new aggregate, `-old +new`) takes the
//! place the old one left, so updates show in place as in Flink's table mode. For a stream
//! (`ISTREAM`, `DSTREAM`, `RSTREAM`) the result only grows; the view shows its latest
//! [`STREAM_ROWS`] elements and counts them all.
//!
//! Memory is bounded: a relation of more than [`MAX_ROWS`] rows is not kept (the view says so
//! and the changelog goes on), since the engine holds the relation already and a second copy
//! of a large one in the shell helps nobody reading a terminal.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use console::{Key, Term};
use weir::{Change, PlanKind};

use crate::output::{boxed_table, table_cell};

/// A relation larger than this many rows is not kept by the view.
pub const MAX_ROWS: usize = 10_000;

/// A stream's view keeps this many of its latest elements.
pub const STREAM_ROWS: usize = 1_000;

/// One continuous query's result, as the table view shows it.
#[derive(Debug)]
pub struct Contents {
    columns: Vec<String>,
    kind: PlanKind,
    /// Relation: one slot per copy of a row, in display order; `None` for a copy removed at
    /// the current instant, whose place a row added at the same instant takes.
    slots: Vec<Option<Vec<String>>>,
    /// Relation: where the copies of each row are.
    places: HashMap<Vec<String>, Vec<usize>>,
    /// Relation: places freed at the current instant, in order.
    freed: Vec<usize>,
    /// Stream: the latest elements.
    recent: VecDeque<Vec<String>>,
    /// Stream: how many elements there have been.
    total: u64,
    /// The last instant a change arrived at, as printed.
    instant: Option<String>,
    current: Option<weir::Time>,
    /// The relation outgrew [`MAX_ROWS`]: nothing is kept any more.
    too_large: bool,
    /// Relation: how many copies of rows are shown.
    shown: usize,
}

impl Contents {
    pub fn new(columns: Vec<String>, kind: PlanKind) -> Self {
        Contents {
            columns,
            kind,
            slots: Vec::new(),
            places: HashMap::new(),
            freed: Vec::new(),
            recent: VecDeque::new(),
            total: 0,
            instant: None,
            current: None,
            too_large: false,
            shown: 0,
        }
    }

    /// Applies changes in time order (as a subscription delivers them). Within an instant,
    /// removals are applied before insertions, whatever their order, so a row replaced at an
    /// instant is replaced in place.
    pub fn apply(&mut self, changes: Vec<Change>) {
        let mut instant: Vec<(Vec<String>, i64)> = Vec::new();
        for c in changes {
            if self.current != Some(c.time) {
                self.apply_instant(std::mem::take(&mut instant));
                self.current = Some(c.time);
            }
            self.instant = Some(c.time_text);
            let row: Vec<String> = c.values.into_iter().map(table_cell).collect();
            match self.kind {
                PlanKind::Stream => {
                    self.total += 1;
                    if self.recent.len() == STREAM_ROWS {
                        self.recent.pop_front();
                    }
                    self.recent.push_back(row);
                }
                PlanKind::Relation => instant.push((row, c.diff)),
            }
        }
        self.apply_instant(instant);
    }

    /// A relation's changes at one instant: removals, then insertions into the freed places.
    fn apply_instant(&mut self, changes: Vec<(Vec<String>, i64)>) {
        if self.too_large || changes.is_empty() {
            return;
        }
        let (removed, added): (Vec<_>, Vec<_>) = changes.into_iter().partition(|(_, d)| *d < 0);
        for (row, diff) in removed.into_iter().chain(added) {
            self.change(row, diff);
            if self.too_large {
                return;
            }
        }
        self.end_instant();
    }

    /// Adds (`diff > 0`) or removes copies of `row`.
    fn change(&mut self, row: Vec<String>, diff: i64) {
        if diff < 0 {
            let Some(places) = self.places.get_mut(&row) else {
                return; // Not shown (cannot happen for a consistent changelog).
            };
            for _ in 0..diff.unsigned_abs() {
                let Some(place) = places.pop() else { break };
                self.slots[place] = None;
                self.shown -= 1;
                self.freed.push(place);
            }
            if places.is_empty() {
                self.places.remove(&row);
            }
            return;
        }
        for _ in 0..diff {
            let place = if self.freed.is_empty() {
                self.slots.push(None);
                self.slots.len() - 1
            } else {
                // The earliest place freed at this instant.
                let i = (0..self.freed.len()).min_by_key(|&i| self.freed[i]).unwrap_or(0);
                self.freed.swap_remove(i)
            };
            self.slots[place] = Some(row.clone());
            self.places.entry(row.clone()).or_default().push(place);
            self.shown += 1;
            if self.shown > MAX_ROWS {
                self.forget();
                return;
            }
        }
    }

    /// The relation is too large to keep.
    fn forget(&mut self) {
        self.too_large = true;
        self.slots = Vec::new();
        self.places = HashMap::new();
        self.freed.clear();
        self.shown = 0;
    }

    /// Closes the gaps that removals left: the rows after them move up.
    fn end_instant(&mut self) {
        if self.freed.is_empty() {
            return;
        }
        self.freed.clear();
        self.slots.retain(Option::is_some);
        self.places.clear();
        for (i, row) in self.slots.iter().enumerate() {
            if let Some(row) = row {
                self.places.entry(row.clone()).or_default().push(i);
            }
        }
    }

    /// The rows, in display order.
    pub fn rows(&self) -> Vec<Vec<String>> {
        match self.kind {
            PlanKind::Stream => self.recent.iter().cloned().collect(),
            PlanKind::Relation => self.slots.iter().flatten().cloned().collect(),
        }
    }

    /// The table as it fits `height` lines of `width` columns: a status line (`[N] at τ  |
    /// R row(s)  |  q: back`), the query's text, then the rows (as many as fit; a last line
    /// says how many more there are).
    pub fn render(&self, number: usize, sql: &str, width: usize, height: usize) -> String {
        let mut status = format!("[{number}] ");
        match &self.instant {
            Some(t) => status.push_str(&format!("at {t}")),
            None => status.push_str("no change yet"),
        }
        let rows = self.rows();
        match self.kind {
            PlanKind::Relation if self.too_large => status.push_str(&format!(
                "  |  more than {MAX_ROWS} rows: too large for the table view (the changelog \
                 shows every change)"
            )),
            PlanKind::Relation => status.push_str(&format!("  |  {} row(s)", rows.len())),
            PlanKind::Stream if self.total > rows.len() as u64 => status.push_str(&format!(
                "  |  {} element(s), the latest {} kept",
                self.total,
                rows.len()
            )),
            PlanKind::Stream => status.push_str(&format!("  |  {} element(s)", self.total)),
        }
        status.push_str("  |  q: back");
        // Status, query, the table's 3 header lines, its closing rule and row count, and a line
        // for "more rows".
        let room = height.saturating_sub(8).max(1);
        let (shown, more) = match self.kind {
            // A stream's latest elements matter most.
            PlanKind::Stream if rows.len() > room => {
                (&rows[rows.len() - room..], rows.len() - room)
            }
            _ if rows.len() > room => (&rows[..room], rows.len() - room),
            _ => (&rows[..], 0),
        };
        let mut out = clip(&status, width);
        out.push('\n');
        out.push_str(&clip(sql, width));
        out.push('\n');
        for line in boxed_table(&self.columns, shown).lines() {
            out.push_str(&clip(line, width));
            out.push('\n');
        }
        if more > 0 {
            let which = if self.kind == PlanKind::Stream { "earlier" } else { "more" };
            out.push_str(&format!("({more} {which} row(s) do not fit the terminal)\n"));
        }
        out
    }
}

/// `line` cut to `width` columns.
fn clip(line: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in line.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w > width {
            break;
        }
        used += w;
        out.push(c);
    }
    out
}

/// What the view draws: the text, or `Err(text)` once the query has ended (stopped or
/// failed); that text then stays until the view is closed.
pub type Frame = Result<String, String>;

/// Shows the full-screen table view until q, Esc, Enter or Ctrl-C. `frame(width, height)` says
/// what to draw; it is asked again every `tick`, and the screen is redrawn when it changed.
/// The view uses the terminal's alternate screen, so the shell's screen is as it was after.
pub fn show(mut frame: impl FnMut(usize, usize) -> Frame, tick: Duration) -> io::Result<()> {
    let term = Term::stdout();
    if !term.is_term() {
        return Err(io::Error::other("the table view needs a terminal"));
    }
    let (keys_tx, keys) = mpsc::channel::<bool>();
    // Keys are read one at a time in raw mode; the thread ends with the key that closes the
    // view, so it never takes a key meant for the prompt.
    thread::spawn(move || loop {
        let key = Term::stdout().read_key_raw();
        let close = matches!(
            key,
            Err(_) | Ok(Key::Escape | Key::Enter | Key::CtrlC | Key::Char('q' | 'Q'))
        );
        if keys_tx.send(close).is_err() || close {
            return;
        }
    });
    let mut out = io::stdout();
    // The alternate screen, without a cursor.
    out.write_all(b"\x1b[?1049h\x1b[?25l")?;
    let mut drawn = String::new();
    let mut ended: Option<String> = None;
    let result = loop {
        let text = match &ended {
            Some(t) => t.clone(),
            None => {
                let (height, width) = term.size();
                match frame(usize::from(width), usize::from(height)) {
                    Ok(t) => t,
                    Err(t) => {
                        ended = Some(t.clone());
                        t
                    }
                }
            }
        };
        if text != drawn {
            // Raw mode is on only while a key is read: end lines with CR LF anyway.
            let body = text.replace('\n', "\r\n");
            if let Err(e) = write!(out, "\x1b[H\x1b[2J{body}").and_then(|()| out.flush()) {
                break Err(e);
            }
            drawn = text;
        }
        match keys.recv_timeout(tick) {
            Ok(true) | Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
            Ok(false) | Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    out.write_all(b"\x1b[?25h\x1b[?1049l")?;
    out.flush()?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(time: i64, diff: i64, values: &[&str], kind: PlanKind) -> Change {
        Change {
            values: values.iter().map(|v| v.to_string()).collect(),
            time,
            time_text: time.to_string(),
            diff,
            kind,
        }
    }

    fn rel(changes: &[(i64, i64, &[&str])]) -> Vec<Change> {
        changes.iter().map(|(t, d, v)| change(*t, *d, v, PlanKind::Relation)).collect()
    }

    fn rows(c: &Contents) -> Vec<String> {
        c.rows().iter().map(|r| r.join(",")).collect()
    }

    #[test]
    fn a_group_that_changes_keeps_its_place() {
        let mut c = Contents::new(vec!["k".into(), "n".into()], PlanKind::Relation);
        c.apply(rel(&[(1, 1, &["a", "1"]), (1, 1, &["b", "1"]), (1, 1, &["c", "1"])]));
        assert_eq!(rows(&c), ["a,1", "b,1", "c,1"]);
        // b's count goes from 1 to 2 at instant 2: same place.
        c.apply(rel(&[(2, -1, &["b", "1"]), (2, 1, &["b", "2"])]));
        assert_eq!(rows(&c), ["a,1", "b,2", "c,1"]);
        // The insertion may come first within the instant: still in place.
        c.apply(rel(&[(3, 1, &["a", "2"]), (3, -1, &["a", "1"])]));
        assert_eq!(rows(&c), ["a,2", "b,2", "c,1"]);
        // A removal without replacement closes the gap.
        c.apply(rel(&[(4, -1, &["b", "2"])]));
        assert_eq!(rows(&c), ["a,2", "c,1"]);
        assert_eq!(c.instant.as_deref(), Some("4"));
    }

    #[test]
    fn duplicates_are_counted_and_removed_one_copy_at_a_time() {
        let mut c = Contents::new(vec!["v".into()], PlanKind::Relation);
        c.apply(rel(&[(1, 2, &["x"]), (1, 1, &["y"])]));
        assert_eq!(rows(&c), ["x", "x", "y"]);
        c.apply(rel(&[(2, -1, &["x"])]));
        assert_eq!(rows(&c), ["x", "y"]);
        // Every change of several instants in one call is applied instant by instant.
        c.apply(rel(&[(3, -1, &["y"]), (4, 1, &["z"])]));
        assert_eq!(rows(&c), ["x", "z"]);
    }

    #[test]
    fn a_streams_view_keeps_its_latest_elements() {
        let mut c = Contents::new(vec!["v".into()], PlanKind::Stream);
        let n = STREAM_ROWS + 5;
        c.apply((0..n).map(|i| change(i as i64, 1, &[&i.to_string()], PlanKind::Stream)).collect());
        let shown = c.rows();
        assert_eq!(shown.len(), STREAM_ROWS);
        assert_eq!(shown[0], ["5"]);
        let text = c.render(1, "SELECT ...", 200, 10);
        assert!(text.starts_with(&format!(
            "[1] at {}  |  {n} element(s), the latest {STREAM_ROWS} kept  |  q: back\nSELECT ...\n",
            n - 1
        )));
        // The latest rows are the ones on screen.
        assert!(text.contains(&format!("| {} |", n - 1)), "{text}");
        assert!(text.contains("earlier row(s) do not fit the terminal"), "{text}");
        assert!(text.lines().count() <= 10, "{text}");
    }

    #[test]
    fn a_relation_too_large_is_not_kept() {
        let mut c = Contents::new(vec!["v".into()], PlanKind::Relation);
        c.apply(
            (0..=MAX_ROWS).map(|i| change(1, 1, &[&i.to_string()], PlanKind::Relation)).collect(),
        );
        assert!(c.rows().is_empty());
        assert!(c.render(1, "q", 300, 20).contains("too large for the table view"));
        // It stays so: later changes are ignored rather than shown wrongly.
        c.apply(rel(&[(2, 1, &["x"])]));
        assert!(c.rows().is_empty());
    }

    #[test]
    fn render_fits_the_terminal() {
        let mut c = Contents::new(vec!["k".into(), "n".into()], PlanKind::Relation);
        assert!(c
            .render(2, "q", 80, 24)
            .starts_with("[2] no change yet  |  0 row(s)  |  q: back\nq\n"));
        c.apply(rel(&[(7, 1, &["a", "1"]), (7, 1, &["b", "2"])]));
        assert_eq!(
            c.render(2, "SELECT k, n FROM v;", 80, 24),
            "[2] at 7  |  2 row(s)  |  q: back\n\
             SELECT k, n FROM v;\n\
             +---+---+\n\
             | k | n |\n\
             +---+---+\n\
             | a | 1 |\n\
             | b | 2 |\n\
             +---+---+\n\
             (2 rows)\n"
        );
        assert!(c.render(2, "q", 10, 24).lines().all(|l| l.chars().count() <= 10));
    }
}
