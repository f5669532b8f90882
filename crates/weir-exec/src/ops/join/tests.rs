//! Tests of [`Join`](super::Join): each join kind on hand-written changes, the mark join, a
//! property test that spans of any width give what instants give, and a join holding its
//! windows (see [`super::held`]) against the same join over window operators.

use proptest::prelude::*;

use super::*;
use crate::testing::{kv, Tick};

/// A side over (k, v) keyed by the columns `keys`.
fn kv_side(keys: &[&str]) -> JoinSide {
    use crate::testing::kv_schema;
    let df = datafusion_common::DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
    JoinSide {
        keys: keys
            .iter()
            .map(|k| ScalarExpr::compile(&datafusion_expr::col(*k), &df).unwrap())
            .collect(),
        row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
        schema: kv_schema(),
    }
}

/// Both sides' columns: (k, v, k2, v2).
fn pair_schema() -> SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("k2", DataType::Utf8, true),
        Field::new("v2", DataType::Int64, true),
    ]))
}

/// A mark join's output: (k, v, mark).
fn mark_schema() -> SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("mark", DataType::Boolean, true),
    ]))
}

/// Ticks from (time, diff, key, value) changes; a key or value of 3 is NULL.
pub(super) fn ticks(changes: &[(i64, i64, u8, i64)]) -> Vec<Tick> {
    let mut by_time: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for &(t, d, k, v) in changes {
        let k = if k == 3 { "_".to_string() } else { ((b'a' + k) as char).to_string() };
        let v = if v == 3 { "_".to_string() } else { v.to_string() };
        by_time.entry(t).or_default().push(format!("{d:+} {k} {v}"));
    }
    by_time.into_iter().map(|(t, items)| kv(t, &items.join(", "))).collect()
}

/// Bag contents per instant, as sorted `@t +d row` strings with equal rows' diffs summed:
/// the span and instant-by-instant outputs must agree on these.
pub(super) fn consolidated(lines: Vec<String>) -> Vec<String> {
    let mut net: std::collections::BTreeMap<(i64, String), i64> = Default::default();
    for l in lines {
        let (t, rest) = l.split_once(' ').unwrap();
        let (d, row) = rest.split_once(' ').unwrap();
        *net.entry((t[1..].parse().unwrap(), row.to_string())).or_default() +=
            d.parse::<i64>().unwrap();
    }
    net.into_iter().filter(|(_, d)| *d != 0).map(|((t, r), d)| format!("@{t} {d:+} {r}")).collect()
}

/// Insertions of a row with a multiplicity, some retracted whole at a later instant (a
/// relation's changes never remove what is not there).
pub(super) fn changes() -> impl Strategy<Value = Vec<(i64, i64, u8, i64)>> {
    prop::collection::vec((0i64..12, 1i64..3, 0u8..4, 0i64..4, prop::option::of(0i64..6)), 0..12)
        .prop_map(|items| {
            items
                .into_iter()
                .flat_map(|(t, n, k, v, gone)| {
                    std::iter::once((t, n, k, v)).chain(gone.map(|g| (t + g, -n, k, v)))
                })
                .collect()
        })
}

mod kinds {

    use arrow::datatypes::DataType;

    use super::*;
    use crate::testing::{fed, kv, kv_schema, run, Tick};

    fn join(kind: JoinKind, left: Vec<Tick>, right: Vec<Tick>) -> Vec<String> {
        run(&mut fed(join_op(kind), [left, right]))
    }

    fn join_op(kind: JoinKind) -> Join {
        let schema = if matches!(kind, JoinKind::LeftSemi | JoinKind::LeftAnti { .. }) {
            kv_schema()
        } else if kind == JoinKind::LeftMark {
            mark_schema()
        } else {
            pair_schema()
        };
        Join::new(
            kind,
            false,
            kv_side(&["k"]),
            kv_side(&["k"]),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            None,
            schema,
        )
    }

    #[test]
    fn changes_since_a_checkpoint_restore_the_same_state() {
        use crate::testing::changes_round_trip;
        // Keys gain and lose rows on both sides (a bucket of several rows, a key that empties,
        // NULL keys); outer, semi, anti and mark joins track rows and their matches.
        let left = vec![
            kv(1, "+1 a 1, +1 b 2, +1 _ 3"),
            kv(2, "+1 a 4, +1 c 5"),
            kv(4, "-1 a 1, -1 b 2"),
            kv(5, "+1 b 2, -1 _ 3, +2 d 6"),
            kv(7, "-1 c 5"),
        ];
        let right = vec![
            kv(1, "+1 a 10, +1 _ 30"),
            kv(3, "+1 b 20, +1 a 11, +1 e 50"),
            kv(4, "-1 a 10"),
            kv(6, "-1 b 20, +1 c 21"),
            kv(7, "-1 e 50, +1 d 60"),
        ];
        let more = vec![vec![kv(9, "+1 a 7, -1 d 6")], vec![kv(9, "+1 b 22, -1 d 60")]];
        for kind in [
            JoinKind::Inner,
            JoinKind::Left,
            JoinKind::Full,
            JoinKind::LeftSemi,
            JoinKind::LeftAnti { null_aware: true },
            JoinKind::LeftMark,
        ] {
            let make = || Box::new(join_op(kind)) as Box<dyn Operator>;
            for stops in [&[1, 3, 5][..], &[2, 2, 6][..], &[4][..]] {
                changes_round_trip(make, vec![left.clone(), right.clone()], more.clone(), stops);
            }
        }
    }

    #[test]
    fn delta_join_counts_each_pair_once() {
        // Both sides change at instant 1: the pair (a1, a10) must appear exactly once.
        let out = join(
            JoinKind::Inner,
            vec![kv(1, "+1 a 1"), kv(3, "-1 a 1")],
            vec![kv(1, "+1 a 10"), kv(2, "+1 a 20")],
        );
        assert_eq!(out, ["@1 +1 a 1 a 10", "@2 +1 a 1 a 20", "@3 -1 a 1 a 10", "@3 -1 a 1 a 20"]);
    }

    #[test]
    fn null_keys_never_match() {
        let out =
            join(JoinKind::Inner, vec![kv(1, "+1 _ 1, +1 b 2")], vec![kv(1, "+1 _ 3, +1 b 4")]);
        assert_eq!(out, ["@1 +1 b 2 b 4"]);
    }

    #[test]
    fn multiplicities_multiply() {
        let out = join(JoinKind::Inner, vec![kv(1, "+2 a 1")], vec![kv(1, "+3 a 2")]);
        assert_eq!(out, ["@1 +6 a 1 a 2"]);
    }

    #[test]
    fn left_outer_pads_while_unmatched() {
        // x is padded until its match arrives at 2, and again after it leaves at 3.
        let out = join(
            JoinKind::Left,
            vec![kv(1, "+1 x 1, +1 _ 9")],
            vec![kv(2, "+1 x 5"), kv(3, "-1 x 5")],
        );
        assert_eq!(
            out,
            [
                "@1 +1 _ 9 _ _",
                "@1 +1 x 1 _ _",
                "@2 +1 x 1 x 5",
                "@2 -1 x 1 _ _",
                "@3 +1 x 1 _ _",
                "@3 -1 x 1 x 5"
            ]
        );
    }

    #[test]
    fn full_outer_pads_both_sides() {
        let out =
            join(JoinKind::Full, vec![kv(1, "+1 a 1")], vec![kv(1, "+1 b 2"), kv(2, "+1 a 3")]);
        assert_eq!(
            out,
            // (a,3) matches a1 as it arrives, so it is never padded.
            ["@1 +1 _ _ b 2", "@1 +1 a 1 _ _", "@2 +1 a 1 a 3", "@2 -1 a 1 _ _"]
        );
    }

    #[test]
    fn semi_and_anti_follow_the_first_and_last_match() {
        let left = || vec![kv(1, "+2 a 1, +1 b 2")];
        let right = || vec![kv(2, "+1 a 7, +1 a 8"), kv(3, "-1 a 7"), kv(4, "-1 a 8")];
        assert_eq!(join(JoinKind::LeftSemi, left(), right()), ["@2 +2 a 1", "@4 -2 a 1"]);
        assert_eq!(
            join(JoinKind::LeftAnti { null_aware: false }, left(), right()),
            ["@1 +1 b 2", "@1 +2 a 1", "@2 -2 a 1", "@4 +2 a 1"]
        );
    }

    #[test]
    fn null_aware_anti_join_follows_not_in() {
        // x NOT IN (R): empty R keeps everything (NULL x too); a NULL in R empties the result.
        let out = join(
            JoinKind::LeftAnti { null_aware: true },
            vec![kv(1, "+1 a 1, +1 _ 2")],
            vec![kv(2, "+1 b 0"), kv(3, "+1 _ 0"), kv(4, "-1 _ 0")],
        );
        assert_eq!(out, ["@1 +1 _ 2", "@1 +1 a 1", "@2 -1 _ 2", "@3 -1 a 1", "@4 +1 a 1"]);
    }
}

mod mark {

    use arrow::datatypes::DataType;

    use super::*;
    use crate::testing::{fed, kv, run};

    #[test]
    fn mark_join_flags_rows_with_a_match() {
        let op = Join::new(
            JoinKind::LeftMark,
            false,
            kv_side(&["k"]),
            kv_side(&["k"]),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            None,
            mark_schema(),
        );
        let left = vec![kv(1, "+1 a 1, +1 b 2")];
        let right = vec![kv(1, "+1 a 9"), kv(2, "+1 b 3")];
        assert_eq!(
            run(&mut fed(op, [left, right])),
            ["@1 +1 a 1 true", "@1 +1 b 2 false", "@2 +1 b 2 true", "@2 -1 b 2 false"]
        );
    }
}

mod spans {

    use arrow::datatypes::DataType;
    use datafusion_common::DFSchema;
    use datafusion_expr::{col, lit};
    use proptest::prelude::*;

    use super::*;
    use crate::operator::EvalCtx;
    use crate::testing::Graph;
    use crate::testing::{fed, kv, kv_schema, render, run, run_spans, Tick};

    const KINDS: [JoinKind; 9] = [
        JoinKind::Inner,
        JoinKind::Left,
        JoinKind::Right,
        JoinKind::Full,
        JoinKind::LeftSemi,
        JoinKind::LeftAnti { null_aware: false },
        JoinKind::LeftAnti { null_aware: true },
        JoinKind::LeftMark,
        JoinKind::ExceptAll,
    ];

    fn join(kind: JoinKind, filter: bool, left: Vec<Tick>, right: Vec<Tick>) -> Graph {
        let bag = matches!(kind, JoinKind::IntersectAll | JoinKind::ExceptAll);
        let side = || kv_side(if bag { &["k", "v"] } else { &["k"] });
        let both = pair_schema();
        let schema = match kind {
            JoinKind::LeftMark => mark_schema(),
            JoinKind::LeftSemi
            | JoinKind::LeftAnti { .. }
            | JoinKind::IntersectAll
            | JoinKind::ExceptAll => kv_schema(),
            _ => both.clone(),
        };
        // θ: the left value below the right one (over both sides' columns).
        let theta = filter.then(|| {
            let df_both = DFSchema::try_from(both.as_ref().clone()).unwrap();
            ScalarExpr::compile(&col("v").lt(col("v2") + lit(1i64)), &df_both).unwrap()
        });
        let key_types =
            if bag { vec![DataType::Utf8, DataType::Int64] } else { vec![DataType::Utf8] };
        let op = Join::new(
            kind,
            bag,
            side(),
            side(),
            RowCodec::new(key_types).unwrap(),
            if bag { None } else { theta },
            schema,
        );
        fed(op, [left, right])
    }

    /// An inner interval join of append-only sides whose rows carry their instant in `v`:
    /// θ = `v <= v2 AND v2 <= v + 3` (the right row within 3 ticks after the left one), and,
    /// if `expiring`, the expiry the planner derives from it: a right row expires at its `v`,
    /// a left row at its `v + 3`.
    fn interval(expiring: bool, left: Vec<Tick>, right: Vec<Tick>) -> Graph {
        fed(interval_op(expiring, None), [left, right])
    }

    /// With `before` = Some(lag), θ = `v2 <= v - lag AND v <= v2 + 3` instead (the right row
    /// `lag` to 3 ticks before the left one): a left row expires at `v - lag`, at or before its
    /// own instant, a right row at `v + 3`.
    fn interval_op(expiring: bool, before: Option<i64>) -> Join {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = || kv_side(&["k"]);
        let both = pair_schema();
        let df_both = DFSchema::try_from(both.as_ref().clone()).unwrap();
        let (theta, bounds) = if let Some(lag) = before {
            let theta = col("v2").lt_eq(col("v") - lit(lag));
            let theta = theta.and(col("v").lt_eq(col("v2") + lit(3i64)));
            (theta, [col("v") - lit(lag), col("v") + lit(3i64)])
        } else {
            let theta = col("v").lt_eq(col("v2")).and(col("v2").lt_eq(col("v") + lit(3i64)));
            (theta, [col("v") + lit(3i64), col("v")])
        };
        let theta = ScalarExpr::compile(&theta, &df_both).unwrap();
        let codec = RowCodec::new(vec![DataType::Utf8]).unwrap();
        let op = Join::new(JoinKind::Inner, false, side(), side(), codec, Some(theta), both);
        if expiring {
            let [l, r] = bounds.map(|e| Some(ScalarExpr::compile(&e, &df).unwrap()));
            op.with_expiry(l, r)
        } else {
            op
        }
    }

    /// Append-only rows stamped with their instant: (instant, count, key).
    fn stamped() -> impl Strategy<Value = Vec<Tick>> {
        prop::collection::vec((0i64..16, 1i64..3, 0u8..3), 0..24).prop_map(|rows| {
            let mut by_time: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
            for (t, n, k) in rows {
                by_time.entry(t).or_default().push(format!("+{n} {} {t}", (b'a' + k) as char));
            }
            by_time.into_iter().map(|(t, items)| kv(t, &items.join(", "))).collect()
        })
    }

    #[test]
    fn an_interval_join_drops_rows_nothing_can_match_any_more() {
        let left = vec![kv(1, "+1 a 1"), kv(2, "+1 b 2"), kv(9, "+1 a 9")];
        let right = vec![kv(2, "+1 a 2, +1 b 2"), kv(5, "+1 a 5"), kv(9, "+1 a 9")];
        let out = run(&mut interval(false, left.clone(), right.clone()));
        assert_eq!(out, ["@2 +1 a 1 a 2", "@2 +1 b 2 b 2", "@9 +1 a 9 a 9"]);
        let mut op = interval_op(true, None);
        let feeds = [left, right].map(|t| t.into_iter().peekable());
        let mut got =
            crate::testing::drive_n(&mut op, &mut feeds.into_iter().collect::<Vec<_>>(), None);
        got.sort();
        assert_eq!(got, out);
        // Left a@9 waits for right rows until 12; every right row and the older lefts are gone,
        // and so is everything waiting for them.
        let rows = |i: &Index| i.values().map(|b| b.iter().count()).sum::<usize>();
        assert_eq!((rows(&op.left_index), rows(&op.right_index)), (1, 0));
        let waiting: Vec<usize> =
            op.expiry.iter().flatten().map(|e| e.queue.values().map(Vec::len).sum()).collect();
        assert_eq!(waiting, [1, 0]);
        // Restored, the rows waiting are rebuilt from the index: a@9 still leaves at 12.
        let mut restored = interval_op(true, None);
        crate::testing::checkpoint_into(&op, &mut restored);
        let mut feeds = vec![
            vec![].into_iter().peekable(),
            vec![kv(12, "+1 a 12"), kv(13, "+1 a 13")].into_iter().peekable(),
        ];
        let after = crate::testing::drive_n(&mut restored, &mut feeds, None);
        assert_eq!(after, ["@12 +1 a 9 a 12"]);
        assert_eq!(rows(&restored.left_index), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Rows an interval join drops can match nothing more: its output, at any span width,
        /// is the join's without dropping anything.
        #[test]
        fn interval_joins_drop_only_what_cannot_match(
            left in stamped(),
            right in stamped(),
            width in 0i64..4,
            before in prop::option::of(0i64..2),
        ) {
            let op = |expiring| interval_op(expiring, before);
            let want = consolidated(run(&mut fed(op(false), [left.clone(), right.clone()])));
            let got = consolidated(run_spans(&mut fed(op(true), [left, right]), width));
            prop_assert_eq!(got, want);
        }

        /// Evaluating spans of instants gives exactly what evaluating them one by one gives,
        /// for every join kind, with and without θ, whatever the span width.
        #[test]
        fn spans_equal_instants(
            left in changes(),
            right in changes(),
            kind in 0usize..KINDS.len(),
            filter: bool,
            width in 0i64..13,
        ) {
            let kind = KINDS[kind];
            let one = run(&mut join(kind, filter, ticks(&left), ticks(&right)));
            let span = run_spans(&mut join(kind, filter, ticks(&left), ticks(&right)), width);
            prop_assert_eq!(consolidated(one), consolidated(span));
        }
    }

    #[test]
    fn a_span_output_is_stamped_with_each_instant() {
        let mut op = join(
            JoinKind::Left,
            false,
            vec![kv(1, "+1 a 1"), kv(3, "-1 a 1")],
            vec![kv(2, "+1 a 5"), kv(4, "+1 a 6")],
        );
        let d = op.eval(1, 4, &EvalCtx::default()).unwrap();
        assert_eq!(
            render(&d),
            ["@1 +1 a 1 _ _", "@2 +1 a 1 a 5", "@2 -1 a 1 _ _", "@3 -1 a 1 a 5",]
        );
    }
}

/// A join that holds a tumbling or gapped window of a stream (see [`super::held`]) against the
/// same join over the window operator: equal outputs, instant by instant and in spans.
mod held {
    use arrow::datatypes::DataType;
    use datafusion_common::DFSchema;
    use datafusion_expr::{col, lit};
    use proptest::prelude::*;

    use super::*;
    use crate::ops::window_time::{TimeBounds, TimeWindow};
    use crate::testing::{fed, kv, kv_schema, run, run_spans, Graph, Tick};

    /// (range, slide, offset) of a window that replaces its contents at each move.
    type Spec = (Time, Time, Time);

    fn held(spec: Spec) -> Held {
        Held::new(spec.0, spec.1, spec.2).unwrap()
    }

    fn join_op(filter: bool) -> Join {
        let both = pair_schema();
        // θ: the left value below the right one (over both sides' columns).
        let theta = filter.then(|| {
            let df_both = DFSchema::try_from(both.as_ref().clone()).unwrap();
            ScalarExpr::compile(&col("v").lt(col("v2") + lit(1i64)), &df_both).unwrap()
        });
        let codec = RowCodec::new(vec![DataType::Utf8]).unwrap();
        Join::new(JoinKind::Inner, false, kv_side(&["k"]), kv_side(&["k"]), codec, theta, both)
    }

    /// The join holding the windows `specs` (per side; None: the side is a relation).
    fn holding(specs: [Option<Spec>; 2], filter: bool, inputs: [Vec<Tick>; 2]) -> Graph {
        fed(join_op(filter).with_held(specs.map(|s| s.map(held))), inputs)
    }

    /// The same join over window operators.
    fn windowed(specs: [Option<Spec>; 2], filter: bool, inputs: [Vec<Tick>; 2]) -> Graph {
        let mut flow = Graph::new();
        let mut sides = vec![];
        for (spec, ticks) in specs.into_iter().zip(inputs) {
            let feed = flow.add(Box::new(crate::testing::Feed::new(ticks)), vec![]).unwrap();
            sides.push(match spec {
                Some((range, slide, offset)) => {
                    let bounds = TimeBounds::Slide { range, slide, offset };
                    let window = TimeWindow::new(bounds, kv_schema());
                    flow.add(Box::new(window), vec![feed]).unwrap()
                }
                None => feed,
            });
        }
        flow.add(Box::new(join_op(filter)), sides).unwrap();
        flow
    }

    #[test]
    fn a_window_enters_and_leaves_at_its_last_tick() {
        // [RANGE 4 SLIDE 4]: windows [0, 4), [4, 8), ... current at 3, 7, ...; the right side
        // is a relation (b leaves at 9).
        let stream =
            vec![kv(1, "+1 a 1, +1 b 1"), kv(2, "+2 a 2"), kv(5, "+1 b 5"), kv(13, "+1 a 13")];
        let relation = vec![kv(0, "+1 a 10, +1 b 20"), kv(9, "-1 b 20")];
        let out =
            run(&mut holding([Some((4, 4, 0)), None], false, [stream.clone(), relation.clone()]));
        assert_eq!(
            out,
            [
                "@3 +1 a 1 a 10",
                "@3 +1 b 1 b 20",
                "@3 +2 a 2 a 10",
                "@7 +1 b 5 b 20",
                "@7 -1 a 1 a 10",
                "@7 -1 b 1 b 20",
                "@7 -2 a 2 a 10",
                "@9 -1 b 5 b 20",
                "@15 +1 a 13 a 10",
                "@19 -1 a 13 a 10",
            ]
        );
        let want = run(&mut windowed([Some((4, 4, 0)), None], false, [stream, relation]));
        assert_eq!(out, want);
    }

    #[test]
    fn elements_in_a_gap_never_enter() {
        // [RANGE 2 SLIDE 5 OFFSET 1]: windows [4, 6), [9, 11), ... current at 5, 10, ...;
        // elements stamped 1-3, 6-8 fall in gaps.
        let stream = vec![kv(2, "+1 a 2"), kv(4, "+1 a 4"), kv(7, "+1 a 7"), kv(10, "+1 a 10")];
        let relation = vec![kv(0, "+1 a 0")];
        let out = run(&mut holding([Some((2, 5, 1)), None], false, [stream, relation]));
        assert_eq!(out, ["@5 +1 a 4 a 0", "@10 +1 a 10 a 0", "@10 -1 a 4 a 0", "@15 -1 a 10 a 0"]);
    }

    #[test]
    fn checkpoints_restore_both_windows() {
        use crate::testing::changes_round_trip;
        let stream = vec![
            kv(1, "+1 a 1, +1 _ 1"),
            kv(2, "+2 b 2"),
            kv(4, "+1 a 4"),
            kv(6, "+1 c 6, +1 a 6"),
            kv(9, "+1 b 9"),
        ];
        let relation = vec![kv(0, "+1 a 10, +1 b 20"), kv(5, "+1 c 30"), kv(8, "-1 a 10")];
        let more = vec![vec![kv(12, "+1 c 12")], vec![kv(12, "+1 a 11")]];
        for specs in [[Some((3, 3, 0)), None], [Some((2, 3, 1)), Some((3, 3, 0))]] {
            let make = || {
                Box::new(join_op(false).with_held(specs.map(|s| s.map(held)))) as Box<dyn Operator>
            };
            let inputs = match specs[1] {
                Some(_) => vec![stream.clone(), stream.clone()],
                None => vec![stream.clone(), relation.clone()],
            };
            for stops in [&[1, 3, 5][..], &[2, 4, 7][..], &[6][..]] {
                changes_round_trip(make, inputs.clone(), more.clone(), stops);
            }
        }
    }

    /// Restored from a checkpoint taken anywhere in a window, whole or as changes since a
    /// whole one, the join goes on as the original does, probing from the windows' keys (the
    /// other side has more) and from the other side's.
    #[test]
    fn a_restored_join_goes_on_as_the_original() {
        use crate::state::{StateReader, StateWriter};
        use crate::testing::{checkpoint_into, drive_n};
        let stream = vec![
            kv(1, "+1 a 1, +1 _ 1"),
            kv(2, "+2 b 2"),
            kv(4, "+1 a 4, +1 a 5"),
            kv(5, "+1 c 5"),
            kv(7, "+1 b 7, +1 a 7"),
            kv(9, "+1 c 9"),
        ];
        let relation = vec![
            kv(0, "+1 a 10, +1 b 20, +1 c 30, +1 d 40, +1 e 50, +1 f 60"),
            kv(6, "-1 b 20, +1 a 11"),
        ];
        for specs in [[Some((3, 3, 0)), None], [Some((2, 3, 1)), Some((4, 4, 2))]] {
            let make = || join_op(false).with_held(specs.map(|s| s.map(held)));
            let inputs = match specs[1] {
                Some(_) => [stream.clone(), stream.clone()],
                None => [stream.clone(), relation.clone()],
            };
            let feeds = |from: Time, to: Time| -> Vec<_> {
                inputs
                    .iter()
                    .map(|ticks| {
                        let part: Vec<Tick> =
                            ticks.iter().filter(|(t, _)| (from..to).contains(t)).cloned().collect();
                        part.into_iter().peekable()
                    })
                    .collect()
            };
            let all = drive_n(&mut make(), &mut feeds(0, 100), None);
            for (first, stop) in [(1, 3), (2, 5), (4, 6), (5, 8), (3, 10)] {
                let mut a = make();
                let before = drive_n(&mut a, &mut feeds(0, first), Some(first));
                let mut w = StateWriter::new();
                a.save_state(&mut w).unwrap();
                let whole = w.into_bytes().unwrap();
                a.track_changes();
                let mut middle = drive_n(&mut a, &mut feeds(first, stop), Some(stop));
                let mut w = StateWriter::new();
                assert!(a.save_changes(&mut w).unwrap());
                let changes = w.into_bytes().unwrap();
                let mut from_whole = make();
                checkpoint_into(&a, &mut from_whole);
                let mut from_changes = make();
                from_changes.restore_state(&mut StateReader::from_bytes(&whole).unwrap()).unwrap();
                from_changes
                    .restore_changes(&mut StateReader::from_bytes(&changes).unwrap())
                    .unwrap();
                let rest = drive_n(&mut a, &mut feeds(stop, 100), None);
                for mut b in [from_whole, from_changes] {
                    assert_eq!(
                        drive_n(&mut b, &mut feeds(stop, 100), None),
                        rest,
                        "{specs:?} {stop}"
                    );
                }
                let mut seen = before;
                seen.append(&mut middle);
                seen.extend(rest);
                assert_eq!(seen, all, "{specs:?} {first} {stop}");
            }
        }
    }

    /// Stream elements: (instant, count, key, value); a key or value of 3 is NULL.
    fn elements() -> impl Strategy<Value = Vec<(i64, i64, u8, i64)>> {
        prop::collection::vec((0i64..20, 1i64..3, 0u8..4, 0i64..4), 0..24)
    }

    /// A window that replaces its contents at each move: range ≤ slide, offset < slide.
    fn spec() -> impl Strategy<Value = Spec> {
        (1i64..6).prop_flat_map(|slide| (1..=slide, Just(slide), 0..slide))
    }

    /// (k, v), with `window_start` and `window_end` after them if `bounds`, each name ending
    /// in `suffix`.
    fn side_schema(suffix: &str, bounds: bool) -> SchemaRef {
        use arrow::datatypes::{Field, Schema};
        let mut fields = vec![
            Field::new(format!("k{suffix}"), DataType::Utf8, true),
            Field::new(format!("v{suffix}"), DataType::Int64, true),
        ];
        if bounds {
            fields.push(Field::new(format!("window_start{suffix}"), DataType::Int64, true));
            fields.push(Field::new(format!("window_end{suffix}"), DataType::Int64, true));
        }
        std::sync::Arc::new(Schema::new(fields))
    }

    /// The join of sides whose rows carry their windows' bounds where `bounds` says, on k (and
    /// on window_start, Flink's window join, when both do), with θ as in `join_op`.
    fn bounds_join(bounds: [bool; 2], filter: bool) -> Join {
        let on_start = bounds[0] && bounds[1];
        let side = |suffix: &str, bounds: bool| {
            let schema = side_schema(suffix, bounds);
            let df = DFSchema::try_from(schema.as_ref().clone()).unwrap();
            let mut keys = vec![col(format!("k{suffix}"))];
            if on_start {
                keys.push(col(format!("window_start{suffix}")));
            }
            JoinSide {
                keys: keys.iter().map(|k| ScalarExpr::compile(k, &df).unwrap()).collect(),
                row_codec: RowCodec::for_schema(&schema).unwrap(),
                schema,
            }
        };
        let (left, right) = (side("", bounds[0]), side("2", bounds[1]));
        let fields: Vec<_> =
            left.schema.fields().iter().chain(right.schema.fields().iter()).cloned().collect();
        let both = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
        let theta = filter.then(|| {
            let df_both = DFSchema::try_from(both.as_ref().clone()).unwrap();
            ScalarExpr::compile(&col("v").lt(col("v2") + lit(1i64)), &df_both).unwrap()
        });
        let mut types = vec![DataType::Utf8];
        if on_start {
            types.push(DataType::Int64);
        }
        let codec = RowCodec::new(types).unwrap();
        Join::new(JoinKind::Inner, false, left, right, codec, theta, both)
    }

    /// Rows reach their worker before the join appends a held window's bounds to them: they
    /// are routed by the other keys, or to one worker if every key reads the bounds.
    #[test]
    fn rows_are_routed_by_the_keys_that_do_not_read_bounds() {
        use crate::route::Placement;
        let route = |join: &Join| match join.placement(0).unwrap() {
            Placement::Keyed(k) => k.describe(),
            other => format!("{other:?}"),
        };
        let with_bounds = || Some(held((5, 5, 0)).with_bounds_columns(true));
        let join = bounds_join([true, true], false).with_held([with_bounds(), with_bounds()]);
        assert_eq!(route(&join), "k");
        assert_eq!(route(&bounds_join([true, true], false)), "k, window_start");
        // Keyed on the bounds alone.
        let mut only_bounds = bounds_join([true, true], false);
        only_bounds.left.keys.remove(0);
        only_bounds.right.keys.remove(0);
        only_bounds.key_codec = RowCodec::new(vec![DataType::Int64]).unwrap();
        let only_bounds = only_bounds.with_held([with_bounds(), with_bounds()]);
        assert!(matches!(only_bounds.placement(0).unwrap(), Placement::Single));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// A held window whose rows carry their bounds (TUMBLE's) gives what the window
        /// operator with bounds columns gives, also when both sides have them and the join is
        /// on window_start as well (Flink's window join).
        #[test]
        fn holding_windows_with_their_bounds_equals_the_window_operator(
            left in elements(),
            right_elements in elements(),
            right_relation in changes(),
            specs in (spec(), prop::option::of(spec())),
            filter: bool,
            width in 0i64..7,
        ) {
            let (spec, other) = specs;
            let right = if other.is_some() { right_elements } else { right_relation };
            let specs = [Some(spec), other];
            let bounds = [true, other.is_some()];
            let inputs = [ticks(&left), ticks(&right)];
            let mut want = Graph::new();
            let mut sides = vec![];
            for (spec, ticks) in specs.into_iter().zip(inputs.clone()) {
                let feed = want.add(Box::new(crate::testing::Feed::new(ticks)), vec![]).unwrap();
                sides.push(match spec {
                    Some((range, slide, offset)) => {
                        let bounds = TimeBounds::Slide { range, slide, offset };
                        let window = TimeWindow::with_bounds_columns(bounds, side_schema("", true));
                        want.add(Box::new(window), vec![feed]).unwrap()
                    }
                    None => feed,
                });
            }
            want.add(Box::new(bounds_join(bounds, filter)), sides).unwrap();
            let held = specs.map(|s| s.map(|s| held(s).with_bounds_columns(true)));
            let mut got = fed(bounds_join(bounds, filter).with_held(held), inputs);
            prop_assert_eq!(consolidated(run_spans(&mut got, width)), consolidated(run(&mut want)));
        }

        /// Holding the windows changes no output, whichever sides hold one, with and without
        /// θ, at any span width.
        #[test]
        fn holding_a_window_equals_the_window_operator(
            left in elements(),
            right_elements in elements(),
            right_relation in changes(),
            specs in (spec(), prop::option::of(spec())),
            swapped: bool,
            filter: bool,
            width in 0i64..7,
        ) {
            let (held_spec, other) = specs;
            let right = if other.is_some() { right_elements } else { right_relation };
            let (specs, inputs) = if swapped {
                ([other, Some(held_spec)], [ticks(&right), ticks(&left)])
            } else {
                ([Some(held_spec), other], [ticks(&left), ticks(&right)])
            };
            let want = consolidated(run(&mut windowed(specs, filter, inputs.clone())));
            let got = consolidated(run_spans(&mut holding(specs, filter, inputs), width));
            prop_assert_eq!(got, want);
        }
    }
}
