//! Row encoding for operator state: Arrow's row format, which is compact, hashable and
//! order-preserving (byte order = SQL order of the values), so it serves as hash-map key, as
//! multiset element and as the sort key that makes output order deterministic.

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use weir_common::Result;

/// Encodes columns of fixed types to rows and back.
#[derive(Debug)]
pub struct RowCodec {
    types: Vec<DataType>,
    converter: Option<RowConverter>,
}

/// An encoded row, owned.
pub type RowBytes = Box<[u8]>;

impl RowCodec {
    pub fn new(types: Vec<DataType>) -> Result<Self> {
        let converter = if types.is_empty() {
            None
        } else {
            Some(RowConverter::new(types.iter().cloned().map(SortField::new).collect())?)
        };
        Ok(RowCodec { types, converter })
    }

    /// The types of the encoded columns.
    pub fn types(&self) -> &[DataType] {
        &self.types
    }

    pub fn for_schema(schema: &SchemaRef) -> Result<Self> {
        Self::new(schema.fields().iter().map(|f| f.data_type().clone()).collect())
    }

    /// Encodes `n` rows of `columns` (which must have the codec's types).
    pub fn encode(&self, columns: &[ArrayRef], n: usize) -> Result<EncodedRows> {
        match &self.converter {
            None => Ok(EncodedRows::Empty(n)),
            Some(c) => {
                let cols: Vec<ArrayRef> = columns
                    .iter()
                    .zip(&self.types)
                    .map(|(a, t)| {
                        if a.data_type() == t {
                            Ok(a.clone())
                        } else {
                            arrow::compute::cast(a, t)
                        }
                    })
                    .collect::<std::result::Result<_, _>>()?;
                Ok(EncodedRows::Rows(c.convert_columns(&cols)?))
            }
        }
    }

    /// Decodes rows back into columns.
    pub fn decode<'a>(&self, rows: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        match &self.converter {
            None => Ok(vec![]),
            Some(c) => {
                let parser = c.parser();
                let rows: Vec<&[u8]> = rows.into_iter().collect();
                Ok(c.convert_rows(rows.iter().map(|r| parser.parse(r)))?)
            }
        }
    }

    /// Decodes rows into a record batch of `schema`.
    pub fn decode_batch<'a>(
        &self,
        schema: &SchemaRef,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RecordBatch> {
        let rows: Vec<&[u8]> = rows.into_iter().collect();
        let n = rows.len();
        let cols = self.decode(rows)?;
        Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// The first 16 bytes of `b`, zero-padded, as a big-endian number: comparing prefixes, then
/// (when equal) the whole byte strings, orders byte strings as comparing them does, with one
/// integer comparison for most pairs.
fn sort_prefix(b: &[u8]) -> u128 {
    let mut p = [0u8; 16];
    let n = b.len().min(16);
    p[..n].copy_from_slice(&b[..n]);
    u128::from_be_bytes(p)
}

/// The rows `range` of `rows` into `order` (cleared first) as (prefix, index), sorted as
/// their encodings sort, equal rows side by side in index order: prefixes compared first
/// (see [`sort_prefix`]), whole encodings only where those are equal.
pub fn sort_by_encoding(
    rows: &EncodedRows,
    range: std::ops::Range<usize>,
    order: &mut Vec<(u128, u32)>,
) {
    let row = |i: u32| rows.get(i as usize);
    order.clear();
    order.extend(range.map(|i| (sort_prefix(rows.get(i)), i as u32)));
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| row(a.1).cmp(row(b.1))).then(a.1.cmp(&b.1))
    });
}

/// The result of [`RowCodec::encode`].
pub enum EncodedRows {
    /// Zero columns: every row encodes as the empty byte string.
    Empty(usize),
    Rows(Rows),
}

/// Backing for the empty rows of [`EncodedRows::Empty`]: an empty slice that points at real
/// memory. An empty `&[]` or `Box<[u8]>` points at address 1, and comparing two byte slices
/// of length 0 where either does (`bcmp`, as every hash-map probe does) costs ~140 ns on this
/// project's machines instead of ~1 ns: glibc's AVX-512 `memcmp` makes a masked load from
/// page 0, which the CPU resolves with a microcode assist. That was a fifth of NEXMark q7 (a
/// MAX without GROUP BY looked its one group up under the empty key for every row). Keys that
/// may be empty are stored inline (the join's and the aggregate's keys are `SmallVec`s), so
/// both sides of such a comparison point at real memory.
static EMPTY_ROW: [u8; 1] = [0];

/// The empty encoded row, pointing at real memory (see [`EMPTY_ROW`]).
pub fn empty_row() -> &'static [u8] {
    &EMPTY_ROW[..0]
}

impl EncodedRows {
    pub fn get(&self, i: usize) -> &[u8] {
        match self {
            EncodedRows::Empty(_) => empty_row(),
            EncodedRows::Rows(r) => r.row(i).data(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            EncodedRows::Empty(n) => *n,
            EncodedRows::Rows(r) => r.num_rows(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
