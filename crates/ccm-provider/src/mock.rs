//! `mockall` mocks of every provider trait, and [`MockCloud`] to put them together
//! (feature `mock`).
//!
//! Use them to unit-test code that calls a provider — a controller of your own, or a
//! provider that wraps another — without a cloud and without a cluster. Set expectations on
//! each mock, hand them to [`MockCloud`], and the mock checks on drop that every expected
//! call happened.
//!
//! ```
//! use std::sync::Arc;
//! use ccm_core::mock::{MockCloud, MockInstances};
//! use ccm_core::provider::{CloudProvider, InstanceMetadata, resolve_instances};
//! use k8s_openapi::api::core::v1::Node;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut instances = MockInstances::new();
//! instances
//!     .expect_instance_metadata()
//!     .times(1)
//!     .returning(|node| {
//!         let name = node.metadata.name.clone().unwrap_or_default();
//!         Ok(Some(InstanceMetadata::new(format!("mock://{name}")).with_zone("z1", "r1")))
//!     });
//! let cloud: Arc<dyn CloudProvider> = Arc::new(MockCloud::new("mock").with_instances(instances));
//!
//! let mut node = Node::default();
//! node.metadata.name = Some("worker-1".into());
//! let meta = resolve_instances(&cloud).unwrap().instance_metadata(&node).await.unwrap().unwrap();
//! assert_eq!(meta.provider_id, "mock://worker-1");
//! # }
//! ```

pub use crate::instances::{MockInstances, MockLegacyInstances};
pub use crate::load_balancer::MockLoadBalancer;
pub use crate::routes::MockRoutes;
pub use crate::zones::{MockClusters, MockZones};
use crate::{CloudProvider, Clusters, Instances, LegacyInstances, LoadBalancer, Routes, Zones};

/// `with_x(field: MockX) for X;` becomes `MockCloud::with_x(self, mock: MockX) -> Self`,
/// which supports capability `X` with that mock (sets `field`).
macro_rules! with_mocks {
    ($($setter:ident($field:ident: $mock:ty) for $trait:ident;)*) => {
        $(
            #[doc = concat!("Supports [`", stringify!($trait), "`] with this mock.")]
            pub fn $setter(mut self, mock: $mock) -> Self {
                self.$field = Some(mock);
                self
            }
        )*
    };
}

/// A [`CloudProvider`] made of mocks: each capability is supported when its mock is set.
#[derive(Default)]
pub struct MockCloud {
    name: String,
    has_cluster_id: bool,
    /// The [`Instances`] mock, if set.
    pub instances: Option<MockInstances>,
    /// The [`LegacyInstances`] mock, if set.
    pub legacy_instances: Option<MockLegacyInstances>,
    /// The [`Zones`] mock, if set.
    pub zones: Option<MockZones>,
    /// The [`LoadBalancer`] mock, if set.
    pub load_balancer: Option<MockLoadBalancer>,
    /// The [`Routes`] mock, if set.
    pub routes: Option<MockRoutes>,
    /// The [`Clusters`] mock, if set.
    pub clusters: Option<MockClusters>,
}

impl std::fmt::Debug for MockCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockCloud")
            .field("name", &self.name)
            .field("instances", &self.instances.is_some())
            .field("legacy_instances", &self.legacy_instances.is_some())
            .field("zones", &self.zones.is_some())
            .field("load_balancer", &self.load_balancer.is_some())
            .field("routes", &self.routes.is_some())
            .field("clusters", &self.clusters.is_some())
            .finish()
    }
}

impl MockCloud {
    /// A provider named `name` that supports nothing yet and has a cluster ID.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            has_cluster_id: true,
            ..Self::default()
        }
    }

    /// Sets what [`CloudProvider::has_cluster_id`] answers.
    pub fn with_cluster_id(mut self, has_cluster_id: bool) -> Self {
        self.has_cluster_id = has_cluster_id;
        self
    }

    with_mocks! {
        with_instances(instances: MockInstances) for Instances;
        with_legacy_instances(legacy_instances: MockLegacyInstances) for LegacyInstances;
        with_zones(zones: MockZones) for Zones;
        with_load_balancer(load_balancer: MockLoadBalancer) for LoadBalancer;
        with_routes(routes: MockRoutes) for Routes;
        with_clusters(clusters: MockClusters) for Clusters;
    }
}

impl CloudProvider for MockCloud {
    fn provider_name(&self) -> &str {
        &self.name
    }

    fn has_cluster_id(&self) -> bool {
        self.has_cluster_id
    }

    fn instances(&self) -> Option<&dyn Instances> {
        self.instances.as_ref().map(|m| m as &dyn Instances)
    }

    fn legacy_instances(&self) -> Option<&dyn LegacyInstances> {
        self.legacy_instances
            .as_ref()
            .map(|m| m as &dyn LegacyInstances)
    }

    fn zones(&self) -> Option<&dyn Zones> {
        self.zones.as_ref().map(|m| m as &dyn Zones)
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        self.load_balancer.as_ref().map(|m| m as &dyn LoadBalancer)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.routes.as_ref().map(|m| m as &dyn Routes)
    }

    fn clusters(&self) -> Option<&dyn Clusters> {
        self.clusters.as_ref().map(|m| m as &dyn Clusters)
    }
}
