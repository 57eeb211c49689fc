//! One way to echo a value someone else wrote into a log line, an event or an error.
//!
//! Annotations, labels, names and a cloud's error bodies are written by users and remote
//! servers; an annotation may hold 256 KiB, and a message quoting it is written again on
//! every retry. [`echo`] wraps such a value so that it prints at most [`MAX_ECHO_BYTES`]
//! (cut on a character boundary, ending with `…(N more bytes)` so the reader knows), and
//! [`cut`] bounds a whole message the same way. Every value the controllers echo goes
//! through one of the two.

use std::fmt;

/// The most of one echoed value that is printed: 256 bytes (a Kubernetes name or label
/// value fits whole; an IP list, a CIDR list or a hostname that long is already wrong).
pub const MAX_ECHO_BYTES: usize = 256;

/// `value`, to be printed with `{}` or quoted with `{:?}`, cut to [`MAX_ECHO_BYTES`].
///
/// ```
/// use ccm_core::provider::echo::echo;
/// assert_eq!(format!("{:?}", echo("10.0.0.1")), "\"10.0.0.1\"");
/// let long = "1".repeat(250_000);
/// let line = format!("bad IP {:?}", echo(&long));
/// assert!(line.len() < 300);
/// assert!(line.ends_with("\"…(249766 more bytes)"), "{line}");
/// ```
#[must_use]
pub fn echo(value: &str) -> Echo<'_> {
    Echo::new(value, MAX_ECHO_BYTES)
}

/// A value printed with a bound; see [`echo`].
#[derive(Clone, Copy)]
pub struct Echo<'a> {
    kept: &'a str,
    more: usize,
}

impl<'a> Echo<'a> {
    /// `value`, printed in at most `max_bytes` with `{}` (the kept part and the
    /// `…(N more bytes)` note together), or that plus quotes and escapes with `{:?}`.
    #[must_use]
    pub fn new(value: &'a str, max_bytes: usize) -> Self {
        if value.len() <= max_bytes {
            return Self {
                kept: value,
                more: 0,
            };
        }
        // The note is longest for the largest count, so reserving its length for
        // `value.len()` keeps the whole within `max_bytes`.
        let mut at = max_bytes.saturating_sub(note_len(value.len()));
        while !value.is_char_boundary(at) {
            at -= 1;
        }
        Self {
            kept: &value[..at],
            more: value.len() - at,
        }
    }

    /// Whether the value was cut.
    #[must_use]
    pub fn is_cut(&self) -> bool {
        self.more > 0
    }

    fn note(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.more > 0 {
            write!(f, "…({} more bytes)", self.more)?;
        }
        Ok(())
    }
}

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kept)?;
        self.note(f)
    }
}

impl fmt::Debug for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.kept, f)?;
        self.note(f)
    }
}

/// `text` cut to at most `max_bytes` (the note included), as [`Echo`] prints it: for a
/// whole message (an event's, an error's) that quotes values of any size.
///
/// ```
/// use ccm_core::provider::echo::cut;
/// assert_eq!(cut("short".to_owned(), 64), "short");
/// let long = cut("é".repeat(100), 64);
/// assert!(long.len() <= 64);
/// assert!(long.ends_with("…(156 more bytes)"), "{long}");
/// ```
#[must_use]
pub fn cut(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    Echo::new(&text, max_bytes).to_string()
}

/// The length of `…(N more bytes)` for `n`.
fn note_len(n: usize) -> usize {
    "…( more bytes)".len() + n.to_string().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_print_whole() {
        assert_eq!(echo("a").to_string(), "a");
        assert_eq!(format!("{:?}", echo("a\"b")), "\"a\\\"b\"");
        assert!(!echo(&"x".repeat(MAX_ECHO_BYTES)).is_cut());
    }

    #[test]
    fn long_values_are_cut_within_the_bound_on_a_character_boundary() {
        for len in [MAX_ECHO_BYTES + 1, 1000, 250_000, 10_000_000] {
            for unit in ["x", "é", "日本"] {
                let value = unit.repeat(len / unit.len() + 1);
                let shown = echo(&value).to_string();
                assert!(
                    shown.len() <= MAX_ECHO_BYTES,
                    "{len} {unit}: {}",
                    shown.len()
                );
                let (kept, note) = shown.split_once('…').unwrap();
                assert!(value.starts_with(kept));
                assert_eq!(note, format!("({} more bytes)", value.len() - kept.len()));
            }
        }
    }

    #[test]
    fn tiny_bounds_keep_only_the_note() {
        let shown = Echo::new("abcdef", 3).to_string();
        assert_eq!(shown, "…(6 more bytes)");
        assert_eq!(cut("abcdef".to_owned(), 6), "abcdef");
    }
}
