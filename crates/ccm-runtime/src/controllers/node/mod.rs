//! The cloud-node controller: initialises new Nodes from the cloud and keeps their
//! addresses current.
//!
//! A kubelet started with `--cloud-provider=external` registers its Node with the
//! `node.cloudprovider.kubernetes.io/uninitialized` taint. For each such Node this controller
//! asks the provider for the instance's metadata and writes, in this order: the addresses
//! (status subresource), then `spec.providerID` (only when empty), the instance-type / zone /
//! region labels under their GA and beta keys, the provider's additional labels, and the
//! removal of the taint — last, so that no Pod lands on a Node before it is complete.
//! Initialised Nodes get their GA labels kept in step with the beta ones, and their
//! addresses refreshed once at start and then every `--node-status-update-frequency`.
//! What Go initialises a Node despite (a kubelet's `spec.providerID` without `://`, an odd
//! address from the cloud) we initialise too, with a Warning event.
//!
//! Writes are JSON Patches that test the lists they replace (see
//! the controllers' `patch` module), so a concurrent writer is never overwritten: a failed test
//! makes the worker re-read the Node and try again, without asking the cloud again (the
//! controllers' `guarded_patch` loop, which the service controller's writes share). With
//! protobuf writes on, the Node write after the status write is a protobuf update made from
//! the Node's own bytes (the `put` module), falling back to the patch on a conflict.

mod decision;
mod put;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use self::decision::{
    InitPlan, is_uninitialized, needs_sync, node_name, plan_initialization,
    secondary_label_updates, taints, updated_addresses,
};
use super::guarded_patch::{PatchError, Patched, guarded_patch};
use super::node_ownership::NodeOwnership;
use super::patch::{
    PatchFailure, add_labels, patch_for_metadata, patch_for_protobuf, replace_list, to_patch,
};
use crate::client::protobuf;
use crate::events::EventRecorder;
use crate::informer::{Change, Informer};
use crate::metrics::ControllerMetrics;
use crate::shadow::{self, ControllerShadow};
use crate::workqueue::{Outcome, Queue, RateLimit, run};
use ccm_provider::{CloudError, CloudProvider, Instances, resolve_instances};
use prometheus_client::metrics::histogram::Histogram;

/// The event source name, as Go's controller reports it.
pub const COMPONENT: &str = "cloud-node-controller";
/// Event reason: a Node was initialised.
pub const REASON_SYNCED: &str = "Synced";
/// Event reason: a Node could not be initialised; it keeps its taint and is retried.
pub const REASON_INITIALIZATION_FAILED: &str = "FailedToInitializeNode";
/// Warning event reason: the Node was initialised although its `spec.providerID`, set by
/// its kubelet, is not `<provider>://<id>` (Go initialises it too; the field is immutable).
pub const REASON_INVALID_NODE_PROVIDER_ID: &str = decision::REASON_INVALID_NODE_PROVIDER_ID;
/// Warning event reason: the Node was initialised with an address from the cloud of a type
/// Kubernetes does not define, an `…IP` address that is not an IP or an empty one (written
/// as given, as Go writes them), or a repeated one (written once).
pub const REASON_UNUSUAL_NODE_ADDRESS: &str = decision::REASON_UNUSUAL_NODE_ADDRESS;

/// The field manager of this controller's writes.
const FIELD_MANAGER: &str = "cloud-node-controller";

/// The largest Node answer read (etcd's own limit on an object is 1.5 MiB).
const MAX_NODE: usize = 4 << 20;

/// How a Node's protobuf update went.
enum Update {
    /// Written: the Node is initialised.
    Written,
    /// Not written (it conflicted, the taints changed, or the answer could not be read):
    /// the JSON Patch is written instead, on this metadata (of the status write's answer)
    /// when it was read.
    NotWritten(Option<Box<ObjectMeta>>),
    /// The API server refused it otherwise.
    Failed(kube::Error),
}

/// Settings of the cloud-node controller.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CloudNodeControllerConfig {
    /// Workers initialising Nodes (`--concurrent-node-syncs`).
    pub workers: usize,
    /// Workers refreshing addresses (`--concurrent-node-status-updates`; 0 means `workers`).
    pub status_update_workers: usize,
    /// How often addresses are refreshed (`--node-status-update-frequency`).
    pub status_update_frequency: Duration,
    /// The work queue's retry backoff.
    pub rate_limit: RateLimit,
    /// Where Go's controller metrics are counted; `None`: nowhere.
    pub metrics: Option<ControllerMetrics>,
    /// In shadow mode, the plan each sync settles; `None`: acting.
    pub shadow: Option<ControllerShadow>,
    /// Which Nodes are this cloud's (`--node-provider-id-prefix`, `--node-selector`): the
    /// others are never initialised, and neither their labels nor their addresses are
    /// written. The default owns every Node, as Go does.
    pub node_ownership: NodeOwnership,
    /// Writes a Node's initialisation as Go does, a protobuf update (PUT) of the whole Node,
    /// which costs the API server less than a JSON Patch; built from the Node's own
    /// protobuf, it keeps every field, and a conflict falls back to the guarded JSON Patch.
    /// Off (JSON Patches only) by default and in shadow mode; the app turns it on with
    /// `--kube-api-content-type=application/vnd.kubernetes.protobuf`, its default.
    pub protobuf_writes: bool,
}

impl Default for CloudNodeControllerConfig {
    fn default() -> Self {
        Self {
            workers: 1,
            status_update_workers: 0,
            status_update_frequency: Duration::from_secs(5 * 60),
            rate_limit: RateLimit::client_go_default(),
            metrics: None,
            shadow: None,
            node_ownership: NodeOwnership::all(),
            protobuf_writes: false,
        }
    }
}

impl CloudNodeControllerConfig {
    /// Shadow mode: each sync of a Node settles `shadow`'s plan for it, and a Node whose
    /// initialisation was a dry run is planned again at its next sync.
    #[must_use]
    pub fn with_shadow(mut self, shadow: Option<ControllerShadow>) -> Self {
        self.shadow = shadow;
        self
    }

    /// Counts in `metrics` (Go's controller metrics, registered by the manager).
    pub fn with_metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    setters! {
        /// Sets the number of initialising workers.
        pub fn with_workers(workers: usize);
        /// Sets how often addresses are refreshed.
        pub fn with_status_update_frequency(status_update_frequency: Duration);
        /// Sets the number of address-refreshing workers (0: as many as initialising
        /// workers).
        pub fn with_status_update_workers(status_update_workers: usize);
        /// Sets which Nodes are this cloud's; the others are left alone.
        pub fn with_node_ownership(node_ownership: NodeOwnership);
        /// Sets whether a Node's initialisation is written as a protobuf update.
        pub fn with_protobuf_writes(protobuf_writes: bool);
    }
}

/// The cloud-node controller. See the [module docs](self).
#[derive(Clone)]
pub struct CloudNodeController {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    nodes_api: Api<Node>,
    instances: Arc<dyn Instances>,
    require_provider_id: bool,
    nodes: Informer<Node>,
    recorder: EventRecorder,
    queue: Queue<String>,
    config: CloudNodeControllerConfig,
    /// Nodes (name, UID) this controller initialised whose untainted version the cache has
    /// not shown yet: a sync in that window must not initialise them again.
    initialized: Arc<Mutex<HashSet<(String, String)>>>,
    /// Go's `node_controller_*_delay_seconds` histograms, when wired.
    delays: Option<(Histogram, Histogram)>,
    /// Whether initialisations are written as protobuf updates: as configured, until an
    /// answer cannot be read (then JSON Patches for good, as the informer falls back).
    protobuf_writes: AtomicBool,
}

impl CloudNodeController {
    /// A controller for `provider`'s instances, or `None` when the provider supports
    /// neither [`Instances`] nor legacy instances (Go does not start the controller then).
    ///
    /// `nodes` is the shared Node informer; the controller subscribes to it here, so create
    /// the controller before the informer runs.
    pub fn new(
        client: Client,
        provider: &Arc<dyn CloudProvider>,
        nodes: Informer<Node>,
        config: CloudNodeControllerConfig,
    ) -> Option<Self> {
        let instances = resolve_instances(provider)?;
        let queue = Queue::new("Nodes", config.rate_limit);
        let subscriber = queue.clone();
        let initialized: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
        let seen = initialized.clone();
        let ownership = config.node_ownership.clone();
        nodes.subscribe(move |change| match change {
            Change::Applied { new, .. } => {
                if needs_sync(new) && ownership.check(new) {
                    subscriber.add(new.name_any());
                } else if !is_uninitialized(new) {
                    forget(&seen, new);
                }
            }
            Change::Deleted(old) => forget(&seen, old),
        });
        let delays = config.metrics.clone().map(|m| {
            (
                m.initial_node_sync_delay,
                m.cloud_provider_taint_removal_delay,
            )
        });
        let protobuf_writes = AtomicBool::new(config.protobuf_writes && config.shadow.is_none());
        Some(Self {
            inner: Arc::new(Inner {
                protobuf_writes,
                client: client.clone(),
                nodes_api: Api::all(client.clone()),
                instances,
                require_provider_id: provider.instances().is_some(),
                nodes,
                recorder: EventRecorder::new(client, COMPONENT),
                queue,
                config,
                initialized,
                delays,
            }),
        })
    }

    /// The controller's work queue, for metrics.
    pub fn queue(&self) -> &Queue<String> {
        &self.inner.queue
    }

    /// Runs until `cancel` fires: waits for the Node cache, then initialises Nodes with
    /// `workers` workers and refreshes addresses periodically.
    pub async fn run(self, cancel: CancellationToken) {
        let inner = self.inner;
        if !inner.nodes.synced_or_cancelled(&cancel).await {
            return;
        }
        // Nodes listed before this controller subscribed.
        for node in inner.nodes.store().state() {
            if needs_sync(&node) && inner.config.node_ownership.check(&node) {
                inner.queue.add(node.name_any());
            }
        }
        let status_loop = {
            let inner = inner.clone();
            let cancel = cancel.clone();
            async move {
                // The first tick is immediate, as Go's `wait.Until`: after a restart the
                // addresses are refreshed now, not one period later.
                let mut tick = tokio::time::interval(inner.config.status_update_frequency);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = tick.tick() => inner.update_all_addresses(&cancel).await,
                        () = cancel.cancelled() => return,
                    }
                }
            }
        };
        let workers = {
            let inner = inner.clone();
            run(
                inner.queue.clone(),
                inner.config.workers,
                cancel,
                move |name| {
                    let inner = inner.clone();
                    async move { inner.sync(&name).await }
                },
            )
        };
        tokio::join!(status_loop, workers);
    }
}

impl Inner {
    fn cached(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.store().get(&ObjectRef::new(name))
    }

    /// One pass of the work queue for the Node `name`.
    async fn sync(&self, name: &str) -> Outcome {
        let _settle = shadow::syncing(self.config.shadow.as_ref(), name);
        let Some(node) = self.cached(name) else {
            return Outcome::Done; // deleted
        };
        if !self.config.node_ownership.check(&node) {
            return Outcome::Done; // another cloud's, or no longer ours
        }
        if !is_uninitialized(&node) {
            return self.reconcile_labels(&node).await;
        }
        if self
            .initialized
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&node_key(&node))
        {
            // Initialised by us; the cache has not caught up yet.
            return Outcome::Done;
        }
        tracing::info!(node = name, "initializing node with cloud provider");
        let meta = match self.instances.instance_metadata(&node).await {
            Ok(Some(meta)) => meta,
            Ok(None) => {
                tracing::info!(
                    node = name,
                    "skipping node: the cloud provider gave no metadata"
                );
                return Outcome::Done;
            }
            Err(err) => {
                let outcome = retry_outcome(&err);
                let msg = format!(
                    "failed to get instance metadata for node {name}: {}",
                    err.chain_to_string()
                );
                tracing::warn!(node = name, error = %msg, "node initialization failed");
                self.recorder
                    .warning(&*node, REASON_INITIALIZATION_FAILED, "InitializeNode", msg);
                return outcome;
            }
        };

        // Each attempt plans from the Node it is given: after a conflict, the fresh copy,
        // with the same metadata (the cloud is not asked again).
        let (meta, require_provider_id) = (&meta, self.require_provider_id);
        let attempt = |node: Arc<Node>| async move {
            match plan_initialization(&node, meta, require_provider_id) {
                Ok(plan) => {
                    self.initialize(&node, &plan).await?;
                    Ok(Ok(plan))
                }
                Err(err) => Ok(Err(err)),
            }
        };
        // The Node the last attempt planned from: what the events are about.
        let mut latest = node.clone();
        let changed = |fresh: Node, retry: usize| {
            if !is_uninitialized(&fresh) {
                return None;
            }
            tracing::debug!(
                node = name,
                // The attempt that failed, counted from 0.
                attempt = retry - 1,
                "node changed while writing; planning again"
            );
            latest = Arc::new(fresh);
            Some(latest.clone())
        };
        let result = guarded_patch(&self.nodes_api, name, node, attempt, changed).await;
        match result {
            Ok(Patched::Done(Ok(plan))) => self.initialized(name, &latest, &plan),
            Ok(Patched::Done(Err(err))) => {
                tracing::warn!(node = name, error = %err, "node initialization failed");
                self.recorder.warning(
                    &*latest,
                    REASON_INITIALIZATION_FAILED,
                    "InitializeNode",
                    err.to_string(),
                );
                Outcome::Retry
            }
            // Gone, or initialised meanwhile.
            Ok(Patched::Gone | Patched::Moot) => Outcome::Done,
            Err(PatchError::Refused(_)) => {
                // Nothing changed: the write itself was refused.
                self.write_failed(&latest, "the API server refused the write as invalid")
                    .await
            }
            Err(PatchError::Reread(err)) => {
                tracing::warn!(node = name, error = %err, "re-reading the node failed");
                Outcome::Retry
            }
            // Still conflicting after the last re-read: the queue's backoff tries again.
            Err(PatchError::Failed(kube::Error::Api(status))) if status.code == 409 => {
                Outcome::Retry
            }
            Err(PatchError::Failed(err)) => self.write_failed(&latest, &err.to_string()).await,
        }
    }

    /// A Node's initialisation was written: remembered until the cache shows it, measured,
    /// logged, and reported with the plan's warnings and a `Synced` event.
    fn initialized(&self, name: &str, node: &Arc<Node>, plan: &InitPlan) -> Outcome {
        // A shadow's write was a dry run: the Node is still to be initialised.
        if self.config.shadow.is_none() {
            self.initialized
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(node_key(node));
        }
        if let (Some((sync, taint)), Some(created)) =
            (&self.delays, &node.metadata.creation_timestamp)
        {
            let age = k8s_openapi::jiff::Timestamp::now()
                .duration_since(created.0)
                .as_secs_f64()
                .max(0.0);
            taint.observe(age);
            sync.observe(age);
        }
        tracing::info!(
            node = name,
            "successfully initialized node with cloud provider"
        );
        for warning in &plan.warnings {
            tracing::warn!(node = name, reason = warning.reason, "{}", warning.message);
            self.recorder.warning(
                &**node,
                warning.reason,
                "InitializeNode",
                warning.message.clone(),
            );
        }
        self.recorder.normal(
            &**node,
            REASON_SYNCED,
            "InitializeNode",
            "Node synced successfully",
        );
        Outcome::Done
    }

    async fn write_failed(&self, node: &Node, why: &str) -> Outcome {
        let name = node_name(node);
        tracing::warn!(node = name, error = why, "writing the node failed");
        self.recorder.warning(
            node,
            REASON_INITIALIZATION_FAILED,
            "InitializeNode",
            format!("failed to write node {name}: {why}"),
        );
        Outcome::Retry
    }

    /// Writes an initialisation plan: addresses first, then provider ID, labels and taints.
    /// A guard's failure is the API server's answer (409 or 422), for [`guarded_patch`].
    async fn initialize(&self, node: &Node, plan: &InitPlan) -> Result<(), kube::Error> {
        let name = node_name(node);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        // What the labels patch is built on: the cached Node, or the fresher one the status
        // patch returns (our own status write moves the resourceVersion a labels guard tests).
        let mut labels = node.metadata.labels.clone();
        let mut rv = node.metadata.resource_version.clone();
        if let Some(addresses) = &plan.addresses {
            let old = node.status.as_ref().and_then(|s| s.addresses.as_deref());
            let ops = replace_list("/status/addresses", old, addresses, rv.as_deref());
            let patch = Patch::Json::<()>(to_patch(ops));
            let updated = if self.protobuf_writes.load(Ordering::Relaxed) {
                // The whole Node answered in protobuf: what the update is made from.
                let answer = patch_for_protobuf(
                    &self.nodes_api,
                    name,
                    Some("status"),
                    &params,
                    &patch,
                    MAX_NODE,
                )
                .await?;
                match self.update_initialized(name, &answer, node, plan).await {
                    Update::Written => return Ok(()),
                    Update::NotWritten(meta) => meta.map(|meta| *meta),
                    Update::Failed(err) => return Err(err),
                }
            } else {
                Some(
                    patch_for_metadata(&self.nodes_api, name, Some("status"), &params, &patch)
                        .await?,
                )
            };
            if let Some(updated) = updated {
                labels = updated.labels;
                rv = updated.resource_version;
            }
        }
        let mut ops = Vec::new();
        if let Some(id) = &plan.provider_id {
            ops.push(serde_json::json!({"op": "add", "path": "/spec/providerID", "value": id}));
        }
        ops.extend(add_labels(labels.as_ref(), &plan.labels, rv.as_deref()));
        // The taints are tested against the list the plan was made from, so a taint added
        // by anyone since is never lost.
        ops.extend(replace_list(
            "/spec/taints",
            Some(taints(node)),
            &plan.taints,
            rv.as_deref(),
        ));
        let patch = Patch::Json::<()>(to_patch(ops));
        patch_for_metadata(&self.nodes_api, name, None, &params, &patch).await?;
        Ok(())
    }

    /// Writes the rest of `plan` as a protobuf update of the Node our status write answered
    /// with (`answer`, see the `put` module); `node` is what the plan was made from. When
    /// the update is not written (a conflict, taints changed, an answer that cannot be
    /// read), the caller writes the JSON Patch instead, on the answer's metadata if read.
    async fn update_initialized(
        &self,
        name: &str,
        answer: &[u8],
        node: &Node,
        plan: &InitPlan,
    ) -> Update {
        let built = protobuf::unwrap(answer).and_then(|message| {
            let meta = protobuf::edit::entries(message, protobuf::schema::NODE.number("metadata"))?
                .pop()
                .map(protobuf::decode_message::<ObjectMeta>)
                .transpose()?
                .map(Box::new);
            Ok((
                meta,
                put::initialization_update(message, taints(node), plan)?,
            ))
        });
        let (meta, body) = match built {
            Ok(built) => built,
            Err(err) => {
                tracing::warn!(
                    node = name,
                    error = %err,
                    "the API server's protobuf could not be read; writing Nodes as JSON patches from now on"
                );
                self.protobuf_writes.store(false, Ordering::Relaxed);
                return Update::NotWritten(None);
            }
        };
        let Some(body) = body else {
            return Update::NotWritten(meta); // the patch's `test` of the taints re-plans
        };
        let url = format!(
            "{}/{name}?fieldManager={FIELD_MANAGER}",
            self.nodes_api.resource_url()
        );
        let request = http::Request::put(url)
            .header(http::header::CONTENT_TYPE, protobuf::MEDIA_TYPE)
            .body(body);
        let request = match request {
            Ok(request) => request,
            Err(err) => return Update::Failed(kube::Error::HttpError(err)),
        };
        match protobuf::send(&self.client, request, MAX_NODE).await {
            Ok(_) => Update::Written,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                // A role of an earlier release (patch, no update): patches from now on.
                tracing::warn!(
                    node = name,
                    error = %status.message,
                    "not allowed to update nodes; writing Nodes as JSON patches from now on"
                );
                self.protobuf_writes.store(false, Ordering::Relaxed);
                Update::NotWritten(meta)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(
                    node = name,
                    "the node changed since the status write; patching instead"
                );
                Update::NotWritten(meta)
            }
            Err(err) => Update::Failed(err),
        }
    }

    /// For an initialised Node: sets GA labels from their beta twins.
    async fn reconcile_labels(&self, node: &Node) -> Outcome {
        let updates = secondary_label_updates(node);
        if updates.is_empty() {
            return Outcome::Done;
        }
        let ops = add_labels(
            node.metadata.labels.as_ref(),
            &updates,
            node.metadata.resource_version.as_deref(),
        );
        let patch = Patch::Json::<()>(to_patch(ops));
        let params = PatchParams::default();
        match patch_for_metadata(&self.nodes_api, node_name(node), None, &params, &patch).await {
            Ok(_) => Outcome::Done,
            Err(err) => match PatchFailure::from(err) {
                PatchFailure::Gone => Outcome::Done,
                PatchFailure::Conflict => Outcome::Retry,
                PatchFailure::Invalid(err) | PatchFailure::Other(err) => {
                    tracing::warn!(node = node_name(node), error = %err, "failed to update node labels");
                    Outcome::Retry
                }
            },
        }
    }

    /// Refreshes the addresses of every initialised Node, `status_update_workers` at a time.
    async fn update_all_addresses(&self, cancel: &CancellationToken) {
        let started = tokio::time::Instant::now();
        let nodes: Vec<Arc<Node>> = self
            .nodes
            .store()
            .state()
            .into_iter()
            .filter(|n| !is_uninitialized(n) && self.config.node_ownership.check(n))
            .collect();
        let count = nodes.len();
        let workers = match self.config.status_update_workers {
            0 => self.config.workers,
            n => n,
        }
        .max(1);
        let work = futures::stream::iter(nodes).for_each_concurrent(workers, |node| async move {
            self.update_addresses(&node).await;
        });
        tokio::select! {
            () = work => {}
            () = cancel.cancelled() => return,
        }
        tracing::debug!(nodes = count, took = ?started.elapsed(), "updated node addresses");
    }

    async fn update_addresses(&self, node: &Node) {
        let name = node_name(node);
        let meta = match self.instances.instance_metadata(node).await {
            Ok(Some(meta)) => meta,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(node = name, error = %err.chain_to_string(), "error getting instance metadata for node addresses");
                return;
            }
        };
        let new = match updated_addresses(node, meta.node_addresses) {
            Ok(Some(new)) => new,
            Ok(None) => return,
            Err(reason) => {
                tracing::warn!(node = name, error = %reason, "failed to update node addresses");
                return;
            }
        };
        let old = node.status.as_ref().and_then(|s| s.addresses.as_deref());
        let ops = replace_list(
            "/status/addresses",
            old,
            &new,
            node.metadata.resource_version.as_deref(),
        );
        let patch = Patch::Json::<()>(to_patch(ops));
        let params = PatchParams::default();
        if let Err(err) =
            patch_for_metadata(&self.nodes_api, name, Some("status"), &params, &patch).await
        {
            // A conflict is settled on the next pass, with the fresh Node from the cache.
            tracing::warn!(node = name, error = %err, "error patching node with cloud addresses");
        }
    }
}

/// How many of this cloud's Nodes in the cache still carry the
/// `node.cloudprovider.kubernetes.io/uninitialized` taint and are not being deleted
/// (`ccm_nodes_uninitialized`). Another cloud's Nodes are not counted: they wait for their
/// own CCM, not for this one.
pub(crate) fn uninitialized_nodes(nodes: &Informer<Node>, ownership: &NodeOwnership) -> usize {
    nodes
        .store()
        .state()
        .iter()
        .filter(|n| {
            is_uninitialized(n) && n.metadata.deletion_timestamp.is_none() && ownership.is_owned(n)
        })
        .count()
}

fn node_key(node: &Node) -> (String, String) {
    (
        node.name_any(),
        node.metadata.uid.clone().unwrap_or_default(),
    )
}

fn forget(set: &Mutex<HashSet<(String, String)>>, node: &Node) {
    set.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&node_key(node));
}

/// The queue outcome for a failed cloud call: a fixed delay when the provider asked for one;
/// held until the cloud answers again when it did not answer.
fn retry_outcome(err: &CloudError) -> Outcome {
    match err.retry_after_delay() {
        Some(after) => Outcome::RequeueAfter(after),
        None if err.is_unavailable() => Outcome::Unavailable,
        None => Outcome::Retry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_honoured() {
        assert_eq!(
            retry_outcome(&CloudError::retry_after("busy", Duration::from_secs(9))),
            Outcome::RequeueAfter(Duration::from_secs(9))
        );
        assert_eq!(retry_outcome(&CloudError::msg("x")), Outcome::Retry);
        let down = CloudError::unavailable("listing droplets", std::io::Error::other("refused"));
        assert_eq!(retry_outcome(&down), Outcome::Unavailable);
    }
}
