//! The generic controllers, each driving any [`CloudProvider`](ccm_provider::CloudProvider).
//!
//! Every controller keeps its decisions in pure functions (a `decision` module beside it)
//! and its I/O — the shared informers, patches, events, provider calls — at the edges.

pub(crate) mod debounce;
pub(crate) mod guarded_patch;
pub mod node;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod node_ownership;
pub(crate) mod node_util;
pub(crate) mod patch;
pub mod route;
pub mod service;

/// Whether `s` is a DNS subdomain as Kubernetes validates one (RFC 1123): dot-separated
/// labels of lowercase letters, digits and `-`, 1 to 63 characters each, not starting or
/// ending with `-`; 253 characters at most.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `s` is a label value or the name part of a qualified name (a label key's,
/// a finalizer's) as Kubernetes validates one: 1 to 63 characters of `[A-Za-z0-9._-]`,
/// starting and ending alphanumeric. (An empty label value is allowed; callers check it.)
pub(crate) fn is_label_name(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}
