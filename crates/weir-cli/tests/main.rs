//! The `weir` command's integration tests, linked into one test binary (`cargo test -p weir-cli
//! --test integration`). Each file below was a test binary of its own, and each binary links all of
//! DataFusion and Arrow (about 210 MB in a debug build): one binary per file filled the disk of a
//! CI run. A module's tests are named after its file (`crash::...`), so `cargo test -p weir-cli
//! --test integration crash` still runs one file's tests.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

mod workload;

mod cli;
mod cluster;
mod crash;
mod docs_session;
mod repl;
