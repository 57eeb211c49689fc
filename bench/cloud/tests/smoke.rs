//! CI smoke test: the cloud-timing driver runs end to end at a small N against our debug
//! `do-like-cloud-controller-manager` (the one `cargo test --workspace` builds for the
//! DO-like cloud's own tests). A benchmark, not a timed test: no duration is checked, only
//! what the run must have done (every Service given its address, one create each).

use std::path::PathBuf;
use std::time::Duration;

use ccm_test::process::CcmProcess;

const BENCH: &str = env!("CARGO_BIN_EXE_ccm-bench-cloud");
/// How long a run may take: a hang detector, far above its seconds.
const RUN: Duration = Duration::from_secs(10 * 60);

/// Our debug CCM, beside the driver; a missing one fails the test, it never skips.
fn rust_ccm() -> PathBuf {
    let ccm = PathBuf::from(BENCH).with_file_name("do-like-cloud-controller-manager");
    assert!(
        ccm.exists(),
        "{} is not built; run `cargo build -p ccm-do-like-cloud` or `cargo test --workspace`",
        ccm.display()
    );
    ccm
}

#[tokio::test]
async fn the_driver_runs_at_a_small_n() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cloud.json");
    let run = CcmProcess::builder(BENCH)
        .args([
            "--services",
            "5",
            "--nodes",
            "2",
            "--activation-ms",
            "300",
            "--latency-ms",
            "5",
            "--timeout-secs",
            "120",
        ])
        .arg("--rust-ccm")
        .arg(rust_ccm())
        .arg("--out")
        .arg(&out)
        .capture_stdout()
        .env_remove("RUST_LOG")
        .run(RUN)
        .await;
    assert!(run.status.success(), "ccm-bench-cloud failed:\n{}", run.log);
    for row in [
        "seconds until every ingress",
        "cloud requests per Service",
        "  POST /v2/load_balancers",
        "API requests per Service",
        "  patch services/status",
        "peak RSS (MiB)",
    ] {
        assert!(
            run.stdout.contains(row),
            "no {row:?} row in\n{}",
            run.stdout
        );
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{report}");
    let ours = &results[0];
    assert_eq!(ours["name"], "rust");
    let count = |map: &str, key: &str| ours[map][key].as_u64().unwrap_or(0);
    // One load balancer per Service: no create retried into a duplicate.
    assert_eq!(count("requests", "POST /v2/load_balancers"), 5, "{ours}");
    // Found by name in the client's index, not by a list per Service.
    assert!(count("requests", "GET /v2/load_balancers") <= 2, "{ours}");
    // Every Service's ingress was written, once each at least.
    assert!(
        count("api_requests", "patch services/status") >= 5,
        "{ours}"
    );
    let curve = ours["curve"].as_array().unwrap();
    assert_eq!(curve.last().unwrap()[1], 5, "{ours}");
}
