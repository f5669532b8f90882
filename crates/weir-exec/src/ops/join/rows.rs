//! How a join step names its rows: each side's changes encoded once, copies of indexed rows
//! in a per-step arena, the step's instants, the candidate pairs, and the output rows, decoded
//! once per step.

use arrow::array::{new_null_array, ArrayRef};
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use super::JoinSide;
use crate::row::{EncodedRows, RowCodec};

/// One side's columns for output rows; `None` rows are NULL (outer-join padding).
pub(super) fn side_columns(
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

/// A side's join keys over the changes `d`, encoded, and for each change whether its key is
/// NULL-bearing and so never matches (a key column is NULL and `nulls_equal` is false).
pub(super) fn encode_keys(
    side: &JoinSide,
    key_codec: &RowCodec,
    d: &ChangeBatch,
    nulls_equal: bool,
) -> Result<(EncodedRows, Vec<bool>)> {
    let n = d.len();
    let key_cols: Vec<ArrayRef> =
        side.keys.iter().map(|k| k.eval(&d.data)).collect::<Result<_>>()?;
    let keys = key_codec.encode(&key_cols, n)?;
    let null_key = (0..n).map(|i| !nulls_equal && key_cols.iter().any(|c| c.is_null(i))).collect();
    Ok((keys, null_key))
}

/// One input change, encoded: its key (`None` if a key column is NULL and NULLs never match),
/// its row and its diff. Borrowed from the span's encoded rows.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeltaRow<'a> {
    pub(super) key: Option<&'a [u8]>,
    pub(super) row: &'a [u8],
    pub(super) diff: i64,
}

/// A side's changes of a span, encoded once: keys and rows in Arrow's row format.
pub(super) struct EncodedSide {
    keys: EncodedRows,
    rows: EncodedRows,
    null_key: Vec<bool>,
}

impl EncodedSide {
    pub(super) fn new(
        side: &JoinSide,
        key_codec: &RowCodec,
        d: &ChangeBatch,
        nulls_equal: bool,
    ) -> Result<Self> {
        let (keys, null_key) = encode_keys(side, key_codec, d, nulls_equal)?;
        let rows = side.row_codec.encode(d.data.columns(), d.len())?;
        Ok(EncodedSide { keys, rows, null_key })
    }

    pub(super) fn delta_rows<'a>(&'a self, diffs: &[i64]) -> Vec<DeltaRow<'a>> {
        (0..diffs.len())
            .map(|i| DeltaRow {
                key: (!self.null_key[i]).then(|| self.keys.get(i)),
                row: self.rows.get(i),
                diff: diffs[i],
            })
            .collect()
    }
}

/// The room of a side's arena of copied rows, kept from one step for the next, so that a
/// step's copies do not grow it from empty (each growth copies what is there).
#[derive(Debug, Default)]
pub(super) struct Arena {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Arena {
    /// The most bytes of room kept between steps: an outsized step's room is given back.
    const KEEP_BYTES: usize = 1 << 20;
}

/// The rows a span's pairs and output name on one side: the side's changes (numbers
/// `0..delta.len()`) and copies of indexed rows (the numbers after).
pub(super) struct SideRows<'a> {
    delta: &'a [DeltaRow<'a>],
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl<'a> SideRows<'a> {
    /// The rows of a step whose copies go into `room` (empty; see [`SideRows::room`]).
    pub(super) fn in_room(delta: &'a [DeltaRow<'a>], room: Arena) -> Self {
        let Arena { mut bytes, mut ends } = room;
        bytes.clear();
        ends.clear();
        SideRows { delta, bytes, ends }
    }

    /// The arena's room, emptied, for the next step (none if it grew past
    /// [`Arena::KEEP_BYTES`]).
    pub(super) fn room(self) -> Arena {
        let SideRows { mut bytes, mut ends, .. } = self;
        if bytes.capacity() > Arena::KEEP_BYTES {
            return Arena::default();
        }
        bytes.clear();
        ends.clear();
        Arena { bytes, ends }
    }

    /// Copies `row` into the arena; returns its number.
    pub(super) fn copy(&mut self, row: &[u8]) -> u32 {
        self.bytes.extend_from_slice(row);
        self.ends.push(self.bytes.len());
        (self.delta.len() + self.ends.len() - 1) as u32
    }

    pub(super) fn get(&self, id: u32) -> &[u8] {
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
pub(super) struct Instant {
    pub(super) t: Time,
    pub(super) left: std::ops::Range<usize>,
    pub(super) right: std::ops::Range<usize>,
}

/// The room a step reserves up front for a vector with about one entry per change (its
/// instants, an interval join's pairs): one per change, up to this many. A step of a chunk of
/// ten thousand events then never grows them (each growth copies them), and a large batch at
/// one instant, which needs one, does not reserve megabytes.
pub(super) const ROOM_PER_CHANGE: usize = 1 << 14;

/// The instants of two time-sorted change lists, in order.
pub(super) fn instants(lt: &[Time], rt: &[Time]) -> Vec<Instant> {
    let (mut i, mut j) = (0, 0);
    // At most one instant per row, often about that many.
    let mut out = Vec::with_capacity((lt.len() + rt.len()).min(ROOM_PER_CHANGE));
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
pub(super) struct Pair {
    pub(super) inst: u32,
    pub(super) l: u32,
    pub(super) r: u32,
    pub(super) lc: i64,
    pub(super) rc: i64,
    pub(super) from_left_delta: bool,
}

/// A matched pair seen from one tracked side: (own row, partner row, the partner's
/// multiplicity, whether it came from the own side's delta).
pub(super) type Seen<'a> = (&'a [u8], &'a [u8], i64, bool);

/// The span's output: per row, its left and right row numbers (`None` pads with NULLs), its
/// instant, its diff, and for a mark join the mark.
#[derive(Default)]
pub(super) struct Out {
    pub(super) rows: Vec<(Option<u32>, Option<u32>)>,
    pub(super) times: Vec<Time>,
    pub(super) diffs: Vec<i64>,
    pub(super) marks: Vec<bool>,
}

impl Out {
    pub(super) fn push(&mut self, l: Option<u32>, r: Option<u32>, t: Time, d: i64) {
        self.rows.push((l, r));
        self.times.push(t);
        self.diffs.push(d);
    }
}
