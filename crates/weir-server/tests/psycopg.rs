//! `weir serve` from Python: psycopg 3 (`.ci/run` installs it with pip if missing) runs
//! `tests/clients/psycopg_session.py` against a server, whose printed checks are compared here.

#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::process::Command;

use weir_server::{Config, Server};

#[test]
fn psycopg_prepares_binds_and_fetches_a_subscription() {
    let has_psycopg = Command::new("python3")
        .args(["-c", "import psycopg"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_psycopg {
        assert!(
            std::env::var_os("WEIR_SKIP_PSYCOPG").is_some(),
            "python3 with psycopg is needed (pip install 'psycopg[binary]'); \
             set WEIR_SKIP_PSYCOPG=1 to skip this test"
        );
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = Config { listen: "127.0.0.1:0".parse().unwrap(), ..Config::default() };
    let server = runtime.block_on(Server::bind(config)).unwrap();
    let port = server.local_addr().unwrap().port();
    runtime.spawn(server.run());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/psycopg_session.py");
    let out = Command::new("python3").arg(script).arg(port.to_string()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout,
        "view [('a', 10), (\"it's\", 12)]\n\
         changes [(1, 1, 'a', 10), (2, 1, 'b', 3), (3, 1, \"it's\", 12)]\n\
         running 1\n"
    );
}
