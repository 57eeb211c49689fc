//! Each node's Pod network, set up when its Node is ready for it ([`PodNetwork`]): the CNI
//! configuration for the Node's pod CIDR in the node's folder, and (unless a cloud routes
//! them, [`PodRoutes::Cloud`]) a route to the node for that CIDR in the cluster's namespace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use super::netns::{self, NetworkNamespace};
use super::node::{self, NodeLayout};
use super::{CNI_CONF_FILE, PodNetwork, PodRoutes, has_uninitialized_taint};
use crate::{Error, write_file};

/// Sets up each node's Pod network when its Node is ready for it ([`PodNetwork`]): writes
/// the CNI configuration for the Node's pod CIDR into the node's folder (containerd picks
/// it up) and routes the CIDR to the node in the cluster's namespace. A thread of its own
/// with its own runtime, so that it outlives the runtime of any one test.
#[derive(Debug)]
pub(super) struct PodNetworkWriter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PodNetworkWriter {
    pub(super) fn start(
        config: kube::Config,
        cluster_ns: Arc<NetworkNamespace>,
        nodes: Vec<NodeLayout>,
        when: PodNetwork,
        routes: PodRoutes,
    ) -> Result<Self, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the pod-network writer's runtime", e))?;
        let thread = std::thread::Builder::new()
            .name("ccm-test-pod-network".to_owned())
            .spawn({
                let stop = stop.clone();
                move || {
                    runtime.block_on(write_pod_networks(
                        config,
                        &cluster_ns,
                        &nodes,
                        (when, routes),
                        &stop,
                    ))
                }
            })
            .map_err(|e| Error::io("starting the pod-network writer", e))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PodNetworkWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn write_pod_networks(
    config: kube::Config,
    cluster_ns: &NetworkNamespace,
    nodes: &[NodeLayout],
    (when, routes): (PodNetwork, PodRoutes),
    stop: &AtomicBool,
) {
    let Ok(client) = kube::Client::try_from(config) else {
        return;
    };
    let api: Api<Node> = Api::all(client);
    let mut written: BTreeMap<String, PodCidrs> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        // One listing a pass (not one request per node: this runs as long as the cluster).
        let Ok(listed) = api.list(&ListParams::default()).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        for node in listed.items {
            let Some(layout) = nodes
                .iter()
                .find(|layout| node.metadata.name.as_deref() == Some(layout.name.as_str()))
            else {
                continue;
            };
            let Some(cidrs) = pod_network_due(&node, when, layout.address_v6.is_some()) else {
                continue;
            };
            if written.get(&layout.name) == Some(&cidrs) {
                continue;
            }
            match set_up_pod_network(cluster_ns, layout, &cidrs, routes) {
                Ok(()) => {
                    tracing::info!(node = %layout.name, ?cidrs, "pod network set up");
                    written.insert(layout.name.clone(), cidrs);
                }
                Err(e) => tracing::warn!(node = %layout.name, error = %e, "pod network"),
            }
        }
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A Node's pod CIDRs: its IPv4 one, and its IPv6 one in a dual-stack cluster.
type PodCidrs = (String, Option<String>);

/// The pod CIDRs to set a Node's network up for, when it is due: its IPv4 one, and with
/// `dual_stack` its IPv6 one too (not due until it has both).
fn pod_network_due(node: &Node, when: PodNetwork, dual_stack: bool) -> Option<PodCidrs> {
    let spec = node.spec.as_ref()?;
    let cidrs = spec.pod_cidrs.as_deref().unwrap_or_default();
    let v4 = cidrs
        .iter()
        .find(|c| netns::validate_ipv4_cidr(c).is_ok())
        .or(spec.pod_cidr.as_ref())?
        .clone();
    let v6 = match dual_stack {
        true => Some(
            cidrs
                .iter()
                .find(|c| netns::validate_ipv6_cidr(c).is_ok())?
                .clone(),
        ),
        false => None,
    };
    let due = match when {
        PodNetwork::AtPodCidr => true,
        PodNetwork::AfterInitialisation => !has_uninitialized_taint(node),
    };
    due.then_some((v4, v6))
}

fn set_up_pod_network(
    cluster_ns: &NetworkNamespace,
    layout: &NodeLayout,
    (v4, v6): &PodCidrs,
    routes: PodRoutes,
) -> Result<(), Error> {
    let config = node::cni_config(v4, v6.as_deref())?;
    if routes == PodRoutes::Cluster {
        let mut script = netns::pod_route_script(v4, layout.address.into())?;
        if let (Some(v6), Some(address)) = (v6, layout.address_v6) {
            script += &netns::pod_route_script(v6, address.into())?;
        }
        cluster_ns.run_script(&script)?;
    }
    let dir = layout.cni_conf_dir();
    let partial = dir.join(format!(".{CNI_CONF_FILE}.tmp"));
    write_file(&partial, &config)?;
    std::fs::rename(&partial, dir.join(CNI_CONF_FILE)).map_err(|e| {
        Error::io(
            format!("writing the CNI configuration of {}", layout.name),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;
    use crate::fixtures::uninitialized_taint;

    fn node(cidr: Option<&str>, uninitialised: bool) -> Node {
        Node {
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(str::to_owned),
                pod_cidrs: cidr.map(|c| vec![c.to_owned()]),
                taints: uninitialised.then(|| vec![uninitialized_taint()]),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn the_pod_network_waits_for_a_cidr_and_by_default_for_initialisation() {
        let cidr = Some("10.244.1.0/24");
        // (the Node's pod CIDR, whether it is still uninitialised, when, what is due)
        for (pod_cidr, uninitialised, when, due) in [
            (None, false, PodNetwork::AtPodCidr, None),
            (cidr, true, PodNetwork::AtPodCidr, cidr),
            (cidr, true, PodNetwork::AfterInitialisation, None),
            (cidr, false, PodNetwork::AfterInitialisation, cidr),
        ] {
            let node = node(pod_cidr, uninitialised);
            assert_eq!(
                pod_network_due(&node, when, false),
                due.map(|c| (c.to_owned(), None)),
                "{pod_cidr:?}, uninitialised: {uninitialised}, {when:?}"
            );
        }
    }

    #[test]
    fn a_dual_stack_pod_network_waits_for_both_families() {
        let mut dual = node(Some("10.244.1.0/24"), false);
        assert_eq!(
            pod_network_due(&dual, PodNetwork::AtPodCidr, true),
            None,
            "no IPv6 CIDR yet"
        );
        dual.spec.as_mut().unwrap().pod_cidrs = Some(vec![
            "10.244.1.0/24".to_owned(),
            "fd00:10:244:1::/64".to_owned(),
        ]);
        assert_eq!(
            pod_network_due(&dual, PodNetwork::AtPodCidr, true),
            Some((
                "10.244.1.0/24".to_owned(),
                Some("fd00:10:244:1::/64".to_owned())
            ))
        );
    }
}
