//! Sources: where a stream's elements come from when they are not pushed through the API.
//!
//! A source reads CSV or JSON-lines bytes from files (one path, or a glob read in name order),
//! from a file that keeps growing (`follow`, read like `tail -f`), or from standard input. It
//! cuts them into records ([`framing`]), decodes them with arrow's readers into the stream's
//! schema ([`decode`]), and hands the engine decoded rows and bad records with their locations.
//! Parquet files are read a batch of rows at a time instead ([`parquet`]).
//! The engine decides what late and bad rows mean (the stream's policies) and when a source
//! reads: see `Engine::poll_sources`.
//!
//! Reading is in bounded chunks. A finite list of files is read ahead on a helper thread and
//! its chunks decoded on one thread per core, in file order ([`read_ahead`]); a poll waits
//! for the next chunk as it would for a read of the file. A followed file and standard input
//! never make the engine wait: a followed file is read in the engine's thread up to its
//! current end, and standard input by a helper thread into a channel.

pub(crate) mod byte_masks;
pub(crate) mod csv_fast;
pub(crate) mod decode;
pub(crate) mod framing;
pub(crate) mod json_fast;
pub(crate) mod parquet;
pub(crate) mod read_ahead;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

pub use decode::Format;
pub(crate) use decode::{BadRow, Decoded, RowDecoder};
use framing::{Framer, Framing, Records};
use read_ahead::ReadAhead;

/// Whether a path names JSON lines by its extension (`.json`, `.jsonl`, `.ndjson`): the
/// default format of sources and sinks that do not say.
pub(crate) fn is_json_path(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.ends_with(".json") || p.ends_with(".jsonl") || p.ends_with(".ndjson")
}

/// Whether a path names Parquet by its extension (`.parquet`, `.pq`).
pub(crate) fn is_parquet_path(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.ends_with(".parquet") || p.ends_with(".pq")
}

/// Data formats Weir does not read or write, by extension: a path ending so must say its
/// format (`format = 'csv'`) rather than be read as CSV by default.
const OTHER_FORMATS: &[&str] = &[
    ".avro", ".orc", ".arrow", ".feather", ".ipc", ".xlsx", ".xls", ".ods", ".gz", ".zst", ".bz2",
    ".xz", ".zip", ".tar", ".lz4", ".snappy", ".db", ".sqlite",
];

/// The format a path's extension names when no `format` option says: JSON lines, Parquet,
/// or CSV (any other extension, or none); an error for the extension of a format Weir does
/// not support.
pub(crate) fn format_by_extension(path: &str) -> Result<Option<Format>, String> {
    if is_json_path(path) {
        return Ok(Some(Format::JsonLines));
    }
    if is_parquet_path(path) {
        return Ok(Some(Format::Parquet));
    }
    let lower = path.to_ascii_lowercase();
    if let Some(ext) = OTHER_FORMATS.iter().find(|e| lower.ends_with(*e)) {
        return Err(format!(
            "'{path}' ends in {ext}, a format Weir does not read or write: use CSV, JSON lines \
             or Parquet, or say format = 'csv' if it is CSV after all"
        ));
    }
    Ok(None)
}

/// Whether a `path` option is a glob pattern rather than one file.
fn is_pattern(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

/// `path` resolved against `base` unless absolute.
fn resolve(base: &Path, path: &str) -> PathBuf {
    if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        base.join(path)
    }
}

/// The regular files matching glob `path` (relative to `base`), in no particular order.
fn matching(base: &Path, path: &str) -> Result<Vec<PathBuf>, String> {
    let pattern = resolve(base, path).to_string_lossy().into_owned();
    Ok(glob::glob(&pattern)
        .map_err(|e| format!("bad file pattern '{path}': {e}"))?
        .filter_map(|p| p.ok())
        .filter(|p| p.is_file())
        .collect())
}

/// Where a source's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// A file or a glob of files (`data/bids-*.csv`), read in name order. With `follow`, the
    /// last file is watched for appended data after its end, and the stream never ends; for a
    /// glob, a file that appears later and sorts after the last one is read next, the one
    /// before it then being complete (rotated logs).
    Files { path: String, follow: bool },
    /// The process's standard input, until it ends.
    Stdin,
}

/// A source attached to a stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    pub input: Input,
    pub format: Format,
    /// How epoch numbers in TIMESTAMP fields are read: `s`, `ms` or `us`.
    pub epoch_unit: String,
}

impl SourceSpec {
    /// A CSV file (or glob) with a header line, read once.
    pub fn csv_file(path: impl Into<String>) -> Self {
        SourceSpec {
            input: Input::Files { path: path.into(), follow: false },
            format: Format::Csv { header: true, delimiter: b',' },
            epoch_unit: "s".into(),
        }
    }

    /// A JSON-lines file (or glob), read once.
    pub fn json_file(path: impl Into<String>) -> Self {
        SourceSpec {
            input: Input::Files { path: path.into(), follow: false },
            format: Format::JsonLines,
            epoch_unit: "s".into(),
        }
    }

    /// Short description for statistics and messages, e.g. `file data/bids.csv (csv)`.
    pub fn describe(&self) -> String {
        let format = match self.format {
            Format::Csv { .. } => "csv",
            Format::JsonLines => "jsonl",
            Format::Parquet => "parquet",
        };
        match &self.input {
            Input::Files { path, follow: false } => format!("file {path} ({format})"),
            Input::Files { path, follow: true } => format!("file {path} ({format}, follow)"),
            Input::Stdin => format!("stdin ({format})"),
        }
    }
}

/// How far a source has read, for progress displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProgress {
    pub stream: String,
    pub bytes_read: u64,
    /// The files' total size when reading started (None for stdin, or before starting).
    pub bytes_total: Option<u64>,
    pub records: u64,
    pub started: bool,
    pub ended: bool,
    pub failed: bool,
    /// A followed file or stdin: it has no end to reach.
    pub unbounded: bool,
}

/// Where a source is, for checkpoints: the file and the byte offset of the first record not
/// yet taken in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourcePosition {
    pub files: Vec<PathBuf>,
    /// Index in `files` of the file being read (`files.len()` once all are read).
    pub file: usize,
    pub offset: u64,
    /// The line number at `offset`.
    pub line: u64,
    /// The file's header record, if already read.
    pub header: Option<Vec<u8>>,
    pub records_read: u64,
    pub started: bool,
    pub ended: bool,
}

/// What one poll of a source produced.
#[derive(Debug)]
pub(crate) enum Polled {
    /// Decoded records from `origin` (a file path or `stdin`).
    Rows { decoded: Decoded, records: usize, origin: String, lines: Vec<u64> },
    /// Nothing right now (a followed file or stdin may have more later).
    Nothing,
    /// The input is exhausted.
    Ended,
}

/// An open input file with its record framing.
#[derive(Debug)]
struct OpenFile {
    name: String,
    file: File,
    framer: Framer,
    header_pending: bool,
    /// The header record, once read (a checkpoint keeps it: a restored source reads on from
    /// the middle of the file).
    header: Option<Vec<u8>>,
}

/// Standard input: chunks from the reader thread, framed into records.
#[derive(Debug)]
struct StdinInput {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    framer: Framer,
    header_pending: bool,
}

/// A source's reading state. See the module docs.
#[derive(Debug)]
pub(crate) struct SourceReader {
    pub spec: SourceSpec,
    /// Shared with the decoding threads of a read-ahead, which decode with the layout of the
    /// file their records came from (a new header makes a new decoder).
    decoder: Arc<RowDecoder>,
    started: bool,
    files: Vec<PathBuf>,
    /// Index in `files` of the next file to open.
    next_file: usize,
    /// Paths are shown relative to this directory (the one relative paths are read from).
    base: PathBuf,
    current: Option<OpenFile>,
    /// The Parquet file being read (format Parquet; `current` is then unused).
    parquet: Option<parquet::ParquetFile>,
    stdin: Option<StdinInput>,
    /// The thread reading a finite file source ahead of the engine ([`read_ahead`]); while
    /// it runs, this reader's own file state is idle.
    ahead: Option<ReadAhead>,
    /// This reader is a read-ahead thread's, and reads in it.
    in_thread: bool,
    /// Threads decoding a read-ahead's chunks (1: the reading thread decodes too; the engine
    /// sets [`read_ahead::decoding_threads`]).
    pub decoders: usize,
    pub bytes_read: u64,
    pub records_read: u64,
    /// Total size of the files when reading started (None for stdin).
    pub bytes_total: Option<u64>,
    pub ended: bool,
}

impl SourceReader {
    pub fn new(
        spec: SourceSpec,
        schema: SchemaRef,
        time_column: Option<usize>,
    ) -> Result<Self, String> {
        let decoder = RowDecoder::new(schema, time_column, spec.format.clone(), &spec.epoch_unit)?;
        Ok(SourceReader {
            spec,
            decoder: Arc::new(decoder),
            started: false,
            files: Vec::new(),
            next_file: 0,
            base: PathBuf::new(),
            current: None,
            parquet: None,
            stdin: None,
            ahead: None,
            in_thread: false,
            decoders: 1,
            bytes_read: 0,
            records_read: 0,
            bytes_total: None,
            ended: false,
        })
    }

    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the input has no end to wait for (a followed file, stdin).
    pub fn unbounded(&self) -> bool {
        matches!(self.spec.input, Input::Stdin | Input::Files { follow: true, .. })
    }

    /// Resolves the files (relative paths against `base`) or starts reading standard input.
    pub fn start(&mut self, base: &Path) -> Result<(), String> {
        self.started = true;
        self.base = base.to_path_buf();
        match &self.spec.input {
            Input::Files { path, .. } => {
                let mut files: Vec<PathBuf> = if is_pattern(path) {
                    matching(base, path)?
                } else {
                    vec![resolve(base, path)]
                };
                files.sort();
                if files.is_empty() {
                    return Err(format!("no file matches '{path}'"));
                }
                let mut total = 0;
                for f in &files {
                    let meta = std::fs::metadata(f).map_err(|e| {
                        let shown = f.strip_prefix(base).unwrap_or(f);
                        format!("cannot read '{}': {e}", shown.display())
                    })?;
                    total += meta.len();
                }
                self.bytes_total = Some(total);
                self.files = files;
                self.next_file = 0;
            }
            Input::Stdin => {
                let (tx, rx) = std::sync::mpsc::sync_channel(16);
                std::thread::Builder::new()
                    .name("weir-stdin".into())
                    .spawn(move || {
                        let mut stdin = std::io::stdin().lock();
                        loop {
                            let mut buf = vec![0u8; 64 * 1024];
                            match stdin.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    buf.truncate(n);
                                    if tx.send(Ok(buf)).is_err() {
                                        break;
                                    }
                                }
                                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                                Err(e) => {
                                    let _ = tx.send(Err(e));
                                    break;
                                }
                            }
                        }
                    })
                    .map_err(|e| format!("cannot read standard input: {e}"))?;
                self.stdin = Some(StdinInput {
                    rx,
                    framer: Framer::new(self.framing()),
                    header_pending: self.decoder.wants_header(),
                });
            }
        }
        Ok(())
    }

    fn framing(&self) -> Framing {
        match self.spec.format {
            Format::Csv { delimiter, .. } => Framing::Csv { quote: b'"', delimiter },
            Format::JsonLines | Format::Parquet => Framing::Lines,
        }
    }

    /// Reads up to about `max_bytes` and decodes the complete records among them.
    pub fn poll(&mut self, max_bytes: usize) -> Result<Polled, String> {
        if self.ended {
            return Ok(Polled::Ended);
        }
        if self.ahead.is_none() && self.reads_ahead() {
            self.ahead = Some(ReadAhead::start(self, &self.base, max_bytes, self.decoders)?);
            self.current = None;
            self.parquet = None;
        }
        if let Some(ahead) = self.ahead.as_mut() {
            let chunk = ahead.next(max_bytes)?;
            // The thread's reader counts bytes from the record it started at, and this one
            // may have read past it (an incomplete record): progress never goes back.
            self.bytes_read = self.bytes_read.max(chunk.bytes_read);
            self.records_read = chunk.records_read;
            self.ended = chunk.ended;
            return chunk.polled;
        }
        self.poll_own(max_bytes)
    }

    /// Whether this source reads on a thread of its own ([`read_ahead`]): a finite list of
    /// files, started, and not read by such a thread already (the thread's own reader).
    fn reads_ahead(&self) -> bool {
        self.started
            && !self.in_thread
            && matches!(self.spec.input, Input::Files { follow: false, .. })
    }

    /// [`Self::poll`] in this thread.
    fn poll_own(&mut self, max_bytes: usize) -> Result<Polled, String> {
        Ok(match self.read_own(max_bytes)? {
            Framed::Records(recs, origin) => decode_records(&self.decoder, recs, origin),
            Framed::Polled(polled) => polled,
        })
    }

    /// The decoder for the records [`Self::read_own`] returned last.
    pub(crate) fn decoder(&self) -> Arc<RowDecoder> {
        self.decoder.clone()
    }

    /// [`Self::poll_own`] up to decoding: the next complete records, framed and counted (a
    /// Parquet batch comes decoded).
    pub(crate) fn read_own(&mut self, max_bytes: usize) -> Result<Framed, String> {
        if self.spec.format == Format::Parquet {
            return self.poll_parquet().map(Framed::Polled);
        }
        if let Some(input) = &mut self.stdin {
            let (bytes, eof) = match input.rx.try_recv() {
                Ok(Ok(b)) => (b, false),
                Ok(Err(e)) => return Err(format!("reading standard input: {e}")),
                Err(TryRecvError::Empty) => return Ok(Framed::Polled(Polled::Nothing)),
                Err(TryRecvError::Disconnected) => (Vec::new(), true),
            };
            self.bytes_read += bytes.len() as u64;
            let mut recs = input.framer.feed(&bytes, eof);
            take_header(&mut self.decoder, &mut recs, &mut input.header_pending, "stdin")?;
            if eof {
                self.ended = true;
                self.stdin = None;
            }
            return Ok(self.records(recs, "stdin".into()));
        }
        loop {
            if self.current.is_none() {
                if self.next_file >= self.files.len() {
                    self.ended = true;
                    return Ok(Framed::Polled(Polled::Ended));
                }
                self.next_file += 1;
                self.current = Some(self.open(self.next_file - 1, 0, 1, None)?);
            }
            let follow = matches!(self.spec.input, Input::Files { follow: true, .. });
            let last = self.next_file >= self.files.len();
            let Some(cur) = self.current.as_mut() else { continue };
            let n = cur
                .framer
                .read_from(&mut cur.file, max_bytes.max(4096))
                .map_err(|e| format!("reading '{}': {e}", cur.name))?;
            self.bytes_read += n as u64;
            // A followed file at its end waits for more, unless a newer file has appeared:
            // then it is complete, and read to its end like any other.
            if n == 0 && follow && last && !self.discover()? {
                return Ok(Framed::Polled(Polled::Nothing));
            }
            let Some(cur) = self.current.as_mut() else { continue };
            let eof = n == 0;
            let mut recs = cur.framer.frame(eof);
            let name = cur.name.clone();
            if cur.header_pending && !recs.is_empty() {
                cur.header = Some(recs.record(0).to_vec());
            }
            take_header(&mut self.decoder, &mut recs, &mut cur.header_pending, &name)?;
            if eof {
                self.current = None;
            }
            if recs.is_empty() && eof {
                continue;
            }
            return Ok(self.records(recs, name));
        }
    }

    /// Reads the next batch of rows of the Parquet files.
    fn poll_parquet(&mut self) -> Result<Polled, String> {
        loop {
            if self.parquet.is_none() {
                if self.next_file >= self.files.len() {
                    self.ended = true;
                    return Ok(Polled::Ended);
                }
                self.next_file += 1;
                self.parquet = Some(self.open_parquet(self.next_file - 1, 0)?);
            }
            let Some(p) = self.parquet.as_mut() else { continue };
            let first = p.rows_read;
            let Some(raw) = p.next_batch()? else {
                self.parquet = None;
                continue;
            };
            let n = raw.num_rows() as u64;
            p.rows_read += n;
            // Progress: the file's bytes in proportion to its rows.
            let share = |rows: u64| {
                if p.total_rows == 0 {
                    0
                } else {
                    (u128::from(p.file_len) * u128::from(rows.min(p.total_rows))
                        / u128::from(p.total_rows)) as u64
                }
            };
            self.bytes_read += share(p.rows_read) - share(first);
            let origin = p.name.clone();
            self.records_read += n;
            let decoded = self.decoder.convert_parquet(&raw, first);
            let lines = (first + 1..=first + n).collect();
            return Ok(Polled::Rows { decoded, records: n as usize, origin, lines });
        }
    }

    /// Opens Parquet file `index`, skipping its first `rows`.
    fn open_parquet(&self, index: usize, rows: u64) -> Result<parquet::ParquetFile, String> {
        let path = self.files.get(index).cloned().ok_or("no such file")?;
        let shown = path.strip_prefix(&self.base).unwrap_or(&path).display().to_string();
        let file = File::open(&path).map_err(|e| format!("cannot open '{shown}': {e}"))?;
        parquet::ParquetFile::open(file, &shown, self.decoder.schema(), rows)
    }

    /// For a followed glob: appends the files that match it now and sort after the last file
    /// known, in name order. Returns whether there were any.
    fn discover(&mut self) -> Result<bool, String> {
        let Input::Files { path, follow: true } = &self.spec.input else { return Ok(false) };
        if !is_pattern(path) {
            return Ok(false);
        }
        let Some(last) = self.files.last().cloned() else { return Ok(false) };
        let mut newer: Vec<PathBuf> =
            matching(&self.base, path)?.into_iter().filter(|p| *p > last).collect();
        if newer.is_empty() {
            return Ok(false);
        }
        newer.sort();
        let added: u64 = newer.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
        self.bytes_total = Some(self.bytes_total.unwrap_or(0) + added);
        self.files.extend(newer);
        Ok(true)
    }

    /// Opens file `index` at byte `offset` (line `line`), with its header if already read.
    fn open(
        &mut self,
        index: usize,
        offset: u64,
        line: u64,
        header: Option<Vec<u8>>,
    ) -> Result<OpenFile, String> {
        let path = self.files.get(index).cloned().ok_or("no such file")?;
        let shown = path.strip_prefix(&self.base).unwrap_or(&path).display().to_string();
        let mut file = File::open(&path).map_err(|e| format!("cannot open '{shown}': {e}"))?;
        if offset > 0 {
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| format!("cannot seek '{shown}': {e}"))?;
        }
        if let Some(h) = &header {
            Arc::make_mut(&mut self.decoder)
                .set_header(h)
                .map_err(|e| format!("'{shown}': {e}"))?;
        }
        Ok(OpenFile {
            name: shown,
            file,
            framer: Framer::at(self.framing(), offset, line),
            header_pending: self.decoder.wants_header() && header.is_none(),
            header,
        })
    }

    /// Where the source is: the first record not yet taken in. Bytes read past it (an
    /// incomplete record) are read again after a restore.
    pub fn position(&self) -> SourcePosition {
        if let Some(ahead) = &self.ahead {
            return ahead.position.clone();
        }
        let (file, offset, line, header) = match (&self.current, &self.parquet) {
            (Some(cur), _) => {
                (self.next_file - 1, cur.framer.offset(), cur.framer.line(), cur.header.clone())
            }
            // A Parquet file's position is in rows.
            (None, Some(p)) => (self.next_file - 1, p.rows_read, p.rows_read + 1, None),
            (None, None) => (self.next_file, 0, 1, None),
        };
        SourcePosition {
            files: self.files.clone(),
            file,
            offset,
            line,
            header,
            records_read: self.records_read,
            started: self.started,
            ended: self.ended,
        }
    }

    /// Continues from a position taken by [`Self::position`] (from a checkpoint). Standard
    /// input cannot be rewound: it goes on with what comes next.
    pub fn restore(&mut self, base: &Path, pos: SourcePosition) -> Result<(), String> {
        self.ahead = None;
        self.records_read = pos.records_read;
        if !pos.started {
            return Ok(());
        }
        if matches!(self.spec.input, Input::Stdin) {
            return self.start(base);
        }
        self.started = true;
        self.base = base.to_path_buf();
        self.files = pos.files;
        self.bytes_total =
            Some(self.files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum());
        self.bytes_read = self.files[..pos.file.min(self.files.len())]
            .iter()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum::<u64>()
            + pos.offset;
        self.ended = pos.ended;
        if pos.ended || pos.file >= self.files.len() {
            self.next_file = self.files.len();
            return Ok(());
        }
        self.next_file = pos.file + 1;
        if self.spec.format == Format::Parquet {
            // Bytes are counted in proportion to rows: recount this file's share.
            self.bytes_read -= pos.offset;
            let p = self.open_parquet(pos.file, pos.offset)?;
            if p.total_rows > 0 {
                self.bytes_read += (u128::from(p.file_len)
                    * u128::from(pos.offset.min(p.total_rows))
                    / u128::from(p.total_rows)) as u64;
            }
            self.parquet = Some(p);
            return Ok(());
        }
        self.current = Some(self.open(pos.file, pos.offset, pos.line, pos.header)?);
        Ok(())
    }

    /// Records read from `origin`, counted.
    fn records(&mut self, recs: Records, origin: String) -> Framed {
        self.records_read += recs.len() as u64;
        Framed::Records(recs, origin)
    }
}

/// What one read of a source's bytes gave, before decoding.
#[derive(Debug)]
pub(crate) enum Framed {
    /// Complete records from `origin`, to decode.
    Records(Records, String),
    /// Anything else: decoded rows (Parquet), nothing yet, or the end.
    Polled(Polled),
}

/// Decodes records read from `origin`.
pub(crate) fn decode_records(decoder: &RowDecoder, recs: Records, origin: String) -> Polled {
    let decoded = decoder.decode(&recs);
    Polled::Rows { decoded, records: recs.len(), origin, lines: recs.lines }
}

/// If a header is still expected, takes it from the front of `recs`.
fn take_header(
    decoder: &mut Arc<RowDecoder>,
    recs: &mut Records,
    pending: &mut bool,
    origin: &str,
) -> Result<(), String> {
    if !*pending || recs.is_empty() {
        return Ok(());
    }
    *pending = false;
    Arc::make_mut(decoder).set_header(recs.record(0)).map_err(|e| format!("'{origin}': {e}"))?;
    *recs = recs.split_off(1);
    Ok(())
}
