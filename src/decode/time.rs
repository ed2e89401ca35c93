//! RFC 3339 timestamps as the API server writes them (`2024-05-01T10:00:00.123456Z`), parsed
//! without allocation into microseconds since the Unix epoch.

use std::sync::Arc;

/// Parses an RFC 3339 timestamp into microseconds since the epoch. Accepts `Z` or a numeric
/// offset and 0–9 fraction digits. Returns `None` for anything else.
pub fn parse_rfc3339_micros(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let mut v = 0i64;
        for &c in &b[from..to] {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + (c - b'0') as i64;
        }
        Some(v)
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, min, sec) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut micros = 0i64;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 6 {
                micros = micros * 10 + (b[i] - b'0') as i64;
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return None;
        }
        for _ in digits.min(6)..6 {
            micros *= 10;
        }
    }
    let offset_secs = match b.get(i) {
        Some(b'Z') | Some(b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let off = num(i + 1, i + 3)? * 3600 + num(i + 4, i + 6)? * 60;
            if sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    Some(secs * 1_000_000 + micros)
}

/// Formats microseconds since the epoch as RFC 3339 UTC with microsecond precision.
pub fn format_rfc3339_micros(us: i64) -> String {
    match rfc3339_micros_text(us) {
        Ok(text) => String::from_utf8(text.to_vec()).expect("ASCII digits"),
        Err(text) => text,
    }
}

/// The same as an `Arc<str>` (a trace hop's time in every enriched event), in one allocation.
pub fn rfc3339_micros_arc(us: i64) -> Arc<str> {
    match rfc3339_micros_text(us) {
        Ok(text) => Arc::from(std::str::from_utf8(&text).expect("ASCII digits")),
        Err(text) => Arc::from(text),
    }
}

/// The text of a time in the years 0–9999, digit by digit on the stack (`format!` took ~1,700
/// instructions a time); other years formatted in full.
fn rfc3339_micros_text(us: i64) -> Result<[u8; 27], String> {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    if !(0..=9999).contains(&y) {
        return Err(format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{frac:06}Z"));
    }
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    for (at, width, n) in [(0, 4, y), (5, 2, m), (8, 2, d), (11, 2, hh), (14, 2, mm), (17, 2, ss), (20, 6, frac)] {
        let mut n = n;
        for c in text[at..at + width].iter_mut().rev() {
            *c = b'0' + (n % 10) as u8;
            n /= 10;
        }
    }
    Ok(text)
}

// Howard Hinnant's days-from-civil algorithm (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Why a time a person gave (a query parameter, `why --at`) is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GivenTimeError {
    /// Not of the form `2024-05-01T10:00:00Z`.
    #[error("is not an RFC 3339 time (like 2024-05-01T10:00:00Z)")]
    NotRfc3339,
    /// An offset beyond ±23:59.
    #[error("has the UTC offset {0}, which is no offset: they run from -23:59 to +23:59")]
    Offset(String),
    /// A day past the month's end.
    #[error("names day {day}, but {year:04}-{month:02} has {days} days")]
    Day {
        /// The year given.
        year: i64,
        /// The month given.
        month: i64,
        /// The day given.
        day: i64,
        /// The days of that month.
        days: i64,
    },
}

/// A time a person gave: RFC 3339 as [`parse_rfc3339_micros`] reads it, with its date and
/// UTC offset checked too. The decoder's fast path takes `+25:00` or February 31 as some
/// other time; from a person that is a mistake to point out, not a time to answer for.
pub fn parse_rfc3339_given(s: &str) -> Result<i64, GivenTimeError> {
    let us = parse_rfc3339_micros(s).ok_or(GivenTimeError::NotRfc3339)?;
    let b = s.as_bytes();
    let digits = |from: usize, to: usize| b[from..to].iter().fold(0i64, |v, c| v * 10 + i64::from(c - b'0'));
    let (year, month, day) = (digits(0, 4), digits(5, 7), digits(8, 10));
    let days = days_from_civil(year + month / 12, month % 12 + 1, 1) - days_from_civil(year, month, 1);
    if day > days {
        return Err(GivenTimeError::Day { year, month, day, days });
    }
    if !s.ends_with(['Z', 'z']) {
        // Parsed: the last six bytes are the offset, `+HH:MM` or `-HH:MM`.
        let n = b.len();
        if digits(n - 5, n - 3) > 23 || digits(n - 2, n) > 59 {
            return Err(GivenTimeError::Offset(s[n - 6..].to_string()));
        }
    }
    Ok(us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_apiserver_timestamps() {
        assert_eq!(parse_rfc3339_micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_micros("1970-01-01T00:00:01.5Z"), Some(1_500_000));
        assert_eq!(parse_rfc3339_micros("2018-10-26T13:07:36.911442Z"), Some(1_540_559_256_911_442));
        assert_eq!(parse_rfc3339_micros("2018-10-26T15:07:36.911442+02:00"), Some(1_540_559_256_911_442));
        assert_eq!(parse_rfc3339_micros("2018-10-26T13:07:36.911442123Z"), Some(1_540_559_256_911_442));
        assert_eq!(parse_rfc3339_micros("2018-10-26 13:07:36"), None);
        assert_eq!(parse_rfc3339_micros("not a time at all!!"), None);
        assert_eq!(parse_rfc3339_micros("2018-13-26T13:07:36Z"), None);
    }

    #[test]
    fn a_given_time_has_a_real_date_and_offset() {
        assert_eq!(parse_rfc3339_given("2024-05-01T12:00:00+02:00"), Ok(1_714_557_600_000_000));
        assert_eq!(
            parse_rfc3339_given("2024-02-29T00:00:00-23:59"),
            parse_rfc3339_micros("2024-02-29T00:00:00-23:59").ok_or(GivenTimeError::NotRfc3339)
        );
        assert_eq!(
            parse_rfc3339_given("2024-12-31T00:00:00z"),
            parse_rfc3339_micros("2024-12-31T00:00:00Z").ok_or(GivenTimeError::NotRfc3339)
        );
        assert_eq!(parse_rfc3339_given("2024-05-01T10:00:00+25:00"), Err(GivenTimeError::Offset("+25:00".into())));
        assert_eq!(parse_rfc3339_given("2024-05-01T10:00:00.5-00:60"), Err(GivenTimeError::Offset("-00:60".into())));
        assert_eq!(
            parse_rfc3339_given("2023-02-29T10:00:00Z"),
            Err(GivenTimeError::Day { year: 2023, month: 2, day: 29, days: 28 })
        );
        assert_eq!(
            parse_rfc3339_given("2024-04-31T10:00:00Z").unwrap_err().to_string(),
            "names day 31, but 2024-04 has 30 days"
        );
        assert_eq!(parse_rfc3339_given("yesterday"), Err(GivenTimeError::NotRfc3339));
    }

    #[test]
    fn formats_round_trip() {
        for s in ["2018-10-26T13:07:36.911442Z", "2000-02-29T23:59:59.000001Z", "1969-12-31T23:59:59.999999Z"] {
            let us = parse_rfc3339_micros(s).unwrap();
            assert_eq!(format_rfc3339_micros(us), s);
            assert_eq!(&*rfc3339_micros_arc(us), s);
        }
    }

    /// What `format!` writes, the way the text was made before it was written digit by digit.
    fn by_format(us: i64) -> String {
        let secs = us.div_euclid(1_000_000);
        let frac = us.rem_euclid(1_000_000);
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        let rem = secs.rem_euclid(86_400);
        format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z", rem / 3600, rem % 3600 / 60, rem % 60)
    }

    #[test]
    fn digit_by_digit_is_what_format_writes_at_the_edges() {
        let year = |y: i64| days_from_civil(y, 1, 1) * 86_400 * 1_000_000;
        for us in [
            0,
            -1,
            1,
            999_999,
            year(0),
            year(0) - 1,
            year(10_000) - 1,
            year(10_000),
            year(-5),
            year(12_345) + 7,
            i64::MIN / 2,
            i64::MAX / 2,
        ] {
            assert_eq!(format_rfc3339_micros(us), by_format(us), "{us}");
            assert_eq!(&*rfc3339_micros_arc(us), by_format(us), "{us}");
        }
    }

    proptest::proptest! {
        #[test]
        fn digit_by_digit_is_what_format_writes(us in -62_000_000_000_000_000i64..300_000_000_000_000_000) {
            proptest::prop_assert_eq!(format_rfc3339_micros(us), by_format(us));
        }
    }
}
