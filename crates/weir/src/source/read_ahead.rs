//! Reading ahead: a finite file source decodes its next chunk on a helper thread while the
//! engine runs the queries over the chunk before it.
//!
//! Reading and decoding a file is most of the work of a simple query over it (the bids CSV
//! decodes at about 4 M rows/s on one core), and the operators wait for it. With read-ahead,
//! a file source's reading state lives on a thread of its own: each [`ReadAhead::next`] takes
//! the chunk the thread decoded and asks for the one after it, so decoding and the queries run
//! at once on two cores.
//!
//! Nothing a query can see changes. The thread reads exactly the chunks the engine's own
//! polls would (each request carries the poll's byte budget, and the next chunk is asked for
//! with the budget of the poll that took the one before, which is the same in every loop that
//! reads a file through), in order, one chunk ahead at most. A chunk comes with the source's
//! position after it, so a checkpoint records the first record the engine has not taken in,
//! never one the thread has merely decoded: after a crash, a chunk decoded but not taken is
//! read again. The thread starts from a position ([`SourceReader::restore`], the path a
//! restored source takes), and stops when the file ends, when reading fails, or when the
//! source is dropped. Followed files and standard input, whose next chunk may not exist yet,
//! are read in the engine's thread as before.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use super::{Polled, SourcePosition, SourceReader};

/// What the thread sends for one request: the chunk, and the reader's state after it.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub polled: Result<Polled, String>,
    position: SourcePosition,
    pub bytes_read: u64,
    pub records_read: u64,
    pub ended: bool,
}

/// A source's reading thread (see the module docs).
#[derive(Debug)]
pub(crate) struct ReadAhead {
    /// Byte budgets of the chunks to read next: one is outstanding until the thread stops.
    requests: SyncSender<usize>,
    chunks: Receiver<Box<Chunk>>,
    /// The position after the last chunk taken (a checkpoint's).
    pub position: SourcePosition,
}

impl ReadAhead {
    /// Starts a thread reading on from `reader`'s position, its first chunk with `max_bytes`;
    /// `reader` itself is then idle.
    pub fn start(reader: &SourceReader, base: &Path, max_bytes: usize) -> Result<Self, String> {
        let position = reader.position();
        let mut inner = SourceReader::new(
            reader.spec.clone(),
            reader.decoder.schema().clone(),
            reader.decoder.time_column(),
        )?;
        inner.in_thread = true;
        inner.restore(base, position.clone())?;
        let (requests, asked_for) = sync_channel::<usize>(1);
        requests.send(max_bytes).map_err(|_| stopped())?;
        let (send, chunks) = sync_channel::<Box<Chunk>>(1);
        std::thread::Builder::new()
            .name("weir-read-ahead".into())
            .spawn(move || {
                while let Ok(max_bytes) = asked_for.recv() {
                    let polled = inner.poll(max_bytes);
                    let done = !matches!(polled, Ok(Polled::Rows { .. }));
                    let chunk = Chunk {
                        polled,
                        position: inner.position(),
                        bytes_read: inner.bytes_read,
                        records_read: inner.records_read,
                        ended: inner.ended,
                    };
                    if send.send(Box::new(chunk)).is_err() || done {
                        break;
                    }
                }
            })
            .map_err(|e| format!("cannot start reading: {e}"))?;
        Ok(ReadAhead { requests, chunks, position })
    }

    /// The next chunk (waiting for the thread to decode it if it has not yet), after which
    /// the thread goes on with the one after, read with `max_bytes`.
    pub fn next(&mut self, max_bytes: usize) -> Result<Chunk, String> {
        let chunk = *self.chunks.recv().map_err(|_| stopped())?;
        self.position = chunk.position.clone();
        if matches!(chunk.polled, Ok(Polled::Rows { .. })) {
            self.requests.send(max_bytes).map_err(|_| stopped())?;
        }
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

    fn reader(dir: &Path, own: bool) -> SourceReader {
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
            let own = steps(&mut reader(dir.path(), true), max_bytes, usize::MAX);
            let mut r = reader(dir.path(), false);
            let ahead = steps(&mut r, max_bytes, usize::MAX);
            assert!(r.ahead.is_some(), "read ahead on a thread");
            assert!(own.len() >= 3, "a chunk or more per file at {max_bytes}");
            assert_eq!(own, ahead, "max_bytes {max_bytes}");
            assert!(r.ended);
        }
    }

    #[test]
    fn a_position_taken_mid_way_reads_on_from_the_record_after_the_last_chunk_taken() {
        let dir = files();
        let all = steps(&mut reader(dir.path(), true), 4096, usize::MAX);
        for k in [1, 4, all.len() - 1] {
            let mut r = reader(dir.path(), false);
            let first = steps(&mut r, 4096, k);
            assert_eq!(first[..], all[..k]);
            // The thread has decoded chunk k already; the position is still after chunk k-1.
            let pos = r.position();
            assert_eq!(pos, all[k - 1].4);
            drop(r);
            let mut restored = reader(dir.path(), false);
            restored.restore(dir.path(), pos).expect("restore");
            let rest = steps(&mut restored, 4096, usize::MAX);
            let strip =
                |s: &[Step]| s.iter().map(|x| (x.0.clone(), x.3.clone())).collect::<Vec<_>>();
            assert_eq!(strip(&rest), strip(&all[k..]), "after {k} chunks");
        }
    }
}
