//! The simulator over HTTP, started in-process on 127.0.0.1:0: its rate limit and headers,
//! loopback-only binding, and the admin interface.

use std::time::Duration;

use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};

const TOKEN: &str = "dop_v1_s3cr3t-token-do-not-log";

/// Starts a simulator with the defaults changed by `tweak`.
async fn sim(tweak: impl FnOnce(&mut SimulatorConfig)) -> RunningSimulator {
    let mut cfg = SimulatorConfig::new(TOKEN);
    tweak(&mut cfg);
    RunningSimulator::start(cfg).await.unwrap()
}

fn raw_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

#[tokio::test]
async fn simulator_rate_limits_with_headers() {
    let sim = sim(|c| {
        c.rate_limit = 3;
        c.rate_limit_window = Duration::from_secs(60);
    })
    .await;
    let http = raw_client();
    let mut last = None;
    for _ in 0..4 {
        last = Some(
            http.get(format!("{}/v2/droplets", sim.url()))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap(),
        );
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
    let http = raw_client();
    let created: serde_json::Value = http
        .post(format!("{}/admin/droplets", sim.url()))
        .json(&serde_json::json!({"name": "a1", "size": "s-1vcpu-1gb", "region": "sfo3"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["droplet"]["id"].as_u64().unwrap();
    let resp = http
        .post(format!("{}/admin/droplets/{id}/power_off", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(sim.handle().droplets()[0].status, "off");
    let resp = http
        .put(format!("{}/admin/faults", sim.url()))
        .json(&serde_json::json!({"burst_429": 1, "retry_after_secs": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let resp = http
        .get(format!("{}/v2/droplets/{id}", sim.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    let stats: serde_json::Value = http
        .get(format!("{}/admin/stats", sim.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests"]["429"], 1);
    let resp = http
        .delete(format!("{}/admin/droplets/{id}", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert!(sim.handle().droplets().is_empty());
    sim.shutdown().await;
}
