//! The command starts a usable control plane and cleans up on SIGINT.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn serves_until_interrupted_then_cleans_up() {
    let scratch = tempfile::tempdir().unwrap();
    let kubeconfig = scratch.path().join("local.kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ccm-local-control-plane"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its stderr, quoted when an assertion fails.
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr_pipe, &mut text);
        text
    });

    let mut kubectl: Option<PathBuf> = None;
    let mut logs_dir: Option<PathBuf> = None;
    let mut export = None;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(path) = line.trim().strip_prefix("kubectl:") {
            kubectl = Some(PathBuf::from(path.trim()));
        }
        if let Some(pattern) = line.trim().strip_prefix("logs:") {
            let pattern = pattern.trim();
            let dir = pattern.strip_suffix("/{etcd,kube-apiserver}.log").unwrap();
            logs_dir = Some(PathBuf::from(dir));
        }
        if let Some(value) = line.strip_prefix("export KUBECONFIG=") {
            export = Some(PathBuf::from(value));
        }
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    if export.as_deref() != Some(kubeconfig.as_path()) {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "no `export KUBECONFIG={}` line; stderr:\n{}",
            kubeconfig.display(),
            stderr.join().unwrap()
        );
    }
    let dir = logs_dir.expect("no logs line");
    assert!(dir.join("kube-apiserver.log").is_file());
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");

    let kubectl = kubectl.expect("no kubectl line");
    let output = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "--raw", "/readyz"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ok");

    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(stderr.contains("interrupted: stopping"), "{stderr}");
    assert!(!dir.exists(), "{} was not removed", dir.display());
    assert!(
        !kubeconfig.exists(),
        "the copied kubeconfig was not removed"
    );
}
