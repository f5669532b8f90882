//! `weir serve`'s integration tests, linked into one test binary (`cargo test -p weir-server --test
//! integration`). Each file below was a test binary of its own, and each binary links all of
//! DataFusion and Arrow (about 210 MB in a debug build): one binary per file filled the disk of a
//! CI run. A module's tests are named after its file (`psql::...`), so `cargo test -p weir-server
//! --test integration psql` still runs one file's tests.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

mod clients;
mod psql;
mod psycopg;
