//! The plan tree. See the crate docs for the operator classes.

use std::fmt;
use std::sync::Arc;

use datafusion_common::DFSchemaRef;
use datafusion_expr::{Expr, SortExpr};
use weir_common::{Result, Time, TimeDomain};

/// Whether a plan's output is a stream (timestamped elements, append-only) or a relation
/// (a bag that changes over time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    Stream,
    Relation,
}

impl fmt::Display for PlanKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanKind::Stream => "stream",
            PlanKind::Relation => "relation",
        })
    }
}

/// A CQL window: which elements of a stream form the relation at instant τ.
/// Durations are in the stream's ticks (microseconds for TIMESTAMP streams).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSpec {
    /// All elements with timestamp ≤ τ.
    Unbounded,
    /// Elements with timestamp exactly τ.
    Now,
    /// Elements with timestamp in (τ−T, τ].
    Range(Time),
    /// Elements with timestamp in [b−T, b), b = S·⌊(τ+1−O)/S⌋ + O: window ends on the
    /// multiples of S shifted by the offset O (0 without `OFFSET`).
    RangeSlide { range: Time, slide: Time, offset: Time },
    /// The N elements with the largest (timestamp, arrival) among those ≤ τ.
    Rows(u64),
    /// `[ROWS N]` within each group of equal partition columns (indices into the input).
    PartitionRows { by: Vec<usize>, rows: u64 },
    /// Sessions per group of equal partition columns `by` (one group if empty): maximal runs
    /// of elements each less than `gap` after the one before, [first, last + gap). R(τ)
    /// holds the elements of the sessions whose last tick, last + gap − 1, is τ.
    Session { gap: Time, by: Vec<usize> },
    /// Cumulating windows: each period [k·size, (k+1)·size) is cut into slices of `step`
    /// ticks (`size` a multiple of `step`), and its windows are [k·size, k·size + j·step),
    /// j = 1..size/step, each the union of its first j slices. Elements with timestamp in
    /// [w, b), b = step·⌊(τ+1)/step⌋ and w = size·⌊(b−1)/size⌋: window [w, b) becomes
    /// current at its last tick b−1, like a `[RANGE T SLIDE S]` window. With an offset O the
    /// periods are [k·size + O, (k+1)·size + O).
    Cumulate { step: Time, size: Time, offset: Time },
    /// `[DEDUPLICATE [BY k, ...] [CAPACITY n] [ERROR p]]`: the elements ≤ τ whose key (the `by`
    /// columns, indices into the input; the whole row if empty) was not seen before them, as a
    /// rotating Bloom filter of `capacity` keys per generation judges, a new key being taken
    /// for a seen one with probability at most `error`. Only inserts: monotonic.
    Deduplicate { by: Vec<usize>, capacity: u64, error: Fraction },
    /// `[SAMPLE N ROWS [SEED s]]`: the N elements ≤ τ with the smallest priorities, a hash
    /// seeded by `seed` of (timestamp, row, occurrence): a uniform sample without replacement.
    /// With `over`, `[RANGE T SLIDE S [OFFSET O] SAMPLE N ROWS [SEED s]]`: the N of smallest
    /// priority among the elements of the `[RANGE T SLIDE S]` window current at τ.
    Sample { rows: u64, seed: u64, over: Option<SampleOver> },
}

/// The sliding (or tumbling) window a `SAMPLE` samples: `[RANGE range SLIDE slide OFFSET
/// offset]`, the offset a remainder of the slide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleOver {
    pub range: Time,
    pub slide: Time,
    pub offset: Time,
}

/// `[DEDUPLICATE ...]`'s capacity (keys per generation of its Bloom filter) when none is given.
pub const DEFAULT_DEDUP_CAPACITY: u64 = 1_000_000;
/// The capacities `[DEDUPLICATE ...]` accepts: up to 10^8 keys a generation (about 240 MB for
/// two generations at an error of 1 %).
pub const DEDUP_CAPACITIES: std::ops::RangeInclusive<u64> = 1..=100_000_000;
/// `[DEDUPLICATE ...]`'s false-positive rate when none is given.
pub const DEFAULT_DEDUP_ERROR: f64 = 0.01;

/// The most memory a Bloom filter of `[DEDUPLICATE ...]` or `BLOOM_FILTER_AGG` may ask for,
/// in bytes: filters are allocated whole when their query starts, so a larger one is refused
/// when the query is bound.
pub const MAX_FILTER_BYTES: u64 = 4_000_000_000;

/// The cells of an optimal Bloom filter (bits, or counters) holding `capacity` keys at a
/// false-positive rate `rate`: −capacity·ln(rate)/ln²2, before rounding.
pub fn bloom_cells(capacity: u64, rate: f64) -> f64 {
    -(capacity.max(1) as f64) * rate.ln() / (std::f64::consts::LN_2 * std::f64::consts::LN_2)
}

impl WindowSpec {
    fn fmt_with(&self, domain: TimeDomain, names: &[String]) -> String {
        let d = |t: Time| match domain {
            TimeDomain::Ticks => t.to_string(),
            TimeDomain::Micros => format_micros_duration(t),
        };
        match self {
            WindowSpec::Unbounded => "UNBOUNDED".into(),
            WindowSpec::Now => "NOW".into(),
            WindowSpec::Range(t) => format!("RANGE {}", d(*t)),
            WindowSpec::RangeSlide { range, slide, offset: 0 } => {
                format!("RANGE {} SLIDE {}", d(*range), d(*slide))
            }
            WindowSpec::RangeSlide { range, slide, offset } => {
                format!("RANGE {} SLIDE {} OFFSET {}", d(*range), d(*slide), d(*offset))
            }
            WindowSpec::Rows(n) => format!("ROWS {n}"),
            WindowSpec::PartitionRows { by, rows } => {
                let cols: Vec<&str> =
                    by.iter().map(|i| names.get(*i).map(|s| s.as_str()).unwrap_or("?")).collect();
                format!("PARTITION BY {} ROWS {rows}", cols.join(", "))
            }
            WindowSpec::Session { gap, by } if by.is_empty() => format!("SESSION {}", d(*gap)),
            WindowSpec::Session { gap, by } => {
                let cols: Vec<&str> =
                    by.iter().map(|i| names.get(*i).map(|s| s.as_str()).unwrap_or("?")).collect();
                format!("SESSION {} PARTITION BY {}", d(*gap), cols.join(", "))
            }
            WindowSpec::Cumulate { step, size, offset: 0 } => {
                format!("CUMULATE STEP {} SIZE {}", d(*step), d(*size))
            }
            WindowSpec::Cumulate { step, size, offset } => {
                format!("CUMULATE STEP {} SIZE {} OFFSET {}", d(*step), d(*size), d(*offset))
            }
            WindowSpec::Deduplicate { by, capacity, error } => {
                let cols: Vec<&str> =
                    by.iter().map(|i| names.get(*i).map(|s| s.as_str()).unwrap_or("?")).collect();
                let by = if cols.is_empty() {
                    String::new()
                } else {
                    format!(" BY {}", cols.join(", "))
                };
                format!("DEDUPLICATE{by} CAPACITY {capacity} ERROR {}", error.get())
            }
            WindowSpec::Sample { rows, seed, over: None } => {
                format!("SAMPLE {rows} ROWS SEED {seed}")
            }
            WindowSpec::Sample { rows, seed, over: Some(o) } => {
                let w = WindowSpec::RangeSlide { range: o.range, slide: o.slide, offset: o.offset }
                    .fmt_with(domain, names);
                format!("{w} SAMPLE {rows} ROWS SEED {seed}")
            }
        }
    }
}

fn format_micros_duration(us: Time) -> String {
    const UNITS: [(i64, &str); 5] = [
        (86_400_000_000, "DAY"),
        (3_600_000_000, "HOUR"),
        (60_000_000, "MINUTE"),
        (1_000_000, "SECOND"),
        (1_000, "MILLISECOND"),
    ];
    for (size, name) in UNITS {
        if us != 0 && us % size == 0 {
            let n = us / size;
            return format!("{n} {name}{}", if n == 1 { "" } else { "S" });
        }
    }
    format!("{us} MICROSECONDS")
}

/// A relation-to-stream operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum R2S {
    /// What entered: R(τ) − R(τ−1).
    Istream,
    /// What left: R(τ−1) − R(τ).
    Dstream,
    /// The whole relation at every instant.
    Rstream,
}

impl fmt::Display for R2S {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            R2S::Istream => "ISTREAM",
            R2S::Dstream => "DSTREAM",
            R2S::Rstream => "RSTREAM",
        })
    }
}

/// Join flavours the executor runs incrementally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    /// Inner pairs plus each unmatched left row padded with NULLs.
    Left,
    /// Inner pairs plus each unmatched right row padded with NULLs.
    Right,
    /// Left and right padding both.
    Full,
    /// Left rows with at least one match (`EXISTS`, `IN`, `INTERSECT`).
    LeftSemi,
    /// Left rows with no match (`NOT EXISTS`, `EXCEPT`); `null_aware` adds `NOT IN`'s NULL
    /// rules.
    LeftAnti {
        null_aware: bool,
    },
    /// Every left row, with a boolean `mark`: whether it has a match (`EXISTS` or `IN` inside
    /// a larger expression).
    LeftMark,
    /// `INTERSECT ALL`, a bag intersection: keyed on every column (NULLs equal), a row the left
    /// side has m times and the right side n times is output min(m, n) times.
    IntersectAll,
    /// `EXCEPT ALL`, a bag difference: such a row is output max(m − n, 0) times.
    ExceptAll,
    /// A temporal join (`JOIN t FOR SYSTEM_TIME AS OF s.ts`): each element of the left input,
    /// an append-only stream read whole, joined once, at its instant, with the right relation
    /// (the versioned side) as it is at that instant; later changes of the right side change
    /// no output. `outer`: an element without a match is output once, padded with NULLs.
    Temporal {
        outer: bool,
    },
    /// `MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(c [, capacity [, error]]) FROM ...), x)`: an
    /// approximate lookup of each element of the left input, an append-only relation, in a
    /// counting Bloom filter of the right relation's key (its single `on` pair) as the right
    /// side is at the element's instant. The filter holds `capacity` distinct keys at a
    /// false-positive rate of `error`: a key present is always found, an absent one found with
    /// probability at most `error`. Later changes of the right side change no output. A NULL
    /// key is never found, and its row is in neither a semi nor an anti result (SQL's unknown);
    /// its mark is NULL.
    MightContain {
        test: Membership,
        capacity: u64,
        error: Fraction,
    },
}

/// What a [`JoinKind::MightContain`] join outputs of each left row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// The row if its key was found (`WHERE MIGHT_CONTAIN(...)`).
    Semi,
    /// The row if its key was not found (`WHERE NOT MIGHT_CONTAIN(...)`).
    Anti,
    /// The row with a boolean column: whether its key was found (inside a larger condition).
    Mark,
}

/// `BLOOM_FILTER_AGG`'s capacity (distinct keys) when none is given.
pub const DEFAULT_BLOOM_CAPACITY: u64 = 1_000_000;
/// The capacities `BLOOM_FILTER_AGG` accepts: up to 10^8 distinct keys (about 960 MB of
/// counters at an error of 1 %).
pub const BLOOM_CAPACITIES: std::ops::RangeInclusive<u64> = 1..=100_000_000;
/// `BLOOM_FILTER_AGG`'s false-positive rate when none is given.
pub const DEFAULT_BLOOM_ERROR: f64 = 0.01;

impl fmt::Display for JoinKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JoinKind::Inner => "inner",
            JoinKind::Left => "left",
            JoinKind::Right => "right",
            JoinKind::Full => "full",
            JoinKind::LeftSemi => "left semi",
            JoinKind::LeftAnti { null_aware: false } => "left anti",
            JoinKind::LeftAnti { null_aware: true } => "left anti (null-aware)",
            JoinKind::LeftMark => "left mark",
            JoinKind::IntersectAll => "intersect all",
            JoinKind::ExceptAll => "except all",
            JoinKind::Temporal { outer: false } => "temporal",
            JoinKind::Temporal { outer: true } => "temporal left",
            JoinKind::MightContain { test, capacity, error } => {
                let test = match test {
                    Membership::Semi => "semi",
                    Membership::Anti => "anti",
                    Membership::Mark => "mark",
                };
                return write!(
                    f,
                    "might contain ({test}, capacity {capacity}, error {})",
                    error.get()
                );
            }
        })
    }
}

/// Aggregate functions with retractable incremental state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    /// `COUNT(*)`: rows in the group.
    CountStar,
    /// `COUNT(x)`: non-null values.
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// `BOOL_AND(x)`: true if no value is false (NULL over no values); kept as counts of true
    /// and false values, so a retracted false can turn it back to true.
    BoolAnd,
    /// `BOOL_OR(x)`: true if some value is true (NULL over no values); counts, as `BoolAnd`.
    BoolOr,
    /// `STRING_AGG(x, sep [ORDER BY ...])`: the non-NULL values joined by `sep`, in the
    /// aggregate's order (ties, and no ORDER BY, by value); NULL over no values.
    StringAgg,
    /// `ARRAY_AGG(x [ORDER BY ...])`: every value, NULLs included, as a list in that order.
    ArrayAgg,
    /// `FIRST_VALUE(x [ORDER BY ...])`: the value (NULL included) of the first row in that
    /// order.
    FirstValue,
    /// `LAST_VALUE(x [ORDER BY ...])`: the value of the last row in that order.
    LastValue,
    /// `APPROX_COUNT_DISTINCT(x [, precision])`: a HyperLogLog estimate of the number of
    /// distinct non-NULL values, with 2^precision registers (standard error
    /// 1.04/√2^precision). A sketch: mergeable, not invertible, so its input must be
    /// append-only or a time window over a stream (see [`sketch_input`]).
    ApproxCountDistinct {
        precision: u8,
    },
    /// `APPROX_PERCENTILE(x, p [, compression])` (`APPROX_QUANTILE`), and `APPROX_MEDIAN(x)`
    /// (`median`: p = 0.5, so spelled in EXPLAIN and errors): a t-digest estimate of the
    /// p-quantile of the non-NULL finite values, as `PERCENTILE_CONT(p)` defines it, with at
    /// most about `compression` centroids. A sketch, as `ApproxCountDistinct`.
    ApproxPercentile {
        p: Fraction,
        compression: u32,
        median: bool,
    },
    /// `APPROX_TOP_K(x, k [, capacity])`: the k most frequent non-NULL values with their
    /// estimated counts, as a list of `{value, count}` structs, most frequent first (ties by
    /// value). A mergeable Misra-Gries summary of at most `capacity` counters: each count is
    /// at most n/(capacity+1) below the true one (n: the values counted), never above. A
    /// sketch, as `ApproxCountDistinct`.
    ApproxTopK {
        k: u32,
        capacity: u32,
    },
}

/// A number in [0, 1], kept as its bits so that [`AggFunc`] stays `Eq` (two fractions are
/// equal when their values are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fraction(u64);

impl Fraction {
    /// `p` if it lies in [0, 1] (NaN does not).
    pub fn new(p: f64) -> Option<Self> {
        (0.0..=1.0).contains(&p).then(|| Fraction((p + 0.0).to_bits()))
    }

    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// `APPROX_PERCENTILE`'s compression when none is given (t-digest's δ, DataFusion's default):
/// at most about 100 centroids, 1.6 KiB per sketch.
pub const DEFAULT_TDIGEST_COMPRESSION: u32 = 100;
/// The compressions `APPROX_PERCENTILE` accepts.
pub const TDIGEST_COMPRESSIONS: std::ops::RangeInclusive<u32> = 10..=10_000;

/// `APPROX_COUNT_DISTINCT`'s precision when none is given: 2^14 registers, 0.81 % standard
/// error, 16 KiB per sketch once it holds more than a few thousand values.
pub const DEFAULT_HLL_PRECISION: u8 = 14;
/// The precisions `APPROX_COUNT_DISTINCT` accepts.
pub const HLL_PRECISIONS: std::ops::RangeInclusive<u8> = 4..=18;

/// The k `APPROX_TOP_K` accepts.
pub const TOP_K_KS: std::ops::RangeInclusive<u32> = 1..=1_000;
/// `APPROX_TOP_K`'s capacity (counters kept per sketch) when none is given: a count is then at
/// most 0.1 % of the values below the true one.
pub const DEFAULT_TOP_K_CAPACITY: u32 = 1_000;
/// The capacities `APPROX_TOP_K` accepts (at least k).
pub const TOP_K_CAPACITIES: std::ops::RangeInclusive<u32> = 1..=1_000_000;

impl AggFunc {
    /// Whether the aggregate keeps its values in order (a multiset ordered by the aggregate's
    /// ORDER BY, then by value).
    pub fn is_ordered(self) -> bool {
        matches!(
            self,
            AggFunc::StringAgg | AggFunc::ArrayAgg | AggFunc::FirstValue | AggFunc::LastValue
        )
    }

    /// Whether the aggregate is a sketch: mergeable partial states, no retraction.
    pub fn is_sketch(self) -> bool {
        matches!(
            self,
            AggFunc::ApproxCountDistinct { .. }
                | AggFunc::ApproxPercentile { .. }
                | AggFunc::ApproxTopK { .. }
        )
    }

    /// Whether NULL arguments are skipped (all but `ARRAY_AGG`, `FIRST_VALUE`, `LAST_VALUE`).
    pub fn skips_nulls(self) -> bool {
        !matches!(self, AggFunc::ArrayAgg | AggFunc::FirstValue | AggFunc::LastValue)
    }
}

impl fmt::Display for AggFunc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AggFunc::CountStar | AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Avg => "avg",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::BoolAnd => "bool_and",
            AggFunc::BoolOr => "bool_or",
            AggFunc::StringAgg => "string_agg",
            AggFunc::ArrayAgg => "array_agg",
            AggFunc::FirstValue => "first_value",
            AggFunc::LastValue => "last_value",
            AggFunc::ApproxCountDistinct { .. } => "approx_count_distinct",
            AggFunc::ApproxPercentile { median: true, .. } => "approx_median",
            AggFunc::ApproxPercentile { median: false, .. } => "approx_percentile",
            AggFunc::ApproxTopK { .. } => "approx_top_k",
        })
    }
}

/// One aggregate in an [`LogicalPlan::Aggregate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggCall {
    pub func: AggFunc,
    /// The argument, over the aggregate's input schema; `None` for `COUNT(*)`.
    pub arg: Option<Expr>,
    pub distinct: bool,
    /// `FILTER (WHERE ...)`, over the aggregate's input schema: only rows for which it is
    /// true reach the aggregate (the group's existence still counts every row).
    pub filter: Option<Expr>,
    /// `ORDER BY` inside the aggregate (ordered aggregates only, see [`AggFunc::is_ordered`]).
    pub order_by: Vec<SortExpr>,
    /// `STRING_AGG`'s separator (`None`: a NULL separator, values joined with nothing).
    pub separator: Option<String>,
}

impl AggCall {
    /// A plain aggregate: no FILTER, no ORDER BY, no separator.
    pub fn new(func: AggFunc, arg: Option<Expr>, distinct: bool) -> Self {
        AggCall { func, arg, distinct, filter: None, order_by: vec![], separator: None }
    }

    /// Every expression the aggregate reads: its argument, filter and order terms.
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.arg.iter().chain(self.filter.iter()).chain(self.order_by.iter().map(|o| &o.expr))
    }

    /// The same aggregate with `f` applied to each of its expressions.
    pub fn map_exprs(&self, f: &dyn Fn(&Expr) -> Expr) -> Self {
        AggCall {
            func: self.func,
            arg: self.arg.as_ref().map(f),
            distinct: self.distinct,
            filter: self.filter.as_ref().map(f),
            order_by: self
                .order_by
                .iter()
                .map(|o| SortExpr { expr: f(&o.expr), asc: o.asc, nulls_first: o.nulls_first })
                .collect(),
            separator: self.separator.clone(),
        }
    }
}

impl fmt::Display for AggCall {
    /// `func([DISTINCT ]arg[, 'sep'][ ORDER BY ...])[ FILTER (WHERE ...)]`, as EXPLAIN shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.arg {
            None => f.write_str("count(*)")?,
            Some(e) => {
                write!(f, "{}({}{e}", self.func, if self.distinct { "DISTINCT " } else { "" })?;
                if let AggFunc::ApproxCountDistinct { precision } = self.func {
                    if precision != DEFAULT_HLL_PRECISION {
                        write!(f, ", {precision}")?;
                    }
                }
                if let AggFunc::ApproxPercentile { p, compression, median } = self.func {
                    if !median {
                        write!(f, ", {}", p.get())?;
                    }
                    if compression != DEFAULT_TDIGEST_COMPRESSION {
                        write!(f, ", {compression}")?;
                    }
                }
                if let AggFunc::ApproxTopK { k, capacity } = self.func {
                    write!(f, ", {k}")?;
                    if capacity != DEFAULT_TOP_K_CAPACITY {
                        write!(f, ", {capacity}")?;
                    }
                }
                if self.func == AggFunc::StringAgg {
                    match &self.separator {
                        Some(s) => write!(f, ", '{}'", s.replace('\'', "''"))?,
                        None => f.write_str(", NULL")?,
                    }
                }
                if !self.order_by.is_empty() {
                    let terms: Vec<String> = self.order_by.iter().map(|o| o.to_string()).collect();
                    write!(f, " ORDER BY {}", terms.join(", "))?;
                }
                f.write_str(")")?;
            }
        }
        if let Some(p) = &self.filter {
            write!(f, " FILTER (WHERE {p})")?;
        }
        Ok(())
    }
}

/// A ranking window function (`f() OVER (PARTITION BY ... ORDER BY ...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankFunc {
    /// `ROW_NUMBER()`: 1, 2, 3, ... in the partition's order, ties broken by the row's value.
    RowNumber,
    /// `RANK()`: 1 + the number of rows whose ORDER BY key sorts strictly before this row's.
    Rank,
    /// `DENSE_RANK()`: 1 + the number of distinct ORDER BY keys that sort before this row's.
    DenseRank,
}

impl fmt::Display for RankFunc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RankFunc::RowNumber => "row_number",
            RankFunc::Rank => "rank",
            RankFunc::DenseRank => "dense_rank",
        })
    }
}

/// How a [`LogicalPlan::Ranking`] is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankMode {
    /// Every row of the input with its values.
    Full,
    /// Top-N: only the rows whose value of function `func` lies in `lo ..= hi` (the enclosing
    /// filter on the rank, folded in); rows below the top are kept in state, not output.
    Top { func: usize, lo: i64, hi: i64 },
    /// Deduplication on an append-only stream ordered by its event time ascending, rank 1:
    /// the first row of each partition; state is the partition key only.
    KeepFirst,
    /// The same ordered by event time descending: the last row of each partition; state is
    /// one row per partition.
    KeepLast,
}

/// The frame of a [`LogicalPlan::OverAggregate`]: the rows before the current one (which ends
/// it) that each row's aggregates see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverFrame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`; `None`: `UNBOUNDED PRECEDING`.
    Rows(Option<u64>),
    /// `RANGE BETWEEN d PRECEDING AND CURRENT ROW` (d in ticks, or microseconds for TIMESTAMP
    /// streams): rows stamped in [t − d, t], peers (equal t) included; `None`: `UNBOUNDED`.
    Range(Option<Time>),
}

impl fmt::Display for OverFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverFrame::Rows(Some(n)) => write!(f, "ROWS {n} PRECEDING"),
            OverFrame::Rows(None) => f.write_str("ROWS UNBOUNDED PRECEDING"),
            OverFrame::Range(Some(d)) => write!(f, "RANGE {d} PRECEDING"),
            OverFrame::Range(None) => f.write_str("RANGE UNBOUNDED PRECEDING"),
        }
    }
}

/// A window function of a [`LogicalPlan::OverRelation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverFunc {
    /// An aggregate over the row's frame.
    Agg(AggFunc),
    /// `LAG(x, n, default)`: x of the row n rows before (default when there is none).
    Lag(u64),
    /// `LEAD(x, n, default)`: x of the row n rows after.
    Lead(u64),
    /// `FIRST_VALUE(x)`: x of the first row of the frame (NULL for an empty frame).
    FirstValue,
    /// `LAST_VALUE(x)`: x of the last row of the frame.
    LastValue,
}

impl fmt::Display for OverFunc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverFunc::Agg(a) => write!(f, "{a}"),
            OverFunc::Lag(n) => write!(f, "lag[{n}]"),
            OverFunc::Lead(n) => write!(f, "lead[{n}]"),
            OverFunc::FirstValue => f.write_str("first_value"),
            OverFunc::LastValue => f.write_str("last_value"),
        }
    }
}

/// One end of a [`WindowFrame`]. Offsets count rows (ROWS) or units of the ORDER BY value
/// (RANGE: its integer value, microseconds for a TIMESTAMP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameBound {
    UnboundedPreceding,
    Preceding(i64),
    CurrentRow,
    Following(i64),
    UnboundedFollowing,
}

impl fmt::Display for FrameBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameBound::UnboundedPreceding => f.write_str("UNBOUNDED PRECEDING"),
            FrameBound::Preceding(n) => write!(f, "{n} PRECEDING"),
            FrameBound::CurrentRow => f.write_str("CURRENT ROW"),
            FrameBound::Following(n) => write!(f, "{n} FOLLOWING"),
            FrameBound::UnboundedFollowing => f.write_str("UNBOUNDED FOLLOWING"),
        }
    }
}

/// The frame of a window function over a relation: `ROWS|RANGE BETWEEN start AND end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowFrame {
    /// RANGE (true): bounds are ORDER BY values, CURRENT ROW means the row's peers; ROWS: rows.
    pub range: bool,
    pub start: FrameBound,
    pub end: FrameBound,
}

impl fmt::Display for WindowFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = if self.range { "RANGE" } else { "ROWS" };
        write!(f, "{units} BETWEEN {} AND {}", self.start, self.end)
    }
}

/// One window function of a [`LogicalPlan::OverRelation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverCall {
    pub func: OverFunc,
    /// The argument, over the input's schema; `None` for `COUNT(*)`.
    pub arg: Option<Expr>,
    /// LAG/LEAD's default, evaluated on the current row; `None`: NULL.
    pub default: Option<Expr>,
    /// The frame (ignored by LAG and LEAD).
    pub frame: WindowFrame,
}

/// What an [`LogicalPlan::Apply`] computes from a subquery for each input row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyKind {
    /// The subquery's single value (NULL if it returns no row).
    Scalar,
    /// `[NOT] EXISTS (subquery)`.
    Exists { negated: bool },
    /// `probe [NOT] IN (subquery)`, with SQL's NULL rules; `probe` is over the Apply's input.
    In { probe: Expr, negated: bool },
}

/// One subquery of an [`LogicalPlan::Apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplySubquery {
    pub plan: Arc<LogicalPlan>,
    pub kind: ApplyKind,
}

/// A window an inner join holds itself (see [`crate::held`]): `spec` over the side's input
/// stream; with `bounds_columns`, its rows carry `window_start` and `window_end` (TUMBLE's),
/// the last two columns of `schema`, the side's rows as the join sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldWindow {
    pub spec: WindowSpec,
    pub bounds_columns: bool,
    pub schema: DFSchemaRef,
}

/// A node of the plan tree. See the crate docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalPlan {
    /// The elements of a base stream, stamped by its event-time column.
    StreamScan { name: String, schema: DFSchemaRef, time_column: usize, domain: TimeDomain },
    /// The changes of a table (a relation changed by INSERT/DELETE at instants).
    TableScan { name: String, schema: DFSchemaRef },
    /// Stream-to-relation. `schema` is the input's columns under the name the query uses, plus,
    /// with `bounds_columns` (the TUMBLE/HOP table functions), `window_start` and `window_end`:
    /// the bounds [b−T, b) of the window current at each instant.
    Window { spec: WindowSpec, input: Arc<LogicalPlan>, schema: DFSchemaRef, bounds_columns: bool },
    /// `TUMBLE`/`HOP` over a relation: each input row once for every window [b − `size`, b),
    /// b a multiple of `slide`, that holds the time in its column `column`, with that
    /// window's `window_start` and `window_end` appended (`size` = `slide` for TUMBLE). A row
    /// whose time is NULL is in no window. Each row maps on its own, so the node is linear: an
    /// inserted row adds its window rows, a deleted one retracts them. Times and sizes are in
    /// `domain`'s units (microseconds for a TIMESTAMP column).
    TimeWindows {
        column: usize,
        size: i64,
        slide: i64,
        domain: TimeDomain,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
    },
    /// The input relation with `window_start` and `window_end` appended: the bounds of the
    /// window `spec` (`[RANGE range SLIDE slide]`, [b − range, b) with b = slide ·
    /// ⌊(τ+1)/slide⌋, or a cumulating window) current at each instant, as the last two
    /// columns of `schema`. Where the window moves, every row is retracted with the old bounds
    /// and inserted with the new. The planner puts it above an aggregate per TUMBLE/HOP/CUMULATE
    /// window computed over the plain window (see [`crate::window_bounds`]), whose input
    /// changes only where the window moves.
    ///
    /// `istream_sees` says which bounds (`[window_start, window_end]`) an `ISTREAM` above
    /// receives unchanged, through filters, renames and projections only (set by
    /// [`crate::window_bounds::lift_window_bounds`]). At a move where one of those changes,
    /// no row with the old bounds can cancel a row with the new ones, so the ISTREAM would drop
    /// the retractions: they are not produced.
    WindowBounds {
        spec: WindowSpec,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
        istream_sees: [bool; 2],
    },
    /// Each `[RANGE range SLIDE slide]` or cumulating window's groups once, when it closes,
    /// with its bounds:
    /// what `ISTREAM` gives over `WindowBounds` of an aggregate over that window of pane rows,
    /// when it sees `window_end` (see [`crate::window_aggregate`]). The input is the pane rows
    /// (a stream); `merge` the aggregate that merges them per group (none: the pane rows are
    /// the groups); the output its columns (or the pane rows'), then `window_start` and
    /// `window_end`, as `schema`. A stream: each window's rows stamped at its last tick.
    WindowAggregate {
        spec: WindowSpec,
        merge: Option<(Vec<Expr>, Vec<AggCall>)>,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
    },
    /// Rows of the input for which `predicate` is true (NULL counts as false).
    Filter { predicate: Expr, input: Arc<LogicalPlan> },
    /// One output column per expression.
    Project { exprs: Vec<Expr>, input: Arc<LogicalPlan>, schema: DFSchemaRef },
    /// A join on `on` equalities plus an optional residual `filter` over the joined row.
    Join {
        kind: JoinKind,
        left: Arc<LogicalPlan>,
        right: Arc<LogicalPlan>,
        on: Vec<(Expr, Expr)>,
        filter: Option<Expr>,
        /// Whether NULL keys match each other (set operations: EXCEPT, INTERSECT).
        nulls_equal: bool,
        schema: DFSchemaRef,
        /// Per side (left, right), a tumbling window the join holds itself (see
        /// [`crate::held`]): the side's input is then a stream, and the side the relation
        /// that window makes of it. Only in inner joins.
        held: [Option<HeldWindow>; 2],
    },
    /// Group by `group` (empty: one scalar row) computing `aggs`; output = keys then aggregates.
    Aggregate { group: Vec<Expr>, aggs: Vec<AggCall>, input: Arc<LogicalPlan>, schema: DFSchemaRef },
    /// A stream's elements aggregated pane by pane, under a time window's aggregate (see
    /// [`crate::panes`]): panes are the spans [offset + j·pane, offset + (j+1)·pane) of
    /// timestamps, and for each pane and each group (equal `group` values, NULLs equal) with
    /// an element in it, one output element: the keys, then `aggs` over the group's elements
    /// in the pane, stamped with the pane's last tick, offset + (j+1)·pane − 1. A stream, and
    /// nothing of a pane is output before that tick. `window` is the window above, whose
    /// instants are the plan's: a pane's last tick is one only where that window moves.
    /// `merged`: an aggregate above merges the partial rows per group (as it merges panes),
    /// so they need not be complete per group: on several workers each worker pre-aggregates
    /// the elements it has, and only the partial rows move to the group's worker (two-phase
    /// aggregation). Otherwise (a window of one pane) the rows are the groups themselves.
    PaneAggregate {
        pane: Time,
        offset: Time,
        merged: bool,
        window: WindowSpec,
        group: Vec<Expr>,
        aggs: Vec<AggCall>,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
    },
    /// Set semantics: each distinct row once.
    Distinct { input: Arc<LogicalPlan> },
    /// Bag union of inputs with one schema.
    UnionAll { inputs: Vec<Arc<LogicalPlan>>, schema: DFSchemaRef },
    /// A constant relation (e.g. `SELECT 1` or `VALUES`), present from the first instant on.
    Values { rows: Vec<Vec<Expr>>, schema: DFSchemaRef },
    /// Relation-to-stream.
    ToStream { op: R2S, input: Arc<LogicalPlan> },
    /// Renames the input's columns (a view or subquery alias); data is unchanged.
    Rename { input: Arc<LogicalPlan>, schema: DFSchemaRef },
    /// Scalar subqueries that could not be decorrelated into joins, evaluated for each input row
    /// with its outer references bound (one-shot queries only). Output: the input's columns,
    /// then one column per subquery (`__sq_0`, ...).
    Apply { input: Arc<LogicalPlan>, subqueries: Vec<ApplySubquery>, schema: DFSchemaRef },
    /// `ORDER BY` with an optional `OFFSET`/`LIMIT`: with a limit, the relation of the rows
    /// ranked `skip+1 ..= skip+fetch` (ties broken by value), and with `with_ties` (`FETCH
    /// FIRST n ROWS WITH TIES`) also every further row equal to the last of them on the
    /// `order` key; without a limit, the input relation, whose changes and one-shot results
    /// come out in this order.
    TopK {
        order: Vec<SortExpr>,
        skip: usize,
        fetch: Option<usize>,
        with_ties: bool,
        input: Arc<LogicalPlan>,
    },
    /// Ranking window functions over a relation: the input's columns, then one Int64 column
    /// per function, computed per partition (equal `partition_by` values, NULLs equal) in
    /// `order_by` order, ties in the order broken by the input row's value (ascending, NULL
    /// first), so ROW_NUMBER is deterministic. `mode` says which rows are output.
    /// Aggregates over a window of each row of an append-only stream ordered by its event
    /// time (Flink's OVER aggregation): the input's columns, then one column per aggregate,
    /// computed over the row's frame in its partition. Each row's values are final when it
    /// arrives (later rows are later in the order), so the result only grows.
    OverAggregate {
        partition_by: Vec<Expr>,
        /// One term: the event-time column, ascending (a Vec keeps the node small).
        order_by: Vec<SortExpr>,
        frame: OverFrame,
        /// Aggregates, FIRST_VALUE, LAST_VALUE over `frame`, and LAG (their own `frame`
        /// fields are not used).
        aggs: Vec<OverCall>,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
    },
    /// Window functions over a relation (navigation and aggregates with frames): the input's
    /// columns, then one column per call, computed per partition in `order_by` order (ties
    /// broken by the row's value, as for [`LogicalPlan::Ranking`]) over each row's frame.
    OverRelation {
        partition_by: Vec<Expr>,
        order_by: Vec<SortExpr>,
        calls: Vec<OverCall>,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
    },
    Ranking {
        partition_by: Vec<Expr>,
        order_by: Vec<SortExpr>,
        funcs: Vec<RankFunc>,
        mode: RankMode,
        input: Arc<LogicalPlan>,
        schema: DFSchemaRef,
    },
}

impl LogicalPlan {
    /// The output schema.
    pub fn schema(&self) -> DFSchemaRef {
        match self {
            LogicalPlan::StreamScan { schema, .. }
            | LogicalPlan::TableScan { schema, .. }
            | LogicalPlan::Window { schema, .. }
            | LogicalPlan::TimeWindows { schema, .. }
            | LogicalPlan::WindowBounds { schema, .. }
            | LogicalPlan::WindowAggregate { schema, .. }
            | LogicalPlan::Project { schema, .. }
            | LogicalPlan::Join { schema, .. }
            | LogicalPlan::Aggregate { schema, .. }
            | LogicalPlan::PaneAggregate { schema, .. }
            | LogicalPlan::UnionAll { schema, .. }
            | LogicalPlan::Values { schema, .. }
            | LogicalPlan::Apply { schema, .. }
            | LogicalPlan::Ranking { schema, .. }
            | LogicalPlan::OverAggregate { schema, .. }
            | LogicalPlan::OverRelation { schema, .. }
            | LogicalPlan::Rename { schema, .. } => schema.clone(),
            LogicalPlan::Filter { input, .. }
            | LogicalPlan::Distinct { input }
            | LogicalPlan::TopK { input, .. }
            | LogicalPlan::ToStream { input, .. } => input.schema(),
        }
    }

    /// Stream or relation.
    pub fn kind(&self) -> PlanKind {
        match self {
            LogicalPlan::StreamScan { .. }
            | LogicalPlan::ToStream { .. }
            | LogicalPlan::PaneAggregate { .. }
            | LogicalPlan::WindowAggregate { .. } => PlanKind::Stream,
            LogicalPlan::Rename { input, .. } => input.kind(),
            // The rows of window aggregates filtered and projected (what was an ISTREAM's
            // input: see [`crate::window_aggregate`]).
            LogicalPlan::Project { input, .. } | LogicalPlan::Filter { input, .. }
                if input.over_window_aggregate() =>
            {
                PlanKind::Stream
            }
            // A base stream narrowed to some of its columns (column pruning under a session
            // window) is still that stream, element for element.
            LogicalPlan::Project { input, .. }
                if matches!(input.as_ref(), LogicalPlan::StreamScan { .. }) =>
            {
                PlanKind::Stream
            }
            _ => PlanKind::Relation,
        }
    }

    /// Whether this node is a [`LogicalPlan::WindowAggregate`], or filters, projections and
    /// renames of one.
    pub fn over_window_aggregate(&self) -> bool {
        match self {
            LogicalPlan::WindowAggregate { .. } => true,
            LogicalPlan::Project { input, .. }
            | LogicalPlan::Filter { input, .. }
            | LogicalPlan::Rename { input, .. } => input.over_window_aggregate(),
            _ => false,
        }
    }

    /// The inputs of this node, left to right.
    pub fn inputs(&self) -> Vec<&Arc<LogicalPlan>> {
        match self {
            LogicalPlan::StreamScan { .. }
            | LogicalPlan::TableScan { .. }
            | LogicalPlan::Values { .. } => vec![],
            LogicalPlan::Window { input, .. }
            | LogicalPlan::TimeWindows { input, .. }
            | LogicalPlan::WindowBounds { input, .. }
            | LogicalPlan::WindowAggregate { input, .. }
            | LogicalPlan::Filter { input, .. }
            | LogicalPlan::Project { input, .. }
            | LogicalPlan::Aggregate { input, .. }
            | LogicalPlan::PaneAggregate { input, .. }
            | LogicalPlan::Distinct { input }
            | LogicalPlan::ToStream { input, .. }
            | LogicalPlan::TopK { input, .. }
            | LogicalPlan::Apply { input, .. }
            | LogicalPlan::Ranking { input, .. }
            | LogicalPlan::OverAggregate { input, .. }
            | LogicalPlan::OverRelation { input, .. }
            | LogicalPlan::Rename { input, .. } => vec![input],
            LogicalPlan::Join { left, right, .. } => vec![left, right],
            LogicalPlan::UnionAll { inputs, .. } => inputs.iter().collect(),
        }
    }

    /// Whether the relation can only grow (CQL's monotonic queries): built from unbounded
    /// windows, filters, projections, joins and unions of monotonic inputs. Such a query with no
    /// relation-to-stream operator gets an implicit `ISTREAM`.
    pub fn is_monotonic(&self) -> bool {
        match self {
            LogicalPlan::Window { spec, input, bounds_columns, .. } => {
                matches!(spec, WindowSpec::Unbounded | WindowSpec::Deduplicate { .. })
                    && !bounds_columns
                    && input.is_stream_source()
            }
            LogicalPlan::Filter { input, .. }
            | LogicalPlan::Project { input, .. }
            | LogicalPlan::Rename { input, .. } => input.is_monotonic(),
            // Each element is output once, at its instant, and never retracted.
            LogicalPlan::Join {
                kind: JoinKind::Temporal { .. } | JoinKind::MightContain { .. },
                left,
                ..
            } => left.is_monotonic(),
            LogicalPlan::Join { kind, left, right, held, .. } => {
                // Outer padding and anti-join rows retract when a match arrives; a held
                // window's rows when it moves.
                matches!(kind, JoinKind::Inner | JoinKind::LeftSemi)
                    && held.iter().all(Option::is_none)
                    && left.is_monotonic()
                    && right.is_monotonic()
            }
            LogicalPlan::UnionAll { inputs, .. } => inputs.iter().all(|i| i.is_monotonic()),
            // The first row of each key never leaves, and rows only enter.
            LogicalPlan::Ranking { mode: RankMode::KeepFirst, input, .. } => input.is_monotonic(),
            LogicalPlan::OverAggregate { input, .. } => input.is_monotonic(),
            // Each window's rows once, never retracted.
            LogicalPlan::WindowAggregate { .. } => true,
            _ => false,
        }
    }

    /// Whether this is a stream, seen through projections and renames: what a window's input
    /// is once `prune` narrowed it to the columns read above (a projection of a stream's
    /// elements is still a stream's, though its node is a relational one).
    pub fn is_stream_source(&self) -> bool {
        match self {
            LogicalPlan::Project { input, .. } | LogicalPlan::Rename { input, .. } => {
                input.is_stream_source()
            }
            other => other.kind() == PlanKind::Stream,
        }
    }

    /// Whether the result has a defined order: an ORDER BY at the top, seen through
    /// projections, filters and renames (which keep the order of their input).
    pub fn is_ordered(&self) -> bool {
        match self {
            LogicalPlan::TopK { order, .. } => !order.is_empty(),
            LogicalPlan::Project { input, .. }
            | LogicalPlan::Filter { input, .. }
            | LogicalPlan::Rename { input, .. } => input.is_ordered(),
            _ => false,
        }
    }

    /// Names of the base streams and tables this plan reads, in first-seen order.
    pub fn sources(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_sources(&mut out);
        out
    }

    fn collect_sources(&self, out: &mut Vec<String>) {
        match self {
            LogicalPlan::StreamScan { name, .. } | LogicalPlan::TableScan { name, .. } => {
                if !out.contains(name) {
                    out.push(name.clone());
                }
            }
            LogicalPlan::Apply { input, subqueries, .. } => {
                input.collect_sources(out);
                subqueries.iter().for_each(|q| q.plan.collect_sources(out));
            }
            other => other.inputs().into_iter().for_each(|i| i.collect_sources(out)),
        }
    }

    /// Whether the plan evaluates subqueries row by row ([`LogicalPlan::Apply`]), which only a
    /// one-shot query can do.
    pub fn contains_apply(&self) -> bool {
        matches!(self, LogicalPlan::Apply { .. })
            || self.inputs().iter().any(|i| i.contains_apply())
    }

    /// The same plan with `f` applied to every scalar expression (used to bind a correlated
    /// subquery's outer references to one row's values).
    pub fn map_exprs(&self, f: &dyn Fn(&Expr) -> Expr) -> LogicalPlan {
        let m = |p: &Arc<LogicalPlan>| Arc::new(p.map_exprs(f));
        match self {
            LogicalPlan::StreamScan { .. } | LogicalPlan::TableScan { .. } => self.clone(),
            LogicalPlan::Window { spec, input, schema, bounds_columns } => LogicalPlan::Window {
                spec: spec.clone(),
                input: m(input),
                schema: schema.clone(),
                bounds_columns: *bounds_columns,
            },
            LogicalPlan::TimeWindows { column, size, slide, domain, input, schema } => {
                LogicalPlan::TimeWindows {
                    column: *column,
                    size: *size,
                    slide: *slide,
                    domain: *domain,
                    input: m(input),
                    schema: schema.clone(),
                }
            }
            LogicalPlan::WindowBounds { spec, input, schema, istream_sees } => {
                LogicalPlan::WindowBounds {
                    spec: spec.clone(),
                    input: m(input),
                    schema: schema.clone(),
                    istream_sees: *istream_sees,
                }
            }
            LogicalPlan::WindowAggregate { spec, merge, input, schema } => {
                LogicalPlan::WindowAggregate {
                    spec: spec.clone(),
                    merge: merge.as_ref().map(|(group, aggs)| {
                        (
                            group.iter().map(f).collect(),
                            aggs.iter().map(|a| a.map_exprs(f)).collect(),
                        )
                    }),
                    input: m(input),
                    schema: schema.clone(),
                }
            }
            LogicalPlan::Filter { predicate, input } => {
                LogicalPlan::Filter { predicate: f(predicate), input: m(input) }
            }
            LogicalPlan::Project { exprs, input, schema } => LogicalPlan::Project {
                exprs: exprs.iter().map(f).collect(),
                input: m(input),
                schema: schema.clone(),
            },
            LogicalPlan::Join { kind, left, right, on, filter, nulls_equal, schema, held } => {
                LogicalPlan::Join {
                    kind: *kind,
                    left: m(left),
                    right: m(right),
                    on: on.iter().map(|(l, r)| (f(l), f(r))).collect(),
                    filter: filter.as_ref().map(f),
                    nulls_equal: *nulls_equal,
                    schema: schema.clone(),
                    held: held.clone(),
                }
            }
            LogicalPlan::Aggregate { group, aggs, input, schema } => LogicalPlan::Aggregate {
                group: group.iter().map(f).collect(),
                aggs: aggs.iter().map(|a| a.map_exprs(f)).collect(),
                input: m(input),
                schema: schema.clone(),
            },
            LogicalPlan::PaneAggregate {
                pane,
                offset,
                merged,
                window,
                group,
                aggs,
                input,
                schema,
            } => LogicalPlan::PaneAggregate {
                pane: *pane,
                offset: *offset,
                merged: *merged,
                window: window.clone(),
                group: group.iter().map(f).collect(),
                aggs: aggs.iter().map(|a| a.map_exprs(f)).collect(),
                input: m(input),
                schema: schema.clone(),
            },
            LogicalPlan::Distinct { input } => LogicalPlan::Distinct { input: m(input) },
            LogicalPlan::UnionAll { inputs, schema } => LogicalPlan::UnionAll {
                inputs: inputs.iter().map(m).collect(),
                schema: schema.clone(),
            },
            LogicalPlan::Values { rows, schema } => LogicalPlan::Values {
                rows: rows.iter().map(|r| r.iter().map(f).collect()).collect(),
                schema: schema.clone(),
            },
            LogicalPlan::ToStream { op, input } => {
                LogicalPlan::ToStream { op: *op, input: m(input) }
            }
            LogicalPlan::Rename { input, schema } => {
                LogicalPlan::Rename { input: m(input), schema: schema.clone() }
            }
            LogicalPlan::Apply { input, subqueries, schema } => LogicalPlan::Apply {
                input: m(input),
                subqueries: subqueries
                    .iter()
                    .map(|q| ApplySubquery {
                        plan: m(&q.plan),
                        kind: match &q.kind {
                            ApplyKind::In { probe, negated } => {
                                ApplyKind::In { probe: f(probe), negated: *negated }
                            }
                            other => other.clone(),
                        },
                    })
                    .collect(),
                schema: schema.clone(),
            },
            LogicalPlan::TopK { order, skip, fetch, with_ties, input } => LogicalPlan::TopK {
                order: order
                    .iter()
                    .map(|o| SortExpr { expr: f(&o.expr), asc: o.asc, nulls_first: o.nulls_first })
                    .collect(),
                skip: *skip,
                fetch: *fetch,
                with_ties: *with_ties,
                input: m(input),
            },
            LogicalPlan::OverAggregate { partition_by, order_by, frame, aggs, input, schema } => {
                LogicalPlan::OverAggregate {
                    partition_by: partition_by.iter().map(f).collect(),
                    order_by: order_by
                        .iter()
                        .map(|o| SortExpr {
                            expr: f(&o.expr),
                            asc: o.asc,
                            nulls_first: o.nulls_first,
                        })
                        .collect(),
                    frame: *frame,
                    aggs: aggs
                        .iter()
                        .map(|c| OverCall {
                            func: c.func,
                            arg: c.arg.as_ref().map(f),
                            default: c.default.as_ref().map(f),
                            frame: c.frame,
                        })
                        .collect(),
                    input: m(input),
                    schema: schema.clone(),
                }
            }
            LogicalPlan::OverRelation { partition_by, order_by, calls, input, schema } => {
                LogicalPlan::OverRelation {
                    partition_by: partition_by.iter().map(f).collect(),
                    order_by: order_by
                        .iter()
                        .map(|o| SortExpr {
                            expr: f(&o.expr),
                            asc: o.asc,
                            nulls_first: o.nulls_first,
                        })
                        .collect(),
                    calls: calls
                        .iter()
                        .map(|c| OverCall {
                            func: c.func,
                            arg: c.arg.as_ref().map(f),
                            default: c.default.as_ref().map(f),
                            frame: c.frame,
                        })
                        .collect(),
                    input: m(input),
                    schema: schema.clone(),
                }
            }
            LogicalPlan::Ranking { partition_by, order_by, funcs, mode, input, schema } => {
                LogicalPlan::Ranking {
                    partition_by: partition_by.iter().map(f).collect(),
                    order_by: order_by
                        .iter()
                        .map(|o| SortExpr {
                            expr: f(&o.expr),
                            asc: o.asc,
                            nulls_first: o.nulls_first,
                        })
                        .collect(),
                    funcs: funcs.clone(),
                    mode: *mode,
                    input: m(input),
                    schema: schema.clone(),
                }
            }
        }
    }

    /// The same node with each input replaced by `f` of it (left to right); a leaf is cloned.
    pub fn map_inputs(
        &self,
        f: &mut dyn FnMut(&Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>>,
    ) -> Result<LogicalPlan> {
        let mut out = self.clone();
        match &mut out {
            LogicalPlan::StreamScan { .. }
            | LogicalPlan::TableScan { .. }
            | LogicalPlan::Values { .. } => {}
            LogicalPlan::Window { input, .. }
            | LogicalPlan::TimeWindows { input, .. }
            | LogicalPlan::WindowBounds { input, .. }
            | LogicalPlan::WindowAggregate { input, .. }
            | LogicalPlan::Filter { input, .. }
            | LogicalPlan::Project { input, .. }
            | LogicalPlan::Aggregate { input, .. }
            | LogicalPlan::PaneAggregate { input, .. }
            | LogicalPlan::Distinct { input }
            | LogicalPlan::ToStream { input, .. }
            | LogicalPlan::TopK { input, .. }
            | LogicalPlan::Apply { input, .. }
            | LogicalPlan::Ranking { input, .. }
            | LogicalPlan::OverAggregate { input, .. }
            | LogicalPlan::OverRelation { input, .. }
            | LogicalPlan::Rename { input, .. } => *input = f(input)?,
            LogicalPlan::Join { left, right, .. } => {
                *left = f(left)?;
                *right = f(right)?;
            }
            LogicalPlan::UnionAll { inputs, .. } => {
                for i in inputs.iter_mut() {
                    *i = f(i)?;
                }
            }
        }
        Ok(out)
    }

    /// Every base stream the plan reads, with its time domain.
    pub fn stream_domains(&self) -> Vec<(String, TimeDomain)> {
        match self {
            LogicalPlan::StreamScan { name, domain, .. } => vec![(name.clone(), *domain)],
            other => other.inputs().into_iter().flat_map(|i| i.stream_domains()).collect(),
        }
    }

    /// The time domain of the plan's streams (`None` if it reads only tables).
    pub fn time_domain(&self) -> Option<TimeDomain> {
        match self {
            LogicalPlan::StreamScan { domain, .. } => Some(*domain),
            other => other.inputs().into_iter().find_map(|i| i.time_domain()),
        }
    }

    pub(crate) fn window_label(spec: &WindowSpec, domain: TimeDomain, names: &[String]) -> String {
        spec.fmt_with(domain, names)
    }

    /// A duration in `domain`'s units as EXPLAIN prints it (`5`, `10 SECONDS`).
    pub fn duration_label(t: Time, domain: TimeDomain) -> String {
        match domain {
            TimeDomain::Ticks => t.to_string(),
            TimeDomain::Micros => format_micros_duration(t),
        }
    }
}

/// How a sketch aggregate ([`AggFunc::is_sketch`]) sees its input's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SketchWindow {
    /// Every row ever inserted (an append-only input): one sketch per group.
    Unbounded,
    /// The rows of a stream stamped in [b−range, b), b = slide·⌊(τ+1)/slide⌋ (`[NOW]` is
    /// range = slide = 1, `[RANGE T]` is slide = 1): one sketch per group and slice.
    Slide { range: Time, slide: Time },
}

/// Where a sketch aggregate over `input` gets its rows, if it can: the window its rows are
/// counted over and the plan of the rows themselves, an append-only stream of elements, each
/// at its timestamp. A time window (`[NOW]`, `[RANGE T]`, `[RANGE T SLIDE S]`) over a stream,
/// under filters, projections and renames, is taken out of the plan (the window becomes a
/// rename: the rows keep their columns' names) and applied by the aggregate itself, slice by
/// slice; an append-only (monotonic) input is counted whole. Anything else can delete rows
/// that a sketch cannot forget: `None`.
pub fn sketch_input(input: &Arc<LogicalPlan>) -> Option<(SketchWindow, Arc<LogicalPlan>)> {
    fn window(plan: &Arc<LogicalPlan>) -> Option<(SketchWindow, Arc<LogicalPlan>)> {
        let rebuilt = |w, i| Some((w, Arc::new(i)));
        match plan.as_ref() {
            LogicalPlan::Filter { predicate, input } => {
                let (w, i) = window(input)?;
                rebuilt(w, LogicalPlan::Filter { predicate: predicate.clone(), input: i })
            }
            LogicalPlan::Project { exprs, input, schema } => {
                let (w, i) = window(input)?;
                rebuilt(
                    w,
                    LogicalPlan::Project { exprs: exprs.clone(), input: i, schema: schema.clone() },
                )
            }
            LogicalPlan::Rename { input, schema } => {
                let (w, i) = window(input)?;
                rebuilt(w, LogicalPlan::Rename { input: i, schema: schema.clone() })
            }
            LogicalPlan::Window { spec, input, schema, bounds_columns: false }
                if input.is_stream_source() =>
            {
                let w = match spec {
                    WindowSpec::Now => SketchWindow::Slide { range: 1, slide: 1 },
                    WindowSpec::Range(t) => SketchWindow::Slide { range: *t, slide: 1 },
                    WindowSpec::RangeSlide { range, slide, offset: 0 } => {
                        SketchWindow::Slide { range: *range, slide: *slide }
                    }
                    _ => return None,
                };
                rebuilt(w, LogicalPlan::Rename { input: input.clone(), schema: schema.clone() })
            }
            _ => None,
        }
    }
    window(input).or_else(|| input.is_monotonic().then(|| (SketchWindow::Unbounded, input.clone())))
}
