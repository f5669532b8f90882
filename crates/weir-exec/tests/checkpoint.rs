//! Checkpoint/restore round trips: for random inputs, a query runs up to a random cut, its
//! state is saved and restored into a fresh runner built from the same plan, and the remaining
//! input goes to both. Their outputs after the cut must be byte-identical (so the restored
//! run's whole output equals the uninterrupted one's), and so must their saved states, right
//! after the restore and at the end. One query (or more) per stateful operator, and
//! combinations. Also: bytes that are damaged or belong to another query give an error.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use proptest::prelude::*;
use weir_common::{ChangeBatch, Time, TimeDomain, Watermark, WATERMARK_CLOSED};
use weir_exec::row::RowCodec;
use weir_exec::QueryRunner;
use weir_plan::LogicalPlan;
use weir_sql::{bind_query, parse_script, Catalog, CatalogEntry, Statement, StreamDef, TableDef};

fn stream_schema(value: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new(value, DataType::Int64, true),
        Field::new("t", DataType::Int64, false),
    ]))
}

fn table_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("p", DataType::Int64, true),
    ]))
}

/// Streams `s(k, v, t)` and `r(k, w, t)`, both in order on `t`, and table `tb(k, p)`; `rv` is
/// stream `r` declared with `PRIMARY KEY (k)` (a changelog of the same elements).
struct Streams;

impl Catalog for Streams {
    fn lookup(&self, name: &str) -> Option<CatalogEntry> {
        let value = match name {
            "s" => "v",
            "r" => "w",
            "rv" => {
                return Some(CatalogEntry::Stream(StreamDef {
                    name: "r".to_string(),
                    schema: stream_schema("w"),
                    time_column: 2,
                    domain: TimeDomain::Ticks,
                    watermark_delay: 0,
                    primary_key: vec![0],
                    row_kind: None,
                    proctime: None,
                }))
            }
            "tb" => {
                let def = TableDef {
                    name: name.to_string(),
                    schema: table_schema(),
                    primary_key: vec![],
                };
                return Some(CatalogEntry::Table(def));
            }
            _ => return None,
        };
        Some(CatalogEntry::Stream(StreamDef {
            name: name.to_string(),
            schema: stream_schema(value),
            time_column: 2,
            domain: TimeDomain::Ticks,
            watermark_delay: 0,
            primary_key: vec![],
            row_kind: None,
            proctime: None,
        }))
    }
}

thread_local! {
    static PLANS: RefCell<HashMap<String, Arc<LogicalPlan>>> = RefCell::new(HashMap::new());
}

fn plan(sql: &str) -> Arc<LogicalPlan> {
    PLANS.with(|p| {
        p.borrow_mut()
            .entry(sql.to_string())
            .or_insert_with(|| {
                let mut stmts = parse_script(sql).expect("parse");
                let Some(Statement::Query(q)) = stmts.pop().map(|s| s.statement) else {
                    panic!("not a query: {sql}")
                };
                bind_query(&Streams, &q).unwrap_or_else(|e| panic!("{sql}: {e}"))
            })
            .clone()
    })
}

/// One step of the input: rows pushed on a stream (key index or NULL, value or NULL, time
/// offset from now), the clock advanced (and every instant below it evaluated), or a
/// heartbeat at now.
#[derive(Debug, Clone)]
enum Step {
    Push(usize, Vec<(Option<u8>, Option<i64>, i64)>),
    Advance(i64),
    Beat(usize),
    /// A row (key, p) inserted into the table, or the oldest row still in it deleted.
    Table(Option<(u8, i64)>),
}

const STREAMS: [&str; 2] = ["s", "r"];

fn step() -> impl Strategy<Value = Step> {
    let row = (prop::option::weighted(0.9, 0u8..3), prop::option::weighted(0.9, 0i64..6), 0i64..3);
    prop_oneof![
        4 => (0usize..2, prop::collection::vec(row, 1..4)).prop_map(|(s, rows)| Step::Push(s, rows)),
        3 => (0i64..4).prop_map(Step::Advance),
        1 => (0usize..2).prop_map(Step::Beat),
        1 => prop::option::of((0u8..3, 0i64..4)).prop_map(Step::Table),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 0..24)
}

/// A runner and its input clock.
struct Run {
    runner: QueryRunner,
    now: Time,
    out: Vec<ChangeBatch>,
    /// The table's rows, oldest first.
    table: Vec<(u8, i64)>,
}

impl Run {
    fn step(&mut self, step: &Step) {
        match step {
            Step::Push(s, rows) => {
                let keys: Vec<Option<String>> =
                    rows.iter().map(|r| r.0.map(|k| ((b'a' + k) as char).to_string())).collect();
                let vals: Vec<Option<i64>> = rows.iter().map(|r| r.1).collect();
                let times: Vec<Time> = rows.iter().map(|r| self.now + r.2).collect();
                let value = if *s == 0 { "v" } else { "w" };
                let cols: Vec<ArrayRef> = vec![
                    Arc::new(StringArray::from(keys)),
                    Arc::new(Int64Array::from(vals)),
                    Arc::new(Int64Array::from(times.clone())),
                ];
                let data = RecordBatch::try_new(stream_schema(value), cols).expect("batch");
                let n = times.len();
                if self.runner.sources().iter().any(|x| x == STREAMS[*s]) {
                    self.runner
                        .push(STREAMS[*s], ChangeBatch::new(data, times, vec![1; n]))
                        .expect("push");
                }
            }
            Step::Advance(d) => {
                self.now += d;
                self.runner.advance(self.now as Watermark, &mut self.out).expect("advance");
            }
            Step::Table(change) => {
                let (row, diff) = match change {
                    Some(row) => {
                        self.table.push(*row);
                        (*row, 1)
                    }
                    None if !self.table.is_empty() => (self.table.remove(0), -1),
                    None => return,
                };
                let cols: Vec<ArrayRef> = vec![
                    Arc::new(StringArray::from(vec![((b'a' + row.0) as char).to_string()])),
                    Arc::new(Int64Array::from(vec![row.1])),
                ];
                let data = RecordBatch::try_new(table_schema(), cols).expect("batch");
                if self.runner.sources().iter().any(|x| x == "tb") {
                    let b = ChangeBatch::new(data, vec![self.now], vec![diff]);
                    self.runner.push("tb", b).expect("push");
                }
            }
            Step::Beat(s) => {
                if self.runner.sources().iter().any(|x| x == STREAMS[*s]) {
                    self.runner.heartbeat(STREAMS[*s], self.now);
                }
            }
        }
    }

    fn close(&mut self) {
        self.runner.advance(WATERMARK_CLOSED, &mut self.out).expect("close");
    }
}

/// The output as bytes: each batch's columns, times and diffs, Arrow IPC.
fn bytes(out: &[ChangeBatch]) -> Vec<u8> {
    // A canonical encoding of the changes: schema, then per row its instant, diff and values
    // in arrow's row format. (Arrow IPC bytes are not canonical: equal arrays can differ in
    // buffer layout, e.g. a slice's offsets or an all-valid null bitmap.)
    let mut bytes = Vec::new();
    for b in out {
        bytes.extend_from_slice(format!("{:?}", b.schema()).as_bytes());
        let codec = RowCodec::for_schema(&b.schema()).expect("codec");
        let rows = codec.encode(b.data.columns(), b.len()).expect("rows");
        for i in 0..b.len() {
            bytes.extend_from_slice(&b.times[i].to_le_bytes());
            bytes.extend_from_slice(&b.diffs[i].to_le_bytes());
            let row = rows.get(i);
            bytes.extend_from_slice(&(row.len() as u64).to_le_bytes());
            bytes.extend_from_slice(row);
        }
    }
    bytes
}

/// Runs `sql` over `steps`, checkpointing after step `cut` (see the module docs).
fn round_trip(sql: &str, steps: &[Step], cut: usize) -> Result<(), TestCaseError> {
    let plan = plan(sql);
    let mut a = Run {
        runner: QueryRunner::new(&plan).expect("runner"),
        now: 0,
        out: vec![],
        table: vec![],
    };
    for s in &steps[..cut] {
        a.step(s);
    }
    let saved = a.runner.save_state().expect("save");
    let mut b = Run {
        runner: QueryRunner::new(&plan).expect("runner"),
        now: a.now,
        out: vec![],
        table: a.table.clone(),
    };
    b.runner.restore_state(&saved).expect("restore");
    let again = b.runner.save_state().expect("save again");
    prop_assert!(again == saved, "{}: state differs after the restore", sql);
    a.out.clear();
    for s in &steps[cut..] {
        a.step(s);
        b.step(s);
    }
    a.close();
    b.close();
    prop_assert!(bytes(&a.out) == bytes(&b.out), "{}: outputs differ after the cut", sql);
    let (sa, sb) = (a.runner.save_state().expect("save"), b.runner.save_state().expect("save"));
    prop_assert!(sa == sb, "{}: states differ at the end", sql);
    Ok(())
}

fn check_all(
    queries: &[&str],
    steps: &[Step],
    cut: prop::sample::Index,
) -> Result<(), TestCaseError> {
    let cut = cut.index(steps.len() + 1);
    for q in queries {
        round_trip(q, steps, cut)?;
    }
    Ok(())
}

const WINDOWS: &[&str] = &[
    "SELECT ISTREAM * FROM s [RANGE 3]",
    "SELECT DSTREAM * FROM s [RANGE 3]",
    "SELECT RSTREAM k, v FROM s [RANGE 2]",
    "SELECT * FROM s [NOW]",
    "SELECT * FROM s [RANGE 4 SLIDE 2]",
    "SELECT * FROM s [RANGE 2 SLIDE 3]",
    "SELECT * FROM s [ROWS 2]",
    "SELECT * FROM s [PARTITION BY k ROWS 2]",
    "SELECT * FROM s WHERE v > 2",
    "SELECT window_start, window_end, k, COUNT(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 3)) GROUP BY window_start, window_end, k",
    "SELECT ISTREAM k, v, window_start FROM TABLE(HOP(TABLE s, DESCRIPTOR(t), 2, 5)) AS h",
    "SELECT * FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), 2))",
    "SELECT ISTREAM k, window_start, window_end, COUNT(*), SUM(v) FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), 3)) GROUP BY k, window_start, window_end",
    "SELECT RSTREAM k, v FROM s [SESSION 2]",
    "SELECT k, v, window_start, window_end FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), 2, 6))",
    "SELECT ISTREAM window_start, window_end, k, COUNT(*), SUM(v) FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), 1, 4)) GROUP BY window_start, window_end, k",
    "SELECT window_end, MAX(v) FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), 2, 4)) WHERE window_start < window_end GROUP BY window_end",
    "SELECT ISTREAM window_start, window_end, COUNT(*) FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), 1, 3, 2)) GROUP BY window_start, window_end",
    "SELECT k, window_start FROM TABLE(HOP(TABLE s, DESCRIPTOR(t), 2, 5, 1))",
    "SELECT * FROM s [RANGE 3 SLIDE 2 OFFSET 1]",
];

const AGGREGATES: &[&str] = &[
    "SELECT ISTREAM k, COUNT(*), SUM(v), MIN(v), MAX(v), AVG(v), COUNT(v) FROM s [RANGE 5] GROUP BY k",
    "SELECT k, COUNT(DISTINCT v), SUM(DISTINCT v), MAX(DISTINCT v) FROM s [RANGE 4 SLIDE 2] GROUP BY k",
    "SELECT ISTREAM COUNT(*), SUM(v) FROM s [RANGE 10 SLIDE 5]",
    "SELECT k, SUM(v) FROM s GROUP BY k HAVING COUNT(*) > 1",
    "SELECT DSTREAM k, MIN(v) FROM s [PARTITION BY k ROWS 2] GROUP BY k",
    "SELECT DISTINCT k FROM s [ROWS 3]",
    "SELECT ISTREAM DISTINCT v FROM s [RANGE 3]",
    "SELECT k, v FROM s [RANGE 6] ORDER BY v DESC LIMIT 2",
    "SELECT k, v FROM s [RANGE 6] ORDER BY v LIMIT 2 OFFSET 1",
    "SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC), RANK() OVER (PARTITION BY k ORDER BY v DESC) FROM s [RANGE 4]",
    "SELECT k, v FROM (SELECT k, v, DENSE_RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM s [RANGE 5]) WHERE r <= 2",
    "SELECT k, v, t FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t) AS rn FROM s) WHERE rn = 1",
    "SELECT k, v, t FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t DESC) AS rn FROM s) WHERE rn = 1",
    "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), MAX(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM s",
    "SELECT k, v, AVG(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 3 PRECEDING AND CURRENT ROW) FROM s",
    "SELECT k, v, COUNT(*) OVER (PARTITION BY k ORDER BY t), SUM(v) OVER (PARTITION BY k ORDER BY t), MIN(v) OVER (PARTITION BY k ORDER BY t), AVG(v) OVER (PARTITION BY k ORDER BY t) FROM s",
    "SELECT k, v, LAG(v) OVER w, LAG(v, 3, -1) OVER w, FIRST_VALUE(v) OVER w, LAST_VALUE(v) OVER w FROM s WINDOW w AS (PARTITION BY k ORDER BY t)",
    "SELECT k, v, LAG(v) OVER (PARTITION BY k ORDER BY t), FIRST_VALUE(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM s",
    "SELECT k, v, LAG(v) OVER w, LEAD(v, 2, 0) OVER w, FIRST_VALUE(v) OVER w, SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) FROM s [RANGE 4] WINDOW w AS (PARTITION BY k ORDER BY t)",
    "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING), LAG(v * 2, 1, v - 1) OVER (PARTITION BY k ORDER BY t) FROM s [RANGE 5]",
];

const JOINS: &[&str] = &[
    "SELECT ISTREAM s.k, s.v, r.w FROM s [RANGE 4] JOIN r [RANGE 3] ON s.k = r.k",
    "SELECT ISTREAM s.k, COUNT(*), SUM(r.w) FROM s [RANGE 5], r [RANGE 5] WHERE s.k = r.k GROUP BY s.k",
    "SELECT s.k, s.v, r.w FROM s [RANGE 3] LEFT JOIN r [ROWS 2] ON s.k = r.k",
    "SELECT s.k, s.v, r.w FROM s [RANGE 3] FULL JOIN r [RANGE 2] ON s.k = r.k AND s.v < r.w",
    "SELECT * FROM s [RANGE 3] WHERE k IN (SELECT k FROM r [RANGE 3])",
    "SELECT * FROM s [RANGE 3] WHERE v NOT IN (SELECT w FROM r [RANGE 3])",
    "SELECT * FROM s [RANGE 3] WHERE NOT EXISTS (SELECT 1 FROM r [RANGE 2] WHERE r.k = s.k)",
    "SELECT k FROM s [RANGE 3] EXCEPT SELECT k FROM r [RANGE 2]",
    "SELECT k FROM s [RANGE 3] INTERSECT SELECT k FROM r [RANGE 2]",
    "SELECT k FROM s [RANGE 2] UNION SELECT k FROM r [ROWS 1]",
    "SELECT DSTREAM s.k, r.w FROM s [NOW] JOIN r [PARTITION BY k ROWS 1] ON s.k = r.k",
    "SELECT RSTREAM s.k, r.w FROM s [RANGE 2] JOIN r [NOW] ON s.v = r.w",
    "SELECT ISTREAM x.a, s.v FROM s [NOW], (VALUES (1), (2)) AS x(a)",
    "SELECT RSTREAM s.k, s.v, tb.p FROM s [NOW] JOIN tb ON s.k = tb.k",
    "SELECT s.k, SUM(s.v), MAX(tb.p) FROM s [RANGE 3] LEFT JOIN tb ON s.k = tb.k GROUP BY s.k",
    "SELECT s.k, s.v, x.p FROM s JOIN tb FOR SYSTEM_TIME AS OF s.t AS x ON s.k = x.k",
    "SELECT s.k, s.v, x.w FROM s LEFT JOIN rv FOR SYSTEM_TIME AS OF s.t AS x ON s.k = x.k AND x.w > s.v",
    "SELECT k, COUNT(*) FROM rv GROUP BY k",
];

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn windows_round_trip(steps in steps(), cut in any::<prop::sample::Index>()) {
        check_all(WINDOWS, &steps, cut)?;
    }

    #[test]
    fn aggregates_round_trip(steps in steps(), cut in any::<prop::sample::Index>()) {
        check_all(AGGREGATES, &steps, cut)?;
    }

    #[test]
    fn joins_round_trip(steps in steps(), cut in any::<prop::sample::Index>()) {
        check_all(JOINS, &steps, cut)?;
    }
}

/// A state with something in every kind of section: a windowed join with aggregates, input
/// buffered and heartbeats pending.
fn busy_state(sql: &str) -> Vec<u8> {
    let mut a = Run {
        runner: QueryRunner::new(&plan(sql)).expect("runner"),
        now: 0,
        out: vec![],
        table: vec![],
    };
    let steps = [
        Step::Push(0, vec![(Some(0), Some(1), 0), (Some(1), None, 1), (None, Some(3), 2)]),
        Step::Push(1, vec![(Some(0), Some(2), 0), (Some(1), Some(4), 1)]),
        Step::Advance(2),
        Step::Push(0, vec![(Some(0), Some(5), 1)]),
        Step::Beat(1),
        Step::Advance(1),
        Step::Push(1, vec![(Some(2), Some(1), 2)]),
    ];
    for s in &steps {
        a.step(s);
    }
    a.runner.save_state().expect("save")
}

const BUSY: &str = "SELECT s.k, COUNT(*), MIN(r.w), COUNT(DISTINCT s.v) FROM s [RANGE 4] \
                    LEFT JOIN r [ROWS 3] ON s.k = r.k GROUP BY s.k";

#[test]
fn damaged_or_foreign_state_is_an_error_not_a_panic() {
    let good = busy_state(BUSY);
    let fresh = || QueryRunner::new(&plan(BUSY)).expect("runner");
    fresh().restore_state(&good).expect("the intact state restores");
    // Truncated at many lengths, and many bytes flipped (Arrow's IPC reader panics on some
    // malformed schemas; the restore turns that into an error, but the panic message is still
    // printed).
    for n in (0..good.len()).step_by(7).chain(good.len() - 16..good.len()) {
        assert!(fresh().restore_state(&good[..n]).is_err(), "truncated to {n} bytes");
    }
    for i in (0..good.len()).step_by(3) {
        let mut bad = good.clone();
        bad[i] ^= 0x5a;
        // A flip may hit padding and leave the state intact; it must never panic, and a
        // restore that succeeds must give the same state.
        let mut r = fresh();
        if r.restore_state(&bad).is_ok() {
            assert!(r.save_state().expect("save") == good, "byte {i} flipped changed the state");
        }
    }
    assert!(fresh().restore_state(b"not arrow at all").is_err());
    assert!(fresh().restore_state(&[]).is_err());
    // The state of another query.
    for other in [
        "SELECT s.k, COUNT(*), MAX(r.w), COUNT(DISTINCT s.v) FROM s [RANGE 4] LEFT JOIN r [ROWS 3] ON s.k = r.k GROUP BY s.k",
        "SELECT s.k, COUNT(*), MIN(r.w), COUNT(DISTINCT s.v) FROM s [RANGE 5] LEFT JOIN r [ROWS 3] ON s.k = r.k GROUP BY s.k",
        "SELECT * FROM s [RANGE 4]",
        "SELECT ISTREAM * FROM s [RANGE 4]",
    ] {
        let err = fresh().restore_state(&busy_state(other)).expect_err(other);
        assert!(err.to_string().contains("does not fit"), "{other}: {err}");
        let err = QueryRunner::new(&plan(other)).expect("runner").restore_state(&good).expect_err(other);
        assert!(err.to_string().contains("does not fit"), "{other}: {err}");
    }
    // A runner already in use refuses.
    let mut used = fresh();
    used.restore_state(&good).expect("restore");
    assert!(used.restore_state(&good).is_err());
}

#[test]
fn one_shot_subqueries_refuse_to_checkpoint() {
    let sql = "SELECT k, (SELECT COUNT(*) FROM s AS x WHERE x.v < y.v) FROM s AS y";
    let mut stmts = parse_script(sql).expect("parse");
    let Some(Statement::Query(q)) = stmts.pop().map(|s| s.statement) else { panic!() };
    let p = bind_query(&Streams, &q).expect("bind");
    assert!(p.contains_apply(), "the test needs a query with Apply");
    let r = QueryRunner::new(&p).expect("runner");
    assert!(r.save_state().is_err());
}

/// Found by `windows_round_trip` in CI: a RANGE window restored between two pushes at the
/// same instant, with a heartbeat in between.
#[test]
fn range_window_restored_between_pushes_at_one_instant() {
    let row = |v: Option<i64>, dt: i64| (None, v, dt);
    let steps = vec![
        Step::Push(0, vec![row(None, 1), row(None, 0), row(Some(0), 2)]),
        Step::Advance(1),
        Step::Push(1, vec![row(None, 0)]),
        Step::Beat(0),
        Step::Push(0, vec![row(None, 1)]),
        Step::Push(0, vec![row(None, 1)]),
        Step::Advance(1),
    ];
    for cut in 0..=steps.len() {
        if let Err(e) = round_trip("SELECT ISTREAM * FROM s [RANGE 3]", &steps, cut) {
            panic!("cut {cut}: {e}");
        }
    }
}
