//! # weir-workers: Weir's dataflow on timely-dataflow workers
//!
//! A query's compiled [`weir_exec::Graph`] runs here on several workers: every worker hosts
//! every node of the graph over a part of the input, and rows move between workers where an
//! operator needs them together ([`weir_exec::route`]: grouping, join and DISTINCT keys, or
//! everything on worker 0 for operators with a global order). The operators are the
//! executor's own, hosted unchanged: [`node`] drives one of them the way the one-worker
//! [`weir_exec::QueryRunner`] drives the whole graph; [`runtime`] runs the timely workers;
//! [`Runner`] is what the engine holds for a running query, on one worker or on many, with
//! the same output either way.

mod cluster;
mod node;
mod part;
mod runner;
mod runtime;

pub use cluster::{fingerprint, Cluster, Resolver};
pub use runner::{saved_workers, Runner};
pub use runtime::{exchanges, Traffic, Workers};
