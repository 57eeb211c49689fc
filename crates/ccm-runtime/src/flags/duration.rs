//! Durations written as Go writes them (`15s`, `5m0s`, `1h30m`, `100ms`, `1.5s`), so flag
//! values copied from a Go CCM's Deployment parse unchanged.

use std::time::Duration;

/// Parses a Go duration string (Go's `time.ParseDuration`, for non-negative values).
///
/// ```
/// use std::time::Duration;
/// use ccm_runtime::flags::duration::parse_go_duration;
/// assert_eq!(parse_go_duration("5m0s"), Ok(Duration::from_secs(300)));
/// assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
/// assert!(parse_go_duration("10").is_err());
/// ```
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let err = || {
        format!(
            "invalid duration {s:?}: expected a number and a unit (ns, us, ms, s, m, h), e.g. 10s or 1m30s"
        )
    };
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(err());
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        total += value * seconds_per_unit;
    }
    // Go's limit: an int64 of nanoseconds, about 292 years.
    if !total.is_finite() || total > 9_223_372_036.854_775 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration as Go prints it (`5m0s`, `10s`, `1h0m0s`, `500ms`), for `--help`.
pub fn format_go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let ms = d.as_secs_f64() * 1e3;
        return if ms.fract() == 0.0 {
            format!("{ms}ms")
        } else {
            format!("{}s", d.as_secs_f64())
        };
    }
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let frac = d.subsec_nanos();
    let secs = if frac == 0 {
        s.to_string()
    } else {
        format!("{}", s as f64 + f64::from(frac) / 1e9)
    };
    if h > 0 {
        format!("{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{m}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_prints() {
        for (s, want) in [
            ("15s", Duration::from_secs(15)),
            ("2s", Duration::from_secs(2)),
            ("10s", Duration::from_secs(10)),
            ("5m", Duration::from_secs(300)),
            ("12h0m0s", Duration::from_secs(12 * 3600)),
            ("100ms", Duration::from_millis(100)),
            ("250us", Duration::from_micros(250)),
            ("1h2m3s", Duration::from_secs(3723)),
            ("+3s", Duration::from_secs(3)),
        ] {
            assert_eq!(parse_go_duration(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for s in ["", "s", "10", "-1s", "1x", "1.2.3s", "ms10"] {
            assert!(parse_go_duration(s).is_err(), "{s}");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(format_go_duration(Duration::from_secs(15)), "15s");
        assert_eq!(
            format_go_duration(Duration::from_secs(12 * 3600)),
            "12h0m0s"
        );
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        for d in [300, 15, 43200, 3723] {
            let d = Duration::from_secs(d);
            assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d));
        }
    }
}
