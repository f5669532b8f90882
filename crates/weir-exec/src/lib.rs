//! # weir-exec: the incremental executor
//!
//! A [`weir_plan::LogicalPlan`] is compiled ([`compile`]) into a [`Graph`]: a flat graph of
//! [`Operator`]s, one node per plan node, in a vector with each node's inputs (by index)
//! before it and the query's output last. A [`QueryRunner`] ([`query`]) drives it:
//!
//! 1. input elements and table changes are buffered per input, ordered by (time, arrival);
//! 2. the query's frontier is the minimum of its inputs' watermarks; every instant below it is
//!    complete;
//! 3. the runner evaluates the instants in order: the smallest of a buffered input time, a
//!    heartbeat, or a node's wake-up (a window expiry or slide boundary). At each instant the
//!    graph walks its nodes once, in order, handing each node its inputs' changes at that
//!    instant ([`weir_common::ChangeBatch`]) and passing its output on to its consumer, so work
//!    is proportional to what changed. When every node can, all complete instants are one step
//!    (a span) instead.
//!
//! An operator implements only its own behaviour ([`operator`]): one evaluation per step, its
//! own wake-up and span capability, its own state; the graph ([`graph`]) owns the walk, the
//! query's wake-up and the order of the saved state ([`state`]). Operators live in [`ops`],
//! one per file (or directory), each documenting its delta semantics. Rows that operators keep
//! in state are encoded with Arrow's row format ([`row::RowCodec`]); scalar expressions are
//! DataFusion physical expressions evaluated on whole batches ([`expr`]). Sketches (mergeable
//! approximate summaries: HyperLogLog) are in [`sketch`], and the aggregate that keeps them
//! per window slice in [`ops::sketch_aggregate`].
//!
//! Start reading at [`QueryRunner::advance`], then [`Graph::eval`] and an operator such as
//! [`ops::aggregate`].

pub mod compile;
pub mod consolidate;
pub mod dirty;
pub mod expr;
pub mod graph;
pub mod heap;
pub mod numeric_row;
pub mod operator;
pub mod ops;
pub mod query;
pub mod route;
pub mod row;
pub mod sketch;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;

pub use compile::compile;
pub use graph::Graph;
pub use operator::{EvalCtx, Operator, Step};
pub use query::{OutputKind, QueryRunner};
