//! The plain data a provider hands to the controllers: instance metadata, zones and routes.
//!
//! Kubernetes types (`Node`, `Service`, `NodeAddress`, `LoadBalancerStatus`) come from
//! `k8s-openapi` unchanged, so a provider speaks the same vocabulary as the API server.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::well_known::ANNOTATION_PROVIDED_NODE_IP;

/// What the cloud knows about the instance behind a Node (Go's `cloudprovider.InstanceMetadata`).
///
/// The cloud-node controller writes it onto a new Node: `provider_id` into `spec.providerID`
/// (only when that is empty), `instance_type`, `zone` and `region` as labels under both the
/// GA and beta keys, `node_addresses` into `status.addresses`, and `additional_labels` where
/// they neither collide with an existing label nor use a `kubernetes.io` / `k8s.io` key.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct InstanceMetadata {
    /// The instance's provider ID, `<provider>://<id>`. May be empty when the Node's
    /// `spec.providerID` is already set; the controller keeps the Node's value.
    pub provider_id: String,
    /// The instance type (machine size), e.g. `s-2vcpu-4gb`; empty for none.
    pub instance_type: String,
    /// The instance's addresses, in the order the Node should list them.
    pub node_addresses: Vec<NodeAddress>,
    /// The zone (failure domain); empty for none.
    pub zone: String,
    /// The region; empty for none.
    pub region: String,
    /// Extra labels for the Node, e.g. a placement group.
    pub additional_labels: BTreeMap<String, String>,
}

impl InstanceMetadata {
    /// Metadata with this provider ID and nothing else; fill the rest with the `with_*` methods.
    ///
    /// ```
    /// use ccm_core::provider::{InstanceMetadata, node_address};
    /// let meta = InstanceMetadata::new("fake://i-1")
    ///     .with_instance_type("small")
    ///     .with_zone("eu-1a", "eu-1")
    ///     .with_address(node_address("InternalIP", "10.0.0.5"))
    ///     .with_label("example.com/pool", "blue");
    /// assert_eq!(meta.region, "eu-1");
    /// ```
    pub fn new(provider_id: impl Into<String>) -> Self {
        Self {
            provider_id: provider_id.into(),
            ..Self::default()
        }
    }

    /// Sets the instance type.
    pub fn with_instance_type(mut self, instance_type: impl Into<String>) -> Self {
        self.instance_type = instance_type.into();
        self
    }

    /// Sets the zone and region.
    pub fn with_zone(mut self, zone: impl Into<String>, region: impl Into<String>) -> Self {
        self.zone = zone.into();
        self.region = region.into();
        self
    }

    /// Appends an address.
    pub fn with_address(mut self, address: NodeAddress) -> Self {
        self.node_addresses.push(address);
        self
    }

    /// Replaces the addresses.
    pub fn with_addresses(mut self, addresses: Vec<NodeAddress>) -> Self {
        self.node_addresses = addresses;
        self
    }

    /// Adds an additional label.
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.additional_labels.insert(key.into(), value.into());
        self
    }
}

/// A `NodeAddress` of the given type (`InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS`,
/// `ExternalDNS`) and value.
///
/// ```
/// let a = ccm_core::provider::node_address("ExternalIP", "203.0.113.7");
/// assert_eq!(a.type_, "ExternalIP");
/// ```
pub fn node_address(type_: impl Into<String>, address: impl Into<String>) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: address.into(),
    }
}

/// The Node's name (`metadata.name`; empty if unset, which the API server never allows).
///
/// ```
/// let mut node = k8s_openapi::api::core::v1::Node::default();
/// node.metadata.name = Some("worker-1".into());
/// assert_eq!(ccm_core::provider::node_name(&node), "worker-1");
/// ```
pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// The Node's `spec.providerID`, if set and not empty.
///
/// ```
/// use k8s_openapi::api::core::v1::{Node, NodeSpec};
/// let mut node = Node::default();
/// assert_eq!(ccm_core::provider::node_provider_id(&node), None);
/// node.spec = Some(NodeSpec { provider_id: Some("acme://i-1".into()), ..NodeSpec::default() });
/// assert_eq!(ccm_core::provider::node_provider_id(&node), Some("acme://i-1"));
/// ```
pub fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|id| !id.is_empty())
}

/// The addresses the Node's kubelet was given with `--node-ip`, as it announces them in the
/// `alpha.kubernetes.io/provided-node-ip` annotation: one IP, or an IPv4 and IPv6 pair.
/// Empty when the annotation is absent or not such a value.
///
/// When a Node carries the annotation, the cloud-node controller initialises it only if the
/// provider's [`InstanceMetadata::node_addresses`] include those IPs (Go's rule: the cloud
/// must confirm the address the kubelet was told to use), and lists them first. A provider
/// whose instances report their own addresses needs nothing of this; one that learns an
/// instance's addresses from the Node (every Node an instance, as in a bare-metal or
/// local cluster) reports these as its `InternalIP`s:
///
/// ```
/// use ccm_core::k8s_openapi::api::core::v1::Node;
/// use ccm_core::provider::{InstanceMetadata, node_address, provided_node_ips};
///
/// fn metadata(node: &Node) -> InstanceMetadata {
///     let mut meta = InstanceMetadata::new("acme://i-1");
///     for ip in provided_node_ips(node) {
///         meta = meta.with_address(node_address("InternalIP", ip.to_string()));
///     }
///     meta
/// }
///
/// let mut node = Node::default();
/// node.metadata.annotations = Some(
///     [("alpha.kubernetes.io/provided-node-ip".to_owned(), "10.0.0.7".to_owned())].into(),
/// );
/// assert_eq!(metadata(&node).node_addresses[0].address, "10.0.0.7");
/// assert!(provided_node_ips(&Node::default()).is_empty());
/// ```
pub fn provided_node_ips(node: &Node) -> Vec<IpAddr> {
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROVIDED_NODE_IP))
    else {
        return Vec::new();
    };
    // At most a pair: a longer value is refused without parsing all of it.
    let ips: Option<Vec<IpAddr>> = value
        .split(',')
        .take(3)
        .map(|ip| ip.trim().parse::<IpAddr>().ok())
        .collect();
    match ips.as_deref() {
        Some([ip]) if !ip.is_unspecified() => vec![*ip],
        Some([a, b])
            if a.is_ipv4() != b.is_ipv4() && !a.is_unspecified() && !b.is_unspecified() =>
        {
            vec![*a, *b]
        }
        _ => Vec::new(),
    }
}

/// A zone and region (Go's `cloudprovider.Zone`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Zone {
    /// The failure domain, written to `topology.kubernetes.io/zone`.
    pub failure_domain: String,
    /// The region, written to `topology.kubernetes.io/region`.
    pub region: String,
}

impl Zone {
    /// A zone in a region.
    pub fn new(failure_domain: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            failure_domain: failure_domain.into(),
            region: region.into(),
        }
    }
}

/// A route in the cloud's routing table that sends a pod CIDR to a Node (Go's
/// `cloudprovider.Route`).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Route {
    /// The cloud's name for the route. [`Routes::create_route`](super::Routes::create_route)
    /// ignores it (a name hint is passed instead); [`Routes::list_routes`](super::Routes::list_routes) fills it.
    pub name: String,
    /// The name of the Node the traffic goes to; empty when the target is unknown.
    pub target_node: String,
    /// Whether `target_node_addresses` means anything. A provider that routes by address
    /// rather than by instance sets it in the routes it lists.
    pub enable_node_addresses: bool,
    /// The target Node's addresses; ignored unless `enable_node_addresses`.
    pub target_node_addresses: Vec<NodeAddress>,
    /// The destination, e.g. `10.244.3.0/24` or `fd00:10:244:3::/64`.
    pub destination_cidr: String,
    /// Whether the route is a blackhole (its target is gone); the route controller deletes
    /// blackhole routes inside the cluster CIDRs.
    pub blackhole: bool,
}

impl Route {
    /// A route sending `destination_cidr` to `target_node`.
    ///
    /// ```
    /// let r = ccm_core::provider::Route::new("node-1", "10.244.1.0/24");
    /// assert!(!r.blackhole);
    /// ```
    pub fn new(target_node: impl Into<String>, destination_cidr: impl Into<String>) -> Self {
        Self {
            target_node: target_node.into(),
            destination_cidr: destination_cidr.into(),
            ..Self::default()
        }
    }

    /// Sets the cloud's name for the route.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the target addresses and enables them.
    pub fn with_node_addresses(mut self, addresses: Vec<NodeAddress>) -> Self {
        self.enable_node_addresses = true;
        self.target_node_addresses = addresses;
        self
    }

    /// Marks the route as a blackhole.
    pub fn with_blackhole(mut self, blackhole: bool) -> Self {
        self.blackhole = blackhole;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_with(provided: &str) -> Node {
        let mut node = Node::default();
        node.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_PROVIDED_NODE_IP.to_owned(),
            provided.to_owned(),
        )]));
        node
    }

    fn ips(provided: &str) -> Vec<String> {
        provided_node_ips(&node_with(provided))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn provided_node_ips_are_one_ip_or_a_dual_stack_pair() {
        assert_eq!(ips("10.0.0.7"), ["10.0.0.7"]);
        assert_eq!(ips(" 10.0.0.7 , fd00::7"), ["10.0.0.7", "fd00::7"]);
        assert_eq!(ips("fd00::7,10.0.0.7"), ["fd00::7", "10.0.0.7"]);
    }

    #[test]
    fn provided_node_ips_refuse_what_the_kubelet_would_not_write() {
        for bad in [
            "",
            "node-1",
            "10.0.0.7,10.0.0.8",
            "0.0.0.0",
            "10.0.0.7,::",
            "10.0.0.7,fd00::7,10.0.0.8",
            "10.0.0.7,",
        ] {
            assert!(ips(bad).is_empty(), "{bad:?}");
        }
        assert!(provided_node_ips(&Node::default()).is_empty());
    }
}
