//! # weir-common: the vocabulary every Weir stage shares
//!
//! Weir's pipeline is `SQL text -> weir-sql -> weir-plan -> weir-exec -> weir`. The types that
//! cross those stage boundaries live here so that no crate has to reach upward:
//!
//! - [`time`]: logical time ([`Time`]), the `i64` tick domain of CQL instants.
//! - [`change`]: the [`ChangeBatch`], an Arrow record batch whose rows carry an instant and a
//!   signed multiplicity (diff). Streams are change batches with positive diffs only.
//! - [`error`]: [`WeirError`], the typed error every library crate returns, and [`Diagnostic`],
//!   a user-facing message with an optional source [`Span`] rendered with a caret.
//! - [`rng`]: [`rng::SplitMix64`], the seeded generator for anything random that must replay.
//! - [`ipc`]: record batches to Arrow IPC stream bytes and back, safe on damaged bytes (query
//!   state and checkpoints).
//!
//! Start with [`ChangeBatch`]: it is what flows between every pair of operators.

pub mod change;
pub mod error;
pub mod ipc;
pub mod rng;
pub mod time;

pub use change::ChangeBatch;
pub use error::{Diagnostic, Result, Span, WeirError};
pub use time::{
    format_time, parse_wall_duration, Time, TimeDomain, Watermark, WATERMARK_CLOSED, WATERMARK_MIN,
};
