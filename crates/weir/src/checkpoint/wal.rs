//! The write-ahead log: input pushed to the engine since its last checkpoint, on disk before
//! the engine takes it in, so that a crash loses none of it.
//!
//! Files sources are read again from the positions a checkpoint holds; what an application
//! pushes (`Engine::push`, `push_rows`) and the `INSERT`, `DELETE`, `ADVANCE` and `CLOSE`
//! statements it executes have no such place to be read again from. With the log on
//! ([`crate::Engine::set_wal`]), each of them is appended as a record before it is applied, and
//! recovery replays the records that follow the checkpoint it restored, in order, after it.
//!
//! **Files.** `wal-N.log` in the data directory holds the records made after checkpoint N
//! (`N = 0`: before the first). Each checkpoint starts a new file; a file is deleted with the
//! last checkpoint older than it, so recovery from any checkpoint still kept (an older one when
//! the newest is damaged) finds every record after it: it replays the files from its own
//! number on.
//!
//! **Records.** A frame: its length (u32, little-endian), a CRC-32 of the rest, then a JSON
//! header ([`Header`]) of known length and, for an arrival, its rows as an Arrow IPC stream. A
//! record cut short by a crash (the last one of a file, never acknowledged) or damaged fails
//! its length or CRC check: reading stops there with a warning.
//!
//! **Sync.** [`WalSync::Fsync`] makes each record durable before the call that made it
//! returns (it survives the machine's crash); [`WalSync::Write`] hands it to the operating
//! system (it survives Weir's crash, not the machine's), which costs far less.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use serde::{Deserialize, Serialize};
use weir_common::{Result, Time, WeirError};

/// When a record is durable (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalSync {
    /// Synced to the disk before the call returns.
    Fsync,
    /// Written to the operating system before the call returns.
    Write,
}

impl WalSync {
    /// `fsync` or `write`, as `--wal` takes it.
    pub fn parse(text: &str) -> Option<WalSync> {
        match text.to_ascii_lowercase().as_str() {
            "fsync" => Some(WalSync::Fsync),
            "write" => Some(WalSync::Write),
            _ => None,
        }
    }
}

/// What a record says besides its rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub(crate) enum Header {
    /// A statement, as its text.
    Statement {
        sql: String,
        /// The engine's clock before it ran (a table change without `AT` happens at it).
        clock: Time,
    },
    /// A heartbeat of a stream (`ADVANCE`) to `to`, or its close (`to` None); every stream's
    /// close if `stream` is None.
    Time { stream: Option<String>, to: Option<Time>, clock: Time },
    /// Rows pushed to a stream; the rows follow the header.
    Arrival {
        stream: String,
        origin: String,
        clock: Time,
        /// Whether the records before a refused one are taken in (see `Arrival::partial`).
        partial: bool,
        /// Each row's record number, if not simply its position (there were bad records).
        rows_from: Option<Vec<usize>>,
        /// The records that could not be read, by record number.
        bad: Vec<(usize, crate::source::BadRow)>,
    },
}

/// A record read back: its header and, for an arrival, its rows.
#[derive(Debug)]
pub(crate) struct Record {
    pub header: Header,
    pub rows: Option<RecordBatch>,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::exec(format!(
        "write-ahead log: {what} '{}': {e} (an environment error, not a bug: check the data \
         directory's disk)",
        path.display()
    ))
}

fn file_name(after: u64) -> String {
    format!("wal-{after:012}.log")
}

/// The log files in `dir` with the checkpoint number each follows, oldest first.
pub fn files(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter_map(|p| {
                    let n = p.file_name()?.to_str()?;
                    let seq = n.strip_prefix("wal-")?.strip_suffix(".log")?.parse().ok()?;
                    Some((seq, p))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The log being written: records after checkpoint `after`.
#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    sync: WalSync,
}

impl Wal {
    /// Starts the log of the records after checkpoint `after` in `dir`, empty.
    pub fn start(dir: &Path, after: u64, sync: WalSync) -> Result<Wal> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io_err("cannot create the data directory", dir, e))?;
        let path = dir.join(file_name(after));
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_err("cannot create", &path, e))?;
        if sync == WalSync::Fsync {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(Wal { file, path, sync })
    }

    pub fn sync(&self) -> WalSync {
        self.sync
    }

    /// Appends a record: `header`, and the rows of an arrival.
    pub fn append(&mut self, header: &Header, rows: Option<&RecordBatch>) -> Result<()> {
        let head = serde_json::to_vec(header)
            .map_err(|e| WeirError::internal(format!("write-ahead log header: {e}")))?;
        let ipc = match rows {
            Some(b) => weir_common::ipc::write_stream(b)?,
            None => Vec::new(),
        };
        let body_len = 4 + head.len() + ipc.len();
        let len = u32::try_from(body_len).map_err(|_| {
            WeirError::exec(format!(
                "write-ahead log: a record of {body_len} bytes is over the 4 GiB a record holds: \
                 push fewer rows at a time"
            ))
        })?;
        let mut frame = Vec::with_capacity(8 + body_len);
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&[0; 4]);
        frame.extend_from_slice(&(head.len() as u32).to_le_bytes());
        frame.extend_from_slice(&head);
        frame.extend_from_slice(&ipc);
        let crc = crc32fast::hash(&frame[8..]);
        frame[4..8].copy_from_slice(&crc.to_le_bytes());
        self.file.write_all(&frame).map_err(|e| io_err("cannot write", &self.path, e))?;
        if self.sync == WalSync::Fsync {
            self.file.sync_data().map_err(|e| io_err("cannot sync", &self.path, e))?;
        }
        Ok(())
    }
}

/// The records of one log file, in order, and a warning if it ends in a record cut short or
/// damaged (reading stops there).
pub(crate) fn read(path: &Path) -> Result<(Vec<Record>, Option<String>)> {
    let bytes = std::fs::read(path).map_err(|e| io_err("cannot read", path, e))?;
    let mut records = Vec::new();
    let mut at = 0;
    let broken = |at: usize, why: &str| {
        Some(format!(
            "write-ahead log '{}': {why} at byte {at}; the records before it are replayed (a \
             record cut short by a crash was never acknowledged)",
            path.display()
        ))
    };
    while at < bytes.len() {
        let Some(frame) = bytes.get(at..at + 8) else {
            return Ok((records, broken(at, "a record cut short")));
        };
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            return Ok((records, broken(at, "a record cut short")));
        };
        if crc32fast::hash(body) != crc || body.len() < 4 {
            return Ok((records, broken(at, "a damaged record")));
        }
        let head_len = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
        let Some(head) = body.get(4..4 + head_len) else {
            return Ok((records, broken(at, "a damaged record")));
        };
        let header: Header = serde_json::from_slice(head)
            .map_err(|e| WeirError::exec(format!("write-ahead log '{}': {e}", path.display())))?;
        let rest = &body[4 + head_len..];
        let rows = if rest.is_empty() {
            None
        } else {
            let (_, mut batches) = weir_common::ipc::read_stream(rest)?;
            if batches.len() != 1 {
                return Ok((records, broken(at, "a record without its one batch")));
            }
            batches.pop()
        };
        records.push(Record { header, rows });
        at += 8 + len;
    }
    Ok((records, None))
}

/// Deletes the log files that follow a checkpoint older than `oldest` (the oldest one kept).
pub(crate) fn prune(dir: &Path, oldest: u64) {
    for (seq, path) in files(dir) {
        if seq < oldest {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is a failed test
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weir-wal-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn rows(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    fn arrival(stream: &str) -> Header {
        Header::Arrival {
            stream: stream.into(),
            origin: "push".into(),
            clock: 7,
            partial: false,
            rows_from: None,
            bad: Vec::new(),
        }
    }

    #[test]
    fn records_read_back_in_order() {
        let dir = tempdir("order");
        let mut wal = Wal::start(&dir, 3, WalSync::Fsync).unwrap();
        let stmt = Header::Statement { sql: "INSERT INTO t VALUES (1)".into(), clock: 5 };
        wal.append(&stmt, None).unwrap();
        wal.append(&arrival("s"), Some(&rows(&[1, 2, 3]))).unwrap();
        let (records, warning) = read(&dir.join(file_name(3))).unwrap();
        assert_eq!(warning, None);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].header, stmt);
        assert!(records[0].rows.is_none());
        assert_eq!(records[1].header, arrival("s"));
        assert_eq!(records[1].rows.as_ref().unwrap(), &rows(&[1, 2, 3]));
        assert_eq!(files(&dir).iter().map(|f| f.0).collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn a_record_cut_short_or_damaged_ends_the_file_with_a_warning() {
        let dir = tempdir("torn");
        let mut wal = Wal::start(&dir, 0, WalSync::Write).unwrap();
        wal.append(&arrival("a"), Some(&rows(&[1]))).unwrap();
        wal.append(&arrival("b"), Some(&rows(&[2]))).unwrap();
        let path = dir.join(file_name(0));
        let whole = std::fs::read(&path).unwrap();
        let first = read(&path).unwrap().0.len();
        assert_eq!(first, 2);
        // Every cut inside the second record keeps the first one only.
        let second_at = {
            let len = u32::from_le_bytes([whole[0], whole[1], whole[2], whole[3]]) as usize;
            8 + len
        };
        for cut in second_at + 1..whole.len() {
            std::fs::write(&path, &whole[..cut]).unwrap();
            let (records, warning) = read(&path).unwrap();
            assert_eq!(records.len(), 1, "cut at {cut}");
            assert!(warning.unwrap().contains("cut short"), "cut at {cut}");
        }
        // A flipped bit anywhere in the second record is caught by its check.
        for byte in second_at..whole.len() {
            let mut bad = whole.clone();
            bad[byte] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            let (records, warning) = read(&path).unwrap();
            assert_eq!(records.len(), 1, "flip at {byte}");
            assert!(warning.is_some(), "flip at {byte}");
        }
    }

    #[test]
    fn starting_a_log_empties_it_and_pruning_keeps_what_a_kept_checkpoint_needs() {
        let dir = tempdir("prune");
        for seq in [0, 1, 2, 3] {
            let mut wal = Wal::start(&dir, seq, WalSync::Write).unwrap();
            wal.append(&arrival("s"), Some(&rows(&[seq as i64]))).unwrap();
        }
        Wal::start(&dir, 3, WalSync::Write).unwrap();
        assert!(read(&dir.join(file_name(3))).unwrap().0.is_empty());
        prune(&dir, 2);
        assert_eq!(files(&dir).iter().map(|f| f.0).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn sync_policies_parse() {
        assert_eq!(WalSync::parse("FSYNC"), Some(WalSync::Fsync));
        assert_eq!(WalSync::parse("write"), Some(WalSync::Write));
        assert_eq!(WalSync::parse("always"), None);
    }
}
