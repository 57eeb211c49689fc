//! Golden tests, simulator side: the simulator's answers compared field by field with the
//! fixtures the provider's golden tests parse (`examples/do-like-cloud/tests/fixtures/`,
//! our own, written to DigitalOcean's documented v2 shapes). Every key of a fixture is in
//! the answer with the same JSON type, recursively, except the few listed as not simulated;
//! the answer has no key the fixture lacks; and what the simulator does not choose itself
//! (sizes, regions, what a request set) has the fixture's values.

mod common;
#[path = "../../do-like-cloud/tests/fixtures/mod.rs"]
mod fixtures;

use std::collections::BTreeSet;

use ccm_do_like_cloud::api::LoadBalancerObject;
use ccm_do_like_simulator::{RunningSimulator, catalog};
use common::{Api, send};
use fixtures::{ACCOUNT, DROPLET, DROPLETS, ERROR_404, ERROR_422, ERROR_429, LB, LBS, REGIONS};
use reqwest::Method;
use serde_json::Value;

const TOKEN: &str = "golden";

/// Fields the simulator adds to DigitalOcean's answers, its extensions (docs/do-like-cloud.md
/// lists them): the only keys an answer may have that the fixture lacks.
const EXTENSIONS: [&str; 1] = ["load_balancer.x_droplet_health"];

/// Fields of DigitalOcean's answers the simulator does not serve (docs/do-like-cloud.md
/// lists them); everything else in a fixture must be in its answer.
const NOT_SIMULATED: [&str; 13] = [
    "droplet.kernel",
    "droplet.backup_ids",
    "droplet.next_backup_window",
    "droplet.snapshot_ids",
    "droplet.image",
    "droplet.volume_ids",
    "load_balancer.enable_backend_keepalive",
    "load_balancer.http_idle_timeout_seconds",
    "load_balancer.disable_lets_encrypt_dns_records",
    "load_balancer.project_id",
    "load_balancer.network",
    "load_balancer.firewall",
    "load_balancer.tls_cipher_policy",
];

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where `got` differs from `want` in shape; `path` names the place (`droplet.size.slug`),
/// array items are `[]`.
fn shape_diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    if kind(want) != kind(got) {
        out.push(format!(
            "{path}: {} in the fixture, {} in the answer",
            kind(want),
            kind(got)
        ));
        return;
    }
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for key in keys {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let alias = p
                    .replace("droplets[]", "droplet")
                    .replace("load_balancers[]", "load_balancer");
                match (w.get(key), g.get(key)) {
                    (Some(_), None) if NOT_SIMULATED.contains(&alias.as_str()) => {}
                    (Some(_), None) => out.push(format!("{p}: missing from the answer")),
                    (None, Some(_)) if EXTENSIONS.contains(&alias.as_str()) => {}
                    (None, Some(_)) => out.push(format!("{p}: not in the fixture (invented)")),
                    (Some(wv), Some(gv)) => shape_diff(&p, wv, gv, out),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            if let Some(first) = w.first() {
                for item in g {
                    shape_diff(&format!("{path}[]"), first, item, out);
                }
            }
        }
        _ => {}
    }
}

fn assert_same_shape(want: &Value, got: &Value) {
    let mut diffs = Vec::new();
    shape_diff("", want, got, &mut diffs);
    assert!(
        diffs.is_empty(),
        "the answer drifted from the fixture:\n{}",
        diffs.join("\n")
    );
}

async fn start() -> RunningSimulator {
    common::start(TOKEN, |cfg| {
        cfg.lb_activation_delay = std::time::Duration::ZERO
    })
    .await
}

/// `method path` with the token, and `body` as JSON if there is one.
async fn call(
    sim: &RunningSimulator,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> reqwest::Response {
    let request = Api::of(sim, TOKEN).v2(method, path);
    send(match body {
        Some(body) => request.json(body),
        None => request,
    })
    .await
}

/// `GET path`: a 200 with the rate-limit headers; its JSON body.
async fn get(sim: &RunningSimulator, path: &str) -> Value {
    let resp = call(sim, Method::GET, path, None).await;
    assert_eq!(resp.status(), 200, "{path}");
    for header in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"] {
        let value = resp.headers()[header].to_str().unwrap();
        assert!(value.parse::<u64>().is_ok(), "{header}: {value}");
    }
    resp.json().await.unwrap()
}

/// `got[kind]` has `want[kind]`'s value of each of `fields`: what the simulator does not
/// choose itself.
fn assert_same_values(kind: &str, want: &Value, got: &Value, fields: &[&str]) {
    for field in fields {
        assert_eq!(got[kind][field], want[kind][field], "{kind}.{field}");
    }
}

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn droplets_have_digitaloceans_shape() {
    let sim = start().await;
    let want = fixture(DROPLET);
    let w = &want["droplet"];
    let d = sim.handle().create_droplet(
        w["name"].as_str().unwrap(),
        w["size_slug"].as_str().unwrap(),
        w["region"]["slug"].as_str().unwrap(),
    );
    sim.handle().create_droplet("node-2", "s-2vcpu-4gb", "nyc1");

    let got = get(&sim, &format!("/v2/droplets/{}", d.id)).await;
    assert_same_shape(&want, &got);
    let fields = [
        "name",
        "memory",
        "vcpus",
        "disk",
        "locked",
        "status",
        "features",
        "size",
        "size_slug",
        "region",
    ];
    assert_same_values("droplet", &want, &got, &fields);
    let g = &got["droplet"];
    assert_eq!(g["networks"]["v4"][0]["type"], "private");
    assert_eq!(g["networks"]["v4"][1]["type"], "public");

    // The list: one per page, links to the next and last, the total in meta.
    let want = fixture(DROPLETS);
    let got = get(&sim, "/v2/droplets?page=1&per_page=1").await;
    assert_same_shape(&want, &got);
    assert_eq!(got["meta"], want["meta"]);
    let path_of = |v: &Value| {
        let url = v.as_str().unwrap();
        url[url.find("/v2/").unwrap()..].to_owned()
    };
    for link in ["next", "last"] {
        assert_eq!(
            path_of(&got["links"]["pages"][link]),
            path_of(&want["links"]["pages"][link]),
            "links.pages.{link}"
        );
    }
    // The last page links back, not on.
    let last = get(&sim, "/v2/droplets?page=2&per_page=1").await;
    let pages = last["links"]["pages"].as_object().unwrap();
    assert_eq!(pages.keys().collect::<Vec<_>>(), ["first", "prev"]);
    sim.shutdown().await;
}

/// What DigitalOcean's CCM asks before anything else: the regions (its `REGION` must be one)
/// and the account (its health check).
#[tokio::test]
async fn regions_and_the_account_have_digitaloceans_shape() {
    let sim = start().await;
    let want = fixture(REGIONS);
    let got = get(&sim, "/v2/regions?page=1&per_page=1").await;
    assert_same_shape(&want, &got);
    assert_eq!(got["meta"]["total"], catalog::REGIONS.len());
    // As DigitalOcean's CCM lists them: 50 a page, all on the first.
    let all = get(&sim, "/v2/regions?page=1&per_page=50").await;
    let slugs: Vec<&str> = all["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["slug"].as_str().unwrap())
        .collect();
    let catalogue: Vec<&str> = catalog::REGIONS.iter().map(|r| r.0).collect();
    assert_eq!(slugs, catalogue);
    assert!(all["links"]["pages"].as_object().unwrap().is_empty());
    let nyc3 = &all["regions"][catalogue.iter().position(|s| *s == "nyc3").unwrap()];
    for field in ["name", "available"] {
        assert_eq!(nyc3[field], want["regions"][0][field], "region.{field}");
    }

    let want = fixture(ACCOUNT);
    let got = get(&sim, "/v2/account").await;
    assert_same_shape(&want, &got);
    assert_eq!(got["account"]["status"], "active");
    sim.shutdown().await;
}

/// `GET /v2/droplets?name=` answers the droplets of that exact name only, as DigitalOcean's
/// CCM expects when it looks up a Node's droplet.
#[tokio::test]
async fn droplets_are_listed_by_name() {
    let sim = start().await;
    for name in ["node-1", "node-10", "node-2"] {
        sim.handle().create_droplet(name, "s-2vcpu-4gb", "nyc1");
    }
    let names = |v: &Value| -> Vec<String> {
        v["droplets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let got = get(&sim, "/v2/droplets?name=node-1&page=1&per_page=50").await;
    assert_eq!(names(&got), ["node-1"]);
    assert_eq!(got["meta"]["total"], 1);
    let got = get(&sim, "/v2/droplets?name=node-3").await;
    assert!(names(&got).is_empty());
    assert_eq!(names(&get(&sim, "/v2/droplets").await).len(), 3);
    sim.shutdown().await;
}

#[tokio::test]
async fn load_balancers_have_digitaloceans_shape() {
    let sim = start().await;
    let want = fixture(LB);
    let w = &want["load_balancer"];
    // The fixture's load balancer, as a request would set it (with a UDP rule, and the
    // health check on kube-proxy's port 10256, which no rule targets: accepted).
    let lb: LoadBalancerObject = serde_json::from_value(w.clone()).unwrap();
    let request = serde_json::to_value(lb.to_request()).unwrap();
    let resp = call(&sim, Method::POST, "/v2/load_balancers", Some(&request)).await;
    assert_eq!(resp.status(), 202);
    let created: Value = resp.json().await.unwrap();
    assert_same_shape(&want, &created);

    let id = created["load_balancer"]["id"].as_str().unwrap().to_owned();
    let got = get(&sim, &format!("/v2/load_balancers/{id}")).await;
    assert_same_shape(&want, &got);
    let fields = [
        "name",
        "size",
        "size_unit",
        "algorithm",
        "status",
        "region",
        "forwarding_rules",
        "health_check",
        "sticky_sessions",
        "droplet_ids",
        "tag",
        "tags",
        "redirect_http_to_https",
        "enable_proxy_protocol",
        "type",
        "network_stack",
    ];
    assert_same_values("load_balancer", &want, &got, &fields);
    assert_same_shape(&fixture(LBS), &get(&sim, "/v2/load_balancers").await);
    assert_eq!(
        get(&sim, "/v2/load_balancers").await["meta"],
        fixture(LBS)["meta"]
    );
    sim.shutdown().await;
}

/// The fixture's load balancer made dual-stack (`network_stack: DUALSTACK`, as DigitalOcean's
/// CCM asks for a `REGIONAL` one by default): the same shape, its stack as asked, and an
/// `ipv6` address (a string, as the fixture's) once active; the fixture's IPV4 one has none
/// here (its `ipv6` is an empty string).
#[tokio::test]
async fn a_dual_stack_load_balancer_has_digitaloceans_shape_and_an_ipv6_address() {
    let sim = start().await;
    let want = fixture(LB);
    let lb: LoadBalancerObject = serde_json::from_value(want["load_balancer"].clone()).unwrap();
    let mut request = serde_json::to_value(lb.to_request()).unwrap();
    request["network_stack"] = "DUALSTACK".into();
    let resp = call(&sim, Method::POST, "/v2/load_balancers", Some(&request)).await;
    assert_eq!(resp.status(), 202);
    let created: Value = resp.json().await.unwrap();
    let id = created["load_balancer"]["id"].as_str().unwrap().to_owned();
    let got = get(&sim, &format!("/v2/load_balancers/{id}")).await;
    assert_same_shape(&want, &got);
    let got = &got["load_balancer"];
    assert_eq!(got["network_stack"], "DUALSTACK");
    let ipv6: std::net::Ipv6Addr = got["ipv6"].as_str().unwrap().parse().unwrap();
    assert!(!ipv6.is_unspecified(), "{got}");
    request["network_stack"] = "IPV4".into();
    request["name"] = "ipv4-only".into();
    let resp = call(&sim, Method::POST, "/v2/load_balancers", Some(&request)).await;
    let created: Value = resp.json().await.unwrap();
    let id = created["load_balancer"]["id"].as_str().unwrap().to_owned();
    let got = get(&sim, &format!("/v2/load_balancers/{id}")).await;
    assert_eq!(got["load_balancer"]["ipv6"], "", "{got}");
    sim.shutdown().await;
}

/// A load balancer as DigitalOcean's CCM asks for one by default: `REGIONAL_NETWORK`, a rule
/// from port 80 to itself.
fn network_lb(target_port: u16, with_type: bool) -> Value {
    let mut lb = serde_json::json!({
        "name": "a0f1e2d3c4b5a69788796a5b4c3d2e1f",
        "region": "nyc1",
        "forwarding_rules": [{"entry_protocol": "tcp", "entry_port": 80,
                              "target_protocol": "tcp", "target_port": target_port}],
        "droplet_ids": [1],
    });
    if with_type {
        lb["type"] = "REGIONAL_NETWORK".into();
    }
    lb
}

#[tokio::test]
async fn a_load_balancers_type_is_kept_until_an_update_names_another() {
    let sim = start().await;
    let resp = call(
        &sim,
        Method::POST,
        "/v2/load_balancers",
        Some(&network_lb(80, true)),
    )
    .await;
    assert_eq!(resp.status(), 202);
    let created: Value = resp.json().await.unwrap();
    assert_eq!(created["load_balancer"]["type"], "REGIONAL_NETWORK");
    let path = format!(
        "/v2/load_balancers/{}",
        created["load_balancer"]["id"].as_str().unwrap()
    );
    // An update without a type keeps it, and its rules must fit it.
    let resp = call(&sim, Method::PUT, &path, Some(&network_lb(80, false))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        get(&sim, &path).await["load_balancer"]["type"],
        "REGIONAL_NETWORK"
    );
    let resp = call(&sim, Method::PUT, &path, Some(&network_lb(30080, false))).await;
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["message"],
        "forwarding_rules[0]: a REGIONAL_NETWORK load balancer forwards to the entry port: \
         target_port 30080 is not entry_port 80"
    );
    // One that names another type changes it; a create without one is `REGIONAL`.
    let mut proxying = network_lb(30080, false);
    proxying["type"] = "REGIONAL".into();
    assert_eq!(
        call(&sim, Method::PUT, &path, Some(&proxying))
            .await
            .status(),
        200
    );
    assert_eq!(get(&sim, &path).await["load_balancer"]["type"], "REGIONAL");
    let resp = call(
        &sim,
        Method::POST,
        "/v2/load_balancers",
        Some(&network_lb(30080, false)),
    )
    .await;
    let created: Value = resp.json().await.unwrap();
    assert_eq!(created["load_balancer"]["type"], "REGIONAL");
    sim.shutdown().await;
}

#[tokio::test]
async fn errors_have_digitaloceans_shape_and_requests_are_checked() {
    let sim = common::start(TOKEN, |cfg| cfg.rate_limit = 1000).await;
    let check = |want: &Value, resp_status: u16, status: u16, got: &Value| {
        assert_eq!(resp_status, status);
        assert_same_shape(want, got);
        assert_eq!(got["id"], want["id"]);
    };

    let want = fixture(ERROR_404);
    for path in [
        "/v2/droplets/1",
        "/v2/load_balancers/nope",
        "/v2/no-such-thing",
    ] {
        let resp = call(&sim, Method::GET, path, None).await;
        let status = resp.status().as_u16();
        let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        let got: Value = resp.json().await.unwrap();
        check(&want, status, 404, &got);
        assert_eq!(got["message"], want["message"]);
        assert_eq!(got["request_id"], request_id.as_str());
    }

    // 422s: both droplet_ids and tag, a missing region, a bad forwarding rule.
    let want = fixture(ERROR_422);
    let lb: LoadBalancerObject =
        serde_json::from_value(fixture(LB)["load_balancer"].clone()).unwrap();
    let good = lb.to_request();
    let mut both = good.clone();
    both.tag = Some("web".into());
    let mut no_region = good.clone();
    no_region.region.clear();
    let mut bad_rule = good.clone();
    bad_rule.forwarding_rules[1].certificate_id.clear();
    for (request, message) in [
        (&both, want["message"].as_str().unwrap()),
        (&no_region, "region is required"),
        (
            &bad_rule,
            "forwarding_rules[1]: entry_protocol https needs a certificate_id or tls_passthrough",
        ),
    ] {
        let request = serde_json::to_value(request).unwrap();
        let resp = call(&sim, Method::POST, "/v2/load_balancers", Some(&request)).await;
        let status = resp.status().as_u16();
        let got: Value = resp.json().await.unwrap();
        check(&want, status, 422, &got);
        assert_eq!(got["message"], message);
    }
    assert!(sim.handle().load_balancers().is_empty());

    // A body that is not a load balancer's shape (a region object in a request) is a 400.
    let mut wrong = serde_json::to_value(&good).unwrap();
    wrong["region"] = serde_json::json!({"slug": "nyc1"});
    let resp = call(&sim, Method::POST, "/v2/load_balancers", Some(&wrong)).await;
    assert_eq!(resp.status(), 400);
    let got: Value = resp.json().await.unwrap();
    assert_eq!(got["id"], "bad_request");

    // 429.
    sim.handle().set_faults(
        serde_json::from_value(serde_json::json!({"burst_429": 1, "retry_after_secs": 1})).unwrap(),
    );
    let resp = call(&sim, Method::GET, "/v2/droplets", None).await;
    let status = resp.status().as_u16();
    let got: Value = resp.json().await.unwrap();
    let want = fixture(ERROR_429);
    check(&want, status, 429, &got);
    assert_eq!(got["message"], want["message"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn without_the_routes_extension_x_routes_is_a_404() {
    let sim = common::start(TOKEN, |cfg| cfg.routes_extension = false).await;
    let resp = call(&sim, Method::GET, "/v2/x-routes", None).await;
    assert_eq!(resp.status(), 404);
    let got: Value = resp.json().await.unwrap();
    assert_eq!(got["id"], "not_found");
    sim.shutdown().await;
    let sim = start().await;
    assert_eq!(
        call(&sim, Method::GET, "/v2/x-routes", None).await.status(),
        200
    );
    sim.shutdown().await;
}

/// A route is refused in DigitalOcean's error shape when its target droplet does not exist
/// or its destination is not a CIDR; an accepted one is stored as the kernel prints it.
#[tokio::test]
async fn a_route_needs_a_droplet_and_a_cidr() {
    let sim = start().await;
    sim.handle().create_droplet("node-1", "s-2vcpu-4gb", "nyc1");
    for (destination, target, why) in [
        ("10.244.1.0/24", "node-9", "no droplet of that name"),
        ("10.244.1.1/24", "node-1", "not a CIDR"),
        ("10.244.1.0", "node-1", "not a CIDR"),
    ] {
        let body = serde_json::json!({"destination": destination, "target": target});
        let resp = call(&sim, Method::POST, "/v2/x-routes", Some(&body)).await;
        assert_eq!(resp.status(), 422, "{destination} to {target}");
        let got: Value = resp.json().await.unwrap();
        assert_eq!(got["id"], "unprocessable_entity");
        assert!(got["message"].as_str().unwrap().contains(why), "{got}");
    }
    assert!(sim.handle().routes().is_empty());
    let body = serde_json::json!({"destination": "fd00:0:0:1::/64", "target": "node-1"});
    let resp = call(&sim, Method::POST, "/v2/x-routes", Some(&body)).await;
    assert_eq!(resp.status(), 201);
    let got: Value = resp.json().await.unwrap();
    assert_eq!(got["route"]["destination"], "fd00:0:0:1::/64");
    sim.shutdown().await;
}

/// The requests DigitalOcean's own CCM sent the simulator in a run of
/// `scripts/peer-digitalocean.sh --record` (method, route, query keys; its header names the
/// commit): the contract. Each is answered with a success, and those with a body in
/// DigitalOcean's shape, so the simulator serves what that CCM asks without its source.
const DIGITALOCEAN_CCM_REQUESTS: &str = include_str!("data/digitalocean-ccm-requests.txt");

#[tokio::test]
async fn every_request_digitaloceans_ccm_sends_is_answered_in_its_shape() {
    let sim = start().await;
    let droplet = sim.handle().create_droplet("node-1", "s-2vcpu-4gb", "nyc1");
    let lb: LoadBalancerObject =
        serde_json::from_value(fixture(LB)["load_balancer"].clone()).unwrap();
    let lb_request = serde_json::to_value(lb.to_request()).unwrap();
    let mut checked = BTreeSet::new();
    for line in DIGITALOCEAN_CCM_REQUESTS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (method, rest) = line.split_once(' ').expect("METHOD /v2/route[?keys]");
        let (route, keys) = rest.split_once('?').unwrap_or((rest, ""));
        // A fresh load balancer for each request that names one (a DELETE ends it).
        let created = call(&sim, Method::POST, "/v2/load_balancers", Some(&lb_request)).await;
        assert_eq!(created.status(), 202, "{line}");
        let created: Value = created.json().await.unwrap();
        let id = match route {
            "/v2/droplets/{id}" => droplet.id.to_string(),
            "/v2/load_balancers/{id}" => {
                created["load_balancer"]["id"].as_str().unwrap().to_owned()
            }
            r if r.contains('{') => panic!("{line}: no object to name in {r}: add one here"),
            _ => String::new(),
        };
        let query: Vec<String> = keys
            .split('&')
            .filter(|k| !k.is_empty())
            .map(|k| {
                let key = k.trim_end_matches('=');
                let value = match key {
                    "name" => "node-1",
                    "page" => "1",
                    "per_page" => "50",
                    other => panic!("{line}: no value for the query key {other:?}: add one here"),
                };
                format!("{key}={value}")
            })
            .collect();
        let path = match query.is_empty() {
            true => route.replace("{id}", &id),
            false => format!("{}?{}", route.replace("{id}", &id), query.join("&")),
        };
        let method: Method = method.parse().unwrap();
        let body = matches!(method, Method::POST | Method::PUT).then_some(&lb_request);
        let resp = call(&sim, method.clone(), &path, body).await;
        assert!(resp.status().is_success(), "{line}: {}", resp.status());
        let want = match (method.as_str(), route) {
            ("GET", "/v2/account") => Some(ACCOUNT),
            ("GET", "/v2/regions") => Some(REGIONS),
            ("GET", "/v2/droplets") => Some(DROPLETS),
            ("GET", "/v2/droplets/{id}") => Some(DROPLET),
            ("GET", "/v2/load_balancers") => Some(LBS),
            ("GET" | "PUT", "/v2/load_balancers/{id}") | ("POST", "/v2/load_balancers") => Some(LB),
            ("DELETE", "/v2/load_balancers/{id}") => None,
            _ => panic!("{line}: no fixture for its answer: add one (tests/fixtures) and here"),
        };
        match want {
            Some(want) => {
                let got: Value = resp.json().await.unwrap();
                let mut want = fixture(want);
                // One page: DigitalOcean links no next or last page (the fixtures are of
                // the first of several).
                if let Some(pages) = want
                    .pointer_mut("/links/pages")
                    .and_then(Value::as_object_mut)
                {
                    let got_pages = got.pointer("/links/pages").and_then(Value::as_object);
                    pages.retain(|k, _| got_pages.is_some_and(|g| g.contains_key(k)));
                }
                assert_same_shape(&want, &got);
            }
            None => assert_eq!(resp.status(), 204, "{line}"),
        }
        checked.insert(line);
    }
    assert!(
        checked.len() >= 8,
        "the contract lists {} requests; a run of DigitalOcean's CCM sends more",
        checked.len()
    );
    sim.shutdown().await;
}
