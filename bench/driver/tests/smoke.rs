//! CI smoke test: the benchmark driver runs end to end at a small N. A benchmark, not a
//! timed test: nothing here checks a duration.
//!
//! Our CCM is the debug `fake-cloud-controller-manager` that `cargo test --workspace`
//! builds for the fake cloud's own tests; with `CCM_BENCH_GO=1` the Go reference CCM runs
//! too (built by `bench/build-go-reference.sh`, which needs Go).

use std::path::PathBuf;
use std::time::Duration;

use ccm_test::process::CcmProcess;

const BENCH: &str = env!("CARGO_BIN_EXE_ccm-bench");
/// How long a run may take: a hang detector, far above its minutes.
const RUN: Duration = Duration::from_secs(30 * 60);

/// Our debug CCM, beside the driver; a missing one fails the test, it never skips.
fn rust_ccm() -> PathBuf {
    let rust_ccm = PathBuf::from(BENCH).with_file_name("fake-cloud-controller-manager");
    assert!(
        rust_ccm.exists(),
        "{} is not built; run `cargo build -p ccm-fake-cloud` or `cargo test --workspace`",
        rust_ccm.display()
    );
    rust_ccm
}

/// Runs the driver with `args` against our CCM, its JSON and picture in `dir`; asserts it
/// succeeded and returns its stdout, stderr and the JSON report.
async fn run_bench(args: &[&str], dir: &std::path::Path) -> (String, String, serde_json::Value) {
    let out = dir.join("results.json");
    let run = CcmProcess::builder(BENCH)
        .args(args)
        .arg("--rust-ccm")
        .arg(rust_ccm())
        .arg("--out")
        .arg(&out)
        .arg("--svg")
        .arg(dir.join("progress.svg"))
        // The CCMs log as their flags say.
        .env_remove("RUST_LOG")
        .run(RUN)
        .await;
    assert!(run.status.success(), "ccm-bench failed:\n{}", run.log);
    let report = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    (run.stdout, run.log, report)
}

#[tokio::test]
async fn the_driver_runs_at_a_small_n() {
    let go = std::env::var_os("CCM_BENCH_GO").is_some_and(|v| v == "1");
    let dir = tempfile::tempdir().unwrap();
    let (stdout, _, report) = run_bench(
        &[
            "--nodes",
            "10",
            "--services",
            "5",
            "--routes",
            "5",
            "--new-nodes",
            "3",
            "--idle-secs",
            "2",
            "--timeout-secs",
            "120",
            "--ccm",
            if go { "rust,go" } else { "rust" },
        ],
        dir.path(),
    )
    .await;
    for row in [
        "node_init: seconds",
        "routes: cloud calls per object: create_route",
        "redundant load-balancer updates",
        "duplicate Node condition writes",
    ] {
        assert!(stdout.contains(row), "no {row:?} row in\n{stdout}");
    }

    assert!(dir.path().join("progress.svg").exists());

    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), if go { 2 } else { 1 }, "{report:#}");
    for r in results {
        let nodes = &r["scenarios"]["node_init"];
        assert_eq!(nodes["objects"], 10, "{report:#}");
        assert!(nodes["api_requests"].as_f64().unwrap() > 0.0, "{report:#}");
        assert_eq!(r["scenarios"]["load_balancers"]["objects"], 5, "{report:#}");
        assert_eq!(r["scenarios"]["lb_new_nodes"]["objects"], 3, "{report:#}");
        // Every LB was updated for the new Nodes: the cloud saw the calls.
        assert!(
            r["scenarios"]["lb_new_nodes"]["cloud_calls"]["update_load_balancer"]
                .as_f64()
                .unwrap()
                >= 5.0,
            "{report:#}"
        );
        assert_eq!(r["scenarios"]["routes"]["objects"], 5, "{report:#}");
        assert_eq!(
            r["scenarios"]["routes"]["cloud_calls"]["create_route"], 5.0,
            "{report:#}"
        );
        assert_eq!(r["duplicate_route_creates"], 0.0, "{report:#}");
        assert!(r["timed_out"].is_null(), "{report:#}");
        // Counted, whatever their value (the controllers change; the target is 0).
        assert!(r["redundant_load_balancer_updates"].is_f64(), "{report:#}");
        assert!(r["duplicate_condition_writes"].is_f64(), "{report:#}");
        for s in ["node_init", "load_balancers", "lb_new_nodes", "routes"] {
            let s = &r["scenarios"][s];
            assert!(s["redundant_load_balancer_updates"].is_f64(), "{report:#}");
            assert!(s["duplicate_condition_writes"].is_f64(), "{report:#}");
            assert_eq!(s["timed_out"], false, "{report:#}");
        }
        // The audit log was read: every route Node had its NetworkUnavailable written.
        assert!(
            r["scenarios"]["routes"]["condition_writes"]
                .as_f64()
                .unwrap()
                >= 5.0,
            "{report:#}"
        );
        assert!(r["condition_writes"].as_f64().unwrap() >= 5.0, "{report:#}");
        assert!(r["peak_rss_mib"].as_f64().unwrap() > 0.0, "{report:#}");
        assert!(!r["rss"].as_array().unwrap().is_empty(), "{report:#}");
        assert!(r["idle"]["seconds"].as_f64().unwrap() >= 2.0, "{report:#}");
    }
}

/// A CCM that cannot finish a scenario in `--timeout-secs` (here: 200 Nodes at 1 API
/// request a second in 3 s) does not end the run: the scenario is recorded as incomplete,
/// the later ones are skipped, and the table says so.
#[tokio::test]
async fn a_scenario_that_times_out_is_recorded_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, stderr, report) = run_bench(
        &[
            "--nodes",
            "200",
            "--services",
            "5",
            "--idle-secs",
            "2",
            "--qps",
            "1",
            "--burst",
            "1",
            "--timeout-secs",
            "3",
            "--ccm",
            "rust",
        ],
        dir.path(),
    )
    .await;
    assert!(stderr.contains("TIMED OUT"), "{stderr}");
    assert!(stdout.contains("timed out: "), "{stdout}");
    assert!(stdout.contains("(rust timed out)"), "{stdout}");

    let r = &report["results"][0];
    assert_eq!(r["timed_out"], "node_init", "{report:#}");
    let s = &r["scenarios"]["node_init"];
    assert_eq!(s["timed_out"], true, "{report:#}");
    assert!(s["done"].as_u64().unwrap() < 200, "{report:#}");
    assert!(s["seconds"].as_f64().unwrap() >= 3.0, "{report:#}");
    assert!(s["api_requests"].as_f64().unwrap() > 0.0, "{report:#}");
    // The later scenarios were skipped; the whole-run figures were still collected.
    assert!(r["scenarios"]["load_balancers"].is_null(), "{report:#}");
    assert!(r["idle"].is_null(), "{report:#}");
    assert!(r["peak_rss_mib"].as_f64().unwrap() > 0.0, "{report:#}");
    assert!(r["total_cpu_seconds"].as_f64().unwrap() > 0.0, "{report:#}");
}
