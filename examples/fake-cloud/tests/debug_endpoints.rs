//! Live debugging as Go offers it, on `fake-cloud-controller-manager` against a real
//! kube-apiserver + etcd: `PUT /debug/flags/v` changes the log verbosity of the running
//! process (the route controller's debug line appears, then stops), and `/configz` answers
//! the effective flags under Go's names.

mod common;

use std::time::Duration;

use ccm_test::ControlPlane;
use ccm_test::net::{free_port, http_get};
use ccm_test::process::CcmProcess;
use common::{BIN, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The route controller's debug line, logged after each reconcile (every second here).
const DEBUG_LINE: &str = "route reconcile done";

/// A `PUT` of `body` to `path` on 127.0.0.1:`port`: the status and the body.
async fn put(port: u16, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn verbosity_changes_live_and_configz_shows_the_flags() {
    let cp = common::control_plane(ControlPlane::builder()).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args = common::args_serving_on(
        &cp,
        dir.path(),
        port,
        &[
            "--leader-elect=false",
            "--route-reconciliation-period=1s",
            "--cluster-name=debugged",
            "--v=0",
        ],
    );
    // The log level comes from the flags, not from the test's environment.
    let ccm = CcmProcess::builder(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .spawn();
    ccm.wait_log("starting controller", WAIT).await;

    // /configz: the effective flags, Go's key and names.
    let (status, configz) = http_get(port, "/configz").await;
    assert_eq!(status, 200, "{configz}");
    let doc: serde_json::Value = serde_json::from_str(&configz).unwrap();
    let c = &doc["cloudcontrollermanager.config.k8s.io"];
    assert_eq!(c["KubeCloudShared"]["ClusterName"], "debugged", "{configz}");
    assert_eq!(c["KubeCloudShared"]["RouteReconciliationPeriod"], "1s");

    // At --v=0 the route controller's debug line is not written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!ccm.log().contains(DEBUG_LINE), "{}", ccm.log());

    // Bad values are refused with Go's text; other methods with Go's 406.
    let (status, body) = put(port, "/debug/flags/v", "loud").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.starts_with("failed set klog.logging.verbosity loud"),
        "{body}"
    );
    assert_eq!(http_get(port, "/debug/flags/v").await.0, 406);

    let (status, body) = put(port, "/debug/flags/v", "4").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "successfully set klog.logging.verbosity to 4")
    );
    ccm.wait_log(DEBUG_LINE, WAIT).await;

    // Back to 0: the line stops (a reconcile under way may still end with one).
    assert_eq!(put(port, "/debug/flags/v", "0").await.0, 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written = ccm.log().matches(DEBUG_LINE).count();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ccm.log().matches(DEBUG_LINE).count(),
        written,
        "{}",
        ccm.log()
    );
}
