//! Checkpointed state: what a [`crate::QueryRunner`] and its operators hold between instants,
//! as Arrow record batches serialized with Arrow's IPC stream format.
//!
//! Saving walks the graph's nodes in a fixed order (pre-order from the root: each node
//! before its inputs, inputs in plan order, see [`crate::graph`]): each operator writes its
//! own sections (named record batches) with [`StateWriter::put`]. Restoring walks the nodes in
//! the same order and takes the sections back with
//! [`StateReader::take`], which checks each section's name and *signature* (a description of
//! the operator's types and parameters), so state saved by another plan is refused with an
//! error naming the first section that does not fit.
//!
//! Layout of the bytes: one Arrow IPC stream of one batch, a row per section, with columns
//! `section` (Utf8), `signature` (Utf8), `payload` (Binary: the section's batch as an IPC
//! stream of its own, since sections have different schemas) and `check` (UInt32: CRC-32 of
//! name, signature and payload, so a damaged payload is detected before it is decoded). The
//! schema's metadata carries [`STATE_VERSION`]. The bytes are written and read by
//! [`weir_common::ipc`], which refuses damaged streams with an error instead of a panic.
//!
//! Encoded rows (Arrow's row format, [`crate::row`]) are stored as Binary columns, counts and
//! times as Int64, flags as Boolean; 128-bit values (sums, window bounds) as 16-byte Binary,
//! little-endian. Change batches keep their own columns, followed by `time` and `diff` Int64
//! columns. Maps are written sorted by key, so the same state always gives the same bytes.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions,
    StringArray, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_common::{ipc, ChangeBatch, Result, WeirError};

/// The version of the state layout this build writes and reads (3: CRC-32 section checks;
/// 4: the row hash that places keys on workers and feeds the sketches avalanches every word,
/// so state saved before holds keys on other workers and sketches of other hashes).
pub const STATE_VERSION: &str = "4";

const VERSION_KEY: &str = "weir.exec.state.version";

fn bad(msg: impl std::fmt::Display) -> WeirError {
    WeirError::exec(format!("query state does not fit this query: {msg}"))
}

/// CRC-32 of a section's name, signature and payload, each followed by 0xff (a byte UTF-8
/// never contains, so the parts cannot run into each other).
fn checksum(name: &str, signature: &str, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for part in [name.as_bytes(), signature.as_bytes(), payload] {
        h.update(part);
        h.update(&[0xff]);
    }
    h.finalize()
}

/// The schema and batches of IPC stream bytes (see [`weir_common::ipc::read_stream`]), with
/// an error that says whose bytes they were.
fn ipc_batches(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    ipc::read_stream(bytes).map_err(|e| match e {
        WeirError::Execution(msg) => bad(msg),
        other => other,
    })
}

/// Collects the named sections of a state, in order.
#[derive(Debug, Default)]
pub struct StateWriter {
    sections: Vec<(String, String, RecordBatch)>,
}

impl StateWriter {
    pub fn new() -> Self {
        StateWriter::default()
    }

    /// Appends a section of named columns (all of one length; `rows` is that length, given
    /// explicitly so a section without columns has one).
    pub fn put(
        &mut self,
        name: &str,
        signature: &str,
        rows: usize,
        columns: Vec<(&str, ArrayRef)>,
    ) -> Result<()> {
        let fields: Vec<Field> =
            columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, a)| a).collect(),
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        self.sections.push((name.to_string(), signature.to_string(), batch));
        Ok(())
    }

    /// Appends a section holding change batches: their columns, then `time` and `diff`.
    /// Batches are concatenated; `data_schema` is their schema.
    pub fn put_changes(
        &mut self,
        name: &str,
        signature: &str,
        data_schema: &SchemaRef,
        batches: &[ChangeBatch],
    ) -> Result<()> {
        let all = ChangeBatch::concat(data_schema, batches)?;
        let mut fields: Vec<Field> =
            all.data.schema().fields().iter().map(|f| (**f).clone()).collect();
        fields.push(Field::new("time", DataType::Int64, false));
        fields.push(Field::new("diff", DataType::Int64, false));
        let mut cols = all.data.columns().to_vec();
        cols.push(Arc::new(Int64Array::from(all.times.clone())));
        cols.push(Arc::new(Int64Array::from(all.diffs.clone())));
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(all.len())),
        )?;
        self.sections.push((name.to_string(), signature.to_string(), batch));
        Ok(())
    }

    /// The state as Arrow IPC stream bytes.
    pub fn into_bytes(self) -> Result<Vec<u8>> {
        let mut names = Vec::new();
        let mut sigs = Vec::new();
        let mut payloads = Vec::new();
        let mut checks = Vec::new();
        for (name, sig, batch) in &self.sections {
            let payload = ipc::write_stream(batch)?;
            checks.push(checksum(name, sig, &payload));
            names.push(name.as_str());
            sigs.push(sig.as_str());
            payloads.push(payload);
        }
        let mut metadata = std::collections::HashMap::new();
        metadata.insert(VERSION_KEY.to_string(), STATE_VERSION.to_string());
        let schema = Arc::new(
            Schema::new(vec![
                Field::new("section", DataType::Utf8, false),
                Field::new("signature", DataType::Utf8, false),
                Field::new("payload", DataType::Binary, false),
                Field::new("check", DataType::UInt32, false),
            ])
            .with_metadata(metadata),
        );
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(names)),
                Arc::new(StringArray::from(sigs)),
                Arc::new(BinaryArray::from_iter_values(payloads.iter())),
                Arc::new(UInt32Array::from(checks)),
            ],
        )?;
        ipc::write_stream(&batch)
    }
}

/// Hands back the sections of a saved state, in the order they were written.
#[derive(Debug)]
pub struct StateReader {
    sections: VecDeque<(String, String, Vec<u8>)>,
}

impl StateReader {
    /// Reads the envelope and checks the version and every section's checksum.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (schema, batches) = ipc_batches(bytes)?;
        if batches.len() != 1 {
            return Err(bad(format!("{} section tables, not 1", batches.len())));
        }
        match schema.metadata().get(VERSION_KEY) {
            Some(v) if v == STATE_VERSION => {}
            Some(v) => {
                return Err(bad(format!(
                    "saved with state version {v}, this build reads version {STATE_VERSION}"
                )))
            }
            None => return Err(bad("not a saved query state (no version)")),
        }
        let mut sections = VecDeque::new();
        for b in &batches {
            let names = column::<StringArray>(b, "section")?;
            let sigs = column::<StringArray>(b, "signature")?;
            let payloads = column::<BinaryArray>(b, "payload")?;
            let checks = column::<UInt32Array>(b, "check")?;
            for i in 0..b.num_rows() {
                if names.is_null(i) || sigs.is_null(i) || payloads.is_null(i) || checks.is_null(i) {
                    return Err(bad("a section has a NULL field"));
                }
                let (name, sig, payload) = (names.value(i), sigs.value(i), payloads.value(i));
                if checksum(name, sig, payload) != checks.value(i) {
                    return Err(bad(format!("section '{name}' is damaged (checksum mismatch)")));
                }
                sections.push_back((name.to_string(), sig.to_string(), payload.to_vec()));
            }
        }
        Ok(StateReader { sections })
    }

    /// The name of the next section, if any (to tell one kind of saved state from another).
    pub fn peek_name(&self) -> Option<&str> {
        self.sections.front().map(|s| s.0.as_str())
    }

    /// The next section, which must be called `name` with signature `signature`.
    pub fn take(&mut self, name: &str, signature: &str) -> Result<Section> {
        let Some((n, sig, payload)) = self.sections.pop_front() else {
            return Err(bad(format!("section '{name}' is missing")));
        };
        if n != name {
            return Err(bad(format!("expected section '{name}', found '{n}'")));
        }
        if sig != signature {
            return Err(bad(format!(
                "section '{name}' was saved by a different operator ('{sig}', here '{signature}')"
            )));
        }
        let (_, batches) = ipc_batches(&payload)?;
        let batch = match batches.len() {
            1 => batches.into_iter().next().ok_or_else(|| bad("empty section"))?,
            n => return Err(bad(format!("section '{name}' holds {n} batches, not 1"))),
        };
        Ok(Section { name: n, batch })
    }

    /// Checks that every section was taken.
    pub fn finish(&self) -> Result<()> {
        match self.sections.front() {
            None => Ok(()),
            Some((n, _, _)) => Err(bad(format!("unexpected extra section '{n}'"))),
        }
    }
}

fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> Result<&'a T> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| bad(format!("column '{name}' is missing or of the wrong type")))
}

/// One section of a saved state.
#[derive(Debug)]
pub struct Section {
    name: String,
    batch: RecordBatch,
}

impl Section {
    pub fn rows(&self) -> usize {
        self.batch.num_rows()
    }

    fn col<T: 'static>(&self, col: &str) -> Result<&T> {
        column::<T>(&self.batch, col).map_err(|e| bad(format!("section '{}': {e}", self.name)))
    }

    fn no_nulls(&self, col: &str, a: &dyn Array) -> Result<()> {
        if a.null_count() > 0 {
            return Err(bad(format!("section '{}': column '{col}' has NULLs", self.name)));
        }
        Ok(())
    }

    /// A Binary column's values (no NULLs).
    pub fn binary(&self, col: &str) -> Result<Vec<&[u8]>> {
        let a = self.col::<BinaryArray>(col)?;
        self.no_nulls(col, a)?;
        Ok(a.iter().map(|v| v.unwrap_or_default()).collect())
    }

    /// An Int64 column's values (no NULLs).
    pub fn i64s(&self, col: &str) -> Result<Vec<i64>> {
        let a = self.col::<Int64Array>(col)?;
        self.no_nulls(col, a)?;
        Ok(a.values().to_vec())
    }

    /// An Int64 column's values, NULLs as `None`.
    pub fn opt_i64s(&self, col: &str) -> Result<Vec<Option<i64>>> {
        Ok(self.col::<Int64Array>(col)?.iter().collect())
    }

    /// A Float64 column's values (no NULLs).
    pub fn f64s(&self, col: &str) -> Result<Vec<f64>> {
        let a = self.col::<arrow::array::Float64Array>(col)?;
        self.no_nulls(col, a)?;
        Ok(a.values().to_vec())
    }

    /// A Boolean column's values (no NULLs).
    pub fn bools(&self, col: &str) -> Result<Vec<bool>> {
        let a = self.col::<BooleanArray>(col)?;
        self.no_nulls(col, a)?;
        Ok(a.iter().map(|v| v.unwrap_or_default()).collect())
    }

    /// A Binary column of 16-byte little-endian i128 values, NULLs as `None`.
    pub fn opt_i128s(&self, col: &str) -> Result<Vec<Option<i128>>> {
        let a = self.col::<BinaryArray>(col)?;
        a.iter()
            .map(|v| match v {
                None => Ok(None),
                Some(b) => {
                    <[u8; 16]>::try_from(b).map(|b| Some(i128::from_le_bytes(b))).map_err(|_| {
                        bad(format!("section '{}': a 128-bit value is not 16 bytes", self.name))
                    })
                }
            })
            .collect()
    }

    /// The single row's value of a scalar section, as Int64.
    pub fn scalar_i64(&self, col: &str) -> Result<i64> {
        if self.rows() != 1 {
            return Err(bad(format!("section '{}' should have one row", self.name)));
        }
        self.i64s(col)?.first().copied().ok_or_else(|| bad("empty column"))
    }

    /// The changes of a section written by [`StateWriter::put_changes`]. With `schema`, the
    /// columns must have its types, and the batch takes its field names.
    pub fn changes(&self, schema: Option<&SchemaRef>) -> Result<ChangeBatch> {
        let n = self.batch.num_columns();
        if n < 2 {
            return Err(bad(format!("section '{}' is not a change batch", self.name)));
        }
        let times = self.i64s("time")?;
        let diffs = self.i64s("diff")?;
        let data_cols = self.batch.columns()[..n - 2].to_vec();
        let data_schema = match schema {
            Some(s) => {
                let fits = s.fields().len() == data_cols.len()
                    && s.fields()
                        .iter()
                        .zip(&data_cols)
                        .all(|(f, c)| f.data_type() == c.data_type());
                if !fits {
                    return Err(bad(format!(
                        "section '{}': the rows' columns do not have the query's types",
                        self.name
                    )));
                }
                s.clone()
            }
            None => Arc::new(Schema::new(self.batch.schema().fields()[..n - 2].to_vec())),
        };
        let data = RecordBatch::try_new_with_options(
            data_schema,
            data_cols,
            &RecordBatchOptions::new().with_row_count(Some(self.batch.num_rows())),
        )
        .map_err(|e| bad(format!("section '{}': {e}", self.name)))?;
        Ok(ChangeBatch::new(data, times, diffs))
    }
}

/// A Binary column from byte strings.
pub fn binary_col<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> ArrayRef {
    let values: Vec<&[u8]> = values.into_iter().collect();
    Arc::new(BinaryArray::from_iter_values(values))
}

/// An Int64 column.
pub fn i64_col(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

/// A nullable Int64 column.
pub fn opt_i64_col(values: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<Int64Array>())
}

/// A Float64 column.
pub fn f64_col(values: impl IntoIterator<Item = f64>) -> ArrayRef {
    Arc::new(arrow::array::Float64Array::from_iter_values(values))
}

/// A Boolean column.
pub fn bool_col(values: impl IntoIterator<Item = bool>) -> ArrayRef {
    Arc::new(values.into_iter().map(Some).collect::<BooleanArray>())
}

/// A nullable column of i128 values as 16-byte little-endian Binary.
pub fn opt_i128_col(values: impl IntoIterator<Item = Option<i128>>) -> ArrayRef {
    let v: Vec<Option<[u8; 16]>> = values.into_iter().map(|x| x.map(i128::to_le_bytes)).collect();
    Arc::new(v.iter().map(|x| x.as_ref().map(|b| &b[..])).collect::<BinaryArray>())
}

/// A signature from an operator's kind and the types of a schema, plus parameters.
pub fn signature(kind: &str, schema: &SchemaRef, params: impl std::fmt::Debug) -> String {
    let types: Vec<String> = schema.fields().iter().map(|f| f.data_type().to_string()).collect();
    format!("{kind}({}) {params:?}", types.join(", "))
}

/// Groups consecutive rows with equal `key` of parallel columns: (key, start, end) runs.
pub fn runs<K: PartialEq>(keys: &[K]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < keys.len() {
        let mut j = i + 1;
        while j < keys.len() && keys[j] == keys[i] {
            j += 1;
        }
        out.push((i, j));
        i = j;
    }
    out
}

/// Checks that a restored count is a valid multiplicity for a map entry (nonzero).
pub fn nonzero(what: &str, n: i64) -> Result<i64> {
    if n == 0 {
        return Err(bad(format!("{what}: a zero count")));
    }
    Ok(n)
}

/// Error for state that is internally inconsistent.
pub fn invalid(msg: impl std::fmt::Display) -> WeirError {
    bad(msg)
}

/// Writes a multiset (encoded row -> count) as a section of `row` (Binary) and `count`
/// (Int64), sorted by row.
pub fn put_counts<'a>(
    w: &mut StateWriter,
    name: &str,
    signature: &str,
    counts: impl IntoIterator<Item = (&'a crate::row::RowBytes, &'a i64)>,
) -> Result<()> {
    let mut rows: Vec<(&crate::row::RowBytes, &i64)> = counts.into_iter().collect();
    rows.sort_unstable();
    w.put(
        name,
        signature,
        rows.len(),
        vec![
            ("row", binary_col(rows.iter().map(|(r, _)| &r[..]))),
            ("count", i64_col(rows.iter().map(|(_, c)| **c))),
        ],
    )
}

/// Reads a section written by [`put_counts`].
pub fn take_counts(
    r: &mut StateReader,
    name: &str,
    signature: &str,
) -> Result<std::collections::HashMap<crate::row::RowBytes, i64>> {
    let s = r.take(name, signature)?;
    let rows = s.binary("row")?;
    let counts = s.i64s("count")?;
    let mut out = std::collections::HashMap::with_capacity(rows.len());
    for (row, c) in rows.into_iter().zip(counts) {
        if out.insert(crate::row::RowBytes::from(row), nonzero(name, c)?).is_some() {
            return Err(bad(format!("section '{name}': a row appears twice")));
        }
    }
    Ok(out)
}

/// A nullable Float64 column.
pub fn opt_f64_col(values: impl IntoIterator<Item = Option<f64>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<arrow::array::Float64Array>())
}

impl Section {
    /// A Float64 column's values, NULLs as `None`.
    pub fn opt_f64s(&self, col: &str) -> Result<Vec<Option<f64>>> {
        Ok(self.col::<arrow::array::Float64Array>(col)?.iter().collect())
    }
}

/// A Utf8 column.
pub fn str_col<'a>(values: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    let values: Vec<&str> = values.into_iter().collect();
    Arc::new(StringArray::from_iter_values(values))
}

impl Section {
    /// A Utf8 column's values (no NULLs).
    pub fn strs(&self, col: &str) -> Result<Vec<&str>> {
        let a = self.col::<StringArray>(col)?;
        self.no_nulls(col, a)?;
        Ok(a.iter().map(|v| v.unwrap_or_default()).collect())
    }
}
