//! `do-like-cloud-controller-manager` as a process against a real kube-apiserver + etcd and
//! the simulator (in-process): node initialisation, routes, and the load balancer's
//! lifecycle, with faults injected (30% 5xx, 429 bursts); and a Service that copies another
//! namespace's load-balancer ID annotation, which must not take its load balancer over;
//! and the provider's own flag, `--do-like-api-url`, winning over the cloud-config.

use std::time::Duration;

use ccm_do_like_cloud::{
    ANNOTATION_LOAD_BALANCER_ID, ANNOTATION_PROTOCOL, ApiToken, Client, ClientOptions, cluster_tag,
    owner_tag,
};
use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig};
use ccm_test::fixtures::{NodeBuilder, ServiceBuilder, has_ingress};
use ccm_test::net::{free_port, http_get};
use ccm_test::process::{CcmProcess, Signal};
use ccm_test::{ControlPlane, unique_name};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_do-like-cloud-controller-manager");
const WAIT: Duration = Duration::from_secs(60);
const TOKEN: &str = "e2e-token";
const CLUSTER: &str = "e2e";

/// A control plane, the simulator with two droplets, and the CCM running against both.
struct Env {
    cp: ControlPlane,
    sim: RunningSimulator,
    ccm: CcmProcess,
    names: [String; 2],
    droplets: Vec<ccm_do_like_cloud::api::Droplet>,
    /// The CCM's arguments but its serving ones: the cloud, the cluster, the kubeconfig.
    args: Vec<String>,
    /// Holds the cloud-config, the token and the CCM's log.
    dir: tempfile::TempDir,
}

/// Starts a control plane, the simulator and the CCM.
async fn start_env() -> Env {
    start_env_with(true).await
}

/// Starts a control plane, the simulator (serving the routes extension or not) and the CCM.
async fn start_env_with(routes_extension: bool) -> Env {
    start_env_full(routes_extension, ApiUrl::CloudConfig).await
}

/// Where the CCM is told the simulator's URL.
#[derive(Clone, Copy, PartialEq)]
enum ApiUrl {
    /// In the cloud-config's `apiUrl`.
    CloudConfig,
    /// With `--do-like-api-url`, the cloud-config's `apiUrl` being a port nothing listens on.
    Flag,
}

async fn start_env_full(routes_extension: bool, api_url: ApiUrl) -> Env {
    let cp = ControlPlane::start().await.expect(
        "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
    );
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.lb_activation_delay = Duration::from_millis(500);
    cfg.routes_extension = routes_extension;
    let sim = RunningSimulator::start(cfg).await.unwrap();
    let names = [unique_name("do-n1"), unique_name("do-n2")];
    let droplets: Vec<_> = names
        .iter()
        .map(|n| sim.handle().create_droplet(n, "s-2vcpu-4gb", "ams3"))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let config = dir.path().join("do-like.yaml");
    let config_url = match api_url {
        ApiUrl::CloudConfig => sim.url(),
        ApiUrl::Flag => "http://127.0.0.1:1".to_owned(),
    };
    std::fs::write(
        &config,
        format!(
            "apiUrl: {config_url}\ntokenFile: {}\nregion: ams3\ncacheTtlSeconds: 1\nrequestsPerSecond: 100\nmaxRetryAfterSeconds: 2\n",
            dir.path().join("token").display()
        ),
    )
    .unwrap();
    let flag = (api_url == ApiUrl::Flag).then(|| format!("--do-like-api-url={}", sim.url()));
    let args = vec![
        "--cloud-provider=digitalocean".to_owned(),
        format!("--cloud-config={}", config.display()),
        format!("--kubeconfig={}", cp.kubeconfig_path().display()),
        format!("--cluster-name={CLUSTER}"),
        "--cluster-cidr=10.244.0.0/16".to_owned(),
        "--route-reconciliation-period=1s".to_owned(),
    ];
    let ccm = CcmProcess::builder(BIN)
        .args(flag)
        .args(&args)
        .arg("--secure-port=0")
        .log_file(dir.path().join("ccm.log"))
        .spawn();
    Env {
        cp,
        sim,
        ccm,
        names,
        droplets,
        args,
        dir,
    }
}

/// Registers the two Nodes as kubelets with `--cloud-provider=external` do (tainted, with pod
/// CIDRs) and waits until the CCM initialised them.
async fn register_nodes(env: &Env) {
    let (cp, ccm, names, droplets) = (&env.cp, &env.ccm, &env.names, &env.droplets);
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    for (i, name) in names.iter().enumerate() {
        let node = NodeBuilder::new(name)
            .pod_cidrs(&[&format!("10.244.{}.0/24", i + 1)])
            .uninitialized()
            .build();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    for (name, droplet) in names.iter().zip(droplets) {
        let want = format!("digitalocean://{}", droplet.id);
        ccm.eventually(&format!("node {name} initialised"), WAIT, || {
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
}

/// The provider's own flag reaches it: with the cloud-config's `apiUrl` wrong and
/// `--do-like-api-url` right, the Nodes are initialised from the simulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_url_flag_wins_over_the_cloud_config() {
    let env = start_env_full(true, ApiUrl::Flag).await;
    register_nodes(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_routes_and_load_balancers_through_the_binary() {
    let env = start_env().await;
    register_nodes(&env).await;
    let Env { cp, sim, ccm, .. } = env;
    ccm.eventually("routes", WAIT, || async {
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
    let bad = lb_service(&bad_name, 80)
        .annotation(ANNOTATION_PROTOCOL, "udp")
        .build();
    services.create(&PostParams::default(), &bad).await.unwrap();
    let warning = wait_warning(&ccm, &events, &bad_name, "SyncLoadBalancerFailed", |_| true).await;
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
    ccm.eventually("the fixed Service's ingress", WAIT, || {
        let services = services.clone();
        let bad_name = bad_name.clone();
        async move { has_ingress(&services.get(&bad_name).await.unwrap()) }
    })
    .await;
    let lbs = sim.handle().load_balancers();
    assert_eq!(lbs.len(), 1, "{lbs:?}");
    assert_eq!(lbs[0].forwarding_rules[0].entry_protocol, "http");
    services
        .delete(&bad_name, &DeleteParams::default())
        .await
        .unwrap();
    ccm.eventually("the fixed Service's LB deleted", WAIT, || async {
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
    let svc = lb_service(&svc_name, 80)
        // The provider's first name for the algorithm annotation, still read as an alias.
        .annotation(
            "do-like.example.com/load-balancer-algorithm",
            "least_connections",
        )
        .build();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let mut max_lbs = 0;
    ccm.eventually("the LB's ingress", WAIT, || {
        let services = services.clone();
        let svc_name = svc_name.clone();
        max_lbs = max_lbs.max(sim.handle().load_balancers().len());
        async move { has_ingress(&services.get(&svc_name).await.unwrap()) }
    })
    .await;
    let lbs = sim.handle().load_balancers();
    assert_eq!(lbs.len(), 1, "{lbs:?}");
    assert!(max_lbs <= 1, "a duplicate load balancer was created");
    let live = services.get(&svc_name).await.unwrap();
    assert_eq!(lbs[0].tags, [cluster_tag(CLUSTER), owner_tag(&live)]);
    assert_eq!(lbs[0].algorithm, "least_connections");
    // The LB's ID is remembered on the Service, and later lookups use it: GETs by ID, not
    // only lists.
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
    ccm.eventually("the LB's deletion", WAIT, || async {
        sim.handle().load_balancers().is_empty()
    })
    .await;
    ccm.eventually("the Service's deletion", WAIT, || {
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

/// Waits for a Warning with `reason` about `name` whose note satisfies `matches`; returns it.
async fn wait_warning(
    ccm: &CcmProcess,
    events: &Api<Event>,
    name: &str,
    reason: &str,
    matches: impl Fn(&str) -> bool,
) -> String {
    let find = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
            })
            .filter_map(|e| e.message)
            .find(|n| matches(n))
    };
    ccm.eventually(
        &format!("a {reason} Warning about {name}"),
        WAIT,
        || async { find().await.ok_or("none yet") },
    )
    .await
}

/// A LoadBalancer Service `name` on `port`, to the Pods' port 8080.
fn lb_service(name: &str, port: i32) -> ServiceBuilder {
    ServiceBuilder::load_balancer(name)
        .port(port)
        .target_port(8080)
}

/// Issue 16's takeover: `victim` in one namespace, `attacker` in another with a copy of the
/// victim's ID annotation. The takeover is refused (a Warning on the attacker, the victim's
/// LB unchanged: ports, IP, droplets), deleting the attacker leaves the victim's LB, and the
/// attacker finishes deleting. So do Services whose ID cannot be resolved: another cluster's
/// LB, a 100 kB ID.
/// Against an API without `/v2/x-routes` (as DigitalOcean's), the provider offers no routes
/// after `initialize`: the route controller is not started, and the rest runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_routes_extension_the_route_controller_is_not_started() {
    let mut env = start_env_with(false).await;
    register_nodes(&env).await;
    let log = env.ccm.log();
    assert!(
        log.contains("the API does not serve /v2/x-routes"),
        "no probe result in the log:\n{log}"
    );
    assert!(
        log.contains("does not support routes; not starting the controller"),
        "the route controller was not skipped:\n{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("starting controller") && l.contains("node-route-controller")),
        "{log}"
    );
    assert!(env.sim.handle().routes().is_empty());
    // One probe, answered 404; no other route request.
    assert_eq!(env.sim.handle().request_count("GET /v2/x-routes"), 1);
    assert_eq!(env.sim.handle().request_count("POST /v2/x-routes"), 0);
    assert!(env.ccm.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_load_balancer_id_takes_nothing_over() {
    let env = start_env().await;
    register_nodes(&env).await;
    let Env {
        cp,
        sim,
        ccm: process,
        ..
    } = env;
    let ccm = &process;
    let tenant_a = cp.create_namespace("tenant-a").await.unwrap();
    let tenant_b = cp.create_namespace("tenant-b").await.unwrap();
    let services_a: Api<Service> = Api::namespaced(cp.client().unwrap(), &tenant_a);
    let services_b: Api<Service> = Api::namespaced(cp.client().unwrap(), &tenant_b);
    let events_b: Api<Event> = Api::namespaced(cp.client().unwrap(), &tenant_b);

    // The victim converges, and its LB's ID is on it.
    services_a
        .create(&PostParams::default(), &lb_service("victim", 80).build())
        .await
        .unwrap();
    ccm.eventually("the victim's ingress and ID annotation", WAIT, || async {
        let v = services_a.get("victim").await.unwrap();
        has_ingress(&v)
            && v.metadata
                .annotations
                .is_some_and(|a| a.contains_key(ANNOTATION_LOAD_BALANCER_ID))
    })
    .await;
    let victim = services_a.get("victim").await.unwrap();
    let id = victim.metadata.annotations.as_ref().unwrap()[ANNOTATION_LOAD_BALANCER_ID].clone();
    let before = sim.handle().load_balancers();
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].id, id);
    assert_eq!(before[0].droplet_ids.len(), 2);
    assert_eq!(before[0].tags, [cluster_tag(CLUSTER), owner_tag(&victim)]);
    let victim_ip = before[0].ip.clone();
    sim.handle().reset_request_counts();

    // The attacker copies the ID, with another port.
    services_b
        .create(
            &PostParams::default(),
            &lb_service("attacker", 443)
                .annotation(ANNOTATION_LOAD_BALANCER_ID, &id)
                .build(),
        )
        .await
        .unwrap();
    let refused = wait_warning(ccm, &events_b, "attacker", "LoadBalancerNotOwned", |n| {
        n.starts_with("Error syncing load balancer:")
    })
    .await;
    assert_eq!(
        refused,
        format!(
            "Error syncing load balancer: failed to ensure load balancer: load balancer {id:?} \
             is not this Service's: annotation {ANNOTATION_LOAD_BALANCER_ID} names it, but it \
             was made for another Service; it was left unchanged"
        )
    );
    let attacker = services_b.get("attacker").await.unwrap();
    assert!(!has_ingress(&attacker), "the attacker got no IP");
    assert_eq!(
        sim.handle().load_balancers(),
        before,
        "ports, IP, droplets unchanged"
    );
    for route in [
        "POST /v2/load_balancers",
        "PUT /v2/load_balancers/{id}",
        "DELETE /v2/load_balancers/{id}",
    ] {
        assert_eq!(sim.handle().request_count(route), 0, "{route}");
    }

    // Deleting the attacker: it goes, the victim's LB stays, and a Warning says so.
    services_b
        .delete("attacker", &DeleteParams::default())
        .await
        .unwrap();
    ccm.eventually("the attacker's deletion", WAIT, || async {
        services_b.get_opt("attacker").await.unwrap().is_none()
    })
    .await;
    let left = wait_warning(ccm, &events_b, "attacker", "LoadBalancerNotOwned", |n| {
        n.starts_with("Did not delete:")
    })
    .await;
    assert!(left.ends_with("; it was left alone"), "{left}");
    assert_eq!(sim.handle().load_balancers(), before);
    let victim = services_a.get("victim").await.unwrap();
    assert_eq!(
        victim
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .unwrap()[0]
            .ip
            .as_deref(),
        Some(victim_ip.as_str()),
        "the victim's Service still shows its own IP"
    );

    // IDs that cannot be resolved: another cluster's LB, and a 100 kB value. Neither keeps
    // its Service from being deleted.
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(TOKEN));
    opts.requests_per_second = Some(1000.0);
    let mut theirs = before[0].to_request();
    theirs.name = "theirs".into();
    theirs.tags = vec![cluster_tag("another-cluster")];
    let theirs = Client::new(opts)
        .unwrap()
        .create_load_balancer(&theirs)
        .await
        .unwrap();
    let huge = "f".repeat(100_000);
    for (name, value, conflict) in [
        (
            "other-cluster",
            theirs.id.as_str(),
            "but it is not tagged for this cluster",
        ),
        (
            "huge",
            huge.as_str(),
            "does not hold a load balancer ID (a UUID)",
        ),
    ] {
        services_b
            .create(
                &PostParams::default(),
                &lb_service(name, 80)
                    .annotation(ANNOTATION_LOAD_BALANCER_ID, value)
                    .build(),
            )
            .await
            .unwrap();
        let refused = wait_warning(ccm, &events_b, name, "LoadBalancerNotOwned", |n| {
            n.starts_with("Error syncing")
        })
        .await;
        assert!(refused.contains(conflict), "{refused:.400}");
        assert!(refused.len() <= 1024, "{} bytes", refused.len());
        services_b
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        ccm.eventually(&format!("{name}'s deletion"), WAIT, || async {
            services_b.get_opt(name).await.unwrap().is_none()
        })
        .await;
    }
    let lbs = sim.handle().load_balancers();
    assert_eq!(
        lbs.len(),
        2,
        "the victim's and the other cluster's, untouched: {lbs:?}"
    );
    assert!(lbs.contains(&before[0]));
    let log = ccm.log();
    let longest = log.lines().map(str::len).max().unwrap_or_default();
    assert!(longest < 4096, "a {longest}-byte log line");
    assert!(!log.contains("panicked"), "{log}");
    drop(process);
    sim.shutdown().await;
}

/// A shadow (`--shadow`) on `port` with `env`'s cloud and cluster, logging to `log`.
fn start_shadow(env: &Env, port: u16, log: &str) -> CcmProcess {
    CcmProcess::builder(BIN)
        .name(log)
        .args(&env.args)
        .args([
            "--shadow".to_owned(),
            "--insecure-serving".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
        ])
        .log_file(env.dir.path().join(log))
        .spawn()
}

/// The shadow's plan: (controller, kind, object, action, why) of each change.
async fn shadow_plan(port: u16) -> Vec<(String, String, String, String, String)> {
    let (status, body) = http_get(port, "/debug/shadow/plan").await;
    assert_eq!(status, 200, "{body}");
    let plan: serde_json::Value = serde_json::from_str(&body).unwrap();
    let field = |c: &serde_json::Value, k: &str| c[k].as_str().unwrap_or_default().to_owned();
    plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let object = match c["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", field(c, "name")),
                None => field(c, "name"),
            };
            (
                field(c, "controller"),
                field(c, "kind"),
                object,
                field(c, "action"),
                field(c, "why"),
            )
        })
        .collect()
}

/// The sum of the series of `name` on the shadow's `/metrics` whose labels contain `labels`.
async fn shadow_metric(port: u16, name: &str, labels: &str) -> f64 {
    let (_, body) = http_get(port, "/metrics").await;
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the shadow on `port` asked about `services` load balancers and listed the
/// routes twice.
async fn shadow_passes(shadow: &CcmProcess, port: u16, services: f64) {
    shadow
        .eventually("the shadow's first passes", WAIT, || async {
            let planned = shadow_metric(
                port,
                "ccm_cloud_requests_total",
                r#"method="plan_load_balancer""#,
            )
            .await;
            let listed =
                shadow_metric(port, "ccm_cloud_requests_total", r#"method="list_routes""#).await;
            planned >= services && listed >= 2.0
        })
        .await;
}

/// The cloud requests that were not reads, since the counts were last reset.
fn cloud_writes(sim: &RunningSimulator) -> Vec<String> {
    sim.handle()
        .request_counts()
        .into_keys()
        .filter(|k| !k.starts_with("GET "))
        .collect()
}

/// Issue 40's shadow mode: a shadow beside the CCM in charge (ours here; the same holds
/// beside DigitalOcean's, whose load balancers ours adopts) takes a Lease of its own, plans
/// nothing once the CCM in charge has converged, and sends the cloud nothing but reads. With
/// drift injected (a load balancer deleted in the cloud, a Node's label changed) it names
/// exactly those two changes, and still makes neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_plans_nothing_beside_a_converged_ccm_and_names_each_drift() {
    let mut env = start_env().await;
    register_nodes(&env).await;
    let client = env.cp.client().unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let (web, plain) = (unique_name("do-shadow-web"), unique_name("do-shadow-plain"));
    let with_annotations = lb_service(&web, 80)
        .annotation(
            "service.beta.kubernetes.io/do-loadbalancer-protocol",
            "http",
        )
        .annotation(
            "service.beta.kubernetes.io/do-loadbalancer-algorithm",
            "least_connections",
        )
        .annotation(
            "service.beta.kubernetes.io/do-loadbalancer-healthcheck-path",
            "/healthz",
        )
        .build();
    services
        .create(&PostParams::default(), &with_annotations)
        .await
        .unwrap();
    services
        .create(&PostParams::default(), &lb_service(&plain, 443).build())
        .await
        .unwrap();
    for name in [&web, &plain] {
        env.ccm
            .eventually(&format!("{name}'s ingress"), WAIT, || {
                let services = services.clone();
                async move { has_ingress(&services.get(name).await.unwrap()) }
            })
            .await;
    }

    // Beside the CCM in charge: a Lease of its own, and an empty plan.
    let port = free_port();
    let shadow = start_shadow(&env, port, "shadow.log");
    shadow_passes(&shadow, port, 2.0).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let holder = |lease: Lease| lease.spec.and_then(|s| s.holder_identity);
    let ours = holder(leases.get("cloud-controller-manager").await.unwrap());
    let shadows = holder(leases.get("cloud-controller-manager-shadow").await.unwrap());
    assert!(
        ours.is_some() && shadows.is_some() && ours != shadows,
        "{ours:?} {shadows:?}"
    );
    assert_eq!(shadow_plan(port).await, [], "{}", shadow.log());

    // Alone, it still changes nothing: only reads reach the cloud.
    env.ccm.signal(Signal::Term);
    env.ccm.wait_exit(WAIT).await;
    let sim = &env.sim;
    sim.handle().reset_request_counts();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(shadow_plan(port).await, [], "{}", shadow.log());
    assert_eq!(cloud_writes(sim), Vec::<String>::new());

    // Drift: the plain Service's load balancer deleted in the cloud, a Node's region label
    // changed. The running shadow sees the label (a Node event); a shadow started now sees
    // both (it asks about every load balancer as it starts).
    let lbs = sim.handle().load_balancers();
    let plain_id = &services
        .get(&plain)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()[ANNOTATION_LOAD_BALANCER_ID];
    assert!(lbs.iter().any(|lb| &lb.id == plain_id), "{lbs:?}");
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(TOKEN));
    opts.requests_per_second = Some(1000.0);
    Client::new(opts)
        .unwrap()
        .delete_load_balancer(plain_id)
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let drifted = &env.names[0];
    nodes
        .patch(
            drifted,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"topology.kubernetes.io/region": "drifted"}}})),
        )
        .await
        .unwrap();
    shadow
        .eventually(
            "the running shadow to plan the label back",
            WAIT,
            || async { shadow_plan(port).await.iter().any(|c| &c.2 == drifted) },
        )
        .await;
    drop(shadow);
    sim.handle().reset_request_counts();
    let port = free_port();
    let shadow = start_shadow(&env, port, "shadow-2.log");
    shadow_passes(&shadow, port, 2.0).await;
    let plan = shadow
        .eventually("both drifts in the plan", WAIT, || async {
            let plan = shadow_plan(port).await;
            if plan.len() >= 2 {
                Ok(plan)
            } else {
                Err(format!("{plan:?}"))
            }
        })
        .await;
    let what: Vec<_> = plan
        .iter()
        .map(|(controller, kind, object, action, _)| {
            format!("{controller} {action} {kind} {object}")
        })
        .collect();
    assert_eq!(
        what,
        [
            format!("cloud-node-controller update nodes {drifted}"),
            format!("service-lb-controller create cloud/loadbalancers default/{plain}"),
        ],
        "{plan:#?}\n{}",
        shadow.log()
    );
    // The way back, as the JSON Patch the CCM in charge would get.
    let back = r#""path":"/metadata/labels/topology.kubernetes.io~1region","value":"ams3""#;
    assert!(plan[0].4.contains(back), "{}", plan[0].4);
    assert_eq!(
        shadow_metric(
            port,
            "ccm_shadow_planned_changes",
            r#"controller="service-lb-controller",kind="cloud/loadbalancers",action="create""#
        )
        .await,
        1.0
    );
    // Neither is made.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cloud_writes(sim), Vec::<String>::new());
    assert_eq!(sim.handle().load_balancers().len(), 1);
    let node = nodes.get(drifted).await.unwrap();
    assert_eq!(
        ccm_test::fixtures::label(&node, "topology.kubernetes.io/region"),
        Some("drifted")
    );
    assert!(
        has_ingress(&services.get(&plain).await.unwrap()),
        "its status is left as it was"
    );
    assert!(!shadow.log().contains("panicked"), "{}", shadow.log());
}
