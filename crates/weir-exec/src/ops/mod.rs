//! The incremental operators, one per file (or directory). Each file opens with the
//! operator's delta semantics: what one input change at instant τ produces, and what state it
//! keeps. An operator is one node of a [`crate::graph::Graph`]: it is handed its inputs'
//! changes, never its inputs, so nothing here depends on the compiler or the runner.

pub mod aggregate;
pub mod apply;
pub mod distinct;
pub mod filter;
pub mod join;
pub mod linear;
pub mod over;
pub mod project;
pub mod r2s;
pub mod rename;
pub mod scan;
pub mod sketch_aggregate;
pub mod time_windows;
pub mod topk;
pub mod union;
pub mod values;
pub mod window_bounds;
pub mod window_dedup;
pub mod window_rows;
pub mod window_sample;
pub mod window_sample_slide;
pub mod window_session;
pub mod window_time;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use weir_common::Result;

/// Builds a batch of `schema` from columns, casting any column whose type differs (expression
/// results may be more general than the planned type) and renaming fields. Schemas in the
/// executor are all-nullable (see [`crate::compile`]), so nullability never mismatches.
pub(crate) fn batch_of(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    n: usize,
) -> Result<RecordBatch> {
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c)
            } else {
                arrow::compute::cast(&c, f.data_type())
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )?)
}
