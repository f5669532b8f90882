//! Grouped aggregation: γ_{keys; aggs}(R), with retraction.
//!
//! Delta semantics: for each group g touched by ΔR at τ, the output changes by
//! −(g, aggs_old) +(g, aggs_new), and by nothing when the values are equal. A group appears
//! when its row count becomes positive and disappears when it returns to zero. Without GROUP BY
//! the single row always exists from the query's first instant on (`COUNT(*)` = 0, `SUM` =
//! NULL over an empty relation, as SQL says). Output rows are sorted by group key, each group's
//! old row before its new one.
//!
//! Retraction: COUNT, SUM and AVG are invertible and retract in O(1) (SUM and AVG over
//! integers keep an exact integer sum, so AVG is that sum divided by the count, whatever the
//! order of the changes; floating-point sums may differ from a fresh sum in the last digits).
//! MIN and MAX keep an ordered multiset of values (value -> count), so deleting any value, not
//! only the oldest, is exact: over integer types (up to 32-bit unsigned), timestamps, Date64
//! and Float64 the values are kept as `i64` order keys (a float by its total order, the order
//! of its row encoding), over any other type as their row encoding. DISTINCT variants keep a
//! value -> count map and feed the inner aggregate only when a value appears or disappears;
//! the DISTINCT aggregates of one argument (q15's `COUNT(DISTINCT bidder)` with and without
//! each `FILTER`) share one map per group, value -> a count per aggregate, so a change costs
//! one lookup per argument, not one per aggregate. BOOL_AND and BOOL_OR keep the counts of
//! true and of false values (BOOL_AND is true while no false is counted), so retracting the last false turns
//! BOOL_AND back to true. The ordered aggregates (STRING_AGG, ARRAY_AGG, FIRST_VALUE, LAST_VALUE)
//! keep an ordered multiset of elements, each the row encoding of the aggregate's ORDER BY terms
//! followed by the value (byte order = the aggregate's order, ties by value ascending, NULL
//! first), with its count and decoded value: a retraction removes exactly that element, and the
//! output is the same whatever order the changes arrived in. STRING_AGG and ARRAY_AGG rebuild
//! their value from the multiset when the group changes (O(group size)); FIRST_VALUE and
//! LAST_VALUE read an end of it.
//!
//! Insert-only input (a monotonic plan: an unbounded window over a stream, and what filters,
//! projects or inner-joins such inputs; see [`Aggregate::with_append_only`]): a value that is
//! not a group's MIN (MAX) when it arrives can never become it, since nothing leaves, so MIN
//! and MAX keep only their current extreme and its count: constant state per group instead of
//! every value, as Flink's accumulators without retraction do. A DISTINCT set keeps one bit per
//! member for each value instead of a count (whether the member has seen it: it can never
//! stop seeing it). A retraction reaching such an aggregate is an internal error, never a
//! wrong answer.
//!
//! `FILTER (WHERE p)`: a row whose `p` is not true (false or NULL) does not reach that aggregate,
//! neither as an insertion nor as a retraction, so each aggregate is that of the group's rows
//! passing its filter; the group itself exists while it has any row. A filtered `COUNT(*)` keeps
//! its own count (an unfiltered one is the group's row count). State: per group, its row count,
//! the COUNT family's counts (eight bytes each: a group's memory is what a change touches) and
//! one accumulator per other aggregate (see `accumulators::Place`).
//!
//! Groups live in a slab (`slots`) indexed by their encoded key; a slot whose group disappears
//! is reused by the next new group. Each instant marks the groups it touches with its number,
//! so a group's old output is taken once, at its first change in the instant. Output values are kept
//! typed (not as `ScalarValue`s) and built into Arrow arrays once per call.
//!
//! Checkpointed as sections (see [`Aggregate::save_own`]): `aggregate` (one row: `started`),
//! `aggregate.groups` (per group sorted by key: `key` Binary, `rows` Int64, and per aggregate
//! `a` the columns `n{a}` Int64 (COUNT's count, the row count for an unfiltered COUNT(*),
//! SUM's and AVG's non-NULL count, BOOL_AND's and BOOL_OR's count of true values), `isum{a}`
//! (an integer or decimal SUM, BOOL_AND's and BOOL_OR's count of false values, AVG's sum over
//! integers, 16-byte Binary), `fsum{a}` (a
//! float SUM's or AVG's sum, Float64)), `aggregate.values` (MIN/MAX multisets, each value
//! row-encoded whatever its in-memory form, in value order; an ordered aggregate's elements, encoded as above, in their
//! order) and `aggregate.seen` (DISTINCT value counts), both as rows of `group` (index
//! into the groups), `agg`, `value` Binary and `count` Int64. Its changes since the last
//! checkpoint (see [`crate::dirty`]) are the same sections holding only the groups touched
//! since (as they are now), then `aggregate.gone` (`key` Binary: the groups that disappeared).
//!
//! A step is evaluated run by run, one instant or a span alike: each run of input changes
//! sharing an instant is applied on its own, exactly as if that instant were evaluated alone;
//! the step's input is encoded once and its output built once. A scalar aggregate's first
//! instant is the step's first (`lo`), even if no change is stamped there.
//!
//! The operator is split by job: this file holds the groups and the walk of a step;
//! `accumulators.rs` how each aggregate function keeps, updates and outputs its values;
//! `checkpoint.rs` the state's sections; `distinct.rs` the DISTINCT sets, `dense.rs` those of
//! ids kept as bit arrays; `minmax.rs` the
//! MIN/MAX multisets kept as order keys;
//! `panes.rs` the pane aggregation under a time window's aggregate, which feeds the same groups
//! without output and emits them all at once; `tests.rs` the tests.

use std::ops::Range;

use datafusion_common::HashMap;

use arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use arrow::buffer::NullBuffer;
use arrow::compute::{cast_with_options, SortOptions};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_common::format::DEFAULT_CAST_OPTIONS;
use datafusion_common::DFSchema;
use datafusion_expr::{Expr, ExprSchemable};
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{AggCall, AggFunc};

use crate::dirty::DirtyKeys;
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, time_runs, Operator, Step};
use crate::ops::batch_of;
use crate::ops::topk::SortKey;
use crate::route::{KeyRoute, Placement};
use crate::row::{sort_prefix, EncodedRows, Probe, RowCodec};
use crate::state::{StateReader, StateWriter};
use accumulators::{AccState, ArgView, Kind, Out, Place};
use distinct::SeenMap;

mod accumulators;
pub(crate) use accumulators::{avg_scale, decimal_avg};
mod checkpoint;
mod dense;
mod distinct;
mod minmax;
mod packed;
pub mod panes;
#[cfg(test)]
mod tests;
pub mod windows;

/// An encoded group key, inline up to 24 bytes (a few numbers): a probe that finds a
/// candidate compares keys without a trip to the heap.
type GroupKey = smallvec::SmallVec<[u8; 24]>;

/// The groups an aggregate with DISTINCT sets holds from which it reads each step's rows'
/// memory ahead ([`Aggregate::warm`]): fewer stay in the cache, and reading ahead would only
/// cost. Without DISTINCT sets a group is two allocations, and reading ahead cost more than
/// it saved (q17: 7% slower).
const WARM_GROUPS: usize = 4096;

/// The rows read ahead at a time ([`Aggregate::warm`]): their groups' memory fits in the
/// cache nearest the core.
const WARM_ROWS: usize = 32;

/// The output rows transposed at a time into columns (see `Emitted::word_columns`): a block
/// of q16's rows (twelve words each) is 24 KiB, within the nearest cache.
const TRANSPOSE_ROWS: usize = 256;

/// A row read ahead whose group does not exist yet (see [`Aggregate::warm`]).
const NO_SLOT: u32 = u32::MAX;

/// One aggregate of the operator, compiled.
#[derive(Debug)]
pub struct AggSpec {
    pub func: AggFunc,
    pub arg: Option<ScalarExpr>,
    /// The argument's type (its values are cast to the accumulator's working type).
    pub arg_type: DataType,
    pub distinct: bool,
    /// `FILTER (WHERE ...)`: the rows for which it is not true do not reach the aggregate.
    pub filter: Option<ScalarExpr>,
    /// An ordered aggregate's `ORDER BY` terms (see [`AggFunc::is_ordered`]); the argument
    /// itself, ascending and NULL first, is added after them as the tiebreak.
    pub order: Vec<SortKey>,
    /// `STRING_AGG`'s separator.
    pub separator: Option<String>,
}

impl AggSpec {
    /// A plain aggregate of `func` over `arg` (of type `arg_type`).
    pub fn plain(
        func: AggFunc,
        arg: Option<ScalarExpr>,
        arg_type: DataType,
        distinct: bool,
    ) -> Self {
        AggSpec { func, arg, arg_type, distinct, filter: None, order: vec![], separator: None }
    }

    /// Compiles an aggregate of the plan over its input schema.
    pub fn compile(call: &AggCall, input: &DFSchema) -> Result<Self> {
        let ty = |e: &Expr| {
            e.get_type(input).map_err(|err| WeirError::internal(format!("type of {e}: {err}")))
        };
        let order = call
            .order_by
            .iter()
            .map(|o| {
                Ok(SortKey {
                    expr: ScalarExpr::compile(&o.expr, input)?,
                    data_type: ty(&o.expr)?,
                    descending: !o.asc,
                    nulls_first: o.nulls_first,
                })
            })
            .collect::<Result<_>>()?;
        Ok(AggSpec {
            func: call.func,
            arg: call.arg.as_ref().map(|e| ScalarExpr::compile(e, input)).transpose()?,
            arg_type: match &call.arg {
                Some(e) => ty(e)?,
                None => DataType::Null,
            },
            distinct: call.distinct,
            filter: call.filter.as_ref().map(|e| ScalarExpr::compile(e, input)).transpose()?,
            order,
            separator: call.separator.clone(),
        })
    }

    /// The converter of an ordered aggregate's elements: its ORDER BY terms, then the value,
    /// so that byte order is the aggregate's order with ties broken by value.
    fn element_converter(&self) -> Result<Option<RowConverter>> {
        if !self.func.is_ordered() {
            return Ok(None);
        }
        let fields = self
            .order
            .iter()
            .map(|k| {
                SortField::new_with_options(
                    k.data_type.clone(),
                    SortOptions { descending: k.descending, nulls_first: k.nulls_first },
                )
            })
            .chain(std::iter::once(SortField::new(self.arg_type.clone())))
            .collect();
        Ok(Some(RowConverter::new(fields)?))
    }
}

#[derive(Debug, Clone)]
struct Group {
    /// The encoded group key (empty while the slot is free).
    key: Vec<u8>,
    rows: i64,
    /// The COUNT family's counts (see [`Place`]).
    counts: Vec<i64>,
    /// The other aggregates' accumulators.
    accs: Vec<AccState>,
    /// Per DISTINCT set (see `Aggregate::distinct_sets`): its values' multiplicities.
    seen: Vec<SeenMap>,
    /// The number of the instant that last touched the group (0: none yet).
    mark: u64,
}

/// An input batch evaluated for the accumulators, once per call.
struct Prepared {
    /// The group key's columns, of the key codec's types.
    key_cols: Vec<ArrayRef>,
    /// The encoded group key of each row.
    keys: EncodedRows,
    /// Per aggregate: its argument in the working type.
    views: Vec<ArgView>,
    /// Per aggregate: its argument row-encoded, where needed (MIN/MAX kept as bytes, DISTINCT;
    /// an ordered aggregate's elements: its ORDER BY terms then the value).
    values: Vec<Option<EncodedRows>>,
    /// Per aggregate: its FILTER, true for the rows that reach it.
    filters: Vec<Option<BooleanArray>>,
    /// Per row, when there are at most 64 aggregates: bit a is set when the row reaches
    /// aggregate a (see [`Aggregate::reaches`]); empty otherwise.
    reach: Vec<u64>,
    /// The whole rows encoded, when floating-point sums fix the apply order.
    rows: Option<EncodedRows>,
}

impl HeapSize for Group {
    fn heap_bytes(&self) -> usize {
        self.key.heap_bytes()
            + self.counts.heap_bytes()
            + self.accs.heap_bytes()
            + self.seen.heap_bytes()
    }
}

impl HeapSize for Emitted {
    fn heap_bytes(&self) -> usize {
        self.key_bytes.heap_bytes()
            + self.key_ends.heap_bytes()
            + self.key_rows.heap_bytes()
            + self.cols.heap_bytes()
            + self.words.heap_bytes()
            + self.valid.heap_bytes()
            + self.times.heap_bytes()
            + self.diffs.heap_bytes()
    }
}

/// Output rows collected over a call: keys, then each aggregate's values. Kept between calls
/// for its allocations.
///
/// A row's key is either its group's encoded key (concatenated in `key_bytes`, decoded when
/// the batch is built) or, where the call's input holds the key's values, the input row whose
/// key it is (`key_rows`, taken from the input's key columns: no copy of the bytes per output
/// row, and no decoding). All rows of one call name their keys the same way.
///
/// The aggregates whose values are 64-bit numbers ([`Out::Int`] or [`Out::Float`]: COUNT,
/// SUM, AVG over floats, MIN/MAX over numbers) keep them row by row in `words`, `width` a row,
/// read out of each group where they lie: a row is one run of stores, and two rows compare as
/// two slices. They become their columns when the batch is built. Any other kind keeps its
/// [`Out`]s in a column of its own.
#[derive(Debug, Default)]
struct Emitted {
    key_bytes: Vec<u8>,
    key_ends: Vec<usize>,
    key_rows: Vec<u32>,
    /// Per aggregate: where its values are.
    cols: Vec<OutCol>,
    /// The words of each row ([`Out::Int`]'s integer, [`Out::Float`]'s bits; 0 for NULL).
    words: Vec<u64>,
    width: usize,
    /// From the call's first NULL word on, whether each word is present (empty while all are:
    /// a COUNT is never NULL, and its words then cost one store each).
    valid: Vec<bool>,
    times: Vec<Time>,
    diffs: Vec<i64>,
}

/// Where an aggregate's output values are over a call (see [`Emitted`]).
#[derive(Debug)]
enum OutCol {
    /// A 64-bit value: its place in each row of `Emitted::words`.
    Word(usize),
    Outs(Vec<Out>),
}

impl HeapSize for OutCol {
    fn heap_bytes(&self) -> usize {
        match self {
            OutCol::Word(_) => 0,
            OutCol::Outs(v) => v.heap_bytes(),
        }
    }
}

/// The 64 bits a column of words keeps for `v` (None: NULL, as is any value of another kind).
fn word_of(v: &Out) -> Option<u64> {
    match v {
        Out::Int(x) => Some(*x as u64),
        Out::Float(b) => Some(*b),
        _ => None,
    }
}

impl Emitted {
    /// Empties the buffers for aggregates of `kinds`, keeping their capacity (`times` and
    /// `diffs` are handed over with each batch: they get the last batch's length).
    fn clear(&mut self, kinds: &[Kind]) {
        self.key_bytes.clear();
        self.key_ends.clear();
        self.key_rows.clear();
        if self.cols.len() != kinds.len() {
            self.width = 0;
            self.cols = (kinds.iter())
                .map(|k| match k {
                    Kind::Int | Kind::Float | Kind::KeyInt | Kind::KeyFloat => {
                        self.width += 1;
                        OutCol::Word(self.width - 1)
                    }
                    Kind::Dec(..) | Kind::Bytes | Kind::Bool | Kind::Scalar => {
                        OutCol::Outs(Vec::new())
                    }
                })
                .collect();
        }
        for col in &mut self.cols {
            if let OutCol::Outs(v) = col {
                v.clear();
            }
        }
        self.words.clear();
        self.valid.clear();
        self.times.clear();
        self.diffs.clear();
    }

    /// Makes room for `rows` more rows, so that no buffer grows (and copies itself) while
    /// they are pushed.
    fn reserve(&mut self, rows: usize) {
        for col in &mut self.cols {
            if let OutCol::Outs(v) = col {
                room(v, rows);
            }
        }
        room(&mut self.words, rows * self.width);
        room(&mut self.times, rows);
        room(&mut self.diffs, rows);
        room(&mut self.key_rows, rows);
    }

    /// Notes an appended row's key.
    #[inline]
    fn push_key(&mut self, key: RowKey<'_>) {
        match key {
            RowKey::Bytes(b) => {
                self.key_bytes.extend_from_slice(b);
                self.key_ends.push(self.key_bytes.len());
            }
            RowKey::Input(i) => self.key_rows.push(i),
        }
    }

    /// Starts a row's words (all 0 and present), returning where they begin.
    #[inline]
    fn new_words(&mut self) -> usize {
        let base = self.words.len();
        self.words.resize(base + self.width, 0);
        if !self.valid.is_empty() {
            self.valid.resize(self.words.len(), true);
        }
        base
    }

    /// Sets word `at` of `words` to `w` (None: NULL; from the first NULL on, every word's
    /// presence is kept).
    #[inline]
    fn set_word(words: &mut [u64], valid: &mut Vec<bool>, at: usize, w: Option<u64>) {
        match w {
            Some(w) => words[at] = w,
            None => {
                if valid.is_empty() {
                    valid.resize(words.len(), true);
                }
                valid[at] = false;
            }
        }
    }

    /// Appends a row of the values `vals`, the [`Out`]s of columns of their own taken out
    /// (left NULL), the words copied.
    fn push(&mut self, key: RowKey<'_>, vals: &mut [Out], t: Time, diff: i64) {
        self.push_key(key);
        let base = self.new_words();
        for (col, v) in self.cols.iter_mut().zip(vals) {
            match col {
                OutCol::Word(j) => {
                    Self::set_word(&mut self.words, &mut self.valid, base + *j, word_of(v))
                }
                OutCol::Outs(col) => col.push(std::mem::replace(v, Out::Null)),
            }
        }
        self.times.push(t);
        self.diffs.push(diff);
    }

    /// Appends group `g`'s current output row (of `aggs`, kept at `places`), its values
    /// written straight into their places.
    fn push_group(
        &mut self,
        aggs: &[AggSpec],
        places: &[Place],
        g: &Group,
        key: RowKey<'_>,
        t: Time,
        diff: i64,
    ) -> Result<()> {
        self.push_key(key);
        let base = self.new_words();
        for ((col, spec), at) in self.cols.iter_mut().zip(aggs).zip(places) {
            match col {
                OutCol::Word(j) => {
                    let w = Aggregate::word_value(spec, *at, g)?;
                    Self::set_word(&mut self.words, &mut self.valid, base + *j, w)
                }
                OutCol::Outs(v) => v.push(Aggregate::output_value(spec, *at, g)?),
            }
        }
        self.times.push(t);
        self.diffs.push(diff);
        Ok(())
    }

    /// The rows appended so far.
    fn len(&self) -> usize {
        self.diffs.len()
    }

    /// Whether rows `a` and `b` hold equal values (their keys are not compared).
    fn same_values(&self, a: usize, b: usize) -> bool {
        let w = self.width;
        let (ra, rb) = (a * w..a * w + w, b * w..b * w + w);
        // Word by word: a row is a word or two, which a slice comparison would hand to
        // `memcmp`.
        let same = |x: Option<&[u64]>, y: Option<&[u64]>| match (x, y) {
            (Some(x), Some(y)) => x.iter().zip(y).all(|(p, q)| p == q),
            _ => false,
        };
        same(self.words.get(ra.clone()), self.words.get(rb.clone()))
            && (self.valid.is_empty() || self.valid.get(ra) == self.valid.get(rb))
            && self.cols.iter().all(|c| match c {
                OutCol::Word(_) => true,
                OutCol::Outs(col) => col[a] == col[b],
            })
    }

    /// Keeps the first `n` rows.
    fn truncate(&mut self, n: usize) {
        self.key_ends.truncate(n);
        self.key_bytes.truncate(self.key_ends.last().copied().unwrap_or(0));
        self.key_rows.truncate(n);
        for col in &mut self.cols {
            if let OutCol::Outs(v) = col {
                v.truncate(n);
            }
        }
        self.words.truncate(n * self.width);
        self.valid.truncate(n * self.width);
        self.times.truncate(n);
        self.diffs.truncate(n);
    }

    /// The columns of words, by place: each one's values and validity (None: all present).
    /// Rows are read a block at a time, each block once per column while it is in the cache
    /// (a pass over every row per column read them all once per column).
    fn word_columns(&self) -> Vec<(Vec<u64>, Option<NullBuffer>)> {
        let (w, n) = (self.width, self.len());
        if w == 0 {
            return Vec::new();
        }
        let block = TRANSPOSE_ROWS * w;
        let mut vals: Vec<Vec<u64>> = (0..w).map(|_| Vec::with_capacity(n)).collect();
        for rows in self.words.chunks(block) {
            for (j, col) in vals.iter_mut().enumerate() {
                col.extend(rows.chunks_exact(w).map(|r| r[j]));
            }
        }
        let mut valid: Vec<Vec<bool>> = Vec::new();
        if !self.valid.is_empty() {
            valid = (0..w).map(|_| Vec::with_capacity(n)).collect();
            for rows in self.valid.chunks(block) {
                for (j, col) in valid.iter_mut().enumerate() {
                    col.extend(rows.chunks_exact(w).map(|r| r[j]));
                }
            }
        }
        let mut valid = valid.into_iter();
        vals.into_iter()
            .map(|v| {
                let nulls = valid.next().filter(|b| b.contains(&false)).map(NullBuffer::from);
                (v, nulls)
            })
            .collect()
    }
}

/// Makes room in `v` for `n` more values; an empty vector too small is replaced, not grown
/// (growing copies the old allocation's bytes, none of which are values).
fn room<T>(v: &mut Vec<T>, n: usize) {
    if v.is_empty() && v.capacity() < n {
        *v = Vec::with_capacity(n);
    } else {
        v.reserve(n);
    }
}

/// Where an output row's key is: see [`Emitted`].
#[derive(Debug, Clone, Copy)]
enum RowKey<'a> {
    /// The group's encoded key.
    Bytes(&'a [u8]),
    /// The key of this row of the call's input.
    Input(u32),
}

/// A group touched by an instant: its key's [`sort_prefix`], its slot, where its old output
/// is (None: it did not exist), and the first input row of the instant that reached it.
type Touched = (u128, u32, Option<u32>, u32);

/// The order of two groups, each as its key's [`sort_prefix`] and its slot in `slots`: by the
/// prefixes, then (when equal) by the whole keys.
fn key_order(slots: &[Group], a: (u128, u32), b: (u128, u32)) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then_with(|| slots[a.1 as usize].key.cmp(&slots[b.1 as usize].key))
}

/// Casts as `ScalarValue::cast_to` does (an error, not NULL, for a value that does not fit).
/// Whether a group key column of type `t` may be taken from the input instead of decoded
/// (see [`Emitted`]): numbers, strings, binaries, booleans, dates, times, timestamps and
/// decimals, whose values Arrow's row format writes one-to-one (every row of a group holds the
/// same bits, a float's sign of zero and NaN payload included) and reads back as the same
/// array type. Dictionaries (read back as their values) and nested types are decoded.
fn exact_key_type(t: &DataType) -> bool {
    t.is_integer()
        || t.is_floating()
        || matches!(
            t,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(..)
                | DataType::Decimal128(..)
        )
}

fn cast_to(a: ArrayRef, ty: &DataType) -> Result<ArrayRef> {
    if a.data_type() == ty {
        Ok(a)
    } else {
        Ok(cast_with_options(&a, ty, &DEFAULT_CAST_OPTIONS)?)
    }
}

#[derive(Debug)]
pub struct Aggregate {
    keys: Vec<ScalarExpr>,
    key_codec: RowCodec,
    aggs: Vec<AggSpec>,
    kinds: Vec<Kind>,
    /// Per aggregate: where a group keeps its accumulator.
    places: Vec<Place>,
    /// The aggregate of each of a group's accumulators ([`Place::Acc`]), and the number of its
    /// counts ([`Place::Count`]).
    acc_aggs: Vec<usize>,
    counts: usize,
    /// Per aggregate: codec of its argument (MIN/MAX ordering, DISTINCT identity).
    value_codecs: Vec<Option<RowCodec>>,
    /// Per ordered aggregate: the converter of its elements (see [`AggSpec::element_converter`]).
    element_converters: Vec<Option<RowConverter>>,
    /// Whether a floating-point sum is kept (see [`Aggregate::apply_order`]).
    float_order: bool,
    /// The aggregates kept in a count or an accumulator of their own: neither the group's row
    /// count ([`Place::Rows`]) nor a member of a DISTINCT set.
    plain_aggs: Vec<usize>,
    /// The DISTINCT aggregates grouped by argument (the same expression of the same type,
    /// ordered aggregates apart): the members of each set, which share one map per group.
    distinct_sets: Vec<Vec<usize>>,
    /// Per aggregate: its DISTINCT set and its position among the set's members.
    distinct_of: Vec<Option<(usize, usize)>>,
    schema: SchemaRef,
    /// The groups, by slot; free slots are listed in `free`.
    slots: Vec<Group>,
    free: Vec<u32>,
    /// The slot of each existing group, by encoded key.
    index: HashMap<GroupKey, u32>,
    /// The number of instants applied (marks groups touched by the current one).
    epoch: u64,
    started: bool,
    /// Scratch, kept for its allocations: the groups touched by the current instant (the
    /// [`sort_prefix`] of the key, the slot) with the
    /// offset of their old output in `old` (None: the group did not exist), and a new output.
    touched: Vec<Touched>,
    /// The keys of the groups touched since the last checkpoint.
    dirty: DirtyKeys<Vec<u8>>,
    old: Vec<Out>,
    new: Vec<Out>,
    emitted: Emitted,
    /// The input only ever inserts (see the module docs).
    append_only: bool,
    /// Whether output rows take their keys from the input's key columns (see [`Emitted`]):
    /// for keys of types whose encoding gives back every value bit for bit and whose arrays
    /// `take` copies cheaply, so that a value taken from any row of a group equals the group's
    /// decoded key.
    keys_from_input: bool,
    /// Scratch of [`Aggregate::warm`], kept for its allocation.
    warm_ids: Vec<u32>,
    /// The groups from which each step's rows' memory is read ahead ([`WARM_GROUPS`]; a
    /// field so that tests can turn it on and off).
    warm_from: usize,
}

impl Aggregate {
    pub fn new(
        keys: Vec<ScalarExpr>,
        key_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> Result<Self> {
        if let Some(a) = aggs.iter().find(|a| a.func.is_sketch()) {
            return Err(WeirError::internal(format!("{} compiled as a plain aggregate", a.func)));
        }
        let value_codecs = aggs
            .iter()
            .map(|a| match a.arg {
                Some(_) => RowCodec::new(vec![a.arg_type.clone()]).map(Some),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let element_converters =
            aggs.iter().map(AggSpec::element_converter).collect::<Result<_>>()?;
        let float_order = aggs.iter().any(|s| {
            (s.func == AggFunc::Avg
                && !accumulators::int_arg(&s.arg_type)
                && !matches!(s.arg_type, DataType::Decimal128(..)))
                || (s.func == AggFunc::Sum
                    && matches!(
                        s.arg_type,
                        DataType::Float16 | DataType::Float32 | DataType::Float64
                    ))
        });
        let mut distinct_sets: Vec<Vec<usize>> = Vec::new();
        let mut distinct_of = vec![None; aggs.len()];
        for (a, spec) in aggs.iter().enumerate().filter(|(_, s)| s.distinct) {
            let shares = |first: &AggSpec| match (&first.arg, &spec.arg) {
                (Some(x), Some(y)) => {
                    !first.func.is_ordered()
                        && !spec.func.is_ordered()
                        && first.arg_type == spec.arg_type
                        && x.same_as(y)
                }
                _ => false,
            };
            let s = match distinct_sets.iter().position(|m| shares(&aggs[m[0]])) {
                Some(s) => s,
                None => {
                    distinct_sets.push(Vec::new());
                    distinct_sets.len() - 1
                }
            };
            distinct_of[a] = Some((s, distinct_sets[s].len()));
            distinct_sets[s].push(a);
        }
        let places = Place::of(&aggs);
        let acc_aggs = (0..aggs.len()).filter(|&a| matches!(places[a], Place::Acc(_))).collect();
        let counts = places.iter().filter(|p| matches!(p, Place::Count(_))).count();
        let keys_from_input = !key_types.is_empty() && key_types.iter().all(exact_key_type);
        let plain_aggs = (0..aggs.len())
            .filter(|&a| places[a] != Place::Rows && distinct_of[a].is_none())
            .collect();
        Ok(Aggregate {
            plain_aggs,
            keys_from_input,
            warm_ids: Vec::new(),
            keys,
            key_codec: RowCodec::new(key_types)?,
            distinct_sets,
            distinct_of,
            kinds: aggs.iter().map(Kind::of).collect(),
            places,
            acc_aggs,
            counts,
            aggs,
            value_codecs,
            element_converters,
            float_order,
            schema,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            epoch: 0,
            started: false,
            touched: Vec::new(),
            dirty: DirtyKeys::default(),
            old: Vec::new(),
            new: Vec::new(),
            emitted: Emitted::default(),
            warm_from: WARM_GROUPS,
            append_only: false,
        })
    }

    /// Declares the input insert-only (a monotonic plan): MIN and MAX then keep only their
    /// extreme (see the module docs), and a retraction in the input becomes an error.
    pub fn with_append_only(mut self, append_only: bool) -> Self {
        self.append_only = append_only;
        self
    }

    fn new_group(&self, key: &[u8]) -> Group {
        let accs = (self.acc_aggs.iter())
            .map(|&a| Self::fresh_acc(&self.aggs[a], self.kinds[a], self.append_only))
            .collect();
        // A 64-bit argument's row encoding is a null byte and its 8 bytes.
        let words = |m: &[usize]| self.aggs[m[0]].arg_type.primitive_width() == Some(8);
        let seen = (self.distinct_sets.iter())
            .map(|m| SeenMap::new(self.append_only, m.len(), words(m)))
            .collect();
        Group { key: key.to_vec(), rows: 0, counts: vec![0; self.counts], accs, seen, mark: 0 }
    }

    /// Puts a new, empty group with `key` into a slot and indexes it.
    fn alloc(&mut self, key: &[u8]) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                let g = &mut self.slots[id as usize];
                g.key.extend_from_slice(key);
                id
            }
            None => {
                let g = self.new_group(key);
                self.slots.push(g);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(GroupKey::from_slice(key), id);
        id
    }

    /// The slot of the group with `key`, created (empty) if there is none.
    #[inline]
    fn slot_of(&mut self, key: &[u8]) -> u32 {
        match self.index.get(&Probe(key)) {
            Some(&id) => id,
            None => self.alloc(key),
        }
    }

    /// Removes the group in slot `id`, leaving the slot empty for reuse.
    fn release(&mut self, id: u32) {
        self.index.remove(&self.slots[id as usize].key[..]);
        self.empty_slot(id);
    }

    /// Empties slot `id` (no longer indexed) for reuse.
    fn empty_slot(&mut self, id: u32) {
        self.slots[id as usize].key.clear();
        self.reset_group(id);
        self.slots[id as usize].mark = 0;
        self.free.push(id);
    }

    /// Empties the rows and accumulators of the group in slot `id` (its key and mark stay).
    #[inline]
    fn reset_group(&mut self, id: u32) {
        let g = &mut self.slots[id as usize];
        g.rows = 0;
        g.counts.fill(0);
        for (st, &a) in g.accs.iter_mut().zip(&self.acc_aggs) {
            *st = Self::fresh_acc(&self.aggs[a], self.kinds[a], self.append_only);
        }
        g.seen.iter_mut().for_each(SeenMap::clear);
    }

    fn exists(&self, g: &Group) -> bool {
        self.keys.is_empty() || g.rows > 0
    }
}

impl Operator for Aggregate {
    /// Each run of equal time in the step's changes is applied on its own (see the module
    /// docs). An instant without changes changes no group, so it takes no run, except the
    /// query's first: there the scalar aggregate's row appears.
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        let mut runs = Vec::new();
        // The first instant of the query is `lo`; the scalar aggregate's row exists from it.
        if !self.started && d.times.first() != Some(&step.lo) {
            runs.push((step.lo, 0..0));
        }
        let mut start = 0;
        for end in time_runs(&d.times) {
            runs.push((d.times[start], start..end));
            start = end;
        }
        self.process(&d, &runs)
    }

    /// The groups (keys, accumulators, DISTINCT multiplicities), their index and the buffers kept between steps.
    fn state_bytes(&self) -> usize {
        self.slots.heap_bytes()
            + self.free.heap_bytes()
            + self.index.heap_bytes()
            + self.touched.heap_bytes()
            + self.dirty.heap_bytes()
            + self.old.heap_bytes()
            + self.new.heap_bytes()
            + self.emitted.heap_bytes()
    }

    /// State: see [`Aggregate::save_own`].
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        self.save_own(w)
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        self.restore_own(r)
    }

    /// Changes: see [`Aggregate::save_changed`].
    fn save_changes(&mut self, w: &mut StateWriter) -> Result<bool> {
        let Some(keys) = self.dirty.take() else { return Ok(false) };
        self.save_changed(w, &keys)?;
        Ok(true)
    }

    fn restore_changes(&mut self, r: &mut StateReader) -> Result<()> {
        self.restore_changed(r)
    }

    fn track_changes(&mut self) {
        self.dirty.start();
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A group's rows meet on one worker (without GROUP BY, every row on one worker).
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Keyed(KeyRoute::new(self.keys.clone(), self.key_codec.types().to_vec())?))
    }
}

impl Aggregate {
    /// Evaluates `d` for the accumulators: keys, argument views, encodings.
    fn prepare(&self, d: &ChangeBatch) -> Result<Prepared> {
        let key_cols: Vec<ArrayRef> =
            self.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
        let key_cols = self.key_codec.conform(&key_cols)?;
        let keys = self.key_codec.encode(&key_cols, d.len())?;
        let mut views = Vec::with_capacity(self.aggs.len());
        let mut values = Vec::with_capacity(self.aggs.len());
        let mut filters = Vec::with_capacity(self.aggs.len());
        for (a, (spec, kind)) in self.aggs.iter().zip(&self.kinds).enumerate() {
            let col = match &spec.arg {
                Some(e) => Some(e.eval_as(&d.data, &spec.arg_type)?),
                None => None,
            };
            // A DISTINCT set's values are encoded once, for its first member.
            let encode = match self.distinct_of[a] {
                Some((s, _)) => self.distinct_sets[s][0] == a,
                None => *kind == Kind::Bytes,
            };
            values.push(match (&col, &self.value_codecs[a], &self.element_converters[a]) {
                (Some(c), _, Some(conv)) => {
                    let mut cols = Vec::with_capacity(spec.order.len() + 1);
                    for k in &spec.order {
                        cols.push(k.expr.eval_as(&d.data, &k.data_type)?);
                    }
                    cols.push(c.clone());
                    Some(EncodedRows::Rows(conv.convert_columns(&cols)?))
                }
                (Some(c), Some(codec), None) if encode => {
                    Some(codec.encode(std::slice::from_ref(c), d.len())?)
                }
                _ => None,
            });
            filters.push(spec.filter.as_ref().map(|f| f.eval_predicate(&d.data)).transpose()?);
            views.push(Self::view(spec, *kind, col.as_ref())?);
        }
        let rows = if self.float_order {
            Some(RowCodec::for_schema(&d.data.schema())?.encode(d.data.columns(), d.len())?)
        } else {
            None
        };
        let reach = self.reach_masks(d.len(), &filters, &views);
        Ok(Prepared { key_cols, keys, views, values, filters, reach, rows })
    }

    /// The changes of `d` and the order (and multiplicity) to apply them in, over the rows
    /// `range`: as given, unless a floating-point sum is kept (SUM of floats, AVG). Float
    /// addition is not associative, so such sums would depend on the order rows arrive in (a
    /// join's output order, the batching of the input): then equal rows are merged and applied
    /// in the order of their encoded bytes, the same whatever the arrival.
    fn apply_order(
        d: &ChangeBatch,
        p: &Prepared,
        range: Range<usize>,
    ) -> Result<Vec<(usize, i64)>> {
        let Some(rows) = &p.rows else {
            return Ok(range.map(|i| (i, d.diffs[i])).collect());
        };
        let keys = &p.keys;
        let mut idx: Vec<usize> = range.collect();
        idx.sort_by(|&a, &b| {
            keys.get(a).cmp(keys.get(b)).then_with(|| rows.get(a).cmp(rows.get(b)))
        });
        let mut out: Vec<(usize, i64)> = Vec::with_capacity(idx.len());
        for i in idx {
            match out.last_mut() {
                Some((j, diff)) if keys.get(*j) == keys.get(i) && rows.get(*j) == rows.get(i) => {
                    *diff += d.diffs[i];
                }
                _ => out.push((i, d.diffs[i])),
            }
        }
        out.retain(|(_, diff)| *diff != 0);
        Ok(out)
    }

    /// Applies input row i with multiplicity `diff` to its group, taking the group's old
    /// output first if this is the instant's first change to it.
    fn apply(
        &mut self,
        p: &Prepared,
        i: usize,
        diff: i64,
        touched: &mut Vec<Touched>,
        old: &mut Vec<Out>,
    ) -> Result<()> {
        if diff == 0 {
            // No change: an insert-only MIN/MAX or DISTINCT set would take it for a value.
            return Ok(());
        }
        if diff < 0 && self.append_only {
            return Err(WeirError::internal(
                "an aggregate planned over an insert-only input saw a retraction",
            ));
        }
        let key = p.keys.get(i);
        let scalar = self.keys.is_empty();
        let id = self.slot_of(key);
        let group = &mut self.slots[id as usize];
        if group.mark != self.epoch {
            group.mark = self.epoch;
            let at = if scalar || group.rows > 0 {
                let at = old.len() as u32;
                Self::output_into(&self.aggs, &self.places, group, old)?;
                Some(at)
            } else {
                None
            };
            touched.push((sort_prefix(key), id, at, i as u32));
        }
        self.accumulate(id, p, i, diff)
    }

    /// Adds input row i of `p` with multiplicity `diff` to the group in slot `id`: its row
    /// count and its accumulators.
    #[inline]
    fn accumulate(&mut self, id: u32, p: &Prepared, i: usize, diff: i64) -> Result<()> {
        let group = &mut self.slots[id as usize];
        group.rows += diff;
        for &a in &self.plain_aggs {
            if !Self::reaches(&self.aggs, p, a, i) {
                continue;
            }
            let view = &p.views[a];
            let value = p.values[a].as_ref().map(|v| v.get(i));
            Self::add_to(&mut group.counts, &mut group.accs, self.places[a], view, i, value, diff)?;
        }
        // DISTINCT: one map lookup per set; a member's aggregate sees a value when its count
        // for it turns positive, and loses it when the count returns to 0.
        for (s, members) in self.distinct_sets.iter().enumerate() {
            let reaches = |a: usize| Self::reaches(&self.aggs, p, a, i);
            if !members.iter().any(|&a| reaches(a)) {
                continue;
            }
            let v = p.values[members[0]]
                .as_ref()
                .map(|v| v.get(i))
                .ok_or_else(|| WeirError::internal("distinct value"))?;
            let (counts, accs, places) = (&mut group.counts, &mut group.accs, &self.places);
            group.seen[s].change(
                v,
                members.len(),
                diff,
                |m| reaches(members[m]),
                |m, change| {
                    let a = members[m];
                    Self::add_to(counts, accs, places[a], &p.views[a], i, Some(v), change)
                },
            )?;
        }
        Ok(())
    }

    /// Whether row i of `p` reaches aggregate a: its FILTER holds, and its argument is not
    /// NULL unless the aggregate takes NULLs (COUNT(*) has none).
    #[inline]
    fn reaches(aggs: &[AggSpec], p: &Prepared, a: usize, i: usize) -> bool {
        if let Some(m) = p.reach.get(i) {
            return m >> a & 1 == 1;
        }
        let func = aggs[a].func;
        p.filters[a].as_ref().is_none_or(|f| f.value(i))
            && !(func != AggFunc::CountStar && func.skips_nulls() && p.views[a].is_null(i))
    }

    /// Per row of `n`, the aggregates it reaches as bits (see [`Prepared::reach`]): a batch's
    /// FILTERs and NULLs read once per aggregate, so that each row's updates test one bit each.
    fn reach_masks(
        &self,
        n: usize,
        filters: &[Option<BooleanArray>],
        views: &[ArgView],
    ) -> Vec<u64> {
        if self.aggs.len() > 64 {
            return Vec::new();
        }
        // The aggregates every row reaches, then the others row by row.
        let mut all = 0u64;
        let mut some = Vec::new();
        for (a, spec) in self.aggs.iter().enumerate() {
            let nulls = spec.func != AggFunc::CountStar
                && spec.func.skips_nulls()
                && views[a].null_count() > 0;
            if filters[a].is_none() && !nulls {
                all |= 1 << a;
            } else {
                some.push((a, nulls));
            }
        }
        let mut reach = vec![all; n];
        for (a, nulls) in some {
            let bit = 1u64 << a;
            let view = &views[a];
            match &filters[a] {
                Some(f) => {
                    for i in f.values().set_indices() {
                        if !(nulls && view.is_null(i)) {
                            reach[i] |= bit;
                        }
                    }
                }
                None => {
                    for (i, r) in reach.iter_mut().enumerate() {
                        if !view.is_null(i) {
                            *r |= bit;
                        }
                    }
                }
            }
        }
        reach
    }

    /// One instant `t`: applies the rows `range` of `d` and emits the touched groups' changes
    /// (sorted by key) into `out`.
    fn instant(
        &mut self,
        t: Time,
        d: &ChangeBatch,
        p: Option<&Prepared>,
        range: Range<usize>,
        out: &mut Emitted,
    ) -> Result<()> {
        self.epoch += 1;
        let mut touched = std::mem::take(&mut self.touched);
        let mut old = std::mem::take(&mut self.old);
        let mut new = std::mem::take(&mut self.new);
        touched.clear();
        old.clear();
        if !self.started {
            self.started = true;
            if self.keys.is_empty() {
                let id = self.alloc(&[]);
                self.slots[id as usize].mark = self.epoch;
                touched.push((sort_prefix(&[]), id, None, 0));
            }
        }
        if let Some(p) = p.filter(|_| !range.is_empty()) {
            if self.float_order {
                for (i, diff) in Self::apply_order(d, p, range)? {
                    self.apply(p, i, diff, &mut touched, &mut old)?;
                }
            } else {
                for i in range {
                    self.apply(p, i, d.diffs[i], &mut touched, &mut old)?;
                }
            }
        }
        let slots = &self.slots;
        touched.sort_unstable_by(|a, b| key_order(slots, (a.0, a.1), (b.0, b.1)));
        let n = self.aggs.len();
        for &(_, id, old_at, row) in &touched {
            let g = &self.slots[id as usize];
            let key = Self::key_of(self.keys_from_input, g, row);
            self.dirty.note(&g.key[..], self.index.len());
            new.clear();
            let exists = self.exists(g);
            if exists {
                Self::output_into(&self.aggs, &self.places, g, &mut new)?;
            }
            let old_range = old_at.map(|at| at as usize..at as usize + n);
            let changed = old_range.clone().map(|r| &old[r]) != exists.then_some(&new[..]);
            if changed {
                if let Some(r) = old_range {
                    out.push(key, &mut old[r], t, -1);
                }
                if exists {
                    out.push(key, &mut new, t, 1);
                }
            }
            if !self.keys.is_empty() && g.rows == 0 {
                self.release(id);
            }
        }
        self.touched = touched;
        self.old = old;
        self.new = new;
        Ok(())
    }

    /// One instant `t` of a grouped aggregate whose only change is row `i` of `d`: what
    /// [`Aggregate::instant`] does for it, with the group's old and new rows written straight
    /// into `out` (most instants of a stream's aggregate are one element, as each of q16's
    /// bids is) and taken back out if their values are equal.
    fn instant_of_row(
        &mut self,
        t: Time,
        d: &ChangeBatch,
        p: &Prepared,
        i: usize,
        known: Option<u32>,
        out: &mut Emitted,
    ) -> Result<()> {
        self.epoch += 1;
        let diff = d.diffs[i];
        if diff == 0 {
            // No change: an insert-only MIN/MAX or DISTINCT set would take it for a value.
            return Ok(());
        }
        if diff < 0 && self.append_only {
            return Err(WeirError::internal(
                "an aggregate planned over an insert-only input saw a retraction",
            ));
        }
        let id = match known {
            Some(id) => id,
            None => self.slot_of(p.keys.get(i)),
        };
        let group = &mut self.slots[id as usize];
        group.mark = self.epoch;
        let old_at = (group.rows > 0).then(|| out.len());
        if old_at.is_some() {
            let key = Self::key_of(self.keys_from_input, group, i as u32);
            out.push_group(&self.aggs, &self.places, group, key, t, -1)?;
        }
        self.accumulate(id, p, i, diff)?;
        let g = &self.slots[id as usize];
        self.dirty.note(&g.key[..], self.index.len());
        if g.rows > 0 {
            out.push_group(
                &self.aggs,
                &self.places,
                g,
                Self::key_of(self.keys_from_input, g, i as u32),
                t,
                1,
            )?;
            if let Some(at) = old_at.filter(|&at| out.same_values(at, at + 1)) {
                out.truncate(at);
            }
        } else if g.rows == 0 {
            self.release(id);
        }
        Ok(())
    }

    /// The output changes of the instants `(t, rows of d)`, in order.
    fn process(&mut self, d: &ChangeBatch, runs: &[(Time, Range<usize>)]) -> Result<ChangeBatch> {
        let p = if d.is_empty() { None } else { Some(self.prepare(d)?) };
        let mut out = std::mem::take(&mut self.emitted);
        out.clear(&self.kinds);
        // An input row changes at most one group, which gives at most two rows (and the
        // scalar aggregate's first row one more).
        out.reserve(2 * d.len() + 1);
        let result = self
            .emit(d, p.as_ref(), runs, &mut out)
            .and_then(|()| self.build(&mut out, p.as_ref()));
        self.emitted = out;
        result
    }

    fn emit(
        &mut self,
        d: &ChangeBatch,
        p: Option<&Prepared>,
        runs: &[(Time, Range<usize>)],
        out: &mut Emitted,
    ) -> Result<()> {
        let warming = p.filter(|_| {
            !self.keys.is_empty()
                && !self.distinct_sets.is_empty()
                && self.index.len() >= self.warm_from
        });
        // Rows below `warm` have been read ahead; `ids[i - ids_from]` is the slot read for row
        // i (NO_SLOT: its group did not exist). Over an insert-only input no group is removed
        // (so no slot reused) before the row reaches it, so the slot is the row's group then.
        let mut warm = 0;
        let mut ids = std::mem::take(&mut self.warm_ids);
        ids.clear();
        let mut ids_from = 0;
        for (t, range) in runs {
            if let Some(p) = warming {
                if range.end > warm {
                    let from = range.start.max(warm);
                    warm = (from + WARM_ROWS).max(range.end).min(d.len());
                    std::hint::black_box(self.warm(p, from..warm, &mut ids));
                    ids_from = from;
                }
            }
            match p {
                Some(p) if range.len() == 1 && self.started && !self.keys.is_empty() => {
                    let known = (ids.get(range.start.wrapping_sub(ids_from)).copied())
                        .filter(|&id| id != NO_SLOT && self.append_only);
                    self.instant_of_row(*t, d, p, range.start, known, out)?
                }
                _ => self.instant(*t, d, p, range.clone(), out)?,
            }
        }
        self.warm_ids = ids;
        Ok(())
    }

    /// Where the key of an output row of group `g` caused by input row `row` is, keys being
    /// taken from the input or not (see [`Aggregate::keys_from_input`]).
    #[inline]
    fn key_of(from_input: bool, g: &Group, row: u32) -> RowKey<'_> {
        if from_input {
            RowKey::Input(row)
        } else {
            RowKey::Bytes(&g.key)
        }
    }

    /// Reads ahead, for the rows `range` of `p`, the memory their groups are about to be
    /// updated in: the group index, each group's slot, its accumulators, and its DISTINCT
    /// sets (their headers, then their entries at the rows' values). Changes nothing (a row
    /// whose group is new is skipped), leaves in `ids` the slot of each row's group
    /// ([`NO_SLOT`] for a new one), and returns a word of what it read. Each pass reads for
    /// every row before the next pass,
    /// so the reads of one pass do not depend on one another and their cache misses overlap;
    /// row by row, a group of many (q16 has ten thousand cold channels a day) costs a chain
    /// of misses, each waiting for the one before.
    fn warm(&self, p: &Prepared, range: Range<usize>, ids: &mut Vec<u32>) -> u64 {
        let mut seen = 0u64;
        ids.clear();
        ids.extend(
            range.clone().map(|i| self.index.get(&Probe(p.keys.get(i))).map_or(NO_SLOT, |&id| id)),
        );
        let found: Vec<(usize, &Group)> = range
            .zip(ids.iter())
            .filter_map(|(i, &id)| Some((i, self.slots.get(id as usize)?)))
            .collect();
        for (_, g) in &found {
            seen ^= g.rows as u64 ^ g.accs.len() as u64 ^ g.seen.len() as u64;
        }
        for (_, g) in &found {
            // Counts are 8 bytes, accumulators 32: one read per 64 bytes, and the last (an
            // array need not start a line, and then ends on one more).
            for n in g.counts.iter().step_by(8).chain(g.counts.last()) {
                seen ^= *n as u64;
            }
            for st in g.accs.iter().step_by(2).chain(g.accs.last()) {
                seen ^= st.acc.peek();
            }
            for set in &g.seen {
                seen ^= set.len() as u64;
            }
        }
        for (i, g) in &found {
            for (set, members) in g.seen.iter().zip(&self.distinct_sets) {
                if let Some(v) = p.values[members[0]].as_ref() {
                    seen ^= set.peek(v.get(*i));
                }
            }
        }
        seen
    }

    /// The changes collected in `out`, as a batch; `p` is the input the rows' keys were
    /// taken from, if they were (see [`Emitted`]).
    fn build(&self, out: &mut Emitted, p: Option<&Prepared>) -> Result<ChangeBatch> {
        let n = out.diffs.len();
        if n == 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let mut cols = match p {
            Some(p) if out.key_rows.len() == n && out.key_ends.is_empty() => {
                let rows = UInt32Array::from(std::mem::take(&mut out.key_rows));
                let cols = (p.key_cols.iter())
                    .map(|c| arrow::compute::take(c, &rows, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let (_, buf, _) = rows.into_parts();
                // The index buffer goes back for the next call, if it is not shared.
                if let Ok(v) = buf.into_inner().into_vec::<u32>() {
                    out.key_rows = v;
                    out.key_rows.clear();
                }
                cols
            }
            _ if out.key_ends.len() == n && out.key_rows.is_empty() => {
                let mut start = 0;
                let keys = out.key_ends.iter().map(|&end| {
                    let k = &out.key_bytes[start..end];
                    start = end;
                    k
                });
                self.key_codec.decode(keys)?
            }
            _ => return Err(WeirError::internal("an aggregate's output rows without their keys")),
        };
        let mut words: Vec<Option<(Vec<u64>, Option<NullBuffer>)>> =
            out.word_columns().into_iter().map(Some).collect();
        for a in 0..out.cols.len() {
            let arr = match &mut out.cols[a] {
                OutCol::Word(j) => {
                    let (vals, nulls) = (words.get_mut(*j).and_then(Option::take))
                        .ok_or_else(|| WeirError::internal("an aggregate's column of words"))?;
                    self.finish_words(a, vals, nulls)?
                }
                OutCol::Outs(vals) => {
                    let arr = self.finish_outs(a, vals);
                    vals.clear();
                    arr?
                }
            };
            cols.push(arr);
        }
        let data = batch_of(&self.schema, cols, n)?;
        let times = std::mem::replace(&mut out.times, Vec::with_capacity(n));
        let diffs = std::mem::replace(&mut out.diffs, Vec::with_capacity(n));
        Ok(ChangeBatch::new(data, times, diffs))
    }
}

/// Pre-aggregation (see [`panes`]): groups fed without output, then emitted all at once.
impl Aggregate {
    /// Applies the rows `range` of `d` (prepared as `p`) to their groups and emits nothing.
    fn absorb(&mut self, d: &ChangeBatch, p: &Prepared, range: Range<usize>) -> Result<()> {
        // `apply` takes a group's old output at its first change in an instant; with no new
        // instant, only a new group (which has none) or the scalar group is first.
        let mut touched = std::mem::take(&mut self.touched);
        let mut old = std::mem::take(&mut self.old);
        let result = if self.float_order {
            Self::apply_order(d, p, range).and_then(|order| {
                order
                    .into_iter()
                    .try_for_each(|(i, diff)| self.apply(p, i, diff, &mut touched, &mut old))
            })
        } else {
            range.into_iter().try_for_each(|i| self.apply(p, i, d.diffs[i], &mut touched, &mut old))
        };
        touched.clear();
        old.clear();
        self.touched = touched;
        self.old = old;
        result
    }

    /// Merging windows of partial rows (see [`windows`]): the groups stay between windows,
    /// each row's group is found once, and a window resets its groups as it first touches
    /// them. The slot of each row of `p`, its group created (empty) if new.
    fn slots_of(&mut self, p: &Prepared, n: usize) -> Vec<u32> {
        (0..n).map(|i| self.slot_of(p.keys.get(i))).collect()
    }

    /// Starts a window: the groups it touches start empty.
    fn begin_window(&mut self) {
        self.epoch += 1;
        self.touched.clear();
    }

    /// Adds row i of `p` (an insertion) to the current window's group in slot `id`.
    fn add_in_window(&mut self, id: u32, p: &Prepared, i: usize) -> Result<()> {
        if self.slots[id as usize].mark != self.epoch {
            self.reset_group(id);
            let g = &mut self.slots[id as usize];
            g.mark = self.epoch;
            self.touched.push((sort_prefix(&g.key), id, None, i as u32));
        }
        self.accumulate(id, p, i, 1)
    }

    /// The current window's groups, inserted at `t` in key order.
    fn window_rows(&mut self, t: Time) -> Result<ChangeBatch> {
        let mut touched = std::mem::take(&mut self.touched);
        let slots = &self.slots;
        // Each pane's rows come in key order, so the groups are a few sorted runs (a group's
        // first pane, then the new groups of each later one): a stable sort merges the runs.
        touched.sort_by(|a, b| key_order(slots, (a.0, a.1), (b.0, b.1)));
        let batch = self.output_groups(touched.iter().map(|g| g.1), t);
        self.touched = touched;
        batch
    }

    /// The groups in slots `ids` that have rows, in that order, inserted at `t`.
    fn output_groups(&mut self, ids: impl Iterator<Item = u32>, t: Time) -> Result<ChangeBatch> {
        let mut out = std::mem::take(&mut self.emitted);
        out.clear(&self.kinds);
        let mut result = Ok(());
        for id in ids {
            let g = &self.slots[id as usize];
            if g.rows <= 0 {
                continue;
            }
            // Each value written straight into its place (no row of values built first).
            result = out.push_group(&self.aggs, &self.places, g, RowKey::Bytes(&g.key), t, 1);
            if result.is_err() {
                break;
            }
        }
        let batch = result.and_then(|()| self.build(&mut out, None));
        self.emitted = out;
        batch
    }

    /// Every group with rows, inserted at `t` in key order; the aggregate is left empty.
    fn drain(&mut self, t: Time) -> Result<ChangeBatch> {
        // In key order: by the keys' prefixes, then (rarely) the whole keys.
        let mut ids: Vec<(u128, u32)> =
            self.index.iter().map(|(key, &id)| (sort_prefix(key), id)).collect();
        let slots = &self.slots;
        ids.sort_unstable_by(|a, b| key_order(slots, *a, *b));
        let batch = self.output_groups(ids.iter().map(|g| g.1), t);
        // The slots stay allocated for the next pane's groups.
        self.index.clear();
        for (_, id) in ids {
            self.empty_slot(id);
        }
        batch
    }
}
