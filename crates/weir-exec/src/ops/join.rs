//! Join: inner, left/right/full outer, left semi and left anti, on equality keys plus an
//! optional residual predicate θ.
//!
//! Delta semantics of the matched pairs: Δ(R ⋈ S) = ΔR ⋈ S_old + R_new ⋈ ΔS, where S_old is the
//! right input before this instant's changes and R_new the left input after them; a pair's
//! diff is the product of its rows' diffs/multiplicities. Rows whose key contains NULL never
//! match (SQL equality).
//!
//! The other kinds follow from each row's match count m(r) = Σ multiplicities of the rows of
//! the other side that it matches (key equal and θ true): a left row with multiplicity c
//! contributes c padded rows (r, NULL...) to a left outer join while m(r) = 0, c rows to a semi
//! join while m(r) > 0, and c rows to an anti join while m(r) = 0. At each instant the
//! operator updates m for the rows the matched-pair delta touches and emits the difference of
//! those contributions before and after, so a row gains or loses its padding exactly when its
//! last match leaves or its first arrives. The null-aware anti join (`NOT IN`) also empties
//! when the right side holds a NULL key, and excludes NULL-keyed left rows unless the right
//! side is empty; when those conditions flip, every left row is re-examined.
//!
//! State: per input, an index from key to the multiset of rows with that key (work per change
//! is proportional to the rows it matches; a theta join without keys keeps one bucket); for
//! outer, semi and anti joins, each tracked row's multiplicity and match count.
//! Checkpointed as the indexes, the tracked rows and the null-aware totals, in sections laid
//! out in [`checkpoint`].
//!
//! **Steps.** A step, one instant or a span of them alike, is evaluated in three passes, with
//! the same result as evaluating its instants one by one: (1) both inputs' changes are encoded once, and the
//! instants walked in order, each joining its left changes with the right index, applying
//! them, joining its right changes with the left index and applying those, which collects the
//! candidate pairs of every instant (the indexes never depend on θ); (2) θ is evaluated once
//! over all candidates; (3) the instants are walked again to emit the matched pairs and update
//! the tracked match counts. Pairs name their rows by number: a delta row by its place in the
//! span's changes, an indexed row by a copy in a per-span arena, so no pair allocates and a
//! row removed from an index later in the span stays readable. Output columns are decoded once
//! per span.

use datafusion_common::{HashMap, HashSet};

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};
use weir_plan::JoinKind;

use crate::expr::ScalarExpr;
use crate::operator::{take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::row::{EncodedRows, RowBytes, RowCodec};

/// An encoded join key, inline up to 16 bytes (one or two numbers): a lookup that finds a
/// candidate compares keys without following a pointer to the heap.
type Key = smallvec::SmallVec<[u8; 16]>;

type Index = HashMap<Key, Bucket>;

/// The rows of one key with their multiplicities (never zero). Most keys have one row, which
/// is kept inline instead of in a map of its own.
#[derive(Debug, Clone)]
enum Bucket {
    One(RowBytes, i64),
    Many(HashMap<RowBytes, i64>),
}

impl Bucket {
    fn iter(&self) -> impl Iterator<Item = (&RowBytes, i64)> + '_ {
        let (one, many) = match self {
            Bucket::One(r, c) => (Some((r, *c)), None),
            Bucket::Many(m) => (None, Some(m.iter().map(|(r, c)| (r, *c)))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// Adds `diff` to `row`'s multiplicity (`diff` is not zero); returns whether the bucket is
    /// now empty.
    fn add(&mut self, row: &[u8], diff: i64) -> bool {
        match self {
            Bucket::One(r, c) if &r[..] == row => {
                *c += diff;
                *c == 0
            }
            Bucket::One(r, c) => {
                let mut m = HashMap::with_capacity(2);
                m.insert(std::mem::take(r), *c);
                m.insert(RowBytes::from(row), diff);
                *self = Bucket::Many(m);
                false
            }
            Bucket::Many(m) => {
                match m.get_mut(row) {
                    Some(c) => {
                        *c += diff;
                        if *c == 0 {
                            m.remove(row);
                        }
                    }
                    None => {
                        m.insert(RowBytes::from(row), diff);
                    }
                }
                let single = if m.len() == 1 { m.drain().next() } else { None };
                let empty = m.is_empty();
                if let Some((r, c)) = single {
                    *self = Bucket::One(r, c);
                    return false;
                }
                empty
            }
        }
    }

    /// The sum of the multiplicities.
    fn total(&self) -> i64 {
        self.iter().map(|(_, c)| c).sum()
    }
}

mod checkpoint;

/// One side of the join: how its input's rows are keyed and encoded.
#[derive(Debug)]
pub struct JoinSide {
    pub keys: Vec<ScalarExpr>,
    pub row_codec: RowCodec,
    pub schema: SchemaRef,
}

/// Multiplicity, match count and whether the key is NULL, of a row of a tracked side.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tracked {
    count: i64,
    matches: i64,
    null_key: bool,
}

#[derive(Debug)]
pub struct Join {
    kind: JoinKind,
    /// NULL keys match each other (set operations) instead of never matching.
    nulls_equal: bool,
    left: JoinSide,
    right: JoinSide,
    key_codec: RowCodec,
    filter: Option<ScalarExpr>,
    schema: SchemaRef,
    left_index: Index,
    right_index: Index,
    left_rows: HashMap<RowBytes, Tracked>,
    right_rows: HashMap<RowBytes, Tracked>,
    /// For the null-aware anti join: right rows in total, and with a NULL key.
    right_total: i64,
    right_null: i64,
}

/// One side's columns for output rows; `None` rows are NULL (outer-join padding).
fn side_columns(
    codec: &RowCodec,
    schema: &SchemaRef,
    rows: &[Option<&[u8]>],
) -> Result<Vec<ArrayRef>> {
    let n = rows.len();
    if rows.iter().all(|r| r.is_some()) {
        return codec.decode(rows.iter().flatten().copied());
    }
    let decoded = codec.decode(rows.iter().flatten().copied())?;
    let mut pos = 0;
    let idx: Vec<(usize, usize)> = rows
        .iter()
        .map(|r| {
            if r.is_some() {
                pos += 1;
                (0, pos - 1)
            } else {
                (1, 0)
            }
        })
        .collect();
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| {
            let nulls = new_null_array(f.data_type(), 1);
            if decoded.is_empty() || pos == 0 {
                return Ok(new_null_array(f.data_type(), n));
            }
            let sources: [&dyn arrow::array::Array; 2] = [decoded[c].as_ref(), nulls.as_ref()];
            Ok(arrow::compute::interleave(&sources, &idx)?)
        })
        .collect()
}

/// One input change, encoded: its key (`None` if a key column is NULL and NULLs never match),
/// its row and its diff. Borrowed from the span's encoded rows.
#[derive(Debug, Clone, Copy)]
struct DeltaRow<'a> {
    key: Option<&'a [u8]>,
    row: &'a [u8],
    diff: i64,
}

/// A side's changes of a span, encoded once: keys and rows in Arrow's row format.
struct EncodedSide {
    keys: EncodedRows,
    rows: EncodedRows,
    null_key: Vec<bool>,
}

impl EncodedSide {
    fn new(
        side: &JoinSide,
        key_codec: &RowCodec,
        d: &ChangeBatch,
        nulls_equal: bool,
    ) -> Result<Self> {
        let n = d.len();
        let key_cols: Vec<ArrayRef> =
            side.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
        let keys = key_codec.encode(&key_cols, n)?;
        let rows = side.row_codec.encode(d.data.columns(), n)?;
        let null_key =
            (0..n).map(|i| !nulls_equal && key_cols.iter().any(|c| c.is_null(i))).collect();
        Ok(EncodedSide { keys, rows, null_key })
    }

    fn delta_rows<'a>(&'a self, diffs: &[i64]) -> Vec<DeltaRow<'a>> {
        (0..diffs.len())
            .map(|i| DeltaRow {
                key: (!self.null_key[i]).then(|| self.keys.get(i)),
                row: self.rows.get(i),
                diff: diffs[i],
            })
            .collect()
    }
}

/// The rows a span's pairs and output name on one side: the side's changes (numbers
/// `0..delta.len()`) and copies of indexed rows (the numbers after).
struct SideRows<'a> {
    delta: &'a [DeltaRow<'a>],
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl<'a> SideRows<'a> {
    fn new(delta: &'a [DeltaRow<'a>]) -> Self {
        SideRows { delta, bytes: Vec::new(), ends: Vec::new() }
    }

    /// Copies `row` into the arena; returns its number.
    fn copy(&mut self, row: &[u8]) -> u32 {
        self.bytes.extend_from_slice(row);
        self.ends.push(self.bytes.len());
        (self.delta.len() + self.ends.len() - 1) as u32
    }

    fn get(&self, id: u32) -> &[u8] {
        let id = id as usize;
        match id.checked_sub(self.delta.len()) {
            None => self.delta[id].row,
            Some(a) => {
                let start = if a == 0 { 0 } else { self.ends[a - 1] };
                &self.bytes[start..self.ends[a]]
            }
        }
    }
}

/// One instant of a span: its time and the ranges of its changes on each side.
struct Instant {
    t: Time,
    left: std::ops::Range<usize>,
    right: std::ops::Range<usize>,
}

/// The instants of two time-sorted change lists, in order.
fn instants(lt: &[Time], rt: &[Time]) -> Vec<Instant> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < lt.len() || j < rt.len() {
        let t = match (lt.get(i), rt.get(j)) {
            (Some(&a), Some(&b)) => a.min(b),
            (Some(&a), None) => a,
            (None, Some(&b)) => b,
            (None, None) => break,
        };
        let (li, rj) = (i, j);
        while lt.get(i) == Some(&t) {
            i += 1;
        }
        while rt.get(j) == Some(&t) {
            j += 1;
        }
        out.push(Instant { t, left: li..i, right: rj..j });
    }
    out
}

/// A candidate pair: its instant (index into the span's instants), its rows (numbers in the
/// sides' [`SideRows`]), their diff/multiplicity factors, and which delta produced it.
#[derive(Debug, Clone, Copy)]
struct Pair {
    inst: u32,
    l: u32,
    r: u32,
    lc: i64,
    rc: i64,
    from_left_delta: bool,
}

/// A matched pair seen from one tracked side: (own row, partner row, the partner's
/// multiplicity, whether it came from the own side's delta).
type Seen<'a> = (&'a [u8], &'a [u8], i64, bool);

/// The span's output: per row, its left and right row numbers (`None` pads with NULLs), its
/// instant, its diff, and for a mark join the mark.
#[derive(Default)]
struct Out {
    rows: Vec<(Option<u32>, Option<u32>)>,
    times: Vec<Time>,
    diffs: Vec<i64>,
    marks: Vec<bool>,
}

impl Out {
    fn push(&mut self, l: Option<u32>, r: Option<u32>, t: Time, d: i64) {
        self.rows.push((l, r));
        self.times.push(t);
        self.diffs.push(d);
    }
}

impl Join {
    pub fn new(
        kind: JoinKind,
        nulls_equal: bool,
        left: JoinSide,
        right: JoinSide,
        key_codec: RowCodec,
        filter: Option<ScalarExpr>,
        schema: SchemaRef,
    ) -> Self {
        Join {
            kind,
            nulls_equal,
            left,
            right,
            key_codec,
            filter,
            schema,
            left_index: Index::new(),
            right_index: Index::new(),
            left_rows: HashMap::new(),
            right_rows: HashMap::new(),
            right_total: 0,
            right_null: 0,
        }
    }

    fn tracks_left(&self) -> bool {
        matches!(
            self.kind,
            JoinKind::Left
                | JoinKind::Full
                | JoinKind::LeftSemi
                | JoinKind::LeftAnti { .. }
                | JoinKind::LeftMark
        )
    }

    /// Whether the output has the left side's columns only (plus `mark` for a mark join).
    fn left_only(&self) -> bool {
        matches!(
            self.kind,
            JoinKind::LeftSemi
                | JoinKind::LeftAnti { .. }
                | JoinKind::LeftMark
                | JoinKind::IntersectAll
                | JoinKind::ExceptAll
        )
    }

    fn tracks_right(&self) -> bool {
        matches!(self.kind, JoinKind::Right | JoinKind::Full)
    }

    fn apply(index: &mut Index, delta: &[DeltaRow<'_>]) {
        for d in delta {
            let Some(key) = d.key else { continue };
            if d.diff == 0 {
                continue;
            }
            // One lookup per row; a key or row is copied only when it is new to the index.
            match index.get_mut(key) {
                Some(bucket) => {
                    if bucket.add(d.row, d.diff) {
                        index.remove(key);
                    }
                }
                None => {
                    index.insert(Key::from_slice(key), Bucket::One(RowBytes::from(d.row), d.diff));
                }
            }
        }
    }

    /// Updates the tracked rows of one side at one instant, given the side's changes there and
    /// the matched pairs seen from it; returns each touched row's state before.
    fn track(
        rows: &mut HashMap<RowBytes, Tracked>,
        delta: &[DeltaRow<'_>],
        matched: &[Seen<'_>],
    ) -> HashMap<RowBytes, Tracked> {
        let mut before: HashMap<RowBytes, Tracked> = HashMap::new();
        let mut touch = |rows: &HashMap<RowBytes, Tracked>, r: &[u8]| {
            if !before.contains_key(r) {
                before.insert(RowBytes::from(r), rows.get(r).copied().unwrap_or_default());
            }
        };
        for d in delta {
            touch(rows, d.row);
        }
        for p in matched {
            touch(rows, p.0);
        }
        // Match counts of rows new at this instant come from the pairs with the other side's
        // old contents (each distinct partner once); existing rows only gain the pairs with
        // the other side's delta.
        let mut seen: HashSet<(&[u8], &[u8])> = HashSet::new();
        for &(row, partner, partner_count, from_own_delta) in matched {
            let was_present = before.get(row).is_some_and(|t| t.count > 0);
            let gain = if !from_own_delta || (!was_present && seen.insert((row, partner))) {
                partner_count
            } else {
                0
            };
            match rows.get_mut(row) {
                Some(e) => e.matches += gain,
                None => {
                    rows.insert(
                        RowBytes::from(row),
                        Tracked { matches: gain, ..Tracked::default() },
                    );
                }
            }
        }
        for d in delta {
            let e = match rows.get_mut(d.row) {
                Some(e) => e,
                None => rows.entry(RowBytes::from(d.row)).or_default(),
            };
            e.count += d.diff;
            e.null_key = d.key.is_none();
        }
        for r in before.keys() {
            if rows.get(r).is_some_and(|t| t.count == 0) {
                rows.remove(r);
            }
        }
        before
    }

    /// The output changes for input changes `dl` and `dr`, each sorted by time: every instant
    /// at which either has a change, in order (see the module docs).
    fn run(&mut self, dl: &ChangeBatch, dr: &ChangeBatch) -> Result<ChangeBatch> {
        if dl.is_empty() && dr.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let el = EncodedSide::new(&self.left, &self.key_codec, dl, self.nulls_equal)?;
        let er = EncodedSide::new(&self.right, &self.key_codec, dr, self.nulls_equal)?;
        let lrows = el.delta_rows(&dl.diffs);
        let rrows = er.delta_rows(&dr.diffs);
        let insts = instants(&dl.times, &dr.times);
        let mut ls = SideRows::new(&lrows);
        let mut rs = SideRows::new(&rrows);
        let mut out = Out::default();
        if matches!(self.kind, JoinKind::IntersectAll | JoinKind::ExceptAll) {
            for inst in &insts {
                self.bag_step(inst, &lrows, &rrows, &mut ls, &mut out)?;
            }
        } else {
            let pairs = self.candidates(&insts, &lrows, &rrows, &mut ls, &mut rs);
            let theta = self.matching(&pairs, &ls, &rs)?;
            if let (JoinKind::Inner, Some((mask, full))) = (self.kind, &theta) {
                // The output is the candidates θ kept, already decoded.
                return self.inner_output(&insts, &pairs, mask, full);
            }
            let mask: Vec<bool> = match theta {
                Some((m, _)) => (0..pairs.len()).map(|i| m.value(i)).collect(),
                None => vec![true; pairs.len()],
            };
            self.emit(&insts, &pairs, &mask, &lrows, &rrows, &mut ls, &mut rs, &mut out);
        }
        self.output(out, &ls, &rs)
    }

    /// An inner join's output: the decoded candidates (both sides' columns) that θ kept, with
    /// their instants and diffs.
    fn inner_output(
        &self,
        insts: &[Instant],
        pairs: &[Pair],
        mask: &arrow::array::BooleanArray,
        full: &RecordBatch,
    ) -> Result<ChangeBatch> {
        let kept = arrow::compute::filter_record_batch(full, mask)?;
        let (times, diffs): (Vec<Time>, Vec<i64>) = pairs
            .iter()
            .enumerate()
            .filter(|(i, _)| mask.value(*i))
            .map(|(_, p)| (insts[p.inst as usize].t, p.lc * p.rc))
            .unzip();
        let data = batch_of(&self.schema, kept.columns().to_vec(), times.len())?;
        Ok(ChangeBatch::new(data, times, diffs))
    }

    /// Pass 1: the candidate pairs of every instant, updating both indexes on the way.
    fn candidates(
        &mut self,
        insts: &[Instant],
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        ls: &mut SideRows<'_>,
        rs: &mut SideRows<'_>,
    ) -> Vec<Pair> {
        let mut pairs = Vec::new();
        for (k, inst) in insts.iter().enumerate() {
            let k = k as u32;
            // ΔR ⋈ S_old
            for i in inst.left.clone() {
                let d = &lrows[i];
                let Some(bucket) = d.key.and_then(|key| self.right_index.get(key)) else {
                    continue;
                };
                for (r, rc) in bucket.iter() {
                    let r = rs.copy(r);
                    pairs.push(Pair {
                        inst: k,
                        l: i as u32,
                        r,
                        lc: d.diff,
                        rc,
                        from_left_delta: true,
                    });
                }
            }
            Self::apply(&mut self.left_index, &lrows[inst.left.clone()]);
            // R_new ⋈ ΔS
            for j in inst.right.clone() {
                let d = &rrows[j];
                let Some(bucket) = d.key.and_then(|key| self.left_index.get(key)) else {
                    continue;
                };
                for (l, lc) in bucket.iter() {
                    let l = ls.copy(l);
                    pairs.push(Pair {
                        inst: k,
                        l,
                        r: j as u32,
                        lc,
                        rc: d.diff,
                        from_left_delta: false,
                    });
                }
            }
            // S_new, once nothing reads S_old any more.
            Self::apply(&mut self.right_index, &rrows[inst.right.clone()]);
        }
        pairs
    }

    /// Pass 2: whether each candidate pair satisfies the residual predicate, with the
    /// candidates decoded to evaluate it (both sides' columns); `None` if there is none.
    fn matching(
        &self,
        pairs: &[Pair],
        ls: &SideRows<'_>,
        rs: &SideRows<'_>,
    ) -> Result<Option<(arrow::array::BooleanArray, RecordBatch)>> {
        let Some(f) = &self.filter else { return Ok(None) };
        let n = pairs.len();
        let mut cols = self.left.row_codec.decode(pairs.iter().map(|p| ls.get(p.l)))?;
        cols.extend(self.right.row_codec.decode(pairs.iter().map(|p| rs.get(p.r)))?);
        let fields: Vec<arrow::datatypes::FieldRef> = self
            .left
            .schema
            .fields()
            .iter()
            .chain(self.right.schema.fields().iter())
            .cloned()
            .collect();
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
        let full = RecordBatch::try_new_with_options(
            schema,
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let mask = f.eval_predicate(&full)?;
        Ok(Some((mask, full)))
    }

    /// Pass 3: per instant, the matched pairs and the padding, semi, anti or mark rows that
    /// the tracked match counts change.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        insts: &[Instant],
        pairs: &[Pair],
        mask: &[bool],
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        ls: &mut SideRows<'_>,
        rs: &mut SideRows<'_>,
        out: &mut Out,
    ) {
        let (track_left, track_right) = (self.tracks_left(), self.tracks_right());
        let left_only = self.left_only();
        let mut p = 0;
        for (k, inst) in insts.iter().enumerate() {
            let start = p;
            while p < pairs.len() && pairs[p].inst == k as u32 {
                p += 1;
            }
            let matched: Vec<&Pair> = (start..p).filter(|&i| mask[i]).map(|i| &pairs[i]).collect();
            if !left_only {
                for m in &matched {
                    out.push(Some(m.l), Some(m.r), inst.t, m.lc * m.rc);
                }
            }
            if !track_left && !track_right {
                continue;
            }
            let mut pads: Vec<(RowBytes, bool, i64)> = Vec::new(); // (row, is_left, diff)
            let mut marks: Vec<(RowBytes, i64, bool)> = Vec::new(); // (row, diff, mark)
            if track_left {
                let seen: Vec<Seen<'_>> = matched
                    .iter()
                    .map(|m| (ls.get(m.l), rs.get(m.r), m.rc, m.from_left_delta))
                    .collect();
                let before = Self::track(&mut self.left_rows, &lrows[inst.left.clone()], &seen);
                self.left_changes(before, &rrows[inst.right.clone()], &mut pads, &mut marks);
            }
            if track_right {
                let seen: Vec<Seen<'_>> = matched
                    .iter()
                    .map(|m| (rs.get(m.r), ls.get(m.l), m.lc, !m.from_left_delta))
                    .collect();
                let before = Self::track(&mut self.right_rows, &rrows[inst.right.clone()], &seen);
                for (r, old) in before {
                    let new = self.right_rows.get(&r).copied().unwrap_or_default();
                    let pad = |tr: Tracked| if tr.matches == 0 { tr.count } else { 0 };
                    let d = pad(new) - pad(old);
                    if d != 0 {
                        pads.push((r, false, d));
                    }
                }
            }
            for (r, is_left, d) in pads {
                if is_left {
                    out.push(Some(ls.copy(&r)), None, inst.t, d);
                } else {
                    out.push(None, Some(rs.copy(&r)), inst.t, d);
                }
            }
            for (r, d, mark) in marks {
                out.push(Some(ls.copy(&r)), None, inst.t, d);
                out.marks.push(mark);
            }
        }
    }

    /// The left side's contribution changes at one instant, from its tracked rows' states
    /// before (`before`) and now: padding, semi or anti rows into `pads`, or a mark join's
    /// (row, mark) changes into `marks`. `right` is the right side's changes at the instant
    /// (the null-aware anti join counts them).
    fn left_changes(
        &mut self,
        before: HashMap<RowBytes, Tracked>,
        right: &[DeltaRow<'_>],
        pads: &mut Vec<(RowBytes, bool, i64)>,
        marks: &mut Vec<(RowBytes, i64, bool)>,
    ) {
        let null_aware = matches!(self.kind, JoinKind::LeftAnti { null_aware: true });
        let (old_total, old_null) = (self.right_total, self.right_null);
        if null_aware {
            for d in right {
                self.right_total += d.diff;
                if d.key.is_none() {
                    self.right_null += d.diff;
                }
            }
        }
        let contributes = |kind: JoinKind, tr: Tracked, total: i64, nulls: i64| -> i64 {
            let unmatched = tr.matches == 0;
            let on = match kind {
                JoinKind::LeftSemi => !unmatched,
                JoinKind::LeftAnti { null_aware: true } => {
                    unmatched && (total == 0 || (nulls == 0 && !tr.null_key))
                }
                _ => unmatched,
            };
            if on {
                tr.count
            } else {
                0
            }
        };
        let flipped = null_aware
            && ((old_total == 0) != (self.right_total == 0)
                || (old_null == 0) != (self.right_null == 0));
        let mut touched: Vec<(RowBytes, Tracked)> = before.into_iter().collect();
        if flipped {
            let already: HashSet<RowBytes> = touched.iter().map(|(r, _)| r.clone()).collect();
            for (r, tr) in &self.left_rows {
                if !already.contains(r) {
                    touched.push((r.clone(), *tr));
                }
            }
        }
        for (r, old) in touched {
            let new = self.left_rows.get(&r).copied().unwrap_or_default();
            if self.kind == JoinKind::LeftMark {
                // (row, mark) with the row's multiplicity: the mark flips with the first
                // match and the last.
                let (old_mark, new_mark) = (old.matches > 0, new.matches > 0);
                if old_mark == new_mark {
                    if new.count != old.count {
                        marks.push((r, new.count - old.count, new_mark));
                    }
                } else {
                    if old.count != 0 {
                        marks.push((r.clone(), -old.count, old_mark));
                    }
                    if new.count != 0 {
                        marks.push((r, new.count, new_mark));
                    }
                }
                continue;
            }
            let d = contributes(self.kind, new, self.right_total, self.right_null)
                - contributes(self.kind, old, old_total, old_null);
            if d != 0 {
                pads.push((r, true, d));
            }
        }
    }

    /// `INTERSECT ALL` / `EXCEPT ALL` at one instant: the key is the whole row, so a key's
    /// left bucket holds its m copies on the left and its right bucket its n copies on the
    /// right; the output holds the row f(m, n) times (min(m, n), or max(m − n, 0)). For each
    /// key the instant's changes touch, emits f(m_new, n_new) − f(m_old, n_old) copies of it.
    fn bag_step(
        &mut self,
        inst: &Instant,
        lrows: &[DeltaRow<'_>],
        rrows: &[DeltaRow<'_>],
        ls: &mut SideRows<'_>,
        out: &mut Out,
    ) -> Result<()> {
        let count = |index: &Index, key: &[u8]| -> i64 { index.get(key).map_or(0, Bucket::total) };
        // (key, the number of a left change with it)
        let mut touched: Vec<(&[u8], Option<u32>)> = Vec::new();
        let mut at: HashMap<&[u8], usize> = HashMap::new();
        let changes = inst
            .left
            .clone()
            .map(|i| (lrows[i].key, Some(i as u32)))
            .chain(inst.right.clone().map(|j| (rrows[j].key, None)));
        for (key, left_row) in changes {
            let Some(key) = key else { continue };
            match at.get(key) {
                Some(&j) => {
                    if touched[j].1.is_none() {
                        touched[j].1 = left_row;
                    }
                }
                None => {
                    at.insert(key, touched.len());
                    touched.push((key, left_row));
                }
            }
        }
        let old: Vec<(i64, i64)> = touched
            .iter()
            .map(|(k, _)| (count(&self.left_index, k), count(&self.right_index, k)))
            .collect();
        Self::apply(&mut self.left_index, &lrows[inst.left.clone()]);
        Self::apply(&mut self.right_index, &rrows[inst.right.clone()]);
        let intersect = self.kind == JoinKind::IntersectAll;
        let f = |(m, n): (i64, i64)| -> i64 {
            if intersect {
                m.min(n).max(0)
            } else {
                (m - n).max(0)
            }
        };
        for ((key, row), before) in touched.iter().zip(old) {
            let after = (count(&self.left_index, key), count(&self.right_index, key));
            let d = f(after) - f(before);
            if d == 0 {
                continue;
            }
            // The output is a left row with the key (the key is the whole row): one of the
            // instant's changes, or one still in the index. f changes only while the left side
            // has one.
            let id = match row {
                Some(i) => *i,
                None => {
                    let indexed =
                        self.left_index.get(*key).and_then(|b| b.iter().next().map(|(r, _)| r));
                    let Some(r) = indexed else {
                        return Err(weir_common::WeirError::internal(
                            "bag set operation without a row",
                        ));
                    };
                    ls.copy(r)
                }
            };
            out.push(Some(id), None, inst.t, d);
        }
        Ok(())
    }

    /// The output batch: each side's rows decoded once.
    fn output(&self, out: Out, ls: &SideRows<'_>, rs: &SideRows<'_>) -> Result<ChangeBatch> {
        let n = out.rows.len();
        if n == 0 {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let lefts: Vec<Option<&[u8]>> = out.rows.iter().map(|r| r.0.map(|id| ls.get(id))).collect();
        let mut cols = side_columns(&self.left.row_codec, &self.left.schema, &lefts)?;
        if self.kind == JoinKind::LeftMark {
            cols.push(std::sync::Arc::new(arrow::array::BooleanArray::from(out.marks)));
        } else if !self.left_only() {
            let rights: Vec<Option<&[u8]>> =
                out.rows.iter().map(|r| r.1.map(|id| rs.get(id))).collect();
            cols.extend(side_columns(&self.right.row_codec, &self.right.schema, &rights)?);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(data, out.times, out.diffs))
    }
}

impl Operator for Join {
    /// Inputs: the left side's changes, then the right's.
    fn eval(&mut self, _step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [dl, dr] = take_inputs::<2>(inputs)?;
        self.run(&dl, &dr)
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// State: the join's own sections (see [`checkpoint`]).
    fn save_state(&self, w: &mut crate::state::StateWriter) -> Result<()> {
        self.save_own(w)
    }

    fn restore_state(&mut self, r: &mut crate::state::StateReader) -> Result<()> {
        self.restore_own(r)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{fed, kv, kv_schema, run, Tick};

    fn join(kind: JoinKind, left: Vec<Tick>, right: Vec<Tick>) -> Vec<String> {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = || JoinSide {
            keys: vec![ScalarExpr::compile(&col("k"), &df).unwrap()],
            row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
            schema: kv_schema(),
        };
        let schema = if matches!(kind, JoinKind::LeftSemi | JoinKind::LeftAnti { .. }) {
            kv_schema()
        } else {
            Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("v", DataType::Int64, true),
                Field::new("k2", DataType::Utf8, true),
                Field::new("v2", DataType::Int64, true),
            ]))
        };
        let op = Join::new(
            kind,
            false,
            side(),
            side(),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            None,
            schema,
        );
        run(&mut fed(op, [left, right]))
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

#[cfg(test)]
mod mark_tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::col;

    use super::*;
    use crate::testing::{fed, kv, kv_schema, run};

    #[test]
    fn mark_join_flags_rows_with_a_match() {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let side = || JoinSide {
            keys: vec![ScalarExpr::compile(&col("k"), &df).unwrap()],
            row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
            schema: kv_schema(),
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new("mark", DataType::Boolean, true),
        ]));
        let op = Join::new(
            JoinKind::LeftMark,
            false,
            side(),
            side(),
            RowCodec::new(vec![DataType::Utf8]).unwrap(),
            None,
            schema,
        );
        let left = vec![kv(1, "+1 a 1, +1 b 2")];
        let right = vec![kv(1, "+1 a 9"), kv(2, "+1 b 3")];
        assert_eq!(
            run(&mut fed(op, [left, right])),
            ["@1 +1 a 1 true", "@1 +1 b 2 false", "@2 +1 b 2 true", "@2 -1 b 2 false"]
        );
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::Bucket;

    fn contents(b: &Bucket) -> Vec<(Vec<u8>, i64)> {
        let mut v: Vec<(Vec<u8>, i64)> = b.iter().map(|(r, c)| (r.to_vec(), c)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_bucket_grows_from_one_row_and_empties_exactly() {
        let mut b = Bucket::One(b"a"[..].into(), 1);
        assert!(!b.add(b"a", 2));
        assert_eq!(contents(&b), [(b"a".to_vec(), 3)]);
        assert!(!b.add(b"b", 1));
        assert!(matches!(b, Bucket::Many(_)));
        assert_eq!(contents(&b), [(b"a".to_vec(), 3), (b"b".to_vec(), 1)]);
        assert_eq!(b.total(), 4);
        // Back to one row: kept inline again.
        assert!(!b.add(b"a", -3));
        assert!(matches!(b, Bucket::One(..)));
        assert_eq!(contents(&b), [(b"b".to_vec(), 1)]);
        assert!(b.add(b"b", -1));
    }
}

#[cfg(test)]
mod span_tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::DFSchema;
    use datafusion_expr::{col, lit};
    use proptest::prelude::*;

    use super::*;
    use crate::operator::EvalCtx;
    use crate::testing::Dataflow;
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

    fn join(kind: JoinKind, filter: bool, left: Vec<Tick>, right: Vec<Tick>) -> Dataflow {
        let df = DFSchema::try_from(kv_schema().as_ref().clone()).unwrap();
        let bag = matches!(kind, JoinKind::IntersectAll | JoinKind::ExceptAll);
        let side = || JoinSide {
            keys: if bag {
                vec![
                    ScalarExpr::compile(&col("k"), &df).unwrap(),
                    ScalarExpr::compile(&col("v"), &df).unwrap(),
                ]
            } else {
                vec![ScalarExpr::compile(&col("k"), &df).unwrap()]
            },
            row_codec: RowCodec::for_schema(&kv_schema()).unwrap(),
            schema: kv_schema(),
        };
        let both = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new("k2", DataType::Utf8, true),
            Field::new("v2", DataType::Int64, true),
        ]));
        let schema = match kind {
            JoinKind::LeftMark => Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("v", DataType::Int64, true),
                Field::new("mark", DataType::Boolean, true),
            ])),
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

    /// Ticks from (time, diff, key, value) changes; a key or value of 3 is NULL.
    fn ticks(changes: &[(i64, i64, u8, i64)]) -> Vec<Tick> {
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
    fn consolidated(lines: Vec<String>) -> Vec<String> {
        let mut net: std::collections::BTreeMap<(i64, String), i64> = Default::default();
        for l in lines {
            let (t, rest) = l.split_once(' ').unwrap();
            let (d, row) = rest.split_once(' ').unwrap();
            *net.entry((t[1..].parse().unwrap(), row.to_string())).or_default() +=
                d.parse::<i64>().unwrap();
        }
        net.into_iter()
            .filter(|(_, d)| *d != 0)
            .map(|((t, r), d)| format!("@{t} {d:+} {r}"))
            .collect()
    }

    /// Insertions of a row with a multiplicity, some retracted whole at a later instant (a
    /// relation's changes never remove what is not there).
    fn changes() -> impl Strategy<Value = Vec<(i64, i64, u8, i64)>> {
        prop::collection::vec(
            (0i64..12, 1i64..3, 0u8..4, 0i64..4, prop::option::of(0i64..6)),
            0..12,
        )
        .prop_map(|items| {
            items
                .into_iter()
                .flat_map(|(t, n, k, v, gone)| {
                    std::iter::once((t, n, k, v)).chain(gone.map(|g| (t + g, -n, k, v)))
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

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
