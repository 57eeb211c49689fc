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
//! Services of one namespace with the same [`SHARING_KEY_ANNOTATION`] share one load
//! balancer when the provider opts in (`LoadBalancer::load_balancer_sharing`): the `shared`
//! module stands between the steps and the provider, so each member keeps its own
//! finalizer, status and events while the provider is asked once per group (see
//! docs/controllers.md, "Shared load balancers").
//!
//! A Service may narrow its Nodes with a label selector, the annotation
//! [`NODE_SELECTOR_ANNOTATION`] (`kubectl -l` syntax, read by the parser of
//! `--node-selector`): its load balancer gets the eligible Nodes the selector selects (the
//! `eligible` module caches them per selector, once per Node change), and the node-sync
//! pass compares each load balancer with its own Service's Nodes, so a Node relabelled
//! across a selector updates exactly the load balancers concerned. A selector that does not
//! parse is a [`REASON_INVALID_NODE_SELECTOR`] Warning and a retry with backoff; the load
//! balancer is left as it is (no ensure, no update, never deleted for it). Without the
//! annotation, every eligible Node, as in Go. Not one of Go's features.
//!
//! Which Services it manages is [`LoadBalancerClasses`]'s answer (the `class` module): Go's
//! by default, or the Services of the classes given by `--load-balancer-class`, each class
//! with its own cleanup finalizer, and Services of any other class never touched.
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
//!
//! The files, one job each: this one holds the settings, [`ServiceController::new`] (the
//! informer subscriptions) and [`run`](ServiceController::run); `class` the Services it
//! manages; `records` what the
//! controller remembers of each Service; `eligible` the eligible Nodes (of every Service,
//! and of each node selector), computed once per Node change; `node_sync` the node-sync loop; `sync` one pass of the work queue for one
//! Service, with the one function that reports a failure, and `steps` its cloud steps
//! (ensure, update the Nodes, clean up, delete); `shared` the groups sharing a load
//! balancer; `failure` what failed and which Warning
//! it gets; `writes` the guarded patches; `decision` the pure decisions they all follow.
//!
//! [`CloudError::NotOwned`]: ccm_provider::CloudError::NotOwned

mod class;
mod decision;
mod eligible;
mod failure;
mod health;
mod node_sync;
mod records;
mod shared;
mod steps;
mod sync;
mod writes;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use prometheus_client::metrics::histogram::Histogram;
use tokio_util::sync::CancellationToken;

pub use self::class::{ClassError, LoadBalancerClasses, MAX_LOAD_BALANCER_CLASSES};
pub use self::decision::conditions::{
    LOAD_BALANCER_DEGRADED, LOAD_BALANCER_PROVISIONING, LOAD_BALANCER_SERVING,
};
pub use self::decision::shared::{
    MAX_SHARED_MEMBERS, MAX_SHARING_KEY_LEN, METALLB_SHARING_ANNOTATION, SHARING_KEY_ANNOTATION,
    SHARING_KEY_APPLIED_ANNOTATION,
};
use self::decision::wants::{
    has_finalizer, needs_cleanup, needs_update, waits_for_load_balancer, wanted_on_add,
    wants_load_balancer,
};
use self::node_sync::NodeSync;
use self::records::{Record, Records};
use self::sync::{Metrics, Worker};
use crate::events::EventRecorder;
use crate::informer::{Change, Informer};
use crate::metrics::ControllerMetrics;
use crate::shadow::ControllerShadow;
use crate::workqueue::{Outcome, Queue, RateLimit, run};
use ccm_provider::CloudProvider;

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
///
/// [`CloudError::NotOwned`]: ccm_provider::CloudError::NotOwned
pub const REASON_NOT_OWNED: &str = "LoadBalancerNotOwned";
/// Event reason (Warning): the Service asks to share a load balancer
/// ([`SHARING_KEY_ANNOTATION`]) and may not: its key is not one, its ports or settings
/// conflict with the group's, the group is full, or the provider does not share load
/// balancers. It gets no load balancer (no ingress); the group's others keep theirs. Looked
/// at again when a place or a port of the group is freed, else after 5 minutes (not with
/// backoff: a refusal changes only with its group). Not one of Go's reasons.
pub const REASON_SHARING_REFUSED: &str = "LoadBalancerSharingRefused";
/// Event reason (Warning): the Service's [`NODE_SELECTOR_ANNOTATION`] is not a label
/// selector (it does not parse, or is too long); the load balancer was left as it is, and
/// the sync is retried with backoff. Not one of Go's reasons: Go has no such annotation.
pub const REASON_INVALID_NODE_SELECTOR: &str = "InvalidLoadBalancerNodeSelector";

/// Service annotation: a label selector, in `kubectl -l` syntax (as `--node-selector`,
/// bounded the same way: 4 KiB, 64 requirements), that limits the Service's load balancer
/// to the eligible Nodes whose labels it selects, e.g. `pool=a` or `pool in (a,b),!gpu`.
/// Without it, or with an empty value, every eligible Node, as in Go. A selector that
/// selects no Node is an empty list (an `UnAvailableLoadBalancer` Warning); one that does
/// not parse is a [`REASON_INVALID_NODE_SELECTOR`] Warning and leaves the load balancer as
/// it is. Not one of Go's annotations.
pub const NODE_SELECTOR_ANNOTATION: &str = "ccm-rs.github.io/load-balancer-node-selector";

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
    /// In shadow mode, the plan each sync of a Service settles; `None`: acting.
    pub shadow: Option<ControllerShadow>,
    /// Which Services it manages, by `spec.loadBalancerClass` (`--load-balancer-class`,
    /// `--manage-services-without-class`); Go's by default: those without a class.
    pub load_balancer_classes: LoadBalancerClasses,
    /// Whether it writes the Service conditions `LoadBalancerProvisioning`,
    /// `LoadBalancerServing` and `LoadBalancerDegraded` (`--service-conditions`); off by
    /// default, as Go writes none.
    pub conditions: bool,
    /// With conditions, how often each ensured load balancer's health is asked of the
    /// provider for `LoadBalancerDegraded` (`--load-balancer-health-period`); a minute by
    /// default.
    pub health_period: Duration,
    /// Which Nodes are this cloud's (`--node-provider-id-prefix`, `--node-selector`): the
    /// others are never load balancer backends. By default every Node, as Go.
    pub node_ownership: crate::controllers::node_ownership::NodeOwnership,
    /// Whether MetalLB's `metallb.universe.tf/allow-shared-ip` is read as a sharing key too
    /// (`--metallb-allow-shared-ip`); off by default, so a Go CCM's place is kept: Go gives
    /// such Services a load balancer each.
    pub metallb_sharing_key: bool,
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
            shadow: None,
            load_balancer_classes: LoadBalancerClasses::go(),
            conditions: false,
            health_period: health::DEFAULT_HEALTH_PERIOD,
            node_ownership: Default::default(),
            metallb_sharing_key: false,
        }
    }
}

impl ServiceControllerConfig {
    setters! {
        /// Sets the number of workers.
        pub fn with_workers(workers: usize);
        /// Sets the cluster name.
        pub fn with_cluster_name(cluster_name: impl Into<String>);
        /// Sets the retry backoff.
        pub fn with_rate_limit(rate_limit: RateLimit);
        /// Sets the node-sync debounce.
        pub fn with_node_sync_debounce(node_sync_debounce: Duration);
        /// Sets the period of node-sync passes without Node events.
        pub fn with_node_sync_period(node_sync_period: Option<Duration>);
        /// Shadow mode: each sync of a Service settles `shadow`'s plan for it.
        pub fn with_shadow(shadow: Option<ControllerShadow>);
        /// Sets the Services managed, by class.
        pub fn with_load_balancer_classes(load_balancer_classes: LoadBalancerClasses);
        /// Sets whether the Service conditions are written.
        pub fn with_conditions(conditions: bool);
        /// Sets the health period of `LoadBalancerDegraded`.
        pub fn with_health_period(health_period: Duration);
        /// Sets which Nodes are this cloud's; the others are never backends.
        pub fn with_node_ownership(node_ownership: crate::controllers::node_ownership::NodeOwnership);
        /// Sets whether MetalLB's sharing annotation is read as a sharing key.
        pub fn with_metallb_sharing_key(metallb_sharing_key: bool);
    }

    /// Counts in `metrics` (Go's controller metrics, registered by the manager).
    #[must_use]
    pub fn with_metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// The service controller. See the [module docs](self).
pub struct ServiceController {
    worker: Arc<Worker>,
    node_sync: Arc<NodeSync>,
    services: Informer<Service>,
    nodes: Informer<Node>,
    queue: Queue<ServiceKey>,
    config: ServiceControllerConfig,
}

impl fmt::Debug for ServiceController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceController")
            .field("queue", &self.queue)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Locks `m`, poisoned or not.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent, so a panic elsewhere cannot break it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
        let records = Records::new(config.load_balancer_classes.clone());
        {
            let queue = queue.clone();
            let records = records.clone();
            services.subscribe(move |change| {
                on_service_change(change, &queue, &records);
            });
        }
        let node_sync_latency = config
            .metrics
            .as_ref()
            .map_or_else(|| Histogram::new([1.0]), |m| m.nodesync_latency.clone());
        let node_sync = Arc::new(NodeSync::new(
            &nodes,
            records.clone(),
            queue.clone(),
            &config,
            node_sync_latency,
        ));
        let shared = shared::SharingLoadBalancer::new(
            provider.clone(),
            services.clone(),
            decision::shared::SharingKeys {
                metallb: config.metallb_sharing_key,
            },
            node_sync.clone(),
            queue.clone(),
            records.clone(),
            client.clone(),
        );
        let worker = Worker {
            shared,
            client: client.clone(),
            provider: provider.clone(),
            services: services.clone(),
            recorder: EventRecorder::new(client, COMPONENT),
            records,
            node_sync: node_sync.clone(),
            cluster_name: config.cluster_name.clone(),
            shadow: config.shadow.clone(),
            conditions: config.conditions,
            metrics: config
                .metrics
                .as_ref()
                .map(Metrics::from)
                .unwrap_or_default(),
        };
        Some(Self {
            worker: Arc::new(worker),
            node_sync,
            services,
            nodes,
            queue,
            config,
        })
    }

    /// The controller's work queue, for metrics.
    pub fn queue(&self) -> &Queue<ServiceKey> {
        &self.queue
    }

    /// Runs until `cancel` fires: waits for the Service and Node caches, then syncs Services
    /// with `workers` workers and runs node-sync passes. A sync in flight when `cancel`
    /// fires is abandoned at its next await point; the finalizer makes that safe.
    pub async fn run(self, cancel: CancellationToken) {
        let Self {
            worker,
            node_sync,
            services,
            nodes,
            queue,
            config,
        } = self;
        if !(services.synced_or_cancelled(&cancel).await
            && nodes.synced_or_cancelled(&cancel).await)
        {
            return;
        }
        let classes = &config.load_balancer_classes;
        tracing::info!(workers = config.workers, %classes, "starting service controller");
        // Services listed before this controller subscribed.
        for service in services.store().state() {
            if wanted_on_add(classes, &service) {
                queue.add(ServiceKey::of(&service));
            }
        }
        let health_worker = worker.clone();
        let workers = {
            let cancel = cancel.clone();
            run(
                queue,
                config.workers,
                cancel.clone(),
                move |key: ServiceKey| {
                    let worker = worker.clone();
                    let cancel = cancel.clone();
                    async move {
                        cancel
                            .run_until_cancelled(worker.sync(&key))
                            .await
                            .unwrap_or(Outcome::Done)
                    }
                },
            )
        };
        let health = async {
            if config.conditions && !config.health_period.is_zero() {
                health_worker
                    .run_health(config.health_period, &cancel)
                    .await;
            }
        };
        tokio::join!(workers, node_sync.run(&cancel), health);
        tracing::info!("service controller stopped");
    }
}

/// The Service informer's handler: queues what Go queues, plus deletions of Services whose
/// load balancer may still exist.
fn on_service_change(change: &Change<Service>, queue: &Queue<ServiceKey>, records: &Records) {
    let classes = records.classes();
    match change {
        Change::Applied { old: None, new } => {
            if wanted_on_add(classes, new) {
                queue.add(ServiceKey::of(new));
            }
        }
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if let Some(cause) = needs_update(classes, old, new) {
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
            } else if needs_cleanup(classes, new) {
                queue.add(ServiceKey::of(new));
            }
        }
        Change::Deleted(last) => {
            let key = ServiceKey::of(last);
            let mut map = records.lock();
            if map.contains_key(&key) {
                queue.add(key);
            } else if wants_load_balancer(classes, last) || has_finalizer(classes, last) {
                // Never synced by this controller (it may have started after the finalizer
                // was removed): remember the last version, so its load balancer is deleted.
                map.insert(key.clone(), Record::new(last.clone()));
                queue.add(key);
            }
        }
    }
}

/// How many Services of the cache wait for their load balancer: they want one from this
/// controller (of `classes`), are not being deleted and have no ingress yet
/// (`ccm_service_load_balancers_pending`).
pub(crate) fn pending_load_balancers(
    services: &Informer<Service>,
    classes: &LoadBalancerClasses,
) -> usize {
    services
        .store()
        .state()
        .iter()
        .filter(|s| waits_for_load_balancer(classes, s))
        .count()
}

#[cfg(test)]
mod tests {
    use super::decision::fixtures::svc;
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
    fn default_config_is_gos() {
        let c = ServiceControllerConfig::default();
        assert_eq!(c.workers, 1);
        assert_eq!(c.cluster_name, "kubernetes");
        assert_eq!(
            c.rate_limit,
            RateLimit::exponential(Duration::from_secs(5), Duration::from_secs(300))
        );
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
        let records = Records::default();
        let mut lb = (*svc("u1", true)).clone();
        lb.metadata.namespace = Some("ns".into());
        lb.metadata.name = Some("a".into());
        let lb = Arc::new(lb);
        let mut cluster_ip = (*lb).clone();
        cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let cluster_ip = Arc::new(cluster_ip);
        let applied = |old: Option<&Arc<Service>>, new: &Arc<Service>| {
            let (old, new) = (old.cloned(), new.clone());
            on_service_change(&Change::Applied { old, new }, &q, &records);
        };

        // Add: wanted.
        applied(None, &lb);
        assert_eq!(queued(&q), 1);
        let item = q.get().await.unwrap();
        drop(item);
        // Add: not wanted.
        applied(None, &cluster_ip);
        assert_eq!(queued(&q), 0);
        // Update without a relevant change.
        applied(Some(&lb), &lb);
        assert_eq!(queued(&q), 0);
        // Update: type changed away → queued (Go records no event for it any more).
        applied(Some(&lb), &cluster_ip);
        assert_eq!(queued(&q), 1);
        drop(q.get().await.unwrap());
        // Deleted, never synced, wanted a load balancer: remembered and queued.
        on_service_change(&Change::Deleted(lb.clone()), &q, &records);
        assert_eq!(queued(&q), 1);
        assert!(records.lock().contains_key(&ServiceKey::new("ns", "a")));
        drop(q.get().await.unwrap());
        // Deleted, never wanted one: ignored.
        records.lock().clear();
        on_service_change(&Change::Deleted(cluster_ip), &q, &records);
        assert_eq!(queued(&q), 0);
        assert!(records.lock().is_empty());
    }
}
