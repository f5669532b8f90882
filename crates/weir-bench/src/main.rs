//! `weir-bench`: NEXMark and the sliding-window scaling benchmark. `weir-bench --help` lists
//! the options; `docs/benchmarks.md` says what each run measures.

use std::path::PathBuf;

/// The same allocator as the `weir` binary, built the same way (operator state makes many
/// small allocations; the system allocator spent 10-20% of q4/q5/q7 in malloc and free; see
/// the `weir` binary for `no_thp`), with purged memory reset as `weir` does.
#[global_allocator]
static GLOBAL: weir_alloc::MiMalloc = weir_alloc::MiMalloc;

use anyhow::Result;
use clap::Parser;
use weir_bench::decode::decode;
use weir_bench::driver::{
    membership, paced, reset_peak_rss, run, scaling, sketch, sketch_query, skew, Input, KeyLaw,
    RunConfig,
};
use weir_bench::encode::encode;
use weir_bench::files::{path_of, write_events, Format};
use weir_bench::{Config, Params, Query};

/// The queries `--top-k` compares: the exact top 10 by GROUP BY and ORDER BY ... LIMIT, and
/// APPROX_TOP_K.
const TOP_K_QUERIES: [&str; 2] = [
    "SELECT k, COUNT(*) AS c FROM s [RANGE 3600 SLIDE 60] GROUP BY k ORDER BY c DESC, k LIMIT 10",
    "SELECT ISTREAM APPROX_TOP_K(k, 10) FROM s [RANGE 3600 SLIDE 60]",
];

/// The aggregates `--sketch` compares when no `--agg` is given.
const SKETCH_AGGS: [&str; 3] =
    ["COUNT(DISTINCT k)", "APPROX_COUNT_DISTINCT(k)", "APPROX_COUNT_DISTINCT(k, 12)"];

#[derive(Debug, Parser)]
#[command(
    name = "weir-bench",
    version,
    about = "NEXMark for Weir: seeded events, the NEXMark queries, and the benchmark driver \
             (docs/benchmarks.md)",
    after_help = "\
Examples:
  weir-bench --query q5 --events 10_000_000
  weir-bench --query all --input csv
  weir-bench --query q0,q5 --events 1000000 --pace 100000 --chunk 100
  weir-bench --scaling --events 2000000
  weir-bench --sketch --events 10000000 --keys 1000000
  weir-bench --top-k --events 10000000 --keys 1000000
  weir-bench --top-k approx --events 10000000 --keys 1000000
  weir-bench --decode csv --events 2000000
  weir-bench --encode csv --events 2000000
  weir-bench --write csv --events 1000000 --data /tmp/nexmark"
)]
struct Args {
    /// The queries to run: q0 ... q9, q11 ... q22, tumble, hop, cumulate, tumble_cql,
    /// hop_cql, a list (q1,q5) or all
    #[arg(long, value_name = "QUERIES", default_value = "q0", value_parser = parse_queries)]
    query: Queries,
    /// Events generated (underscores allowed: 10_000_000)
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = parse_count)]
    events: u64,
    /// Where the events come from: memory, or files in --data written first if missing (csv,
    /// json)
    #[arg(long, value_name = "FROM", default_value = "memory", value_parser = ["memory", "csv", "json", "jsonl"])]
    input: String,
    /// Events pushed into the engine at a time
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    chunk: usize,
    /// Generator: events per second of event time
    #[arg(long, value_name = "EVENTS_PER_SEC", default_value_t = Config::default().rate)]
    rate: u64,
    /// Generator: the seed
    #[arg(long, value_name = "N", default_value_t = Config::default().seed)]
    seed: u64,
    /// Directory of the event files (default target/nexmark/N-events-seedS-rateR)
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Timely workers the query runs on
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    workers: u64,
    /// Instead of NEXMark: COUNT(*) and MAX(v) per key over [RANGE w SLIDE s], for each
    /// w/s in --ratios
    #[arg(long, conflicts_with_all = ["sketch", "write"])]
    scaling: bool,
    /// With --scaling: the window/slide ratios
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,10,60,360,3600")]
    ratios: Vec<i64>,
    /// Instead of NEXMark: exact and approximate distinct counts over an hour sliding by a
    /// minute
    #[arg(long, conflicts_with = "write")]
    sketch: bool,
    /// Instead of NEXMark: this continuous query over `s (k BIGINT, t BIGINT)`, --events
    /// elements, 1000 a tick, keys uniform below --keys (with the state the engine accounts
    /// beside the process's memory)
    #[arg(long, value_name = "SQL", conflicts_with_all = ["sketch", "write"])]
    state_query: Option<String>,
    /// With --state-query: log every push in a write-ahead log (in a temporary data
    /// directory) synced so
    #[arg(long, value_name = "SYNC", requires = "state_query", value_parser = ["fsync", "write"])]
    wal: Option<String>,
    /// With --state-query: `SET memory_limit` to SIZE first (e.g. 64GB: checked, never met)
    #[arg(long, value_name = "SIZE", requires = "state_query")]
    memory_limit: Option<String>,
    /// Instead of NEXMark: the exact top 10 keys (GROUP BY, ORDER BY COUNT(*) DESC LIMIT 10)
    /// and APPROX_TOP_K(k, 10) over an hour sliding by a minute, keys Zipf-like
    /// (`--top-k exact` or `--top-k approx` runs one alone, for a peak RSS of its own)
    #[arg(
        long,
        value_name = "WHICH",
        num_args = 0..=1,
        default_missing_value = "both",
        value_parser = ["both", "exact", "approx"],
        conflicts_with_all = ["sketch", "scaling", "write"]
    )]
    top_k: Option<String>,
    /// Instead of NEXMark: each of --events elements looked up as it arrives in a table of
    /// --keys keys (half of them present), exactly (a temporal join) and by MIGHT_CONTAIN at
    /// 1 % (`--membership exact` or `approx` runs one alone)
    #[arg(
        long,
        value_name = "WHICH",
        num_args = 0..=1,
        default_missing_value = "both",
        value_parser = ["both", "exact", "approx"],
        conflicts_with_all = ["sketch", "scaling", "write", "top_k"]
    )]
    membership: Option<String>,
    /// Instead of NEXMark: a count, sum and maximum per key over a sliding window (one minute
    /// by ten seconds), keys uniform and then by Zipf's law with exponent S (default 1.5: key 0
    /// has 39 % of the events with 1 000 keys), on --workers workers
    #[arg(
        long,
        value_name = "S",
        num_args = 0..=1,
        default_missing_value = "1.5",
        conflicts_with_all = ["sketch", "scaling", "write", "top_k", "membership"]
    )]
    skew: Option<f64>,
    /// With --sketch, --top-k, --membership or --skew: distinct keys
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = parse_count)]
    keys: u64,
    /// With --sketch: run this aggregate alone (default: COUNT(DISTINCT k),
    /// APPROX_COUNT_DISTINCT(k) and APPROX_COUNT_DISTINCT(k, 12))
    #[arg(long, value_name = "AGG", requires = "sketch")]
    agg: Option<String>,
    /// Latency under a steady arrival rate: events arrive at this many per second of wall-clock
    /// time, --chunk at a time (memory input), and each output's latency is measured from the
    /// scheduled arrival of the event that caused it (p50, p99, p99.9, max)
    #[arg(long, value_name = "EVENTS_PER_SEC")]
    pace: Option<f64>,
    /// Only write the events to --data, as csv or json, and stop
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    write: Option<Format>,
    /// Instead of NEXMark: how fast Weir's file source takes in the bid file of --data (csv or
    /// json; written first if missing), beside arrow's reader alone on the same file
    #[arg(long, value_name = "FORMAT", value_parser = parse_format, conflicts_with_all = ["sketch", "scaling", "write", "top_k", "pace"])]
    decode: Option<Format>,
    /// Instead of NEXMark: how fast a file sink writes the bid rows of --data as csv or json,
    /// beside the same engine without the sink and arrow's writer alone
    #[arg(long, value_name = "FORMAT", value_parser = parse_format, conflicts_with_all = ["sketch", "scaling", "write", "top_k", "pace", "decode"])]
    encode: Option<Format>,
    /// With --decode or --encode: timed runs of each side, in turn (the fastest is reported)
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: usize,
}

/// The queries of one `--query` value.
#[derive(Debug, Clone)]
struct Queries(Vec<Query>);

fn parse_queries(s: &str) -> Result<Queries, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Queries(Query::ALL.to_vec()));
    }
    s.split(',')
        .map(|q| {
            Query::parse(q.trim()).ok_or_else(|| {
                let names: Vec<&str> = Query::ALL.iter().map(|q| q.name()).collect();
                format!("unknown query '{q}' (the queries: {}, or all)", names.join(", "))
            })
        })
        .collect::<Result<_, _>>()
        .map(Queries)
}

fn parse_count(s: &str) -> Result<u64, String> {
    s.replace('_', "").parse().map_err(|_| format!("'{s}' is not a number"))
}

fn parse_format(s: &str) -> Result<Format, String> {
    match s {
        "csv" => Ok(Format::Csv),
        "json" | "jsonl" => Ok(Format::Json),
        other => Err(format!("unknown file format '{other}' (csv or json)")),
    }
}

fn main() -> Result<()> {
    weir_alloc::reset_on_purge();
    let a = Args::parse();
    let queries = a.query.0.clone();
    let generator = Config { seed: a.seed, rate: a.rate, ..Config::default() };
    let data = a.data.clone().unwrap_or_else(|| {
        PathBuf::from(format!("target/nexmark/{}-events-seed{}-rate{}", a.events, a.seed, a.rate))
    });
    if let Some(format) = a.write {
        write_events(&data, format, &generator, a.events)?;
        println!("wrote {} events to {}", a.events, data.display());
        return Ok(());
    }
    // The event files of a file mode, written first (untimed) if missing.
    let ensure_files = |format: Format| -> Result<()> {
        if !path_of(&data, "bid", format).exists() {
            eprintln!("writing {} events to {} (not timed)", a.events, data.display());
            write_events(&data, format, &generator, a.events)?;
        }
        Ok(())
    };
    if let Some(format) = a.decode {
        ensure_files(format)?;
        println!("{}", decode(&data, format, a.runs)?.line());
        return Ok(());
    }
    if let Some(format) = a.encode {
        ensure_files(Format::Csv)?;
        println!("{}", encode(&data, format, a.runs)?.line());
        return Ok(());
    }
    if a.scaling {
        println!("# COUNT(*) and MAX(v) per key over [RANGE w SLIDE s], 10 events per tick, 1000 keys, slide 10 ticks");
        for r in &a.ratios {
            let p = scaling(*r, 10, a.events, 10, 1000, a.chunk)?;
            println!("{}", p.line());
        }
        return Ok(());
    }
    if let Some(which) = &a.membership {
        println!("# {} keys in a table, events looked up as they arrive, half present", a.keys);
        let runs: &[bool] = match which.as_str() {
            "exact" => &[true],
            "approx" => &[false],
            _ => &[true, false],
        };
        let dir = a.data.clone().unwrap_or_else(|| PathBuf::from("target/nexmark"));
        for exact in runs {
            let p = membership(*exact, a.events, a.keys, a.chunk, &dir)?;
            println!("{}", p.line());
        }
        return Ok(());
    }
    if let Some(q) = &a.state_query {
        let dir = std::env::temp_dir().join(format!("weir-bench-wal-{}", std::process::id()));
        let wal = a.wal.as_deref().and_then(weir::WalSync::parse).map(|s| (s, dir.as_path()));
        let setup: Vec<String> =
            a.memory_limit.iter().map(|l| format!("SET memory_limit = '{l}'")).collect();
        let law = KeyLaw::Uniform;
        let p = sketch_query(&setup, q, a.events, a.keys, law, 1000, a.chunk, wal, 1)?;
        let _ = std::fs::remove_dir_all(&dir);
        println!("{}", p.line());
        return Ok(());
    }
    if let Some(s) = a.skew {
        let workers = usize::try_from(a.workers)?;
        let (points, top) = skew(a.events, a.keys, s, a.chunk, workers)?;
        println!(
            "# {} keys, 1000 events per tick; under Zipf (s = {s}) key 0 has {:.1} % of the events",
            a.keys,
            100.0 * top
        );
        for p in points {
            println!("{}", p.line());
        }
        return Ok(());
    }
    if let Some(which) = &a.top_k {
        println!(
            "# one hour sliding by a minute (a tick is a second), 1000 events per tick, {} keys \
             Zipf-like",
            a.keys
        );
        let runs = match which.as_str() {
            "exact" => &TOP_K_QUERIES[..1],
            "approx" => &TOP_K_QUERIES[1..],
            _ => &TOP_K_QUERIES[..],
        };
        for q in runs {
            println!(
                "{}",
                sketch_query(&[], q, a.events, a.keys, KeyLaw::Zipf, 1000, a.chunk, None, 1)?
                    .line()
            );
        }
        return Ok(());
    }
    if a.sketch {
        println!(
            "# one hour sliding by a minute (a tick is a second), 1000 events per tick, {} keys",
            a.keys
        );
        let aggs: Vec<&str> = match &a.agg {
            Some(agg) => vec![agg.as_str()],
            None => SKETCH_AGGS.to_vec(),
        };
        for agg in aggs {
            println!("{}", sketch(agg, a.events, a.keys, 1000, a.chunk)?.line());
        }
        return Ok(());
    }
    let input = match a.input.as_str() {
        "memory" => Input::Memory,
        f => {
            let format = parse_format(f).map_err(anyhow::Error::msg)?;
            ensure_files(format)?;
            Input::Files(format, data.clone())
        }
    };
    for q in queries {
        reset_peak_rss();
        let cfg = RunConfig {
            query: q,
            events: a.events,
            chunk: a.chunk,
            generator: generator.clone(),
            params: Params::default(),
            input: input.clone(),
            workers: usize::try_from(a.workers)?,
        };
        if let Some(rate) = a.pace {
            anyhow::ensure!(input == Input::Memory, "--pace runs on events generated in memory");
            println!("{}", paced(&cfg, rate)?.line());
            continue;
        }
        let report = run(&cfg)?;
        println!("{}", report.line());
    }
    Ok(())
}
