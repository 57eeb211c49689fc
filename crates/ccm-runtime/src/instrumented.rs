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
    LegacyInstances, LoadBalancer, LoadBalancerHealth, LoadBalancerPlan, Route, Routes, Zone,
    Zones,
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
        Err(CloudError::Provisioning { .. }) => "provisioning",
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
}

/// [`CloudProvider`]'s capability accessors for [`WrappedProvider`], one line each
/// (`accessor: Trait`): `Some(self)` where the inner provider answers `Some`.
macro_rules! offer_what_inner_offers {
    ($($accessor:ident: $trait:ident,)*) => {
        $(
            fn $accessor(&self) -> Option<&dyn $trait> {
                self.inner.$accessor().and(Some(self))
            }
        )*
    };
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

    // Each capability the inner provider offers, the wrapper offers too, as itself.
    offer_what_inner_offers! {
        instances: Instances,
        legacy_instances: LegacyInstances,
        zones: Zones,
        load_balancer: LoadBalancer,
        routes: Routes,
        clusters: Clusters,
    }
}

/// Implements capability `$trait` for [`WrappedProvider`]: each listed method goes through
/// the one hook ([`WrappedProvider::call`]) to the inner provider's capability, which its
/// accessor `$accessor` returns. One line a method, as the trait declares it without `&self`
/// and `CloudResult`: `Read fn name(arg: Type, …) -> Output;` (or `Mutation`, which the
/// leader fence guards). A call answers `NotImplemented` if the inner provider stopped
/// offering the capability after the wrapper said it had it: a provider should not do that.
/// The items of an `also { … }` block after the list go into the `impl` as written: the
/// methods that are not forwarded.
macro_rules! forward {
    (
        impl $trait:ident via $accessor:ident {
            $( $kind:ident fn $method:ident($($arg:ident: $ty:ty),*) -> $output:ty; )*
        }
        $(also { $($rest:tt)* })?
    ) => {
        #[async_trait]
        impl $trait for WrappedProvider {
            $(
                async fn $method(&self, $($arg: $ty),*) -> CloudResult<$output> {
                    let call = async {
                        let capability = self.inner.$accessor().ok_or(CloudError::NotImplemented)?;
                        capability.$method($($arg),*).await
                    };
                    self.call(stringify!($method), $kind, call).await
                }
            )*
            $($($rest)*)?
        }
    };
}

forward! {
    impl Instances via instances {
        Read fn instance_exists(node: &Node) -> bool;
        Read fn instance_shutdown(node: &Node) -> bool;
        Read fn instance_metadata(node: &Node) -> Option<InstanceMetadata>;
    }
}

forward! {
    impl LegacyInstances via legacy_instances {
        Read fn node_addresses(node_name: &str) -> Vec<NodeAddress>;
        Read fn node_addresses_by_provider_id(provider_id: &str) -> Vec<NodeAddress>;
        Read fn instance_id(node_name: &str) -> String;
        Read fn instance_type(node_name: &str) -> String;
        Read fn instance_type_by_provider_id(provider_id: &str) -> String;
        Read fn add_ssh_key_to_all_instances(user: &str, key: &[u8]) -> ();
        Read fn current_node_name(hostname: &str) -> String;
        Read fn instance_exists_by_provider_id(provider_id: &str) -> bool;
        Read fn instance_shutdown_by_provider_id(provider_id: &str) -> bool;
    }
}

forward! {
    impl Zones via zones {
        Read fn get_zone() -> Zone;
        Read fn get_zone_by_provider_id(provider_id: &str) -> Zone;
        Read fn get_zone_by_node_name(node_name: &str) -> Zone;
    }
}

forward! {
    impl LoadBalancer via load_balancer {
        Read fn get_load_balancer(cluster_name: &str, service: &Service)
            -> Option<LoadBalancerStatus>;
        Mutation fn ensure_load_balancer(cluster_name: &str, service: &Service, nodes: &[Arc<Node>])
            -> LoadBalancerStatus;
        Mutation fn update_load_balancer(cluster_name: &str, service: &Service, nodes: &[Arc<Node>])
            -> ();
        Mutation fn ensure_load_balancer_deleted(cluster_name: &str, service: &Service) -> ();
        Read fn plan_load_balancer(cluster_name: &str, service: &Service, nodes: &[Arc<Node>])
            -> LoadBalancerPlan;
        Read fn load_balancer_health(cluster_name: &str, service: &Service)
            -> LoadBalancerHealth;
    }
    also {
        // A synchronous call, not counted and not fenced.
        fn get_load_balancer_name(&self, cluster_name: &str, service: &Service) -> String {
            match self.inner.load_balancer() {
                Some(lb) => lb.get_load_balancer_name(cluster_name, service),
                None => ccm_provider::default_load_balancer_name(service),
            }
        }

        // A synchronous answer of what the provider supports, not a cloud call.
        fn load_balancer_sharing(&self) -> Option<ccm_provider::LoadBalancerSharing> {
            self.inner.load_balancer()?.load_balancer_sharing()
        }
    }
}

forward! {
    impl Routes via routes {
        Read fn list_routes(cluster_name: &str) -> Vec<Route>;
        Mutation fn create_route(cluster_name: &str, name_hint: &str, route: &Route) -> ();
        Mutation fn delete_route(cluster_name: &str, route: &Route) -> ();
    }
}

forward! {
    impl Clusters via clusters {
        Read fn list_clusters() -> Vec<String>;
        Read fn master(cluster_name: &str) -> String;
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
