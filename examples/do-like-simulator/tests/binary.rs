//! The `do-like-api-simulator` binary: prints its address, keeps its state across restarts
//! and stops on SIGTERM; a bind failure says why; and, in a network namespace of its own
//! (root), a dual-stack load balancer serves a unique-local IPv6 address.

mod common;

use std::time::Duration;

use ccm_test::process::{CcmProcess, Signal};
use common::{Api, json};
use reqwest::Method;

const BIN: &str = env!("CARGO_BIN_EXE_do-like-api-simulator");
const TOKEN: &str = "e2e-token";
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_simulator_binary_prints_its_address_keeps_state_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    for round in 0..2 {
        let mut sim = CcmProcess::builder(BIN)
            .args(["--listen", "127.0.0.1:0", "--droplets", "2", "--state-file"])
            .arg(&state)
            .env("DO_LIKE_TOKEN", TOKEN)
            .capture_stdout()
            .spawn();
        let url = sim.wait_stdout_line("listening on ", WAIT).await;
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let body = json(Api::new(url, TOKEN).v2(Method::GET, "/v2/droplets")).await;
        // Two droplets the first time; the same two (from the state file) the second.
        assert_eq!(body["meta"]["total"], 2, "round {round}: {body}");
        sim.signal(Signal::Term);
        let status = sim.wait_exit(WAIT).await;
        assert!(status.success(), "{status}");
    }
    assert!(state.exists());
}

#[tokio::test]
async fn the_simulator_binary_says_why_it_cannot_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = CcmProcess::builder(BIN)
        .args(["--listen", &addr.to_string()])
        .env("DO_LIKE_TOKEN", TOKEN)
        // No log lines before the error.
        .env_remove("RUST_LOG")
        .run(WAIT)
        .await;
    assert!(!out.status.success());
    let stderr = out.log;
    // The cause, once: `error: binding 127.0.0.1:PORT: Address already in use (os error 98)`.
    assert!(
        stderr.starts_with(&format!("error: binding {addr}: ")) && stderr.contains("in use"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("in use").count(), 1, "{stderr}");
}

/// What runs in the namespace of
/// [`a_dual_stack_load_balancer_forwards_from_a_unique_local_range_in_a_namespace`]: the
/// routes and the sysctl an IPv6 range needs, a droplet's server (a second simulator at the
/// droplet's private IPv4 address), the simulator with the state, and a client of the load
/// balancer's IPv6 address (bash's `/dev/tcp`), whose answer it prints.
const NAMESPACE_SCRIPT: &str = r#"set -eu
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
ip link set lo up
ip addr add 10.88.0.1/32 dev lo
ip addr add 10.88.0.10/32 dev lo
ip route add local 10.88.64.0/24 dev lo
ip -6 route add local fd00:77::/112 dev lo
sysctl -qw net.ipv6.ip_nonlocal_bind=1
"$BIN" --listen 10.88.0.10:30080 --non-loopback on --admin-token-file "$DIR/admin" \
    >/dev/null 2>&1 &
"$BIN" --listen 10.88.0.1:8088 --non-loopback on --admin-token-file "$DIR/admin" \
    --state-file "$DIR/state.json" --lb-addresses 10.88.64.0/24 \
    --lb-addresses-v6 fd00:77::/112 >/dev/null 2>&1 &
for _ in $(seq 100); do
    answer=$( (exec 3<>/dev/tcp/fd00:77::1/80 &&
        printf 'GET /v2/account HTTP/1.0\r\nHost: 10.88.0.10:30080\r\n\r\n' >&3 &&
        timeout 5 cat <&3) 2>/dev/null || true)
    case "$answer" in
    *unauthorized*) echo "ANSWER: $answer"; exit 0 ;;
    esac
    sleep 0.2
done
echo "no answer from [fd00:77::1]:80"
exit 1
"#;

/// A unique-local IPv6 range (`--lb-addresses-v6 fd00:77::/112`), in a network namespace
/// this test makes (root: `unshare -n`), routed locally and bindable as the docs say: a
/// dual-stack load balancer of the state file gets `fd00:77::1` when it turns active, and a
/// client of that address reaches the droplet's server at its private IPv4 address. The
/// server is a second simulator, whose 401 (`unauthorized`) is the answer. Nothing leaves the
/// namespace, which ends with the script.
#[tokio::test]
async fn a_dual_stack_load_balancer_forwards_from_a_unique_local_range_in_a_namespace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("admin"), "admin-token").unwrap();
    // The state: a droplet at 10.88.0.10 and a dual-stack load balancer due to turn active,
    // made by an in-process simulator that writes its state file.
    let state = dir.path().join("state.json");
    let mut cfg = ccm_do_like_simulator::SimulatorConfig::new(TOKEN);
    cfg.state_file = Some(state.clone());
    cfg.lb_activation_delay = Duration::from_secs(3600);
    let sim = ccm_do_like_simulator::RunningSimulator::start(cfg)
        .await
        .unwrap();
    let droplet = sim.handle().create_droplet_with(
        "node-1",
        "s-1vcpu-1gb",
        "nyc1",
        Some("10.88.0.10".parse().unwrap()),
        Some("fd00:10::a".parse().unwrap()),
    );
    let lb = json(
        Api::of(&sim, TOKEN)
            .v2(Method::POST, "/v2/load_balancers")
            .json(&serde_json::json!({
                "name": "web", "region": "nyc1", "network_stack": "DUALSTACK",
                "forwarding_rules": [{"entry_protocol": "tcp", "entry_port": 80,
                    "target_protocol": "tcp", "target_port": 30080}],
                "health_check": {"protocol": "tcp", "port": 30080, "check_interval_seconds": 3,
                    "response_timeout_seconds": 3, "healthy_threshold": 2,
                    "unhealthy_threshold": 2},
                "droplet_ids": [droplet.id],
            })),
    )
    .await;
    let id = lb["load_balancer"]["id"].as_str().unwrap().to_owned();
    sim.shutdown().await;
    let mut data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    data["lb_activate_at"][&id] = 0.into();
    std::fs::write(&state, serde_json::to_vec(&data).unwrap()).unwrap();

    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("unshare")
            .args(["-n", "bash", "-c", NAMESPACE_SCRIPT])
            .env("BIN", BIN)
            .env("DIR", dir.path())
            .env("DO_LIKE_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the namespace's script within 60 s")
    .expect("unshare (util-linux) and bash");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the namespace's script failed (it runs as root: unshare -n, iproute2's ip, sysctl): \
         {stdout}{stderr}"
    );
    assert!(
        stdout.contains("ANSWER: HTTP/1.0 401") && stdout.contains("unauthorized"),
        "the droplet's server answered through [fd00:77::1]:80: {stdout}"
    );
    let data: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    let lb = &data["load_balancers"][&id];
    assert_eq!(lb["status"], "active", "{lb}");
    assert_eq!(lb["ip"], "10.88.64.1", "{lb}");
    assert_eq!(lb["ipv6"], "fd00:77::1", "{lb}");
}
