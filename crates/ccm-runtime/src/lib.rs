//! The machinery, controllers and binary behind [`ccm-core`](https://docs.rs/ccm-core).
//!
//! **Not meant for direct use**: depend on `ccm-core`, which re-exports what providers,
//! provider binaries and custom controllers need, and keeps that surface stable. This
//! crate's own public items exist for `ccm-core` and for the framework's tests; they change
//! without notice between releases.
//!
//! Four layers, each using only the ones below it and [`ccm_provider`] (the provider
//! surface), which is checked by a test (`tests/layers.rs`, which also refuses an import
//! circle between the modules of one layer):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | machinery | [`client`], [`informer`], [`workqueue`], [`events`], [`metrics`], [`instrumented`], [`shadow`], [`flags`], `files` | what every controller runs on: the Kubernetes client layer, shared informers, the work queue and worker pool, the event recorder, the Prometheus registry, the one provider wrapper, shadow mode's dry runs and plan, Go's flag syntax, reading the files flags name |
//! | controllers | [`controllers`] | cloud-node, cloud-node-lifecycle, service, route: pure decisions, I/O at the edges |
//! | serving | [`serving`] | the endpoint server: `/healthz`, `/livez`, `/readyz`, `/metrics`, TLS, delegated authentication and authorization, their flags |
//! | app | [`app`] | the binary: flags, controller registration and selection, leader election, startup and shutdown |
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

/// Builder setters, written as their signatures without `self`: each
/// `$(#[attr])* vis fn with_x(field: Type);` becomes a method that sets `self.field` and
/// returns `self` (`field: impl Into<T>` converts first). Doc comments and attributes such
/// as `#[must_use]` go on the method. Defined before the modules, so every one can use it.
macro_rules! setters {
    () => {};
    ($(#[$attr:meta])* $vis:vis fn $setter:ident($field:ident: impl Into<$ty:ty>); $($rest:tt)*) => {
        $(#[$attr])*
        $vis fn $setter(mut self, $field: impl Into<$ty>) -> Self {
            self.$field = $field.into();
            self
        }
        setters!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis fn $setter:ident($field:ident: $ty:ty); $($rest:tt)*) => {
        $(#[$attr])*
        $vis fn $setter(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
        setters!($($rest)*);
    };
}

pub mod app;
pub mod client;
pub mod controllers;
pub mod events;
pub(crate) mod files;
pub mod flags;
pub mod informer;
pub mod instrumented;
pub mod logging;
pub mod metrics;
pub mod serving;
pub mod shadow;
pub mod workqueue;
