//! Durations (`10`, `10 SECONDS`, `INTERVAL '10' SECOND`) and instants (`3`,
//! `TIMESTAMP '...'`) as they appear in windows, watermarks, options, `ADVANCE` and `AT`.

use sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_common::{Diagnostic, Result, WeirError};

use super::ast::{Duration, TimeLit};
use super::tokens::{tok_span, Cursor};

pub(super) fn parse_time_lit(c: &mut Cursor) -> Result<TimeLit> {
    if c.eat_word("TIMESTAMP") {
        let s = c.string("a timestamp string")?;
        return timestamp_micros(&s, c).map(TimeLit::Micros);
    }
    if let Some(Token::SingleQuotedString(_)) = c.peek().map(|t| &t.token) {
        let s = c.string("a timestamp string")?;
        return timestamp_micros(&s, c).map(TimeLit::Micros);
    }
    c.integer("an instant (an integer tick or TIMESTAMP '...')").map(TimeLit::Ticks)
}

fn timestamp_micros(s: &str, c: &Cursor) -> Result<i64> {
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s)
        .map(|ns| ns.div_euclid(1000))
        .map_err(|e| {
            let span = c.toks.get(c.pos.saturating_sub(1)).and_then(tok_span);
            WeirError::Syntax(Diagnostic::at(format!("bad timestamp '{s}': {e}"), span))
        })
}

/// `10`, `10 SECONDS`, `INTERVAL '10' SECOND`, `INTERVAL '10 seconds'`.
pub(super) fn parse_duration(c: &mut Cursor) -> Result<Duration> {
    if c.eat_word("INTERVAL") {
        let s = c.string("a quoted interval, e.g. INTERVAL '10' SECOND")?;
        let mut parts = s.split_whitespace();
        let n: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(|| {
            let span = c.toks.get(c.pos - 1).and_then(tok_span);
            WeirError::Syntax(Diagnostic::at(format!("bad interval '{s}'"), span))
        })?;
        let unit = match parts.next() {
            Some(u) => u.to_string(),
            None => match c.next() {
                Some(TokenWithSpan { token: Token::Word(w), .. }) => w.value.clone(),
                _ => {
                    c.pos -= 1;
                    return Err(c.err("an interval unit (SECOND, MINUTE, ...)"));
                }
            },
        };
        let scale = unit_micros(&unit).ok_or_else(|| c.err("an interval unit"))?;
        return Ok(Duration::Micros(n.saturating_mul(scale)));
    }
    let n = c.integer("a duration (e.g. 10, 10 SECONDS, INTERVAL '10' SECOND)")?;
    if let Some(TokenWithSpan { token: Token::Word(w), .. }) = c.peek() {
        if let Some(scale) = unit_micros(&w.value) {
            c.pos += 1;
            return Ok(Duration::Micros(n.saturating_mul(scale)));
        }
    }
    Ok(Duration::Ticks(n))
}

pub(super) fn unit_micros(unit: &str) -> Option<i64> {
    let u = unit.to_ascii_uppercase();
    let u = u.strip_suffix('S').filter(|s| !s.is_empty()).unwrap_or(&u);
    Some(match u {
        "MICROSECOND" | "U" => 1,
        "MILLISECOND" | "M" => 1_000,
        "SECOND" | "SEC" => 1_000_000,
        "MINUTE" | "MIN" => 60_000_000,
        "HOUR" => 3_600_000_000,
        "DAY" => 86_400_000_000,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::testing::query;
    use crate::parser::WindowKind;

    #[test]
    fn durations() {
        let q = query("SELECT * FROM s [RANGE INTERVAL '5' MINUTE] JOIN t [RANGE 3] ON s.a = t.a");
        assert_eq!(q.windows[0].kind, WindowKind::Range(Duration::Micros(300_000_000)));
        assert_eq!(q.windows[1].kind, WindowKind::Range(Duration::Ticks(3)));
        assert_eq!(
            q.query.to_string(),
            "SELECT * FROM __weir_w0 AS s JOIN __weir_w1 AS t ON s.a = t.a"
        );
    }
}
