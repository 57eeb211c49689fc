//! The node-ipam controller against a real kube-apiserver + etcd: Nodes get pod CIDRs from
//! the cluster CIDR, never one another's nor the Service range's, a restart keeps what Nodes
//! have, a full range is a Warning until a deleted Node frees a CIDR, and dual-stack gives
//! one of each family.
//!
//! Each test has its own controller and a Node informer that sees only its own Nodes, so
//! their cluster CIDRs may overlap.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use ccm_fake_cloud::FakeCloud;
use ccm_runtime::controllers::node_ipam::{
    MaskSizeFlags, NodeIpamConfig, NodeIpamController, REASON_CIDR_NOT_AVAILABLE,
};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::DeleteParams;
use support::*;

const WAIT: Duration = Duration::from_secs(30);

/// Starts the controller over this test's Nodes.
async fn start(cluster_cidr: &str, service_range: &str, mask: i32) -> Harness {
    let h = Harness::new(FakeCloud::new()).await;
    start_on(&h, cluster_cidr, service_range, mask);
    h
}

/// Starts the controller over the Nodes of `h`.
fn start_on(h: &Harness, cluster_cidr: &str, service_range: &str, mask: i32) {
    let masks = MaskSizeFlags {
        node_cidr_mask_size: mask,
        ..MaskSizeFlags::default()
    };
    let config = NodeIpamConfig::new(cluster_cidr, service_range, masks).expect("valid flags");
    let informer = h.node_informer();
    let controller = NodeIpamController::new(h.client.clone(), informer.clone(), &config, None)
        .expect("valid sets");
    h.start_informer(&informer);
    tokio::spawn(controller.run(h.cancel.clone()));
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidrs.clone())
        .unwrap_or_default()
}

/// Creates a Node and waits until it has pod CIDRs; returns them.
async fn node_with_cidrs(h: &Harness, prefix: &str) -> (String, Vec<String>) {
    let node = h.create_node(&h.new_node(prefix)).await;
    let name = node.name_any();
    let node = h.wait_node(&name, WAIT, |n| !pod_cidrs(n).is_empty()).await;
    let spec = node.spec.as_ref().expect("spec");
    // Go writes both fields; the single one is the first of the list.
    assert_eq!(spec.pod_cidr.as_ref(), pod_cidrs(&node).first(), "{spec:?}");
    (name, pod_cidrs(&node))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_nodes_get_distinct_pod_cidrs_from_the_cluster_cidr() {
    let h = start("10.244.0.0/16", "", 24).await;
    let mut seen = BTreeSet::new();
    for i in 0..3 {
        let (name, cidrs) = node_with_cidrs(&h, &format!("ipam-{i}")).await;
        assert_eq!(cidrs.len(), 1, "{name}: {cidrs:?}");
        let cidr = &cidrs[0];
        assert!(
            cidr.starts_with("10.244.") && cidr.ends_with(".0/24"),
            "{name}: {cidr}"
        );
        assert!(seen.insert(cidr.clone()), "{cidr} given twice: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cidrs_nodes_already_have_are_never_given_again() {
    let h = Harness::new(FakeCloud::new()).await;
    // As after a restart: Nodes with the first two of the four /24s, and two without, all
    // there before the controller starts. Every Node is queued at once, so only the pass
    // that marks the existing CIDRs used before any allocation keeps them from being given
    // again.
    for cidr in ["10.9.0.0/24", "10.9.1.0/24"] {
        h.create_node(&h.new_node_with_pod_cidrs("before", &[cidr]))
            .await;
    }
    let bare: Vec<String> = futures::future::join_all(
        (0..2).map(|_| async { h.create_node(&h.new_node("bare")).await.name_any() }),
    )
    .await;
    start_on(&h, "10.9.0.0/22", "", 24);
    let mut got = BTreeSet::new();
    for name in &bare {
        let node = h.wait_node(name, WAIT, |n| !pod_cidrs(n).is_empty()).await;
        got.extend(pod_cidrs(&node));
    }
    assert_eq!(
        got,
        BTreeSet::from(["10.9.2.0/24".to_owned(), "10.9.3.0/24".to_owned()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_range_is_a_warning_until_a_deleted_node_frees_a_cidr() {
    // Two /24s in the /23.
    let h = start("10.8.0.0/23", "", 24).await;
    let (first, first_cidrs) = node_with_cidrs(&h, "full").await;
    node_with_cidrs(&h, "full").await;
    let third = h.create_node(&h.new_node("full")).await.name_any();
    let message = h.wait_event(&third, REASON_CIDR_NOT_AVAILABLE, WAIT).await;
    assert_eq!(
        message,
        format!("Node {third} status is now: CIDRNotAvailable")
    );
    assert!(pod_cidrs(&h.wait_node(&third, WAIT, |_| true).await).is_empty());

    h.nodes()
        .delete(&first, &DeleteParams::default())
        .await
        .expect("delete node");
    let node = h
        .wait_node(&third, WAIT, |n| !pod_cidrs(n).is_empty())
        .await;
    assert_eq!(
        pod_cidrs(&node),
        first_cidrs,
        "the freed CIDR goes to the waiting Node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_nodes_get_one_cidr_of_each_family_outside_the_service_range() {
    // The Service range takes the first half of the IPv4 cluster CIDR.
    let h = start("10.7.0.0/22,fd00:7::/62", "10.7.0.0/23", 0).await;
    let (name, cidrs) = node_with_cidrs(&h, "dual").await;
    assert_eq!(cidrs, ["10.7.2.0/24", "fd00:7::/64"], "{name}");
    let (name, cidrs) = node_with_cidrs(&h, "dual").await;
    assert_eq!(cidrs, ["10.7.3.0/24", "fd00:7:0:1::/64"], "{name}");
}
