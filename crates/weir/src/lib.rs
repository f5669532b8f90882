//! # Weir: a continuous SQL query engine
//!
//! Weir runs continuous queries in CQL, the language of Stanford's STREAM system: streams are
//! turned into relations by windows (`bids [RANGE 10 SECONDS]`), ordinary SQL runs on those
//! relations, and `ISTREAM`/`DSTREAM`/`RSTREAM` turn results back into streams. Evaluation is
//! incremental and deterministic: the output depends only on the input, never on arrival
//! interleaving or batching.
//!
//! This crate is what applications embed: an [`Engine`] holds the catalog (streams, tables,
//! views), the running continuous queries and their [`Subscription`]s.
//!
//! ```
//! use weir::Engine;
//!
//! let mut engine = Engine::new();
//! engine.execute("CREATE STREAM s (a BIGINT, t BIGINT, WATERMARK FOR t AS t)").unwrap();
//! let sub = engine.subscribe("SELECT a FROM s WHERE a > 1").unwrap();
//! engine.execute("INSERT INTO s VALUES (1, 1), (3, 1), (2, 2); CLOSE s").unwrap();
//! let lines: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
//! assert_eq!(lines, ["@1 3", "@2 2"]);
//! ```
//!
//! Pipeline: SQL text -> [`weir_sql::parser`] -> [`weir_sql::binder`] ->
//! [`weir_plan::LogicalPlan`] -> [`weir_exec::QueryRunner`] -> [`Subscription`].
//!
//! Modules:
//! - [`engine`]: the [`Engine`], a thin dispatcher over the parts that own the state: the
//!   catalog (what exists), the tables (contents, one-shot queries), the dataflow (running
//!   queries and their outputs), checkpoints and recovery;
//! - [`intake`]: how streams take in elements: watermarks, late and bad rows, idleness, the
//!   `s$late` and `s$errors` streams;
//! - [`source`]: CSV and JSON-lines files and stdin; [`sink`]: query output appended to files;
//! - [`subscription`]: output changes; [`format`]: values and instants as text;
//!   [`checkpoint`]: checkpoint files.

pub mod checkpoint;
pub mod engine;

/// docs/embedding.md's Rust examples, compiled and run as doctests so the guide cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/embedding.md")]
pub struct EmbeddingGuide;
pub mod format;
pub mod intake;
pub mod sink;
pub mod source;
pub mod subscription;

/// The `arrow` crate Weir's batches are made of, so an embedder builds them with the same
/// version without pinning it by hand (`weir::arrow::array::RecordBatch`).
pub use arrow;
pub use checkpoint::wal::WalSync;
pub use datafusion_common::ScalarValue as Value;
pub use engine::serve_cluster;
pub use engine::{
    CatalogObject, CopyIn, CopyReport, Engine, ExecResult, QueryShape, Recovery, SourcePoll,
};
pub use intake::{BadRowPolicy, LatePolicy, StreamPolicy, StreamStats};
pub use sink::{SinkFormat, SinkSpec};
pub use source::{Format, Input, SourceProgress, SourceSpec};
pub use subscription::{Batches, Change, Row, Subscription};
pub use weir_common::{
    parse_wall_duration, ChangeBatch, Result, Time, TimeDomain, Watermark, WeirError,
    WATERMARK_CLOSED, WATERMARK_MIN,
};
pub use weir_plan::PlanKind;
pub use weir_sql::parser::{ObjectKind, ParsedStatement};
pub use weir_sql::NullOrder;
pub use weir_workers::Cluster;
