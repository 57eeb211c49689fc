//! A real cluster that leaves pod CIDRs to the CCM: kube-controller-manager runs with
//! `--allocate-node-cidrs=false`, the release manifest's CCM with
//! `--controllers=*,nodeipam --allocate-node-cidrs=true`. Our node-ipam controller gives
//! each Node its pod CIDR, the kubelets' pod networks follow, a Pod gets an address from
//! its Node's CIDR, and the route controller routes every CIDR (`NetworkUnavailable` False,
//! `RouteCreated`).
//!
//! Needs root, the cluster tier's packages and the image archive, as `tests/cluster.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::cluster::PAUSE_IMAGE;
use ccm_test::fixtures::node_condition;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};

const IMAGE: &str = "fake-cloud-controller-manager";
const RELEASED_IMAGE: &str = "ghcr.io/ccm-rs/fake-cloud-controller-manager:0.1.0";
const LOCAL_IMAGE: &str = "localhost/fake-cloud-controller-manager:0.1.0";
const WAIT: Duration = Duration::from_secs(120);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The release manifest with the local image and the node-ipam flags added to the CCM's.
fn manifest() -> String {
    let text = std::fs::read_to_string(workspace().join("releases/v0.1.0/fake-cloud.yaml"))
        .expect("the release manifest");
    let image = format!("image: {RELEASED_IMAGE}");
    let cidr = "            - --cluster-cidr=10.244.0.0/16\n";
    assert_eq!(text.matches(&image).count(), 1, "one container image");
    assert_eq!(text.matches(cidr).count(), 1, "one --cluster-cidr argument");
    text.replace(&image, &format!("image: {LOCAL_IMAGE}")).replace(
        cidr,
        &format!(
            "{cidr}            - --controllers=*,nodeipam\n            - --allocate-node-cidrs=true\n"
        ),
    )
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidrs.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_node_ipam_gives_the_pod_cidrs_and_routes_follow() {
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let cluster = Cluster::builder()
        .image(&archive)
        .controller_manager_arg("--allocate-node-cidrs=false")
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in cluster.nodes() {
        let node = nodes.get(node.name()).await.unwrap();
        assert_eq!(
            pod_cidrs(&node),
            Vec::<String>::new(),
            "kube-controller-manager gives none"
        );
    }

    cluster.apply(&manifest()).unwrap_or_else(|e| panic!("{e}"));
    cluster
        .wait_initialised(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Every Node gets one /24 of the cluster CIDR, none twice, and a route to it.
    let names: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.name().to_owned())
        .collect();
    let routed = eventually("pod CIDRs on every Node, each routed", WAIT, || async {
        let mut cidrs = BTreeSet::new();
        for name in &names {
            let node = nodes.get(name).await.map_err(|e| e.to_string())?;
            let theirs = pod_cidrs(&node);
            let [cidr] = theirs.as_slice() else {
                return Err(format!("{name}: pod CIDRs {theirs:?}"));
            };
            let route = node_condition(&node, "NetworkUnavailable");
            if route != Some(("False".to_owned(), "RouteCreated".to_owned())) {
                return Err(format!("{name}: NetworkUnavailable {route:?}"));
            }
            cidrs.insert((name.clone(), cidr.clone()));
        }
        Ok(cidrs)
    })
    .await;
    let distinct: BTreeSet<&String> = routed.iter().map(|(_, c)| c).collect();
    assert_eq!(distinct.len(), names.len(), "{routed:?}");
    for (name, cidr) in &routed {
        assert!(
            cidr.starts_with("10.244.") && cidr.ends_with(".0/24"),
            "{name}: {cidr}"
        );
    }

    // Written by our CCM (its leader logs each), not by kube-controller-manager. Read
    // through the kubelets, which can be slow to answer on a loaded machine: retried.
    eventually(
        "the CCM's log to name every Node's pod CIDRs",
        WAIT,
        || async {
            let out = cluster
                .kubectl()
                .ok_or("no kubectl")?
                .args([
                    "logs",
                    "-n",
                    "kube-system",
                    "-l",
                    "app=cloud-controller-manager",
                ])
                .args(["--tail=-1"])
                .output()
                .map_err(|e| e.to_string())?;
            let logs = String::from_utf8_lossy(&out.stdout);
            match names.iter().find(|name| {
                !logs
                    .lines()
                    .any(|l| l.contains("set node pod CIDRs") && l.contains(name.as_str()))
            }) {
                None => Ok(()),
                Some(name) => Err(format!(
                    "{name} not in the CCM's log ({}; stderr: {}):\n{logs}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            }
        },
    )
    .await;

    // A Pod on the worker gets an address from the worker's CIDR: the pod network used it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "workload"},
        "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running = cluster
        .wait_pod_running("default", "workload", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let node = running.spec.unwrap().node_name.unwrap();
    let ip = running.status.unwrap().pod_ip.unwrap();
    let (_, cidr) = routed.iter().find(|(n, _)| *n == node).unwrap();
    let prefix = cidr.trim_end_matches("0/24");
    assert!(ip.starts_with(prefix), "{ip} in {node}'s {cidr}");

    // The CCM's own Pods are running on host network throughout.
    let system: Api<Pod> = Api::namespaced(client, "kube-system");
    let ccm = system
        .list(&ListParams::default().labels("app=cloud-controller-manager"))
        .await
        .unwrap();
    assert!(!ccm.items.is_empty());
}
