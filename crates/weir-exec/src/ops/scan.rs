//! Scan: the changes of a base stream or table at each instant.
//!
//! Delta semantics: at τ, outputs exactly the input changes the runner buffered for τ (stream
//! elements with positive diffs, table inserts +1 and deletes −1). Stateless.

use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time};

use crate::operator::{take_inputs, Operator, Step};
use crate::ops::batch_of;
use crate::route::Placement;

#[derive(Debug)]
pub struct Scan {
    name: String,
    schema: SchemaRef,
}

impl Scan {
    pub fn new(name: String, schema: SchemaRef) -> Self {
        Scan { name, schema }
    }
}

impl Operator for Scan {
    /// The buffered changes of the step, as they are (already sorted by time), whatever the
    /// span.
    fn eval(&mut self, step: &Step<'_>, leaf: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let [] = take_inputs::<0>(leaf)?;
        match step.ctx.inputs.get(&self.name) {
            Some(b) if !b.is_empty() => {
                let data = batch_of(&self.schema, b.data.columns().to_vec(), b.len())?;
                Ok(b.with_data(data))
            }
            _ => Ok(ChangeBatch::empty(self.schema.clone())),
        }
    }

    /// Stateless: the runner holds the waiting input.
    fn state_bytes(&self) -> usize {
        0
    }

    /// Stateless, a leaf: saves nothing (the runner saves the buffered input).
    fn save_state(&self, _w: &mut crate::state::StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore_state(&mut self, _r: &mut crate::state::StateReader) -> Result<()> {
        Ok(())
    }

    /// No state: its changes are nothing.
    fn saves_whole_as_changes(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }

    fn span_capable(&self) -> bool {
        true
    }

    /// A source's rows are read on the worker they were given to.
    fn placement(&self, _input: usize) -> Result<Placement> {
        Ok(Placement::Local)
    }

    fn keeps_instants(&self) -> bool {
        true
    }
}
