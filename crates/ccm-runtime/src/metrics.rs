//! Prometheus metrics of the controller manager: one [`Metrics`] registry that counts every
//! cloud call, reads the work queues and the Kubernetes client at scrape time, tracks the
//! running controllers and leadership, and holds the Go controllers' own metrics, all under
//! the names Go's `cloud-controller-manager` uses where it has one. [`Metrics::encode`]
//! renders the Prometheus text format (0.0.4, as Go's component-base serves it) for the
//! `/metrics` endpoint; `docs/metrics.md` lists every metric with its Go equivalent.
//!
//! ```
//! use std::sync::Arc;
//! use ccm_runtime::metrics::Metrics;
//! use ccm_provider::mock::{MockCloud, MockInstances};
//! use ccm_provider::{CloudProvider, resolve_instances};
//! use k8s_openapi::api::core::v1::Node;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let metrics = Metrics::new();
//! let mut instances = MockInstances::new();
//! instances.expect_instance_exists().returning(|_| Ok(true));
//! let cloud: Arc<dyn CloudProvider> = Arc::new(MockCloud::new("acme").with_instances(instances));
//! let cloud = metrics.instrument(cloud);
//!
//! resolve_instances(&cloud).unwrap().instance_exists(&Node::default()).await.unwrap();
//! assert!(metrics.encode().contains(
//!     r#"ccm_cloud_requests_total{provider="acme",method="instance_exists",result="success"} 1"#
//! ));
//! # }
//! ```

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

use crate::client::ApiCounters;
use crate::client::go_metrics::{GoClientCounts, Latencies};
use crate::instrumented::CloudCallMetrics;
use crate::workqueue::QueueMetrics;

mod process;
use ccm_provider::CloudProvider;
use ccm_provider::MetricsRegistry;

/// The `Content-Type` of [`Metrics::encode`]'s output: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `manager` label of `running_managed_controllers` unless
/// [`Metrics::with_manager`] says otherwise: Go's component name.
pub const DEFAULT_MANAGER: &str = "cloud-controller-manager";

/// The metrics registry of one controller manager; see the [module docs](self).
///
/// Cloning is cheap and shares the registry: build one at startup, hand clones to the
/// controllers and to the endpoint server. Every method takes `&self`.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: MetricsRegistry,
    manager: String,
    cloud_calls: CloudCallMetrics,
    running_controllers: Family<ControllerLabels, Gauge>,
    leader: Family<NameLabel, Gauge>,
    slowpath: Family<NameLabel, Counter>,
    sources: Arc<ScrapeSources>,
    controllers: ControllerMetrics,
    build_info: Family<Vec<(&'static str, String)>, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("manager", &self.inner.manager)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// A registry with every metric of the [module docs](self) registered, and
    /// [`DEFAULT_MANAGER`] as the `manager` label.
    #[must_use]
    pub fn new() -> Self {
        Self::with_manager(DEFAULT_MANAGER)
    }

    /// Like [`new`](Self::new), with this `manager` label on `running_managed_controllers`.
    #[must_use]
    pub fn with_manager(manager: impl Into<String>) -> Self {
        // The registry ends every help text with a period: Go's are given without theirs.
        let mut registry = Registry::default();
        let cloud_calls = CloudCallMetrics::register(&mut registry);
        let running_controllers = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "running_managed_controllers",
            "Indicates where instances of a controller are currently running",
            running_controllers.clone(),
        );
        let leader = Family::<NameLabel, Gauge>::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
             backup, 1 indicates master. 'name' is the string used to identify the lease. \
             Please make sure to group by name",
            leader.clone(),
        );
        let slowpath = Family::<NameLabel, Counter>::default();
        registry.register(
            "leader_election_slowpath",
            "Total number of slow path exercised in renewing leader leases. 'name' is the \
             string used to identify the lease. Please make sure to group by name",
            slowpath.clone(),
        );
        let sources = Arc::new(ScrapeSources::default());
        registry.register_collector(Box::new(Arc::clone(&sources)));
        let controllers = ControllerMetrics::register(&mut registry);
        registry.register(
            "ccm_events_dropped",
            "Events not written, by recorder (component) and why: queue_full, spam_filter, \
             rejected (by the API server) or unreachable (after client-go's 12 tries)",
            crate::events::dropped_metric(),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        let build_info = Family::<Vec<(&'static str, String)>, Gauge>::default();
        registry.register(
            "kubernetes_build_info",
            "A metric with a constant '1' value labeled by major, minor, git version, git \
             commit, git tree state, build date, Go version, and compiler from which Kubernetes \
             was built, and platform on which it is running",
            build_info.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry: MetricsRegistry::from(registry),
                manager: manager.into(),
                cloud_calls,
                running_controllers,
                leader,
                slowpath,
                sources,
                controllers,
                build_info,
            }),
        }
    }

    /// Sets `kubernetes_build_info` (1, with Go's labels) for a binary of `version`
    /// (`1.2.3` or `v1.2.3`) built from `git_commit`: `git_version` `v1.2.3`, `major` `1`,
    /// `minor` `2`, `compiler` `rustc`, `platform` `os/arch`; `go_version`, `build_date` and
    /// `git_tree_state` empty (there is no Go, and the build does not record them).
    pub fn set_build_info(&self, version: &str, git_commit: Option<&str>) {
        let version = version.strip_prefix('v').unwrap_or(version);
        let mut parts = version.split('.');
        let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let labels = vec![
            ("build_date", String::new()),
            ("compiler", "rustc".to_owned()),
            ("git_commit", git_commit.unwrap_or("").to_owned()),
            ("git_tree_state", String::new()),
            ("git_version", format!("v{version}")),
            ("go_version", String::new()),
            ("major", major.to_owned()),
            ("minor", minor.to_owned()),
            (
                "platform",
                format!(
                    "{}/{}",
                    std::env::consts::OS,
                    go_arch(std::env::consts::ARCH)
                ),
            ),
        ];
        self.inner.build_info.clear();
        self.inner.build_info.get_or_create(&labels).set(1);
    }

    /// Wraps `provider` so that every call to it, through any of its capabilities, is
    /// counted in `ccm_cloud_requests_total{provider, method, result}` and timed in
    /// `ccm_cloud_request_duration_seconds{provider, method}`.
    ///
    /// The wrapper has exactly the capabilities of `provider` (its
    /// [`instances`](CloudProvider::instances) is `Some` only when `provider`'s is, and so on)
    /// and forwards [`provider_name`](CloudProvider::provider_name),
    /// [`has_cluster_id`](CloudProvider::has_cluster_id) and
    /// [`initialize`](CloudProvider::initialize) (the latter timed as method `initialize`).
    /// `method` is the trait method's name (`instance_metadata`, `ensure_load_balancer`…);
    /// [`LoadBalancer::get_load_balancer_name`](ccm_provider::LoadBalancer::get_load_balancer_name) is not a cloud call and is not counted.
    /// `result` is `success`, or the [`CloudError`](ccm_provider::CloudError) kind: `not_implemented`,
    /// `instance_not_found`, `implemented_elsewhere`, `retry_after`, `provisioning`, `error`;
    /// or `cancelled` when the caller dropped the call before it finished.
    pub fn instrument(&self, provider: Arc<dyn CloudProvider>) -> Arc<dyn CloudProvider> {
        self.wrap(provider, crate::client::Fence::open())
    }

    /// [`instrument`](Self::instrument), with mutations refused while `fence` is closed: the
    /// one provider wrapper the app applies ([`crate::instrumented::wrap`]).
    pub fn wrap(
        &self,
        provider: Arc<dyn CloudProvider>,
        fence: crate::client::Fence,
    ) -> Arc<dyn CloudProvider> {
        crate::instrumented::wrap(provider, &self.inner.cloud_calls, fence)
    }

    /// Exports a work queue's counters as client-go's `workqueue_depth`,
    /// `workqueue_adds_total`, `workqueue_retries_total`,
    /// `workqueue_queue_duration_seconds` and `workqueue_work_duration_seconds`, labelled
    /// `name`; they are read at scrape time. Get the handle from
    /// [`Queue::shared_metrics`](crate::workqueue::Queue::shared_metrics). Registering a name
    /// again replaces the earlier queue.
    pub fn register_queue(&self, name: impl Into<String>, queue: Arc<QueueMetrics>) {
        self.inner.sources.queues.lock().insert(name.into(), queue);
    }

    /// Exports a Kubernetes client's request counts as
    /// `ccm_api_requests_total{verb, resource}` and client-go's `rest_client_*` metrics, read
    /// at scrape time. Get the handle
    /// from [`ApiLayer::counters`](crate::client::ApiLayer::counters). Counts of several
    /// clients are added up.
    ///
    /// `ccm_api_requests_total` counts by Kubernetes verb (`GET`, `LIST`, `WATCH`, `PATCH`…)
    /// and resource (`nodes/status`); client-go's `rest_client_requests_total` by status
    /// code, host and HTTP method.
    pub fn register_api_counters(&self, counters: Arc<ApiCounters>) {
        self.inner.sources.api.lock().push(counters);
    }

    /// Exports the gauge `gauge` (no labels) as `read` answers at each scrape: a count
    /// over a controller's cache, which would cost a walk of the cache on every change if it
    /// were kept up to date instead. Registering a name again replaces the earlier reader.
    pub(crate) fn register_cache_gauge(
        &self,
        gauge: CacheGaugeName,
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.inner.sources.gauges.lock().insert(
            gauge.name,
            CacheGauge {
                help: gauge.help,
                read: Arc::new(read),
            },
        );
    }

    /// Sets `running_managed_controllers{name, manager}` to 1 (Go's
    /// `ControllerStarted`).
    pub fn controller_started(&self, name: &str) {
        self.running(name).set(1);
    }

    /// Sets `running_managed_controllers{name, manager}` to 0 (Go's
    /// `ControllerStopped`).
    pub fn controller_stopped(&self, name: &str) {
        self.running(name).set(0);
    }

    fn running(&self, name: &str) -> Gauge {
        self.inner
            .running_controllers
            .get_or_create_owned(&ControllerLabels {
                name: name.to_owned(),
                manager: self.inner.manager.clone(),
            })
    }

    /// Adds `by` to `leader_election_slowpath_total{name}` (client-go's): renewals of the
    /// Lease `name` that had to read it again because the write from the copy held failed.
    /// `by` 0 makes the series appear.
    pub fn count_leader_slowpath(&self, name: &str, by: u64) {
        self.inner
            .slowpath
            .get_or_create_owned(&NameLabel {
                name: name.to_owned(),
            })
            .inc_by(by);
    }

    /// Sets `leader_election_master_status{name}`: 1 while this process holds the lease
    /// `name`, 0 while it stands by.
    pub fn set_leader(&self, name: &str, is_leader: bool) {
        self.inner
            .leader
            .get_or_create_owned(&NameLabel {
                name: name.to_owned(),
            })
            .set(i64::from(is_leader));
    }

    /// The Go controllers' own metrics, for the controllers to update.
    #[must_use]
    pub fn controllers(&self) -> &ControllerMetrics {
        &self.inner.controllers
    }

    /// The registry itself, shared: what [`InitContext::metrics`](ccm_provider::InitContext)
    /// and custom controllers register their own metrics in.
    #[must_use]
    pub fn registry(&self) -> &MetricsRegistry {
        &self.inner.registry
    }

    /// Registers a metric of your own, e.g. a provider's cache hit counter. `name` is
    /// exported as given, plus `_total` for a counter.
    pub fn register(&self, name: impl Into<String>, help: impl Into<String>, metric: impl Metric) {
        self.inner.registry.register(name, help, metric);
    }

    /// Runs `f` with the registry, for what [`register`](Self::register) cannot do:
    /// metrics with a unit, collectors, sub-registries with a prefix or labels.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        self.inner.registry.with_registry(f)
    }

    /// Every metric in the Prometheus text format 0.0.4 ([`CONTENT_TYPE`]).
    #[must_use]
    pub fn encode(&self) -> String {
        self.inner.registry.encode()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    name: String,
    manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

/// The metrics Go's controllers in `k8s.io/cloud-provider` define, with Go's names, help
/// texts and buckets, for the controllers of this crate to update. Histograms take seconds.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ControllerMetrics {
    /// `node_controller_initial_node_sync_delay_seconds`: seconds from a Node's creation
    /// to the end of its initial synchronisation by the cloud-node controller. Buckets
    /// 1s, 4s, … 1024s.
    pub initial_node_sync_delay: Histogram,
    /// `node_controller_cloud_provider_taint_removal_delay_seconds`: seconds from a Node's
    /// creation to the removal of its `node.cloudprovider.kubernetes.io/uninitialized`
    /// taint. Buckets 1s, 4s, … 1024s.
    pub cloud_provider_taint_removal_delay: Histogram,
    /// `service_controller_loadbalancer_sync_total`: load balancers configured, as an
    /// effect of Service or Node changes.
    pub loadbalancer_sync: Counter,
    /// `service_controller_nodesync_error_total`: load balancer host updates after Node
    /// changes that failed.
    pub nodesync_error: Counter,
    /// `service_controller_nodesync_latency_seconds`: how long one node sync (updating the
    /// hosts of every load balancer) took. Buckets 1s, 2s, … 16384s.
    pub nodesync_latency: Histogram,
    /// `service_controller_update_loadbalancer_host_latency_seconds`: how long updating the
    /// hosts of one load balancer took. Buckets 1s, 2s, … 16384s.
    pub update_loadbalancer_host_latency: Histogram,
    /// `route_controller_route_sync_total`: route syncs with the cloud.
    pub route_sync: Counter,
    /// Go's `node_ipam_controller_cidrset_*` metrics, for the node-ipam controller.
    pub node_ipam: NodeIpamMetrics,
    /// The lifecycle controller's guard against mass Node deletion (ours).
    pub node_deletion_guard: NodeDeletionGuardMetrics,
}

impl ControllerMetrics {
    fn register(registry: &mut Registry) -> Self {
        let node_delay = || Histogram::new(exponential_buckets(1.0, 4.0, 6));
        let service_latency = || Histogram::new(exponential_buckets(1.0, 2.0, 15));
        let m = Self {
            initial_node_sync_delay: node_delay(),
            cloud_provider_taint_removal_delay: node_delay(),
            loadbalancer_sync: Counter::default(),
            nodesync_error: Counter::default(),
            nodesync_latency: service_latency(),
            update_loadbalancer_host_latency: service_latency(),
            route_sync: Counter::default(),
            node_ipam: NodeIpamMetrics::register(registry),
            node_deletion_guard: NodeDeletionGuardMetrics::register(registry),
        };
        registry.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Number of seconds after node creation when NodeController finished the initial \
             synchronization of a single node",
            m.initial_node_sync_delay.clone(),
        );
        registry.register(
            "node_controller_cloud_provider_taint_removal_delay_seconds",
            "Number of seconds after node creation when NodeController removed the \
             cloud-provider taint of a single node",
            m.cloud_provider_taint_removal_delay.clone(),
        );
        registry.register(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as \
             an effect of service/node changes on the cluster",
            m.loadbalancer_sync.clone(),
        );
        registry.register(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and \
             errored, as an effect of node changes on the cluster",
            m.nodesync_error.clone(),
        );
        registry.register(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on \
             cluster node updates",
            m.nodesync_latency.clone(),
        );
        registry.register(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "A metric measuring the latency for updating each load balancer hosts",
            m.update_loadbalancer_host_latency.clone(),
        );
        registry.register(
            "route_controller_route_sync",
            "A metric counting the amount of times routes have been synced with the cloud \
             provider",
            m.route_sync.clone(),
        );
        m
    }
}

/// The `reason` label of the node deletion guard's metrics.
type ReasonLabel = [(&'static str, String); 1];

/// The reasons the node deletion guard holds Nodes back: the window's budget is spent, or
/// too many Nodes are reported gone at once.
const GUARD_REASONS: [&str; 2] = ["budget", "stop"];

/// The cloud-node-lifecycle controller's guard against mass Node deletion
/// (`--node-deletion-guard`; Go has none): `ccm_node_deletions_held_back{reason}`, the Nodes
/// whose instance the provider reports gone and that the guard does not delete now, and
/// `ccm_node_deletion_guard_trips_total{reason}`, how often it started holding Nodes back.
/// `reason` is `budget` or `stop`. Both series of each start at 0.
#[derive(Clone, Debug, Default)]
pub struct NodeDeletionGuardMetrics {
    held_back: Family<ReasonLabel, Gauge>,
    trips: Family<ReasonLabel, Counter>,
}

impl NodeDeletionGuardMetrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        for reason in GUARD_REASONS {
            let _ = m.held_back.get_or_create(&[("reason", reason.to_owned())]);
            let _ = m.trips.get_or_create(&[("reason", reason.to_owned())]);
        }
        registry.register(
            "ccm_node_deletions_held_back",
            "Nodes whose instance the cloud provider reports gone that the node deletion guard \
             does not delete now, by reason: budget (the window's deletions are spent) or stop \
             (too many Nodes reported gone at once)",
            m.held_back.clone(),
        );
        registry.register(
            "ccm_node_deletion_guard_trips",
            "Times the node deletion guard started holding Nodes back, by reason",
            m.trips.clone(),
        );
        m
    }

    /// Sets the Nodes held back now: `held` for `reason` (`budget` or `stop`), 0 for the
    /// other; `None`, none.
    pub fn set_held_back(&self, reason: Option<&str>, held: usize) {
        for r in GUARD_REASONS {
            let n = if reason == Some(r) { held } else { 0 };
            self.held_back
                .get_or_create(&[("reason", r.to_owned())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Counts a trip for `reason`.
    pub fn trip(&self, reason: &str) {
        self.trips
            .get_or_create(&[("reason", reason.to_owned())])
            .inc();
    }

    /// The Nodes held back now for `reason`.
    #[must_use]
    pub fn held_back(&self, reason: &str) -> i64 {
        self.held_back
            .get_or_create(&[("reason", reason.to_owned())])
            .get()
    }

    /// The trips for `reason` so far.
    #[must_use]
    pub fn trips(&self, reason: &str) -> u64 {
        self.trips
            .get_or_create(&[("reason", reason.to_owned())])
            .get()
    }
}

/// Go's label of the node-ipam metrics: the cluster CIDR a set cuts.
type ClusterCidrLabel = [(&'static str, String); 1];

/// Go's `node_ipam_controller_cidrset_*` metrics (`pkg/controller/nodeipam/ipam/cidrset`),
/// with Go's names (the `cirdset_max_cidrs` spelling included), help and buckets, labelled
/// by `clusterCIDR`.
#[derive(Clone, Debug)]
pub struct NodeIpamMetrics {
    allocations: Family<ClusterCidrLabel, Counter>,
    releases: Family<ClusterCidrLabel, Counter>,
    max_cidrs: Family<ClusterCidrLabel, Gauge>,
    usage: Family<ClusterCidrLabel, Gauge<f64, AtomicU64>>,
    tries: Family<ClusterCidrLabel, Histogram, fn() -> Histogram>,
}

fn tries_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 5.0, 5))
}

impl NodeIpamMetrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            allocations: Family::default(),
            releases: Family::default(),
            max_cidrs: Family::default(),
            usage: Family::default(),
            tries: Family::new_with_constructor(tries_histogram),
        };
        registry.register(
            "node_ipam_controller_cidrset_cidrs_allocations",
            "Counter measuring total number of CIDR allocations",
            m.allocations.clone(),
        );
        registry.register(
            "node_ipam_controller_cidrset_cidrs_releases",
            "Counter measuring total number of CIDR releases",
            m.releases.clone(),
        );
        registry.register(
            "node_ipam_controller_cirdset_max_cidrs",
            "Maximum number of CIDRs that can be allocated",
            m.max_cidrs.clone(),
        );
        registry.register(
            "node_ipam_controller_cidrset_usage_cidrs",
            "Gauge measuring percentage of allocated CIDRs",
            m.usage.clone(),
        );
        registry.register(
            "node_ipam_controller_cidrset_allocation_tries_per_request",
            "Number of endpoints added on each Service sync",
            m.tries.clone(),
        );
        m
    }

    /// Counts `taken` and `freed` subnets of the set cutting `cluster` into `subnets`, of
    /// which `allocated` are now used.
    pub fn count(&self, cluster: &str, subnets: u64, allocated: u64, taken: u64, freed: u64) {
        let label = [("clusterCIDR", cluster.to_owned())];
        self.allocations.get_or_create(&label).inc_by(taken);
        self.releases.get_or_create(&label).inc_by(freed);
        self.max_cidrs
            .get_or_create(&label)
            .set(i64::try_from(subnets).unwrap_or(i64::MAX));
        self.usage
            .get_or_create(&label)
            .set(allocated as f64 / subnets as f64);
    }

    /// Records how many used subnets one allocation from `cluster` passed over.
    pub fn observe_tries(&self, cluster: &str, tries: u64) {
        self.tries
            .get_or_create(&[("clusterCIDR", cluster.to_owned())])
            .observe(tries as f64);
    }
}

/// Go's name of a Rust `target_arch` (`GOARCH`), as Go's `platform` label writes it.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// What is read at scrape time: the work queues, the Kubernetes clients' counters and the
/// gauges counted from the controllers' caches.
#[derive(Debug, Default)]
struct ScrapeSources {
    queues: Mutex<BTreeMap<String, Arc<QueueMetrics>>>,
    api: Mutex<Vec<Arc<ApiCounters>>>,
    gauges: Mutex<BTreeMap<&'static str, CacheGauge>>,
}

/// The name and help of a gauge counted from a controller's cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CacheGaugeName {
    name: &'static str,
    help: &'static str,
}

/// `ccm_nodes_uninitialized`, counted from the cloud-node controller's cache.
pub(crate) const NODES_UNINITIALIZED: CacheGaugeName = CacheGaugeName {
    name: "ccm_nodes_uninitialized",
    help: "Nodes that still carry the node.cloudprovider.kubernetes.io/uninitialized taint \
           (not being deleted), as the cloud-node controller's cache has them.",
};

/// `ccm_service_load_balancers_pending`, counted from the service controller's cache.
pub(crate) const SERVICE_LOAD_BALANCERS_PENDING: CacheGaugeName = CacheGaugeName {
    name: "ccm_service_load_balancers_pending",
    help: "Services of type LoadBalancer without a loadBalancerClass (not being deleted) \
           that have no ingress yet, as the service controller's cache has them.",
};

/// A gauge counted at scrape time from an informer's cache (`ccm_nodes_uninitialized`…).
#[derive(Clone)]
struct CacheGauge {
    help: &'static str,
    read: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl fmt::Debug for CacheGauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheGauge")
            .field("help", &self.help)
            .finish_non_exhaustive()
    }
}

impl Collector for ScrapeSources {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let queues: Vec<(String, Arc<QueueMetrics>)> = self
            .queues
            .lock()
            .iter()
            .map(|(name, q)| (name.clone(), Arc::clone(q)))
            .collect();
        if !queues.is_empty() {
            encode_queues(&mut encoder, &queues)?;
        }
        let mut requests: BTreeMap<(String, String), u64> = BTreeMap::new();
        for counters in self.api.lock().iter() {
            for (key, n) in counters.snapshot() {
                *requests.entry(key).or_default() += n;
            }
        }
        if !requests.is_empty() {
            let mut family = encoder.encode_descriptor(
                "ccm_api_requests",
                "Number of requests to the Kubernetes API, partitioned by verb and resource.",
                None,
                MetricType::Counter,
            )?;
            for ((verb, resource), n) in &requests {
                let labels = [("verb", verb.as_str()), ("resource", resource.as_str())];
                family
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
        let clients: Vec<GoClientCounts> = self.api.lock().iter().map(|c| c.go_counts()).collect();
        encode_go_client(&mut encoder, &clients)?;
        // Read outside the lock: a count walks a whole cache.
        let gauges: Vec<(&'static str, CacheGauge)> = self
            .gauges
            .lock()
            .iter()
            .map(|(name, gauge)| (*name, gauge.clone()))
            .collect();
        for (name, gauge) in gauges {
            encoder
                .encode_descriptor(name, gauge.help, None, MetricType::Gauge)?
                .encode_gauge(&(gauge.read)())?;
        }
        Ok(())
    }
}

/// client-go's `rest_client_*` metrics, the counts of every client added up by `host`.
fn encode_go_client(
    encoder: &mut DescriptorEncoder<'_>,
    clients: &[GoClientCounts],
) -> Result<(), fmt::Error> {
    let mut results: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    let mut latency: BTreeMap<(&str, &str), Latencies> = BTreeMap::new();
    let mut waits: BTreeMap<(&str, &str), Latencies> = BTreeMap::new();
    for c in clients {
        for ((code, method), n) in &c.results {
            *results.entry((code, c.host.as_str(), method)).or_default() += n;
        }
        for (into, from) in [(&mut latency, &c.latency), (&mut waits, &c.rate_limiter)] {
            for (verb, l) in from {
                into.entry((c.host.as_str(), verb)).or_default().add(l);
            }
        }
    }
    if !results.is_empty() {
        let mut family = encoder.encode_descriptor(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            None,
            MetricType::Counter,
        )?;
        for ((code, host, method), n) in &results {
            let labels = [("code", *code), ("host", *host), ("method", *method)];
            family
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
    }
    let histograms = [
        (
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            latency,
        ),
        (
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            waits,
        ),
    ];
    for (name, help, series) in histograms {
        if series.is_empty() {
            continue;
        }
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for ((host, verb), l) in &series {
            let labels = [("host", *host), ("verb", *verb)];
            family
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(l.sum, l.count, &l.encoded(), None)?;
        }
    }
    Ok(())
}

fn encode_queues(
    encoder: &mut DescriptorEncoder<'_>,
    queues: &[(String, Arc<QueueMetrics>)],
) -> Result<(), fmt::Error> {
    type Read = fn(&QueueMetrics) -> u64;
    let scalars: [(&str, &str, MetricType, Read); 3] = [
        (
            "workqueue_depth",
            "Current depth of workqueue",
            MetricType::Gauge,
            QueueMetrics::depth,
        ),
        (
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            MetricType::Counter,
            QueueMetrics::adds_total,
        ),
        (
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            MetricType::Counter,
            QueueMetrics::retries_total,
        ),
    ];
    for (name, help, metric_type, read) in scalars {
        let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
        for (queue, m) in queues {
            let labels = [("name", queue.as_str())];
            let mut metric = family.encode_family(&labels)?;
            let value = read(m);
            if metric_type == MetricType::Gauge {
                metric.encode_gauge(&value)?;
            } else {
                metric.encode_counter::<NoLabelSet, _, u64>(&value, None)?;
            }
        }
    }
    let now = tokio::time::Instant::now();
    let running: Vec<(f64, f64)> = queues.iter().map(|(_, m)| m.unfinished_work(now)).collect();
    type ReadRunning = fn(&(f64, f64)) -> f64;
    let gauges: [(&str, &str, ReadRunning); 2] = [
        (
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by \
             work_duration. Large values indicate stuck threads. One can deduce the number of \
             stuck threads by observing the rate at which this increases.",
            |r| r.0,
        ),
        (
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            |r| r.1,
        ),
    ];
    for (name, help, read) in gauges {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for ((queue, _), r) in queues.iter().zip(&running) {
            family
                .encode_family(&[("name", queue.as_str())])?
                .encode_gauge(&read(r))?;
        }
    }
    type ReadHistogram = fn(&QueueMetrics) -> &crate::workqueue::DurationHistogram;
    let histograms: [(&str, &str, ReadHistogram); 2] = [
        (
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            QueueMetrics::queue_duration,
        ),
        (
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            QueueMetrics::work_duration,
        ),
    ];
    for (name, help, read) in histograms {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (queue, m) in queues {
            let h = read(m);
            // The queue's buckets are cumulative; the encoder wants them per bucket.
            let mut previous = 0;
            let buckets: Vec<(f64, u64)> = h
                .buckets()
                .iter()
                .map(|&(bound, cumulative)| {
                    let n = cumulative.saturating_sub(previous);
                    previous = cumulative;
                    (bound, n)
                })
                .collect();
            // Read apart from the buckets, so a concurrent observation may be in one only.
            let count = h.count().max(previous);
            let labels = [("name", queue.as_str())];
            family
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(h.sum().as_secs_f64(), count, &buckets, None)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
