//! # weir-exec: the incremental executor
//!
//! A [`weir_plan::LogicalPlan`] is compiled ([`compile`]) into a tree of [`Operator`]s, one per
//! plan node, and driven by a [`QueryRunner`] ([`query`]):
//!
//! 1. input elements and table changes are buffered per input, ordered by (time, arrival);
//! 2. the query's frontier is the minimum of its inputs' watermarks; every instant below it is
//!    complete;
//! 3. the runner evaluates the instants in order: the smallest of a buffered input time, a
//!    heartbeat, or an operator's wake-up (a window expiry or slide boundary). At each instant
//!    every operator turns its inputs' changes at that instant into its own output changes
//!    ([`weir_common::ChangeBatch`]), so work is proportional to what changed.
//!
//! Operators live in [`ops`], one per file, each documenting its delta semantics. Rows that
//! operators keep in state are encoded with Arrow's row format ([`row::RowCodec`]); scalar
//! expressions are DataFusion physical expressions evaluated on whole batches ([`expr`]).

pub mod compile;
pub mod consolidate;
pub mod expr;
pub mod operator;
pub mod ops;
pub mod query;
pub mod row;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;

pub use compile::compile;
pub use operator::{EvalCtx, Operator};
pub use query::{OutputKind, QueryRunner};
