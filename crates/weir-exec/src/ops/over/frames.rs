//! Window functions with frames over a relation: `LAG(x, n, d)`, `LEAD(x, n, d)`,
//! `FIRST_VALUE(x)`, `LAST_VALUE(x)` and `COUNT/SUM/AVG/MIN/MAX(x)` `OVER (PARTITION BY p
//! ORDER BY o frame)`, maintained incrementally per partition.
//!
//! Output: every input row followed by one value per function. A partition (rows with equal
//! p, NULLs equal) is ordered by (o, row) as for the ranking (see [`super`]): ties in o are
//! broken by the whole row's value, so a row's position, hence LAG/LEAD and ROWS frames, is
//! deterministic; each copy of a duplicated row has its own position. With positions
//! 0..n and the current row at j:
//! - `LAG(x, k, d)`: x of the row at j − k, or d (evaluated on the current row; NULL when
//!   omitted) if j < k; `LEAD(x, k, d)`: x at j + k, or d past the end;
//! - `ROWS BETWEEN a AND b`: the rows at positions j + a ..= j + b (offsets signed, clamped
//!   to the partition);
//! - `RANGE BETWEEN a AND b`: CURRENT ROW is the first (start) or last (end) of the row's
//!   peers (equal o); `v PRECEDING/FOLLOWING` bounds the ORDER BY value (one integer or
//!   TIMESTAMP term) to [o − v, o + v] in the ORDER BY's direction; a row whose o is NULL has
//!   its peers (the NULL rows) as those bounds, as in PostgreSQL;
//! - `FIRST_VALUE`/`LAST_VALUE`: x of the frame's first/last row (NULL when it is empty);
//!   aggregates: COUNT(*) counts the frame's rows, the others skip NULLs (NULL over no value,
//!   COUNT(x) 0).
//!
//! Delta semantics: at each instant τ, for each partition that ΔR touches (only those), let
//! lo and hi be the smallest and largest (o, row) that change. A row's values depend only on
//! the rows within an extent before and after it (LAG k: k rows before; LEAD k: k after;
//! a ROWS frame: its offsets; a RANGE bound: the row's peers, or the whole partition when it
//! is UNBOUNDED or an offset; UNBOUNDED: the partition's end), so the rows whose values can
//! change lie between lo moved back by the "after" extent and hi moved forward by the
//! "before" extent (the rows before lo and after hi are the same before and after ΔR). The
//! region's values before ΔR are the ones last output, which the operator keeps with each
//! row; it computes their values after ΔR (from a context of the extents around it), keeps
//! them in turn, and emits the bag difference: −(row, old values) and
//! +(row, new values) for exactly the rows whose values changed, plus the rows that entered
//! or left. Work per touched partition: O(log n + region + extents) for LAG/LEAD and
//! bounded ROWS frames (e.g. a change costs O(k) for LAG(x, k)), O(n) when a bound is
//! UNBOUNDED or a RANGE offset (SQL's default frame with ORDER BY is RANGE UNBOUNDED
//! PRECEDING: every later row's running value changes anyway). Other partitions cost
//! nothing.
//!
//! Each touched partition is walked once back from lo (to where the context starts) and once
//! forward from there (through hi to where the context ends). A partition of up to `SMALL`
//! entries is a sorted vector, where the walks are one binary search and a slice, and a row
//! that replaces another at the same place is written over it; a larger one is a B-tree, one
//! descent per walk and per change. Each row keeps, besides its output values, the
//! functions' arguments evaluated when it entered (see `Kept`), so a region is evaluated from
//! those, without decoding its rows.
//!
//! State: every input row per partition, ordered by (o, row), with its multiplicity, the
//! encoded values of each copy as last output and its kept arguments; checkpointed as section
//! `over_rel` (`part`, `key`, `row` Binary, `count` Int64), sorted, without the values and
//! arguments, which a restore computes again from each partition's rows.

use std::collections::{btree_map, BTreeMap};
use std::ops::Bound;

use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, UInt64Array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::hash_map::EntryRef;
use datafusion_common::{HashMap, ScalarValue};
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{AggFunc, FrameBound, OverFunc, WindowFrame};

use super::agg::{df, Acc};
use super::frame_agg::{frame_values, frame_values_into, NumArg, NumRunning, ScalarRunning};
use super::partition::Key as KeyRef;
use super::{
    by_instant, cmp_key, for_each_partition, retracted, EncodedBatch, NetChange, OverKeys,
};
use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::numeric_row::{Num, NumType, NumericRow};
use crate::operator::{take_inputs, Operator, Step};
use crate::row::{cmp_bytes, eq_bytes, sort_prefix, EncodedRows, Probe, RowBytes, RowCodec};
use crate::state::{binary_col, i64_col, invalid, nonzero, signature, StateReader, StateWriter};

/// One window function: what it computes, its argument and default, their types.
#[derive(Debug)]
pub struct OverRelSpec {
    pub func: OverFunc,
    pub arg: Option<ScalarExpr>,
    pub arg_type: DataType,
    pub default: Option<ScalarExpr>,
    pub out_type: DataType,
    pub frame: WindowFrame,
}

/// (order key, row).
type Key = (RowBytes, RowBytes);

/// One entry of a partition: its multiplicity, the encoded function values of each copy as
/// last output (copies have positions of their own, so values of their own), and what the
/// row keeps of itself for the functions (see [`Kept`]).
#[derive(Debug, Default)]
struct Slot {
    count: i64,
    vals: Vec<RowBytes>,
    args: RowBytes,
}

/// The values of its copies and its kept arguments.
impl HeapSize for Slot {
    fn heap_bytes(&self) -> usize {
        self.vals.heap_bytes() + self.args.heap_bytes()
    }
}

/// What a row keeps of itself for the functions, evaluated once, when it enters its
/// partition: each call's argument and default and the ORDER BY value of a RANGE offset
/// frame, in one encoded row. A region is evaluated from these (a decode of the few columns
/// the functions read), not from its rows (a decode of every column, then the expressions).
#[derive(Debug)]
struct Kept {
    exprs: Vec<(ScalarExpr, DataType)>,
    codec: RowCodec,
    /// Per call: the columns of its argument and of its default.
    arg: Vec<Option<usize>>,
    default: Vec<Option<usize>>,
    /// The column of the ORDER BY value (RANGE offset frames only).
    ord: Option<usize>,
}

impl Kept {
    fn new(calls: &[OverRelSpec], order_val: Option<&ScalarExpr>) -> Result<Kept> {
        let mut exprs: Vec<(ScalarExpr, DataType)> = Vec::new();
        let mut keep = |e: Option<&ScalarExpr>, t: &DataType| {
            e.map(|e| {
                exprs.push((e.clone(), t.clone()));
                exprs.len() - 1
            })
        };
        let mut arg = Vec::with_capacity(calls.len());
        let mut default = Vec::with_capacity(calls.len());
        for c in calls {
            arg.push(keep(c.arg.as_ref(), &c.arg_type));
            default.push(keep(c.default.as_ref(), &c.arg_type));
        }
        let ord = keep(order_val, &DataType::Int64);
        let codec = RowCodec::new(exprs.iter().map(|(_, t)| t.clone()).collect())?;
        Ok(Kept { exprs, codec, arg, default, ord })
    }

    /// The kept values of every row of `batch`, encoded (by `numeric` when given, straight
    /// from the columns).
    fn encode(
        &self,
        batch: &arrow::record_batch::RecordBatch,
        numeric: Option<&Numeric>,
    ) -> Result<Values> {
        let cols: Vec<ArrayRef> =
            self.exprs.iter().map(|(e, t)| e.eval_as(batch, t)).collect::<Result<_>>()?;
        let n = batch.num_rows();
        match numeric {
            Some(num) => Values::write(num.kept.types().len(), n, |r, out| {
                for (c, t) in cols.iter().zip(num.kept.types()) {
                    NumericRow::push(num_at(c, *t, r), out);
                }
            }),
            None => Ok(Values::Rows(self.codec.encode(&cols, n)?)),
        }
    }
}

/// Value `r` of a BIGINT or DOUBLE column.
fn num_at(c: &ArrayRef, t: NumType, r: usize) -> Num {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int64Type};
    if c.is_null(r) {
        return Num::Null;
    }
    match t {
        NumType::Int => Num::Int(c.as_primitive::<Int64Type>().value(r)),
        NumType::Float => Num::Float(c.as_primitive::<Float64Type>().value(r)),
    }
}

/// Encoded rows: the codec's, or written by [`Numeric`] (the same bytes, see
/// `crate::numeric_row`) into one buffer, `width` bytes each.
enum Values {
    Rows(EncodedRows),
    Flat { bytes: Vec<u8>, width: usize, n: usize },
}

impl Values {
    /// `n` rows of `cols` BIGINT or DOUBLE columns, each written by `row(r, out)`.
    fn write(cols: usize, n: usize, row: impl FnMut(usize, &mut Vec<u8>)) -> Result<Values> {
        Self::write_into(Vec::new(), cols, n, row)
    }

    /// [`Values::write`] into the room of `bytes` (cleared first).
    fn write_into(
        mut bytes: Vec<u8>,
        cols: usize,
        n: usize,
        mut row: impl FnMut(usize, &mut Vec<u8>),
    ) -> Result<Values> {
        let width = cols * crate::numeric_row::WIDTH;
        bytes.clear();
        bytes.reserve(width * n);
        for r in 0..n {
            row(r, &mut bytes);
            if bytes.len() != width * (r + 1) {
                return Err(WeirError::internal("a numeric row of another width"));
            }
        }
        Ok(Values::Flat { bytes, width, n })
    }

    fn get(&self, i: usize) -> &[u8] {
        match self {
            Values::Rows(r) => r.get(i),
            Values::Flat { bytes, width, .. } => &bytes[i * width..(i + 1) * width],
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::Rows(r) => r.len(),
            Values::Flat { n, .. } => *n,
        }
    }
}

/// Buffers [`Funcs::evaluate`] reuses from one region to the next (a change evaluates a
/// region of a few rows, so allocating its buffers each time would cost more than the
/// arithmetic): each copy's peer group, the region's copies, the kept columns read, the
/// frames, each call's values and the room of the values written.
#[derive(Debug, Default)]
struct Scratch {
    peers: Vec<(usize, usize)>,
    in_region: Vec<usize>,
    cols: Vec<NumCol>,
    frames: Vec<(usize, usize)>,
    per_call: Vec<Vec<Num>>,
    out: Vec<u8>,
}

impl Scratch {
    /// Takes back the room of `vals` once they are used.
    fn give_back(&mut self, vals: Option<Values>) {
        if let Some(Values::Flat { bytes, .. }) = vals {
            self.out = bytes;
        }
    }
}

/// The shortcut of [`Funcs::evaluate`] when the kept arguments and the functions' values are
/// all BIGINT or DOUBLE, and each function is a navigation or one [`NumRunning`] computes: a
/// region is evaluated from values read out of the kept rows and its values are written as
/// rows, without Arrow arrays, which cost more than the few rows of a small frame's region
/// (a change under `AVG(x) OVER (... ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)` evaluates
/// about 20). The bytes are the codec's, so either path reads what the other wrote.
#[derive(Debug)]
struct Numeric {
    kept: NumericRow,
    vals: NumericRow,
}

impl Numeric {
    fn new(calls: &[OverRelSpec], kept: &Kept, vals: &RowCodec) -> Option<Numeric> {
        let computes = calls.iter().enumerate().all(|(i, c)| match c.func {
            OverFunc::Agg(f) => {
                NumRunning::computes(f, kept.arg[i].map(|_| &c.arg_type), &c.out_type)
            }
            _ => kept.arg[i].is_some() && c.arg_type == c.out_type,
        });
        if !computes {
            return None;
        }
        Some(Numeric { kept: NumericRow::of(&kept.codec)?, vals: NumericRow::of(vals)? })
    }
}

/// One kept column's values, read from the rows.
#[derive(Debug)]
enum NumCol {
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
}

impl NumCol {
    /// Column `c` of `rows` (rows of `layout`), in place of `self`'s values (whose room is
    /// reused when the type is the same).
    fn read_into<'r>(
        &mut self,
        layout: &NumericRow,
        c: usize,
        rows: impl Iterator<Item = &'r [u8]>,
    ) {
        match (layout.types()[c], &mut *self) {
            (NumType::Int, NumCol::Int(v)) => {
                v.clear();
                v.extend(rows.map(|r| layout.get(r, c).as_int()));
            }
            (NumType::Float, NumCol::Float(v)) => {
                v.clear();
                v.extend(rows.map(|r| layout.get(r, c).as_float()));
            }
            _ => *self = NumCol::read(layout, c, rows),
        }
    }

    /// Column `c` of `rows` (rows of `layout`).
    fn read<'r>(layout: &NumericRow, c: usize, rows: impl Iterator<Item = &'r [u8]>) -> NumCol {
        match layout.types()[c] {
            NumType::Int => NumCol::Int(rows.map(|r| layout.get(r, c).as_int()).collect()),
            NumType::Float => NumCol::Float(rows.map(|r| layout.get(r, c).as_float()).collect()),
        }
    }

    fn get(&self, i: usize) -> Num {
        match self {
            NumCol::Int(v) => v[i].map_or(Num::Null, Num::Int),
            NumCol::Float(v) => v[i].map_or(Num::Null, Num::Float),
        }
    }

    fn arg(&self) -> NumArg<'_> {
        match self {
            NumCol::Int(v) => NumArg::Ints(v),
            NumCol::Float(v) => NumArg::Floats(v),
        }
    }
}

/// One partition's entries, (order key, row) -> its slot, in order: a sorted vector while it
/// holds at most [`SMALL`] entries, a B-tree beyond (and from then on).
///
/// A change touches a few neighbouring entries (its region and context, see the module
/// docs). In a vector they are a slice found by one binary search, and a row that replaces
/// another at the same place (an aggregate's new value under the same order key) is written
/// over it, key and arguments in their own room; a B-tree walks its nodes for each, removes
/// and inserts. A vector's insertion and removal move the entries after it, which is why a
/// large partition is a B-tree.
#[derive(Debug)]
enum Partition {
    Small(Vec<Entry>),
    Large(BTreeMap<Key, Slot>),
}

/// An entry of a partition in a vector, with its order key's [`sort_prefix`]: a binary search
/// compares numbers held in the vector and reads an entry's key (behind a pointer) only when
/// the first 16 bytes of the order keys agree.
#[derive(Debug)]
struct Entry {
    prefix: u128,
    key: Key,
    slot: Slot,
}

impl Entry {
    fn new(key: Key, slot: Slot) -> Entry {
        Entry { prefix: sort_prefix(&key.0), key, slot }
    }

    /// How the entry orders against the (order key, row) `e` whose order key's prefix is
    /// `prefix`.
    #[inline]
    fn cmp(&self, prefix: u128, e: KeyRef<'_>) -> std::cmp::Ordering {
        self.prefix.cmp(&prefix).then_with(|| cmp_key((&self.key.0, &self.key.1), e))
    }
}

/// Its key and slot.
impl HeapSize for Entry {
    fn heap_bytes(&self) -> usize {
        self.key.heap_bytes() + self.slot.heap_bytes()
    }
}

/// The entries a partition holds in a sorted vector before it becomes a B-tree. An insertion
/// or removal moves the entries after it (96 bytes each, 48 KB at most), which in a
/// partition that grows at its end (rows ordered by time) is a few; a row replacing another
/// moves none.
const SMALL: usize = 512;

impl Default for Partition {
    fn default() -> Self {
        Partition::Small(Vec::new())
    }
}

impl Partition {
    fn is_empty(&self) -> bool {
        match self {
            Partition::Small(v) => v.is_empty(),
            Partition::Large(m) => m.is_empty(),
        }
    }

    /// The entries in order.
    fn iter(&self) -> Box<dyn Iterator<Item = (&Key, &Slot)> + '_> {
        match self {
            Partition::Small(v) => Box::new(v.iter().map(|e| (&e.key, &e.slot))),
            Partition::Large(m) => Box::new(m.iter()),
        }
    }

    /// The entries of `m` in the form for their number.
    fn of(m: BTreeMap<Key, Slot>, small: usize) -> Partition {
        if m.len() <= small {
            Partition::Small(m.into_iter().map(|(k, s)| Entry::new(k, s)).collect())
        } else {
            Partition::Large(m)
        }
    }
}

impl HeapSize for Partition {
    fn heap_bytes(&self) -> usize {
        match self {
            Partition::Small(v) => v.heap_bytes(),
            Partition::Large(m) => m.heap_bytes(),
        }
    }
}

/// An entry as [`Funcs::evaluate`] and [`update_values`] read it: a vector's own, or a
/// B-tree's borrowed.
trait EntryView {
    fn key(&self) -> &Key;
    fn slot(&self) -> &Slot;
    fn parts(&mut self) -> (&Key, &mut Slot);
}

impl EntryView for Entry {
    fn key(&self) -> &Key {
        &self.key
    }
    fn slot(&self) -> &Slot {
        &self.slot
    }
    fn parts(&mut self) -> (&Key, &mut Slot) {
        (&self.key, &mut self.slot)
    }
}

impl EntryView for (&Key, &mut Slot) {
    fn key(&self) -> &Key {
        self.0
    }
    fn slot(&self) -> &Slot {
        self.1
    }
    fn parts(&mut self) -> (&Key, &mut Slot) {
        (self.0, &mut *self.1)
    }
}

/// A partition entry's (order key, row), owned or borrowed, so that a partition is searched
/// with borrowed bytes (a change's encodings, a copy kept for reuse) without allocating a
/// key: the B-tree is searched by `dyn KeyView`, which orders as the owned key does.
trait KeyView {
    fn view(&self) -> KeyRef<'_>;
}

impl KeyView for Key {
    fn view(&self) -> KeyRef<'_> {
        (&self.0, &self.1)
    }
}

impl KeyView for KeyRef<'_> {
    fn view(&self) -> KeyRef<'_> {
        *self
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.view() == other.view()
    }
}

impl Eq for dyn KeyView + '_ {}

impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        cmp_key(self.view(), other.view())
    }
}

impl<'a> std::borrow::Borrow<dyn KeyView + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

/// Buffers reused by the runs of a step: the run's changes in order, netted per entry (each
/// with the index of one of its input rows), and room for a copy of a context's first entry.
#[derive(Default)]
struct RunBufs<'e> {
    order: Vec<usize>,
    changes: Vec<NetChange<'e>>,
    start: (Vec<u8>, Vec<u8>),
}

/// A saved entry: partition key, order key, row, count.
type StateEntry<'a> = (&'a [u8], &'a [u8], &'a [u8], i64);

/// How far a row's values reach (before or after it): `rows` rows, then the rest of that
/// row's peers if `peers`, or the whole partition if `all`.
#[derive(Debug, Clone, Copy, Default)]
struct Extent {
    rows: u64,
    peers: bool,
    all: bool,
}

impl Extent {
    const ALL: Extent = Extent { rows: 0, peers: false, all: true };
    const PEERS: Extent = Extent { rows: 0, peers: true, all: false };

    fn rows(n: i64) -> Extent {
        Extent { rows: n.max(0) as u64, peers: false, all: false }
    }

    fn max(self, o: Extent) -> Extent {
        Extent { rows: self.rows.max(o.rows), peers: self.peers || o.peers, all: self.all || o.all }
    }
}

/// The extents (before, after) of the rows one function's value at a row depends on.
fn extents(func: OverFunc, f: &WindowFrame) -> (Extent, Extent) {
    let zero = Extent::default();
    match func {
        OverFunc::Lag(n) => (Extent::rows(n.min(i64::MAX as u64) as i64), zero),
        OverFunc::Lead(n) => (zero, Extent::rows(n.min(i64::MAX as u64) as i64)),
        _ => {
            let before = match (f.range, f.start) {
                (_, FrameBound::UnboundedPreceding) => Extent::ALL,
                (false, FrameBound::Preceding(n)) => Extent::rows(n),
                (true, FrameBound::Preceding(_)) => Extent::ALL,
                (true, FrameBound::CurrentRow | FrameBound::Following(_)) => Extent::PEERS,
                _ => zero,
            };
            let after = match (f.range, f.end) {
                (_, FrameBound::UnboundedFollowing) => Extent::ALL,
                (false, FrameBound::Following(n)) => Extent::rows(n),
                (true, FrameBound::Following(_)) => Extent::ALL,
                (true, FrameBound::CurrentRow | FrameBound::Preceding(_)) => Extent::PEERS,
                _ => zero,
            };
            (before, after)
        }
    }
}

/// A walk over the entries on one side of an edge, away from it, passing those within an
/// [`Extent`] of it: `rows` rows, then the rest of the last row's peers if `peers`, or every
/// entry if `all`.
struct Walk<'k> {
    ext: Extent,
    /// The rows passed.
    rows: u64,
    /// The order key of the last entry passed (at first, the edge's).
    last: &'k [u8],
}

impl<'k> Walk<'k> {
    fn new(ext: Extent, edge: &'k [u8]) -> Walk<'k> {
        Walk { ext, rows: 0, last: edge }
    }

    /// Whether the next entry (order key `key`, `count` copies) is within; if so, it is
    /// passed.
    fn pass(&mut self, key: &'k [u8], count: i64) -> bool {
        let within =
            self.ext.all || self.rows < self.ext.rows || (self.ext.peers && key == self.last);
        if within {
            self.rows = self.rows.saturating_add(count.max(0) as u64);
            self.last = key;
        }
        within
    }
}

#[derive(Debug)]
pub struct OverRel {
    keys: OverKeys,
    in_schema: SchemaRef,
    funcs: Funcs,
    schema: SchemaRef,
    /// How far before and after a row the rows its values depend on reach (all functions).
    before: Extent,
    after: Extent,
    parts: HashMap<RowBytes, Partition>,
    /// The entries a partition holds in a vector before it becomes a B-tree ([`SMALL`];
    /// tests set others to run either form).
    small: usize,
    /// The output buffer, kept between steps so that its room is reused.
    out: OutRows,
    /// The buffers of a region's evaluation.
    scratch: Scratch,
    /// How many entries the last touched partition's region and context held (tests).
    #[cfg(test)]
    last_entries: usize,
}

/// The functions, and how a region's values are computed (apart from the state, so that a
/// partition can be changed while they are read).
#[derive(Debug)]
struct Funcs {
    calls: Vec<OverRelSpec>,
    /// The ORDER BY's direction (RANGE offsets).
    descending: bool,
    /// The functions' values of one row.
    vals_codec: RowCodec,
    kept: Kept,
    /// The shortcut without arrays, when the types allow it.
    numeric: Option<Numeric>,
    /// Whether a function reads each row's peers (a RANGE frame's): without one, a
    /// region's evaluation does not compare neighbouring order keys to find them.
    peers: bool,
}

impl OverRel {
    pub fn new(
        keys: OverKeys,
        in_schema: SchemaRef,
        order_val: Option<(ScalarExpr, bool)>,
        calls: Vec<OverRelSpec>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let needs_value = calls.iter().any(|c| {
            !matches!(c.func, OverFunc::Lag(_) | OverFunc::Lead(_))
                && c.frame.range
                && [c.frame.start, c.frame.end]
                    .iter()
                    .any(|b| matches!(b, FrameBound::Preceding(_) | FrameBound::Following(_)))
        });
        if needs_value && order_val.is_none() {
            return Err(WeirError::internal("a RANGE offset frame without its ORDER BY value"));
        }
        let (mut before, mut after) = (Extent::default(), Extent::default());
        for c in &calls {
            let (b, a) = extents(c.func, &c.frame);
            before = before.max(b);
            after = after.max(a);
        }
        let (order_val, descending) = match order_val {
            Some((e, d)) if needs_value => (Some(e), d),
            _ => (None, false),
        };
        let kept = Kept::new(&calls, order_val.as_ref())?;
        let vals_codec = RowCodec::new(calls.iter().map(|c| c.out_type.clone()).collect())?;
        let numeric = Numeric::new(&calls, &kept, &vals_codec);
        let peers = calls
            .iter()
            .any(|c| !matches!(c.func, OverFunc::Lag(_) | OverFunc::Lead(_)) && c.frame.range);
        let funcs = Funcs { kept, descending, vals_codec, calls, numeric, peers };
        Ok(OverRel {
            funcs,
            keys,
            in_schema,
            schema,
            before,
            after,
            parts: HashMap::new(),
            small: SMALL,
            out: OutRows::default(),
            scratch: Scratch::default(),
            #[cfg(test)]
            last_entries: 0,
        })
    }

    fn signature(&self) -> String {
        let calls: Vec<String> = self
            .funcs
            .calls
            .iter()
            .map(|c| format!("{:?} {} {} {:?}", c.func, c.arg_type, c.out_type, c.frame))
            .collect();
        signature("over_rel", &self.schema, (self.keys.params(), self.funcs.descending, calls))
    }
}

impl Funcs {
    /// The frame [s, e) of the row at `j` of a context of `n` rows (see the module docs).
    fn frame_of(&self, f: &WindowFrame, j: usize, cx: &Context) -> (usize, usize) {
        let n = cx.peers.len();
        let clamp = |x: i128| x.clamp(0, n as i128) as usize;
        let pos = |b: FrameBound, end: bool| -> usize {
            let e = i128::from(end);
            match b {
                FrameBound::UnboundedPreceding => 0,
                FrameBound::UnboundedFollowing => n,
                FrameBound::CurrentRow if f.range => {
                    if end {
                        cx.peers[j].1
                    } else {
                        cx.peers[j].0
                    }
                }
                FrameBound::CurrentRow => j + usize::from(end),
                FrameBound::Preceding(k) | FrameBound::Following(k) if !f.range => {
                    let k = if matches!(b, FrameBound::Preceding(_)) { -k } else { k };
                    clamp(j as i128 + i128::from(k) + e)
                }
                FrameBound::Preceding(k) | FrameBound::Following(k) => {
                    let Some(ord) = cx.ord.as_ref().filter(|o| o.is_valid(j)) else {
                        return if end { cx.peers[j].1 } else { cx.peers[j].0 };
                    };
                    let k = if matches!(b, FrameBound::Preceding(_)) { -k } else { k };
                    // The target value, in the ORDER BY's direction.
                    let target = if self.descending {
                        i128::from(ord.value(j)) - i128::from(k)
                    } else {
                        i128::from(ord.value(j)) + i128::from(k)
                    };
                    let (lo, hi) = cx.non_null;
                    let seg = &ord.values()[lo..hi];
                    let desc = self.descending;
                    lo + seg.partition_point(|&x| {
                        let x = i128::from(x);
                        match (desc, end) {
                            (false, false) => x < target,
                            (false, true) => x <= target,
                            (true, false) => x > target,
                            (true, true) => x >= target,
                        }
                    })
                }
            }
        };
        let (s, e) = (pos(f.start, false), pos(f.end, true));
        (s, e.max(s))
    }

    /// The row whose argument a navigation function `c` gives at row `j` of `cx` (None: its
    /// default).
    fn nav_index(&self, c: &OverRelSpec, j: usize, cx: &Context) -> Option<u64> {
        let n = cx.peers.len() as u64;
        match c.func {
            OverFunc::Lag(k) => (j as u64).checked_sub(k),
            OverFunc::Lead(k) => (j as u64).checked_add(k).filter(|&i| i < n),
            OverFunc::FirstValue => {
                let (s, e) = self.frame_of(&c.frame, j, cx);
                (s < e).then_some(s as u64)
            }
            _ => {
                let (s, e) = self.frame_of(&c.frame, j, cx);
                (s < e).then(|| e as u64 - 1)
            }
        }
    }

    /// The values of the rows of `cx` at `region` (indices, ascending), one array per call.
    fn values(&self, cx: &Context, region: &[usize]) -> Result<Vec<ArrayRef>> {
        let mut out = Vec::with_capacity(self.calls.len());
        for (i, c) in self.calls.iter().enumerate() {
            let arg = self.kept.arg[i].map(|a| cx.cols[a].clone());
            let arr: ArrayRef = match c.func {
                OverFunc::Lag(_)
                | OverFunc::Lead(_)
                | OverFunc::FirstValue
                | OverFunc::LastValue => {
                    let arg =
                        arg.ok_or_else(|| WeirError::internal("navigation without argument"))?;
                    let idx: UInt64Array =
                        region.iter().map(|&j| self.nav_index(c, j, cx)).collect();
                    let taken = arrow::compute::take(&arg, &idx, None)?;
                    match self.kept.default[i] {
                        Some(d) => {
                            let d = &cx.cols[d];
                            let here: UInt64Array = region.iter().map(|&j| j as u64).collect();
                            let d = arrow::compute::take(d, &here, None)?;
                            let found: BooleanArray =
                                (0..idx.len()).map(|i| Some(idx.is_valid(i))).collect();
                            arrow::compute::kernels::zip::zip(&found, &taken, &d)?
                        }
                        None => taken,
                    }
                }
                OverFunc::Agg(func) => self.aggregate(c, func, arg.as_ref(), cx, region)?,
            };
            out.push(if arr.data_type() == &c.out_type {
                arr
            } else {
                arrow::compute::cast(&arr, &c.out_type)?
            });
        }
        Ok(out)
    }

    /// An aggregate over each region row's frame: a running accumulation when the frame
    /// starts at the partition's start (or ends at its end), else one pass per distinct frame.
    fn aggregate(
        &self,
        c: &OverRelSpec,
        func: AggFunc,
        arg: Option<&ArrayRef>,
        cx: &Context,
        region: &[usize],
    ) -> Result<ArrayRef> {
        let frames: Vec<(usize, usize)> =
            region.iter().map(|&j| self.frame_of(&c.frame, j, cx)).collect();
        let n = cx.peers.len();
        if let Some(mut fast) = NumRunning::new(func, arg, &c.arg_type, &c.out_type) {
            let vals = frame_values(&mut fast, &c.frame, &frames, n)?;
            if !fast.overflow {
                return Ok(NumRunning::array(vals, &c.out_type));
            }
        }
        let mut slow = ScalarRunning {
            acc: Acc::new(&c.arg_type)?,
            func,
            arg,
            arg_type: &c.arg_type,
            out_type: &c.out_type,
        };
        let vals = frame_values(&mut slow, &c.frame, &frames, n)?;
        ScalarValue::iter_to_array(vals).map_err(df)
    }

    /// The encoded values of each copy of the rows of `entries[region]`, in order, computed
    /// over `entries` (the region and its context, in order; `None`: the region is empty).
    /// `scratch` lends the numeric path its buffers (see [`Scratch`]).
    fn evaluate<E: EntryView>(
        &self,
        entries: &[E],
        region: std::ops::Range<usize>,
        scratch: &mut Scratch,
    ) -> Result<Option<Values>> {
        // Each copy's place among the copies, peer group (when a function reads it; else
        // all the copies as one) and whether it is in the region.
        let Scratch { peers, in_region, .. } = scratch;
        peers.clear();
        in_region.clear();
        let mut s = 0;
        let mut prev: Option<&[u8]> = None;
        for (i, (k, slot)) in entries.iter().map(|e| (e.key(), e.slot())).enumerate() {
            let inside = region.contains(&i);
            if self.peers && prev.is_some_and(|p| p != &k.0[..]) {
                let j = peers.len();
                peers[s..j].fill((s, j));
                s = j;
            }
            prev = Some(&k.0);
            for _ in 0..slot.count {
                if inside {
                    in_region.push(peers.len());
                }
                peers.push((0, 0));
            }
        }
        let n = peers.len();
        peers[s..n].fill((s, n));
        if in_region.is_empty() {
            return Ok(None);
        }
        // Each copy's kept arguments.
        let copies = || {
            entries.iter().map(EntryView::slot).flat_map(|slot| {
                std::iter::repeat_n(&slot.args[..], usize::try_from(slot.count).unwrap_or(0))
            })
        };
        if let Some(num) = &self.numeric {
            let types = num.kept.types().len();
            scratch.cols.resize_with(types, || NumCol::Int(Vec::new()));
            for (c, col) in scratch.cols.iter_mut().enumerate() {
                col.read_into(&num.kept, c, copies());
            }
            let ord = match self.kept.ord.map(|o| &scratch.cols[o]) {
                Some(NumCol::Int(v)) => Some(Int64Array::from(v.clone())),
                Some(NumCol::Float(_)) => {
                    return Err(WeirError::internal("an Int64 ORDER BY value expected"))
                }
                None => None,
            };
            let cx = Context::new(Vec::new(), std::mem::take(&mut scratch.peers), ord);
            let vals = self.numeric_values(num, &cx, scratch)?;
            let Context { peers, .. } = cx;
            scratch.peers = peers;
            if let Some(v) = vals {
                return Ok(Some(v));
            }
            // A BIGINT SUM overflowed: the general path says so.
        }
        self.array_values(copies().collect(), scratch).map(Some)
    }

    /// [`Funcs::evaluate`] through Arrow arrays: the kept arguments `args` of the copies
    /// decoded, then [`Funcs::values`] at the region (`scratch.in_region`, each copy's peers
    /// in `scratch.peers`, lent and given back), encoded.
    fn array_values(&self, args: Vec<&[u8]>, scratch: &mut Scratch) -> Result<Values> {
        let cols = self.kept.codec.decode(args)?;
        let ord = match self.kept.ord {
            Some(o) => Some(
                cols[o]
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| WeirError::internal("an Int64 ORDER BY value expected"))?
                    .clone(),
            ),
            None => None,
        };
        let region = &scratch.in_region;
        let cx = Context::new(cols, std::mem::take(&mut scratch.peers), ord);
        let arrays = self.values(&cx, region);
        let Context { peers, .. } = cx;
        scratch.peers = peers;
        Ok(Values::Rows(self.vals_codec.encode(&arrays?, region.len())?))
    }

    /// The values at the region (`scratch.in_region`) from the columns read from the kept
    /// rows (`scratch.cols`, see [`Numeric`]), written as rows (into `scratch.out`'s room);
    /// None if a BIGINT SUM overflowed.
    fn numeric_values(
        &self,
        num: &Numeric,
        cx: &Context,
        scratch: &mut Scratch,
    ) -> Result<Option<Values>> {
        let n = cx.peers.len();
        let Scratch { in_region: region, cols, frames, per_call, out, .. } = scratch;
        per_call.resize_with(self.calls.len(), Vec::new);
        for ((i, c), vals) in self.calls.iter().enumerate().zip(per_call.iter_mut()) {
            let arg = self.kept.arg[i].map(|a| &cols[a]);
            match c.func {
                OverFunc::Agg(func) => {
                    frames.clear();
                    frames.extend(region.iter().map(|&j| self.frame_of(&c.frame, j, cx)));
                    let arg = arg.map_or(NumArg::None, NumCol::arg);
                    let mut r = NumRunning::over(func, arg, &c.out_type)
                        .ok_or_else(|| WeirError::internal("a numeric frame it cannot compute"))?;
                    frame_values_into(&mut r, &c.frame, frames, n, vals)?;
                    if r.overflow {
                        return Ok(None);
                    }
                }
                _ => {
                    let arg =
                        arg.ok_or_else(|| WeirError::internal("navigation without argument"))?;
                    let default = self.kept.default[i].map(|d| &cols[d]);
                    vals.clear();
                    vals.extend(region.iter().map(|&j| match self.nav_index(c, j, cx) {
                        Some(k) => arg.get(k as usize),
                        None => default.map_or(Num::Null, |d| d.get(j)),
                    }));
                }
            }
        }
        let room = std::mem::take(out);
        Values::write_into(room, num.vals.types().len(), region.len(), |r, out| {
            for vals in per_call.iter() {
                NumericRow::push(vals[r], out);
            }
        })
        .map(Some)
    }
}

impl OverRel {
    /// The output changes of the changes `rows` (indices into `enc`, one instant's) into
    /// `out`; `kept` has each change's kept arguments (by the same index).
    fn eval_run<'e>(
        &mut self,
        enc: &'e EncodedBatch,
        kept: &Values,
        rows: std::ops::Range<usize>,
        bufs: &mut RunBufs<'e>,
        out: &mut OutRows,
    ) -> Result<()> {
        let first_out = out.rows.len();
        let RunBufs { order, changes, start } = bufs;
        for_each_partition(enc, rows, order, changes, |p, changes| {
            self.eval_part(p, changes, kept, start, out)
        })?;
        out.sort_from(first_out);
        Ok(())
    }

    /// Applies one partition's netted changes (sorted by entry, none zero; each with the index
    /// of its kept arguments in `kept`) and writes the output changes they cause into `out`.
    /// `start` is room for a copy of the context's first entry.
    fn eval_part(
        &mut self,
        p: &[u8],
        changes: &[NetChange<'_>],
        kept: &Values,
        start: &mut (Vec<u8>, Vec<u8>),
        out: &mut OutRows,
    ) -> Result<()> {
        let part = match self.parts.entry_ref(&Probe(p)) {
            EntryRef::Occupied(o) => o.into_mut(),
            EntryRef::Vacant(v) => v.insert_with_key(RowBytes::from(p), Partition::default()),
        };
        let eval = Eval {
            funcs: &self.funcs,
            scratch: &mut self.scratch,
            before: self.before,
            after: self.after,
            kept,
        };
        let entries = match part {
            Partition::Small(v) => {
                let entries = eval.small(v, changes, out)?;
                if v.len() > self.small {
                    let entries = std::mem::take(v).into_iter().map(|e| (e.key, e.slot));
                    *part = Partition::Large(entries.collect());
                }
                entries
            }
            Partition::Large(m) => eval.large(m, changes, start, out)?,
        };
        #[cfg(test)]
        {
            self.last_entries = entries;
        }
        let _ = entries;
        if part.is_empty() {
            self.parts.remove(p);
        }
        Ok(())
    }

    /// The output changes written into `out`, at their instants `times`.
    fn output(&self, out: &OutRows, times: Vec<Time>) -> Result<ChangeBatch> {
        if out.rows.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let bytes = &out.bytes;
        let mut cols =
            self.keys.decode_rows(out.rows.iter().map(|(_, r, _, _)| &bytes[r.clone()]))?;
        cols.extend(
            self.funcs.vals_codec.decode(out.rows.iter().map(|(_, _, v, _)| &bytes[v.clone()]))?,
        );
        let data = crate::ops::batch_of(&self.schema, cols, out.rows.len())?;
        Ok(ChangeBatch::new(data, times, out.rows.iter().map(|(_, _, _, n)| *n).collect()))
    }
}

/// What a partition's evaluation reads besides the partition: the functions, their buffers,
/// the extents of their frames and the changes' kept arguments.
struct Eval<'a> {
    funcs: &'a Funcs,
    scratch: &'a mut Scratch,
    before: Extent,
    after: Extent,
    kept: &'a Values,
}

impl Eval<'_> {
    /// [`OverRel::eval_part`] on a small partition (a sorted vector). Returns the number of
    /// entries the region and its context held.
    fn small(
        self,
        part: &mut Vec<Entry>,
        changes: &[NetChange<'_>],
        out: &mut OutRows,
    ) -> Result<usize> {
        let (Some(&(lo, _, _)), Some(&(hi, _, _))) = (changes.first(), changes.last()) else {
            return Ok(0);
        };
        let find = |part: &[Entry], from: usize, e: KeyRef<'_>, prefix: u128| {
            from + part[from..].partition_point(|x| x.cmp(prefix, e).is_lt())
        };
        // Back from lo, before the change, as on the B-tree (see `large`): where the context
        // starts and how many of its entries before lo are context only. The entries before
        // lo stay where they are through the change, so `start` holds after it.
        let lo_at = find(part, 0, lo, sort_prefix(lo.0));
        let (start, context_before) = {
            let mut i = lo_at;
            let mut region = Walk::new(self.after, lo.0);
            while i > 0 && region.pass(&part[i - 1].key.0, part[i - 1].slot.count) {
                i -= 1;
            }
            let mut context = Walk::new(self.before, region.last);
            let mut before = 0;
            while i > 0 && context.pass(&part[i - 1].key.0, part[i - 1].slot.count) {
                i -= 1;
                before += 1;
            }
            (i, before)
        };
        // The changes, in order, each searched for from the last one's place. An entry whose
        // last copy leaves is first held as a hole: when the next change inserts a new row
        // at that place (a row replacing another under the same order key), the row is
        // written over it, key and arguments in their room when of the same length.
        let mut at = lo_at;
        let mut hole: Option<usize> = None;
        for &(e, n, i) in changes {
            let prefix = sort_prefix(e.0);
            let mut found = find(part, at, e, prefix);
            if let Some(h) = hole.take() {
                let here = found == h + 1
                    && n > 0
                    && part.get(found).is_none_or(|x| x.cmp(prefix, e).is_ne());
                if here {
                    let Entry { prefix: p, key, slot } = &mut part[h];
                    *p = prefix;
                    refill(&mut key.0, e.0);
                    refill(&mut key.1, e.1);
                    refill(&mut slot.args, self.kept.get(i));
                    slot.count = n;
                    slot.vals.clear();
                    at = h;
                    continue;
                }
                part.remove(h);
                found -= 1;
            }
            at = found;
            let present = part.get(found).is_some_and(|x| x.cmp(prefix, e).is_eq());
            if n < 0 {
                if !present {
                    return Err(retracted());
                }
                let Entry { key, slot, .. } = &mut part[found];
                if retract(&key.1, slot, n, out)? {
                    hole = Some(found);
                }
            } else if present {
                part[found].slot.count += n;
            } else {
                let args = RowBytes::from(self.kept.get(i));
                let slot = Slot { count: n, vals: Vec::new(), args };
                part.insert(found, Entry { prefix, key: (e.0.into(), e.1.into()), slot });
            }
        }
        if let Some(h) = hole {
            part.remove(h);
        }
        // From the context's start through hi, then the region's end and the context's after
        // it.
        let mut end = start;
        let hi_prefix = sort_prefix(hi.0);
        while end < part.len() && part[end].cmp(hi_prefix, hi).is_le() {
            end += 1;
        }
        let mut region = Walk::new(self.before, hi.0);
        while end < part.len() && region.pass(&part[end].key.0, part[end].slot.count) {
            end += 1;
        }
        let region_end = end - start;
        let mut context = Walk::new(self.after, region.last);
        while end < part.len() && context.pass(&part[end].key.0, part[end].slot.count) {
            end += 1;
        }
        let entries = &mut part[start..end];
        let region = context_before.min(region_end)..region_end;
        let vals = self.funcs.evaluate(entries, region.clone(), self.scratch)?;
        update_values(&mut entries[region], vals.as_ref(), out)?;
        self.scratch.give_back(vals);
        Ok(entries.len())
    }

    /// [`OverRel::eval_part`] on a large partition (a B-tree). `start` is room for a copy of
    /// the context's first entry. Returns the number of entries the region and its context
    /// held.
    fn large(
        self,
        part: &mut BTreeMap<Key, Slot>,
        changes: &[NetChange<'_>],
        start: &mut (Vec<u8>, Vec<u8>),
        out: &mut OutRows,
    ) -> Result<usize> {
        let (Some(&(lo, _, _)), Some(&(hi, _, _))) = (changes.first(), changes.last()) else {
            return Ok(0);
        };
        // The region (the rows whose values may change) and its context (the rows those
        // values read) reach back from lo and forward from hi; the rows before lo and after
        // hi are the same before and after the change. Back from lo, found before the change
        // (lo may not be there after it): where the context starts (copied into `start`), and
        // how many of the entries from there to lo are context only.
        let context_before = {
            let mut back = part
                .range::<dyn KeyView, _>((Bound::Unbounded, Bound::Excluded(&lo as &dyn KeyView)))
                .rev()
                .peekable();
            let mut first: Option<&Key> = None;
            let mut region = Walk::new(self.after, lo.0);
            while let Some(&(k, slot)) = back.peek() {
                if !region.pass(&k.0, slot.count) {
                    break;
                }
                first = Some(k);
                back.next();
            }
            let mut context = Walk::new(self.before, region.last);
            let mut before = 0;
            while let Some(&(k, slot)) = back.peek() {
                if !context.pass(&k.0, slot.count) {
                    break;
                }
                first = Some(k);
                before += 1;
                back.next();
            }
            // (No entry passed: the context starts at lo, whether or not lo is there after
            // the change.)
            let (k, r) = first.map_or(lo, |k| (&k.0[..], &k.1[..]));
            start.0.clear();
            start.0.extend_from_slice(k);
            start.1.clear();
            start.1.extend_from_slice(r);
            before
        };
        // The region's values before the change are the ones last output, kept in the slots
        // (a row that leaves takes its values out with it); after it, they are computed over
        // the context, compared with those, and kept in turn.
        // One descent per change: a retraction takes its entry out (and puts it back if
        // copies remain), an insertion goes where its key belongs (a new row's key is
        // allocated anyway).
        for &(e, n, i) in changes {
            if n < 0 {
                let Some((key, mut slot)) = part.remove_entry(&e as &dyn KeyView) else {
                    return Err(retracted());
                };
                if !retract(&key.1, &mut slot, n, out)? {
                    part.insert(key, slot);
                }
                continue;
            }
            match part.entry((e.0.into(), e.1.into())) {
                btree_map::Entry::Occupied(mut o) => o.get_mut().count += n,
                btree_map::Entry::Vacant(v) => {
                    let args = RowBytes::from(self.kept.get(i));
                    v.insert(Slot { count: n, vals: Vec::new(), args });
                }
            }
        }
        // The entries from the context's start through hi, then the region's end and the
        // context's after it, in one pass over the changed partition.
        let start_key: KeyRef<'_> = (&start.0, &start.1);
        let from = Bound::Included(&start_key as &dyn KeyView);
        let mut it = part.range_mut::<dyn KeyView, _>((from, Bound::Unbounded)).peekable();
        let mut entries: Vec<(&Key, &mut Slot)> = Vec::new();
        while let Some((k, _)) = it.peek() {
            if cmp_key((&k.0, &k.1), hi).is_gt() {
                break;
            }
            entries.extend(it.next());
        }
        let mut region = Walk::new(self.before, hi.0);
        while let Some((k, slot)) = it.peek() {
            if !region.pass(&k.0, slot.count) {
                break;
            }
            entries.extend(it.next());
        }
        let region_end = entries.len();
        let mut context = Walk::new(self.after, region.last);
        while let Some((k, slot)) = it.peek() {
            if !context.pass(&k.0, slot.count) {
                break;
            }
            entries.extend(it.next());
        }
        let region = context_before.min(region_end)..region_end;
        let vals = self.funcs.evaluate(&entries, region.clone(), self.scratch)?;
        update_values(&mut entries[region], vals.as_ref(), out)?;
        self.scratch.give_back(vals);
        Ok(entries.len())
    }
}

/// Takes `n` (negative) copies of `row` out of its `slot`; when none remain, writes the
/// retraction of each copy's last output values into `out` and returns true (the entry is to
/// go). More copies retracted than held is an error.
fn retract(row: &[u8], slot: &mut Slot, n: i64, out: &mut OutRows) -> Result<bool> {
    slot.count += n;
    match slot.count.cmp(&0) {
        std::cmp::Ordering::Less => Err(retracted()),
        std::cmp::Ordering::Equal => {
            for v in &slot.vals {
                out.push(row, v, -1);
            }
            Ok(true)
        }
        std::cmp::Ordering::Greater => Ok(false),
    }
}

/// `bytes` made `to`, in its own room when the lengths agree.
fn refill(bytes: &mut RowBytes, to: &[u8]) {
    if bytes.len() == to.len() {
        bytes.copy_from_slice(to);
    } else {
        *bytes = RowBytes::from(to);
    }
}

/// Keeps in the slots of a `region`'s entries the values computed for it (`vals`: one per
/// copy, in the region's order, as [`Funcs::evaluate`] gives them; `None` if the region has
/// no row), and writes into `out` the bag difference between each row's values before (the
/// slot's) and after: nothing for a row whose values did not change.
fn update_values<E: EntryView>(
    region: &mut [E],
    vals: Option<&Values>,
    out: &mut OutRows,
) -> Result<()> {
    let missing = || WeirError::internal("window function: values missing");
    let mut i = 0;
    for ((_, row), slot) in region.iter_mut().map(EntryView::parts) {
        let vals = vals.ok_or_else(missing)?;
        let count = usize::try_from(slot.count).map_err(|_| missing())?;
        if i + count > vals.len() {
            return Err(missing());
        }
        let new = (i..i + count).map(|k| vals.get(k));
        i += count;
        if slot.vals.len() == count && new.clone().zip(&slot.vals).all(|(n, o)| eq_bytes(n, o)) {
            continue;
        }
        // One copy (the common case): its value replaced where it is kept, in place when it
        // has the same length (fixed-width values always do).
        if count == 1 && slot.vals.len() <= 1 {
            // The two changes go out in the order of their values, the order the output is
            // sorted in (see `OutRows::sort_from`).
            let now = vals.get(i - 1);
            match slot.vals.first_mut() {
                Some(old) => {
                    if cmp_bytes(old, now).is_lt() {
                        out.push_pair(row, (old, -1), (now, 1));
                    } else {
                        out.push_pair(row, (now, 1), (old, -1));
                    }
                    refill(old, now);
                }
                None => {
                    slot.vals.push(RowBytes::from(now));
                    out.push(row, now, 1);
                }
            }
            continue;
        }
        // The bag difference, sorted (a row's copies are few; sorting also covers many).
        let mut old: Vec<&[u8]> = slot.vals.iter().map(|v| &v[..]).collect();
        let mut now: Vec<&[u8]> = new.collect();
        old.sort_unstable();
        now.sort_unstable();
        let (mut a, mut b) = (0, 0);
        while a < old.len() || b < now.len() {
            match (old.get(a), now.get(b)) {
                (Some(o), Some(n)) if o == n => {
                    a += 1;
                    b += 1;
                }
                (Some(o), Some(n)) if o < n => {
                    out.push(row, o, -1);
                    a += 1;
                }
                (Some(o), None) => {
                    out.push(row, o, -1);
                    a += 1;
                }
                (_, Some(n)) => {
                    out.push(row, n, 1);
                    b += 1;
                }
                (None, None) => break,
            }
        }
        let kept: Vec<RowBytes> = (i - count..i).map(|k| RowBytes::from(vals.get(k))).collect();
        slot.vals = kept;
    }
    if vals.is_some_and(|v| i != v.len()) {
        return Err(WeirError::internal("window function: values left over"));
    }
    Ok(())
}

/// An output change: its row's [`sort_prefix`], where its row and its values are in
/// [`OutRows::bytes`], its diff.
type OutRow = (u128, std::ops::Range<usize>, std::ops::Range<usize>, i64);

/// A step's output changes, each row and its encoded values copied into one buffer.
#[derive(Debug, Default)]
struct OutRows {
    bytes: Vec<u8>,
    rows: Vec<OutRow>,
    /// Changes are not kept (a restore computes the values without output).
    discard: bool,
}

impl OutRows {
    /// The most room kept between steps (see [`OverRel::eval`]).
    const KEEP_BYTES: usize = 4 << 20;

    fn discarding() -> OutRows {
        OutRows { discard: true, ..OutRows::default() }
    }

    fn push(&mut self, row: &[u8], vals: &[u8], diff: i64) {
        if self.discard {
            return;
        }
        let row = self.row(row);
        self.push_values(row, vals, diff);
    }

    /// Two changes of one row (its retraction and its insertion), in this order, the row's
    /// bytes kept once for both.
    fn push_pair(&mut self, row: &[u8], (a, da): (&[u8], i64), (b, db): (&[u8], i64)) {
        if self.discard {
            return;
        }
        let row = self.row(row);
        self.push_values(row.clone(), a, da);
        self.push_values(row, b, db);
    }

    /// Copies `row` into the buffer: its [`sort_prefix`] and where it is.
    fn row(&mut self, row: &[u8]) -> (u128, std::ops::Range<usize>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(row);
        (sort_prefix(row), start..self.bytes.len())
    }

    /// Appends a change of the row `row` (as [`OutRows::row`] copied it) to the values `vals`.
    fn push_values(&mut self, (prefix, row): (u128, std::ops::Range<usize>), vals: &[u8], d: i64) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(vals);
        self.rows.push((prefix, row, start..self.bytes.len(), d));
    }

    /// Sorts the changes from `start` on by (row, values): the order in which a relation's
    /// output is consolidated (an output row is the input row followed by the values).
    /// Most pairs are ordered by their rows' [`sort_prefix`], one integer comparison; only
    /// rows that agree in their first 16 bytes compare their bytes, and a row's retraction and
    /// insertion (pushed as a pair, the row's bytes shared) only their values.
    /// Changes already in order (a touch's rows often are: a partition's rows in the order
    /// of their ORDER BY, each row's two changes in the order of their values) are checked
    /// in one pass and left.
    fn sort_from(&mut self, start: usize) {
        /// The order of two changes whose rows agree in their first 16 bytes (out of line:
        /// the comparisons on the prefixes are inlined into the sort).
        #[inline(never)]
        fn tie(bytes: &[u8], a: &OutRow, b: &OutRow) -> std::cmp::Ordering {
            // A row's two changes share its bytes.
            let rows = if a.1 == b.1 {
                std::cmp::Ordering::Equal
            } else {
                cmp_bytes(&bytes[a.1.clone()], &bytes[b.1.clone()])
            };
            rows.then_with(|| cmp_bytes(&bytes[a.2.clone()], &bytes[b.2.clone()]))
                .then(a.3.cmp(&b.3))
        }
        let bytes = &self.bytes;
        let rows = &mut self.rows[start..];
        let order = |a: &OutRow, b: &OutRow| a.0.cmp(&b.0).then_with(|| tie(bytes, a, b));
        if rows.is_sorted_by(|a, b| order(a, b).is_le()) {
            return;
        }
        rows.sort_unstable_by(order);
    }
}

/// The rows around a region: their kept arguments decoded (see [`Kept`]; none on the
/// [`Numeric`] path, which reads them itself), peer groups ([start, end) of each row's),
/// ORDER BY values (RANGE offsets) and where those are not NULL.
struct Context {
    cols: Vec<ArrayRef>,
    peers: Vec<(usize, usize)>,
    ord: Option<Int64Array>,
    non_null: (usize, usize),
}

impl Context {
    fn new(cols: Vec<ArrayRef>, peers: Vec<(usize, usize)>, ord: Option<Int64Array>) -> Self {
        let non_null = match &ord {
            Some(a) => {
                let n = a.len();
                let lo = (0..n).find(|&i| a.is_valid(i)).unwrap_or(n);
                let hi = (0..n).rev().find(|&i| a.is_valid(i)).map_or(lo, |i| i + 1);
                (lo, hi)
            }
            None => (0, 0),
        };
        Context { cols, peers, ord, non_null }
    }
}

impl Operator for OverRel {
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [d] = take_inputs::<1>(inputs)?;
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let enc = self.keys.encode_batch(&d)?;
        let kept = self.funcs.kept.encode(&d.data, self.funcs.numeric.as_ref())?;
        let mut out = std::mem::take(&mut self.out);
        out.bytes.clear();
        out.rows.clear();
        let mut bufs = RunBufs::default();
        let times = by_instant(&d.times, |rows| {
            let before = out.rows.len();
            self.eval_run(&enc, &kept, rows, &mut bufs, &mut out)?;
            Ok(out.rows.len() - before)
        })?;
        let result = self.output(&out, times);
        // The room of an ordinary step's output is kept; an outsized one's is given back.
        if out.bytes.capacity() <= OutRows::KEEP_BYTES {
            self.out = out;
        }
        result
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A partition's rows meet on one worker (see [`OverKeys::placement`]).
    fn placement(&self, _input: usize) -> Result<crate::route::Placement> {
        self.keys.placement()
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    /// Every row, per partition, with the values last output for each copy.
    fn state_bytes(&self) -> usize {
        self.parts.heap_bytes()
    }

    /// State: section `over_rel`, every row with its partition and order keys (`part`, `key`,
    /// `row` Binary, `count` Int64), sorted.
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let mut parts: Vec<(&RowBytes, &Partition)> = self.parts.iter().collect();
        parts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let entries: Vec<StateEntry<'_>> = parts
            .iter()
            .flat_map(|(p, part)| {
                part.iter().map(move |((k, r), s)| (&p[..], &k[..], &r[..], s.count))
            })
            .collect();
        w.put(
            "over_rel",
            &self.signature(),
            entries.len(),
            vec![
                ("part", binary_col(entries.iter().map(|e| e.0))),
                ("key", binary_col(entries.iter().map(|e| e.1))),
                ("row", binary_col(entries.iter().map(|e| e.2))),
                ("count", i64_col(entries.iter().map(|e| e.3))),
            ],
        )
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("over_rel", &self.signature())?;
        let (parts, keys, rows, counts) =
            (s.binary("part")?, s.binary("key")?, s.binary("row")?, s.i64s("count")?);
        self.parts.clear();
        let mut maps: HashMap<RowBytes, BTreeMap<Key, Slot>> = HashMap::new();
        for (((p, k), row), c) in parts.into_iter().zip(keys).zip(rows).zip(counts) {
            let c = nonzero("over_rel", c)?;
            if c < 0 {
                return Err(invalid("section 'over_rel': a negative count"));
            }
            let part = maps.entry(RowBytes::from(p)).or_default();
            let slot = Slot { count: c, vals: Vec::new(), args: RowBytes::default() };
            if part.insert((RowBytes::from(k), RowBytes::from(row)), slot).is_some() {
                return Err(invalid("section 'over_rel': a row appears twice"));
            }
        }
        // The values last output are not saved: they are the partitions' values, computed
        // again from their rows.
        for part in maps.values_mut() {
            // Nor are the kept arguments: they are the rows', evaluated again.
            let cols = self.keys.decode_rows(part.keys().map(|k| &k.1[..]))?;
            let batch = crate::ops::batch_of(&self.in_schema, cols, part.len())?;
            let kept = self.funcs.kept.encode(&batch, self.funcs.numeric.as_ref())?;
            for (i, slot) in part.values_mut().enumerate() {
                slot.args = RowBytes::from(kept.get(i));
            }
            let mut entries: Vec<(&Key, &mut Slot)> = part.iter_mut().collect();
            let all = 0..entries.len();
            let vals = self.funcs.evaluate(&entries, all.clone(), &mut self.scratch)?;
            // (What a first evaluation would output is not output again.)
            update_values(&mut entries[all], vals.as_ref(), &mut OutRows::discarding())?;
            self.scratch.give_back(vals);
        }
        self.parts = maps.into_iter().map(|(p, m)| (p, Partition::of(m, self.small))).collect();
        Ok(())
    }
}

/// The operator of a [`weir_plan::LogicalPlan::OverRelation`] (its own function, out of
/// line: the compiler's recursive `build` must keep a small stack frame).
#[inline(never)]
pub(crate) fn build(plan: &weir_plan::LogicalPlan, schema: SchemaRef) -> Result<Box<dyn Operator>> {
    use crate::compile::{exec_schema, expr_type};
    use crate::ops::topk::SortKey;
    let weir_plan::LogicalPlan::OverRelation { partition_by, order_by, calls, input, .. } = plan
    else {
        return Err(WeirError::internal("a window function node expected"));
    };
    let in_df = input.schema();
    let partition = partition_by
        .iter()
        .map(|e| Ok((ScalarExpr::compile(e, &in_df)?, expr_type(e, &in_df)?)))
        .collect::<Result<_>>()?;
    let order = order_by
        .iter()
        .map(|o| {
            Ok(SortKey {
                expr: ScalarExpr::compile(&o.expr, &in_df)?,
                data_type: expr_type(&o.expr, &in_df)?,
                descending: !o.asc,
                nulls_first: o.nulls_first,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let order_val = match order.as_slice() {
        [o] => Some((o.expr.clone(), o.descending)),
        _ => None,
    };
    let nin = in_df.fields().len();
    let specs = calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let out_type = schema
                .fields()
                .get(nin + j)
                .map(|f| f.data_type().clone())
                .ok_or_else(|| WeirError::internal("a window function without its column"))?;
            let arg_type = match &c.arg {
                Some(e) => expr_type(e, &in_df)?,
                None => DataType::Int64,
            };
            Ok(OverRelSpec {
                func: c.func,
                arg: c.arg.as_ref().map(|e| ScalarExpr::compile(e, &in_df)).transpose()?,
                arg_type,
                default: c.default.as_ref().map(|e| ScalarExpr::compile(e, &in_df)).transpose()?,
                out_type,
                frame: c.frame,
            })
        })
        .collect::<Result<_>>()?;
    let in_schema = exec_schema(&in_df);
    let keys = OverKeys::new(partition, order, in_schema.clone())?;
    Ok(Box::new(OverRel::new(keys, in_schema, order_val, specs, schema)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::over::test_support::{k_by_v, kv_col, out_schema};
    use crate::testing::{kv, kv_schema, state_bytes_at};

    /// LAG(v) OVER (PARTITION BY k ORDER BY v).
    fn lag() -> OverRel {
        let spec = OverRelSpec {
            func: OverFunc::Lag(1),
            arg: Some(kv_col("v")),
            arg_type: DataType::Int64,
            default: None,
            out_type: DataType::Int64,
            frame: WindowFrame {
                range: false,
                start: FrameBound::UnboundedPreceding,
                end: FrameBound::CurrentRow,
            },
        };
        OverRel::new(k_by_v(false), kv_schema(), None, vec![spec], out_schema(1)).unwrap()
    }

    /// A change reads only the entries its frames reach (and its own), not the partition: with
    /// a peers-only frame and a row between two of other values, one entry; with `ROWS 2
    /// PRECEDING`, the row, the two after it whose frames hold it, and the two before it
    /// that the first of those reads.
    #[test]
    fn a_change_reads_only_the_entries_its_frames_reach() {
        let op = |range: bool, start: FrameBound| {
            let spec = OverRelSpec {
                func: OverFunc::Agg(AggFunc::Sum),
                arg: Some(kv_col("v")),
                arg_type: DataType::Int64,
                default: None,
                out_type: DataType::Int64,
                frame: WindowFrame { range, start, end: FrameBound::CurrentRow },
            };
            OverRel::new(k_by_v(false), kv_schema(), None, vec![spec], out_schema(1)).unwrap()
        };
        let rows: Vec<String> = (0..1000).map(|i| format!("+1 a {}", 2 * i)).collect();
        let ctx = crate::operator::EvalCtx::default();
        for (mut op, want) in
            [(op(true, FrameBound::CurrentRow), 1), (op(false, FrameBound::Preceding(2)), 5)]
        {
            for (t, text) in [(1, rows.join(", ")), (2, "+1 a 1001".to_string())] {
                let (_, b) = kv(t, &text);
                let step = Step { lo: t, hi: t, ctx: &ctx, input_wakeup: None };
                op.eval(&step, vec![b]).unwrap();
            }
            assert_eq!(op.last_entries, want);
        }
    }

    /// One partition ordered by v (rows (k, v): peers with different rows), with navigation,
    /// ROWS, RANGE and offset frames in one operator, holding at most `small` entries in a
    /// vector.
    fn every_frame(small: usize) -> OverRel {
        let spec = |func: OverFunc, range: bool, start: FrameBound, end: FrameBound| OverRelSpec {
            func,
            arg: Some(kv_col("v")),
            arg_type: DataType::Int64,
            default: None,
            out_type: DataType::Int64,
            frame: WindowFrame { range, start, end },
        };
        use FrameBound::{CurrentRow, Following, Preceding, UnboundedPreceding};
        let calls = vec![
            spec(OverFunc::Agg(AggFunc::Sum), false, Preceding(2), CurrentRow),
            spec(OverFunc::Agg(AggFunc::Count), true, UnboundedPreceding, CurrentRow),
            spec(OverFunc::Lag(1), false, UnboundedPreceding, CurrentRow),
            spec(OverFunc::Lead(2), false, UnboundedPreceding, CurrentRow),
            spec(OverFunc::FirstValue, false, Preceding(1), Following(1)),
            spec(OverFunc::Agg(AggFunc::Max), false, CurrentRow, Following(2)),
            spec(OverFunc::Agg(AggFunc::Sum), true, Preceding(2), CurrentRow),
        ];
        let order = vec![crate::ops::topk::SortKey {
            expr: kv_col("v"),
            data_type: DataType::Int64,
            descending: false,
            nulls_first: true,
        }];
        let keys = OverKeys::new(Vec::new(), order, kv_schema()).unwrap();
        let n = calls.len();
        let order_val = Some((kv_col("v"), false));
        let mut op = OverRel::new(keys, kv_schema(), order_val, calls, out_schema(n)).unwrap();
        op.small = small;
        op
    }

    /// A partition kept in a vector, in a B-tree, and in a vector that becomes a B-tree gives
    /// the same changes, step by step: random insertions and retractions (copies, peers,
    /// NULLs, and rows that replace others under the same order key, which the vector writes
    /// over the old entry), from empty to a few hundred rows and most of the way back.
    #[test]
    fn a_vector_and_a_b_tree_give_the_same_changes() {
        let mut x: u32 = 5;
        let mut next = |m: u32| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 8) % m
        };
        let mut bag: Vec<(u32, Option<u32>)> = Vec::new();
        let mut ticks = Vec::new();
        for t in 1..=400 {
            let mut items = Vec::new();
            for _ in 0..1 + next(6) {
                let grow = if t < 330 { 3 } else { 1 };
                let row = (next(4), (next(9) > 0).then(|| next(8)));
                match next(4) {
                    0 if !bag.is_empty() => {
                        // A row replaced by another of the same v.
                        let old = bag.swap_remove(next(bag.len() as u32) as usize);
                        let new = (next(4), old.1);
                        items.push((-1, old));
                        items.push((1, new));
                        bag.push(new);
                    }
                    c if c < grow || bag.is_empty() => {
                        items.push((1, row));
                        bag.push(row);
                    }
                    _ => {
                        let old = bag.swap_remove(next(bag.len() as u32) as usize);
                        items.push((-1, old));
                    }
                }
            }
            let text: Vec<String> = items
                .iter()
                .map(|(d, (k, v))| {
                    let v = v.map_or("_".to_string(), |v| v.to_string());
                    format!("{d:+} {} {v}", ["a", "b", "c", "d"][*k as usize])
                })
                .collect();
            ticks.push(kv(t, &text.join(", ")));
        }
        let run = |small: usize| {
            let mut op = every_frame(small);
            let mut feeds = vec![ticks.clone().into_iter().peekable()];
            let out = crate::testing::drive_n(&mut op, &mut feeds, None);
            (out, op.parts.values().map(|p| matches!(p, Partition::Large(_))).collect::<Vec<_>>())
        };
        let (vector, forms) = run(usize::MAX);
        assert_eq!(forms, [false]);
        let (tree, forms) = run(0);
        assert_eq!(forms, [true]);
        let (switched, forms) = run(12);
        assert_eq!(forms, [true]);
        assert!(vector.len() > 2000, "{} changes", vector.len());
        assert_eq!(vector, tree);
        assert_eq!(switched, tree);
    }

    /// A BIGINT SUM is read without arrays (the shortcut is on for it), and one that
    /// overflows still fails with the error naming it, which the array path gives; a VARCHAR
    /// navigation takes the array path.
    #[test]
    fn the_numeric_shortcut_hands_an_overflow_to_the_array_path() {
        let spec = |func: OverFunc, arg: &str, ty: DataType| OverRelSpec {
            func,
            arg: Some(kv_col(arg)),
            arg_type: ty.clone(),
            default: None,
            out_type: ty,
            frame: WindowFrame {
                range: false,
                start: FrameBound::Preceding(1),
                end: FrameBound::CurrentRow,
            },
        };
        let sum = spec(OverFunc::Agg(AggFunc::Sum), "v", DataType::Int64);
        let mut op =
            OverRel::new(k_by_v(false), kv_schema(), None, vec![sum], out_schema(1)).unwrap();
        assert!(op.funcs.numeric.is_some());
        let ctx = crate::operator::EvalCtx::default();
        let step = |t| Step { lo: t, hi: t, ctx: &ctx, input_wakeup: None };
        let out = op.eval(&step(1), vec![kv(1, "+1 a 1, +1 a 2").1]).unwrap();
        let sums = out.data.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(sums.values().to_vec(), [1, 3]);
        let big = format!("+1 a {}", i64::MAX);
        let err = op.eval(&step(2), vec![kv(2, &big).1]).unwrap_err();
        assert!(err.to_string().contains("overflow"), "{err}");
        let lag = spec(OverFunc::Lag(1), "k", DataType::Utf8);
        let op = OverRel::new(k_by_v(false), kv_schema(), None, vec![lag], out_schema(1));
        assert!(op.unwrap().funcs.numeric.is_none());
    }

    /// A retraction of one copy of a duplicated row keeps the other: LAG(v) over a 5 held
    /// twice and a 7 gives the copies NULL and 5 and the 7 a 5; taking one 5 away retracts
    /// the second copy's row alone; taking the last away also moves the 7's LAG to NULL.
    #[test]
    fn a_retraction_of_one_copy_keeps_the_others() {
        let mut op = lag();
        let feed = vec![kv(1, "+2 a 5, +1 a 7"), kv(2, "-1 a 5"), kv(3, "-1 a 5")];
        let mut feeds = vec![feed.into_iter().peekable()];
        let got = crate::testing::drive_n(&mut op, &mut feeds, None);
        assert_eq!(
            got,
            [
                "@1 +1 a 5 5",
                "@1 +1 a 5 _",
                "@1 +1 a 7 5",
                "@2 -1 a 5 5",
                "@3 +1 a 7 _",
                "@3 -1 a 5 _",
                "@3 -1 a 7 5",
            ]
        );
    }

    /// The figure grows with the rows (and their values kept) and falls back when they are
    /// retracted (to the map's empty buckets).
    #[test]
    fn state_bytes_follow_the_rows() {
        let mut op = lag();
        assert_eq!(op.state_bytes(), 0);
        let input = vec![
            kv(1, "+1 a 5, +1 b 1"),
            kv(2, "+2 a 9, +1 c 3, +1 d 4"),
            kv(3, "-1 a 5, -1 b 1, -2 a 9, -1 c 3, -1 d 4"),
        ];
        let [one, two, _] = state_bytes_at(&mut op, input, [Some(2), Some(3), None]);
        assert!(one > 0);
        assert!(two > one, "{two} after {one}");
        assert!(op.parts.is_empty());
        assert!(op.state_bytes() < one, "{} at the end, {one} with two rows", op.state_bytes());
    }
}
