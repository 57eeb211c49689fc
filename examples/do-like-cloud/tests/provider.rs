//! The provider against the simulator, started in-process on 127.0.0.1:0.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccm_core::provider::{CloudProvider, LoadBalancer, Route, resolve_instances};
use ccm_do_like_cloud::api::{ForwardingRule, HealthCheck};
use ccm_do_like_cloud::{
    ANNOTATION_ALGORITHM, ANNOTATION_HEALTH_CHECK_PATH, ANNOTATION_LOAD_BALANCER_ID,
    ANNOTATION_OVERRIDE_HEALTH_CHECK, ANNOTATION_PROTOCOL, ApiToken, Client, ClientOptions,
    DoLikeCloud, KUBE_PROXY_HEALTH_PORT, cluster_tag, owner_tag,
};
use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig};
use ccm_test::fixtures::{NodeBuilder, ServiceBuilder};
use k8s_openapi::api::core::v1::{Node, Service, ServicePort};

const TOKEN: &str = "dop_v1_s3cr3t-token-do-not-log";
const CLUSTER: &str = "test-cluster";

async fn sim_with(tweak: impl FnOnce(&mut SimulatorConfig)) -> RunningSimulator {
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.lb_activation_delay = Duration::ZERO;
    tweak(&mut cfg);
    RunningSimulator::start(cfg).await.unwrap()
}

async fn sim() -> RunningSimulator {
    sim_with(|_| {}).await
}

fn provider_with(
    sim: &RunningSimulator,
    token: &str,
    tweak: impl FnOnce(&mut ClientOptions),
) -> Arc<DoLikeCloud> {
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(token));
    opts.requests_per_second = Some(1000.0);
    opts.timeout = Duration::from_secs(5);
    tweak(&mut opts);
    Arc::new(DoLikeCloud::new(Client::new(opts).unwrap(), "nyc1"))
}

fn provider(sim: &RunningSimulator) -> Arc<DoLikeCloud> {
    provider_with(sim, TOKEN, |_| {})
}

/// The provider's `LoadBalancer`, as the service controller reaches it.
fn lb_of(cloud: &DoLikeCloud) -> &dyn LoadBalancer {
    CloudProvider::load_balancer(cloud).unwrap()
}

fn node(name: &str, provider_id: Option<String>) -> Node {
    let node = NodeBuilder::new(name);
    match provider_id {
        Some(id) => node.provider_id(id),
        None => node,
    }
    .build()
}

/// A LoadBalancer Service in `default` as the service controller passes it: port 80/TCP on
/// node port 30080, with `annotations`.
fn service(name: &str, uid: &str, annotations: &[(&str, &str)]) -> Service {
    let service = ServiceBuilder::load_balancer(name)
        .namespace("default")
        .uid(uid);
    annotations
        .iter()
        .fold(service, |s, (key, value)| s.annotation(key, value))
        .port(80)
        .node_port(30080)
        .protocol("TCP")
        .build()
}

/// A droplet `n1` and the Node that stands for it (its provider ID set).
fn one_droplet_node(sim: &RunningSimulator) -> Vec<Arc<Node>> {
    let d = sim.handle().create_droplet("n1", "s", "nyc1");
    vec![Arc::new(node(
        "n1",
        Some(format!("digitalocean://{}", d.id)),
    ))]
}

fn raw_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

#[tokio::test]
async fn instance_metadata_by_name_and_provider_id() {
    let sim = sim().await;
    let d = sim
        .handle()
        .create_droplet("worker-1", "s-4vcpu-8gb", "fra1");
    let cloud = provider(&sim);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let inst = resolve_instances(&p).unwrap();

    let meta = inst
        .instance_metadata(&node("worker-1", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, format!("digitalocean://{}", d.id));
    assert_eq!(meta.instance_type, "s-4vcpu-8gb");
    assert_eq!((meta.zone.as_str(), meta.region.as_str()), ("fra1", "fra1"));
    let kinds: Vec<&str> = meta
        .node_addresses
        .iter()
        .map(|a| a.type_.as_str())
        .collect();
    assert_eq!(
        kinds,
        ["Hostname", "InternalIP", "ExternalIP", "ExternalIP"]
    );

    let by_id = node("renamed", Some(meta.provider_id.clone()));
    assert!(inst.instance_exists(&by_id).await.unwrap());
    assert!(!inst.instance_shutdown(&by_id).await.unwrap());

    sim.handle().set_droplet_status(d.id, "off");
    cloud.client().invalidate();
    assert!(inst.instance_shutdown(&by_id).await.unwrap());

    sim.handle().delete_droplet(d.id);
    cloud.client().invalidate();
    assert!(!inst.instance_exists(&by_id).await.unwrap());
    assert!(!inst.instance_exists(&node("worker-1", None)).await.unwrap());
    let err = inst
        .instance_metadata(&node("nope", None))
        .await
        .unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");
    sim.shutdown().await;
}

#[tokio::test]
async fn lists_follow_pages() {
    let sim = sim().await;
    for i in 0..45 {
        sim.handle()
            .create_droplet(&format!("n-{i}"), "s-1vcpu-1gb", "nyc1");
    }
    let cloud = provider_with(&sim, TOKEN, |o| o.per_page = 20);
    let all = cloud.client().list_droplets().await.unwrap();
    assert_eq!(all.len(), 45);
    assert_eq!(sim.handle().request_count("GET /v2/droplets"), 3);

    let page: serde_json::Value = raw_client()
        .get(format!("{}/v2/droplets?page=2&per_page=20", sim.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["meta"]["total"], 45);
    assert_eq!(page["droplets"].as_array().unwrap().len(), 20);
    // DigitalOcean's links are absolute URLs.
    assert_eq!(
        page["links"]["pages"]["next"],
        format!("{}/v2/droplets?page=3&per_page=20", sim.url())
    );
    assert_eq!(
        page["links"]["pages"]["prev"],
        format!("{}/v2/droplets?page=1&per_page=20", sim.url())
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn one_list_answers_many_lookups() {
    let sim = sim().await;
    for i in 0..10 {
        sim.handle()
            .create_droplet(&format!("n-{i}"), "s-1vcpu-1gb", "nyc1");
    }
    let cloud = provider_with(&sim, TOKEN, |o| o.cache_ttl = Duration::from_secs(60));
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let inst = resolve_instances(&p).unwrap();
    for i in 0..10 {
        let meta = inst
            .instance_metadata(&node(&format!("n-{i}"), None))
            .await
            .unwrap();
        assert!(meta.is_some());
    }
    assert_eq!(sim.handle().request_count("GET /v2/droplets"), 1);
    assert_eq!(sim.handle().request_count("GET /v2/droplets/{id}"), 0);
    let stats = cloud.client().cache_stats();
    assert_eq!((stats.hits, stats.misses), (9, 1));

    // A name missing from a list older than a second lists again: new droplets are found
    // well before the TTL.
    sim.handle().create_droplet("late", "s-1vcpu-1gb", "nyc1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        inst.instance_metadata(&node("late", None))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(sim.handle().request_count("GET /v2/droplets"), 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn retry_after_is_honoured_and_capped() {
    let sim = sim().await;
    sim.handle().create_droplet("w", "s", "nyc1");
    let cloud = provider(&sim);

    // Two 429s with Retry-After: 1 → waited in place, then success.
    let mut f = Faults::default();
    f.burst_429 = 2;
    f.retry_after_secs = 1;
    sim.handle().set_faults(f);
    let start = Instant::now();
    assert_eq!(cloud.client().list_droplets().await.unwrap().len(), 1);
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(sim.handle().request_count("429"), 2);

    // A Retry-After past the cap goes back to the caller as a retry-after error.
    let mut f = Faults::default();
    f.burst_429 = 1;
    f.retry_after_secs = 120;
    sim.handle().set_faults(f);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let err = p
        .load_balancer()
        .unwrap()
        .get_load_balancer(CLUSTER, &service("s", "u-1", &[]))
        .await
        .unwrap_err();
    assert_eq!(
        err.retry_after_delay(),
        Some(Duration::from_secs(120)),
        "{err}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_token_is_401_and_an_error() {
    let sim = sim().await;
    sim.handle().create_droplet("w", "s", "nyc1");
    let resp = raw_client()
        .get(format!("{}/v2/droplets", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["id"], "unauthorized");
    assert!(body["message"].is_string());

    let cloud = provider_with(&sim, "wrong-token", |_| {});
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let err = resolve_instances(&p)
        .unwrap()
        .instance_metadata(&node("w", None))
        .await
        .unwrap_err();
    let text = err.chain_to_string();
    assert!(text.contains("unauthorized"), "{text}");
    assert!(!text.contains("wrong-token"), "{text}");
    sim.shutdown().await;
}

#[tokio::test]
async fn malformed_json_is_an_error_not_a_panic() {
    let sim = sim().await;
    sim.handle().create_droplet("w", "s", "nyc1");
    let cloud = provider(&sim);
    let mut f = Faults::default();
    f.malformed = 1;
    sim.handle().set_faults(f);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let inst = resolve_instances(&p).unwrap();
    let err = inst.instance_metadata(&node("w", None)).await.unwrap_err();
    assert!(
        err.chain_to_string().contains("malformed"),
        "{}",
        err.chain_to_string()
    );
    // The next call works.
    assert!(
        inst.instance_metadata(&node("w", None))
            .await
            .unwrap()
            .is_some()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn load_balancer_lifecycle_by_name_tag_and_annotation() {
    let sim = sim().await;
    let d1 = sim.handle().create_droplet("n1", "s", "nyc1");
    let d2 = sim.handle().create_droplet("n2", "s", "nyc1");
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let nodes = vec![
        Arc::new(node("n1", Some(format!("digitalocean://{}", d1.id)))),
        Arc::new(node("n2", None)),
    ];
    let svc = service(
        "web",
        "11111111-2222-3333-4444-555555555555",
        &[
            (ANNOTATION_PROTOCOL, "http"),
            (ANNOTATION_OVERRIDE_HEALTH_CHECK, "true"),
            (ANNOTATION_HEALTH_CHECK_PATH, "/ready"),
            (ANNOTATION_ALGORITHM, "least_connections"),
        ],
    );
    assert!(lb.get_load_balancer(CLUSTER, &svc).await.unwrap().is_none());
    let status = lb
        .ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    let ip = status.ingress.unwrap()[0].ip.clone().unwrap();
    let lbs = sim.handle().load_balancers();
    assert_eq!(lbs.len(), 1);
    let created = &lbs[0];
    assert_eq!(created.ip, ip);
    assert_eq!(created.name, "a11111111222233334444555555555555"[..32]);
    assert_eq!(created.tags, [cluster_tag(CLUSTER), owner_tag(&svc)]);
    assert_eq!(
        owner_tag(&svc),
        "kubernetes-service-uid:11111111-2222-3333-4444-555555555555"
    );
    assert_eq!(created.droplet_ids, [d1.id, d2.id]);
    assert_eq!(created.algorithm, "least_connections");
    assert_eq!(created.forwarding_rules[0].entry_protocol, "http");
    let hc = created.health_check.as_ref().unwrap();
    assert_eq!(
        (hc.protocol.as_str(), hc.port, hc.path.as_str()),
        ("http", 30080, "/ready"),
        "overridden: the path on the first port's node port"
    );
    assert_eq!(created.region.name, "New York 1", "the region is an object");

    // Ensured again, renamed, or looked up by the ID annotation: the same LB, no PUT.
    lb.ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    let mut renamed = svc.clone();
    renamed.metadata.name = Some("web-renamed".into());
    lb.ensure_load_balancer(CLUSTER, &renamed, &nodes)
        .await
        .unwrap();
    assert_eq!(sim.handle().load_balancers().len(), 1);
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 0);
    let mut by_id = svc.clone();
    by_id
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_LOAD_BALANCER_ID.into(), created.id.clone());
    assert!(
        lb.get_load_balancer(CLUSTER, &by_id)
            .await
            .unwrap()
            .is_some()
    );

    // Fewer nodes: one PUT.
    lb.update_load_balancer(CLUSTER, &svc, &nodes[..1])
        .await
        .unwrap();
    assert_eq!(sim.handle().load_balancers()[0].droplet_ids, [d1.id]);
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 1);

    // Another cluster neither sees nor touches it.
    assert!(lb.get_load_balancer("other", &svc).await.unwrap().is_none());
    lb.ensure_load_balancer_deleted("other", &svc)
        .await
        .unwrap();
    assert_eq!(sim.handle().load_balancers().len(), 1);
    let err = lb.get_load_balancer("other", &by_id).await.unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "load balancer {:?} is not this Service's: annotation {ANNOTATION_LOAD_BALANCER_ID} \
             names it, but it is not tagged for this cluster",
            created.id
        )
    );
    // Another cluster's deletion through the ID finishes ("nothing of ours") and leaves it.
    let err = lb
        .ensure_load_balancer_deleted("other", &by_id)
        .await
        .unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    assert_eq!(sim.handle().load_balancers().len(), 1);

    lb.ensure_load_balancer_deleted(CLUSTER, &svc)
        .await
        .unwrap();
    assert!(sim.handle().load_balancers().is_empty());
    lb.ensure_load_balancer_deleted(CLUSTER, &svc)
        .await
        .unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_annotations_name_the_annotation() {
    let sim = sim().await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    for (key, value) in [
        (ANNOTATION_PROTOCOL, "smtp"),
        (ANNOTATION_ALGORITHM, "random"),
        (ccm_do_like_cloud::ANNOTATION_SIZE_SLUG, "huge"),
        (ANNOTATION_HEALTH_CHECK_PATH, "healthz"),
    ] {
        let annotations = [(key, value), (ANNOTATION_OVERRIDE_HEALTH_CHECK, "")];
        let err = lb
            .ensure_load_balancer(CLUSTER, &service("s", "u-2", &annotations), &[])
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(key) && text.contains(value), "{text}");
    }
    assert!(sim.handle().load_balancers().is_empty());
    sim.shutdown().await;
}

fn port(port: i32, protocol: &str, node_port: i32) -> ServicePort {
    ServicePort {
        port,
        node_port: Some(node_port),
        protocol: Some(protocol.into()),
        ..ServicePort::default()
    }
}

fn healthz(port: u16) -> HealthCheck {
    HealthCheck {
        protocol: "http".into(),
        port,
        path: "/healthz".into(),
        check_interval_seconds: 3,
        response_timeout_seconds: 5,
        healthy_threshold: 5,
        unhealthy_threshold: 3,
    }
}

#[tokio::test]
async fn tcp_and_udp_ports_are_forwarded_and_kube_proxy_is_health_checked() {
    let sim = sim().await;
    let nodes = one_droplet_node(&sim);
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    // DNS-like: TCP and UDP on one port number, and UDP alone.
    let mut svc = service("dns", "22222222-0000-0000-0000-000000000053", &[]);
    svc.spec.as_mut().unwrap().ports = Some(vec![
        port(53, "UDP", 30053),
        port(53, "TCP", 30054),
        port(5353, "UDP", 31353),
    ]);
    lb.ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    let created = sim.handle().load_balancers().remove(0);
    assert_eq!(
        created.forwarding_rules,
        [
            ForwardingRule::new("udp", 53, 30053),
            ForwardingRule::new("tcp", 53, 30054),
            ForwardingRule::new("udp", 5353, 31353)
        ]
    );
    // externalTrafficPolicy Cluster: kube-proxy's /healthz on 10256, not a rule's port.
    assert_eq!(created.health_check, Some(healthz(KUBE_PROXY_HEALTH_PORT)));

    // Local: the Service's health check node port, in one PUT; then nothing to do.
    let spec = svc.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32123);
    lb.update_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    lb.ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 1);
    assert_eq!(
        sim.handle().load_balancers()[0].health_check,
        Some(healthz(32123))
    );

    // A UDP-only Service overridden has no TCP port to check: an error, the LB unchanged.
    svc.spec.as_mut().unwrap().ports = Some(vec![port(5353, "UDP", 31353)]);
    svc.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_OVERRIDE_HEALTH_CHECK.into(), String::new());
    let err = lb
        .update_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no TCP port"), "{err}");
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_service_without_node_ports_gets_passthrough_rules_until_it_has_them() {
    let sim = sim().await;
    let nodes = one_droplet_node(&sim);
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    // allocateLoadBalancerNodePorts: false — the API server allocates no node port.
    let mut svc = service("direct", "22222222-0000-0000-0000-000000000080", &[]);
    let spec = svc.spec.as_mut().unwrap();
    spec.allocate_load_balancer_node_ports = Some(false);
    spec.ports = Some(vec![
        ServicePort {
            node_port: None,
            ..port(80, "TCP", 0)
        },
        ServicePort {
            node_port: None,
            ..port(53, "UDP", 0)
        },
    ]);
    // Dual-stack it cannot be: passthrough rules carry IPv4 packets only. Nothing is made.
    let mut dual = svc.clone();
    dual.metadata.annotations = Some(
        [(
            ccm_do_like_cloud::ANNOTATION_NETWORK_STACK.to_owned(),
            "DUALSTACK".to_owned(),
        )]
        .into(),
    );
    let err = lb
        .ensure_load_balancer(CLUSTER, &dual, &nodes)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(ccm_do_like_cloud::ANNOTATION_NETWORK_STACK) && err.contains("node ports"),
        "{err}"
    );
    assert!(sim.handle().load_balancers().is_empty());
    lb.ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    let passthrough = |protocol: &str, port: u16| ForwardingRule {
        x_passthrough: true,
        ..ForwardingRule::new(protocol, port, port)
    };
    assert_eq!(
        sim.handle().load_balancers()[0].forwarding_rules,
        [passthrough("tcp", 80), passthrough("udp", 53)],
        "from and to the Service's ports, passed through"
    );
    assert_eq!(
        sim.handle().load_balancers()[0].health_check,
        Some(healthz(KUBE_PROXY_HEALTH_PORT))
    );

    // Node ports allocated later: proxied rules to them, in one update.
    let spec = svc.spec.as_mut().unwrap();
    spec.allocate_load_balancer_node_ports = Some(true);
    spec.ports = Some(vec![port(80, "TCP", 30080), port(53, "UDP", 30053)]);
    lb.update_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(
        sim.handle().load_balancers()[0].forwarding_rules,
        [
            ForwardingRule::new("tcp", 80, 30080),
            ForwardingRule::new("udp", 53, 30053)
        ]
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn an_sctp_port_is_an_error_naming_it_and_no_load_balancer() {
    let sim = sim().await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let mut svc = service("sctp", "33333333-0000-0000-0000-000000000001", &[]);
    svc.spec
        .as_mut()
        .unwrap()
        .ports
        .as_mut()
        .unwrap()
        .push(port(9, "SCTP", 30009));
    let err = lb
        .ensure_load_balancer(CLUSTER, &svc, &[])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "service default/sctp: port 9/SCTP: protocol SCTP is not supported: load balancers \
         forward TCP and UDP only"
    );
    assert!(sim.handle().load_balancers().is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn latency_slows_calls_and_beyond_the_timeout_fails_them_without_a_duplicate() {
    let sim = sim().await;
    sim.handle().create_droplet("slow-1", "s-1vcpu-1gb", "nyc1");
    let cloud = provider_with(&sim, TOKEN, |o| {
        o.timeout = Duration::from_millis(400);
        o.max_retries = 1;
        o.cache_ttl = Duration::ZERO;
    });
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let instances = resolve_instances(&p).unwrap();
    let lb = p.load_balancer().unwrap();
    let set_latency = |ms| {
        let mut faults = Faults::default();
        faults.latency_ms = ms;
        sim.handle().set_faults(faults);
    };

    // Slower than usual but inside the timeout: answered, just later.
    set_latency(150);
    let started = Instant::now();
    let meta = instances
        .instance_metadata(&node("slow-1", None))
        .await
        .unwrap();
    assert!(meta.is_some());
    assert!(started.elapsed() >= Duration::from_millis(150));

    // Beyond the timeout: an error after the bounded retries, not a hang.
    set_latency(2_000);
    let svc = service("slow", "u-slow", &[]);
    let started = Instant::now();
    let err = lb
        .ensure_load_balancer(CLUSTER, &svc, &[])
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        ccm_core::provider::display_chain(&err).contains("timed out"),
        "{}",
        ccm_core::provider::display_chain(&err)
    );

    // The cloud recovers: one LB, however many attempts timed out on the way.
    set_latency(0);
    lb.ensure_load_balancer(CLUSTER, &svc, &[]).await.unwrap();
    assert_eq!(sim.handle().load_balancers().len(), 1);
    sim.shutdown().await;
}

/// A new load balancer is `new` for a second: the ensure that created it answers
/// "provisioning, look again in a second" (not a failure, no second create); a sync before
/// that look is due is answered from the client's last look, without a request; the look
/// when it is due finds it active.
#[tokio::test]
async fn a_new_load_balancer_is_provisioning_then_looked_at_once_when_due() {
    let sim = sim_with(|c| c.lb_activation_delay = Duration::from_millis(1000)).await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let svc = service("s", "u-3", &[]);
    let err = lb
        .ensure_load_balancer(CLUSTER, &svc, &[])
        .await
        .unwrap_err();
    assert!(err.is_provisioning(), "{err}");
    let after = err.retry_after_delay().unwrap();
    assert!(
        after > Duration::from_millis(800) && after <= Duration::from_secs(1),
        "{after:?}"
    );
    // What the ID annotation's write makes the controller do at once: sync again. Answered
    // from the create's answer: provisioning, no request.
    let id = sim.handle().load_balancers()[0].id.clone();
    let annotated = service("s", "u-3", &[(ANNOTATION_LOAD_BALANCER_ID, &id)]);
    let before: u64 = sim.handle().request_counts().values().sum();
    let again = lb
        .ensure_load_balancer(CLUSTER, &annotated, &[])
        .await
        .unwrap_err();
    assert!(again.is_provisioning(), "{again}");
    assert!(again.retry_after_delay().unwrap() <= after);
    assert_eq!(sim.handle().request_counts().values().sum::<u64>(), before);

    tokio::time::sleep(after + Duration::from_millis(100)).await;
    let status = lb
        .ensure_load_balancer(CLUSTER, &annotated, &[])
        .await
        .unwrap();
    assert!(!status.ingress.unwrap_or_default().is_empty());
    assert_eq!(sim.handle().load_balancers().len(), 1);
    assert_eq!(sim.handle().request_count("POST /v2/load_balancers"), 1);
    assert_eq!(sim.handle().request_count("GET /v2/load_balancers/{id}"), 1);
    sim.shutdown().await;
}

/// Without the ID annotation (no annotator, or its write failed), the load balancer is
/// found by name in the client's index of the account's load balancers: listed once, kept
/// current by the create's answer, so neither a second create nor a list per sync.
#[tokio::test]
async fn a_load_balancer_is_found_by_name_without_a_list_per_sync() {
    let sim = sim_with(|c| c.lb_activation_delay = Duration::ZERO).await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    for i in 0..5 {
        let svc = service(&format!("s{i}"), &format!("u-list-{i}"), &[]);
        lb.ensure_load_balancer(CLUSTER, &svc, &[]).await.unwrap();
        // Again, as a later sync does: found (a read of it), not created again.
        lb.ensure_load_balancer(CLUSTER, &svc, &[]).await.unwrap();
    }
    assert_eq!(sim.handle().load_balancers().len(), 5);
    assert_eq!(sim.handle().request_count("POST /v2/load_balancers"), 5);
    assert_eq!(
        sim.handle().request_count("GET /v2/load_balancers"),
        1,
        "one list for every Service within the cache TTL"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn faults_still_converge_without_duplicates_or_orphans() {
    let sim = sim().await;
    let nodes = one_droplet_node(&sim);
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let mut f = Faults::default();
    f.error_rate = 0.3;
    f.burst_429 = 5;
    f.retry_after_secs = 0;
    sim.handle().set_faults(f);

    for i in 0..10 {
        let svc = service(&format!("s{i}"), &format!("uid-{i}"), &[]);
        let mut ok = false;
        for _ in 0..50 {
            if lb.ensure_load_balancer(CLUSTER, &svc, &nodes).await.is_ok() {
                ok = true;
                break;
            }
        }
        assert!(ok, "service s{i} never converged");
    }
    assert_eq!(sim.handle().load_balancers().len(), 10);
    assert!(sim.handle().request_count("500") > 0);
    assert!(sim.handle().request_count("429") >= 5);

    for i in 0..10 {
        let svc = service(&format!("s{i}"), &format!("uid-{i}"), &[]);
        let mut ok = false;
        for _ in 0..50 {
            if lb.ensure_load_balancer_deleted(CLUSTER, &svc).await.is_ok() {
                ok = true;
                break;
            }
        }
        assert!(ok, "service s{i} was never deleted");
    }
    assert!(sim.handle().load_balancers().is_empty(), "orphans left");
    sim.shutdown().await;
}

#[tokio::test]
async fn routes_through_the_extension() {
    let sim = sim().await;
    for name in ["n1", "m1"] {
        sim.handle().create_droplet(name, "s", "nyc1");
    }
    let cloud = provider(&sim);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let routes = p.routes().unwrap();
    // The cloud refuses a route to a droplet that does not exist.
    let refused = routes
        .create_route(CLUSTER, "hint", &Route::new("gone", "10.244.9.0/24"))
        .await
        .unwrap_err();
    let mut chain = refused.to_string();
    let mut cause = std::error::Error::source(&refused);
    while let Some(e) = cause {
        chain += &format!(": {e}");
        cause = e.source();
    }
    assert!(chain.contains("no droplet of that name"), "{chain}");
    let r = Route::new("n1", "10.244.1.0/24");
    routes.create_route(CLUSTER, "hint", &r).await.unwrap();
    routes.create_route(CLUSTER, "hint", &r).await.unwrap();
    routes
        .create_route("other", "hint", &Route::new("m1", "10.99.0.0/24"))
        .await
        .unwrap();
    let listed = routes.list_routes(CLUSTER).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].target_node.as_str(),
            listed[0].destination_cidr.as_str()
        ),
        ("n1", "10.244.1.0/24")
    );
    routes.delete_route(CLUSTER, &listed[0]).await.unwrap();
    assert!(routes.list_routes(CLUSTER).await.unwrap().is_empty());
    assert_eq!(
        sim.handle().routes().len(),
        1,
        "the other cluster's route stays"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let f2 = file.clone();
    let sim = sim_with(|c| c.state_file = Some(f2)).await;
    let d = sim.handle().create_droplet("keep", "s", "nyc1");
    let cloud = provider(&sim);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    p.load_balancer()
        .unwrap()
        .ensure_load_balancer(CLUSTER, &service("s", "u-9", &[]), &[])
        .await
        .unwrap();
    sim.shutdown().await;

    let f3 = file.clone();
    let sim = sim_with(|c| c.state_file = Some(f3)).await;
    assert_eq!(sim.handle().droplets(), vec![d]);
    assert_eq!(sim.handle().load_balancers().len(), 1);
    // New IDs do not collide with the old ones.
    let d2 = sim.handle().create_droplet("new", "s", "nyc1");
    assert_eq!(sim.handle().droplets().len(), 2);
    assert_ne!(d2.id, sim.handle().droplets()[0].id);
    sim.shutdown().await;
}

#[tokio::test]
async fn the_client_paces_itself() {
    let sim = sim().await;
    let cloud = provider_with(&sim, TOKEN, |o| o.requests_per_second = Some(20.0));
    let start = Instant::now();
    for _ in 0..6 {
        cloud.client().list_droplets().await.unwrap();
    }
    // Six requests at 20 per second: the last starts 250 ms after the first.
    assert!(
        start.elapsed() >= Duration::from_millis(240),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(sim.handle().request_count("GET /v2/droplets"), 6);
    sim.shutdown().await;
}

/// `victim` in tenant-a, `attacker` in tenant-b with a copy of the victim's ID annotation:
/// nothing the attacker's calls do reaches the victim's LB.
#[tokio::test]
async fn a_copied_id_annotation_never_takes_over_another_services_load_balancer() {
    let sim = sim().await;
    let d1 = sim.handle().create_droplet("n1", "s", "nyc1");
    let d2 = sim.handle().create_droplet("n2", "s", "nyc1");
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let n1 = vec![Arc::new(node(
        "n1",
        Some(format!("digitalocean://{}", d1.id)),
    ))];
    let n2 = vec![Arc::new(node(
        "n2",
        Some(format!("digitalocean://{}", d2.id)),
    ))];

    let mut victim = service("victim", "aaaaaaaa-0000-0000-0000-000000000001", &[]);
    victim.metadata.namespace = Some("tenant-a".into());
    lb.ensure_load_balancer(CLUSTER, &victim, &n1)
        .await
        .unwrap();
    let before = sim.handle().load_balancers();
    assert_eq!(before.len(), 1);
    let id = before[0].id.clone();

    // The attacker: another namespace and UID, other ports and Nodes, the victim's ID.
    let mut attacker = service(
        "attacker",
        "bbbbbbbb-0000-0000-0000-000000000002",
        &[(ANNOTATION_LOAD_BALANCER_ID, &id)],
    );
    attacker.metadata.namespace = Some("tenant-b".into());
    attacker.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 443;
    sim.handle().reset_request_counts();
    let want = format!(
        "load balancer {id:?} is not this Service's: annotation {ANNOTATION_LOAD_BALANCER_ID} \
         names it, but it was made for another Service"
    );
    let err = lb
        .ensure_load_balancer(CLUSTER, &attacker, &n2)
        .await
        .unwrap_err();
    assert!(err.is_not_owned());
    assert_eq!(err.to_string(), want);
    let err = lb
        .update_load_balancer(CLUSTER, &attacker, &n2)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), want);
    let err = lb.get_load_balancer(CLUSTER, &attacker).await.unwrap_err();
    assert_eq!(err.to_string(), want);
    let err = lb
        .ensure_load_balancer_deleted(CLUSTER, &attacker)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), want);
    assert_eq!(
        sim.handle().load_balancers(),
        before,
        "the victim's LB is untouched"
    );
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 0);
    assert_eq!(sim.handle().request_count("POST /v2/load_balancers"), 0);
    assert_eq!(
        sim.handle().request_count("DELETE /v2/load_balancers/{id}"),
        0
    );

    // An attacker that had an LB of its own before it copied the ID: deleting it deletes
    // its own (found by name), not the victim's.
    let mut own = attacker.clone();
    own.metadata.annotations = None;
    lb.ensure_load_balancer(CLUSTER, &own, &n2).await.unwrap();
    assert_eq!(sim.handle().load_balancers().len(), 2);
    let err = lb
        .ensure_load_balancer_deleted(CLUSTER, &attacker)
        .await
        .unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    assert_eq!(sim.handle().load_balancers(), before);
    sim.shutdown().await;
}

#[tokio::test]
async fn an_id_annotation_that_is_no_id_is_never_sent_and_deletion_finishes() {
    let sim = sim().await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let huge = "4".repeat(100_000);
    for bad in ["42", "../../droplets", huge.as_str()] {
        let svc = service(
            "bad",
            "cccccccc-0000-0000-0000-000000000003",
            &[(ANNOTATION_LOAD_BALANCER_ID, bad)],
        );
        sim.handle().reset_request_counts();
        for err in [
            lb.ensure_load_balancer(CLUSTER, &svc, &[])
                .await
                .unwrap_err(),
            lb.get_load_balancer(CLUSTER, &svc).await.unwrap_err(),
            lb.ensure_load_balancer_deleted(CLUSTER, &svc)
                .await
                .unwrap_err(),
        ] {
            assert!(err.is_not_owned(), "{err}");
            let text = err.to_string();
            assert!(text.len() < 400, "bounded: {} bytes", text.len());
            assert!(
                text.ends_with(&format!(
                    "is not this Service's: annotation {ANNOTATION_LOAD_BALANCER_ID} does not \
                     hold a load balancer ID (a UUID)"
                )),
                "{text:.300}"
            );
        }
        assert_eq!(sim.handle().request_count("GET /v2/load_balancers/{id}"), 0);
    }
    // An ID of an LB that no longer exists is not a conflict: the name lookup decides.
    let gone = service(
        "gone",
        "dddddddd-0000-0000-0000-000000000004",
        &[(
            ANNOTATION_LOAD_BALANCER_ID,
            "4de7ac8b-495b-4884-9a69-0000000f0000",
        )],
    );
    lb.ensure_load_balancer(CLUSTER, &gone, &[]).await.unwrap();
    lb.ensure_load_balancer_deleted(CLUSTER, &gone)
        .await
        .unwrap();
    assert!(sim.handle().load_balancers().is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn an_lb_made_before_owner_tags_is_kept_by_its_service_and_tagged() {
    let sim = sim().await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let svc = service("old", "eeeeeeee-0000-0000-0000-000000000005", &[]);
    lb.ensure_load_balancer(CLUSTER, &svc, &[]).await.unwrap();
    // As an older provider made it: the cluster tag only.
    let made = sim.handle().load_balancers().remove(0);
    let mut old_spec = made.to_request();
    old_spec.tags = vec![cluster_tag(CLUSTER)];
    cloud
        .client()
        .update_load_balancer(&made.id, &old_spec)
        .await
        .unwrap();

    // Another Service pointing at it by ID is refused: the name says whose it is.
    let other = service(
        "other",
        "ffffffff-0000-0000-0000-000000000006",
        &[(ANNOTATION_LOAD_BALANCER_ID, &made.id)],
    );
    let err = lb
        .ensure_load_balancer(CLUSTER, &other, &[])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("names it, but it has no owner tag and was made for another Service"),
        "{err}"
    );
    // Its own Service, by ID: the same LB, now with the owner tag.
    let mut by_id = svc.clone();
    by_id.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_LOAD_BALANCER_ID.to_owned(),
        made.id.clone(),
    )]));
    lb.ensure_load_balancer(CLUSTER, &by_id, &[]).await.unwrap();
    let now = sim.handle().load_balancers();
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].id, made.id);
    assert_eq!(now[0].tags, [cluster_tag(CLUSTER), owner_tag(&svc)]);
    sim.shutdown().await;
}

/// DigitalOcean's CCM, outside DOKS, tags nothing and names an LB `a` + the Service's UID;
/// it writes the LB's ID onto the Service. Ours keeps such an LB for its Service (same ID,
/// same address) and tags it; a copy of the annotation in another namespace is refused.
#[tokio::test]
async fn an_lb_digitaloceans_ccm_made_is_kept_by_its_service_and_a_copy_is_refused() {
    let sim = sim().await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let nodes = one_droplet_node(&sim);
    let svc = service("web", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", &[]);
    lb.ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();
    // As DigitalOcean's CCM leaves it: the default name, no tags.
    let made = sim.handle().load_balancers().remove(0);
    let mut theirs = made.to_request();
    theirs.tags.clear();
    cloud
        .client()
        .update_load_balancer(&made.id, &theirs)
        .await
        .unwrap();
    let annotated = |mut s: Service| {
        s.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_LOAD_BALANCER_ID.to_owned(),
            made.id.clone(),
        )]));
        s
    };

    // Another Service with the annotation copied: refused, and nothing is written.
    let mut copy = annotated(service("copy", "11111111-2222-3333-4444-555555555555", &[]));
    copy.metadata.namespace = Some("elsewhere".into());
    sim.handle().reset_request_counts();
    let err = lb
        .ensure_load_balancer(CLUSTER, &copy, &nodes)
        .await
        .unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    assert!(
        err.to_string().ends_with(
            "names it, but it is tagged for no cluster and its name is not this Service's \
             default name"
        ),
        "{err}"
    );
    let err = lb.ensure_load_balancer_deleted(CLUSTER, &copy).await;
    assert!(err.unwrap_err().is_not_owned());
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 0);
    assert_eq!(sim.handle().request_count("POST /v2/load_balancers"), 0);
    assert_eq!(
        sim.handle().request_count("DELETE /v2/load_balancers/{id}"),
        0
    );

    // Its own Service, by the ID DigitalOcean's CCM wrote, and by name without it: the same
    // LB and address, now tagged for the cluster and the Service.
    for own in [annotated(svc.clone()), svc.clone()] {
        let status = lb
            .ensure_load_balancer(CLUSTER, &own, &nodes)
            .await
            .unwrap();
        let now = sim.handle().load_balancers();
        assert_eq!(now.len(), 1, "nothing re-created");
        assert_eq!(now[0].id, made.id);
        assert_eq!(now[0].ip, made.ip);
        let ingress = status.ingress.unwrap();
        assert_eq!(ingress[0].ip.as_deref(), Some(made.ip.as_str()));
        assert_eq!(now[0].tags, [cluster_tag(CLUSTER), owner_tag(&svc)]);
    }
    // Tagged now, the copy stays refused for the usual reason.
    let err = lb
        .ensure_load_balancer(CLUSTER, &copy, &nodes)
        .await
        .unwrap_err();
    assert!(
        err.to_string().ends_with("it was made for another Service"),
        "{err}"
    );
    sim.shutdown().await;
}

/// `do-loadbalancer-name` names the LB (renaming it renames the LB, found by its ID or by
/// name), `-hostname` is the ingress, `-type: REGIONAL_NETWORK` forwards packets to the
/// Service's ports (passthrough), and `service.kubernetes.io/do-loadbalancer-disown` leaves
/// the LB alone through ensure and deletion.
#[tokio::test]
async fn digitaloceans_name_hostname_type_and_disown_are_honoured() {
    use ccm_do_like_cloud::{
        ANNOTATION_DISOWN, ANNOTATION_HOSTNAME, ANNOTATION_NAME, ANNOTATION_TYPE,
    };
    let sim = sim().await;
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let nodes = one_droplet_node(&sim);
    let uid = "12345678-9abc-def0-1234-56789abcdef0";
    let named = service(
        "web",
        uid,
        &[
            (ANNOTATION_NAME, "web-prod"),
            (ANNOTATION_HOSTNAME, "Web.Example.com"),
            (ANNOTATION_TYPE, "REGIONAL_NETWORK"),
        ],
    );
    let status = lb
        .ensure_load_balancer(CLUSTER, &named, &nodes)
        .await
        .unwrap();
    let ingress = status.ingress.unwrap();
    assert_eq!(ingress[0].hostname.as_deref(), Some("web.example.com"));
    assert_eq!(ingress[0].ip, None);
    let made = sim.handle().load_balancers().remove(0);
    assert_eq!(made.name, "web-prod");
    assert_eq!(
        made.forwarding_rules,
        [ForwardingRule::new("tcp", 80, 80)],
        "REGIONAL_NETWORK: to the Service's port, not the node port"
    );
    assert_eq!(made.lb_type, "REGIONAL_NETWORK", "as the API's type");
    assert!(made.is_passthrough());
    // Found again by its name (no ID annotation here), and renamed in place.
    let mut renamed = named.clone();
    renamed
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_NAME.into(), "web-prod-2".into());
    lb.ensure_load_balancer(CLUSTER, &named, &nodes)
        .await
        .unwrap();
    let mut by_id = renamed.clone();
    by_id
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_LOAD_BALANCER_ID.into(), made.id.clone());
    lb.ensure_load_balancer(CLUSTER, &by_id, &nodes)
        .await
        .unwrap();
    let now = sim.handle().load_balancers();
    assert_eq!(
        (now.len(), &now[0].id, now[0].name.as_str()),
        (1, &made.id, "web-prod-2")
    );

    // Disowned: ensure reports it and writes nothing; deletion leaves it.
    let mut disowned = by_id.clone();
    let annotations = disowned.metadata.annotations.as_mut().unwrap();
    annotations.insert(ANNOTATION_DISOWN.into(), "true".into());
    annotations.insert(ANNOTATION_TYPE.into(), "REGIONAL".into());
    sim.handle().reset_request_counts();
    let status = lb
        .ensure_load_balancer(CLUSTER, &disowned, &nodes)
        .await
        .unwrap();
    assert_eq!(
        status.ingress.unwrap()[0].hostname.as_deref(),
        Some("web.example.com")
    );
    lb.update_load_balancer(CLUSTER, &disowned, &nodes)
        .await
        .unwrap();
    lb.ensure_load_balancer_deleted(CLUSTER, &disowned)
        .await
        .unwrap();
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 0);
    assert_eq!(
        sim.handle().request_count("DELETE /v2/load_balancers/{id}"),
        0
    );
    assert_eq!(sim.handle().load_balancers(), now, "left alone");
    sim.shutdown().await;
}

/// A droplet's server for the health tests: accepts TCP connections on `port` of `ip`
/// until aborted.
async fn accepting(ip: std::net::Ipv4Addr, port: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
    tokio::spawn(async move { while listener.accept().await.is_ok() {} })
}

#[tokio::test]
async fn health_follows_the_data_planes_checks_from_the_index() {
    use ccm_core::provider::LoadBalancerHealth;
    use ccm_do_like_cloud::{
        ANNOTATION_HEALTH_CHECK_HEALTHY, ANNOTATION_HEALTH_CHECK_INTERVAL,
        ANNOTATION_HEALTH_CHECK_PROTOCOL, ANNOTATION_HEALTH_CHECK_UNHEALTHY,
    };
    let droplet_ip = std::net::Ipv4Addr::new(127, 0, 0, 41);
    let check_port = ccm_test::net::free_port_on(&[droplet_ip]);
    let server = accepting(droplet_ip, check_port).await;
    let sim = sim_with(|cfg| {
        cfg.load_balancer_addresses = Some("127.77.41.0/29".parse().unwrap());
    })
    .await;
    let d = sim
        .handle()
        .create_droplet_at("n1", "s", "nyc1", Some(droplet_ip));
    let nodes = vec![Arc::new(node(
        "n1",
        Some(format!("digitalocean://{}", d.id)),
    ))];
    let cloud = provider_with(&sim, TOKEN, |o| o.cache_ttl = Duration::from_millis(500));
    let lb = lb_of(&cloud);
    // A TCP check of the Service port's node port, where the droplet's server listens.
    let mut svc = service(
        "web",
        "cccccccc-0000-0000-0000-000000000041",
        &[
            (ANNOTATION_OVERRIDE_HEALTH_CHECK, "true"),
            (ANNOTATION_HEALTH_CHECK_PROTOCOL, "tcp"),
            (ANNOTATION_HEALTH_CHECK_INTERVAL, "3"),
            (ANNOTATION_HEALTH_CHECK_HEALTHY, "2"),
            (ANNOTATION_HEALTH_CHECK_UNHEALTHY, "2"),
        ],
    );
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(check_port.into());
    lb.ensure_load_balancer(CLUSTER, &svc, &nodes)
        .await
        .unwrap();

    // The extension, as the API shows it: the droplet, checked and passing.
    let id = sim.handle().load_balancers()[0].id.clone();
    ccm_test::eventually(
        "the droplet healthy in the API",
        Duration::from_secs(30),
        || async {
            let answer: serde_json::Value = raw_client()
                .get(format!("{}/v2/load_balancers/{id}", sim.url()))
                .bearer_auth(TOKEN)
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            let health = answer["load_balancer"]["x_droplet_health"].clone();
            (health == serde_json::json!([{"droplet_id": d.id, "status": "healthy"}]))
                .then_some(())
                .ok_or(format!("{health}"))
        },
    )
    .await;
    ccm_test::eventually("Healthy", Duration::from_secs(30), || async {
        match lb.load_balancer_health(CLUSTER, &svc).await {
            Ok(LoadBalancerHealth::Healthy) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Its server gone: two failed checks later, degraded.
    server.abort();
    let degraded =
        LoadBalancerHealth::degraded("NoHealthyBackends", "0 of 1 droplets pass the health check");
    ccm_test::eventually("Degraded", Duration::from_secs(30), || async {
        match lb.load_balancer_health(CLUSTER, &svc).await {
            Ok(h) if h == degraded => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Back: healthy again after two passes.
    let server = accepting(droplet_ip, check_port).await;
    ccm_test::eventually("Healthy again", Duration::from_secs(30), || async {
        match lb.load_balancer_health(CLUSTER, &svc).await {
            Ok(LoadBalancerHealth::Healthy) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    server.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn health_is_one_list_per_ttl_for_many_services_and_never_of_anothers() {
    use ccm_core::provider::LoadBalancerHealth;
    let sim = sim().await;
    let nodes = one_droplet_node(&sim);
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    let services: Vec<Service> = (0..3)
        .map(|i| {
            service(
                &format!("s{i}"),
                &format!("dddddddd-0000-0000-0000-00000000000{i}"),
                &[],
            )
        })
        .collect();
    for s in &services {
        lb.ensure_load_balancer(CLUSTER, s, &nodes).await.unwrap();
    }
    // Without the data plane no droplet is ever checked: nothing says it is degraded.
    // A fresh provider has no index: one list answers every Service.
    let cloud = provider(&sim);
    let lb = lb_of(&cloud);
    sim.handle().reset_request_counts();
    for s in &services {
        assert_eq!(
            lb.load_balancer_health(CLUSTER, s).await.unwrap(),
            LoadBalancerHealth::Healthy
        );
    }
    assert_eq!(sim.handle().request_count("GET /v2/load_balancers"), 1);
    assert_eq!(sim.handle().request_count("GET /v2/load_balancers/{id}"), 0);
    // Asked again within the TTL (10 s): from the index, no request at all.
    sim.handle().reset_request_counts();
    for s in &services {
        lb.load_balancer_health(CLUSTER, s).await.unwrap();
    }
    assert_eq!(sim.handle().request_counts(), BTreeMap::new());

    // No droplets behind it: degraded (it serves nobody).
    let empty = service("empty", "dddddddd-0000-0000-0000-000000000009", &[]);
    lb.ensure_load_balancer(CLUSTER, &empty, &[]).await.unwrap();
    assert_eq!(
        lb.load_balancer_health(CLUSTER, &empty).await.unwrap(),
        LoadBalancerHealth::degraded("NoBackends", "the load balancer has no droplets")
    );

    // None: the Service has no load balancer.
    let none = service("none", "dddddddd-0000-0000-0000-00000000000a", &[]);
    assert!(matches!(
        lb.load_balancer_health(CLUSTER, &none).await.unwrap(),
        LoadBalancerHealth::Degraded { reason, .. } if reason == "NotFound"
    ));

    // Another Service's load balancer, named by a copied ID annotation: refused.
    let victim = sim.handle().load_balancers()[0].id.clone();
    let copier = service(
        "copier",
        "dddddddd-0000-0000-0000-00000000000b",
        &[(ANNOTATION_LOAD_BALANCER_ID, &victim)],
    );
    let err = lb.load_balancer_health(CLUSTER, &copier).await.unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    let no_id = service(
        "no-id",
        "dddddddd-0000-0000-0000-00000000000c",
        &[(ANNOTATION_LOAD_BALANCER_ID, "../droplets")],
    );
    let err = lb.load_balancer_health(CLUSTER, &no_id).await.unwrap_err();
    assert!(err.is_not_owned(), "{err}");
    sim.shutdown().await;
}

/// A stand-in for the Kubernetes API that records every request ("METHOD path") and
/// answers each 404: what a [`ServiceAnnotator`](ccm_core::provider::ServiceAnnotator)
/// built on it tried to write.
async fn recording_api() -> (kube::Client, Arc<parking_lot::Mutex<Vec<String>>>) {
    let seen: Arc<parking_lot::Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let record = record.clone();
        async move {
            record
                .lock()
                .push(format!("{} {}", request.method(), request.uri().path()));
            (
                axum::http::StatusCode::NOT_FOUND,
                [("content-type", "application/json")],
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = kube::Config::new(url.parse().unwrap());
    (kube::Client::try_from(config).unwrap(), seen)
}

/// The Service the service controller makes for a group sharing a load balancer carries its
/// first member's annotations; an ID annotation among them (a member's, stale, of another
/// load balancer) is never the group's: the group's load balancer is found, made and
/// deleted by its own name, the other one is untouched, and nothing is written on the
/// group's Service (it is not in the API).
#[tokio::test]
async fn a_group_service_ignores_a_stale_id_annotation_and_is_never_annotated() {
    use ccm_core::provider::{LOAD_BALANCER_GROUP_ANNOTATION, ServiceAnnotator};

    let sim = sim().await;
    let nodes = one_droplet_node(&sim);
    let (client, writes) = recording_api().await;
    let cloud = Arc::new(
        Arc::into_inner(provider(&sim))
            .unwrap()
            .with_service_annotator(ServiceAnnotator::new(client)),
    );
    let lb = lb_of(&cloud);

    // Another Service's load balancer; its ID is remembered on it (the recorder works).
    let other = service("other", "aaaaaaaa-0000-0000-0000-000000000001", &[]);
    lb.ensure_load_balancer(CLUSTER, &other, &nodes)
        .await
        .unwrap();
    let before = sim.handle().load_balancers();
    assert_eq!(before.len(), 1);
    let other_id = before[0].id.clone();
    assert_eq!(
        *writes.lock(),
        ["PATCH /api/v1/namespaces/default/services/other"]
    );
    writes.lock().clear();

    // The group's Service, with that ID.
    let mut group = service(
        "shared-0123456789abcdef",
        "cccccccc-0000-0000-0000-000000000003",
        &[
            (LOAD_BALANCER_GROUP_ANNOTATION, "front"),
            (ANNOTATION_LOAD_BALANCER_ID, &other_id),
        ],
    );
    group.spec.as_mut().unwrap().ports =
        Some(vec![port(80, "TCP", 30080), port(8080, "TCP", 30081)]);
    assert_eq!(lb.get_load_balancer(CLUSTER, &group).await.unwrap(), None);
    let status = lb
        .ensure_load_balancer(CLUSTER, &group, &nodes)
        .await
        .unwrap();
    let all = sim.handle().load_balancers();
    assert_eq!(all.len(), 2, "{all:#?}");
    let own = all.iter().find(|l| l.id != other_id).unwrap();
    assert_eq!(
        own.forwarding_rules
            .iter()
            .map(|r| (r.entry_port, r.target_port))
            .collect::<Vec<_>>(),
        [(80, 30080), (8080, 30081)]
    );
    let own_ip = status.ingress.as_ref().unwrap()[0].ip.clone().unwrap();
    assert_eq!(own_ip, own.ip);
    assert_ne!(own.ip, before[0].ip);
    assert_eq!(
        lb.get_load_balancer(CLUSTER, &group)
            .await
            .unwrap()
            .and_then(|s| s.ingress?[0].ip.clone()),
        Some(own_ip)
    );
    lb.update_load_balancer(CLUSTER, &group, &nodes)
        .await
        .unwrap();
    let all = sim.handle().load_balancers();
    assert!(
        all.contains(&before[0]),
        "the other one untouched: {all:#?}"
    );

    lb.ensure_load_balancer_deleted(CLUSTER, &group)
        .await
        .unwrap();
    assert_eq!(
        sim.handle().load_balancers(),
        before,
        "only the group's deleted"
    );
    assert_eq!(
        *writes.lock(),
        Vec::<String>::new(),
        "nothing written on the group"
    );
    sim.shutdown().await;
}

/// A Service with `do-loadbalancer-network-stack: DUALSTACK` against the simulator's data
/// plane with `::1/128` for IPv6: its ingress lists the load balancer's IPv4 address, then
/// its IPv6 one, and a client of the IPv6 address reaches the droplet's server (at its
/// private IPv4 address). The droplet, given an IPv6 address as a dual-stack node's, is
/// reported with both families. Without the annotation the load balancer keeps its stack;
/// with `IPV4` it is IPv4 again: one ingress address. A bad value is an error naming the annotation, and nothing is written.
#[tokio::test]
async fn a_dual_stack_service_gets_both_addresses_and_ipv6_clients_reach_the_droplet() {
    use ccm_do_like_cloud::{
        ANNOTATION_HEALTH_CHECK_HEALTHY, ANNOTATION_HEALTH_CHECK_INTERVAL,
        ANNOTATION_HEALTH_CHECK_PROTOCOL, ANNOTATION_NETWORK_STACK,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let droplet_ip = std::net::Ipv4Addr::new(127, 0, 0, 42);
    let node_port = ccm_test::net::free_port_on(&[droplet_ip]);
    let backend = tokio::net::TcpListener::bind((droplet_ip, node_port))
        .await
        .unwrap();
    let server = tokio::spawn(async move {
        while let Ok((mut s, _)) = backend.accept().await {
            let _ = s.write_all(b"web").await;
        }
    });
    // The entry port: free on ::1, where the load balancer's IPv6 address is.
    let entry_port = std::net::TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sim = sim_with(|cfg| {
        cfg.load_balancer_addresses = Some("127.77.42.0/29".parse().unwrap());
        cfg.load_balancer_addresses_v6 = Some("::1/128".parse().unwrap());
    })
    .await;
    let node_v6: std::net::Ipv6Addr = "fd00:42::2".parse().unwrap();
    let d = sim
        .handle()
        .create_droplet_with("n1", "s", "nyc1", Some(droplet_ip), Some(node_v6));
    let nodes = vec![Arc::new(node(
        "n1",
        Some(format!("digitalocean://{}", d.id)),
    ))];
    let cloud = provider(&sim);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let meta = resolve_instances(&p)
        .unwrap()
        .instance_metadata(&nodes[0])
        .await
        .unwrap()
        .unwrap();
    let addresses: Vec<(&str, &str)> = meta
        .node_addresses
        .iter()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert!(
        addresses.contains(&("InternalIP", "127.0.0.42")),
        "{addresses:?}"
    );
    assert!(
        addresses.contains(&("ExternalIP", "fd00:42::2")),
        "{addresses:?}"
    );

    let lb = lb_of(&cloud);
    let with_stack = |stack: Option<&str>| {
        let mut annotations = vec![
            (ANNOTATION_OVERRIDE_HEALTH_CHECK, "true"),
            (ANNOTATION_HEALTH_CHECK_PROTOCOL, "tcp"),
            (ANNOTATION_HEALTH_CHECK_INTERVAL, "3"),
            (ANNOTATION_HEALTH_CHECK_HEALTHY, "2"),
        ];
        annotations.extend(stack.map(|s| (ANNOTATION_NETWORK_STACK, s)));
        let mut svc = service("dual", "eeeeeeee-0000-0000-0000-000000000042", &annotations);
        let port = &mut svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0];
        port.port = entry_port.into();
        port.node_port = Some(node_port.into());
        svc
    };
    let ensure = |svc: Service| {
        let nodes = nodes.clone();
        async move {
            ccm_test::eventually("an active load balancer", Duration::from_secs(10), || {
                let (svc, nodes) = (svc.clone(), nodes.clone());
                async move {
                    let status = lb
                        .ensure_load_balancer(CLUSTER, &svc, &nodes)
                        .await
                        .map_err(|e| e.to_string())?;
                    let ips: Vec<String> = status
                        .ingress
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|i| i.ip)
                        .collect();
                    if ips.is_empty() {
                        Err("no ingress yet".to_owned())
                    } else {
                        Ok(ips)
                    }
                }
            })
            .await
        }
    };

    let ips = ensure(with_stack(Some("DUALSTACK"))).await;
    assert_eq!(ips, ["127.77.42.1", "::1"], "IPv4, then IPv6");
    let made = &sim.handle().load_balancers()[0];
    assert_eq!(
        made.network_stack, "DUALSTACK",
        "as the API's network_stack"
    );
    let at = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, entry_port));
    ccm_test::eventually(
        "an IPv6 client answered by the droplet",
        Duration::from_secs(15),
        || async {
            let mut s = tokio::net::TcpStream::connect(at)
                .await
                .map_err(|e| e.to_string())?;
            let mut answer = String::new();
            tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut answer))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            (answer == "web").then_some(()).ok_or(answer)
        },
    )
    .await;

    // A bad value: the error names the annotation; the load balancer stays as it is.
    sim.handle().reset_request_counts();
    let err = lb
        .ensure_load_balancer(CLUSTER, &with_stack(Some("IPv6")), &nodes)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(ANNOTATION_NETWORK_STACK), "{err}");
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 0);

    // The annotation removed: the Service no longer says, so the load balancer keeps its
    // stack (issue 66: what a Service does not ask about is kept as found).
    sim.handle().reset_request_counts();
    let ips = ensure(with_stack(None)).await;
    assert_eq!(ips, ["127.77.42.1", "::1"]);
    assert_eq!(sim.handle().request_count("PUT /v2/load_balancers/{id}"), 0);
    // `IPV4` said: IPv4 again, one ingress address.
    let ips = ensure(with_stack(Some("IPV4"))).await;
    assert_eq!(ips, ["127.77.42.1"]);
    assert_eq!(sim.handle().load_balancers()[0].network_stack, "IPV4");
    server.abort();
    sim.shutdown().await;
}
