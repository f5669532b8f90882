//! `weir-slt --complete`: a file with wrong expectations is completed (in a copy, in a temporary
//! directory) into exactly `tests/data/completed.slt`, which then passes; a file that passes
//! is left byte for byte, whether it is that result or any passing file of `grammar-tests/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use weir_slt::{collect_files, complete, runner};

const BIN: &str = env!("CARGO_BIN_EXE_weir-slt");

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("complete-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn weir_slt(args: &[&Path]) -> (bool, String) {
    let out = Command::new(BIN).args(args).output().expect("weir-slt runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn wrong_expectations_are_completed_and_then_pass() {
    let dir = scratch("wrong");
    let file = dir.join("wrong.slt");
    std::fs::copy(data("wrong.slt"), &file).expect("copy");
    let (ok, stdout) = weir_slt(&[Path::new("--complete"), &file]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("wrong.slt: completed 7 records"), "{stdout}");
    let got = std::fs::read_to_string(&file).expect("read back");
    let want = std::fs::read_to_string(data("completed.slt")).expect("completed.slt");
    assert_eq!(got, want);
    let (ok, stdout) = weir_slt(&[&file]);
    assert!(ok, "the completed file fails:\n{stdout}");
    assert!(stdout.contains(" 0 failed, 1 skipped"), "{stdout}");
}

#[test]
fn a_passing_file_is_left_byte_for_byte() {
    let dir = scratch("passing");
    let file = dir.join("completed.slt");
    std::fs::copy(data("completed.slt"), &file).expect("copy");
    let before = std::fs::read(&file).expect("read");
    let (ok, stdout) = weir_slt(&[Path::new("--complete"), &file]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("completed.slt: unchanged"), "{stdout}");
    assert_eq!(std::fs::read(&file).expect("read back"), before);
}

#[test]
fn every_passing_grammar_test_is_left_as_it_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../grammar-tests");
    let mut files = Vec::new();
    collect_files(&root, &mut files).expect("grammar-tests/ is readable");
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        let opts = runner::Options::default();
        if runner::run_text(&f, &text, &opts).counts.failed > 0 {
            continue; // not correct now: tests/grammar.rs says so
        }
        let done = complete::complete_text(&f, &text, &opts).expect("parses");
        assert!(done.rewritten.is_empty(), "{}: {:?}", f.display(), done.rewritten);
        assert_eq!(done.text, text, "{}", f.display());
    }
}

#[test]
fn complete_needs_paths_and_no_baseline() {
    let (ok, _) = weir_slt(&[Path::new("--complete")]);
    assert!(!ok);
    let out = Command::new(BIN)
        .args(["--complete", "--baseline", "b.txt", "x.slt"])
        .output()
        .expect("weir-slt runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("error: the argument '--complete' cannot be used with '--baseline <FILE>'\n"));
}
