//! A framework for Kubernetes cloud-controller-managers (CCMs), in Rust.
//!
//! A cloud provider implements the traits in [`provider`]; `ccm-core` supplies the generic
//! controllers that reconcile a cluster with the cloud (cloud-node, cloud-node-lifecycle,
//! service load balancers, routes) and, in [`app`](app/index.html), the controller manager that turns the
//! provider into a complete binary: Go's flags, leader election, `/healthz`, `/readyz` and
//! `/metrics`, graceful shutdown. It is the Rust counterpart of Go's
//! `k8s.io/cloud-provider`, and behaves like it unless the docs say otherwise, on purpose.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ccm_core::app::CloudControllerManager;
//! use ccm_core::provider::{CloudProvider, ProviderRegistry};
//!
//! struct MyCloud;
//! impl CloudProvider for MyCloud {
//!     fn provider_name(&self) -> &str { "my-cloud" }
//!     fn has_cluster_id(&self) -> bool { true }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     let mut registry = ProviderRegistry::new();
//!     registry.register("my-cloud", |_config| Ok(Arc::new(MyCloud) as Arc<dyn CloudProvider>)).unwrap();
//!     CloudControllerManager::new("my-cloud-controller-manager", registry).run()
//! }
//! ```
//!
//! # Layers
//!
//! | module | stability | what |
//! |---|---|---|
//! | [`provider`], [`well_known`], [`mock`](mock/index.html) | the stable surface (crate `ccm-provider`) | what a provider implements and tests with |
//! | [`app`](app/index.html) | stable entry points; internals private (crate `ccm-runtime`) | the controller manager, its options, custom controllers |
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `app` | yes | [`app`](app/index.html): the controllers and the binary around them (kube's runtime, clap, the HTTPS endpoint server, tracing-subscriber). Without it `ccm-core` is the provider surface alone, for crates that only implement the traits |
//! | `mock` | no | [`mock`](mock/index.html): `mockall` mocks of every provider trait and `MockCloud` to compose them |
//!
//! # Kubernetes versions
//!
//! Like every library built on `k8s-openapi`, `ccm-core` enables no Kubernetes version
//! feature of its own: the binary that uses it picks one, e.g.
//! `k8s-openapi = { version = "0.29", features = ["v1_36"] }`.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod provider;

#[doc(inline)]
pub use ccm_provider::well_known;

/// The token [`provider::InitContext::shutdown`] is, and custom controllers stop on.
#[doc(no_inline)]
pub use ccm_provider::CancellationToken;
/// The attribute every `impl` of a provider trait needs, at the traits' version:
/// `#[ccm_core::async_trait]`. Without it the compiler's error is E0195, "lifetime
/// parameters or bounds on method … do not match the trait declaration".
#[doc(no_inline)]
pub use ccm_provider::async_trait;
/// The k8s-openapi crate whose types the traits take: `ccm_core::k8s_openapi::api::core::v1::Node`.
/// The binary still enables one Kubernetes version feature on its own `k8s-openapi`
/// dependency (see "Kubernetes versions" above).
#[doc(no_inline)]
pub use ccm_provider::k8s_openapi;
/// The kube crate `ccm-core` is built on (`InitContext::client`, `app::ControllerContext`),
/// so a provider names the same version: `ccm_core::kube::Api`.
#[doc(no_inline)]
pub use ccm_provider::kube;

#[cfg(feature = "mock")]
#[cfg_attr(docsrs, doc(cfg(feature = "mock")))]
#[doc(inline)]
pub use ccm_provider::mock;

#[cfg(feature = "app")]
#[cfg_attr(docsrs, doc(cfg(feature = "app")))]
pub mod app;
