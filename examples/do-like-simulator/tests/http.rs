//! The simulator over HTTP, started in-process on 127.0.0.1:0: its rate limit and headers,
//! loopback-only binding, the admin interface, the refusal of what a web page could send, the
//! admin token, bind errors, injected 503s and the request log.

mod common;

use std::time::Duration;

use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig};
use common::{Api, json, send};
use reqwest::Method;

const TOKEN: &str = "dop_v1_s3cr3t-token-do-not-log";

/// Starts a simulator with the defaults changed by `tweak`.
async fn sim(tweak: impl FnOnce(&mut SimulatorConfig)) -> RunningSimulator {
    common::start(TOKEN, tweak).await
}

#[tokio::test]
async fn simulator_rate_limits_with_headers() {
    let sim = sim(|c| {
        c.rate_limit = 3;
        c.rate_limit_window = Duration::from_secs(60);
    })
    .await;
    let api = Api::of(&sim, TOKEN);
    let mut last = None;
    for _ in 0..4 {
        last = Some(send(api.v2(Method::GET, "/v2/droplets")).await);
    }
    let last = last.unwrap();
    assert_eq!(last.status(), 429);
    assert_eq!(last.headers()["ratelimit-limit"], "3");
    assert_eq!(last.headers()["ratelimit-remaining"], "0");
    assert!(last.headers().contains_key("ratelimit-reset"));
    let after: u64 = last.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&after), "{after}");
    let body: serde_json::Value = last.json().await.unwrap();
    assert_eq!(body["id"], "too_many_requests");
    sim.shutdown().await;
}

#[tokio::test]
async fn the_simulator_binds_loopback_only() {
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    let err = RunningSimulator::start(cfg).await.unwrap_err();
    assert!(err.to_string().contains("loopback"), "{err}");
}

#[tokio::test]
async fn admin_interface_powers_off_and_injects_faults() {
    let sim = sim(|_| {}).await;
    let api = Api::of(&sim, TOKEN);
    let created = json(
        api.request(Method::POST, "/admin/droplets")
            .json(&serde_json::json!({"name": "a1", "size": "s-1vcpu-1gb", "region": "sfo3"})),
    )
    .await;
    let id = created["droplet"]["id"].as_u64().unwrap();
    let power_off = format!("/admin/droplets/{id}/power_off");
    let resp = send(api.request(Method::POST, &power_off)).await;
    assert_eq!(resp.status(), 204);
    assert_eq!(sim.handle().droplets()[0].status, "off");
    let faults = serde_json::json!({"burst_429": 1, "retry_after_secs": 3});
    let resp = send(api.request(Method::PUT, "/admin/faults").json(&faults)).await;
    assert_eq!(resp.status(), 204);
    let resp = send(api.v2(Method::GET, &format!("/v2/droplets/{id}"))).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    let stats = json(api.request(Method::GET, "/admin/stats")).await;
    assert_eq!(stats["requests"]["429"], 1);
    let resp = send(api.request(Method::DELETE, &format!("/admin/droplets/{id}"))).await;
    assert_eq!(resp.status(), 204);
    assert!(sim.handle().droplets().is_empty());
    sim.shutdown().await;
}

/// A web page can make a browser send requests to the simulator: `Origin`, `Host` (DNS
/// rebinding) and `Sec-Fetch-Site` that are not the simulator's own are refused, on `/admin`
/// and `/v2`, and nothing changes.
#[tokio::test]
async fn requests_a_web_page_could_send_are_refused() {
    let sim = sim(|_| {}).await;
    let id = sim.handle().create_droplet("d1", "s", "nyc1").id;
    let port = sim.addr().port();
    let api = Api::of(&sim, TOKEN);
    let power_off = format!("/admin/droplets/{id}/power_off");
    let refused: [(&str, String); 9] = [
        ("origin", "http://evil.example".into()),
        ("origin", "null".into()),
        ("origin", format!("https://127.0.0.1:{port}")),
        (
            "origin",
            format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        ),
        ("host", format!("evil.example:{port}")),
        ("host", format!("localhost.evil.example:{port}")),
        ("host", format!("127.0.0.1:{}", port.wrapping_add(1))),
        ("host", "127.0.0.1".into()),
        ("sec-fetch-site", "cross-site".into()),
    ];
    for (name, value) in &refused {
        let resp = send(api.request(Method::POST, &power_off).header(*name, value)).await;
        assert_eq!(resp.status(), 403, "{name}: {value}");
        assert!(!resp.headers().contains_key("access-control-allow-origin"));
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["id"], "forbidden", "{name}: {value}");
    }
    assert_eq!(sim.handle().droplets()[0].status, "active");

    // The same for `/v2`, even with the token, and for reading `/admin/stats`.
    let droplets = api.v2(Method::GET, "/v2/droplets");
    let resp = send(droplets.header("origin", "http://evil.example")).await;
    assert_eq!(resp.status(), 403);
    let stats = api.request(Method::GET, "/admin/stats");
    let resp = send(stats.header("host", format!("evil.example:{port}"))).await;
    assert_eq!(resp.status(), 403);
    // A CORS preflight gets no permission either.
    let preflight = api
        .request(Method::OPTIONS, &power_off)
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST");
    let resp = send(preflight).await;
    assert!(!resp.status().is_success(), "{}", resp.status());
    assert!(!resp.headers().contains_key("access-control-allow-origin"));
    assert_eq!(sim.handle().request_count("403"), refused.len() as u64 + 3);

    // The simulator's own origin, under any loopback name with its port, is served.
    for (host, origin) in [
        (
            format!("127.0.0.1:{port}"),
            format!("http://127.0.0.1:{port}"),
        ),
        (
            format!("localhost:{port}"),
            format!("http://localhost:{port}"),
        ),
        (format!("[::1]:{port}"), format!("http://[::1]:{port}")),
    ] {
        let own = api
            .request(Method::POST, &power_off)
            .header("host", &host)
            .header("origin", &origin)
            .header("sec-fetch-site", "same-origin");
        let resp = send(own).await;
        assert_eq!(resp.status(), 204, "{host} {origin}");
    }
    assert_eq!(sim.handle().droplets()[0].status, "off");
    sim.shutdown().await;
}

#[tokio::test]
async fn an_admin_token_guards_the_admin_interface() {
    let sim = sim(|c| c.admin_token = Some("admin-s3cr3t".into())).await;
    let api = Api::of(&sim, TOKEN);
    let stats = || api.request(Method::GET, "/admin/stats");
    for token in [None, Some(TOKEN), Some("wrong")] {
        let mut req = stats();
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let resp = send(req).await;
        assert_eq!(resp.status(), 401, "{token:?}");
    }
    let resp = send(stats().bearer_auth("admin-s3cr3t")).await;
    assert_eq!(resp.status(), 200);
    // `/v2` still takes the API token, not the admin one.
    let resp = send(api.v2(Method::GET, "/v2/droplets")).await;
    assert_eq!(resp.status(), 200);
    let v2 = api.request(Method::GET, "/v2/droplets");
    let resp = send(v2.bearer_auth("admin-s3cr3t")).await;
    assert_eq!(resp.status(), 401);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_bind_failure_says_why_once() {
    let first = sim(|_| {}).await;
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.listen = first.addr();
    let err = RunningSimulator::start(cfg).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("binding {}: ", first.addr())) && text.contains("in use"),
        "{text}"
    );
    // The cause is in the message, not also a source that a chain would print again.
    assert!(std::error::Error::source(&err).is_none());
    first.shutdown().await;
}

#[tokio::test]
async fn injected_503s_carry_retry_after_and_requests_are_logged() {
    let sim = sim(|_| {}).await;
    let mut faults = Faults::default();
    faults.burst_503 = 1;
    faults.retry_after_secs = 4;
    sim.handle().set_faults(faults);
    let api = Api::of(&sim, TOKEN);
    let resp = send(api.v2(Method::GET, "/v2/droplets")).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "4");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["id"], "service_unavailable");
    let resp = send(api.v2(Method::GET, "/v2/droplets")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(sim.handle().request_count("503"), 1);
    let log = sim.handle().request_log();
    let statuses: Vec<(&str, u16)> = log.iter().map(|r| (r.route.as_str(), r.status)).collect();
    assert_eq!(
        statuses,
        [("GET /v2/droplets", 503), ("GET /v2/droplets", 200)]
    );
    assert!(log[0].at <= log[1].at);
    sim.shutdown().await;
}

/// A flood of made-up paths (long, unique, most without the token) leaves the counters and the
/// request log as small as a handful of routes: nothing a client writes becomes a key.
#[tokio::test]
async fn made_up_paths_do_not_grow_the_counters() {
    let sim = sim(|c| c.rate_limit = 100_000).await;
    let api = Api::of(&sim, TOKEN);
    let long = "x".repeat(60_000);
    for i in 0..300 {
        let request = api.request(Method::GET, &format!("/v2/{long}{i}"));
        // One in ten with the token: a made-up path of an authenticated client.
        let request = if i % 10 == 0 {
            request.bearer_auth(TOKEN)
        } else {
            request
        };
        let status = send(request).await.status();
        assert!(status == 401 || status == 404, "{status}");
    }
    let handle = sim.handle();
    let counts = handle.request_counts();
    assert_eq!(counts.get("401").copied(), Some(270), "{counts:?}");
    assert_eq!(
        counts.get("GET /v2/{other}").copied(),
        Some(30),
        "{counts:?}"
    );
    assert_eq!(counts.len(), 2, "{counts:?}");
    let log = handle.request_log();
    assert_eq!(log.len(), 300);
    assert!(
        log.iter().all(|r| r.route.len() < 32),
        "short routes in the log"
    );
}

#[tokio::test]
async fn another_address_than_loopback_needs_an_admin_token() {
    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    cfg.allow_non_loopback = true;
    let err = RunningSimulator::start(cfg).await.unwrap_err();
    assert!(err.to_string().contains("admin token"), "{err}");
}
