//! What travels on the dataflow's edges between hosted nodes: [`Part`]s of change batches,
//! each addressed to one worker.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use weir_common::{ChangeBatch, Time};

/// Changes (or only instants) sent by one worker to another on one edge in one round.
///
/// `ticks` lists instants at which the sender evaluated: the receiver's node evaluates those
/// instants too even when no row arrives, as every node of a one-worker graph is evaluated at
/// every instant of its query. Each says whether it is an instant of the plan below the
/// receiver (its sources' elements and heartbeats, its nodes' wake-ups), which RSTREAM
/// reports at, or only an instant of the query. A part from the engine to a leaf names its
/// source, whose instants the leaf's own are if it reads that source.
#[derive(Debug, Clone)]
pub struct Part {
    /// The worker the part is for.
    pub dest: u32,
    /// The worker that sent it (rows of one instant from several senders are taken in sender
    /// order, so the order does not depend on arrival).
    pub from: u32,
    /// For a part fed to a query: the index of its source among the query's sources.
    pub source: u32,
    pub batch: Option<ChangeBatch>,
    pub ticks: Vec<(Time, bool)>,
}

/// The columns holding each row's time and diff when a batch is written as Arrow IPC.
const TIME: &str = "__weir_time";
const DIFF: &str = "__weir_diff";

#[derive(Serialize, Deserialize)]
struct Wire {
    dest: u32,
    from: u32,
    source: u32,
    batch: Option<Bytes>,
    ticks: Vec<(Time, bool)>,
}

/// Bytes serialized as one byte string (serde takes a `Vec<u8>` as a sequence of numbers,
/// one call per byte).
struct Bytes(Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
        }
        d.deserialize_byte_buf(Visit)
    }
}

fn to_ipc(b: &ChangeBatch) -> Result<Vec<u8>, arrow::error::ArrowError> {
    let schema = b.schema();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(TIME, DataType::Int64, false));
    fields.push(Field::new(DIFF, DataType::Int64, false));
    let mut columns: Vec<ArrayRef> = b.data.columns().to_vec();
    columns.push(Arc::new(Int64Array::from(b.times.clone())));
    columns.push(Arc::new(Int64Array::from(b.diffs.clone())));
    let all = Arc::new(Schema::new(fields));
    let data = RecordBatch::try_new(all.clone(), columns)?;
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, &all)?;
    w.write(&data)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

fn from_ipc(bytes: &[u8]) -> Result<ChangeBatch, String> {
    let reader = StreamReader::try_new(bytes, None).map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| e.to_string())?);
    }
    let [data] = <[RecordBatch; 1]>::try_from(batches).map_err(|_| "expected one batch")?;
    let n = data.num_columns();
    if n < 2 {
        return Err("a change batch without its time and diff columns".into());
    }
    let ints = |i: usize| -> Result<Vec<i64>, String> {
        let a = data.column(i);
        let a = a.as_any().downcast_ref::<Int64Array>().ok_or("time or diff not Int64")?;
        if a.null_count() > 0 {
            return Err("NULL time or diff".into());
        }
        Ok(a.values().to_vec())
    };
    let (times, diffs) = (ints(n - 2)?, ints(n - 1)?);
    let fields: Vec<Field> =
        data.schema().fields()[..n - 2].iter().map(|f| f.as_ref().clone()).collect();
    let rows = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        data.columns()[..n - 2].to_vec(),
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(data.num_rows())),
    )
    .map_err(|e| e.to_string())?;
    Ok(ChangeBatch::new(rows, times, diffs))
}

/// Parts cross process boundaries as Arrow IPC (only in a cluster of processes: between the
/// threads of one process they move as they are).
impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let batch = match &self.batch {
            None => None,
            Some(b) => Some(Bytes(to_ipc(b).map_err(serde::ser::Error::custom)?)),
        };
        Wire {
            dest: self.dest,
            from: self.from,
            source: self.source,
            batch,
            ticks: self.ticks.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        let batch = match w.batch {
            None => None,
            Some(Bytes(bytes)) => Some(from_ipc(&bytes).map_err(D::Error::custom)?),
        };
        Ok(Part { dest: w.dest, from: w.from, source: w.source, batch, ticks: w.ticks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_survives_its_wire_form() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let data =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![Some(1), None]))])
                .expect("batch");
        let part = Part {
            dest: 1,
            from: 0,
            source: 2,
            batch: Some(ChangeBatch::new(data, vec![5, 7], vec![1, -1])),
            ticks: vec![(5, true), (7, false)],
        };
        let bytes = to_ipc(part.batch.as_ref().expect("batch")).expect("ipc");
        let back = from_ipc(&bytes).expect("back");
        assert_eq!(back.times, vec![5, 7]);
        assert_eq!(back.diffs, vec![1, -1]);
        assert_eq!(back.data, part.batch.as_ref().expect("batch").data);
        assert!(from_ipc(&bytes[..bytes.len() / 2]).is_err(), "a cut message is an error");
    }
}
