//! The provider surface of [`ccm-core`](https://docs.rs/ccm-core): what a cloud implements
//! so the generic controllers of a cloud-controller-manager can drive it.
//!
//! Provider crates normally name `ccm-core` in their `Cargo.toml` and use this crate as
//! `ccm_core::provider`; with `default-features = false`, `ccm-core` is only this surface
//! (no controllers, no clap, no HTTP server), which is all a crate that implements and
//! unit-tests the traits needs. This crate depends on nothing else of ours, and is the part
//! of the framework that changes least.
//!
//! A provider is one type implementing [`CloudProvider`]. Each optional capability —
//! [`Instances`], [`LegacyInstances`], [`Zones`], [`LoadBalancer`], [`Routes`],
//! [`Clusters`] — is a trait of its own, reached through an accessor that returns `None`
//! when the cloud does not support it; a controller whose capability is missing does not
//! start. This is Go's `cloudprovider.Interface` with `(impl, bool)` turned into `Option`.
//!
//! **Every `impl` of a provider trait needs `#[async_trait]`** (re-exported as
//! [`async_trait`](macro@async_trait)); without it the compiler says E0195, "lifetime parameters or bounds on
//! method … do not match the trait declaration", and nothing about the attribute.
//!
//! Every call is `async` and takes `&self`: the controllers call a provider from many tasks
//! at once, so implementations are `Send + Sync` and keep their own interior state behind
//! locks. A call may be cancelled by dropping its future (on shutdown, or when leadership is
//! lost), so a provider should not leave a half-made cloud resource it cannot find again:
//! name or tag what it creates so the next call finds it.
//!
//! ```
//! use ccm_core::provider::{CloudProvider, CloudResult, InstanceMetadata, Instances};
//! use k8s_openapi::api::core::v1::Node;
//!
//! struct MyCloud;
//!
//! #[async_trait::async_trait]
//! impl Instances for MyCloud {
//!     async fn instance_exists(&self, _node: &Node) -> CloudResult<bool> { Ok(true) }
//!     async fn instance_shutdown(&self, _node: &Node) -> CloudResult<bool> { Ok(false) }
//!     async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
//!         let name = node.metadata.name.as_deref().unwrap_or_default();
//!         Ok(Some(InstanceMetadata::new(format!("my-cloud://{name}"))))
//!     }
//! }
//!
//! impl CloudProvider for MyCloud {
//!     fn provider_name(&self) -> &str { "my-cloud" }
//!     fn has_cluster_id(&self) -> bool { true }
//!     fn instances(&self) -> Option<&dyn Instances> { Some(self) }
//! }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod annotator;
mod config;
mod error;
mod instances;
mod load_balancer;
mod metrics;
mod provider_id;
mod registry;
mod routes;
mod types;
mod zones;

pub mod echo;
pub mod file;
pub mod proxy;
pub mod well_known;

#[cfg(any(test, feature = "mock"))]
#[cfg_attr(docsrs, doc(cfg(feature = "mock")))]
pub mod mock;

/// The attribute every implementation of a provider trait needs: `#[async_trait]` on the
/// `impl` block (the compiler's error without it, E0195 "lifetime parameters or bounds on
/// method do not match the trait declaration", does not say so). Re-exported so the
/// version always matches the traits'.
#[doc(no_inline)]
pub use async_trait::async_trait;
/// The k8s-openapi crate whose types the traits take (`Node`, `Service`,
/// `LoadBalancerStatus`). A binary still enables one Kubernetes version feature on its own
/// `k8s-openapi` dependency, as every k8s-openapi library requires.
#[doc(no_inline)]
pub use k8s_openapi;
/// The kube crate the traits take and return (`InitContext::client`), at the version
/// they were built with.
#[doc(no_inline)]
pub use kube;
/// The token that [`InitContext::shutdown`] is.
#[doc(no_inline)]
pub use tokio_util::sync::CancellationToken;

pub use self::annotator::ServiceAnnotator;
pub use self::config::{CloudConfig, ConfigError};
pub use self::error::{BoxError, CloudError, CloudResult, ResultExt, display_chain};
pub use self::instances::{
    Instances, LegacyInstances, LegacyInstancesAdapter, get_instance_provider_id, resolve_instances,
};
pub use self::load_balancer::{
    LOAD_BALANCER_GROUP_ANNOTATION, LoadBalancer, LoadBalancerHealth, LoadBalancerPlan,
    LoadBalancerSharing, default_load_balancer_name, load_balancer_group,
};
pub use self::metrics::MetricsRegistry;
#[doc(no_inline)]
pub use self::metrics::prometheus_client;
pub use self::provider_id::{ProviderId, ProviderIdError};
pub use self::registry::{ProviderFactory, ProviderRegistry, RegistryError};
pub use self::routes::Routes;
pub use self::types::{
    InstanceMetadata, Route, Zone, node_address, node_name, node_provider_id, provided_node_ips,
};
pub use self::zones::{Clusters, Zones};

/// What [`CloudProvider::initialize`] receives.
#[derive(Clone)]
#[non_exhaustive]
pub struct InitContext {
    /// A client for the cluster, with the controller manager's identity.
    pub client: kube::Client,
    /// Cancelled when the controller manager shuts down or loses leadership. Everything the
    /// provider spawns in `initialize` must stop when it fires.
    pub shutdown: CancellationToken,
    /// The controller manager's metrics registry, served on `/metrics`: register the
    /// provider's own metrics here (a cache's hits, API rate-limit waits). `initialize` runs
    /// again on every leadership term, against the same registry: register once.
    pub metrics: MetricsRegistry,
}

impl InitContext {
    /// A context with this client and shutdown token, and a registry of its own (see
    /// [`with_metrics`](Self::with_metrics)).
    pub fn new(client: kube::Client, shutdown: CancellationToken) -> Self {
        Self {
            client,
            shutdown,
            metrics: MetricsRegistry::new(),
        }
    }

    /// Uses `metrics` as the registry the provider registers its metrics in.
    pub fn with_metrics(mut self, metrics: MetricsRegistry) -> Self {
        self.metrics = metrics;
        self
    }

    /// A [`ServiceAnnotator`] with this client, for a load balancer that remembers its cloud
    /// ID on the Service.
    pub fn service_annotator(&self) -> ServiceAnnotator {
        ServiceAnnotator::new(self.client.clone())
    }
}

impl std::fmt::Debug for InitContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitContext")
            .field("shutdown", &self.shutdown.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// A cloud provider (Go's `cloudprovider.Interface`).
///
/// [`provider_name`](Self::provider_name) and [`has_cluster_id`](Self::has_cluster_id) are
/// required. Each capability accessor returns
/// `None` by default, meaning "not supported"; return `Some(self)` (or a field) for those the
/// cloud has. The node controllers need [`instances`](Self::instances) or
/// [`legacy_instances`](Self::legacy_instances); the service controller needs
/// [`load_balancer`](Self::load_balancer); the route controller needs
/// [`routes`](Self::routes).
#[async_trait]
pub trait CloudProvider: Send + Sync + 'static {
    /// The provider's name, the `<provider>` of its provider IDs and the value of
    /// `--cloud-provider`.
    fn provider_name(&self) -> &str;

    /// Whether the provider keeps clusters apart in the cloud (Go's `HasClusterID`: "true
    /// if a ClusterID is required and set"): it tags the load balancers and routes it
    /// creates with the cluster's name (`--cluster-name`) and acts only on those, so two
    /// clusters in one account never touch each other's. A provider that creates nothing
    /// two clusters could share (instances only) may answer `true` as well.
    ///
    /// `false` makes the controller manager refuse to start unless `--allow-untagged-cloud`
    /// is given, as Go's does. There is no default: every provider says which it is.
    fn has_cluster_id(&self) -> bool;

    /// Called once, after the provider is built and before any controller starts. Use it to
    /// start background work (caches, token refresh) that must stop when
    /// [`InitContext::shutdown`] fires. An error stops the controller manager.
    async fn initialize(&self, _ctx: InitContext) -> CloudResult<()> {
        Ok(())
    }

    /// Instance questions by Node (Go's `InstancesV2`); the shape new providers implement.
    fn instances(&self) -> Option<&dyn Instances> {
        None
    }

    /// Legacy instance questions by node name and provider ID (Go's v1 `Instances`).
    /// Consulted only when [`instances`](Self::instances) is `None`.
    fn legacy_instances(&self) -> Option<&dyn LegacyInstances> {
        None
    }

    /// Zones (deprecated in Go); consulted only together with
    /// [`legacy_instances`](Self::legacy_instances).
    fn zones(&self) -> Option<&dyn Zones> {
        None
    }

    /// Load balancers for `type: LoadBalancer` Services.
    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        None
    }

    /// Routes for pod CIDRs.
    fn routes(&self) -> Option<&dyn Routes> {
        None
    }

    /// Clusters; no controller uses it.
    fn clusters(&self) -> Option<&dyn Clusters> {
        None
    }
}
