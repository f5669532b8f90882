//! The JSON-lines fast path: runs of flat objects of scalars, scanned once and parsed straight
//! into the stream's columns.
//!
//! Arrow's JSON decoder first builds a tape of every token of the run, then walks it per
//! column, and Weir then parses TIMESTAMP columns from the text arrow built: in a profile of
//! reading weir-bench's bids file that fell short of 2.5 M rows/s on its own. Nearly every
//! JSON-lines file a stream reads is one object per line whose values are strings, numbers,
//! booleans and nulls: then one pass over each line can put every value where it belongs.
//!
//! [`FastJson::decode`] takes a run only if it can decode all of it to exactly what arrow's
//! decoder (with primitive coercion, as [`super::decode`] builds it) and Weir's timestamp
//! conversion give:
//! - the run is valid UTF-8 and every record is one object, with only spaces, tabs and
//!   carriage returns around it and between its tokens, ending with its newline;
//! - keys are matched exactly, as arrow matches them; a key that is not a column is skipped if
//!   its value is a scalar; a column's key appears at most once (arrow keeps the last);
//! - a missing key or `null` is NULL;
//! - a string's characters are taken as they are, control characters included (arrow's
//!   decoder does not refuse them either), and an escaped string is unescaped by `serde_json`;
//! - an integer column takes a JSON integer that fits, a float column any JSON number (both
//!   read with arrow's parsers, which agree with arrow's JSON decoder on them), a boolean
//!   column `true` or `false`, a string column a string, a TIMESTAMP column a non-empty
//!   string or a number, read with
//!   [`super::decode::parse_timestamp`] like the text arrow would have made of it;
//! - the event-time column is never NULL.
//!
//! Anything else (a nested value, a number written for a string column, a string for a
//! number, invalid JSON, an escape `serde_json` refuses) declines the whole run (None), and
//! the caller decodes it with arrow, whose errors lead to the per-record checks that locate
//! bad rows.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanBuilder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, SchemaRef};

use super::csv_fast::{column, run_batch, Column, EpochUnit, FastColumn};

/// A stream's fast JSON-lines decoder. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct FastJson {
    schema: SchemaRef,
    /// Each column's key as it is written in a record, quotes included (`"auction"`), so the
    /// key a record most likely has next is matched by comparing bytes, without searching for
    /// its closing quote; None for a name holding a quote or a backslash, which JSON escapes.
    quoted: Vec<Option<Box<[u8]>>>,
    /// The stream's event-time column: a run where it is NULL is declined.
    time_column: Option<usize>,
    epoch: EpochUnit,
}

/// A scalar JSON value as the scanner found it.
enum Scalar<'a> {
    Null,
    Bool(bool),
    /// A number's text, checked against JSON's grammar.
    Number(&'a str),
    Str(Cow<'a, str>),
}

/// A column being built from JSON values.
enum JsonColumn {
    /// Integers and floats (from numbers) and TIMESTAMP (from strings and numbers).
    Parsed {
        col: FastColumn,
        integer: bool,
        timestamp: bool,
    },
    Bool(BooleanBuilder),
    Str(StringBuilder),
}

impl JsonColumn {
    fn new(t: &DataType, rows: usize) -> Option<JsonColumn> {
        Some(match t {
            DataType::Boolean => JsonColumn::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Utf8 => JsonColumn::Str(StringBuilder::with_capacity(rows, rows * 16)),
            t => JsonColumn::Parsed {
                col: column(t, rows)?,
                integer: t.is_integer(),
                timestamp: matches!(t, DataType::Timestamp(_, _)),
            },
        })
    }

    fn null(&mut self) {
        match self {
            // The CSV columns read an empty field as NULL.
            JsonColumn::Parsed { col, .. } => {
                col.push("", EpochUnit { scale: 1, name: "" });
            }
            JsonColumn::Bool(b) => b.append_null(),
            JsonColumn::Str(b) => b.append_null(),
        }
    }

    /// Appends `v`; false if the general path might read it otherwise (see the module docs).
    fn push(&mut self, v: Scalar<'_>, epoch: EpochUnit) -> bool {
        match (self, v) {
            (c, Scalar::Null) => {
                c.null();
                true
            }
            (JsonColumn::Parsed { col, integer, .. }, Scalar::Number(n)) => {
                (!*integer || is_integer(n)) && col.push(n, epoch)
            }
            (JsonColumn::Parsed { col, timestamp: true, .. }, Scalar::Str(s)) => {
                !s.is_empty() && col.push(&s, epoch)
            }
            (JsonColumn::Bool(b), Scalar::Bool(v)) => {
                b.append_value(v);
                true
            }
            (JsonColumn::Str(b), Scalar::Str(s)) => {
                b.append_value(s);
                true
            }
            _ => false,
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            JsonColumn::Parsed { col, .. } => col.finish(),
            JsonColumn::Bool(b) => Arc::new(b.finish()),
            JsonColumn::Str(b) => Arc::new(b.finish()),
        }
    }
}

/// Whether a JSON number is written as an integer (no fraction, no exponent).
fn is_integer(n: &str) -> bool {
    !n.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

impl FastJson {
    /// The fast decoder for `schema`; None if a column's type has no fast parser or there are
    /// more columns than the scanner tracks (64).
    pub fn new(schema: SchemaRef, time_column: Option<usize>, epoch: EpochUnit) -> Option<Self> {
        if schema.fields().len() > 64
            || !schema.fields().iter().all(|f| JsonColumn::new(f.data_type(), 0).is_some())
        {
            return None;
        }
        let quoted = schema
            .fields()
            .iter()
            .map(|f| {
                let name = f.name().as_bytes();
                (!name.iter().any(|b| matches!(b, b'"' | b'\\')))
                    .then(|| [&b"\""[..], name, &b"\""[..]].concat().into_boxed_slice())
            })
            .collect();
        Some(FastJson { schema, quoted, time_column, epoch })
    }

    /// The rows of a run of `records` complete records (each ending with `\n`), in the
    /// stream's schema; None if the run is not one the fast path takes (see the module docs).
    pub fn decode(&self, bytes: &[u8], records: usize) -> Option<RecordBatch> {
        let text = std::str::from_utf8(bytes).ok()?;
        let fields = self.schema.fields();
        let mut columns: Vec<JsonColumn> = fields
            .iter()
            .map(|f| JsonColumn::new(f.data_type(), records))
            .collect::<Option<_>>()?;
        let names: Vec<&[u8]> = fields.iter().map(|f| f.name().as_bytes()).collect();
        let all: u64 = if names.len() == 64 { u64::MAX } else { (1 << names.len()) - 1 };
        let mut s = Scanner { text, b: bytes, i: 0 };
        let mut rows = 0;
        while s.i < bytes.len() {
            s.blank();
            s.expect(b'{')?;
            let mut seen = 0u64;
            // The column the next key most likely names: keys usually come in column order.
            let mut guess = 0;
            s.blank();
            if !s.eat(b'}') {
                loop {
                    s.blank();
                    // The guessed column's key, if the record has it here, is the same bytes
                    // as the whole string token the general scan would find (the name has no
                    // quote or backslash, and its closing quote ends the token).
                    let c = match self.quoted.get(guess) {
                        Some(Some(q)) if s.b.get(s.i..).is_some_and(|t| t.starts_with(q)) => {
                            s.i += q.len();
                            Some(guess)
                        }
                        _ => {
                            let key = s.key()?;
                            names.iter().position(|n| *n == key)
                        }
                    };
                    s.blank();
                    s.expect(b':')?;
                    s.blank();
                    let value = s.scalar()?;
                    if let Some(c) = c {
                        if seen & (1 << c) != 0 || !columns[c].push(value, self.epoch) {
                            return None;
                        }
                        seen |= 1 << c;
                        guess = c + 1;
                    }
                    s.blank();
                    if s.eat(b'}') {
                        break;
                    }
                    s.expect(b',')?;
                }
            }
            s.blank();
            s.expect(b'\n')?;
            if seen != all {
                for (c, col) in columns.iter_mut().enumerate() {
                    if seen & (1 << c) == 0 {
                        col.null();
                    }
                }
            }
            rows += 1;
        }
        if rows != records {
            return None;
        }
        let arrays: Vec<ArrayRef> = columns.iter_mut().map(JsonColumn::finish).collect();
        run_batch(&self.schema, self.time_column, arrays)
    }
}

/// A cursor over one run's text. Every method returns None where the fast path declines.
struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    /// Skips spaces, tabs and carriage returns (JSON's whitespace but the record's newline).
    fn blank(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.b.get(self.i) == Some(&c);
        self.i += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    /// A key: a string without escapes (an escaped key is left to arrow).
    fn key(&mut self) -> Option<&'a [u8]> {
        match self.string()? {
            Cow::Borrowed(k) => Some(k.as_bytes()),
            Cow::Owned(_) => None,
        }
    }

    /// A string at the cursor, unescaped.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.expect(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i += memchr::memchr2(b'"', b'\\', self.b.get(self.i..)?)?;
            if self.b[self.i] == b'"' {
                break;
            }
            escaped = true;
            self.i += 2;
        }
        let end = self.i;
        self.i += 1;
        if !escaped {
            return Some(Cow::Borrowed(self.text.get(start..end)?));
        }
        // `start - 1 ..= end`: the string with its quotes, unescaped by serde_json (which
        // refuses what JSON does, a lone surrogate included).
        serde_json::from_str::<String>(self.text.get(start - 1..end + 1)?).ok().map(Cow::Owned)
    }

    /// A scalar value at the cursor; None for an object, an array or anything invalid.
    fn scalar(&mut self) -> Option<Scalar<'a>> {
        match *self.b.get(self.i)? {
            b'"' => Some(Scalar::Str(self.string()?)),
            b'n' => self.literal(b"null").map(|_| Scalar::Null),
            b't' => self.literal(b"true").map(|_| Scalar::Bool(true)),
            b'f' => self.literal(b"false").map(|_| Scalar::Bool(false)),
            b'-' | b'0'..=b'9' => self.number().map(Scalar::Number),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// A number as JSON writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.i;
        self.eat(b'-');
        match *self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.') {
            self.digits1()?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            self.digits1()?;
        }
        self.text.get(start..self.i)
    }

    fn digits(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
    }

    /// At least one digit.
    fn digits1(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }
}
