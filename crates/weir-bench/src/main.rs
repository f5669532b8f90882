//! `weir-bench`: NEXMark and the sliding-window scaling benchmark. See `docs/benchmarks.md`.
//!
//! ```text
//! weir-bench [--query q0|q1|...|q8|q9|q18|q19|all] [--events N] [--input memory|csv|json]
//!            [--chunk N] [--rate EVENTS_PER_SEC] [--seed N] [--data DIR] [--workers N]
//! weir-bench --scaling [--events N] [--ratios 1,10,60,360,3600]
//! weir-bench --sketch [--events N] [--keys N] [--agg 'COUNT(DISTINCT k)']
//! weir-bench --write csv|json [--events N] [--data DIR]
//! ```

use std::path::PathBuf;

/// The same allocator as the `weir` binary (operator state makes many small allocations; the
/// system allocator spent 10-20% of q4/q5/q7 in malloc and free).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{bail, Context, Result};
use weir_bench::driver::{reset_peak_rss, run, scaling, sketch, Input, RunConfig};
use weir_bench::files::{path_of, write_events, Format};
use weir_bench::{Config, Params, Query};

struct Args {
    queries: Vec<Query>,
    events: u64,
    input: String,
    chunk: usize,
    rate: u64,
    seed: u64,
    data: Option<PathBuf>,
    scaling: bool,
    sketch: bool,
    keys: u64,
    agg: Option<String>,
    ratios: Vec<i64>,
    write: Option<Format>,
    workers: usize,
}

fn format_of(s: &str) -> Result<Format> {
    match s {
        "csv" => Ok(Format::Csv),
        "json" | "jsonl" => Ok(Format::Json),
        other => bail!("unknown file format {other} (csv or json)"),
    }
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        queries: vec![Query::Q0],
        events: 1_000_000,
        input: "memory".into(),
        chunk: 10_000,
        rate: Config::default().rate,
        seed: Config::default().seed,
        data: None,
        scaling: false,
        sketch: false,
        keys: 1_000_000,
        agg: None,
        ratios: vec![1, 10, 60, 360, 3600],
        write: None,
        workers: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--query" => {
                let v = value()?;
                a.queries = if v == "all" {
                    Query::ALL.to_vec()
                } else {
                    v.split(',')
                        .map(|q| Query::parse(q).with_context(|| format!("unknown query {q}")))
                        .collect::<Result<_>>()?
                };
            }
            "--events" => a.events = value()?.replace('_', "").parse()?,
            "--input" => a.input = value()?,
            "--chunk" => a.chunk = value()?.parse()?,
            "--rate" => a.rate = value()?.parse()?,
            "--seed" => a.seed = value()?.parse()?,
            "--workers" => a.workers = value()?.parse()?,
            "--data" => a.data = Some(PathBuf::from(value()?)),
            "--scaling" => a.scaling = true,
            "--sketch" => a.sketch = true,
            "--agg" => a.agg = Some(value()?),
            "--keys" => a.keys = value()?.replace('_', "").parse()?,
            "--ratios" => {
                a.ratios = value()?.split(',').map(|r| r.parse()).collect::<Result<_, _>>()?
            }
            "--write" => a.write = Some(format_of(&value()?)?),
            "-h" | "--help" => {
                println!(
                    "{}",
                    include_str!("main.rs").lines().skip(2).take(7).collect::<Vec<_>>().join("\n")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other} (try --help)"),
        }
    }
    Ok(a)
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let generator = Config { seed: a.seed, rate: a.rate, ..Config::default() };
    let data = a.data.clone().unwrap_or_else(|| {
        PathBuf::from(format!("target/nexmark/{}-events-seed{}-rate{}", a.events, a.seed, a.rate))
    });
    if let Some(format) = a.write {
        write_events(&data, format, &generator, a.events)?;
        println!("wrote {} events to {}", a.events, data.display());
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
    if a.sketch {
        println!(
            "# one hour sliding by a minute (a tick is a second), 1000 events per tick, {} keys",
            a.keys
        );
        for agg in ["COUNT(DISTINCT k)", "APPROX_COUNT_DISTINCT(k)", "APPROX_COUNT_DISTINCT(k, 12)"]
        {
            println!("{}", sketch(agg, a.events, a.keys, 1000, a.chunk)?.line());
        }
        return Ok(());
    }
    let input = match a.input.as_str() {
        "memory" => Input::Memory,
        f => {
            let format = format_of(f)?;
            if !path_of(&data, "bid", format).exists() {
                eprintln!("writing {} events to {} (not timed)", a.events, data.display());
                write_events(&data, format, &generator, a.events)?;
            }
            Input::Files(format, data.clone())
        }
    };
    for q in a.queries {
        reset_peak_rss();
        let cfg = RunConfig {
            query: q,
            events: a.events,
            chunk: a.chunk,
            generator: generator.clone(),
            params: Params::default(),
            input: input.clone(),
            workers: a.workers,
        };
        let report = run(&cfg)?;
        println!("{}", report.line());
    }
    Ok(())
}
