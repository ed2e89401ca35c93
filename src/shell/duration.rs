//! Durations in pipeline files are written the way people say them: `500ms`, `2s`, `10m`,
//! `1h`, or `0`. A bare number would leave the unit to guesswork.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A [`Duration`] read from a string such as `500ms`, `60s`, `10m`, `1h` or `0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

impl Span {
    /// `ms` milliseconds.
    pub const fn ms(ms: u64) -> Span {
        Span(Duration::from_millis(ms))
    }

    /// `s` seconds.
    pub const fn secs(s: u64) -> Span {
        Span(Duration::from_secs(s))
    }

    /// In microseconds, at most `i64::MAX`.
    pub fn as_micros_i64(self) -> i64 {
        i64::try_from(self.0.as_micros()).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Parses `500ms`, `1.5s`, `10m`, `1h`, `30d`, `250us`, or `0`.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration like 500ms, 2s, 10m, 1h"))?;
    let secs = match unit {
        "" if v == 0.0 => 0.0,
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        "" => return Err(format!("{s:?} has no unit: write e.g. {s}s or {s}ms")),
        _ => return Err(format!("{s:?}: the unit must be one of us, ms, s, m, h, d")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Span;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"500ms\", \"60s\" or \"10m\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Span, E> {
                parse(s).map(Span).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Span, E> {
                if v == 0 {
                    Ok(Span(Duration::ZERO))
                } else {
                    Err(E::custom(format!("{v} has no unit: write \"{v}s\" or \"{v}ms\"")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert!(parse("5w").unwrap_err().contains("unit must be"));
        assert!(parse("fast").is_err());
    }
}
