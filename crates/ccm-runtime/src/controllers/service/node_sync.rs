//! The node-sync loop: after Node events (debounced) and periodically, a pass compares, for
//! each load balancer, the Nodes it was last given with its Service's eligible Nodes now
//! (narrowed by the Service's node selector, if it has one), and queues
//! the Services that differ on the service queue, whose workers update them. A pass does
//! not start while the updates the previous one queued are still waiting or running (at
//! most [`NODE_SYNC_DRAIN_MAX`]); a Service found being synced is compared again when its
//! sync ends ([`NodeSync::sync_ended`]). The loop itself never calls the cloud.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use k8s_openapi::api::core::v1::{Node, Service};
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::decision::nodes::{NodeSyncStep, SelectorError, node_sync_step, node_update_matters};
use super::decision::wants::wants_load_balancer;
use super::eligible::{EligibleCache, EligibleNodes};
use super::records::Records;
use super::{ServiceControllerConfig, ServiceKey, lock};
use crate::controllers::debounce::settle;
use crate::informer::{Change, Informer};
use crate::workqueue::Queue;

/// The longest a node-sync pass waits for the updates the previous pass queued before it
/// starts anyway (a hung cloud call must not stop every other load balancer from following
/// its Nodes). A pass started early only queues Services whose Nodes differ again.
const NODE_SYNC_DRAIN_MAX: Duration = Duration::from_secs(60);

/// The node-sync loop and the eligible Nodes it compares with.
pub(super) struct NodeSync {
    eligible: EligibleCache,
    records: Records,
    queue: Queue<ServiceKey>,
    /// Woken by Node events that can change some load balancer's Nodes.
    node_changed: Arc<Notify>,
    /// The Services the last node-sync pass queued whose sync has not finished yet; the
    /// next pass waits until it is empty.
    pass_pending: watch::Sender<HashSet<ServiceKey>>,
    /// Services a node-sync pass found being synced: compared again when that sync ends.
    after_sync: Mutex<HashSet<ServiceKey>>,
    /// How long a pass waits for Node events to stop ([`ServiceControllerConfig::node_sync_debounce`]).
    debounce: Duration,
    /// How often a pass runs without Node events ([`ServiceControllerConfig::node_sync_period`]).
    period: Option<Duration>,
    /// `service_controller_nodesync_latency_seconds`.
    latency: Histogram,
}

impl NodeSync {
    /// The loop for the Services of `records`, queued on `queue`; subscribes to `nodes`
    /// here (create it before the informer runs).
    pub(super) fn new(
        nodes: &Informer<Node>,
        records: Records,
        queue: Queue<ServiceKey>,
        config: &ServiceControllerConfig,
        latency: Histogram,
    ) -> Self {
        let node_changed = Arc::new(Notify::new());
        let eligible = EligibleCache::new(
            nodes.clone(),
            config.node_ownership.clone(),
            node_changed.clone(),
        );
        {
            let node_changed = node_changed.clone();
            let node_generation = eligible.generation();
            let selectors = eligible.watch();
            let ownership = config.node_ownership.clone();
            nodes.subscribe(move |change| {
                // Any change: the Nodes handed to the provider carry more than the set.
                node_generation.fetch_add(1, Ordering::Release);
                let matters = match change {
                    Change::Applied {
                        old: Some(old),
                        new,
                    } => node_update_matters(&ownership, old, new) || selectors.moved(old, new),
                    Change::Applied { old: None, .. } | Change::Deleted(_) => true,
                };
                if matters {
                    node_changed.notify_one();
                }
            });
        }
        Self {
            eligible,
            records,
            queue,
            node_changed,
            pass_pending: watch::Sender::new(HashSet::new()),
            after_sync: Mutex::default(),
            debounce: config.node_sync_debounce,
            period: config.node_sync_period,
            latency,
        }
    }

    /// The eligible Nodes of `service` now and their set (see
    /// [`EligibleCache::eligible_for`]); an error when its node selector is bad.
    pub(super) fn eligible_for(&self, service: &Service) -> Result<EligibleNodes, SelectorError> {
        self.eligible.eligible_for(service)
    }

    /// A sync of `key` ended: it no longer holds up the next pass, and if a pass found it
    /// being synced and the sync succeeded with Nodes that are no longer current, it is
    /// queued now (a failed one is left to its backoff).
    pub(super) fn sync_ended(&self, key: &ServiceKey, succeeded: bool) {
        // Done or failed (then left to its backoff), it no longer holds up the next pass.
        self.pass_pending
            .send_if_modified(|pending| pending.remove(key));
        if lock(&self.after_sync).remove(key) && succeeded {
            let current = |service: &Service| self.eligible_for(service).ok().map(|e| e.hosts);
            if self.records.hosts_stale(key, current) {
                self.queue.add(key.clone());
            }
        }
    }

    /// Runs a node-sync pass after each (debounced) Node change, and periodically, until
    /// `cancel` fires.
    pub(super) async fn run(&self, cancel: &CancellationToken) {
        let mut tick = self.period.filter(|p| !p.is_zero()).map(|p| {
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
                () = settle(started, self.debounce, &mut changes) => {}
                () = cancel.cancelled() => return,
            }
            // Changes during the wait are in the cache now; drop their wake-up.
            let _ = self.node_changed.notified().now_or_never();
            self.pass();
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

    /// Queues every Service whose load balancer was given other Nodes than its eligible
    /// ones now. The updates run on the service workers. The node selectors no Service it
    /// visits uses are dropped from the cache.
    fn pass(&self) {
        let started = tokio::time::Instant::now();
        let mut stale = Vec::new();
        let sweep = self.eligible.begin_sweep();
        // The Nodes are read (or recomputed) at the first Service that wants a load
        // balancer: without one, they need not even be read. The Services of one selector
        // share its set, computed once.
        let mut compared = 0;
        {
            let records = self.records.lock();
            let mut after_sync = lock(&self.after_sync);
            for (key, record) in records.iter() {
                if !wants_load_balancer(self.records.classes(), &record.service) {
                    continue;
                }
                compared += 1;
                let current = self.eligible_for(&record.service).ok();
                let current = current.as_ref().map(|c| &*c.hosts);
                match node_sync_step(record.hosts_state(), current) {
                    NodeSyncStep::Update => stale.push(key.clone()),
                    NodeSyncStep::AfterSync => {
                        after_sync.insert(key.clone());
                    }
                    NodeSyncStep::Nothing => {}
                }
            }
        }
        self.eligible.end_sweep(sweep);
        tracing::debug!(
            compared,
            services = stale.len(),
            "node sync: queueing load balancers whose nodes changed"
        );
        self.pass_pending
            .send_replace(stale.iter().cloned().collect());
        for key in stale {
            self.queue.add(key);
        }
        self.latency.observe(started.elapsed().as_secs_f64());
    }
}
