//! Golden tests, provider side: DigitalOcean's documented v2 answers (our own fixtures, in
//! `tests/fixtures/`, written to the API reference's shapes) served as they are by a
//! stand-in server on 127.0.0.1, and read by the provider's client and provider. The
//! simulator's answers are checked against the same fixtures in
//! `examples/do-like-simulator/tests/golden.rs`, so neither side can drift alone.

mod fixtures;

use std::sync::Arc;

use axum::Router;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ccm_core::provider::{CloudProvider, Instances};
use ccm_do_like_cloud::api::{Droplet, LoadBalancerObject};
use ccm_do_like_cloud::{ApiError, ApiToken, Client, ClientOptions, DoLikeCloud};
use fixtures::{DROPLET, DROPLETS, ERROR_404, ERROR_422, LB, LBS};
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use serde_json::Value;

fn json(status: StatusCode, body: String) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("ratelimit-limit", "5000".parse().unwrap());
    headers.insert("ratelimit-remaining", "4999".parse().unwrap());
    headers.insert("ratelimit-reset", "1767225600".parse().unwrap());
    (status, headers, body).into_response()
}

/// Page 1 is the fixture as it is; page 2 its droplet renumbered, with no `next` link.
async fn droplets(Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    let mut v: Value = serde_json::from_str(DROPLETS).unwrap();
    if q.get("page").map(String::as_str) == Some("2") {
        v["droplets"][0]["id"] = 3_164_445.into();
        v["droplets"][0]["name"] = "node-2".into();
        v["links"] = serde_json::json!({"pages": {
            "first": "https://api.digitalocean.com/v2/droplets?page=1&per_page=1",
            "prev": "https://api.digitalocean.com/v2/droplets?page=1&per_page=1"
        }});
    }
    json(StatusCode::OK, v.to_string())
}

/// A server on 127.0.0.1 answering with the fixtures; `lb` replaces the load balancer answer.
async fn serve(lb: String) -> (String, tokio::task::JoinHandle<()>) {
    let app = Router::new()
        .route("/v2/droplets", get(droplets))
        .route(
            "/v2/droplets/3164444",
            get(|| async { json(StatusCode::OK, DROPLET.to_owned()) }),
        )
        .route(
            "/v2/droplets/404",
            get(|| async { json(StatusCode::NOT_FOUND, ERROR_404.to_owned()) }),
        )
        .route(
            "/v2/load_balancers",
            get(|| async { json(StatusCode::OK, LBS.to_owned()) })
                .post(|| async { json(StatusCode::UNPROCESSABLE_ENTITY, ERROR_422.to_owned()) }),
        )
        .route(
            "/v2/load_balancers/{id}",
            get(move || {
                let lb = lb.clone();
                async move { json(StatusCode::OK, lb) }
            }),
        )
        .route(
            "/v2/x-routes",
            post(|| async { json(StatusCode::NOT_FOUND, ERROR_404.to_owned()) })
                .get(|| async { json(StatusCode::NOT_FOUND, ERROR_404.to_owned()) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

fn client(url: &str) -> Client {
    let mut opts = ClientOptions::new(url, ApiToken::new("t"));
    opts.per_page = 1;
    Client::new(opts).unwrap()
}

fn fixture(text: &str, key: &str) -> Value {
    serde_json::from_str::<Value>(text).unwrap()[key].clone()
}

#[tokio::test]
async fn the_provider_reads_digitaloceans_droplets() {
    let (url, server) = serve(LB.to_owned()).await;
    let client = client(&url);
    let want = fixture(DROPLET, "droplet");

    let d: Droplet = client.droplet(3_164_444).await.unwrap().unwrap();
    // Every field the provider models, as the fixture has it.
    assert_eq!(d.id, want["id"].as_u64().unwrap());
    assert_eq!(d.name, want["name"]);
    assert_eq!((d.memory, d.vcpus, d.disk, d.locked), (4096, 2, 80, false));
    assert_eq!(d.status, want["status"]);
    assert_eq!(d.created_at, want["created_at"]);
    assert_eq!(d.size_slug, want["size_slug"]);
    assert_eq!(serde_json::to_value(&d.size).unwrap(), want["size"]);
    assert_eq!(serde_json::to_value(&d.region).unwrap(), want["region"]);
    assert_eq!(serde_json::to_value(&d.networks).unwrap(), want["networks"]);
    assert_eq!(d.networks.v4[0].netmask, "255.255.0.0");
    assert_eq!(d.networks.v6[0].netmask, 64, "an IPv6 netmask is a number");
    assert_eq!(serde_json::to_value(&d.tags).unwrap(), want["tags"]);
    assert_eq!(d.vpc_uuid, want["vpc_uuid"]);
    assert_eq!(serde_json::to_value(&d.features).unwrap(), want["features"]);

    // A missing droplet is DigitalOcean's 404 body: none, not an error.
    assert!(client.droplet(404).await.unwrap().is_none());

    // The list follows links.pages.next to its end.
    let all = client.list_droplets().await.unwrap();
    let names: Vec<_> = all.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["node-1", "node-2"]);
    server.abort();
}

#[tokio::test]
async fn the_provider_reads_digitaloceans_load_balancers_and_errors() {
    let (url, server) = serve(LB.to_owned()).await;
    let client = client(&url);
    let want = fixture(LB, "load_balancer");

    let lb: LoadBalancerObject = client
        .load_balancer("4de7ac8b-495b-4884-9a69-1050c6793cd6")
        .await
        .unwrap()
        .unwrap();
    for (field, got) in [
        ("id", Value::from(lb.id.clone())),
        ("name", lb.name.clone().into()),
        ("ip", lb.ip.clone().into()),
        ("ipv6", lb.ipv6.clone().into()),
        ("network_stack", lb.network_stack.clone().into()),
        ("size", lb.size.clone().into()),
        ("size_unit", lb.size_unit.into()),
        ("status", lb.status.clone().into()),
        ("created_at", lb.created_at.clone().into()),
        ("algorithm", lb.algorithm.clone().into()),
        ("region", serde_json::to_value(&lb.region).unwrap()),
        (
            "forwarding_rules",
            serde_json::to_value(&lb.forwarding_rules).unwrap(),
        ),
        (
            "health_check",
            serde_json::to_value(&lb.health_check).unwrap(),
        ),
        (
            "sticky_sessions",
            serde_json::to_value(&lb.sticky_sessions).unwrap(),
        ),
        (
            "droplet_ids",
            serde_json::to_value(&lb.droplet_ids).unwrap(),
        ),
        ("tag", lb.tag.clone().into()),
        ("tags", serde_json::to_value(&lb.tags).unwrap()),
        ("redirect_http_to_https", lb.redirect_http_to_https.into()),
        ("enable_proxy_protocol", lb.enable_proxy_protocol.into()),
        ("vpc_uuid", lb.vpc_uuid.clone().into()),
    ] {
        assert_eq!(got, want[field], "load_balancer.{field}");
    }
    // The fixture has what the provider sends: a UDP rule (`udp` to `udp`), and the health
    // check on kube-proxy's port, which no rule targets.
    assert!(
        lb.forwarding_rules
            .iter()
            .any(|r| r.entry_protocol == "udp" && r.target_protocol == "udp")
    );
    let hc = lb.health_check.as_ref().unwrap();
    assert_eq!(hc.port, ccm_do_like_cloud::KUBE_PROXY_HEALTH_PORT);
    assert!(lb.forwarding_rules.iter().all(|r| r.target_port != hc.port));
    // A request made from it names the region by its slug.
    assert_eq!(lb.to_request().region, "nyc1");
    assert_eq!(
        client.list_load_balancers().await.unwrap(),
        std::slice::from_ref(&lb)
    );

    // A refusal keeps DigitalOcean's id, message and request_id.
    let err = client
        .create_load_balancer(&lb.to_request())
        .await
        .unwrap_err();
    let want = fixture(ERROR_422, "id");
    match &err {
        ApiError::Api {
            status,
            id,
            message,
            request_id,
            ..
        } => {
            assert_eq!(*status, 422);
            assert_eq!(*id, want);
            assert_eq!(message, "droplet_ids and tag cannot both be specified");
            assert_eq!(request_id, "0b8c1b8e-6f0a-4a39-9a5e-2f1f4e7c9d10");
        }
        other => panic!("not an API error: {other:?}"),
    }
    assert!(
        err.to_string()
            .ends_with("(request 0b8c1b8e-6f0a-4a39-9a5e-2f1f4e7c9d10)"),
        "{err}"
    );
    server.abort();
}

#[tokio::test]
async fn the_provider_is_strict_on_the_fields_it_relies_on() {
    // DigitalOcean's load balancer region is an object: a slug there is not its shape.
    let mut v: Value = serde_json::from_str(LB).unwrap();
    v["load_balancer"]["region"] = "nyc1".into();
    let (url, server) = serve(v.to_string()).await;
    let err = client(&url)
        .load_balancer("4de7ac8b-495b-4884-9a69-1050c6793cd6")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Decode { .. }), "{err:?}");
    server.abort();

    for field in ["id", "name", "status", "region", "forwarding_rules"] {
        let mut v: Value = serde_json::from_str(LB).unwrap();
        v["load_balancer"].as_object_mut().unwrap().remove(field);
        assert!(
            serde_json::from_value::<LoadBalancerObject>(v["load_balancer"].clone()).is_err(),
            "load_balancer without {field}"
        );
    }
    for field in ["id", "name", "status", "size_slug", "region", "networks"] {
        let mut v: Value = serde_json::from_str(DROPLET).unwrap();
        v["droplet"].as_object_mut().unwrap().remove(field);
        assert!(
            serde_json::from_value::<Droplet>(v["droplet"].clone()).is_err(),
            "droplet without {field}"
        );
    }
    // And tolerant of what it does not use: a field DigitalOcean adds tomorrow.
    let mut v: Value = serde_json::from_str(DROPLET).unwrap();
    v["droplet"]["a_field_from_the_future"] = serde_json::json!({"x": [1]});
    v["droplet"]["region"]["another"] = true.into();
    serde_json::from_value::<Droplet>(v["droplet"].clone()).unwrap();
}

#[tokio::test]
async fn instance_metadata_from_a_digitalocean_droplet_and_no_routes_without_the_extension() {
    let (url, server) = serve(LB.to_owned()).await;
    let cloud = Arc::new(DoLikeCloud::new(client(&url), "nyc1"));
    // Until it is probed, routes are offered; DigitalOcean's 404 withdraws them.
    assert!(cloud.routes().is_some());
    cloud.probe_routes().await;
    assert!(cloud.routes().is_none());

    let node = Node {
        spec: Some(NodeSpec {
            provider_id: Some("digitalocean://3164444".into()),
            ..NodeSpec::default()
        }),
        ..Node::default()
    };
    let meta = cloud.instance_metadata(&node).await.unwrap().unwrap();
    assert_eq!(meta.provider_id, "digitalocean://3164444");
    assert_eq!(meta.instance_type, "s-2vcpu-4gb");
    assert_eq!((meta.region.as_str(), meta.zone.as_str()), ("nyc1", "nyc1"));
    let addresses: Vec<(String, String)> = meta
        .node_addresses
        .iter()
        .map(|a| (a.type_.clone(), a.address.clone()))
        .collect();
    assert_eq!(
        addresses,
        [
            ("Hostname", "node-1"),
            ("InternalIP", "10.128.192.124"),
            ("ExternalIP", "192.0.2.154"),
            ("ExternalIP", "2001:db8:0:1010::18a:a001"),
        ]
        .map(|(t, a)| (t.to_owned(), a.to_owned()))
    );
    server.abort();
}
