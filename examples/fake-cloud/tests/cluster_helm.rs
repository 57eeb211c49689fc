//! The Helm path in a real cluster: kubelets with `--cloud-provider=external` register their
//! Nodes, `helm install` of `charts/cloud-controller-manager` (the fake cloud, default
//! values, only the image pointed at the locally built one) starts the CCM's Pods on those
//! uninitialised, not-ready Nodes and they initialise them; `helm upgrade` to
//! `--use-service-account-credentials` swaps the RBAC for the per-controller split, under
//! which a LoadBalancer Service is served and released with nothing forbidden; then
//! `helm uninstall` removes every object the release made, and the CCM's Pods go.
//!
//! helm is the pinned one of `tools/helm/build.sh` (built once into the cache; `HELM` names
//! another). `scripts/test.sh` builds the image archive first (`scripts/images.sh --debug`);
//! run alone, this test fails with that command if the archive is missing. Needs root and the
//! cluster tier's packages (see `ccm_test::cluster`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ccm_test::cluster::UNINITIALIZED_TAINT;
use ccm_test::fixtures::{ServiceBuilder, ingress_of};
use ccm_test::helm::Helm;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

const IMAGE: &str = "fake-cloud-controller-manager";
/// `localhost/fake-cloud-controller-manager:<appVersion>`, as the archive names it.
const LOCAL_REGISTRY: &str = "localhost";
const RELEASE: &str = "ccm";
const NAMESPACE: &str = "kube-system";
const WAIT: Duration = Duration::from_secs(180);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pinned helm: `tools/helm/build.sh` prints its path (building it once).
fn helm_binary() -> PathBuf {
    let script = workspace().join("tools/helm/build.sh");
    let out = Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed (needs Go and the module proxy, or HELM=/path/to/helm): {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        path.is_file(),
        "{} printed {}",
        script.display(),
        path.display()
    );
    path
}

/// Runs helm against `cluster` (its state in the cluster's folder); panics with helm's
/// output if it fails, else returns its stdout.
fn helm(helm: &Helm, cluster: &Cluster, args: &[&str]) -> String {
    helm.run(cluster, args).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_initialises_the_nodes_and_uninstall_removes_everything() {
    let helm_bin = Helm::at(helm_binary());
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let chart = workspace().join("charts/cloud-controller-manager");
    let cluster = Cluster::builder()
        .image(&archive)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let home = cluster.control_plane().dir().join("helm");
    std::fs::create_dir_all(&home).unwrap();
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());

    // As kubelets register them: tainted, not initialised.
    for node in cluster.nodes() {
        let taints = nodes.get(node.name()).await.unwrap().spec.unwrap().taints;
        let keys: Vec<String> = taints.into_iter().flatten().map(|t| t.key).collect();
        assert!(keys.iter().any(|k| k == UNINITIALIZED_TAINT), "{keys:?}");
    }

    // `--wait=watcher`: helm returns once the Deployment is available, its Pods ready.
    let timeout = format!("{}s", WAIT.as_secs());
    let installed = helm(
        &helm_bin,
        &cluster,
        &[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--set",
            "provider=fake-cloud",
            "--set",
            &format!("image.registry={LOCAL_REGISTRY}"),
            "--wait=watcher",
            "--timeout",
            &timeout,
        ],
    );
    eprintln!("{installed}");
    let initialised = cluster
        .wait_initialised(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for node in &initialised {
        let id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        assert!(
            id.as_deref().is_some_and(|id| id.starts_with("fake://")),
            "{id:?}"
        );
    }

    // The release's Deployment is the chart's, with the local image and both replicas up.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployment = deployments.get("cloud-controller-manager").await.unwrap();
    let annotations = deployment.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some(RELEASE),
        "{annotations:?}"
    );
    let image = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap();
    assert!(
        image.starts_with("localhost/fake-cloud-controller-manager:"),
        "{image}"
    );
    let status = helm(&helm_bin, &cluster, &["status", RELEASE, "-n", NAMESPACE]);
    assert!(status.contains("STATUS: deployed"), "{status}");

    // `helm upgrade` to --use-service-account-credentials: the chart's RBAC split replaces
    // the one role, every replica is replaced, and the service controller, now the
    // ServiceAccount service-controller, gives a LoadBalancer Service its ingress and then
    // lets it go when it is deleted; nothing is forbidden to anyone on the way.
    let upgraded = helm(
        &helm_bin,
        &cluster,
        &[
            "upgrade",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--reuse-values",
            "--set",
            "useServiceAccountCredentials=true",
            "--wait=watcher",
            "--timeout",
            &timeout,
        ],
    );
    eprintln!("{upgraded}");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(
        roles
            .get_opt("system:cloud-controller-manager")
            .await
            .unwrap()
            .is_none(),
        "the one role is gone with the split"
    );
    for name in [
        "manager",
        "node-controller",
        "service-controller",
        "route-controller",
    ] {
        let name = format!("cloud-controller-manager:{name}");
        assert!(roles.get_opt(&name).await.unwrap().is_some(), "{name}");
    }
    let deployment = deployments.get("cloud-controller-manager").await.unwrap();
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(
        args.contains(&"--use-service-account-credentials=true".to_owned()),
        "{args:?}"
    );
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service = ServiceBuilder::load_balancer("helm-lb")
        .port(80)
        .target_port(8080)
        .build();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let ingress = eventually("the Service's load balancer ingress", WAIT, || async {
        let service = services.get("helm-lb").await.map_err(|e| e.to_string())?;
        let ingress = ingress_of(&service);
        if ingress.is_empty() {
            Err("no ingress yet".to_owned())
        } else {
            Ok(ingress)
        }
    })
    .await;
    eprintln!("helm-lb ingress {ingress:?}");
    services
        .delete("helm-lb", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the Service deleted (its finalizer removed)",
        WAIT,
        || async {
            match services.get_opt("helm-lb").await {
                Ok(None) => Ok(()),
                Ok(Some(s)) => Err(format!(
                    "still there, finalizers {:?}",
                    s.metadata.finalizers
                )),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    let logs = cluster
        .kubectl()
        .unwrap()
        .args([
            "logs",
            "-n",
            NAMESPACE,
            "-l",
            "app=cloud-controller-manager",
        ])
        .args(["--tail=-1", "--prefix"])
        .output()
        .unwrap();
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(!logs.trim().is_empty(), "no CCM log");
    let forbidden: Vec<&str> = logs
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "forbidden requests:\n{}",
        forbidden.join("\n")
    );

    // Every object of the release, as helm recorded it, for the check after uninstall.
    let manifest = helm(
        &helm_bin,
        &cluster,
        &["get", "manifest", RELEASE, "-n", NAMESPACE],
    );
    let objects = manifest.lines().filter(|l| l.starts_with("kind: ")).count();
    assert!(objects >= 8, "{objects} objects:\n{manifest}");
    let manifest_file = home.join("release.yaml");
    std::fs::write(&manifest_file, &manifest).unwrap();
    let present = cluster
        .kubectl()
        .unwrap()
        .args(["get", "-o", "name", "-f"])
        .arg(&manifest_file)
        .output()
        .unwrap();
    let present = String::from_utf8_lossy(&present.stdout).into_owned();
    assert_eq!(present.lines().count(), objects, "{present}");

    // Uninstall: every object gone, the Pods too. The test waits for the deletion itself:
    // helm's own `--wait` (kstatus' watcher) at times returned before a Deployment in
    // foreground deletion was gone, failing with "still exists. status: Terminating" though
    // nothing was wrong, when the machine was busy.
    let uninstalled = helm(
        &helm_bin,
        &cluster,
        &[
            "uninstall",
            RELEASE,
            "-n",
            NAMESPACE,
            "--cascade",
            "foreground",
            "--timeout",
            &timeout,
        ],
    );
    eprintln!("{uninstalled}");
    eventually("every object of the release gone", WAIT, || async {
        let gone = cluster
            .kubectl()
            .ok_or("no kubectl")?
            .args(["get", "-o", "name", "--ignore-not-found", "-f"])
            .arg(&manifest_file)
            .output()
            .map_err(|e| e.to_string())?;
        if !gone.status.success() {
            return Err(String::from_utf8_lossy(&gone.stderr).into_owned());
        }
        let left = String::from_utf8_lossy(&gone.stdout).trim().to_owned();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left after helm uninstall:\n{left}"))
        }
    })
    .await;
    let releases = helm(&helm_bin, &cluster, &["list", "-n", NAMESPACE, "-q"]);
    assert!(releases.trim().is_empty(), "{releases}");

    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    eventually("the CCM's Pods gone", WAIT, || async {
        let left = pods
            .list(&ListParams::default().labels("app=cloud-controller-manager"))
            .await
            .map_err(|e| e.to_string())?;
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} Pods left", left.items.len()))
        }
    })
    .await;
}
