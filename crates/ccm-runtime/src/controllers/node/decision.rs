//! The cloud-node controller's decisions, as pure functions of a Node and what the cloud
//! said about it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, NodeAddress, Taint};

use ccm_provider::echo::echo;
use ccm_provider::well_known::{
    ANNOTATION_PROVIDED_NODE_IP, LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA, LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE,
    TAINT_UNINITIALIZED,
};
use ccm_provider::{InstanceMetadata, ProviderId};

use crate::controllers::{is_dns1123_subdomain, is_label_name};

/// The label pairs kept in step on initialised Nodes: when the first (beta) label is set,
/// the second (GA) one is set to the same value.
const LABEL_PAIRS: [(&str, &str); 3] = [
    (LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_ZONE),
    (LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_TOPOLOGY_REGION),
    (LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE),
];

const ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalIP",
    "ExternalIP",
    "InternalDNS",
    "ExternalDNS",
];

/// Why a Node cannot be initialised (yet). Each becomes a Warning event and a retry; the
/// Node keeps its taint. Only what would corrupt the Node, or what Go refuses too, is here:
/// what Go initialises despite, we initialise with an [`InitWarning`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InitError {
    /// Neither the Node nor the cloud has a provider ID.
    #[error("cloud provider does not set node provider ID for node {0}")]
    NoProviderId(String),
    /// The provider answered with a provider ID that is not `<provider>://<id>`, for a
    /// Node without one: written, it could never be corrected (`spec.providerID` is
    /// immutable once set) and no controller could match the Node to its instance.
    #[error("cloud provider returned an invalid provider ID {value:?} for node {node}: {reason}")]
    InvalidProviderId {
        node: String,
        value: String,
        reason: String,
    },
    /// The provider answered with a label Kubernetes would refuse.
    #[error("cloud provider returned an invalid label for node {node}: {reason}")]
    InvalidLabel { node: String, reason: String },
    /// The kubelet's `alpha.kubernetes.io/provided-node-ip` cannot be honoured.
    #[error("provided node ip for node {node:?} is not valid: {reason}")]
    InvalidProvidedNodeIp { node: String, reason: String },
}

/// Something odd about a Node or the cloud's answer that Go initialises the Node despite,
/// and so do we: it becomes a Warning event (reason `reason`) on the initialised Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InitWarning {
    /// The event reason.
    pub(crate) reason: &'static str,
    /// The event message.
    pub(crate) message: String,
}

/// Warning reason: the Node's `spec.providerID`, set by its kubelet, is not
/// `<provider>://<id>`; the Node is initialised and the value kept (it is immutable).
pub(crate) const REASON_INVALID_NODE_PROVIDER_ID: &str = "InvalidNodeProviderID";
/// Warning reason: the cloud gave an address of an unknown type, an `…IP` address that is
/// not an IP, an empty address (all written, as Go writes them) or a duplicate (dropped: the
/// API server refuses a Node with two equal addresses).
pub(crate) const REASON_UNUSUAL_NODE_ADDRESS: &str = "UnusualNodeAddress";

/// What initialising a Node writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InitPlan {
    /// `spec.providerID` to set; `None` when the Node has one already (it is never
    /// overwritten) or when there is none to set (legacy providers without IDs).
    pub(crate) provider_id: Option<String>,
    /// Labels to add or overwrite.
    pub(crate) labels: BTreeMap<String, String>,
    /// The taints to keep: every taint but the uninitialized one.
    pub(crate) taints: Vec<Taint>,
    /// The new `status.addresses`, when they change.
    pub(crate) addresses: Option<Vec<NodeAddress>>,
    /// What is odd but not worth keeping the Node tainted for, one event each.
    pub(crate) warnings: Vec<InitWarning>,
}

pub(crate) use super::super::node_util::{node_name, taints};

pub(crate) use ccm_provider::node_provider_id as spec_provider_id;

fn labels(node: &Node) -> Option<&BTreeMap<String, String>> {
    node.metadata.labels.as_ref()
}

fn addresses(node: &Node) -> &[NodeAddress] {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
}

/// Whether the Node still waits for the cloud-node controller.
pub(crate) fn is_uninitialized(node: &Node) -> bool {
    taints(node).iter().any(|t| t.key == TAINT_UNINITIALIZED)
}

/// Whether a change to this Node gives the worker anything to do: initialise it, or bring
/// its GA labels in step with the beta ones.
pub(crate) fn needs_sync(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && (is_uninitialized(node) || !secondary_label_updates(node).is_empty())
}

/// For an initialised Node: the GA labels to set from their beta twins (Go's
/// `reconcileNodeLabels`).
pub(crate) fn secondary_label_updates(node: &Node) -> BTreeMap<String, String> {
    let Some(labels) = labels(node) else {
        return BTreeMap::new();
    };
    LABEL_PAIRS
        .iter()
        .filter_map(|(primary, secondary)| {
            let value = labels.get(*primary)?;
            (labels.get(*secondary) != Some(value))
                .then(|| ((*secondary).to_owned(), value.clone()))
        })
        .collect()
}

/// Plans the initialisation of a tainted Node from the cloud's metadata.
///
/// `require_provider_id` is true for providers with [`Instances`](ccm_provider::Instances):
/// the Node keeps its taint until it has a provider ID. A legacy provider whose
/// `instance_id` is not implemented may initialise Nodes without one, as in Go.
pub(crate) fn plan_initialization(
    node: &Node,
    meta: &InstanceMetadata,
    require_provider_id: bool,
) -> Result<InitPlan, InitError> {
    let name = node_name(node);
    let mut warnings = Vec::new();
    // The kubelet's `--provider-id` is taken as it is, as Go takes it: the field is
    // immutable, so refusing would leave the Node tainted forever.
    if let Some(existing) = spec_provider_id(node)
        && let Err(e) = existing.parse::<ProviderId>()
    {
        warnings.push(InitWarning {
            reason: REASON_INVALID_NODE_PROVIDER_ID,
            message: format!(
                "node {name} has a spec.providerID that is not <provider>://<id>, kept as \
                 set by the kubelet ({e}); controllers that look instances up by provider ID \
                 may not find this one"
            ),
        });
    }
    let provider_id = match spec_provider_id(node) {
        // The cloud's answer is not written, so not checked.
        Some(_) => None,
        None if !meta.provider_id.is_empty() => {
            meta.provider_id
                .parse::<ProviderId>()
                .map_err(|e| InitError::InvalidProviderId {
                    node: name.to_owned(),
                    value: echo(&meta.provider_id).to_string(),
                    reason: e.to_string(),
                })?;
            Some(meta.provider_id.clone())
        }
        None if require_provider_id => return Err(InitError::NoProviderId(name.to_owned())),
        None => None,
    };

    warnings.extend(
        address_warnings(&meta.node_addresses)
            .into_iter()
            .map(|w| InitWarning {
                reason: REASON_UNUSUAL_NODE_ADDRESS,
                message: format!("cloud provider returned for node {name} {w}"),
            }),
    );
    // The provided node IP must match a cloud address before the taint may go.
    if let Some(ip) = provided_node_ip(node) {
        apply_provided_node_ip(ip, meta.node_addresses.clone()).map_err(|reason| {
            InitError::InvalidProvidedNodeIp {
                node: name.to_owned(),
                reason,
            }
        })?;
    }
    let addresses = updated_addresses(node, meta.node_addresses.clone()).map_err(|reason| {
        InitError::InvalidProvidedNodeIp {
            node: name.to_owned(),
            reason,
        }
    })?;

    let mut new_labels = BTreeMap::new();
    for (value, keys) in [
        (
            &meta.instance_type,
            [LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE],
        ),
        (
            &meta.zone,
            [LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_ZONE],
        ),
        (
            &meta.region,
            [LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_TOPOLOGY_REGION],
        ),
    ] {
        if value.is_empty() {
            continue;
        }
        validate_label(name, keys[1], value)?;
        for key in keys {
            new_labels.insert(key.to_owned(), value.clone());
        }
    }
    for (key, value) in &meta.additional_labels {
        if is_kubernetes_namespaced(key) {
            tracing::warn!(
                node = name,
                label = %echo(key),
                "discarding node label with a kubernetes namespace"
            );
            continue;
        }
        let existing = labels(node)
            .and_then(|l| l.get(key))
            .or_else(|| new_labels.get(key));
        if let Some(existing) = existing {
            if existing != value {
                tracing::warn!(
                    node = name,
                    label = %echo(key),
                    "discarding node label that is already present"
                );
            }
            continue;
        }
        validate_label(name, key, value)?;
        new_labels.insert(key.clone(), value.clone());
    }
    // Write only what differs.
    if let Some(current) = labels(node) {
        new_labels.retain(|k, v| current.get(k) != Some(v));
    }

    Ok(InitPlan {
        provider_id,
        labels: new_labels,
        taints: taints(node)
            .iter()
            .filter(|t| t.key != TAINT_UNINITIALIZED)
            .cloned()
            .collect(),
        addresses,
        warnings,
    })
}

/// Whether a label key uses a Kubernetes namespace (`kubernetes.io/`, `k8s.io/` or a
/// subdomain of either), which providers may not set.
pub(crate) fn is_kubernetes_namespaced(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")))
}

fn provided_node_ip(node: &Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROVIDED_NODE_IP))
        .map(String::as_str)
}

/// The addresses the Node should have given the cloud's, or `None` when they are the same
/// as now (or the cloud gave none). Keeps a Hostname the cloud omits, and honours the
/// kubelet's provided node IP. A repeat of an address (same type and value) is dropped: the
/// API server refuses a Node with two equal addresses, which would keep the Node from ever
/// being written (Go writes the list as it is, and its write fails).
pub(crate) fn updated_addresses(
    node: &Node,
    cloud: Vec<NodeAddress>,
) -> Result<Option<Vec<NodeAddress>>, String> {
    if cloud.is_empty() {
        return Ok(None);
    }
    let mut cloud = without_repeats(cloud);
    if !cloud.iter().any(|a| a.type_ == "Hostname") {
        cloud.extend(
            addresses(node)
                .iter()
                .filter(|a| a.type_ == "Hostname")
                .cloned(),
        );
    }
    if let Some(ip) = provided_node_ip(node) {
        cloud = apply_provided_node_ip(ip, cloud)?;
    }
    // Order matters (the first InternalIP is the Node's IP), so compare as lists: Go's
    // type-keyed comparison misses a reordering of two addresses of one type.
    Ok((addresses(node) != cloud.as_slice()).then_some(cloud))
}

/// The addresses with every repeat of an earlier one (same type and value) left out.
fn without_repeats(addresses: Vec<NodeAddress>) -> Vec<NodeAddress> {
    let mut kept: Vec<NodeAddress> = Vec::with_capacity(addresses.len());
    for a in addresses {
        if !kept.contains(&a) {
            kept.push(a);
        }
    }
    kept
}

/// What is odd about the cloud's addresses, one sentence each: a type Kubernetes does not
/// define, an `…IP` address that is not an IP, an empty address, a repeat. None of these
/// keeps a Node tainted: Go writes such addresses, and so do we (but for repeats, which the
/// API server refuses).
pub(crate) fn address_warnings(addresses: &[NodeAddress]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, a) in addresses.iter().enumerate() {
        if !ADDRESS_TYPES.contains(&a.type_.as_str()) {
            warnings.push(format!(
                "an address of unknown type {:?} ({:?}); written as given",
                echo(&a.type_),
                echo(&a.address)
            ));
        }
        if a.address.is_empty() {
            warnings.push(format!(
                "an empty {} address; written as given",
                echo(&a.type_)
            ));
        } else if a.type_.ends_with("IP") && a.address.parse::<IpAddr>().is_err() {
            warnings.push(format!(
                "{} {:?}, which is not an IP address; written as given",
                echo(&a.type_),
                echo(&a.address)
            ));
        }
        if addresses[..i].contains(a) {
            warnings.push(format!(
                "the {} address {:?} twice; written once",
                echo(&a.type_),
                echo(&a.address)
            ));
        }
    }
    warnings
}

/// Parses the provided-node-ip annotation: one IP, or an IPv4,IPv6 pair (Go's
/// `ParseNodeIPAnnotation`).
pub(crate) fn parse_provided_node_ip(value: &str) -> Result<Vec<IpAddr>, String> {
    let ips = value
        .split(',')
        .map(|s| {
            s.trim().parse::<IpAddr>().map_err(|_| {
                format!(
                    "failed to parse node IP {:?}: {:?} is not an IP address",
                    echo(value),
                    echo(s)
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ips.iter().any(IpAddr::is_unspecified) {
        return Err(format!(
            "failed to parse node IP {:?}: unspecified address",
            echo(value)
        ));
    }
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(format!(
            "failed to parse node IP {:?}: a pair of IPs must be one IPv4 and one IPv6",
            echo(value)
        )),
        _ => Err(format!(
            "failed to parse node IP {:?}: must be a single IP or a dual-stack pair",
            echo(value)
        )),
    }
}

/// Puts the addresses matching the provided node IP(s) first and drops the other addresses
/// of the matched types (Go's `GetNodeAddressesFromNodeIP`). Every provided IP must match a
/// cloud address.
pub(crate) fn apply_provided_node_ip(
    value: &str,
    cloud: Vec<NodeAddress>,
) -> Result<Vec<NodeAddress>, String> {
    let ips = parse_provided_node_ip(value)?;
    let mut enforced = Vec::new();
    let mut matched_types = Vec::new();
    for ip in ips {
        let mut matched = false;
        for a in &cloud {
            if a.address.parse::<IpAddr>().ok() == Some(ip) {
                enforced.push(a.clone());
                matched_types.push(a.type_.clone());
                matched = true;
            }
        }
        if !matched {
            return Err(format!(
                "failed to get node address from cloud provider that matches ip: {ip}"
            ));
        }
    }
    enforced.extend(
        cloud
            .into_iter()
            .filter(|a| !matched_types.contains(&a.type_)),
    );
    Ok(enforced)
}

/// Checks a label as the API server would: the value at most 63 characters of
/// `[A-Za-z0-9._-]`, starting and ending alphanumeric; the key an optional DNS-subdomain
/// prefix and a name of the same shape as a value.
fn validate_label(node: &str, key: &str, value: &str) -> Result<(), InitError> {
    let err = |reason: String| InitError::InvalidLabel {
        node: node.to_owned(),
        reason,
    };
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() || !is_label_name(name) {
        return Err(err(format!("invalid label key {:?}", echo(key))));
    }
    if prefix.is_some_and(|prefix| !is_dns1123_subdomain(prefix)) {
        return Err(err(format!("invalid label key {:?}", echo(key))));
    }
    if !value.is_empty() && !is_label_name(value) {
        return Err(err(format!(
            "invalid value {:?} for label {:?}",
            echo(value),
            echo(key)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use ccm_provider::node_address;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }
    }

    fn node() -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some(BTreeMap::from([(
            "kubernetes.io/hostname".into(),
            "n1".into(),
        )]));
        n.spec = Some(NodeSpec {
            taints: Some(vec![
                taint("other"),
                taint(TAINT_UNINITIALIZED),
                taint("third"),
            ]),
            ..NodeSpec::default()
        });
        n.status = Some(NodeStatus {
            addresses: Some(vec![node_address("Hostname", "n1.local")]),
            ..NodeStatus::default()
        });
        n
    }

    fn meta() -> InstanceMetadata {
        InstanceMetadata::new("fake://i-1")
            .with_instance_type("big")
            .with_zone("z1", "r1")
            .with_address(node_address("InternalIP", "10.0.0.1"))
            .with_address(node_address("ExternalIP", "203.0.113.1"))
    }

    /// The addresses `node()` initialised with `meta()` gets: the cloud's, then the
    /// kubelet's Hostname.
    fn initialised_addresses() -> Vec<NodeAddress> {
        vec![
            node_address("InternalIP", "10.0.0.1"),
            node_address("ExternalIP", "203.0.113.1"),
            node_address("Hostname", "n1.local"),
        ]
    }

    fn with_annotation(mut n: Node, v: &str) -> Node {
        n.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_PROVIDED_NODE_IP.into(),
            v.into(),
        )]));
        n
    }

    #[test]
    fn plans_a_full_initialisation() {
        let plan = plan_initialization(&node(), &meta(), true).unwrap();
        assert_eq!(plan.provider_id.as_deref(), Some("fake://i-1"));
        assert_eq!(
            plan.labels,
            BTreeMap::from([
                (LABEL_INSTANCE_TYPE_BETA.to_owned(), "big".to_owned()),
                (LABEL_INSTANCE_TYPE.to_owned(), "big".to_owned()),
                (LABEL_FAILURE_DOMAIN_BETA_ZONE.to_owned(), "z1".to_owned()),
                (LABEL_TOPOLOGY_ZONE.to_owned(), "z1".to_owned()),
                (LABEL_FAILURE_DOMAIN_BETA_REGION.to_owned(), "r1".to_owned()),
                (LABEL_TOPOLOGY_REGION.to_owned(), "r1".to_owned()),
            ])
        );
        assert_eq!(
            plan.taints,
            vec![taint("other"), taint("third")],
            "other taints kept in order"
        );
        assert_eq!(
            plan.addresses,
            Some(initialised_addresses()),
            "the kubelet's Hostname is kept when the cloud has none"
        );
    }

    #[test]
    fn existing_provider_id_is_never_overwritten() {
        let mut n = node();
        n.spec.as_mut().unwrap().provider_id = Some("fake://from-kubelet".into());
        assert_eq!(
            plan_initialization(&n, &meta(), true).unwrap().provider_id,
            None
        );
        // The cloud may leave it empty when the Node has one.
        let mut m = meta();
        m.provider_id.clear();
        assert_eq!(plan_initialization(&n, &m, true).unwrap().provider_id, None);
    }

    #[test]
    fn no_provider_id_anywhere_keeps_the_taint() {
        let mut m = meta();
        m.provider_id.clear();
        assert_eq!(
            plan_initialization(&node(), &m, true),
            Err(InitError::NoProviderId("n1".into()))
        );
        // A legacy provider without instance IDs may go on, as in Go.
        assert_eq!(
            plan_initialization(&node(), &m, false).unwrap().provider_id,
            None
        );
    }

    #[test]
    fn a_kubelet_s_malformed_provider_id_is_kept_with_a_warning() {
        let mut n = node();
        n.spec.as_mut().unwrap().provider_id = Some("i-123".into());
        // Whatever the cloud says: its provider ID is not written, so not checked.
        let mut m = meta();
        m.provider_id = "also bad".into();
        let plan = plan_initialization(&n, &m, true).unwrap();
        assert_eq!(plan.provider_id, None, "never overwritten");
        assert!(
            !plan.taints.iter().any(|t| t.key == TAINT_UNINITIALIZED),
            "the Node is initialised"
        );
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        assert_eq!(plan.warnings[0].reason, REASON_INVALID_NODE_PROVIDER_ID);
        assert!(
            plan.warnings[0].message.contains("\"i-123\""),
            "{:?}",
            plan.warnings
        );
        // A well-formed one gives no warning.
        n.spec.as_mut().unwrap().provider_id = Some("fake://i-123".into());
        assert!(
            plan_initialization(&n, &m, true)
                .unwrap()
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn a_malformed_provider_id_from_the_cloud_is_never_written() {
        for bad in ["fake:/x", "i-123", "://x"] {
            let mut m = meta();
            m.provider_id = bad.into();
            let err = plan_initialization(&node(), &m, true).unwrap_err();
            assert!(matches!(err, InitError::InvalidProviderId { .. }), "{err}");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn unusual_cloud_addresses_are_written_with_warnings() {
        for (t, a, says) in [
            ("InternalIP", "10.0.0.300", "not an IP"),
            ("InternalIP", "ip-10-0-0-1.internal", "not an IP"),
            ("Internal", "10.0.0.1", "unknown type \"Internal\""),
            ("ExternalIP", "", "empty ExternalIP"),
        ] {
            let m = meta().with_address(node_address(t, a));
            let plan = plan_initialization(&node(), &m, true).unwrap();
            assert!(
                plan.addresses
                    .as_ref()
                    .unwrap()
                    .contains(&node_address(t, a)),
                "{t} {a}: written as given"
            );
            assert_eq!(plan.warnings.len(), 1, "{t} {a}: {:?}", plan.warnings);
            assert_eq!(plan.warnings[0].reason, REASON_UNUSUAL_NODE_ADDRESS);
            assert!(
                plan.warnings[0].message.contains(says),
                "{t} {a}: {:?}",
                plan.warnings
            );
        }
        assert!(
            plan_initialization(&node(), &meta(), true)
                .unwrap()
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn a_repeated_address_is_written_once() {
        let m = meta()
            .with_address(node_address("InternalIP", "10.0.0.1"))
            .with_address(node_address("Hostname", "n1.local"));
        let plan = plan_initialization(&node(), &m, true).unwrap();
        assert_eq!(plan.addresses, Some(initialised_addresses()));
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        assert!(
            plan.warnings[0].message.contains("twice"),
            "{:?}",
            plan.warnings
        );
        // The same address under two types is not a repeat.
        assert!(
            address_warnings(&[
                node_address("InternalIP", "10.0.0.1"),
                node_address("ExternalIP", "10.0.0.1"),
            ])
            .is_empty()
        );
    }

    #[test]
    fn additional_labels_are_filtered_and_never_overwrite() {
        let mut n = node();
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("example.com/pool".into(), "red".into());
        let m = meta()
            .with_label("example.com/pool", "blue")
            .with_label("example.com/rack", "r7")
            .with_label("kubernetes.io/foo", "x")
            .with_label("node.kubernetes.io/bar", "x")
            .with_label("k8s.io/baz", "x")
            .with_label("sub.k8s.io/qux", "x")
            .with_label("notkubernetes.io/ok", "y");
        let plan = plan_initialization(&n, &m, true).unwrap();
        assert_eq!(
            plan.labels.get("example.com/rack").map(String::as_str),
            Some("r7")
        );
        assert_eq!(
            plan.labels.get("notkubernetes.io/ok").map(String::as_str),
            Some("y")
        );
        for dropped in [
            "example.com/pool",
            "kubernetes.io/foo",
            "node.kubernetes.io/bar",
            "k8s.io/baz",
            "sub.k8s.io/qux",
        ] {
            assert!(!plan.labels.contains_key(dropped), "{dropped}");
        }
    }

    #[test]
    fn invalid_labels_are_refused() {
        let m = meta().with_instance_type("big machine");
        assert!(matches!(
            plan_initialization(&node(), &m, true),
            Err(InitError::InvalidLabel { .. })
        ));
        let m = meta().with_label("example.com/ok", "-bad");
        assert!(matches!(
            plan_initialization(&node(), &m, true),
            Err(InitError::InvalidLabel { .. })
        ));
        let m = meta().with_label("Bad_Prefix/ok", "v");
        assert!(matches!(
            plan_initialization(&node(), &m, true),
            Err(InitError::InvalidLabel { .. })
        ));
        assert!(
            plan_initialization(&node(), &meta().with_label("example.com/empty", ""), true).is_ok()
        );
    }

    #[test]
    fn labels_already_set_are_not_rewritten() {
        let mut n = node();
        n.metadata.labels.as_mut().unwrap().extend([
            (LABEL_TOPOLOGY_ZONE.to_owned(), "z1".to_owned()),
            (LABEL_FAILURE_DOMAIN_BETA_ZONE.to_owned(), "z1".to_owned()),
        ]);
        let plan = plan_initialization(&n, &meta(), true).unwrap();
        assert!(!plan.labels.contains_key(LABEL_TOPOLOGY_ZONE));
        assert!(plan.labels.contains_key(LABEL_TOPOLOGY_REGION));
    }

    #[test]
    fn provided_node_ip_orders_and_filters() {
        let cloud = vec![
            node_address("InternalIP", "10.0.0.1"),
            node_address("InternalIP", "10.0.0.2"),
            node_address("ExternalIP", "203.0.113.1"),
            node_address("InternalIP", "fd00::2"),
        ];
        assert_eq!(
            apply_provided_node_ip("10.0.0.2", cloud.clone()).unwrap(),
            vec![
                node_address("InternalIP", "10.0.0.2"),
                node_address("ExternalIP", "203.0.113.1")
            ]
        );
        assert_eq!(
            apply_provided_node_ip("10.0.0.2,fd00::2", cloud.clone()).unwrap(),
            vec![
                node_address("InternalIP", "10.0.0.2"),
                node_address("InternalIP", "fd00::2"),
                node_address("ExternalIP", "203.0.113.1")
            ]
        );
        let err = apply_provided_node_ip("10.9.9.9", cloud.clone()).unwrap_err();
        assert_eq!(
            err,
            "failed to get node address from cloud provider that matches ip: 10.9.9.9"
        );
        for bad in [
            "nope",
            "10.0.0.1,10.0.0.2",
            "10.0.0.1,fd00::1,10.0.0.3",
            "0.0.0.0",
            "",
        ] {
            assert!(parse_provided_node_ip(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn invalid_provided_node_ip_keeps_the_taint() {
        let err =
            plan_initialization(&with_annotation(node(), "10.9.9.9"), &meta(), true).unwrap_err();
        assert!(matches!(err, InitError::InvalidProvidedNodeIp { .. }));
        assert!(
            err.to_string()
                .starts_with("provided node ip for node \"n1\" is not valid"),
            "{err}"
        );
        let plan =
            plan_initialization(&with_annotation(node(), "203.0.113.1"), &meta(), true).unwrap();
        assert_eq!(
            plan.addresses.unwrap()[0],
            node_address("ExternalIP", "203.0.113.1")
        );
    }

    #[test]
    fn addresses_written_only_on_change() {
        let mut n = node();
        assert_eq!(
            updated_addresses(&n, vec![]).unwrap(),
            None,
            "empty cloud list: no change"
        );
        let cloud = vec![node_address("InternalIP", "10.0.0.1")];
        let new = updated_addresses(&n, cloud.clone()).unwrap().unwrap();
        n.status.as_mut().unwrap().addresses = Some(new);
        assert_eq!(updated_addresses(&n, cloud).unwrap(), None);
        // A reordering is a change.
        n.status.as_mut().unwrap().addresses = Some(vec![
            node_address("InternalIP", "10.0.0.1"),
            node_address("InternalIP", "10.0.0.2"),
        ]);
        let swapped = vec![
            node_address("InternalIP", "10.0.0.2"),
            node_address("InternalIP", "10.0.0.1"),
        ];
        assert_eq!(
            updated_addresses(&n, swapped.clone()).unwrap(),
            Some(swapped)
        );
    }

    #[test]
    fn sync_is_needed_for_tainted_or_label_drift() {
        assert!(needs_sync(&node()));
        let mut n = node();
        n.spec.as_mut().unwrap().taints = None;
        assert!(!needs_sync(&n));
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_FAILURE_DOMAIN_BETA_ZONE.into(), "z9".into());
        assert!(needs_sync(&n));
        assert_eq!(
            secondary_label_updates(&n),
            BTreeMap::from([(LABEL_TOPOLOGY_ZONE.to_owned(), "z9".to_owned())])
        );
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_TOPOLOGY_ZONE.into(), "z9".into());
        assert!(!needs_sync(&n));
        let mut deleting = node();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(!needs_sync(&deleting));
    }
}

#[cfg(test)]
mod proptests;
