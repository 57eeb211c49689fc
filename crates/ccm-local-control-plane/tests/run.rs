//! The command starts a usable control plane and cleans up on SIGINT.

use std::path::PathBuf;
use std::time::Duration;

use ccm_test::process::{CcmProcess, Signal};

/// How long the control plane may take to come up (or to stop): generous for a loaded
/// machine.
const WAIT: Duration = Duration::from_secs(300);

/// The value of the line `  name   value` of `stdout`.
fn field<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix(name))
        .map(str::trim)
}

#[tokio::test]
async fn serves_until_interrupted_then_cleans_up() {
    let scratch = tempfile::tempdir().unwrap();
    let kubeconfig = scratch.path().join("local.kubeconfig");
    let mut cp = CcmProcess::builder(env!("CARGO_BIN_EXE_ccm-local-control-plane"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .capture_stdout()
        .spawn();
    cp.wait_stdout_line("Press Ctrl-C", WAIT).await;

    let stdout = cp.stdout();
    let export = stdout
        .lines()
        .find_map(|line| line.strip_prefix("export KUBECONFIG="));
    assert_eq!(
        export.map(PathBuf::from),
        Some(kubeconfig.clone()),
        "no `export KUBECONFIG={}` line:\n{stdout}\nstderr:\n{}",
        kubeconfig.display(),
        cp.log()
    );
    let logs = field(&stdout, "logs:").expect("no logs line");
    let dir = PathBuf::from(logs.strip_suffix("/{etcd,kube-apiserver}.log").unwrap());
    assert!(dir.join("kube-apiserver.log").is_file());
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");

    let kubectl = PathBuf::from(field(&stdout, "kubectl:").expect("no kubectl line"));
    let readyz = CcmProcess::builder(kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "--raw", "/readyz"])
        .run(WAIT)
        .await;
    assert!(readyz.status.success(), "{}", readyz.log);
    assert_eq!(readyz.stdout.trim(), "ok");

    cp.signal(Signal::Int);
    let status = cp.wait_exit(WAIT).await;
    let stderr = cp.log();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(stderr.contains("interrupted: stopping"), "{stderr}");
    assert!(!dir.exists(), "{} was not removed", dir.display());
    assert!(
        !kubeconfig.exists(),
        "the copied kubeconfig was not removed"
    );
}
