//! Cost probes for window functions (issue #12): the per-event cost of a top-N per partition at
//! two partition sizes, and the state per key of keep-first deduplication.
//!
//! `cargo run --release -p weir --example window_fns -- QUERY PARTITION_SIZE [MEASURED_EVENTS]
//! [PARTITIONS]`
//!
//! QUERY: `topn` (top 10 by price per auction over `[PARTITION BY auction ROWS P]`), `rows`
//! (the same window without the ranking: the baseline to subtract), `full` (the full
//! ROW_NUMBER of that window, for contrast), `dedup` (keep-first per auction over the whole
//! stream, PARTITION_SIZE distinct auctions, one event each), `passthrough` (the baseline
//! for `dedup`: `SELECT ISTREAM` of the same events), `streamtopn` (top 10 by price per
//! auction over the whole stream: an insert-only input, so only the top is kept; the
//! partitions have PARTITION_SIZE rows seen when the timing starts) and `streamrows` (its
//! baseline: `SELECT ISTREAM` of the same events).
//!
//! For `topn`, `rows` and `full`: PARTITIONS auctions (10 by default); the windows are first
//! filled (P events per auction, untimed), then MEASURED_EVENTS more are timed, each entering
//! its auction's window and pushing the oldest out, with a random price (so it rarely enters
//! the top 10). Prints ns/event. The same total state (P x PARTITIONS rows) at two partition
//! sizes separates the cost of a partition's size from that of the state's size (cache
//! misses). For `dedup` and `passthrough`: prints the peak RSS after the run; the difference
//! divided by the number of keys is the state per key.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use weir::Engine;

fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

const BATCH: usize = 1000;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let query = args.get(1).map(String::as_str).unwrap_or("topn");
    let p: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let measured: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let auctions: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(10).max(1);
    let window = format!("bids [PARTITION BY auction ROWS {p}]");
    let sql = match query {
        "topn" => format!(
            "SELECT auction, price, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction \
             ORDER BY price DESC) AS rn FROM {window}) WHERE rn <= 10"
        ),
        "full" => format!(
            "SELECT auction, price, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) \
             FROM {window}"
        ),
        "rows" => format!("SELECT auction, price FROM {window}"),
        "dedup" => "SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY \
                    auction ORDER BY t) AS rn FROM bids) WHERE rn = 1"
            .to_string(),
        "passthrough" | "streamrows" => "SELECT ISTREAM auction, price FROM bids".to_string(),
        "streamtopn" => "SELECT auction, price, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION \
                         BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 10"
            .to_string(),
        other => anyhow::bail!("unknown query {other}"),
    };
    let mut engine = Engine::new();
    engine.execute(
        "CREATE STREAM bids (auction BIGINT, price BIGINT, t BIGINT, WATERMARK FOR t AS t)",
    )?;
    let sub = engine.subscribe(&sql)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let mut x: u64 = 42;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let dedup = matches!(query, "dedup" | "passthrough");
    // Event i: auction i mod 10 (i itself for dedup), t = i.
    let mut batch_at = |from: u64, n: u64| -> anyhow::Result<RecordBatch> {
        let auction: Vec<i64> =
            (from..from + n).map(|i| if dedup { i } else { i % auctions } as i64).collect();
        let price: Vec<i64> = (0..n).map(|_| (rand() % 1_000_000_000) as i64).collect();
        let t: Vec<i64> = (from..from + n).map(|i| i as i64).collect();
        Ok(RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(auction)),
                Arc::new(Int64Array::from(price)),
                Arc::new(Int64Array::from(t)),
            ],
        )?)
    };
    let mut run = |engine: &mut Engine, from: u64, n: u64| -> anyhow::Result<usize> {
        let mut out = 0;
        let mut i = from;
        while i < from + n {
            let k = (BATCH as u64).min(from + n - i);
            engine.push("bids", batch_at(i, k)?)?;
            for b in sub.poll()? {
                out += b.len();
            }
            i += k;
        }
        Ok(out)
    };
    if dedup {
        let rss0 = peak_rss_kb();
        let start = Instant::now();
        let out = run(&mut engine, 0, p)?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{query}: {p} keys, {out} outputs, {:.0} ns/event, peak RSS {} KiB (before {} KiB)",
            secs * 1e9 / p as f64,
            peak_rss_kb(),
            rss0
        );
        return Ok(());
    }
    let fill = p * auctions;
    run(&mut engine, 0, fill)?;
    let start = Instant::now();
    let out = run(&mut engine, fill, measured)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{query}: {auctions} partitions of {p} rows, {measured} events timed, {out} output \
         changes, {:.0} ns/event",
        secs * 1e9 / measured as f64
    );
    Ok(())
}
