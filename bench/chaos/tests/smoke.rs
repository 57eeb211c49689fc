//! CI runs the reliability suite small: every experiment end to end, with the real
//! `do-like-cloud-controller-manager` (built by `cargo test --workspace` for the DO-like
//! provider's own tests), a real control plane and the simulator. It checks what was left
//! behind (nothing), never how long anything took.

use std::path::PathBuf;
use std::time::Duration;

use ccm_test::process::CcmProcess;

const CHAOS: &str = env!("CARGO_BIN_EXE_ccm-chaos");
/// How long the whole suite may take: a hang detector, far above its minutes.
const RUN: Duration = Duration::from_secs(30 * 60);

#[tokio::test]
async fn every_experiment_runs_small_and_leaves_nothing_behind() {
    let ccm = PathBuf::from(CHAOS).with_file_name("do-like-cloud-controller-manager");
    // A missing part fails the test; it never skips.
    assert!(
        ccm.exists(),
        "{} is not built; run `cargo build -p ccm-do-like-cloud` or `cargo test --workspace`",
        ccm.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chaos.json");
    let run = CcmProcess::builder(CHAOS)
        .args(["--services", "6", "--kills", "2", "--fault-secs", "3"])
        .args([
            "--lease-secs",
            "4",
            "--outage-secs",
            "3",
            "--timeout-secs",
            "120",
        ])
        .arg("--ccm")
        .arg(&ccm)
        .arg("--out")
        .arg(&out)
        .run(RUN)
        .await;
    assert!(
        run.status.success(),
        "ccm-chaos reported something left behind:\n{}\n{}",
        run.stdout,
        run.log
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["experiment"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "kill",
            "faults",
            "pause",
            "handover",
            "apiserver",
            "etcd",
            "shared"
        ],
        "{report:#}"
    );
    for r in results {
        for field in [
            "orphans",
            "duplicates",
            "missing_ingress",
            "stuck_finalizers",
        ] {
            assert_eq!(r[field], 0, "{field} in {r:#}");
        }
        assert!(r["converged_secs"].is_number(), "converged: {r:#}");
    }
    // The outages are measured from the server's return and from the suite's last change.
    for outage in &results[4..6] {
        let (from_return, from_change) = (
            outage["converged_secs"].as_f64().unwrap(),
            outage["after_last_change_secs"].as_f64().unwrap(),
        );
        assert!(from_change <= from_return, "{outage:#}");
        assert!(
            outage["first_write_secs"].as_f64().unwrap() <= from_return,
            "{outage:#}"
        );
    }
    let kill = &results[0];
    assert_eq!(kill["disruptions"], 2, "{kill:#}");
    let pause = &results[2];
    assert_eq!(pause["mutations_after_resume"], 0, "{pause:#}");
    assert!(pause["takeover_secs"].is_number(), "{pause:#}");
    // The leader's SIGTERM: the standby took over, converged counts from the SIGTERM.
    let handover = &results[3];
    let takeover = handover["takeover_secs"].as_f64().unwrap();
    assert!(
        takeover <= handover["converged_secs"].as_f64().unwrap(),
        "{handover:#}"
    );
    // The faults' requests are counted, during the fault and after it.
    let faults = &results[1];
    assert!(faults["fault_requests"].as_u64().unwrap() > 0, "{faults:#}");
    assert!(faults["recovery_requests"].is_u64(), "{faults:#}");
    // Shared groups: 12 churn operations, 2 SIGKILLs and the fault window.
    let shared = &results[6];
    assert_eq!(shared["disruptions"], 3, "{shared:#}");
    for field in ["wrong_ingress", "wrong_ports", "wrong_members"] {
        assert_eq!(shared["shared"][field], 0, "{field} in {shared:#}");
    }
    assert!(
        shared["shared"]["churn_ops"].as_u64().unwrap() > 0,
        "{shared:#}"
    );
}
