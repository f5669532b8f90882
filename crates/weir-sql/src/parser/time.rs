//! Durations (`10`, `10 SECONDS`, `INTERVAL '10' SECOND`) and instants (`3`,
//! `TIMESTAMP '...'`) as they appear in windows, watermarks, options, `ADVANCE` and `AT`.

use sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_common::{Result, Span, WeirError};

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

/// `TIMESTAMP '2020-04-15 12:02'`, a literal without seconds, is `'2020-04-15 12:02:00'` (as
/// in Flink and PostgreSQL): the string of every `TIMESTAMP '...'` literal whose time of day
/// is hours and minutes only gets `:00`. Other strings are left to the usual parsing.
pub(super) fn complete_timestamp_literals(toks: &mut [TokenWithSpan]) {
    for i in 1..toks.len() {
        let Token::SingleQuotedString(s) = &toks[i].token else { continue };
        if !super::tokens::word_is(&toks[i - 1], "TIMESTAMP") {
            continue;
        }
        if let Some(full) = with_seconds(s) {
            toks[i].token = Token::SingleQuotedString(full);
        }
    }
}

/// `date HH:MM` (a space or `T` between) with `:00` added; `None` for anything else.
fn with_seconds(s: &str) -> Option<String> {
    let t = s.trim();
    let at = t.find([' ', 'T'])?;
    let (date, time) = (&t[..at], t[at + 1..].trim_start());
    let date_ok = date.len() == 10
        && date.chars().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        });
    let (h, m) = time.split_once(':')?;
    let time_ok = (1..=2).contains(&h.len())
        && m.len() == 2
        && h.chars().chain(m.chars()).all(|c| c.is_ascii_digit());
    (date_ok && time_ok).then(|| format!("{date} {h:0>2}:{m}:00"))
}

/// A TIMESTAMP literal in microseconds, the unit of Weir's instants (years 1 to 9999, as
/// streams read them; not nanoseconds, which end in 2262).
fn timestamp_micros(s: &str, c: &Cursor) -> Result<i64> {
    let utc: arrow::array::timezone::Tz =
        "+00:00".parse().map_err(|e| WeirError::internal(format!("the UTC zone: {e}")))?;
    arrow::compute::kernels::cast_utils::string_to_datetime(&utc, s)
        .map(|d| d.timestamp_micros())
        .map_err(|e| {
            let span = c.toks.get(c.pos.saturating_sub(1)).and_then(tok_span);
            WeirError::syntax_at(format!("bad timestamp '{s}': {e}"), span)
        })
}

/// The units a duration may carry, in any case, and their length in microseconds. A bare `M`
/// is none of them: it reads as minutes to some (`sleep 2m` in grammar-tests) and as
/// milliseconds to others, so it is refused with both spellings offered.
const UNITS: &[(&str, i64)] = &[
    ("MICROSECOND", 1),
    ("MICROSECONDS", 1),
    ("US", 1),
    ("MILLISECOND", 1_000),
    ("MILLISECONDS", 1_000),
    ("MS", 1_000),
    ("SECOND", 1_000_000),
    ("SECONDS", 1_000_000),
    ("SEC", 1_000_000),
    ("SECS", 1_000_000),
    ("MINUTE", 60_000_000),
    ("MINUTES", 60_000_000),
    ("MIN", 60_000_000),
    ("MINS", 60_000_000),
    ("HOUR", 3_600_000_000),
    ("HOURS", 3_600_000_000),
    ("DAY", 86_400_000_000),
    ("DAYS", 86_400_000_000),
];

/// [`UNITS`] as messages name them.
const UNIT_NAMES: &str = "MICROSECOND(S) or US, MILLISECOND(S) or MS, SECOND(S) or SEC(S), \
                          MINUTE(S) or MIN(S), HOUR(S), DAY(S)";

/// `10`, `10 SECONDS`, `INTERVAL '10' SECOND`, `INTERVAL '10 seconds'`. After a bare number,
/// a word is its unit unless it is one of `then`, the keywords that may follow a duration
/// where it is written (`SLIDE` in a window); a word that is no unit is an error naming the
/// units, not the end of the duration.
pub(super) fn parse_duration(c: &mut Cursor, then: &[&str]) -> Result<Duration> {
    if c.eat_word("INTERVAL") {
        let s = c.string("a quoted interval, e.g. INTERVAL '10' SECOND")?;
        let string_span = c.toks.get(c.pos - 1).and_then(tok_span);
        let bad = || WeirError::syntax_at(format!("bad interval '{s}'"), string_span);
        let number = |p: &str| p.parse::<i64>().map_err(|_| bad());
        let out_of_range =
            || WeirError::syntax_at(format!("interval '{s}' is out of range"), string_span);
        let words: Vec<&str> = s.split_whitespace().collect();
        let total = match words.as_slice() {
            // `INTERVAL '10' SECOND`: the unit follows the string.
            [n] => {
                let n = number(n)?;
                let (unit, unit_span) = match c.next() {
                    Some(t @ TokenWithSpan { token: Token::Word(w), .. }) => {
                        (w.value.clone(), tok_span(t))
                    }
                    _ => {
                        c.pos -= 1;
                        return Err(c.err(&format!("an interval unit ({UNIT_NAMES})")));
                    }
                };
                let scale = unit_micros(&unit).ok_or_else(|| unit_error(&unit, unit_span))?;
                n.checked_mul(scale).ok_or_else(out_of_range)?
            }
            // `INTERVAL '1 minute 30 seconds'`: every number with its unit, summed.
            pairs if !pairs.is_empty() && pairs.len() % 2 == 0 => {
                let mut total: i64 = 0;
                for pair in pairs.chunks(2) {
                    let n = number(pair[0])?;
                    let scale =
                        unit_micros(pair[1]).ok_or_else(|| unit_error(pair[1], string_span))?;
                    total = n
                        .checked_mul(scale)
                        .and_then(|us| total.checked_add(us))
                        .ok_or_else(out_of_range)?;
                }
                total
            }
            _ => return Err(bad()),
        };
        return Ok(Duration::Micros(total));
    }
    let n = c.integer("a duration (e.g. 10, 10 SECONDS, INTERVAL '10' SECOND)")?;
    if let Some(t @ TokenWithSpan { token: Token::Word(w), .. }) = c.peek() {
        if let Some(scale) = unit_micros(&w.value) {
            c.pos += 1;
            return Ok(Duration::Micros(n.saturating_mul(scale)));
        }
        if w.quote_style.is_none() && !then.iter().any(|k| w.value.eq_ignore_ascii_case(k)) {
            return Err(unit_error(&w.value, tok_span(t)));
        }
    }
    Ok(Duration::Ticks(n))
}

/// Microseconds per `unit`, if it is one of [`UNITS`].
pub(super) fn unit_micros(unit: &str) -> Option<i64> {
    UNITS.iter().find(|(name, _)| unit.eq_ignore_ascii_case(name)).map(|(_, us)| *us)
}

/// The error for `unit`, written where a duration's unit belongs but none of [`UNITS`].
fn unit_error(unit: &str, span: Option<Span>) -> WeirError {
    let msg = if unit.eq_ignore_ascii_case("M") {
        format!(
            "ambiguous duration unit '{unit}': write MS for milliseconds or MIN for minutes \
             (units: {UNIT_NAMES})"
        )
    } else {
        format!("unknown duration unit '{unit}' (units: {UNIT_NAMES})")
    };
    WeirError::syntax_at(msg, span)
}

#[cfg(test)]
mod minutes_tests {
    use super::with_seconds;

    #[test]
    fn timestamps_without_seconds_get_them() {
        assert_eq!(with_seconds("2020-04-15 12:02").as_deref(), Some("2020-04-15 12:02:00"));
        assert_eq!(with_seconds("2020-04-15T9:05").as_deref(), Some("2020-04-15 09:05:00"));
        assert_eq!(with_seconds("2020-04-15 12:02:03"), None);
        assert_eq!(with_seconds("2020-04-15"), None);
        assert_eq!(with_seconds("2020-04-15 12:2"), None);
        assert_eq!(with_seconds("20-04-15 12:02"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::testing::{one, query};
    use crate::parser::{parse_script, OptionValue, Statement, WindowKind};

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

    #[test]
    fn unit_spellings() {
        let range = |sql: &str| query(sql).windows[0].kind.clone();
        for (unit, us) in [
            ("MICROSECONDS", 1),
            ("us", 1),
            ("MILLISECOND", 1_000),
            ("ms", 1_000),
            ("MS", 1_000),
            ("Seconds", 1_000_000),
            ("sec", 1_000_000),
            ("secs", 1_000_000),
            ("minute", 60_000_000),
            ("MIN", 60_000_000),
            ("mins", 60_000_000),
            ("hours", 3_600_000_000),
            ("DAY", 86_400_000_000),
        ] {
            let want = WindowKind::Range(Duration::Micros(2 * us));
            assert_eq!(range(&format!("SELECT * FROM e [RANGE 2 {unit}]")), want, "{unit}");
            assert_eq!(range(&format!("SELECT * FROM e [RANGE INTERVAL '2' {unit}]")), want);
            assert_eq!(range(&format!("SELECT * FROM e [RANGE INTERVAL '2 {unit}']")), want);
        }
        assert_eq!(
            range("SELECT * FROM s [RANGE 10 SLIDE 5]"),
            WindowKind::RangeSlide(Duration::Ticks(10), Duration::Ticks(5))
        );
    }

    /// An interval string of several parts is their sum, never its first part alone; what
    /// does not read as numbers with units is an error, as is a sum out of range.
    #[test]
    fn interval_strings_with_several_parts_add_up() {
        let range = |sql: &str| query(sql).windows[0].kind.clone();
        assert_eq!(
            range("SELECT * FROM e [RANGE INTERVAL '1 minute 30 seconds']"),
            WindowKind::Range(Duration::Micros(90_000_000))
        );
        assert_eq!(
            range("SELECT * FROM e [RANGE INTERVAL '1 hour 2 min 3 sec']"),
            WindowKind::Range(Duration::Micros(3_723_000_000))
        );
        let err = |sql: &str| parse_script(sql).unwrap_err().to_string();
        assert!(err("SELECT * FROM e [RANGE INTERVAL '1 minute 30']").contains("bad interval"));
        assert!(err("SELECT * FROM e [RANGE INTERVAL 'soon']").contains("bad interval"));
        assert!(err("SELECT * FROM e [RANGE INTERVAL '1 minute 2 fortnights']")
            .contains("unknown duration unit 'fortnights'"));
        assert!(err("SELECT * FROM e [RANGE INTERVAL '9223372036854775807 days']")
            .contains("out of range"));
    }

    #[test]
    fn ambiguous_and_unknown_units_name_the_units() {
        let units = "(units: MICROSECOND(S) or US, MILLISECOND(S) or MS, SECOND(S) or SEC(S), \
                     MINUTE(S) or MIN(S), HOUR(S), DAY(S))";
        let err = |sql: &str| parse_script(sql).unwrap_err().to_string();
        let first_line = |sql: &str| err(sql).lines().next().unwrap_or_default().to_string();
        // `M` was milliseconds once, which `m` = minutes elsewhere contradicts: neither now.
        assert_eq!(
            first_line("SELECT * FROM e [RANGE 5 M]"),
            format!(
                "syntax error: ambiguous duration unit 'M': write MS for milliseconds or MIN for \
                 minutes {units} at line 1, column 26"
            )
        );
        assert!(
            err("SELECT * FROM e [RANGE INTERVAL '5' m]").contains("ambiguous duration unit 'm'")
        );
        assert!(
            err("SELECT * FROM e [RANGE INTERVAL '5 m']").contains("ambiguous duration unit 'm'")
        );
        assert!(err("SELECT * FROM e [RANGE 5 U]").contains("unknown duration unit 'U'"));
        assert_eq!(
            first_line("SELECT * FROM e [RANGE 10 SECONDS SLIDE 2 fortnights]"),
            format!(
                "syntax error: unknown duration unit 'fortnights' {units} at line 1, column 43"
            )
        );
        assert!(err("CREATE STREAM x (ts TIMESTAMP, WATERMARK FOR ts AS ts - 2 M)")
            .contains("ambiguous duration unit 'M'"));
        assert!(err("CREATE STREAM x (t BIGINT, WATERMARK FOR t) WITH (poll = 5 M)")
            .contains("ambiguous duration unit 'M'"));
        assert!(err("SELECT * FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), 5 M))")
            .contains("ambiguous duration unit 'M'"));
        assert!(err("SELECT * FROM e [RANGE INTERVAL '5']").contains(&format!(
            "expected an interval unit ({}), found ']'",
            &units["(units: ".len()..units.len() - 1]
        )));
        // A number alone is still a number.
        match one("CREATE STREAM x (t BIGINT, WATERMARK FOR t) WITH (max = 3)") {
            Statement::CreateStream { options, .. } => {
                assert_eq!(options[0].value, OptionValue::Number("3".into()))
            }
            other => panic!("{other:?}"),
        }
    }
}
