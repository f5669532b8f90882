//! Reading ahead: a finite file source reads and decodes its next chunks on helper threads
//! while the engine runs the queries over the chunk before them.
//!
//! Reading and decoding a file is most of the work of a simple query over it (the bids CSV
//! decodes at about 4 M rows/s on one core), and the operators wait for it. With read-ahead,
//! a file source's reading state lives on a thread of its own, which reads the file and cuts
//! it into chunks of whole records ([`super::framing`]), one after another. With one decoder
//! that thread decodes each chunk too; with `decoders` = N > 1 ([`decoding_threads`]: one per
//! core) it hands chunk k to decoding thread k mod N, so N chunks decode at once, and
//! [`ReadAhead::next`] takes the decoded chunks from the threads in turn: in file order.
//!
//! Nothing a query can see changes. The chunks are the records the engine's own polls would
//! read, each with the byte budget of the latest poll (the same in every loop that reads a file
//! through), taken in order; lateness is decided row by row in arrival order, so it would not
//! depend on where chunks are cut anyway. A chunk comes with the source's position after it,
//! so a checkpoint records the first record the engine has not taken in, never one a thread
//! has merely read or decoded: after a crash, a chunk decoded but not taken is read again.
//! The reading thread starts from a position ([`SourceReader::restore`], the path a restored
//! source takes), and the threads stop when the file ends, when reading fails, or when the
//! source is dropped. At most about 3 chunks per decoder are read and not yet taken: each
//! thread holds one, and each channel between them one. Followed files and standard input,
//! whose next chunk may not exist yet, are read in the engine's thread as before.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, OnceLock};

use super::{decode_records, Framed, Polled, RowDecoder, SourcePosition, SourceReader};

/// How many threads decode a file read ahead, with `workers` workers: one per core the
/// process may use (`std::thread::available_parallelism`, which follows CPU affinity and
/// cgroup quotas), and at least one per worker, up to 4. One reading thread cuts records for
/// about three decoding threads (a profile of the bids CSV: reading and cutting a chunk costs
/// about a third of decoding it), so more would wait on it.
pub(crate) fn decoding_threads(workers: usize) -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    cores.max(workers).clamp(1, 4)
}

/// A chunk as the engine takes it: the rows, and the reader's state after it.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub polled: Result<Polled, String>,
    position: SourcePosition,
    pub bytes_read: u64,
    pub records_read: u64,
    pub ended: bool,
}

/// A chunk as read, not yet decoded: what the reading thread hands a decoding thread.
struct Undecoded {
    read: Result<Framed, String>,
    /// The decoder for the records' file.
    decoder: Arc<RowDecoder>,
    position: SourcePosition,
    bytes_read: u64,
    records_read: u64,
    ended: bool,
}

impl Undecoded {
    /// The next read of `reader`, with the reader's state after it.
    fn read(reader: &mut SourceReader, max_bytes: usize) -> Undecoded {
        let read = reader.read_own(max_bytes);
        Undecoded {
            read,
            decoder: reader.decoder(),
            position: reader.position(),
            bytes_read: reader.bytes_read,
            records_read: reader.records_read,
            ended: reader.ended,
        }
    }

    /// Whether the reading stops after this chunk: the end, or a failure.
    fn last(&self) -> bool {
        !matches!(self.read, Ok(Framed::Records(..)) | Ok(Framed::Polled(Polled::Rows { .. })))
    }

    fn decode(self) -> Chunk {
        let polled = self.read.map(|read| match read {
            Framed::Records(recs, origin) => decode_records(&self.decoder, recs, origin),
            Framed::Polled(polled) => polled,
        });
        Chunk {
            polled,
            position: self.position,
            bytes_read: self.bytes_read,
            records_read: self.records_read,
            ended: self.ended,
        }
    }
}

/// A source's reading threads (see the module docs).
#[derive(Debug)]
pub(crate) struct ReadAhead {
    /// The byte budget of the chunks read next: the latest poll's.
    budget: Arc<AtomicUsize>,
    /// Decoded chunks, one channel per decoding thread, taken in turn from `turn`.
    lanes: Vec<Receiver<Box<Chunk>>>,
    turn: usize,
    /// The position after the last chunk taken (a checkpoint's).
    pub position: SourcePosition,
}

impl ReadAhead {
    /// Starts reading on from `reader`'s position on threads of their own, `decoders` of them
    /// decoding, the first chunk with `max_bytes`; `reader` itself is then idle.
    pub fn start(
        reader: &SourceReader,
        base: &Path,
        max_bytes: usize,
        decoders: usize,
    ) -> Result<Self, String> {
        let position = reader.position();
        let mut inner = SourceReader::new(
            reader.spec.clone(),
            reader.decoder.schema().clone(),
            reader.decoder.time_column(),
        )?;
        inner.in_thread = true;
        inner.restore(base, position.clone())?;
        let budget = Arc::new(AtomicUsize::new(max_bytes));
        let spawn = |name: String, work: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(work)
                .map(|_| ())
                .map_err(|e| format!("cannot start reading: {e}"))
        };
        let mut lanes = Vec::new();
        let reading = budget.clone();
        if decoders <= 1 {
            let (send, chunks) = sync_channel::<Box<Chunk>>(1);
            lanes.push(chunks);
            spawn(
                "weir-read-ahead".into(),
                Box::new(move || loop {
                    let read = Undecoded::read(&mut inner, reading.load(Ordering::Relaxed));
                    let last = read.last();
                    if send.send(Box::new(read.decode())).is_err() || last {
                        break;
                    }
                }),
            )?;
        } else {
            let mut jobs: Vec<SyncSender<Box<Undecoded>>> = Vec::new();
            for i in 0..decoders {
                let (give, take) = sync_channel::<Box<Undecoded>>(1);
                let (send, chunks) = sync_channel::<Box<Chunk>>(1);
                spawn(
                    format!("weir-decode-{i}"),
                    Box::new(move || {
                        while let Ok(read) = take.recv() {
                            if send.send(Box::new(read.decode())).is_err() {
                                break;
                            }
                        }
                    }),
                )?;
                jobs.push(give);
                lanes.push(chunks);
            }
            spawn(
                "weir-read-ahead".into(),
                Box::new(move || {
                    for k in 0.. {
                        let read = Undecoded::read(&mut inner, reading.load(Ordering::Relaxed));
                        let last = read.last();
                        if jobs[k % jobs.len()].send(Box::new(read)).is_err() || last {
                            break;
                        }
                    }
                }),
            )?;
        }
        Ok(ReadAhead { budget, lanes, turn: 0, position })
    }

    /// The next chunk (waiting for it to be decoded if it has not been yet); the chunks after
    /// it are read with `max_bytes`.
    pub fn next(&mut self, max_bytes: usize) -> Result<Chunk, String> {
        self.budget.store(max_bytes, Ordering::Relaxed);
        let lane = self.lanes.get(self.turn).ok_or_else(stopped)?;
        let chunk = *lane.recv().map_err(|_| stopped())?;
        self.turn = (self.turn + 1) % self.lanes.len();
        self.position = chunk.position.clone();
        Ok(chunk)
    }
}

fn stopped() -> String {
    "the file's reading thread stopped".into()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    use super::*;
    use crate::source::{Format, Input, SourceSpec};

    /// One poll's result, comparable: rows (as text), bad records, where they came from, and
    /// the reader's state after it.
    type Step = (String, Vec<(usize, u64, String)>, String, Vec<u64>, SourcePosition, u64, u64);

    /// A reader of the test files: in its own thread (`own`), or reading ahead with
    /// `decoders` decoding threads.
    fn reader(dir: &Path, own: bool, decoders: usize) -> SourceReader {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]));
        let spec = SourceSpec {
            input: Input::Files { path: "part-*.csv".into(), follow: false },
            format: Format::Csv { header: true, delimiter: b',' },
            epoch_unit: "s".into(),
        };
        let mut r = SourceReader::new(spec, schema, Some(2)).expect("reader");
        r.in_thread = own;
        r.decoders = decoders;
        r.start(dir).expect("start");
        r
    }

    /// Polls to the end with `max_bytes`, recording every step.
    fn steps(r: &mut SourceReader, max_bytes: usize, limit: usize) -> Vec<Step> {
        let mut out = Vec::new();
        while out.len() < limit {
            match r.poll(max_bytes).expect("poll") {
                Polled::Rows { decoded, origin, lines, .. } => {
                    let rows = arrow::util::pretty::pretty_format_batches(&[decoded.batch])
                        .expect("format")
                        .to_string();
                    let bad = decoded.bad.iter().map(|(i, b)| (*i, b.line, b.field.clone()));
                    out.push((
                        rows,
                        bad.collect(),
                        origin,
                        lines,
                        r.position(),
                        r.bytes_read,
                        r.records_read,
                    ));
                }
                Polled::Ended => break,
                Polled::Nothing => panic!("a finite file source waits"),
            }
        }
        out
    }

    fn files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in 0..3 {
            let mut text = String::from("k,v,ts\n");
            for i in 0..400 {
                let n = f * 400 + i;
                if n % 17 == 5 {
                    text.push_str(&format!("oops,bad {n},2024-01-01 00:00:{:02}\n", n % 60));
                } else {
                    text.push_str(&format!("{n},row {n},2024-01-01 00:00:{:02}\n", n % 60));
                }
            }
            std::fs::write(dir.path().join(format!("part-{f}.csv")), text).expect("write");
        }
        dir
    }

    #[test]
    fn reads_the_chunks_the_engine_thread_would() {
        let dir = files();
        for max_bytes in [1, 5000, 1 << 20] {
            let own = steps(&mut reader(dir.path(), true, 1), max_bytes, usize::MAX);
            assert!(own.len() >= 3, "a chunk or more per file at {max_bytes}");
            for decoders in [1, 2, 3] {
                let mut r = reader(dir.path(), false, decoders);
                let ahead = steps(&mut r, max_bytes, usize::MAX);
                assert!(r.ahead.is_some(), "read ahead on a thread");
                assert_eq!(own, ahead, "max_bytes {max_bytes}, {decoders} decoders");
                assert!(r.ended);
            }
        }
    }

    #[test]
    fn each_file_decodes_with_its_own_header_on_any_decoder() {
        // The same columns in another order in every file: a chunk decoded with the layout
        // of the file before it would put values in the wrong columns.
        let dir = tempfile::tempdir().expect("tempdir");
        let headers = ["k,v,ts", "ts,k,v", "v,ts,k"];
        for (f, header) in headers.iter().enumerate() {
            let mut text = format!("{header}\n");
            for i in 0..300 {
                let n = f * 300 + i;
                let ts = format!("2024-01-01 00:00:{:02}", n % 60);
                let (k, v) = (n.to_string(), format!("row {n}"));
                let fields: Vec<&str> = header
                    .split(',')
                    .map(|c| match c {
                        "k" => k.as_str(),
                        "v" => v.as_str(),
                        _ => ts.as_str(),
                    })
                    .collect();
                text.push_str(&fields.join(","));
                text.push('\n');
            }
            std::fs::write(dir.path().join(format!("part-{f}.csv")), text).expect("write");
        }
        let own = steps(&mut reader(dir.path(), true, 1), 2000, usize::MAX);
        let all: String = own.iter().map(|s| s.0.clone()).collect();
        assert!(all.contains("| 899 | row 899 |"), "{all}");
        assert!(own.iter().all(|s| s.1.is_empty()), "no bad rows");
        for decoders in [2, 3] {
            let ahead = steps(&mut reader(dir.path(), false, decoders), 2000, usize::MAX);
            assert_eq!(own, ahead, "{decoders} decoders");
        }
    }

    #[test]
    fn a_position_taken_mid_way_reads_on_from_the_record_after_the_last_chunk_taken() {
        let dir = files();
        let all = steps(&mut reader(dir.path(), true, 1), 4096, usize::MAX);
        for k in [1, 4, all.len() - 1] {
            let mut r = reader(dir.path(), false, 1 + k % 3);
            let first = steps(&mut r, 4096, k);
            assert_eq!(first[..], all[..k]);
            // The thread has decoded chunk k already; the position is still after chunk k-1.
            let pos = r.position();
            assert_eq!(pos, all[k - 1].4);
            drop(r);
            let mut restored = reader(dir.path(), false, 2);
            restored.restore(dir.path(), pos).expect("restore");
            let rest = steps(&mut restored, 4096, usize::MAX);
            let strip =
                |s: &[Step]| s.iter().map(|x| (x.0.clone(), x.3.clone())).collect::<Vec<_>>();
            assert_eq!(strip(&rest), strip(&all[k..]), "after {k} chunks");
        }
    }
}
