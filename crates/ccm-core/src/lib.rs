//! A framework for Kubernetes cloud-controller-managers (CCMs), in Rust.
//!
//! A cloud provider implements the traits in [`provider`]; `ccm-core` supplies the generic
//! controllers that reconcile a cluster with the cloud (cloud-node, cloud-node-lifecycle,
//! service load balancers, routes) and the app layer that turns the provider into a complete
//! controller-manager binary. It is the Rust counterpart of Go's `k8s.io/cloud-provider`,
//! and behaves like it unless the docs say otherwise, on purpose.
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | [`mock`]: `mockall` mocks of every provider trait and `MockCloud` to compose them |
//!
//! # Kubernetes versions
//!
//! Like every library built on `k8s-openapi`, `ccm-core` enables no Kubernetes version
//! feature of its own: the binary that uses it picks one, e.g.
//! `k8s-openapi = { version = "0.29", features = ["v1_36"] }`.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod client;
pub mod controllers;
pub mod events;
pub mod informer;
pub mod metrics;
pub mod provider;
pub mod runtime;
pub mod well_known;

#[cfg(any(test, feature = "mock"))]
#[cfg_attr(docsrs, doc(cfg(feature = "mock")))]
pub mod mock;
