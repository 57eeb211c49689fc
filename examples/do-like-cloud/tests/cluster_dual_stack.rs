//! The DO-like CCM in a dual-stack cluster (`ClusterBuilder::dual_stack`): each node is a
//! droplet with the node's IPv4 and IPv6 addresses, the release manifest's CCM is given
//! both cluster CIDRs, and the cluster routes no pod CIDR itself (the simulator's route
//! table, `--kernel-routes on`, carries the CCM's routes of both families). Then:
//!
//! - the Nodes are initialised with addresses of both families from the cloud (the
//!   kubelets' `provided-node-ip` names both);
//! - the route controller puts a route of each family per Node into the cloud, and a Pod
//!   on one node reaches a Pod on the other over IPv6 through them;
//! - a `PreferDualStack` LoadBalancer Service with DigitalOcean's
//!   `service.beta.kubernetes.io/do-loadbalancer-network-stack: DUALSTACK` gets an ingress
//!   of each family, and the load balancer (the simulator's data plane) answers on both.
//!
//! `scripts/test.sh` builds the image archives first (`scripts/images.sh --debug`). Needs root
//! and the cluster tier's packages (see `ccm_test::cluster`).

mod common;

use std::net::{IpAddr, SocketAddr};

use ccm_test::cluster::{
    CLUSTER_CIDR, CLUSTER_CIDR_V6, LOAD_BALANCER_CIDR_V6, PodRoutes, WEB_IMAGE,
};
use ccm_test::net::http_get_over;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;

use common::{CloudApi, IMAGE, SIMULATOR, TOKEN, WAIT, release_manifest, workspace};

const NETWORK_STACK: &str = "service.beta.kubernetes.io/do-loadbalancer-network-stack";

/// `GET path` of `target` from the cluster's network: the body of a 200.
async fn get(cluster: &Cluster, target: SocketAddr, path: &str) -> Result<String, String> {
    let stream = cluster.connect(target).await.map_err(|e| e.to_string())?;
    match http_get_over(stream, &target.to_string(), path).await? {
        (200, body) => Ok(body.trim().to_owned()),
        (status, body) => Err(format!("answered {status}: {}", body.trim())),
    }
}

fn web_pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": WEB_IMAGE}]}
    }))
    .unwrap()
}

fn pod_ips(pod: &Pod) -> Vec<IpAddr> {
    pod.status
        .iter()
        .flat_map(|s| s.pod_ips.iter().flatten())
        .filter_map(|ip| ip.ip.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_cluster_gets_routes_and_load_balancers_of_both_families() {
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let simulator = common::simulator_binary();
    let cluster = Cluster::builder()
        .dual_stack(true)
        .pod_routes(PodRoutes::Cloud)
        .image(&archive)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let v6_range = format!("--lb-addresses-v6={LOAD_BALANCER_CIDR_V6}");
    let api = CloudApi::start_with(&cluster, &simulator, &["--kernel-routes=on", &v6_range]).await;
    for node in cluster.nodes() {
        api.dual_stack_droplet(node.name(), node.address(), node.address_v6())
            .await;
    }
    let cidrs = format!("--cluster-cidr={CLUSTER_CIDR},{CLUSTER_CIDR_V6}");
    cluster
        .apply(&release_manifest(&api.url(), &[&cidrs]))
        .unwrap_or_else(|e| panic!("{e}"));
    let nodes = cluster
        .wait_initialised(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n--- simulator ---\n{}", cluster.log(SIMULATOR)));
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        let machine = cluster.node(&name).unwrap();
        let addresses: Vec<String> = node
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .map(|a| a.address.clone())
            .collect();
        for want in [
            machine.address().to_string(),
            machine.address_v6().unwrap().to_string(),
        ] {
            assert!(addresses.contains(&want), "{name}: {want} in {addresses:?}");
        }
    }

    // A route of each family per Node, and IPv6 Pod traffic across nodes over them.
    eventually("a route of each family per Node", WAIT, || async {
        let list = api
            .send(
                reqwest::Method::GET,
                "/v2/x-routes?per_page=200",
                TOKEN,
                None,
            )
            .await?;
        let routes = list["routes"].as_array().cloned().unwrap_or_default();
        let v6 = routes
            .iter()
            .filter(|r| r["destination"].as_str().is_some_and(|d| d.contains(':')))
            .count();
        if routes.len() == 2 * nodes.len() && v6 == nodes.len() {
            Ok(())
        } else {
            Err(format!("{routes:?}"))
        }
    })
    .await;
    let (control_plane, worker) = (cluster.nodes()[0].name(), cluster.nodes()[1].name());
    let mut ips = Vec::new();
    for (name, node) in [("here", worker), ("there", control_plane)] {
        let pod = cluster
            .run_pod("default", &web_pod(name, node), WAIT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let found = pod_ips(&pod);
        assert!(
            matches!(found.as_slice(), [IpAddr::V4(_), IpAddr::V6(_)]),
            "{found:?}"
        );
        ips.push(found);
    }
    let path = format!("/relay/{}/8080", ips[1][1]);
    let relayed = eventually("a Pod reaching another node's Pod over IPv6", WAIT, || {
        get(&cluster, SocketAddr::new(ips[0][0], 8080), &path)
    })
    .await;
    assert_eq!(relayed, "there");

    // A dual-stack load balancer: an ingress of each family, both answering.
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "annotations": {NETWORK_STACK: "DUALSTACK"}},
        "spec": {
            "type": "LoadBalancer",
            "ipFamilyPolicy": "PreferDualStack",
            "selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": 8080}],
        }
    }))
    .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let ingress = eventually("an ingress of each family", WAIT, || async {
        let service = services.get("web").await.map_err(|e| e.to_string())?;
        let ips: Vec<IpAddr> = service
            .status
            .iter()
            .flat_map(|s| s.load_balancer.iter())
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter_map(|i| i.ip.as_deref()?.parse().ok())
            .collect();
        match ips.as_slice() {
            [IpAddr::V4(_), IpAddr::V6(_)] => Ok(ips),
            _ => Err(format!("{ips:?}")),
        }
    })
    .await;
    for ip in ingress {
        let body = eventually("the load balancer answering", WAIT, || {
            get(&cluster, SocketAddr::new(ip, 80), "/")
        })
        .await;
        assert!(["here", "there"].contains(&body.as_str()), "{ip}: {body}");
    }
}
