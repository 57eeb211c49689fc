//! Routes through the simulator's `/v2/x-routes` extension (DigitalOcean has no route
//! tables). Only routes tagged with the cluster's tag are listed or deleted.

use async_trait::async_trait;
use ccm_core::provider::{CloudResult, Route, Routes};

use crate::api::XRoute;
use crate::{DoLikeCloud, cloud_error, cluster_tag};

impl DoLikeCloud {
    /// The routes tagged with the cluster's tag.
    async fn cluster_routes(&self, cluster_name: &str) -> CloudResult<Vec<XRoute>> {
        let tag = cluster_tag(cluster_name);
        let mut routes = self
            .client
            .list_routes()
            .await
            .map_err(|e| cloud_error("listing routes", e))?;
        routes.retain(|r| r.tags.contains(&tag));
        Ok(routes)
    }
}

#[async_trait]
impl Routes for DoLikeCloud {
    async fn list_routes(&self, cluster_name: &str) -> CloudResult<Vec<Route>> {
        let routes = self.cluster_routes(cluster_name).await?;
        Ok(routes
            .into_iter()
            .map(|r| {
                Route::new(r.target.clone(), r.destination.clone()).with_name(r.id.to_string())
            })
            .collect())
    }

    async fn create_route(
        &self,
        cluster_name: &str,
        _name_hint: &str,
        route: &Route,
    ) -> CloudResult<()> {
        let r = XRoute {
            id: 0,
            destination: route.destination_cidr.clone(),
            target: route.target_node.clone(),
            tags: vec![cluster_tag(cluster_name)],
        };
        self.client
            .create_route(&r)
            .await
            .map_err(|e| cloud_error(&format!("creating the route to {}", r.destination), e))
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> CloudResult<()> {
        let routes = self.cluster_routes(cluster_name).await?;
        for r in routes
            .iter()
            .filter(|r| r.destination == route.destination_cidr && r.target == route.target_node)
        {
            self.client
                .delete_route(r.id)
                .await
                .map_err(|e| cloud_error(&format!("deleting the route to {}", r.destination), e))?;
        }
        Ok(())
    }
}
