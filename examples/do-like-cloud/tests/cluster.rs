//! The DigitalOcean-like CCM in a real cluster, installed from its release manifest:
//! the simulator runs in the cluster's own network namespace (a cloud's API is outside the
//! cluster, as DigitalOcean's is), each node is a droplet with the node's address, and
//! `kubectl apply -f releases/v0.1.0/do-like-cloud.yaml` (the image, the token and the
//! API URL set, as its comments say) initialises the Nodes. Then:
//!
//! - failover: the leading CCM Pod is deleted; the standby takes over and gives a
//!   LoadBalancer Service created meanwhile its load balancer, exactly one;
//! - traffic: that load balancer (the simulator's data plane) answers at its ingress
//!   address with the Service's Pods, from the cluster's network, and stops listening once
//!   the Service is deleted;
//! - lifecycle: a node whose kubelet is stopped and whose droplet is powered off gets the
//!   shutdown taint; once the droplet is deleted, the Node is deleted.
//!
//! `scripts/test.sh` builds the image archives first (`scripts/images.sh --debug`). Needs root
//! and the cluster tier's packages (see `ccm_test::cluster`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::cluster::{LOAD_BALANCER_CIDR, WEB_IMAGE};
use ccm_test::fixtures::ServiceBuilder;
use ccm_test::net::http_get_over;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

const IMAGE: &str = "do-like-cloud-controller-manager";
const RELEASED_IMAGE: &str = "ghcr.io/ccm-rs/do-like-cloud-controller-manager:0.1.0";
const LOCAL_IMAGE: &str = "localhost/do-like-cloud-controller-manager:0.1.0";
const SIMULATOR: &str = "do-like-api-simulator";
const SIMULATOR_PORT: u16 = 8080;
const TOKEN: &str = "cluster-test-token";
const ADMIN_TOKEN: &str = "cluster-test-admin-token";
const WAIT: Duration = Duration::from_secs(120);
const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The release manifest with what its comments ask a user to set: the image (built here),
/// the API token and the API's URL (the simulator's).
fn release_manifest(api_url: &str) -> String {
    let text = std::fs::read_to_string(workspace().join("releases/v0.1.0/do-like-cloud.yaml"))
        .expect("the release manifest");
    let edits = [
        (
            format!("image: {RELEASED_IMAGE}"),
            format!("image: {LOCAL_IMAGE}"),
        ),
        ("token: REPLACE-ME".to_owned(), format!("token: {TOKEN}")),
        (
            "# apiUrl: http://do-like-api-simulator.example:8080".to_owned(),
            format!("apiUrl: {api_url}"),
        ),
    ];
    edits.iter().fold(text, |text, (from, to)| {
        assert_eq!(text.matches(from.as_str()).count(), 1, "{from}");
        text.replace(from.as_str(), to)
    })
}

/// The simulator's API through a loopback forward into the cluster, as the CCM sees it
/// (`Host` names the simulator's address in the cluster).
struct CloudApi {
    http: reqwest::Client,
    base: String,
    host: String,
}

impl CloudApi {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header("Host", &self.host)
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    async fn droplet_id(&self, name: &str) -> u64 {
        let list = self
            .send(
                reqwest::Method::GET,
                "/v2/droplets?per_page=200",
                TOKEN,
                None,
            )
            .await;
        list["droplets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .and_then(|d| d["id"].as_u64())
            .unwrap_or_else(|| panic!("no droplet {name}"))
    }

    async fn load_balancers(&self) -> Vec<serde_json::Value> {
        let list = self
            .send(
                reqwest::Method::GET,
                "/v2/load_balancers?per_page=200",
                TOKEN,
                None,
            )
            .await;
        list["load_balancers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| t.key.clone())
        .collect()
}

async fn leader(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("cloud-controller-manager")
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec?.holder_identity)
        .filter(|holder| !holder.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_manifest_runs_against_the_cloud_api() {
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let simulator = workspace().join(format!("target/images/context/{SIMULATOR}/{SIMULATOR}"));
    assert!(
        simulator.is_file(),
        "no {}: run scripts/images.sh --debug {SIMULATOR}",
        simulator.display()
    );
    let cluster = Cluster::builder()
        .nodes(3)
        .image(&archive)
        // A stopped kubelet's Node turns NotReady after 20 s instead of 50 s.
        .controller_manager_arg("--node-monitor-grace-period=20s")
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();

    // The cloud's API, in the cluster's namespace at its gateway address.
    let files = tempfile::tempdir().unwrap();
    let token_file = files.path().join("token");
    let admin_token_file = files.path().join("admin-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    std::fs::write(&admin_token_file, ADMIN_TOKEN).unwrap();
    let address = SocketAddr::from((cluster.gateway_address(), SIMULATOR_PORT));
    cluster
        .start_process(
            SIMULATOR,
            &simulator,
            &[
                format!("--listen={address}"),
                "--non-loopback=on".to_owned(),
                format!("--token-file={}", token_file.display()),
                format!("--admin-token-file={}", admin_token_file.display()),
                "--lb-activation-ms=500".to_owned(),
                format!("--lb-addresses={LOAD_BALANCER_CIDR}"),
            ],
        )
        .unwrap();
    let api = CloudApi {
        http: reqwest::Client::new(),
        base: format!("http://{}", cluster.forward(address).unwrap()),
        host: address.to_string(),
    };
    eventually("the simulator answering", WAIT, || async {
        api.http
            .get(format!("{}/v2/droplets", api.base))
            .header("Host", &api.host)
            .bearer_auth(TOKEN)
            .send()
            .await
            .map_err(|e| format!("{e}: {}", cluster.log(SIMULATOR)))
    })
    .await;

    // Each node is a droplet with the node's address.
    for node in cluster.nodes() {
        api.send(
            reqwest::Method::POST,
            "/admin/droplets",
            ADMIN_TOKEN,
            Some(serde_json::json!({
                "name": node.name(),
                "private_ip_address": node.address().to_string(),
            })),
        )
        .await;
    }

    cluster
        .apply(&release_manifest(&format!("http://{address}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let nodes = cluster
        .wait_initialised(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n--- simulator ---\n{}", cluster.log(SIMULATOR)));
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        let id = api.droplet_id(&name).await;
        assert_eq!(
            node.spec.as_ref().unwrap().provider_id.as_deref(),
            Some(&*format!("digitalocean://{id}"))
        );
        let ip = cluster.node(&name).unwrap().address().to_string();
        let addresses = node.status.clone().unwrap().addresses.unwrap_or_default();
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == ip),
            "{name}: {addresses:?}"
        );
    }

    // Failover: delete the leading Pod; create a Service while there is no leader.
    let system: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let ccm_pods = || async {
        system
            .list(&ListParams::default().labels("app=cloud-controller-manager"))
            .await
            .map(|list| list.items)
            .map_err(|e| e.to_string())
    };
    let first_leader = eventually("a leader", WAIT, || async {
        leader(&leases).await.ok_or("no holder")
    })
    .await;
    // The identity is `hostname_random`, and a host-network Pod's hostname is its node's.
    let leader_node = first_leader.rsplit_once('_').unwrap().0.to_owned();
    let leading_pod = eventually("the leader's Pod", WAIT, || async {
        ccm_pods()
            .await?
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&leader_node))
            .and_then(|p| p.metadata.name)
            .ok_or(format!("no CCM Pod on {leader_node}"))
    })
    .await;
    system
        .delete(&leading_pod, &DeleteParams::default())
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service = ServiceBuilder::load_balancer("web")
        .selector("app", "web")
        .port(80)
        .target_port(8080)
        .build();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": WEB_IMAGE}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let new_leader = eventually("another leader", WAIT, || async {
        match leader(&leases).await {
            Some(holder) if holder != first_leader => Ok(holder),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    let ingress = eventually("the Service's ingress", WAIT, || async {
        let service = services.get("web").await.map_err(|e| e.to_string())?;
        service
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .and_then(|ingress| ingress.first()?.ip.clone())
            .ok_or(format!("{:?}", service.status))
    })
    .await;
    let load_balancers = api.load_balancers().await;
    assert_eq!(
        load_balancers.len(),
        1,
        "one load balancer: {load_balancers:#?}"
    );
    eprintln!("failover: {first_leader} -> {new_leader}");

    // Traffic: the load balancer's address is in the range the cluster routes to the
    // simulator, and requests sent there are answered by the web Pods.
    let ip: std::net::Ipv4Addr = ingress.parse().unwrap();
    let range = LOAD_BALANCER_CIDR.split('/').next().unwrap();
    assert_eq!(
        ip.octets()[..3],
        range.parse::<std::net::Ipv4Addr>().unwrap().octets()[..3],
        "{ip} is in {LOAD_BALANCER_CIDR}"
    );
    let lb = SocketAddr::from((ip, 80));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let answered = std::cell::RefCell::new(std::collections::BTreeSet::new());
    eventually(
        "both web Pods answering through the load balancer",
        WAIT,
        || async {
            let answer = http_get(&cluster, lb).await?;
            let names: Vec<String> = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            let mut answered = answered.borrow_mut();
            answered.insert(answer);
            assert!(
                answered.iter().all(|a| names.contains(a)),
                "answers {answered:?} come from the web Pods {names:?}"
            );
            (answered.len() == 2)
                .then_some(())
                .ok_or(format!("answered by {answered:?} so far"))
        },
    )
    .await;

    // Lifecycle: a node with no CCM Pod, its kubelet stopped. First the Deployment settles:
    // the deleted Pod gone, its replacement placed and ready.
    let busy: Vec<String> = eventually("two CCM Pods ready, none terminating", WAIT, || async {
        let pods = ccm_pods().await?;
        let ready = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        let settled = pods.len() == 2
            && pods
                .iter()
                .all(|p| p.metadata.deletion_timestamp.is_none() && ready(p));
        if settled {
            Ok(pods
                .iter()
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect())
        } else {
            Err(format!(
                "{:?}",
                pods.iter()
                    .map(|p| (
                        &p.metadata.name,
                        p.metadata.deletion_timestamp.is_some(),
                        ready(p)
                    ))
                    .collect::<Vec<_>>()
            ))
        }
    })
    .await;
    let victim = cluster
        .nodes()
        .iter()
        .map(|n| n.name().to_owned())
        .find(|name| !busy.contains(name))
        .expect("a node without a CCM Pod");
    cluster.stop_kubelet(&victim).await.unwrap();
    let id = api.droplet_id(&victim).await;
    api.send(
        reqwest::Method::POST,
        &format!("/admin/droplets/{id}/power_off"),
        ADMIN_TOKEN,
        None,
    )
    .await;
    let nodes_api: Api<Node> = Api::all(client.clone());
    eventually("the shutdown taint", WAIT, || async {
        let node = nodes_api.get(&victim).await.map_err(|e| e.to_string())?;
        let keys = taint_keys(&node);
        keys.iter()
            .any(|k| k == SHUTDOWN_TAINT)
            .then_some(())
            .ok_or(format!("taints {keys:?}"))
    })
    .await;
    api.send(
        reqwest::Method::DELETE,
        &format!("/admin/droplets/{id}"),
        ADMIN_TOKEN,
        None,
    )
    .await;
    eventually("the Node deleted", WAIT, || async {
        match nodes_api.get_opt(&victim).await {
            Ok(None) => Ok(()),
            Ok(Some(node)) => Err(format!("taints {:?}", taint_keys(&node))),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    // The other Nodes stay.
    for node in cluster.nodes().iter().filter(|n| n.name() != victim) {
        assert!(nodes_api.get_opt(node.name()).await.unwrap().is_some());
    }

    // The Service deleted: its load balancer goes, and nothing listens at its address.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the load balancer's address closed", WAIT, || async {
        match cluster.connect(lb).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(api.load_balancers().await.is_empty());
}

/// The body of `GET /` at `target` inside the cluster, when the answer is a 200.
async fn http_get(cluster: &Cluster, target: SocketAddr) -> Result<String, String> {
    let stream = cluster.connect(target).await.map_err(|e| e.to_string())?;
    match http_get_over(stream, &target.to_string(), "/").await? {
        (200, body) => Ok(body.trim().to_owned()),
        (status, body) => Err(format!("answered {status}: {body:?}")),
    }
}
