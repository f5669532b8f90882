//! The NEXMark event generator: a deterministic, seeded stream of people, auctions and bids.
//!
//! Event `n` (counting from 0) is a person, an auction or a bid by its position in a cycle of
//! 50: one person, then three auctions, then 46 bids (the standard 1:3:46 mix). Its timestamp
//! is `base + n · 10⁶ / rate` microseconds, so event time advances at `rate` events per second
//! and every stream is in timestamp order. What makes the workload skewed is kept from the
//! reference generator's design:
//!
//! - a bid goes, with probability 1 − 1/`hot_auction_ratio`, to the current *hot* auction (the
//!   newest auction id rounded down to a multiple of 100), else to one of the last 100 auctions
//!   (the ones "in flight");
//! - its bidder is, with probability 1 − 1/`hot_bidder_ratio`, the current hot bidder (the
//!   newest person id rounded down to a multiple of 100, plus one), else one of the last 1000
//!   people;
//! - an auction's seller follows the same rule with `hot_seller_ratio`;
//! - prices are log-uniform between 1 and 10⁶ cents; an auction runs for a random time around
//!   the time 100 auctions take to be created, so about 100 are open at any moment;
//! - every record carries an `extra` text padding it towards the reference's average sizes
//!   (person 200 bytes, auction 500, bid 100).
//!
//! [`Generator::next_events`] returns the next `n` events as three Arrow [`RecordBatch`]es, one
//! per stream; [`Generator::next_rows`] returns the same events as plain Rust values (the test
//! oracles use them). Two generators with the same [`Config`] produce identical events.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;

use weir_common::rng::SplitMix64;

/// Events in one cycle of the mix, and the share of each kind.
pub const PROPORTION_PERSON: u64 = 1;
pub const PROPORTION_AUCTION: u64 = 3;
pub const PROPORTION_TOTAL: u64 = 50;

/// Ids of people and auctions start here (as in the reference).
pub const FIRST_PERSON_ID: i64 = 1000;
pub const FIRST_AUCTION_ID: i64 = 1000;
/// Auction categories are `FIRST_CATEGORY_ID .. FIRST_CATEGORY_ID + NUM_CATEGORIES`.
pub const FIRST_CATEGORY_ID: i64 = 10;
pub const NUM_CATEGORIES: u64 = 5;
/// How many of the newest auctions a cold bid picks from.
pub const IN_FLIGHT_AUCTIONS: u64 = 100;
/// How many of the newest people a cold bidder or seller is picked from.
pub const ACTIVE_PEOPLE: u64 = 1000;
/// Hot ids are the newest id rounded down to a multiple of this.
const HOT_ROUNDING: u64 = 100;

/// 2026-01-01T00:00:00 in microseconds since the epoch: the time of event 0.
pub const BASE_TIME_MICROS: i64 = 1_767_225_600_000_000;

const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] =
    ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];
/// The channels most bids come through; their URLs carry no channel id.
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// One bid in this many comes through one of the other channels, `channel-N` for N below
/// [`OTHER_CHANNELS`], whose URL carries `channel_id=N` nine times in ten: a few hot channels
/// and many others, the reference generator's shape, so that q21's extraction has ids to find
/// and rows to drop.
const OTHER_CHANNEL_RATIO: u64 = 2;
const OTHER_CHANNELS: u64 = 10_000;

/// What to generate.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    /// Events per second of event time (all three kinds together).
    pub rate: u64,
    pub hot_auction_ratio: u64,
    pub hot_bidder_ratio: u64,
    pub hot_seller_ratio: u64,
}

impl Default for Config {
    /// The reference generator's defaults: 10 000 events per second of event time, half of the
    /// bids on the hot auction, three quarters by the hot bidder, three quarters of the
    /// auctions by the hot seller.
    fn default() -> Self {
        Config {
            seed: 42,
            rate: 10_000,
            hot_auction_ratio: 2,
            hot_bidder_ratio: 4,
            hot_seller_ratio: 4,
        }
    }
}

/// A person (a new user of the auction site).
#[derive(Debug, Clone, PartialEq)]
pub struct Person {
    pub id: i64,
    pub name: String,
    pub email_address: String,
    pub credit_card: String,
    pub city: String,
    pub state: String,
    pub date_time: i64,
    pub extra: String,
}

/// An auction opened by a seller.
#[derive(Debug, Clone, PartialEq)]
pub struct Auction {
    pub id: i64,
    pub item_name: String,
    pub description: String,
    pub initial_bid: i64,
    pub reserve: i64,
    pub date_time: i64,
    pub expires: i64,
    pub seller: i64,
    pub category: i64,
    pub extra: String,
}

/// A bid on an auction.
#[derive(Debug, Clone, PartialEq)]
pub struct Bid {
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    pub channel: String,
    pub url: String,
    pub date_time: i64,
    pub extra: String,
}

/// Events of the three streams, each list in timestamp order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    pub persons: Vec<Person>,
    pub auctions: Vec<Auction>,
    pub bids: Vec<Bid>,
}

/// Events of the three streams as Arrow batches (schemas [`person_schema`] etc.).
#[derive(Debug, Clone)]
pub struct Batches {
    pub person: RecordBatch,
    pub auction: RecordBatch,
    pub bid: RecordBatch,
}

impl Batches {
    pub fn len(&self) -> usize {
        self.person.num_rows() + self.auction.num_rows() + self.bid.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch of the stream named `person`, `auction` or `bid`.
    pub fn get(&self, stream: &str) -> Option<&RecordBatch> {
        match stream {
            "person" => Some(&self.person),
            "auction" => Some(&self.auction),
            "bid" => Some(&self.bid),
            _ => None,
        }
    }
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

/// `person (id, name, email_address, credit_card, city, state, date_time, extra)`.
pub fn person_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("email_address", DataType::Utf8, true),
        Field::new("credit_card", DataType::Utf8, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("state", DataType::Utf8, true),
        Field::new("date_time", ts(), true),
        Field::new("extra", DataType::Utf8, true),
    ]))
}

/// `auction (id, item_name, description, initial_bid, reserve, date_time, expires, seller,
/// category, extra)`.
pub fn auction_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("item_name", DataType::Utf8, true),
        Field::new("description", DataType::Utf8, true),
        Field::new("initial_bid", DataType::Int64, true),
        Field::new("reserve", DataType::Int64, true),
        Field::new("date_time", ts(), true),
        Field::new("expires", ts(), true),
        Field::new("seller", DataType::Int64, true),
        Field::new("category", DataType::Int64, true),
        Field::new("extra", DataType::Utf8, true),
    ]))
}

/// `bid (auction, bidder, price, channel, url, date_time, extra)`.
pub fn bid_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new("url", DataType::Utf8, true),
        Field::new("date_time", ts(), true),
        Field::new("extra", DataType::Utf8, true),
    ]))
}

/// `CREATE STREAM person` and `auction`, each with its event-time column `date_time`.
macro_rules! person_and_auction_ddl {
    () => {
        "CREATE STREAM person (id BIGINT, name VARCHAR, email_address VARCHAR, \
           credit_card VARCHAR, city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
           WATERMARK FOR date_time AS date_time);
         CREATE STREAM auction (id BIGINT, item_name VARCHAR, description VARCHAR, \
           initial_bid BIGINT, reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, \
           seller BIGINT, category BIGINT, extra VARCHAR, WATERMARK FOR date_time AS date_time);"
    };
}

/// The columns of a bid, as `CREATE STREAM bid` declares them.
macro_rules! bid_columns {
    () => {
        "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
         date_time TIMESTAMP, extra VARCHAR"
    };
}

/// The `CREATE STREAM` statements for the three streams, in order, each with its event-time
/// column `date_time` (in order: no watermark delay).
pub fn ddl() -> &'static str {
    concat!(
        person_and_auction_ddl!(),
        " CREATE STREAM bid (",
        bid_columns!(),
        ", WATERMARK FOR date_time AS date_time);"
    )
}

/// The `bid` stream's columns, as `CREATE STREAM` lists them.
pub fn bid_columns() -> &'static str {
    bid_columns!()
}

/// [`ddl`] with bids stamped on arrival instead: `bid` has the column `p_time AS PROCTIME()`
/// and no event time (`date_time` is a value), as q12 reads it.
pub fn ddl_bids_on_arrival() -> &'static str {
    concat!(
        person_and_auction_ddl!(),
        " CREATE STREAM bid (",
        bid_columns!(),
        ", p_time AS PROCTIME());"
    )
}

/// Random printable text that `extra` and `url` fields are cut from (cutting is cheaper than
/// drawing every character).
const POOL_LEN: usize = 4096;

/// The generator. See the module docs.
#[derive(Debug, Clone)]
pub struct Generator {
    config: Config,
    rng: SplitMix64,
    pool: String,
    /// Index of the next event.
    next: u64,
    persons: u64,
    auctions: u64,
}

impl Generator {
    pub fn new(config: Config) -> Self {
        let mut rng = SplitMix64::new(config.seed);
        let pool: String = (0..POOL_LEN).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
        let config = Config { rate: config.rate.max(1), ..config };
        Generator { config, rng, pool, next: 0, persons: 0, auctions: 0 }
    }

    /// How many events have been generated.
    pub fn events_so_far(&self) -> u64 {
        self.next
    }

    /// The timestamp of event `n`.
    pub fn time_of(&self, n: u64) -> i64 {
        BASE_TIME_MICROS + (n as i128 * 1_000_000 / self.config.rate as i128) as i64
    }

    /// How long an auction runs on average: the event time in which 100 auctions are created.
    pub fn mean_auction_micros(&self) -> i64 {
        let events = IN_FLIGHT_AUCTIONS * PROPORTION_TOTAL / PROPORTION_AUCTION;
        (events as i128 * 1_000_000 / self.config.rate as i128) as i64
    }

    fn text(&mut self, len: usize) -> &str {
        let len = len.min(POOL_LEN);
        let start = self.rng.below((POOL_LEN - len + 1) as u64) as usize;
        &self.pool[start..start + len]
    }

    /// A price in cents, log-uniform between 1 and 10⁶ dollars.
    fn price(&mut self) -> i64 {
        (10f64.powf(self.rng.unit() * 6.0) * 100.0).round() as i64
    }

    /// A recent person id: the hot one with probability 1 − 1/ratio, else one of the last
    /// [`ACTIVE_PEOPLE`]. People exist before they act: with none yet, the first id is used.
    fn recent_person(&mut self, hot_ratio: u64) -> i64 {
        let newest = self.persons.saturating_sub(1);
        let base0 = if hot_ratio > 1 && self.rng.below(hot_ratio) > 0 {
            newest / HOT_ROUNDING * HOT_ROUNDING + 1
        } else {
            let span = newest.min(ACTIVE_PEOPLE) + 1;
            newest - self.rng.below(span)
        };
        FIRST_PERSON_ID + base0.min(newest) as i64
    }

    /// A recent auction id, with the same hot/cold rule over the last [`IN_FLIGHT_AUCTIONS`].
    fn recent_auction(&mut self) -> i64 {
        let newest = self.auctions.saturating_sub(1);
        let ratio = self.config.hot_auction_ratio;
        let base0 = if ratio > 1 && self.rng.below(ratio) > 0 {
            newest / HOT_ROUNDING * HOT_ROUNDING
        } else {
            let span = newest.min(IN_FLIGHT_AUCTIONS) + 1;
            newest - self.rng.below(span)
        };
        FIRST_AUCTION_ID + base0 as i64
    }

    /// The kind, id and timestamp of the next event.
    fn advance(&mut self) -> Event {
        let n = self.next;
        self.next += 1;
        let t = self.time_of(n);
        let offset = n % PROPORTION_TOTAL;
        if offset < PROPORTION_PERSON {
            let id = FIRST_PERSON_ID + self.persons as i64;
            self.persons += 1;
            Event::Person { id, t }
        } else if offset < PROPORTION_PERSON + PROPORTION_AUCTION {
            let id = FIRST_AUCTION_ID + self.auctions as i64;
            self.auctions += 1;
            Event::Auction { id, t }
        } else {
            Event::Bid { t }
        }
    }

    fn person(&mut self, id: i64, t: i64) -> Person {
        let first = FIRST_NAMES[self.rng.below(FIRST_NAMES.len() as u64) as usize];
        let last = LAST_NAMES[self.rng.below(LAST_NAMES.len() as u64) as usize];
        let city = CITIES[self.rng.below(CITIES.len() as u64) as usize];
        let state = STATES[self.rng.below(STATES.len() as u64) as usize];
        let card = format!(
            "{:04} {:04} {:04} {:04}",
            self.rng.below(10_000),
            self.rng.below(10_000),
            self.rng.below(10_000),
            self.rng.below(10_000)
        );
        let name = format!("{first} {last}");
        let user = self.text(7).to_string();
        let email_address = format!("{user}@{}.com", self.text(5));
        let pad = 200usize.saturating_sub(name.len() + email_address.len() + card.len() + 40);
        Person {
            id,
            name,
            email_address,
            credit_card: card,
            city: city.to_string(),
            state: state.to_string(),
            date_time: t,
            extra: self.text(pad).to_string(),
        }
    }

    fn auction(&mut self, id: i64, t: i64) -> Auction {
        let seller = self.recent_person(self.config.hot_seller_ratio);
        let initial_bid = self.price();
        let reserve = initial_bid + self.price();
        let mean = self.mean_auction_micros().max(2);
        let length = mean / 2 + self.rng.below(mean as u64) as i64;
        let category = FIRST_CATEGORY_ID + self.rng.below(NUM_CATEGORIES) as i64;
        let item_name = self.text(20).to_string();
        let description = self.text(100).to_string();
        Auction {
            id,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time: t,
            expires: t + length,
            seller,
            category,
            extra: self.text(300).to_string(),
        }
    }

    fn bid(&mut self, t: i64) -> Bid {
        let auction = self.recent_auction();
        let bidder = self.recent_person(self.config.hot_bidder_ratio);
        let price = self.price();
        // Three directories, which q22 splits out.
        let mut url = String::from("https://www.nexmark.com/");
        for _ in 0..3 {
            let dir = self.text(5);
            url.push_str(dir);
            url.push('/');
        }
        url.push_str("item.htm?query=1");
        let channel = if self.rng.below(OTHER_CHANNEL_RATIO) > 0 {
            HOT_CHANNELS[self.rng.below(HOT_CHANNELS.len() as u64) as usize].to_string()
        } else {
            let n = self.rng.below(OTHER_CHANNELS);
            if self.rng.below(10) > 0 {
                url.push_str(&format!("&channel_id={n}"));
            }
            format!("channel-{n}")
        };
        Bid { auction, bidder, price, channel, url, date_time: t, extra: self.text(16).to_string() }
    }

    /// The next `n` events as Rust values.
    pub fn next_rows(&mut self, n: u64) -> Rows {
        let mut rows = Rows::default();
        for _ in 0..n {
            match self.advance() {
                Event::Person { id, t } => rows.persons.push(self.person(id, t)),
                Event::Auction { id, t } => rows.auctions.push(self.auction(id, t)),
                Event::Bid { t } => rows.bids.push(self.bid(t)),
            }
        }
        rows
    }

    /// The next `n` events as Arrow batches, one per stream.
    pub fn next_events(&mut self, n: u64) -> Result<Batches, ArrowError> {
        let rows = self.next_rows(n);
        to_batches(&rows)
    }
}

enum Event {
    Person { id: i64, t: i64 },
    Auction { id: i64, t: i64 },
    Bid { t: i64 },
}

fn strings<'a>(values: impl Iterator<Item = &'a str>, n: usize) -> ArrayRef {
    let mut b = StringBuilder::with_capacity(n, n * 16);
    values.for_each(|v| b.append_value(v));
    Arc::new(b.finish())
}

fn ints(values: impl Iterator<Item = i64>, n: usize) -> ArrayRef {
    let mut b = Int64Builder::with_capacity(n);
    values.for_each(|v| b.append_value(v));
    Arc::new(b.finish())
}

fn times(values: impl Iterator<Item = i64>, n: usize) -> ArrayRef {
    let mut b = TimestampMicrosecondBuilder::with_capacity(n);
    values.for_each(|v| b.append_value(v));
    Arc::new(b.finish())
}

/// Converts events to Arrow batches of the three schemas.
pub fn to_batches(rows: &Rows) -> Result<Batches, ArrowError> {
    let (p, a, b) = (&rows.persons, &rows.auctions, &rows.bids);
    let (np, na, nb) = (p.len(), a.len(), b.len());
    let person = vec![
        ints(p.iter().map(|x| x.id), np),
        strings(p.iter().map(|x| x.name.as_str()), np),
        strings(p.iter().map(|x| x.email_address.as_str()), np),
        strings(p.iter().map(|x| x.credit_card.as_str()), np),
        strings(p.iter().map(|x| x.city.as_str()), np),
        strings(p.iter().map(|x| x.state.as_str()), np),
        times(p.iter().map(|x| x.date_time), np),
        strings(p.iter().map(|x| x.extra.as_str()), np),
    ];
    let auction = vec![
        ints(a.iter().map(|x| x.id), na),
        strings(a.iter().map(|x| x.item_name.as_str()), na),
        strings(a.iter().map(|x| x.description.as_str()), na),
        ints(a.iter().map(|x| x.initial_bid), na),
        ints(a.iter().map(|x| x.reserve), na),
        times(a.iter().map(|x| x.date_time), na),
        times(a.iter().map(|x| x.expires), na),
        ints(a.iter().map(|x| x.seller), na),
        ints(a.iter().map(|x| x.category), na),
        strings(a.iter().map(|x| x.extra.as_str()), na),
    ];
    let bid = vec![
        ints(b.iter().map(|x| x.auction), nb),
        ints(b.iter().map(|x| x.bidder), nb),
        ints(b.iter().map(|x| x.price), nb),
        strings(b.iter().map(|x| x.channel.as_str()), nb),
        strings(b.iter().map(|x| x.url.as_str()), nb),
        times(b.iter().map(|x| x.date_time), nb),
        strings(b.iter().map(|x| x.extra.as_str()), nb),
    ];
    Ok(Batches {
        person: RecordBatch::try_new(person_schema(), person)?,
        auction: RecordBatch::try_new(auction_schema(), auction)?,
        bid: RecordBatch::try_new(bid_schema(), bid)?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_events() {
        let a = Generator::new(Config::default()).next_rows(500);
        let b = Generator::new(Config::default()).next_rows(500);
        assert_eq!(a, b);
        let c = Generator::new(Config { seed: 7, ..Config::default() }).next_rows(500);
        assert_ne!(a, c);
    }

    #[test]
    fn mix_is_1_3_46_and_in_order() {
        let rows = Generator::new(Config::default()).next_rows(5000);
        assert_eq!((rows.persons.len(), rows.auctions.len(), rows.bids.len()), (100, 300, 4600));
        assert!(rows.bids.windows(2).all(|w| w[0].date_time < w[1].date_time));
        assert!(rows.persons.windows(2).all(|w| w[0].date_time < w[1].date_time));
        // 10 000 events per second: event 4999 is 0.4999 s after event 0.
        let g = Generator::new(Config::default());
        assert_eq!(g.time_of(4999) - g.time_of(0), 499_900);
    }

    #[test]
    fn bids_name_existing_auctions_and_people_and_half_go_to_the_hot_auction() {
        let rows = Generator::new(Config::default()).next_rows(50_000);
        let max_auction = rows.auctions.iter().map(|a| a.id).max().unwrap_or(0);
        let max_person = rows.persons.iter().map(|p| p.id).max().unwrap_or(0);
        assert!(rows.bids.iter().all(|b| b.auction <= max_auction && b.bidder <= max_person));
        let hot = rows.bids.iter().filter(|b| (b.auction - FIRST_AUCTION_ID) % 100 == 0).count();
        let share = hot as f64 / rows.bids.len() as f64;
        assert!((0.45..0.6).contains(&share), "hot share {share}");
        assert!(rows.auctions.iter().all(|a| a.expires > a.date_time));
        assert!(rows.bids.iter().all(|b| (100..=100_000_000).contains(&b.price)));
    }

    #[test]
    fn batches_match_rows() {
        let mut g = Generator::new(Config::default());
        let b = g.next_events(100).unwrap();
        assert_eq!((b.person.num_rows(), b.auction.num_rows(), b.bid.num_rows()), (2, 6, 92));
        assert_eq!(b.bid.schema(), bid_schema());
    }
}
