//! The cluster tier, dual-stack (`ClusterBuilder::dual_stack`): Nodes with an IPv6 pod
//! CIDR beside the IPv4 one (kube-controller-manager's node-ipam) and an IPv6 address
//! beside the IPv4 one (the kubelet's `--node-ip`), Pods with an address of each family, a
//! Pod reached over IPv6 from the cluster's network, and a Pod on one node reaching a
//! `RequireDualStack` Service's IPv6 ClusterIP through kube-proxy (ip6tables) to a Pod on
//! the other.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ccm_test::cluster::{PodNetwork, WEB_IMAGE};
use ccm_test::net::http_get_over;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::PostParams;

use common::remove_uninitialized_taint;

const WAIT: Duration = Duration::from_secs(120);

/// `GET path` of `target` from the cluster's network: the body of a 200.
async fn get(cluster: &Cluster, target: SocketAddr, path: &str) -> Result<String, String> {
    let stream = cluster.connect(target).await.map_err(|e| e.to_string())?;
    match http_get_over(stream, &target.to_string(), path).await? {
        (200, body) => Ok(body.trim().to_owned()),
        (status, body) => Err(format!("answered {status}: {}", body.trim())),
    }
}

fn web_pod(name: &str, node: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": WEB_IMAGE}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_cluster_carries_both_families() {
    let cluster = Cluster::builder()
        .dual_stack(true)
        .pod_network(PodNetwork::AtPodCidr)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());

    // As a CCM would: the taint removed (the addresses are the kubelet's here).
    for node in cluster.nodes() {
        remove_uninitialized_taint(&nodes, node.name()).await;
    }
    for node in cluster.nodes() {
        let v6 = node.address_v6().expect("a dual-stack node's IPv6 address");
        let object = eventually("a pod CIDR of each family", WAIT, || async {
            let object = nodes.get(node.name()).await.map_err(|e| e.to_string())?;
            let cidrs = object.spec.as_ref().and_then(|s| s.pod_cidrs.clone());
            match cidrs.as_deref() {
                Some([v4, v6]) if v4.starts_with("10.244.") && v6.starts_with("fd00:10:244:") => {
                    Ok(object)
                }
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let annotation = object
            .metadata
            .annotations
            .unwrap_or_default()
            .get("alpha.kubernetes.io/provided-node-ip")
            .cloned();
        assert_eq!(
            annotation.as_deref(),
            Some(&*format!("{},{v6}", node.address())),
            "the kubelet's --node-ip, both families"
        );
    }

    // A Pod of each family's address on the worker, reached over IPv6 from outside.
    let (control_plane, worker) = (cluster.nodes()[0].name(), cluster.nodes()[1].name());
    let labels = serde_json::json!({"app": "web"});
    let server = cluster
        .run_pod("default", &web_pod("server", worker, labels), WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ips: Vec<IpAddr> = server
        .status
        .unwrap()
        .pod_ips
        .unwrap_or_default()
        .iter()
        .map(|ip| ip.ip.parse().unwrap())
        .collect();
    assert!(
        matches!(ips.as_slice(), [IpAddr::V4(_), IpAddr::V6(v6)] if v6.segments()[..3] == [0xfd00, 0x10, 0x244]),
        "{ips:?}"
    );
    let body = eventually("the Pod answering over IPv6", WAIT, || {
        get(&cluster, SocketAddr::new(ips[1], 8080), "/")
    })
    .await;
    assert_eq!(body, "server");

    // A Pod on the other node reaches the Service's IPv6 ClusterIP (kube-proxy, ip6tables).
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": 8080}],
        }
    }))
    .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let created = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let cluster_ips = created.spec.unwrap().cluster_ips.unwrap_or_default();
    assert_eq!(cluster_ips.len(), 2, "{cluster_ips:?}");
    let service_v6 = &cluster_ips[1];
    assert!(service_v6.starts_with("fd00:10:96::"), "{service_v6}");
    let client_pod = cluster
        .run_pod(
            "default",
            &web_pod("client", control_plane, serde_json::json!({})),
            WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client_v4: IpAddr = client_pod.status.unwrap().pod_ip.unwrap().parse().unwrap();
    let path = format!("/relay/{service_v6}/80");
    let relayed = eventually(
        "the Service's IPv6 ClusterIP from the other node",
        WAIT,
        || get(&cluster, SocketAddr::new(client_v4, 8080), &path),
    )
    .await;
    assert_eq!(relayed, "server");
}
