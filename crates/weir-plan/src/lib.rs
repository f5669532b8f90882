//! # weir-plan: the logical plan of a continuous query
//!
//! A [`LogicalPlan`] is a tree of CQL's three operator classes (Arasu, Babu, Widom 2006):
//!
//! - **stream-to-relation**: [`LogicalPlan::Window`] with a [`WindowSpec`] (`[RANGE T]`,
//!   `[ROWS N]`, ...) turns a stream into a time-varying relation;
//! - **relation-to-relation**: filter, project, join, aggregate, distinct, union: ordinary SQL
//!   evaluated on the instantaneous relations;
//! - **relation-to-stream**: [`LogicalPlan::ToStream`] with [`R2S`] (`ISTREAM`, `DSTREAM`,
//!   `RSTREAM`) turns a relation back into a stream.
//!
//! Leaves are [`LogicalPlan::StreamScan`] (a stream's elements) and [`LogicalPlan::TableScan`]
//! (a table's changes). Every node knows its output [`PlanKind`] (stream or relation) and its
//! schema; scalar expressions are DataFusion [`Expr`]s over the input's schema, already
//! type-coerced by the binder. [`explain`] prints the tree for `EXPLAIN`; [`prune`] narrows
//! each join input to the columns used above it; [`lift_window_bounds`] computes an aggregate
//! per TUMBLE/HOP window over the plain window and adds the window's bounds after;
//! [`pre_aggregate_panes`] aggregates a sliding, tumbling or cumulating window's elements pane
//! by pane as they arrive, so that a slide merges panes instead of applying every element;
//! [`fuse_window_aggregates`] turns an `ISTREAM` of such an aggregate into one operator that
//! emits each window's groups once, when it closes; [`hold_join_windows`] lets an inner join
//! hold a tumbling window of a stream itself, indexing its elements as they arrive;
//! [`share_subplans`], last, makes each sub-plan that occurs more than once one node, so that
//! a CTE read twice is computed once (the plan is then a DAG: a node may have several
//! consumers).
//!
//! The binder in `weir-sql` builds plans; the compiler in `weir-exec` turns them into dataflows.

pub mod explain;
pub mod held;
pub mod interval;
pub mod panes;
pub mod plan;
pub mod prune;
pub mod share;
pub mod window_aggregate;
pub mod window_bounds;

pub use explain::explain;
pub use held::hold_join_windows;
pub use panes::pre_aggregate_panes;
pub use plan::{
    bloom_cells, sketch_input, AggCall, AggFunc, ApplyKind, ApplySubquery, Fraction, FrameBound,
    HeldWindow, JoinKind, LogicalPlan, Membership, OverCall, OverFrame, OverFunc, PlanKind,
    RankFunc, RankMode, SampleOver, SketchWindow, WindowFrame, WindowSpec, BLOOM_CAPACITIES,
    DEDUP_CAPACITIES, DEFAULT_BLOOM_CAPACITY, DEFAULT_BLOOM_ERROR, DEFAULT_DEDUP_CAPACITY,
    DEFAULT_DEDUP_ERROR, DEFAULT_HLL_PRECISION, DEFAULT_TDIGEST_COMPRESSION,
    DEFAULT_TOP_K_CAPACITY, HLL_PRECISIONS, MAX_FILTER_BYTES, R2S, TDIGEST_COMPRESSIONS,
    TOP_K_CAPACITIES, TOP_K_KS,
};
pub use prune::prune;
pub use share::{post_order, share_subplans};
pub use window_aggregate::fuse_window_aggregates;
pub use window_bounds::{lift_window_bounds, mark_istream_bounds};
