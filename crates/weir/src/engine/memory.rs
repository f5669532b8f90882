//! The memory limit: the state of the continuous queries is accounted, and when it reaches the
//! limit the query holding the most is failed with an error that names it and the operator
//! holding its state, instead of the process growing until the system kills it.
//!
//! **What is accounted.** Each query's state, estimated by its operators
//! ([`weir_exec::heap`]): the rows, groups and indexes they keep, the input waiting for its
//! instants, and a maintained view's contents. Tables (which cannot be stopped), input read
//! ahead from files, the output waiting in a subscriber's channel, an evaluation's transient
//! memory and the process itself come on top, so a limit leaves headroom for them
//! (docs/sql.md, "Memory").
//!
//! **When it is checked.** Accounting costs a walk of every query's state, so it is not done
//! per event. After each evaluation the process's own anonymous memory is read (Linux's
//! `/proc/self/status`, a few microseconds): while it is below the limit, the accounted state
//! (a part of it) cannot have reached the limit, and nothing more is done. Above it, the state
//! is walked; if it is still below the limit, it is walked again once the process has grown by
//! half of what the state lacked then, or else after a pause of 50 times the last walk's
//! duration (at least 10 ms), since the state can grow without the process growing, in memory
//! the allocator kept from what was freed (a file source's read buffers): walks take at most
//! about 2 % of the time. Where the process's memory cannot be read, only the pause applies.
//!
//! **What happens.** While the accounted total is at or above the limit, the query holding
//! the most state fails: its view, sink or subscriber gets the error (a sink stays failed
//! across recovery, and `weir run` exits with an error), and its state is dropped. The other
//! queries go on.

use std::time::{Duration, Instant};

use weir_common::WeirError;
use weir_exec::heap::StateSize;

/// The least pause between two walks that growth did not call for.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// The pause between two such walks, in walks' durations.
const PAUSE_PER_WALK: u32 = 50;

/// The limit and what the last check learned.
#[derive(Debug, Default)]
pub(crate) struct MemoryLimit {
    limit: Option<usize>,
    /// After a walk that stayed below the limit: the accounted total then and the least
    /// process memory seen since (see the module docs).
    walked: Option<Walked>,
}

#[derive(Debug, Clone, Copy)]
struct Walked {
    total: usize,
    process_low: Option<usize>,
    /// When the next walk is due whatever the process does.
    due: Instant,
}

impl MemoryLimit {
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    pub fn set(&mut self, limit: Option<usize>) {
        self.limit = limit;
        self.walked = None;
    }

    /// Whether the queries' state must be walked now, given the process's anonymous memory
    /// (None: unknown). See the module docs.
    pub fn should_walk(&mut self, process: Option<usize>) -> bool {
        let Some(limit) = self.limit else { return false };
        match (process, self.walked.as_mut()) {
            (Some(p), _) if p < limit => false,
            (Some(p), Some(w)) => {
                let low = w.process_low.map_or(p, |l| l.min(p));
                w.process_low = Some(low);
                p >= low.saturating_add(limit.saturating_sub(w.total) / 2)
                    || Instant::now() >= w.due
            }
            (None, Some(w)) => Instant::now() >= w.due,
            (_, None) => true,
        }
    }

    /// Given each query's accounted state (by query id, with what it feeds), measured by a
    /// walk that took `cost`, the queries to fail, largest first, each with its error: as many
    /// as it takes to bring the total below the limit. Remembers the walk.
    pub fn judge(
        &mut self,
        sizes: &[(u64, String, StateSize)],
        process: Option<usize>,
        cost: Duration,
    ) -> Vec<(u64, WeirError)> {
        let Some(limit) = self.limit else { return Vec::new() };
        let mut total: usize = sizes.iter().map(|s| s.2.total()).sum();
        let mut order: Vec<&(u64, String, StateSize)> = sizes.iter().collect();
        order.sort_by_key(|s| std::cmp::Reverse(s.2.total()));
        let mut failed = Vec::new();
        for (id, feeds, size) in order {
            if total < limit {
                break;
            }
            failed.push((*id, over_limit(*id, feeds, size, total, limit)));
            total -= size.total();
        }
        let pause = (cost * PAUSE_PER_WALK).max(MIN_PAUSE);
        self.walked = Some(Walked { total, process_low: process, due: Instant::now() + pause });
        failed
    }
}

/// The error of query `id` (feeding `feeds`), failed because the queries' state (`total`)
/// reached `limit` and it held the most.
fn over_limit(id: u64, feeds: &str, size: &StateSize, total: usize, limit: usize) -> WeirError {
    let held = match size.largest() {
        Some((label, bytes)) => format!(", {} of it in {}", format_bytes(bytes), short(label)),
        None => String::new(),
    };
    WeirError::exec(format!(
        "query {id} ({feeds}) stopped: the continuous queries' state reached the memory limit \
         ({} of {}), and this query held the most: {}{held}. Window or key the state so it is \
         bounded (SHOW MEMORY lists what each query holds), or raise the limit (SET \
         memory_limit, --memory-limit)",
        format_bytes(total),
        format_bytes(limit),
        format_bytes(size.total()),
    ))
}

/// An operator's EXPLAIN line, cut to a length an error message can carry.
fn short(label: &str) -> String {
    const MAX: usize = 100;
    if label.chars().count() <= MAX {
        format!("`{label}`")
    } else {
        let cut: String = label.chars().take(MAX).collect();
        format!("`{cut}...`")
    }
}

/// The process's resident anonymous memory in bytes (Linux's `RssAnon`), if it can be read.
pub(crate) fn process_memory() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// A byte count as people read it: `512 B`, `3.4 KiB`, `231.4 MiB`, `1.5 GiB`.
pub(crate) fn format_bytes(n: usize) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A memory size as `SET memory_limit` and `--memory-limit` take it: a number of bytes, or a
/// number (fractions allowed) followed by a unit, `kB`, `MB`, `GB`, `TB` (powers of 1024, as
/// in PostgreSQL) or `KiB`, `MiB`, `GiB`, `TiB`, case-insensitive, with or without a space.
/// None if the text is not one, or is zero.
pub fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    let bytes = value * scale;
    (bytes.is_finite() && bytes >= 1.0 && bytes < usize::MAX as f64).then_some(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(parts: &[(&str, usize)]) -> StateSize {
        StateSize { parts: parts.iter().map(|(l, b)| (l.to_string(), *b)).collect() }
    }

    #[test]
    fn sizes_parse_as_postgres_writes_them() {
        assert_eq!(parse_bytes("512MB"), Some(512 << 20));
        assert_eq!(parse_bytes(" 2 GB "), Some(2 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_bytes("64kB"), Some(64 << 10));
        assert_eq!(parse_bytes("1000"), Some(1000));
        assert_eq!(parse_bytes("1 tb"), Some(1 << 40));
        for bad in ["", "0", "MB", "12 parsecs", "-5MB", "1e3", "0.1"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 * 1024 + 400), "3.4 KiB");
        assert_eq!(format_bytes(231 << 20), "231.0 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn no_limit_never_walks() {
        let mut m = MemoryLimit::default();
        assert!(!m.should_walk(Some(usize::MAX)));
        assert!(!m.should_walk(None));
        assert!(m
            .judge(&[(0, "view v".into(), size(&[("x", 1 << 40)]))], None, Duration::ZERO)
            .is_empty());
    }

    #[test]
    fn the_process_below_the_limit_needs_no_walk_and_growth_brings_the_next() {
        let mut m = MemoryLimit::default();
        m.set(Some(1000));
        assert!(!m.should_walk(Some(999)));
        assert!(m.should_walk(Some(1000)));
        // The state is 600 of the 1000: the next walk once the process grew by 200.
        assert!(m
            .judge(&[(0, "view v".into(), size(&[("x", 600)]))], Some(1100), Duration::ZERO)
            .is_empty());
        assert!(!m.should_walk(Some(1100)));
        assert!(!m.should_walk(Some(1299)));
        // It shrank, then grew: growth counts from the lowest point.
        assert!(!m.should_walk(Some(1050)));
        assert!(!m.should_walk(Some(1249)));
        assert!(m.should_walk(Some(1250)));
    }

    #[test]
    fn the_largest_queries_fail_until_the_rest_fit() {
        let mut m = MemoryLimit::default();
        m.set(Some(1000));
        let sizes = [
            (0, "view small".to_string(), size(&[("Filter", 0), ("Aggregate: x", 100)])),
            (1, "sink big".to_string(), size(&[("Distinct", 700), ("waiting", 50)])),
            (2, "subscriber".to_string(), size(&[("Join: Inner", 400)])),
        ];
        let failed = m.judge(&sizes, Some(5000), Duration::ZERO);
        let ids: Vec<u64> = failed.iter().map(|f| f.0).collect();
        assert_eq!(ids, [1]);
        let msg = failed[0].1.to_string();
        assert!(
            msg.starts_with(
                "query 1 (sink big) stopped: the continuous queries' state reached the memory \
                 limit (1.2 KiB of 1000 B), and this query held the most: 750 B, 700 B of it \
                 in `Distinct`."
            ),
            "{msg}"
        );
        assert!(msg.contains("SHOW MEMORY"), "{msg}");
        // Below the limit: nobody fails.
        assert!(m.judge(&sizes[..1], Some(5000), Duration::ZERO).is_empty());
        // A lower limit: the two largest go, the smallest fits.
        m.set(Some(400));
        let ids: Vec<u64> =
            m.judge(&sizes, Some(5000), Duration::ZERO).iter().map(|f| f.0).collect();
        assert_eq!(ids, [1, 2]);
    }

    #[test]
    fn walks_no_growth_calls_for_are_spaced_by_their_cost() {
        let mut m = MemoryLimit::default();
        m.set(Some(1000));
        assert!(m.should_walk(None));
        assert!(m.judge(&[], None, Duration::ZERO).is_empty());
        assert!(!m.should_walk(None));
        assert!(!m.should_walk(Some(1000)));
        // A pause due already: the next check walks even without growth.
        m.walked = m.walked.map(|w| Walked { due: Instant::now(), ..w });
        assert!(m.should_walk(None));
        assert!(m.should_walk(Some(1000)));
        // A walk of 100 ms is followed by a pause of 5 s.
        let before = Instant::now();
        assert!(m.judge(&[], None, Duration::from_millis(100)).is_empty());
        let due = m.walked.map(|w| w.due).unwrap_or(before);
        assert!(due >= before + Duration::from_secs(5), "{:?}", due - before);
    }

    /// `SHOW MEMORY`'s rows, as (id, feeds, state_bytes, largest).
    fn show_memory(e: &mut crate::Engine) -> Vec<(String, String, usize, String)> {
        let Some(crate::ExecResult::Rows { batches, .. }) =
            e.execute("SHOW MEMORY").expect("SHOW MEMORY").pop()
        else {
            panic!("SHOW MEMORY gave no rows");
        };
        batches
            .iter()
            .flat_map(|b| crate::format::rows_as_text(b).expect("text"))
            .map(|r| (r[0].clone(), r[1].clone(), r[2].parse().expect("bytes"), r[4].clone()))
            .collect()
    }

    /// An engine with a stream `s (k BIGINT, t BIGINT)`, a view `keys` of its distinct keys
    /// (state that grows with every new key) and a view `n` counting its rows (a few bytes).
    fn engine(workers: usize) -> crate::Engine {
        let mut e = crate::Engine::new();
        e.set_workers(workers).expect("workers");
        e.execute(
            "CREATE STREAM s (k BIGINT, t BIGINT, WATERMARK FOR t AS t); \
             CREATE VIEW keys AS SELECT DISTINCT k FROM s; \
             CREATE VIEW n AS SELECT COUNT(*) AS n FROM s",
        )
        .expect("setup");
        e
    }

    /// Inserts keys `from..to` into `s`, each at its own instant, in statements of 1000 rows.
    fn insert(e: &mut crate::Engine, from: i64, to: i64) -> crate::Result<()> {
        let mut k = from;
        while k < to {
            let end = (k + 1000).min(to);
            let values: Vec<String> = (k..end).map(|i| format!("({i}, {i})")).collect();
            e.execute(&format!("INSERT INTO s VALUES {}", values.join(", ")))?;
            k = end;
        }
        Ok(())
    }

    /// An interval join (NEXMark q9's condition) keeps the auctions still open and no bid; the
    /// same join without the time condition keeps every row of both.
    #[test]
    fn an_interval_join_holds_only_what_can_still_match() {
        for workers in [1, 2] {
            let mut e = crate::Engine::new();
            e.set_workers(workers).expect("workers");
            e.execute(
                "CREATE STREAM auction (id BIGINT, starts BIGINT, expires BIGINT, \
                   WATERMARK FOR starts AS starts); \
                 CREATE STREAM bid (auction BIGINT, price BIGINT, t BIGINT, WATERMARK FOR t AS t); \
                 CREATE SINK open WITH (path = '/dev/null') AS SELECT a.id, b.price \
                   FROM auction AS a JOIN bid AS b ON a.id = b.auction \
                   WHERE b.t BETWEEN a.starts AND a.expires; \
                 CREATE SINK any WITH (path = '/dev/null') AS SELECT a.id, b.price \
                   FROM auction AS a JOIN bid AS b ON a.id = b.auction WHERE b.price >= 0",
            )
            .expect("setup");
            for step in 0..20i64 {
                let t0 = step * 100;
                let auctions: Vec<String> =
                    (0..10).map(|i| format!("({}, {t0}, {})", step * 10 + i, t0 + 50)).collect();
                let bids: Vec<String> = (0..500)
                    .map(|i| format!("({}, {i}, {})", step * 10 + i % 10, t0 + i / 5))
                    .collect();
                e.execute(&format!(
                    "INSERT INTO auction VALUES {}; INSERT INTO bid VALUES {}",
                    auctions.join(", "),
                    bids.join(", ")
                ))
                .expect("insert");
            }
            e.execute("CLOSE ALL").expect("close");
            let m = show_memory(&mut e);
            let held = |feeds: &str| m.iter().find(|r| r.1 == feeds).map(|r| r.2).expect(feeds);
            let (open, any) = (held("sink open"), held("sink any"));
            assert!(open * 20 < any, "{workers}: {m:?}");
        }
    }

    #[test]
    fn show_memory_follows_the_state_each_query_holds() {
        for workers in [1, 2] {
            let mut e = engine(workers);
            e.execute("CREATE TABLE t (v BIGINT); INSERT INTO t VALUES (1), (2), (3)")
                .expect("table");
            insert(&mut e, 0, 1000).expect("insert");
            let small = show_memory(&mut e);
            assert_eq!(small.len(), 4, "{small:?}");
            assert_eq!((small[0].0.as_str(), small[0].1.as_str()), ("0", "view keys"));
            assert_eq!((small[1].0.as_str(), small[1].1.as_str()), ("1", "view n"));
            assert_eq!((small[2].0.as_str(), small[2].1.as_str()), ("table", "t"));
            // Three rows: one B-tree leaf and three small row allocations.
            assert!((200..1000).contains(&small[2].2), "{small:?}");
            assert_eq!(small[3].0, "total");
            assert_eq!(small[3].3, "no memory_limit");
            assert_eq!(small[3].2, small[0].2 + small[1].2 + small[2].2);
            // A thousand keys of 9 encoded bytes each, in a hash map: tens of kB.
            assert!((20_000..200_000).contains(&small[0].2), "{workers}: {small:?}");
            assert!(small[0].3.starts_with("Distinct"), "{workers}: {small:?}");
            // The count keeps no rows, only buffers sized by one statement's 1000 rows (and
            // the last statement's rows, whose last instant is not complete).
            assert!(small[1].2 < 300_000, "{workers}: {small:?}");
            insert(&mut e, 1000, 50_000).expect("insert");
            let large = show_memory(&mut e);
            // Fifty times the keys: at least twenty times the bytes (hash tables grow in powers
            // of two; the waiting input is the same); the count's does not grow.
            assert!(large[0].2 > 20 * small[0].2, "{workers}: {small:?} then {large:?}");
            assert!(large[1].2 <= small[1].2 + 1000, "{workers}: {small:?} then {large:?}");
        }
    }

    #[test]
    fn the_query_holding_the_most_fails_at_the_limit_and_the_others_go_on() {
        for workers in [1, 2] {
            let mut e = engine(workers);
            e.execute("SET memory_limit = '1MB'").expect("set");
            assert_eq!(e.setting("memory_limit").expect("show"), "1.0 MiB");
            // About 40 bytes a key: 1 MiB is passed after ~26 000 keys. The check walks when
            // the process grows or after a second: insert until it has.
            let started = Instant::now();
            let mut next = 0;
            while e.failures().is_empty() {
                assert!(started.elapsed() < Duration::from_secs(60), "never failed");
                insert(&mut e, next, next + 5000).expect("insert");
                next += 5000;
            }
            let failures = e.failures();
            assert_eq!(failures.len(), 1, "{failures:?}");
            let (name, err) = &failures[0];
            assert_eq!(name, "view 'keys'");
            let msg = err.to_string();
            assert!(
                msg.starts_with(
                    "query 0 (view keys) stopped: the continuous queries' state reached the \
                     memory limit ("
                ),
                "{msg}"
            );
            assert!(msg.contains(" of 1.0 MiB), and this query held the most: "), "{msg}");
            // The part holding the most is named: the DISTINCT's keys or the view's contents,
            // which hold the same keys and overtake each other as their tables double at
            // different sizes (so which one depends on when the check runs: under load, later).
            assert!(
                msg.contains(" of it in `Distinct`.")
                    || msg.contains(" of it in `the view's contents`."),
                "{msg}"
            );
            // The failed view says so to its readers; the other view goes on counting.
            let read = e.execute("SELECT * FROM keys").expect_err("failed view").to_string();
            assert!(read.starts_with("view 'keys' failed: query 0 (view keys) stopped"), "{read}");
            insert(&mut e, next, next + 10).expect("insert");
            let counted = show_memory(&mut e);
            assert_eq!(counted.len(), 2, "{counted:?}");
            assert!(counted[1].3.starts_with("queries "), "{counted:?}");
            assert!(counted[1].3.ends_with(" of memory_limit 1.0 MiB"), "{counted:?}");
            assert_eq!(counted[0].1, "view n");
            let Some(crate::ExecResult::Rows { batches, .. }) =
                e.execute("SELECT n FROM n").expect("count").pop()
            else {
                panic!("no rows");
            };
            let n = crate::format::rows_as_text(&batches[0]).expect("text");
            // Every row but the last one (its instant is not complete yet).
            assert_eq!(n, [[(next + 10 - 1).to_string()]], "{workers}");
            e.execute("RESET memory_limit").expect("reset");
            assert_eq!(e.setting("memory_limit").expect("show"), "none");
        }
    }

    #[test]
    fn a_bad_limit_names_what_is_expected() {
        let mut e = crate::Engine::new();
        let err = e.execute("SET memory_limit = '12 parsecs'").expect_err("bad").to_string();
        assert!(
            err.starts_with(
                "invalid value '12 parsecs' for setting memory_limit: expected a size such as \
                 '512MB'"
            ),
            "{err}"
        );
        assert!(err.contains("at line 1, column 20"), "{err}");
        e.execute("SET memory_limit = 'none'").expect("none");
        assert_eq!(e.memory_limit(), None);
        e.execute("SET memory_limit = '2GB'").expect("2GB");
        assert_eq!(e.memory_limit(), Some(2 << 30));
    }

    #[test]
    fn this_process_memory_can_be_read_on_linux() {
        if cfg!(target_os = "linux") {
            let m = process_memory().expect("RssAnon");
            assert!(m > 0);
        }
    }
}
