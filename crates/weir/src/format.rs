//! Values and instants as text, the same way in the REPL, `weir run` and the test runner.

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use weir_common::{Result, WeirError};

/// Formats every value of every row: NULL as `NULL`, strings bare.
pub fn rows_as_text(batch: &RecordBatch) -> Result<Vec<Vec<String>>> {
    rows_as_text_with_null(batch, "NULL")
}

/// Like [`rows_as_text`], writing NULL as `null_text` (CSV leaves it empty).
pub fn rows_as_text_with_null(batch: &RecordBatch, null_text: &str) -> Result<Vec<Vec<String>>> {
    let options = FormatOptions::default().with_null(null_text);
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|r| formatters.iter().map(|f| f.value(r).to_string()).collect())
        .collect())
}

/// One value as text.
pub fn value_as_text(col: &ArrayRef, row: usize) -> Result<String> {
    let options = FormatOptions::default().with_null("NULL");
    let f = ArrayFormatter::try_new(col.as_ref(), &options)?;
    if row >= col.len() {
        return Err(WeirError::internal("row out of range"));
    }
    Ok(f.value(row).to_string())
}
