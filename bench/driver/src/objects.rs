//! The objects the scenarios create, and how the driver tells that one is done: from a
//! watch of the API (Nodes, Services) or, for what only the cloud knows, from the CCM's
//! `/metrics`.

use std::collections::HashSet;
use std::time::Duration;

use ccm_test::fixtures::{
    NodeBuilder, ServiceBuilder, addresses, is_initialized, node_condition, provider_id,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Service};
use kube::api::Api;
use kube::runtime::watcher;

use crate::process::{Endpoint, LOAD_BALANCER_HOSTS_MIN, LOAD_BALANCERS};

/// A Node as a kubelet with `--cloud-provider=external` registers it: tainted, and Ready
/// (a kubelet reports Ready within seconds; a Node that is not Ready would have both CCMs'
/// lifecycle controllers ask the cloud about it every period, which no real cluster at
/// rest does). The API server takes a Node's status on create.
pub(crate) fn tainted_node(prefix: &str, i: usize) -> Node {
    ready(NodeBuilder::new(&format!("{prefix}-{i:05}")).uninitialized())
}

/// A Node with a podCIDR (from the cluster CIDR 10.128.0.0/9) and no taint, as a
/// kubelet registers it once initialised; its route is the route controller's work.
pub(crate) fn route_node(i: usize) -> Node {
    let cidr = format!("10.{}.{}.0/24", 128 + i / 256, i % 256);
    ready(NodeBuilder::new(&format!("bench-route-node-{i:05}")).pod_cidrs(&[&cidr]))
}

/// The Node `node` describes, its kubelet reporting Ready.
fn ready(node: NodeBuilder) -> Node {
    Node {
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
        ..node.build()
    }
}

/// A `LoadBalancer` Service with one TCP port.
pub(crate) fn lb_service(i: usize) -> Service {
    ServiceBuilder::load_balancer(&format!("bench-lb-{i:05}"))
        .port(80)
        .protocol("TCP")
        .build()
}

/// Initialised: the taint gone, a provider ID and the cloud's addresses set. Both CCMs
/// write all three for a new Node, in two writes: Go removes the taint first and patches
/// the addresses next, ours the other way round (no Pod lands on a Node without addresses);
/// only all three make the Node usable.
pub(crate) fn node_initialised(node: &Node) -> bool {
    provider_id(node).is_some_and(|id| !id.is_empty())
        && is_initialized(node)
        && !addresses(node).is_empty()
}

/// The route controller marks a Node's network available once its route exists.
/// Counts only the scenario's Nodes: the other Nodes have no podCIDR, so no route.
pub(crate) fn node_has_route(node: &Node) -> bool {
    node.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with("bench-route-node-"))
        && node_condition(node, "NetworkUnavailable").is_some_and(|(status, _)| status == "False")
}

/// A stream of "how many objects are done", from a watch of `api` (in protobuf or JSON).
pub(crate) fn watch_done<K>(
    api: Api<K>,
    is_done: fn(&K) -> bool,
    protobuf: bool,
) -> impl futures::Stream<Item = usize> + Send
where
    K: kube::Resource
        + ccm_runtime::client::protobuf::Protobuf
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let mut done: HashSet<String> = HashSet::new();
    let events = if protobuf {
        ccm_runtime::client::protobuf::watcher(api, watcher::Config::default()).boxed()
    } else {
        watcher(api, watcher::Config::default()).boxed()
    };
    events.filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                if is_done(&obj) {
                    done.insert(name);
                } else {
                    done.remove(&name);
                }
                true
            }
            Ok(watcher::Event::Delete(obj)) => {
                done.remove(obj.meta().name.as_deref().unwrap_or_default());
                true
            }
            Ok(_) | Err(_) => false,
        };
        futures::future::ready(changed.then_some(done.len()))
    })
}

/// A stream of "how many of the new Nodes every load balancer points at", polled from the
/// fake cloud's metrics every 250 ms: the fewest hosts of any LB minus `base`, once all
/// `load_balancers` exist (0 before). A scrape that fails counts as no progress.
pub(crate) fn poll_lb_hosts(
    endpoint: Endpoint,
    load_balancers: usize,
    base: usize,
) -> impl futures::Stream<Item = usize> + Send {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let scrape = tokio::task::spawn_blocking(move || endpoint.scrape()).await;
        let done = match scrape {
            Ok(Ok(s)) if s.sum(LOAD_BALANCERS) as usize == load_balancers => {
                (s.sum(LOAD_BALANCER_HOSTS_MIN) as usize).saturating_sub(base)
            }
            _ => 0,
        };
        Some((done, ()))
    })
}
