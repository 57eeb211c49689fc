//! Shadow mode (`--shadow`): the controller manager runs beside the CCM in charge (Go's,
//! another provider's, or ours), decides everything its controllers would, and changes
//! nothing. Every API write goes to the API server as a dry run (`?dryRun=All`: validated
//! and admitted, answered as if done, never stored) and every cloud mutation is replaced by
//! a read ([`LoadBalancer::plan_load_balancer`](ccm_provider::LoadBalancer::plan_load_balancer)
//! for load balancers; routes are only recorded). What would have changed is the *plan*:
//! one [`PlannedChange`] per object and kind of change, served as JSON at
//! [`PLAN_PATH`], counted in `ccm_shadow_planned_changes{controller, kind, action}` and
//! logged once per change. An operator starts a shadow before a swap: once the running CCM
//! has converged, an empty plan proves the swap changes nothing; a non-empty one names each
//! difference.
//!
//! A change stays in the plan while the controller that planned it still would make it: each
//! sync of an object (or each pass of a controller that works in passes) drops that
//! controller's earlier changes of that object it did not plan again
//! ([`ControllerShadow::syncing`], [`ControllerShadow::pass`]).
//!
//! What a shadow still writes: the Lease of its own leader election (named
//! `<--leader-elect-resource-name>-shadow`, so it never competes with the CCM in charge),
//! and, under `--use-service-account-credentials`, the controllers' ServiceAccounts when
//! they are missing and their tokens (a TokenRequest stores nothing). Its Events are dry
//! runs too, so `kubectl get events` shows only the CCM in charge.

mod client;
mod provider;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;

pub(crate) use self::client::wrap_client;
pub(crate) use self::provider::wrap_provider;

/// Where the endpoint server serves the plan (JSON), behind the same authentication and
/// authorization as `/metrics`.
pub const PLAN_PATH: &str = "/debug/shadow/plan";

/// The most changes a plan holds; past it, new ones are counted in
/// `ccm_shadow_planned_changes_dropped_total` and logged, not kept. Ten per object of a
/// cluster at Kubernetes' scalability limits (5,000 Nodes, 10,000 Services) fit.
pub const MAX_PLANNED_CHANGES: usize = 100_000;

/// The longest `why` kept, in bytes: a patch body or a provider's list of changes, cut
/// there (on a character boundary) with `…`.
pub const MAX_WHY_BYTES: usize = 1024;

/// What a change does to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The object would be created.
    Create,
    /// The object would be changed.
    Update,
    /// The object would be deleted.
    Delete,
    /// Nothing would be done to the object, though the controller wants to: it is not
    /// what it should act on (a load balancer a hint on a Service leads to, which is not
    /// that Service's: `CloudError::NotOwned`), or a guard holds the change back (a Node
    /// deletion past `--node-deletion-guard`). Left alone, and reported.
    Refuse,
}

impl Action {
    /// `create`, `update` or `delete`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Refuse => "refuse",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Action {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// One change a shadow's controller would make, as the plan serves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedChange {
    /// The controller that would make it (Go's name, e.g. `cloud-node-controller`).
    pub controller: String,
    /// What is changed: an API resource as its path names it (`nodes`, `nodes/status`,
    /// `services/status`), or a cloud object (`cloud/loadbalancers`, `cloud/routes`).
    pub kind: String,
    /// The object's namespace; none for a cluster-scoped one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name (a load balancer: its Service's; a route: its destination CIDR).
    pub name: String,
    /// Create, update or delete.
    pub action: Action,
    /// The request that would make it: `PATCH /api/v1/nodes/n1`, `ensure_load_balancer`.
    pub request: String,
    /// Why: the body of the write (what it sets), or what the provider says would change.
    pub why: String,
    /// When the change was first planned (RFC 3339).
    pub since: String,
}

/// A change as a recorder reports it, before it is attributed and timed.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub(crate) kind: String,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
    /// What the controller syncs when it makes it (`name` or `namespace/name`).
    pub(crate) scope: String,
    pub(crate) action: Action,
    pub(crate) request: String,
    pub(crate) why: String,
}

/// The plan of a shadow. Cloning shares it.
#[derive(Clone, Default)]
pub struct Shadow {
    inner: Arc<Inner>,
}

impl fmt::Debug for Shadow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shadow")
            .field("planned", &self.inner.state.lock().entries.len())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    gauge: Family<PlanLabels, Gauge>,
    dropped: prometheus_client::metrics::counter::Counter,
}

#[derive(Default)]
struct State {
    /// Bumped at every record and every start of a sync: orders the two.
    seq: u64,
    entries: BTreeMap<Key, Entry>,
    /// Entries by gauge labels.
    counts: BTreeMap<PlanLabels, i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    controller: Arc<str>,
    kind: String,
    namespace: Option<String>,
    name: String,
    request: String,
}

struct Entry {
    scope: String,
    action: Action,
    why: String,
    seq: u64,
    since: Timestamp,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PlanLabels {
    controller: String,
    kind: String,
    action: Action,
}

impl Shadow {
    /// An empty plan.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `ccm_shadow_planned_changes` and `ccm_shadow_planned_changes_dropped` in
    /// `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "ccm_shadow_planned_changes",
            "Changes a shadow (--shadow) would make, by controller, kind of object and action",
            self.inner.gauge.clone(),
        );
        registry.register(
            "ccm_shadow_planned_changes_dropped",
            "Planned changes not kept because the plan was full",
            self.inner.dropped.clone(),
        );
    }

    /// The handle a controller records its changes and syncs through.
    #[must_use]
    pub fn for_controller(&self, controller: &str) -> ControllerShadow {
        ControllerShadow {
            shadow: self.clone(),
            controller: Arc::from(controller),
            last_pass: Arc::default(),
        }
    }

    /// The plan: every change still planned, ordered by controller, kind and object.
    #[must_use]
    pub fn changes(&self) -> Vec<PlannedChange> {
        let state = self.inner.state.lock();
        state
            .entries
            .iter()
            .map(|(key, entry)| PlannedChange {
                controller: key.controller.to_string(),
                kind: key.kind.clone(),
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                action: entry.action,
                request: key.request.clone(),
                why: entry.why.clone(),
                since: entry.since.to_string(),
            })
            .collect()
    }

    /// The plan as the endpoint serves it: `{"changes": [...]}`.
    #[must_use]
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Plan {
            changes: Vec<PlannedChange>,
        }
        serde_json::to_string_pretty(&Plan {
            changes: self.changes(),
        })
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()))
    }

    fn record(&self, controller: &Arc<str>, planned: Planned) {
        let Planned {
            kind,
            namespace,
            name,
            scope,
            action,
            request,
            why,
        } = planned;
        let why = cut(why);
        let key = Key {
            controller: controller.clone(),
            kind,
            namespace,
            name,
            request,
        };
        let mut state = self.inner.state.lock();
        state.seq += 1;
        let seq = state.seq;
        let labels = PlanLabels {
            controller: controller.to_string(),
            kind: key.kind.clone(),
            action,
        };
        let object = object_name(&key);
        if let Some(entry) = state.entries.get_mut(&key) {
            let changed = entry.action != action || entry.why != why;
            let before = entry.action;
            entry.seq = seq;
            entry.scope = scope;
            if changed {
                tracing::info!(controller = %key.controller, kind = %key.kind, object, %action, request = %key.request, why, "shadow: would change (changed)");
                entry.action = action;
                entry.why = why;
            }
            if before != action {
                let old = PlanLabels {
                    action: before,
                    ..labels.clone()
                };
                self.count(&mut state, old, -1);
                self.count(&mut state, labels, 1);
            }
            return;
        }
        if state.entries.len() >= MAX_PLANNED_CHANGES {
            drop(state);
            self.inner.dropped.inc();
            tracing::warn!(controller = %key.controller, kind = %key.kind, object, %action, "shadow: the plan is full; change not kept");
            return;
        }
        tracing::info!(controller = %key.controller, kind = %key.kind, object, %action, request = %key.request, why, "shadow: would change");
        state.entries.insert(
            key,
            Entry {
                scope,
                action,
                why,
                seq,
                since: Timestamp::now(),
            },
        );
        self.count(&mut state, labels, 1);
    }

    fn count(&self, state: &mut State, labels: PlanLabels, by: i64) {
        let n = state.counts.entry(labels.clone()).or_default();
        *n += by;
        let value = *n;
        if value <= 0 {
            state.counts.remove(&labels);
            self.inner.gauge.remove(&labels);
        } else {
            self.inner.gauge.get_or_create(&labels).set(value);
        }
    }

    /// A sequence number: changes recorded after it are newer.
    fn mark(&self) -> u64 {
        let mut state = self.inner.state.lock();
        state.seq += 1;
        state.seq
    }

    /// Drops `controller`'s changes recorded before `since`, of `scope` or of every scope.
    fn settle(&self, controller: &Arc<str>, scope: Option<&str>, since: u64) {
        let mut state = self.inner.state.lock();
        let stale: Vec<Key> = state
            .entries
            .iter()
            .filter(|(key, entry)| {
                key.controller == *controller
                    && entry.seq < since
                    && scope.is_none_or(|s| entry.scope == s)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(entry) = state.entries.remove(&key) {
                tracing::info!(controller = %key.controller, kind = %key.kind, object = object_name(&key), action = %entry.action, "shadow: no longer planned");
                let labels = PlanLabels {
                    controller: key.controller.to_string(),
                    kind: key.kind,
                    action: entry.action,
                };
                self.count(&mut state, labels, -1);
            }
        }
    }
}

fn object_name(key: &Key) -> String {
    match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.clone(),
    }
}

/// `why` cut to [`MAX_WHY_BYTES`].
fn cut(mut why: String) -> String {
    if why.len() > MAX_WHY_BYTES {
        let end = (0..=MAX_WHY_BYTES)
            .rev()
            .find(|i| why.is_char_boundary(*i))
            .unwrap_or(0);
        why.truncate(end);
        why.push('…');
    }
    why
}

/// One controller's part of a [`Shadow`]: what it records goes under its name.
#[derive(Clone)]
pub struct ControllerShadow {
    shadow: Shadow,
    controller: Arc<str>,
    /// Where the last pass started.
    last_pass: Arc<Mutex<Option<u64>>>,
}

impl fmt::Debug for ControllerShadow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerShadow")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl ControllerShadow {
    pub(crate) fn plan(&self, planned: Planned) {
        self.shadow.record(&self.controller, planned);
    }

    /// The controller's name.
    #[must_use]
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// Marks the start of a sync of `scope` (what the controller's queue key names: a
    /// Node's name, a Service's `namespace/name`). When the guard is dropped, the
    /// controller's changes of that scope planned before the sync started, and not planned
    /// again during it, leave the plan.
    #[must_use = "the sync settles when the guard is dropped"]
    pub fn syncing(&self, scope: impl Into<String>) -> SyncGuard {
        SyncGuard {
            shadow: self.clone(),
            scope: scope.into(),
            since: self.shadow.mark(),
        }
    }

    /// Marks the start of a pass over every object (the lifecycle controller's check of
    /// every Node, the route controller's listing of the routes): the controller's changes
    /// planned before the previous pass started, and not planned again since, leave the
    /// plan. (One pass late: the changes a pass plans may be made by tasks that outlive it.)
    /// Clones of this handle share the passes.
    pub fn pass(&self) {
        let mark = self.shadow.mark();
        let previous = self.last_pass.lock().replace(mark);
        if let Some(since) = previous {
            self.shadow.settle(&self.controller, None, since);
        }
    }
}

/// Settles a sync when dropped; see [`ControllerShadow::syncing`].
#[derive(Debug)]
pub struct SyncGuard {
    shadow: ControllerShadow,
    scope: String,
    since: u64,
}

impl Drop for SyncGuard {
    fn drop(&mut self) {
        self.shadow
            .shadow
            .settle(&self.shadow.controller, Some(&self.scope), self.since);
    }
}

/// Marks a sync of `scope` when `shadow` is set; see [`ControllerShadow::syncing`].
pub(crate) fn syncing(
    shadow: Option<&ControllerShadow>,
    scope: impl Into<String>,
) -> Option<SyncGuard> {
    shadow.map(|s| s.syncing(scope))
}

/// Marks a pass when `shadow` is set; see [`ControllerShadow::pass`].
pub(crate) fn pass(shadow: Option<&ControllerShadow>) {
    if let Some(shadow) = shadow {
        shadow.pass();
    }
}

#[cfg(test)]
mod tests;
