//! Tables loaded from files, and `COPY name FROM 'path'`.
//!
//! `CREATE TABLE t (...) WITH (source = 'file', path = '...')` reads the file (or glob) whole
//! when the table is created, with the same framing and decoding as a stream's file source,
//! and inserts its rows as one change at the engine's clock, as an `INSERT` would. A table has
//! no `t$errors` companion, so a row that cannot be read is an error naming the file, line,
//! field and reason, and the table is not created: a table is never silently partial.
//! Recovery does not read the file again; the table's contents come from the checkpoint.
//!
//! `COPY t FROM 'path'` appends a file's rows the same way: to a table as one change at the
//! clock (all or nothing), to a stream as the stream's own file source would read it, under
//! the stream's late and bad-row policies. CSV, JSON lines and Parquet files can be read.

use arrow::compute::concat_batches;
use weir_common::{Result, Span, WeirError};
use weir_sql::parser::{ObjectKind, OptionValue, StreamOption};

use super::{Engine, ExecResult};
use crate::intake::policy::parse_table_options;
use crate::intake::Arrival;
use crate::source::{Format, Input, Polled, SourceReader, SourceSpec};

/// How much a load reads at a time.
const CHUNK: usize = 1 << 20;

impl Engine {
    /// Reads `spec`'s file(s) whole into table `name`; returns the number of rows.
    pub(super) fn load_table(&mut self, name: &str, spec: SourceSpec) -> Result<u64> {
        let schema = self
            .catalog
            .table(name)
            .map(|t| t.schema.clone())
            .ok_or_else(|| WeirError::plan(format!("unknown table '{name}'")))?;
        let described = spec.describe();
        let input_err = |e: String| WeirError::input(format!("table '{name}': {e}"));
        let mut reader = SourceReader::new(spec, schema.clone(), None).map_err(input_err)?;
        reader.start(&self.base_dir).map_err(input_err)?;
        let mut batches = Vec::new();
        loop {
            match reader.poll(CHUNK).map_err(input_err)? {
                Polled::Rows { decoded, origin, .. } => {
                    if let Some((_, bad)) = decoded.bad.first() {
                        let line = bad.line;
                        let field = if bad.field.is_empty() {
                            String::new()
                        } else {
                            format!(", field '{}'", bad.field)
                        };
                        return Err(WeirError::input(format!(
                            "table '{name}': '{origin}' line {line}{field}: {} (the table is \
                             loaded whole or not at all)",
                            bad.reason
                        )));
                    }
                    if decoded.batch.num_rows() > 0 {
                        batches.push(decoded.batch);
                    }
                }
                Polled::Ended => break,
                // Only a followed file or stdin waits for more, and a table reads neither.
                Polled::Nothing => {
                    return Err(WeirError::internal(format!(
                        "table '{name}': {described} did not end"
                    )))
                }
            }
        }
        let data = concat_batches(&schema, &batches)
            .map_err(|e| WeirError::exec(format!("table '{name}': {e}")))?;
        let n = data.num_rows() as u64;
        if n > 0 {
            let t = self.table_time(None);
            let changes = self.tables.insertion(name, data, t)?;
            self.change_table(name, changes, t)?;
        }
        Ok(n)
    }

    /// `COPY target FROM 'path' [WITH (...)]`. See the module docs.
    pub(super) fn copy_from_file(
        &mut self,
        target: &str,
        path: &str,
        options: &[StreamOption],
        span: Option<Span>,
    ) -> Result<ExecResult> {
        if let Some(o) = options.iter().find(|o| o.key == "source" || o.key == "path") {
            return Err(WeirError::plan_at(
                format!("COPY takes its file after FROM, not as option {}", o.key),
                o.span,
            ));
        }
        let mut all = vec![
            StreamOption { key: "source".into(), value: OptionValue::Text("file".into()), span },
            StreamOption { key: "path".into(), value: OptionValue::Text(path.into()), span },
        ];
        all.extend(options.iter().cloned());
        let mut spec = parse_table_options(&all, true)?
            .ok_or_else(|| WeirError::plan_at("COPY needs a file path", span))?;
        // As in PostgreSQL, a CSV file has no header line unless HEADER says so.
        if let Format::Csv { header, .. } = &mut spec.format {
            *header =
                options.iter().any(|o| o.key == "header" && o.value == OptionValue::Bool(true));
        }
        let what = if self.catalog.table(target).is_some() {
            ObjectKind::Table
        } else if self.catalog.stream(target).is_some() {
            ObjectKind::Stream
        } else {
            return Err(WeirError::plan_at(format!("unknown table or stream '{target}'"), span));
        };
        self.check_confined(&format!("COPY into '{target}'"), "read", &spec.input, span)?;
        match what {
            ObjectKind::Table => {
                let n = self.load_table(target, spec)?;
                Ok(ExecResult::Done(format!("COPY {n}")))
            }
            _ => self.copy_file_into_stream(target, spec),
        }
    }

    /// A file's rows taken into a stream, read as the stream's own file source would read it
    /// (the same reader, Parquet included) and taken in under the stream's late and bad-row
    /// policies; `s$errors` names the file.
    fn copy_file_into_stream(&mut self, stream: &str, spec: SourceSpec) -> Result<ExecResult> {
        let Input::Files { path, .. } = &spec.input else {
            return Err(WeirError::internal("COPY from something other than a file"));
        };
        if path.contains(['*', '?', '[']) {
            return Err(WeirError::plan(format!(
                "COPY into stream '{stream}' reads one file, not a pattern ('{path}'): give the \
                 stream a source (source = 'file', path = '{path}') to read several"
            )));
        }
        let name = stream.to_ascii_lowercase();
        let def = &self.intake.writable(&name, stream)?.def;
        let (schema, time_column) = (def.input_schema(), def.input_time_column());
        let input_err = |e: String| WeirError::input(format!("COPY into '{stream}': {e}"));
        let mut reader = SourceReader::new(spec, schema, time_column).map_err(input_err)?;
        reader.start(&self.base_dir).map_err(input_err)?;
        let mut records = 0;
        loop {
            match reader.poll(CHUNK).map_err(input_err)? {
                Polled::Rows { decoded, records: n, origin, lines } => {
                    records += n;
                    self.ingest(&name, Arrival::decoded(decoded, origin, lines))?;
                }
                Polled::Ended => break,
                Polled::Nothing => {
                    return Err(WeirError::internal(format!(
                        "COPY into '{stream}': the file did not end"
                    )))
                }
            }
        }
        Ok(ExecResult::Done(format!("COPY {records}")))
    }
}
