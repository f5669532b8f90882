//! The engine's DDL statements: `CREATE STREAM`, `TABLE`, `VIEW`, `SINK` and `DROP`. Each
//! binds its definition (in `weir-sql`), records it in the catalog with its statement text,
//! and gives the part that holds its state what it needs: the intake a stream, the tables a
//! table, the dataflow a maintained view's or a sink's query.

use weir_common::{Span, TimeDomain};
use weir_sql::ddl::{stream_def, table_def};
use weir_sql::parser::{ColumnAst, ObjectKind, PrimaryKeyAst, StreamOption, WatermarkAst};
use weir_sql::{CqlQuery, ViewDef};

use super::catalog::{referenced_names, ViewEntry};
use super::dataflow::{SinkFile, Target};
use super::tables::Shared;
use super::{Engine, ExecResult};
use crate::intake::policy::{parse_options, parse_table_options};
use crate::intake::Intake;
use crate::sink::{FileSink, SinkSpec};
use std::path::{Path, PathBuf};

use weir_common::{Result, WeirError};

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_stream(
        &mut self,
        name: &str,
        columns: &[ColumnAst],
        watermark: Option<&WatermarkAst>,
        primary_key: Option<&PrimaryKeyAst>,
        options: &[StreamOption],
        if_not_exists: bool,
        span: Option<Span>,
        text: &str,
    ) -> Result<ExecResult> {
        if if_not_exists && self.catalog.exists(name) {
            return Ok(ExecResult::Done("CREATE STREAM".into()));
        }
        self.catalog.check_free(name, span)?;
        let def = stream_def(name, columns, watermark, primary_key, span)?;
        let (policy, source) = parse_options(&def, options)?;
        if let Some(spec) = &source {
            self.check_confined(&format!("stream '{name}'"), "read", &spec.input, span)?;
        }
        self.catalog.add_stream(def.clone(), Intake::companion_defs(&def)?)?;
        if let Err(e) = self.intake.add_stream(def, policy, source) {
            self.catalog.remove(ObjectKind::Stream, name);
            return Err(e);
        }
        self.catalog.record_created(name, text);
        Ok(ExecResult::Done("CREATE STREAM".into()))
    }

    /// A table, empty or loaded from the file its options name (see `load.rs`); a file that
    /// cannot be read whole leaves no table behind.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_table(
        &mut self,
        name: &str,
        columns: &[ColumnAst],
        primary_key: Option<&PrimaryKeyAst>,
        options: &[StreamOption],
        if_not_exists: bool,
        span: Option<Span>,
        text: &str,
    ) -> Result<ExecResult> {
        if if_not_exists && self.catalog.exists(name) {
            return Ok(ExecResult::Done("CREATE TABLE".into()));
        }
        self.catalog.check_free(name, span)?;
        let def = table_def(name, columns, primary_key)?;
        let source = parse_table_options(options, false)?;
        if let Some(spec) = &source {
            self.check_confined(&format!("table '{name}'"), "read", &spec.input, span)?;
        }
        self.tables.add_table(name, def.schema.clone(), &def.primary_key)?;
        self.catalog.add_table(def);
        if let Some(spec) = source.filter(|_| !self.checkpoints.replaying()) {
            if let Err(e) = self.load_table(name, spec) {
                self.catalog.remove(ObjectKind::Table, name);
                self.tables.remove_table(name);
                return Err(e);
            }
        }
        self.catalog.record_created(name, text);
        Ok(ExecResult::Done("CREATE TABLE".into()))
    }

    /// A view is a named query; a relation view over streams is also run, its relation
    /// maintained for one-shot reads.
    pub(super) fn create_view(
        &mut self,
        name: &str,
        query: &CqlQuery,
        sql: String,
        or_replace: bool,
        span: Option<Span>,
        text: &str,
    ) -> Result<ExecResult> {
        if self.catalog.exists(name) && !(or_replace && self.catalog.view(name).is_some()) {
            return Err(WeirError::plan_at(format!("'{name}' already exists"), span));
        }
        let plan = self.bind(query)?;
        let schema = weir_exec::compile::exec_schema(&plan.schema());
        let deps = referenced_names(query);
        if deps.iter().any(|d| d == name) {
            return Err(WeirError::plan_at(format!("view '{name}' refers to itself"), span));
        }
        let reads_stream = plan.sources().iter().any(|s| self.catalog.stream(s).is_some());
        let maintained = plan.kind() == weir_plan::PlanKind::Relation && reads_stream;
        let sql_text = sql.clone();
        let def =
            ViewDef { name: name.to_string(), sql, plan: plan.clone(), schema: schema.clone() };
        self.catalog.add_view(ViewEntry { def, deps, maintained });
        // A replaced view's maintained relation and query are replaced too.
        self.tables.remove_view(name);
        self.dataflow.stop_where(|q| q.target == Target::View(name.to_string()));
        self.catalog.record_created(name, &self.settings.wrap(text));
        if maintained {
            let contents = self.tables.add_view(name, schema)?;
            let target = Target::View(name.to_string());
            self.launch(&plan, &sql_text, target, Some(Box::new(contents)))?;
        }
        Ok(ExecResult::Done("CREATE VIEW".into()))
    }

    /// A sink runs its query into a file (reopened at its committed position during recovery).
    pub(super) fn create_sink(
        &mut self,
        name: &str,
        options: &[StreamOption],
        (query, sql): (&CqlQuery, &str),
        span: Option<Span>,
        text: &str,
    ) -> Result<ExecResult> {
        self.catalog.check_free(name, span)?;
        let spec = SinkSpec::from_options(options, span)?;
        if spec.format == crate::sink::SinkFormat::Parquet && self.data_dir().is_some() {
            return Err(WeirError::plan_at(
                format!(
                    "sink '{name}': a Parquet file cannot be resumed after a crash (it is readable \
                     only once complete, and cannot be cut back to a checkpoint), so Parquet sinks \
                     are not offered with a data directory: write CSV or JSON lines (format = \
                     'csv' or 'json'), which recover exactly-once"
                ),
                span,
            ));
        }
        let plan = self.bind(query)?;
        let schema = weir_exec::compile::exec_schema(&plan.schema());
        let domain = plan.time_domain().unwrap_or(TimeDomain::Ticks);
        let file_path = absolute(&self.base_dir.join(&spec.path));
        let input = crate::source::Input::Files { path: spec.path.clone(), follow: false };
        self.check_confined(&format!("sink '{name}'"), "write", &input, span)?;
        self.check_sink_path(name, &spec.path, &file_path, span)?;
        let resume_at = self.checkpoints.sink_resume_position(name);
        let file =
            FileSink::open(spec, file_path.clone(), &schema, plan.kind(), domain, resume_at)?;
        let sink = Shared::new(SinkFile { file, path: file_path, failed: None });
        self.catalog.add_sink(name, referenced_names(query));
        self.sinks.insert(name.to_string(), sink.clone());
        let target = Target::Sink(name.to_string());
        if let Err(e) = self.launch(&plan, sql, target, Some(Box::new(sink))) {
            self.catalog.remove_sink(name);
            self.sinks.remove(name);
            return Err(e);
        }
        self.catalog.record_created(name, &self.settings.wrap(text));
        Ok(ExecResult::Done("CREATE SINK".into()))
    }

    /// With paths confined (see [`Engine::confine_paths`]): a file, or every file a glob can
    /// match, must be inside the directory once symbolic links are resolved; standard input
    /// is not a file of it.
    pub(super) fn check_confined(
        &self,
        who: &str,
        verb: &str,
        input: &crate::source::Input,
        span: Option<Span>,
    ) -> Result<()> {
        let Some(dir) = &self.confined else { return Ok(()) };
        let refuse = |what: &str| {
            Err(WeirError::plan_at(
                format!("{who} cannot {verb} {what}: files are confined to '{}'", dir.display()),
                span,
            ))
        };
        let path = match input {
            crate::source::Input::Stdin => return refuse("standard input"),
            crate::source::Input::Files { path, .. } => path,
        };
        // A glob is judged by the directory its fixed part names.
        let fixed = match path.find(['*', '?', '[']) {
            Some(i) => path[..i].rsplit_once('/').map_or("", |(d, _)| d),
            None => path.as_str(),
        };
        if resolved(&absolute(&self.base_dir.join(fixed))).starts_with(dir) {
            Ok(())
        } else {
            refuse(&format!("'{path}'"))
        }
    }

    /// A sink truncates its file: refuse one that would destroy data Weir reads or writes, a
    /// file another sink writes (a device such as `/dev/null` may be shared), a file (or glob) a stream's source reads, or a path the
    /// driver protected (the script being run, see [`Engine::protect_path`]).
    fn check_sink_path(
        &self,
        name: &str,
        written: &str,
        path: &Path,
        span: Option<Span>,
    ) -> Result<()> {
        let refuse = |why: String| {
            Err(WeirError::plan_at(format!("sink '{name}' cannot write '{written}': {why}"), span))
        };
        // A device (`/dev/null`) is not truncated and holds nothing: sinks may share it.
        let device = std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir());
        for (other, k) in &self.sinks {
            if !device && same_file(&k.lock().path, path) {
                return refuse(format!("sink '{other}' writes that file"));
            }
        }
        for (stream, st) in self.intake.streams() {
            let Some(src) = &st.source else { continue };
            let crate::source::Input::Files { path: pattern, .. } = &src.reader.spec.input else {
                continue;
            };
            let read = absolute(&self.base_dir.join(pattern));
            let matches =
                glob::Pattern::new(&read.to_string_lossy()).is_ok_and(|p| p.matches_path(path));
            if matches || same_file(&read, path) {
                return refuse(format!("stream '{stream}' reads it ('{pattern}')"));
            }
        }
        for (protected, what) in &self.protected {
            if same_file(protected, path) {
                return refuse(format!("it is {what}"));
            }
        }
        Ok(())
    }

    /// Drops an object unless something depends on it; the queries that read it stop.
    pub(super) fn drop(
        &mut self,
        kind: ObjectKind,
        name: &str,
        if_exists: bool,
        span: Option<Span>,
    ) -> Result<ExecResult> {
        if let Some(base) = self.catalog.companion_of(name) {
            return Err(WeirError::plan_at(
                format!("'{name}' belongs to stream '{base}' and is dropped with it"),
                span,
            ));
        }
        let tag = match kind {
            ObjectKind::Stream => "DROP STREAM",
            ObjectKind::Table => "DROP TABLE",
            ObjectKind::View => "DROP VIEW",
            ObjectKind::Sink => "DROP SINK",
        };
        if !self.catalog.has(kind, name) {
            if if_exists {
                return Ok(ExecResult::Done(tag.into()));
            }
            let noun = &tag[5..].to_ascii_lowercase();
            return Err(WeirError::plan_at(format!("unknown {noun} '{name}'"), span));
        }
        self.catalog.check_droppable(name, span)?;
        self.catalog.remove(kind, name);
        match kind {
            ObjectKind::Stream => self.intake.remove_stream(name),
            ObjectKind::Table => self.tables.remove_table(name),
            ObjectKind::View => {
                self.tables.remove_view(name);
                self.dataflow.stop_where(|q| q.target == Target::View(name.to_string()));
            }
            ObjectKind::Sink => {
                self.sinks.remove(name);
                self.dataflow.stop_where(|q| q.target == Target::Sink(name.to_string()));
            }
        }
        // Queries reading a dropped stream or table stop; their subscriptions end.
        self.dataflow.stop_where(|q| {
            q.runner.sources().iter().any(|s| crate::intake::is_or_companion_of(s, name))
        });
        self.catalog.record_dropped(name);
        Ok(ExecResult::Done(tag.into()))
    }
}

/// `path` made absolute (against the working directory) and cleaned of `.` and `..`, for
/// comparing paths that may not exist yet.
pub(super) fn absolute(path: &Path) -> PathBuf {
    let joined = std::env::current_dir().map(|d| d.join(path)).unwrap_or_else(|_| path.into());
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// An absolute, clean path with the symbolic links of its longest existing ancestor resolved
/// (so a link inside a directory cannot point out of it).
pub(super) fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Whether two absolute paths name the same file: the same once symbolic links are resolved,
/// if both exist; the same path otherwise.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}
