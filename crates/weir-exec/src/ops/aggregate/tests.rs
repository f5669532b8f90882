//! Tests of [`Aggregate`]: each aggregate function over insertions and retractions, MIN/MAX
//! over every form its multiset is kept in, checkpoints cut at every instant, and spans of any
//! width against instant-by-instant evaluation.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion_common::DFSchema;
use datafusion_expr::{cast, col};

use super::accumulators::{f64_key, key_f64};
use super::*;
use crate::operator::EvalCtx;
use crate::state::{binary_col, bool_col, i64_col, opt_f64_col, opt_i128_col, opt_i64_col};
use crate::testing::Graph;
use crate::testing::{fed, kv, kv_schema, render, render_in_order, run, run_spans, Tick};

fn agg_op(grouped: bool, aggs: &[(AggFunc, bool)], input: Vec<Tick>) -> Graph {
    agg_op_as(grouped, aggs, DataType::Int64, input)
}

/// [`aggregate`] fed with `input`.
fn agg_op_as(grouped: bool, aggs: &[(AggFunc, bool)], arg: DataType, input: Vec<Tick>) -> Graph {
    fed(aggregate(grouped, aggs, arg), [input])
}

/// An aggregate over `kv` with key `k` (if `grouped`) and arguments `v` cast to `arg`.
fn aggregate(grouped: bool, aggs: &[(AggFunc, bool)], arg: DataType) -> Aggregate {
    let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
    let keys = if grouped { vec![ScalarExpr::compile(&col("k"), &df).unwrap()] } else { vec![] };
    let mut fields = vec![];
    if grouped {
        fields.push(Field::new("k", DataType::Utf8, true));
    }
    let specs = aggs
        .iter()
        .map(|(f, distinct)| {
            let (arg, ty) = match f {
                AggFunc::CountStar => (None, DataType::Null),
                _ => {
                    let e = cast(col("v"), arg.clone());
                    (Some(ScalarExpr::compile(&e, &df).unwrap()), arg.clone())
                }
            };
            // The output types DataFusion gives.
            let out = match (f, &ty) {
                (AggFunc::Avg, DataType::Decimal128(p, s)) => {
                    DataType::Decimal128((p + 4).min(38), s + 4)
                }
                (AggFunc::Sum, DataType::Decimal128(p, s)) => {
                    DataType::Decimal128((p + 10).min(38), *s)
                }
                (AggFunc::Avg, _) => DataType::Float64,
                (AggFunc::Min | AggFunc::Max, _) => ty.clone(),
                _ => DataType::Int64,
            };
            fields.push(Field::new(format!("{f}"), out, true));
            AggSpec::plain(*f, arg, ty, *distinct)
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let key_types = if grouped { vec![DataType::Utf8] } else { vec![] };
    Aggregate::new(keys, key_types, specs, schema).unwrap()
}

fn agg(grouped: bool, aggs: &[(AggFunc, bool)], input: Vec<Tick>) -> Vec<String> {
    run(&mut agg_op(grouped, aggs, input))
}

/// Evaluates `flow` at `times`, rendering its output.
fn eval_at(flow: &mut Graph, times: &[Time]) -> Vec<String> {
    let ctx = EvalCtx::default();
    times.iter().flat_map(|t| render(&flow.eval(*t, *t, &ctx).unwrap())).collect()
}

/// Copies the aggregate's state (not the feed's) through a checkpoint's bytes into `to`.
fn copy_state(from: &Graph, to: &mut Graph) {
    let root = from.len() - 1;
    let mut w = StateWriter::new();
    from.operator(root).unwrap().save_state(&mut w).unwrap();
    let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
    to.operator_mut(root).unwrap().restore_state(&mut r).unwrap();
    r.finish().unwrap();
}

/// Evaluates `make(input())` at `times` in one go, then cut by a checkpoint after each instant
/// (the state copied into a fresh operator and back, so a restored state saves what it
/// restored), and asserts the same output every way; `what` names the case in a failure.
fn assert_round_trips_at_every_cut(
    make: impl Fn(Vec<Tick>) -> Graph,
    input: impl Fn() -> Vec<Tick>,
    times: &[Time],
    what: &str,
) {
    let whole = eval_at(&mut make(input()), times);
    for cut in 0..times.len() {
        let mut a = make(input());
        let mut out = eval_at(&mut a, &times[..cut]);
        let mut b = make(input());
        eval_at(&mut b, &times[..cut]); // consumes the feed's first instants
        let mut fresh = make(vec![]);
        copy_state(&a, &mut fresh);
        copy_state(&fresh, &mut b);
        out.extend(eval_at(&mut b, &times[cut..]));
        assert_eq!(out, whole, "{what} cut at {cut}");
    }
}

#[test]
fn min_max_survive_deleting_the_current_extreme() {
    let out = agg(
        true,
        &[(AggFunc::Min, false), (AggFunc::Max, false)],
        vec![kv(1, "+1 a 5, +1 a 1, +1 a 9"), kv(2, "-1 a 1"), kv(3, "-1 a 9"), kv(4, "-1 a 5")],
    );
    assert_eq!(
        out,
        ["@1 +1 a 1 9", "@2 +1 a 5 9", "@2 -1 a 1 9", "@3 +1 a 5 5", "@3 -1 a 5 9", "@4 -1 a 5 5"]
    );
}

#[test]
fn count_distinct_counts_values_present() {
    let out = agg(
        true,
        &[(AggFunc::Count, true), (AggFunc::CountStar, false)],
        vec![kv(1, "+1 a 1, +1 a 1, +1 a 2"), kv(2, "-1 a 1"), kv(3, "-1 a 1")],
    );
    assert_eq!(out, ["@1 +1 a 2 3", "@2 +1 a 2 2", "@2 -1 a 2 3", "@3 +1 a 1 1", "@3 -1 a 2 2"]);
}

#[test]
fn scalar_aggregate_exists_from_the_first_instant() {
    // No input at the first instant: COUNT(*) = 0, SUM = NULL; then a row comes and goes.
    let out = agg(
        false,
        &[(AggFunc::CountStar, false), (AggFunc::Sum, false)],
        vec![kv(0, ""), kv(1, "+1 a 4"), kv(2, "-1 a 4")],
    );
    assert_eq!(out, ["@0 +1 0 _", "@1 +1 1 4", "@1 -1 0 _", "@2 +1 0 _", "@2 -1 1 4"]);
}

#[test]
fn sum_and_avg_skip_nulls_and_retract() {
    let out = agg(
        true,
        &[(AggFunc::Sum, false), (AggFunc::Avg, false), (AggFunc::Count, false)],
        vec![kv(1, "+1 a 2, +1 a _, +1 a 4"), kv(2, "-1 a 4")],
    );
    assert_eq!(out, ["@1 +1 a 6 3.0 2", "@2 +1 a 2 2.0 1", "@2 -1 a 6 3.0 2"]);
}

#[test]
fn decimal_avg_is_exact_and_rounds_half_away_from_zero() {
    use super::accumulators::decimal_avg;
    assert_eq!(decimal_avg(1, 3, 1).unwrap(), 3333); // 0.1 / 3 = 0.03333
    assert_eq!(decimal_avg(-2, 3, 0).unwrap(), -6667); // -0.66667 at scale 4
    assert_eq!(decimal_avg(1, 20_000, 0).unwrap(), 1); // 0.00005 rounds to 0.0001
    assert_eq!(decimal_avg(-1, 20_000, 0).unwrap(), -1);
    assert_eq!(decimal_avg(1, 20_001, 0).unwrap(), 0);
    // The sum is divided first: a sum near i128's limit still averages.
    assert_eq!(decimal_avg(i128::MAX - 1, 2, 38).unwrap(), (i128::MAX - 1) / 2);
    assert!(decimal_avg(i128::MAX - 1, 1, 0).is_err());
}

/// SUM and AVG over DECIMAL(20,2): exact past 2^53, where a float sum loses the last digit.
fn decimal_input() -> Vec<Tick> {
    vec![
        kv(1, "+1 a 9007199254740993, +1 a 1, +1 a 1, +1 b -1, +1 b -1, +1 b 0"),
        kv(2, "-1 a 1, -1 b 0"),
        kv(3, "-1 a 9007199254740993"),
    ]
}

#[test]
fn decimal_sum_and_avg_are_exact_and_retract() {
    let make = |input| {
        agg_op_as(
            true,
            &[(AggFunc::Sum, false), (AggFunc::Avg, false)],
            DataType::Decimal128(20, 2),
            input,
        )
    };
    let out = run(&mut make(decimal_input()));
    assert_eq!(
        out,
        [
            "@1 +1 a 9007199254740995.00 3002399751580331.666667",
            "@1 +1 b -2.00 -0.666667",
            "@2 +1 a 9007199254740994.00 4503599627370497.000000",
            "@2 +1 b -2.00 -1.000000",
            "@2 -1 a 9007199254740995.00 3002399751580331.666667",
            "@2 -1 b -2.00 -0.666667",
            "@3 +1 a 1.00 1.000000",
            "@3 -1 a 9007199254740994.00 4503599627370497.000000",
        ]
    );
    assert_round_trips_at_every_cut(make, decimal_input, &[1, 2, 3], "decimal SUM and AVG");
}

#[test]
fn unchanged_values_emit_nothing() {
    // A replacement by an equal value leaves the group's output unchanged.
    let out = agg(true, &[(AggFunc::Sum, false)], vec![kv(1, "+1 b 5"), kv(4, "-1 b 5, +1 b 5")]);
    assert_eq!(out, ["@1 +1 b 5"]);
}

/// Evaluates `flow` in spans of `width` + 1 instants, rendering each output in its order.
fn run_in_order(flow: &mut Graph, width: Time) -> Vec<String> {
    let ctx = EvalCtx::default();
    let mut out = vec![];
    while let Some(lo) = flow.next_wakeup() {
        out.extend(render_in_order(&flow.eval(lo, lo + width, &ctx).unwrap()));
    }
    out
}

#[test]
fn one_row_instants_give_what_the_general_walk_gives() {
    // Every instant is one change: the walk's shortcut writes the group's old and new rows
    // straight into the output and takes them back when equal (t2, t11), also once a NULL is
    // in a column (t3 on). Beside a change of multiplicity zero to another group, the same
    // changes take the general walk. Columns: k, MAX(v), SUM(v), COUNT(DISTINCT v).
    let changes = [
        "+1 a 5", "+1 a _", "+1 b _", "+1 a 0", "-1 b _", "+1 b 7", "-1 a 5", "-1 a 0", "-1 a _",
        "+1 a _", "+1 a _",
    ];
    let ticks = |pad: &str| -> Vec<Tick> {
        (changes.iter().enumerate()).map(|(t, c)| kv(t as Time + 1, &format!("{c}{pad}"))).collect()
    };
    let aggs = [(AggFunc::Max, false), (AggFunc::Sum, false), (AggFunc::Count, true)];
    let want = [
        "@1 +1 a 5 5 1",
        "@3 +1 b _ _ 0",
        "@4 -1 a 5 5 1",
        "@4 +1 a 5 5 2",
        "@5 -1 b _ _ 0",
        "@6 +1 b 7 7 1",
        "@7 -1 a 5 5 2",
        "@7 +1 a 0 0 1",
        "@8 -1 a 0 0 1",
        "@8 +1 a _ _ 0",
        "@9 -1 a _ _ 0",
        "@10 +1 a _ _ 0",
    ];
    for width in [0, 3, 100] {
        for pad in ["", ", 0 z 1"] {
            let out = run_in_order(&mut agg_op(true, &aggs, ticks(pad)), width);
            assert_eq!(out, want, "width {width}, pad {pad:?}");
        }
    }
}

/// Window-like changes (oldest value out first) and then deletions out of arrival order.
fn min_max_input() -> Vec<Tick> {
    vec![
        kv(1, "+1 a 5, +1 a 1, +1 b 7, +1 a 9"),
        kv(2, "+1 a 9, -1 a 5, +1 b 2, +2 b 7"),
        kv(3, "-1 a 1, -1 b 7, +1 a _, +1 c _"),
        kv(4, "-1 a 9, +1 a 3"),
        kv(5, "-1 a 9, -1 b 7"),
        kv(6, "-1 a 3, -1 b 2, +1 b 4, -1 a _"),
        kv(7, "-1 b 7, +1 a 0, -1 c _"),
        kv(8, "-1 b 4, -1 a 0"),
    ]
}

#[test]
fn min_max_over_every_kept_form_agree() {
    // Int64 and Int32 (order keys), Float64 (float order keys), Utf8 (row encodings):
    // the same MIN and MAX, whatever the form the multiset is kept in.
    let aggs = [(AggFunc::Min, false), (AggFunc::Max, false), (AggFunc::Count, false)];
    let int = run(&mut agg_op(true, &aggs, min_max_input()));
    assert_eq!(
        int[..6],
        [
            "@1 +1 a 1 9 3",
            "@1 +1 b 7 7 1",
            "@2 +1 b 2 7 4",
            "@2 -1 b 7 7 1",
            "@3 +1 a 9 9 2",
            "@3 +1 b 2 7 3"
        ]
    );
    // (Strings would order "10" before "9"; all the values here are single digits.)
    for ty in [DataType::Int32, DataType::Float64, DataType::Utf8] {
        let other = run(&mut agg_op_as(true, &aggs, ty.clone(), min_max_input()));
        let other: Vec<String> = other.iter().map(|r| r.replace(".0", "")).collect();
        assert_eq!(other, int, "{ty}");
    }
}

#[test]
fn float_order_keys_follow_the_total_order() {
    let vals =
        [f64::NEG_INFINITY, -1.5, -0.0, 0.0, f64::MIN_POSITIVE, 1.0, f64::INFINITY, f64::NAN];
    for w in vals.windows(2) {
        assert!(f64_key(w[0]) < f64_key(w[1]), "{} < {}", w[0], w[1]);
        assert_eq!(w[0].total_cmp(&w[1]), f64_key(w[0]).cmp(&f64_key(w[1])));
    }
    for v in vals.iter().chain(&[-f64::NAN]) {
        assert_eq!(key_f64(f64_key(*v)).to_bits(), v.to_bits());
    }
}

#[test]
fn min_max_checkpoint_round_trips_at_every_instant() {
    let aggs = [
        (AggFunc::Min, false),
        (AggFunc::Max, false),
        (AggFunc::Max, true),
        (AggFunc::CountStar, false),
    ];
    let times: Vec<Time> = (1..=8).collect();
    for ty in [DataType::Int64, DataType::Float64, DataType::Utf8] {
        let make = |input| agg_op_as(true, &aggs, ty.clone(), input);
        assert_round_trips_at_every_cut(make, min_max_input, &times, &ty.to_string());
    }
}

#[test]
fn scalar_min_max_without_values_checkpoint() {
    // No GROUP BY: the row exists with NULL MIN/MAX and an empty multiset to save.
    let aggs = [(AggFunc::Min, false), (AggFunc::Max, false)];
    let mut a = agg_op(false, &aggs, vec![kv(1, "+1 a _")]);
    assert_eq!(eval_at(&mut a, &[1]), ["@1 +1 _ _"]);
    let mut b = agg_op(false, &aggs, vec![kv(2, "+1 a 4")]);
    copy_state(&a, &mut b);
    assert_eq!(eval_at(&mut b, &[2]), ["@2 +1 4 4", "@2 -1 _ _"]);
}

#[test]
fn restored_values_that_do_not_fit_are_errors() {
    let aggs = [(AggFunc::Max, false)];
    let mut a = agg_op(true, &aggs, vec![kv(1, "+1 a 4")]);
    eval_at(&mut a, &[1]);
    let mut w = StateWriter::new();
    a.operator(1).unwrap().save_state(&mut w).unwrap();
    // The same state with a value of the wrong width for BIGINT.
    let sig = aggregate(true, &aggs, DataType::Int64).signature();
    let mut bad = StateWriter::new();
    bad.put("aggregate", &sig, 1, vec![("started", bool_col([true]))]).unwrap();
    let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
    r.take("aggregate", &sig).unwrap();
    let groups = r.take("aggregate.groups", &sig).unwrap();
    let keys = groups.binary("key").unwrap();
    bad.put(
        "aggregate.groups",
        &sig,
        1,
        vec![
            ("key", binary_col(keys)),
            ("rows", i64_col([1])),
            ("n0", opt_i64_col([None])),
            ("isum0", opt_i128_col([None])),
            ("fsum0", opt_f64_col([None])),
        ],
    )
    .unwrap();
    for (name, value) in [("aggregate.values", &[1u8, 2, 3][..]), ("aggregate.seen", &[][..])] {
        let n = usize::from(!value.is_empty());
        bad.put(
            name,
            &sig,
            n,
            vec![
                ("group", i64_col(vec![0; n])),
                ("agg", i64_col(vec![0; n])),
                ("value", binary_col(vec![value; n])),
                ("count", i64_col(vec![1; n])),
            ],
        )
        .unwrap();
    }
    let mut r = StateReader::from_bytes(&bad.into_bytes().unwrap()).unwrap();
    let mut fresh = aggregate(true, &aggs, DataType::Int64);
    let err = fresh.restore_own(&mut r).unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
}

#[test]
fn decimal_avg_restores_the_float_sum_written_before_it_was_exact() {
    let aggs = [(AggFunc::Avg, false)];
    let ty = DataType::Decimal128(20, 2);
    let mut a = agg_op_as(true, &aggs, ty.clone(), vec![kv(1, "+1 a 10, +1 a 20")]);
    assert_eq!(eval_at(&mut a, &[1]), ["@1 +1 a 15.000000"]);
    let mut w = StateWriter::new();
    a.operator(1).unwrap().save_state(&mut w).unwrap();
    let sig = aggregate(true, &aggs, ty.clone()).signature();
    let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
    r.take("aggregate", &sig).unwrap();
    let groups = r.take("aggregate.groups", &sig).unwrap();
    let keys = groups.binary("key").unwrap();
    // The layout an older Weir wrote: the AVG's sum as a float (with a float's error).
    let mut old = StateWriter::new();
    old.put("aggregate", &sig, 1, vec![("started", bool_col([true]))]).unwrap();
    let groups = vec![
        ("key", binary_col(keys)),
        ("rows", i64_col([2])),
        ("n0", opt_i64_col([Some(2)])),
        ("isum0", opt_i128_col([None])),
        ("fsum0", opt_f64_col([Some(30.000000000000004)])),
    ];
    old.put("aggregate.groups", &sig, 1, groups).unwrap();
    for name in ["aggregate.values", "aggregate.seen"] {
        let none: Vec<&[u8]> = vec![];
        let cols = vec![
            ("group", i64_col(vec![])),
            ("agg", i64_col(vec![])),
            ("value", binary_col(none)),
            ("count", i64_col(vec![])),
        ];
        old.put(name, &sig, 0, cols).unwrap();
    }
    let mut r = StateReader::from_bytes(&old.into_bytes().unwrap()).unwrap();
    let mut b = agg_op_as(true, &aggs, ty, vec![kv(2, "+1 a 30")]);
    b.operator_mut(1).unwrap().restore_state(&mut r).unwrap();
    r.finish().unwrap();
    assert_eq!(eval_at(&mut b, &[2]), ["@2 +1 a 20.000000", "@2 -1 a 15.000000"]);
}

#[test]
fn spans_give_what_instants_give() {
    // Window-like input over many instants, some groups appearing and disappearing, a
    // float sum (which fixes the apply order): any span width, the same changes.
    let ticks = || min_max_input();
    for (grouped, aggs) in [
        (true, &[(AggFunc::Max, false), (AggFunc::Avg, false), (AggFunc::CountStar, false)][..]),
        (false, &[(AggFunc::Min, false), (AggFunc::Count, true), (AggFunc::Sum, false)][..]),
    ] {
        let make = || agg_op(grouped, aggs, ticks());
        let want = run(&mut make());
        assert!(!want.is_empty());
        for width in [0, 1, 2, 10] {
            assert_eq!(run_spans(&mut make(), width), want, "width {width}");
        }
    }
}

/// An aggregate over `kv` grouped by `k` with the aggregates that FILTER, counts of booleans
/// and ordered multisets keep: `COUNT(*) FILTER (WHERE v > 2)`, `BOOL_AND(v > 2)`,
/// `STRING_AGG(CAST(v AS VARCHAR), ',' ORDER BY v DESC)`, `ARRAY_AGG(v)`,
/// `FIRST_VALUE(v ORDER BY v DESC NULLS LAST)`, `COUNT(DISTINCT v) FILTER (WHERE v < 9)`.
fn rich_aggregate() -> Aggregate {
    use datafusion_expr::lit;
    let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
    let c = |e: &Expr| ScalarExpr::compile(e, &df).unwrap();
    let v = col("v");
    let desc = |nulls_first| SortKey {
        expr: c(&v),
        data_type: DataType::Int64,
        descending: true,
        nulls_first,
    };
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)));
    let specs = vec![
        AggSpec {
            filter: Some(c(&v.clone().gt(lit(2i64)))),
            ..AggSpec::plain(AggFunc::CountStar, None, DataType::Null, false)
        },
        AggSpec::plain(
            AggFunc::BoolAnd,
            Some(c(&v.clone().gt(lit(2i64)))),
            DataType::Boolean,
            false,
        ),
        AggSpec {
            order: vec![desc(true)],
            separator: Some(",".into()),
            ..AggSpec::plain(
                AggFunc::StringAgg,
                Some(c(&cast(v.clone(), DataType::Utf8))),
                DataType::Utf8,
                false,
            )
        },
        AggSpec::plain(AggFunc::ArrayAgg, Some(c(&v)), DataType::Int64, false),
        AggSpec {
            order: vec![desc(false)],
            ..AggSpec::plain(AggFunc::FirstValue, Some(c(&v)), DataType::Int64, false)
        },
        AggSpec {
            filter: Some(c(&v.clone().lt(lit(9i64)))),
            ..AggSpec::plain(AggFunc::Count, Some(c(&v)), DataType::Int64, true)
        },
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("all", DataType::Boolean, true),
        Field::new("s", DataType::LargeUtf8, true),
        Field::new("a", list, true),
        Field::new("f", DataType::Int64, true),
        Field::new("d", DataType::Int64, true),
    ]));
    let keys = vec![c(&col("k"))];
    Aggregate::new(keys, vec![DataType::Utf8], specs, schema).unwrap()
}

fn rich_input() -> Vec<Tick> {
    vec![
        kv(1, "+1 a 5, +1 a 1, +1 a _, +1 b 3"),
        kv(2, "+1 a 9, +1 a 5"),
        kv(3, "-1 a 1"),
        kv(4, "-1 a 5, -1 b 3, +1 b 4"),
        kv(5, "-1 a _, -1 a 9"),
        kv(6, "-1 a 5"),
    ]
}

#[test]
fn filter_bool_and_ordered_aggregates_retract_exactly() {
    let out = run(&mut fed(rich_aggregate(), [rich_input()]));
    assert_eq!(
        out,
        [
            // a {5, 1, NULL}: 1 above 2; 1 is not; "5,1"; [NULL, 1, 5]; 5; 2 distinct below 9.
            "@1 +1 a 1 false 5,1 [_, 1, 5] 5 2",
            "@1 +1 b 1 true 3 [3] 3 1",
            // a {5, 1, NULL, 9, 5}
            "@2 +1 a 3 false 9,5,5,1 [_, 1, 5, 5, 9] 9 2",
            "@2 -1 a 1 false 5,1 [_, 1, 5] 5 2",
            // 1 leaves: BOOL_AND back to true (NULL skipped).
            "@3 +1 a 3 true 9,5,5 [_, 5, 5, 9] 9 1",
            "@3 -1 a 3 false 9,5,5,1 [_, 1, 5, 5, 9] 9 2",
            "@4 +1 a 2 true 9,5 [_, 5, 9] 9 1",
            "@4 +1 b 1 true 4 [4] 4 1",
            "@4 -1 a 3 true 9,5,5 [_, 5, 5, 9] 9 1",
            "@4 -1 b 1 true 3 [3] 3 1",
            "@5 +1 a 1 true 5 [5] 5 1",
            "@5 -1 a 2 true 9,5 [_, 5, 9] 9 1",
            "@6 -1 a 1 true 5 [5] 5 1",
        ]
    );
}

#[test]
fn filter_bool_and_ordered_checkpoint_round_trips_at_every_instant() {
    let times: Vec<Time> = (1..=6).collect();
    let make = |input| fed(rich_aggregate(), [input]);
    assert_round_trips_at_every_cut(make, rich_input, &times, "rich");
}

/// Insert-only changes: repeated values, NULLs, a new extreme after others, a diff of 2.
fn insert_only_input() -> Vec<Tick> {
    vec![
        kv(1, "+1 a 5, +1 a 1, +1 b 7, +1 a 9"),
        kv(2, "+1 a 9, +1 a 5, +1 b 2, +2 b 7"),
        kv(3, "+1 a 1, +1 b 8, +1 a _, +1 c _"),
        kv(4, "+1 a 0, +1 c 3"),
        kv(5, "+1 b 9, +1 c 3, +1 c 1"),
    ]
}

const INSERT_ONLY_AGGS: [(AggFunc, bool); 5] = [
    (AggFunc::Min, false),
    (AggFunc::Max, false),
    (AggFunc::Max, true),
    (AggFunc::Count, true),
    (AggFunc::CountStar, false),
];

/// The (group, agg, count) of each row of the aggregate's saved section `section`
/// (`aggregate.values` or `aggregate.seen`), the aggregate being node 1 of `flow`.
fn saved_counts(flow: &mut Graph, sig: &str, section: &str) -> Vec<(i64, i64, i64)> {
    let mut w = StateWriter::new();
    flow.operator(1).unwrap().save_state(&mut w).unwrap();
    let mut r = StateReader::from_bytes(&w.into_bytes().unwrap()).unwrap();
    for before in ["aggregate", "aggregate.groups", "aggregate.values", "aggregate.seen"] {
        let rows = r.take(before, sig).unwrap();
        if before == section {
            let (g, a, c) = (rows.i64s("group"), rows.i64s("agg"), rows.i64s("count"));
            let (g, a, c) = (g.unwrap(), a.unwrap(), c.unwrap());
            return (0..g.len()).map(|i| (g[i], a[i], c[i])).collect();
        }
    }
    panic!("no section {section}")
}

#[test]
fn insert_only_min_max_keep_one_value_and_give_the_same_answers() {
    let times: Vec<Time> = (1..=5).collect();
    for ty in [DataType::Int64, DataType::Float64, DataType::Utf8] {
        let aggs = &INSERT_ONLY_AGGS;
        let general = run(&mut agg_op_as(true, aggs, ty.clone(), insert_only_input()));
        let op = aggregate(true, aggs, ty.clone()).with_append_only(true);
        let mut flow = fed(op, [insert_only_input()]);
        assert_eq!(eval_at(&mut flow, &times), general, "{ty}");
        // The saved MIN/MAX values: one per group and aggregate (3 groups; the NULL-only
        // group `c` at first, then its values), where the general form keeps every value.
        let sig = aggregate(true, aggs, ty.clone()).signature();
        let mut kept = saved_counts(&mut flow, &sig, "aggregate.values");
        kept.sort_unstable();
        // Groups a, b, c by key; MIN, MAX, MAX(DISTINCT) are aggregates 0-2: `a`'s MIN 0
        // once, MAX 9 twice; `b`'s MIN 2 once, MAX 9 once; `c`'s MIN 1 once, MAX 3 twice.
        assert_eq!(
            kept,
            [
                (0, 0, 1),
                (0, 1, 2),
                (0, 2, 1),
                (1, 0, 1),
                (1, 1, 1),
                (1, 2, 1),
                (2, 0, 1),
                (2, 1, 2),
                (2, 2, 1)
            ],
            "{ty}"
        );
    }
}

#[test]
fn insert_only_checkpoint_round_trips_at_every_instant() {
    let times: Vec<Time> = (1..=5).collect();
    let aggs =
        &[INSERT_ONLY_AGGS.as_slice(), &[(AggFunc::Avg, false), (AggFunc::Sum, false)]].concat();
    let make = |input| fed(aggregate(true, aggs, DataType::Int64).with_append_only(true), [input]);
    assert_round_trips_at_every_cut(make, insert_only_input, &times, "insert-only");
    // MIN/MAX over strings keep their extreme as bytes.
    let make = |input| {
        fed(aggregate(true, &INSERT_ONLY_AGGS, DataType::Utf8).with_append_only(true), [input])
    };
    assert_round_trips_at_every_cut(make, insert_only_input, &times, "insert-only strings");
}

#[test]
fn insert_only_distinct_sets_mark_values_and_give_the_same_answers() {
    // Four DISTINCT aggregates of `v` under filters share a set of marks, and one of a cast
    // has its own: the answers are those of counted sets, checkpoints too.
    let times: Vec<Time> = (1..=5).collect();
    let general = run(&mut fed(distinct_aggregate(true), [insert_only_input()]));
    assert!(general.len() > 6);
    let marked = || distinct_aggregate(true).with_append_only(true);
    assert_eq!(eval_at(&mut fed(marked(), [insert_only_input()]), &times), general);
    let make = |input| fed(marked(), [input]);
    assert_round_trips_at_every_cut(make, insert_only_input, &times, "insert-only distinct");
    // The saved rows: one per (group, aggregate, value) as counted sets save them, with a
    // count of 1 (a value seen twice by a member is saved once).
    let seen = |agg: Aggregate| {
        let mut flow = fed(agg, [insert_only_input()]);
        eval_at(&mut flow, &times);
        saved_counts(&mut flow, &distinct_aggregate(true).signature(), "aggregate.seen")
    };
    let (marks, counts) = (seen(marked()), seen(distinct_aggregate(true)));
    assert_eq!(marks.len(), counts.len());
    assert!(marks.iter().all(|&(_, _, c)| c == 1));
    assert!(counts.iter().any(|&(_, _, c)| c > 1), "some value is seen twice");
    let strip =
        |rows: Vec<(i64, i64, i64)>| rows.into_iter().map(|(g, a, _)| (g, a)).collect::<Vec<_>>();
    assert_eq!(strip(marks), strip(counts));
}

#[test]
fn a_change_of_multiplicity_zero_changes_no_group() {
    // A zero is no value: an insert-only MAX keeping its extreme must not take 9, and a
    // DISTINCT set must not mark it.
    let input = || vec![kv(1, "+1 a 5, +0 a 9, +0 b 3"), kv(2, "+1 a 4")];
    for ty in [DataType::Int64, DataType::Utf8] {
        let op = aggregate(true, &INSERT_ONLY_AGGS, ty.clone()).with_append_only(true);
        let out = eval_at(&mut fed(op, [input()]), &[1, 2]);
        assert_eq!(out, run(&mut agg_op_as(true, &INSERT_ONLY_AGGS, ty.clone(), input())), "{ty}");
        assert!(out.iter().all(|l| !l.contains(" b ") && !l.contains('9')), "{ty}: {out:?}");
    }
}

#[test]
fn insert_only_aggregate_refuses_a_retraction() {
    let aggs = [(AggFunc::Max, false)];
    let op = aggregate(true, &aggs, DataType::Int64).with_append_only(true);
    let mut flow = fed(op, [vec![kv(1, "+1 a 4"), kv(2, "-1 a 4")]]);
    let ctx = EvalCtx::default();
    flow.eval(1, 1, &ctx).unwrap();
    let err = flow.eval(2, 2, &ctx).unwrap_err();
    assert!(err.to_string().contains("insert-only"), "{err}");
}

#[test]
fn avg_over_integers_is_exact_whatever_the_order() {
    // 2^53 + 1 is not a double: a float sum gives (2^53 + 2) / 2 as 2^52, or 2^52 + 1, by
    // the order the values come in. The exact sum gives 2^52 + 1 both ways.
    for input in ["+1 a 9007199254740993, +1 a 1", "+1 a 1, +1 a 9007199254740993"] {
        let out = agg(true, &[(AggFunc::Avg, false)], vec![kv(1, input)]);
        assert_eq!(out, ["@1 +1 a 4503599627370497.0"], "{input}");
    }
    // Retracting down to one value leaves exactly that value.
    let out = agg(
        true,
        &[(AggFunc::Avg, false)],
        vec![kv(1, "+1 a 9007199254740993, +1 a 3"), kv(2, "-1 a 9007199254740993")],
    );
    assert_eq!(out[..2], ["@1 +1 a 4503599627370498.0", "@2 +1 a 3.0"]);
}

/// `COUNT(DISTINCT v)`, `COUNT(DISTINCT v) FILTER (WHERE v < 5)`, `SUM(DISTINCT v) FILTER
/// (WHERE v >= 5)`, `MAX(DISTINCT v)` and `COUNT(DISTINCT CAST(v AS VARCHAR))` per `k`: the
/// first four share one DISTINCT set, the last has its own; with `shared` false, every one
/// keeps its own map (the layout before sets were shared).
fn distinct_aggregate(shared: bool) -> Aggregate {
    use datafusion_expr::lit;
    let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
    let c = |e: &Expr| ScalarExpr::compile(e, &df).unwrap();
    let v = col("v");
    let distinct = |f, filter: Option<Expr>| AggSpec {
        filter: filter.map(|p| c(&p)),
        ..AggSpec::plain(f, Some(c(&v)), DataType::Int64, true)
    };
    let specs = vec![
        distinct(AggFunc::Count, None),
        distinct(AggFunc::Count, Some(v.clone().lt(lit(5i64)))),
        distinct(AggFunc::Sum, Some(v.clone().gt_eq(lit(5i64)))),
        distinct(AggFunc::Max, None),
        AggSpec::plain(
            AggFunc::Count,
            Some(c(&cast(v.clone(), DataType::Utf8))),
            DataType::Utf8,
            true,
        ),
    ];
    let fields = ["k", "n", "low", "high", "max", "texts"].map(|n| {
        let ty = if n == "k" { DataType::Utf8 } else { DataType::Int64 };
        Field::new(n, ty, true)
    });
    let schema = Arc::new(Schema::new(fields.to_vec()));
    let mut agg = Aggregate::new(vec![c(&col("k"))], vec![DataType::Utf8], specs, schema).unwrap();
    assert_eq!(agg.distinct_sets, [vec![0, 1, 2, 3], vec![4]]);
    if !shared {
        agg.distinct_sets = (0..5).map(|a| vec![a]).collect();
        agg.distinct_of = (0..5).map(|a| Some((a, 0))).collect();
    }
    agg
}

#[test]
fn distinct_aggregates_of_one_argument_share_a_map_exactly() {
    // Retractions under filters, a value deleted more often than inserted (min_max_input),
    // NULLs: the shared map gives what one map per aggregate gives.
    for input in [rich_input(), min_max_input()] {
        let apart = run(&mut fed(distinct_aggregate(false), [input.clone()]));
        assert!(apart.len() > 4);
        assert_eq!(run(&mut fed(distinct_aggregate(true), [input])), apart);
    }
    // a at 1: {5, 1} (NULL skipped), 1 below 5, 5 from 5 up; b: {3}. a at 2: 9 joins.
    let out = run(&mut fed(distinct_aggregate(true), [rich_input()]));
    assert_eq!(out[..3], ["@1 +1 a 2 1 5 5 2", "@1 +1 b 1 1 _ 3 1", "@2 +1 a 3 1 14 9 3"]);
}

#[test]
fn reading_groups_ahead_changes_no_answer() {
    // Many groups, DISTINCT sets under filters, retractions and NULLs, instants of one and of
    // several rows, spans of several instants: the aggregate reading each step's groups ahead
    // (`Aggregate::warm`, on from the first group here) gives what it gives without, over an
    // input that retracts and over an insert-only one (sets of marks, dense and hashed).
    let many = |insert_only: bool| -> Vec<Tick> {
        (1..=40i64)
            .map(|t| {
                let rows: Vec<String> = (0..(t % 4 + 1))
                    .map(|j| {
                        let n = t * 7 + j * 13;
                        let key = format!("g{}", n % 23);
                        let v = if n % 9 == 0 { "_".to_string() } else { (n % 11).to_string() };
                        let diff = if !insert_only && t > 20 && j == 0 { -1 } else { 1 };
                        format!("{diff:+} {key} {v}")
                    })
                    .collect();
                kv(t, &rows.join(", "))
            })
            .collect()
    };
    for insert_only in [false, true] {
        let make = |warm_from: usize| {
            let mut agg = distinct_aggregate(true).with_append_only(insert_only);
            agg.warm_from = warm_from;
            agg
        };
        for width in [0, 3] {
            let cold = run_spans(&mut fed(make(usize::MAX), [many(insert_only)]), width);
            assert!(cold.len() > 40, "{cold:?}");
            let warmed = run_spans(&mut fed(make(0), [many(insert_only)]), width);
            assert_eq!(warmed, cold, "insert-only: {insert_only}, span width {width}");
        }
    }
    assert_eq!(distinct_aggregate(true).warm_from, WARM_GROUPS);
}

#[test]
fn shared_distinct_checkpoint_round_trips_at_every_instant() {
    let times: Vec<Time> = (1..=8).collect();
    let make = |input| fed(distinct_aggregate(true), [input]);
    assert_round_trips_at_every_cut(make, min_max_input, &times, "shared distinct");
    // The saved rows are one per (aggregate, value) with its own count: what separate maps
    // save, so checkpoints written before the maps were shared restore.
    let state = |agg: Aggregate| {
        let mut flow = fed(agg, [min_max_input()]);
        eval_at(&mut flow, &times[..3]);
        let mut w = StateWriter::new();
        flow.operator(1).unwrap().save_state(&mut w).unwrap();
        w.into_bytes().unwrap()
    };
    assert_eq!(state(distinct_aggregate(true)), state(distinct_aggregate(false)));
}

/// The COUNT family is kept as bare counts, numbered apart from the other accumulators;
/// COUNT(*) without a FILTER keeps nothing (it is the row count).
#[test]
fn counts_are_kept_apart_from_the_other_accumulators() {
    use datafusion_expr::lit;
    let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
    let v = ScalarExpr::compile(&col("v"), &df).unwrap();
    let filtered = |spec: AggSpec| AggSpec {
        filter: Some(ScalarExpr::compile(&col("v").gt(lit(2i64)), &df).unwrap()),
        ..spec
    };
    let count_star = || AggSpec::plain(AggFunc::CountStar, None, DataType::Null, false);
    let of = |func, distinct| AggSpec::plain(func, Some(v.clone()), DataType::Int64, distinct);
    let specs = [
        count_star(),
        of(AggFunc::Count, false),
        of(AggFunc::Sum, false),
        filtered(count_star()),
        filtered(of(AggFunc::Count, true)),
        of(AggFunc::Max, false),
    ];
    use accumulators::Place::{Acc, Count, Rows};
    assert_eq!(
        accumulators::Place::of(&specs),
        [Rows, Count(0), Acc(0), Count(1), Count(2), Acc(1)]
    );
}

#[test]
fn accumulators_stay_small() {
    // Every group keeps one per aggregate: q16 keeps 17 for each of its 10 000 groups a day.
    assert!(std::mem::size_of::<AccState>() <= 40, "{}", std::mem::size_of::<AccState>());
    // Two output values per aggregate for each change of a group, short encodings inline.
    assert_eq!(std::mem::size_of::<accumulators::Out>(), 24);
    for len in [0, 1, accumulators::SHORT_BYTES, accumulators::SHORT_BYTES + 1, 40] {
        let v: Vec<u8> = (0..len as u8).collect();
        let out = accumulators::Out::bytes(&v);
        assert_eq!(out.as_bytes(), Some(&v[..]));
        assert_eq!(
            matches!(out, accumulators::Out::Short { .. }),
            len <= accumulators::SHORT_BYTES
        );
    }
    let big = i128::MAX - 3;
    for v in [0, 1, -1, i64::MIN as i128, big, -big, i128::MIN] {
        assert_eq!(accumulators::Wide::new(v).get(), v);
    }
    let mut w = accumulators::Wide::new(big);
    assert!(w.add(3).is_ok());
    assert!(w.add(1).is_err());
}

#[test]
fn count_distinct_matches_a_recount_over_many_values() {
    use std::collections::BTreeMap;
    // One group; values 0..30 enter (half of them twice) and then leave once each in another
    // order: the count is recomputed from scratch after every change.
    let mut ticks = vec![];
    let mut present: BTreeMap<i64, i64> = BTreeMap::new();
    let mut want = vec![];
    let mut last: Option<i64> = None;
    for t in 1..=60i64 {
        let (v, d) = if t <= 30 { ((t * 7) % 30, 1 + t % 2) } else { (((t - 30) * 11) % 30, -1) };
        ticks.push(kv(t, &format!("{d:+} a {v}")));
        *present.entry(v).or_insert(0) += d;
        present.retain(|_, c| *c != 0);
        let now = present.values().filter(|c| **c > 0).count() as i64;
        if last != Some(now) {
            if let Some(old) = last {
                want.push(format!("@{t} -1 a {old}"));
            }
            want.push(format!("@{t} +1 a {now}"));
            last = Some(now);
        }
    }
    let mut got = agg(true, &[(AggFunc::Count, true)], ticks);
    // Within an instant, rows are rendered sorted: compare as sets per instant.
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn changes_since_a_checkpoint_restore_the_same_state() {
    use crate::testing::changes_round_trip;
    let aggs = [
        (AggFunc::CountStar, false),
        (AggFunc::Sum, false),
        (AggFunc::Min, false),
        (AggFunc::Max, false),
        (AggFunc::Count, true),
    ];
    // Groups appear, change, disappear (b at 8) and come back; MIN/MAX multisets and DISTINCT
    // maps change inside groups that stay.
    let mut input = min_max_input();
    input.extend([kv(9, "+1 b 1, +1 d 2"), kv(10, "+1 d 2, -1 a _"), kv(11, "+1 e 1")]);
    let more = vec![kv(20, "-1 d 2, +1 b 5, +1 a 1")];
    for grouped in [true, false] {
        let make = || Box::new(aggregate(grouped, &aggs, DataType::Int64)) as Box<dyn Operator>;
        for stops in [&[1, 3, 5, 9][..], &[2, 8][..], &[4, 4, 11][..]] {
            changes_round_trip(make, vec![input.clone()], vec![more.clone()], stops);
        }
    }
    // Distinct aggregates sharing a map, with filters.
    let make = || Box::new(distinct_aggregate(true)) as Box<dyn Operator>;
    changes_round_trip(make, vec![rich_input()], vec![vec![kv(9, "+1 a 5, +1 c 2")]], &[2, 4, 5]);
}

#[test]
fn an_accumulator_takes_32_bytes() {
    // Every group keeps one per aggregate (q16's groups keep 17): a variant that outgrows
    // this makes every group larger.
    assert_eq!(std::mem::size_of::<super::accumulators::Acc>(), 32);
}

/// Output rows kept row by row come back as the columns they were pushed as, over more rows
/// than one block of the transpose, with the first NULL in a later block than the first row.
#[test]
fn words_kept_by_row_come_back_by_column() {
    let mut out = Emitted::default();
    out.clear(&[Kind::Int, Kind::Bytes, Kind::Float]);
    let n = 3 * TRANSPOSE_ROWS + 7;
    let null_at = |i: usize| i > TRANSPOSE_ROWS && i.is_multiple_of(5);
    for i in 0..n {
        let float = if null_at(i) { Out::Null } else { Out::Float((i as f64).to_bits()) };
        let mut vals = [Out::Int(i as i64 * 3), Out::bytes(&[i as u8]), float];
        out.push(RowKey::Bytes(&[]), &mut vals, i as Time, 1);
    }
    let cols = out.word_columns();
    assert_eq!(cols.len(), 2);
    let ints: Vec<u64> = (0..n).map(|i| i as u64 * 3).collect();
    assert_eq!(cols[0], (ints, None));
    let floats: Vec<u64> =
        (0..n).map(|i| if null_at(i) { 0 } else { (i as f64).to_bits() }).collect();
    let valid: Vec<bool> = (0..n).map(|i| !null_at(i)).collect();
    assert_eq!(cols[1], (floats, Some(NullBuffer::from(valid))));
    // The equal-row test reads the flags too: 0.0 and NULL are both the word 0.
    for float in [Out::Float(0), Out::Null, Out::Float(0)] {
        out.push(RowKey::Bytes(&[]), &mut [Out::Int(1), Out::bytes(&[1]), float], 0, 1);
    }
    assert!(!out.same_values(n, n + 1));
    assert!(out.same_values(n, n + 2));
}
