//! Property tests of the kubelet's provided-node-ip annotation parser: any value parses or
//! is refused without a panic, and what parses is what Go's `ParseNodeIPAnnotation` takes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1::NodeAddress;
use proptest::prelude::*;

use super::{apply_provided_node_ip, parse_provided_node_ip};

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<Ipv4Addr>().prop_map(IpAddr::V4),
        any::<Ipv6Addr>().prop_map(IpAddr::V6),
    ]
    .prop_filter("specified", |ip| !ip.is_unspecified())
}

/// Text made of what IPs and the annotation are made of.
fn ipish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[0-9]{1,4}",
            "[0-9a-fA-F]{1,5}",
            prop::sample::select(vec![".", ":", "::", ",", " ", "%", "/", "[", "]", "0"])
                .prop_map(str::to_owned),
            ip().prop_map(|ip| ip.to_string()),
        ],
        0..10,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any value parses or is refused; what parses is one IP, or one IPv4 and one IPv6.
    #[test]
    fn any_value_parses_or_is_refused(value in prop_oneof![any::<String>(), ipish()]) {
        match parse_provided_node_ip(&value) {
            Ok(ips) => {
                prop_assert!(!ips.iter().any(IpAddr::is_unspecified));
                match ips.as_slice() {
                    [_] => {}
                    [a, b] => prop_assert_ne!(a.is_ipv4(), b.is_ipv4()),
                    other => prop_assert!(false, "{other:?}"),
                }
            }
            Err(e) => prop_assert!(e.starts_with("failed to parse node IP "), "{e}"),
        }
    }

    /// One IP, or a dual-stack pair in either order, with spaces around each.
    #[test]
    fn ips_and_dual_stack_pairs_parse(a in ip(), b in ip(), pad in " {0,2}") {
        prop_assert_eq!(parse_provided_node_ip(&format!("{pad}{a}{pad}")), Ok(vec![a]));
        let pair = parse_provided_node_ip(&format!("{a},{pad}{b}"));
        if a.is_ipv4() == b.is_ipv4() {
            prop_assert!(pair.is_err());
        } else {
            prop_assert_eq!(pair, Ok(vec![a, b]));
        }
        let three = format!("{a},{b},{a}");
        prop_assert!(parse_provided_node_ip(&three).is_err(), "{three}");
    }

    /// Honouring a provided IP puts the cloud's address with that IP first, keeps every
    /// address of other types, and drops nothing else unless its type matched.
    #[test]
    fn applying_a_provided_ip_keeps_the_cloud_s_addresses(
        ips in prop::collection::vec((ip(), prop::sample::select(vec!["InternalIP", "ExternalIP"])), 1..5),
        pick in any::<prop::sample::Index>(),
    ) {
        let cloud: Vec<NodeAddress> = ips
            .iter()
            .map(|(ip, kind)| NodeAddress { type_: (*kind).to_owned(), address: ip.to_string() })
            .collect();
        let provided = pick.get(&ips).0;
        let out = apply_provided_node_ip(&provided.to_string(), cloud.clone()).unwrap();
        prop_assert_eq!(out[0].address.parse::<IpAddr>().ok(), Some(provided));
        for a in &out {
            prop_assert!(cloud.contains(a));
        }
    }
}
