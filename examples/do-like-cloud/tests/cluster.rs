//! The DigitalOcean-like CCM in a real cluster, installed from its release manifest:
//! the simulator runs in the cluster's own network namespace (a cloud's API is outside the
//! cluster, as DigitalOcean's is), each node is a droplet with the node's address, and
//! `kubectl apply -f releases/v0.1.0/do-like-cloud.yaml` (the image, the token and the
//! API URL set, as its comments say) initialises the Nodes. The cluster routes no pod CIDR
//! itself: Pods reach each other across nodes only over the routes the CCM's route
//! controller puts into the simulator's route table (`--kernel-routes on`). Then:
//!
//! - failover: the leading CCM Pod is deleted; the standby takes over and gives a
//!   LoadBalancer Service created meanwhile its load balancer, exactly one;
//! - traffic: that load balancer (the simulator's data plane) answers at its ingress
//!   address with the Service's Pods, from the cluster's network, and stops listening once
//!   the Service is deleted;
//! - swap: load balancers made as DigitalOcean's own CCM makes them (its requests replayed
//!   while ours is scaled to zero) are taken over by ours, scaled back up, while requests
//!   run through their addresses: none re-created, no address changed, no request failed;
//! - lifecycle: a node whose kubelet is stopped and whose droplet is powered off gets the
//!   shutdown taint; once the droplet is deleted, the Node is deleted.
//!
//! `scripts/test.sh` builds the image archives first (`scripts/images.sh --debug`). Needs root
//! and the cluster tier's packages (see `ccm_test::cluster`).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use ccm_test::cluster::{LOAD_BALANCER_CIDR, PodRoutes, WEB_IMAGE};
use ccm_test::fixtures::ServiceBuilder;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use common::{
    ADMIN_TOKEN, CloudApi, IMAGE, SIMULATOR, TOKEN, WAIT, http_get, ingress_ip, release_manifest,
    scale, simulator_binary, taint_keys, workspace,
};

const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";

impl CloudApi {
    /// The ID of the droplet called `name`.
    async fn droplet_id(&self, name: &str) -> u64 {
        let list = self
            .send(
                reqwest::Method::GET,
                "/v2/droplets?per_page=200",
                TOKEN,
                None,
            )
            .await
            .unwrap();
        list["droplets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .and_then(|d| d["id"].as_u64())
            .unwrap_or_else(|| panic!("no droplet {name}"))
    }
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
    let simulator = simulator_binary();
    let cluster = Cluster::builder()
        .nodes(3)
        .image(&archive)
        // A stopped kubelet's Node turns NotReady after 20 s instead of 50 s.
        .controller_manager_arg("--node-monitor-grace-period=20s")
        // Pods reach each other across nodes (a load balancer's traffic, forwarded by
        // kube-proxy to a Pod on another node) only over the CCM's routes.
        .pod_routes(PodRoutes::Cloud)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();

    // The cloud's API, in the cluster's namespace at its gateway address.
    let api = CloudApi::start_with(&cluster, &simulator, &["--kernel-routes=on"]).await;

    // Each node is a droplet with the node's address.
    for node in cluster.nodes() {
        api.droplet(node.name(), node.address()).await;
    }

    cluster
        .apply(&release_manifest(&api.url(), &[]))
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
        ingress_ip(&service).ok_or(format!("{:?}", service.status))
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

    swap_from_digitaloceans_ccm(&cluster, &api, &client, &load_balancers[0]).await;

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
    .await
    .unwrap();
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
    .await
    .unwrap();
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

/// DigitalOcean's CCM's name for a Service's load balancer (Go's `DefaultLoadBalancerName`):
/// `a` and the UID without dashes, at most 32 characters.
fn digitaloceans_name(service: &Service) -> String {
    let uid = service.metadata.uid.as_deref().unwrap().replace('-', "");
    format!("a{uid}").chars().take(32).collect()
}

/// The load balancer DigitalOcean's CCM asks for (commit 70d527e,
/// `buildLoadBalancerRequestWithNodeState`) for a Service with these annotations, outside
/// DOKS: its default type `REGIONAL_NETWORK` (rules from each port to itself), kube-proxy's
/// health check, no tags (it has no cluster ID to tag with), the cloud-config's region.
fn digitaloceans_request(service: &Service, droplet_ids: &[u64]) -> serde_json::Value {
    let annotations = service.metadata.annotations.clone().unwrap_or_default();
    let number = |key: &str, default: u64| -> u64 {
        annotations
            .get(&format!("service.beta.kubernetes.io/do-loadbalancer-{key}"))
            .map_or(default, |v| v.parse().unwrap())
    };
    let list = |key: &str| -> Vec<String> {
        annotations
            .get(&format!("service.beta.kubernetes.io/do-loadbalancer-{key}"))
            .map(|v| v.split(',').map(|r| r.trim().to_owned()).collect())
            .unwrap_or_default()
    };
    let algorithm = annotations
        .get("service.beta.kubernetes.io/do-loadbalancer-algorithm")
        .filter(|a| *a == "least_connections")
        .map_or("round_robin", |_| "least_connections");
    let rules: Vec<serde_json::Value> = service
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| {
            serde_json::json!({"entry_protocol": "tcp", "entry_port": p.port,
                               "target_protocol": "tcp", "target_port": p.port})
        })
        .collect();
    let mut firewall = serde_json::Map::new();
    for (field, key) in [("deny", "deny-rules"), ("allow", "allow-rules")] {
        let rules = list(key);
        if !rules.is_empty() {
            firewall.insert(field.into(), rules.into());
        }
    }
    let mut body = serde_json::json!({
        "name": digitaloceans_name(service),
        "algorithm": algorithm,
        "region": "nyc1",
        "forwarding_rules": rules,
        "health_check": {
            "protocol": "http", "port": 10256, "path": "/healthz",
            "check_interval_seconds": number("healthcheck-check-interval-seconds", 3),
            "response_timeout_seconds": number("healthcheck-response-timeout-seconds", 5),
            "unhealthy_threshold": number("healthcheck-unhealthy-threshold", 3),
            "healthy_threshold": number("healthcheck-healthy-threshold", 5),
            "proxy_protocol": false,
        },
        "sticky_sessions": {"type": "none"},
        "droplet_ids": droplet_ids,
        "disable_lets_encrypt_dns_records": false,
        "firewall": firewall,
        "type": "REGIONAL_NETWORK",
        "network": "EXTERNAL",
        "network_stack": "IPV4",
    });
    if let Some(unit) = Some(number("size-unit", 0)).filter(|u| *u > 0) {
        body["size_unit"] = unit.into();
    }
    body
}

/// A load balancer as the API shows it, without what a takeover may change (its tags) and
/// what the data plane changes on its own (its droplets' health, the simulator's extension).
fn without_tags(lb: &serde_json::Value) -> serde_json::Value {
    let mut lb = lb.clone();
    let fields = lb.as_object_mut().unwrap();
    fields.remove("tags");
    fields.remove("x_droplet_health");
    lb
}

/// Counts of the simulator's requests by route.
async fn request_counts(api: &CloudApi) -> serde_json::Value {
    api.send(reqwest::Method::GET, "/admin/stats", ADMIN_TOKEN, None)
        .await
        .unwrap()["requests"]
        .clone()
}

fn count(counts: &serde_json::Value, route: &str) -> u64 {
    counts[route].as_u64().unwrap_or_default()
}

/// Scales the CCM's Deployment to `replicas` and waits until that many of its Pods run, none
/// terminating.
async fn scale_ccm(client: &kube::Client, replicas: usize) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    scale(
        &deployments,
        "cloud-controller-manager",
        i32::try_from(replicas).unwrap(),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    eventually(&format!("{replicas} CCM Pods running"), WAIT, || async {
        let pods = pods
            .list(&ListParams::default().labels("app=cloud-controller-manager"))
            .await
            .map_err(|e| e.to_string())?
            .items;
        let running = pods.iter().all(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
        (running && pods.len() == replicas)
            .then_some(())
            .ok_or(format!("{} Pods, all running: {running}", pods.len()))
    })
    .await;
}

/// Swap: load balancers made by DigitalOcean's CCM, taken over by ours with no request
/// through them failing.
///
/// DigitalOcean's CCM is not built here (CI has no copy of its source;
/// `scripts/peer-digitalocean.sh` runs the real one by hand), so its reign is replayed with
/// ours scaled to zero: for each Service, what it sends (the create of
/// [`digitaloceans_request`], then reads until the load balancer is active) and what it
/// writes back (the ID and type annotations, the service controller's finalizer, the
/// ingress). Then requests run through every load balancer's address, as a user's clients
/// would, while ours is scaled back up: it must keep each load balancer (its ID, address and
/// settings), add only its tags, and drop no request.
async fn swap_from_digitaloceans_ccm(
    cluster: &Cluster,
    api: &CloudApi,
    client: &kube::Client,
    web_lb: &serde_json::Value,
) {
    use ccm_do_like_cloud::{ANNOTATION_LOAD_BALANCER_ID, ANNOTATION_TYPE};
    scale_ccm(client, 0).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let spread = [
        ("do-defaults", &[][..]),
        (
            "do-tuned",
            &[
                ("size-unit", "2"),
                ("algorithm", "least_connections"),
                ("healthcheck-check-interval-seconds", "5"),
                ("healthcheck-response-timeout-seconds", "4"),
                ("healthcheck-unhealthy-threshold", "2"),
                ("healthcheck-healthy-threshold", "3"),
                ("deny-rules", "cidr:192.0.2.0/24"),
            ][..],
        ),
    ];
    // The Nodes DigitalOcean's CCM would put behind them: those the Go framework's service
    // controller hands a provider, the same ours hands it (the web load balancer's).
    let droplet_ids: Vec<u64> = web_lb["droplet_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    let mut made = Vec::new();
    for (name, annotations) in spread {
        let mut builder = ServiceBuilder::load_balancer(name)
            .selector("app", "web")
            .port(80)
            .target_port(8080);
        for (key, value) in annotations {
            builder = builder.annotation(
                &format!("service.beta.kubernetes.io/do-loadbalancer-{key}"),
                value,
            );
        }
        let service = services
            .create(&PostParams::default(), &builder.build())
            .await
            .unwrap();
        let created = api
            .send(
                reqwest::Method::POST,
                "/v2/load_balancers",
                TOKEN,
                Some(digitaloceans_request(&service, &droplet_ids)),
            )
            .await
            .unwrap();
        let id = created["load_balancer"]["id"].as_str().unwrap().to_owned();
        let lb = eventually(&format!("{name}'s load balancer active"), WAIT, || async {
            let lb = api
                .send(
                    reqwest::Method::GET,
                    &format!("/v2/load_balancers/{id}"),
                    TOKEN,
                    None,
                )
                .await
                .unwrap()["load_balancer"]
                .clone();
            (lb["status"] == "active" && lb["ip"].as_str().is_some_and(|ip| !ip.is_empty()))
                .then_some(lb.clone())
                .ok_or(format!("{lb}"))
        })
        .await;
        let ip = lb["ip"].as_str().unwrap().to_owned();
        services
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"metadata": {
                    "annotations": {ANNOTATION_LOAD_BALANCER_ID: id, ANNOTATION_TYPE: lb["type"]},
                    "finalizers": ["service.kubernetes.io/load-balancer-cleanup"],
                }})),
            )
            .await
            .unwrap();
        services
            .patch_status(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}),
                ),
            )
            .await
            .unwrap();
        made.push((
            name,
            lb,
            SocketAddr::from((ip.parse::<std::net::Ipv4Addr>().unwrap(), 80)),
        ));
    }
    for (name, _, address) in &made {
        eventually(&format!("{name} answering at {address}"), WAIT, || async {
            http_get(cluster, *address).await
        })
        .await;
    }

    // The swap, with requests running through every address meanwhile.
    let before = request_counts(api).await;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let requests = async {
        let (mut answered, mut failed) = (0u64, Vec::new());
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for (name, _, address) in &made {
                let started = std::time::Instant::now();
                match tokio::time::timeout(Duration::from_secs(5), http_get(cluster, *address))
                    .await
                {
                    Ok(Ok(_)) => answered += 1,
                    Ok(Err(e)) => failed.push(format!("{name}: {e}")),
                    Err(_) => failed.push(format!("{name}: no answer in {:?}", started.elapsed())),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (answered, failed)
    };
    let swap = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let started = std::time::Instant::now();
        scale_ccm(client, 2).await;
        for (name, lb, _) in &made {
            let service = services.get(name).await.unwrap();
            let owner = format!(
                "kubernetes-service-uid:{}",
                service.metadata.uid.as_deref().unwrap()
            );
            eventually(
                &format!("{name}'s load balancer taken over"),
                WAIT,
                || async {
                    let now = api
                        .send(
                            reqwest::Method::GET,
                            &format!("/v2/load_balancers/{}", lb["id"].as_str().unwrap()),
                            TOKEN,
                            None,
                        )
                        .await
                        .unwrap()["load_balancer"]["tags"]
                        .clone();
                    (now == serde_json::json!(["k8s:kubernetes", owner]))
                        .then_some(())
                        .ok_or(format!("tags {now}"))
                },
            )
            .await;
        }
        let took = started.elapsed();
        // Ours' next passes, with the requests still running.
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        took
    };
    let ((answered, failed), took) = tokio::join!(requests, swap);
    let after = request_counts(api).await;
    assert!(
        failed.is_empty(),
        "{} failed requests: {failed:#?}",
        failed.len()
    );
    assert!(
        answered >= 10 * made.len() as u64,
        "only {answered} answers"
    );

    // Every load balancer kept: the same ID, address and settings, with ours' tags now; and
    // the Services show the same address.
    let lbs = api.load_balancers().await;
    for (name, lb, address) in &made {
        let now = lbs
            .iter()
            .find(|l| l["id"] == lb["id"])
            .unwrap_or_else(|| panic!("{name}'s load balancer is gone: {lbs:#?}"));
        assert_eq!(
            without_tags(now),
            without_tags(lb),
            "{name}: only the tags change"
        );
        let service = services.get(name).await.unwrap();
        let ingress = &service
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .unwrap();
        assert_eq!(ingress.len(), 1, "{name}: {ingress:?}");
        assert_eq!(
            ingress[0].ip.as_deref(),
            Some(&*address.ip().to_string()),
            "{name}"
        );
    }
    let route = |r| count(&after, r) - count(&before, r);
    assert_eq!(route("POST /v2/load_balancers"), 0, "none created");
    assert_eq!(route("DELETE /v2/load_balancers/{id}"), 0, "none deleted");
    eprintln!(
        "swap: {} load balancers kept, taken over {took:.1?} after ours was scaled up; \
         {answered} requests through them, 0 failed; ours sent {} updates (its tags)",
        made.len(),
        route("PUT /v2/load_balancers/{id}")
    );

    // Ours' now: deleting the Services deletes their load balancers.
    for (name, _, _) in &made {
        services
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually("the swapped load balancers deleted", WAIT, || async {
        let left: Vec<_> = api
            .load_balancers()
            .await
            .into_iter()
            .filter(|l| made.iter().any(|(_, lb, _)| l["id"] == lb["id"]))
            .collect();
        left.is_empty().then_some(()).ok_or(format!("{left:#?}"))
    })
    .await;
}
