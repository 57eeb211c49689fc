//! The route controller: keeps the cloud's routing table in step with the Nodes' pod CIDRs,
//! so that traffic for a pod CIDR reaches its Node.
//!
//! Each reconcile lists the routes of `--cluster-name` once, plans against the cached
//! Nodes with a pure function (see `decision::plan`), and then deletes and creates routes
//! in the background: a Node's pod CIDR without a route gets one (the Node UID is the name
//! hint; dual-stack Nodes get one per family); blackhole routes, routes without a target
//! and routes no Node wants are deleted — but only inside the cluster CIDRs, never a
//! route outside them; a provider that routes by node address has a route replaced when
//! the addresses change, deletes first. When a Node's creates are done, its
//! `NetworkUnavailable` condition says whether all its routes are in place
//! (False/`RouteCreated`) or not (True/`NoRouteCreated`, with a `FailedToCreateRoute`
//! Warning event); the condition is patched only when its status or reason changes.
//! Nodes that are not this cloud's ([`RouteControllerConfig::with_node_ownership`]) get no
//! route and no condition, and the listed routes that target them are left alone.
//!
//! It reconciles every `--route-reconciliation-period` and, debounced, after Node changes
//! that matter (a Node added, deleted or re-registered, new pod CIDRs or addresses), one
//! reconcile at a time. Only the periodic reconcile lists the routes: one after a Node
//! change plans against the last listing plus the calls finished since (`table`), unless a
//! call failed since or the plan would delete, so Nodes joining cost no `list_routes` call
//! beyond the period's. Unlike Go, a reconcile does not wait for its cloud calls: the
//! destinations they touch are marked in flight (before the next listing is taken) and
//! left alone by later reconciles until the calls return, so a slow cloud never gets the
//! same route created twice (kubernetes/kubernetes#21561) and one stuck call does not hold
//! up every other Node. Creates and deletes together are capped at
//! [`RouteControllerConfig::max_concurrent_operations`].

mod cidr;
mod config;
mod decision;
mod outage;
mod table;

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

pub use self::cidr::{Cidr, CidrError};
pub use self::config::{
    DEFAULT_DEBOUNCE, DEFAULT_MAX_CONCURRENT_OPERATIONS, DEFAULT_RECONCILIATION_PERIOD,
    RouteConfigError, RouteControllerConfig,
};
use self::decision::{Create, Delete, NodeCreates, Plan, affects_routes, network_condition, plan};
use self::outage::Outage;
use self::table::RouteTable;
use super::debounce::settle;
use super::node_util::node_name;
use crate::events::EventRecorder;
use crate::informer::{Change, Informer};
use ccm_provider::{CloudError, CloudProvider, CloudResult, Route, Routes};
use prometheus_client::metrics::counter::Counter;

/// The event source name, as Go's controller reports it.
pub const COMPONENT: &str = "route_controller";
/// Event reason: a route for a Node could not be created.
pub const REASON_FAILED_TO_CREATE_ROUTE: &str = "FailedToCreateRoute";
/// `NetworkUnavailable` reason when all the Node's routes are in place (status `False`).
pub const CONDITION_REASON_ROUTE_CREATED: &str = decision::REASON_ROUTE_CREATED;
/// `NetworkUnavailable` reason when a route of the Node is missing (status `True`).
pub const CONDITION_REASON_NO_ROUTE_CREATED: &str = decision::REASON_NO_ROUTE_CREATED;

/// A Node by name and UID.
type NodeKey = (String, String);
/// A condition's status and reason.
type ConditionState = (String, Option<String>);

/// How long a written condition is trusted to be on its way to the cache.
const WRITTEN_TTL: Duration = Duration::from_secs(30);

/// The field manager of the condition patches.
const FIELD_MANAGER: &str = "route-controller";
/// How many condition patches are in flight at once, across reconciles and route jobs (the
/// client's rate limit applies on top). Without the cap, a burst of finished creates (up
/// to `max_concurrent_operations` at a time) became as many concurrent patches, each on a
/// connection of its own: the benchmark saw 270 connections and 10 MB of their buffers.
const CONDITION_WRITERS: usize = 8;

/// The route controller. See the [module docs](self).
///
/// Where it differs from Go's, on purpose:
///
/// - **Cloud calls outlive the reconcile that planned them.** Go waits for all its creates
///   and deletes before the next pass; here a reconcile marks the destinations it touches as
///   in flight and returns, and later reconciles leave those destinations alone (no create,
///   no delete, no condition) until the calls return. A slow cloud still never sees a route
///   created twice, and one stuck call no longer delays every other Node.
/// - **Node events trigger a reconcile** (debounced), besides the period; Go 1.35's
///   watch-based gate instead replaces the period. Such a reconcile plans its creates
///   against the last listing and the calls finished since, so it costs no listing: Nodes
///   joining are routed within the debounce, with no more `list_routes` calls than Go's
///   periodic reconcile makes.
/// - **A blackhole route of a live Node is replaced** in one pass (deleted, then created).
///   Go counts it as present, deletes it, and creates it on the next pass, reporting the
///   Node `RouteCreated` meanwhile.
/// - **A destination the listing still has is never created.** A route for that CIDR
///   outside the cluster CIDRs, or two Nodes with one pod CIDR, block the create with a
///   `FailedToCreateRoute` event instead of a doomed cloud call. A create always waits for
///   the delete of a route with the same destination (Go orders them only for providers
///   that route by node address, kubernetes/kubernetes#98359).
/// - **Destinations are compared by their network** (`fd00:0::/64` is `fd00::/64`), not
///   as strings; `spec.podCIDR` is used when `spec.podCIDRs` is empty; a provider routes by
///   node address when any listed route says so, not only the first.
/// - **The condition's transition time moves only when its status does**; Go sets it on
///   every write.
pub struct RouteController {
    inner: Inner,
    changes: watch::Receiver<u64>,
}

struct Inner {
    provider: Arc<dyn CloudProvider>,
    nodes_api: Api<Node>,
    nodes: Informer<Node>,
    recorder: EventRecorder,
    config: RouteControllerConfig,
    /// Caps cloud creates and deletes in flight, across reconciles.
    calls: Semaphore,
    /// Caps condition patches in flight ([`CONDITION_WRITERS`]).
    condition_writes: Semaphore,
    in_flight: InFlight,
    /// The routing table as last listed, with the calls finished since.
    table: Mutex<RouteTable>,
    /// Conditions written, by (Node name, UID), until the cache shows them: a reconcile
    /// in that window must not write the same condition again.
    /// Entries older than [`WRITTEN_TTL`] are ignored, should the cache never show one.
    written: Mutex<HashMap<NodeKey, (ConditionState, tokio::time::Instant)>>,
    /// `route_controller_route_sync_total`: one per listing of the routes.
    syncs: Counter,
    /// Since when the cloud has not answered, and the retry that asks for.
    outage: Arc<Outage>,
}

impl RouteController {
    /// A controller for `provider`'s routes, or `None` when the provider does not support
    /// [`Routes`] (Go does not start the controller then).
    ///
    /// `nodes` is the shared Node informer; the controller subscribes to it here, so create
    /// the controller before the informer runs.
    pub fn new(
        client: Client,
        provider: &Arc<dyn CloudProvider>,
        nodes: Informer<Node>,
        config: RouteControllerConfig,
    ) -> Option<Self> {
        provider.routes()?;
        let (tx, changes) = watch::channel(0u64);
        let ownership = config.node_ownership().clone();
        nodes.subscribe(move |change| {
            let relevant = match change {
                Change::Applied { old, new } => {
                    affects_routes(old.as_deref(), new)
                        || old
                            .as_ref()
                            .is_some_and(|o| ownership.is_owned(o) != ownership.is_owned(new))
                }
                Change::Deleted(_) => true,
            };
            if relevant {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
        });
        let syncs = config
            .metrics()
            .map(|m| m.route_sync.clone())
            .unwrap_or_default();
        Some(Self {
            inner: Inner {
                provider: provider.clone(),
                nodes_api: Api::all(client.clone()),
                nodes,
                recorder: EventRecorder::new(client, COMPONENT),
                calls: Semaphore::new(config.max_concurrent_operations()),
                condition_writes: Semaphore::new(CONDITION_WRITERS),
                config,
                in_flight: InFlight::default(),
                table: Mutex::default(),
                written: Mutex::default(),
                syncs,
                outage: Arc::default(),
            },
            changes,
        })
    }

    /// Runs until `cancel` fires: waits for the Node cache, reconciles at once, then every
    /// period and after Node changes. Cloud calls still in flight are dropped on cancel.
    pub async fn run(self, cancel: CancellationToken) {
        let Self { inner, changes } = self;
        let inner = Arc::new(inner);
        if !inner.nodes.synced_or_cancelled(&cancel).await {
            return;
        }
        tracing::info!(
            cluster = inner.config.cluster_name(),
            cluster_cidrs = ?inner.config.cluster_cidrs().iter().map(ToString::to_string).collect::<Vec<_>>(),
            "starting route controller"
        );
        let mut trigger = Trigger::new(
            inner.config.reconciliation_period(),
            inner.config.debounce(),
            changes,
        )
        .with_outage(Arc::clone(&inner.outage));
        let mut jobs = JoinSet::new();
        loop {
            let cause = tokio::select! {
                () = cancel.cancelled() => break,
                cause = trigger.next() => cause,
            };
            while let Some(done) = jobs.try_join_next() {
                if let Err(err) = done {
                    tracing::error!(error = %err, "route operations failed");
                }
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                listed = inner.reconcile(cause, &mut jobs) => if listed {
                    trigger.listed();
                },
            }
        }
        jobs.shutdown().await;
        tracing::info!("shutting down route controller");
    }
}

impl Inner {
    fn routes(&self) -> CloudResult<&dyn Routes> {
        self.provider.routes().ok_or(CloudError::NotImplemented)
    }

    /// Lists the cluster's routes into the table; `None` when listing failed (logged).
    async fn list(&self) -> Option<Vec<Route>> {
        let cluster = self.config.cluster_name();
        self.table.lock().listing();
        let at = Instant::now();
        let listed = match self.routes() {
            Ok(routes) => routes.list_routes(cluster).await,
            Err(err) => Err(err),
        };
        match listed {
            Ok(routes) => {
                self.outage.answered();
                crate::shadow::pass(self.config.shadow());
                self.syncs.inc();
                Some(self.table.lock().listed(routes, at))
            }
            Err(err) => {
                self.outage.failed(&err);
                self.table.lock().listing_failed();
                tracing::warn!(cluster, error = %err.chain_to_string(), "couldn't reconcile node routes: error listing routes");
                None
            }
        }
    }

    /// The cached Nodes that are this cloud's, and the names of those that are not.
    fn owned_nodes(&self) -> (Vec<Arc<Node>>, HashSet<String>) {
        let all = self.nodes.store().state();
        let ownership = self.config.node_ownership();
        if ownership.owns_everything() {
            return (all, HashSet::new());
        }
        let (owned, foreign): (Vec<_>, Vec<_>) = all.into_iter().partition(|n| ownership.check(n));
        let foreign = foreign.iter().map(|n| node_name(n).to_owned()).collect();
        (owned, foreign)
    }

    /// One reconcile: list (or read the table), plan, start the cloud calls, write the
    /// conditions decided now. Returns whether it listed.
    async fn reconcile(self: &Arc<Self>, cause: Cause, jobs: &mut JoinSet<()>) -> bool {
        let started = Instant::now();
        // Taken before the table is read or listed: a call that returns after this point
        // is either still marked busy here or already in the table (a finished call is
        // recorded there before its mark goes), never neither.
        let mut busy = self.in_flight.keys();
        let cached = match cause {
            Cause::NodeChange => self
                .table
                .lock()
                .cached(self.config.reconciliation_period()),
            Cause::Period | Cause::Retry => None,
        };
        let mut listed = cached.is_none();
        let mut routes = match cached {
            Some(routes) => routes,
            None => match self.list().await {
                Some(routes) => routes,
                None => return listed,
            },
        };
        let (mut nodes, mut foreign) = self.owned_nodes();
        let mut plan = plan(
            &routes,
            &nodes,
            &foreign,
            self.config.cluster_cidrs(),
            &busy,
        );
        if !listed && !plan.deletes.is_empty() {
            // A delete needs the cloud's own view (and name) of the route: list, plan again.
            busy = self.in_flight.keys();
            listed = true;
            routes = match self.list().await {
                Some(routes) => routes,
                None => return true,
            };
            (nodes, foreign) = self.owned_nodes();
            plan = self::decision::plan(
                &routes,
                &nodes,
                &foreign,
                self.config.cluster_cidrs(),
                &busy,
            );
        }
        let summary = (plan.deletes.len(), plan.create_count(), plan.blocked.len());
        if summary == (0, 0, 0) {
            tracing::debug!(
                ?cause,
                listed,
                routes = routes.len(),
                nodes = nodes.len(),
                busy = busy.len(),
                "routes are in step"
            );
        } else {
            tracing::info!(
                ?cause,
                listed,
                routes = routes.len(),
                nodes = nodes.len(),
                busy = busy.len(),
                deletes = summary.0,
                creates = summary.1,
                blocked = summary.2,
                "reconciling routes"
            );
        }
        let Plan {
            deletes,
            creates,
            blocked,
            conditions,
        } = plan;
        if !deletes.is_empty() || !creates.is_empty() {
            let job = Job::new(deletes, creates, &self.in_flight);
            jobs.spawn(Arc::clone(self).execute(job));
        }
        for b in blocked {
            let msg = format!(
                "Could not create route {} {} for node {}: {}",
                b.uid, b.cidr, b.node, b.why
            );
            tracing::warn!(node = b.node, cidr = b.cidr, "{msg}");
            self.failed_to_create(&b.node, &b.uid, msg).await;
        }
        futures::stream::iter(conditions)
            .for_each_concurrent(CONDITION_WRITERS, |(name, created)| async move {
                self.set_condition(&name, created).await;
            })
            .await;
        tracing::debug!(took = ?started.elapsed(), "route reconcile done");
        listed
    }

    /// Runs one reconcile's cloud calls: the deletes creates wait for, then the creates
    /// (each Node's condition written when its creates are done) and the other deletes.
    async fn execute(self: Arc<Self>, job: Job) {
        let (first, later): (Vec<_>, Vec<_>) = job.deletes.into_iter().partition(|d| d.op.blocking);
        let failed: HashSet<String> = join_all(first.into_iter().map(|d| self.delete(d)))
            .await
            .into_iter()
            .flatten()
            .collect();
        let later = join_all(later.into_iter().map(|d| self.delete(d)));
        let creates = join_all(
            job.nodes
                .into_iter()
                .map(|n| self.create_node_routes(n, &failed)),
        );
        tokio::join!(later, creates);
    }

    /// Deletes a listed route; on failure returns its destination key.
    async fn delete(&self, op: InFlightOp<Delete>) -> Option<String> {
        let InFlightOp { op: d, _guard } = op;
        let result = match self.routes() {
            Ok(routes) => {
                let _permit = self.calls.acquire().await;
                let started = Instant::now();
                tracing::info!(
                    route = d.route.name,
                    cidr = d.route.destination_cidr,
                    target = d.route.target_node,
                    reason = d.reason.as_str(),
                    "deleting route"
                );
                routes
                    .delete_route(self.config.cluster_name(), &d.route)
                    .await
                    .map(|()| started.elapsed())
            }
            Err(err) => Err(err),
        };
        match result {
            Ok(took) => {
                self.outage.answered();
                self.table.lock().deleted(&d.route);
                tracing::info!(
                    route = d.route.name,
                    cidr = d.route.destination_cidr,
                    ?took,
                    "deleted route"
                );
                None
            }
            Err(err) => {
                self.outage.failed(&err);
                self.table.lock().invalidate();
                // As in Go, a failed delete is only logged; the next reconcile tries again.
                tracing::warn!(route = d.route.name, cidr = d.route.destination_cidr, error = %err.chain_to_string(), "could not delete route");
                Some(d.key)
            }
        }
    }

    async fn create_node_routes(&self, node: JobNode, failed_deletes: &HashSet<String>) {
        let JobNode {
            name,
            uid,
            creates,
            others_routed,
            pending,
        } = node;
        let results = join_all(
            creates
                .into_iter()
                .map(|c| self.create(&name, &uid, c, failed_deletes)),
        )
        .await;
        if !pending {
            let all = others_routed && results.iter().all(|ok| *ok);
            self.set_condition(&name, all).await;
        }
    }

    /// Creates one route; returns whether it was created.
    async fn create(
        &self,
        node: &str,
        uid: &str,
        op: InFlightOp<Create>,
        failed_deletes: &HashSet<String>,
    ) -> bool {
        let InFlightOp { op: c, _guard } = op;
        let cidr = &c.route.destination_cidr;
        if c.after_delete && failed_deletes.contains(&c.key) {
            let msg = format!(
                "Could not create route {uid} {cidr} for node {node}: the route it replaces could not be deleted"
            );
            tracing::warn!(node, cidr, "{msg}");
            self.failed_to_create(node, uid, msg).await;
            return false;
        }
        let started = Instant::now();
        let result = match self.routes() {
            Ok(routes) => {
                let _permit = self.calls.acquire().await;
                tracing::info!(node, cidr, name_hint = uid, throttled = ?started.elapsed(), "creating route");
                routes
                    .create_route(self.config.cluster_name(), uid, &c.route)
                    .await
            }
            Err(err) => Err(err),
        };
        match result {
            Ok(()) => {
                self.outage.answered();
                self.table.lock().created(&c.route);
                tracing::info!(node, cidr, name_hint = uid, took = ?started.elapsed(), "created route");
                true
            }
            Err(err) => {
                self.outage.failed(&err);
                self.table.lock().invalidate();
                let msg = format!(
                    "Could not create route {uid} {cidr} for node {node} after {:?}: {}",
                    started.elapsed(),
                    err.chain_to_string()
                );
                tracing::warn!(node, cidr, "{msg}");
                self.failed_to_create(node, uid, msg).await;
                false
            }
        }
    }

    async fn failed_to_create(&self, node: &str, uid: &str, msg: String) {
        let mut about = Node::default();
        about.metadata.name = Some(node.to_owned());
        about.metadata.uid = Some(uid.to_owned()).filter(|u| !u.is_empty());
        self.recorder
            .warning(&about, REASON_FAILED_TO_CREATE_ROUTE, "CreateRoute", msg);
    }

    /// Sets the Node's `NetworkUnavailable` condition, unless its status and reason are
    /// already right. A strategic-merge patch of the status: conditions merge by `type`,
    /// so the others are left as they are.
    async fn set_condition(&self, name: &str, routes_created: bool) {
        // Never closed, so acquiring cannot fail.
        let _writer = self.condition_writes.acquire().await.ok();
        let Some(node) = self.nodes.store().get(&ObjectRef::new(name)) else {
            // Deleted meanwhile.
            self.written.lock().retain(|(n, _), _| n != name);
            return;
        };
        let key = (
            name.to_owned(),
            node.metadata.uid.clone().unwrap_or_default(),
        );
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let Some(condition) = network_condition(&node, routes_created, &now) else {
            // The cache shows the condition as wanted: anything we wrote has arrived.
            self.written.lock().remove(&key);
            return;
        };
        let wanted = (condition.status.clone(), condition.reason.clone());
        {
            // Checked and claimed under one lock: of two writers racing for one Node (a
            // reconcile, and the job whose create just returned), one writes.
            let mut written = self.written.lock();
            let already = written
                .get(&key)
                .is_some_and(|(w, at)| *w == wanted && at.elapsed() < WRITTEN_TTL);
            if already {
                // Written already (or being written); the cache has not caught up yet.
                return;
            }
            written.insert(key.clone(), (wanted.clone(), tokio::time::Instant::now()));
        }
        tracing::info!(node = name, status = condition.status, reason = ?condition.reason, "setting NetworkUnavailable condition");
        let patch = serde_json::json!({ "status": { "conditions": [condition] } });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match self
            .nodes_api
            .patch_status(name, &params, &Patch::Strategic(patch))
            .await
        {
            // Stays claimed until the cache shows it.
            Ok(_) => {}
            Err(err) => {
                let mut written = self.written.lock();
                if written.get(&key).is_some_and(|(w, _)| *w == wanted) {
                    written.remove(&key);
                }
                drop(written);
                if !matches!(&err, kube::Error::Api(s) if s.code == 404) {
                    // The next reconcile writes it again.
                    tracing::warn!(node = name, error = %err, "error updating NetworkUnavailable condition");
                }
            }
        }
    }
}

/// Why a reconcile started, for the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    /// The periodic full reconcile.
    Period,
    /// Node changes, debounced.
    NodeChange,
    /// A call failed because the cloud did not answer: a look again (see `outage`).
    Retry,
}

/// When the next reconcile starts: at each period tick (a period after the last listing),
/// or after a burst of Node changes, debounced (see the `debounce` module: a tenth of
/// `debounce` after the changes stop, at most `debounce` after the first), or when a call
/// that failed for want of the cloud asks for a look again (`outage`). Changes seen before
/// a reconcile starts are folded into it.
struct Trigger {
    tick: Interval,
    debounce: Duration,
    changes: watch::Receiver<u64>,
    outage: Arc<Outage>,
}

impl Trigger {
    fn new(period: Duration, debounce: Duration, changes: watch::Receiver<u64>) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            tick,
            debounce,
            changes,
            outage: Arc::default(),
        }
    }

    /// Reconciles again when `outage` asks.
    fn with_outage(mut self, outage: Arc<Outage>) -> Self {
        self.outage = outage;
        self
    }

    /// A reconcile listed the routes: the next periodic one is a period from now, so a
    /// listing a Node change needed is not followed at once by the period's.
    fn listed(&mut self) {
        self.tick.reset();
    }

    /// Waits for the next reconcile. Cancel-safe only between the two phases; the caller
    /// drops it only on shutdown.
    async fn next(&mut self) -> Cause {
        let cause = loop {
            let retry_at = self.outage.retry_at();
            let retry = async {
                match retry_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            break tokio::select! {
                _ = self.tick.tick() => Cause::Period,
                () = retry => Cause::Retry,
                // A retry asked for meanwhile: wait for it too.
                () = self.outage.asked() => continue,
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        // No more changes can come; only the period (and retries) are left.
                        tokio::select! {
                            _ = self.tick.tick() => Cause::Period,
                            () = self.outage.asked() => continue,
                        }
                    } else {
                        settle(Instant::now(), self.debounce, &mut self.changes).await;
                        Cause::NodeChange
                    }
                }
            };
        };
        // Whatever changed until now, this reconcile sees; it is the retry, too.
        self.changes.borrow_and_update();
        self.outage.reconciling();
        cause
    }
}

/// Destinations (match keys) with a cloud call in flight, counted.
#[derive(Clone, Default)]
struct InFlight(Arc<Mutex<HashMap<String, usize>>>);

impl InFlight {
    fn keys(&self) -> HashSet<String> {
        self.lock().keys().cloned().collect()
    }

    fn start(&self, key: &str) -> InFlightGuard {
        *self.lock().entry(key.to_owned()).or_default() += 1;
        InFlightGuard {
            set: self.clone(),
            key: key.to_owned(),
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock()
    }
}

/// Marks a destination busy until dropped (when the call returns, or is dropped on
/// shutdown).
struct InFlightGuard {
    set: InFlight,
    key: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut map = self.set.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// A planned call and the mark that keeps its destination busy.
struct InFlightOp<T> {
    op: T,
    _guard: InFlightGuard,
}

struct JobNode {
    name: String,
    uid: String,
    creates: Vec<InFlightOp<Create>>,
    others_routed: bool,
    pending: bool,
}

/// One reconcile's cloud calls, their destinations already marked busy.
struct Job {
    deletes: Vec<InFlightOp<Delete>>,
    nodes: Vec<JobNode>,
}

impl Job {
    fn new(deletes: Vec<Delete>, creates: Vec<NodeCreates>, in_flight: &InFlight) -> Self {
        let op = |key: &str| in_flight.start(key);
        Self {
            deletes: deletes
                .into_iter()
                .map(|d| InFlightOp {
                    _guard: op(&d.key),
                    op: d,
                })
                .collect(),
            nodes: creates
                .into_iter()
                .map(|n| JobNode {
                    creates: n
                        .creates
                        .into_iter()
                        .map(|c| InFlightOp {
                            _guard: op(&c.key),
                            op: c,
                        })
                        .collect(),
                    name: n.node,
                    uid: n.uid,
                    others_routed: n.others_routed,
                    pending: n.pending,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_marks_are_counted_and_released() {
        let set = InFlight::default();
        let a = set.start("10.244.1.0/24");
        let b = set.start("10.244.1.0/24");
        let c = set.start("fd00::/64");
        assert_eq!(set.keys().len(), 2);
        drop(a);
        assert!(set.keys().contains("10.244.1.0/24"), "still one call on it");
        drop(b);
        drop(c);
        assert!(set.keys().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_node_changes_makes_one_reconcile() {
        let (tx, rx) = watch::channel(0u64);
        let debounce = Duration::from_secs(1);
        let mut trigger = Trigger::new(Duration::from_secs(3600), debounce, rx);
        assert_eq!(
            trigger.next().await,
            Cause::Period,
            "the first tick is at once"
        );

        let start = Instant::now();
        let sender = tokio::spawn(async move {
            for _ in 0..100 {
                tx.send_modify(|n| *n += 1);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tx
        });
        assert_eq!(trigger.next().await, Cause::NodeChange);
        // The last change came at 495 ms; a tenth of the debounce of quiet after it.
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(495) + crate::controllers::debounce::quiet(debounce),
            "debounced until the changes stopped"
        );
        let tx = sender.await.unwrap();
        // The 100 changes all came within the window: nothing more to do.
        assert!(
            tokio::time::timeout(Duration::from_secs(600), trigger.next())
                .await
                .is_err()
        );

        // A change during a reconcile makes one more.
        tx.send_modify(|n| *n += 1);
        tx.send_modify(|n| *n += 1);
        assert_eq!(trigger.next().await, Cause::NodeChange);
        assert!(
            tokio::time::timeout(Duration::from_secs(600), trigger.next())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cloud_that_did_not_answer_is_looked_at_again_before_the_period() {
        let (_tx, rx) = watch::channel(0u64);
        let period = Duration::from_secs(60);
        let outage = Arc::new(Outage::default());
        let mut trigger =
            Trigger::new(period, Duration::from_secs(1), rx).with_outage(Arc::clone(&outage));
        assert_eq!(trigger.next().await, Cause::Period);
        let start = Instant::now();
        // A create fails while the trigger waits for the period.
        let failing = Arc::clone(&outage);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            failing.failed(&CloudError::unavailable(
                "creating route",
                std::io::Error::other("connection refused"),
            ));
        });
        assert_eq!(trigger.next().await, Cause::Retry);
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(7),
            "two seconds after it"
        );
        // Answered meanwhile: the next is the period's.
        assert_eq!(trigger.next().await, Cause::Period);
        assert_eq!(start.elapsed(), period);
    }

    #[tokio::test(start_paused = true)]
    async fn the_period_keeps_ticking_without_changes() {
        let (_tx, rx) = watch::channel(0u64);
        let period = Duration::from_secs(10);
        let mut trigger = Trigger::new(period, Duration::from_secs(1), rx);
        let start = Instant::now();
        for i in 0..3 {
            assert_eq!(trigger.next().await, Cause::Period);
            assert_eq!(start.elapsed(), period * i);
        }
    }
}
