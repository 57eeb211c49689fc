//! `do-like-cloud-controller-manager` as a process against a real kube-apiserver + etcd and
//! the simulator (in-process): node initialisation, routes, and the load balancer's
//! lifecycle, with faults injected (30% 5xx, 429 bursts).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ccm_do_like_cloud::{ANNOTATION_LOAD_BALANCER_ID, ANNOTATION_PROTOCOL, cluster_tag};
use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig};
use ccm_test::{ControlPlane, unique_name};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_do-like-cloud-controller-manager");
const WAIT: Duration = Duration::from_secs(60);
const TOKEN: &str = "e2e-token";
const CLUSTER: &str = "e2e";

/// The CCM process; killed on drop. Its stderr goes to a file.
struct Ccm {
    child: Child,
    log: std::path::PathBuf,
}

impl Ccm {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Ccm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn has_ingress(svc: &Service) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

async fn until<F, Fut>(what: &str, ccm: &Ccm, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; ccm log:\n{}",
            ccm.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_routes_and_load_balancers_through_the_binary() {
    let cp = ControlPlane::start().await.expect(
        "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
    );
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.lb_activation_delay = Duration::from_millis(500);
    let sim = RunningSimulator::start(cfg).await.unwrap();
    let names = [unique_name("do-n1"), unique_name("do-n2")];
    let droplets: Vec<_> = names
        .iter()
        .map(|n| sim.handle().create_droplet(n, "s-2vcpu-4gb", "ams3"))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let config = dir.path().join("do-like.yaml");
    std::fs::write(
        &config,
        format!(
            "apiUrl: {}\ntokenFile: {}\nregion: ams3\ncacheTtlSeconds: 1\nrequestsPerSecond: 100\nmaxRetryAfterSeconds: 2\n",
            sim.url(),
            dir.path().join("token").display()
        ),
    )
    .unwrap();
    let log = dir.path().join("ccm.log");
    let child = Command::new(BIN)
        .args([
            "--cloud-provider=digitalocean".to_owned(),
            format!("--cloud-config={}", config.display()),
            format!("--kubeconfig={}", cp.kubeconfig_path().display()),
            format!("--cluster-name={CLUSTER}"),
            "--cluster-cidr=10.244.0.0/16".to_owned(),
            "--route-reconciliation-period=1s".to_owned(),
            "--secure-port=0".to_owned(),
        ])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let ccm = Ccm { child, log };

    // Nodes as kubelets with --cloud-provider=external register them: tainted, with pod CIDRs.
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    for (i, name) in names.iter().enumerate() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "podCIDR": format!("10.244.{}.0/24", i + 1),
                "podCIDRs": [format!("10.244.{}.0/24", i + 1)],
                "taints": [{"key": ccm_core::well_known::TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
            }
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    for (name, droplet) in names.iter().zip(&droplets) {
        let want = format!("digitalocean://{}", droplet.id);
        until(&format!("node {name} initialised"), &ccm, || {
            let nodes = nodes.clone();
            let want = want.clone();
            async move {
                let n = nodes.get(name).await.unwrap();
                n.spec.and_then(|s| s.provider_id) == Some(want)
            }
        })
        .await;
        let n = nodes.get(name).await.unwrap();
        let labels = n.metadata.labels.unwrap_or_default();
        assert_eq!(labels["node.kubernetes.io/instance-type"], "s-2vcpu-4gb");
        assert_eq!(labels["topology.kubernetes.io/region"], "ams3");
        let addresses = n.status.unwrap().addresses.unwrap_or_default();
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == droplet.networks.v4[0].ip_address),
            "{addresses:?}"
        );
    }
    until("routes", &ccm, || async {
        sim.handle().routes().len() == 2
    })
    .await;
    assert!(
        sim.handle()
            .routes()
            .iter()
            .all(|r| r.tags == [cluster_tag(CLUSTER)])
    );

    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let events: Api<Event> = Api::namespaced(cp.client().unwrap(), "default");

    // A bad annotation: a Warning event naming it, no load balancer; fixed, it converges.
    let bad_name = unique_name("do-bad");
    let bad: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": bad_name, "annotations": {ANNOTATION_PROTOCOL: "udp"}},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &bad).await.unwrap();
    let warning_about = |events: Api<Event>, name: String| async move {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                    && e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("SyncLoadBalancerFailed")
            })
            .and_then(|e| e.note)
    };
    until("a Warning about the bad annotation", &ccm, || {
        let (events, bad_name) = (events.clone(), bad_name.clone());
        async move { warning_about(events, bad_name).await.is_some() }
    })
    .await;
    let warning = warning_about(events.clone(), bad_name.clone())
        .await
        .unwrap();
    assert!(
        warning.contains(ANNOTATION_PROTOCOL) && warning.contains("udp"),
        "{warning}"
    );
    assert!(sim.handle().load_balancers().is_empty());
    services
        .patch(
            &bad_name,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {ANNOTATION_PROTOCOL: "http"}}}),
            ),
        )
        .await
        .unwrap();
    until("the fixed Service's ingress", &ccm, || {
        let services = services.clone();
        let bad_name = bad_name.clone();
        async move { has_ingress(&services.get(&bad_name).await.unwrap()) }
    })
    .await;
    let lbs = sim.handle().load_balancers();
    assert_eq!(lbs.len(), 1, "{lbs:?}");
    assert_eq!(lbs[0].spec.forwarding_rules[0].entry_protocol, "http");
    services
        .delete(&bad_name, &DeleteParams::default())
        .await
        .unwrap();
    until("the fixed Service's LB deleted", &ccm, || async {
        sim.handle().load_balancers().is_empty()
    })
    .await;

    // Faults from here on: the LB still converges, once, and goes away with the Service.
    let mut faults = Faults::default();
    faults.error_rate = 0.3;
    faults.burst_429 = 5;
    faults.retry_after_secs = 1;
    sim.handle().set_faults(faults);

    let svc_name = unique_name("do-web");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": svc_name, "annotations": {
            "do-like.example.com/load-balancer-algorithm": "least_connections"
        }},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let mut max_lbs = 0;
    until("the LB's ingress", &ccm, || {
        let services = services.clone();
        let svc_name = svc_name.clone();
        max_lbs = max_lbs.max(sim.handle().load_balancers().len());
        async move { has_ingress(&services.get(&svc_name).await.unwrap()) }
    })
    .await;
    let lbs = sim.handle().load_balancers();
    assert_eq!(lbs.len(), 1, "{lbs:?}");
    assert!(max_lbs <= 1, "a duplicate load balancer was created");
    assert_eq!(lbs[0].spec.tags, [cluster_tag(CLUSTER)]);
    assert_eq!(lbs[0].spec.algorithm.as_deref(), Some("least_connections"));
    // The LB's ID is remembered on the Service, and later lookups use it: GETs by ID, not
    // only lists.
    let live = services.get(&svc_name).await.unwrap();
    assert_eq!(
        live.metadata.annotations.as_ref().unwrap()[ANNOTATION_LOAD_BALANCER_ID],
        lbs[0].id
    );
    let ingress = live.status.unwrap();
    assert_eq!(
        ingress.load_balancer.unwrap().ingress.unwrap()[0]
            .ip
            .as_deref(),
        Some(lbs[0].ip.as_str())
    );

    services
        .delete(&svc_name, &DeleteParams::default())
        .await
        .unwrap();
    until("the LB's deletion", &ccm, || async {
        sim.handle().load_balancers().is_empty()
    })
    .await;
    until("the Service's deletion", &ccm, || {
        let services = services.clone();
        let svc_name = svc_name.clone();
        async move { services.get_opt(&svc_name).await.unwrap().is_none() }
    })
    .await;
    assert!(sim.handle().request_count("GET /v2/load_balancers/{id}") > 0);
    assert!(sim.handle().request_count("500") > 0);
    assert!(sim.handle().request_count("429") >= 5);
    let log = ccm.log();
    assert!(!log.contains(TOKEN), "the token is in the CCM's log");
    assert!(!log.contains("panicked"), "{log}");
    drop(ccm);
    sim.shutdown().await;
}
