//! A load balancer's `network_stack` when the Service does not say (issue 66).
//!
//! DigitalOcean's CCM (`getNetworkStack` and `filterAndClassifyNodes` in
//! `cloud-controller-manager/do/loadbalancers.go`, commit `70d527e`) chooses it by type and by
//! the Nodes: `REGIONAL` → `DUALSTACK` (the load balancer ends the connection, so IPv6
//! clients reach IPv4 droplets); `REGIONAL_NETWORK` → `DUALSTACK` only when every Node it
//! would put behind the load balancer has an IPv6 `ExternalIP` (and an IPv4 one), else
//! `IPV4`; `INTERNAL` → `IPV4`. Ours chooses the same for a **new** load balancer, and keeps
//! an **existing** one's as it finds it: so a swap from DigitalOcean's CCM (whose load
//! balancers carry its choice) changes nothing, an upgrade of ours (whose load balancers
//! made before this carry `IPV4`) changes nothing, and a Node joining never takes the IPv6
//! address away from clients that use it. The annotation, when set, always wins.

use k8s_openapi::api::core::v1::Node;

use crate::api::{NETWORK_STACK_DUALSTACK, NETWORK_STACK_IPV4};

/// What DigitalOcean's CCM makes of one Node's addresses for an external load balancer
/// (`classifyNode`): the families of its `ExternalIP`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeStack {
    /// An IPv4 `ExternalIP` and no IPv6 one.
    V4,
    /// Both families.
    Dual,
    /// An IPv6 `ExternalIP` only: never behind an external load balancer there.
    V6,
    /// No `ExternalIP` (yet): not behind an external `REGIONAL_NETWORK` load balancer.
    Unready,
}

/// `node`'s [`NodeStack`] from its `ExternalIP` addresses (an address that does not parse
/// counts as IPv4, as Go's `netip.ParseAddr(...).Is6()` does).
pub(crate) fn node_stack(node: &Node) -> NodeStack {
    let (mut v4, mut v6) = (false, false);
    let addresses = node
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten());
    for address in addresses.filter(|a| a.type_ == "ExternalIP") {
        match address.address.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(_)) => v6 = true,
            _ => v4 = true,
        }
    }
    match (v4, v6) {
        (true, true) => NodeStack::Dual,
        (true, false) => NodeStack::V4,
        (false, true) => NodeStack::V6,
        (false, false) => NodeStack::Unready,
    }
}

/// DigitalOcean's CCM's default for a new load balancer (`getNetworkStack` without the
/// annotation, for an `EXTERNAL` one): `DUALSTACK` for `REGIONAL`; for `REGIONAL_NETWORK`,
/// `DUALSTACK` when at least one Node is dual-stack and none is IPv4-only (Nodes with no
/// `ExternalIP`, or an IPv6 one only, are left out, as DigitalOcean leaves them out of the
/// load balancer), else `IPV4`.
pub(crate) fn digitaloceans_default(regional_network: bool, nodes: &[NodeStack]) -> &'static str {
    if !regional_network {
        return NETWORK_STACK_DUALSTACK;
    }
    let dual = nodes.contains(&NodeStack::Dual);
    let v4 = nodes.contains(&NodeStack::V4);
    if dual && !v4 {
        NETWORK_STACK_DUALSTACK
    } else {
        NETWORK_STACK_IPV4
    }
}

/// The `network_stack` to ask for: the annotation's (`asked`) when set; else, for a
/// `REGIONAL` Service without node ports (`without_node_ports`: the simulator's
/// `x_passthrough` rules carry IPv4 packets only, and DigitalOcean's CCM cannot serve such a
/// Service at all), `IPV4`; else
/// the existing load balancer's (`found`, as the API answers it: empty counts as `IPV4`);
/// else DigitalOcean's default for a new one ([`digitaloceans_default`]).
pub(crate) fn choose(
    asked: Option<&'static str>,
    found: Option<&str>,
    without_node_ports: bool,
    regional_network: bool,
    nodes: &[NodeStack],
) -> &'static str {
    if let Some(asked) = asked {
        return asked;
    }
    if without_node_ports && !regional_network {
        return NETWORK_STACK_IPV4;
    }
    match found {
        Some(NETWORK_STACK_DUALSTACK) => NETWORK_STACK_DUALSTACK,
        Some(_) => NETWORK_STACK_IPV4,
        None => digitaloceans_default(regional_network, nodes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn node(addresses: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(t, a)| NodeAddress {
                            type_: (*t).into(),
                            address: (*a).into(),
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_nodes_stack_is_the_families_of_its_external_addresses() {
        let internal = ("InternalIP", "10.0.0.1");
        let (v4, v6) = (("ExternalIP", "203.0.113.1"), ("ExternalIP", "2001:db8::1"));
        assert_eq!(node_stack(&node(&[internal, v4])), NodeStack::V4);
        assert_eq!(node_stack(&node(&[internal, v4, v6])), NodeStack::Dual);
        assert_eq!(node_stack(&node(&[internal, v6])), NodeStack::V6);
        assert_eq!(
            node_stack(&node(&[internal, ("InternalIP", "fd00::1")])),
            NodeStack::Unready,
            "internal addresses do not count"
        );
        assert_eq!(node_stack(&Node::default()), NodeStack::Unready);
    }

    #[test]
    fn digitaloceans_default_is_dualstack_for_regional_and_by_the_nodes_for_network() {
        use NodeStack::*;
        assert_eq!(digitaloceans_default(false, &[V4, Unready]), "DUALSTACK");
        assert_eq!(digitaloceans_default(false, &[]), "DUALSTACK");
        assert_eq!(digitaloceans_default(true, &[Dual, Dual]), "DUALSTACK");
        assert_eq!(
            digitaloceans_default(true, &[Dual, V6, Unready]),
            "DUALSTACK",
            "IPv6-only and unready Nodes are not behind it"
        );
        assert_eq!(digitaloceans_default(true, &[Dual, V4]), "IPV4");
        assert_eq!(digitaloceans_default(true, &[V4]), "IPV4");
        assert_eq!(digitaloceans_default(true, &[]), "IPV4");
    }

    #[test]
    fn the_annotation_wins_then_the_found_stack_then_digitaloceans_default() {
        use NodeStack::*;
        let dual = &[Dual][..];
        assert_eq!(
            choose(Some("IPV4"), Some("DUALSTACK"), false, false, dual),
            "IPV4"
        );
        assert_eq!(
            choose(Some("DUALSTACK"), None, false, false, dual),
            "DUALSTACK"
        );
        assert_eq!(
            choose(None, Some("DUALSTACK"), false, true, &[V4]),
            "DUALSTACK",
            "kept as found, whatever the Nodes"
        );
        assert_eq!(
            choose(None, Some("IPV4"), false, false, dual),
            "IPV4",
            "an LB ours made before issue 66 stays IPv4"
        );
        assert_eq!(choose(None, Some(""), false, false, dual), "IPV4");
        assert_eq!(choose(None, None, false, false, &[V4]), "DUALSTACK");
        assert_eq!(choose(None, None, false, true, &[V4]), "IPV4");
        assert_eq!(choose(None, None, false, true, dual), "DUALSTACK");
        assert_eq!(
            choose(None, None, true, false, dual),
            "IPV4",
            "no node ports: passthrough rules carry IPv4 only"
        );
    }
}
