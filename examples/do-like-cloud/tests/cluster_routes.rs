//! Pod traffic over the CCM's routes, in a real cluster: the cluster tier routes no pod CIDR
//! itself ([`PodRoutes::Cloud`]), and the DO-like simulator, in the cluster's network
//! namespace (the cloud's network), turns each route of its API into a route of that
//! namespace to the droplet's private address (`--kernel-routes on`), as a VPC's route table
//! does. So a Pod reaches a Pod on another node only if the CCM's route controller (on in
//! the release manifest: `--cluster-cidr`, `--configure-cloud-routes` by default) put the
//! right routes into the cloud. Then:
//!
//! - a Pod on the worker asks a Pod on the control-plane node (`GET /relay/…` of the web
//!   workload) and gets its name; both Nodes have `NetworkUnavailable` False
//!   (`RouteCreated`);
//! - the control-plane node's route deleted through the cloud's API (behind the CCM's back):
//!   the traffic stops at once, and comes back when the CCM puts the route back, within its
//!   reconciliation period;
//! - the worker's Node deleted (its kubelet stopped first, so that it does not register
//!   again): the CCM deletes its route, and its Pod, still running, is unreachable.
//!
//! `scripts/test.sh` builds the image archives first (`scripts/images.sh --debug`). Needs root
//! and the cluster tier's packages (see `ccm_test::cluster`).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ccm_test::cluster::{PodRoutes, WEB_IMAGE};
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::DeleteParams;

use common::{CloudApi, IMAGE, SIMULATOR, TOKEN, WAIT, http_get, release_manifest, workspace};

/// The CCM's route reconciliation period in this test (Go's default is 10 s): long enough
/// that the test sees the traffic stop before the CCM puts a deleted route back.
const ROUTE_PERIOD: Duration = Duration::from_secs(30);
/// The web workload's port.
const WEB_PORT: u16 = 8080;

/// A web Pod bound to `node` (its name is what it answers).
fn web_pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "web", "image": WEB_IMAGE}],
        }
    }))
    .unwrap()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("a running Pod's address")
}

impl CloudApi {
    /// The cloud's routes: (ID, destination, target).
    async fn routes(&self) -> Vec<(u64, String, String)> {
        let list = self
            .send(
                reqwest::Method::GET,
                "/v2/x-routes?per_page=200",
                TOKEN,
                None,
            )
            .await
            .unwrap();
        list["routes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| {
                (
                    r["id"].as_u64().unwrap(),
                    r["destination"].as_str().unwrap().to_owned(),
                    r["target"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

/// What `from` (a web Pod's address) gets when it asks `to` (another's) for its name.
async fn relay(cluster: &Cluster, from: &str, to: &str) -> Result<String, String> {
    let target = SocketAddr::new(from.parse().unwrap(), WEB_PORT);
    let stream = cluster.connect(target).await.map_err(|e| e.to_string())?;
    let path = format!("/relay/{to}/{WEB_PORT}");
    match ccm_test::net::http_get_over(stream, &target.to_string(), &path).await? {
        (200, body) => Ok(body.trim().to_owned()),
        (status, body) => Err(format!("answered {status}: {}", body.trim())),
    }
}

/// The `NetworkUnavailable` condition of `node`: (status, reason).
fn network_unavailable(node: &Node) -> Option<(String, String)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_traffic_between_nodes_flows_over_the_ccms_routes() {
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let simulator = common::simulator_binary();
    let cluster = Cluster::builder()
        .image(&archive)
        .pod_routes(PodRoutes::Cloud)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let api = CloudApi::start_with(&cluster, &simulator, &["--kernel-routes=on"]).await;
    for node in cluster.nodes() {
        api.droplet(node.name(), node.address()).await;
    }
    let period = format!("--route-reconciliation-period={}s", ROUTE_PERIOD.as_secs());
    cluster
        .apply(&release_manifest(&api.url(), &[&period]))
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .wait_initialised(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n--- simulator ---\n{}", cluster.log(SIMULATOR)));

    let (control_plane, worker) = (cluster.nodes()[0].name(), cluster.nodes()[1].name());
    let mut pods = Vec::new();
    for (name, node) in [("here", worker), ("there", control_plane)] {
        let pod = cluster
            .run_pod("default", &web_pod(name, node), WAIT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        pods.push(pod_ip(&pod));
    }
    let (here, there) = (pods[0].clone(), pods[1].clone());

    // Across nodes, through the cloud's routes only.
    eventually(
        "the worker's Pod reaching the other node's",
        WAIT,
        || async {
            match relay(&cluster, &here, &there).await? {
                body if body == "there" => Ok(()),
                body => Err(format!("answered {body:?}")),
            }
        },
    )
    .await;
    let routes = api.routes().await;
    assert_eq!(routes.len(), 2, "one route per Node: {routes:?}");
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("NetworkUnavailable False on every Node", WAIT, || async {
        let list = nodes
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let conditions: Vec<_> = list.items.iter().map(network_unavailable).collect();
        let created = Some(("False".to_owned(), "RouteCreated".to_owned()));
        if conditions.iter().all(|c| *c == created) {
            Ok(())
        } else {
            Err(format!("{conditions:?}"))
        }
    })
    .await;

    // The control-plane node's route deleted behind the CCM's back: no traffic until the CCM
    // puts it back. (If the CCM put it back before a request saw it gone, try again.)
    let mut outage = None;
    for _ in 0..3 {
        let (id, destination, _) = eventually("the route in the cloud", WAIT, || async {
            api.routes()
                .await
                .into_iter()
                .find(|(_, _, target)| target == control_plane)
                .ok_or("no route to the control-plane node")
        })
        .await;
        api.send(
            reqwest::Method::DELETE,
            &format!("/v2/x-routes/{id}"),
            TOKEN,
            None,
        )
        .await
        .unwrap();
        let deleted = Instant::now();
        let mut failed = None;
        while deleted.elapsed() < Duration::from_secs(5) {
            if let Err(e) = relay(&cluster, &here, &there).await {
                failed = Some(e);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let Some(error) = failed else { continue };
        eprintln!("route {destination} deleted: {error}");
        eventually("the route put back", ROUTE_PERIOD * 2, || async {
            relay(&cluster, &here, &there).await.map(drop)
        })
        .await;
        outage = Some(deleted.elapsed());
        break;
    }
    let outage = outage.expect("the traffic stopped when the route was deleted");
    eprintln!("traffic back {outage:?} after the route was deleted");
    assert!(
        outage <= ROUTE_PERIOD + Duration::from_secs(5),
        "back within the reconciliation period: {outage:?}"
    );

    // The worker's Node deleted: its route goes, and its Pod (still running) is unreachable.
    cluster.stop_kubelet(worker).await.unwrap();
    nodes
        .delete(worker, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the deleted Node's route gone", WAIT, || async {
        let routes = api.routes().await;
        if routes.iter().any(|(_, _, target)| target == worker) {
            Err(format!("{routes:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    eventually("the deleted Node's Pod unreachable", WAIT, || async {
        let target = SocketAddr::new(here.parse().unwrap(), WEB_PORT);
        match http_get(&cluster, target).await {
            Ok(body) => Err(format!("still answers {body:?}")),
            Err(_) => Ok(()),
        }
    })
    .await;
}
