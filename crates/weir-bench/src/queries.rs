//! The NEXMark queries in Weir SQL (CQL).
//!
//! Each query is written the way CQL expresses it most directly; where CQL's model differs from
//! the reference formulation, the doc of [`Query`] says how. Window sizes are parameters
//! ([`Params`]) so that the tests can run the same queries on a few thousand events; the
//! benchmark uses [`Params::default`] (the reference sizes: 10 s windows sliding by 2 s for
//! q5, 10 s tumbling windows for q7 and q8).

use std::fmt;

/// The queries the benchmark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Query {
    /// Pass-through: every bid, unchanged (measures the engine's fixed cost per event).
    Q0,
    /// Currency conversion: every bid with its price in euros (`0.908 · price`).
    Q1,
    /// Selection: the bids on auctions whose id is a multiple of 123.
    Q2,
    /// Local item suggestion: an incremental join of all auctions in category 10 with their
    /// sellers living in Oregon, Idaho or California (both streams unbounded).
    Q3,
    /// Average closing price per category. CQL version: each auction of the last `q4_range`
    /// joined with the bids placed while it was open; the maximum bid per auction; their
    /// average per category, as a relation that changes as bids arrive and auctions leave the
    /// window. (The reference counts only auctions already closed; CQL has no "now" to compare
    /// `expires` with, so open auctions count with their best bid so far.) The window must be
    /// longer than any auction (the generator's auctions last under a second at 10 000
    /// events/s).
    Q4,
    /// Hot items: the auctions with the most bids in the last 10 s, every 2 s. The maximum
    /// count is joined back to the counts, so ties all appear.
    Q5,
    /// Highest bid: the bids with the highest price in each 10 s tumbling window.
    Q7,
    /// Monitor new users: people who opened an auction in the same 10 s tumbling window as they
    /// registered.
    Q8,
}

/// Window sizes, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// q4's window over auctions and bids.
    pub q4_range: i64,
    /// q5's window and slide.
    pub q5_range: i64,
    pub q5_slide: i64,
    /// q7's and q8's tumbling window.
    pub tumble: i64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            q4_range: 10_000_000,
            q5_range: 10_000_000,
            q5_slide: 2_000_000,
            tumble: 10_000_000,
        }
    }
}

fn us(micros: i64) -> String {
    format!("INTERVAL '{micros}' MICROSECOND")
}

impl Query {
    pub const ALL: [Query; 8] =
        [Query::Q0, Query::Q1, Query::Q2, Query::Q3, Query::Q4, Query::Q5, Query::Q7, Query::Q8];

    pub fn parse(name: &str) -> Option<Query> {
        Query::ALL.into_iter().find(|q| q.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
        }
    }

    /// The streams the query reads.
    pub fn streams(self) -> &'static [&'static str] {
        match self {
            Query::Q0 | Query::Q1 | Query::Q2 | Query::Q5 | Query::Q7 => &["bid"],
            Query::Q3 | Query::Q8 => &["person", "auction"],
            Query::Q4 => &["auction", "bid"],
        }
    }

    /// The query text with the given window sizes.
    pub fn sql(self, p: &Params) -> String {
        match self {
            Query::Q0 => "SELECT ISTREAM auction, bidder, price, date_time, extra FROM bid".into(),
            Query::Q1 => {
                "SELECT ISTREAM auction, bidder, 0.908 * price AS price, date_time, extra \
                          FROM bid"
                    .into()
            }
            Query::Q2 => "SELECT ISTREAM auction, price FROM bid WHERE auction % 123 = 0".into(),
            Query::Q3 => "SELECT ISTREAM p.name, p.city, p.state, a.id \
                          FROM auction AS a JOIN person AS p ON a.seller = p.id \
                          WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')"
                .into(),
            Query::Q4 => format!(
                "SELECT category, AVG(final) AS avg_price FROM ( \
                   SELECT a.id, a.category, MAX(b.price) AS final \
                   FROM auction [RANGE {r}] AS a JOIN bid [RANGE {r}] AS b ON a.id = b.auction \
                   WHERE b.date_time BETWEEN a.date_time AND a.expires \
                   GROUP BY a.id, a.category) AS winners \
                 GROUP BY category",
                r = us(p.q4_range)
            ),
            // The counts are written twice: the binder does not yet see a WITH name inside a
            // subquery in FROM.
            Query::Q5 => format!(
                "SELECT ISTREAM c.auction, c.num \
                 FROM (SELECT auction, COUNT(*) AS num FROM bid [RANGE {r} SLIDE {s}] \
                       GROUP BY auction) AS c \
                 JOIN (SELECT MAX(num) AS top FROM \
                         (SELECT auction, COUNT(*) AS num FROM bid [RANGE {r} SLIDE {s}] \
                          GROUP BY auction) AS c2) AS m \
                 ON c.num = m.top",
                r = us(p.q5_range),
                s = us(p.q5_slide)
            ),
            Query::Q7 => format!(
                "SELECT ISTREAM b.auction, b.price, b.bidder, b.date_time \
                 FROM bid [RANGE {w} SLIDE {w}] AS b \
                 JOIN (SELECT MAX(price) AS top FROM bid [RANGE {w} SLIDE {w}]) AS m \
                 ON b.price = m.top",
                w = us(p.tumble)
            ),
            Query::Q8 => format!(
                "SELECT ISTREAM p.id, p.name \
                 FROM person [RANGE {w} SLIDE {w}] AS p \
                 JOIN auction [RANGE {w} SLIDE {w}] AS a ON p.id = a.seller \
                 GROUP BY p.id, p.name",
                w = us(p.tumble)
            ),
        }
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
