//! The `weir-slt` command line (clap): its help, and what it says to a mistake.
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::process::Command;

fn slt(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir-slt")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn help_lists_the_options() {
    let (code, stdout, stderr) = slt(&["--help"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(stdout.starts_with(
        "Runs grammar-tests and sqllogictest-format files (*.slt, *.test) against Weir\n\n\
         Usage: weir-slt [OPTIONS] [PATH]...\n"
    ));
    for option in ["--baseline <FILE>", "-j, --jobs <N>", "-w, --workers <N>", "--complete"] {
        assert!(stdout.contains(option), "{option}: {stdout}");
    }
}

#[test]
fn mistakes_are_explained() {
    let usage = "\n\nUsage: weir-slt [OPTIONS] [PATH]...\n\nFor more information, try '--help'.\n";
    let (code, _, stderr) = slt(&["--complete"]);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!("error: --complete needs the files or directories to rewrite{usage}")
    );
    let (code, _, stderr) = slt(&["--complete", "--timing", "x.slt"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: the argument '--complete' cannot be used with '--timing'\n"),
        "{stderr}"
    );
    let (code, _, stderr) = slt(&["--write-baseline"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--baseline <FILE>"), "{stderr}");
    let (code, _, stderr) = slt(&["-w", "0"]);
    assert_eq!(code, 2);
    assert!(stderr.starts_with("error: invalid value '0' for '--workers <N>'"), "{stderr}");
}
