//! Every release manifest (`releases/v<version>/<provider>.yaml`, rendered from the Helm
//! chart `charts/cloud-controller-manager` by `scripts/release-manifests.sh`, which
//! `scripts/test.sh` runs with `--check`) is accepted by a real API server
//! (`kubectl apply --dry-run=server`, so every object is validated and admitted, nothing
//! stored), and holds what a release must: the least-privilege RBAC of `deploy/rbac.yaml`
//! (proven by `binary.rs`), a Deployment with leader election and HTTPS probes on the secure
//! port, and the image pinned to the release's version.
//!
//! So is every snapshot of the chart (`charts/*/tests/snapshots/*.yaml`, one per value set
//! of `charts/*/ci/`, kept in step by `scripts/helm-check.sh`), with the prometheus-operator
//! CRDs its monitors need stood in for by schemaless ones.

use std::path::{Path, PathBuf};

use ccm_test::ControlPlane;
use ccm_test::image::manifest_objects;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;

fn releases() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../releases");
    let mut files = Vec::new();
    for version in std::fs::read_dir(&root).expect("releases/") {
        let version = version.unwrap();
        let name = version.file_name().into_string().unwrap();
        for file in std::fs::read_dir(version.path()).unwrap() {
            files.push((name.clone(), file.unwrap().path()));
        }
    }
    files.sort();
    files
}

/// The chart snapshots, each with the namespace its first line's `--namespace` names.
fn snapshots() -> Vec<(String, PathBuf)> {
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts");
    let mut files = Vec::new();
    for chart in std::fs::read_dir(&charts).expect("charts/") {
        let dir = chart.unwrap().path().join("tests/snapshots");
        for file in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let file = file.unwrap().path();
            let text = std::fs::read_to_string(&file).unwrap();
            let first = text.lines().next().unwrap_or_default();
            let namespace = first
                .split_once("--namespace ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("{}: no --namespace on its first line", file.display()))
                .to_owned();
            files.push((namespace, file));
        }
    }
    files.sort();
    files
}

/// prometheus-operator's PodMonitor and ServiceMonitor, schemaless: the API server checks
/// the objects' shape as a Kubernetes object and their names, not the operator's schema.
const MONITOR_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podmonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PodMonitor, plural: podmonitors, singular: podmonitor, listKind: PodMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

#[tokio::test]
async fn chart_snapshots_are_admitted_by_a_real_api_server() {
    let cp = ControlPlane::start().await.expect("a real control plane");
    let files = snapshots();
    assert!(
        files.len() >= 4
            && files.iter().any(|(_, f)| f.ends_with("fake-cloud.yaml"))
            && files.iter().any(|(_, f)| f.ends_with("do-like-cloud.yaml")),
        "a snapshot per provider and per value set: {files:?}"
    );

    let crds = cp.dir().join("monitor-crds.yaml");
    std::fs::write(&crds, MONITOR_CRDS).unwrap();
    cp.run_kubectl(["apply", "-f", crds.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("{e}"));
    cp.run_kubectl([
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/servicemonitors.monitoring.coreos.com",
    ])
    .unwrap_or_else(|e| panic!("{e}"));

    for (namespace, file) in &files {
        if namespace != "kube-system"
            && cp
                .run_kubectl(["get", "namespace", namespace.as_str()])
                .is_err()
        {
            cp.run_kubectl(["create", "namespace", namespace.as_str()])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let stdout = dry_run(&cp, file);
        // One line of kubectl's per object of the snapshot: each was admitted.
        let text = std::fs::read_to_string(file).unwrap();
        let objects = text.lines().filter(|l| l.starts_with("kind: ")).count();
        let admitted = stdout
            .lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count();
        assert!(objects >= 6, "{}: {objects} objects", file.display());
        assert_eq!(admitted, objects, "{}: {stdout}", file.display());
    }
}

/// `kubectl apply --dry-run=server -f file` against `cp`: its output, or a panic with the
/// API server's refusal.
fn dry_run(cp: &ControlPlane, file: &Path) -> String {
    let out = cp
        .kubectl()
        .expect("kubectl")
        .args(["apply", "--dry-run=server", "-f"])
        .arg(file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}: {}{stdout}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn release_manifests_are_admitted_by_a_real_api_server() {
    let cp = ControlPlane::start().await.expect("a real control plane");
    let files = releases();
    assert!(
        files.iter().any(|(_, f)| f.ends_with("fake-cloud.yaml"))
            && files.iter().any(|(_, f)| f.ends_with("do-like-cloud.yaml")),
        "a release manifest per provider: {files:?}"
    );
    for (version, file) in &files {
        let stdout = dry_run(&cp, file);
        for kind in ["serviceaccount/", "clusterrole.", "deployment.apps/"] {
            assert!(
                stdout.contains(kind),
                "{}: no {kind}: {stdout}",
                file.display()
            );
        }

        let text = std::fs::read_to_string(file).unwrap();
        let deployment = manifest_objects::<Deployment>(&text, "Deployment")
            .unwrap()
            .remove(0);
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        let image = container.image.as_deref().unwrap();
        assert!(
            image.ends_with(&format!(":{}", version.trim_start_matches('v'))),
            "{}: image {image} is not pinned to {version}",
            file.display()
        );
        let args = container.args.clone().unwrap_or_default();
        assert!(args.contains(&"--leader-elect=true".to_owned()), "{args:?}");
        for probe in [&container.liveness_probe, &container.readiness_probe] {
            let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap();
            assert_eq!(get.scheme.as_deref(), Some("HTTPS"), "{}", file.display());
        }
        assert_eq!(
            pod.security_context
                .as_ref()
                .and_then(|s| s.run_as_non_root),
            Some(true)
        );

        // The role is deploy/rbac.yaml's, no wider: no wildcard anywhere.
        for role in manifest_objects::<ClusterRole>(&text, "ClusterRole").unwrap() {
            for rule in role.rules.unwrap_or_default() {
                let all = rule
                    .verbs
                    .iter()
                    .chain(rule.resources.iter().flatten())
                    .chain(rule.api_groups.iter().flatten());
                assert!(
                    all.into_iter().all(|s| s != "*"),
                    "{}: wildcard in {rule:?}",
                    file.display()
                );
            }
        }
    }
}
