//! What the wire costs: `COPY FROM STDIN` ingest and subscription delivery through a socket,
//! beside the same work in process, in one run.
//!
//! ```sh
//! cargo run --release -p weir-server --example wire_bench -- --rows 2000000
//! ```
//!
//! Both runs take the same CSV (`k,v,t`, one instant per row) into a stream read by one
//! continuous query (`SELECT k, v FROM s`, every row delivered). In process: the engine's
//! `copy_in`/`copy_data` in 64 KiB chunks, and a `Subscription` polled after each chunk. Over
//! the wire: a server on loopback, one tokio-postgres client copying the chunks in, another
//! reading the changes with `COPY (SUBSCRIBE ...) TO STDOUT`. Ingest is rows per second until
//! the COPY completes; delivery is rows per second until the subscriber has every row. The
//! server's subscriber buffer is raised to the run's size: at the default (1 M rows) a COPY
//! this fast outruns the reading client and its subscription is cut off (docs/server.md).

#![allow(clippy::unwrap_used)] // a benchmark: a panic is a failed run

use std::time::Instant;

use futures::{SinkExt, StreamExt};
use tokio_postgres::NoTls;
use weir_server::{Config, Server};

const STREAM: &str = "CREATE STREAM s (k BIGINT, v BIGINT, t BIGINT, WATERMARK FOR t AS t)";
const QUERY: &str = "SELECT k, v FROM s";
const CHUNK: usize = 64 * 1024;

fn csv(rows: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows * 24);
    for i in 0..rows {
        out.extend_from_slice(format!("{},{},{}\n", i % 1000, i * 7 % 10_007, i).as_bytes());
    }
    out
}

/// Chunks of about `CHUNK` bytes, cut at line ends (a client may cut anywhere; this keeps the
/// two runs' batches alike).
fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < data.len() {
        let mut end = (start + CHUNK).min(data.len());
        while end < data.len() && data[end - 1] != b'\n' {
            end += 1;
        }
        out.push(&data[start..end]);
        start = end;
    }
    out
}

fn in_process(data: &[u8], rows: usize) -> (f64, f64) {
    let mut engine = weir::Engine::new();
    engine.execute(STREAM).unwrap();
    let sub = engine.subscribe(QUERY).unwrap();
    let start = Instant::now();
    let mut copy =
        engine.copy_in("s", weir::Format::Csv { header: false, delimiter: b',' }, "us").unwrap();
    let mut delivered = 0;
    for c in chunks(data) {
        engine.copy_data(&mut copy, c).unwrap();
        delivered += sub.poll().unwrap().iter().map(|b| b.data.num_rows()).sum::<usize>();
    }
    engine.copy_done(copy).unwrap();
    let ingest = start.elapsed().as_secs_f64();
    engine.close("s").unwrap();
    delivered += sub.poll().unwrap().iter().map(|b| b.data.num_rows()).sum::<usize>();
    let delivery = start.elapsed().as_secs_f64();
    assert_eq!(delivered, rows);
    (rows as f64 / ingest, rows as f64 / delivery)
}

async fn over_the_wire(data: &[u8], rows: usize) -> (f64, f64) {
    // The subscriber reads as fast as it can, but the COPY produces faster than a socket
    // carries it: let the whole run wait for it rather than cut it off.
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        subscriber_buffer: rows + 1,
        ..Config::default()
    };
    let server = Server::bind(config).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    let conn = format!("host=127.0.0.1 port={} user=weir", addr.port());
    let (writer, c1) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
    tokio::spawn(c1);
    let (reader, c2) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
    tokio::spawn(c2);
    writer.batch_execute(STREAM).await.unwrap();
    let changes = reader.copy_out(&format!("COPY (SUBSCRIBE ({QUERY})) TO STDOUT")).await.unwrap();
    let start = Instant::now();
    let read = tokio::spawn(async move {
        let mut changes = Box::pin(changes);
        let mut lines = 0usize;
        while lines < rows {
            let chunk = changes.next().await.unwrap().unwrap();
            lines += chunk.iter().filter(|b| **b == b'\n').count();
        }
        lines
    });
    let sink = writer.copy_in("COPY s FROM STDIN").await.unwrap();
    let mut sink = Box::pin(sink);
    for c in chunks(data) {
        sink.send(bytes::Bytes::copy_from_slice(c)).await.unwrap();
    }
    sink.as_mut().finish().await.unwrap();
    let ingest = start.elapsed().as_secs_f64();
    writer.batch_execute("CLOSE s").await.unwrap();
    assert_eq!(read.await.unwrap(), rows);
    let delivery = start.elapsed().as_secs_f64();
    (rows as f64 / ingest, rows as f64 / delivery)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() {
    let mut rows = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--rows" {
            rows = args.next().and_then(|v| v.parse().ok()).expect("--rows N");
        }
    }
    let data = csv(rows);
    let (ingest, delivery) = in_process(&data, rows);
    println!("in process:    COPY ingest {ingest:>12.0} rows/s   delivery {delivery:>12.0} rows/s");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (ingest, delivery) = runtime.block_on(over_the_wire(&data, rows));
    println!("over the wire: COPY ingest {ingest:>12.0} rows/s   delivery {delivery:>12.0} rows/s");
    println!(
        "rows {rows}, CSV {} bytes, peak RSS of the process {:.0} MiB",
        data.len(),
        peak_rss_mib()
    );
}
