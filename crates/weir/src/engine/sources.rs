//! Driving sources: reading what each stream's source has, taking it in as an arrival, and
//! what happens when a source ends (its stream closes) or fails (the queries reading it fail).
//! The reading itself is [`crate::source`]; the decisions about what was read are the
//! intake's.

use weir_common::{Result, WeirError};

use super::Engine;
use crate::intake::{Arrival, Intake};
use crate::source::read_ahead::decoding_threads;
use crate::source::{Polled, SourceProgress};

/// What [`Engine::poll_sources`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourcePoll {
    /// Records read in this call.
    pub records: usize,
    /// Bytes read in this call.
    pub bytes: u64,
    /// Sources still reading (a followed file or stdin may produce more later).
    pub live: usize,
    /// Sources not started yet: no query reads their stream.
    pub waiting: usize,
}

impl SourcePoll {
    /// Whether the call read nothing and decoded nothing: every source waits for more input or
    /// has ended. (A call can decode without reading: the last line of a followed file, once a
    /// newer file appears.)
    pub fn idle(&self) -> bool {
        self.bytes == 0 && self.records == 0
    }
}

/// How far each stream's source has read.
pub(super) fn progress(intake: &Intake) -> Vec<SourceProgress> {
    intake
        .streams()
        .filter_map(|(name, st)| {
            let src = st.source.as_ref()?;
            let r = &src.reader;
            Some(SourceProgress {
                stream: name.clone(),
                bytes_read: r.bytes_read,
                bytes_total: r.bytes_total,
                records: r.records_read,
                started: r.started(),
                ended: r.ended,
                failed: src.failed.is_some(),
                unbounded: r.unbounded(),
            })
        })
        .collect()
}

impl Engine {
    /// Reads from every source whose stream some query reads, up to about `max_bytes` each,
    /// and takes in what was read. A source starts reading when the first query over its
    /// stream (or `s$late`, `s$errors`) is running; a file source that reaches its end closes
    /// its stream. A source that fails (a missing file, a bad row under `bad_rows = 'fail'`, a
    /// late row under `late = 'error'`) stops, the queries reading its stream fail with the
    /// message, and the first such error is returned; other sources and queries go on.
    pub fn poll_sources(&mut self, max_bytes: usize) -> Result<SourcePoll> {
        let (poll, failed) = self.read_sources(max_bytes)?;
        match failed {
            Some(e) => Err(e),
            None => Ok(poll),
        }
    }

    /// [`Engine::poll_sources`]'s work: the poll and the first source's failure, or the error
    /// of a checkpoint that could not be written (the data directory's disk full, a sink's
    /// file that cannot be synced), which stops reading: going on would lose the guarantee
    /// that a restart resumes exactly.
    ///
    /// While sources are read, a file sink writes on its own thread what the queries
    /// delivered and the engine reads on: a poll that read rows from a source that goes on
    /// may return before the sinks' files hold the output of those rows. The next call
    /// waits for them, and so does a poll that reads nothing or finds every source ended, a
    /// checkpoint, and every other call that runs queries: so whenever the sources are idle
    /// or done, the files hold everything.
    fn read_sources(&mut self, max_bytes: usize) -> Result<(SourcePoll, Option<WeirError>)> {
        self.sinks_in_flight = true;
        let read = self.read_sources_in_flight(max_bytes);
        self.sinks_in_flight = false;
        if read.as_ref().is_ok_and(|(poll, _)| poll.live > 0 && !poll.idle()) {
            return read;
        }
        self.dataflow.settle_outputs();
        read
    }

    /// [`Engine::read_sources`] with the sinks' writes left in flight.
    fn read_sources_in_flight(
        &mut self,
        max_bytes: usize,
    ) -> Result<(SourcePoll, Option<WeirError>)> {
        let mut poll = SourcePoll::default();
        let mut first_error = None;
        for name in self.intake.live_sources() {
            match self.poll_source(&name, max_bytes, &mut poll) {
                Ok(()) => {}
                Err(e) => {
                    self.fail_source(&name, &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        self.run_queries();
        self.maybe_checkpoint()?;
        Ok((poll, first_error))
    }

    /// One read of stream `name`'s source, counted in `poll`. An error means the source
    /// failed.
    fn poll_source(&mut self, name: &str, max_bytes: usize, poll: &mut SourcePoll) -> Result<()> {
        let started = self.intake.source_mut(name).is_some_and(|s| s.reader.started());
        if !started {
            if !self.dataflow.reads(name) {
                poll.waiting += 1;
                return Ok(());
            }
            let base = self.base_dir.clone();
            if let Some(s) = self.intake.source_mut(name) {
                s.reader.start(&base).map_err(|m| source_error(name, m))?;
            }
        }
        let workers = self.dataflow.workers();
        let Some(src) = self.intake.source_mut(name) else { return Ok(()) };
        src.reader.decoders = decoding_threads(workers);
        let before = src.reader.bytes_read;
        let polled = src.reader.poll(max_bytes);
        poll.bytes += src.reader.bytes_read - before;
        match polled.map_err(|m| source_error(name, m))? {
            Polled::Rows { decoded, records, origin, lines } => {
                poll.records += records;
                // Not logged: after a crash, the source reads it again from its position.
                let arrival = Arrival::decoded(decoded, origin, lines);
                self.without_logging(|e| e.ingest(name, arrival))?;
            }
            Polled::Nothing => {}
            Polled::Ended => {
                if !self.intake.get(name).is_some_and(|s| s.closed) {
                    self.intake.close(name, name)?;
                    self.run_queries();
                }
                return Ok(());
            }
        }
        if self.intake.source_mut(name).is_some_and(|s| !s.reader.ended) {
            poll.live += 1;
        }
        Ok(())
    }

    /// Reads every source as far as it goes now: finite files to their end (closing their
    /// streams), followed files and stdin up to what is available. Returns the first source
    /// error (see [`Engine::poll_sources`]) after reading everything else.
    pub fn run_sources(&mut self) -> Result<SourcePoll> {
        let mut total = SourcePoll::default();
        let mut first_error = None;
        loop {
            let (p, failed) = self.read_sources(1 << 20)?;
            if let Some(e) = failed {
                // A failed source stops; the others are read on.
                first_error.get_or_insert(e);
                continue;
            }
            total.records += p.records;
            total.bytes += p.bytes;
            total.live = p.live;
            total.waiting = p.waiting;
            if p.idle() {
                break;
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }

    /// A source stopped: it records why, and its stream ends at the failing record, so the
    /// queries reading it deliver everything the records before it complete, then fail.
    fn fail_source(&mut self, name: &str, e: &WeirError) {
        if let Some(s) = self.intake.source_mut(name) {
            s.failed = Some(e.to_string());
        }
        if self.intake.close(name, name).is_ok() {
            self.run_queries();
        }
        self.dataflow.fail_readers(name, e);
    }
}

fn source_error(stream: &str, msg: String) -> WeirError {
    WeirError::input(format!("stream '{stream}': {msg}"))
}
