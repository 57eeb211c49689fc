//! What the tests of `fake-cloud-controller-manager` as a process against a real control
//! plane share: its flags and cloud-config, a control plane of the test's own, the Nodes
//! and Services its controllers work on, and the Lease its replicas take turns holding.
// Each test file uses a part of this.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::fixtures::{ServiceBuilder, has_ingress, is_initialized, provider_id, tainted_node};
use ccm_test::process::CcmProcess;
use ccm_test::{ControlPlane, ControlPlaneBuilder, eventually, unique_name};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, PostParams};

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_fake-cloud-controller-manager");
/// How long a controller may take to do its work.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A control plane of the test's own, as `builder` describes it: every controller manager
/// watches every Node, so tests that run one must not share a cluster.
pub(crate) async fn control_plane(builder: ControlPlaneBuilder) -> ControlPlane {
    builder
        .start()
        .await
        .expect("a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)")
}

/// A kubeconfig for the ServiceAccount `kube-system/cloud-controller-manager`, bound by the
/// RBAC manifest `manifest` (a path below this crate) applied with `kubectl`.
pub(crate) async fn service_account_under(cp: &ControlPlane, manifest: &str) -> PathBuf {
    // The ServiceAccount exists before its token is minted; the manifest then binds it.
    let kubeconfig = cp
        .kubeconfig_for_service_account("kube-system", "cloud-controller-manager")
        .await
        .unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join(manifest);
    cp.run_kubectl(["apply", "-f", manifest.to_str().unwrap()])
        .unwrap();
    kubeconfig
}

/// Writes the cloud-config `yaml` to `dir/fake.yaml`; its path.
pub(crate) fn cloud_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("fake.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The flags every test gives: the fake cloud with the cloud-config `config`, the
/// kubeconfig `kubeconfig`, a cluster CIDR, and no serving port.
pub(crate) fn base_args(kubeconfig: &Path, config: &Path) -> Vec<String> {
    vec![
        "--cloud-provider=fake".into(),
        format!("--cloud-config={}", config.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--cluster-cidr=10.244.0.0/16".into(),
        "--secure-port=0".into(),
    ]
}

/// `args` with the endpoints served over plain HTTP on 127.0.0.1:`port` in place of
/// `--secure-port=0`.
pub(crate) fn serving_on(port: u16, args: &[String]) -> Vec<String> {
    let mut args: Vec<String> = args
        .iter()
        .filter(|a| *a != "--secure-port=0")
        .cloned()
        .collect();
    args.extend([
        "--insecure-serving".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
    ]);
    args
}

/// The flags of a controller manager for `cp` whose Nodes are all instances (cloud-config
/// in `dir`), then `extra`, serving plain HTTP on 127.0.0.1:`port`.
pub(crate) fn args_serving_on(
    cp: &ControlPlane,
    dir: &Path,
    port: u16,
    extra: &[&str],
) -> Vec<String> {
    let config = cloud_config(dir, "nodesAreInstances: true\n");
    let mut args = base_args(cp.kubeconfig_path(), &config);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    serving_on(port, &args)
}

/// The flags of leader election on the Lease `lease` with a 3 s lease, renewed every 250 ms:
/// a standby takes over within seconds.
pub(crate) fn quick_leader_election(lease: &str) -> [String; 5] {
    [
        "--leader-elect=true".to_owned(),
        format!("--leader-elect-resource-name={lease}"),
        "--leader-elect-lease-duration=3s".to_owned(),
        "--leader-elect-renew-deadline=2s".to_owned(),
        "--leader-elect-retry-period=250ms".to_owned(),
    ]
}

/// Creates the Node `name`, tainted as a kubelet with an external cloud provider registers
/// it.
pub(crate) async fn create_node(nodes: &Api<Node>, name: &str) {
    nodes
        .create(&PostParams::default(), &tainted_node(name))
        .await
        .unwrap();
}

/// Waits until `ccm` has initialised the Node `name`: its taint gone, its provider ID set.
pub(crate) async fn wait_initialized(nodes: &Api<Node>, name: &str, ccm: &CcmProcess) -> Node {
    eventually(&format!("node {name} initialised"), WAIT, || async {
        let node = nodes.get(name).await.unwrap();
        if is_initialized(&node) && provider_id(&node) == Some(format!("fake://{name}")) {
            Ok(node)
        } else {
            Err(format!("{:#?}\nccm log:\n{}", node.spec, ccm.log()))
        }
    })
    .await
}

/// The two Nodes of a Node's lifecycle: one backed by an instance, to initialise, and one
/// without, to delete.
pub(crate) struct NodeAndOrphan {
    /// The Node backed by an instance.
    pub(crate) name: String,
    /// The Node without one.
    pub(crate) gone: String,
}

impl NodeAndOrphan {
    /// Names made of `prefix`, and the cloud-config with the one instance written in `dir`
    /// (see [`cloud_config`]): its path.
    pub(crate) fn new(prefix: &str, dir: &Path) -> (Self, PathBuf) {
        let name = unique_name(prefix);
        let gone = unique_name(&format!("{prefix}-gone"));
        let config = cloud_config(dir, &format!("instances:\n- name: {name}\n"));
        (Self { name, gone }, config)
    }

    /// Creates both Nodes.
    pub(crate) async fn create(&self, nodes: &Api<Node>) {
        create_node(nodes, &self.name).await;
        let mut orphan = tainted_node(&self.gone);
        orphan.spec = None;
        nodes.create(&PostParams::default(), &orphan).await.unwrap();
    }

    /// Waits until `ccm` has deleted the Node without an instance.
    pub(crate) async fn wait_orphan_deleted(&self, nodes: &Api<Node>, ccm: &CcmProcess) {
        eventually("the orphan Node deleted", WAIT, || async {
            match nodes.get_opt(&self.gone).await.unwrap() {
                None => Ok(()),
                Some(_) => Err(format!("it is still there; ccm log:\n{}", ccm.log())),
            }
        })
        .await;
    }
}

/// Creates the LoadBalancer Service `name` (port 80 to 8080) in `default`.
pub(crate) async fn create_load_balancer(services: &Api<Service>, name: &str) {
    let svc = ServiceBuilder::load_balancer(name)
        .port(80)
        .target_port(8080)
        .build();
    services.create(&PostParams::default(), &svc).await.unwrap();
}

/// Waits until `ccm` has given the Service `name` an ingress; the Service then.
pub(crate) async fn wait_ingress(services: &Api<Service>, name: &str, ccm: &CcmProcess) -> Service {
    eventually("an ingress", WAIT, || async {
        let svc = services.get(name).await.unwrap();
        if has_ingress(&svc) {
            Ok(svc)
        } else {
            Err(format!("no ingress; ccm log:\n{}", ccm.log()))
        }
    })
    .await
}

/// Lets the writes in flight land, then asserts that the API server refused `ccm` nothing,
/// as far as its log tells.
pub(crate) async fn assert_nothing_refused(ccm: &CcmProcess) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = ccm.log();
    // (Not "403": generated names are hex and may contain it.)
    for needle in ["forbidden", "Forbidden"] {
        assert!(!log.contains(needle), "a request was refused:\n{log}");
    }
}

/// The holder of the Lease `lease`, or "".
pub(crate) async fn lease_holder(leases: &Api<Lease>, lease: &str) -> String {
    leases
        .get_opt(lease)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

/// Waits up to `timeout` until `ccm`, started with `HOSTNAME=replica`, holds the Lease
/// `lease`.
pub(crate) async fn wait_leader(
    leases: &Api<Lease>,
    lease: &str,
    replica: &str,
    ccm: &CcmProcess,
    timeout: Duration,
) {
    eventually(&format!("{replica} to lead"), timeout, || async {
        let holder = lease_holder(leases, lease).await;
        if holder.starts_with(&format!("{replica}_")) {
            Ok(())
        } else {
            Err(format!(
                "holder {holder:?}; {replica}'s log:\n{}",
                ccm.log()
            ))
        }
    })
    .await;
}
