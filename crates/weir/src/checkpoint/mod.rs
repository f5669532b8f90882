//! Checkpoints: a consistent cut of the engine's state at an instant boundary, on disk.
//!
//! [`store`] writes and reads checkpoint files (atomic, versioned, checksummed, pruned).

pub mod store;
