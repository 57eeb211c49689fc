//! The `do-like-api-simulator` binary: prints its address, keeps its state across restarts
//! and stops on SIGTERM; a bind failure says why.

use std::process::{Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "e2e-token";

#[tokio::test]
async fn the_simulator_binary_prints_its_address_keeps_state_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let start = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_do-like-api-simulator"))
            .args(["--listen", "127.0.0.1:0", "--droplets", "2", "--state-file"])
            .arg(&state)
            .env("DO_LIKE_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_owned();
        (child, url)
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    for round in 0..2 {
        let (mut child, url) = start();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let body: serde_json::Value = http
            .get(format!("{url}/v2/droplets"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // Two droplets the first time; the same two (from the state file) the second.
        assert_eq!(body["meta"]["total"], 2, "round {round}: {body}");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "{status}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "did not stop on SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(state.exists());
}

#[tokio::test]
async fn the_simulator_binary_says_why_it_cannot_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_do-like-api-simulator"))
        .args(["--listen", &addr.to_string()])
        .env("DO_LIKE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The cause, once: `error: binding 127.0.0.1:PORT: Address already in use (os error 98)`.
    assert!(
        stderr.starts_with(&format!("error: binding {addr}: ")) && stderr.contains("in use"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("in use").count(), 1, "{stderr}");
}
