//! The provider surface: what a cloud implements so the generic controllers can drive it.
//!
//! A provider is one type implementing [`CloudProvider`]. Each optional capability —
//! [`Instances`], [`LegacyInstances`], [`Zones`], [`LoadBalancer`], [`Routes`],
//! [`Clusters`] — is a trait of its own, reached through an accessor that returns `None`
//! when the cloud does not support it; a controller whose capability is missing does not
//! start. This is Go's `cloudprovider.Interface` with `(impl, bool)` turned into `Option`.
//!
//! Every call is `async` and takes `&self`: the controllers call a provider from many tasks
//! at once, so implementations are `Send + Sync` and keep their own interior state behind
//! locks. A call may be cancelled by dropping its future (on shutdown, or when leadership is
//! lost), so a provider should not leave a half-made cloud resource it cannot find again:
//! name or tag what it creates so the next call finds it.
//!
//! These items live in the `ccm-provider` crate, which depends on nothing else of ours;
//! `ccm-core` with `default-features = false` is this module (plus [`well_known`](crate::well_known)
//! and [`mock`](../mock/index.html)) alone.

#[doc(inline)]
pub use ccm_provider::{
    BoxError, CloudConfig, CloudError, CloudProvider, CloudResult, Clusters, ConfigError,
    InitContext, InstanceMetadata, Instances, LOAD_BALANCER_GROUP_ANNOTATION, LegacyInstances,
    LegacyInstancesAdapter, LoadBalancer, LoadBalancerHealth, LoadBalancerPlan,
    LoadBalancerSharing, MetricsRegistry, ProviderFactory, ProviderId, ProviderIdError,
    ProviderRegistry, RegistryError, ResultExt, Route, Routes, ServiceAnnotator, Zone, Zones,
    default_load_balancer_name, display_chain, get_instance_provider_id, load_balancer_group,
    node_address, node_name, node_provider_id, provided_node_ips, resolve_instances,
};

pub use ccm_provider::{echo, file, proxy};

/// The `prometheus-client` crate that [`MetricsRegistry`] is built on, for metrics of your
/// own at the same version.
#[doc(no_inline)]
pub use ccm_provider::prometheus_client;
