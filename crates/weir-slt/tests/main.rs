//! weir-slt's integration tests, linked into one test binary (`cargo test -p weir-slt --test
//! integration`). Each file below was a test binary of its own, and each binary links all of
//! DataFusion and Arrow (about 210 MB in a debug build): one binary per file filled the disk of a
//! CI run. A module's tests are named after its file (`complete::...`), so `cargo test -p weir-slt
//! --test integration complete` still runs one file's tests. grammar-tests, SQLite's corpus and the
//! docs' SQL keep binaries of their own (`grammar`, `sqlite`, `docs`): they have their own harness,
//! one trial per file or example.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

mod cli;
mod complete;
