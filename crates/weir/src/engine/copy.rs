//! `COPY stream FROM STDIN`: bulk ingest of CSV or JSON-lines text handed over in chunks (the
//! server's `COPY ... FROM STDIN`, or any embedder with bytes in hand).
//!
//! The bytes are read exactly as a file source reads a file: cut into records by the same
//! framer (quoted CSV fields may span lines and chunks), decoded by the same decoder, and taken
//! in under the stream's late and bad-row policies, with `s$late` and `s$errors` filled and the
//! counters of `SHOW STREAM STATS` moved the same way. A record is taken in as soon as the
//! chunk that completes it arrives, so a long COPY feeds the running queries as it goes. If a
//! policy refuses a record (`bad_rows = 'fail'`, `late = 'error'`), the records before it stay
//! taken in, as with a file source, and the COPY ends with that error: a stream cannot take
//! back what its queries have already seen.

use weir_common::{Result, WeirError};

use super::Engine;
use crate::intake::Arrival;
use crate::source::framing::{Framer, Framing, Records};
use crate::source::{Format, RowDecoder};

/// An open `COPY ... FROM STDIN` into one stream. See the module docs.
#[derive(Debug)]
pub struct CopyIn {
    stream: String,
    framer: Framer,
    decoder: RowDecoder,
    header_pending: bool,
    /// Records read so far (the header is not one).
    records: u64,
    /// The stream's counters when the COPY began, to report what this COPY did.
    before: (u64, u64, u64),
    /// Set once a record was refused: the COPY takes nothing more.
    failed: bool,
    /// Set at the end-of-data marker `\.`: what follows it is ignored, as PostgreSQL does.
    ended: bool,
}

/// What a finished COPY took in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// Records read.
    pub records: u64,
    /// Elements taken into the stream.
    pub accepted: u64,
    /// Elements below the watermark (to `s$late`, or dropped, under the stream's policy).
    pub late: u64,
    /// Unreadable records (to `s$errors`, or skipped).
    pub bad: u64,
}

impl CopyIn {
    /// The stream being copied into.
    pub fn stream(&self) -> &str {
        &self.stream
    }
}

impl Engine {
    /// Starts a COPY into `stream`, whose records come in `format`; epoch numbers in
    /// TIMESTAMP fields are read in `epoch_unit` (`s`, `ms` or `us`).
    pub fn copy_in(&mut self, stream: &str, format: Format, epoch_unit: &str) -> Result<CopyIn> {
        let name = stream.to_ascii_lowercase();
        let def = &self.intake.writable(&name, stream)?.def;
        let framing =
            match format {
                Format::Csv { delimiter, .. } => Framing::Csv { quote: b'"', delimiter },
                Format::JsonLines => Framing::Lines,
                Format::Parquet => return Err(WeirError::plan(
                    "COPY FROM STDIN takes CSV or JSON lines; a Parquet file is read with COPY \
                     name FROM 'file.parquet'",
                )),
            };
        let decoder =
            RowDecoder::new(def.input_schema(), def.input_time_column(), format, epoch_unit)
                .map_err(WeirError::plan)?;
        Ok(CopyIn {
            header_pending: decoder.wants_header(),
            stream: name.clone(),
            framer: Framer::new(framing),
            decoder,
            records: 0,
            before: self.counters(&name),
            failed: false,
            ended: false,
        })
    }

    /// Takes in the complete records of the next chunk of a COPY (a record may be split
    /// across chunks). An error means a policy refused a record: the COPY is over.
    pub fn copy_data(&mut self, copy: &mut CopyIn, bytes: &[u8]) -> Result<()> {
        let recs = copy.framer.feed(bytes, false);
        self.copy_records(copy, recs)
    }

    /// Ends a COPY: takes in a last record without a trailing newline, and says what the
    /// COPY took in.
    pub fn copy_done(&mut self, mut copy: CopyIn) -> Result<CopyReport> {
        let recs = copy.framer.feed(&[], true);
        self.copy_records(&mut copy, recs)?;
        let (accepted, late, bad) = self.counters(&copy.stream);
        Ok(CopyReport {
            records: copy.records,
            accepted: accepted - copy.before.0,
            late: late - copy.before.1,
            bad: bad - copy.before.2,
        })
    }

    fn copy_records(&mut self, copy: &mut CopyIn, mut recs: Records) -> Result<()> {
        if copy.failed {
            return Err(WeirError::exec("this COPY already failed"));
        }
        if copy.header_pending && !recs.is_empty() {
            copy.header_pending = false;
            copy.decoder
                .set_header(recs.record(0))
                .map_err(|e| WeirError::input(format!("stream '{}': COPY: {e}", copy.stream)))?;
            recs = recs.split_off(1);
        }
        if copy.ended {
            return Ok(());
        }
        if let Some(end) = (0..recs.len()).find(|&i| is_end_marker(recs.record(i))) {
            copy.ended = true;
            recs = recs.filtered(|i| i < end);
        }
        if recs.is_empty() {
            return Ok(());
        }
        copy.records += recs.len() as u64;
        let decoded = copy.decoder.decode(&recs);
        let arrival = Arrival::decoded(decoded, "COPY".to_string(), recs.lines);
        let stream = copy.stream.clone();
        self.ingest(&stream, arrival).inspect_err(|_| copy.failed = true)
    }

    /// A stream's accepted, late and bad counters.
    fn counters(&self, stream: &str) -> (u64, u64, u64) {
        self.intake.get(stream).map_or((0, 0, 0), |s| (s.accepted, s.late, s.bad))
    }
}

/// Whether a record is PostgreSQL's end-of-data line, `\.` (psql sends it after the data
/// of `COPY ... FROM STDIN` in a script).
fn is_end_marker(record: &[u8]) -> bool {
    let line = record.strip_suffix(b"\n").unwrap_or(record);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line == b"\\."
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(header: bool) -> Format {
        Format::Csv { header, delimiter: b',' }
    }

    /// Records split across chunks anywhere (inside a quoted field too) are read whole, a bad
    /// record goes to `s$errors` and a late one to `s$late`, and the report counts each.
    #[test]
    fn chunks_split_anywhere_and_bad_and_late_rows_are_accounted() {
        let text = b"k,t\n\"a,\nb\",1\nc,5\nd,x\ne,2\nf,6";
        let run = |split: usize| {
            let mut e = Engine::new();
            e.execute(
                "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t - 1) \
                 WITH (bad_rows = 'skip')",
            )
            .unwrap();
            let subs = ["SELECT * FROM s", "SELECT line FROM s$errors", "SELECT k FROM s$late"]
                .map(|q| e.subscribe(q).unwrap());
            let mut copy = e.copy_in("s", csv(true), "us").unwrap();
            e.copy_data(&mut copy, &text[..split]).unwrap();
            e.copy_data(&mut copy, &text[split..]).unwrap();
            let report = e.copy_done(copy).unwrap();
            e.execute("CLOSE s").unwrap();
            let out = subs.map(|s| {
                s.poll_changes().unwrap().iter().map(|c| c.to_string()).collect::<Vec<_>>()
            });
            (report, out)
        };
        let whole = run(0);
        assert_eq!(whole.0, CopyReport { records: 5, accepted: 3, late: 1, bad: 1 });
        assert_eq!(whole.1[0], ["@1 a,\nb 1", "@5 c 5", "@6 f 6"]);
        assert_eq!(whole.1[1], ["@5 5"]);
        assert_eq!(whole.1[2], ["@4 e"]);
        for split in 1..text.len() {
            assert_eq!(run(split), whole, "split at {split}");
        }
    }

    /// Under `bad_rows = 'fail'`, the rows before the bad record are taken in and the COPY
    /// fails naming the stream, the line and the field.
    #[test]
    fn a_refused_record_ends_the_copy_after_the_rows_before_it() {
        let mut e = Engine::new();
        e.execute(
            "CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t) WITH (bad_rows = 'fail')",
        )
        .unwrap();
        let sub = e.subscribe("SELECT k FROM s").unwrap();
        let mut copy = e.copy_in("s", csv(false), "us").unwrap();
        let err = e.copy_data(&mut copy, b"a,1\nb,oops\nc,3\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "bad input: stream 's' COPY line 2, field 't': \
             cannot read 'oops' as BIGINT"
        );
        assert!(e.copy_data(&mut copy, b"d,4\n").is_err());
        e.execute("CLOSE s").unwrap();
        let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
        assert_eq!(got, ["@1 a"]);
    }

    /// `\.` on a line of its own ends the data; what follows is not read.
    #[test]
    fn the_end_of_data_marker_ends_the_copy() {
        let mut e = Engine::new();
        e.execute("CREATE STREAM s (k VARCHAR, t BIGINT, WATERMARK FOR t AS t)").unwrap();
        let sub = e.subscribe("SELECT k FROM s").unwrap();
        let mut copy = e.copy_in("s", csv(false), "us").unwrap();
        e.copy_data(&mut copy, b"a,1\nb,2\n\\.\r\nnot,csv,at all\n").unwrap();
        e.copy_data(&mut copy, b"c,3\n").unwrap();
        let report = e.copy_done(copy).unwrap();
        assert_eq!(report, CopyReport { records: 2, accepted: 2, late: 0, bad: 0 });
        e.execute("CLOSE s").unwrap();
        let got: Vec<String> = sub.poll_changes().unwrap().iter().map(|c| c.to_string()).collect();
        assert_eq!(got, ["@1 a", "@2 b"]);
    }

    #[test]
    fn copy_into_an_unknown_stream_or_a_table_is_refused() {
        let mut e = Engine::new();
        e.execute("CREATE TABLE t (a BIGINT)").unwrap();
        assert!(e.copy_in("nope", csv(false), "us").is_err());
        assert!(e.copy_in("t", csv(false), "us").is_err());
        assert!(e.copy_in("s", csv(false), "minutes").is_err());
    }
}
