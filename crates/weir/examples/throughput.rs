//! A rough throughput probe for the executor (the NEXMark benchmark is a separate crate):
//! pushes N generated events through one continuous query and prints events/s and peak RSS.
//!
//! `cargo run --release -p weir --example throughput -- [EVENTS] [BATCH] [QUERY]`
//! QUERY is one of: filter, range_count, slide_max, rows_partition, join.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use weir::Engine;

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let events: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let batch: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let query = args.get(3).map(String::as_str).unwrap_or("range_count");
    let sql = match query {
        "filter" => "SELECT ISTREAM auction, price * 2 AS p FROM bids WHERE price > 500",
        "range_count" => {
            "SELECT auction, COUNT(*), MAX(price) FROM bids [RANGE 1000] GROUP BY auction"
        }
        "slide_max" => {
            "SELECT ISTREAM auction, MAX(price) FROM bids [RANGE 10000 SLIDE 1000] GROUP BY auction"
        }
        "rows_partition" => {
            "SELECT auction, SUM(price) FROM bids [PARTITION BY auction ROWS 10] GROUP BY auction"
        }
        "join" => {
            "SELECT ISTREAM a.auction, b.price FROM bids [RANGE 100] a JOIN bids [RANGE 100] b \
             ON a.auction = b.auction WHERE a.price > b.price + 900"
        }
        other => anyhow::bail!("unknown query {other}"),
    };
    let mut engine = Engine::new();
    engine.execute(
        "CREATE STREAM bids (auction BIGINT, price BIGINT, t BIGINT, WATERMARK FOR t AS t)",
    )?;
    let sub = engine.subscribe(sql)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
    ]));
    // Deterministic pseudo-random bids, 10 per tick, 1000 auctions.
    let mut x: u64 = 42;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut batches = Vec::new();
    let mut i = 0;
    while i < events {
        let n = batch.min(events - i);
        let auction: Vec<i64> = (0..n).map(|_| (next() % 1000) as i64).collect();
        let price: Vec<i64> = (0..n).map(|_| (next() % 1000) as i64).collect();
        let t: Vec<i64> = (i..i + n).map(|j| (j / 10) as i64).collect();
        batches.push(RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(auction)),
                Arc::new(Int64Array::from(price)),
                Arc::new(Int64Array::from(t)),
            ],
        )?);
        i += n;
    }
    let start = Instant::now();
    let mut out = 0usize;
    for b in batches {
        engine.push("bids", b)?;
        out += sub.poll()?.iter().map(|c| c.len()).sum::<usize>();
    }
    engine.close_all()?;
    out += sub.poll()?.iter().map(|c| c.len()).sum::<usize>();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "query={query} events={events} batch={batch} seconds={secs:.3} events/s={:.0} output_changes={out} peak_rss_mb={:.1}",
        events as f64 / secs,
        peak_rss_mb()
    );
    Ok(())
}
