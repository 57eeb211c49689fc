//! What issue 41 built beyond Go's framework, in one real cluster (docs/beyond-go.md): the
//! DO-like release manifest, its CCM run with `--service-conditions`,
//! `--load-balancer-health-period=2s` and `--node-provider-id-prefix=digitalocean://`,
//! against the simulator in the cluster's namespace (its data plane carrying the traffic and
//! running the health checks). Two nodes:
//!
//! - `ccm-control-plane`, the cloud's: a droplet with its address;
//! - `ccm-worker`, another provider's: its kubelet registers with `--provider-id=other://…`.
//!   The account also has a droplet of that name (a clash of host names across clouds: the
//!   provider looks up Nodes without a DigitalOcean provider ID by name, so without the
//!   ownership rule it would be a backend); the droplet is deleted half-way.
//!
//! Then:
//!
//! - conditions: `kubectl wait --for=condition=LoadBalancerServing` returns for a
//!   LoadBalancer Service of a Deployment and requests through its address are answered by
//!   the Deployment's Pod (the seconds from the Service's creation to Serving are printed);
//!   with the Deployment scaled to 0 every droplet fails its health check (the Service is
//!   `externalTrafficPolicy: Local`, so the check is kube-proxy's `healthCheckNodePort`,
//!   which answers 503 on a node without local endpoints) and `LoadBalancerDegraded` turns
//!   True (`NoHealthyBackends`); scaled back, False (`Healthy`);
//! - hybrid: `ccm-worker` keeps its foreign provider ID and the uninitialized taint (the CCM
//!   never initialises it), is never a load balancer's droplet, and is still there at the
//!   end although it is NotReady throughout and the cloud has no droplet for it any more
//!   (run without `--node-provider-id-prefix`, the test fails: the droplet of its name is
//!   behind the load balancer);
//! - classes: a second CCM from the same manifest (its own ServiceAccount, roles and Lease,
//!   only the service controller) with `--load-balancer-class=example.com/b
//!   --manage-services-without-class=false`, the first with the classless default: a
//!   Service of class `example.com/b` gets its load balancer (and traffic) from the second,
//!   and the audit log shows no write by either CCM's ServiceAccount to the other's Service;
//! - shared load balancers: two Services with one sharing key (TCP 80 and 8080, each to its
//!   own Deployment) get one load balancer and one address, each port answered by its own
//!   Deployment's Pod; a third on port 80 is refused (`LoadBalancerSharingRefused` Warning,
//!   `LoadBalancerProvisioning` False, no address) and the load balancer is unchanged; the
//!   key in another namespace gets a load balancer of its own; the first member deleted,
//!   the third joins with the group's address (port 80 now to its Pods); members deleted
//!   leave the rules, and the last one's deletion deletes the load balancer.
//!
//! About 52 s on the project machine (2 cores), of which 14–15 s until the cloud's Node is
//! initialised; Service to `LoadBalancerServing` 1.1 s; `LoadBalancerDegraded` follows the
//! data plane within the provider's cache TTL (10 s each way here); the shared load
//! balancers 5 s.
//!
//! `scripts/test.sh` builds the image archives first (`scripts/images.sh --debug`). Needs root
//! and the cluster tier's packages (see `ccm_test::cluster`).

mod common;

use std::net::SocketAddr;
use std::time::Instant;

use ccm_test::cluster::WEB_IMAGE;
use ccm_test::fixtures::ServiceBuilder;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::PostParams;

use common::{
    ADMIN_TOKEN, CloudApi, IMAGE, LOCAL_IMAGE, WAIT, http_get, ingress_ip, release_manifest, scale,
    simulator_binary, taint_keys, workspace,
};

const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The node whose kubelet registers with another provider's ID.
const FOREIGN: &str = "ccm-worker";
const FOREIGN_ID: &str = "other://rack-1/ccm-worker";
/// The class of the second CCM's Services.
const CLASS_B: &str = "example.com/b";
/// The two CCMs' users, as the audit log names them.
const CCM_A: &str = "system:serviceaccount:kube-system:cloud-controller-manager";
const CCM_B: &str = "system:serviceaccount:kube-system:ccm-b";
/// The health checks as fast as DigitalOcean allows: every 3 s, 2 in a row flip a droplet.
const QUICK_CHECKS: [(&str, &str); 3] = [
    ("healthcheck-check-interval-seconds", "3"),
    ("healthcheck-healthy-threshold", "2"),
    ("healthcheck-unhealthy-threshold", "2"),
];

/// The second CCM: the release manifest again with every object called `ccm-b` instead of
/// `cloud-controller-manager` (its own ServiceAccount, roles, bindings and Lease; the
/// Secret and cloud-config are the same), one replica on port 10268 (the first CCM's
/// replicas hold 10258 on every node), running only the service controller, for the
/// Services of class [`CLASS_B`] and no others.
fn second_ccm_manifest(api_url: &str) -> String {
    let flags = [
        "--controllers=service",
        &format!("--load-balancer-class={CLASS_B}"),
        "--manage-services-without-class=false",
        "--leader-elect-resource-name=ccm-b",
        "--node-provider-id-prefix=digitalocean://",
    ];
    let text = release_manifest(api_url, &flags).replace(LOCAL_IMAGE, "IMAGE-OF-CCM-B");
    let edits = [
        ("cloud-controller-manager", "ccm-b"),
        ("10258", "10268"),
        ("replicas: 2", "replicas: 1"),
        ("IMAGE-OF-CCM-B", LOCAL_IMAGE),
    ];
    edits.iter().fold(text, |text, (from, to)| {
        assert!(text.contains(from), "{from}");
        text.replace(from, to)
    })
}

/// Every write to a Service (or its status) the API server saw.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [services, services/status]}]
    verbs: [create, update, patch, delete]
  - level: None
"#;

/// A condition of `service`: (status, reason, message).
fn condition(service: &Service, type_: &str) -> Option<(String, String, String)> {
    service
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_health_and_a_foreign_node_in_one_cluster() {
    let started = Instant::now();
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let simulator = simulator_binary();
    let audit = tempfile::tempdir().unwrap();
    let policy = audit.path().join("policy.yaml");
    let audit_log = audit.path().join("audit.log");
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    let cluster = Cluster::builder()
        .nodes(2)
        .image(&archive)
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
        .kubelet_arg(FOREIGN, format!("--provider-id={FOREIGN_ID}"))
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let foreign_uid = nodes.get(FOREIGN).await.unwrap().metadata.uid;

    // The cloud's API, in the cluster's namespace at its gateway address.
    let api = CloudApi::start(&cluster, &simulator).await;

    // A droplet for each node, the foreign one's a name clash.
    let mut droplets = Vec::new();
    for node in cluster.nodes() {
        droplets.push((
            node.name().to_owned(),
            api.droplet(node.name(), node.address()).await,
        ));
    }
    let foreign_droplet = droplets.iter().find(|(n, _)| n == FOREIGN).unwrap().1;

    let api_url = api.url();
    let flags = [
        "--service-conditions",
        "--load-balancer-health-period=2s",
        "--node-provider-id-prefix=digitalocean://",
    ];
    cluster
        .apply(&release_manifest(&api_url, &flags))
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .apply(&second_ccm_manifest(&api_url))
        .unwrap_or_else(|e| panic!("{e}"));
    let cloud_node = cluster.nodes()[0].name().to_owned();
    eventually("the cloud's Node initialised", WAIT, || async {
        let node = nodes.get(&cloud_node).await.map_err(|e| e.to_string())?;
        let pid = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        (pid.as_ref()
            .is_some_and(|p| p.starts_with("digitalocean://"))
            && !taint_keys(&node).iter().any(|k| k == UNINITIALIZED_TAINT))
        .then_some(())
        .ok_or(format!("{pid:?}, taints {:?}", taint_keys(&node)))
    })
    .await;
    let ready_at = started.elapsed();

    // (a) A LoadBalancer Service for a Deployment, waited for with kubectl.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &web_deployment("web"))
        .await
        .unwrap();
    let mut service = ServiceBuilder::load_balancer("web")
        .selector("app", "web")
        .port(80)
        .target_port(8080);
    for (key, value) in QUICK_CHECKS {
        service = service.annotation(
            &format!("service.beta.kubernetes.io/do-loadbalancer-{key}"),
            value,
        );
    }
    let mut service = service.build();
    service.spec.as_mut().unwrap().external_traffic_policy = Some("Local".to_owned());
    let created = Instant::now();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let mut kubectl = cluster.kubectl().expect("kubectl");
    kubectl.args([
        "wait",
        "--namespace=default",
        "--for=condition=LoadBalancerServing",
        "service/web",
        "--timeout=120s",
    ]);
    let output = tokio::task::spawn_blocking(move || kubectl.output())
        .await
        .unwrap()
        .unwrap();
    let serving = created.elapsed();
    assert!(
        output.status.success(),
        "kubectl wait: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let web = services.get("web").await.unwrap();
    let (status, reason, _) = condition(&web, "LoadBalancerServing").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "LoadBalancerEnsured")
    );
    let ingress =
        ingress_ip(&web).unwrap_or_else(|| panic!("Serving without an ingress: {:?}", web.status));
    eprintln!(
        "Service created → LoadBalancerServing (kubectl wait returned): {:.1} s",
        serving.as_secs_f64()
    );
    let lb = SocketAddr::from((ingress.parse::<std::net::Ipv4Addr>().unwrap(), 80));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let answer = eventually(
        "the web Pod answering through the load balancer",
        WAIT,
        || http_get(&cluster, lb),
    )
    .await;
    let web_pods: Vec<String> = pods
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(
        web_pods.contains(&answer),
        "{answer:?} is one of {web_pods:?}"
    );
    let first_traffic = created.elapsed();

    // (c) A Service of class example.com/b: the second CCM's.
    let mut web_b = ServiceBuilder::load_balancer("web-b")
        .selector("app", "web")
        .port(80)
        .target_port(8080)
        .build();
    web_b.spec.as_mut().unwrap().load_balancer_class = Some(CLASS_B.to_owned());
    let web_b = services
        .create(&PostParams::default(), &web_b)
        .await
        .unwrap();
    let ingress_b = wait_ingress(&services, "web-b").await;
    let lb_b = SocketAddr::from((ingress_b.parse::<std::net::Ipv4Addr>().unwrap(), 80));
    eventually(
        "the web Pod answering through web-b's load balancer",
        WAIT,
        || http_get(&cluster, lb_b),
    )
    .await;

    // (b) Each load balancer's droplets: the cloud's node's, never the foreign node's
    // (which the provider would find by name).
    let lbs = api.load_balancers().await;
    assert_eq!(lbs.len(), 2, "web's and web-b's: {lbs:#?}");
    let owner_b = format!(
        "kubernetes-service-uid:{}",
        web_b.metadata.uid.as_deref().unwrap()
    );
    assert!(
        lbs.iter().any(|lb| lb["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| *t == *owner_b)),
        "web-b's load balancer: {lbs:#?}"
    );
    let cloud_droplet = droplets.iter().find(|(n, _)| *n == cloud_node).unwrap().1;
    for lb in &lbs {
        let droplet_ids: Vec<u64> = lb["droplet_ids"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(serde_json::Value::as_u64)
            .collect();
        assert_eq!(droplet_ids, [cloud_droplet], "{lb:#}");
    }
    // From now on the cloud has no droplet for the foreign node.
    api.send(
        reqwest::Method::DELETE,
        &format!("/admin/droplets/{foreign_droplet}"),
        ADMIN_TOKEN,
        None,
    )
    .await
    .unwrap();

    // (a) Degraded: no Pod, so kube-proxy's health check answers 503 on every droplet.
    let degraded = |want_status: &'static str, want_reason: &'static str| {
        let services = services.clone();
        let api = &api;
        async move {
            let web = services.get("web").await.map_err(|e| e.to_string())?;
            match condition(&web, "LoadBalancerDegraded") {
                Some((status, reason, message))
                    if status == want_status && reason == want_reason =>
                {
                    Ok(message)
                }
                other => Err(format!(
                    "{other:?}; droplets {}",
                    api.load_balancers().await[0]["x_droplet_health"]
                )),
            }
        }
    };
    let healthy = eventually("LoadBalancerDegraded False", WAIT, || {
        degraded("False", "Healthy")
    })
    .await;
    eprintln!("LoadBalancerDegraded False: {healthy:?}");
    let scaled = Instant::now();
    scale(&deployments, "web", 0).await;
    let message = eventually("LoadBalancerDegraded True", WAIT, || {
        degraded("True", "NoHealthyBackends")
    })
    .await;
    assert_eq!(message, "0 of 1 droplets pass the health check");
    let went_degraded = scaled.elapsed();
    let scaled = Instant::now();
    scale(&deployments, "web", 1).await;
    eventually("LoadBalancerDegraded False again", WAIT, || {
        degraded("False", "Healthy")
    })
    .await;
    let recovered = scaled.elapsed();
    eventually("the web Pod answering again", WAIT, || {
        http_get(&cluster, lb)
    })
    .await;
    eprintln!(
        "scaled to 0 → Degraded True: {:.1} s; scaled to 1 → Degraded False: {:.1} s",
        went_degraded.as_secs_f64(),
        recovered.as_secs_f64()
    );

    // (b) The foreign Node, all this time: its own provider ID, still uninitialised (the
    // CCM neither initialised it nor, NotReady with no droplet, deleted it), and no load
    // balancer's droplet.
    let foreign = nodes.get(FOREIGN).await.unwrap();
    assert_eq!(
        foreign.metadata.uid, foreign_uid,
        "the same Node, never deleted"
    );
    assert_eq!(
        foreign.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some(FOREIGN_ID)
    );
    assert!(
        taint_keys(&foreign)
            .iter()
            .any(|k| k == UNINITIALIZED_TAINT),
        "{:?}",
        taint_keys(&foreign)
    );
    let ready = foreign
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    assert_ne!(ready.as_deref(), Some("True"), "NotReady throughout");
    for lb in api.load_balancers().await {
        assert!(
            !lb["droplet_ids"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d.as_u64() == Some(foreign_droplet)),
            "{lb:#}"
        );
    }
    // The leader said why, once.
    let mut logs = cluster.kubectl().expect("kubectl");
    logs.args([
        "logs",
        "--namespace=kube-system",
        "--selector=app=cloud-controller-manager",
        "--tail=-1",
    ]);
    let logs = tokio::task::spawn_blocking(move || logs.output())
        .await
        .unwrap()
        .unwrap();
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.lines()
            .any(|l| l.contains("is not this cloud's") && l.contains(FOREIGN)),
        "no line about {FOREIGN} in the CCM's logs:\n{logs}"
    );

    // (c) Neither CCM wrote to the other's Service; each wrote to its own (the log records).
    let events = ccm_test::audit::read_audit_log(&audit_log).unwrap();
    let writes = |user: &str, name: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| {
                e.stage == "ResponseComplete"
                    && e.user == user
                    && e.resource == "services"
                    && e.namespace == "default"
                    && e.name == name
            })
            .map(|e| format!("{} {} {}", e.verb, e.resource_path(), e.code))
            .collect()
    };
    assert_eq!(
        writes(CCM_A, "web-b"),
        Vec::<String>::new(),
        "the first CCM on web-b"
    );
    assert_eq!(
        writes(CCM_B, "web"),
        Vec::<String>::new(),
        "the second CCM on web"
    );
    assert!(
        !writes(CCM_A, "web").is_empty(),
        "the first CCM's writes to web"
    );
    assert!(
        !writes(CCM_B, "web-b").is_empty(),
        "the second CCM's writes to web-b"
    );

    // (d) Shared load balancers.
    let sharing = Instant::now();
    shared_load_balancers(&cluster, &client, &api).await;
    let sharing = sharing.elapsed();

    eprintln!(
        "timings: cluster and cloud's Node ready {:.1} s; Service → Serving {:.1} s, → first \
         answer {:.1} s; shared load balancers {:.1} s; whole test {:.1} s",
        ready_at.as_secs_f64(),
        serving.as_secs_f64(),
        first_traffic.as_secs_f64(),
        sharing.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// The sharing key of the shared-load-balancer phase, and the label of its Deployments.
const SHARING_KEY_ANNOTATION: &str = "ccm-rs.github.io/load-balancer-sharing-key";
const SHARING_KEY: &str = "front";
const SHARING_REFUSED: &str = "LoadBalancerSharingRefused";
/// The namespace the key is copied into.
const OTHER_NAMESPACE: &str = "shared-other";

/// A Deployment of one web Pod labelled `app: name` (on the cloud's node: the foreign one
/// keeps its taint).
fn web_deployment(name: &str) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "web", "image": WEB_IMAGE}],
                                       "tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                                        "effect": "NoSchedule"}]}}}
    }))
    .unwrap()
}

/// A LoadBalancer Service of the sharing key, `port` (TCP) to the web Pods labelled `app`.
fn sharing_service(name: &str, namespace: &str, app: &str, port: i32) -> Service {
    ServiceBuilder::load_balancer(name)
        .namespace(namespace)
        .annotation(SHARING_KEY_ANNOTATION, SHARING_KEY)
        .selector("app", app)
        .port(port)
        .target_port(8080)
        .build()
}

fn node_port(service: &Service) -> u64 {
    let port = service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .node_port
        .unwrap_or_else(|| panic!("no nodePort: {:?}", service.spec));
    u64::try_from(port).unwrap()
}

/// A load balancer's forwarding rules, as (entry port, target port), sorted.
fn rules(lb: &serde_json::Value) -> Vec<(u64, u64)> {
    let mut rules: Vec<(u64, u64)> = lb["forwarding_rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            assert_eq!(r["entry_protocol"], "tcp", "{r}");
            (
                r["entry_port"].as_u64().unwrap(),
                r["target_port"].as_u64().unwrap(),
            )
        })
        .collect();
    rules.sort_unstable();
    rules
}

impl CloudApi {
    /// The account's load balancers whose address is `ip`.
    async fn load_balancers_at(&self, ip: &str) -> Vec<serde_json::Value> {
        self.load_balancers()
            .await
            .into_iter()
            .filter(|lb| lb["ip"] == ip)
            .collect()
    }
}

/// Waits until `name` in `services`' namespace has an ingress IP; it.
async fn wait_ingress(services: &Api<Service>, name: &str) -> String {
    eventually(&format!("{name}'s ingress"), WAIT, || async {
        let service = services.get(name).await.map_err(|e| e.to_string())?;
        ingress_ip(&service).ok_or(format!("{:?}", service.status))
    })
    .await
}

/// Waits until `name` is gone from the API (its finalizer removed).
async fn wait_gone(services: &Api<Service>, name: &str) {
    eventually(&format!("{name} gone"), WAIT, || async {
        match services.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(s) => Err(format!(
                "still there, finalizers {:?}",
                s.metadata.finalizers
            )),
        }
    })
    .await;
}

/// Shared load balancers (docs/controllers.md, "Shared load balancers"), through the data
/// plane: two Services of one key share one load balancer and address, each port answered
/// by its own Deployment; a third on a taken port is refused (a Warning, a condition, no
/// address) until the port is free, then gets the same address; the key in another
/// namespace is another load balancer; members leave the rules one by one, and the last
/// one deletes the load balancer.
async fn shared_load_balancers(cluster: &Cluster, client: &kube::Client, api: &CloudApi) {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let lbs_before = api.load_balancers().await.len();
    for name in ["shared-a", "shared-b"] {
        deployments
            .create(&PostParams::default(), &web_deployment(name))
            .await
            .unwrap();
    }
    // The Pods of `app`, by name (the web image answers with its Pod's name).
    let pods_of = |app: &'static str| {
        let pods = pods.clone();
        async move {
            pods.list(&kube::api::ListParams::default().labels(&format!("app={app}")))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect::<Vec<String>>()
        }
    };
    // The Pod of `app` answering at `target`.
    let answered_by = |target: SocketAddr, app: &'static str| {
        let pods_of = &pods_of;
        async move {
            let answer = http_get(cluster, target).await?;
            let expected = pods_of(app).await;
            if expected.contains(&answer) {
                Ok(answer)
            } else {
                Err(format!(
                    "{target} answered {answer:?}, not one of {app}'s {expected:?}"
                ))
            }
        }
    };

    // Two members: port 80 to shared-a's Pod, 8080 to shared-b's.
    let a = services
        .create(
            &PostParams::default(),
            &sharing_service("shared-a", "default", "shared-a", 80),
        )
        .await
        .unwrap();
    let b = services
        .create(
            &PostParams::default(),
            &sharing_service("shared-b", "default", "shared-b", 8080),
        )
        .await
        .unwrap();
    let ip_a = wait_ingress(&services, "shared-a").await;
    let ip_b = wait_ingress(&services, "shared-b").await;
    assert_eq!(ip_a, ip_b, "one address for the group");
    let ip: std::net::Ipv4Addr = ip_a.parse().unwrap();
    let (np_a, np_b) = (node_port(&a), node_port(&b));
    let group_lb = eventually(
        "one load balancer with both members' ports",
        WAIT,
        || async {
            let lbs = api.load_balancers().await;
            let at = api.load_balancers_at(&ip_a).await;
            match at.as_slice() {
                [lb] if rules(lb) == [(80, np_a), (8080, np_b)] && lbs.len() == lbs_before + 1 => {
                    Ok(lb.clone())
                }
                _ => Err(format!("{lbs:#?}")),
            }
        },
    )
    .await;
    let group_lb_id = group_lb["id"].as_str().unwrap().to_owned();
    for name in ["shared-a", "shared-b"] {
        let service = services.get(name).await.unwrap();
        assert!(
            ccm_test::fixtures::has_lb_finalizer(&service),
            "{name}: {:?}",
            service.metadata.finalizers
        );
    }
    let port_80 = SocketAddr::from((ip, 80));
    let port_8080 = SocketAddr::from((ip, 8080));
    eventually("shared-a's Pod answering on port 80", WAIT, || {
        answered_by(port_80, "shared-a")
    })
    .await;
    eventually("shared-b's Pod answering on port 8080", WAIT, || {
        answered_by(port_8080, "shared-b")
    })
    .await;

    // A third on a taken port (to shared-b's Pod): refused, no address.
    let c = services
        .create(
            &PostParams::default(),
            &sharing_service("shared-c", "default", "shared-b", 80),
        )
        .await
        .unwrap();
    let np_c = node_port(&c);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let warning = eventually(
        "a LoadBalancerSharingRefused Warning on shared-c",
        WAIT,
        || async {
            let list = events
                .list(&kube::api::ListParams::default().fields("involvedObject.name=shared-c"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some(SHARING_REFUSED)
                })
                .and_then(|e| e.message.clone())
                .ok_or(format!(
                    "{:?}",
                    list.items
                        .iter()
                        .map(|e| (&e.type_, &e.reason, &e.message))
                        .collect::<Vec<_>>()
                ))
        },
    )
    .await;
    assert!(
        warning.contains("port 80/TCP") && warning.contains("shared-a"),
        "names the port and its holder: {warning:?}"
    );
    eventually(
        "shared-c's LoadBalancerProvisioning False",
        WAIT,
        || async {
            let service = services.get("shared-c").await.map_err(|e| e.to_string())?;
            match condition(&service, "LoadBalancerProvisioning") {
                Some((status, reason, _)) if status == "False" && reason == SHARING_REFUSED => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let refused = services.get("shared-c").await.unwrap();
    assert_eq!(ingress_ip(&refused), None, "{:?}", refused.status);
    // The group's load balancer as it was, and both still answering.
    let at = api.load_balancers_at(&ip_a).await;
    assert_eq!(at.len(), 1, "{at:#?}");
    assert_eq!(at[0]["id"], group_lb_id.as_str());
    assert_eq!(rules(&at[0]), [(80, np_a), (8080, np_b)], "{:#}", at[0]);
    answered_by(port_80, "shared-a").await.unwrap();
    answered_by(port_8080, "shared-b").await.unwrap();

    // The key in another namespace: a load balancer of its own.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": OTHER_NAMESPACE}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let other_services: Api<Service> = Api::namespaced(client.clone(), OTHER_NAMESPACE);
    let other = other_services
        .create(
            &PostParams::default(),
            &sharing_service("shared-a", OTHER_NAMESPACE, "shared-a", 80),
        )
        .await
        .unwrap();
    let ip_other = wait_ingress(&other_services, "shared-a").await;
    assert_ne!(ip_other, ip_a, "another namespace, another load balancer");
    let other_lb = eventually("the other namespace's load balancer", WAIT, || async {
        match api.load_balancers_at(&ip_other).await.as_slice() {
            [lb] => Ok(lb.clone()),
            more => Err(format!("{more:#?}")),
        }
    })
    .await;
    assert_ne!(other_lb["id"], group_lb_id.as_str());
    assert_eq!(rules(&other_lb), [(80, node_port(&other))], "{other_lb:#}");
    let at = api.load_balancers_at(&ip_a).await;
    assert_eq!(at.len(), 1, "{at:#?}");
    assert_eq!(at[0]["id"], group_lb_id.as_str());
    assert_eq!(
        rules(&at[0]),
        [(80, np_a), (8080, np_b)],
        "unchanged: {:#}",
        at[0]
    );
    assert_eq!(api.load_balancers().await.len(), lbs_before + 2);

    // shared-a deleted: its port is free, so shared-c joins, with the group's address, and
    // port 80 now goes to shared-c's nodePort (shared-b's Pod); 8080 answers throughout.
    services
        .delete("shared-a", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&services, "shared-a").await;
    answered_by(port_8080, "shared-b").await.unwrap();
    let ip_c = wait_ingress(&services, "shared-c").await;
    assert_eq!(
        ip_c, ip_a,
        "the refused member, admitted, gets the group's address"
    );
    eventually("shared-c's port in place of shared-a's", WAIT, || async {
        match api.load_balancers_at(&ip_a).await.as_slice() {
            [lb] if lb["id"] == group_lb_id.as_str() && rules(lb) == [(80, np_c), (8080, np_b)] => {
                Ok(())
            }
            other => Err(format!("{other:#?}")),
        }
    })
    .await;
    eventually("shared-c LoadBalancerServing True", WAIT, || async {
        let service = services.get("shared-c").await.map_err(|e| e.to_string())?;
        match condition(&service, "LoadBalancerServing") {
            Some((status, _, _)) if status == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eventually(
        "shared-b's Pod answering on port 80, through shared-c",
        WAIT,
        || answered_by(port_80, "shared-b"),
    )
    .await;
    answered_by(port_8080, "shared-b").await.unwrap();

    // shared-c deleted: the rules shrink to shared-b's, which still answers.
    services
        .delete("shared-c", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&services, "shared-c").await;
    eventually("the rules down to shared-b's", WAIT, || async {
        match api.load_balancers_at(&ip_a).await.as_slice() {
            [lb] if lb["id"] == group_lb_id.as_str() && rules(lb) == [(8080, np_b)] => Ok(()),
            other => Err(format!("{other:#?}")),
        }
    })
    .await;
    answered_by(port_8080, "shared-b").await.unwrap();

    // The last members deleted: both load balancers gone, and the Services with them.
    services
        .delete("shared-b", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    other_services
        .delete("shared-a", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&services, "shared-b").await;
    wait_gone(&other_services, "shared-a").await;
    let lbs = api.load_balancers().await;
    assert_eq!(lbs.len(), lbs_before, "{lbs:#?}");
    assert!(
        !lbs.iter()
            .any(|lb| lb["id"] == group_lb_id.as_str() || lb["id"] == other_lb["id"]),
        "{lbs:#?}"
    );
}
