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
    /// Average price of each seller's last 10 auctions: each auction's winning bid so far
    /// (its maximum bid placed while it was open, as in q4: open auctions count with their
    /// best bid so far), and over each seller's auctions ordered by closing time, the average
    /// of the row's and the 9 before (`AVG ... OVER (... ROWS BETWEEN 9 PRECEDING AND CURRENT
    /// ROW)`, a window function over a relation). A relation: a new best bid changes the
    /// averages of at most 10 rows.
    Q6,
    /// Highest bid: the bids with the highest price in each 10 s tumbling window.
    Q7,
    /// Monitor new users: people who opened an auction in the same 10 s tumbling window as they
    /// registered.
    Q8,
    /// User sessions: how many bids each bidder made in each of their sessions, a session
    /// being a run of the bidder's bids each less than `session_gap` after the one before
    /// (`TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), gap))` grouped
    /// by bidder and the session's bounds, `ISTREAM`: each session once, when it closes).
    Q11,
    /// Winning bid of each auction: its highest bid placed while it was open, the earliest
    /// among equal prices (`ROW_NUMBER() OVER (PARTITION BY id ORDER BY price DESC,
    /// date_time) = 1` over the join: a top-1 per auction). A relation.
    Q9,
    /// Last bid of each bidder on each auction (`ROW_NUMBER() OVER (PARTITION BY bidder,
    /// auction ORDER BY date_time DESC) = 1`: deduplication keeping the last row). A relation.
    Q18,
    /// The 10 highest bids of each auction with their rank (`ROW_NUMBER() OVER (PARTITION BY
    /// auction ORDER BY price DESC, date_time) <= 10`: a top-N per auction; the reference
    /// orders by price only, date_time makes ties deterministic whatever the columns). A
    /// relation.
    Q19,
    /// The bid count and highest price per auction in each 10 s tumbling window, written as
    /// Flink users write it: `TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), ...))` grouped
    /// by `window_start, window_end, auction`, `ISTREAM`: each window's rows once, when it
    /// closes (the peers' "tumble" query, `../shared/peers/`).
    Tumble,
    /// The bid count per auction in each 10 s window sliding by 2 s, `TABLE(HOP(...))`
    /// grouped by `window_start, window_end, auction`, `ISTREAM` (the peers' "hop").
    Hop,
    /// [`Query::Tumble`]'s aggregate over the CQL window `[RANGE 10 SECONDS SLIDE 10 SECONDS]`,
    /// without the bounds: a relation of +1/−1 changes per auction. The cost the table
    /// function's form is held to.
    TumbleCql,
    /// [`Query::Hop`]'s aggregate over `[RANGE 10 SECONDS SLIDE 2 SECONDS]`, a relation.
    HopCql,
    /// The bid count and highest price per auction so far in each 10 s period, every 2 s:
    /// `TABLE(CUMULATE(TABLE bid, DESCRIPTOR(date_time), 2 s, 10 s))` grouped by
    /// `window_start, window_end, auction`, `ISTREAM` (Flink's cumulating window). Evaluated
    /// over shared slices: a bid enters the aggregate once, not once per window.
    Cumulate,
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
    /// q11's session gap.
    pub session_gap: i64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            q4_range: 10_000_000,
            q5_range: 10_000_000,
            q5_slide: 2_000_000,
            tumble: 10_000_000,
            session_gap: 10_000_000,
        }
    }
}

fn us(micros: i64) -> String {
    format!("INTERVAL '{micros}' MICROSECOND")
}

impl Query {
    pub const ALL: [Query; 18] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q6,
        Query::Q7,
        Query::Q8,
        Query::Q9,
        Query::Q11,
        Query::Q18,
        Query::Q19,
        Query::Tumble,
        Query::Hop,
        Query::TumbleCql,
        Query::HopCql,
        Query::Cumulate,
    ];

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
            Query::Q6 => "q6",
            Query::Q9 => "q9",
            Query::Q11 => "q11",
            Query::Q18 => "q18",
            Query::Q19 => "q19",
            Query::Tumble => "tumble",
            Query::Hop => "hop",
            Query::TumbleCql => "tumble_cql",
            Query::HopCql => "hop_cql",
            Query::Cumulate => "cumulate",
        }
    }

    /// The streams the query reads.
    pub fn streams(self) -> &'static [&'static str] {
        match self {
            Query::Q0
            | Query::Q1
            | Query::Q2
            | Query::Q5
            | Query::Q7
            | Query::Q11
            | Query::Q18
            | Query::Q19
            | Query::Tumble
            | Query::Hop
            | Query::TumbleCql
            | Query::HopCql
            | Query::Cumulate => &["bid"],
            Query::Q3 | Query::Q8 => &["person", "auction"],
            Query::Q4 | Query::Q6 | Query::Q9 => &["auction", "bid"],
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
            Query::Q6 => "SELECT seller, id, AVG(final) OVER (PARTITION BY seller \
                           ORDER BY expires, id ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) \
                           AS avg_price FROM ( \
                             SELECT a.id, a.seller, a.expires, MAX(b.price) AS final \
                             FROM auction AS a JOIN bid AS b ON a.id = b.auction \
                             WHERE b.date_time BETWEEN a.date_time AND a.expires \
                             GROUP BY a.id, a.seller, a.expires) AS w"
                .into(),
            Query::Q9 => "SELECT id, seller, category, bidder, price, bid_time FROM ( \
                            SELECT a.id, a.seller, a.category, b.bidder, b.price, \
                              b.date_time AS bid_time, ROW_NUMBER() OVER (PARTITION BY a.id \
                              ORDER BY b.price DESC, b.date_time) AS rn \
                            FROM auction AS a JOIN bid AS b ON a.id = b.auction \
                            WHERE b.date_time BETWEEN a.date_time AND a.expires) AS w \
                          WHERE rn = 1"
                .into(),
            Query::Q11 => format!(
                "SELECT ISTREAM bidder, COUNT(*) AS bid_count, window_start AS starttime, \
                   window_end AS endtime \
                 FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), {g})) \
                 GROUP BY bidder, window_start, window_end",
                g = us(p.session_gap)
            ),
            Query::Q18 => "SELECT auction, bidder, price, date_time FROM ( \
                             SELECT auction, bidder, price, date_time, ROW_NUMBER() OVER \
                               (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rn \
                             FROM bid) AS w \
                           WHERE rn = 1"
                .into(),
            Query::Q19 => "SELECT auction, bidder, price, date_time, rn FROM ( \
                             SELECT auction, bidder, price, date_time, ROW_NUMBER() OVER \
                               (PARTITION BY auction ORDER BY price DESC, date_time) AS rn \
                             FROM bid) AS w \
                           WHERE rn <= 10"
                .into(),
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
            Query::Tumble => format!(
                "SELECT ISTREAM window_start, window_end, auction, COUNT(*) AS cnt, \
                   MAX(price) AS max_price \
                 FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), {w})) \
                 GROUP BY window_start, window_end, auction",
                w = us(p.tumble)
            ),
            Query::Hop => format!(
                "SELECT ISTREAM window_start, window_end, auction, COUNT(*) AS cnt \
                 FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), {s}, {r})) \
                 GROUP BY window_start, window_end, auction",
                r = us(p.q5_range),
                s = us(p.q5_slide)
            ),
            Query::TumbleCql => format!(
                "SELECT auction, COUNT(*) AS cnt, MAX(price) AS max_price \
                 FROM bid [RANGE {w} SLIDE {w}] GROUP BY auction",
                w = us(p.tumble)
            ),
            Query::HopCql => format!(
                "SELECT auction, COUNT(*) AS cnt FROM bid [RANGE {r} SLIDE {s}] GROUP BY auction",
                r = us(p.q5_range),
                s = us(p.q5_slide)
            ),
            Query::Cumulate => format!(
                "SELECT ISTREAM window_start, window_end, auction, COUNT(*) AS cnt, \
                   MAX(price) AS max_price \
                 FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(date_time), {s}, {w})) \
                 GROUP BY window_start, window_end, auction",
                s = us(p.q5_slide),
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
