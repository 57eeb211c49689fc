//! A real cluster on one machine: [`Cluster`] starts nodes, each a network namespace of its
//! own with containerd, a kubelet (`--cloud-provider=external`) and kube-proxy, plugged into
//! a bridge in one more namespace that holds the control plane (etcd, kube-apiserver,
//! kube-scheduler and kube-controller-manager with `--cloud-provider=external`). Pods get
//! addresses from the standard CNI plugins (bridge, host-local, portmap, loopback). Nothing
//! is pulled: the sandbox image is built here, and the images a test needs are OCI archives
//! imported into every node's containerd. Every address the cluster uses lives inside the
//! namespaces it makes; this process reaches them through loopback forwarders.
//!
//! Every process belongs to one supervisor that stops them all, newest first, when the
//! `Cluster` is dropped or this process dies; the namespaces go with the processes that
//! hold them, and with them every interface, route, firewall rule and mount.
//!
//! Needs root, Linux, and from Debian: `containerd`, `runc`,
//! `containernetworking-plugins`, `iptables`, `iproute2`, `util-linux` (`unshare`,
//! `nsenter`), `buildah` and `gcc` (for the sandbox image, once). See
//! `docs/control-plane.md`.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::{Node, Pod};
//! use kube::Api;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = ccm_test::Cluster::builder()
//!     .nodes(2)
//!     .image("target/images/fake-cloud-controller-manager.tar")
//!     .start()
//!     .await?;
//! let nodes = Api::<Node>::all(cluster.client()?).list(&Default::default()).await?;
//! assert_eq!(nodes.items.len(), 2); // registered by their kubelets, tainted uninitialized
//! # Ok(()) }
//! ```

mod images;
pub(crate) mod netns;
mod node;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};

use self::netns::{Forwarder, NetworkNamespace};
use self::node::NodeLayout;
use crate::supervisor::Supervisor;
use crate::{Binaries, ClusterBinaries, ControlPlane, ControlPlaneBuilder, Error, unique_name};

pub use self::node::{CLUSTER_CIDR, SERVICE_CIDR};

/// The label kubeadm gives the control-plane node, which the cluster gives it too.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// The taint with which a kubelet started with `--cloud-provider=external` registers its
/// Node, until a cloud-controller-manager initialises it.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// kube-apiserver's port inside the cluster.
const APISERVER_PORT: u16 = 6443;
/// Default time for the cluster to start: the control plane, and every Node registered.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(180);
/// Where the CNI plugins of Debian's `containernetworking-plugins` are.
const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// The name of the CNI configuration file written into each node's folder.
const CNI_CONF_FILE: &str = "10-ccm-test.conflist";

/// When a node's Pod network (its CNI configuration) is set up, which is when its kubelet
/// reports the node `Ready`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PodNetwork {
    /// Once the Node has its pod CIDR and a cloud-controller-manager has initialised it
    /// (the `uninitialized` taint is gone), as network plugins that need the node's cloud
    /// addresses do. Until then the node is `NotReady`: what a CCM must be able to run on
    /// (host network, tolerations), the chicken and the egg.
    #[default]
    AfterInitialisation,
    /// As soon as the Node has its pod CIDR.
    AtPodCidr,
}

/// Options for a [`Cluster`]; see [`Cluster::builder`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    nodes: usize,
    images: Vec<PathBuf>,
    pod_network: PodNetwork,
    start_timeout: Duration,
    control_plane: ControlPlaneBuilder,
    controller_manager_args: Vec<String>,
    node_status_report_frequency: Option<Duration>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            nodes: 2,
            images: Vec::new(),
            pod_network: PodNetwork::default(),
            start_timeout: DEFAULT_START_TIMEOUT,
            control_plane: ControlPlaneBuilder::default(),
            controller_manager_args: Vec::new(),
            node_status_report_frequency: None,
        }
    }
}

impl ClusterBuilder {
    /// How many nodes (default 2): the first is the control-plane node (labelled and tainted
    /// `node-role.kubernetes.io/control-plane`, as kubeadm does), the others are workers.
    /// At least 1, at most 200.
    #[must_use]
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// An OCI archive (`buildah push … oci-archive:FILE:NAME`, what `scripts/images.sh`
    /// writes) imported into every node's containerd under its name, so that Pods can run it
    /// with `imagePullPolicy: IfNotPresent` (the default for a tag other than `latest`).
    #[must_use]
    pub fn image(mut self, archive: impl Into<PathBuf>) -> Self {
        self.images.push(archive.into());
        self
    }

    /// When each node's Pod network comes up (default
    /// [`PodNetwork::AfterInitialisation`]).
    #[must_use]
    pub fn pod_network(mut self, pod_network: PodNetwork) -> Self {
        self.pod_network = pod_network;
        self
    }

    /// How long the start may take (default 180 s): the control plane, and every node
    /// registered.
    #[must_use]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self.control_plane = self.control_plane.start_timeout(timeout);
        self
    }

    /// Adds a kube-apiserver flag (e.g. `--audit-policy-file=…`); see
    /// [`ControlPlaneBuilder::apiserver_arg`].
    #[must_use]
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.control_plane = self.control_plane.apiserver_arg(arg);
        self
    }

    /// Adds a kube-controller-manager flag, e.g. `--node-monitor-grace-period=20s` for a
    /// test that waits for a stopped kubelet's Node to turn `NotReady`; the last of a flag
    /// given twice wins.
    #[must_use]
    pub fn controller_manager_arg(mut self, arg: impl Into<String>) -> Self {
        self.controller_manager_args.push(arg.into());
        self
    }

    /// How often each kubelet reports its Node's whole status even when nothing changed
    /// (its `nodeStatusReportFrequency`; default 5 minutes): shorter packs many reports into
    /// a short test, e.g. one that checks a controller does not answer each with a write.
    /// Whole seconds, at least one.
    #[must_use]
    pub fn node_status_report_frequency(mut self, every: Duration) -> Self {
        self.node_status_report_frequency = Some(every.max(Duration::from_secs(1)));
        self
    }

    /// Starts the cluster: returns when the control plane is ready and every node's kubelet
    /// has registered its Node.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] naming a missing prerequisite (with the package to install) or
    /// what did not come up; [`Error::BinaryNotFound`] / [`Error::Build`] for the binaries;
    /// [`Error::Start`] with the log of a server that failed.
    pub async fn start(self) -> Result<Cluster, Error> {
        let started = Instant::now();
        if self.nodes == 0 || self.nodes > 200 {
            return Err(Error::InvalidArgument(format!(
                "a cluster has 1 to 200 nodes, not {}",
                self.nodes
            )));
        }
        let (binaries, cluster_binaries, pause) = tokio::task::spawn_blocking(|| {
            check_prerequisites()?;
            let binaries = Binaries::find_or_build()?;
            let cluster_binaries = ClusterBinaries::find_or_build(&binaries)?;
            let pause = images::pause_archive()?;
            Ok::<_, Error>((binaries, cluster_binaries, pause))
        })
        .await
        .map_err(|e| Error::Cluster(format!("the preparation task failed: {e}")))??;

        let temp = tempfile::Builder::new()
            .prefix("ccm-cluster-")
            .tempdir()
            .map_err(|e| Error::io("creating the cluster's folder", e))?;
        let dir = temp.path().to_owned();
        // From here on the supervisor owns the folder and everything started in it.
        let mut supervisor = Supervisor::spawn(&dir)?;
        let _ = temp.keep();
        let run_id = unique_name("ccm-test");
        let layouts = node_layouts(&dir, &run_id, self.nodes)?;
        write_cleanup_script(&dir, &run_id)?;
        netns::write_holder_script(&dir)?;
        write_file(&dir.join(CONTAINERD_WRAPPER_FILE), CONTAINERD_WRAPPER)?;
        make_cgroups(&layouts)?;

        // The namespaces, and the network between them.
        let cluster_ns = Arc::new(start_holder(&mut supervisor, &dir, "cluster", false).await?);
        cluster_ns.run_script(&netns::cluster_setup_script())?;
        let mut node_namespaces = Vec::with_capacity(layouts.len());
        for (index, layout) in layouts.iter().enumerate() {
            let ns = start_holder(&mut supervisor, &dir, &layout.name, true).await?;
            cluster_ns.run_script(&netns::attach_script(index, ns.pid()))?;
            ns.run_script(&netns::node_setup_script(layout.address))?;
            node_namespaces.push(Arc::new(ns));
        }

        let control_plane = self
            .control_plane
            .clone()
            .start_in_namespace(
                &binaries,
                dir.clone(),
                supervisor,
                cluster_ns.clone(),
                netns::GATEWAY,
            )
            .await?;
        let server = format!("https://{}:{APISERVER_PORT}", netns::GATEWAY);
        start_controllers(
            &control_plane,
            &cluster_ns,
            &cluster_binaries,
            &server,
            &self.controller_manager_args,
        )?;

        let mut nodes = Vec::with_capacity(layouts.len());
        for (layout, namespace) in layouts.into_iter().zip(node_namespaces) {
            let node = ClusterNode { layout, namespace };
            start_node(
                &control_plane,
                &cluster_binaries,
                &node,
                &server,
                &pause,
                &self.images,
                self.node_status_report_frequency,
            )
            .await?;
            nodes.push(node);
        }

        let cluster = Cluster {
            _pod_network: PodNetworkWriter::start(
                control_plane.admin_config()?,
                cluster_ns.clone(),
                nodes.iter().map(|n| n.layout.clone()).collect(),
                self.pod_network,
            )?,
            forwarders: Mutex::new(Vec::new()),
            cluster_ns,
            nodes,
            control_plane,
        };
        cluster
            .wait_registered(started + self.start_timeout)
            .await?;
        tracing::info!(
            startup_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            nodes = cluster.nodes.len(),
            dir = %cluster.control_plane.dir().display(),
            "cluster ready"
        );
        Ok(cluster)
    }
}

/// A running cluster; see the [module documentation](self). Dropping it stops every process
/// and removes its folder, namespaces and cgroups.
#[derive(Debug)]
pub struct Cluster {
    // Dropped in this order: the pod-network writer, the forwarders, then the processes.
    _pod_network: PodNetworkWriter,
    forwarders: Mutex<Vec<Forwarder>>,
    cluster_ns: Arc<NetworkNamespace>,
    nodes: Vec<ClusterNode>,
    control_plane: ControlPlane,
}

/// One node of a [`Cluster`].
#[derive(Debug)]
pub struct ClusterNode {
    layout: NodeLayout,
    namespace: Arc<NetworkNamespace>,
}

impl ClusterNode {
    /// The Node's name: `ccm-control-plane`, then `ccm-worker`, `ccm-worker2`, … (as kind
    /// names them).
    pub fn name(&self) -> &str {
        &self.layout.name
    }

    /// Its address on the cluster's network (the kubelet's `--node-ip`).
    pub fn address(&self) -> Ipv4Addr {
        self.layout.address
    }

    /// Whether it is the control-plane node.
    pub fn is_control_plane(&self) -> bool {
        self.layout.control_plane
    }

    /// The cgroup, in every hierarchy under `/sys/fs/cgroup`, that its Pods' cgroups are
    /// made under (the kubelet's `cgroupRoot`); removed with the cluster.
    pub fn cgroup_root(&self) -> &str {
        &self.layout.cgroup_root
    }

    /// Its folder: logs are in the cluster's folder, as `kubelet-<name>.log`,
    /// `containerd-<name>.log` and `kube-proxy-<name>.log`.
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }
}

impl Cluster {
    /// Options for a new cluster.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Starts a cluster with default options (two nodes).
    ///
    /// # Errors
    ///
    /// See [`ClusterBuilder::start`].
    pub async fn start() -> Result<Self, Error> {
        Self::builder().start().await
    }

    /// The control plane: clients, kubeconfig, `kubectl`, the folder with every log.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.control_plane
    }

    /// A client for the admin user; see [`ControlPlane::client`].
    ///
    /// # Errors
    ///
    /// As [`ControlPlane::client`].
    pub fn client(&self) -> Result<kube::Client, Error> {
        self.control_plane.client()
    }

    /// An admin kubeconfig for `kubectl` on this machine (its server is a loopback port
    /// forwarded into the cluster).
    pub fn kubeconfig_path(&self) -> &Path {
        self.control_plane.kubeconfig_path()
    }

    /// A `kubectl` command with the admin kubeconfig; see [`ControlPlane::kubectl`].
    pub fn kubectl(&self) -> Option<std::process::Command> {
        self.control_plane.kubectl()
    }

    /// The nodes, control-plane node first.
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// The node called `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when there is none.
    pub fn node(&self, name: &str) -> Result<&ClusterNode, Error> {
        self.nodes
            .iter()
            .find(|node| node.name() == name)
            .ok_or_else(|| Error::InvalidArgument(format!("the cluster has no node {name:?}")))
    }

    /// The address of the cluster's own namespace on the nodes' network: kube-apiserver
    /// listens there (port 6443), and so do processes started with
    /// [`start_process`](Self::start_process), such as a cloud's API.
    pub fn gateway_address(&self) -> Ipv4Addr {
        netns::GATEWAY
    }

    /// The API server's URL inside the cluster, `https://10.88.0.1:6443`.
    pub fn apiserver_url_in_cluster(&self) -> String {
        format!("https://{}:{APISERVER_PORT}", netns::GATEWAY)
    }

    /// Forwards a free loopback port of this machine to `target` inside the cluster (a node,
    /// a Pod, a process at [`gateway_address`](Self::gateway_address)) and returns the
    /// loopback address; it lasts as long as the cluster.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub fn forward(&self, target: SocketAddr) -> Result<SocketAddr, Error> {
        let forwarder = Forwarder::start(self.cluster_ns.clone(), target)
            .map_err(|e| Error::io(format!("forwarding a loopback port to {target}"), e))?;
        let local = forwarder.local_addr();
        self.forwarders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(forwarder);
        Ok(local)
    }

    /// A TCP connection to `target`, made from inside the cluster's namespace.
    ///
    /// # Errors
    ///
    /// The connection's error.
    pub async fn connect(&self, target: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        self.cluster_ns.connect(target).await
    }

    /// Starts `program args` inside the cluster's namespace (listening, say, on
    /// [`gateway_address`](Self::gateway_address)) as `name`, logging to `name.log` in the
    /// cluster's folder; it is stopped with the cluster.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is not a plain file name or an argument
    /// with a newline; I/O errors.
    pub fn start_process(&self, name: &str, program: &Path, args: &[String]) -> Result<(), Error> {
        check_process_name(name)?;
        let (program, args) = self.cluster_ns.command(false, program, args.to_vec());
        self.control_plane.start_process(name, &program, &args)
    }

    /// Stops the kubelet of the node `name` (SIGTERM) and waits until it has exited: the
    /// Node stops reporting, as when a machine is switched off. Its containers keep running.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an unknown node; [`Error::Start`] if it does not exit.
    pub async fn stop_kubelet(&self, name: &str) -> Result<(), Error> {
        let node = self.node(name)?;
        self.control_plane
            .stop_process(&format!("kubelet-{}", node.name()))
            .await
    }

    /// Starts the kubelet of the node `name` again, after [`stop_kubelet`](Self::stop_kubelet).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an unknown node; I/O errors.
    pub fn start_kubelet(&self, name: &str) -> Result<(), Error> {
        let node = self.node(name)?;
        self.control_plane
            .restart_process(&format!("kubelet-{}", node.name()))
    }

    /// The log of a cluster process (`kubelet-<node>`, `containerd-<node>`,
    /// `kube-proxy-<node>`, `kube-controller-manager`, `kube-scheduler`, `kube-apiserver`,
    /// `etcd`, or one of [`start_process`](Self::start_process)), for diagnostics.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.control_plane.dir().join(format!("{name}.log")))
            .unwrap_or_default()
    }

    /// `kubectl apply -f -` of `manifest` (YAML, several documents allowed) with the admin
    /// kubeconfig, as a user applies a release manifest; returns kubectl's output.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] with kubectl's error output; [`Error::BinaryNotFound`] without
    /// kubectl.
    pub fn apply(&self, manifest: &str) -> Result<String, Error> {
        use std::io::Write as _;
        let mut kubectl = self.kubectl().ok_or(Error::BinaryNotFound {
            name: "kubectl",
            searched: "beside kube-apiserver".to_owned(),
        })?;
        let mut child = kubectl
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("running kubectl apply", e))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(manifest.as_bytes())
                .map_err(|e| Error::io("writing the manifest to kubectl", e))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| Error::io("running kubectl apply", e))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(Error::Cluster(format!(
                "kubectl apply failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }

    /// Waits until every node's Node is initialised by a cloud-controller-manager: it has a
    /// `spec.providerID` and no `uninitialized` taint. Returns the Nodes.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] on timeout, saying which Nodes were not initialised and how they
    /// stood; API errors.
    pub async fn wait_initialised(&self, timeout: Duration) -> Result<Vec<Node>, Error> {
        let api: Api<Node> = Api::all(self.client()?);
        let deadline = Instant::now() + timeout;
        loop {
            let mut nodes = Vec::with_capacity(self.nodes.len());
            let mut waiting = Vec::new();
            for node in &self.nodes {
                match api.get_opt(node.name()).await? {
                    Some(object) if is_initialised(&object) => nodes.push(object),
                    Some(object) => waiting.push(format!(
                        "{}: providerID {:?}, taints {:?}",
                        node.name(),
                        object.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
                        object
                            .spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .map(|taints| taints
                                .iter()
                                .map(|t| t.key.as_str())
                                .collect::<Vec<_>>())
                    )),
                    None => waiting.push(format!("{}: no Node", node.name())),
                }
            }
            if waiting.is_empty() {
                return Ok(nodes);
            }
            if Instant::now() >= deadline {
                return Err(Error::Cluster(format!(
                    "Nodes not initialised after {timeout:?}: {}",
                    waiting.join("; ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the Pod `namespace/name` is `Running` with an address, and returns it.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] on timeout, with the Pod's last status; API errors other than
    /// "not found" (the Pod may not exist yet).
    pub async fn wait_pod_running(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Pod, Error> {
        let api: Api<Pod> = Api::namespaced(self.client()?, namespace);
        let deadline = Instant::now() + timeout;
        loop {
            let pod = api.get_opt(name).await?;
            if let Some(pod) = &pod {
                let status = pod.status.as_ref();
                let running = status.and_then(|s| s.phase.as_deref()) == Some("Running")
                    && status.and_then(|s| s.pod_ip.as_deref()).is_some();
                if running {
                    return Ok(pod.clone());
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Cluster(format!(
                    "the Pod {namespace}/{name} is not running after {timeout:?}: {:?}",
                    pod.map(|p| p.status)
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until every node's kubelet has registered its Node.
    async fn wait_registered(&self, deadline: Instant) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client()?);
        loop {
            let mut missing = Vec::new();
            for node in &self.nodes {
                if nodes.get_opt(node.name()).await?.is_none() {
                    missing.push(node.name());
                }
                if let Some(status) = self
                    .control_plane
                    .process_exit(&format!("kubelet-{}", node.name()))
                {
                    return Err(Error::Start {
                        component: "kubelet",
                        reason: format!("the kubelet of {} exited ({status})", node.name()),
                        tail: tail(&self.log(&format!("kubelet-{}", node.name()))),
                    });
                }
            }
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let first = missing[0];
                return Err(Error::Start {
                    component: "kubelet",
                    reason: format!("the Nodes {missing:?} did not register in time"),
                    tail: tail(&self.log(&format!("kubelet-{first}"))),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // kubeadm labels the control-plane node; a kubelet may not (NodeRestriction).
        for node in self.nodes.iter().filter(|n| n.is_control_plane()) {
            let patch = serde_json::json!({
                "metadata": {"labels": {CONTROL_PLANE_LABEL: ""}}
            });
            nodes
                .patch(node.name(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(())
    }
}

/// Whether a cloud-controller-manager has initialised `node`.
fn is_initialised(node: &Node) -> bool {
    node.spec.as_ref().is_some_and(|spec| {
        spec.provider_id.as_deref().is_some_and(|id| !id.is_empty())
            && !spec
                .taints
                .iter()
                .flatten()
                .any(|taint| taint.key == UNINITIALIZED_TAINT)
    })
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn check_process_name(name: &str) -> Result<(), Error> {
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.starts_with("ns-");
    if plain {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "process name {name:?}: use letters, digits, '-' and '_' (not starting with ns-)"
        )))
    }
}

/// The commands and files a cluster needs from the machine, each with its package.
fn check_prerequisites() -> Result<(), Error> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_owned))
        });
    if uid.as_deref() != Some("0") {
        return Err(Error::Cluster(
            "a cluster needs root (network namespaces, mounts, containerd)".to_owned(),
        ));
    }
    let commands = [
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("ip", "iproute2"),
        ("iptables", "iptables"),
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("buildah", "buildah"),
        ("gcc", "gcc"),
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut missing: Vec<String> = commands
        .iter()
        .filter(|(command, _)| {
            !std::env::split_paths(&path).any(|dir| dir.join(command).is_file())
                && !["/usr/sbin", "/sbin"]
                    .iter()
                    .any(|dir| Path::new(dir).join(command).is_file())
        })
        .map(|(command, package)| format!("{command} (package {package})"))
        .collect();
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        if !Path::new(CNI_BIN_DIR).join(plugin).is_file() {
            missing.push(format!(
                "{CNI_BIN_DIR}/{plugin} (package containernetworking-plugins)"
            ));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Cluster(format!(
            "missing: {}; install them with apt-get install containerd runc \
             containernetworking-plugins iptables iproute2 buildah gcc",
            missing.join(", ")
        )))
    }
}

fn node_layouts(dir: &Path, run_id: &str, count: usize) -> Result<Vec<NodeLayout>, Error> {
    (0..count)
        .map(|index| {
            let name = match index {
                0 => "ccm-control-plane".to_owned(),
                1 => "ccm-worker".to_owned(),
                n => format!("ccm-worker{n}"),
            };
            let address = netns::node_address(index)
                .ok_or_else(|| Error::InvalidArgument(format!("too many nodes ({count})")))?;
            let node_dir = dir.join(&name);
            std::fs::create_dir_all(node_dir.join("cni"))
                .map_err(|e| Error::io(format!("creating {}", node_dir.display()), e))?;
            Ok(NodeLayout {
                cgroup_root: format!("/{run_id}/{name}"),
                name,
                address,
                control_plane: index == 0,
                dir: node_dir,
            })
        })
        .collect()
}

/// The cgroup hierarchies of the machine (`/sys/fs/cgroup/<name>` that are cgroup mounts).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, target, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "cgroup" || kind == "cgroup2").then(|| PathBuf::from(target))
        })
        .filter(|path| path.starts_with("/sys/fs/cgroup"))
        .collect()
}

/// Makes each node's cgroup root in every hierarchy (the kubelet checks that it exists),
/// with cpuset's CPUs and memory nodes copied down so that tasks may join below it.
fn make_cgroups(layouts: &[NodeLayout]) -> Result<(), Error> {
    for hierarchy in cgroup_hierarchies() {
        for layout in layouts {
            let path = hierarchy.join(layout.cgroup_root.trim_start_matches('/'));
            std::fs::create_dir_all(&path)
                .map_err(|e| Error::io(format!("creating the cgroup {}", path.display()), e))?;
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let mut parent = path.clone();
                let mut chain = Vec::new();
                while parent != hierarchy {
                    chain.push(parent.clone());
                    if !parent.pop() {
                        break;
                    }
                }
                let Ok(value) = std::fs::read_to_string(hierarchy.join(file)) else {
                    continue;
                };
                for level in chain.iter().rev() {
                    let _ = std::fs::write(level.join(file), value.trim());
                }
            }
        }
    }
    Ok(())
}

/// The supervisor's last step: kill what is left in the run's cgroups (nothing, normally)
/// and remove them, deepest first.
fn write_cleanup_script(dir: &Path, run_id: &str) -> Result<(), Error> {
    let script = format!(
        r#"for h in /sys/fs/cgroup/*; do
    root="$h/{run_id}"
    [ -d "$root" ] || continue
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        find "$root" -name cgroup.procs -exec cat {{}} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        find "$root" -depth -type d -exec rmdir {{}} + 2>/dev/null
        [ -d "$root" ] || break
        sleep 0.2
    done
done
"#
    );
    std::fs::write(dir.join("cleanup.sh"), script)
        .map_err(|e| Error::io("writing the cluster's cleanup script", e))
}

/// Starts a namespace holder and waits for it to be set up.
async fn start_holder(
    supervisor: &mut Supervisor,
    dir: &Path,
    name: &str,
    node: bool,
) -> Result<NetworkNamespace, Error> {
    let process = format!("ns-{name}");
    let ready = dir.join(format!("{process}.ready"));
    let (program, args) = netns::holder_command(dir, &ready, node.then_some(name))?;
    supervisor.start(&process, &program, &args)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(&ready)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        {
            return NetworkNamespace::of_process(name, pid);
        }
        if let crate::supervisor::ServerState::Exited(status) = supervisor.state(&process) {
            let log =
                std::fs::read_to_string(dir.join(format!("{process}.log"))).unwrap_or_default();
            return Err(Error::Cluster(format!(
                "the namespace holder of {name} exited ({status}): {}",
                log.trim()
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::Cluster(format!(
                "the namespace holder of {name} did not start in 20 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// kube-scheduler and kube-controller-manager in the cluster's namespace.
fn start_controllers(
    control_plane: &ControlPlane,
    cluster_ns: &NetworkNamespace,
    binaries: &ClusterBinaries,
    server: &str,
    extra_controller_manager_args: &[String],
) -> Result<(), Error> {
    let dir = control_plane.dir();
    let write = |name: &str, contents: &str| -> Result<PathBuf, Error> {
        let path = dir.join(name);
        std::fs::write(&path, contents)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(path)
    };
    let scheduler_kubeconfig = write(
        "kube-scheduler.kubeconfig",
        &control_plane.kubeconfig_for_server(server, "system:kube-scheduler", &[])?,
    )?;
    let (program, args) = cluster_ns.command(
        false,
        &binaries.kube_scheduler,
        vec![
            format!("--kubeconfig={}", scheduler_kubeconfig.display()),
            "--bind-address=127.0.0.1".to_owned(),
            "--leader-elect=false".to_owned(),
        ],
    );
    control_plane.start_process("kube-scheduler", &program, &args)?;

    let kcm_kubeconfig = write(
        "kube-controller-manager.kubeconfig",
        &control_plane.kubeconfig_for_server(server, "system:kube-controller-manager", &[])?,
    )?;
    let (program, args) = cluster_ns.command(
        false,
        &binaries.kube_controller_manager,
        vec![
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            "--bind-address=127.0.0.1".to_owned(),
            "--leader-elect=false".to_owned(),
            "--cloud-provider=external".to_owned(),
            "--use-service-account-credentials=true".to_owned(),
            format!(
                "--service-account-private-key-file={}",
                dir.join("sa.key").display()
            ),
            format!("--root-ca-file={}", dir.join("client-ca.crt").display()),
            "--allocate-node-cidrs=true".to_owned(),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            "--node-cidr-mask-size=24".to_owned(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        ]
        .into_iter()
        .chain(extra_controller_manager_args.iter().cloned())
        .collect(),
    );
    control_plane.start_process("kube-controller-manager", &program, &args)
}

/// What makes containerd run as the first process of a PID namespace of its own, below the
/// node's: when it is stopped (SIGKILL: the node is being torn down) the kernel ends every
/// shim and container with it. `unshare` itself ignores SIGTERM while it waits, so this
/// shell turns the supervisor's SIGTERM into SIGKILL of containerd (`unshare`'s child, which
/// `unshare` then reaps before it exits; killing `unshare` first would leave containerd to
/// the machine's init).
const CONTAINERD_WRAPPER: &str = r#""$@" &
child=$!
trap 'kill -KILL $(cat "/proc/$child/task/$child/children" 2>/dev/null) 2>/dev/null || kill -KILL "$child" 2>/dev/null' TERM INT
wait "$child"
status=$?
wait "$child" 2>/dev/null
exit "$status"
"#;
/// The file name of [`CONTAINERD_WRAPPER`] in the cluster's folder.
const CONTAINERD_WRAPPER_FILE: &str = "containerd-wrapper.sh";

fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Writes a node's files and starts its containerd (importing the images), kubelet and
/// kube-proxy.
async fn start_node(
    control_plane: &ControlPlane,
    binaries: &ClusterBinaries,
    node: &ClusterNode,
    server: &str,
    pause: &Path,
    images: &[PathBuf],
    status_report_frequency: Option<Duration>,
) -> Result<(), Error> {
    let layout = &node.layout;
    let name = &layout.name;
    let write = |file: &str, contents: &str| -> Result<(), Error> {
        let path = layout.file(file);
        std::fs::write(&path, contents)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))
    };
    let ca_file = control_plane.dir().join("client-ca.crt");
    let serving = control_plane
        .ca()
        .issue_server(&[name.as_str()], &[layout.address.into()])?;
    write("kubelet.crt", &serving.cert_pem)?;
    write("kubelet.key", &serving.key_pem)?;
    write(
        "kubelet.kubeconfig",
        &control_plane.kubeconfig_for_server(
            server,
            &format!("system:node:{name}"),
            &["system:nodes"],
        )?,
    )?;
    write(
        "kube-proxy.kubeconfig",
        &control_plane.kubeconfig_for_server(server, "system:kube-proxy", &[])?,
    )?;
    write(
        "containerd.toml",
        &node::containerd_config(layout, Path::new(CNI_BIN_DIR)),
    )?;
    let mut kubelet_config = node::kubelet_config(layout, &ca_file);
    if let Some(every) = status_report_frequency {
        kubelet_config.push_str(&format!(
            "nodeStatusReportFrequency: {}s\n",
            every.as_secs()
        ));
    }
    write("kubelet.yaml", &kubelet_config)?;
    write("kube-proxy.yaml", &node::kube_proxy_config(layout))?;

    let containerd = format!("containerd-{name}");
    let mut wrapped = vec![
        control_plane
            .dir()
            .join(CONTAINERD_WRAPPER_FILE)
            .display()
            .to_string(),
        "unshare".to_owned(),
        "--pid".to_owned(),
        "--fork".to_owned(),
        "--kill-child".to_owned(),
        "--mount-proc".to_owned(),
        "--propagation".to_owned(),
        "slave".to_owned(),
        "--".to_owned(),
        "containerd".to_owned(),
    ];
    wrapped.push(format!(
        "--config={}",
        layout.file("containerd.toml").display()
    ));
    let (program, args) = node.namespace.command(true, Path::new("sh"), wrapped);
    control_plane.start_process(&containerd, &program, &args)?;
    wait_containerd(control_plane, &containerd, &layout.containerd_socket()).await?;
    let socket = layout.containerd_socket();
    let archives: Vec<PathBuf> = std::iter::once(pause.to_owned())
        .chain(images.iter().cloned())
        .collect();
    tokio::task::spawn_blocking(move || {
        archives
            .iter()
            .try_for_each(|archive| images::import(&socket, archive))
    })
    .await
    .map_err(|e| Error::Cluster(format!("the image import task failed: {e}")))??;

    let (program, args) =
        node.namespace
            .command(true, &binaries.kubelet, node::kubelet_args(layout));
    control_plane.start_process(&format!("kubelet-{name}"), &program, &args)?;
    let (program, args) = node.namespace.command(
        true,
        &binaries.kube_proxy,
        vec![format!(
            "--config={}",
            layout.file("kube-proxy.yaml").display()
        )],
    );
    control_plane.start_process(&format!("kube-proxy-{name}"), &program, &args)
}

/// Waits until containerd answers on its socket.
async fn wait_containerd(
    control_plane: &ControlPlane,
    process: &str,
    socket: &Path,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = std::process::Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .arg("version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if probe.is_ok_and(|status| status.success()) {
            return Ok(());
        }
        let log = || std::fs::read_to_string(control_plane.dir().join(format!("{process}.log")));
        if let Some(status) = control_plane.process_exit(process) {
            return Err(Error::Start {
                component: "containerd",
                reason: format!("{process} exited ({status})"),
                tail: tail(&log().unwrap_or_default()),
            });
        }
        if Instant::now() >= deadline {
            return Err(Error::Start {
                component: "containerd",
                reason: format!("{process} did not answer on {} in 30 s", socket.display()),
                tail: tail(&log().unwrap_or_default()),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sets up each node's Pod network when its Node is ready for it ([`PodNetwork`]): writes
/// the CNI configuration for the Node's pod CIDR into the node's folder (containerd picks
/// it up) and routes the CIDR to the node in the cluster's namespace. A thread of its own
/// with its own runtime, so that it outlives the runtime of any one test.
#[derive(Debug)]
struct PodNetworkWriter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PodNetworkWriter {
    fn start(
        config: kube::Config,
        cluster_ns: Arc<NetworkNamespace>,
        nodes: Vec<NodeLayout>,
        when: PodNetwork,
    ) -> Result<Self, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the pod-network writer's runtime", e))?;
        let thread = std::thread::Builder::new()
            .name("ccm-test-pod-network".to_owned())
            .spawn({
                let stop = stop.clone();
                move || {
                    runtime.block_on(write_pod_networks(config, &cluster_ns, &nodes, when, &stop))
                }
            })
            .map_err(|e| Error::io("starting the pod-network writer", e))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PodNetworkWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn write_pod_networks(
    config: kube::Config,
    cluster_ns: &NetworkNamespace,
    nodes: &[NodeLayout],
    when: PodNetwork,
    stop: &AtomicBool,
) {
    let Ok(client) = kube::Client::try_from(config) else {
        return;
    };
    let api: Api<Node> = Api::all(client);
    let mut written: BTreeMap<String, String> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        for layout in nodes {
            let Ok(Some(node)) = api.get_opt(&layout.name).await else {
                continue;
            };
            let Some(cidr) = pod_network_due(&node, when) else {
                continue;
            };
            if written.get(&layout.name) == Some(&cidr) {
                continue;
            }
            match set_up_pod_network(cluster_ns, layout, &cidr) {
                Ok(()) => {
                    tracing::info!(node = %layout.name, %cidr, "pod network set up");
                    written.insert(layout.name.clone(), cidr);
                }
                Err(e) => tracing::warn!(node = %layout.name, error = %e, "pod network"),
            }
        }
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The pod CIDR to set a Node's network up for, when it is due.
fn pod_network_due(node: &Node, when: PodNetwork) -> Option<String> {
    let spec = node.spec.as_ref()?;
    let cidr = spec
        .pod_cidrs
        .as_ref()
        .and_then(|cidrs| cidrs.iter().find(|c| netns::validate_ipv4_cidr(c).is_ok()))
        .or(spec.pod_cidr.as_ref())?
        .clone();
    let initialised = !spec
        .taints
        .iter()
        .flatten()
        .any(|taint| taint.key == UNINITIALIZED_TAINT);
    match when {
        PodNetwork::AtPodCidr => Some(cidr),
        PodNetwork::AfterInitialisation => initialised.then_some(cidr),
    }
}

fn set_up_pod_network(
    cluster_ns: &NetworkNamespace,
    layout: &NodeLayout,
    cidr: &str,
) -> Result<(), Error> {
    let config = node::cni_config(cidr)?;
    cluster_ns.run_script(&netns::pod_route_script(cidr, layout.address)?)?;
    let dir = layout.cni_conf_dir();
    let partial = dir.join(format!(".{CNI_CONF_FILE}.tmp"));
    std::fs::write(&partial, config)
        .map_err(|e| Error::io(format!("writing {}", partial.display()), e))?;
    std::fs::rename(&partial, dir.join(CNI_CONF_FILE)).map_err(|e| {
        Error::io(
            format!("writing the CNI configuration of {}", layout.name),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    use super::*;

    fn node(cidr: Option<&str>, uninitialised: bool) -> Node {
        Node {
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(str::to_owned),
                pod_cidrs: cidr.map(|c| vec![c.to_owned()]),
                taints: uninitialised.then(|| {
                    vec![Taint {
                        key: UNINITIALIZED_TAINT.to_owned(),
                        value: Some("true".to_owned()),
                        effect: "NoSchedule".to_owned(),
                        ..Taint::default()
                    }]
                }),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn the_pod_network_waits_for_a_cidr_and_by_default_for_initialisation() {
        let cidr = Some("10.244.1.0/24");
        assert_eq!(
            pod_network_due(&node(None, false), PodNetwork::AtPodCidr),
            None
        );
        assert_eq!(
            pod_network_due(&node(cidr, true), PodNetwork::AtPodCidr).as_deref(),
            cidr
        );
        assert_eq!(
            pod_network_due(&node(cidr, true), PodNetwork::AfterInitialisation),
            None
        );
        assert_eq!(
            pod_network_due(&node(cidr, false), PodNetwork::AfterInitialisation).as_deref(),
            cidr
        );
    }

    #[test]
    fn nodes_are_named_as_kind_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let layouts = node_layouts(dir.path(), "run", 3).unwrap();
        let names: Vec<&str> = layouts.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["ccm-control-plane", "ccm-worker", "ccm-worker2"]);
        assert!(layouts[0].control_plane && !layouts[1].control_plane);
        assert_eq!(layouts[2].address, Ipv4Addr::new(10, 88, 0, 12));
        assert_eq!(layouts[1].cgroup_root, "/run/ccm-worker");
    }

    #[test]
    fn process_names_are_plain() {
        assert!(check_process_name("do-like-api-simulator").is_ok());
        for bad in ["", "../x", "a b", "ns-cluster", "x\ny"] {
            assert!(check_process_name(bad).is_err(), "{bad:?}");
        }
    }
}
