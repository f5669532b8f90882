//! Incremental checkpoints: after a full checkpoint, each checkpoint writes only what changed
//! (operators' changed keys, tables' and views' changed rows) and names the earlier files for
//! the rest; recovery puts the whole state back and applies the changes in order. Checked
//! against an engine that never stopped, on one worker and on two, through a crash, a damaged
//! newest checkpoint, and a damaged full checkpoint (the fallback to the generation before).
#![allow(clippy::unwrap_used)] // tests: a panic is a failed test

use std::path::{Path, PathBuf};

use weir::checkpoint::store;
use weir::{Engine, ExecResult};

/// Every kind of state that records its changes (DISTINCT, a grouped aggregate with MIN/MAX
/// and COUNT(DISTINCT), a join, a top-N, a view's and a table's contents) and one written
/// whole each time (a ROWS window).
const SETUP: &str = "
CREATE STREAM s (k BIGINT, v BIGINT, t BIGINT, WATERMARK FOR t AS t);
CREATE TABLE dim (id BIGINT, name VARCHAR);
CREATE TABLE cfg (id BIGINT, val VARCHAR, PRIMARY KEY (id));
CREATE VIEW keys AS SELECT DISTINCT k FROM s [UNBOUNDED];
CREATE VIEW per AS SELECT k % 500 AS g, COUNT(*) AS n, SUM(v) AS sv, MIN(v) AS lo, MAX(v) AS hi,
  COUNT(DISTINCT v) AS dv FROM s [UNBOUNDED] GROUP BY k % 500;
CREATE VIEW joined AS SELECT a.k, COUNT(*) AS n FROM s [UNBOUNDED] a JOIN s [UNBOUNDED] b
  ON a.k = b.v GROUP BY a.k;
CREATE VIEW recent AS SELECT COUNT(*) AS n, SUM(v) AS sv FROM s [ROWS 150];
CREATE VIEW top AS SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k % 100
  ORDER BY v DESC, k) AS rn FROM s [UNBOUNDED]) AS r WHERE rn <= 2;
";

const VIEWS: [&str; 7] = [
    "SELECT * FROM top ORDER BY k, v",
    "SELECT * FROM keys ORDER BY k",
    "SELECT * FROM per ORDER BY g",
    "SELECT * FROM joined ORDER BY k",
    "SELECT * FROM recent",
    "SELECT * FROM dim ORDER BY id",
    "SELECT * FROM cfg ORDER BY id",
];

const STEPS: usize = 30;

/// Step `i`'s statements: 4000 keys first, then 80 new keys and 20 seen before each step, a
/// table change now and then.
fn step(i: usize) -> String {
    let mut rows = Vec::new();
    let (n, fresh) = if i == 0 { (4000, 4000) } else { (100, 80) };
    for j in 0..n {
        let k = match (i, j < fresh) {
            (0, _) => j,
            (_, true) => 4000 + i * 80 + j,
            (_, false) => j - fresh,
        };
        rows.push(format!("({k}, {}, {i})", (i * 7 + j) % 13));
    }
    let mut sql = format!("INSERT INTO s VALUES {}; ADVANCE s TO {i};", rows.join(", "));
    if i.is_multiple_of(5) {
        sql.push_str(&format!("INSERT INTO dim VALUES ({i}, 'n{i}');"));
    }
    if i.is_multiple_of(3) {
        // An upsert: the key's row is replaced (the primary key's index must follow).
        sql.push_str(&format!("INSERT INTO cfg VALUES ({}, 'v{i}');", i % 4));
    }
    if i == 17 {
        sql.push_str("DELETE FROM dim WHERE id = 10;");
    }
    sql
}

fn rows(e: &mut Engine, sql: &str) -> Vec<Vec<String>> {
    match e.execute(sql).unwrap().pop() {
        Some(ExecResult::Rows { batches, .. }) => {
            batches.iter().flat_map(|b| weir::format::rows_as_text(b).unwrap()).collect()
        }
        other => panic!("{other:?}"),
    }
}

fn contents(e: &mut Engine) -> Vec<Vec<Vec<String>>> {
    VIEWS.iter().map(|v| rows(e, v)).collect()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-incremental-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The manifest of checkpoint `seq`, as JSON.
fn manifest(dir: &Path, seq: u64) -> serde_json::Value {
    let stored = store::read(&store::path_of(dir, seq)).unwrap();
    serde_json::from_slice(stored.section("manifest").unwrap()).unwrap()
}

fn size(dir: &Path, seq: u64) -> u64 {
    std::fs::metadata(store::path_of(dir, seq)).unwrap().len()
}

/// Runs the steps from `from` on, checkpointing after each with its number as a note, until
/// `stop` (exclusive); returns the sequence number of each checkpoint written (0 without a
/// data directory).
fn run(e: &mut Engine, from: usize, stop: usize) -> Vec<(usize, u64)> {
    (from..stop)
        .map(|i| {
            e.execute(&step(i)).unwrap();
            if e.data_dir().is_none() {
                return (i, 0);
            }
            e.set_checkpoint_note("step", &i.to_string());
            (i, e.checkpoint().unwrap())
        })
        .collect()
}

fn opened(dir: &Path, workers: usize) -> (Engine, usize, weir::Recovery) {
    let (e, recovery) = Engine::open_with_workers(dir, workers).unwrap();
    let step: usize = recovery.notes["step"].parse().unwrap();
    (e, step + 1, recovery)
}

fn incremental(workers: usize) {
    let mut reference = Engine::new();
    reference.set_workers(workers).unwrap();
    reference.execute(SETUP).unwrap();
    run(&mut reference, 0, STEPS);
    let want = contents(&mut reference);
    let sizes: Vec<usize> = want.iter().map(Vec::len).collect();
    assert!(
        sizes[0] == 200 && sizes[1] > 6000 && sizes[3] > 5 && sizes[5] == 5 && sizes[6] == 4,
        "{sizes:?}"
    );

    let dir = tempdir(&format!("w{workers}"));
    let (mut e, _) = Engine::open_with_workers(&dir, workers).unwrap();
    e.execute(SETUP).unwrap();
    let written = run(&mut e, 0, 12);
    // The first two checkpoints are full, and then one each time the checkpoints after it
    // wrote as much; the others write what changed, and say where the rest is: the
    // DISTINCT's state is in its generation's full checkpoint, then a change per step.
    let (at, newest) = written
        .iter()
        .rev()
        .copied()
        .filter(|&(_, seq)| store::path_of(&dir, seq).exists())
        .find(|&(_, seq)| manifest(&dir, seq)["generation"].as_u64() != Some(seq))
        .expect("a checkpoint after a full one");
    let m = manifest(&dir, newest);
    let chain: Vec<u64> = serde_json::from_value(m["pieces"]["query:view:keys"].clone()).unwrap();
    let start = m["generation"].as_u64().unwrap();
    assert!(chain.len() >= 2 && chain[0] == start, "{chain:?}");
    let top: Vec<u64> = serde_json::from_value(m["pieces"]["query:view:top"].clone()).unwrap();
    assert_eq!(top, chain, "the top-N writes its changes too");
    assert_eq!(chain, (start..=newest).collect::<Vec<_>>());
    let full = size(&dir, start);
    assert!(size(&dir, newest) * 2 < full, "{} of {full}", size(&dir, newest));
    // The table changes every 5 steps: it stays where it was written since.
    let table: Vec<u64> = serde_json::from_value(m["pieces"]["table:dim"].clone()).unwrap();
    let changed = written[at / 5 * 5].1;
    let want_table: Vec<u64> =
        [start].into_iter().chain((changed > start).then_some(changed)).collect();
    assert_eq!(table, want_table);

    // A crash after step 11: recovery continues from it, and so does its generation: the
    // checkpoint after the restart writes changes.
    drop(e);
    let (mut e, from, recovery) = opened(&dir, workers);
    assert_eq!(from, 12, "{:?}", recovery.warnings);
    assert!(recovery.warnings.is_empty());
    let first = run(&mut e, from, from + 1)[0].1;
    let generation = manifest(&dir, first)["generation"].as_u64();
    assert!(generation.is_some_and(|g| g < first), "{generation:?} {first}");
    let written = run(&mut e, from + 1, 20);

    // The newest checkpoint damaged: the one before it, with the steps after it again.
    drop(e);
    let newest = store::path_of(&dir, written.last().unwrap().1);
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() - 9]).unwrap();
    let (mut e, from, recovery) = opened(&dir, workers);
    assert_eq!((from, recovery.warnings.len()), (19, 1), "{:?}", recovery.warnings);
    let written = run(&mut e, from, 26);

    // The full checkpoint of the newest generation damaged: every checkpoint built on it is
    // refused, and the last of the generation before is restored.
    drop(e);
    let m = manifest(&dir, written.last().unwrap().1);
    let start = m["generation"].as_u64().unwrap();
    assert!(start < written.last().unwrap().1, "the newest is not full");
    let path = store::path_of(&dir, start);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let (mut e, from, recovery) = opened(&dir, workers);
    assert!(from < 26 && recovery.checkpoint < Some(start), "{recovery:?}");
    assert!(
        recovery.warnings.iter().any(|w| w.contains(&format!("needs checkpoint {start}"))),
        "{:?}",
        recovery.warnings
    );
    run(&mut e, from, STEPS);
    assert_eq!(contents(&mut e), want);
    // A fresh restore of the last checkpoint gives the same again.
    drop(e);
    let (mut e, from, _) = opened(&dir, workers);
    assert_eq!(from, STEPS);
    assert_eq!(contents(&mut e), want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn incremental_checkpoints_restore_exactly() {
    incremental(1);
}

#[test]
fn incremental_checkpoints_on_two_workers_restore_exactly() {
    incremental(2);
}

/// Old generations are pruned, and every file a checkpoint on disk names is kept.
#[test]
fn pruning_keeps_every_file_a_checkpoint_names() {
    let dir = tempdir("prune");
    let (mut e, _) = Engine::open(&dir).unwrap();
    e.execute(SETUP).unwrap();
    let written = run(&mut e, 0, STEPS);
    // Every checkpoint still on disk reads back with every file it names.
    let on_disk = store::list(&dir);
    assert!(on_disk.len() < STEPS, "old generations are pruned: {}", on_disk.len());
    for path in &on_disk {
        let seq = store::sequence_of(path).unwrap();
        let m = manifest(&dir, seq);
        for (_, chain) in m["pieces"].as_object().unwrap() {
            for s in chain.as_array().unwrap() {
                let s = s.as_u64().unwrap();
                assert!(store::path_of(&dir, s).exists(), "{seq} names {s}, which is gone");
            }
        }
    }
    let last = written.last().unwrap().1;
    drop(e);
    let (e, recovery) = Engine::open(&dir).unwrap();
    assert_eq!(recovery.checkpoint, Some(last));
    drop(e);
    let _ = std::fs::remove_dir_all(&dir);
}
