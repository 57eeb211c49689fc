//! The service controller: a cloud load balancer for every `type: LoadBalancer` Service,
//! pointed at the cluster's eligible Nodes, deleted when the Service no longer wants it.
//!
//! It behaves as Go's `k8s.io/cloud-provider` service controller. A Service with
//! `type: LoadBalancer` and no `loadBalancerClass` gets the
//! `service.kubernetes.io/load-balancer-cleanup` finalizer *before* the first cloud call,
//! then `ensure_load_balancer` with the eligible Nodes, then its
//! `status.loadBalancer.ingress` (status subresource, only when it changed). When the type
//! changes away, or the Service is deleted, the load balancer is deleted, then the finalizer
//! removed and the status cleared — so a controller stopped at any point (even with its
//! future dropped in the middle of a cloud call) leaves nothing behind: the next one finds
//! the finalizer and finishes the job, and `ensure_load_balancer` is idempotent. Eligible
//! Nodes are those not being deleted, without a true (or unparsable)
//! `node.kubernetes.io/exclude-from-external-load-balancers` label and without the
//! `ToBeDeletedByClusterAutoscaler` taint; readiness is not a filter. Events carry Go's
//! reasons under the component `service-controller`.
//!
//! Where it does better than Go, on purpose:
//! - **One task per Service.** Node changes do not call the cloud from a separate worker:
//!   a node-sync pass compares, for each load balancer, the Nodes (name → provider ID) it
//!   was last given with the eligible Nodes now, and queues the Services that differ on the
//!   service queue. Their worker then calls `update_load_balancer` (not a full ensure). So a
//!   Service is never touched by two tasks at once (Go's node worker can race a service
//!   worker), and the updates run `workers` at a time with per-Service backoff.
//! - **Debounced, coalesced Node events.** Node events only wake the node-sync loop; it
//!   waits until they have stopped for a tenth of
//!   [`ServiceControllerConfig::node_sync_debounce`] (1 s by default), or for all of it
//!   since the first, before it reads the Node cache, so a burst of Node adds costs one
//!   pass and one update per load balancer instead of one per Node. A pass does not start while the load balancer
//!   updates the previous one queued are still waiting or running (at most 60 s): Node changes meanwhile are folded into the next pass, and a
//!   Service whose Nodes changed several times while it was queued is updated once, with
//!   the Nodes of the moment its worker runs. Under churn (Nodes joining and getting their
//!   provider IDs one by one) that is one update per load balancer per drained pass, as in
//!   Go, whose node worker also waits for its pass; Go starts its first pass without a
//!   debounce and a pass per Node key.
//! - **Deletions of Services without the finalizer.** A Service deleted after someone
//!   removed our finalizer still gets its load balancer deleted (Go only notices when the
//!   key happens to be queued).
//! - **Validated provider answers.** An ingress entry the API server would refuse (no IP
//!   nor hostname, a bad IP or hostname) is not written: it is a `SyncLoadBalancerFailed`
//!   Warning and a retry.
//! - **`RetryAfter` from every cloud call** (Go honours it from `EnsureLoadBalancer` only).
//! - **Guarded writes.** The finalizer list and the ingress list are written with JSON
//!   Patches that test the previous value (see the controllers' `patch` module), so a
//!   concurrent change to either is never overwritten; a failed test re-reads and retries.
//! - **Load balancers that are not the Service's.** A provider answers
//!   [`CloudError::NotOwned`] when a hint a user wrote on the Service (an ID annotation, a
//!   name) leads to a load balancer of another Service or cluster. An ensure or update is
//!   then refused: a [`REASON_NOT_OWNED`] Warning naming the conflict, no status, the normal
//!   backoff. A deletion finishes: the provider deletes only what is the Service's own, the
//!   finalizer goes, and a [`REASON_NOT_OWNED`] Warning says the other was left alone. Go
//!   has no such rule: a Service could take over, or delete, another namespace's load
//!   balancer by copying its ID annotation, and a hint that cannot be resolved kept the
//!   finalizer forever.
//! - **Bounded messages.** An error message is cut to 1 KiB before it is logged or
//!   recorded, however long the user-written value it quotes.

mod decision;
mod writes;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::FutureExt as _;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use self::decision::{
    Deletion, GoneStep, HostsState, Known, LbState, NodeSet, NodeSyncStep, Step, cut_message,
    delete_call_needed, deletion, eligible_nodes, has_finalizer, needs_cleanup, needs_update,
    node_set, node_sync_step, node_update_matters, plan, plan_gone, validate_ingress,
    wanted_on_add, wants_load_balancer,
};
use super::debounce::settle;
use super::node_util::node_name;
use crate::events::EventRecorder;
use crate::informer::{Change, Informer};
use crate::metrics::ControllerMetrics;
use crate::workqueue::{Outcome, Queue, RateLimit, run};
use ccm_provider::{CloudError, CloudProvider, LoadBalancer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

/// The event source name, as Go's controller reports it.
pub const COMPONENT: &str = "service-controller";
/// Event reason (Normal): a sync is about to ensure the load balancer.
pub const REASON_ENSURING: &str = "EnsuringLoadBalancer";
/// Event reason (Normal): the load balancer was ensured.
pub const REASON_ENSURED: &str = "EnsuredLoadBalancer";
/// Event reason (Normal): the load balancer is about to be deleted.
pub const REASON_DELETING: &str = "DeletingLoadBalancer";
/// Event reason (Normal): the load balancer is deleted (also sent when there was none).
pub const REASON_DELETED: &str = "DeletedLoadBalancer";
/// Event reason (Warning): deleting the load balancer of a Service that is gone failed.
pub const REASON_DELETE_FAILED: &str = "DeleteLoadBalancerFailed";
/// Event reason (Warning): a sync failed; it is retried.
pub const REASON_SYNC_FAILED: &str = "SyncLoadBalancerFailed";
/// Event reason (Warning): no Node is eligible for load balancer traffic.
pub const REASON_UNAVAILABLE: &str = "UnAvailableLoadBalancer";
/// Event reason (Normal): the load balancer was pointed at a new set of Nodes.
pub const REASON_UPDATED: &str = "UpdatedLoadBalancer";
/// Event reason (Warning): pointing the load balancer at a new set of Nodes failed.
pub const REASON_UPDATE_FAILED: &str = "UpdateLoadBalancerFailed";
/// Event reason (Warning): a hint on the Service (an ID annotation, a name) leads to a load
/// balancer that is not the Service's ([`CloudError::NotOwned`]); it was left unchanged.
/// Ensure and update are refused and retried with backoff; deletion finishes without it.
/// Not one of Go's reasons: Go has no ownership rule.
pub const REASON_NOT_OWNED: &str = "LoadBalancerNotOwned";

/// The longest a node-sync pass waits for the updates the previous pass queued before it
/// starts anyway (a hung cloud call must not stop every other load balancer from following
/// its Nodes). A pass started early only queues Services whose Nodes differ again.
const NODE_SYNC_DRAIN_MAX: Duration = Duration::from_secs(60);

/// A queued Service: its namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
}

impl ServiceKey {
    /// The key of `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a Service.
    pub fn of(service: &Service) -> Self {
        Self::new(
            service.metadata.namespace.as_deref().unwrap_or_default(),
            service.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Settings of the service controller.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServiceControllerConfig {
    /// Services synced at once (`--concurrent-service-syncs`).
    pub workers: usize,
    /// The cluster name given to the provider (`--cluster-name`).
    pub cluster_name: String,
    /// The per-Service retry backoff; Go's is 5 s doubling to 300 s.
    pub rate_limit: RateLimit,
    /// The longest the node-sync loop waits after a Node event before it compares, so that
    /// a burst of Node events costs one pass; it compares sooner once Node events have
    /// stopped for a tenth of it. 1 s by default.
    pub node_sync_debounce: Duration,
    /// A node-sync pass also runs this often without any Node event (a cheap comparison;
    /// the cloud is called only for load balancers whose Nodes differ). `None`: only on
    /// Node events.
    pub node_sync_period: Option<Duration>,
    /// Where Go's `service_controller_*` metrics are counted; `None`: nowhere.
    ///
    /// `service_controller_nodesync_latency_seconds` measures a node-sync pass, which here
    /// only compares Node sets and queues the Services whose Nodes changed; the updates
    /// themselves run on the service workers and are measured by
    /// `service_controller_update_loadbalancer_host_latency_seconds`.
    pub metrics: Option<ControllerMetrics>,
}

impl Default for ServiceControllerConfig {
    fn default() -> Self {
        Self {
            workers: 1,
            cluster_name: "kubernetes".to_owned(),
            rate_limit: RateLimit::exponential(Duration::from_secs(5), Duration::from_secs(300)),
            node_sync_debounce: Duration::from_secs(1),
            node_sync_period: Some(Duration::from_secs(100)),
            metrics: None,
        }
    }
}

impl ServiceControllerConfig {
    /// Sets the number of workers.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Sets the cluster name.
    pub fn with_cluster_name(mut self, cluster_name: impl Into<String>) -> Self {
        self.cluster_name = cluster_name.into();
        self
    }

    /// Sets the retry backoff.
    pub fn with_rate_limit(mut self, rate_limit: RateLimit) -> Self {
        self.rate_limit = rate_limit;
        self
    }

    /// Sets the node-sync debounce.
    pub fn with_node_sync_debounce(mut self, debounce: Duration) -> Self {
        self.node_sync_debounce = debounce;
        self
    }

    /// Counts in `metrics` (Go's controller metrics, registered by the manager).
    #[must_use]
    pub fn with_metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Sets the period of node-sync passes without Node events.
    pub fn with_node_sync_period(mut self, period: Option<Duration>) -> Self {
        self.node_sync_period = period;
        self
    }
}

/// The service controller. See the [module docs](self).
pub struct ServiceController {
    inner: Inner,
}

impl fmt::Debug for ServiceController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceController")
            .field("queue", &self.inner.queue)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    client: Client,
    provider: Arc<dyn CloudProvider>,
    services: Informer<Service>,
    nodes: Informer<Node>,
    recorder: EventRecorder,
    queue: Queue<ServiceKey>,
    records: Arc<Mutex<HashMap<ServiceKey, Record>>>,
    node_changed: Arc<Notify>,
    /// The Services the last node-sync pass queued whose sync has not finished yet; the
    /// next pass waits until it is empty.
    pass_pending: watch::Sender<HashSet<ServiceKey>>,
    /// Services a node-sync pass found being synced: compared again when that sync ends.
    after_sync: Mutex<HashSet<ServiceKey>>,
    /// Bumped on every Node event (after the cache has it).
    node_generation: Arc<AtomicU64>,
    /// The eligible Nodes and their set, as of a Node generation: recomputed only after a
    /// Node event, so a thousand syncs between two Node events sort and map the Nodes once.
    /// The set is shared by every record given it: M load balancers on the same N Nodes hold
    /// one set, not M copies, and comparing them is a pointer check.
    eligible: Mutex<Option<EligibleNodes>>,
    config: ServiceControllerConfig,
    metrics: Metrics,
}

/// The eligible Nodes (sorted by name) and their set, computed at a Node generation.
#[derive(Clone)]
struct EligibleNodes {
    generation: u64,
    nodes: Arc<[Arc<Node>]>,
    hosts: Arc<NodeSet>,
}

/// What the controller knows about one Service it synced (Go's service cache, plus the
/// Nodes its load balancer was given).
struct Record {
    /// The last version a sync worked on, or the last version before it was deleted.
    service: Arc<Service>,
    lb: LbState,
    /// The last sync failed: the next one ensures in full, and node-sync leaves it to
    /// its backoff.
    failing: bool,
    /// A worker is syncing it now.
    syncing: bool,
}

impl Record {
    fn new(service: Arc<Service>) -> Self {
        Self {
            service,
            lb: LbState::Unknown,
            failing: false,
            syncing: false,
        }
    }

    fn hosts_state(&self) -> HostsState<'_> {
        if self.syncing {
            HostsState::Syncing
        } else if self.failing {
            HostsState::Failing
        } else if let LbState::Applied { hosts, .. } = &self.lb {
            HostsState::Applied(hosts.as_ref())
        } else {
            HostsState::None
        }
    }

    /// What a sync decides from: a copy of the record, to read without the lock.
    fn known(&self) -> Known {
        Known {
            service: self.service.clone(),
            lb: self.lb.clone(),
            failing: self.failing,
        }
    }
}

/// Marks the record of `service` as being synced, creating it, or replacing one of another
/// UID with a new one.
fn start_sync(records: &mut HashMap<ServiceKey, Record>, key: &ServiceKey, service: &Arc<Service>) {
    let record = records
        .entry(key.clone())
        .or_insert_with(|| Record::new(service.clone()));
    if record.service.metadata.uid != service.metadata.uid {
        *record = Record::new(service.clone());
    }
    record.service = service.clone();
    record.syncing = true;
}

/// Where the controller counts (Go's `service_controller_*` metrics); unregistered
/// stand-ins without [`ServiceControllerConfig::with_metrics`].
struct Metrics {
    load_balancer_syncs: Counter,
    node_sync_errors: Counter,
    node_sync_latency: Histogram,
    update_host_latency: Histogram,
}

impl From<&ControllerMetrics> for Metrics {
    fn from(metrics: &ControllerMetrics) -> Self {
        Self {
            load_balancer_syncs: metrics.loadbalancer_sync.clone(),
            node_sync_errors: metrics.nodesync_error.clone(),
            node_sync_latency: metrics.nodesync_latency.clone(),
            update_host_latency: metrics.update_loadbalancer_host_latency.clone(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            load_balancer_syncs: Counter::default(),
            node_sync_errors: Counter::default(),
            node_sync_latency: Histogram::new([1.0]),
            update_host_latency: Histogram::new([1.0]),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the map consistent, so a panic elsewhere cannot break it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a sync failed: the message for the event and log, and a fixed delay if the provider
/// asked for one.
#[derive(Debug)]
struct SyncError {
    /// Cut to a bound (see [`cut_message`]).
    message: String,
    retry_after: Option<Duration>,
    /// The provider refused to touch a load balancer that is not the Service's
    /// ([`CloudError::NotOwned`]): reported as [`REASON_NOT_OWNED`].
    not_owned: bool,
}

impl SyncError {
    fn cloud(context: &str, err: &CloudError) -> Self {
        Self {
            message: cut_message(format!("{context}: {}", err.chain_to_string())),
            retry_after: err.retry_after_delay(),
            not_owned: err.is_not_owned(),
        }
    }

    fn api(context: &str, err: &kube::Error) -> Self {
        Self {
            message: cut_message(format!("{context}: {err}")),
            retry_after: None,
            not_owned: false,
        }
    }

    /// The event this error is reported with on a failed sync: its reason and note.
    fn event(&self) -> (&'static str, String) {
        if self.not_owned {
            (
                REASON_NOT_OWNED,
                format!(
                    "Error syncing load balancer: {}; it was left unchanged",
                    self.message
                ),
            )
        } else {
            (
                REASON_SYNC_FAILED,
                format!("Error syncing load balancer: {}", self.message),
            )
        }
    }

    fn outcome(&self) -> Outcome {
        self.retry_after
            .map_or(Outcome::Retry, Outcome::RequeueAfter)
    }
}

/// Clears a record's `syncing` flag when the sync ends, however it ends.
struct SyncingGuard<'a> {
    records: &'a Mutex<HashMap<ServiceKey, Record>>,
    key: &'a ServiceKey,
}

impl Drop for SyncingGuard<'_> {
    fn drop(&mut self) {
        if let Some(record) = lock(self.records).get_mut(self.key) {
            record.syncing = false;
        }
    }
}

impl ServiceController {
    /// A controller for `provider`'s load balancers, or `None` when the provider has none
    /// (Go does not start the controller then).
    ///
    /// `services` and `nodes` are the shared informers; the controller subscribes to them
    /// here, so create it before they run.
    pub fn new(
        client: Client,
        provider: &Arc<dyn CloudProvider>,
        services: Informer<Service>,
        nodes: Informer<Node>,
        config: ServiceControllerConfig,
    ) -> Option<Self> {
        provider.load_balancer()?;
        let queue = Queue::new("service", config.rate_limit);
        let records: Arc<Mutex<HashMap<ServiceKey, Record>>> = Arc::default();
        let node_changed = Arc::new(Notify::new());
        let node_generation = Arc::new(AtomicU64::new(0));

        {
            let queue = queue.clone();
            let records = records.clone();
            services.subscribe(move |change| {
                on_service_change(change, &queue, &records);
            });
        }
        {
            let node_changed = node_changed.clone();
            let node_generation = node_generation.clone();
            nodes.subscribe(move |change| {
                // Any change: the Nodes handed to the provider carry more than the set.
                node_generation.fetch_add(1, Ordering::Release);
                let matters = match change {
                    Change::Applied {
                        old: Some(old),
                        new,
                    } => node_update_matters(old, new),
                    Change::Applied { old: None, .. } | Change::Deleted(_) => true,
                };
                if matters {
                    node_changed.notify_one();
                }
            });
        }

        Some(Self {
            inner: Inner {
                client: client.clone(),
                provider: provider.clone(),
                services,
                nodes,
                recorder: EventRecorder::new(client, COMPONENT),
                queue,
                records,
                eligible: Mutex::default(),
                node_generation,
                node_changed,
                pass_pending: watch::Sender::new(HashSet::new()),
                after_sync: Mutex::default(),
                metrics: config
                    .metrics
                    .as_ref()
                    .map(Metrics::from)
                    .unwrap_or_default(),
                config,
            },
        })
    }

    /// The controller's work queue, for metrics.
    pub fn queue(&self) -> &Queue<ServiceKey> {
        &self.inner.queue
    }

    /// Runs until `cancel` fires: waits for the Service and Node caches, then syncs Services
    /// with `workers` workers and runs node-sync passes. A sync in flight when `cancel`
    /// fires is abandoned at its next await point; the finalizer makes that safe.
    pub async fn run(self, cancel: CancellationToken) {
        let Self { inner } = self;
        let inner = Arc::new(inner);
        let synced =
            async { inner.services.wait_synced().await && inner.nodes.wait_synced().await };
        tokio::select! {
            synced = synced => if !synced { return },
            () = cancel.cancelled() => return,
        }
        tracing::info!(
            workers = inner.config.workers,
            "starting service controller"
        );
        // Services listed before this controller subscribed.
        for service in inner.services.store().state() {
            if wanted_on_add(&service) {
                inner.queue.add(ServiceKey::of(&service));
            }
        }
        let workers = {
            let inner = inner.clone();
            let cancel = cancel.clone();
            run(
                inner.queue.clone(),
                inner.config.workers,
                cancel.clone(),
                move |key: ServiceKey| {
                    let inner = inner.clone();
                    let cancel = cancel.clone();
                    async move {
                        cancel
                            .run_until_cancelled(inner.sync(&key))
                            .await
                            .unwrap_or(Outcome::Done)
                    }
                },
            )
        };
        tokio::join!(workers, inner.node_sync_loop(&cancel),);
        tracing::info!("service controller stopped");
    }
}

/// The Service informer's handler: queues what Go queues, plus deletions of Services whose
/// load balancer may still exist.
fn on_service_change(
    change: &Change<Service>,
    queue: &Queue<ServiceKey>,
    records: &Mutex<HashMap<ServiceKey, Record>>,
) {
    match change {
        Change::Applied { old: None, new } => {
            if wanted_on_add(new) {
                queue.add(ServiceKey::of(new));
            }
        }
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if let Some(cause) = needs_update(old, new) {
                // Go (since cloud-provider v0.32) logs the change at V(2) and records no
                // event for it.
                if let Some((what, change)) = cause.event() {
                    tracing::debug!(
                        service = %ServiceKey::of(new),
                        what,
                        change = %change,
                        "Service changed; its load balancer needs an update"
                    );
                }
                queue.add(ServiceKey::of(new));
            } else if needs_cleanup(new) {
                queue.add(ServiceKey::of(new));
            }
        }
        Change::Deleted(last) => {
            let key = ServiceKey::of(last);
            let mut records = lock(records);
            if records.contains_key(&key) {
                queue.add(key);
            } else if wants_load_balancer(last) || has_finalizer(last) {
                // Never synced by this controller (it may have started after the finalizer
                // was removed): remember the last version, so its load balancer is deleted.
                records.insert(key.clone(), Record::new(last.clone()));
                queue.add(key);
            }
        }
    }
}

impl Inner {
    fn load_balancer(&self) -> Result<&dyn LoadBalancer, CloudError> {
        self.provider
            .load_balancer()
            .ok_or(CloudError::NotImplemented)
    }

    fn api(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn cluster(&self) -> &str {
        &self.config.cluster_name
    }

    /// One pass of the work queue for one Service.
    async fn sync(&self, key: &ServiceKey) -> Outcome {
        let started = tokio::time::Instant::now();
        let cached = self
            .services
            .store()
            .get(&ObjectRef::new(&key.name).within(&key.namespace));
        let result = match cached {
            None => self.sync_gone(key).await,
            Some(service) => self.sync_present(key, service).await,
        };
        if let Some(record) = lock(&self.records).get_mut(key) {
            record.failing = result.is_err();
        }
        // Done or failed (then left to its backoff), it no longer holds up the next pass.
        self.pass_pending
            .send_if_modified(|pending| pending.remove(key));
        // A pass found it being synced: if the sync succeeded with Nodes that are no longer
        // current, it is queued now (a failed one is left to its backoff).
        if lock(&self.after_sync).remove(key) && result.is_ok() {
            let current = self.eligible_nodes().hosts;
            let stale = lock(&self.records).get(key).is_some_and(|r| {
                wants_load_balancer(&r.service)
                    && node_sync_step(r.hosts_state(), &current) == NodeSyncStep::Update
            });
            if stale {
                self.queue.add(key.clone());
            }
        }
        match result {
            Ok(()) => {
                tracing::debug!(service = %key, took = ?started.elapsed(), "finished syncing service");
                Outcome::Done
            }
            Err(err) => {
                let outcome = err.outcome();
                tracing::warn!(service = %key, error = %err.message, ?outcome, "error processing service (will retry)");
                outcome
            }
        }
    }

    /// The Service is gone from the cache: delete the load balancer its last version may
    /// have had.
    async fn sync_gone(&self, key: &ServiceKey) -> Result<(), SyncError> {
        let known = lock(&self.records).get(key).map(Record::known);
        let last = match plan_gone(known.as_ref()) {
            GoneStep::Nothing => return Ok(()),
            GoneStep::Forget => {
                lock(&self.records).remove(key);
                return Ok(());
            }
            GoneStep::DeleteLoadBalancer { last } => last,
        };
        if let Some(record) = lock(&self.records).get_mut(key) {
            record.syncing = true;
        }
        let _guard = SyncingGuard {
            records: &self.records,
            key,
        };
        tracing::info!(service = %key, "service has been deleted; cleaning up its load balancer");
        self.delete_load_balancer_of(&last).await?;
        lock(&self.records).remove(key);
        Ok(())
    }

    /// Go's `processLoadBalancerDelete`: deletes the load balancer of a Service version
    /// that is gone or replaced, with events.
    async fn delete_load_balancer_of(&self, service: &Service) -> Result<(), SyncError> {
        self.recorder.normal(
            service,
            REASON_DELETING,
            "DeleteLoadBalancer",
            "Deleting load balancer",
        );
        let result = match self.load_balancer() {
            Ok(lb) => {
                lb.ensure_load_balancer_deleted(self.cluster(), service)
                    .await
            }
            Err(err) => Err(err),
        };
        match deletion(&result) {
            Deletion::Done => {}
            Deletion::LeftAlone(err) => self.left_alone(service, err),
            Deletion::Failed(err) => {
                let err = SyncError::cloud("failed to delete load balancer", err);
                self.recorder.warning(
                    service,
                    REASON_DELETE_FAILED,
                    "DeleteLoadBalancer",
                    format!("Error deleting load balancer: {}", err.message),
                );
                return Err(err);
            }
        }
        self.recorder.normal(
            service,
            REASON_DELETED,
            "DeleteLoadBalancer",
            "Deleted load balancer",
        );
        Ok(())
    }

    async fn sync_present(&self, key: &ServiceKey, service: Arc<Service>) -> Result<(), SyncError> {
        // What the controller knew of the Service when the sync began. Its own record (the
        // same UID, or a new one) is marked as being synced at once, before the Nodes are
        // read, so that a node-sync pass from here on queues the Service again; a record of
        // another UID is left as it is until its load balancer has been dealt with.
        let (known, marked) = {
            let mut records = lock(&self.records);
            let known = records.get(key).map(Record::known);
            let own = known
                .as_ref()
                .is_none_or(|k| k.service.metadata.uid == service.metadata.uid);
            if own {
                start_sync(&mut records, key, &service);
            }
            (known, own)
        };
        let _guard = SyncingGuard {
            records: &self.records,
            key,
        };
        let EligibleNodes { nodes, hosts, .. } = self.eligible_nodes();
        let plan = plan(&service, known.as_ref(), &hosts);

        // A different UID under the same name: the Service was deleted and created again
        // while we looked away. The old one's load balancer goes first.
        if let Some(old) = &plan.delete_replaced {
            tracing::info!(service = %key, "service was replaced; deleting the old load balancer first");
            self.delete_load_balancer_of(old).await?;
            lock(&self.records).remove(key);
        }
        if !marked {
            start_sync(&mut lock(&self.records), key, &service);
        }

        match plan.step {
            Step::CleanUp => {
                let result = self.delete_branch(key, service.clone()).await;
                self.sync_failed(&service, result).await
            }
            Step::UpdateHosts => self.update_hosts(key, &service, &nodes, hosts).await,
            Step::Ensure => {
                let result = self.ensure_branch(key, service.clone()).await;
                self.sync_failed(&service, result).await
            }
            Step::Nothing => Ok(()),
        }
    }

    /// Records Go's `SyncLoadBalancerFailed` Warning for a failed sync.
    async fn sync_failed(
        &self,
        service: &Service,
        result: Result<(), SyncError>,
    ) -> Result<(), SyncError> {
        if let Err(err) = &result {
            let (reason, note) = err.event();
            self.recorder
                .warning(service, reason, "SyncLoadBalancer", note);
        }
        result
    }

    /// Reports a load balancer the provider left alone on deletion because it is not the
    /// Service's ([`CloudError::NotOwned`]): a Warning and a log line, both bounded.
    fn left_alone(&self, service: &Service, err: &CloudError) {
        let message = cut_message(err.chain_to_string());
        tracing::warn!(
            service = %ServiceKey::of(service),
            error = %message,
            "load balancer is not this service's; left it alone and finished the deletion"
        );
        self.recorder.warning(
            service,
            REASON_NOT_OWNED,
            "DeleteLoadBalancer",
            format!("Did not delete: {message}; it was left alone"),
        );
    }

    /// The Service no longer wants a load balancer (or is being deleted): delete it, then
    /// remove the finalizer, then clear the status.
    async fn delete_branch(
        &self,
        key: &ServiceKey,
        service: Arc<Service>,
    ) -> Result<(), SyncError> {
        let lb = self.load_balancer().map_err(|e| {
            SyncError::cloud("failed to check if load balancer exists before cleanup", &e)
        })?;
        let answer = lb.get_load_balancer(self.cluster(), &service).await;
        let exists = delete_call_needed(&answer).map_err(|e| {
            SyncError::cloud("failed to check if load balancer exists before cleanup", e)
        })?;
        if exists {
            tracing::info!(service = %key, "deleting existing load balancer");
            self.recorder.normal(
                &*service,
                REASON_DELETING,
                "DeleteLoadBalancer",
                "Deleting load balancer",
            );
            self.metrics.load_balancer_syncs.inc();
            let result = lb
                .ensure_load_balancer_deleted(self.cluster(), &service)
                .await;
            match deletion(&result) {
                Deletion::Done => {
                    if result.is_err() {
                        tracing::debug!(service = %key, "load balancer implemented elsewhere; ignoring the deletion error");
                    }
                    if let Err(foreign) = &answer {
                        // `get_load_balancer` said the hint leads to a load balancer that
                        // is not the Service's; the deletion left it alone.
                        self.left_alone(&service, foreign);
                    }
                }
                Deletion::LeftAlone(err) => self.left_alone(&service, err),
                Deletion::Failed(err) => {
                    return Err(SyncError::cloud("failed to delete load balancer", err));
                }
            }
        }
        let api = self.api(&key.namespace);
        let written = writes::remove_finalizer(&api, service.clone())
            .await
            .map_err(|e| SyncError::api("failed to remove load balancer cleanup finalizer", &e))?;
        self.recorder.normal(
            &*service,
            REASON_DELETED,
            "DeleteLoadBalancer",
            "Deleted load balancer",
        );
        if let Some(current) = written.filter(|s| !writes::is_going_away(s)) {
            writes::set_ingress(&api, current, &[])
                .await
                .map_err(|e| SyncError::api("failed to update load balancer status", &e))?;
        }
        if let Some(record) = lock(&self.records).get_mut(key) {
            record.lb = LbState::Cleaned;
        }
        Ok(())
    }

    /// The Service wants a load balancer: finalizer first, then the cloud, then the status.
    async fn ensure_branch(
        &self,
        key: &ServiceKey,
        service: Arc<Service>,
    ) -> Result<(), SyncError> {
        tracing::info!(service = %key, "ensuring load balancer");
        self.recorder.normal(
            &*service,
            REASON_ENSURING,
            "EnsureLoadBalancer",
            "Ensuring load balancer",
        );
        let api = self.api(&key.namespace);
        let Some(service) = writes::add_finalizer(&api, service)
            .await
            .map_err(|e| SyncError::api("failed to add load balancer cleanup finalizer", &e))?
        else {
            tracing::debug!(service = %key, "service is gone; nothing to ensure");
            return Ok(());
        };
        let lb = self
            .load_balancer()
            .map_err(|e| SyncError::cloud("failed to ensure load balancer", &e))?;
        let EligibleNodes { nodes, hosts, .. } = self.eligible_nodes();
        if nodes.is_empty() {
            self.recorder.warning(
                &*service,
                REASON_UNAVAILABLE,
                "EnsureLoadBalancer",
                "There are no available nodes for LoadBalancer",
            );
        }
        self.metrics.load_balancer_syncs.inc();
        let status = match lb
            .ensure_load_balancer(self.cluster(), &service, &nodes)
            .await
        {
            Ok(status) => status,
            Err(err) if err.is_implemented_elsewhere() => {
                tracing::debug!(service = %key, "load balancer implemented elsewhere; nothing to do");
                self.applied(key, &service, hosts);
                return Ok(());
            }
            Err(err) => return Err(SyncError::cloud("failed to ensure load balancer", &err)),
        };
        let ingress = status.ingress.unwrap_or_default();
        validate_ingress(&ingress).map_err(|why| SyncError {
            message: cut_message(format!(
                "the cloud provider returned a load balancer status that cannot be written: {why}"
            )),
            retry_after: None,
            not_owned: false,
        })?;
        self.recorder.normal(
            &*service,
            REASON_ENSURED,
            "EnsureLoadBalancer",
            "Ensured load balancer",
        );
        writes::set_ingress(&api, service.clone(), &ingress)
            .await
            .map_err(|e| SyncError::api("failed to update load balancer status", &e))?;
        self.applied(key, &service, hosts);
        Ok(())
    }

    /// The eligible Nodes now and their set: the cached ones unless a Node event came since
    /// they were computed; a recomputed set equal to the last is the same shared `Arc`.
    fn eligible_nodes(&self) -> EligibleNodes {
        // Read before the cache: an event after this read bumps it again, so the cache is
        // never older than the generation it is filed under.
        let generation = self.node_generation.load(Ordering::Acquire);
        let mut cached = lock(&self.eligible);
        if let Some(current) = cached.as_ref().filter(|c| c.generation == generation) {
            return current.clone();
        }
        let nodes: Arc<[Arc<Node>]> = eligible_nodes(self.nodes.store().state()).into();
        let set = node_set(&nodes);
        let hosts = match cached.as_ref() {
            Some(last) if *last.hosts == set => last.hosts.clone(),
            _ => Arc::new(set),
        };
        cached
            .insert(EligibleNodes {
                generation,
                nodes,
                hosts,
            })
            .clone()
    }

    fn applied(&self, key: &ServiceKey, service: &Arc<Service>, hosts: Arc<NodeSet>) {
        if let Some(record) = lock(&self.records).get_mut(key) {
            record.lb = LbState::Applied {
                service: service.clone(),
                hosts,
            };
        }
    }

    /// Points an ensured load balancer at the eligible `nodes` (whose set is `hosts`), which
    /// differ from those it was given (Go's node-sync `UpdateLoadBalancer`).
    async fn update_hosts(
        &self,
        key: &ServiceKey,
        service: &Arc<Service>,
        nodes: &[Arc<Node>],
        hosts: Arc<NodeSet>,
    ) -> Result<(), SyncError> {
        let lb = self
            .load_balancer()
            .map_err(|e| SyncError::cloud("failed to update load balancer hosts", &e))?;
        tracing::info!(service = %key, nodes = hosts.len(), "updating load balancer hosts");
        tracing::debug!(service = %key, nodes = ?hosts.keys().collect::<Vec<_>>(), "load balancer hosts");
        self.metrics.load_balancer_syncs.inc();
        let started = tokio::time::Instant::now();
        let result = lb
            .update_load_balancer(self.cluster(), service, nodes)
            .await;
        self.metrics
            .update_host_latency
            .observe(started.elapsed().as_secs_f64());
        let err = match result {
            Ok(()) => {
                if nodes.is_empty() {
                    self.recorder.warning(
                        &**service,
                        REASON_UNAVAILABLE,
                        "UpdateLoadBalancer",
                        "There are no available nodes for LoadBalancer",
                    );
                } else {
                    self.recorder.normal(
                        &**service,
                        REASON_UPDATED,
                        "UpdateLoadBalancer",
                        "Updated load balancer with new hosts",
                    );
                }
                self.applied(key, service, hosts);
                return Ok(());
            }
            Err(err) if err.is_implemented_elsewhere() => {
                self.applied(key, service, hosts);
                return Ok(());
            }
            Err(err) if err.is_not_owned() => {
                // Refused: the load balancer a hint on the Service leads to is not its.
                // Not "gone" either: no existence check, a Warning and a retry.
                self.metrics.node_sync_errors.inc();
                let err = SyncError::cloud("failed to update load balancer hosts", &err);
                self.recorder.warning(
                    &**service,
                    REASON_NOT_OWNED,
                    "UpdateLoadBalancer",
                    format!(
                        "Error updating load balancer with new hosts: {}; it was left unchanged",
                        err.message
                    ),
                );
                return Err(err);
            }
            Err(err) => err,
        };
        // It is only an error if the load balancer still exists.
        match lb.get_load_balancer(self.cluster(), service).await {
            Ok(None) => {
                tracing::info!(service = %key, "load balancer is gone; nothing to update");
                self.applied(key, service, hosts);
                return Ok(());
            }
            Ok(Some(_)) => {}
            Err(get_err) => {
                tracing::warn!(service = %key, error = %get_err.chain_to_string(), "failed to check if load balancer exists");
            }
        }
        self.metrics.node_sync_errors.inc();
        let names: Vec<&str> = nodes.iter().map(|n| node_name(n)).collect();
        let err = SyncError::cloud("failed to update load balancer hosts", &err);
        self.recorder.warning(
            &**service,
            REASON_UPDATE_FAILED,
            "UpdateLoadBalancer",
            format!(
                "Error updating load balancer with new hosts {}: {}",
                decision::go_list(&names),
                err.message
            ),
        );
        Err(err)
    }

    /// Runs a node-sync pass after each (debounced) Node change, and periodically.
    async fn node_sync_loop(&self, cancel: &CancellationToken) {
        let mut tick = self
            .config
            .node_sync_period
            .filter(|p| !p.is_zero())
            .map(|p| {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick
            });
        loop {
            let periodic = async {
                match tick.as_mut() {
                    Some(tick) => {
                        tick.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.node_changed.notified() => {}
                () = periodic => {}
                () = cancel.cancelled() => return,
            }
            let started = tokio::time::Instant::now();
            let mut changes = &*self.node_changed;
            tokio::select! {
                () = settle(started, self.config.node_sync_debounce, &mut changes) => {}
                () = cancel.cancelled() => return,
            }
            // Changes during the wait are in the cache now; drop their wake-up.
            let _ = self.node_changed.notified().now_or_never();
            self.node_sync_pass();
            // Coalesce: changes from here on wait for this pass's updates (their wake-up
            // is kept by `node_changed`), so a load balancer is not queued again while its
            // update for this pass is still waiting or running.
            let mut pending = self.pass_pending.subscribe();
            tokio::select! {
                _ = pending.wait_for(HashSet::is_empty) => {}
                () = tokio::time::sleep(NODE_SYNC_DRAIN_MAX) => {
                    tracing::warn!(
                        waiting = self.pass_pending.borrow().len(),
                        "node sync: load balancer updates of the last pass still pending after {NODE_SYNC_DRAIN_MAX:?}; starting the next pass"
                    );
                }
                () = cancel.cancelled() => return,
            }
        }
    }

    /// Queues every Service whose load balancer was given other Nodes than the eligible
    /// ones now. The updates run on the service workers.
    fn node_sync_pass(&self) {
        let started = tokio::time::Instant::now();
        let mut stale = Vec::new();
        // Read (or recomputed) at the first Service that wants a load balancer: without one,
        // the Nodes need not even be read.
        let mut current: Option<Arc<NodeSet>> = None;
        {
            let records = lock(&self.records);
            let mut after_sync = lock(&self.after_sync);
            for (key, record) in records.iter() {
                if !wants_load_balancer(&record.service) {
                    continue;
                }
                let current = current.get_or_insert_with(|| self.eligible_nodes().hosts);
                match node_sync_step(record.hosts_state(), current) {
                    NodeSyncStep::Update => stale.push(key.clone()),
                    NodeSyncStep::AfterSync => {
                        after_sync.insert(key.clone());
                    }
                    NodeSyncStep::Nothing => {}
                }
            }
        }
        tracing::debug!(
            nodes = current.as_ref().map_or(0, |c| c.len()),
            services = stale.len(),
            "node sync: queueing load balancers whose nodes changed"
        );
        self.pass_pending
            .send_replace(stale.iter().cloned().collect());
        for key in stale {
            self.queue.add(key);
        }
        self.metrics
            .node_sync_latency
            .observe(started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_as_namespace_slash_name() {
        let mut svc = Service::default();
        svc.metadata.namespace = Some("ns".into());
        svc.metadata.name = Some("web".into());
        let key = ServiceKey::of(&svc);
        assert_eq!(key, ServiceKey::new("ns", "web"));
        assert_eq!(key.to_string(), "ns/web");
        assert_eq!(ServiceKey::of(&Service::default()).to_string(), "/");
    }

    #[test]
    fn errors_map_to_outcomes() {
        let fixed = SyncError::cloud(
            "x",
            &CloudError::retry_after("busy", Duration::from_secs(3)),
        );
        assert_eq!(
            fixed.outcome(),
            Outcome::RequeueAfter(Duration::from_secs(3))
        );
        assert_eq!(fixed.message, "x: busy (retry after 3s)");
        let other = SyncError::cloud("failed to ensure load balancer", &CloudError::msg("boom"));
        assert_eq!(other.outcome(), Outcome::Retry);
        assert_eq!(other.message, "failed to ensure load balancer: boom");
        assert_eq!(
            other.event(),
            (
                REASON_SYNC_FAILED,
                "Error syncing load balancer: failed to ensure load balancer: boom".to_owned()
            )
        );
    }

    #[test]
    fn a_load_balancer_that_is_not_the_services_is_its_own_warning_with_the_normal_backoff() {
        let err = SyncError::cloud(
            "failed to ensure load balancer",
            &CloudError::not_owned(
                "lb-1",
                "annotation example.com/lb-id names it, but it was made for another Service",
            ),
        );
        assert_eq!(err.outcome(), Outcome::Retry, "backoff, not a fixed delay");
        assert_eq!(
            err.event(),
            (
                REASON_NOT_OWNED,
                "Error syncing load balancer: failed to ensure load balancer: load balancer \
                 \"lb-1\" is not this Service's: annotation example.com/lb-id names it, but it \
                 was made for another Service; it was left unchanged"
                    .to_owned()
            )
        );
        // However long what the provider quotes, the message stays one bounded line.
        let long = SyncError::cloud("failed", &CloudError::msg("x".repeat(100_000)));
        assert!(long.message.len() < 1100, "{}", long.message.len());
    }

    #[test]
    fn default_config_is_gos() {
        let c = ServiceControllerConfig::default();
        assert_eq!(c.workers, 1);
        assert_eq!(c.cluster_name, "kubernetes");
        assert_eq!(
            c.rate_limit,
            RateLimit::exponential(Duration::from_secs(5), Duration::from_secs(300))
        );
    }

    fn svc(uid: &str, lb: bool) -> Arc<Service> {
        let mut s = Service::default();
        s.metadata.uid = Some(uid.into());
        s.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: Some(if lb { "LoadBalancer" } else { "ClusterIP" }.into()),
            ..Default::default()
        });
        Arc::new(s)
    }

    #[test]
    fn records_report_their_hosts_state() {
        let mut r = Record::new(svc("u", true));
        assert_eq!(r.hosts_state(), HostsState::None);
        assert!(r.known().may_have_load_balancer());
        let hosts = NodeSet::from([("a".into(), String::new())]);
        r.lb = LbState::Applied {
            service: svc("u", true),
            hosts: Arc::new(hosts.clone()),
        };
        assert_eq!(r.hosts_state(), HostsState::Applied(&hosts));
        r.failing = true;
        assert_eq!(r.hosts_state(), HostsState::Failing);
        r.syncing = true;
        assert_eq!(r.hosts_state(), HostsState::Syncing);
        r.lb = LbState::Cleaned;
        assert!(!r.known().may_have_load_balancer());
        assert!(
            !Record::new(svc("u", false))
                .known()
                .may_have_load_balancer()
        );
    }

    #[test]
    fn a_record_copy_carries_what_the_plan_reads() {
        let mut r = Record::new(svc("u", true));
        let hosts = Arc::new(NodeSet::from([("a".into(), String::new())]));
        r.lb = LbState::Applied {
            service: svc("u", true),
            hosts: hosts.clone(),
        };
        r.failing = true;
        r.syncing = true;
        let known = r.known();
        assert!(Arc::ptr_eq(&known.service, &r.service));
        assert!(known.failing);
        assert!(matches!(&known.lb, LbState::Applied { hosts: h, .. } if Arc::ptr_eq(h, &hosts)));
    }

    #[test]
    fn starting_a_sync_marks_the_record_and_replaces_one_of_another_uid() {
        let key = ServiceKey::new("ns", "a");
        let mut records = HashMap::new();
        // No record yet: a new one, marked.
        let first = svc("u1", true);
        start_sync(&mut records, &key, &first);
        let r = &records[&key];
        assert!(r.syncing && !r.failing && matches!(r.lb, LbState::Unknown));
        assert!(Arc::ptr_eq(&r.service, &first));
        // The same UID: the state is kept, the version is the new one.
        let r = records.get_mut(&key).unwrap();
        r.syncing = false;
        r.failing = true;
        r.lb = LbState::Cleaned;
        let edited = svc("u1", false);
        start_sync(&mut records, &key, &edited);
        let r = &records[&key];
        assert!(r.syncing && r.failing && matches!(r.lb, LbState::Cleaned));
        assert!(Arc::ptr_eq(&r.service, &edited));
        // Another UID: a new record.
        let replaced = svc("u2", true);
        start_sync(&mut records, &key, &replaced);
        let r = &records[&key];
        assert!(r.syncing && !r.failing && matches!(r.lb, LbState::Unknown));
        assert!(Arc::ptr_eq(&r.service, &replaced));
    }

    fn queued(q: &Queue<ServiceKey>) -> usize {
        q.len()
    }

    #[tokio::test]
    async fn informer_changes_queue_what_go_queues() {
        let q = Queue::new(
            "t",
            RateLimit::exponential(Duration::from_secs(1), Duration::from_secs(1)),
        );
        let records = Mutex::new(HashMap::new());
        let mut lb = (*svc("u1", true)).clone();
        lb.metadata.namespace = Some("ns".into());
        lb.metadata.name = Some("a".into());
        let lb = Arc::new(lb);
        let mut cluster_ip = (*lb).clone();
        cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let cluster_ip = Arc::new(cluster_ip);

        // Add: wanted.
        on_service_change(
            &Change::Applied {
                old: None,
                new: lb.clone(),
            },
            &q,
            &records,
        );
        assert_eq!(queued(&q), 1);
        let item = q.get().await.unwrap();
        drop(item);
        // Add: not wanted.
        on_service_change(
            &Change::Applied {
                old: None,
                new: cluster_ip.clone(),
            },
            &q,
            &records,
        );
        assert_eq!(queued(&q), 0);
        // Update without a relevant change.
        on_service_change(
            &Change::Applied {
                old: Some(lb.clone()),
                new: lb.clone(),
            },
            &q,
            &records,
        );
        assert_eq!(queued(&q), 0);
        // Update: type changed away → queued (Go records no event for it any more).
        on_service_change(
            &Change::Applied {
                old: Some(lb.clone()),
                new: cluster_ip.clone(),
            },
            &q,
            &records,
        );
        assert_eq!(queued(&q), 1);
        drop(q.get().await.unwrap());
        // Deleted, never synced, wanted a load balancer: remembered and queued.
        on_service_change(&Change::Deleted(lb.clone()), &q, &records);
        assert_eq!(queued(&q), 1);
        assert!(lock(&records).contains_key(&ServiceKey::new("ns", "a")));
        drop(q.get().await.unwrap());
        // Deleted, never wanted one: ignored.
        lock(&records).clear();
        on_service_change(&Change::Deleted(cluster_ip), &q, &records);
        assert_eq!(queued(&q), 0);
        assert!(lock(&records).is_empty());
    }
}
