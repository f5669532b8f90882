//! Checkpoints: a consistent cut of the engine's state at an instant boundary, on disk.
//!
//! [`store`] writes and reads checkpoint files (atomic, versioned, checksummed, pruned);
//! [`wal`] logs what is pushed between checkpoints.

pub mod store;
pub mod wal;
