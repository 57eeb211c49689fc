//! The fake cloud's routing table.

use async_trait::async_trait;
use ccm_core::provider::{CloudError, CloudResult, Route, Routes};

use crate::{FakeCloud, Method};

#[async_trait]
impl Routes for FakeCloud {
    async fn list_routes(&self, cluster_name: &str) -> CloudResult<Vec<Route>> {
        self.call(Method::ListRoutes, cluster_name).await?;
        Ok(self.routes(cluster_name))
    }

    async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> CloudResult<()> {
        self.call(Method::CreateRoute, &route.destination_cidr)
            .await?;
        // A dual-stack Node's two routes share its name hint (the Node UID), so the IPv6
        // one gets a suffix; IPv4 routes keep Go's fake `<cluster>-<hint>` name.
        let name = if route.destination_cidr.contains(':') {
            format!("{cluster_name}-{name_hint}-v6")
        } else {
            format!("{cluster_name}-{name_hint}")
        };
        let mut state = self.state.lock();
        let duplicate = state.routes.iter().any(|((c, n), r)| {
            c == cluster_name && (*n == name || r.destination_cidr == route.destination_cidr)
        });
        if duplicate {
            state.duplicate_route_creates += 1;
            if let Some(m) = self.metrics.get() {
                m.duplicate_route_create();
            }
            return Err(CloudError::msg(format!(
                "route {name} for {} already exists",
                route.destination_cidr
            )));
        }
        let mut stored = route.clone().with_name(name.clone()).with_blackhole(false);
        if !stored.enable_node_addresses {
            stored.target_node_addresses.clear();
        }
        state.routes.insert((cluster_name.to_owned(), name), stored);
        Ok(())
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> CloudResult<()> {
        self.call(Method::DeleteRoute, &route.destination_cidr)
            .await?;
        let mut state = self.state.lock();
        match state
            .routes
            .remove(&(cluster_name.to_owned(), route.name.clone()))
        {
            Some(_) => Ok(()),
            None => Err(CloudError::msg(format!("route {:?} not found", route.name))),
        }
    }
}
