//! The `do-like-api-simulator` binary: prints its address, keeps its state across restarts
//! and stops on SIGTERM; a bind failure says why.

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
