//! The generic controllers, each driving any [`CloudProvider`](ccm_provider::CloudProvider).
//!
//! Every controller keeps its decisions in pure functions (a `decision` module beside it)
//! and its I/O — the shared informers, patches, events, provider calls — at the edges.

pub(crate) mod debounce;
pub(crate) mod guarded_patch;
pub mod node;
pub mod node_ipam;
pub mod node_lifecycle;
pub(crate) mod node_util;
pub(crate) mod patch;
pub mod route;
pub mod service;
