//! Every release manifest (`releases/v<version>/<provider>.yaml`, rendered from the
//! providers' `deploy/` by `scripts/release-manifests.sh`, which `scripts/test.sh` runs with
//! `--check`) is accepted by a real API server (`kubectl apply --dry-run=server`, so every
//! object is validated and admitted, nothing stored), and holds what a release must: the
//! least-privilege RBAC of `deploy/rbac.yaml` (proven by `binary.rs`), a Deployment with leader
//! election and HTTPS probes on the secure port, and the image pinned to the release's version.

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
        let out = cp
            .kubectl()
            .expect("kubectl")
            .args(["apply", "--dry-run=server", "-f"])
            .arg(file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}{stdout}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
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
