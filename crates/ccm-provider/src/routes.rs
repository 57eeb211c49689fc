//! Routes that send each Node's pod CIDR to that Node (Go's `cloudprovider.Routes`).

use async_trait::async_trait;

use super::{CloudResult, Route};

/// The cloud's routing table, as far as this cluster's pod CIDRs are concerned.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Routes: Send + Sync {
    /// Every route of the cluster `cluster_name`. The route controller deletes, inside the
    /// cluster CIDRs only, the listed routes that no Node wants; it never creates a route
    /// this list already has.
    async fn list_routes(&self, cluster_name: &str) -> CloudResult<Vec<Route>>;

    /// Creates `route`; `name_hint` (the Node's UID) helps the cloud name it. `route.name`
    /// is to be ignored.
    async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> CloudResult<()>;

    /// Deletes `route`, exactly as [`list_routes`](Self::list_routes) returned it.
    async fn delete_route(&self, cluster_name: &str, route: &Route) -> CloudResult<()>;
}
