//! The NEXMark queries in Weir SQL (CQL).
//!
//! Each query is written the way CQL expresses it most directly; where CQL's model differs from
//! the reference formulation, the doc of [`Query`] says how. Window sizes are parameters
//! ([`Params`]) so that the tests can run the same queries on a few thousand events; the
//! benchmark uses [`Params::default`] (the reference sizes: 10 s windows sliding by 2 s for
//! q5, 10 s tumbling windows for q7 and q8).

use std::fmt;

use crate::generator;

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
    /// Processing-time windows: how many bids each bidder made in each 10 s tumbling window
    /// of *processing* time (`TABLE(TUMBLE(TABLE bid, DESCRIPTOR(p_time), 10 s))` grouped by
    /// bidder and the window, `ISTREAM`), the bid stream declared with `p_time AS PROCTIME()`
    /// and no event time ([`Query::ddl`]): each bid is stamped when the engine takes it in,
    /// and a window's counts come out when the processing clock passes its end.
    Q12,
    /// Bounded side input join: every bid with the value that a side table of
    /// [`SIDE_INPUT_KEYS`] rows (loaded before the stream starts, see [`Query::setup`]) has for
    /// its auction modulo [`SIDE_INPUT_KEYS`], looked up as of the bid's time (`JOIN side_input
    /// FOR SYSTEM_TIME AS OF b.date_time`: a lookup join, the table having no key). The
    /// reference looks up as of the bid's processing time; the table does not change while
    /// the bids come, so the rows are the same.
    Q13,
    /// Calculation: the bids with a price (in euros, `0.908 · price`) above 1 000 000 and below
    /// 50 000 000, with the part of the day they were placed in (from the hour of `date_time`)
    /// and the number of `c`s in `extra` (the reference's `count_char` function, written as
    /// `LENGTH(extra) − LENGTH(REPLACE(extra, 'c', ''))`).
    Q14,
    /// Bidding statistics per day: bids, distinct bidders and distinct auctions, in all and in
    /// three price ranks (`COUNT(*) FILTER (WHERE ...)`, `COUNT(DISTINCT ...) FILTER (...)`),
    /// grouped by the day (`to_char(date_time, '%Y-%m-%d')`, the reference's `DATE_FORMAT`).
    /// A relation over the whole stream: each bid changes its day's row.
    Q15,
    /// [`Query::Q15`]'s statistics per channel and day, with the latest minute (`'%H:%M'`) a
    /// bid came in. A relation.
    Q16,
    /// Auction statistics per auction and day: bids in all and per price rank, and the
    /// minimum, maximum, average and sum of prices. A relation.
    Q17,
    /// Expand bid with auction: every bid joined with its auction, for the auctions in
    /// category 10 (both streams unbounded, as in q3). The columns both have (`date_time`,
    /// `extra`) are renamed on the auction's side.
    Q20,
    /// Add channel id: the bids of the four main channels with their fixed ids, and those of
    /// any other channel whose URL carries `channel_id=...`, with that id (the reference's
    /// `REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)` is `regexp_match(...)[2]`: groups
    /// are numbered from 1).
    Q21,
    /// URL directories: each bid with the first three directories of its URL (the
    /// reference's `SPLIT_INDEX(url, '/', 3..5)`, counted from 0, is `split_part(url, '/',
    /// 4..6)`, counted from 1).
    Q22,
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
    /// q12's tumbling window of processing time.
    pub proctime_tumble: i64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            q4_range: 10_000_000,
            q5_range: 10_000_000,
            q5_slide: 2_000_000,
            tumble: 10_000_000,
            session_gap: 10_000_000,
            proctime_tumble: 10_000_000,
        }
    }
}

fn us(micros: i64) -> String {
    format!("INTERVAL '{micros}' MICROSECOND")
}

impl Query {
    pub const ALL: [Query; 27] = [
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
        Query::Q12,
        Query::Q13,
        Query::Q14,
        Query::Q15,
        Query::Q16,
        Query::Q17,
        Query::Q18,
        Query::Q19,
        Query::Q20,
        Query::Q21,
        Query::Q22,
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
            Query::Q12 => "q12",
            Query::Q18 => "q18",
            Query::Q19 => "q19",
            Query::Q13 => "q13",
            Query::Q14 => "q14",
            Query::Q15 => "q15",
            Query::Q16 => "q16",
            Query::Q17 => "q17",
            Query::Q20 => "q20",
            Query::Q21 => "q21",
            Query::Q22 => "q22",
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
            | Query::Q12
            | Query::Q18
            | Query::Q19
            | Query::Q13
            | Query::Q14
            | Query::Q15
            | Query::Q16
            | Query::Q17
            | Query::Q21
            | Query::Q22
            | Query::Tumble
            | Query::Hop
            | Query::TumbleCql
            | Query::HopCql
            | Query::Cumulate => &["bid"],
            Query::Q3 | Query::Q8 => &["person", "auction"],
            Query::Q4 | Query::Q6 | Query::Q9 | Query::Q20 => &["auction", "bid"],
        }
    }

    /// The `CREATE STREAM` statements: [`generator::ddl`], or for q12
    /// [`generator::ddl_bids_on_arrival`].
    pub fn ddl(self) -> &'static str {
        match self {
            Query::Q12 => generator::ddl_bids_on_arrival(),
            _ => generator::ddl(),
        }
    }

    /// Whether the query's output times are processing time (the processing clock when its
    /// input arrived) rather than event time.
    pub fn on_processing_time(self) -> bool {
        self == Query::Q12
    }

    /// Statements to run before the query starts: q13's side table, filled with
    /// [`SIDE_INPUT_KEYS`] rows `(key, 'key')`.
    pub fn setup(self) -> Option<String> {
        if self != Query::Q13 {
            return None;
        }
        let rows: Vec<String> = (0..SIDE_INPUT_KEYS).map(|k| format!("({k}, '{k}')")).collect();
        Some(format!(
            "CREATE TABLE side_input (key BIGINT, value VARCHAR); \
             INSERT INTO side_input VALUES {}",
            rows.join(", ")
        ))
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
            Query::Q5 => format!(
                "WITH c AS (SELECT auction, COUNT(*) AS num FROM bid [RANGE {r} SLIDE {s}] \
                            GROUP BY auction) \
                 SELECT ISTREAM c.auction, c.num \
                 FROM c JOIN (SELECT MAX(num) AS top FROM c) AS m ON c.num = m.top",
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
            Query::Q12 => format!(
                "SELECT ISTREAM bidder, COUNT(*) AS bid_count, window_start AS starttime, \
                   window_end AS endtime \
                 FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(p_time), {w})) \
                 GROUP BY bidder, window_start, window_end",
                w = us(p.proctime_tumble)
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
            Query::Q13 => "SELECT b.auction, b.bidder, b.price, b.date_time, s.value \
                           FROM bid AS b \
                           JOIN side_input FOR SYSTEM_TIME AS OF b.date_time AS s \
                             ON b.auction % 10000 = s.key"
                .into(),
            Query::Q14 => "SELECT ISTREAM auction, bidder, 0.908 * price AS price, \
                             CASE WHEN EXTRACT(HOUR FROM date_time) BETWEEN 8 AND 18 \
                                    THEN 'dayTime' \
                                  WHEN EXTRACT(HOUR FROM date_time) <= 6 \
                                    OR EXTRACT(HOUR FROM date_time) >= 20 THEN 'nightTime' \
                                  ELSE 'otherTime' END AS bid_time_type, \
                             date_time, extra, \
                             LENGTH(extra) - LENGTH(REPLACE(extra, 'c', '')) AS c_counts \
                           FROM bid \
                           WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"
                .into(),
            Query::Q15 => format!(
                "SELECT {DAY} AS day, {BID_COUNTS}, {BID_DISTINCTS} FROM bid GROUP BY {DAY}"
            ),
            Query::Q16 => format!(
                "SELECT channel, {DAY} AS day, MAX(to_char(date_time, '%H:%M')) AS minute, \
                   {BID_COUNTS}, {BID_DISTINCTS} \
                 FROM bid GROUP BY channel, {DAY}"
            ),
            Query::Q17 => format!(
                "SELECT auction, {DAY} AS day, {BID_COUNTS}, MIN(price) AS min_price, \
                   MAX(price) AS max_price, AVG(price) AS avg_price, SUM(price) AS sum_price \
                 FROM bid GROUP BY auction, {DAY}"
            ),
            Query::Q20 => "SELECT ISTREAM b.auction, b.bidder, b.price, b.channel, b.url, \
                             b.date_time, b.extra, a.item_name, a.description, a.initial_bid, \
                             a.reserve, a.date_time AS auction_date_time, a.expires, a.seller, \
                             a.category, a.extra AS auction_extra \
                           FROM bid AS b JOIN auction AS a ON b.auction = a.id \
                           WHERE a.category = 10"
                .into(),
            Query::Q21 => format!(
                "SELECT ISTREAM auction, bidder, price, channel, \
                   CASE WHEN lower(channel) = 'apple' THEN '0' \
                        WHEN lower(channel) = 'google' THEN '1' \
                        WHEN lower(channel) = 'facebook' THEN '2' \
                        WHEN lower(channel) = 'baidu' THEN '3' \
                        ELSE {CHANNEL_ID} END AS channel_id \
                 FROM bid \
                 WHERE {CHANNEL_ID} IS NOT NULL \
                   OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')"
            ),
            Query::Q22 => "SELECT ISTREAM auction, bidder, price, channel, \
                             split_part(url, '/', 4) AS dir1, split_part(url, '/', 5) AS dir2, \
                             split_part(url, '/', 6) AS dir3 \
                           FROM bid"
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

/// The rows of q13's side table (the reference's side input file has 10 000 lines).
pub const SIDE_INPUT_KEYS: i64 = 10_000;

/// The day of a bid, as q15-q17 group by it (the reference's `DATE_FORMAT(dateTime,
/// 'yyyy-MM-dd')`).
const DAY: &str = "to_char(date_time, '%Y-%m-%d')";

/// Bids in all and per price rank (q15-q17).
const BID_COUNTS: &str = "COUNT(*) AS total_bids, \
    COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids, \
    COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
    COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids";

/// Distinct bidders and auctions, in all and per price rank (q15 and q16).
const BID_DISTINCTS: &str = "\
    COUNT(DISTINCT bidder) AS total_bidders, \
    COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, \
    COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders, \
    COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders, \
    COUNT(DISTINCT auction) AS total_auctions, \
    COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions, \
    COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions, \
    COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions";

/// q21's channel id: the second group of the first match in the URL, NULL without one.
const CHANNEL_ID: &str = "regexp_match(url, '(&|^)channel_id=([^&]*)')[2]";

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
