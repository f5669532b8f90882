//! Sketch aggregates end to end: `APPROX_COUNT_DISTINCT` against the exact `COUNT(DISTINCT)`,
//! `APPROX_PERCENTILE` against the exact percentile, `APPROX_TOP_K` against the exact counts
//! computed here and `MIGHT_CONTAIN` against the exact `IN`, over many seeded inputs
//! (within the stated error in the stated share of windows, exact while a window's sketch is
//! still small), the same output whatever the batching, the disorder within the watermark or
//! the number of workers, and checkpoints that restore a run exactly.
//!
//! `SKETCH_SEEDS` sets the number of seeded inputs of the accuracy tests (default 12).
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::collections::BTreeMap;

use proptest::prelude::*;
use weir::{Engine, ExecResult};

/// A small fixed generator (SplitMix64), so that inputs are reproducible from their seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `(v, t)` rows: `n` rows at times 0.. (`per_tick` per tick), values below `distinct`.
fn rows(seed: u64, n: usize, per_tick: usize, distinct: u64) -> Vec<(u64, i64)> {
    let mut rng = Rng(seed);
    (0..n).map(|i| (rng.below(distinct), (i / per_tick) as i64)).collect()
}

fn inserts(rows: &[(u64, i64)], batch: usize) -> Vec<String> {
    rows.chunks(batch)
        .map(|c| {
            let vals: Vec<String> = c.iter().map(|(v, t)| format!("({v}, {t})")).collect();
            format!("INSERT INTO s VALUES {}", vals.join(", "))
        })
        .collect()
}

/// Runs `queries` (subscribed) over `rows` inserted `batch` at a time, on `workers` workers;
/// every query's changes as text.
fn run(queries: &[&str], rows: &[(u64, i64)], batch: usize, workers: usize) -> Vec<Vec<String>> {
    let mut e = Engine::new();
    e.set_workers(workers).unwrap();
    e.execute("CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t - 6)").unwrap();
    let subs: Vec<_> = queries.iter().map(|q| e.subscribe(q).unwrap()).collect();
    let mut out = vec![Vec::new(); queries.len()];
    for stmt in inserts(rows, batch) {
        e.execute(&stmt).unwrap();
        for (o, s) in out.iter_mut().zip(&subs) {
            o.extend(s.poll_changes().unwrap().iter().map(|c| c.to_string()));
        }
    }
    e.close_all().unwrap();
    for (o, s) in out.iter_mut().zip(&subs) {
        o.extend(s.poll_changes().unwrap().iter().map(|c| c.to_string()));
    }
    out
}

/// The value of a one-column ISTREAM at each instant it changed: instant -> value.
fn steps(lines: &[String]) -> BTreeMap<i64, i64> {
    lines
        .iter()
        .map(|l| {
            let (t, v) = l.trim_start_matches('@').split_once(' ').unwrap();
            (t.parse().unwrap(), v.parse().unwrap())
        })
        .collect()
}

/// The value of a step function at `t` (0 before its first step).
fn at(steps: &BTreeMap<i64, i64>, t: i64) -> i64 {
    steps.range(..=t).next_back().map_or(0, |(_, v)| *v)
}

/// Over many seeds, each window's estimate with 2^8 registers (standard error 1.04/16 = 6.5 %)
/// lies within 3 standard errors of the exact count in at least 99 % of the windows and within
/// 2 in at least 90 %; windows of at most 32 distinct values (a sparse sketch) are exact.
#[test]
fn approx_count_distinct_lies_within_its_stated_error() {
    let seeds: u64 = std::env::var("SKETCH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let se = 1.04 / 16.0;
    let (mut windows, mut within2, mut within3) = (0u64, 0u64, 0u64);
    for seed in 0..seeds {
        let distinct = [20, 300, 3_000, 100_000][seed as usize % 4];
        let input = rows(seed, 4_000, 8, distinct);
        let out = run(
            &[
                "SELECT ISTREAM APPROX_COUNT_DISTINCT(v, 8) FROM s [RANGE 100 SLIDE 20]",
                "SELECT ISTREAM COUNT(DISTINCT v) FROM s [RANGE 100 SLIDE 20]",
            ],
            &input,
            1_000,
            1,
        );
        let (approx, exact) = (steps(&out[0]), steps(&out[1]));
        for b in (20..=700).step_by(20) {
            let (a, x) = (at(&approx, b - 1), at(&exact, b - 1));
            if x <= 32 {
                assert_eq!(a, x, "seed {seed}, window ending {b}: a sparse sketch is exact");
            }
            let err = (a - x).abs() as f64 / x.max(1) as f64;
            windows += 1;
            within2 += (err <= 2.0 * se) as u64;
            within3 += (err <= 3.0 * se) as u64;
        }
    }
    assert!(within2 * 10 >= windows * 9, "{within2} of {windows} windows within 2 se");
    assert!(within3 * 100 >= windows * 99, "{within3} of {windows} windows within 3 se");
}

/// Rank error of `estimate` as the p-quantile of `sorted`: the distance from p·(n−1) to the
/// positions the estimate could take among the sorted values, as a share of n.
fn rank_error(sorted: &[f64], p: f64, estimate: f64) -> f64 {
    let lo = sorted.partition_point(|x| *x < estimate) as f64;
    let hi = sorted.partition_point(|x| *x <= estimate) as f64;
    let target = p * (sorted.len() - 1) as f64;
    (lo - 1.0 - target).max(target - hi).max(0.0) / sorted.len() as f64
}

/// PERCENTILE_CONT(p) of sorted values.
fn percentile_cont(sorted: &[f64], p: f64) -> f64 {
    let pos = p * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Over many seeds, each window's `APPROX_PERCENTILE` (compression 100) lies within the rank
/// error docs/sql.md states, ε(p) = (4·√(p(1−p)) + 0.5)/100, of the exact percentile in at least
/// 99 % of the windows, and is exactly `PERCENTILE_CONT` in windows of at most 200 values.
/// Values are uniform, or heavy-tailed (a uniform number below 2^k, k uniform below 40).
#[test]
fn approx_percentile_lies_within_its_stated_rank_error() {
    let seeds: u64 = std::env::var("SKETCH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let ps = [0.01, 0.25, 0.5, 0.9, 0.99];
    let bound = |p: f64| (4.0 * (p * (1.0 - p)).sqrt() + 0.5) / 100.0;
    let (mut windows, mut within, mut exact, mut worst) = (0u64, 0u64, 0u64, 0f64);
    for seed in 0..seeds {
        let mut rng = Rng(seed ^ 0x9E11);
        let heavy = seed / 2 % 2 == 1;
        let per_tick = [1, 8][(seed % 2) as usize];
        let input: Vec<(u64, i64)> = (0..4_000)
            .map(|i| {
                let bits = if heavy { 1 + rng.below(40) } else { 30 };
                let v = rng.below(1 << bits);
                (v, (i / per_tick) as i64)
            })
            .collect();
        let queries: Vec<String> = ps
            .iter()
            .map(|p| {
                format!("SELECT ISTREAM APPROX_PERCENTILE(v, {p}) FROM s [RANGE 100 SLIDE 20]")
            })
            .collect();
        let out = run(&queries.iter().map(|q| q.as_str()).collect::<Vec<_>>(), &input, 1_000, 1);
        let end = input.last().unwrap().1 + 100;
        for (p, lines) in ps.iter().zip(&out) {
            let estimates: BTreeMap<i64, Option<f64>> = lines
                .iter()
                .map(|l| {
                    let (t, v) = l.trim_start_matches('@').split_once(' ').unwrap();
                    (t.parse().unwrap(), v.parse().ok())
                })
                .collect();
            for b in (20..=end).step_by(20) {
                let mut sorted: Vec<f64> = input
                    .iter()
                    .filter(|(_, t)| (b - 100..b).contains(t))
                    .map(|(v, _)| *v as f64)
                    .collect();
                sorted.sort_unstable_by(f64::total_cmp);
                let got = estimates.range(..b).next_back().and_then(|(_, v)| *v);
                let Some(got) = got else {
                    assert!(sorted.is_empty(), "seed {seed}, window ending {b}: no estimate");
                    continue;
                };
                if sorted.len() <= 200 {
                    assert_eq!(got, percentile_cont(&sorted, *p), "seed {seed}, window ending {b}");
                    exact += 1;
                }
                let err = rank_error(&sorted, *p, got);
                worst = worst.max(err / bound(*p));
                windows += 1;
                within += (err <= bound(*p)) as u64;
            }
        }
    }
    assert!(exact > 0 && exact < windows, "{exact} exact of {windows} windows");
    assert!(
        within * 100 >= windows * 99,
        "{within} of {windows} windows within the bound (worst {worst:.2} × the bound)"
    );
}

/// One `APPROX_TOP_K` value as printed: (value, count) pairs.
fn top_list(text: &str) -> Vec<(u64, i64)> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    if inner.is_empty() {
        return vec![];
    }
    inner
        .split("}, ")
        .map(|e| {
            let e = e.trim_start_matches("{value: ").trim_end_matches('}');
            let (v, c) = e.split_once(", count: ").unwrap();
            (v.parse().unwrap(), c.parse().unwrap())
        })
        .collect()
}

/// Over many seeds, each window's `APPROX_TOP_K(v, 5, 50)` keeps the stated bound against the
/// exact counts: each count is at most n/51 below the value's true count in the window (n its
/// rows) and never above; each value given has a true count at least the true 5th largest less
/// n/51; and the list is exactly the exact top 5 (ties by value) in windows whose slices held
/// at most 100 distinct values (no counter was ever dropped). Inputs are skewed (a Zipf-like
/// law) or uniform, over 20 to 100 000 values. These bounds hold always, not just mostly: every
/// window is checked.
#[test]
fn approx_top_k_keeps_its_stated_bound() {
    let seeds: u64 = std::env::var("SKETCH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let (mut windows, mut exact_windows, mut pruned_windows) = (0u64, 0u64, 0u64);
    for seed in 0..seeds {
        let distinct = [20u64, 90, 3_000, 100_000][seed as usize % 4];
        let skewed = seed / 4 % 2 == 0;
        let mut rng = Rng(seed ^ 0x70_9C);
        let input: Vec<(u64, i64)> = (0..4_000)
            .map(|i| {
                let v = if skewed {
                    // A rank r with probability about proportional to 1/r.
                    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                    ((distinct as f64).powf(u) as u64).min(distinct - 1)
                } else {
                    rng.below(distinct)
                };
                (v, (i / 8) as i64)
            })
            .collect();
        let out = run(
            &["SELECT ISTREAM APPROX_TOP_K(v, 5, 50) FROM s [RANGE 100 SLIDE 20]"],
            &input,
            1_000,
            1,
        );
        let lists: BTreeMap<i64, Vec<(u64, i64)>> = out[0]
            .iter()
            .map(|l| {
                let (t, v) = l.trim_start_matches('@').split_once(' ').unwrap();
                (t.parse().unwrap(), top_list(v))
            })
            .collect();
        let end = input.last().unwrap().1 + 100;
        for b in (20..=end).step_by(20) {
            let mut counts: BTreeMap<u64, i64> = BTreeMap::new();
            let mut slice_distinct: BTreeMap<i64, std::collections::BTreeSet<u64>> =
                BTreeMap::new();
            for (v, t) in input.iter().filter(|(_, t)| (b - 100..b).contains(t)) {
                *counts.entry(*v).or_insert(0) += 1;
                slice_distinct.entry(t / 20).or_default().insert(*v);
            }
            let n: i64 = counts.values().sum();
            let got = lists.range(..b).next_back().map(|(_, l)| l.clone()).unwrap_or_default();
            let mut exact: Vec<(u64, i64)> = counts.iter().map(|(v, c)| (*v, *c)).collect();
            exact.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            exact.truncate(5);
            let kth = exact.last().map_or(0, |e| e.1);
            let bound = n / 51;
            for (v, c) in &got {
                let f = counts.get(v).copied().unwrap_or(0);
                assert!(*c <= f && f <= c + bound, "seed {seed}, window {b}: {v} true {f} got {c}");
                assert!(f >= kth - bound, "seed {seed}, window {b}: {v} ({f}) not in the top 5");
            }
            // Fewer than 5 when fewer stand out: a value all of whose counts were dropped is
            // not listed.
            assert!(got.len() <= 5, "seed {seed}, window {b}");
            if slice_distinct.values().all(|d| d.len() <= 100) {
                assert_eq!(got, exact, "seed {seed}, window ending {b}: no counter dropped");
                exact_windows += 1;
            } else {
                pruned_windows += 1;
            }
            windows += 1;
        }
    }
    assert!(exact_windows > 0 && pruned_windows > 0, "{exact_windows} exact of {windows}");
}

/// `[DEDUPLICATE BY v CAPACITY 1000 ERROR p]` over a stream of new keys and replays of keys
/// among the last 1000 new ones, over many seeds: every replay is dropped (a remembered key is
/// always found), and the share of new keys dropped by mistake is at most p plus three standard
/// errors of the measurement.
#[test]
fn deduplicate_drops_every_replay_and_few_new_keys() {
    let seeds: u64 = std::env::var("SKETCH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    for p in [0.05, 0.01] {
        let (mut new_keys, mut lost) = (0u64, 0u64);
        for seed in 0..seeds {
            let mut rng = Rng(seed ^ 0xDED0);
            let mut fresh: Vec<u64> = Vec::new();
            let mut input: Vec<(u64, i64)> = Vec::new();
            for i in 0..6_000usize {
                let t = (i / 10) as i64;
                if fresh.len() > 10 && rng.below(3) == 0 {
                    // A replay of one of the last 1000 new keys (less the instant's own, which
                    // could be in a later generation by the (key, row) order).
                    let back = 1 + rng.below(fresh.len().min(990) as u64 - 10) as usize + 10;
                    input.push((fresh[fresh.len() - back], t));
                } else {
                    let k = rng.next() >> 1;
                    fresh.push(k);
                    input.push((k, t));
                }
            }
            let q = format!("SELECT ISTREAM v FROM s [DEDUPLICATE BY v CAPACITY 1000 ERROR {p}]");
            let out = run(&[&q], &input, 1_000, 1);
            let kept: std::collections::HashSet<u64> =
                out[0].iter().map(|l| l.split_once(' ').unwrap().1.parse().unwrap()).collect();
            assert_eq!(kept.len(), out[0].len(), "seed {seed}: a key kept twice");
            // Every kept key is a new key (no replay passes); new keys missing were lost.
            let all: std::collections::HashSet<u64> = fresh.iter().copied().collect();
            assert!(kept.is_subset(&all), "seed {seed}");
            new_keys += all.len() as u64;
            lost += (all.len() - kept.len()) as u64;
        }
        let rate = lost as f64 / new_keys as f64;
        let se = (p / new_keys as f64).sqrt();
        assert!(rate <= p + 3.0 * se, "p = {p}: {lost} of {new_keys} new keys lost");
    }
}

/// `MIGHT_CONTAIN` against a table of 2000 random keys of which about half are then deleted,
/// over many seeds, beside the exact `IN`: every element the exact test passes is found (a
/// present key always is; deleted keys leave the counting filter), and the share of absent
/// keys found is at most p plus three standard errors of the measurement.
#[test]
fn might_contain_finds_every_present_key_and_few_absent_ones() {
    let seeds: u64 = std::env::var("SKETCH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let values = |keys: &[u64]| -> String {
        keys.iter().map(|k| format!("({k})")).collect::<Vec<_>>().join(", ")
    };
    for p in [0.05, 0.01] {
        let (mut absent, mut found_absent) = (0u64, 0u64);
        for seed in 0..seeds {
            let mut rng = Rng(seed ^ 0xB100);
            let mut e = Engine::new();
            e.execute(
                "CREATE TABLE k (v BIGINT); \
                 CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t)",
            )
            .unwrap();
            let approx = e
                .subscribe(&format!(
                    "SELECT ISTREAM v FROM s WHERE MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(v, \
                     1000, {p}) FROM k), v)"
                ))
                .unwrap();
            let exact =
                e.subscribe("SELECT ISTREAM v FROM s WHERE v IN (SELECT v FROM k)").unwrap();
            // 2000 keys from 0; the odd ones (about 1000) deleted at 1: at most the capacity
            // stays.
            let keys: Vec<u64> = (0..2_000).map(|_| rng.next() >> 1).collect();
            e.execute(&format!("INSERT INTO k VALUES {} AT 0", values(&keys))).unwrap();
            e.execute("DELETE FROM k WHERE v % 2 = 1 AT 1").unwrap();
            // Probes at 2: a third present keys, a third deleted ones, a third never seen.
            let (even, odd): (Vec<u64>, Vec<u64>) = keys.iter().partition(|k| *k % 2 == 0);
            let probes: Vec<String> = (0..3_000)
                .map(|i| {
                    let k = match i % 3 {
                        0 => even[rng.below(even.len() as u64) as usize],
                        1 => odd[rng.below(odd.len() as u64) as usize],
                        _ => rng.next() >> 1,
                    };
                    format!("({k}, 2)")
                })
                .collect();
            e.execute(&format!("INSERT INTO s VALUES {}", probes.join(", "))).unwrap();
            e.close_all().unwrap();
            let values_of = |sub: &weir::Subscription| -> Vec<u64> {
                let mut v: Vec<u64> = sub
                    .poll_changes()
                    .unwrap()
                    .iter()
                    .map(|c| c.to_string().rsplit_once(' ').unwrap().1.parse().unwrap())
                    .collect();
                v.sort_unstable();
                v
            };
            let (found, truly) = (values_of(&approx), values_of(&exact));
            // Every exact match is found: the exact result is a sub-multiset of the found one.
            let mut extra = found.clone();
            for v in &truly {
                let at = extra.binary_search(v).unwrap_or_else(|_| panic!("seed {seed}: {v} lost"));
                extra.remove(at);
            }
            assert!(truly.len() >= 1_000, "seed {seed}: {} present probes", truly.len());
            absent += (3_000 - truly.len()) as u64;
            found_absent += extra.len() as u64;
        }
        let rate = found_absent as f64 / absent as f64;
        let se = (p / absent as f64).sqrt();
        assert!(rate <= p + 3.0 * se, "p = {p}: {found_absent} of {absent} absent keys found");
        // Near p, not far below: the filter is sized for its capacity, not more.
        assert!(rate >= p / 4.0, "p = {p}: {found_absent} of {absent} absent keys found");
    }
}

const QUERIES: [&str; 14] = [
    "SELECT v % 3 AS k, APPROX_COUNT_DISTINCT(v, 6), COUNT(*) FROM s [RANGE 12 SLIDE 4] GROUP BY v % 3",
    "SELECT ISTREAM APPROX_COUNT_DISTINCT(v) FROM s [RANGE 5]",
    "SELECT APPROX_COUNT_DISTINCT(v, 4) FILTER (WHERE v > 10), COUNT(v) FROM s WHERE v <> 7",
    "SELECT v % 2, APPROX_COUNT_DISTINCT(v * 7, 5) FROM s [NOW] GROUP BY v % 2",
    // Compression 10: a sketch of more than 20 values is a digest, whose merges depend on
    // the order of instants and slices only. With 3 rows a tick, a window of these holds
    // about 36 and 27 values (merged digests of exact slices); the whole stream's sketch
    // settles its buffer into its digest at instants.
    "SELECT v % 3 AS k, APPROX_PERCENTILE(v * 1.5 + t, 0.3, 10), APPROX_MEDIAN(v), COUNT(*) \
     FROM s [RANGE 36 SLIDE 12] GROUP BY v % 3",
    "SELECT ISTREAM APPROX_PERCENTILE(v - t, 0.9, 10) FROM s [RANGE 9]",
    "SELECT APPROX_PERCENTILE(v + t / 7.0, 0.5, 10) FILTER (WHERE v > 10), COUNT(v) FROM s",
    // Capacities of 4 and 3 counters: the summaries drop counters (at up to 8 and 6 values).
    "SELECT v % 2 AS k, APPROX_TOP_K(v, 3, 4), COUNT(*) FROM s [RANGE 12 SLIDE 4] GROUP BY v % 2",
    "SELECT APPROX_TOP_K(v * 2, 2, 3) FROM s",
    // Eight keys a generation at a 20 % false-positive rate: generations rotate, and some new
    // keys are taken for seen ones.
    "SELECT v, t FROM s [DEDUPLICATE BY v CAPACITY 8 ERROR 0.2]",
    "SELECT v, t FROM s [SAMPLE 5 ROWS SEED 9]",
    "SELECT COUNT(*), SUM(v), MIN(t) FROM s [SAMPLE 7 ROWS]",
    // A filter of 8 values at 20 %, over a window that often holds more: false positives.
    "SELECT v, t FROM s WHERE MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(v, 8, 0.2) FROM s [RANGE 5]), v + 1)",
    "SELECT v FROM s WHERE v > 3 AND NOT MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(v * 2, 6, 0.3) FROM s [RANGE 4]), v)",
];

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("SKETCH_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(8),
        ..ProptestConfig::default()
    })]

    /// Batch sizes 1, 3 and 1024, elements shuffled within the watermark's 6 ticks, and two
    /// workers all give the output of one in-order run, change for change.
    #[test]
    fn output_does_not_depend_on_batching_disorder_or_workers(
        seed in 0u64..1_000,
        n in 1usize..200,
        distinct in 1u64..80,
    ) {
        let input = rows(seed, n, 3, distinct);
        let want = run(&QUERIES, &input, 1024, 1);
        for batch in [1, 3] {
            prop_assert_eq!(&run(&QUERIES, &input, batch, 1), &want);
        }
        // Disorder within the watermark delay: each row arrives as if stamped up to 5 ticks
        // later, so none is late (the watermark is 6 ticks behind the newest row).
        let mut rng = Rng(seed ^ 0xD15);
        let mut shuffled: Vec<(i64, (u64, i64))> =
            input.iter().map(|r| (r.1 + rng.below(6) as i64, *r)).collect();
        shuffled.sort_by_key(|(arrival, _)| *arrival);
        let shuffled: Vec<(u64, i64)> = shuffled.into_iter().map(|(_, r)| r).collect();
        // Disorder permutes rows that share a timestamp too; sketches do not see that order.
        prop_assert_eq!(&run(&QUERIES, &shuffled, 7, 1), &want);
        prop_assert_eq!(&run(&QUERIES, &input, 5, 2), &want);
    }
}

fn rows_of(e: &mut Engine, sql: &str) -> Vec<Vec<String>> {
    match e.execute(sql).unwrap().pop() {
        Some(ExecResult::Rows { batches, .. }) => {
            batches.iter().flat_map(|b| weir::format::rows_as_text(b).unwrap()).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// A checkpoint cut at any point restores the sketches (sparse and dense), the slices and the
/// pending window instants: the restored engine, given the rest of the input, ends where an
/// uninterrupted one ends, and a resumed subscriber sees the same changes.
#[test]
fn checkpoints_restore_sketch_state_exactly() {
    const SETUP: &str = "
CREATE STREAM s (v BIGINT, t BIGINT, WATERMARK FOR t AS t);
CREATE VIEW approx AS SELECT v % 4 AS k, APPROX_COUNT_DISTINCT(v, 6) AS n, COUNT(*) AS c
  FROM s [RANGE 40 SLIDE 10] GROUP BY v % 4;
CREATE VIEW whole AS SELECT APPROX_COUNT_DISTINCT(v, 10) AS n, APPROX_MEDIAN(v * 1.0 + t) AS m,
  APPROX_TOP_K(v, 4, 30) AS top FROM s;
";
    const SUBS: [&str; 7] = [
        "SELECT ISTREAM APPROX_COUNT_DISTINCT(v, 5) FROM s [RANGE 25 SLIDE 5]",
        "SELECT * FROM approx",
        "SELECT v % 3 AS k, APPROX_PERCENTILE(v - t, 0.8, 20) AS q FROM s [RANGE 40 SLIDE 10] \
         GROUP BY v % 3",
        "SELECT ISTREAM v % 2 AS k, APPROX_TOP_K(v, 3, 20) FROM s [RANGE 30 SLIDE 10] GROUP BY v % 2",
        "SELECT v, t FROM s [DEDUPLICATE BY v CAPACITY 50 ERROR 0.05]",
        "SELECT v, t FROM s [SAMPLE 20 ROWS SEED 5]",
        "SELECT v, t FROM s WHERE MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(v, 50, 0.05) FROM s \
         [RANGE 20]), v + 1)",
    ];
    let lines = |s: &weir::Subscription| -> Vec<String> {
        s.poll_changes().unwrap().iter().map(|c| c.to_string()).collect()
    };
    let input = rows(7, 3_000, 10, 500);
    let stmts = inserts(&input, 100);
    let mut a = Engine::new();
    a.execute(SETUP).unwrap();
    let subs_a: Vec<_> = SUBS.iter().map(|q| a.subscribe(q).unwrap()).collect();
    for s in &stmts {
        a.execute(s).unwrap();
    }
    a.close_all().unwrap();
    let want: Vec<Vec<String>> = subs_a.iter().map(lines).collect();
    let want_whole = rows_of(&mut a, "SELECT * FROM whole");
    assert!(want[1].len() > 40, "{:?}", want[1]);
    assert!(want[2].len() > 40, "{:?}", want[2]);

    for cut in [3, 17, 29] {
        let dir = std::env::temp_dir().join(format!("weir-sketch-{}-{cut}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut b, _) = Engine::open(&dir).unwrap();
        b.execute(SETUP).unwrap();
        let subs_b: Vec<_> = SUBS.iter().map(|q| b.subscribe(q).unwrap()).collect();
        for s in &stmts[..cut] {
            b.execute(s).unwrap();
        }
        let mut seen: Vec<Vec<String>> = subs_b.iter().map(lines).collect();
        b.execute("CHECKPOINT").unwrap();
        drop(subs_b);
        drop(b);
        let (mut c, recovery) = Engine::open(&dir).unwrap();
        assert!(recovery.checkpoint.is_some());
        let subs_c: Vec<_> = SUBS.iter().map(|q| c.resume(q).unwrap().0).collect();
        for s in &stmts[cut..] {
            c.execute(s).unwrap();
        }
        c.close_all().unwrap();
        for (seen, sub) in seen.iter_mut().zip(&subs_c) {
            seen.extend(lines(sub));
        }
        assert_eq!(seen, want, "cut after {cut} inserts");
        assert_eq!(rows_of(&mut c, "SELECT * FROM whole"), want_whole);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
