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

mod decision;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use self::decision::{Check, check, with_shutdown_taint, without_shutdown_taint};
use super::node_ownership::NodeOwnership;
use super::node_util::{node_name, taints};
use super::patch::{replace_list, to_patch};
use crate::events::EventRecorder;
use crate::informer::Informer;
use crate::shadow::{self, ControllerShadow};
use ccm_provider::{CloudProvider, Instances, resolve_instances};

/// The event source name, as Go's controller reports it.
pub const COMPONENT: &str = "cloud-node-lifecycle-controller";
/// Event reason: a Node is deleted because its instance is gone.
pub const REASON_DELETING_NODE: &str = "DeletingNode";
/// Event reason: deleting a Node failed.
pub const REASON_DELETING_NODE_FAILED: &str = "DeletingNodeFailed";

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
}

impl Default for NodeLifecycleControllerConfig {
    fn default() -> Self {
        Self {
            monitor_period: Duration::from_secs(5),
            workers: 4,
            shadow: None,
            node_ownership: NodeOwnership::all(),
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
            config,
            deleted: Mutex::default(),
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
        {
            // Forget the deleted Nodes the cache no longer has.
            let present: HashSet<(&str, &str)> = nodes.iter().map(|n| key_of(n)).collect();
            self.deleted
                .lock()
                .retain(|(name, uid)| present.contains(&(name.as_str(), uid.as_str())));
        }
        futures::stream::iter(nodes)
            .for_each_concurrent(self.config.workers.max(1), |node| async move {
                let action = check(&node);
                if action != Check::Skip && !self.config.node_ownership.check(&node) {
                    return; // another cloud's: never deleted or tainted by us
                }
                match action {
                    Check::Skip => {}
                    Check::RemoveShutdownTaint => {
                        self.set_taints(&node, without_shutdown_taint(&node)).await;
                    }
                    Check::AskCloud => self.check_with_cloud(&node).await,
                }
            })
            .await;
    }

    async fn check_with_cloud(&self, node: &Node) {
        let name = node_name(node);
        let exists = match self.instances.instance_exists(node).await {
            Ok(exists) => exists,
            Err(err) => {
                tracing::warn!(node = name, error = %err.chain_to_string(), "error checking if node exists");
                return;
            }
        };
        if !exists {
            self.delete(node).await;
            return;
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
    }

    async fn delete(&self, node: &Node) {
        let name = node_name(node);
        let (_, uid) = key_of(node);
        if self
            .deleted
            .lock()
            .contains(&(name.to_owned(), uid.to_owned()))
        {
            return; // deleted already; the watch has not said so yet
        }
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
        let result = match self.nodes_api.delete(name, &params).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(drop),
        };
        match result {
            Ok(()) => {
                if self.config.shadow.is_none() {
                    self.deleted
                        .lock()
                        .insert((name.to_owned(), uid.to_owned()));
                }
            }
            Err(err) => {
                tracing::warn!(node = name, error = %err, "unable to delete node");
                self.recorder.warning(
                    node,
                    REASON_DELETING_NODE_FAILED,
                    "DeleteNode",
                    format!("Failed deleting node {name}: {err}"),
                );
            }
        }
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
