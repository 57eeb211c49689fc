//! Flag values written as Go's `pflag` and the Kubernetes flag types parse them, so an
//! argument list copied from a Go cloud-controller-manager's Deployment parses unchanged:
//! booleans as `strconv.ParseBool`, integers as `strconv.ParseInt` with base prefixes,
//! string lists as pflag's `stringSlice` (one CSV record), and the few Kubernetes types
//! (`mapStringBool`, `quantity`, klog's `pattern=N,...`, `namedCertKey`) checked for their
//! syntax. Each parser is a clap value parser: it returns the value or a message that clap
//! prints after the flag's name.

use std::net::IpAddr;

/// Go's `strconv.ParseBool`: `1 t T TRUE true True` and `0 f F FALSE false False`.
pub(crate) fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean {s:?}: expected 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False"
        )),
    }
}

/// Go's `strconv.ParseInt(s, 0, bits)`: an optional sign, then decimal, `0x`/`0X` hex,
/// `0o`/`0O` or a leading `0` octal, `0b`/`0B` binary, with `_` between digits.
pub(crate) fn go_int(s: &str, bits: u32) -> Result<i64, String> {
    let err = || format!("invalid integer {s:?}: expected a {bits}-bit integer, e.g. 10");
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Underscores only between digits; a base prefix counts as a digit (Go's `underscoreOK`).
    if digits.contains('_') {
        let spelled = if prefixed && radix != 8 || lower.starts_with("0o") {
            format!("0{digits}")
        } else {
            lower.clone()
        };
        if spelled.starts_with('_') || spelled.ends_with('_') || spelled.contains("__") {
            return Err(err());
        }
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || clean.starts_with(['+', '-']) {
        return Err(err());
    }
    let magnitude = u64::from_str_radix(&clean, radix).map_err(|_| err())?;
    let max = 1u64 << (bits - 1);
    if neg {
        if magnitude > max {
            return Err(err());
        }
        Ok(0i64.wrapping_sub_unsigned(magnitude))
    } else if magnitude >= max {
        Err(err())
    } else {
        i64::try_from(magnitude).map_err(|_| err())
    }
}

/// A Go `int32` flag.
pub(crate) fn go_int32(s: &str) -> Result<i32, String> {
    go_int(s, 32).and_then(|v| i32::try_from(v).map_err(|e| e.to_string()))
}

/// A Go `int` flag (64 bits on the platforms Kubernetes runs on), kept as `i32` when the
/// value fits: every such flag of the CCM is a port or a count.
pub(crate) fn go_int_as_i32(s: &str) -> Result<i32, String> {
    let v = go_int(s, 64)?;
    i32::try_from(v).map_err(|_| format!("{v} is out of range"))
}

/// Go's `strconv.ParseFloat(s, 32)` for decimal numbers, `inf` and `nan` (not hex floats).
pub(crate) fn go_float32(s: &str) -> Result<f32, String> {
    s.parse::<f32>()
        .map_err(|_| format!("invalid number {s:?}: expected e.g. 20 or 0.5"))
}

/// klog's `-v` level: `strconv.ParseInt(s, 10, 32)`; negative levels log as 0, levels above
/// 255 as 255 (every level above 6 means trace here).
pub(crate) fn klog_level(s: &str) -> Result<u8, String> {
    let v = s
        .parse::<i32>()
        .map_err(|_| format!("invalid level {s:?}: expected an integer, e.g. 2"))?;
    Ok(u8::try_from(v.clamp(0, 255)).unwrap_or(u8::MAX))
}

/// pflag's `stringSlice`: one CSV record (`a,b`, `"a,b",c`); empty is the empty list.
pub(crate) fn go_string_slice(s: &str) -> Result<Vec<String>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let err = |why: &str| format!("invalid list {s:?}: {why}");
    let mut out = Vec::new();
    let mut field = String::new();
    let mut chars = s.chars().peekable();
    loop {
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(err("a quoted field is not closed")),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                }
            }
            match chars.next() {
                None => {
                    out.push(std::mem::take(&mut field));
                    return Ok(out);
                }
                Some(',') => out.push(std::mem::take(&mut field)),
                Some(_) => return Err(err("extraneous text after a quoted field")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        out.push(std::mem::take(&mut field));
                        return Ok(out);
                    }
                    Some(',') => {
                        out.push(std::mem::take(&mut field));
                        break;
                    }
                    Some('"') => return Err(err("a bare \" in an unquoted field")),
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

/// A `stringSlice` flag's value, checked and kept as written.
pub(crate) fn go_string_slice_flag(s: &str) -> Result<String, String> {
    go_string_slice(s).map(|_| s.to_owned())
}

/// pflag's `int32Slice`: comma-separated `int32`s; empty is the empty list.
pub(crate) fn go_int32_slice(s: &str) -> Result<String, String> {
    for item in go_string_slice(s)? {
        go_int(item.trim(), 32)?;
    }
    Ok(s.to_owned())
}

/// pflag's `ip`: `net.ParseIP` of the trimmed value.
pub(crate) fn go_ip(s: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("invalid IP address {s:?}"))
}

/// Kubernetes' `resource.Quantity`: a decimal number with an optional binary (`Ki` … `Ei`),
/// decimal (`n u m k M G T P E`) or exponent (`e3`) suffix, e.g. `0`, `64Ki`, `1.5M`.
pub(crate) fn quantity(s: &str) -> Result<String, String> {
    let err = || format!("invalid quantity {s:?}: expected e.g. 0, 64Ki or 1M");
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let num_len = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_len);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(err());
    }
    let exponent_ok = |e: &str| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    };
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent_ok);
    if suffix_ok {
        Ok(s.to_owned())
    } else {
        Err(err())
    }
}

/// klog's `--vmodule`: `pattern=N` entries separated by commas; empty for none.
pub(crate) fn vmodule(s: &str) -> Result<Vec<(String, i32)>, String> {
    let mut out = Vec::new();
    for entry in s.split(',').filter(|e| !e.is_empty()) {
        let (pattern, level) = entry
            .split_once('=')
            .filter(|(p, _)| !p.is_empty())
            .ok_or_else(|| {
                format!("invalid entry {entry:?}: expected pattern=N, e.g. node_controller=4")
            })?;
        let level = level.parse::<i32>().map_err(|_| {
            format!("invalid entry {entry:?}: expected pattern=N, e.g. node_controller=4")
        })?;
        out.push((pattern.to_owned(), level));
    }
    Ok(out)
}

/// `--vmodule`'s value, checked and kept as written.
pub(crate) fn vmodule_flag(s: &str) -> Result<String, String> {
    vmodule(s).map(|_| s.to_owned())
}

/// Kubernetes' `namedCertKey`: `certfile,keyfile` optionally followed by `:name,name`.
pub(crate) fn named_cert_key(s: &str) -> Result<String, String> {
    let files = s.split_once(':').map_or(s, |(files, _)| files);
    let parts: Vec<_> = files.split(',').map(str::trim).collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "invalid {s:?}: expected comma separated certificate and key file paths, e.g. tls.crt,tls.key"
        ));
    }
    Ok(s.to_owned())
}

/// A string flag's value kept as written (for flags whose value is accepted and ignored).
pub(crate) fn any_string(s: &str) -> Result<String, String> {
    Ok(s.to_owned())
}

/// `--version`: Go's `verflag`: a boolean as `strconv.ParseBool`, `raw`, or `vX.Y.Z` (which
/// sets the version Go reports; accepted and ignored here).
pub(crate) fn version_flag(s: &str) -> Result<VersionFlag, String> {
    if s == "raw" {
        return Ok(VersionFlag::Raw);
    }
    if let Some(rest) = s.strip_prefix('v') {
        let core = rest.split(['-', '+']).next().unwrap_or_default();
        let parts: Vec<_> = core.split('.').collect();
        if parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Ok(VersionFlag::Set(s.to_owned()));
        }
        return Err(format!(
            "invalid version {s:?}: expected vMAJOR.MINOR.PATCH"
        ));
    }
    go_bool(s)
        .map(|b| {
            if b {
                VersionFlag::Print
            } else {
                VersionFlag::Off
            }
        })
        .map_err(|_| format!("invalid value {s:?}: expected a boolean, raw, or vX.Y.Z"))
}

/// What `--version` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum VersionFlag {
    /// Not given, or false: run.
    Off,
    /// `--version`: print the version and exit.
    Print,
    /// `--version=raw`: print every version field and exit.
    Raw,
    /// `--version=vX.Y.Z`: Go reports that version; accepted and ignored.
    Set(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bools_as_strconv_parses_them() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_bool(t), Ok(true));
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_bool(f), Ok(false));
        }
        for x in ["", "yes", "tRUE", "2"] {
            assert!(go_bool(x).is_err(), "{x}");
        }
    }

    #[test]
    fn ints_as_go_parses_them() {
        for (s, want) in [
            ("10", 10),
            ("-1", -1),
            ("+7", 7),
            ("0x10", 16),
            ("0X1f", 31),
            ("010", 8),
            ("0o17", 15),
            ("0b101", 5),
            ("1_000", 1000),
            ("0x_10", 16),
            ("0", 0),
            ("2147483647", 2_147_483_647),
            ("-2147483648", -2_147_483_648),
        ] {
            assert_eq!(go_int(s, 32), Ok(want), "{s}");
        }
        for s in [
            "",
            "x",
            "1.5",
            "2147483648",
            "-2147483649",
            "1__0",
            "_1",
            "1_",
            "08",
            "0x",
            "--1",
            "+-1",
            " 1",
            "1e3",
        ] {
            assert!(go_int(s, 32).is_err(), "{s}");
        }
        assert_eq!(go_int("9223372036854775807", 64), Ok(i64::MAX));
        assert_eq!(go_int("-9223372036854775808", 64), Ok(i64::MIN));
        assert!(go_int("9223372036854775808", 64).is_err());
    }

    #[test]
    fn string_slices_as_pflag_reads_them() {
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(go_string_slice(""), Ok(s(&[])));
        assert_eq!(go_string_slice("a"), Ok(s(&["a"])));
        assert_eq!(go_string_slice("a,b"), Ok(s(&["a", "b"])));
        assert_eq!(go_string_slice("a,,b"), Ok(s(&["a", "", "b"])));
        assert_eq!(go_string_slice("\"a,b\",c"), Ok(s(&["a,b", "c"])));
        assert_eq!(go_string_slice("\"a\"\"b\""), Ok(s(&["a\"b"])));
        for bad in ["a\"b", "\"a", "\"a\"b"] {
            assert!(go_string_slice(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kubernetes_types() {
        for ok in ["0", "64Ki", "1M", "1.5Gi", "1e3", "+2", ".5", "100m"] {
            assert!(quantity(ok).is_ok(), "{ok}");
        }
        for bad in ["", "x", "1.2.3", "1KB", "Ki", "1e"] {
            assert!(quantity(bad).is_err(), "{bad}");
        }
        assert_eq!(
            vmodule("node*=4,route=2"),
            Ok(vec![("node*".into(), 4), ("route".into(), 2)])
        );
        assert!(vmodule("node").is_err());
        assert!(vmodule("=2").is_err());
        assert!(vmodule("a=x").is_err());
        assert!(named_cert_key("a.crt,a.key:example.com").is_ok());
        assert!(named_cert_key("a.crt").is_err());
        assert_eq!(klog_level("-3"), Ok(0));
        assert_eq!(klog_level("300"), Ok(255));
        assert!(klog_level("0x3").is_err());
        assert_eq!(version_flag("T"), Ok(VersionFlag::Print));
        assert_eq!(version_flag("raw"), Ok(VersionFlag::Raw));
        assert_eq!(version_flag("0"), Ok(VersionFlag::Off));
        assert!(version_flag("v1.2").is_err());
        assert!(version_flag("maybe").is_err());
    }
}
