//! The fake cloud's container image, not just its binary, as the CCM: the archive that
//! `scripts/images.sh` builds (FROM scratch, static, user 65532) runs with the arguments of the
//! shipped `deploy/deployment.yaml` and its cloud-config ConfigMap mounted where the
//! Deployment mounts it, against a real control plane, and initialises a tainted Node.
//!
//! `scripts/test.sh` builds the archive first (`scripts/images.sh --debug
//! fake-cloud-controller-manager`); run alone, this test fails with that command if the archive
//! is missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::fixtures::{is_initialized, provider_id, tainted_node};
use ccm_test::image::{self, Container, VolumeFiles, free_port, manifest_objects};
use ccm_test::{ControlPlane, eventually, unique_name};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, PostParams};

const IMAGE: &str = "fake-cloud-controller-manager";
const WAIT: Duration = Duration::from_secs(60);

/// The repository root (the image archives are under its `target/images`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn archive() -> PathBuf {
    image::archive(&workspace(), IMAGE)
}

/// The shipped manifest's Deployment and cloud-config ConfigMap.
fn shipped() -> (Deployment, ConfigMap) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/deployment.yaml"),
    )
    .unwrap();
    let mut deployments = manifest_objects::<Deployment>(&text, "Deployment").unwrap();
    let mut config_maps = manifest_objects::<ConfigMap>(&text, "ConfigMap").unwrap();
    (deployments.remove(0), config_maps.remove(0))
}

#[tokio::test]
async fn the_image_initialises_a_node_with_the_shipped_arguments() {
    let cp = ControlPlane::start().await.expect("a real control plane");
    let (deployment, config_map) = shipped();
    let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
    let mount = container.volume_mounts.as_ref().unwrap()[0]
        .mount_path
        .clone();

    let files = VolumeFiles::new().unwrap();
    let data = config_map.data.unwrap();
    let config = files
        .volume(
            "cloud-config",
            data.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &mount,
        )
        .unwrap();
    let kubeconfig = files
        .file(cp.kubeconfig_path(), "/var/run/ccm/kubeconfig")
        .unwrap();

    // The shipped arguments, with the port moved off 10258 (the host's network is shared
    // with other tests) and the kubeconfig a Pod would get from its ServiceAccount.
    let port = free_port().unwrap();
    let args = image::container_args(
        container.args.as_deref().unwrap(),
        port,
        "/var/run/ccm/kubeconfig",
    );
    let mut ccm = Container::start(&archive(), &[config, kubeconfig], &args)
        .unwrap_or_else(|e| panic!("{e}"));

    let name = unique_name("image");
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    nodes
        .create(&PostParams::default(), &tainted_node(&name))
        .await
        .unwrap();

    let node = eventually("the image's CCM to initialise the Node", WAIT, || {
        let (nodes, name) = (&nodes, &name);
        let exited = ccm.try_wait();
        let log = ccm.log();
        async move {
            if let Some(status) = exited {
                return Err(format!("the container exited ({status}):\n{log}"));
            }
            let node = nodes.get(name).await.map_err(|e| e.to_string())?;
            if is_initialized(&node) && provider_id(&node).is_some() {
                Ok(node)
            } else {
                let spec = node.spec.unwrap_or_default();
                Err(format!("not initialised: {spec:?}; container log:\n{log}"))
            }
        }
    })
    .await;
    assert_eq!(
        node.spec.unwrap().provider_id.as_deref(),
        Some(format!("fake://{name}").as_str())
    );
}

#[tokio::test]
async fn the_image_prints_its_version_and_commit() {
    let mut container = Container::start(&archive(), &[], &["--version".to_owned()])
        .unwrap_or_else(|e| panic!("{e}"));
    let status = eventually("--version to exit", WAIT, || {
        let exited = container.try_wait();
        let log = container.log();
        std::future::ready(exited.ok_or(log))
    })
    .await;
    let out = container.log();
    assert!(status.success(), "{status}: {out}");
    let want = format!("{IMAGE} v{}", env!("CARGO_PKG_VERSION"));
    assert!(out.contains(&want), "{out:?} should name {want}");
    // The commit the image was built from, when built in a git checkout (as images.sh does).
    if let Ok(head) = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        && head.status.success()
    {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        assert!(
            out.contains(&format!("({head})")),
            "{out:?} should name commit {head}: is the archive older than HEAD? \
             (scripts/images.sh --debug {IMAGE})"
        );
    }
}
