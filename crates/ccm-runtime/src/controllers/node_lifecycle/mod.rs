//! The cloud-node-lifecycle controller: deletes Nodes whose instance is gone from the
//! cloud, and taints Nodes whose instance is shut down.
//!
//! Every `--node-monitor-period` it walks the Nodes in the shared cache. A Ready Node loses
//! the `node.cloudprovider.kubernetes.io/shutdown` taint if it has it. For a Node that is
//! not Ready it asks the provider whether the instance exists: if not, the Node is deleted
//! (with its UID as a precondition, so a Node re-registered under the same name is never
//! deleted by mistake); if it exists and is shut down, the Node gets the shutdown taint.
//! An error from the cloud never deletes anything: the Node is left for the next pass.
//! Nodes labelled `node.kubernetes.io/exclude-from-lifecycle-management` are skipped, and
//! so are Nodes that are not this cloud's ([`NodeOwnership`]).
//!
//! Unlike Go, which asks the cloud about one Node after another, the questions for NotReady
//! Nodes run concurrently, at most `workers` at a time, so one slow cloud call does not hold
//! up the whole pass. And a Node it deleted is not deleted (nor its event recorded) again
//! while the cache still shows it: a pass can come before the watch reports the deletion.
//!
//! Beyond Go, a guard against mass deletion ([`NodeDeletionGuard`], `--node-deletion-guard`)
//! decides which of the Nodes a pass found gone are deleted: at most a budget of them in any
//! sliding window (by default 10% of the cloud's Nodes, at least 1, in 10 minutes), and none
//! while more than a share of the cloud's Nodes (by default half) is reported gone at once.
//! A cloud whose API suddenly answers that every instance is gone, or lists none with a
//! success, no longer empties the cluster (linode-cloud-controller-manager #570). A Node
//! held back gets a Warning [`REASON_DELETION_HELD_BACK`] once, and is counted in
//! `ccm_node_deletions_held_back`; each trip counts in `ccm_node_deletion_guard_trips_total`.
//! The guard resets by itself on the first pass that holds nothing back; an operator
//! approves a held-back Node with the annotation [`APPROVED_ANNOTATION`]` = "true"` (or
//! deletes it). The pure rules are in `guard.rs`; the history of deletions is in memory, so
//! a restart, or a new leader, starts with a fresh window (the stop still holds at once).

mod decision;
mod guard;

pub use self::guard::{
    APPROVED_ANNOTATION, GuardLimits, MAX_WINDOW, MaxDeletions, NodeDeletionGuard,
};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use self::decision::{Check, check, with_shutdown_taint, without_shutdown_taint};
use self::guard::{GoneNode, History, Hold, Transition};
use super::node_ownership::NodeOwnership;
use super::node_util::{node_name, taints};
use super::patch::{replace_list, to_patch};
use crate::events::EventRecorder;
use crate::informer::Informer;
use crate::metrics::NodeDeletionGuardMetrics;
use crate::shadow::{self, Action, ControllerShadow, Planned};
use ccm_provider::{CloudProvider, Instances, resolve_instances};

/// The event source name, as Go's controller reports it.
pub const COMPONENT: &str = "cloud-node-lifecycle-controller";
/// Event reason: a Node is deleted because its instance is gone.
pub const REASON_DELETING_NODE: &str = "DeletingNode";
/// Event reason: deleting a Node failed.
pub const REASON_DELETING_NODE_FAILED: &str = "DeletingNodeFailed";
/// Event reason (Warning; ours): the provider reports a Node's instance gone, and the
/// [`NodeDeletionGuard`] holds its deletion back.
pub const REASON_DELETION_HELD_BACK: &str = "NodeDeletionHeldBack";

/// Settings of the cloud-node-lifecycle controller.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeLifecycleControllerConfig {
    /// How often Nodes are checked (`--node-monitor-period`).
    pub monitor_period: Duration,
    /// How many NotReady Nodes are checked with the cloud at once.
    pub workers: usize,
    /// In shadow mode, the plan each pass settles; `None`: acting.
    pub shadow: Option<ControllerShadow>,
    /// Which Nodes are this cloud's (`--node-provider-id-prefix`, `--node-selector`): the
    /// others are never deleted, tainted or untainted, and the cloud is not asked about
    /// them. The default owns every Node, as Go does.
    pub node_ownership: NodeOwnership,
    /// The guard against mass deletion (`--node-deletion-guard`); on by default.
    pub deletion_guard: NodeDeletionGuard,
    /// Where the guard's metrics are counted; `None`: nowhere.
    pub metrics: Option<NodeDeletionGuardMetrics>,
}

impl Default for NodeLifecycleControllerConfig {
    fn default() -> Self {
        Self {
            monitor_period: Duration::from_secs(5),
            workers: 4,
            shadow: None,
            node_ownership: NodeOwnership::all(),
            deletion_guard: NodeDeletionGuard::default(),
            metrics: None,
        }
    }
}

impl NodeLifecycleControllerConfig {
    setters! {
        /// Sets how often Nodes are checked.
        pub fn with_monitor_period(monitor_period: Duration);
        /// Sets how many NotReady Nodes are checked at once.
        pub fn with_workers(workers: usize);
        /// Shadow mode: each pass over the Nodes settles `shadow`'s plan.
        pub fn with_shadow(shadow: Option<ControllerShadow>);
        /// Sets which Nodes are this cloud's; the others are left alone.
        pub fn with_node_ownership(node_ownership: NodeOwnership);
        /// Sets the guard against mass deletion ([`NodeDeletionGuard::Off`]: Go's behaviour).
        pub fn with_deletion_guard(deletion_guard: NodeDeletionGuard);
    }

    /// Counts the guard's metrics in `metrics` (registered by the manager).
    #[must_use]
    pub fn with_metrics(mut self, metrics: NodeDeletionGuardMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// The cloud-node-lifecycle controller. See the [module docs](self).
pub struct NodeLifecycleController {
    nodes_api: Api<Node>,
    instances: Arc<dyn Instances>,
    nodes: Informer<Node>,
    recorder: EventRecorder,
    config: NodeLifecycleControllerConfig,
    /// Nodes (name, UID) this controller deleted that the cache still shows. Not kept in
    /// shadow mode, where a deletion is a dry run and each pass plans it again.
    deleted: Mutex<HashSet<(String, String)>>,
    /// The guard's memory between passes.
    guard: Mutex<GuardState>,
    metrics: NodeDeletionGuardMetrics,
}

/// What the guard remembers from one pass to the next.
#[derive(Debug, Default)]
struct GuardState {
    /// The deletions its budget counts. Not kept in shadow mode, where each pass plans as
    /// if nothing had been deleted (nothing was).
    history: History,
    /// Why the last pass held Nodes back, if it did.
    reason: Option<&'static str>,
    /// The Nodes (name, UID) the last pass held back, and why: each gets its Event once.
    held: HashMap<(String, String), &'static str>,
}

impl NodeLifecycleController {
    /// A controller for `provider`'s instances, or `None` when it supports neither
    /// [`Instances`] nor legacy instances.
    pub fn new(
        client: Client,
        provider: &Arc<dyn CloudProvider>,
        nodes: Informer<Node>,
        config: NodeLifecycleControllerConfig,
    ) -> Option<Self> {
        Some(Self {
            nodes_api: Api::all(client.clone()),
            instances: resolve_instances(provider)?,
            nodes,
            recorder: EventRecorder::new(client, COMPONENT),
            metrics: config.metrics.clone().unwrap_or_default(),
            config,
            deleted: Mutex::default(),
            guard: Mutex::default(),
        })
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        if !self.nodes.synced_or_cancelled(&cancel).await {
            return;
        }
        let mut tick = tokio::time::interval(self.config.monitor_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => return,
            }
            tokio::select! {
                () = self.monitor_nodes() => {}
                () = cancel.cancelled() => return,
            }
        }
    }

    /// One pass over every Node in the cache.
    pub async fn monitor_nodes(&self) {
        shadow::pass(self.config.shadow.as_ref());
        let nodes = self.nodes.store().state();
        let deleted: HashSet<(String, String)> = {
            // Forget the deleted Nodes the cache no longer has.
            let present: HashSet<(&str, &str)> = nodes.iter().map(|n| key_of(n)).collect();
            let mut deleted = self.deleted.lock();
            deleted.retain(|(name, uid)| present.contains(&(name.as_str(), uid.as_str())));
            deleted.clone()
        };
        let deleted_already = |node: &Node| {
            let (name, uid) = key_of(node);
            deleted.contains(&(name.to_owned(), uid.to_owned()))
        };
        // The cloud's Nodes, which the guard's shares are of.
        let owned = nodes
            .iter()
            .filter(|n| {
                n.metadata.deletion_timestamp.is_none()
                    && !deleted_already(n)
                    && self.config.node_ownership.is_owned(n)
            })
            .count();
        let gone = Mutex::new(Vec::new());
        futures::stream::iter(nodes)
            .for_each_concurrent(self.config.workers.max(1), |node| {
                let gone = &gone;
                let deleted_already = &deleted_already;
                async move {
                    let action = check(&node);
                    if action != Check::Skip && !self.config.node_ownership.check(&node) {
                        return; // another cloud's: never deleted or tainted by us
                    }
                    match action {
                        Check::Skip => {}
                        Check::RemoveShutdownTaint => {
                            self.set_taints(&node, without_shutdown_taint(&node)).await;
                        }
                        // Deleted already; the watch has not said so yet.
                        Check::AskCloud if deleted_already(&node) => {}
                        Check::AskCloud => {
                            if self.check_with_cloud(&node).await {
                                gone.lock().push(node);
                            }
                        }
                    }
                }
            })
            .await;
        self.delete_gone(gone.into_inner(), owned).await;
    }

    /// Asks the cloud about a NotReady Node and taints it if it is shut down; whether its
    /// instance is gone. An error is not an answer: the Node is left for the next pass.
    async fn check_with_cloud(&self, node: &Node) -> bool {
        let name = node_name(node);
        let exists = match self.instances.instance_exists(node).await {
            Ok(exists) => exists,
            Err(err) => {
                tracing::warn!(node = name, error = %err.chain_to_string(), "error checking if node exists");
                return false;
            }
        };
        if !exists {
            return true;
        }
        match self.instances.instance_shutdown(node).await {
            Ok(true) if !decision::has_shutdown_taint(node) => {
                self.set_taints(node, with_shutdown_taint(node)).await;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(node = name, error = %err.chain_to_string(), "error checking if node is shut down");
            }
        }
        false
    }

    /// Deletes the Nodes a pass found `gone` that the guard lets go, and holds back the
    /// others; `owned`: the cloud's Nodes in the cache.
    async fn delete_gone(&self, gone: Vec<Arc<Node>>, owned: usize) {
        let now = tokio::time::Instant::now();
        let acting = self.config.shadow.is_none();
        let candidates: Vec<GoneNode> = gone
            .iter()
            .map(|n| GoneNode {
                name: node_name(n).to_owned(),
                approved: decision::deletion_approved(n),
                not_ready_since: decision::ready_since(n),
            })
            .collect();
        let recent = match self.config.deletion_guard {
            NodeDeletionGuard::On(limits) if acting => {
                self.guard.lock().history.recent(limits.window, now)
            }
            _ => 0,
        };
        let plan = guard::plan(&self.config.deletion_guard, owned, recent, &candidates);
        let reason = plan.hold.map(Hold::reason);
        let newly_held: Vec<usize> = {
            let mut state = self.guard.lock();
            match guard::transition(state.reason, reason) {
                Transition::Tripped(reason) => {
                    self.metrics.trip(reason);
                    tracing::warn!(
                        reason,
                        held_back = plan.held.len(),
                        deleting = plan.delete.len(),
                        "node deletion guard tripped: not deleting nodes the cloud provider \
                         reports gone: {}",
                        plan.hold.map(Hold::why).unwrap_or_default()
                    );
                }
                Transition::Reset => tracing::info!(
                    "node deletion guard reset: no node is held back any more; deleting as \
                     usual"
                ),
                Transition::Unchanged => {}
            }
            state.reason = reason;
            let held: HashMap<(String, String), &'static str> = plan
                .held
                .iter()
                .map(|&i| (owned_key(&gone[i]), reason.unwrap_or_default()))
                .collect();
            let newly = plan
                .held
                .iter()
                .copied()
                .filter(|&i| state.held.get(&owned_key(&gone[i])) != reason.as_ref())
                .collect();
            state.held = held;
            newly
        };
        self.metrics.set_held_back(reason, plan.held.len());
        if let Some(hold) = plan.hold {
            self.report_held(&gone, &plan.held, &newly_held, hold);
        }
        let counted: HashSet<usize> = plan
            .delete
            .iter()
            .copied()
            .filter(|&i| !candidates[i].approved)
            .collect();
        futures::stream::iter(plan.delete)
            .for_each_concurrent(self.config.workers.max(1), |i| {
                let (gone, counted) = (&gone, &counted);
                async move {
                    if self.delete(&gone[i]).await && acting && counted.contains(&i) {
                        self.guard.lock().history.record(now);
                    }
                }
            })
            .await;
    }

    /// The Event of each Node newly held back, and in shadow mode the plan's `refuse` of
    /// every one.
    fn report_held(&self, gone: &[Arc<Node>], held: &[usize], newly: &[usize], hold: Hold) {
        let why = hold.why();
        for &i in newly {
            let name = node_name(&gone[i]);
            self.recorder.warning(
                &*gone[i],
                REASON_DELETION_HELD_BACK,
                "DeleteNode",
                format!(
                    "Not deleting node {name}, though the cloud provider reports its instance \
                     gone: {why}. If the machine is really gone, approve the deletion: kubectl \
                     annotate node {name} {APPROVED_ANNOTATION}=true"
                ),
            );
        }
        if let Some(shadow) = &self.config.shadow {
            for &i in held {
                let name = node_name(&gone[i]);
                shadow.plan(Planned {
                    kind: "nodes".to_owned(),
                    namespace: None,
                    name: name.to_owned(),
                    scope: name.to_owned(),
                    action: Action::Refuse,
                    request: format!("DELETE /api/v1/nodes/{name}"),
                    why: format!("the cloud provider reports its instance gone; held back: {why}"),
                });
            }
        }
    }

    /// Deletes `node`; whether this request deleted it (a dry run in shadow mode).
    async fn delete(&self, node: &Node) -> bool {
        let name = node_name(node);
        let (_, uid) = key_of(node);
        tracing::info!(
            node = name,
            "deleting node since it is no longer present in cloud provider"
        );
        self.recorder.normal(
            node,
            REASON_DELETING_NODE,
            "DeleteNode",
            format!("Deleting node {name} because it does not exist in the cloud provider"),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: node.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let ours = match self.nodes_api.delete(name, &params).await {
            Ok(_) => true,
            // Gone already: someone else deleted it.
            Err(kube::Error::Api(s)) if s.code == 404 => false,
            Err(err) => {
                tracing::warn!(node = name, error = %err, "unable to delete node");
                self.recorder.warning(
                    node,
                    REASON_DELETING_NODE_FAILED,
                    "DeleteNode",
                    format!("Failed deleting node {name}: {err}"),
                );
                return false;
            }
        };
        if self.config.shadow.is_none() {
            self.deleted
                .lock()
                .insert((name.to_owned(), uid.to_owned()));
        }
        ours
    }

    async fn set_taints(&self, node: &Node, new: Vec<k8s_openapi::api::core::v1::Taint>) {
        let ops = replace_list(
            "/spec/taints",
            Some(taints(node)),
            &new,
            node.metadata.resource_version.as_deref(),
        );
        let patch = Patch::Json::<()>(to_patch(ops));
        if let Err(err) = self
            .nodes_api
            .patch(node_name(node), &PatchParams::default(), &patch)
            .await
        {
            // A concurrent change fails the patch's test; the next pass sees the fresh Node.
            tracing::warn!(node = node_name(node), error = %err, "error patching node taints");
        }
    }
}

/// A Node's name and UID.
fn key_of(node: &Node) -> (&str, &str) {
    (
        node_name(node),
        node.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// A Node's name and UID, owned.
fn owned_key(node: &Node) -> (String, String) {
    let (name, uid) = key_of(node);
    (name.to_owned(), uid.to_owned())
}
