//! TimeWindows: `TUMBLE`/`HOP` over a relation (a table, a view), as a plain mapping of rows.
//!
//! Delta semantics: each changed row r with diff d maps to one row `r ++ (b − size, b)` with
//! the same diff d and instant for every window [b − size, b), b a multiple of `slide`, that
//! holds r's time t (b − size ≤ t < b): one window for TUMBLE (`size` = `slide`), ⌈size /
//! slide⌉ or ⌊size / slide⌋ for HOP. A row whose time is NULL is in no window. So
//! Δw(R) = w(ΔR): an inserted row adds its window rows, a deleted one retracts exactly them,
//! and an update (a deletion and an insertion at one instant) retracts the old windows and
//! adds the new. Unlike a window over a stream this is not event time: there is no watermark,
//! no window closes, and nothing happens without input. Linear and stateless (run by
//! [`crate::ops::linear::Linear`]).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::datatypes::{DataType, SchemaRef};
use weir_common::{ChangeBatch, Result, WeirError};

use crate::ops::batch_of;
use crate::ops::linear::RowMap;

#[derive(Debug)]
pub struct TimeWindows {
    column: usize,
    size: i64,
    slide: i64,
    schema: SchemaRef,
}

impl TimeWindows {
    /// Windows of `size` every `slide` (both positive) over column `column` of the input;
    /// `schema` is the input's columns then `window_start`, `window_end`.
    pub fn new(column: usize, size: i64, slide: i64, schema: SchemaRef) -> Result<Self> {
        if size <= 0 || slide <= 0 {
            return Err(WeirError::internal("time windows need a positive size and slide"));
        }
        Ok(TimeWindows { column, size, slide, schema })
    }

    /// The starts of the windows that hold time `t`, in increasing order.
    fn starts(&self, t: i64, out: &mut Vec<i64>) -> Result<()> {
        let (t, size, slide) = (i128::from(t), i128::from(self.size), i128::from(self.slide));
        // b = k·slide with t < b ≤ t + size.
        let first = t.div_euclid(slide) + 1;
        let last = (t + size).div_euclid(slide);
        for k in first..=last {
            let start = k * slide - size;
            let end = k * slide;
            match (i64::try_from(start), i64::try_from(end)) {
                (Ok(s), Ok(_)) => out.push(s),
                _ => {
                    return Err(WeirError::exec(format!(
                        "a window of the time {t} lies outside the range of times"
                    )))
                }
            }
        }
        Ok(())
    }
}

impl RowMap for TimeWindows {
    fn map(&self, d: ChangeBatch) -> Result<ChangeBatch> {
        if d.is_empty() {
            return Ok(ChangeBatch::empty(self.schema.clone()));
        }
        let col = d.data.column(self.column);
        let times = arrow::compute::cast(col, &DataType::Int64)?;
        let times = times
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("a time column that is not an integer"))?;
        let mut idx: Vec<u32> = Vec::with_capacity(d.len());
        let mut starts: Vec<i64> = Vec::with_capacity(d.len());
        let mut row_starts = Vec::new();
        for i in 0..d.len() {
            if times.is_null(i) {
                continue;
            }
            row_starts.clear();
            self.starts(times.value(i), &mut row_starts)?;
            let row = u32::try_from(i).map_err(|_| WeirError::exec("a batch of too many rows"))?;
            idx.extend(std::iter::repeat_n(row, row_starts.len()));
            starts.extend_from_slice(&row_starts);
        }
        let taken = d.take(&idx)?;
        let ends: Int64Array = starts.iter().map(|s| Some(s + self.size)).collect();
        let starts: ArrayRef = Arc::new(Int64Array::from(starts));
        let mut cols: Vec<ArrayRef> = taken.data.columns().to_vec();
        cols.push(starts);
        cols.push(Arc::new(ends));
        // `batch_of` casts the bounds to the schema's type (TIMESTAMP for a TIMESTAMP column).
        let data = batch_of(&self.schema, cols, idx.len())?;
        Ok(ChangeBatch::new(data, taken.times, taken.diffs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("t", DataType::Int64, true),
            Field::new("window_start", DataType::Int64, true),
            Field::new("window_end", DataType::Int64, true),
        ]))
    }

    fn rows(out: &ChangeBatch) -> Vec<String> {
        let k = out.data.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let col = |i: usize| out.data.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
        (0..out.len())
            .map(|i| {
                format!(
                    "@{} {:+} {} {} {} {}",
                    out.times[i],
                    out.diffs[i],
                    k.value(i),
                    col(1).value(i),
                    col(2).value(i),
                    col(3).value(i)
                )
            })
            .collect()
    }

    fn input(ks: &[&str], ts: &[Option<i64>], diffs: Vec<i64>) -> ChangeBatch {
        let in_schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("t", DataType::Int64, true),
        ]));
        let data = RecordBatch::try_new(
            in_schema,
            vec![Arc::new(StringArray::from(ks.to_vec())), Arc::new(Int64Array::from(ts.to_vec()))],
        )
        .unwrap();
        let n = data.num_rows();
        ChangeBatch::new(data, vec![7; n], diffs)
    }

    /// TUMBLE(5): one window each, negative times included ([-5, 0) holds -1); a NULL time is
    /// in no window; diffs carry over.
    #[test]
    fn tumble_maps_each_row_to_its_window() {
        let w = TimeWindows::new(1, 5, 5, schema()).unwrap();
        let out = w
            .map(input(
                &["a", "b", "c", "d"],
                &[Some(4), Some(5), Some(-1), None],
                vec![1, -1, 2, 1],
            ))
            .unwrap();
        assert_eq!(rows(&out), ["@7 +1 a 4 0 5", "@7 -1 b 5 5 10", "@7 +2 c -1 -5 0"]);
    }

    /// HOP(slide 2, size 4): two windows per row; slide 3, size 5 (not a divisor): windows
    /// end on multiples of 3, so a row is in one or two of them.
    #[test]
    fn hop_maps_each_row_to_every_window_holding_it() {
        let w = TimeWindows::new(1, 4, 2, schema()).unwrap();
        let out = w.map(input(&["a"], &[Some(1)], vec![1])).unwrap();
        assert_eq!(rows(&out), ["@7 +1 a 1 -2 2", "@7 +1 a 1 0 4"]);
        let w = TimeWindows::new(1, 5, 3, schema()).unwrap();
        let out = w.map(input(&["a", "b"], &[Some(0), Some(2)], vec![1, -1])).unwrap();
        // 0 is in [-2, 3) and [1, 6)? No: [1, 6) starts after 0; [-5, 0) ends at 0. So one.
        assert_eq!(rows(&out), ["@7 +1 a 0 -2 3", "@7 -1 b 2 -2 3", "@7 -1 b 2 1 6"]);
    }

    #[test]
    fn a_window_past_the_range_of_times_is_an_error() {
        let w = TimeWindows::new(1, 10, 10, schema()).unwrap();
        assert!(w.map(input(&["a"], &[Some(i64::MAX - 1)], vec![1])).is_err());
    }
}
