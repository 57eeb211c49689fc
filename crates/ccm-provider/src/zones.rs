//! Zones (Go's deprecated `cloudprovider.Zones`) and clusters (`cloudprovider.Clusters`).
//!
//! Both are legacy. [`Zones`] is consulted only for a provider without
//! [`Instances`](super::Instances): the modern shape returns the zone in
//! [`InstanceMetadata`](super::InstanceMetadata). [`Clusters`] is part of the Go interface but
//! no controller calls it; it is here so a port from Go is complete.

use async_trait::async_trait;

use super::{CloudResult, Zone};

/// The zone of an instance.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Zones: Send + Sync {
    /// The zone of the instance this process runs on.
    async fn get_zone(&self) -> CloudResult<Zone>;

    /// The zone of the instance with this provider ID.
    async fn get_zone_by_provider_id(&self, provider_id: &str) -> CloudResult<Zone>;

    /// The zone of the instance named `node_name`.
    async fn get_zone_by_node_name(&self, node_name: &str) -> CloudResult<Zone>;
}

/// The clusters a cloud account holds. No controller calls it.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Clusters: Send + Sync {
    /// The names of all clusters.
    async fn list_clusters(&self) -> CloudResult<Vec<String>>;

    /// The address of the control plane of `cluster_name`.
    async fn master(&self, cluster_name: &str) -> CloudResult<String>;
}
