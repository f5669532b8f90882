//! Row encoding for operator state: Arrow's row format, which is compact, hashable and
//! order-preserving (byte order = SQL order of the values), so it serves as hash-map key, as
//! multiset element and as the sort key that makes output order deterministic.

use std::sync::OnceLock;

use arrow::array::{
    make_array, Array, ArrayData, ArrayRef, BooleanBufferBuilder, RecordBatch, RecordBatchOptions,
};
use arrow::buffer::{Buffer, NullBuffer};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use weir_common::Result;

use crate::numeric_row::NumericRow;

/// Encodes columns of fixed types to rows and back.
#[derive(Debug)]
pub struct RowCodec {
    types: Vec<DataType>,
    converter: Option<RowConverter>,
    /// Decoding without the converter, when every column is an 8-byte number (found on the
    /// first decode; see [`Fixed`]).
    fixed: OnceLock<Option<Fixed>>,
}

/// Rows whose columns are all 8-byte numbers: BIGINT, DOUBLE, and the types an Arrow array
/// holds as an i64 (timestamps, DATE64, TIME64, durations). Each column is then 9 bytes at a
/// fixed place of the row (see `crate::numeric_row`), so a column is decoded by reading its
/// place in each row, where the converter walks every row through every column before it.
/// Taken only after the converter is seen to write and read sample values (NULL, zero, the
/// ends of the range) exactly so for these types, so a change of Arrow's format turns it off.
#[derive(Debug)]
struct Fixed {
    layout: NumericRow,
    types: Vec<DataType>,
}

impl Fixed {
    /// The decoder for rows of `types` as `converter` writes them, if it applies.
    fn of(types: &[DataType], converter: &RowConverter) -> Option<Fixed> {
        let fixed = Fixed { layout: NumericRow::checked(types, converter)?, types: types.to_vec() };
        // The decoder builds the sample columns back, of the codec's own types.
        let (ints, floats) = crate::numeric_row::samples();
        let cols = fixed.layout.columns(types, &ints, &floats)?;
        let rows = converter.convert_columns(&cols).ok()?;
        let back = fixed
            .decode(&(0..rows.num_rows()).map(|i| rows.row(i).data()).collect::<Vec<_>>())
            .ok()?;
        back.iter().zip(&cols).all(|(a, b)| a.as_ref() == b.as_ref()).then_some(fixed)
    }

    /// Decodes `rows` (each of this layout's width).
    fn decode(&self, rows: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        let n = rows.len();
        self.types
            .iter()
            .enumerate()
            .map(|(c, t)| {
                let mut vals: Vec<i64> = Vec::with_capacity(n);
                let null_count = self.layout.read_column(rows, c, &mut vals);
                // The validity is built only for a column that has a NULL (a second pass).
                let nulls = (null_count > 0).then(|| {
                    let mut valid = BooleanBufferBuilder::new(n);
                    for r in rows {
                        valid.append(self.layout.native_bits(r, c).is_some());
                    }
                    NullBuffer::new(valid.finish())
                });
                let data = ArrayData::builder(t.clone())
                    .len(n)
                    .add_buffer(Buffer::from_vec(vals))
                    .nulls(nulls)
                    .build()?;
                Ok(make_array(data))
            })
            .collect()
    }
}

/// An encoded row, owned.
pub type RowBytes = Box<[u8]>;

impl RowCodec {
    pub fn new(types: Vec<DataType>) -> Result<Self> {
        let mut codec = Self::plain(types)?;
        // Looked for on the first decode.
        codec.fixed = OnceLock::new();
        Ok(codec)
    }

    /// A codec that decodes through the converter only.
    fn plain(types: Vec<DataType>) -> Result<Self> {
        let converter = if types.is_empty() {
            None
        } else {
            Some(RowConverter::new(types.iter().cloned().map(SortField::new).collect())?)
        };
        Ok(RowCodec { types, converter, fixed: OnceLock::from(None) })
    }

    /// The types of the encoded columns.
    pub fn types(&self) -> &[DataType] {
        &self.types
    }

    /// Arrow's converter behind the codec (None for rows of no column).
    pub(crate) fn converter(&self) -> Option<&RowConverter> {
        self.converter.as_ref()
    }

    pub fn for_schema(schema: &SchemaRef) -> Result<Self> {
        Self::new(schema.fields().iter().map(|f| f.data_type().clone()).collect())
    }

    /// Encodes `n` rows of `columns` (cast to the codec's types where they differ).
    pub fn encode(&self, columns: &[ArrayRef], n: usize) -> Result<EncodedRows> {
        match &self.converter {
            None => Ok(EncodedRows::Empty(n)),
            Some(c) => Ok(EncodedRows::Rows(c.convert_columns(&self.conform(columns)?)?)),
        }
    }

    /// `columns` cast to the codec's types where they differ: what [`RowCodec::encode`]
    /// encodes, and what decoding its rows gives back.
    pub fn conform(&self, columns: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        let cols = columns
            .iter()
            .zip(&self.types)
            .map(
                |(a, t)| {
                    if a.data_type() == t {
                        Ok(a.clone())
                    } else {
                        arrow::compute::cast(a, t)
                    }
                },
            )
            .collect::<std::result::Result<_, _>>()?;
        Ok(cols)
    }

    /// Decodes rows back into columns.
    pub fn decode<'a>(&self, rows: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        match &self.converter {
            None => Ok(vec![]),
            Some(c) => {
                let rows: Vec<&[u8]> = rows.into_iter().collect();
                let fixed = self.fixed.get_or_init(|| Fixed::of(&self.types, c));
                if let Some(f) = fixed {
                    let width = f.types.len() * crate::numeric_row::WIDTH;
                    if rows.iter().all(|r| r.len() == width) {
                        return f.decode(&rows);
                    }
                }
                let parser = c.parser();
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

/// Orders two byte strings as `<[u8]>::cmp` does, comparing eight bytes at a time as
/// big-endian numbers, inline. The library's comparison calls `memcmp`, whose call costs more
/// than the comparison itself for the short encodings operators compare in their inner loops
/// (a window function's B-tree, its output's sort).
#[inline]
pub fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    let (mut wa, mut wb) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    for (x, y) in (&mut wa).zip(&mut wb) {
        let (x, y) = (word(x), word(y));
        if x != y {
            return x.cmp(&y);
        }
    }
    // The last bytes (fewer than eight) as a zero-padded number: equal numbers mean one tail
    // is a prefix of the other (or both are the same), and the shorter string is first.
    tail(wa.remainder()).cmp(&tail(wb.remainder())).then(a.len().cmp(&b.len()))
}

/// Whether two byte strings are equal, as `==` on slices says: up to [`EQ_INLINE`] bytes eight
/// at a time inline (see [`cmp_bytes`] for why not `memcmp`), longer ones by `memcmp`, whose
/// wide loads then pay for its call (a row with strings, a join's bucket of such rows).
#[inline]
pub fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n > EQ_INLINE {
        return a == b;
    }
    let mut i = 0;
    while i + 8 <= n {
        if word(&a[i..i + 8]) != word(&b[i..i + 8]) {
            return false;
        }
        i += 8;
    }
    tail(&a[i..]) == tail(&b[i..])
}

/// The longest byte strings [`eq_bytes`] compares inline: a few encoded numbers.
const EQ_INLINE: usize = 32;

/// A byte string looked up in a hash map keyed by owned byte strings (`Box<[u8]>`, a
/// `SmallVec` of bytes): hashed as the slice is, so it finds the key its bytes equal, and
/// compared with [`eq_bytes`], where the map's own `==` on the slices would call `memcmp` for
/// each candidate.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a>(pub &'a [u8]);

impl std::hash::Hash for Probe<'_> {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl<K: std::ops::Deref<Target = [u8]>> hashbrown::Equivalent<K> for Probe<'_> {
    #[inline]
    fn equivalent(&self, key: &K) -> bool {
        eq_bytes(self.0, key)
    }
}

/// Up to seven bytes as a big-endian number, zero-padded on the right, read a byte at a time
/// (a copy of a length not known here would be a call).
#[inline]
fn tail(b: &[u8]) -> u64 {
    b.iter().enumerate().fold(0, |w, (i, &x)| w | (u64::from(x) << (56 - 8 * i)))
}

/// The first 16 bytes of `b`, zero-padded, as a big-endian number: comparing prefixes, then
/// (when equal) the whole byte strings, orders byte strings as comparing them does, with one
/// integer comparison for most pairs.
pub fn sort_prefix(b: &[u8]) -> u128 {
    let mut p = [0u8; 16];
    let n = b.len().min(16);
    p[..n].copy_from_slice(&b[..n]);
    u128::from_be_bytes(p)
}

/// Eight bytes as a big-endian number.
#[inline]
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_be_bytes(w)
}

/// A row's place in a sort of encodings: its first 24 bytes, zero-padded, as two big-endian
/// numbers, and its index. Comparing the prefixes, then (when equal) the whole byte strings,
/// orders byte strings as comparing them does, with integer comparisons for most pairs: the
/// 24 bytes cover two or three encoded numbers, so a group's row before and after its
/// aggregate changed (the same key, another value) rarely needs the bytes. The second number
/// costs no room: a `(u128, u32)` is padded to 32 bytes anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKey {
    prefix: (u128, u64),
    /// The row's index in the encoded rows.
    pub index: u32,
}

impl SortKey {
    fn of(b: &[u8], index: u32) -> Self {
        let mut p = [0u8; 24];
        let n = b.len().min(24);
        p[..n].copy_from_slice(&b[..n]);
        let (hi, lo) = p.split_at(16);
        let hi = u128::from_be_bytes(hi.try_into().unwrap_or_default());
        let lo = u64::from_be_bytes(lo.try_into().unwrap_or_default());
        SortKey { prefix: (hi, lo), index }
    }

    /// Whether the two rows' prefixes are equal (the rows may be).
    pub fn same_prefix(&self, other: &SortKey) -> bool {
        self.prefix == other.prefix
    }
}

/// The rows `range` of `rows` into `order` (cleared first), sorted as their encodings sort,
/// equal rows side by side in index order: prefixes compared first (see [`SortKey`]), whole
/// encodings only where those are equal. Input that is nearly sorted already (an aggregate's
/// changes come in key order, a group's old and new row perhaps swapped) is sorted by
/// insertion, in time linear in the rows and the places they move; other input by a
/// quicksort.
pub fn sort_by_encoding(
    rows: &EncodedRows,
    range: std::ops::Range<usize>,
    order: &mut Vec<SortKey>,
) {
    let row = |i: u32| rows.get(i as usize);
    order.clear();
    order.extend(range.map(|i| SortKey::of(rows.get(i), i as u32)));
    let cmp = |a: &SortKey, b: &SortKey| {
        a.prefix
            .cmp(&b.prefix)
            .then_with(|| row(a.index).cmp(row(b.index)))
            .then(a.index.cmp(&b.index))
    };
    let budget = 2 * order.len() + 64;
    if !insertion_sort(order, budget, |a, b| cmp(a, b).is_lt()) {
        order.sort_unstable_by(cmp);
    }
}

/// Sorts `v` by insertion while it takes at most `budget` moves of one place; returns whether
/// it is sorted (else `v` holds the same elements, partly sorted).
fn insertion_sort<T: Copy>(v: &mut [T], budget: usize, less: impl Fn(&T, &T) -> bool) -> bool {
    let mut moves = 0;
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && less(&x, &v[j - 1]) {
            v[j] = v[j - 1];
            j -= 1;
            moves += 1;
        }
        v[j] = x;
        if moves > budget {
            return false;
        }
    }
    true
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, BinaryArray, Int64Array};
    use arrow::datatypes::DataType;
    use proptest::prelude::*;

    use super::{cmp_bytes, eq_bytes, sort_by_encoding, EncodedRows, RowCodec};

    /// `values` encoded as one Binary column; the indices in the order a plain sort of the
    /// encodings (then the indices) gives, and in the order `sort_by_encoding` gives.
    fn both_orders(values: &[Vec<u8>]) -> (Vec<u32>, Vec<u32>) {
        let codec = RowCodec::new(vec![DataType::Binary]).unwrap();
        let col: ArrayRef =
            Arc::new(BinaryArray::from_iter_values(values.iter().map(|v| v.as_slice())));
        let rows = codec.encode(&[col], values.len()).unwrap();
        let mut want: Vec<u32> = (0..values.len() as u32).collect();
        want.sort_by(|&a, &b| rows.get(a as usize).cmp(rows.get(b as usize)).then(a.cmp(&b)));
        let mut order = Vec::new();
        sort_by_encoding(&rows, 0..values.len(), &mut order);
        (want, order.iter().map(|k| k.index).collect())
    }

    /// Values sharing long prefixes (so that the 24-byte prefixes tie), of every length up to
    /// 40 bytes, duplicates included.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        (0usize..40, 0u8..3).prop_map(|(n, last)| {
            let mut v = vec![7u8; n];
            if let Some(l) = v.last_mut() {
                *l = last;
            }
            v
        })
    }

    /// Decodes `rows` through the converter alone.
    fn by_converter(codec: &RowCodec, rows: &EncodedRows) -> Vec<ArrayRef> {
        let c = codec.converter.as_ref().unwrap();
        let parser = c.parser();
        c.convert_rows((0..rows.len()).map(|i| parser.parse(rows.get(i)))).unwrap()
    }

    /// Rows of 8-byte numbers take the fixed decoder, others the converter.
    #[test]
    fn the_fixed_decoder_is_taken_for_eight_byte_numbers_only() {
        use arrow::datatypes::TimeUnit;
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        for (types, fixed) in [
            (vec![DataType::Int64, ts.clone(), DataType::Float64, DataType::Date64], true),
            (
                vec![DataType::Duration(TimeUnit::Second), DataType::Time64(TimeUnit::Nanosecond)],
                true,
            ),
            (vec![DataType::Int64, DataType::Utf8], false),
            (vec![DataType::Int32], false),
            (vec![DataType::UInt64], false),
        ] {
            let codec = RowCodec::new(types.clone()).unwrap();
            let cols: Vec<ArrayRef> = types
                .iter()
                .map(|t| {
                    let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(3), None, Some(-7)]));
                    arrow::compute::cast(&a, t).unwrap()
                })
                .collect();
            let rows = codec.encode(&cols, 3).unwrap();
            let got = codec.decode((0..3).map(|i| rows.get(i))).unwrap();
            assert_eq!(got, cols, "{types:?}");
            assert_eq!(codec.fixed.get().unwrap().is_some(), fixed, "{types:?}");
        }
    }

    proptest! {
        /// Any BIGINT, TIMESTAMP WITH TIME ZONE and DOUBLE values, NULLs included, decode as
        /// the converter decodes them.
        #[test]
        fn the_fixed_decoder_decodes_as_the_converter(
            rows in proptest::collection::vec(
                (
                    proptest::option::of(any::<i64>()),
                    proptest::option::of(any::<i64>()),
                    proptest::option::of(any::<f64>()),
                ),
                0..60,
            )
        ) {
            use arrow::array::TimestampMillisecondArray;
            use arrow::datatypes::TimeUnit;
            let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("+02:00".into()));
            let codec = RowCodec::new(vec![DataType::Int64, ts, DataType::Float64]).unwrap();
            let cols: Vec<ArrayRef> = vec![
                Arc::new(rows.iter().map(|r| r.0).collect::<Int64Array>()),
                Arc::new(
                    rows.iter().map(|r| r.1).collect::<TimestampMillisecondArray>()
                        .with_timezone("+02:00"),
                ),
                Arc::new(rows.iter().map(|r| r.2).collect::<arrow::array::Float64Array>()),
            ];
            let enc = codec.encode(&cols, rows.len()).unwrap();
            let got = codec.decode((0..rows.len()).map(|i| enc.get(i))).unwrap();
            prop_assert!(codec.fixed.get().is_some_and(Option::is_some));
            let want = by_converter(&codec, &enc);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.data_type(), w.data_type());
                prop_assert_eq!(g.nulls(), w.nulls());
                // Bit for bit (NaNs and -0.0 included) where valid (what lies under a NULL
                // is no value).
                let (gd, wd) = (g.to_data(), w.to_data());
                let (gb, wb) = (gd.buffers()[0].as_slice(), wd.buffers()[0].as_slice());
                for i in (0..g.len()).filter(|&i| g.is_valid(i)) {
                    prop_assert_eq!(&gb[i * 8..i * 8 + 8], &wb[i * 8..i * 8 + 8]);
                }
            }
        }

        /// Byte strings of every length up to 40, sharing long prefixes, compare as the
        /// library compares them.
        #[test]
        fn cmp_bytes_orders_as_slices_do(a in value(), b in value(), tail in 0u8..4) {
            prop_assert_eq!(cmp_bytes(&a, &b), a.cmp(&b));
            let mut c = a.clone();
            c.push(tail);
            prop_assert_eq!(cmp_bytes(&a, &c), a.cmp(&c));
            prop_assert_eq!(cmp_bytes(&c, &a), c.cmp(&a));
            prop_assert_eq!(eq_bytes(&a, &b), a == b);
            prop_assert!(eq_bytes(&a, &a.clone()));
            prop_assert!(!eq_bytes(&a, &c));
            // Past the inline length too.
            let (long_a, long_b) = ([&a[..], &a[..]].concat(), [&a[..], &b[..]].concat());
            prop_assert_eq!(eq_bytes(&long_a, &long_b), long_a == long_b);
        }

        /// Any bytes, and a copy with one byte changed: inline and `memcmp` lengths alike.
        #[test]
        fn eq_bytes_is_slice_equality(
            a in proptest::collection::vec(any::<u8>(), 0..48),
            at in any::<usize>(),
            bit in 0u8..8,
        ) {
            prop_assert!(eq_bytes(&a, &a.clone()));
            let mut b = a.clone();
            if !b.is_empty() {
                let i = at % b.len();
                b[i] ^= 1 << bit;
                prop_assert!(!eq_bytes(&a, &b));
                prop_assert_eq!(cmp_bytes(&a, &b), a.cmp(&b));
            }
            // A string is not equal to itself shortened (the empty one excepted).
            prop_assert_eq!(eq_bytes(&a, &a[..a.len().saturating_sub(1)]), a.is_empty());
        }

        #[test]
        fn any_order_sorts_as_the_encodings(values in proptest::collection::vec(value(), 0..300)) {
            let (want, got) = both_orders(&values);
            prop_assert_eq!(got, want);
        }

        /// Sorted input with neighbours swapped here and there: the insertion path.
        #[test]
        fn nearly_sorted_input_sorts_as_the_encodings(
            mut values in proptest::collection::vec(value(), 0..300),
            swaps in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            values.sort();
            for s in swaps {
                if values.len() > 1 {
                    let i = s.index(values.len() - 1);
                    values.swap(i, i + 1);
                }
            }
            let (want, got) = both_orders(&values);
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn insertion_gives_up_past_its_budget() {
        let mut v: Vec<u32> = (0..100).rev().collect();
        assert!(!super::insertion_sort(&mut v, 50, |a, b| a < b));
        let mut w: Vec<u32> = (0..100).collect();
        w.swap(10, 11);
        assert!(super::insertion_sort(&mut w, 50, |a, b| a < b));
        assert!(w.windows(2).all(|p| p[0] < p[1]));
    }
}
