//! A shadow's cloud provider: every read goes through; no mutation reaches the cloud.
//! `ensure_load_balancer` and `update_load_balancer` ask
//! [`plan_load_balancer`](LoadBalancer::plan_load_balancer) instead, and record what it
//! says would change; `ensure_load_balancer_deleted` records a deletion when the load
//! balancer exists. A load balancer change is answered as a failure to retry in 30 s, so
//! the service controller checks again while it is planned. `create_route` and
//! `delete_route` are recorded and answered as done (the route controller lists the routes
//! again each period). Load balancer changes go under the service controller, routes under
//! the route controller.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ccm_provider::{
    CloudError, CloudProvider, CloudResult, Clusters, InitContext, Instances, LegacyInstances,
    LoadBalancer, LoadBalancerHealth, LoadBalancerPlan, Route, Routes, Zones,
};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};

use super::{Action, ControllerShadow, Planned, Shadow};

/// How long the service controller waits before it asks again about a load balancer a
/// shadow would change.
const RECHECK: Duration = Duration::from_secs(30);

/// `inner` in shadow mode: its reads as they are, its mutations recorded in `shadow`, under
/// the names of the controllers that call them: `load_balancers` (the service controller)
/// and `routes` (the route controller).
pub(crate) fn wrap_provider(
    inner: Arc<dyn CloudProvider>,
    shadow: &Shadow,
    load_balancers: &str,
    routes: &str,
) -> Arc<dyn CloudProvider> {
    Arc::new(ShadowProvider {
        inner,
        load_balancers: shadow.for_controller(load_balancers),
        routes: shadow.for_controller(routes),
    })
}

struct ShadowProvider {
    inner: Arc<dyn CloudProvider>,
    load_balancers: ControllerShadow,
    routes: ControllerShadow,
}

#[async_trait]
impl CloudProvider for ShadowProvider {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    fn has_cluster_id(&self) -> bool {
        self.inner.has_cluster_id()
    }

    async fn initialize(&self, ctx: InitContext) -> CloudResult<()> {
        self.inner.initialize(ctx).await
    }

    // Capabilities that only read are the inner provider's own.
    fn instances(&self) -> Option<&dyn Instances> {
        self.inner.instances()
    }

    fn legacy_instances(&self) -> Option<&dyn LegacyInstances> {
        self.inner.legacy_instances()
    }

    fn zones(&self) -> Option<&dyn Zones> {
        self.inner.zones()
    }

    fn clusters(&self) -> Option<&dyn Clusters> {
        self.inner.clusters()
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        self.inner.load_balancer().and(Some(self))
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.inner.routes().and(Some(self))
    }
}

impl ShadowProvider {
    fn lb(&self) -> CloudResult<&dyn LoadBalancer> {
        self.inner.load_balancer().ok_or(CloudError::NotImplemented)
    }

    fn inner_routes(&self) -> CloudResult<&dyn Routes> {
        self.inner.routes().ok_or(CloudError::NotImplemented)
    }

    /// Asks the provider what `request` would do. Nothing to do: the status. Else the
    /// change is recorded, and the answer is a [`CloudError::RetryAfter`]: the controller
    /// has not made it, so it asks again after [`RECHECK`] (and the change stays planned
    /// while it would still be made), and writes no status meanwhile.
    async fn plan(
        &self,
        request: &'static str,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        let plan = match self
            .lb()?
            .plan_load_balancer(cluster_name, service, nodes)
            .await
        {
            Ok(plan) => plan,
            Err(err) if err.is_not_owned() => {
                let why = err.chain_to_string();
                self.load_balancers.plan(load_balancer_change(
                    service,
                    Action::Refuse,
                    request,
                    why,
                ));
                return Err(err);
            }
            Err(err) => return Err(err),
        };
        let (action, why) = match plan {
            LoadBalancerPlan::UpToDate(status) => return Ok(status),
            LoadBalancerPlan::Create => (Action::Create, "no load balancer: it would be created".to_owned()),
            LoadBalancerPlan::Update { changes, .. } => (Action::Update, changes.join("; ")),
            LoadBalancerPlan::Unknown(_) => (
                Action::Update,
                "it exists; the provider cannot tell what would change (it does not implement plan_load_balancer)".to_owned(),
            ),
            other => (Action::Update, format!("{other:?}")),
        };
        Err(self.planned(load_balancer_change(service, action, request, why)))
    }

    /// Records `change`; the error the controller retries it with.
    fn planned(&self, change: Planned) -> CloudError {
        let message = format!(
            "shadow: would {} the load balancer ({}); not done, asked again in {}s",
            change.action,
            change.why,
            RECHECK.as_secs()
        );
        self.load_balancers.plan(change);
        CloudError::retry_after(message, RECHECK)
    }
}

fn load_balancer_change(service: &Service, action: Action, request: &str, why: String) -> Planned {
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    Planned {
        kind: "cloud/loadbalancers".to_owned(),
        scope: format!("{namespace}/{name}"),
        namespace: Some(namespace),
        name,
        action,
        request: request.to_owned(),
        why,
    }
}

#[async_trait]
impl LoadBalancer for ShadowProvider {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        self.lb()?.get_load_balancer(cluster_name, service).await
    }

    fn get_load_balancer_name(&self, cluster_name: &str, service: &Service) -> String {
        match self.inner.load_balancer() {
            Some(lb) => lb.get_load_balancer_name(cluster_name, service),
            None => ccm_provider::default_load_balancer_name(service),
        }
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        self.plan("ensure_load_balancer", cluster_name, service, nodes)
            .await
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        self.plan("update_load_balancer", cluster_name, service, nodes)
            .await
            .map(drop)
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        let Some(status) = self.lb()?.get_load_balancer(cluster_name, service).await? else {
            return Ok(());
        };
        let ingress: Vec<String> = status
            .ingress
            .iter()
            .flatten()
            .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
            .collect();
        Err(self.planned(load_balancer_change(
            service,
            Action::Delete,
            "ensure_load_balancer_deleted",
            format!("the Service no longer wants it (ingress {ingress:?})"),
        )))
    }

    async fn plan_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerPlan> {
        self.lb()?
            .plan_load_balancer(cluster_name, service, nodes)
            .await
    }

    async fn load_balancer_health(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<LoadBalancerHealth> {
        self.lb()?.load_balancer_health(cluster_name, service).await
    }

    fn load_balancer_sharing(&self) -> Option<ccm_provider::LoadBalancerSharing> {
        self.lb().ok()?.load_balancer_sharing()
    }
}

fn route_change(route: &Route, action: Action, request: &str) -> Planned {
    Planned {
        kind: "cloud/routes".to_owned(),
        namespace: None,
        name: route.destination_cidr.clone(),
        scope: route.target_node.clone(),
        action,
        request: request.to_owned(),
        why: format!("{} → node {:?}", route.destination_cidr, route.target_node),
    }
}

#[async_trait]
impl Routes for ShadowProvider {
    async fn list_routes(&self, cluster_name: &str) -> CloudResult<Vec<Route>> {
        self.inner_routes()?.list_routes(cluster_name).await
    }

    async fn create_route(
        &self,
        _cluster_name: &str,
        _name_hint: &str,
        route: &Route,
    ) -> CloudResult<()> {
        self.inner_routes()?;
        self.routes
            .plan(route_change(route, Action::Create, "create_route"));
        Ok(())
    }

    async fn delete_route(&self, _cluster_name: &str, route: &Route) -> CloudResult<()> {
        self.inner_routes()?;
        self.routes
            .plan(route_change(route, Action::Delete, "delete_route"));
        Ok(())
    }
}
