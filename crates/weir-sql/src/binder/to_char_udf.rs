//! `to_char` (and its alias `date_format`) with the format parsed once per call.
//!
//! DataFusion's `to_char` formats each value through arrow's display, which parses the chrono
//! format string again for every row; as a group key (`GROUP BY to_char(ts, '%Y-%m-%d')`, as
//! NEXMark q15-q17 do) that parsing is a sizable share of a query's cost. This function is
//! DataFusion's in every respect (name, aliases, signature, return type, documentation) but
//! one: over a timestamp array without a time zone and a constant format, it parses the format
//! once and formats every value with the parsed items, which gives the same text as
//! `NaiveDateTime::format` (arrow's display). Every other case, and a format or value the fast
//! path cannot take (an invalid format, a timestamp out of chrono's range), goes to
//! DataFusion's implementation, so results and errors are DataFusion's.
//!
//! A format without fields finer than the second (`%Y-%m-%d`, `%H:%M`) gives the same text for
//! every value in one of its periods (a day, a minute), and a stream's values come in time
//! order: a value in the same period as the one before it takes that one's text again instead
//! of being formatted ([`period_seconds`]).

use std::fmt::Write;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, StringBuilder};
use arrow::datatypes::{
    ArrowTimestampType, DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow::temporal_conversions::as_datetime;
use chrono::format::{Fixed, Item, Numeric, StrftimeItems};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion_functions::datetime::to_char::ToCharFunc;

/// DataFusion's `to_char`, with a fast path (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash, Default)]
pub(super) struct ToChar {
    inner: ToCharFunc,
}

/// The function as the binder registers it.
pub(super) fn to_char() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ToChar::default()))
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let [ColumnarValue::Array(values), ColumnarValue::Scalar(ScalarValue::Utf8(Some(f)))] =
            &args.args[..]
        {
            if let Some(out) = format_naive_timestamps(values, f) {
                return Ok(ColumnarValue::Array(out));
            }
        }
        self.inner.invoke_with_args(args)
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// `values` formatted with `format`, if they are timestamps without a time zone, the format
/// parses, and every value is in chrono's range; otherwise None.
fn format_naive_timestamps(values: &ArrayRef, format: &str) -> Option<ArrayRef> {
    let DataType::Timestamp(unit, None) = values.data_type() else { return None };
    let items = StrftimeItems::new(format).parse_to_owned().ok()?;
    match unit {
        TimeUnit::Second => format_as::<TimestampSecondType>(values.as_primitive(), &items),
        TimeUnit::Millisecond => {
            format_as::<TimestampMillisecondType>(values.as_primitive(), &items)
        }
        TimeUnit::Microsecond => {
            format_as::<TimestampMicrosecondType>(values.as_primitive(), &items)
        }
        TimeUnit::Nanosecond => format_as::<TimestampNanosecondType>(values.as_primitive(), &items),
    }
}

/// How many seconds, counted from the epoch in whole periods, share the text of `items`: a
/// day when the finest field is the date's, an hour, a minute or a second; None when a field
/// reads a fraction of a second, a zone or anything else.
fn period_seconds(items: &[Item<'_>]) -> Option<i64> {
    let mut period = 86_400;
    for item in items {
        let finest = match item {
            Item::Literal(_) | Item::OwnedLiteral(_) | Item::Space(_) | Item::OwnedSpace(_) => {
                continue
            }
            Item::Numeric(n, _) => match n {
                Numeric::Year
                | Numeric::YearDiv100
                | Numeric::YearMod100
                | Numeric::IsoYear
                | Numeric::IsoYearDiv100
                | Numeric::IsoYearMod100
                | Numeric::Quarter
                | Numeric::Month
                | Numeric::Day
                | Numeric::WeekFromSun
                | Numeric::WeekFromMon
                | Numeric::IsoWeek
                | Numeric::NumDaysFromSun
                | Numeric::WeekdayFromMon
                | Numeric::Ordinal => 86_400,
                Numeric::Hour | Numeric::Hour12 => 3_600,
                Numeric::Minute => 60,
                Numeric::Second | Numeric::Timestamp => 1,
                _ => return None,
            },
            Item::Fixed(f) => match f {
                Fixed::ShortMonthName
                | Fixed::LongMonthName
                | Fixed::ShortWeekdayName
                | Fixed::LongWeekdayName => 86_400,
                Fixed::LowerAmPm | Fixed::UpperAmPm => 3_600,
                _ => return None,
            },
            Item::Error => return None,
        };
        period = period.min(finest);
    }
    Some(period)
}

fn format_as<T: ArrowTimestampType>(
    values: &PrimitiveArray<T>,
    items: &[Item<'static>],
) -> Option<ArrayRef> {
    let per_second: i64 = match T::UNIT {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    // Values per period of equal text (None: every value is formatted).
    let period = period_seconds(items).map(|p| p * per_second);
    let mut last: Option<(i64, String)> = None;
    let mut out = StringBuilder::with_capacity(values.len(), values.len() * 16);
    for (i, v) in values.values().iter().enumerate() {
        if values.is_null(i) {
            out.append_null();
            continue;
        }
        let Some(p) = period else {
            let naive = as_datetime::<T>(*v)?;
            // Written straight into the builder's value buffer, then committed.
            write!(out, "{}", naive.format_with_items(items.iter())).ok()?;
            out.append_value("");
            continue;
        };
        let at = v.div_euclid(p);
        match &mut last {
            Some((k, text)) if *k == at => out.append_value(&*text),
            _ => {
                let naive = as_datetime::<T>(*v)?;
                let mut text = String::new();
                write!(text, "{}", naive.format_with_items(items.iter())).ok()?;
                out.append_value(&text);
                last = Some((at, text));
            }
        }
    }
    Some(Arc::new(out.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{TimestampMillisecondArray, TimestampNanosecondArray};
    use arrow::datatypes::Field;
    use datafusion_common::config::ConfigOptions;

    fn call(f: &dyn ScalarUDFImpl, values: ArrayRef, format: &str) -> Result<ArrayRef> {
        let args = ScalarFunctionArgs {
            arg_fields: vec![
                Arc::new(Field::new("t", values.data_type().clone(), true)),
                Arc::new(Field::new("f", DataType::Utf8, false)),
            ],
            number_rows: values.len(),
            args: vec![
                ColumnarValue::Array(values),
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(format.into()))),
            ],
            return_field: Arc::new(Field::new("to_char", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        f.invoke_with_args(args)?.into_array(1)
    }

    #[test]
    fn gives_datafusions_answers() {
        let millis: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![
            Some(0),
            None,
            Some(1_586_952_120_123),
            Some(-86_400_001),
            Some(253_402_300_799_999),
        ]));
        let nanos: ArrayRef =
            Arc::new(TimestampNanosecondArray::from(vec![Some(1_586_952_120_123_456_789), None]));
        let formats = ["%Y-%m-%d", "%H:%M", "%Y-%m-%d %H:%M:%S%.3f", "day %j, %A %B", "%%", ""];
        for values in [millis, nanos] {
            for format in formats {
                let ours = call(&ToChar::default(), values.clone(), format).unwrap();
                let theirs = call(&ToCharFunc::new(), values.clone(), format).unwrap();
                assert_eq!(ours.as_string::<i32>(), theirs.as_string::<i32>(), "{format}");
            }
        }
    }

    /// Values in time order, close together and across days, minutes and seconds, before
    /// and after the epoch: each format's text is DataFusion's, whether a value takes the text
    /// of the one before it or is formatted.
    #[test]
    fn repeated_periods_give_datafusions_answers() {
        use arrow::array::TimestampMicrosecondArray;
        let mut t = -86_400_000_000i64 - 7;
        let mut values = Vec::new();
        for step in [1, 999_999, 1, 59_000_000, 1, 3_600_000_000, 13, 86_399_999_999, 1] {
            for _ in 0..3 {
                values.push(Some(t));
                t += step;
            }
            values.push(None);
        }
        let values: ArrayRef = Arc::new(TimestampMicrosecondArray::from(values));
        let formats =
            ["%Y-%m-%d", "%H:%M", "%H:%M:%S", "%I %p", "%A %B %j", "%s", "%H:%M:%S%.6f", "%f", "x"];
        for format in formats {
            let ours = call(&ToChar::default(), values.clone(), format).unwrap();
            let theirs = call(&ToCharFunc::new(), values.clone(), format).unwrap();
            assert_eq!(ours.as_string::<i32>(), theirs.as_string::<i32>(), "{format}");
        }
        let items = |f: &str| StrftimeItems::new(f).parse_to_owned().unwrap();
        assert_eq!(period_seconds(&items("%Y-%m-%d")), Some(86_400));
        assert_eq!(period_seconds(&items("%H:%M")), Some(60));
        assert_eq!(period_seconds(&items("%H:%M:%S%.3f")), None);
    }

    #[test]
    fn formats_it_cannot_take_give_datafusions_errors() {
        let values: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![Some(0)]));
        for format in ["%Q", "%"] {
            let ours = call(&ToChar::default(), values.clone(), format).map_err(|e| e.to_string());
            let theirs =
                call(&ToCharFunc::new(), values.clone(), format).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{format}");
            assert!(ours.is_err(), "{format}");
        }
    }

    #[test]
    fn the_fast_path_is_taken_for_naive_timestamps_only() {
        let values: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![Some(0)]));
        assert!(format_naive_timestamps(&values, "%Y").is_some());
        let zoned: ArrayRef =
            Arc::new(TimestampMillisecondArray::from(vec![Some(0)]).with_timezone("+02:00"));
        assert!(format_naive_timestamps(&zoned, "%Y").is_none());
        assert!(format_naive_timestamps(&values, "%Q").is_none());
    }
}
