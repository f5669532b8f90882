//! Cutting a byte stream into complete records, remembering where each came from.
//!
//! A source reads bytes in arbitrary chunks (a file read, a pipe, a growing file). Decoding
//! needs whole records, and error messages need each record's line and byte offset. The
//! [`Framer`] buffers the incomplete tail of the input and hands out runs of complete records.
//!
//! A JSON record is a line (JSON lines never contain raw newlines). A CSV record ends at a
//! newline outside a quoted field, read as CSV readers read it (and as the decoder will): a
//! quote opens a quoted field only at the start of a field; inside one, a doubled quote is a
//! quote and a single one closes it; a quote anywhere else is an ordinary character. So a
//! stray quote inside an unquoted field costs nothing. A quoted field that is never closed
//! would swallow the rest of the input: once it holds more than [`MAX_QUOTED_BYTES`], or at
//! the end of the input, its record is cut at the first newline inside it and marked
//! malformed (one bad record, with its line), and framing starts again on the next line. The
//! buffered tail is bounded by that limit plus one read. Blank lines are not records (both
//! arrow readers skip them too, which keeps record and row numbering aligned).

use std::io::Read;

/// The most a quoted CSV field may span across lines before the framer takes its opening
/// quote for an unterminated one.
pub(crate) const MAX_QUOTED_BYTES: usize = 1 << 20;

/// How a source's bytes are cut into records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One record per line.
    Lines,
    /// CSV records: newlines inside quoted fields do not end them.
    Csv { quote: u8, delimiter: u8 },
}

/// Where the CSV scan is within a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// At the start of a field: a quote here opens a quoted field.
    FieldStart,
    /// Inside an unquoted field: quotes are ordinary characters.
    Unquoted,
    /// Inside a quoted field.
    Quoted,
    /// Just after a quote inside a quoted field: a second quote is an escaped one, anything
    /// else means the field was closed.
    QuoteInQuoted,
}

/// Complete records, in order in `bytes`, each ending with `\n`. Only blank lines may lie
/// between them (the framer hands out its buffer as it is when that saves a copy), and both
/// arrow readers skip those, so `bytes` as a whole decodes to the records' rows.
#[derive(Debug, Default)]
pub(crate) struct Records {
    pub bytes: Vec<u8>,
    /// Start of each record in `bytes`.
    pub starts: Vec<usize>,
    /// End of each record in `bytes` (just past its `\n`).
    pub ends: Vec<usize>,
    /// 1-based line number of each record's first line in its file.
    pub lines: Vec<u64>,
    /// Byte offset of each record in its file.
    pub offsets: Vec<u64>,
    /// Why a record is malformed, if the framer found it so (an unterminated quote).
    pub malformed: Vec<Option<&'static str>>,
}

impl Records {
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The bytes of record `i`, with its line terminator.
    pub fn record(&self, i: usize) -> &[u8] {
        &self.bytes[self.starts[i]..self.ends[i]]
    }

    /// Record `i` without its line terminator, as text for messages (invalid UTF-8 replaced).
    pub fn text(&self, i: usize) -> String {
        let r = self.record(i);
        let r = r.strip_suffix(b"\n").unwrap_or(r);
        let r = r.strip_suffix(b"\r").unwrap_or(r);
        String::from_utf8_lossy(r).into_owned()
    }

    /// Whether any record is malformed.
    pub fn any_malformed(&self) -> bool {
        self.malformed.iter().any(Option::is_some)
    }

    /// Appends a record (a `\n` is added if it has none).
    pub(crate) fn push_marked(
        &mut self,
        record: &[u8],
        line: u64,
        offset: u64,
        bad: Option<&'static str>,
    ) {
        self.starts.push(self.bytes.len());
        self.lines.push(line);
        self.offsets.push(offset);
        self.malformed.push(bad);
        self.bytes.extend_from_slice(record);
        if !record.ends_with(b"\n") {
            self.bytes.push(b'\n');
        }
        self.ends.push(self.bytes.len());
    }

    /// Notes a record found at `start..end` of the framer's buffer, before the buffer becomes
    /// `bytes` (see [`Framer::frame`]).
    fn mark(
        &mut self,
        start: usize,
        end: usize,
        line: u64,
        offset: u64,
        bad: Option<&'static str>,
    ) {
        self.starts.push(start);
        self.ends.push(end);
        self.lines.push(line);
        self.offsets.push(offset);
        self.malformed.push(bad);
    }

    /// Records `from..` as a new set (the rest after a header or a failure).
    pub fn split_off(&self, from: usize) -> Records {
        let mut out = Records::default();
        for i in from..self.len() {
            out.push_marked(self.record(i), self.lines[i], self.offsets[i], self.malformed[i]);
        }
        out
    }

    /// Only the records whose index `keep` accepts.
    pub fn filtered(&self, keep: impl Fn(usize) -> bool) -> Records {
        let mut out = Records::default();
        for i in (0..self.len()).filter(|&i| keep(i)) {
            out.push_marked(self.record(i), self.lines[i], self.offsets[i], self.malformed[i]);
        }
        out
    }
}

/// Buffers input bytes of one file and cuts them into records. See the module docs.
#[derive(Debug)]
pub(crate) struct Framer {
    framing: Framing,
    buf: Vec<u8>,
    /// Line number and byte offset of `buf[0]` in the file.
    line: u64,
    offset: u64,
    /// Scan state over `buf[..scanned]`, so a long record split across reads is not rescanned
    /// from its start: where the scan is, the newlines inside the current record, and the
    /// first of them (an index into `buf`), where an unterminated quote is cut.
    scanned: usize,
    scan: Scan,
    inner_newlines: u64,
    first_inner_newline: Option<usize>,
}

/// The malformed record's reason when an opening quote is never closed.
const UNTERMINATED: &str = "unterminated quoted field (its quote is not closed)";

impl Framer {
    pub fn new(framing: Framing) -> Self {
        Framer::at(framing, 0, 1)
    }

    /// A framer for input that starts at byte `offset`, line `line` of its file (a source
    /// restored from a checkpoint reads on from a record boundary).
    pub fn at(framing: Framing, offset: u64, line: u64) -> Self {
        Framer {
            framing,
            buf: Vec::new(),
            line,
            offset,
            scanned: 0,
            scan: Scan::FieldStart,
            inner_newlines: 0,
            first_inner_newline: None,
        }
    }

    /// Bytes buffered but not yet part of a complete record.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Byte offset in the file of the first byte not yet handed out.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Line number at [`Self::offset`].
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Appends input and returns every record now complete. At end of input (`eof`), the
    /// unterminated tail is a record too.
    pub fn feed(&mut self, bytes: &[u8], eof: bool) -> Records {
        self.buf.extend_from_slice(bytes);
        self.frame(eof)
    }

    /// Reads up to `max` bytes from `input` into the buffer (no copy on the way), retrying an
    /// interrupted read; returns how many were read (0 at its end). [`Self::frame`] then cuts
    /// them.
    pub fn read_from(&mut self, input: &mut impl Read, max: usize) -> std::io::Result<usize> {
        let len = self.buf.len();
        self.buf.resize(len + max, 0);
        let read = loop {
            match input.read(&mut self.buf[len..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        self.buf.truncate(len + *read.as_ref().unwrap_or(&0));
        read
    }

    /// Returns every record complete in the buffer. At end of input (`eof`), the unterminated
    /// tail is a record too. The records' bytes are the buffer itself, handed over rather than
    /// copied unless blank lines have to be taken out.
    pub fn frame(&mut self, eof: bool) -> Records {
        let mut out = Records::default();
        let mut blank_lines = false;
        let mut start = 0;
        let mut line = self.line;
        let mut i = self.scanned;
        loop {
            while i < self.buf.len() {
                i = self.skip_plain(i);
                let Some(&b) = self.buf.get(i) else { break };
                let ends_record = match self.framing {
                    Framing::Lines => b == b'\n',
                    Framing::Csv { quote, delimiter } => self.step_csv(b, i, quote, delimiter),
                };
                if ends_record {
                    if is_blank(&self.buf[start..=i]) {
                        blank_lines = true;
                    } else {
                        out.mark(start, i + 1, line, self.offset + start as u64, None);
                    }
                    line += 1 + self.inner_newlines;
                    self.reset_scan();
                    start = i + 1;
                } else if self.scan == Scan::Quoted && i - start > MAX_QUOTED_BYTES {
                    if let Some(cut) = self.cut_unterminated(&mut out, start, line) {
                        (start, i, line) = (cut + 1, cut + 1, line + 1);
                        continue;
                    }
                }
                i += 1;
            }
            if !eof || start >= self.buf.len() {
                break;
            }
            // At the end of the input, a quoted field still open was never closed.
            if matches!(self.scan, Scan::Quoted) {
                if let Some(cut) = self.cut_unterminated(&mut out, start, line) {
                    (start, i, line) = (cut + 1, cut + 1, line + 1);
                    continue;
                }
            }
            if is_blank(&self.buf[start..]) {
                blank_lines = true;
            } else {
                let bad = matches!(self.scan, Scan::Quoted).then_some(UNTERMINATED);
                out.mark(start, self.buf.len(), line, self.offset + start as u64, bad);
            }
            start = self.buf.len();
            self.reset_scan();
            break;
        }
        self.hand_over(&mut out, start, blank_lines);
        if let Some(first) = &mut self.first_inner_newline {
            *first -= start;
        }
        self.offset += start as u64;
        self.line = line;
        self.scanned = self.buf.len();
        out
    }

    /// The index of the next byte from `i` on that the scan must step through: bytes that
    /// can neither end a record nor open or close a quoted field are jumped over (with
    /// `memchr`, many at a time), the scan state moved past them. Inside a quoted field every
    /// byte is stepped, so the [`MAX_QUOTED_BYTES`] check sees each one.
    fn skip_plain(&mut self, i: usize) -> usize {
        let rest = &self.buf[i..];
        match self.framing {
            Framing::Lines => i + memchr::memchr(b'\n', rest).unwrap_or(rest.len()),
            Framing::Csv { quote, delimiter } => {
                if !matches!(self.scan, Scan::FieldStart | Scan::Unquoted) {
                    return i;
                }
                let n = memchr::memchr2(quote, b'\n', rest).unwrap_or(rest.len());
                // Outside quotes, only the last byte skipped decides where the scan is: at a
                // field's start after a delimiter, inside an unquoted field after anything else.
                if let Some(&last) = n.checked_sub(1).and_then(|k| rest.get(k)) {
                    self.scan = if last == delimiter { Scan::FieldStart } else { Scan::Unquoted };
                }
                i + n
            }
        }
    }

    /// Moves `buf[..end]` (the records `out` marked, and blank lines) into `out.bytes`: the
    /// buffer itself, its tail copied to a new one; or, with blank lines among them, the
    /// records alone, copied. The last record of the input may lack its `\n`: it gets one.
    fn hand_over(&mut self, out: &mut Records, end: usize, blank_lines: bool) {
        if end == 0 {
            return;
        }
        let tail = self.buf[end..].to_vec();
        let taken = std::mem::replace(&mut self.buf, tail);
        if blank_lines {
            let marked = std::mem::take(out);
            for i in 0..marked.len() {
                out.push_marked(
                    &taken[marked.starts[i]..marked.ends[i]],
                    marked.lines[i],
                    marked.offsets[i],
                    marked.malformed[i],
                );
            }
            return;
        }
        out.bytes = taken;
        out.bytes.truncate(end);
        if let Some(last) = out.ends.last_mut() {
            if !out.bytes.ends_with(b"\n") {
                out.bytes.push(b'\n');
                *last += 1;
            }
        }
    }

    /// One byte of CSV at `buf[i]`: moves the scan on; whether the byte ends the record.
    fn step_csv(&mut self, b: u8, i: usize, quote: u8, delimiter: u8) -> bool {
        self.scan = match (self.scan, b) {
            (Scan::FieldStart, b) if b == quote => Scan::Quoted,
            (Scan::Quoted, b) if b == quote => Scan::QuoteInQuoted,
            (Scan::QuoteInQuoted, b) if b == quote => Scan::Quoted,
            (Scan::Quoted, b'\n') => {
                self.inner_newlines += 1;
                self.first_inner_newline.get_or_insert(i);
                Scan::Quoted
            }
            (Scan::Quoted, _) => Scan::Quoted,
            (_, b'\n') => return true,
            (_, b) if b == delimiter => Scan::FieldStart,
            _ => Scan::Unquoted,
        };
        false
    }

    /// Cuts the record that starts at `buf[start]` at the first newline inside its open
    /// quoted field, hands it out as malformed, and returns that newline's index (None if the
    /// field holds no newline: then it is the record's last field, left to the caller).
    fn cut_unterminated(&mut self, out: &mut Records, start: usize, line: u64) -> Option<usize> {
        let cut = self.first_inner_newline?;
        out.mark(start, cut + 1, line, self.offset + start as u64, Some(UNTERMINATED));
        self.reset_scan();
        Some(cut)
    }

    fn reset_scan(&mut self) {
        self.scan = Scan::FieldStart;
        self.inner_newlines = 0;
        self.first_inner_newline = None;
    }
}

fn is_blank(rec: &[u8]) -> bool {
    rec.iter().all(|b| b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: Framing = Framing::Csv { quote: b'"', delimiter: b',' };

    fn texts(r: &Records) -> Vec<(String, u64, u64)> {
        (0..r.len()).map(|i| (r.text(i), r.lines[i], r.offsets[i])).collect()
    }

    #[test]
    fn cuts_at_newlines_outside_quotes_whatever_the_chunking() {
        let input = b"a,b\n1,\"x\ny\"\n\n2,\"q\"\"\"\r\n3,z";
        let expected = vec![
            ("a,b".to_string(), 1, 0),
            ("1,\"x\ny\"".to_string(), 2, 4),
            ("2,\"q\"\"\"".to_string(), 5, 13),
            ("3,z".to_string(), 6, 22),
        ];
        for chunk in 1..input.len() + 1 {
            let mut f = Framer::new(CSV);
            let mut got = Vec::new();
            for c in input.chunks(chunk) {
                got.extend(texts(&f.feed(c, false)));
            }
            got.extend(texts(&f.feed(&[], true)));
            assert_eq!(got, expected, "chunk size {chunk}");
            assert_eq!(f.offset(), input.len() as u64);
        }
    }

    #[test]
    fn json_lines_ignore_quotes_and_keep_the_unterminated_tail_until_eof() {
        let mut f = Framer::new(Framing::Lines);
        let r = f.feed(b"{\"a\":\"\\\"\"}\n{\"a\":", false);
        assert_eq!(texts(&r), vec![("{\"a\":\"\\\"\"}".to_string(), 1, 0)]);
        assert_eq!(f.pending(), 5);
        let r = f.feed(b"2}", false);
        assert!(r.is_empty());
        let r = f.feed(b"", true);
        assert_eq!(texts(&r), vec![("{\"a\":2}".to_string(), 2, 11)]);
        assert_eq!(r.bytes, b"{\"a\":2}\n");
    }
}

#[cfg(test)]
mod quoting_tests {
    use super::*;

    const CSV: Framing = Framing::Csv { quote: b'"', delimiter: b',' };

    /// (text, line, malformed) of every record, the input fed in chunks of `chunk` bytes.
    fn frame(input: &[u8], chunk: usize) -> Vec<(String, u64, bool)> {
        let mut f = Framer::new(CSV);
        let mut got = Vec::new();
        let mut take = |r: Records| {
            for i in 0..r.len() {
                got.push((r.text(i), r.lines[i], r.malformed[i].is_some()));
            }
        };
        for c in input.chunks(chunk.max(1)) {
            take(f.feed(c, false));
        }
        take(f.feed(&[], true));
        got
    }

    /// A quote inside an unquoted field is an ordinary character, as CSV readers take it.
    #[test]
    fn a_stray_quote_inside_a_field_costs_nothing() {
        let input = b"k,v\na\"b,1\nc,2 \"inches\"\nd,3\n";
        for chunk in 1..input.len() {
            let got = frame(input, chunk);
            let texts: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
            assert_eq!(texts, ["k,v", "a\"b,1", "c,2 \"inches\"", "d,3"], "chunk {chunk}");
            assert!(got.iter().all(|g| !g.2));
        }
    }

    /// An opening quote never closed is one malformed record, cut at its first newline; the
    /// next line is framed again, whatever the chunking. (A later quote would close it: `"a
    /// ,b" c` is one quoted field, as every CSV reader reads it.)
    #[test]
    fn an_unterminated_quote_costs_one_record() {
        let input = b"k,v\n1,\"open\n2,x\n3,y\n";
        for chunk in 1..input.len() {
            let got = frame(input, chunk);
            assert_eq!(
                got,
                [
                    ("k,v".to_string(), 1, false),
                    ("1,\"open".to_string(), 2, true),
                    ("2,x".to_string(), 3, false),
                    ("3,y".to_string(), 4, false),
                ],
                "chunk {chunk}"
            );
        }
    }

    /// The record ends the framer finds (with its jumps over plain bytes, the input in
    /// random chunks) are the ones the module's rules give, stepped byte by byte over the
    /// whole input.
    #[test]
    fn framing_follows_the_quoting_rules_in_any_chunking() {
        use proptest::prelude::*;
        /// None when a quoted field is left open (that record is cut as malformed, which
        /// the tests above pin).
        fn by_the_rules(input: &[u8]) -> Option<Vec<String>> {
            let (mut out, mut start, mut at_field_start, mut quoted) = (vec![], 0, true, false);
            let mut i = 0;
            while i < input.len() {
                let b = input[i];
                if quoted {
                    if b == b'"' && input.get(i + 1) == Some(&b'"') {
                        i += 1;
                    } else if b == b'"' {
                        quoted = false;
                    }
                } else if b == b'"' && at_field_start {
                    quoted = true;
                } else if b == b'\n' {
                    out.push(input[start..=i].to_vec());
                    start = i + 1;
                }
                at_field_start = !quoted && (b == b',' || b == b'\n');
                i += 1;
            }
            if quoted {
                return None;
            }
            out.push(input[start..].to_vec());
            let records = out
                .into_iter()
                .filter(|r| !r.iter().all(|b| b.is_ascii_whitespace()))
                .map(|r| {
                    let t = String::from_utf8_lossy(&r).into_owned();
                    let t = t.strip_suffix('\n').unwrap_or(&t).to_string();
                    t.strip_suffix('\r').unwrap_or(&t).to_string()
                })
                .collect();
            Some(records)
        }
        let bytes = prop::collection::vec(prop::sample::select(b"ab,\"\n\r ".to_vec()), 0..80);
        proptest!(|(input in bytes, chunk in 1usize..20)| {
            let expected = by_the_rules(&input);
            prop_assume!(expected.is_some());
            let got: Vec<String> = frame(&input, chunk).into_iter().map(|g| g.0).collect();
            prop_assert_eq!(Some(got), expected);
        });
    }

    /// A quoted field running past the limit is taken for an unterminated one without waiting
    /// for the end of the input: the buffer stays bounded.
    #[test]
    fn an_open_quote_is_cut_once_it_passes_the_limit() {
        let mut input = b"1,\"x\n".to_vec();
        let row = b"2,yyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n";
        while input.len() < MAX_QUOTED_BYTES + 4096 {
            input.extend_from_slice(row);
        }
        let mut f = Framer::new(CSV);
        let mut first = Records::default();
        let mut peak = 0;
        for c in input.chunks(64 * 1024) {
            let r = f.feed(c, false);
            peak = peak.max(f.pending());
            if first.is_empty() {
                first = r;
            }
        }
        assert!(first.any_malformed(), "cut before the end of the input");
        assert_eq!(first.text(0), "1,\"x");
        assert_eq!(first.lines[1], 2, "framing starts again on the next line");
        assert!(peak <= MAX_QUOTED_BYTES + 64 * 1024 + row.len(), "buffered {peak}");
    }
}
