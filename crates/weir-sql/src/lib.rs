//! # weir-sql: from SQL text to a logical plan
//!
//! Two steps, one module each:
//!
//! 1. [`parser`]: splits a script into statements and parses each into a [`Statement`]. CQL's
//!    additions (windows after a stream name, `SELECT ISTREAM|DSTREAM|RSTREAM`, `CREATE STREAM
//!    ... WATERMARK FOR`, `ADVANCE`, `CLOSE`, `AT τ` on table changes) are taken out of the token
//!    stream by a pre-pass; the remaining ordinary SQL is parsed by `sqlparser`. Errors keep the
//!    line and column of the original text.
//! 2. [`binder`]: resolves names against a [`Catalog`], plans the ordinary SQL with DataFusion's
//!    `SqlToRel` (types, coercion, subquery decorrelation) and converts the result into Weir's
//!    [`weir_plan::LogicalPlan`], where windows and relation-to-stream operators are nodes.
//!
//! [`catalog`] holds the definitions of streams, tables and views that both steps consult.

pub mod binder;
pub mod catalog;
pub mod ddl;
pub mod in_subquery;
pub mod join_order;
pub mod mixed_types;
pub mod parser;
pub mod types;

pub use binder::{bind_query, Binder};
pub use catalog::{Catalog, CatalogEntry, StreamDef, TableDef, ViewDef};
pub use parser::{parse_script, CqlQuery, Statement, WindowAst};
/// The SQL parser Weir builds on, for its AST types.
pub use sqlparser;
