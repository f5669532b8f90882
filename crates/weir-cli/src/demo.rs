//! `weir demo`: the REPL with a stream of auction bids flowing in real time.
//!
//! A seeded generator (the same bids in the same order on every run) pushes a few bids a
//! second into the stream `bids`, each stamped with the wall-clock time (UTC, to the
//! millisecond) it is due at, and sends a heartbeat (`ADVANCE bids TO` the last whole second)
//! every second, so windows close on time even when no bid arrives.

use weir::{Engine, Value};
use weir_common::rng::SplitMix64;

/// The stream and table the demo starts with.
pub const SETUP: &str = "\
CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP,
                    WATERMARK FOR ts AS ts);
CREATE TABLE auctions (id BIGINT, item VARCHAR, reserve BIGINT);
INSERT INTO auctions VALUES (1, 'bicycle', 150), (2, 'camera', 300), (3, 'guitar', 200),
                            (4, 'lamp', 60), (5, 'piano', 900);
";

/// Printed when the demo starts.
pub const INTRO: &str = "\
Demo: bids are arriving on the stream `bids` (auction, bidder, price, ts), about three a
second, stamped with the current time (UTC). The table `auctions` (id, item, reserve) lists
what is on sale. Try one of these (each keeps running; Ctrl-C stops the latest):

  SELECT auction, bidder, price FROM bids;
  SELECT ISTREAM auction, COUNT(*) AS n, MAX(price) AS best
    FROM bids [RANGE 10 SECONDS SLIDE 5 SECONDS] GROUP BY auction;
  SELECT auction, MAX(price) AS best FROM bids [RANGE 30 SECONDS] GROUP BY auction;
  SELECT ISTREAM a.item, b.bidder, b.price FROM bids [NOW] b
    JOIN auctions a ON b.auction = a.id WHERE b.price >= a.reserve;
  INSERT INTO auctions VALUES (6, 'telescope', 400);   -- while the join runs

\\d lists what exists, \\help shows the commands.
";

/// The generator's seed: every demo sends the same bids.
pub const SEED: u64 = 0x5EED_B1D5;

/// One made-up bid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bid {
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    /// Milliseconds since the epoch.
    pub at_ms: i64,
}

/// Bids are this far apart, in milliseconds (about three a second).
const GAP_MS: (i64, i64) = (100, 550);
/// After a stall longer than this (a suspended laptop), the generator skips ahead instead of
/// sending every bid it missed.
const MAX_CATCH_UP_MS: i64 = 10_000;

/// Where each auction's price starts.
const START_PRICES: [i64; 6] = [100, 250, 150, 40, 700, 300];

/// The bid generator. [`Generator::tick`] is called a few times a second.
#[derive(Debug, Clone)]
pub struct Generator {
    rng: SplitMix64,
    /// Each auction's going price.
    prices: [i64; 6],
    next: Bid,
    /// The last heartbeat, in whole seconds since the epoch.
    last_second: i64,
    pub sent: u64,
}

impl Generator {
    /// A generator whose first bid is due shortly after `now_ms`.
    pub fn new(seed: u64, now_ms: i64) -> Self {
        let mut g = Generator {
            rng: SplitMix64::new(seed),
            prices: START_PRICES,
            next: Bid { auction: 0, bidder: 0, price: 0, at_ms: now_ms },
            last_second: now_ms.div_euclid(1000),
            sent: 0,
        };
        g.next = g.make(now_ms);
        g
    }

    /// The bid after one due at `after_ms`.
    fn make(&mut self, after_ms: i64) -> Bid {
        let gap = self.rng.between(GAP_MS.0, GAP_MS.1);
        let auction = self.rng.between(1, 6);
        let bidder = self.rng.between(100, 140);
        let slot = usize::try_from(auction - 1).unwrap_or(0).min(self.prices.len() - 1);
        // Prices creep up, with the odd lowball bid; now and then an auction ends and the
        // next one on that slot starts low.
        let step = self.rng.between(-20, 40);
        let price = (self.prices[slot] + step).max(10);
        if step > 0 {
            self.prices[slot] = price;
        }
        if self.prices[slot] > 3 * START_PRICES[slot] {
            self.prices[slot] = START_PRICES[slot];
        }
        Bid { auction, bidder, price, at_ms: after_ms.saturating_add(gap) }
    }

    /// The bids due by `now_ms`, in order (the generator moves past them).
    pub fn due(&mut self, now_ms: i64) -> Vec<Bid> {
        if now_ms.saturating_sub(self.next.at_ms) > MAX_CATCH_UP_MS {
            self.next.at_ms = now_ms;
        }
        let mut out = Vec::new();
        while self.next.at_ms <= now_ms {
            let bid = self.next;
            out.push(bid);
            self.next = self.make(bid.at_ms);
        }
        out
    }

    /// Pushes the bids due by `now_ms` into `bids`, then, once per second, a heartbeat at the
    /// last whole second (every later bid is stamped after it).
    pub fn tick(&mut self, engine: &mut Engine, now_ms: i64) -> weir::Result<()> {
        let bids = self.due(now_ms);
        if !bids.is_empty() {
            // A bid typed at the prompt (`INSERT INTO bids VALUES (..., now())`) may have moved
            // the watermark past bids not sent yet: those are stamped at the watermark, not
            // rejected as late.
            let floor = engine
                .watermark("bids")
                .map(|w| w.clamp(i128::from(i64::MIN), i128::from(i64::MAX)))
                .and_then(|w| i64::try_from(w).ok())
                .unwrap_or(i64::MIN);
            let rows: Vec<Vec<Value>> = bids
                .iter()
                .map(|b| {
                    let ts = b.at_ms.saturating_mul(1000).max(floor);
                    vec![
                        Value::Int64(Some(b.auction)),
                        Value::Int64(Some(b.bidder)),
                        Value::Int64(Some(b.price)),
                        Value::TimestampMicrosecond(Some(ts), None),
                    ]
                })
                .collect();
            engine.push_rows("bids", &rows)?;
            self.sent += bids.len() as u64;
        }
        let second = now_ms.div_euclid(1000);
        if second > self.last_second {
            self.last_second = second;
            let t = second.saturating_mul(1_000_000);
            // Only a heartbeat past the watermark says something new.
            if engine.watermark("bids").is_some_and(|w| i128::from(t) >= w) {
                engine.advance("bids", t)?;
            }
        }
        Ok(())
    }
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    let since =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_bids() {
        let mut a = Generator::new(SEED, 1_000_000);
        let mut b = Generator::new(SEED, 1_000_000);
        let bids = a.due(1_010_000);
        assert_eq!(bids, b.due(1_010_000));
        // About three a second, in time order, spread over the auctions.
        assert!((15..=60).contains(&bids.len()), "{}", bids.len());
        assert!(bids.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
        assert!(bids.iter().all(|b| (1..=6).contains(&b.auction) && (10..4000).contains(&b.price)));
        assert!((1..=6).all(|a| bids.iter().any(|b| b.auction == a)));
    }

    #[test]
    fn a_long_stall_skips_ahead() {
        let mut g = Generator::new(SEED, 0);
        let bids = g.due(3_600_000);
        assert!(bids.len() < 60, "{}", bids.len());
    }

    #[test]
    fn bids_flow_into_the_engine_and_windows_close() {
        let mut engine = Engine::new();
        engine.execute(SETUP).unwrap();
        let start = 1_714_564_800_000; // 2024-05-01T12:00:00
        let mut g = Generator::new(SEED, start);
        let all = engine.subscribe("SELECT auction, price FROM bids").unwrap();
        let counts = engine
            .subscribe("SELECT ISTREAM COUNT(*) AS n FROM bids [RANGE 2 SECONDS SLIDE 2 SECONDS]")
            .unwrap();
        for step in 1..=50 {
            g.tick(&mut engine, start + step * 100).unwrap();
        }
        let seen = all.poll_changes().unwrap();
        assert!(
            seen.len() as u64 + 3 >= g.sent && !seen.is_empty(),
            "{} of {}",
            seen.len(),
            g.sent
        );
        assert!(seen[0].time_text.starts_with("2024-05-01T12:00:00."), "{}", seen[0]);
        // A bid typed in, stamped ahead of the generator's next ones, does not stop it.
        let ahead = start + 5_300;
        engine
            .execute("INSERT INTO bids VALUES (1, 999, 5, TIMESTAMP '2024-05-01 12:00:05.300')")
            .unwrap();
        let before = g.sent;
        for step in 51..=60 {
            g.tick(&mut engine, start + step * 100).unwrap();
        }
        assert!(g.sent > before);
        let late = all.poll_changes().unwrap();
        assert!(late.iter().all(|c| c.time >= ahead * 1000), "{late:?}");
        // Heartbeats close the 2-second windows ending at :02 and :04.
        let counts = counts.poll_changes().unwrap();
        let times: Vec<&str> = counts.iter().map(|c| c.time_text.as_str()).collect();
        assert!(times.contains(&"2024-05-01T12:00:01.999999"), "{times:?}");
        assert!(times.contains(&"2024-05-01T12:00:03.999999"), "{times:?}");
    }
}
