//! The node-ipam controller: gives each Node its pod CIDRs (`spec.podCIDR` and
//! `spec.podCIDRs`) from `--cluster-cidr`, as the range allocator of Kubernetes'
//! `cloud-controller-manager` does when `--allocate-node-cidrs` is true.
//!
//! At start it waits for the Node cache and marks every pod CIDR the Nodes already have as
//! used, so a restart never hands one out twice; then each Node without pod CIDRs gets one
//! subnet of each cluster CIDR (one per family when dual-stack), never from the Service range
//! (`--service-cluster-ip-range`), written with a strategic merge patch as Go writes it. A
//! deleted Node's CIDRs are free again. A full range is a `CIDRNotAvailable` Warning on the
//! Node and a retry with backoff; a failed write is `CIDRAssignmentFailed`. Where Go loses a
//! CIDR (a write whose outcome is unknown, the first family of a dual-stack allocation whose
//! second is full) or stops the process (a Node whose pod CIDR is outside the cluster CIDR),
//! this controller keeps the reservation for the retry, gives it back, or reports the Node
//! and goes on.

mod allocator;
mod cidr_set;
mod config;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

pub use self::allocator::{PodCidrError, RangeAllocator};
pub use self::cidr_set::{
    CidrSet, CidrSetError, Exhausted, MAX_IPV4_SUBNET_BITS, MAX_IPV6_SUBNET_BITS, OutOfRange,
};
pub use self::config::{
    DEFAULT_NODE_MASK_IPV4, DEFAULT_NODE_MASK_IPV6, MaskSizeFlags, NodeIpamConfig,
};
use crate::controllers::route::Cidr;
use crate::events::EventRecorder;
use crate::flags::FlagError;
use crate::informer::{Change, Informer};
use crate::metrics::NodeIpamMetrics;
use crate::shadow::{self, ControllerShadow};
use crate::workqueue::{Outcome, Queue, RateLimit, run};

/// The event source, as Go's range allocator reports it.
pub const COMPONENT: &str = "cidrAllocator";
/// Warning event reason: no cluster CIDR has a free subnet for the Node.
pub const REASON_CIDR_NOT_AVAILABLE: &str = "CIDRNotAvailable";
/// Warning event reason: the Node's pod CIDRs could not be written.
pub const REASON_CIDR_ASSIGNMENT_FAILED: &str = "CIDRAssignmentFailed";
/// Warning event reason: the Node has pod CIDRs this controller cannot mark used (malformed,
/// or outside the cluster CIDRs); Go's controller stops the process on it.
pub const REASON_INVALID_POD_CIDR: &str = "InvalidPodCIDR";
/// How many times a write is tried before the Node is retried with backoff (Go's
/// `cidrUpdateRetries`).
pub const WRITE_ATTEMPTS: usize = 3;
/// Workers writing pod CIDRs (Go's `cidrUpdateWorkers`).
pub const WORKERS: usize = 30;

const FIELD_MANAGER: &str = "node-ipam-controller";

/// The node-ipam controller. See the [module docs](self).
#[derive(Clone)]
pub struct NodeIpamController {
    inner: Arc<Inner>,
}

struct Inner {
    nodes_api: Api<Node>,
    nodes: Informer<Node>,
    recorder: EventRecorder,
    queue: Queue<String>,
    allocator: Mutex<RangeAllocator>,
    /// CIDRs reserved for a Node (by name) and not yet seen on it in the cache: a retry
    /// writes the same ones, and nothing reserved is lost.
    reserved: Mutex<HashMap<String, Reservation>>,
    /// In shadow mode, the plan each sync settles.
    shadow: Option<ControllerShadow>,
}

impl NodeIpamController {
    /// A controller for `config`'s cluster CIDRs, counting in `metrics` when given.
    ///
    /// `nodes` is the shared Node informer; the controller subscribes to it here, so create
    /// the controller before the informer runs.
    pub fn new(
        client: Client,
        nodes: Informer<Node>,
        config: &NodeIpamConfig,
        metrics: Option<NodeIpamMetrics>,
    ) -> Result<Self, FlagError> {
        let allocator = RangeAllocator::new(config.cidr_sets()?, metrics);
        let queue = Queue::new("cidrallocator_node", RateLimit::client_go_default());
        let inner = Arc::new(Inner {
            nodes_api: Api::all(client.clone()),
            nodes: nodes.clone(),
            recorder: EventRecorder::new(client, COMPONENT),
            queue: queue.clone(),
            allocator: Mutex::new(allocator),
            reserved: Mutex::default(),
            shadow: config.shadow().cloned(),
        });
        let weak = Arc::downgrade(&inner);
        nodes.subscribe(move |change| match change {
            Change::Applied { new, .. } => queue.add(new.name_any()),
            Change::Deleted(old) => {
                if let Some(inner) = weak.upgrade() {
                    inner.deleted(old);
                }
            }
        });
        Ok(Self { inner })
    }

    /// The controller's work queue, for metrics.
    pub fn queue(&self) -> &Queue<String> {
        &self.inner.queue
    }

    /// Runs until `cancel` fires: waits for the Node cache, marks the pod CIDRs Nodes
    /// already have as used, then gives CIDRs to the Nodes without.
    pub async fn run(self, cancel: CancellationToken) {
        let inner = self.inner;
        if !inner.nodes.synced_or_cancelled(&cancel).await {
            return;
        }
        tracing::info!("starting range CIDR allocator");
        let nodes = inner.nodes.store().state();
        for node in &nodes {
            let cidrs = pod_cidrs(node);
            if !cidrs.is_empty() {
                inner.occupy(node, cidrs);
            }
        }
        for node in &nodes {
            inner.queue.add(node.name_any());
        }
        let worker = inner.clone();
        run(inner.queue.clone(), WORKERS, cancel, move |name| {
            let inner = worker.clone();
            async move { inner.sync(&name).await }
        })
        .await;
        tracing::info!("shutting down range CIDR allocator");
    }
}

/// A Node's `spec.podCIDRs`, or its `spec.podCIDR` alone when the list is empty (as the API
/// server fills one from the other).
fn pod_cidrs(node: &Node) -> &[String] {
    let Some(spec) = &node.spec else { return &[] };
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(list), _) if !list.is_empty() => list,
        (_, Some(one)) if !one.is_empty() => std::slice::from_ref(one),
        _ => &[],
    }
}

fn uid(node: &Node) -> String {
    node.metadata.uid.clone().unwrap_or_default()
}

/// Go's `RecordNodeStatusChange` message.
fn status_message(node: &str, status: &str) -> String {
    format!("Node {node} status is now: {status}")
}

impl Inner {
    /// Marks a Node's pod CIDRs used; one this controller cannot place is reported.
    ///
    /// Only while the cache still holds this Node: the cache drops a deleted Node before
    /// [`deleted`](Self::deleted) releases its CIDRs under the allocator's lock, so checking
    /// the cache under that lock means a copy read before the deletion never marks the
    /// released CIDRs used again (they would be lost until a restart).
    fn occupy(&self, node: &Node, cidrs: &[String]) {
        let mut allocator = self.allocator.lock();
        let current = self.nodes.store().get(&ObjectRef::from_obj(node));
        if current.is_none_or(|c| c.metadata.uid != node.metadata.uid) {
            return;
        }
        let occupied = allocator.occupy(cidrs);
        drop(allocator);
        if let Err(err) = occupied {
            let name = node.name_any();
            tracing::warn!(node = name, error = %err, "cannot mark the node's pod CIDRs used");
            self.recorder.warning(
                node,
                REASON_INVALID_POD_CIDR,
                "AllocateCIDR",
                format!("node {name}: {err}"),
            );
        }
    }

    /// A Node is gone: its CIDRs, and any reserved for it, are free again.
    fn deleted(&self, node: &Node) {
        let name = node.name_any();
        let cidrs = pod_cidrs(node);
        if !cidrs.is_empty() {
            tracing::debug!(
                node = name,
                ?cidrs,
                "releasing the pod CIDRs of a deleted node"
            );
            if let Err(err) = self.allocator.lock().release(cidrs) {
                tracing::warn!(node = name, error = %err, "cannot release the node's pod CIDRs");
            }
        }
        let reserved = self.reserved.lock().remove(&name);
        if let Some(reserved) = reserved
            && reserved.owner == uid(node)
            && !same(&reserved.cidrs, cidrs)
        {
            self.allocator.lock().release_cidrs(&reserved.cidrs);
        }
    }

    /// One pass of the work queue for the Node `name`.
    async fn sync(&self, name: &str) -> Outcome {
        let _settle = shadow::syncing(self.shadow.as_ref(), name);
        let Some(node) = self.nodes.store().get(&ObjectRef::new(name)) else {
            return Outcome::Done; // deleted; the delete handler released its CIDRs
        };
        let existing = pod_cidrs(&node);
        if node.metadata.deletion_timestamp.is_some() {
            self.deleted(&node);
            return Outcome::Done;
        }
        if !existing.is_empty() {
            self.occupy(&node, existing);
            self.settle_reservation(name, existing);
            return Outcome::Done;
        }
        let cidrs = match self.reserve(&node) {
            // Written; the cache has not shown it yet, and its update will settle it.
            Ok(None) => return Outcome::Done,
            Ok(Some(cidrs)) => cidrs,
            Err(full) => {
                tracing::warn!(node = name, error = %full, "no pod CIDR is available");
                self.recorder.warning(
                    &*node,
                    REASON_CIDR_NOT_AVAILABLE,
                    "AllocateCIDR",
                    status_message(name, REASON_CIDR_NOT_AVAILABLE),
                );
                return Outcome::Retry;
            }
        };
        self.write(&node, &cidrs).await
    }

    /// The CIDRs to write to this Node: those reserved for it, or new ones; `None` when
    /// they are written already.
    fn reserve(&self, node: &Node) -> Result<Option<Vec<Cidr>>, Exhausted> {
        let (name, uid) = (node.name_any(), uid(node));
        let mut reserved = self.reserved.lock();
        if let Some(r) = reserved.get(&name) {
            if r.owner == uid {
                return Ok((!r.written).then(|| r.cidrs.clone()));
            }
            // A Node of the same name was replaced before it showed its CIDRs.
            let stale = r.cidrs.clone();
            self.allocator.lock().release_cidrs(&stale);
        }
        let cidrs = self.allocator.lock().allocate()?;
        reserved.insert(
            name,
            Reservation {
                owner: uid,
                cidrs: cidrs.clone(),
                written: false,
            },
        );
        Ok(Some(cidrs))
    }

    /// The Node shows `existing`: its reservation, if any, is settled — kept when it is what
    /// the Node shows, freed when the Node got other CIDRs.
    fn settle_reservation(&self, name: &str, existing: &[String]) {
        let Some(reserved) = self.reserved.lock().remove(name) else {
            return;
        };
        if !same(&reserved.cidrs, existing) {
            tracing::info!(
                node = name,
                ?existing,
                "node already has other pod CIDRs; releasing the ones reserved for it"
            );
            self.allocator.lock().release_cidrs(&reserved.cidrs);
        }
    }

    /// Writes `cidrs` to the Node, as Go's `PatchNodeCIDRs`.
    async fn write(&self, node: &Node, cidrs: &[Cidr]) -> Outcome {
        let name = node.name_any();
        let list: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
        let patch = serde_json::json!({"spec": {"podCIDR": list[0], "podCIDRs": list}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let mut last = None;
        for _ in 0..WRITE_ATTEMPTS {
            match self
                .nodes_api
                .patch(&name, &params, &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(node = name, pod_cidrs = ?list, "set node pod CIDRs");
                    // Kept until the cache shows the Node with them, so that a pass on an
                    // older copy meanwhile does not reserve others.
                    if let Some(r) = self.reserved.lock().get_mut(&name) {
                        r.written = true;
                    }
                    return Outcome::Done;
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.settle_reservation(&name, &[]);
                    return Outcome::Done;
                }
                // Refused as invalid: the Node got other pod CIDRs meanwhile (they cannot
                // change once set). Settled on the next pass, from the cache.
                Err(kube::Error::Api(status)) if status.code == 422 => {
                    tracing::debug!(node = name, %status.message, "pod CIDRs refused");
                    return Outcome::Retry;
                }
                Err(err) => last = Some(err),
            }
        }
        let err = last.map(|e| e.to_string()).unwrap_or_default();
        tracing::warn!(
            node = name,
            error = err,
            "failed to update the node's pod CIDRs"
        );
        self.recorder.warning(
            node,
            REASON_CIDR_ASSIGNMENT_FAILED,
            "AllocateCIDR",
            status_message(&name, REASON_CIDR_ASSIGNMENT_FAILED),
        );
        // The reservation stays for the retry: whether the write went through or not, the
        // same CIDRs are written again or found on the Node.
        Outcome::Retry
    }
}

/// CIDRs taken for a Node that the cache does not show on it yet.
struct Reservation {
    /// The Node's UID: a Node of the same name created since is another Node.
    owner: String,
    cidrs: Vec<Cidr>,
    /// Whether the API server has accepted them.
    written: bool,
}

/// Whether the reserved CIDRs are those a Node shows.
fn same(reserved: &[Cidr], shown: &[String]) -> bool {
    reserved.len() == shown.len()
        && reserved
            .iter()
            .zip(shown)
            .all(|(r, s)| Cidr::parse(s).is_ok_and(|s| s.to_string() == r.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::{self, Event};

    fn node(name: &str, uid: &str, pod_cidr: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        }))
        .unwrap()
    }

    /// A controller over an informer fed by hand; its client reaches no server.
    fn controller() -> (NodeIpamController, Informer<Node>) {
        let client = Client::new(
            tower::service_fn(|_req: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no server"))
            }),
            "default",
        );
        let nodes = Informer::new(Api::all(client.clone()), watcher::Config::default(), |_| {});
        let config = NodeIpamConfig::new("10.244.0.0/16", "", MaskSizeFlags::default()).unwrap();
        let controller = NodeIpamController::new(client, nodes.clone(), &config, None).unwrap();
        (controller, nodes)
    }

    fn used(controller: &NodeIpamController) -> u64 {
        controller.inner.allocator.lock().used()[0]
    }

    #[tokio::test]
    async fn a_copy_read_before_a_deletion_does_not_take_back_the_released_cidrs() {
        let (controller, nodes) = controller();
        let a = node("a", "uid-a", "10.244.0.0/24");
        nodes.apply_for_test(&Event::Apply(a.clone()));
        controller.inner.occupy(&a, pod_cidrs(&a));
        assert_eq!(used(&controller), 1);

        // A worker read `a` from the cache; then the watch deleted it, which released its
        // CIDR; then the worker marks what its copy shows.
        nodes.apply_for_test(&Event::Delete(a.clone()));
        assert_eq!(used(&controller), 0, "released on deletion");
        controller.inner.occupy(&a, pod_cidrs(&a));
        assert_eq!(
            used(&controller),
            0,
            "a deleted Node's copy takes nothing back"
        );

        // Nor does the copy of a former Node of the same name, once another replaced it.
        let new_a = node("a", "uid-a2", "10.244.1.0/24");
        nodes.apply_for_test(&Event::Apply(new_a.clone()));
        controller.inner.occupy(&a, pod_cidrs(&a));
        assert_eq!(used(&controller), 0);
        controller.inner.occupy(&new_a, pod_cidrs(&new_a));
        assert_eq!(used(&controller), 1, "the Node in the cache is marked");
    }
}
