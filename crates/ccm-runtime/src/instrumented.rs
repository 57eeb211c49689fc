//! The one provider wrapper: a [`CloudProvider`] that forwards every call to another through
//! one hook (`WrappedProvider::call`), which refuses a cloud mutation while the leader fence
//! is closed (no cloud mutation while the replica cannot prove it holds the Lease) and
//! counts and times every other call in `ccm_cloud_requests_total{provider, method, result}`
//! and `ccm_cloud_request_duration_seconds{provider, method}`. The app wraps the provider
//! once, at startup ([`wrap`]); controllers never know. Each call is logged at debug level
//! (target `ccm_runtime::instrumented`) as it starts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ccm_provider::{
    CloudError, CloudProvider, CloudResult, Clusters, InitContext, InstanceMetadata, Instances,
    LegacyInstances, LoadBalancer, Route, Routes, Zone, Zones,
};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, NodeAddress, Service};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::client::Fence;

/// Upper bounds, in seconds, of `ccm_cloud_request_duration_seconds`: client-go's
/// `rest_client_request_duration_seconds` buckets, 5ms to 60s.
pub const CLOUD_REQUEST_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The two metric families every instrumented provider records into.
#[derive(Clone, Debug)]
pub struct CloudCallMetrics {
    requests: Family<CallLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
}

impl CloudCallMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<CallLabels, Counter>::default();
        // The registry ends every help text with a period: Go's are given without theirs.
        registry.register(
            "ccm_cloud_requests",
            "Calls to the cloud provider, by provider, method and result",
            requests.clone(),
        );
        let duration = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            cloud_request_histogram,
        );
        registry.register(
            "ccm_cloud_request_duration_seconds",
            "How long calls to the cloud provider took, by provider and method",
            duration.clone(),
        );
        Self { requests, duration }
    }
}

/// Wraps `provider` once for the app: every call, through any of its capabilities, passes
/// the one hook of [`WrappedProvider`]. Each cloud mutation (`ensure_load_balancer`,
/// `update_load_balancer`, `ensure_load_balancer_deleted`, `create_route`, `delete_route`)
/// first checks `fence`: when it is closed the provider is not called, the call is not
/// counted, and the answer is a [`CloudError::Provider`] whose source is the
/// [`Fenced`](crate::client::Fenced) error (the controllers retry it like any cloud failure).
/// Every call that reaches the provider is recorded in `metrics`; see
/// [`Metrics::instrument`](crate::metrics::Metrics::instrument) for the labels. Without
/// leader election the fence is [`Fence::open`]. (The legacy `add_ssh_key_to_all_instances`
/// is not fenced: no controller calls it.)
pub fn wrap(
    provider: Arc<dyn CloudProvider>,
    metrics: &CloudCallMetrics,
    fence: Fence,
) -> Arc<dyn CloudProvider> {
    let calls = CallMetrics {
        provider: provider.provider_name().to_owned(),
        requests: metrics.requests.clone(),
        duration: metrics.duration.clone(),
    };
    Arc::new(WrappedProvider {
        inner: provider,
        calls,
        fence,
    })
}

fn cloud_request_histogram() -> Histogram {
    Histogram::new(CLOUD_REQUEST_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: String,
    method: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    provider: String,
    method: &'static str,
}

/// The cloud call metrics of one instrumented provider.
struct CallMetrics {
    provider: String,
    requests: Family<CallLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
}

impl CallMetrics {
    fn record(&self, method: &'static str, result: &'static str, elapsed: Duration) {
        self.requests
            .get_or_create(&CallLabels {
                provider: self.provider.clone(),
                method,
                result,
            })
            .inc();
        self.duration
            .get_or_create(&MethodLabels {
                provider: self.provider.clone(),
                method,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Runs `call`, recording its result and duration, or `cancelled` if it is dropped
    /// before it finishes.
    async fn observe<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = CloudResult<T>>,
    ) -> CloudResult<T> {
        tracing::debug!(provider = %self.provider, method, "calling the cloud");
        let mut guard = CallGuard {
            calls: self,
            method,
            start: Instant::now(),
            finished: false,
        };
        let result = call.await;
        guard.finished = true;
        self.record(method, result_label(&result), guard.start.elapsed());
        result
    }
}

/// Records a `cancelled` call when dropped before the call finished.
struct CallGuard<'a> {
    calls: &'a CallMetrics,
    method: &'static str,
    start: Instant,
    finished: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.calls
                .record(self.method, "cancelled", self.start.elapsed());
        }
    }
}

/// The `result` label of a finished call.
fn result_label<T>(result: &CloudResult<T>) -> &'static str {
    match result {
        Ok(_) => "success",
        Err(CloudError::NotImplemented) => "not_implemented",
        Err(CloudError::InstanceNotFound) => "instance_not_found",
        Err(CloudError::ImplementedElsewhere) => "implemented_elsewhere",
        Err(CloudError::RetryAfter { .. }) => "retry_after",
        Err(_) => "error",
    }
}

/// Whether a call changes the cloud: mutations wait for an open fence.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Mutation,
}

use Kind::{Mutation, Read};

/// The provider every controller sees; see [`wrap`].
pub struct WrappedProvider {
    inner: Arc<dyn CloudProvider>,
    calls: CallMetrics,
    fence: Fence,
}

impl WrappedProvider {
    /// The hook around every call: a mutation is refused while the fence is closed (and not
    /// counted, since the cloud never sees it); a call that goes ahead is observed.
    async fn call<T>(
        &self,
        method: &'static str,
        kind: Kind,
        call: impl Future<Output = CloudResult<T>>,
    ) -> CloudResult<T> {
        if kind == Mutation {
            self.fence.check().map_err(|fenced| {
                tracing::warn!(provider = self.inner.provider_name(), method, error = %fenced, "refused a cloud call");
                CloudError::provider(format!("{method}: refused by the leader fence"), fenced)
            })?;
        }
        self.calls.observe(method, call).await
    }

    // Each accessor answers `NotImplemented` if the inner provider stopped offering the
    // capability after the wrapper said it had it: a provider should not do that.

    fn instances_impl(&self) -> CloudResult<&dyn Instances> {
        self.inner.instances().ok_or(CloudError::NotImplemented)
    }

    fn legacy_impl(&self) -> CloudResult<&dyn LegacyInstances> {
        self.inner
            .legacy_instances()
            .ok_or(CloudError::NotImplemented)
    }

    fn zones_impl(&self) -> CloudResult<&dyn Zones> {
        self.inner.zones().ok_or(CloudError::NotImplemented)
    }

    fn load_balancer_impl(&self) -> CloudResult<&dyn LoadBalancer> {
        self.inner.load_balancer().ok_or(CloudError::NotImplemented)
    }

    fn routes_impl(&self) -> CloudResult<&dyn Routes> {
        self.inner.routes().ok_or(CloudError::NotImplemented)
    }

    fn clusters_impl(&self) -> CloudResult<&dyn Clusters> {
        self.inner.clusters().ok_or(CloudError::NotImplemented)
    }
}

#[async_trait]
impl CloudProvider for WrappedProvider {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    fn has_cluster_id(&self) -> bool {
        self.inner.has_cluster_id()
    }

    async fn initialize(&self, ctx: InitContext) -> CloudResult<()> {
        self.call("initialize", Read, self.inner.initialize(ctx))
            .await
    }

    fn instances(&self) -> Option<&dyn Instances> {
        self.inner.instances().map(|_| self as &dyn Instances)
    }

    fn legacy_instances(&self) -> Option<&dyn LegacyInstances> {
        self.inner
            .legacy_instances()
            .map(|_| self as &dyn LegacyInstances)
    }

    fn zones(&self) -> Option<&dyn Zones> {
        self.inner.zones().map(|_| self as &dyn Zones)
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        self.inner
            .load_balancer()
            .map(|_| self as &dyn LoadBalancer)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.inner.routes().map(|_| self as &dyn Routes)
    }

    fn clusters(&self) -> Option<&dyn Clusters> {
        self.inner.clusters().map(|_| self as &dyn Clusters)
    }
}

#[async_trait]
impl Instances for WrappedProvider {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        self.call("instance_exists", Read, async {
            self.instances_impl()?.instance_exists(node).await
        })
        .await
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        self.call("instance_shutdown", Read, async {
            self.instances_impl()?.instance_shutdown(node).await
        })
        .await
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        self.call("instance_metadata", Read, async {
            self.instances_impl()?.instance_metadata(node).await
        })
        .await
    }
}

#[async_trait]
impl LegacyInstances for WrappedProvider {
    async fn node_addresses(&self, node_name: &str) -> CloudResult<Vec<NodeAddress>> {
        self.call("node_addresses", Read, async {
            self.legacy_impl()?.node_addresses(node_name).await
        })
        .await
    }

    async fn node_addresses_by_provider_id(
        &self,
        provider_id: &str,
    ) -> CloudResult<Vec<NodeAddress>> {
        self.call("node_addresses_by_provider_id", Read, async {
            self.legacy_impl()?
                .node_addresses_by_provider_id(provider_id)
                .await
        })
        .await
    }

    async fn instance_id(&self, node_name: &str) -> CloudResult<String> {
        self.call("instance_id", Read, async {
            self.legacy_impl()?.instance_id(node_name).await
        })
        .await
    }

    async fn instance_type(&self, node_name: &str) -> CloudResult<String> {
        self.call("instance_type", Read, async {
            self.legacy_impl()?.instance_type(node_name).await
        })
        .await
    }

    async fn instance_type_by_provider_id(&self, provider_id: &str) -> CloudResult<String> {
        self.call("instance_type_by_provider_id", Read, async {
            self.legacy_impl()?
                .instance_type_by_provider_id(provider_id)
                .await
        })
        .await
    }

    async fn add_ssh_key_to_all_instances(&self, user: &str, key: &[u8]) -> CloudResult<()> {
        self.call("add_ssh_key_to_all_instances", Read, async {
            self.legacy_impl()?
                .add_ssh_key_to_all_instances(user, key)
                .await
        })
        .await
    }

    async fn current_node_name(&self, hostname: &str) -> CloudResult<String> {
        self.call("current_node_name", Read, async {
            self.legacy_impl()?.current_node_name(hostname).await
        })
        .await
    }

    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> CloudResult<bool> {
        self.call("instance_exists_by_provider_id", Read, async {
            self.legacy_impl()?
                .instance_exists_by_provider_id(provider_id)
                .await
        })
        .await
    }

    async fn instance_shutdown_by_provider_id(&self, provider_id: &str) -> CloudResult<bool> {
        self.call("instance_shutdown_by_provider_id", Read, async {
            self.legacy_impl()?
                .instance_shutdown_by_provider_id(provider_id)
                .await
        })
        .await
    }
}

#[async_trait]
impl Zones for WrappedProvider {
    async fn get_zone(&self) -> CloudResult<Zone> {
        self.call("get_zone", Read, async {
            self.zones_impl()?.get_zone().await
        })
        .await
    }

    async fn get_zone_by_provider_id(&self, provider_id: &str) -> CloudResult<Zone> {
        self.call("get_zone_by_provider_id", Read, async {
            self.zones_impl()?
                .get_zone_by_provider_id(provider_id)
                .await
        })
        .await
    }

    async fn get_zone_by_node_name(&self, node_name: &str) -> CloudResult<Zone> {
        self.call("get_zone_by_node_name", Read, async {
            self.zones_impl()?.get_zone_by_node_name(node_name).await
        })
        .await
    }
}

#[async_trait]
impl LoadBalancer for WrappedProvider {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        self.call("get_load_balancer", Read, async {
            self.load_balancer_impl()?
                .get_load_balancer(cluster_name, service)
                .await
        })
        .await
    }

    // A synchronous call, not counted and not fenced.
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
        self.call("ensure_load_balancer", Mutation, async {
            self.load_balancer_impl()?
                .ensure_load_balancer(cluster_name, service, nodes)
                .await
        })
        .await
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        self.call("update_load_balancer", Mutation, async {
            self.load_balancer_impl()?
                .update_load_balancer(cluster_name, service, nodes)
                .await
        })
        .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        self.call("ensure_load_balancer_deleted", Mutation, async {
            self.load_balancer_impl()?
                .ensure_load_balancer_deleted(cluster_name, service)
                .await
        })
        .await
    }
}

#[async_trait]
impl Routes for WrappedProvider {
    async fn list_routes(&self, cluster_name: &str) -> CloudResult<Vec<Route>> {
        self.call("list_routes", Read, async {
            self.routes_impl()?.list_routes(cluster_name).await
        })
        .await
    }

    async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> CloudResult<()> {
        self.call("create_route", Mutation, async {
            self.routes_impl()?
                .create_route(cluster_name, name_hint, route)
                .await
        })
        .await
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> CloudResult<()> {
        self.call("delete_route", Mutation, async {
            self.routes_impl()?.delete_route(cluster_name, route).await
        })
        .await
    }
}

#[async_trait]
impl Clusters for WrappedProvider {
    async fn list_clusters(&self) -> CloudResult<Vec<String>> {
        self.call("list_clusters", Read, async {
            self.clusters_impl()?.list_clusters().await
        })
        .await
    }

    async fn master(&self, cluster_name: &str) -> CloudResult<String> {
        self.call("master", Read, async {
            self.clusters_impl()?.master(cluster_name).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ccm_provider::mock::{MockCloud, MockLoadBalancer, MockRoutes};

    use super::*;

    /// A provider whose mutations may each be called `mutations` times, reads any number.
    fn cloud(mutations: usize) -> Arc<dyn CloudProvider> {
        let mut lb = MockLoadBalancer::new();
        lb.expect_get_load_balancer().returning(|_, _| Ok(None));
        lb.expect_ensure_load_balancer()
            .times(mutations)
            .returning(|_, _, _| Ok(LoadBalancerStatus::default()));
        lb.expect_update_load_balancer()
            .times(mutations)
            .returning(|_, _, _| Ok(()));
        lb.expect_ensure_load_balancer_deleted()
            .times(mutations)
            .returning(|_, _| Ok(()));
        let mut routes = MockRoutes::new();
        routes.expect_list_routes().returning(|_| Ok(Vec::new()));
        routes
            .expect_create_route()
            .times(mutations)
            .returning(|_, _, _| Ok(()));
        routes
            .expect_delete_route()
            .times(mutations)
            .returning(|_, _| Ok(()));
        Arc::new(
            MockCloud::new("mock")
                .with_load_balancer(lb)
                .with_routes(routes),
        )
    }

    /// Calls every mutation; the results, in order.
    async fn mutate(provider: &dyn CloudProvider) -> Vec<CloudResult<()>> {
        let (svc, route) = (Service::default(), Route::default());
        let lb = provider.load_balancer().unwrap();
        let routes = provider.routes().unwrap();
        vec![
            lb.ensure_load_balancer("c", &svc, &[]).await.map(|_| ()),
            lb.update_load_balancer("c", &svc, &[]).await,
            lb.ensure_load_balancer_deleted("c", &svc).await,
            routes.create_route("c", "hint", &route).await,
            routes.delete_route("c", &route).await,
        ]
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_fence_stops_every_cloud_mutation_and_lets_reads_pass() {
        let fence = Fence::leased(Duration::from_secs(10));
        // The mocks fail on drop if a mutation reaches them more often than once.
        let provider = wrap(cloud(1), &calls(), fence.clone());
        for result in mutate(&*provider).await {
            let err = result.unwrap_err();
            assert!(
                err.chain_to_string()
                    .contains("does not hold the leader Lease"),
                "{}",
                err.chain_to_string()
            );
        }
        let svc = Service::default();
        let lb = provider.load_balancer().unwrap();
        assert!(lb.get_load_balancer("c", &svc).await.unwrap().is_none());
        assert!(provider.routes().unwrap().list_routes("c").await.is_ok());

        fence.renewed(Instant::now());
        assert!(mutate(&*provider).await.iter().all(Result::is_ok));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(mutate(&*provider).await.iter().all(Result::is_err));
    }

    #[tokio::test]
    async fn without_leader_election_every_mutation_goes_through() {
        let provider = wrap(cloud(1), &calls(), Fence::open());
        assert!(mutate(&*provider).await.iter().all(Result::is_ok));
    }

    /// Metrics of a registry of their own.
    fn calls() -> CloudCallMetrics {
        CloudCallMetrics::register(&mut Registry::default())
    }
}
