//! Relations held in full: the contents of tables (changed by INSERT and DELETE) and of
//! maintained views (relation views over streams, kept up to date by their running query),
//! and one-shot evaluation of a query over them.
//!
//! A maintained view's contents are shared between the view's running query, which writes
//! them through its [`super::dataflow::Output`], and one-shot readers here: a [`Shared`]
//! handle, so the query can be hosted apart from the engine (on a worker) later.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_exec::dirty::DirtyKeys;
use weir_exec::heap::HeapSize;
use weir_exec::query::evaluate_once;
use weir_exec::row::{RowBytes, RowCodec};
use weir_plan::LogicalPlan;

/// A value shared between a running query's output and its readers.
#[derive(Debug, Default)]
pub(crate) struct Shared<T>(Arc<Mutex<T>>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T> Shared<T> {
    pub fn new(value: T) -> Self {
        Shared(Arc::new(Mutex::new(value)))
    }

    /// The value; a holder that panicked cannot leave it half-written in a way that matters
    /// more than losing it, so a poisoned lock is taken over.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A relation's current contents: encoded rows with their multiplicities.
#[derive(Debug)]
pub(crate) struct Contents {
    codec: RowCodec,
    rows: BTreeMap<RowBytes, i64>,
    /// A table's primary key, with the row each key has now.
    key: Option<PrimaryIndex>,
    /// The rows whose multiplicity changed since the contents were last checkpointed
    /// (incremental checkpoints: see [`weir_exec::dirty`]).
    dirty: DirtyKeys<RowBytes>,
}

/// The row of each primary key of a table.
#[derive(Debug)]
struct PrimaryIndex {
    columns: Vec<usize>,
    codec: RowCodec,
    rows: HashMap<RowBytes, RowBytes>,
}

impl PrimaryIndex {
    fn new(schema: &SchemaRef, columns: &[usize]) -> Result<Self> {
        let types = columns.iter().map(|&i| schema.field(i).data_type().clone()).collect();
        Ok(PrimaryIndex {
            columns: columns.to_vec(),
            codec: RowCodec::new(types)?,
            rows: HashMap::new(),
        })
    }

    /// The encoded keys of a batch's rows.
    fn keys(&self, data: &RecordBatch) -> Result<weir_exec::row::EncodedRows> {
        let cols: Vec<_> = self.columns.iter().map(|&i| data.column(i).clone()).collect();
        self.codec.encode(&cols, data.num_rows())
    }
}

impl Contents {
    /// An estimate of the bytes the rows (and a primary key's index) hold (see
    /// [`weir_exec::heap`]).
    pub fn heap_bytes(&self) -> usize {
        self.rows.heap_bytes()
            + self.key.as_ref().map_or(0, |k| k.rows.heap_bytes())
            + self.dirty.heap_bytes()
    }

    pub fn new(schema: &SchemaRef) -> Result<Self> {
        Ok(Contents {
            codec: RowCodec::for_schema(schema)?,
            rows: BTreeMap::new(),
            key: None,
            dirty: DirtyKeys::default(),
        })
    }

    /// The contents of a table with primary key `key` (no key if empty).
    pub fn with_key(schema: &SchemaRef, key: &[usize]) -> Result<Self> {
        let mut c = Contents::new(schema)?;
        if !key.is_empty() {
            c.key = Some(PrimaryIndex::new(schema, key)?);
        }
        Ok(c)
    }

    /// Adds the changes' diffs; rows whose multiplicity reaches zero leave. With a primary
    /// key, a deleted row leaves its key free and an inserted row takes its key (deletions
    /// are applied first, so an update within one batch keeps the new row).
    pub fn apply(&mut self, changes: &ChangeBatch) -> Result<()> {
        let rows = self.codec.encode(changes.data.columns(), changes.len())?;
        for (i, &d) in changes.diffs.iter().enumerate() {
            let row = rows.get(i);
            if d != 0 {
                self.dirty.note(row, self.rows.len());
            }
            match self.rows.get_mut(row) {
                Some(n) => {
                    *n += d;
                    if *n <= 0 {
                        self.rows.remove(row);
                    }
                }
                // A row copied once, only when it enters.
                None if d > 0 => {
                    self.rows.insert(RowBytes::from(row), d);
                }
                None => {}
            }
        }
        if let Some(index) = &mut self.key {
            let keys = index.keys(&changes.data)?;
            for pass_inserts in [false, true] {
                for (i, &d) in changes.diffs.iter().enumerate() {
                    let (k, row) = (keys.get(i), rows.get(i));
                    if d > 0 && pass_inserts {
                        index.rows.insert(k.into(), row.into());
                    } else if d < 0
                        && !pass_inserts
                        && index.rows.get(k).is_some_and(|r| &r[..] == row)
                    {
                        index.rows.remove(k);
                    }
                }
            }
        }
        Ok(())
    }

    /// The changes that inserting `data` at `at` makes. Without a primary key, every row is
    /// inserted. With one, a row whose key has a row already replaces it (a deletion of the
    /// old row and an insertion of the new; nothing if they are equal), and of several rows
    /// with one key the last wins. A NULL in a key column is an error naming the table.
    pub fn insertion(
        &self,
        table: &str,
        schema: &SchemaRef,
        data: RecordBatch,
        at: Time,
    ) -> Result<ChangeBatch> {
        let Some(index) = &self.key else {
            return Ok(ChangeBatch::uniform(data, at, 1));
        };
        for &c in &index.columns {
            if data.column(c).null_count() > 0 {
                return Err(WeirError::exec(format!(
                    "table '{table}': NULL in primary key column '{}'",
                    schema.field(c).name()
                )));
            }
        }
        let keys = index.keys(&data)?;
        let rows = self.codec.encode(data.columns(), data.num_rows())?;
        // The last row of each key, in the order of the rows.
        let mut last: HashMap<&[u8], usize> = HashMap::new();
        for i in 0..data.num_rows() {
            last.insert(keys.get(i), i);
        }
        let mut old: Vec<&[u8]> = Vec::new();
        let mut new: Vec<u32> = Vec::new();
        for i in 0..data.num_rows() {
            if last.get(keys.get(i)) != Some(&i) {
                continue;
            }
            match index.rows.get(keys.get(i)) {
                Some(prev) if &prev[..] == rows.get(i) => {}
                Some(prev) => {
                    old.push(&prev[..]);
                    new.push(i as u32);
                }
                None => new.push(i as u32),
            }
        }
        let deleted = self.codec.decode_batch(schema, old.iter().copied())?;
        let inserted =
            arrow::compute::take_record_batch(&data, &arrow::array::UInt32Array::from(new))?;
        let both = arrow::compute::concat_batches(schema, [&deleted, &inserted])?;
        let mut diffs = vec![-1; deleted.num_rows()];
        diffs.resize(both.num_rows(), 1);
        Ok(ChangeBatch::new(both, vec![at; diffs.len()], diffs))
    }

    /// The contents as they are now were checkpointed whole: record changes from here.
    pub fn track_changes(&mut self) {
        self.dirty.start();
    }

    /// Whether changes are recorded and none was since the last checkpoint.
    pub fn unchanged(&self) -> bool {
        self.dirty.is_clean()
    }

    /// The rows whose multiplicity changed since the last checkpoint, each with its
    /// multiplicity now (0: gone), and recording starts again; None if changes were not
    /// recorded (the contents are then checkpointed whole).
    pub fn take_changes(&mut self, schema: &SchemaRef) -> Result<Option<ChangeBatch>> {
        let Some(rows) = self.dirty.take() else { return Ok(None) };
        let data = self.codec.decode_batch(schema, rows.iter().map(|r| &r[..]))?;
        let counts: Vec<i64> =
            rows.iter().map(|r| self.rows.get(r).copied().unwrap_or(0)).collect();
        Ok(Some(ChangeBatch::new(data, vec![0; counts.len()], counts)))
    }

    /// Sets rows to the multiplicities `changes` holds (what [`Contents::take_changes`]
    /// gave, applied to the contents of the checkpoint before): applies the difference from
    /// each row's multiplicity now, which keeps a primary key's index in step as any change
    /// does (a keyed table holds each row once).
    pub fn set_rows(&mut self, changes: &ChangeBatch) -> Result<()> {
        if changes.diffs.iter().any(|n| *n < 0) {
            return Err(WeirError::exec("checkpoint: a negative multiplicity"));
        }
        let rows = self.codec.encode(changes.data.columns(), changes.len())?;
        let diffs: Vec<i64> = (0..changes.len())
            .map(|i| changes.diffs[i] - self.rows.get(rows.get(i)).copied().unwrap_or(0))
            .collect();
        self.apply(&ChangeBatch::new(changes.data.clone(), changes.times.clone(), diffs))
    }

    /// The contents as inserts at `at`.
    pub fn snapshot(&self, schema: &SchemaRef, at: Time) -> Result<ChangeBatch> {
        let data = self.codec.decode_batch(schema, self.rows.keys().map(|k| &k[..]))?;
        let diffs: Vec<i64> = self.rows.values().copied().collect();
        Ok(ChangeBatch::new(data, vec![at; diffs.len()], diffs))
    }

    /// Rows, counted with their multiplicity.
    pub fn len(&self) -> i64 {
        self.rows.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A relation view's maintained contents.
#[derive(Debug)]
pub(crate) struct Maintained {
    pub schema: SchemaRef,
    pub contents: Contents,
    /// Set if the view's query failed; one-shot queries over it then report this.
    pub failed: Option<WeirError>,
    /// The latest instant at which the contents changed.
    pub changed_at: Option<Time>,
    /// Subscribers to the view itself (`Engine::subscribe("v")`), by subscription id: each
    /// got the contents when it subscribed and gets every change after.
    pub taps: Vec<(u64, crate::subscription::OutputSender)>,
}

impl Maintained {
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let contents = Contents::new(&schema)?;
        Ok(Maintained { schema, contents, failed: None, changed_at: None, taps: Vec::new() })
    }
}

#[derive(Debug)]
pub(crate) struct Table {
    pub schema: SchemaRef,
    pub contents: Contents,
}

/// Every table's and maintained view's contents. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    tables: BTreeMap<String, Table>,
    views: BTreeMap<String, Shared<Maintained>>,
}

impl Tables {
    pub fn add_table(&mut self, name: &str, schema: SchemaRef, key: &[usize]) -> Result<()> {
        let contents = Contents::with_key(&schema, key)?;
        self.tables.insert(name.to_string(), Table { schema, contents });
        Ok(())
    }

    pub fn remove_table(&mut self, name: &str) {
        self.tables.remove(name);
    }

    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.get(name)
    }

    pub fn tables_mut(&mut self) -> impl Iterator<Item = (&String, &mut Table)> {
        self.tables.iter_mut()
    }

    /// Starts maintaining view `name`'s relation; returns the handle its query writes.
    pub fn add_view(&mut self, name: &str, schema: SchemaRef) -> Result<Shared<Maintained>> {
        let shared = Shared::new(Maintained::new(schema)?);
        self.views.insert(name.to_string(), shared.clone());
        Ok(shared)
    }

    pub fn remove_view(&mut self, name: &str) {
        self.views.remove(name);
    }

    pub fn view(&self, name: &str) -> Option<&Shared<Maintained>> {
        self.views.get(name)
    }

    pub fn views(&self) -> impl Iterator<Item = (&String, &Shared<Maintained>)> {
        self.views.iter()
    }

    /// Each table's name and the bytes its contents hold (an estimate), in name order.
    pub fn table_bytes(&self) -> Vec<(String, usize)> {
        self.tables.iter().map(|(n, t)| (n.clone(), t.contents.heap_bytes())).collect()
    }

    /// A table's current contents as inserts at `at`, if it has any rows.
    pub fn snapshot(&self, name: &str, at: Time) -> Result<Option<ChangeBatch>> {
        match self.tables.get(name) {
            Some(t) if !t.contents.is_empty() => Ok(Some(t.contents.snapshot(&t.schema, at)?)),
            _ => Ok(None),
        }
    }

    /// The changes that inserting `data` into table `name` at `at` makes (see
    /// [`Contents::insertion`]).
    pub fn insertion(&self, name: &str, data: RecordBatch, at: Time) -> Result<ChangeBatch> {
        let table = self.tables.get(name).ok_or_else(|| WeirError::internal("table vanished"))?;
        table.contents.insertion(name, &table.schema, data, at)
    }

    /// Applies changes to a table's contents.
    pub fn apply(&mut self, name: &str, changes: &ChangeBatch) -> Result<()> {
        let table =
            self.tables.get_mut(name).ok_or_else(|| WeirError::internal("table vanished"))?;
        table.contents.apply(changes)
    }

    /// Evaluates a plan over tables and maintained views once: the relation it denotes now.
    /// See [`evaluate_once`] for `as_produced`.
    pub fn evaluate(&self, plan: &LogicalPlan, as_produced: bool) -> Result<ChangeBatch> {
        let mut inputs = HashMap::new();
        for s in plan.sources() {
            if let Some(t) = self.tables.get(&s) {
                inputs.insert(s.clone(), t.contents.snapshot(&t.schema, 0)?);
                continue;
            }
            let Some(view) = self.views.get(&s) else {
                return Err(WeirError::exec(format!(
                    "'{s}' is a stream: a query over it is continuous, not one-shot"
                )));
            };
            let v = view.lock();
            if let Some(e) = &v.failed {
                return Err(WeirError::exec(format!("view '{s}' failed: {e}")));
            }
            inputs.insert(s.clone(), v.contents.snapshot(&v.schema, 0)?);
        }
        evaluate_once(plan, inputs, as_produced)
    }
}

/// Rows repeated by their multiplicity.
pub(crate) fn expand(b: &ChangeBatch) -> Result<RecordBatch> {
    if b.diffs.iter().all(|&d| d == 1) {
        return Ok(b.data.clone());
    }
    let mut idx = Vec::new();
    for (i, &d) in b.diffs.iter().enumerate() {
        for _ in 0..d.max(0) {
            idx.push(i as u32);
        }
    }
    Ok(b.take(&idx)?.data)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]))
    }

    fn changes(rows: &[(i64, i64)]) -> ChangeBatch {
        let data = RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)))],
        )
        .unwrap();
        ChangeBatch::new(data, vec![0; rows.len()], rows.iter().map(|r| r.1).collect())
    }

    #[test]
    fn contents_count_multiplicities_and_drop_rows_at_zero() {
        let mut c = Contents::new(&schema()).unwrap();
        c.apply(&changes(&[(1, 1), (2, 2), (1, 1)])).unwrap();
        assert_eq!(c.len(), 4);
        c.apply(&changes(&[(1, -2)])).unwrap();
        let snap = c.snapshot(&schema(), 7).unwrap();
        assert_eq!((snap.times, snap.diffs), (vec![7], vec![2]));
        assert_eq!(expand(&c.snapshot(&schema(), 0).unwrap()).unwrap().num_rows(), 2);
    }

    #[test]
    fn a_failed_view_is_reported_to_its_readers() {
        let mut tables = Tables::default();
        let view = tables.add_view("v", schema()).unwrap();
        view.lock().failed = Some(WeirError::exec("division by zero"));
        let plan = LogicalPlan::TableScan {
            name: "v".into(),
            schema: Arc::new(
                datafusion_common::DFSchema::try_from(schema().as_ref().clone()).unwrap(),
            ),
        };
        let err = tables.evaluate(&plan, false).unwrap_err();
        assert_eq!(err.to_string(), "view 'v' failed: division by zero");
    }
}
