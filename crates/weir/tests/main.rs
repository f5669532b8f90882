//! The embedding API's integration tests, linked into one test binary (`cargo test -p weir --test
//! integration`). Each file below was a test binary of its own, and each binary links all of
//! DataFusion and Arrow (about 210 MB in a debug build): one binary per file filled the disk of a
//! CI run. A module's tests are named after its file (`differential::...`), so `cargo test -p weir
//! --test integration differential` still runs one file's tests.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

mod differential;
mod event_time;
mod incremental;
mod recovery;
mod script_fuzz;
mod sinks;
mod sketches;
mod smoke;
mod temporal;
mod workers;
