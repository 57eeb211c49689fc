//! The API token never reaches a log. Its own test binary: a thread-local subscriber races
//! with callsite registration by tests running in parallel.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccm_core::provider::{CloudProvider, resolve_instances};
use ccm_do_like_cloud::{ApiToken, Client, ClientOptions, DoLikeCloud};
use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig};
use ccm_test::fixtures::{NodeBuilder, ServiceBuilder};
use k8s_openapi::api::core::v1::{Node, Service};

const TOKEN: &str = "dop_v1_s3cr3t-token-do-not-log";
const CLUSTER: &str = "test-cluster";

fn provider_with(sim: &RunningSimulator, token: &str) -> Arc<DoLikeCloud> {
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(token));
    opts.requests_per_second = Some(1000.0);
    Arc::new(DoLikeCloud::new(Client::new(opts).unwrap(), "nyc1"))
}

fn node(name: &str) -> Node {
    NodeBuilder::new(name).build()
}

fn service(name: &str, uid: &str) -> Service {
    ServiceBuilder::new(name)
        .uid(uid)
        .port(80)
        .node_port(30080)
        .build()
}

/// A writer that keeps everything logged.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_token_is_never_logged() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut cfg = SimulatorConfig::new(TOKEN);
    cfg.lb_activation_delay = Duration::ZERO;
    let sim = RunningSimulator::start(cfg).await.unwrap();
    sim.handle().create_droplet("w", "s", "nyc1");
    let cloud = provider_with(&sim, TOKEN);
    let p: Arc<dyn CloudProvider> = cloud.clone();
    let inst = resolve_instances(&p).unwrap();
    inst.instance_metadata(&node("w")).await.unwrap();
    let lb = p.load_balancer().unwrap();
    lb.ensure_load_balancer(CLUSTER, &service("s", "u-1"), &[])
        .await
        .unwrap();
    let mut f = Faults::default();
    f.burst_429 = 1;
    f.retry_after_secs = 0;
    sim.handle().set_faults(f);
    cloud.client().invalidate();
    inst.instance_metadata(&node("w")).await.unwrap();
    tracing::info!(provider = ?cloud, "the provider's Debug");
    let bad = provider_with(&sim, &format!("{TOKEN}-bad"));
    let err = bad.client().list_droplets().await.unwrap_err();
    tracing::warn!(error = %err, debug = ?err, "an auth failure");

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("API request"), "nothing captured: {logs}");
    assert!(logs.contains("<redacted>"), "{logs}");
    assert!(
        !logs.contains("s3cr3t"),
        "the token leaked into the logs:\n{logs}"
    );
    sim.shutdown().await;
}
