//! Every NEXMark query, run through the engine on a few thousand generated events, equals an
//! independent from-scratch evaluation written here from the CQL definitions.
//!
//! The oracle computes each query's relation R(τ) from scratch, straight from the events, at
//! every tick where it can change (the timestamps of the streams it reads, and the ticks where
//! a window's contents change, up to past the last expiry); a superset of the engine's instants
//! is fine because R is constant between them. ISTREAM is then the positive part of
//! R(τ) − R(τ_prev) (bag difference), and a relation output is the whole difference. Windows:
//! `[RANGE T]` holds the elements stamped in (τ−T, τ]; `[RANGE T SLIDE S]` those stamped in
//! [b−T, b) with b = S·⌊(τ+1)/S⌋; a stream without a window, everything stamped ≤ τ. Values are
//! compared as the engine's text (Arrow's formatting, which the oracle uses too).
//!
//! For the queries over unbounded windows (q0-q3) R only grows, and the oracle emits directly
//! what enters: each result row at the timestamp of its newest element.
//!
//! Each query runs with chunks of 7 and of 1000 events; both must equal the oracle.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, TimestampMicrosecondArray};
use weir::format::value_as_text;
use weir::Engine;
use weir_bench::generator::{to_batches, Auction, Bid, Person, Rows};
use weir_bench::queries::SIDE_INPUT_KEYS;
use weir_bench::{Config, Generator, Params, Query};

/// The test's window sizes, in microseconds, for events 100 µs apart (10 000 events/s).
fn params() -> Params {
    Params {
        q4_range: 300_000,
        q5_range: 50_000,
        q5_slide: 20_000,
        tumble: 40_000,
        session_gap: 10_000,
        proctime_tumble: 40_000,
    }
}

/// Processing time between two events' arrivals in the tests of queries on processing time.
const ARRIVAL_GAP: i64 = 100;

type Row = Vec<String>;
type Bag = BTreeMap<Row, i64>;
/// (instant, values, diff), sorted.
type Output = Vec<(i64, Row, i64)>;

fn ts(t: i64) -> String {
    let a: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![t]));
    value_as_text(&a, 0).unwrap()
}

fn float(v: f64) -> String {
    let a: ArrayRef = Arc::new(Float64Array::from(vec![v]));
    value_as_text(&a, 0).unwrap()
}

/// `0.908 * price`, exactly: the literal is a DECIMAL(3,3), so the product has three decimals.
fn euros(price: i64) -> String {
    let milli = 908 * i128::from(price);
    let sign = if milli < 0 { "-" } else { "" };
    format!("{sign}{}.{:03}", milli.abs() / 1000, milli.abs() % 1000)
}

fn int(v: i64) -> String {
    v.to_string()
}

fn add(bag: &mut Bag, row: Row) {
    *bag.entry(row).or_insert(0) += 1;
}

/// The engine's output for `q` on `events` events generated with `config`, pushed in chunks
/// of `chunk`.
///
/// A query on processing time ([`Query::on_processing_time`]) runs on the engine's test clock,
/// which starts at the epoch and moves [`ARRIVAL_GAP`] per event after each chunk: the events
/// of chunk k arrive at `k · chunk · ARRIVAL_GAP`.
fn engine_output(q: Query, config: &Config, events: u64, chunk: u64) -> Output {
    let mut e = Engine::new();
    if q.on_processing_time() {
        e.use_manual_processing_time();
    }
    e.execute(q.ddl()).unwrap();
    if let Some(setup) = q.setup() {
        e.execute(&setup).unwrap();
    }
    let sub = e.subscribe(&q.sql(&params())).unwrap();
    let mut g = Generator::new(config.clone());
    let mut left = events;
    let mut out = Vec::new();
    while left > 0 {
        let n = left.min(chunk);
        left -= n;
        let b = to_batches(&g.next_rows(n)).unwrap();
        for s in q.streams() {
            let batch = b.get(s).unwrap();
            if batch.num_rows() > 0 {
                e.push(s, batch.clone()).unwrap();
            }
        }
        out.extend(sub.poll_changes().unwrap());
        if q.on_processing_time() {
            e.advance_processing_time(std::time::Duration::from_micros(n * ARRIVAL_GAP as u64));
            out.extend(sub.poll_changes().unwrap());
        }
    }
    e.close_all().unwrap();
    out.extend(sub.poll_changes().unwrap());
    let mut out: Output = out.into_iter().map(|c| (c.time, c.values, c.diff)).collect();
    out.sort();
    out
}

/// ISTREAM (or, if `relation`, the whole change) of R over `instants`.
fn differentiate(instants: &BTreeSet<i64>, relation: bool, r: impl Fn(i64) -> Bag) -> Output {
    let mut prev = Bag::new();
    let mut out = Vec::new();
    for &t in instants {
        let now = r(t);
        let keys: BTreeSet<&Row> = prev.keys().chain(now.keys()).collect();
        for k in keys {
            let d = now.get(k).copied().unwrap_or(0) - prev.get(k).copied().unwrap_or(0);
            if relation && d != 0 {
                out.push((t, k.clone(), d));
            } else if d > 0 {
                for _ in 0..d {
                    out.push((t, k.clone(), 1));
                }
            }
        }
        prev = now;
    }
    out.sort();
    out
}

fn in_range(t: i64, tau: i64, range: i64) -> bool {
    t > tau - range && t <= tau
}

fn in_slide(t: i64, tau: i64, range: i64, slide: i64) -> bool {
    let b = slide * (tau + 1).div_euclid(slide);
    t >= b - range && t < b
}

/// The ticks kS−1 from before `first` to past `last` + T + S (where slide windows change).
fn boundaries(first: i64, last: i64, range: i64, slide: i64) -> BTreeSet<i64> {
    let mut k = first.div_euclid(slide);
    let mut out = BTreeSet::new();
    while k * slide - 1 <= last + range + slide {
        out.insert(k * slide - 1);
        k += 1;
    }
    out
}

fn oracle(q: Query, rows: &Rows) -> Output {
    let p = params();
    let Rows { persons, auctions, bids } = rows;
    let (first, last) =
        (bids.first().map_or(0, |b| b.date_time), bids.last().map_or(0, |b| b.date_time));
    match q {
        Query::Q0 | Query::Q1 | Query::Q2 => {
            let row = |b: &Bid| -> Option<Row> {
                match q {
                    Query::Q0 => Some(vec![
                        int(b.auction),
                        int(b.bidder),
                        int(b.price),
                        ts(b.date_time),
                        b.extra.clone(),
                    ]),
                    Query::Q1 => Some(vec![
                        int(b.auction),
                        int(b.bidder),
                        euros(b.price),
                        ts(b.date_time),
                        b.extra.clone(),
                    ]),
                    _ => (b.auction % 123 == 0).then(|| vec![int(b.auction), int(b.price)]),
                }
            };
            // Over an unbounded window R only grows, so R(τ) − R(τ−1) is the rows whose
            // newest element is stamped τ: the from-scratch difference, without recomputing
            // all of R at each of thousands of instants.
            let mut out: Output =
                bids.iter().filter_map(|b| row(b).map(|r| (b.date_time, r, 1))).collect();
            out.sort();
            out
        }
        Query::Q3 => {
            let people: HashMap<i64, &Person> = persons
                .iter()
                .filter(|p| ["OR", "ID", "CA"].contains(&&*p.state))
                .map(|p| (p.id, p))
                .collect();
            let mut out = Output::new();
            for a in auctions.iter().filter(|a| a.category == 10) {
                if let Some(p) = people.get(&a.seller) {
                    let row = vec![p.name.clone(), p.city.clone(), p.state.clone(), int(a.id)];
                    out.push((a.date_time.max(p.date_time), row, 1));
                }
            }
            out.sort();
            out
        }
        Query::Q4 => {
            let r = p.q4_range;
            let instants: BTreeSet<i64> = auctions
                .iter()
                .map(|a| a.date_time)
                .chain(bids.iter().map(|b| b.date_time))
                .flat_map(|t| [t, t + r])
                .collect();
            differentiate(&instants, true, |tau| {
                let open: HashMap<i64, &Auction> = auctions
                    .iter()
                    .filter(|a| in_range(a.date_time, tau, r))
                    .map(|a| (a.id, a))
                    .collect();
                let mut best: BTreeMap<(i64, i64), i64> = BTreeMap::new();
                for b in bids.iter().filter(|b| in_range(b.date_time, tau, r)) {
                    if let Some(a) = open.get(&b.auction) {
                        if a.date_time <= b.date_time && b.date_time <= a.expires {
                            let m = best.entry((a.id, a.category)).or_insert(i64::MIN);
                            *m = (*m).max(b.price);
                        }
                    }
                }
                let mut per_category: BTreeMap<i64, (f64, i64)> = BTreeMap::new();
                for ((_, category), price) in best {
                    let e = per_category.entry(category).or_insert((0.0, 0));
                    e.0 += price as f64;
                    e.1 += 1;
                }
                let mut bag = Bag::new();
                for (c, (sum, n)) in per_category {
                    add(&mut bag, vec![int(c), float(sum / n as f64)]);
                }
                bag
            })
        }
        Query::Q5 => {
            let (r, s) = (p.q5_range, p.q5_slide);
            differentiate(&boundaries(first, last, r, s), false, |tau| {
                let mut counts: BTreeMap<i64, i64> = BTreeMap::new();
                for b in bids.iter().filter(|b| in_slide(b.date_time, tau, r, s)) {
                    *counts.entry(b.auction).or_insert(0) += 1;
                }
                let top = counts.values().copied().max();
                let mut bag = Bag::new();
                for (a, n) in counts {
                    if Some(n) == top {
                        add(&mut bag, vec![int(a), int(n)]);
                    }
                }
                bag
            })
        }
        Query::Q6 | Query::Q9 => {
            let instants: BTreeSet<i64> = auctions
                .iter()
                .map(|a| a.date_time)
                .chain(bids.iter().map(|b| b.date_time))
                .collect();
            differentiate(&instants, true, |tau| {
                // Per auction opened by τ, its bids placed by τ while it was open.
                let open: HashMap<i64, &Auction> =
                    auctions.iter().filter(|a| a.date_time <= tau).map(|a| (a.id, a)).collect();
                let mut won: BTreeMap<i64, Vec<&Bid>> = BTreeMap::new();
                for b in bids.iter().filter(|b| b.date_time <= tau) {
                    if let Some(a) = open.get(&b.auction) {
                        if a.date_time <= b.date_time && b.date_time <= a.expires {
                            won.entry(a.id).or_default().push(b);
                        }
                    }
                }
                let mut bag = Bag::new();
                if q == Query::Q9 {
                    // The highest price, the earliest bid among equal prices.
                    for (id, bs) in &won {
                        let a = open[id];
                        let best = bs.iter().min_by_key(|b| (-b.price, b.date_time)).unwrap();
                        add(
                            &mut bag,
                            vec![
                                int(a.id),
                                int(a.seller),
                                int(a.category),
                                int(best.bidder),
                                int(best.price),
                                ts(best.date_time),
                            ],
                        );
                    }
                    return bag;
                }
                // q6: per seller, its auctions by (expires, id), each with the average final
                // price of itself and the 9 before.
                let mut by_seller: BTreeMap<i64, Vec<(i64, i64, i64)>> = BTreeMap::new();
                for (id, bs) in &won {
                    let a = open[id];
                    let fin = bs.iter().map(|b| b.price).max().unwrap();
                    by_seller.entry(a.seller).or_default().push((a.expires, a.id, fin));
                }
                for (seller, mut xs) in by_seller {
                    xs.sort();
                    for j in 0..xs.len() {
                        let frame = &xs[j.saturating_sub(9)..=j];
                        let sum: f64 = frame.iter().map(|x| x.2 as f64).sum();
                        add(
                            &mut bag,
                            vec![int(seller), int(xs[j].1), float(sum / frame.len() as f64)],
                        );
                    }
                }
                bag
            })
        }
        Query::Q18 | Query::Q19 => {
            let instants: BTreeSet<i64> = bids.iter().map(|b| b.date_time).collect();
            differentiate(&instants, true, |tau| {
                let mut bag = Bag::new();
                if q == Query::Q18 {
                    // The latest bid of each (bidder, auction).
                    let mut last: BTreeMap<(i64, i64), &Bid> = BTreeMap::new();
                    for b in bids.iter().filter(|b| b.date_time <= tau) {
                        let e = last.entry((b.bidder, b.auction)).or_insert(b);
                        if b.date_time > e.date_time {
                            *e = b;
                        }
                    }
                    for b in last.values() {
                        add(
                            &mut bag,
                            vec![int(b.auction), int(b.bidder), int(b.price), ts(b.date_time)],
                        );
                    }
                    return bag;
                }
                // q19: per auction, its bids by price descending then time, the first 10.
                let mut per: BTreeMap<i64, Vec<&Bid>> = BTreeMap::new();
                for b in bids.iter().filter(|b| b.date_time <= tau) {
                    per.entry(b.auction).or_default().push(b);
                }
                for (_, mut bs) in per {
                    bs.sort_by_key(|b| (-b.price, b.date_time));
                    for (i, b) in bs.iter().take(10).enumerate() {
                        add(
                            &mut bag,
                            vec![
                                int(b.auction),
                                int(b.bidder),
                                int(b.price),
                                ts(b.date_time),
                                int(i as i64 + 1),
                            ],
                        );
                    }
                }
                bag
            })
        }
        Query::Q13 => {
            // Every bid finds its row: the side table holds every key below SIDE_INPUT_KEYS,
            // with the key as its value, from before the first bid.
            let mut out: Output = bids
                .iter()
                .map(|b| {
                    let key = b.auction.rem_euclid(SIDE_INPUT_KEYS);
                    let row = vec![
                        int(b.auction),
                        int(b.bidder),
                        int(b.price),
                        ts(b.date_time),
                        key.to_string(),
                    ];
                    (b.date_time, row, 1)
                })
                .collect();
            out.sort();
            out
        }
        Query::Q14 => {
            let mut out = Output::new();
            for b in bids {
                // 0.908 * price between 10^6 and 5 * 10^7, exactly: in thousandths.
                let milli = 908 * i128::from(b.price);
                if !(milli > 1_000_000_000 && milli < 50_000_000_000) {
                    continue;
                }
                let hour = b.date_time.div_euclid(3_600_000_000).rem_euclid(24);
                let part = match hour {
                    8..=18 => "dayTime",
                    h if h <= 6 || h >= 20 => "nightTime",
                    _ => "otherTime",
                };
                let cs = b.extra.chars().filter(|&c| c == 'c').count() as i64;
                let row = vec![
                    int(b.auction),
                    int(b.bidder),
                    euros(b.price),
                    part.to_string(),
                    ts(b.date_time),
                    b.extra.clone(),
                    int(cs),
                ];
                out.push((b.date_time, row, 1));
            }
            out.sort();
            out
        }
        Query::Q15 | Query::Q16 | Query::Q17 => {
            // A relation over the whole stream: at each instant, every group a bid of that
            // instant falls in replaces its row. Exact running statistics per group.
            let day = |t: i64| ts(t)[..10].to_string();
            let key = |b: &Bid| match q {
                Query::Q15 => vec![day(b.date_time)],
                Query::Q16 => vec![b.channel.clone(), day(b.date_time)],
                _ => vec![int(b.auction), day(b.date_time)],
            };
            let mut groups: BTreeMap<Row, Stats> = BTreeMap::new();
            let mut out = Output::new();
            let mut i = 0;
            while i < bids.len() {
                let t = bids[i].date_time;
                let mut touched: BTreeMap<Row, Option<Row>> = BTreeMap::new();
                while i < bids.len() && bids[i].date_time == t {
                    let b = &bids[i];
                    let k = key(b);
                    let g = groups.entry(k.clone()).or_default();
                    touched.entry(k.clone()).or_insert_with(|| g.row(q, &k));
                    g.add(b);
                    i += 1;
                }
                for (k, before) in touched {
                    let after = groups[&k].row(q, &k);
                    if before != after {
                        if let Some(r) = before {
                            out.push((t, r, -1));
                        }
                        if let Some(r) = after {
                            out.push((t, r, 1));
                        }
                    }
                }
            }
            out.sort();
            out
        }
        Query::Q20 => {
            let open: HashMap<i64, &Auction> =
                auctions.iter().filter(|a| a.category == 10).map(|a| (a.id, a)).collect();
            let mut out = Output::new();
            for b in bids {
                if let Some(a) = open.get(&b.auction) {
                    let row = vec![
                        int(b.auction),
                        int(b.bidder),
                        int(b.price),
                        b.channel.clone(),
                        b.url.clone(),
                        ts(b.date_time),
                        b.extra.clone(),
                        a.item_name.clone(),
                        a.description.clone(),
                        int(a.initial_bid),
                        int(a.reserve),
                        ts(a.date_time),
                        ts(a.expires),
                        int(a.seller),
                        int(a.category),
                        a.extra.clone(),
                    ];
                    out.push((b.date_time.max(a.date_time), row, 1));
                }
            }
            out.sort();
            out
        }
        Query::Q21 | Query::Q22 => {
            let mut out = Output::new();
            for b in bids {
                let mut row = vec![int(b.auction), int(b.bidder), int(b.price), b.channel.clone()];
                if q == Query::Q22 {
                    let parts: Vec<&str> = b.url.split('/').collect();
                    row.extend((3..6).map(|i| parts.get(i).unwrap_or(&"").to_string()));
                } else {
                    let fixed = match b.channel.to_lowercase().as_str() {
                        "apple" => Some("0"),
                        "google" => Some("1"),
                        "facebook" => Some("2"),
                        "baidu" => Some("3"),
                        _ => None,
                    };
                    match fixed.map(str::to_string).or_else(|| channel_id(&b.url)) {
                        Some(id) => row.push(id),
                        None => continue,
                    }
                }
                out.push((b.date_time, row, 1));
            }
            out.sort();
            out
        }
        Query::Tumble | Query::Hop | Query::TumbleCql | Query::HopCql => {
            let tvf = matches!(q, Query::Tumble | Query::Hop);
            let (r, s) = match q {
                Query::Tumble | Query::TumbleCql => (p.tumble, p.tumble),
                _ => (p.q5_range, p.q5_slide),
            };
            let with_max = matches!(q, Query::Tumble | Query::TumbleCql);
            // The TVF forms are ISTREAM over the rows with the window's bounds, the CQL forms
            // the relation of the groups.
            differentiate(&boundaries(first, last, r, s), !tvf, |tau| {
                let mut per: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
                for b in bids.iter().filter(|b| in_slide(b.date_time, tau, r, s)) {
                    let e = per.entry(b.auction).or_insert((0, i64::MIN));
                    e.0 += 1;
                    e.1 = e.1.max(b.price);
                }
                let end = s * (tau + 1).div_euclid(s);
                let mut bag = Bag::new();
                for (a, (n, top)) in per {
                    let mut row = if tvf { vec![ts(end - r), ts(end)] } else { vec![] };
                    row.extend([int(a), int(n)]);
                    if with_max {
                        row.push(int(top));
                    }
                    add(&mut bag, row);
                }
                bag
            })
        }
        Query::Cumulate => {
            // Windows [w, b) with b a multiple of the step and w the start of the size-long
            // period that holds b − 1, current from b − 1; ISTREAM of the groups per window.
            let (step, size) = (p.q5_slide, p.tumble);
            differentiate(&boundaries(first, last, size, step), false, |tau| {
                let b = step * (tau + 1).div_euclid(step);
                let w = size * (b - 1).div_euclid(size);
                let mut per: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
                for bid in bids.iter().filter(|x| x.date_time >= w && x.date_time < b) {
                    let e = per.entry(bid.auction).or_insert((0, i64::MIN));
                    e.0 += 1;
                    e.1 = e.1.max(bid.price);
                }
                let mut bag = Bag::new();
                for (a, (n, top)) in per {
                    add(&mut bag, vec![ts(w), ts(b), int(a), int(n), int(top)]);
                }
                bag
            })
        }
        Query::Q12 => panic!("q12's times are processing time: see q12_oracle"),
        Query::Q11 => {
            // From scratch: each bidder's bids in time order, cut where the next comes `gap`
            // or more after the last; each session's row is in R only at its end − 1, so
            // ISTREAM emits it there, once.
            let gap = p.session_gap;
            let mut times: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for b in bids {
                times.entry(b.bidder).or_default().push(b.date_time);
            }
            let mut out = Vec::new();
            for (bidder, mut ts_of) in times {
                ts_of.sort();
                let mut session: Option<(i64, i64, i64)> = None; // (first, last, count)
                for t in ts_of {
                    session = match session {
                        Some((first, last, n)) if t - last < gap => Some((first, t, n + 1)),
                        Some((first, last, n)) => {
                            let end = last + gap;
                            out.push((end - 1, vec![int(bidder), int(n), ts(first), ts(end)], 1));
                            Some((t, t, 1))
                        }
                        None => Some((t, t, 1)),
                    };
                }
                if let Some((first, last, n)) = session {
                    let end = last + gap;
                    out.push((end - 1, vec![int(bidder), int(n), ts(first), ts(end)], 1));
                }
            }
            out.sort();
            out
        }
        Query::Q7 => {
            let w = p.tumble;
            differentiate(&boundaries(first, last, w, w), false, |tau| {
                let inside: Vec<&Bid> =
                    bids.iter().filter(|b| in_slide(b.date_time, tau, w, w)).collect();
                let top = inside.iter().map(|b| b.price).max();
                let mut bag = Bag::new();
                for b in inside.iter().filter(|b| Some(b.price) == top) {
                    add(
                        &mut bag,
                        vec![int(b.auction), int(b.price), int(b.bidder), ts(b.date_time)],
                    );
                }
                bag
            })
        }
        Query::Q8 => {
            let w = p.tumble;
            let first = persons.first().map_or(0, |p| p.date_time);
            let last = auctions.last().map_or(0, |a| a.date_time);
            differentiate(&boundaries(first, last, w, w), false, |tau| {
                let sellers: BTreeSet<i64> = auctions
                    .iter()
                    .filter(|a| in_slide(a.date_time, tau, w, w))
                    .map(|a| a.seller)
                    .collect();
                let mut bag = Bag::new();
                for p in persons.iter().filter(|p| in_slide(p.date_time, tau, w, w)) {
                    if sellers.contains(&p.id) {
                        bag.insert(vec![int(p.id), p.name.clone()], 1);
                    }
                }
                bag
            })
        }
    }
}

/// `regexp_match(url, '(&|^)channel_id=([^&]*)')[2]` by hand: the value after the first
/// `channel_id=` that starts the URL or follows a `&`, up to the next `&`.
fn channel_id(url: &str) -> Option<String> {
    const NAME: &str = "channel_id=";
    url.match_indices(NAME).find(|&(i, _)| i == 0 || url.as_bytes()[i - 1] == b'&').map(|(i, _)| {
        let rest = &url[i + NAME.len()..];
        rest.split('&').next().unwrap_or("").to_string()
    })
}

/// Running statistics of one group of bids (q15-q17): per price rank (0 for all, then the
/// three ranks), the bids, distinct bidders and distinct auctions; the latest minute; the
/// minimum, maximum and sum of prices.
#[derive(Default)]
struct Stats {
    bids: [i64; 4],
    bidders: [BTreeSet<i64>; 4],
    auctions: [BTreeSet<i64>; 4],
    minute: String,
    min: i64,
    max: i64,
    sum: i64,
}

impl Stats {
    fn add(&mut self, b: &Bid) {
        let rank = match b.price {
            p if p < 10_000 => 1,
            p if p < 1_000_000 => 2,
            _ => 3,
        };
        for r in [0, rank] {
            self.bids[r] += 1;
            self.bidders[r].insert(b.bidder);
            self.auctions[r].insert(b.auction);
        }
        let minute = ts(b.date_time)[11..16].to_string();
        self.minute = self.minute.clone().max(minute);
        if self.bids[0] == 1 {
            (self.min, self.max) = (b.price, b.price);
        }
        self.min = self.min.min(b.price);
        self.max = self.max.max(b.price);
        self.sum += b.price;
    }

    /// The group's row, `None` while it has no bids.
    fn row(&self, q: Query, key: &Row) -> Option<Row> {
        if self.bids[0] == 0 {
            return None;
        }
        let mut row = key.clone();
        if q == Query::Q16 {
            row.push(self.minute.clone());
        }
        row.extend(self.bids.iter().map(|&n| int(n)));
        if q == Query::Q17 {
            row.extend([
                int(self.min),
                int(self.max),
                float(self.sum as f64 / self.bids[0] as f64),
                int(self.sum),
            ]);
        } else {
            row.extend(self.bidders.iter().map(|s| int(s.len() as i64)));
            row.extend(self.auctions.iter().map(|s| int(s.len() as i64)));
        }
        Some(row)
    }
}

fn check(q: Query, events: u64) {
    check_with(q, &Config::default(), events);
}

fn check_with(q: Query, config: &Config, events: u64) {
    let rows = Generator::new(config.clone()).next_rows(events);
    let expected = oracle(q, &rows);
    assert!(!expected.is_empty(), "{q}: the oracle expects no output; the test is too small");
    for chunk in [7, 1000] {
        let got = engine_output(q, config, events, chunk);
        if got != expected {
            let first_diff = got.iter().zip(&expected).position(|(a, b)| a != b);
            panic!(
                "{q} (chunks of {chunk}): {} changes, oracle {}; first difference at {first_diff:?}: \
                 engine {:?}, oracle {:?}",
                got.len(),
                expected.len(),
                first_diff.and_then(|i| got.get(i)),
                first_diff.and_then(|i| expected.get(i)),
            );
        }
    }
}

#[test]
fn q0_passes_every_bid_through() {
    check(Query::Q0, 1500);
}

#[test]
fn q1_converts_prices() {
    check(Query::Q1, 1500);
}

#[test]
fn q2_selects_auctions() {
    // Auction ids are multiples of 123 only now and then: enough events to meet a few.
    check(Query::Q2, 20_000);
}

#[test]
fn q3_joins_sellers_and_auctions() {
    check(Query::Q3, 20_000);
}

#[test]
fn q4_averages_winning_bids_per_category() {
    check(Query::Q4, 4000);
}

#[test]
fn q5_finds_the_hottest_auctions() {
    check(Query::Q5, 3000);
}

#[test]
fn q7_finds_the_highest_bids() {
    check(Query::Q7, 3000);
}

#[test]
fn tumble_and_hop_table_functions_and_their_cql_windows_count_bids_per_auction() {
    for q in [Query::Tumble, Query::Hop, Query::TumbleCql, Query::HopCql] {
        check(q, 3000);
    }
}

#[test]
fn cumulate_counts_bids_per_auction_so_far_in_each_period() {
    check(Query::Cumulate, 3000);
}

#[test]
fn q8_finds_new_sellers() {
    check(Query::Q8, 6000);
}

#[test]
fn q6_averages_each_sellers_last_auctions() {
    check(Query::Q6, 3000);
}

#[test]
fn q9_finds_each_auctions_winning_bid() {
    check(Query::Q9, 3000);
}

#[test]
fn q11_counts_each_bidders_sessions() {
    // The input has bidders with several sessions and sessions of several bids.
    let rows = Generator::new(Config::default()).next_rows(6000);
    let sessions = oracle(Query::Q11, &rows);
    let mut per_bidder: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, row, _) in &sessions {
        *per_bidder.entry(row[0].as_str()).or_default() += 1;
    }
    assert!(per_bidder.values().any(|&n| n >= 3), "{per_bidder:?}");
    assert!(sessions.iter().any(|(_, row, _)| row[1].parse::<i64>().unwrap() >= 5));
    check(Query::Q11, 6000);
}

/// q12 from scratch: the bids of chunk k arrive at `k · chunk · ARRIVAL_GAP` (see
/// [`engine_output`]); each bidder's count per tumbling window of that time, each row at its
/// window's last instant.
fn q12_oracle(config: &Config, events: u64, chunk: u64) -> Output {
    let w = params().proctime_tumble;
    let mut g = Generator::new(config.clone());
    let mut counts: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let (mut left, mut arrival) = (events, 0i64);
    while left > 0 {
        let n = left.min(chunk);
        left -= n;
        for b in &g.next_rows(n).bids {
            *counts.entry((arrival.div_euclid(w), b.bidder)).or_insert(0) += 1;
        }
        arrival += n as i64 * ARRIVAL_GAP;
    }
    let mut out: Output = counts
        .into_iter()
        .map(|((k, bidder), n)| {
            (k * w + w - 1, vec![int(bidder), int(n), ts(k * w), ts(k * w + w)], 1)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn q12_counts_bids_per_bidder_in_processing_time_windows() {
    let config = Config::default();
    let events = 3000;
    for chunk in [7, 1000] {
        let expected = q12_oracle(&config, events, chunk);
        let windows: BTreeSet<i64> = expected.iter().map(|(t, _, _)| *t).collect();
        assert!(windows.len() >= 3, "chunk {chunk}: {} windows", windows.len());
        assert!(expected.iter().any(|(_, row, _)| row[1] != "1"), "no bidder bid twice");
        assert_eq!(engine_output(Query::Q12, &config, events, chunk), expected, "chunk {chunk}");
    }
}

#[test]
fn q18_keeps_each_bidders_last_bid_per_auction() {
    check(Query::Q18, 3000);
}

#[test]
fn q19_keeps_the_ten_highest_bids_per_auction() {
    check(Query::Q19, 3000);
}

/// One event a second: 30 000 events span the hours of a day and more.
fn slow() -> Config {
    Config { rate: 1, ..Config::default() }
}

#[test]
fn q14_classifies_expensive_bids_by_the_hour() {
    let rows = Generator::new(slow()).next_rows(30_000);
    let kinds: BTreeSet<String> =
        oracle(Query::Q14, &rows).into_iter().map(|(_, row, _)| row[3].clone()).collect();
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    check_with(Query::Q14, &slow(), 30_000);
}

#[test]
fn q15_to_q17_keep_statistics_per_day() {
    // 88 000 s: the first day's statistics are replaced as its bids come, then the second
    // day's row starts beside it.
    let rows = Generator::new(slow()).next_rows(88_000);
    let days: BTreeSet<String> =
        oracle(Query::Q15, &rows).into_iter().map(|(_, row, _)| row[0].clone()).collect();
    assert_eq!(days.len(), 2, "{days:?}");
    for q in [Query::Q15, Query::Q16, Query::Q17] {
        check_with(q, &slow(), 88_000);
    }
}

#[test]
fn q20_expands_bids_with_their_auctions() {
    check(Query::Q20, 20_000);
}

#[test]
fn q21_adds_channel_ids() {
    // Some bids come through other channels without an id in their URL: they are dropped.
    let rows = Generator::new(Config::default()).next_rows(3000);
    let dropped = rows
        .bids
        .iter()
        .filter(|b| b.channel.starts_with("channel-") && channel_id(&b.url).is_none())
        .count();
    assert!(dropped > 0);
    check(Query::Q21, 3000);
}

#[test]
fn q22_splits_url_directories() {
    check(Query::Q22, 1500);
}

#[test]
fn q13_joins_bids_with_the_side_table() {
    check(Query::Q13, 3000);
}
