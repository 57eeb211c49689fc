//! The machinery, controllers and binary behind [`ccm-core`](https://docs.rs/ccm-core).
//!
//! **Not meant for direct use**: depend on `ccm-core`, which re-exports what providers,
//! provider binaries and custom controllers need, and keeps that surface stable. This
//! crate's own public items exist for `ccm-core` and for the framework's tests; they change
//! without notice between releases.
//!
//! Three layers, each using only the ones below it and [`ccm_provider`] (the provider
//! surface), which is checked by a test (`tests/layers.rs`):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | machinery | [`client`], [`informer`], [`workqueue`], [`events`], [`metrics`], [`instrumented`], `files` | what every controller runs on: the Kubernetes client layer, reading the files flags name, shared informers, the work queue and worker pool, the event recorder, the Prometheus registry, the instrumented provider |
//! | controllers | [`controllers`] | cloud-node, cloud-node-lifecycle, service, route: pure decisions, I/O at the edges |
//! | app | [`app`] | the binary: flags, controller registration and selection, leader election, the endpoint server, startup and shutdown |
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod client;
pub mod controllers;
pub mod events;
pub(crate) mod files;
pub mod informer;
pub mod instrumented;
pub mod metrics;
pub mod workqueue;
