//! Checkpoint files: written atomically, versioned, checksummed, pruned.
//!
//! One checkpoint is one file, `ckpt-<sequence>.arrow`, in the data directory: an Arrow IPC
//! file whose rows are the checkpoint's sections (a name and a payload: Arrow IPC stream
//! bytes, or JSON for the manifest), a batch per section streamed to the file as it is
//! written (so the state is never held twice over to write it; files of one batch, from
//! before, read the same), with the format version in the schema's metadata,
//! followed by an 8-byte trailer: the CRC-32 of every byte before it (little-endian) and the
//! magic `WCK2`. A file is written as `.ckpt-<sequence>.tmp`, synced, renamed into place, and
//! the directory synced, so a crash leaves either the old set of checkpoints or the new one,
//! never a torn file under a checkpoint's name.
//!
//! Reading checks the trailer first, so damage anywhere (a payload, a section name, Arrow's
//! metadata, the version, the trailer itself, a truncation) is detected as damage before
//! Arrow parses anything, and the previous checkpoint is used. Only an intact file of another
//! format version is refused as such. Arrow's reader is still guarded against panics.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, BinaryArray, LargeBinaryArray, RecordBatch, StringArray};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema};
use weir_common::{Result, WeirError};

/// The version of the checkpoint layout this build writes.
/// 2: the manifest is written by serde derives (field names and layout changed).
/// 3: incremental checkpoints: a checkpoint's state may be in earlier files (its manifest
/// says which); a build that reads only 2 must not take it for whole.
pub const FORMAT_VERSION: u32 = 3;

/// The versions this build reads.
const READS: [&str; 2] = ["2", "3"];

const VERSION_KEY: &str = "weir.checkpoint.version";

/// A checkpoint as stored: named payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub sequence: u64,
    pub sections: Vec<(String, Vec<u8>)>,
}

impl Stored {
    /// The payload of a section.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections.iter().find(|(n, _)| n == name).map(|(_, p)| p.as_slice())
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::exec(format!("{what} '{}': {e}", path.display()))
}

fn file_name(sequence: u64) -> String {
    format!("ckpt-{sequence:012}.arrow")
}

/// The last 4 bytes of a checkpoint file.
const MAGIC: &[u8; 4] = b"WCK2";

/// A checkpoint file's schema: a section's name and its payload, of type `payload`, with the
/// format `version` in the metadata.
fn file_schema(version: &str, payload: DataType) -> Arc<Schema> {
    let metadata = [(VERSION_KEY.to_string(), version.to_string())].into_iter().collect();
    Arc::new(
        Schema::new(vec![
            Field::new("section", DataType::Utf8, false),
            Field::new("payload", payload, false),
        ])
        .with_metadata(metadata),
    )
}

/// A writer that passes the bytes on and keeps their CRC-32 (the file's trailer).
struct Checksummed<W: Write> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a checkpoint file's bytes to `out`: an Arrow IPC file of one batch per section (its
/// name and its payload, handed to Arrow without a copy, and dropped once written, so that a
/// checkpoint never holds its state twice over in memory), the format `version` in the
/// schema's metadata, then the trailer. Returns `out`.
fn write_to<W: Write>(
    out: W,
    version: &str,
    sections: Vec<(String, Vec<u8>)>,
) -> std::io::Result<W> {
    // Arrow's errors here are the file's (a full disk): I/O errors, never Weir's bugs.
    let arrow = |e: arrow::error::ArrowError| match e {
        arrow::error::ArrowError::IoError(_, e) => e,
        other => std::io::Error::other(other),
    };
    let schema = file_schema(version, DataType::LargeBinary);
    let mut out = Checksummed { inner: out, crc: crc32fast::Hasher::new() };
    let mut w = arrow::ipc::writer::FileWriter::try_new(&mut out, &schema).map_err(arrow)?;
    for (name, payload) in sections {
        let len = payload.len() as i64;
        let payloads = LargeBinaryArray::new(
            OffsetBuffer::new(ScalarBuffer::from(vec![0i64, len])),
            Buffer::from_vec(payload),
            None,
        );
        let names = StringArray::from(vec![name]);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(payloads)])
            .map_err(arrow)?;
        w.write(&batch).map_err(arrow)?;
    }
    w.finish().map_err(arrow)?;
    drop(w);
    let crc = out.crc.finalize();
    let mut out = out.inner;
    out.write_all(&crc.to_le_bytes())?;
    out.write_all(MAGIC)?;
    Ok(out)
}

/// Writes checkpoint `sequence` into `dir` atomically, streaming its sections to the file;
/// returns its path.
pub fn write(dir: &Path, sequence: u64, sections: Vec<(String, Vec<u8>)>) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| io_err("cannot create the data directory", dir, e))?;
    let tmp = dir.join(format!(".ckpt-{sequence:012}.tmp"));
    let target = dir.join(file_name(sequence));
    {
        let file = File::create(&tmp).map_err(|e| io_err("cannot write", &tmp, e))?;
        let out = std::io::BufWriter::new(file);
        let out = write_to(out, &FORMAT_VERSION.to_string(), sections)
            .map_err(|e| io_err("cannot write", &tmp, e))?;
        let file = out.into_inner().map_err(|e| io_err("cannot write", &tmp, e.into_error()))?;
        file.sync_all().map_err(|e| io_err("cannot sync", &tmp, e))?;
    }
    std::fs::rename(&tmp, &target).map_err(|e| io_err("cannot rename", &tmp, e))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(target)
}

/// Reads and verifies one checkpoint file.
pub fn read(path: &Path) -> Result<Stored> {
    let sequence = sequence_of(path).ok_or_else(|| corrupt(path, "not a checkpoint file name"))?;
    let bytes = std::fs::read(path).map_err(|e| io_err("cannot read", path, e))?;
    let Some(body_len) = bytes.len().checked_sub(8) else {
        return Err(corrupt(path, "shorter than its trailer"));
    };
    let (body, trailer) = bytes.split_at(body_len);
    if &trailer[4..] != MAGIC {
        return Err(corrupt(path, "no checkpoint trailer (truncated or overwritten)"));
    }
    let crc = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    if crc32fast::hash(body) != crc {
        return Err(corrupt(path, "it fails its checksum"));
    }
    // Intact bytes: Arrow's reader should not fail, but a panic in it must not take the
    // engine down (a checksum collision, a bug).
    std::panic::catch_unwind(|| sections_of(path, body))
        .unwrap_or_else(|_| Err(corrupt(path, "unreadable Arrow IPC file")))
        .map(|sections| Stored { sequence, sections })
}

/// The sections of an intact checkpoint file's Arrow IPC bytes.
fn sections_of(path: &Path, body: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let reader = arrow::ipc::reader::FileReader::try_new(std::io::Cursor::new(body), None)
        .map_err(|e| corrupt(path, &e.to_string()))?;
    let version = reader.schema().metadata().get(VERSION_KEY).cloned();
    if !version.as_deref().is_some_and(|v| READS.contains(&v)) {
        return Err(WeirError::exec(format!(
            "checkpoint '{}' has format version {}, this Weir reads versions {}: it cannot \
             be restored by this build",
            path.display(),
            version.unwrap_or_else(|| "(none)".into()),
            READS.join(" and ")
        )));
    }
    let mut sections = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(path, &e.to_string()))?;
        let Some(names) = batch.column(0).as_any().downcast_ref::<StringArray>() else {
            return Err(corrupt(path, "unexpected columns"));
        };
        // One batch per section, payloads LargeBinary (since 2026-12-05); before, one batch of
        // every section, payloads Binary.
        let payload = |i: usize| -> Option<Vec<u8>> {
            let column = batch.columns().get(1)?.as_any();
            match column.downcast_ref::<LargeBinaryArray>() {
                Some(p) => Some(p.value(i).to_vec()),
                None => column.downcast_ref::<BinaryArray>().map(|p| p.value(i).to_vec()),
            }
        };
        for i in 0..batch.num_rows() {
            if names.is_null(i) {
                return Err(corrupt(path, "a section without a name"));
            }
            let payload = payload(i).ok_or_else(|| corrupt(path, "unexpected columns"))?;
            sections.push((names.value(i).to_string(), payload));
        }
    }
    Ok(sections)
}

fn corrupt(path: &Path, why: &str) -> WeirError {
    WeirError::exec(format!("checkpoint '{}' is damaged: {why}", path.display()))
}

/// The checkpoint files in `dir`, newest first.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("ckpt-") && n.ends_with(".arrow"))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.reverse();
    files
}

/// The newest checkpoint that reads back intact, with a warning for each newer one that did
/// not. A checkpoint of another format version is an error, not skipped: restoring an older
/// one instead would silently lose everything after it.
pub fn latest(dir: &Path) -> Result<(Option<Stored>, Vec<String>)> {
    let mut warnings = Vec::new();
    for path in list(dir) {
        match read(&path) {
            Ok(stored) => return Ok((Some(stored), warnings)),
            Err(e) if e.to_string().contains("format version") => return Err(e),
            Err(e) => warnings.push(format!("{e}; using the one before it")),
        }
    }
    Ok((None, warnings))
}

/// The sequence number of the oldest checkpoint in `dir`, if any.
pub fn oldest(dir: &Path) -> Option<u64> {
    list(dir).last().and_then(|p| sequence_of(p))
}

/// The path of checkpoint `sequence` in `dir`.
pub fn path_of(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(file_name(sequence))
}

/// The sequence number of a checkpoint file, from its name.
pub fn sequence_of(path: &Path) -> Option<u64> {
    path.file_name()?.to_str()?.strip_prefix("ckpt-")?.strip_suffix(".arrow")?.parse().ok()
}

/// Deletes the checkpoints older than both the newest `keep` and `keep_from` (the oldest
/// still needed: incremental checkpoints name earlier files), and leftover temporary files.
pub fn prune(dir: &Path, keep: usize, keep_from: u64) {
    for old in list(dir).into_iter().skip(keep) {
        if sequence_of(&old).is_some_and(|s| s < keep_from) {
            let _ = std::fs::remove_file(old);
        }
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".tmp")) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn sections(tag: &str) -> Vec<(String, Vec<u8>)> {
        vec![("manifest".into(), tag.as_bytes().to_vec()), ("state".into(), vec![7; 1000])]
    }

    #[test]
    fn round_trip_newest_first_and_pruning() {
        let dir = tempdir("round");
        write(&dir, 1, sections("one")).unwrap();
        write(&dir, 2, sections("two")).unwrap();
        let (got, warnings) = latest(&dir).unwrap();
        let got = got.unwrap();
        assert!(warnings.is_empty());
        assert_eq!(got.sequence, 2);
        assert_eq!(got.section("manifest"), Some(&b"two"[..]));
        write(&dir, 3, sections("three")).unwrap();
        std::fs::write(dir.join(".ckpt-000000000004.tmp"), b"torn").unwrap();
        prune(&dir, 2, 3);
        let names: Vec<String> = list(&dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ckpt-000000000003.arrow", "ckpt-000000000002.arrow"]);
        assert!(!dir.join(".ckpt-000000000004.tmp").exists());
        // Older than the newest `keep` but still named by a kept checkpoint: kept.
        write(&dir, 4, sections("four")).unwrap();
        prune(&dir, 1, 2);
        assert_eq!(list(&dir).len(), 3);
        prune(&dir, 1, 4);
        assert_eq!(list(&dir), [path_of(&dir, 4)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_files_fall_back_to_the_previous_checkpoint() {
        let dir = tempdir("damaged");
        write(&dir, 1, sections("one")).unwrap();
        let p2 = write(&dir, 2, sections("two")).unwrap();
        // Truncated (a crash while copying, a full disk).
        let bytes = std::fs::read(&p2).unwrap();
        std::fs::write(&p2, &bytes[..bytes.len() / 2]).unwrap();
        let (got, warnings) = latest(&dir).unwrap();
        assert_eq!(got.unwrap().sequence, 1);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("ckpt-000000000002.arrow' is damaged"), "{warnings:?}");
        // A flipped bit inside a payload: the checksum catches it.
        let p3 = write(&dir, 3, sections("three")).unwrap();
        let mut bytes = std::fs::read(&p3).unwrap();
        let at = bytes.windows(4).position(|w| w == [7, 7, 7, 7]).unwrap();
        bytes[at + 10] ^= 0x10;
        std::fs::write(&p3, &bytes).unwrap();
        let err = read(&p3).unwrap_err().to_string();
        assert!(
            err.contains("ckpt-000000000003.arrow' is damaged: it fails its checksum"),
            "{err}"
        );
        let (got, warnings) = latest(&dir).unwrap();
        assert_eq!(got.unwrap().sequence, 1);
        assert_eq!(warnings.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// One flipped bit anywhere in a checkpoint file (payloads, section names, Arrow's
    /// metadata and footer, the version, the trailer) is detected as damage: the previous
    /// checkpoint is restored with a warning, never a panic, never a hard error. Every byte is
    /// flipped at one bit by default; `WEIR_BITFLIP_ALL=1` flips every bit of every byte.
    #[test]
    fn every_flipped_bit_is_detected_and_falls_back() {
        let dir = tempdir("bitflip");
        write(&dir, 1, sections("one")).unwrap();
        let p2 = write(&dir, 2, sections("two")).unwrap();
        let intact = std::fs::read(&p2).unwrap();
        let all_bits = std::env::var_os("WEIR_BITFLIP_ALL").is_some();
        let mut flips = 0;
        for at in 0..intact.len() {
            let bits: Vec<u8> = if all_bits { (0..8).collect() } else { vec![(at % 8) as u8] };
            for bit in bits {
                let mut bytes = intact.clone();
                bytes[at] ^= 1 << bit;
                std::fs::write(&p2, &bytes).unwrap();
                let (got, warnings) = latest(&dir).unwrap_or_else(|e| {
                    panic!("byte {at} bit {bit}: refused instead of falling back: {e}")
                });
                assert_eq!(got.map(|s| s.sequence), Some(1), "byte {at} bit {bit}");
                assert_eq!(warnings.len(), 1, "byte {at} bit {bit}");
                assert!(warnings[0].contains("is damaged"), "byte {at} bit {bit}: {warnings:?}");
                flips += 1;
            }
        }
        assert!(flips >= intact.len());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file written before sections were streamed (one batch of every section, payloads
    /// Binary) reads back the same.
    #[test]
    fn a_file_of_one_batch_with_binary_payloads_still_reads() {
        let dir = tempdir("one-batch");
        std::fs::create_dir_all(&dir).unwrap();
        let schema = file_schema(&FORMAT_VERSION.to_string(), DataType::Binary);
        let want = sections("old");
        let names = StringArray::from_iter_values(want.iter().map(|(n, _)| n.as_str()));
        let payloads = BinaryArray::from_iter_values(want.iter().map(|(_, p)| p.as_slice()));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(payloads)])
            .unwrap();
        let mut w = arrow::ipc::writer::FileWriter::try_new(Vec::new(), &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let mut bytes = w.into_inner().unwrap();
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(MAGIC);
        let path = dir.join(file_name(4));
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(read(&path).unwrap(), Stored { sequence: 4, sections: want });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_format_version_is_refused() {
        let dir = tempdir("version");
        let p = write(&dir, 5, sections("x")).unwrap();
        // Rewrite the file with a different version in its metadata.
        let stored = read(&p).unwrap();
        std::fs::write(&p, write_to(Vec::new(), "999", stored.sections).unwrap()).unwrap();
        let err = latest(&dir).unwrap_err().to_string();
        let expected = "has format version 999, this Weir reads versions 2 and 3";
        assert!(err.contains(expected), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
