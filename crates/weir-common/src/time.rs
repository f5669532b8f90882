//! Logical time: CQL instants as `i64` ticks.
//!
//! A stream's timestamp comes from one declared column. A `TIMESTAMP` column counts microseconds
//! since the Unix epoch; an integer column is taken as abstract ticks. [`TimeDomain`] records
//! which, so that a query never mixes the two and so that tools print instants the way the user
//! wrote them.

use std::fmt;

/// One instant of logical time. Ordered, discrete; [`Time::MIN`] means "before everything",
/// [`Time::MAX`] means "after everything" (a closed stream's watermark).
pub type Time = i64;

/// A watermark or frontier: every instant strictly below it is complete. It ranges over the
/// tick domain and beyond, so that "nothing is complete" ([`WATERMARK_MIN`]) and "everything
/// is complete, instant `Time::MAX` included" ([`WATERMARK_CLOSED`]) are both expressible.
pub type Watermark = i128;

/// The watermark of a stream that has promised nothing yet.
pub const WATERMARK_MIN: Watermark = i128::MIN;

/// The watermark of a closed stream: every instant is complete.
pub const WATERMARK_CLOSED: Watermark = i128::MAX;

/// How a stream's ticks are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Abstract ticks from an integer column (the CQL papers' style).
    Ticks,
    /// Microseconds since the Unix epoch, from a `TIMESTAMP` column.
    Micros,
}

impl fmt::Display for TimeDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeDomain::Ticks => f.write_str("integer ticks"),
            TimeDomain::Micros => f.write_str("TIMESTAMP (microseconds)"),
        }
    }
}

/// Renders an instant for people: ticks as integers, micros as ISO-8601 UTC.
pub fn format_time(t: Time, domain: TimeDomain) -> String {
    match domain {
        TimeDomain::Ticks => t.to_string(),
        TimeDomain::Micros => match arrow::temporal_conversions::timestamp_us_to_datetime(t) {
            Some(dt) => dt.format("%Y-%m-%dT%H:%M:%S%.f").to_string(),
            None => t.to_string(),
        },
    }
}

/// A wall-clock duration as people type it on a command line or in a test script: a whole
/// number with `ms`, `s` or `m` (`500ms`, `2s`, `1m`).
pub fn parse_wall_duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let n: u64 = text[..split].parse().map_err(|_| format!("bad duration '{text}'"))?;
    match &text[split..] {
        "ms" => Ok(std::time::Duration::from_millis(n)),
        "s" => Ok(std::time::Duration::from_secs(n)),
        "m" => Ok(std::time::Duration::from_secs(n.saturating_mul(60))),
        _ => Err(format!("bad duration '{text}': write e.g. 500ms, 2s or 1m")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wall_durations() {
        use std::time::Duration;
        assert_eq!(parse_wall_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_wall_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_wall_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_wall_duration("2").unwrap_err().contains("write e.g."));
        assert!(parse_wall_duration("2h").is_err());
        assert!(parse_wall_duration("s").unwrap_err().contains("bad duration 's'"));
        assert!(parse_wall_duration("").is_err());
    }

    #[test]
    fn formats_ticks_and_micros() {
        assert_eq!(format_time(42, TimeDomain::Ticks), "42");
        assert_eq!(format_time(1_500_000, TimeDomain::Micros), "1970-01-01T00:00:01.500");
    }
}
