//! The workload the crash and cluster tests run: a script of many continuous queries (windows,
//! a join, aggregates, views over views, DISTINCT, DSTREAM, the late and unreadable rows of
//! `bids$late` and `bids$errors`, a sink whose query fails at a division by zero part way
//! through, and one on a full disk, Linux's `/dev/full`, which fails at its first write) over
//! CSV files, written into file sinks; and how to read what the sinks wrote.
#![allow(dead_code)] // each test binary uses its part

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub const SCRIPT: &str = "\
CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, t BIGINT,
                    WATERMARK FOR t AS t - 5)
  WITH (source = 'file', path = 'data/bids-*.csv', bad_rows = 'skip');
CREATE STREAM auctions (id BIGINT, seller BIGINT, t BIGINT, WATERMARK FOR t AS t)
  WITH (source = 'file', path = 'data/auctions.csv');
CREATE VIEW hot AS
  SELECT auction, COUNT(*) AS n, MAX(price) AS best FROM bids [RANGE 50 SLIDE 10] GROUP BY auction;
CREATE VIEW very_hot AS SELECT auction, n FROM hot WHERE n > 3;
CREATE SINK hot_out WITH (path = 'out/hot.csv') AS SELECT ISTREAM auction, n, best FROM hot;
CREATE SINK very_hot_out WITH (path = 'out/very_hot.jsonl') AS SELECT * FROM very_hot;
CREATE SINK sellers WITH (path = 'out/sellers.csv') AS
  SELECT ISTREAM a.seller, b.price FROM bids [RANGE 20] AS b, auctions [RANGE 100] AS a
  WHERE b.auction = a.id AND b.price > 900;
CREATE SINK bidders WITH (path = 'out/bidders.csv') AS
  SELECT DSTREAM DISTINCT bidder FROM bids [ROWS 30];
CREATE SINK late WITH (path = 'out/late.csv') AS SELECT * FROM bids$late;
CREATE SINK unreadable WITH (path = 'out/unreadable.jsonl') AS SELECT * FROM bids$errors;
CREATE SINK ratio WITH (path = 'out/ratio.csv') AS
  SELECT ISTREAM auction, 1000 / (price - 997) AS r FROM bids;
CREATE SINK full WITH (path = '/dev/full', format = 'json') AS SELECT ISTREAM auction FROM bids;
CREATE SINK per_bidder WITH (path = 'out/per_bidder.csv') AS
  SELECT ISTREAM bidder, COUNT(*) AS n, SUM(price) AS total FROM bids [UNBOUNDED] GROUP BY bidder;
CREATE SINK pairs WITH (path = 'out/pairs.csv') AS
  SELECT ISTREAM DISTINCT b.auction, a.seller FROM bids [UNBOUNDED] AS b, auctions [UNBOUNDED] AS a
  WHERE b.auction = a.id;
";

/// A small deterministic generator (xorshift).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes the script and its input files into `dir`.
pub fn workload(dir: &Path, seed: u64, scale: u64) {
    let mut rng = Rng(seed | 1);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("w.sql"), SCRIPT).unwrap();
    let mut auctions = String::from("id,seller,t\n");
    for id in 0..400 * scale {
        writeln!(auctions, "{id},{},{}", rng.below(50), id * 10).unwrap();
    }
    std::fs::write(dir.join("data/auctions.csv"), auctions).unwrap();
    let mut t = 0u64;
    // Twelve files (times the scale), each taken in by a read of its own: a checkpoint can
    // follow each.
    for part in 0..12 * scale {
        let mut bids = String::from("auction,bidder,price,t\n");
        for _ in 0..3_000 {
            t += rng.below(2);
            // Up to 4 ticks of disorder, within the declared 5; one row in 400 is 60 ticks
            // late, one in 500 unreadable.
            let mut ts = t.saturating_sub(rng.below(5));
            if rng.below(400) == 0 {
                ts = ts.saturating_sub(60);
            }
            let auction = (t / 10).saturating_sub(rng.below(20));
            let price = match rng.below(500) {
                0 => "x".to_string(),
                // The ratio sink fails at its first price of 997, some way into the input.
                _ if t < 3000 => (rng.below(1000) % 997).to_string(),
                _ => rng.below(1000).to_string(),
            };
            writeln!(bids, "{auction},{},{price},{ts}", rng.below(300)).unwrap();
        }
        std::fs::write(dir.join(format!("data/bids-{part}.csv")), bids).unwrap();
    }
}

pub fn outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir.join("out")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .into_iter()
        .map(|f| (f.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(f).unwrap()))
        .collect()
}
