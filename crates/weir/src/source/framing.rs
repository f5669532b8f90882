//! Cutting a byte stream into complete records, remembering where each came from.
//!
//! A source reads bytes in arbitrary chunks (a file read, a pipe, a growing file). Decoding
//! needs whole records, and error messages need each record's line and byte offset. The
//! [`Framer`] buffers the incomplete tail of the input and hands out runs of complete records.
//!
//! A record ends at a newline outside quotes. For CSV, a newline inside a quoted field does not
//! end the record: since an escaped quote is written twice (`""`), a newline is inside quotes
//! exactly when an odd number of quote characters precede it in the record. JSON lines never
//! contain raw newlines, so a JSON record is a line. Blank lines are not records (both arrow
//! readers skip them too, which keeps record and row numbering aligned).

/// Complete records, contiguous in `bytes`, each ending with `\n`.
#[derive(Debug, Default)]
pub(crate) struct Records {
    pub bytes: Vec<u8>,
    /// Start of each record in `bytes`; record `i` ends where record `i + 1` starts.
    pub starts: Vec<usize>,
    /// 1-based line number of each record's first line in its file.
    pub lines: Vec<u64>,
    /// Byte offset of each record in its file.
    pub offsets: Vec<u64>,
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
        let end = self.starts.get(i + 1).copied().unwrap_or(self.bytes.len());
        &self.bytes[self.starts[i]..end]
    }

    /// Record `i` without its line terminator, as text for messages (invalid UTF-8 replaced).
    pub fn text(&self, i: usize) -> String {
        let r = self.record(i);
        let r = r.strip_suffix(b"\n").unwrap_or(r);
        let r = r.strip_suffix(b"\r").unwrap_or(r);
        String::from_utf8_lossy(r).into_owned()
    }

    fn push(&mut self, record: &[u8], line: u64, offset: u64) {
        self.starts.push(self.bytes.len());
        self.lines.push(line);
        self.offsets.push(offset);
        self.bytes.extend_from_slice(record);
        if !record.ends_with(b"\n") {
            self.bytes.push(b'\n');
        }
    }

    /// Records `from..` as a new set (the rest after a header or a failure).
    pub fn split_off(&self, from: usize) -> Records {
        let mut out = Records::default();
        for i in from..self.len() {
            out.push(self.record(i), self.lines[i], self.offsets[i]);
        }
        out
    }

    /// Only the records whose index `keep` accepts.
    pub fn filtered(&self, keep: impl Fn(usize) -> bool) -> Records {
        let mut out = Records::default();
        for i in (0..self.len()).filter(|&i| keep(i)) {
            out.push(self.record(i), self.lines[i], self.offsets[i]);
        }
        out
    }
}

/// Buffers input bytes of one file and cuts them into records. See the module docs.
#[derive(Debug)]
pub(crate) struct Framer {
    /// Quote character whose parity decides if a newline ends a record (`None` for JSON).
    quote: Option<u8>,
    buf: Vec<u8>,
    /// Line number and byte offset of `buf[0]` in the file.
    line: u64,
    offset: u64,
    /// Scan state over `buf[..scanned]`: quotes seen in the current record and newlines inside
    /// it, so a long record split across reads is not rescanned from its start.
    scanned: usize,
    quotes: usize,
    inner_newlines: u64,
}

impl Framer {
    pub fn new(quote: Option<u8>) -> Self {
        Framer::at(quote, 0, 1)
    }

    /// A framer for input that starts at byte `offset`, line `line` of its file (a source
    /// restored from a checkpoint reads on from a record boundary).
    pub fn at(quote: Option<u8>, offset: u64, line: u64) -> Self {
        Framer { quote, buf: Vec::new(), line, offset, scanned: 0, quotes: 0, inner_newlines: 0 }
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
        let mut out = Records::default();
        let mut start = 0;
        let mut line = self.line;
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if Some(b) == self.quote {
                self.quotes += 1;
            } else if b == b'\n' {
                if self.quotes % 2 == 1 {
                    self.inner_newlines += 1;
                } else {
                    let rec = &self.buf[start..=i];
                    if !is_blank(rec) {
                        out.push(rec, line, self.offset + start as u64);
                    }
                    line += 1 + self.inner_newlines;
                    self.inner_newlines = 0;
                    self.quotes = 0;
                    start = i + 1;
                }
            }
            i += 1;
        }
        if eof && start < self.buf.len() {
            let rec = &self.buf[start..];
            if !is_blank(rec) {
                out.push(rec, line, self.offset + start as u64);
            }
            start = self.buf.len();
            self.quotes = 0;
            self.inner_newlines = 0;
        }
        self.buf.drain(..start);
        self.offset += start as u64;
        self.line = line;
        self.scanned = self.buf.len();
        out
    }
}

fn is_blank(rec: &[u8]) -> bool {
    rec.iter().all(|b| b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let mut f = Framer::new(Some(b'"'));
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
        let mut f = Framer::new(None);
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
