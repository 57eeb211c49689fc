//! Issue 66: a swap from DigitalOcean's CCM changes nothing but the tags, over a spread of
//! Services, and ours makes from scratch what DigitalOcean's CCM makes.
//!
//! DigitalOcean's CCM is not built here (CI has no copy of its source;
//! `scripts/peer-digitalocean.sh` runs the real one by hand), so its create request is
//! rebuilt by [`digitaloceans_request`], our model of its `buildLoadBalancerRequest` at
//! commit `70d527e38456469eadcf69624228eeaa4c0fec37` (the same approach as the swap of
//! `tests/cluster.rs`, for one shape there), and replayed into the simulator. For every
//! Service of the spread (each protocol annotation, both types and `DEFAULT_LB_TYPE`s,
//! `INTERNAL`, `sessionAffinity: ClientIP`, dual-stack and IPv4-only Nodes, with and
//! without each defaulted annotation):
//!
//! 1. the load balancer DigitalOcean's request made, with what its CCM writes back on the
//!    Service (the ID and type annotations), is planned by ours (`plan_load_balancer`,
//!    what `--shadow` reports): only its tags would change (and, on purpose, a ClientIP
//!    Service's sticky sessions), or ours refuses it on purpose naming the annotation;
//! 2. the same Service through ours from scratch (`ensure_load_balancer`) makes a load
//!    balancer whose fields are those of DigitalOcean's, tags and addresses aside.
//!
//! Every case runs; the failures are listed together.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ccm_core::provider::{CloudProvider, LoadBalancer, LoadBalancerPlan};
use ccm_do_like_cloud::{
    ANNOTATION_LOAD_BALANCER_ID, ANNOTATION_TYPE, ApiToken, Client, ClientOptions, DoLikeCloud,
};
use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

const TOKEN: &str = "dop_v1_swap-token";
const CLUSTER: &str = "swap-cluster";
const PREFIX: &str = "service.beta.kubernetes.io/do-loadbalancer-";

/// A Service port: (port, node port, protocol).
type Port = (i32, i32, &'static str);

/// One Service of the spread, before the type and the Nodes are chosen.
struct Shape {
    name: &'static str,
    ports: &'static [Port],
    /// Annotations without [`PREFIX`].
    annotations: &'static [(&'static str, &'static str)],
    /// `externalTrafficPolicy: Local` with this `healthCheckNodePort`.
    local: Option<i32>,
    source_ranges: &'static [&'static str],
    /// `sessionAffinity: ClientIP`.
    client_ip_affinity: bool,
}

const TCP80: &[Port] = &[(80, 30080, "TCP")];
const WEB: &[Port] = &[(80, 30080, "TCP"), (443, 30443, "TCP")];

/// The spread: every protocol annotation and each annotation DigitalOcean's CCM defaults,
/// absent (`defaults`) and set.
fn shapes() -> Vec<Shape> {
    let shape = |name, ports, annotations| Shape {
        name,
        ports,
        annotations,
        local: None,
        source_ranges: &[],
        client_ip_affinity: false,
    };
    vec![
        shape("defaults", TCP80, &[]),
        shape("udp", &[(53, 30053, "UDP")], &[]),
        shape(
            "tcp-and-udp",
            &[(53, 30053, "TCP"), (53, 30054, "UDP")],
            &[],
        ),
        shape("http", TCP80, &[("protocol", "http")]),
        shape(
            "http-ports",
            &[(80, 30080, "TCP"), (8080, 30081, "TCP")],
            &[("http-ports", "8080")],
        ),
        shape(
            "https-certificate",
            WEB,
            &[("protocol", "http"), ("certificate-id", "cert-1")],
        ),
        shape(
            "tls-ports",
            &[(80, 30080, "TCP"), (8443, 30443, "TCP")],
            &[("certificate-id", "cert-1"), ("tls-ports", "8443")],
        ),
        shape("tls-passthrough", WEB, &[("tls-passthrough", "true")]),
        shape(
            "http2",
            WEB,
            &[("http2-ports", "443"), ("certificate-id", "cert-1")],
        ),
        shape(
            "health-check-override",
            TCP80,
            &[
                ("override-health-check", ""),
                ("healthcheck-path", "/ready"),
            ],
        ),
        shape(
            "health-check-tcp",
            TCP80,
            &[
                ("override-health-check", "true"),
                ("healthcheck-protocol", "tcp"),
            ],
        ),
        shape(
            "health-check-timings",
            TCP80,
            &[
                ("healthcheck-check-interval-seconds", "5"),
                ("healthcheck-response-timeout-seconds", "4"),
                ("healthcheck-unhealthy-threshold", "2"),
                ("healthcheck-healthy-threshold", "3"),
            ],
        ),
        Shape {
            local: Some(31999),
            ..shape("local-traffic", TCP80, &[])
        },
        shape("algorithm", TCP80, &[("algorithm", "least_connections")]),
        shape("size-unit", TCP80, &[("size-unit", "2")]),
        shape("size-slug", TCP80, &[("size-slug", "lb-medium")]),
        shape(
            "sticky-cookies",
            TCP80,
            &[
                ("sticky-sessions-type", "cookies"),
                ("sticky-sessions-cookie-name", "c"),
                ("sticky-sessions-cookie-ttl", "60"),
            ],
        ),
        shape(
            "flags",
            WEB,
            &[
                ("protocol", "http"),
                ("certificate-id", "cert-1"),
                ("redirect-http-to-https", "true"),
                ("enable-proxy-protocol", "true"),
                ("enable-backend-keepalive", "false"),
                ("disable-lets-encrypt-dns-records", "false"),
                ("http-idle-timeout-seconds", "60"),
            ],
        ),
        shape(
            "firewall",
            TCP80,
            &[
                ("allow-rules", "cidr:198.51.100.0/24"),
                ("deny-rules", "ip:203.0.113.9"),
            ],
        ),
        Shape {
            source_ranges: &["192.0.2.0/24"],
            ..shape("source-ranges", TCP80, &[("deny-rules", "cidr:10.0.0.0/8")])
        },
        Shape {
            client_ip_affinity: true,
            ..shape("client-ip-affinity", TCP80, &[])
        },
        shape("network-external", TCP80, &[("network", "EXTERNAL")]),
        shape("stack-ipv4", TCP80, &[("network-stack", "IPV4")]),
        shape("stack-dualstack", TCP80, &[("network-stack", "DUALSTACK")]),
        shape("internal", TCP80, &[("network", "INTERNAL")]),
    ]
}

/// How DigitalOcean's CCM came to the type: `(annotation, DEFAULT_LB_TYPE)`.
const TYPES: [(Option<&str>, &str); 3] = [
    (None, "REGIONAL_NETWORK"),
    (None, "REGIONAL"),
    (Some("REGIONAL"), "REGIONAL_NETWORK"),
];

fn service(shape: &Shape, uid: &str, lb_type: Option<&str>) -> Service {
    let mut annotations: BTreeMap<String, String> = shape
        .annotations
        .iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), (*v).to_owned()))
        .collect();
    if let Some(t) = lb_type {
        annotations.insert(ANNOTATION_TYPE.to_owned(), t.to_owned());
    }
    Service {
        metadata: ObjectMeta {
            name: Some(shape.name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(uid.to_owned()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".to_owned()),
            ports: Some(
                shape
                    .ports
                    .iter()
                    .map(|(port, node_port, protocol)| ServicePort {
                        port: *port,
                        node_port: Some(*node_port),
                        protocol: Some((*protocol).to_owned()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            external_traffic_policy: Some(
                if shape.local.is_some() {
                    "Local"
                } else {
                    "Cluster"
                }
                .to_owned(),
            ),
            health_check_node_port: shape.local,
            session_affinity: Some(
                if shape.client_ip_affinity {
                    "ClientIP"
                } else {
                    "None"
                }
                .to_owned(),
            ),
            load_balancer_source_ranges: (!shape.source_ranges.is_empty()).then(|| {
                shape
                    .source_ranges
                    .iter()
                    .map(|r| (*r).to_owned())
                    .collect()
            }),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn node(name: &str, droplet: u64, v4: &str, v6: Option<&str>) -> Node {
    let mut addresses = vec![
        ("InternalIP", "10.10.0.1".to_owned()),
        ("ExternalIP", v4.to_owned()),
    ];
    if let Some(v6) = v6 {
        addresses.push(("ExternalIP", v6.to_owned()));
    }
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("digitalocean://{droplet}")),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(
                addresses
                    .into_iter()
                    .map(|(type_, address)| NodeAddress {
                        type_: type_.to_owned(),
                        address,
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
    }
}

fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(&format!("{PREFIX}{key}"))
        .map(String::as_str)
}

fn ports(service: &Service) -> &[ServicePort] {
    service.spec.as_ref().unwrap().ports.as_deref().unwrap()
}

/// DigitalOcean's CCM's name for a Service's load balancer (`DefaultLoadBalancerName`).
fn digitaloceans_name(service: &Service) -> String {
    let uid = service.metadata.uid.as_deref().unwrap().replace('-', "");
    format!("a{uid}").chars().take(32).collect()
}

/// `getNetworkStack` with the Nodes' state (`filterAndClassifyNodes`, `classifyNode`):
/// `Err` where DigitalOcean's CCM refuses.
fn digitaloceans_network_stack(
    service: &Service,
    lb_type: &str,
    network: &str,
    nodes: &[Node],
) -> Result<&'static str, String> {
    let internal = network == "INTERNAL";
    let (mut v4_only, mut dual) = (0, 0);
    for node in nodes {
        let external: Vec<&str> = node
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .filter(|a| a.type_ == "ExternalIP")
            .map(|a| a.address.as_str())
            .collect();
        let v6 = external.iter().any(|a| a.contains(':'));
        let v4 = external.iter().any(|a| !a.contains(':'));
        match (v4, v6) {
            (true, true) => dual += 1,
            (true, false) => v4_only += 1,
            _ => {}
        }
    }
    let asked = annotation(service, "network-stack").filter(|s| !s.is_empty());
    let stack = match asked {
        Some("IPV4") => "IPV4",
        Some("DUALSTACK") => "DUALSTACK",
        Some(other) => return Err(format!("network stack {other}")),
        None if internal => "IPV4",
        None if lb_type == "REGIONAL_NETWORK" => {
            if dual > 0 && v4_only == 0 {
                "DUALSTACK"
            } else {
                "IPV4"
            }
        }
        None => "DUALSTACK",
    };
    if stack == "DUALSTACK" && internal {
        return Err("dual stack networking is not supported for internal load balancer".into());
    }
    if stack == "DUALSTACK" && lb_type == "REGIONAL_NETWORK" && v4_only > 0 {
        return Err("dual-stack networking requested but nodes lack IPv6 addresses".into());
    }
    Ok(stack)
}

/// DigitalOcean's CCM's forwarding rules (`buildForwardingRules`, `buildForwardingRule`,
/// `buildTLSForwardingRule`, `buildRegionalNetworkForwardingRule`).
fn digitaloceans_rules(service: &Service, lb_type: &str) -> Vec<Value> {
    if lb_type == "REGIONAL_NETWORK" {
        return ports(service)
            .iter()
            .map(|p| {
                let protocol = p.protocol.as_deref().unwrap().to_lowercase();
                json!({"entry_protocol": protocol, "entry_port": p.port,
                       "target_protocol": protocol, "target_port": p.port})
            })
            .collect();
    }
    let list = |key: &str| -> Vec<i32> {
        annotation(service, key)
            .map(|v| v.split(',').map(|p| p.trim().parse().unwrap()).collect())
            .unwrap_or_default()
    };
    let default_protocol = annotation(service, "protocol").unwrap_or("tcp");
    let (http, mut https, http2) = (list("http-ports"), list("tls-ports"), list("http2-ports"));
    let certificate = annotation(service, "certificate-id").unwrap_or_default();
    let passthrough = annotation(service, "tls-passthrough") == Some("true");
    if (!certificate.is_empty() || passthrough) && https.is_empty() && !http2.contains(&443) {
        https.push(443);
    }
    ports(service)
        .iter()
        .map(|p| {
            let mut protocol = default_protocol;
            if http.contains(&p.port) {
                protocol = "http";
            }
            if https.contains(&p.port) {
                protocol = "https";
            }
            if http2.contains(&p.port) {
                protocol = "http2";
            }
            if p.protocol.as_deref() == Some("UDP") {
                protocol = "udp";
            }
            let mut rule = json!({"entry_protocol": protocol, "entry_port": p.port,
                                  "target_protocol": protocol, "target_port": p.node_port});
            if protocol == "https" || protocol == "http2" {
                if passthrough {
                    rule["tls_passthrough"] = true.into();
                } else {
                    rule["certificate_id"] = certificate.into();
                    rule["target_protocol"] = "http".into();
                }
            }
            rule
        })
        .collect()
}

/// DigitalOcean's CCM's health check (`buildHealthCheck`).
fn digitaloceans_health_check(service: &Service) -> Value {
    let spec = service.spec.as_ref().unwrap();
    let number = |key: &str, default: u64| -> u64 {
        annotation(service, key).map_or(default, |v| v.parse().unwrap())
    };
    let local = spec.external_traffic_policy.as_deref() == Some("Local");
    let (mut path, mut port) = match spec.health_check_node_port {
        Some(p) if local && p != 0 => ("/healthz".to_owned(), i64::from(p)),
        _ => ("/healthz".to_owned(), 10256),
    };
    let mut protocol = "http".to_owned();
    let mut check = json!({});
    if annotation(service, "override-health-check").is_some() {
        path = annotation(service, "healthcheck-path")
            .unwrap_or_default()
            .to_owned();
        port = match annotation(service, "healthcheck-port") {
            Some(p) => {
                let p: i32 = p.parse().unwrap();
                let found = ports(service).iter().find(|sp| sp.port == p).unwrap();
                i64::from(found.node_port.unwrap())
            }
            None => {
                let tcp = ports(service)
                    .iter()
                    .find(|sp| sp.protocol.as_deref() == Some("TCP"))
                    .unwrap();
                i64::from(tcp.node_port.unwrap())
            }
        };
        protocol = match annotation(service, "healthcheck-protocol") {
            Some(p) if !p.is_empty() => p.to_owned(),
            _ if !path.is_empty() => "http".to_owned(),
            _ => "tcp".to_owned(),
        };
    } else {
        check["proxy_protocol"] = false.into();
    }
    check["protocol"] = protocol.into();
    check["port"] = port.into();
    if !path.is_empty() {
        check["path"] = path.into();
    }
    check["check_interval_seconds"] = number("healthcheck-check-interval-seconds", 3).into();
    check["response_timeout_seconds"] = number("healthcheck-response-timeout-seconds", 5).into();
    check["unhealthy_threshold"] = number("healthcheck-unhealthy-threshold", 3).into();
    check["healthy_threshold"] = number("healthcheck-healthy-threshold", 5).into();
    check
}

/// The create request DigitalOcean's CCM sends for `service` (commit `70d527e`,
/// `loadBalancers.buildLoadBalancerRequest` → `buildLoadBalancerRequestWithNodeState`)
/// outside DOKS (no cluster ID: no tags; no VPC), region `nyc1`, with `DEFAULT_LB_TYPE`
/// `default_type`, marshalled as godo marshals it (`omitempty`). `Err`: it refuses.
fn digitaloceans_request(
    service: &Service,
    default_type: &str,
    nodes: &[Node],
    droplet_ids: &[u64],
) -> Result<Value, String> {
    let lb_type = annotation(service, "type")
        .filter(|t| !t.is_empty())
        .unwrap_or(default_type);
    let network = annotation(service, "network")
        .filter(|n| !n.is_empty())
        .unwrap_or("EXTERNAL");
    let network_stack = digitaloceans_network_stack(service, lb_type, network, nodes)?;
    let algorithm = match annotation(service, "algorithm") {
        Some("least_connections") => "least_connections",
        _ => "round_robin",
    };
    let sticky = match annotation(service, "sticky-sessions-type") {
        Some("cookies") => json!({
            "type": "cookies",
            "cookie_name": annotation(service, "sticky-sessions-cookie-name").unwrap(),
            "cookie_ttl_seconds": annotation(service, "sticky-sessions-cookie-ttl")
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        }),
        _ => json!({"type": "none"}),
    };
    let list = |key: &str| -> Vec<String> {
        annotation(service, key)
            .map(|v| v.split(',').map(|r| r.trim().to_owned()).collect())
            .unwrap_or_default()
    };
    let ranges = &service.spec.as_ref().unwrap().load_balancer_source_ranges;
    let allow: Vec<String> = match ranges {
        Some(r) if !r.is_empty() => r.iter().map(|r| format!("cidr:{r}")).collect(),
        _ => list("allow-rules"),
    };
    let mut firewall = json!({});
    if !allow.is_empty() {
        firewall["allow"] = allow.into();
    }
    let deny = list("deny-rules");
    if !deny.is_empty() {
        firewall["deny"] = deny.into();
    }
    let flag = |key: &str| annotation(service, key) == Some("true");
    let mut body = json!({
        "name": digitaloceans_name(service),
        "algorithm": algorithm,
        "region": "nyc1",
        "type": lb_type,
        "forwarding_rules": digitaloceans_rules(service, lb_type),
        "health_check": digitaloceans_health_check(service),
        "sticky_sessions": sticky,
        "droplet_ids": droplet_ids,
        "disable_lets_encrypt_dns_records": flag("disable-lets-encrypt-dns-records"),
        "firewall": firewall,
        "network": network,
        "network_stack": network_stack,
    });
    if let Some(slug) = annotation(service, "size-slug") {
        body["size"] = slug.into();
    }
    if let Some(unit) = annotation(service, "size-unit") {
        body["size_unit"] = unit.parse::<u64>().unwrap().into();
    }
    for (key, field) in [
        ("redirect-http-to-https", "redirect_http_to_https"),
        ("enable-proxy-protocol", "enable_proxy_protocol"),
        ("enable-backend-keepalive", "enable_backend_keepalive"),
    ] {
        if flag(key) {
            body[field] = true.into();
        }
    }
    if let Some(t) = annotation(service, "http-idle-timeout-seconds") {
        body["http_idle_timeout_seconds"] = t.parse::<u64>().unwrap().into();
    }
    Ok(body)
}

/// The annotation (without [`PREFIX`]) for which ours refuses, on purpose, a Service
/// DigitalOcean's CCM serves with load balancer `lb` (docs/do-like-cloud.md's table):
/// `INTERNAL` (this cloud has no internal load balancers) and an asked-for `DUALSTACK` on a
/// `REGIONAL_NETWORK` load balancer (this cloud's network load balancers carry IPv4 only).
fn refused_on_purpose(shape: &Shape, lb: &Value) -> Option<&'static str> {
    let has = |k: &str, v: &str| shape.annotations.contains(&(k, v));
    if has("network", "INTERNAL") {
        Some("network")
    } else if has("network-stack", "DUALSTACK") && lb["type"] == "REGIONAL_NETWORK" {
        Some("network-stack")
    } else {
        None
    }
}

/// The changes ours may plan for `shape`'s load balancer made by DigitalOcean's CCM, of
/// those `planned`: its tags; and, with `sessionAffinity: ClientIP` (a difference on
/// purpose, docs/do-like-cloud.md), its sticky sessions, `none` → `x_client_ip`.
fn expected_changes(shape: &Shape, planned: &[String]) -> Vec<String> {
    let tags = planned.iter().find(|c| c.starts_with("tags: [] → "));
    let mut expected: Vec<String> = tags.cloned().into_iter().collect();
    if shape.client_ip_affinity {
        expected.insert(
            0,
            r#"sticky_sessions: {"type":"none"} → {"type":"x_client_ip"}"#.to_owned(),
        );
    }
    expected
}

/// A load balancer as the API answers it, without what is not the request's: its ID,
/// name, addresses, status, tags, the time it was made and the simulator's extension; and
/// for a `sessionAffinity: ClientIP` Service its sticky sessions (see [`expected_changes`]).
fn fields(lb: &Value, shape: &Shape) -> Value {
    let mut lb = lb.clone();
    let object = lb.as_object_mut().unwrap();
    if shape.client_ip_affinity {
        object.remove("sticky_sessions");
    }
    for key in [
        "id",
        "name",
        "ip",
        "ipv6",
        "status",
        "tags",
        "created_at",
        "x_droplet_health",
    ] {
        object.remove(key);
    }
    if let Some(rules) = object
        .get_mut("forwarding_rules")
        .and_then(Value::as_array_mut)
    {
        rules.sort_by_key(|r| r.to_string());
    }
    lb
}

struct Swap {
    sim: RunningSimulator,
    cloud: Arc<DoLikeCloud>,
    http: reqwest::Client,
}

impl Swap {
    async fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut cfg = SimulatorConfig::new(TOKEN);
        cfg.lb_activation_delay = Duration::ZERO;
        let sim = RunningSimulator::start(cfg).await.unwrap();
        let mut opts = ClientOptions::new(sim.url(), ApiToken::new(TOKEN));
        opts.requests_per_second = None;
        opts.rate_windows = Vec::new();
        opts.cache_ttl = Duration::ZERO;
        let cloud = Arc::new(DoLikeCloud::new(Client::new(opts).unwrap(), "nyc1"));
        Swap {
            sim,
            cloud,
            http: reqwest::Client::new(),
        }
    }

    fn lb(&self) -> &dyn LoadBalancer {
        CloudProvider::load_balancer(&*self.cloud).unwrap()
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.sim.url()))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(body);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        let body: Value = answer.json().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    async fn load_balancer(&self, id: &str) -> Value {
        self.send(
            reqwest::Method::GET,
            &format!("/v2/load_balancers/{id}"),
            None,
        )
        .await["load_balancer"]
            .clone()
    }
}

/// The Nodes of one run: `(label, Nodes)`, dual-stack or IPv4-only, on droplets of `swap`.
fn node_sets(swap: &Swap) -> (Vec<u64>, Vec<(&'static str, Vec<Node>)>) {
    let ids: Vec<u64> = (1..=2)
        .map(|i| {
            swap.sim
                .handle()
                .create_droplet(&format!("n{i}"), "s", "nyc1")
                .id
        })
        .collect();
    let dual = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let v6 = format!("2001:db8::{}", i + 1);
            node(
                &format!("n{}", i + 1),
                *id,
                &format!("203.0.113.{}", i + 1),
                Some(&v6),
            )
        })
        .collect();
    let v4 = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            node(
                &format!("n{}", i + 1),
                *id,
                &format!("203.0.113.{}", i + 1),
                None,
            )
        })
        .collect();
    (ids, vec![("dual-stack", dual), ("ipv4-only", v4)])
}

#[tokio::test]
async fn a_swap_from_digitaloceans_ccm_plans_only_tags_and_ours_makes_the_same_load_balancers() {
    let swap = Swap::start().await;
    let (droplet_ids, node_sets) = node_sets(&swap);
    let (mut failures, mut replayed, mut refused_by_both) = (Vec::new(), 0, 0);
    let (mut refused_on_purpose_count, mut made_as_regional, mut affinity) = (0, 0, 0);
    let mut uid = 0u32;
    for shape in shapes() {
        for (type_annotation, default_type) in TYPES {
            for (nodes_label, nodes) in &node_sets {
                let case = format!(
                    "{} (type {}, DEFAULT_LB_TYPE {default_type}, {nodes_label} Nodes)",
                    shape.name,
                    type_annotation.unwrap_or("unset"),
                );
                let arcs: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
                uid += 1;
                let mut theirs = service(
                    &shape,
                    &format!("{uid:08x}-0000-4000-8000-000000000000"),
                    type_annotation,
                );
                let request =
                    match digitaloceans_request(&theirs, default_type, nodes, &droplet_ids) {
                        Ok(r) => r,
                        Err(why) => {
                            // DigitalOcean's CCM refuses, so there is no load balancer to
                            // take over: ours refuses too, or makes one only where our own
                            // default type, REGIONAL, is why it does not refuse.
                            let plan = swap.lb().plan_load_balancer(CLUSTER, &theirs, &arcs);
                            let ours_type = type_annotation.is_none()
                                && digitaloceans_request(&theirs, "REGIONAL", nodes, &droplet_ids)
                                    .is_ok();
                            match plan.await {
                            Err(_) => refused_by_both += 1,
                            Ok(LoadBalancerPlan::Create) if ours_type => made_as_regional += 1,
                            Ok(plan) => failures.push(format!(
                                "{case}: DigitalOcean's CCM refuses ({why}), ours plans {plan:?}"
                            )),
                        }
                            continue;
                        }
                    };

                // 1. DigitalOcean's reign, replayed: its create, its write-backs.
                let made = swap
                    .send(reqwest::Method::POST, "/v2/load_balancers", Some(&request))
                    .await["load_balancer"]
                    .clone();
                let id = made["id"].as_str().unwrap().to_owned();
                let theirs_lb = swap.load_balancer(&id).await;
                let annotations = theirs.metadata.annotations.get_or_insert_default();
                annotations.insert(ANNOTATION_LOAD_BALANCER_ID.to_owned(), id.clone());
                annotations.insert(
                    ANNOTATION_TYPE.to_owned(),
                    theirs_lb["type"].as_str().unwrap().to_owned(),
                );
                replayed += 1;
                match swap.lb().plan_load_balancer(CLUSTER, &theirs, &arcs).await {
                    Ok(LoadBalancerPlan::Update { changes, .. })
                        if changes == expected_changes(&shape, &changes) =>
                    {
                        affinity += usize::from(shape.client_ip_affinity);
                    }
                    Err(e)
                        if refused_on_purpose(&shape, &theirs_lb)
                            .is_some_and(|a| e.to_string().contains(&format!("{PREFIX}{a}"))) =>
                    {
                        // Refused on purpose (docs/do-like-cloud.md), naming the annotation:
                        // nothing is changed.
                        refused_on_purpose_count += 1;
                        continue;
                    }
                    other => {
                        failures.push(format!("{case}: the shadow plans {other:?}"));
                        continue;
                    }
                }

                // 2. The same Service through ours from scratch (a new UID; DigitalOcean's
                // type annotation, as its CCM leaves it on every Service).
                uid += 1;
                let mut ours = service(
                    &shape,
                    &format!("{uid:08x}-0000-4000-8000-000000000000"),
                    Some(theirs_lb["type"].as_str().unwrap()),
                );
                ours.metadata.name = Some(format!("{}-ours", shape.name));
                let name = digitaloceans_name(&ours);
                let _ = swap.lb().ensure_load_balancer(CLUSTER, &ours, &arcs).await;
                let Some(ours_lb) = swap
                    .sim
                    .handle()
                    .load_balancers()
                    .into_iter()
                    .find(|lb| lb.name == name)
                else {
                    failures.push(format!("{case}: ours made no load balancer"));
                    continue;
                };
                let ours_lb = swap.load_balancer(&ours_lb.id).await;
                if fields(&ours_lb, &shape) != fields(&theirs_lb, &shape) {
                    failures.push(format!(
                        "{case}: from scratch ours made\n    {}\n  DigitalOcean's CCM\n    {}",
                        fields(&ours_lb, &shape),
                        fields(&theirs_lb, &shape)
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {replayed} replayed cases ({refused_on_purpose_count} refused on purpose; \
         {refused_by_both} more refused by both):\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!(
        "{replayed} replayed: {} planned only tags (and {affinity} of them, with \
         sessionAffinity: ClientIP, sticky_sessions), {refused_on_purpose_count} refused on \
         purpose; not made by DigitalOcean's CCM: {refused_by_both} refused by ours too, \
         {made_as_regional} made by ours as REGIONAL (its default type)",
        replayed - refused_on_purpose_count
    );
    assert!(replayed >= 100, "{replayed}");
    swap.sim.shutdown().await;
}
