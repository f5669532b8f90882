//! Values: a constant relation (`SELECT 1`, `VALUES (...)`).
//!
//! Delta semantics: at the query's first instant, every row enters (+1); nothing changes after.
//! State: whether the first instant has passed. Checkpointed as section `values`, one row:
//! `emitted` (Boolean).

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{take_inputs, Operator, Step};
use crate::state::{bool_col, invalid, signature, StateReader, StateWriter};

#[derive(Debug)]
pub struct Values {
    rows: Option<arrow::array::RecordBatch>,
    schema: SchemaRef,
}

impl Values {
    /// `rows` is the relation's content, computed when the plan is compiled.
    pub fn new(rows: arrow::array::RecordBatch, schema: SchemaRef) -> Self {
        Values { rows: Some(rows), schema }
    }
}

impl Operator for Values {
    fn eval(&mut self, step: &Step<'_>, leaf: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [] = take_inputs::<0>(leaf)?;
        let t = step.instant()?;
        match self.rows.take() {
            Some(rows) => Ok(ChangeBatch::uniform(rows, t, 1)),
            None => Ok(ChangeBatch::empty(self.schema.clone())),
        }
    }

    /// The rows not yet emitted.
    fn state_bytes(&self) -> usize {
        self.rows.as_ref().map_or(0, |r| r.get_array_memory_size())
    }

    /// State: whether the rows were emitted (section `values`: `emitted` Boolean).
    fn save_state(&self, w: &mut StateWriter) -> Result<()> {
        let sig = signature("values", &self.schema, ());
        w.put("values", &sig, 1, vec![("emitted", bool_col([self.rows.is_none()]))])
    }

    fn restore_state(&mut self, r: &mut StateReader) -> Result<()> {
        let s = r.take("values", &signature("values", &self.schema, ()))?;
        match s.bools("emitted")?.as_slice() {
            [true] => self.rows = None,
            [false] => {}
            _ => return Err(invalid("section 'values' should have one row")),
        }
        Ok(())
    }

    /// One flag, which restoring sets either way.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}
