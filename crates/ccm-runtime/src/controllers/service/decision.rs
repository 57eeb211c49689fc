//! The service controller's decisions, as pure functions of Services and Nodes: which
//! Services want a cloud load balancer, which need cleaning up, which changes matter to the
//! load balancer, which Nodes may receive traffic, what a sync does next, and whether a
//! provider's answer can be written.
//!
//! What a sync does next is [`plan`]'s answer (and [`plan_gone`]'s, for a Service gone from
//! the cache). From the Service as the informer's cache has it, what the controller knew of
//! it when the sync began (a [`Known`] copy of its record: the version last worked on, what
//! was last applied to its load balancer and with which Nodes, whether the last sync
//! failed) and the eligible Nodes now, it picks the step: delete the load balancer of a
//! replaced Service first (the same name under another UID), then clean up, point the load
//! balancer at new Nodes only, ensure it in full, or do nothing. It is pure so that every
//! branch is tested here, without an API server or a runtime, and so that a worker copies
//! the record under the lock, decides with the lock released, and does the I/O (cloud
//! calls, patches, events) holding no lock.
//!
//! What the provider's answers mean to the delete branch is decided here too
//! ([`delete_call_needed`], [`deletion`]): a load balancer a user-written hint led to but
//! that is not the Service's ([`CloudError::NotOwned`]) is "nothing of ours", so deletion
//! finishes without it. [`bounded`] keeps what the provider said (which may quote a
//! user-written value) to a size fit for one log line.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, Service, ServicePort, ServiceSpec,
};

use crate::controllers::node_util::{node_name, taints};
use ccm_provider::well_known::{
    FINALIZER_LOAD_BALANCER_CLEANUP, LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS,
    TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER,
};
use ccm_provider::{CloudError, CloudResult};

/// The Nodes a load balancer sends traffic to, as the controller compares them: Node name →
/// `spec.providerID` (empty when unset). A change of either is a change of the set.
pub(crate) type NodeSet = BTreeMap<String, String>;

const TYPE_LOAD_BALANCER: &str = "LoadBalancer";

fn spec(service: &Service) -> Option<&ServiceSpec> {
    service.spec.as_ref()
}

fn service_type(service: &Service) -> &str {
    spec(service)
        .and_then(|s| s.type_.as_deref())
        .unwrap_or_default()
}

/// Whether the Service wants a load balancer from this controller: `type: LoadBalancer` and
/// no `loadBalancerClass` (a class means another controller provides it).
pub(crate) fn wants_load_balancer(service: &Service) -> bool {
    service_type(service) == TYPE_LOAD_BALANCER
        && spec(service).is_none_or(|s| s.load_balancer_class.is_none())
}

/// Whether the Service carries the `service.kubernetes.io/load-balancer-cleanup` finalizer.
pub(crate) fn has_finalizer(service: &Service) -> bool {
    finalizers(service)
        .iter()
        .any(|f| f == FINALIZER_LOAD_BALANCER_CLEANUP)
}

/// The Service's finalizers.
pub(crate) fn finalizers(service: &Service) -> &[String] {
    service.metadata.finalizers.as_deref().unwrap_or_default()
}

/// The finalizers with ours appended, or `None` when it is there already.
pub(crate) fn finalizers_with_ours(service: &Service) -> Option<Vec<String>> {
    if has_finalizer(service) {
        return None;
    }
    let mut list = finalizers(service).to_vec();
    list.push(FINALIZER_LOAD_BALANCER_CLEANUP.to_owned());
    Some(list)
}

/// The finalizers without ours (every copy of it), or `None` when it is not there.
pub(crate) fn finalizers_without_ours(service: &Service) -> Option<Vec<String>> {
    if !has_finalizer(service) {
        return None;
    }
    Some(
        finalizers(service)
            .iter()
            .filter(|f| *f != FINALIZER_LOAD_BALANCER_CLEANUP)
            .cloned()
            .collect(),
    )
}

/// Whether the Service is being deleted.
pub(crate) fn is_deleting(service: &Service) -> bool {
    service.metadata.deletion_timestamp.is_some()
}

/// Whether the load balancer must be cleaned up: our finalizer is there, and the Service is
/// being deleted or is no longer `type: LoadBalancer`.
pub(crate) fn needs_cleanup(service: &Service) -> bool {
    has_finalizer(service) && (is_deleting(service) || service_type(service) != TYPE_LOAD_BALANCER)
}

/// Whether a sync takes the delete branch (as opposed to ensuring the load balancer).
pub(crate) fn takes_delete_branch(service: &Service) -> bool {
    !wants_load_balancer(service) || needs_cleanup(service)
}

/// Whether a Service just added to the cache is worth a sync.
pub(crate) fn wanted_on_add(service: &Service) -> bool {
    wants_load_balancer(service) || needs_cleanup(service)
}

/// Why a Service update matters to its load balancer: the first difference found, in Go's
/// order. Some causes are named in the log (as Go logs them), some are silent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UpdateCause {
    /// Whether it wants a load balancer changed (the type, or the class).
    Type { from: String, to: String },
    /// `spec.loadBalancerSourceRanges`.
    SourceRanges { from: Vec<String>, to: Vec<String> },
    /// A port's name, protocol, port, nodePort, targetPort or appProtocol, or their number.
    Ports,
    /// `spec.sessionAffinity` or its config.
    SessionAffinity,
    /// `spec.loadBalancerIP`.
    LoadBalancerIp { from: String, to: String },
    /// The number of `spec.externalIPs`.
    ExternalIpCount { from: usize, to: usize },
    /// An external IP changed.
    ExternalIpAdded(String),
    /// Any annotation.
    Annotations,
    /// The UID: the Service was deleted and created again.
    Uid { from: String, to: String },
    /// `spec.externalTrafficPolicy`.
    ExternalTrafficPolicy { from: String, to: String },
    /// `spec.healthCheckNodePort`.
    HealthCheckNodePort { from: i32, to: i32 },
    /// The number of IP families.
    IpFamilies { from: usize, to: usize },
}

impl UpdateCause {
    /// What changed, as (what, from -> to), for the log; `None` for causes Go does not name.
    /// (Go recorded these as Normal events until cloud-provider v0.31; since v0.32 it logs
    /// them.)
    pub(crate) fn event(&self) -> Option<(&'static str, String)> {
        Some(match self {
            Self::Type { from, to } => ("Type", format!("{from} -> {to}")),
            Self::SourceRanges { from, to } => (
                "LoadBalancerSourceRanges",
                format!("{} -> {}", go_list(from), go_list(to)),
            ),
            Self::LoadBalancerIp { from, to } => ("LoadbalancerIP", format!("{from} -> {to}")),
            Self::ExternalIpCount { from, to } => ("ExternalIP", format!("Count: {from} -> {to}")),
            Self::ExternalIpAdded(ip) => ("ExternalIP", format!("Added: {ip}")),
            Self::Uid { from, to } => ("UID", format!("{from} -> {to}")),
            Self::ExternalTrafficPolicy { from, to } => {
                ("ExternalTrafficPolicy", format!("{from} -> {to}"))
            }
            Self::HealthCheckNodePort { from, to } => {
                ("HealthCheckNodePort", format!("{from} -> {to}"))
            }
            Self::IpFamilies { from, to } => ("IPFamilies", format!("Count: {from} -> {to}")),
            Self::Ports | Self::SessionAffinity | Self::Annotations => return None,
        })
    }
}

/// A list as Go's `%v` prints a slice: `[a b]`.
pub(crate) fn go_list<T: fmt::Display>(items: &[T]) -> String {
    let inner: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", inner.join(" "))
}

fn list(v: Option<&Vec<String>>) -> &[String] {
    v.map_or(&[], Vec::as_slice)
}

fn text(v: Option<&String>) -> String {
    v.cloned().unwrap_or_default()
}

/// Whether an update from `old` to `new` matters to the load balancer, and why (Go's
/// `needsUpdate`). Absent and empty lists and maps count as equal.
pub(crate) fn needs_update(old: &Service, new: &Service) -> Option<UpdateCause> {
    let (old_wants, new_wants) = (wants_load_balancer(old), wants_load_balancer(new));
    if !old_wants && !new_wants {
        return None;
    }
    if old_wants != new_wants {
        return Some(UpdateCause::Type {
            from: service_type(old).to_owned(),
            to: service_type(new).to_owned(),
        });
    }
    let default = ServiceSpec::default();
    let o = spec(old).unwrap_or(&default);
    let n = spec(new).unwrap_or(&default);

    let (from, to) = (
        list(o.load_balancer_source_ranges.as_ref()),
        list(n.load_balancer_source_ranges.as_ref()),
    );
    if from != to {
        return Some(UpdateCause::SourceRanges {
            from: from.to_vec(),
            to: to.to_vec(),
        });
    }
    if !ports_equal(
        o.ports.as_deref().unwrap_or_default(),
        n.ports.as_deref().unwrap_or_default(),
    ) {
        return Some(UpdateCause::Ports);
    }
    if o.session_affinity != n.session_affinity
        || o.session_affinity_config != n.session_affinity_config
    {
        return Some(UpdateCause::SessionAffinity);
    }
    if o.load_balancer_ip != n.load_balancer_ip {
        return Some(UpdateCause::LoadBalancerIp {
            from: text(o.load_balancer_ip.as_ref()),
            to: text(n.load_balancer_ip.as_ref()),
        });
    }
    let (from, to) = (list(o.external_ips.as_ref()), list(n.external_ips.as_ref()));
    if from.len() != to.len() {
        return Some(UpdateCause::ExternalIpCount {
            from: from.len(),
            to: to.len(),
        });
    }
    if let Some((_, added)) = from.iter().zip(to).find(|(a, b)| a != b) {
        return Some(UpdateCause::ExternalIpAdded(added.clone()));
    }
    let empty = BTreeMap::new();
    if old.metadata.annotations.as_ref().unwrap_or(&empty)
        != new.metadata.annotations.as_ref().unwrap_or(&empty)
    {
        return Some(UpdateCause::Annotations);
    }
    if old.metadata.uid != new.metadata.uid {
        return Some(UpdateCause::Uid {
            from: text(old.metadata.uid.as_ref()),
            to: text(new.metadata.uid.as_ref()),
        });
    }
    if o.external_traffic_policy != n.external_traffic_policy {
        return Some(UpdateCause::ExternalTrafficPolicy {
            from: text(o.external_traffic_policy.as_ref()),
            to: text(n.external_traffic_policy.as_ref()),
        });
    }
    if o.health_check_node_port != n.health_check_node_port {
        return Some(UpdateCause::HealthCheckNodePort {
            from: o.health_check_node_port.unwrap_or_default(),
            to: n.health_check_node_port.unwrap_or_default(),
        });
    }
    let (from, to) = (
        list(o.ip_families.as_ref()).len(),
        list(n.ip_families.as_ref()).len(),
    );
    if from != to {
        return Some(UpdateCause::IpFamilies { from, to });
    }
    None
}

/// Go's `portEqualForLB` over the whole list, in order.
fn ports_equal(x: &[ServicePort], y: &[ServicePort]) -> bool {
    x.len() == y.len()
        && x.iter().zip(y).all(|(a, b)| {
            a.name == b.name
                && a.protocol == b.protocol
                && a.port == b.port
                && a.node_port == b.node_port
                && a.target_port == b.target_port
                && a.app_protocol == b.app_protocol
        })
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Whether the Node may receive load balancer traffic: not being deleted; the
/// `node.kubernetes.io/exclude-from-external-load-balancers` label absent or parsing as
/// false (an empty or unparsable value excludes the Node); no `ToBeDeletedByClusterAutoscaler`
/// taint. Readiness and `spec.providerID` are not considered.
pub(crate) fn is_eligible(node: &Node) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if let Some(value) = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS))
        && parse_bool(value) != Some(false)
    {
        return false;
    }
    !taints(node)
        .iter()
        .any(|t| t.key == TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER)
}

fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

/// Whether a Node update can change some load balancer's Nodes: its eligibility or its
/// provider ID changed. (Readiness, addresses, other labels do not matter.)
pub(crate) fn node_update_matters(old: &Node, new: &Node) -> bool {
    is_eligible(old) != is_eligible(new) || provider_id(old) != provider_id(new)
}

/// The eligible Nodes, sorted by name.
pub(crate) fn eligible_nodes(nodes: impl IntoIterator<Item = Arc<Node>>) -> Vec<Arc<Node>> {
    let mut eligible: Vec<Arc<Node>> = nodes.into_iter().filter(|n| is_eligible(n)).collect();
    eligible.sort_by(|a, b| node_name(a).cmp(node_name(b)));
    eligible
}

/// The set a load balancer is compared by: name → provider ID.
pub(crate) fn node_set(nodes: &[Arc<Node>]) -> NodeSet {
    nodes
        .iter()
        .map(|n| (node_name(n).to_owned(), provider_id(n).to_owned()))
        .collect()
}

/// What the controller last did to a Service's load balancer, as the node-sync pass sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostsState<'a> {
    /// The load balancer was last given these Nodes successfully.
    Applied(&'a NodeSet),
    /// A worker is syncing the Service right now.
    Syncing,
    /// The last sync failed; the Service waits for its backoff.
    Failing,
    /// Nothing applied (no sync yet, or the load balancer was deleted).
    None,
}

/// What the node-sync pass does with a Service that wants a load balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeSyncStep {
    /// Queue it: its load balancer was given other Nodes than the eligible ones now.
    Update,
    /// It is being synced; that sync may have read the Nodes before they changed, so look
    /// again when it ends (queueing it now would run it again at once, past the backoff
    /// of a sync that fails).
    AfterSync,
    /// Nothing: its Nodes are current, or it is failing and its backoff's retry reads the
    /// Nodes afresh, or nothing was applied.
    Nothing,
}

/// What the node-sync pass does with a Service, given what was last applied and the
/// eligible Nodes now.
pub(crate) fn node_sync_step(state: HostsState<'_>, current: &NodeSet) -> NodeSyncStep {
    match state {
        HostsState::Applied(_) if hosts_stale(state, current) => NodeSyncStep::Update,
        HostsState::Syncing => NodeSyncStep::AfterSync,
        _ => NodeSyncStep::Nothing,
    }
}

/// Whether what was applied differs from the eligible Nodes now (only an applied set can).
pub(crate) fn hosts_stale(state: HostsState<'_>, current: &NodeSet) -> bool {
    match state {
        // The same shared set is equal without a look at its N entries.
        HostsState::Applied(applied) => !std::ptr::eq(applied, current) && applied != current,
        HostsState::Syncing | HostsState::Failing | HostsState::None => false,
    }
}

/// What the controller last did to a Service's load balancer.
#[derive(Clone, Debug)]
pub(crate) enum LbState {
    /// Not known to exist, nor known to be gone.
    Unknown,
    /// Ensured (or its Nodes updated) from this version of the Service, with these Nodes.
    Applied {
        service: Arc<Service>,
        hosts: Arc<NodeSet>,
    },
    /// Deleted, finalizer removed.
    Cleaned,
}

/// What the controller knew of a Service when a sync began: a copy of its record, taken
/// under the records lock and read without it (the `Arc`s are shared, not deep-copied).
#[derive(Clone, Debug)]
pub(crate) struct Known {
    /// The last version a sync worked on, or the last version before it was deleted.
    pub(crate) service: Arc<Service>,
    /// What was last done to its load balancer.
    pub(crate) lb: LbState,
    /// The last sync failed.
    pub(crate) failing: bool,
}

impl Known {
    /// Whether this record's Service may have a load balancer to delete: one was applied,
    /// or nothing is known and the Service wanted one or carries our finalizer.
    pub(crate) fn may_have_load_balancer(&self) -> bool {
        match self.lb {
            LbState::Cleaned => false,
            LbState::Applied { .. } => true,
            LbState::Unknown => wants_load_balancer(&self.service) || has_finalizer(&self.service),
        }
    }
}

/// The step a sync of a Service in the cache takes (after the deletion of a replaced
/// Service's load balancer, if [`Plan::delete_replaced`] asks for one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The Service wants no load balancer from us (another type, a `loadBalancerClass`) or
    /// is being deleted: delete the load balancer if the cloud has one, remove our
    /// finalizer, clear the status (Go's delete branch).
    CleanUp,
    /// The load balancer was ensured from a version that differs in nothing it uses, the
    /// last sync did not fail, and the eligible Nodes differ from those it was given:
    /// `update_load_balancer` with them (Go's node-sync update), no full ensure.
    UpdateHosts,
    /// Everything else the Service wants a load balancer for (never ensured, last sync
    /// failed, or something it uses changed): our finalizer, `ensure_load_balancer` with
    /// the eligible Nodes, the status.
    Ensure,
    /// Ensured from a version that differs in nothing it uses, with the same Nodes: nothing.
    Nothing,
}

/// What a sync of a Service in the cache does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// The record is of another Service under the same name (deleted and created again
    /// while the controller looked away) which may have a load balancer: delete that
    /// version's load balancer first and forget the record. `step` is then the step of a
    /// Service the controller has no record of.
    pub(crate) delete_replaced: Option<Arc<Service>>,
    /// Then this.
    pub(crate) step: Step,
}

/// What a sync of `service` (the cache's copy) does, given what the controller knew of it
/// when the sync began (`None`: no record) and the eligible Nodes now.
pub(crate) fn plan(service: &Service, known: Option<&Known>, hosts: &NodeSet) -> Plan {
    let (delete_replaced, known) = match known {
        // Another UID: whatever that record says is about another Service.
        Some(other) if other.service.metadata.uid != service.metadata.uid => (
            other
                .may_have_load_balancer()
                .then(|| other.service.clone()),
            None,
        ),
        known => (None, known),
    };
    Plan {
        delete_replaced,
        step: step(service, known, hosts),
    }
}

/// The step for a Service whose record (if any) is its own.
fn step(service: &Service, known: Option<&Known>, hosts: &NodeSet) -> Step {
    if takes_delete_branch(service) {
        return Step::CleanUp;
    }
    match known {
        // Nothing the load balancer uses changed since it was ensured: at most its Nodes.
        Some(Known {
            lb:
                LbState::Applied {
                    service: applied,
                    hosts: given,
                },
            failing: false,
            ..
        }) if needs_update(applied, service).is_none() => {
            if hosts_stale(HostsState::Applied(given), hosts) {
                Step::UpdateHosts
            } else {
                Step::Nothing
            }
        }
        _ => Step::Ensure,
    }
}

/// What a sync of a Service gone from the cache does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum GoneStep {
    /// No record: the controller never did anything for it.
    Nothing,
    /// Its load balancer cannot exist (deleted already, or never wanted): forget the
    /// record.
    Forget,
    /// Its last version may have a load balancer (the Service went without our cleanup:
    /// someone removed our finalizer, or it went before this controller synced it): delete
    /// that, with events, then forget the record (Go's `processLoadBalancerDelete`).
    DeleteLoadBalancer { last: Arc<Service> },
}

/// What a sync of a Service gone from the cache does, given what the controller knew of
/// it when the sync began (`None`: no record).
pub(crate) fn plan_gone(known: Option<&Known>) -> GoneStep {
    match known {
        None => GoneStep::Nothing,
        Some(known) if !known.may_have_load_balancer() => GoneStep::Forget,
        Some(known) => GoneStep::DeleteLoadBalancer {
            last: known.service.clone(),
        },
    }
}

/// Whether the delete branch calls `ensure_load_balancer_deleted`, given what
/// `get_load_balancer` answered: yes when the load balancer exists (Go's rule), no when it
/// does not, and yes when a hint led to one that is not the Service's
/// ([`CloudError::NotOwned`]) — the provider then deletes only what is the Service's own,
/// found without the hint, and the deletion is not held up by the foreign one. Any other
/// error is the sync's error.
pub(crate) fn delete_call_needed(
    answer: &CloudResult<Option<LoadBalancerStatus>>,
) -> Result<bool, &CloudError> {
    match answer {
        Ok(status) => Ok(status.is_some()),
        Err(err) if err.is_not_owned() => Ok(true),
        Err(err) => Err(err),
    }
}

/// What an `ensure_load_balancer_deleted` answer means.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deletion<'a> {
    /// Deleted, or already gone, or another controller's (`ImplementedElsewhere` is
    /// ignored, as in Go): go on.
    Done,
    /// The load balancer the Service's hint leads to is not the Service's; the provider left
    /// it alone (and deleted what was the Service's own, if anything): go on, with a
    /// `LoadBalancerNotOwned` Warning. The finalizer is not held for a load balancer that is
    /// not ours to delete.
    LeftAlone(&'a CloudError),
    /// Failed: keep the finalizer, retry.
    Failed(&'a CloudError),
}

/// What an `ensure_load_balancer_deleted` answer means (see [`Deletion`]).
pub(crate) fn deletion(result: &CloudResult<()>) -> Deletion<'_> {
    match result {
        Ok(()) => Deletion::Done,
        Err(err) if err.is_implemented_elsewhere() => Deletion::Done,
        Err(err) if err.is_not_owned() => Deletion::LeftAlone(err),
        Err(err) => Deletion::Failed(err),
    }
}

/// The most of a sync's error message that goes into a log line (and an event, which the
/// recorder cuts to 1 KiB anyway).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// `text` cut to [`MAX_MESSAGE_BYTES`] with [`echo::cut`](ccm_provider::echo::cut): a
/// provider's error may quote a user-written annotation of any size, and it is logged on
/// every retry.
pub(crate) fn cut_message(text: String) -> String {
    ccm_provider::echo::cut(text, MAX_MESSAGE_BYTES)
}

/// Checks a provider's ingress list before it is written to `status.loadBalancer.ingress`,
/// with the API server's rules: each entry has an IP or a hostname; an IP is an IP; a
/// hostname is a DNS-1123 subdomain and not an IP; `ipMode` is `VIP` or `Proxy` and needs
/// an IP; ports are 1-65535 with protocol TCP, UDP or SCTP.
pub(crate) fn validate_ingress(ingress: &[LoadBalancerIngress]) -> Result<(), String> {
    for (i, entry) in ingress.iter().enumerate() {
        let ip = entry.ip.as_deref().filter(|s| !s.is_empty());
        let hostname = entry.hostname.as_deref().filter(|s| !s.is_empty());
        if ip.is_none() && hostname.is_none() {
            return Err(format!("ingress[{i}] has neither an IP nor a hostname"));
        }
        if let Some(ip) = ip
            && ip.parse::<IpAddr>().is_err()
        {
            return Err(format!("ingress[{i}].ip {ip:?} is not a valid IP address"));
        }
        if let Some(host) = hostname {
            if host.parse::<IpAddr>().is_ok() {
                return Err(format!(
                    "ingress[{i}].hostname {host:?} must be a DNS name, not an IP address"
                ));
            }
            if !is_dns1123_subdomain(host) {
                return Err(format!(
                    "ingress[{i}].hostname {host:?} is not a valid DNS-1123 subdomain"
                ));
            }
        }
        if let Some(mode) = entry.ip_mode.as_deref() {
            if mode != "VIP" && mode != "Proxy" {
                return Err(format!(
                    "ingress[{i}].ipMode {mode:?} is not one of \"VIP\", \"Proxy\""
                ));
            }
            if ip.is_none() {
                return Err(format!("ingress[{i}].ipMode needs ingress[{i}].ip"));
            }
        }
        for port in entry.ports.iter().flatten() {
            if !(1..=65535).contains(&port.port) {
                return Err(format!(
                    "ingress[{i}] port {} is not between 1 and 65535",
                    port.port
                ));
            }
            if !matches!(port.protocol.as_str(), "TCP" | "UDP" | "SCTP") {
                return Err(format!(
                    "ingress[{i}] port {} has protocol {:?}, not TCP, UDP or SCTP",
                    port.port, port.protocol
                ));
            }
        }
    }
    Ok(())
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The Service's current ingress list.
pub(crate) fn ingress(service: &Service) -> &[LoadBalancerIngress] {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        LoadBalancerStatus, NodeSpec, PortStatus, ServiceStatus, SessionAffinityConfig, Taint,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;

    fn lb_service() -> Service {
        let mut s = Service::default();
        s.metadata.name = Some("web".into());
        s.metadata.namespace = Some("default".into());
        s.metadata.uid = Some("uid-1".into());
        s.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                node_port: Some(30080),
                target_port: Some(IntOrString::Int(8080)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        });
        s
    }

    fn with_spec(mut s: Service, f: impl FnOnce(&mut ServiceSpec)) -> Service {
        f(s.spec.as_mut().unwrap());
        s
    }

    fn deleting(mut s: Service) -> Service {
        s.metadata.deletion_timestamp = Some(Time(Default::default()));
        s
    }

    fn with_finalizer(mut s: Service) -> Service {
        s.metadata.finalizers = Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.into()]);
        s
    }

    #[test]
    fn wants_only_load_balancers_without_class() {
        assert!(wants_load_balancer(&lb_service()));
        assert!(!wants_load_balancer(&with_spec(lb_service(), |s| {
            s.load_balancer_class = Some("example.com/other".into());
        })));
        assert!(!wants_load_balancer(&with_spec(lb_service(), |s| {
            s.type_ = Some("NodePort".into());
        })));
        assert!(!wants_load_balancer(&with_spec(lb_service(), |s| {
            s.type_ = None;
        })));
        assert!(!wants_load_balancer(&Service::default()), "no spec at all");
        assert!(wanted_on_add(&lb_service()));
        assert!(!wanted_on_add(&Service::default()));
    }

    #[test]
    fn cleanup_needs_our_finalizer_and_deletion_or_another_type() {
        assert!(!needs_cleanup(&lb_service()));
        assert!(!needs_cleanup(&deleting(lb_service())), "no finalizer");
        assert!(!needs_cleanup(&with_finalizer(lb_service())));
        assert!(needs_cleanup(&deleting(with_finalizer(lb_service()))));
        let cluster_ip = with_spec(with_finalizer(lb_service()), |s| {
            s.type_ = Some("ClusterIP".into());
        });
        assert!(needs_cleanup(&cluster_ip));
        assert!(wanted_on_add(&cluster_ip));
        // A class does not make a LoadBalancer Service need cleanup (Go's rule), but it
        // takes the delete branch when synced.
        let classed = with_spec(with_finalizer(lb_service()), |s| {
            s.load_balancer_class = Some("x".into());
        });
        assert!(!needs_cleanup(&classed));
        assert!(takes_delete_branch(&classed));
        assert!(!takes_delete_branch(&with_finalizer(lb_service())));
        assert!(takes_delete_branch(&deleting(with_finalizer(lb_service()))));
    }

    #[test]
    fn finalizer_lists_keep_other_finalizers() {
        let mut s = lb_service();
        assert_eq!(
            finalizers_with_ours(&s),
            Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()])
        );
        assert_eq!(finalizers_without_ours(&s), None);
        s.metadata.finalizers = Some(vec![
            "example.com/a".into(),
            FINALIZER_LOAD_BALANCER_CLEANUP.into(),
            "example.com/b".into(),
        ]);
        assert_eq!(finalizers_with_ours(&s), None);
        assert_eq!(
            finalizers_without_ours(&s),
            Some(vec!["example.com/a".to_owned(), "example.com/b".to_owned()])
        );
        s.metadata.finalizers = Some(vec!["example.com/a".into()]);
        assert_eq!(
            finalizers_with_ours(&s),
            Some(vec![
                "example.com/a".to_owned(),
                FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()
            ])
        );
    }

    #[test]
    fn needs_update_ignores_services_that_never_want_one() {
        let a = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        let b = with_spec(a.clone(), |s| s.ports = None);
        assert_eq!(needs_update(&a, &b), None);
    }

    #[test]
    fn needs_update_reports_each_field_in_go_order() {
        let base = lb_service();
        let same = base.clone();
        assert_eq!(needs_update(&base, &same), None);

        let cases: Vec<(Service, UpdateCause)> = vec![
            (
                with_spec(base.clone(), |s| s.type_ = Some("ClusterIP".into())),
                UpdateCause::Type {
                    from: "LoadBalancer".into(),
                    to: "ClusterIP".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| s.load_balancer_class = Some("c".into())),
                UpdateCause::Type {
                    from: "LoadBalancer".into(),
                    to: "LoadBalancer".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into()]);
                }),
                UpdateCause::SourceRanges {
                    from: vec![],
                    to: vec!["10.0.0.0/8".into()],
                },
            ),
            (
                with_spec(base.clone(), |s| s.ports.as_mut().unwrap()[0].port = 81),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].node_port = Some(30081);
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].target_port =
                        Some(IntOrString::String("http".into()));
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].app_protocol = Some("h2c".into());
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].name = Some("web".into());
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| s.ports.as_mut().unwrap().clear()),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.session_affinity = Some("ClientIP".into())
                }),
                UpdateCause::SessionAffinity,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.session_affinity_config = Some(SessionAffinityConfig::default());
                }),
                UpdateCause::SessionAffinity,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.load_balancer_ip = Some("1.2.3.4".into())
                }),
                UpdateCause::LoadBalancerIp {
                    from: String::new(),
                    to: "1.2.3.4".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.external_ips = Some(vec!["5.6.7.8".into()])
                }),
                UpdateCause::ExternalIpCount { from: 0, to: 1 },
            ),
            (
                {
                    let mut s = base.clone();
                    s.metadata.annotations =
                        Some(BTreeMap::from([("example.com/x".into(), "1".into())]));
                    s
                },
                UpdateCause::Annotations,
            ),
            (
                {
                    let mut s = base.clone();
                    s.metadata.uid = Some("uid-2".into());
                    s
                },
                UpdateCause::Uid {
                    from: "uid-1".into(),
                    to: "uid-2".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.external_traffic_policy = Some("Local".into());
                }),
                UpdateCause::ExternalTrafficPolicy {
                    from: String::new(),
                    to: "Local".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| s.health_check_node_port = Some(31000)),
                UpdateCause::HealthCheckNodePort { from: 0, to: 31000 },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
                }),
                UpdateCause::IpFamilies { from: 0, to: 2 },
            ),
        ];
        for (new, want) in cases {
            assert_eq!(needs_update(&base, &new), Some(want.clone()), "{want:?}");
        }
        // The first difference wins: a port change and an annotation change report ports.
        let mut both = with_spec(base.clone(), |s| s.ports.as_mut().unwrap()[0].port = 81);
        both.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert_eq!(needs_update(&base, &both), Some(UpdateCause::Ports));
        // An external IP swapped in place.
        let one = with_spec(base.clone(), |s| {
            s.external_ips = Some(vec!["1.1.1.1".into()])
        });
        let other = with_spec(base.clone(), |s| {
            s.external_ips = Some(vec!["2.2.2.2".into()])
        });
        assert_eq!(
            needs_update(&one, &other),
            Some(UpdateCause::ExternalIpAdded("2.2.2.2".into()))
        );
    }

    #[test]
    fn needs_update_ignores_what_the_load_balancer_does_not_use() {
        let base = lb_service();
        let mut new = with_finalizer(base.clone());
        new.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        new.metadata.resource_version = Some("42".into());
        new.status = Some(ServiceStatus::default());
        new.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("app".into(), "x".into())]));
        // Absent and empty lists and maps are the same.
        new.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec![]);
        new.spec.as_mut().unwrap().external_ips = Some(vec![]);
        new.metadata.annotations = Some(BTreeMap::new());
        // The IP family list's order and content do not matter, only its length.
        let a = with_spec(base.clone(), |s| s.ip_families = Some(vec!["IPv4".into()]));
        let b = with_spec(base.clone(), |s| s.ip_families = Some(vec!["IPv6".into()]));
        assert_eq!(needs_update(&base, &new), None);
        assert_eq!(needs_update(&a, &b), None);
        // No spec at all on either side does not panic.
        let mut bare = Service::default();
        bare.metadata.uid = Some("uid-1".into());
        assert!(needs_update(&bare, &base).is_some());
    }

    #[test]
    fn update_causes_name_what_go_logs() {
        let e = |c: UpdateCause| c.event();
        assert_eq!(
            e(UpdateCause::Type {
                from: "LoadBalancer".into(),
                to: "ClusterIP".into()
            }),
            Some(("Type", "LoadBalancer -> ClusterIP".to_owned()))
        );
        assert_eq!(
            e(UpdateCause::SourceRanges {
                from: vec![],
                to: vec!["1.0.0.0/8".into(), "2.0.0.0/8".into()]
            }),
            Some((
                "LoadBalancerSourceRanges",
                "[] -> [1.0.0.0/8 2.0.0.0/8]".to_owned()
            ))
        );
        assert_eq!(
            e(UpdateCause::ExternalIpCount { from: 1, to: 2 }),
            Some(("ExternalIP", "Count: 1 -> 2".to_owned()))
        );
        assert_eq!(e(UpdateCause::Ports), None);
        assert_eq!(e(UpdateCause::Annotations), None);
        assert_eq!(e(UpdateCause::SessionAffinity), None);
    }

    #[test]
    fn parse_bool_is_gos() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "yes", "no", "tRUE", " true", "2", "on"] {
            assert_eq!(parse_bool(bad), None, "{bad:?}");
        }
    }

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.spec = Some(NodeSpec {
            provider_id: Some(format!("fake://{name}")),
            ..NodeSpec::default()
        });
        n
    }

    fn labelled(mut n: Node, value: &str) -> Node {
        n.metadata.labels = Some(BTreeMap::from([(
            LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS.to_owned(),
            value.to_owned(),
        )]));
        n
    }

    fn tainted(mut n: Node, key: &str) -> Node {
        n.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]);
        n
    }

    #[test]
    fn eligibility_follows_the_three_rules() {
        assert!(is_eligible(&node("a")));
        assert!(is_eligible(&Node::default()), "nothing set: eligible");
        let mut gone = node("a");
        gone.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert!(!is_eligible(&gone));
        for value in ["false", "0", "f", "F", "FALSE", "False"] {
            assert!(is_eligible(&labelled(node("a"), value)), "{value:?}");
        }
        for value in ["true", "1", "", "yes", "nope", "tRuE"] {
            assert!(!is_eligible(&labelled(node("a"), value)), "{value:?}");
        }
        assert!(!is_eligible(&tainted(
            node("a"),
            TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER
        )));
        assert!(is_eligible(&tainted(node("a"), "example.com/other")));
        assert!(
            is_eligible(&tainted(
                node("a"),
                ccm_provider::well_known::TAINT_UNINITIALIZED
            )),
            "an uninitialised Node still counts"
        );
    }

    #[test]
    fn readiness_and_provider_id_are_not_filters() {
        let mut not_ready = node("a");
        not_ready.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(is_eligible(&not_ready));
        assert!(!node_update_matters(&node("a"), &not_ready));
        let mut no_id = node("a");
        no_id.spec.as_mut().unwrap().provider_id = None;
        assert!(is_eligible(&no_id));
        assert!(
            node_update_matters(&no_id, &node("a")),
            "a provider ID change matters"
        );
        assert!(node_update_matters(
            &node("a"),
            &labelled(node("a"), "true")
        ));
        assert!(!node_update_matters(
            &labelled(node("a"), "true"),
            &labelled(node("a"), "yes")
        ));
        assert!(node_update_matters(
            &node("a"),
            &tainted(node("a"), TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER)
        ));
    }

    #[test]
    fn eligible_nodes_are_sorted_and_mapped_to_provider_ids() {
        let nodes = vec![
            Arc::new(node("c")),
            Arc::new(labelled(node("b"), "true")),
            Arc::new(node("a")),
        ];
        let eligible = eligible_nodes(nodes);
        let names: Vec<&str> = eligible.iter().map(|n| node_name(n)).collect();
        assert_eq!(names, ["a", "c"]);
        let set = node_set(&eligible);
        assert_eq!(
            set,
            NodeSet::from([
                ("a".into(), "fake://a".into()),
                ("c".into(), "fake://c".into())
            ])
        );
    }

    #[test]
    fn node_set_diff_decides_who_is_resynced() {
        let ab = NodeSet::from([("a".into(), "p://a".into()), ("b".into(), "p://b".into())]);
        let mut ab_moved = ab.clone();
        ab_moved.insert("b".into(), "p://b2".into());
        let a = NodeSet::from([("a".into(), "p://a".into())]);
        assert!(!hosts_stale(HostsState::Applied(&ab), &ab));
        assert!(hosts_stale(HostsState::Applied(&ab), &a), "a Node left");
        assert!(hosts_stale(HostsState::Applied(&a), &ab), "a Node came");
        assert!(
            hosts_stale(HostsState::Applied(&ab), &ab_moved),
            "a provider ID changed"
        );
        assert!(!hosts_stale(HostsState::Syncing, &ab));
        assert!(!hosts_stale(HostsState::Failing, &ab));
        assert!(!hosts_stale(HostsState::None, &ab));
        assert_eq!(
            node_sync_step(HostsState::Applied(&a), &ab),
            NodeSyncStep::Update
        );
        assert_eq!(
            node_sync_step(HostsState::Applied(&ab), &ab),
            NodeSyncStep::Nothing
        );
        assert_eq!(
            node_sync_step(HostsState::Syncing, &ab),
            NodeSyncStep::AfterSync
        );
        assert_eq!(
            node_sync_step(HostsState::Failing, &ab),
            NodeSyncStep::Nothing
        );
        assert_eq!(node_sync_step(HostsState::None, &ab), NodeSyncStep::Nothing);
        assert!(hosts_stale(HostsState::Applied(&NodeSet::new()), &a));
        assert!(hosts_stale(HostsState::Applied(&a), &NodeSet::new()));
        let shared = std::sync::Arc::new(ab.clone());
        assert!(
            !hosts_stale(HostsState::Applied(&shared), &shared),
            "one shared set"
        );
    }

    fn ing(ip: Option<&str>, host: Option<&str>) -> LoadBalancerIngress {
        LoadBalancerIngress {
            ip: ip.map(Into::into),
            hostname: host.map(Into::into),
            ..LoadBalancerIngress::default()
        }
    }

    #[test]
    fn ingress_validation_accepts_ips_and_hostnames() {
        assert_eq!(validate_ingress(&[]), Ok(()));
        assert_eq!(
            validate_ingress(&[
                ing(Some("203.0.113.7"), None),
                ing(Some("2001:db8::1"), None),
                ing(None, Some("lb-1.example.com")),
                ing(Some("10.0.0.1"), Some("both.example.com")),
            ]),
            Ok(())
        );
        let mut proxied = ing(Some("10.0.0.1"), None);
        proxied.ip_mode = Some("Proxy".into());
        proxied.ports = Some(vec![PortStatus {
            port: 443,
            protocol: "TCP".into(),
            error: None,
        }]);
        assert_eq!(validate_ingress(&[proxied]), Ok(()));
    }

    #[test]
    fn ingress_validation_refuses_what_the_api_server_would() {
        let bad = |e: LoadBalancerIngress| validate_ingress(&[ing(Some("1.2.3.4"), None), e]);
        for entry in [
            ing(None, None),
            ing(Some(""), Some("")),
            ing(Some("not-an-ip"), None),
            ing(Some("300.1.1.1"), None),
            ing(Some("010.1.1.1"), None),
            ing(Some(" 1.2.3.4"), None),
            ing(None, Some("1.2.3.4")),
            ing(None, Some("Upper.example.com")),
            ing(None, Some("-bad.example.com")),
            ing(None, Some("a..b")),
            ing(None, Some(&"x".repeat(64))),
            LoadBalancerIngress {
                ip_mode: Some("Proxy".into()),
                hostname: Some("h.example.com".into()),
                ..LoadBalancerIngress::default()
            },
            LoadBalancerIngress {
                ip: Some("1.2.3.4".into()),
                ip_mode: Some("Magic".into()),
                ..LoadBalancerIngress::default()
            },
            LoadBalancerIngress {
                ip: Some("1.2.3.4".into()),
                ports: Some(vec![PortStatus {
                    port: 0,
                    protocol: "TCP".into(),
                    error: None,
                }]),
                ..LoadBalancerIngress::default()
            },
            LoadBalancerIngress {
                ip: Some("1.2.3.4".into()),
                ports: Some(vec![PortStatus {
                    port: 80,
                    protocol: "HTTP".into(),
                    error: None,
                }]),
                ..LoadBalancerIngress::default()
            },
        ] {
            let err = bad(entry.clone()).expect_err(&format!("{entry:?}"));
            assert!(err.starts_with("ingress[1]"), "{err}");
        }
    }

    #[test]
    fn ingress_reads_the_status() {
        let mut s = lb_service();
        assert!(ingress(&s).is_empty());
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![ing(Some("1.2.3.4"), None)]),
            }),
            ..ServiceStatus::default()
        });
        assert_eq!(ingress(&s).len(), 1);
    }

    // What a sync does next. Services are built as the cache shows them; a record is what
    // the controller kept of its last sync.

    fn hosts(names: &[&str]) -> NodeSet {
        names
            .iter()
            .map(|n| ((*n).to_owned(), format!("fake://{n}")))
            .collect()
    }

    /// The record of a load balancer ensured from `service` with `given`.
    fn ensured(service: &Service, given: &NodeSet) -> Known {
        Known {
            service: Arc::new(service.clone()),
            lb: LbState::Applied {
                service: Arc::new(service.clone()),
                hosts: Arc::new(given.clone()),
            },
            failing: false,
        }
    }

    fn known(service: &Service, lb: LbState, failing: bool) -> Known {
        Known {
            service: Arc::new(service.clone()),
            lb,
            failing,
        }
    }

    fn just(step: Step) -> Plan {
        Plan {
            delete_replaced: None,
            step,
        }
    }

    fn with_uid(mut s: Service, uid: &str) -> Service {
        s.metadata.uid = Some(uid.into());
        s
    }

    #[test]
    fn a_new_load_balancer_service_is_ensured() {
        let web = lb_service();
        assert_eq!(plan(&web, None, &hosts(&["a", "b"])), just(Step::Ensure));
        // No eligible Node changes nothing: it is ensured (with a Warning).
        assert_eq!(plan(&web, None, &NodeSet::new()), just(Step::Ensure));
    }

    #[test]
    fn a_record_with_nothing_applied_is_ensured_in_full() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        // The first sync failed before the cloud answered: the retry ensures.
        let failed_first = known(&web, LbState::Unknown, true);
        assert_eq!(plan(&web, Some(&failed_first), &now), just(Step::Ensure));
        // The record of a deleted Service seen again (same UID): nothing applied.
        let unknown = known(&web, LbState::Unknown, false);
        assert_eq!(plan(&web, Some(&unknown), &now), just(Step::Ensure));
        // Cleaned up (the type changed away), then the type changed back.
        let cluster_ip = with_spec(web.clone(), |s| s.type_ = Some("ClusterIP".into()));
        let cleaned = known(&cluster_ip, LbState::Cleaned, false);
        assert_eq!(plan(&web, Some(&cleaned), &now), just(Step::Ensure));
    }

    #[test]
    fn an_ensured_service_with_the_same_nodes_needs_nothing() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a", "b"]);
        assert_eq!(
            plan(&web, Some(&ensured(&web, &now)), &now),
            just(Step::Nothing)
        );
        // Changes the load balancer does not use (labels, status, resource version) are
        // not a reason either.
        let mut relabelled = web.clone();
        relabelled.metadata.labels = Some(BTreeMap::from([("team".into(), "x".into())]));
        relabelled.metadata.resource_version = Some("7".into());
        relabelled.status = Some(ServiceStatus::default());
        assert_eq!(
            plan(&relabelled, Some(&ensured(&web, &now)), &now),
            just(Step::Nothing)
        );
        // One shared set is the same set.
        let shared = Arc::new(now.clone());
        let record = Known {
            lb: LbState::Applied {
                service: Arc::new(web.clone()),
                hosts: shared.clone(),
            },
            ..ensured(&web, &now)
        };
        assert_eq!(plan(&web, Some(&record), &shared), just(Step::Nothing));
    }

    #[test]
    fn only_a_node_change_updates_the_hosts_without_an_ensure() {
        let web = with_finalizer(lb_service());
        let record = ensured(&web, &hosts(&["a", "b"]));
        for (now, why) in [
            (hosts(&["a", "b", "c"]), "a Node came"),
            (hosts(&["a"]), "a Node left (or was excluded)"),
            (NodeSet::new(), "no Node is left"),
            (
                {
                    let mut moved = hosts(&["a", "b"]);
                    moved.insert("b".into(), "fake://b2".into());
                    moved
                },
                "a provider ID changed",
            ),
            (
                NodeSet::from([("a".into(), "fake://a".into()), ("b".into(), String::new())]),
                "a provider ID is not set yet",
            ),
        ] {
            assert_eq!(
                plan(&web, Some(&record), &now),
                just(Step::UpdateHosts),
                "{why}"
            );
        }
    }

    #[test]
    fn a_port_or_annotation_change_ensures_in_full() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let record = ensured(&web, &now);
        let port = with_spec(web.clone(), |s| s.ports.as_mut().unwrap()[0].port = 8080);
        assert_eq!(plan(&port, Some(&record), &now), just(Step::Ensure));
        let mut annotated = web.clone();
        annotated.metadata.annotations =
            Some(BTreeMap::from([("example.com/x".into(), "1".into())]));
        assert_eq!(plan(&annotated, Some(&record), &now), just(Step::Ensure));
        let ranges = with_spec(web.clone(), |s| {
            s.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into()]);
        });
        assert_eq!(plan(&ranges, Some(&record), &now), just(Step::Ensure));
        // A change of the Service and of the Nodes: the ensure takes both.
        assert_eq!(
            plan(&port, Some(&record), &hosts(&["a", "b"])),
            just(Step::Ensure)
        );
    }

    #[test]
    fn a_failing_service_is_ensured_in_full_even_when_only_nodes_changed() {
        let web = with_finalizer(lb_service());
        let given = hosts(&["a"]);
        let failing = Known {
            failing: true,
            ..ensured(&web, &given)
        };
        // The update failed (the load balancer still exists): the retry ensures.
        assert_eq!(
            plan(&web, Some(&failing), &hosts(&["a", "b"])),
            just(Step::Ensure)
        );
        assert_eq!(plan(&web, Some(&failing), &given), just(Step::Ensure));
    }

    #[test]
    fn a_type_change_away_cleans_up() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let record = ensured(&web, &now);
        for ty in ["ClusterIP", "NodePort", "ExternalName"] {
            let away = with_spec(web.clone(), |s| s.type_ = Some(ty.into()));
            assert_eq!(
                plan(&away, Some(&record), &now),
                just(Step::CleanUp),
                "{ty}"
            );
        }
        // Without our finalizer (never ensured, or removed by someone) too.
        let away = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        assert_eq!(plan(&away, None, &now), just(Step::CleanUp));
    }

    #[test]
    fn a_service_being_deleted_is_cleaned_up_although_nothing_it_uses_changed() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let going = deleting(web.clone());
        assert_eq!(needs_update(&web, &going), None);
        assert_eq!(
            plan(&going, Some(&ensured(&web, &now)), &now),
            just(Step::CleanUp)
        );
        // Deleted while no controller ran: there is no record, the finalizer held it.
        assert_eq!(plan(&going, None, &now), just(Step::CleanUp));
        // Even with the Nodes changed, or the last sync failed.
        let failing = Known {
            failing: true,
            ..ensured(&web, &now)
        };
        assert_eq!(
            plan(&going, Some(&failing), &hosts(&["b"])),
            just(Step::CleanUp)
        );
    }

    #[test]
    fn a_load_balancer_class_is_not_ours_so_a_sync_cleans_up() {
        let classed = with_spec(lb_service(), |s| {
            s.load_balancer_class = Some("example.com/other-lb".into());
        });
        // Added with a class: not even queued.
        assert!(!wanted_on_add(&classed));
        // Synced anyway (the class was set on a Service we had ensured): ours goes.
        let now = hosts(&["a"]);
        let ours = with_finalizer(lb_service());
        let classed = with_finalizer(classed);
        assert_eq!(
            plan(&classed, Some(&ensured(&ours, &now)), &now),
            just(Step::CleanUp)
        );
        assert_eq!(plan(&classed, None, &now), just(Step::CleanUp));
    }

    #[test]
    fn implemented_elsewhere_is_followed_like_an_ensured_load_balancer() {
        // An ensure that the provider answers with ImplementedElsewhere is recorded as
        // applied, with the Nodes of that sync: no retry, only Node changes are passed on.
        let web = with_finalizer(lb_service());
        let given = hosts(&["a"]);
        let record = ensured(&web, &given);
        assert_eq!(plan(&web, Some(&record), &given), just(Step::Nothing));
        assert_eq!(
            plan(&web, Some(&record), &hosts(&["a", "b"])),
            just(Step::UpdateHosts)
        );
    }

    #[test]
    fn a_replaced_uid_deletes_the_old_load_balancer_first() {
        let old = with_finalizer(lb_service());
        let new = with_uid(lb_service(), "uid-2");
        let now = hosts(&["a"]);
        // The old one was ensured: its load balancer goes, then the new one is ensured in
        // full, although its spec and the Nodes are the same.
        let record = ensured(&old, &now);
        assert_eq!(
            plan(&new, Some(&record), &now),
            Plan {
                delete_replaced: Some(Arc::new(old.clone())),
                step: Step::Ensure,
            }
        );
        // Nothing applied, but the old one wanted a load balancer, or carried our
        // finalizer: it may have one.
        for old in [
            lb_service(),
            with_spec(with_finalizer(lb_service()), |s| {
                s.type_ = Some("ClusterIP".into());
            }),
        ] {
            let record = known(&old, LbState::Unknown, true);
            assert_eq!(
                plan(&new, Some(&record), &now).delete_replaced,
                Some(Arc::new(old.clone()))
            );
        }
    }

    #[test]
    fn after_a_replaced_uid_the_new_service_is_planned_as_never_seen() {
        let old = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let record = ensured(&old, &now);
        // The new one wants no load balancer, or is being deleted: cleaned up.
        for new in [
            with_spec(with_uid(lb_service(), "uid-2"), |s| {
                s.type_ = Some("ClusterIP".into());
            }),
            deleting(with_finalizer(with_uid(lb_service(), "uid-2"))),
        ] {
            assert_eq!(
                plan(&new, Some(&record), &now),
                Plan {
                    delete_replaced: Some(Arc::new(old.clone())),
                    step: Step::CleanUp,
                }
            );
        }
        // The old record's failure is not the new one's: ensured all the same.
        let failing = Known {
            failing: true,
            ..record
        };
        let new = with_uid(lb_service(), "uid-2");
        assert_eq!(plan(&new, Some(&failing), &now).step, Step::Ensure);
    }

    #[test]
    fn a_replaced_uid_without_a_load_balancer_is_just_forgotten() {
        let new = with_uid(lb_service(), "uid-2");
        let now = hosts(&["a"]);
        let gone = with_finalizer(lb_service());
        let never = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        for record in [
            // Its load balancer was deleted already.
            known(&gone, LbState::Cleaned, false),
            // It never wanted one, and has no finalizer.
            known(&never, LbState::Unknown, false),
        ] {
            assert_eq!(plan(&new, Some(&record), &now), just(Step::Ensure));
        }
        // It had a class: its load balancer, if any, is another controller's to delete.
        let classed_old = with_spec(lb_service(), |s| {
            s.load_balancer_class = Some("x".into());
        });
        let record = known(&classed_old, LbState::Unknown, false);
        assert_eq!(plan(&new, Some(&record), &now), just(Step::Ensure));
    }

    // The provider's answers on the delete branch.

    fn lb_status(ip: &str) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: Some(vec![ing(Some(ip), None)]),
        }
    }

    #[test]
    fn the_delete_call_is_made_for_an_existing_or_a_foreign_load_balancer() {
        assert!(matches!(
            delete_call_needed(&Ok(Some(lb_status("1.2.3.4")))),
            Ok(true)
        ));
        assert!(matches!(delete_call_needed(&Ok(None)), Ok(false)));
        // A hint led to another Service's load balancer: the provider is asked to delete
        // the Service's own (it leaves the foreign one alone), and deletion is not stuck.
        let foreign = Err(CloudError::not_owned("lb-1", "another Service's"));
        assert!(matches!(delete_call_needed(&foreign), Ok(true)));
        let failed = Err(CloudError::msg("the cloud is down"));
        assert!(
            matches!(delete_call_needed(&failed), Err(e) if e.to_string() == "the cloud is down")
        );
    }

    #[test]
    fn a_foreign_load_balancer_is_left_alone_and_does_not_hold_the_finalizer() {
        assert!(matches!(deletion(&Ok(())), Deletion::Done));
        assert!(matches!(
            deletion(&Err(CloudError::ImplementedElsewhere)),
            Deletion::Done
        ));
        let foreign = Err(CloudError::not_owned("lb-1", "tagged for cluster other"));
        assert!(matches!(deletion(&foreign), Deletion::LeftAlone(e) if e.is_not_owned()));
        let failed = Err(CloudError::msg("boom"));
        assert!(matches!(deletion(&failed), Deletion::Failed(e) if e.to_string() == "boom"));
        // Retried, after its delay.
        let busy = Err(CloudError::retry_after(
            "busy",
            std::time::Duration::from_secs(1),
        ));
        assert!(matches!(deletion(&busy), Deletion::Failed(e) if e.retry_after_delay().is_some()));
    }

    #[test]
    fn messages_are_bounded_for_log_lines() {
        assert_eq!(cut_message("short".into()), "short");
        let exact = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(cut_message(exact.clone()), exact);
        let long = cut_message(format!("annotation x: {}", "y".repeat(100_000)));
        assert!(long.starts_with("annotation x: yyy"));
        assert!(long.ends_with("…(99012 more bytes)"), "{}", &long[1000..]);
        assert!(long.len() <= MAX_MESSAGE_BYTES);
        // Cut on a character boundary.
        let wide = cut_message("é".repeat(1000));
        assert!(wide.starts_with(&"é".repeat(502)));
        assert!(wide.ends_with("…(996 more bytes)"), "{wide}");
    }

    #[test]
    fn a_gone_service_without_a_record_needs_nothing() {
        assert_eq!(plan_gone(None), GoneStep::Nothing);
    }

    #[test]
    fn a_gone_service_whose_load_balancer_cannot_exist_is_forgotten() {
        // Cleaned up before it went (deleted with our finalizer).
        let web = deleting(with_finalizer(lb_service()));
        assert_eq!(
            plan_gone(Some(&known(&web, LbState::Cleaned, false))),
            GoneStep::Forget
        );
        // Never wanted one and had no finalizer.
        let cluster_ip = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        assert_eq!(
            plan_gone(Some(&known(&cluster_ip, LbState::Unknown, false))),
            GoneStep::Forget
        );
    }

    #[test]
    fn a_gone_service_that_may_have_a_load_balancer_gets_it_deleted() {
        let web = lb_service();
        let now = hosts(&["a"]);
        // Ensured, then deleted after someone removed our finalizer.
        assert_eq!(
            plan_gone(Some(&ensured(&web, &now))),
            GoneStep::DeleteLoadBalancer {
                last: Arc::new(web.clone())
            }
        );
        // Never synced by this controller (it started after the finalizer went): its last
        // version wanted a load balancer, or carried our finalizer.
        let finalized = with_spec(with_finalizer(lb_service()), |s| {
            s.type_ = Some("ClusterIP".into());
        });
        for last in [web, finalized] {
            assert_eq!(
                plan_gone(Some(&known(&last, LbState::Unknown, true))),
                GoneStep::DeleteLoadBalancer {
                    last: Arc::new(last.clone())
                }
            );
        }
    }

    #[test]
    fn may_have_a_load_balancer_unless_cleaned_or_never_wanted() {
        let web = lb_service();
        let now = hosts(&["a"]);
        assert!(ensured(&web, &now).may_have_load_balancer());
        assert!(known(&web, LbState::Unknown, false).may_have_load_balancer());
        assert!(!known(&web, LbState::Cleaned, false).may_have_load_balancer());
        let cluster_ip = with_spec(web.clone(), |s| s.type_ = Some("ClusterIP".into()));
        assert!(!known(&cluster_ip, LbState::Unknown, false).may_have_load_balancer());
        assert!(
            known(&with_finalizer(cluster_ip), LbState::Unknown, false).may_have_load_balancer()
        );
        let classed = with_spec(web, |s| s.load_balancer_class = Some("x".into()));
        assert!(!known(&classed, LbState::Unknown, false).may_have_load_balancer());
    }
}
