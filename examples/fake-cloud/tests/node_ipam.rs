//! `fake-cloud-controller-manager` with the node-ipam controller, as an operator runs it
//! (`--controllers=*,nodeipam --allocate-node-cidrs --cluster-cidr=… --node-cidr-mask-size=…`),
//! against a real kube-apiserver + etcd: Nodes get pod CIDRs and a deleted Node's is freed;
//! bad node-ipam flags stop startup naming the flag; and the controller stays off unless
//! named.

mod common;

use ccm_test::net::{free_port, http_get};
use ccm_test::process::CcmProcess;
use ccm_test::{ControlPlane, unique_name};
use common::{BIN, WAIT, create_node};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};

const IPAM: [&str; 4] = [
    "--controllers=*,nodeipam",
    "--allocate-node-cidrs",
    "--cluster-cidr=10.244.0.0/16",
    "--node-cidr-mask-size=24",
];

/// The flags of a controller manager for `cp` with the node-ipam flags `ipam` (after the
/// base ones, so they win), serving plain HTTP on `port`.
fn args(cp: &ControlPlane, dir: &std::path::Path, ipam: &[&str], port: u16) -> Vec<String> {
    let mut extra = ipam.to_vec();
    extra.extend(["--leader-elect=false", "--configure-cloud-routes=false"]);
    common::args_serving_on(cp, dir, port, &extra)
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidrs.clone())
        .unwrap_or_default()
}

async fn wait_pod_cidrs(nodes: &Api<Node>, name: &str, ccm: &CcmProcess) -> Vec<String> {
    ccm.eventually(&format!("node {name} to get pod CIDRs"), WAIT, || async {
        let node = nodes.get(name).await.map_err(|e| e.to_string())?;
        let cidrs = pod_cidrs(&node);
        if cidrs.is_empty() {
            Err(format!("{:?}", node.spec))
        } else {
            Ok(cidrs)
        }
    })
    .await
}

#[tokio::test]
async fn nodes_get_pod_cidrs_and_a_deleted_node_frees_its_own() {
    let cp = common::control_plane(ControlPlane::builder()).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ccm = CcmProcess::start(BIN, args(&cp, dir.path(), &IPAM, port));
    let nodes: Api<Node> = Api::all(cp.client().unwrap());

    let (a, b) = (unique_name("ipam-a"), unique_name("ipam-b"));
    create_node(&nodes, &a).await;
    create_node(&nodes, &b).await;
    let a_cidrs = wait_pod_cidrs(&nodes, &a, &ccm).await;
    let b_cidrs = wait_pod_cidrs(&nodes, &b, &ccm).await;
    for cidrs in [&a_cidrs, &b_cidrs] {
        assert_eq!(cidrs.len(), 1, "{cidrs:?}");
        assert!(
            cidrs[0].starts_with("10.244.") && cidrs[0].ends_with(".0/24"),
            "{cidrs:?}"
        );
    }
    assert_ne!(a_cidrs, b_cidrs);

    nodes.delete(&a, &DeleteParams::default()).await.unwrap();
    let label = "{clusterCIDR=\"10.244.0.0/16\"}";
    ccm.eventually("the deleted node's CIDR to be released", WAIT, || async {
        let (status, metrics) = http_get(port, "/metrics").await;
        let want = [
            format!("node_ipam_controller_cidrset_cidrs_allocations_total{label} 2"),
            format!("node_ipam_controller_cidrset_cidrs_releases_total{label} 1"),
            format!("node_ipam_controller_cirdset_max_cidrs{label} 256"),
            // One of 256 subnets still used.
            format!("node_ipam_controller_cidrset_usage_cidrs{label} 0.00390625"),
        ];
        match want
            .iter()
            .find(|w| !metrics.lines().any(|l| l == w.as_str()))
        {
            None if status == 200 => Ok(()),
            missing => Err(format!("{status}: {missing:?} not in\n{metrics}")),
        }
    })
    .await;
}

#[tokio::test]
async fn bad_node_ipam_flags_stop_startup_naming_the_flag() {
    let cp = common::control_plane(ControlPlane::builder()).await;
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["--node-cidr-mask-size=8"], "--node-cidr-mask-size"),
        (
            &["--node-cidr-mask-size-ipv6=64"],
            "--node-cidr-mask-size-ipv6",
        ),
        (
            &["--cidr-allocator-type=CloudAllocator"],
            "--cidr-allocator-type",
        ),
        (
            &["--cluster-cidr=10.244.0.0/16,10.245.0.0/16"],
            "--cluster-cidr",
        ),
        (
            &["--service-cluster-ip-range=10.0.0.0/8"],
            "--service-cluster-ip-range",
        ),
    ];
    for (bad, flag) in cases {
        let mut ipam = IPAM.to_vec();
        ipam.extend_from_slice(bad);
        let run = CcmProcess::builder(BIN)
            .args(args(&cp, dir.path(), &ipam, 0))
            .run(WAIT)
            .await;
        assert_eq!(run.status.code(), Some(1), "{bad:?}:\n{}", run.log);
        let line = run
            .log
            .lines()
            .find(|l| l.contains(flag) && l.contains("rror"))
            .unwrap_or_else(|| panic!("{bad:?}: no error naming {flag}:\n{}", run.log));
        assert!(line.len() < 400, "one short line: {line}");
    }
}

#[tokio::test]
async fn allocate_node_cidrs_alone_starts_no_allocator() {
    let cp = common::control_plane(ControlPlane::builder()).await;
    let dir = tempfile::tempdir().unwrap();
    // An impossible mask size: checked only when the controller is going to run.
    let flags = [
        "--allocate-node-cidrs",
        "--cluster-cidr=10.244.0.0/16",
        "--node-cidr-mask-size=8",
    ];
    let ccm = CcmProcess::start(BIN, args(&cp, dir.path(), &flags, free_port()));
    ccm.wait_log("starting controller", WAIT).await;
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("no-ipam");
    create_node(&nodes, &name).await;
    // The cloud-node controller initialises it; nothing gives it pod CIDRs.
    common::wait_initialized(&nodes, &name, &ccm).await;
    let node = nodes.get(&name).await.unwrap();
    assert!(pod_cidrs(&node).is_empty(), "{:?}", node.spec);
    let log = ccm.log();
    assert!(
        log.lines()
            .any(|l| l.contains("node-ipam-controller") && l.contains("disabled by --controllers")),
        "{log}"
    );
}
