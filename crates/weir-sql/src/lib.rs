//! # weir-sql: from SQL text to a logical plan
//!
//! The first stage of `SQL text -> weir-sql -> weir-plan -> weir-exec -> weir`:
//! [`parse_script`] turns a script into [`Statement`]s, and [`bind_query`] turns a query
//! ([`CqlQuery`]) into a [`weir_plan::LogicalPlan`] against a [`Catalog`]. Start reading at
//! [`parser`], then [`binder`].
//!
//! - [`parser`]: script -> statements; a pre-pass takes CQL's additions (windows, `SELECT
//!   ISTREAM`, `WATERMARK FOR`, `ADVANCE`, `CLOSE`, `AT τ`) out of sqlparser's tokens.
//! - [`binder`]: query -> Weir's plan, through DataFusion's `SqlToRel`, analyzer and chosen
//!   rewrites; windows and relation-to-stream operators become plan nodes.
//! - [`catalog`]: the stream, table and view definitions the binder resolves names in.
//! - [`ddl`]: the column and watermark clauses of `CREATE STREAM`/`TABLE` -> catalog definitions.
//! - [`types`]: declared SQL column types <-> Arrow types.
//! - [`join_order`]: binder rewrite: reorders inner and comma joins so each join has a key.
//! - [`correlated_on`]: binder rewrite: outer references in an inner join's `ON` in a subquery
//!   move to a filter above the join (so the subquery decorrelates); refused in an outer join's.
//! - [`in_subquery`]: binder rewrite: nested `x [NOT] IN (subquery)` -> exact EXISTS tests.
//! - [`mixed_types`]: binder rewrite: `IN` between a text literal and numbers, as SQLite answers.
//! - [`checked_literals`]: binder rewrite: integer literal arithmetic folded with overflow checks.

pub mod binder;
pub mod catalog;
pub mod checked_literals;
pub mod correlated_on;
pub mod ddl;
pub mod in_subquery;
pub mod join_order;
pub mod mixed_types;
pub mod parser;
pub mod types;

pub use binder::{bind_query, bind_query_with, BindOptions, Binder, NullOrder};
pub use catalog::{Catalog, CatalogEntry, RowKind, StreamDef, TableDef, ViewDef};
pub use parser::{parse_script, CqlQuery, Statement, WindowAst};
/// The SQL parser Weir builds on, for its AST types.
pub use sqlparser;
