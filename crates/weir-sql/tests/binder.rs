//! The binder against a stub catalog: no engine, just names and schemas. Pins how CQL's
//! constructs are planned (windows, relation-to-stream defaults, views inlined) and the
//! errors that only the binder can give with a position.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use weir_common::TimeDomain;
use weir_plan::{explain, PlanKind};
use weir_sql::{
    bind_query, parse_script, Catalog, CatalogEntry, Statement, StreamDef, TableDef, ViewDef,
};

/// A catalog that is a map.
#[derive(Default)]
struct Stub(HashMap<String, CatalogEntry>);

impl Catalog for Stub {
    fn lookup(&self, name: &str) -> Option<CatalogEntry> {
        self.0.get(name).cloned()
    }
}

/// `s (k VARCHAR, t BIGINT)` stamped by t, `bids (auction BIGINT, price BIGINT, ts TIMESTAMP)`
/// stamped by ts, and a table `t (k VARCHAR, name VARCHAR)`.
fn stub() -> Stub {
    let mut c = Stub::default();
    let s = Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("t", DataType::Int64, true),
    ]);
    let def = StreamDef {
        name: "s".into(),
        schema: Arc::new(s),
        time_column: 1,
        domain: TimeDomain::Ticks,
        watermark_delay: 0,
        primary_key: vec![],
        row_kind: None,
        proctime: None,
    };
    c.0.insert("s".into(), CatalogEntry::Stream(def));
    let bids = Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
    ]);
    let def = StreamDef {
        name: "bids".into(),
        schema: Arc::new(bids),
        time_column: 2,
        domain: TimeDomain::Micros,
        watermark_delay: 2_000_000,
        primary_key: vec![],
        row_kind: None,
        proctime: None,
    };
    c.0.insert("bids".into(), CatalogEntry::Stream(def));
    let t = Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("name", DataType::Utf8, true),
    ]);
    c.0.insert(
        "t".into(),
        CatalogEntry::Table(TableDef {
            name: "t".into(),
            schema: Arc::new(t),
            primary_key: vec![],
        }),
    );
    c
}

/// The plan of one query, as EXPLAIN prints it, or the error's text.
fn plan(c: &Stub, sql: &str) -> Result<String, String> {
    let mut stmts = parse_script(sql).map_err(|e| e.to_string())?;
    let Some(Statement::Query(q)) = stmts.pop().map(|s| s.statement) else {
        panic!("not a query: {sql}");
    };
    bind_query(c, &q).map(|p| explain(&p)).map_err(|e| e.with_source(sql).to_string())
}

/// The example of docs/architecture.md: a windowed, grouped count over a stream, the window's
/// input narrowed to the column read above it (the plan alone: EXPLAIN adds the exchanges
/// between workers, which compiling decides).
#[test]
fn a_windowed_aggregate_is_a_window_over_a_stream_scan() {
    let got = plan(&stub(), "SELECT ISTREAM k, COUNT(*) FROM s [RANGE 2] GROUP BY k").unwrap();
    let want = "\
ISTREAM  -> stream
  Project: s.k, count(*) AS COUNT(*)  -> relation
    Aggregate: group=[s.k] aggs=[count(*)]  -> relation
      Window: [RANGE 2]  -> relation
        Project: s.k  -> stream
          StreamScan: s  -> stream
";
    assert_eq!(got, want);
}

/// A stream named without a window is `[UNBOUNDED]`; a monotonic query without an explicit
/// relation-to-stream operator gets ISTREAM, a non-monotonic one outputs a relation.
#[test]
fn cql_defaults_apply() {
    let c = stub();
    let filter = plan(&c, "SELECT k FROM s WHERE t > 1").unwrap();
    assert!(filter.starts_with("ISTREAM  -> stream\n"), "{filter}");
    assert!(filter.contains("Window: [UNBOUNDED]"), "{filter}");
    let count = plan(&c, "SELECT COUNT(*) FROM s").unwrap();
    assert!(!count.contains("ISTREAM"), "an aggregate is not monotonic: {count}");
    assert!(count.lines().next().unwrap().ends_with("-> relation"), "{count}");
}

#[test]
fn a_table_is_a_table_scan_and_a_view_is_inlined() {
    let mut c = stub();
    let view_sql = "SELECT k, t FROM s [ROWS 2]";
    let mut stmts = parse_script(view_sql).unwrap();
    let Some(Statement::Query(q)) = stmts.pop().map(|s| s.statement) else { panic!() };
    let view_plan = bind_query(&c, &q).unwrap();
    assert_eq!(view_plan.kind(), PlanKind::Relation);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("t", DataType::Int64, true),
    ]));
    let v = ViewDef { name: "recent".into(), sql: view_sql.into(), plan: view_plan, schema };
    c.0.insert("recent".into(), CatalogEntry::View(v));
    let got = plan(&c, "SELECT r.k, t.name FROM recent r JOIN t ON r.k = t.k").unwrap();
    assert!(got.contains("Window: [ROWS 2]") && got.contains("StreamScan: s"), "{got}");
    assert!(got.contains("TableScan: t"), "{got}");
}

/// Errors the binder gives with the position of the name at fault.
#[test]
fn binder_errors_name_what_and_where() {
    let c = stub();
    let unknown = plan(&c, "SELECT * FROM nope").unwrap_err();
    assert_eq!(
        unknown,
        "unknown stream, table or view 'nope' at line 1, column 15\n  SELECT * FROM nope\n                ^^^^"
    );
    let table_window = plan(&c, "SELECT * FROM t [RANGE 2]").unwrap_err();
    assert!(
        table_window.contains("window over a relation: 't' is a table, not a stream"),
        "{table_window}"
    );
    let domain = plan(&c, "SELECT * FROM bids [RANGE 2]").unwrap_err();
    assert!(
        domain.starts_with(
            "'bids' is stamped by a TIMESTAMP column: give the duration a unit (e.g. 2 SECONDS)"
        ),
        "{domain}"
    );
}

/// The `null_order` setting decides where an `ORDER BY` term without `NULLS FIRST/LAST` puts
/// NULL: smallest (the default, SQLite's) or largest (PostgreSQL's). A written `NULLS ...` and
/// window functions' `ORDER BY` (PostgreSQL's either way) do not change.
#[test]
fn the_null_order_setting_decides_an_unwritten_nulls_clause() {
    use weir_sql::{bind_query_with, BindOptions, NullOrder};
    let c = stub();
    let bound = |sql: &str, null_order| {
        let mut stmts = parse_script(sql).unwrap();
        let Some(Statement::Query(q)) = stmts.pop().map(|s| s.statement) else { panic!() };
        explain(&bind_query_with(&c, BindOptions { null_order }, &q).unwrap())
    };
    let sql = "SELECT k, name FROM t ORDER BY k, name DESC, k NULLS LAST LIMIT 2";
    let smallest = bound(sql, NullOrder::Smallest);
    assert!(
        smallest
            .contains("order=[t.k ASC NULLS FIRST, t.name DESC NULLS LAST, t.k ASC NULLS LAST]"),
        "{smallest}"
    );
    let largest = bound(sql, NullOrder::Largest);
    assert!(
        largest.contains("order=[t.k ASC NULLS LAST, t.name DESC NULLS FIRST, t.k ASC NULLS LAST]"),
        "{largest}"
    );
    assert_eq!(bound(sql, NullOrder::Smallest), plan(&c, sql).unwrap(), "the default");
    let window = "SELECT k, ROW_NUMBER() OVER (ORDER BY name) AS rn FROM t";
    assert_eq!(bound(window, NullOrder::Smallest), bound(window, NullOrder::Largest));
    assert_eq!(NullOrder::parse("PostgreSQL"), Some(NullOrder::Largest));
    assert_eq!(NullOrder::parse("sqlite"), Some(NullOrder::Smallest));
    assert_eq!(NullOrder::parse("nulls_last"), None);
}

/// An outer reference in an inner join's ON inside EXISTS moves above the join and the
/// subquery decorrelates into a semi join; in a LEFT JOIN's ON it is refused at its position.
#[test]
fn a_correlated_inner_join_condition_decorrelates_and_an_outer_one_is_refused() {
    let mut c = stub();
    for name in ["u", "w"] {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("k", DataType::Utf8, true),
        ]);
        let def = TableDef { name: name.into(), schema: Arc::new(schema), primary_key: vec![] };
        c.0.insert(name.into(), CatalogEntry::Table(def));
    }
    let inner = plan(
        &c,
        "SELECT t.k FROM t WHERE EXISTS (SELECT 1 FROM u JOIN w ON u.a = w.a AND w.k = t.k)",
    )
    .unwrap();
    assert!(inner.contains("Join: left semi"), "{inner}");
    let sql =
        "SELECT t.k FROM t WHERE EXISTS (SELECT 1 FROM u LEFT JOIN w ON u.a = w.a AND w.k = t.k)";
    let outer = plan(&c, sql).unwrap_err();
    assert!(
        outer.starts_with(
            "a LEFT JOIN's ON condition inside a subquery refers to the outer query (t.k)"
        ),
        "{outer}"
    );
    assert!(outer.contains("at line 1, column 84"), "{outer}");
}
