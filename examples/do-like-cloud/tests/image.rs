//! The DO-like images, not just the binaries: the simulator's image serves the API, and the
//! CCM's image runs with the arguments, cloud-config and token Secret of the shipped
//! `deploy/deployment.yaml` (only `apiUrl` pointed at the simulator and a token of the
//! test's) against a real control plane: a tainted Node is initialised from its droplet and a
//! `type: LoadBalancer` Service gets the load balancer's IP. Both run FROM scratch, static, as
//! user 65532, over the host's network, so this also proves the static binary's HTTP client.
//!
//! `scripts/test.sh` builds the archives first (`scripts/images.sh --debug`); run alone, this
//! test fails with that command if an archive is missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::fixtures::{ServiceBuilder, is_initialized, provider_id, tainted_node};
use ccm_test::image::{self, Container, VolumeFiles, free_port, manifest_objects};
use ccm_test::{ControlPlane, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, Service};
use kube::api::{Api, PostParams};

const WAIT: Duration = Duration::from_secs(90);
const TOKEN: &str = "image-test-token";

/// The repository root (the image archives are under its `target/images`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn archive(image: &str) -> PathBuf {
    image::archive(&workspace(), image)
}

/// Waits until `container` logs `line`, failing with its log if it exits first.
async fn wait_logged(container: &mut Container, what: &str, line: &str) {
    eventually(what, WAIT, || {
        let exited = container.try_wait();
        let log = container.log();
        std::future::ready(match exited {
            Some(status) => Err(format!("exited ({status}):\n{log}")),
            None if log.contains(line) => Ok(()),
            None => Err(log),
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_initialise_a_node_and_serve_a_load_balancer() {
    let cp = ControlPlane::start().await.expect("a real control plane");
    let files = VolumeFiles::new().unwrap();

    // The simulator's image, with one droplet: node-1.
    let api_port = free_port().unwrap();
    let sim_token = files
        .volume("sim-token", [("token", TOKEN)], "/etc/sim")
        .unwrap();
    let mut simulator = Container::start(
        &archive("do-like-api-simulator"),
        &[sim_token],
        &[
            format!("--listen=127.0.0.1:{api_port}"),
            "--token-file=/etc/sim/token".into(),
            "--droplets=1".into(),
            "--lb-activation-ms=200".into(),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    wait_logged(&mut simulator, "the simulator to listen", "listening on").await;

    // The CCM's image as the shipped Deployment runs it.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/deployment.yaml"),
    )
    .unwrap();
    let deployment = manifest_objects::<Deployment>(&text, "Deployment")
        .unwrap()
        .remove(0);
    let config_map = manifest_objects::<ConfigMap>(&text, "ConfigMap")
        .unwrap()
        .remove(0);
    let secret = manifest_objects::<Secret>(&text, "Secret")
        .unwrap()
        .remove(0);
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let mut mounts = Vec::new();
    for volume in pod.volumes.unwrap_or_default() {
        let path = &container
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == volume.name)
            .unwrap_or_else(|| panic!("volume {} is not mounted", volume.name))
            .mount_path;
        let files_of_volume: Vec<(String, String)> = if volume.config_map.is_some() {
            // Only the API's address changes: the simulator instead of DigitalOcean's.
            config_map
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(name, content)| {
                    (
                        name,
                        format!("{content}apiUrl: http://127.0.0.1:{api_port}\n"),
                    )
                })
                .collect()
        } else if volume.secret.is_some() {
            let keys = secret.string_data.clone().unwrap_or_default();
            keys.into_keys().map(|k| (k, TOKEN.to_owned())).collect()
        } else {
            panic!("volume {} is neither a ConfigMap nor a Secret", volume.name)
        };
        mounts.push(
            files
                .volume(
                    &volume.name,
                    files_of_volume
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                    path,
                )
                .unwrap(),
        );
    }
    mounts.push(
        files
            .file(cp.kubeconfig_path(), "/var/run/ccm/kubeconfig")
            .unwrap(),
    );
    let port = free_port().unwrap();
    let args = image::container_args(
        container.args.as_deref().unwrap(),
        port,
        "/var/run/ccm/kubeconfig",
    );
    let mut ccm = Container::start(&archive("do-like-cloud-controller-manager"), &mounts, &args)
        .unwrap_or_else(|e| panic!("{e}"));

    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    nodes
        .create(&PostParams::default(), &tainted_node("node-1"))
        .await
        .unwrap();
    let provider_id = eventually("the image's CCM to initialise node-1", WAIT, || {
        let nodes = &nodes;
        let exited = ccm.try_wait();
        let log = ccm.log();
        async move {
            if let Some(status) = exited {
                return Err(format!("the CCM exited ({status}):\n{log}"));
            }
            let node = nodes.get("node-1").await.map_err(|e| e.to_string())?;
            match provider_id(&node) {
                Some(id) if is_initialized(&node) => Ok(id),
                _ => Err(format!("not initialised; CCM log:\n{log}")),
            }
        }
    })
    .await;
    assert!(provider_id.starts_with("digitalocean://"), "{provider_id}");

    let service = ServiceBuilder::load_balancer("web")
        .namespace("default")
        .port(80)
        .target_port(8080)
        .node_port(30080)
        .build();
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    eventually(
        "the load balancer's IP in the Service's status",
        WAIT,
        || {
            let services = &services;
            let log = ccm.log();
            async move {
                let service = services.get("web").await.map_err(|e| e.to_string())?;
                let ingress = service
                    .status
                    .and_then(|s| s.load_balancer)
                    .and_then(|lb| lb.ingress)
                    .unwrap_or_default();
                match ingress.first().and_then(|i| i.ip.clone()) {
                    Some(ip) => Ok(ip),
                    None => Err(format!("no ingress yet; CCM log:\n{log}")),
                }
            }
        },
    )
    .await;
}
