//! # weir-bench: NEXMark for Weir
//!
//! The benchmark is three parts, one module each, and a driver:
//!
//! - [`generator`]: a deterministic, seeded NEXMark event generator (people, auctions and bids
//!   in the 1:3:46 mix, with hot auctions, bidders and sellers), producing Arrow batches or
//!   plain Rust values;
//! - [`files`]: the same events written as CSV or JSON-lines files (one per stream, timestamps
//!   as ISO-8601 text) and read back as batches;
//! - [`queries`]: NEXMark q0-q9, q11, q18 and q19, and the window table function queries, in
//!   Weir SQL;
//! - [`driver`]: runs one query through the embedding API ([`weir::Engine`]) and measures
//!   throughput, peak memory and latency; also the sliding-window scaling benchmark.
//! - [`decode`]: how fast Weir's file source takes in a CSV or JSON-lines file, beside arrow's
//!   reader alone.
//! - [`anon`]: the process's anonymous memory (peak RSS less the mapped binary), sampled.
//!
//! The `weir-bench` binary (`src/main.rs`) parses the command line and prints one line per
//! run; `docs/benchmarks.md` has the commands and the results. `tests/oracle.rs` checks every
//! query against an independent from-scratch evaluation on a small input.

pub mod anon;
pub mod decode;
pub mod driver;
pub mod encode;
pub mod files;
pub mod generator;
pub mod queries;

pub use generator::{Config, Generator};
pub use queries::{Params, Query};
