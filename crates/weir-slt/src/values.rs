//! Query values as the reference sqllogictest driver prints them, and the MD5 of a result.
//!
//! The reference driver (SQLite's `sqllogictest.c` with its SQLite engine, `slt_sqlite.c`) prints
//! every value by the query's type letter, whatever type the engine produced:
//!
//! - `NULL` prints `NULL`, whatever the letter;
//! - `I`: the value as a C `int` (`sqlite3_column_int`): integers keep their low 32 bits, a real is
//!   truncated toward zero, text gives its leading integer (`'12x'` is 12, `'x'` is 0), a boolean
//!   1 or 0;
//! - `R`: the value as a `double`, printed `%.3f` (`2.5` is `2.500`, `7` is `7.000`);
//! - `T`: the value as text; an empty string prints `(empty)` and every byte below `' '` or above
//!   `'~'` (control characters, and each byte of a non-ASCII character) prints `@`. A real prints
//!   as SQLite writes it (`%!.15g`: `2.0`, `0.1`, `1.0e+20`), a boolean as 1 or 0.
//!
//! Letters other than `I`, `R` and `T` (Weir's grammar-tests use `B` for booleans) keep Weir's
//! own text. [`hash_values`] is the driver's result hash: the MD5 of every value followed by a
//! newline, in hex.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};
use md5::{Digest, Md5};
use weir::Value;

/// A whole column as the reference driver prints it for `letter`, for the common types (the
/// same as [`reference_value`] on each value, faster); `None` for other types and letters.
pub fn reference_column(col: &dyn Array, letter: char) -> Option<Vec<String>> {
    fn each<T>(
        col: &dyn Array,
        value: impl Fn(usize) -> T,
        print: impl Fn(T) -> String,
    ) -> Vec<String> {
        (0..col.len())
            .map(|i| if col.is_null(i) { "NULL".to_string() } else { print(value(i)) })
            .collect()
    }
    Some(match (letter, col.data_type()) {
        ('I', DataType::Int64) => {
            let a = col.as_primitive::<Int64Type>();
            each(col, |i| a.value(i), |v| (v as i32).to_string())
        }
        ('I', DataType::Int32) => {
            let a = col.as_primitive::<Int32Type>();
            each(col, |i| a.value(i), |v| v.to_string())
        }
        ('I', DataType::Float64) => {
            let a = col.as_primitive::<Float64Type>();
            each(col, |i| a.value(i), |v| (real_to_int(v) as i32).to_string())
        }
        ('R', DataType::Int64) => {
            let a = col.as_primitive::<Int64Type>();
            each(col, |i| a.value(i), |v| format_real(v as f64))
        }
        ('R', DataType::Float64) => {
            let a = col.as_primitive::<Float64Type>();
            each(col, |i| a.value(i), format_real)
        }
        ('T', DataType::Int64) => {
            let a = col.as_primitive::<Int64Type>();
            each(col, |i| a.value(i), |v| v.to_string())
        }
        ('T', DataType::Utf8) => {
            let a = col.as_string::<i32>();
            each(col, |i| a.value(i), printable)
        }
        ('T', DataType::Utf8View) => {
            let a = col.as_string_view();
            each(col, |i| a.value(i), printable)
        }
        _ => return None,
    })
}

/// `value` (from a result column with Weir's text `weir_text`) as the reference driver prints it
/// for the type letter `letter`.
pub fn reference_value(value: &Value, letter: char, weir_text: &str) -> String {
    if value.is_null() {
        return "NULL".to_string();
    }
    match letter {
        'I' => match as_number(value) {
            Some(Num::Int(i)) => (i as i32).to_string(),
            Some(Num::Real(r)) => (real_to_int(r) as i32).to_string(),
            None => match as_text(value) {
                Some(s) => (text_to_int(s) as i32).to_string(),
                None => weir_text.to_string(),
            },
        },
        'R' => match as_number(value) {
            Some(Num::Int(i)) => format_real(i as f64),
            Some(Num::Real(r)) => format_real(r),
            None => match as_text(value) {
                Some(s) => format_real(text_to_real(s)),
                None => weir_text.to_string(),
            },
        },
        'T' => match (as_text(value), as_number(value)) {
            (Some(s), _) => printable(s),
            (None, Some(Num::Int(i))) => i.to_string(),
            (None, Some(Num::Real(r))) => real_as_text(r),
            _ => printable(weir_text),
        },
        _ => weir_text.to_string(),
    }
}

/// The reference driver's hash of a result: MD5 of each value followed by `\n`, as lowercase hex.
pub fn hash_values<S: AsRef<str>>(values: &[S]) -> String {
    let mut text = Vec::with_capacity(values.iter().map(|v| v.as_ref().len() + 1).sum());
    for v in values {
        text.extend_from_slice(v.as_ref().as_bytes());
        text.push(b'\n');
    }
    Md5::digest(&text).iter().map(|b| format!("{b:02x}")).collect()
}

/// The hashed form of a result: `N values hashing to <md5hex>`.
pub fn hash_line<S: AsRef<str>>(values: &[S]) -> String {
    format!("{} values hashing to {}", values.len(), hash_values(values))
}

/// Parses `N values hashing to <32 hex digits>`.
pub fn parse_hash_line(line: &str) -> Option<(usize, &str)> {
    let rest = line.trim();
    let (count, rest) = rest.split_once(' ')?;
    let hash = rest.strip_prefix("values hashing to ")?.trim();
    let count = count.parse().ok()?;
    (hash.len() == 32 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then_some((count, hash))
}

enum Num {
    Int(i64),
    Real(f64),
}

fn as_number(v: &Value) -> Option<Num> {
    use Value::*;
    Some(match v {
        Boolean(Some(b)) => Num::Int(i64::from(*b)),
        Int8(Some(i)) => Num::Int(i64::from(*i)),
        Int16(Some(i)) => Num::Int(i64::from(*i)),
        Int32(Some(i)) => Num::Int(i64::from(*i)),
        Int64(Some(i)) => Num::Int(*i),
        UInt8(Some(i)) => Num::Int(i64::from(*i)),
        UInt16(Some(i)) => Num::Int(i64::from(*i)),
        UInt32(Some(i)) => Num::Int(i64::from(*i)),
        // Wraps like C's conversion of an unsigned 64-bit value.
        UInt64(Some(i)) => Num::Int(*i as i64),
        Float16(Some(f)) => Num::Real(f64::from(*f)),
        Float32(Some(f)) => Num::Real(f64::from(*f)),
        Float64(Some(f)) => Num::Real(*f),
        Decimal128(Some(m), _, scale) => {
            let scale = i32::from(*scale);
            if scale <= 0 {
                Num::Real(*m as f64 * 10f64.powi(-scale))
            } else if *m % 10i128.pow(scale.unsigned_abs()) == 0 {
                let i = *m / 10i128.pow(scale.unsigned_abs());
                Num::Int(i64::try_from(i).unwrap_or(if i < 0 { i64::MIN } else { i64::MAX }))
            } else {
                Num::Real(*m as f64 / 10f64.powi(scale))
            }
        }
        _ => return None,
    })
}

fn as_text(v: &Value) -> Option<&str> {
    match v {
        Value::Utf8(Some(s)) | Value::LargeUtf8(Some(s)) | Value::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

/// SQLite's real-to-integer conversion: truncation toward zero, saturating (`as` does both).
fn real_to_int(r: f64) -> i64 {
    r as i64
}

/// The leading integer of a text, as SQLite reads it: spaces, a sign, digits; 0 if none.
fn text_to_int(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg {
        -v
    } else {
        v
    }
}

/// The leading number of a text, as SQLite reads it for a real; 0.0 if none.
fn text_to_real(s: &str) -> f64 {
    let s = s.trim_start();
    let b = s.as_bytes();
    let mut end = 0;
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    if end < b.len() && (b[end] == b'-' || b[end] == b'+') {
        end += 1;
    }
    let int_end = digits(end);
    let mut frac_end = int_end;
    if frac_end < b.len() && b[frac_end] == b'.' {
        frac_end = digits(frac_end + 1);
    }
    if frac_end == end || (frac_end == end + 1 && b[end] == b'.') {
        return 0.0;
    }
    end = frac_end;
    if end < b.len() && (b[end] == b'e' || b[end] == b'E') {
        let mut e = end + 1;
        if e < b.len() && (b[e] == b'-' || b[e] == b'+') {
            e += 1;
        }
        let e_end = digits(e);
        if e_end > e {
            end = e_end;
        }
    }
    s[..end].parse().unwrap_or(0.0)
}

/// `%.3f` as SQLite's printf writes it (which never writes `-0.000` for a zero).
fn format_real(r: f64) -> String {
    if r.is_nan() {
        "NaN".to_string()
    } else if r.is_infinite() {
        if r > 0.0 { "Inf" } else { "-Inf" }.to_string()
    } else if r == 0.0 {
        "0.000".to_string()
    } else {
        format!("{r:.3}")
    }
}

/// A real as SQLite converts it to text: `%!.15g`, which keeps a `.0` on whole numbers.
fn real_as_text(r: f64) -> String {
    if r.is_nan() {
        return "NaN".to_string();
    }
    if r.is_infinite() {
        return if r > 0.0 { "Inf" } else { "-Inf" }.to_string();
    }
    if r == 0.0 {
        return "0.0".to_string();
    }
    let sign = if r < 0.0 { "-" } else { "" };
    // 15 significant digits: d.dddddddddddddde<exp>
    let sci = format!("{:.14e}", r.abs());
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{r}");
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if !(-4..15).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}.{rest}e{esign}{:02}", exp.abs());
    }
    let (int_part, frac_part) = if exp >= 0 {
        let e = exp as usize + 1;
        if digits.len() <= e {
            (format!("{digits}{}", "0".repeat(e - digits.len())), String::new())
        } else {
            (digits[..e].to_string(), digits[e..].to_string())
        }
    } else {
        ("0".to_string(), format!("{}{digits}", "0".repeat((-exp - 1) as usize)))
    };
    let frac_part = if frac_part.is_empty() { "0".to_string() } else { frac_part };
    format!("{sign}{int_part}.{frac_part}")
}

/// Text as the driver prints it: `(empty)` for an empty string, `@` for each unprintable byte.
fn printable(s: &str) -> String {
    if s.is_empty() {
        return "(empty)".to_string();
    }
    if s.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return s.to_string();
    }
    s.bytes().map(|b| if (b' '..=b'~').contains(&b) { b as char } else { '@' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(v: Value) -> String {
        reference_value(&v, 'I', "weir")
    }
    fn r(v: Value) -> String {
        reference_value(&v, 'R', "weir")
    }
    fn t(v: Value) -> String {
        reference_value(&v, 'T', "weir")
    }

    #[test]
    fn integers() {
        assert_eq!(i(Value::Int64(Some(-42))), "-42");
        assert_eq!(i(Value::Int32(Some(7))), "7");
        assert_eq!(i(Value::Boolean(Some(true))), "1");
        assert_eq!(i(Value::Boolean(Some(false))), "0");
        // A real in an I column is truncated toward zero.
        assert_eq!(i(Value::Float64(Some(2.5))), "2");
        assert_eq!(i(Value::Float64(Some(-2.9))), "-2");
        assert_eq!(i(Value::Float64(Some(0.2))), "0");
        // sqlite3_column_int keeps the low 32 bits.
        assert_eq!(i(Value::Int64(Some(4_294_967_298))), "2");
        // Text gives its leading integer.
        assert_eq!(i(Value::Utf8(Some(" 12x".into()))), "12");
        assert_eq!(i(Value::Utf8(Some("-3".into()))), "-3");
        assert_eq!(i(Value::Utf8(Some("abc".into()))), "0");
        assert_eq!(i(Value::Decimal128(Some(1250), 10, 2)), "12");
        assert_eq!(i(Value::Int64(None)), "NULL");
    }

    #[test]
    fn reals() {
        assert_eq!(r(Value::Float64(Some(2.5))), "2.500");
        assert_eq!(r(Value::Int64(Some(7))), "7.000");
        assert_eq!(r(Value::Float64(Some(-0.75))), "-0.750");
        assert_eq!(r(Value::Float64(Some(1.0 / 3.0))), "0.333");
        assert_eq!(r(Value::Float64(Some(-0.0))), "0.000");
        assert_eq!(r(Value::Float64(Some(-0.0001))), "-0.000");
        assert_eq!(r(Value::Utf8(Some("1.5e1x".into()))), "15.000");
        assert_eq!(r(Value::Utf8(Some("x".into()))), "0.000");
        assert_eq!(r(Value::Float64(None)), "NULL");
    }

    #[test]
    fn texts() {
        assert_eq!(t(Value::Utf8(Some("table t1 row 3".into()))), "table t1 row 3");
        assert_eq!(t(Value::Utf8(Some(String::new()))), "(empty)");
        assert_eq!(t(Value::Utf8(Some("a\tb\nc".into()))), "a@b@c");
        assert_eq!(t(Value::Utf8(Some("é".into()))), "@@");
        assert_eq!(t(Value::Int64(Some(-5))), "-5");
        assert_eq!(t(Value::Boolean(Some(true))), "1");
        assert_eq!(t(Value::Float64(Some(2.0))), "2.0");
        assert_eq!(t(Value::Float64(Some(2.5))), "2.5");
        assert_eq!(t(Value::Float64(Some(0.1))), "0.1");
        assert_eq!(t(Value::Float64(Some(-123.456))), "-123.456");
        assert_eq!(t(Value::Float64(Some(1e20))), "1.0e+20");
        assert_eq!(t(Value::Float64(Some(1.5e-7))), "1.5e-07");
        assert_eq!(t(Value::Float64(Some(0.00012))), "0.00012");
        assert_eq!(t(Value::Float64(Some(123456789012345.0))), "123456789012345.0");
        assert_eq!(t(Value::Utf8(None)), "NULL");
    }

    #[test]
    fn other_letters_keep_weirs_text() {
        assert_eq!(reference_value(&Value::Boolean(Some(true)), 'B', "true"), "true");
        assert_eq!(reference_value(&Value::Float64(Some(2.5)), 'X', "2.5"), "2.5");
        assert_eq!(reference_value(&Value::Boolean(None), 'B', "NULL"), "NULL");
    }

    #[test]
    fn md5_of_values() {
        // `printf '1\n2\n3\n' | md5sum`
        assert_eq!(hash_values(&["1", "2", "3"]), "c0710d6b4f15dfa88f600b0e6b624077");
        // The empty result hashes the empty input.
        assert_eq!(hash_values::<&str>(&[]), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            hash_line(&["1", "2", "3"]),
            "3 values hashing to c0710d6b4f15dfa88f600b0e6b624077"
        );
    }

    #[test]
    fn hash_lines() {
        assert_eq!(
            parse_hash_line("30 values hashing to 3c13dee48d9356ae19af2515e05e6b54"),
            Some((30, "3c13dee48d9356ae19af2515e05e6b54"))
        );
        assert_eq!(parse_hash_line("30 values hashing to xyz"), None);
        assert_eq!(parse_hash_line("1 2 3"), None);
    }
}
