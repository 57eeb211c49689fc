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

mod dns;
mod images;
mod launch;
mod machine;
pub(crate) mod netns;
mod node;
mod pod_network;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};

use self::launch::{
    CONTAINERD_WRAPPER, CONTAINERD_WRAPPER_FILE, start_controllers, start_holder, start_node,
};
use self::machine::{
    check_prerequisites, make_cgroups, node_layouts, node_name, write_cleanup_script,
};
use self::netns::{Forwarder, NetworkNamespace};
use self::node::NodeLayout;
use self::pod_network::PodNetworkWriter;
use crate::control_plane::log_tail;
use crate::supervisor::Supervisor;
use crate::{
    Binaries, ClusterBinaries, ControlPlane, ControlPlaneBuilder, Error, unique_name, write_file,
};

pub use self::netns::{LOAD_BALANCER_CIDR, LOAD_BALANCER_CIDR_V6};
pub use self::node::{
    CLUSTER_CIDR, CLUSTER_CIDR_V6, PAUSE_IMAGE, SERVICE_CIDR, SERVICE_CIDR_V6, WEB_IMAGE,
};

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

/// Who routes each node's pod CIDR to the node in the cluster's network (the namespace that
/// plays the cloud's network, where traffic between nodes goes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PodRoutes {
    /// The cluster tier, when it sets a node's Pod network up: Pods reach each other across
    /// nodes whatever a cloud-controller-manager does.
    #[default]
    Cluster,
    /// The cloud: the cluster tier adds no route, so Pod traffic between nodes flows only
    /// through routes a cloud puts into the cluster's network (the DO-like simulator's
    /// route table, driven by a CCM's route controller), as in a cloud's VPC.
    Cloud,
}

/// Options for a [`Cluster`]; see [`Cluster::builder`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    nodes: usize,
    images: Vec<PathBuf>,
    pod_network: PodNetwork,
    pod_routes: PodRoutes,
    dual_stack: bool,
    start_timeout: Duration,
    control_plane: ControlPlaneBuilder,
    controller_manager_args: Vec<String>,
    node_status_report_frequency: Option<Duration>,
    /// (node name, flag) for one node's kubelet.
    kubelet_args: Vec<(String, String)>,
}

/// Checks that every node [`ClusterBuilder::kubelet_arg`] names is one of the cluster's
/// `nodes`.
fn check_kubelet_args(args: &[(String, String)], nodes: usize) -> Result<(), Error> {
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    match args.iter().find(|(node, _)| !names.contains(node)) {
        Some((node, arg)) => Err(Error::InvalidArgument(format!(
            "kubelet flag {arg:?} for node {node:?}: the cluster's nodes are {}",
            names.join(", ")
        ))),
        None => Ok(()),
    }
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            nodes: 2,
            images: Vec::new(),
            pod_network: PodNetwork::default(),
            pod_routes: PodRoutes::default(),
            dual_stack: false,
            start_timeout: DEFAULT_START_TIMEOUT,
            control_plane: ControlPlaneBuilder::default(),
            controller_manager_args: Vec::new(),
            node_status_report_frequency: None,
            kubelet_args: Vec::new(),
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

    /// Who routes the pod CIDRs between nodes (default [`PodRoutes::Cluster`]).
    #[must_use]
    pub fn pod_routes(mut self, pod_routes: PodRoutes) -> Self {
        self.pod_routes = pod_routes;
        self
    }

    /// An IPv4/IPv6 dual-stack cluster (default IPv4 only): every node also gets an IPv6
    /// address (`fd00:10:88::<n>`, the kubelet's second `--node-ip`), the API server a
    /// second Service range ([`SERVICE_CIDR_V6`]), kube-controller-manager a second cluster
    /// CIDR ([`CLUSTER_CIDR_V6`], a `/64` per node), kube-proxy both families, every Pod an
    /// address of each, and the cluster namespace the IPv6 load-balancer range
    /// [`LOAD_BALANCER_CIDR_V6`]. Every IPv6 address is unique-local and lives in the run's
    /// namespaces.
    #[must_use]
    pub fn dual_stack(mut self, dual_stack: bool) -> Self {
        self.dual_stack = dual_stack;
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

    /// Adds a flag to the kubelet of the node named `node` (`ccm-control-plane`,
    /// `ccm-worker`, `ccm-worker2`, …), after the cluster's own, so it wins over them:
    /// e.g. `--provider-id=metal://rack-1/2` or `--node-labels=example.com/bare-metal=true`
    /// for a node that is not the cloud's in a hybrid cluster. A name the cluster has no
    /// node of fails [`start`](Self::start) before anything is started.
    ///
    /// ```
    /// let builder = ccm_test::Cluster::builder()
    ///     .nodes(3)
    ///     .kubelet_arg("ccm-worker2", "--provider-id=metal://rack-1/2");
    /// # drop(builder);
    /// ```
    #[must_use]
    pub fn kubelet_arg(mut self, node: impl Into<String>, arg: impl Into<String>) -> Self {
        self.kubelet_args.push((node.into(), arg.into()));
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
        check_kubelet_args(&self.kubelet_args, self.nodes)?;
        let (binaries, cluster_binaries, builtin) = tokio::task::spawn_blocking(|| {
            check_prerequisites()?;
            let binaries = Binaries::find_or_build()?;
            let cluster_binaries = ClusterBinaries::find_or_build(&binaries)?;
            let builtin = images::builtin_archives()?;
            Ok::<_, Error>((binaries, cluster_binaries, builtin))
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
        let mut layouts = node_layouts(&dir, &run_id, self.nodes, self.dual_stack)?;
        for layout in &mut layouts {
            layout.kubelet_args = self
                .kubelet_args
                .iter()
                .filter(|(node, _)| *node == layout.name)
                .map(|(_, arg)| arg.clone())
                .collect();
        }
        write_cleanup_script(&dir, &run_id)?;
        netns::write_holder_script(&dir)?;
        write_file(&dir.join(CONTAINERD_WRAPPER_FILE), CONTAINERD_WRAPPER)?;
        make_cgroups(&layouts)?;

        // The namespaces, and the network between them.
        let cluster_ns = Arc::new(start_holder(&mut supervisor, &dir, "cluster", false).await?);
        cluster_ns.run_script(&netns::cluster_setup_script(self.dual_stack))?;
        let mut node_namespaces = Vec::with_capacity(layouts.len());
        for (index, layout) in layouts.iter().enumerate() {
            let ns = start_holder(&mut supervisor, &dir, &layout.name, true).await?;
            cluster_ns.run_script(&netns::attach_script(index, ns.pid()))?;
            ns.run_script(&netns::node_setup_script(layout.address, layout.address_v6))?;
            node_namespaces.push(ns);
        }

        let mut control_plane = self.control_plane.clone();
        if self.dual_stack {
            // After the default range: the API server takes a flag's last value.
            control_plane = control_plane.apiserver_arg(format!(
                "--service-cluster-ip-range={SERVICE_CIDR},{SERVICE_CIDR_V6}"
            ));
        }
        let control_plane = control_plane
            .start_in_namespace(
                &binaries,
                dir.clone(),
                supervisor,
                cluster_ns.clone(),
                netns::GATEWAY,
            )
            .await?;
        let dns = dns::ClusterDns::start(
            control_plane.admin_config()?,
            cluster_ns
                .bind_udp(SocketAddr::from((netns::GATEWAY, 53)))
                .map_err(|e| Error::io("binding the cluster's DNS server", e))?,
        )?;
        let server = apiserver_url_in_cluster();
        start_controllers(
            &control_plane,
            &cluster_ns,
            &cluster_binaries,
            &server,
            self.dual_stack,
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
                &builtin,
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
                self.pod_routes,
            )?,
            forwarders: Mutex::new(Vec::new()),
            _dns: dns,
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
    // Dropped in this order: the pod-network writer, the forwarders, the DNS server, then
    // the processes.
    _pod_network: PodNetworkWriter,
    forwarders: Mutex<Vec<Forwarder>>,
    _dns: dns::ClusterDns,
    cluster_ns: Arc<NetworkNamespace>,
    nodes: Vec<ClusterNode>,
    control_plane: ControlPlane,
}

/// One node of a [`Cluster`].
#[derive(Debug)]
pub struct ClusterNode {
    layout: NodeLayout,
    namespace: NetworkNamespace,
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

    /// Its IPv6 address there, in a dual-stack cluster ([`ClusterBuilder::dual_stack`]).
    pub fn address_v6(&self) -> Option<Ipv6Addr> {
        self.layout.address_v6
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
        apiserver_url_in_cluster()
    }

    /// Writes an admin kubeconfig whose server is [`apiserver_url_in_cluster`]
    /// (for a program run with [`command`](Self::command)) to `kubeconfig-in-cluster` in the
    /// cluster's folder, and returns its path.
    ///
    /// [`apiserver_url_in_cluster`]: Self::apiserver_url_in_cluster
    ///
    /// # Errors
    ///
    /// When the client certificate cannot be issued or the file written.
    pub fn kubeconfig_in_cluster(&self) -> Result<PathBuf, Error> {
        let config = self.control_plane.kubeconfig_for_server(
            &apiserver_url_in_cluster(),
            "ccm-test-admin-in-cluster",
            &["system:masters"],
        )?;
        let path = self.control_plane.dir().join("kubeconfig-in-cluster");
        write_file(&path, &config)?;
        Ok(path)
    }

    /// A command that runs `program` inside the cluster's namespace, where the nodes, the
    /// Pods, the API server (at [`apiserver_url_in_cluster`](Self::apiserver_url_in_cluster))
    /// and the addresses of [`LOAD_BALANCER_CIDR`] are reached as from a machine on the
    /// cluster's network: for a test suite run from outside the nodes (Kubernetes' e2e
    /// tests). The caller waits for it; unlike [`start_process`](Self::start_process) the
    /// cluster does not stop it.
    pub fn command(&self, program: impl AsRef<Path>) -> std::process::Command {
        let (nsenter, args) = self.cluster_ns.command(false, program.as_ref(), Vec::new());
        let mut command = std::process::Command::new(nsenter);
        command.args(args);
        command
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
            .stop_process("kubelet", &format!("kubelet-{}", node.name()))
            .await
    }

    /// Starts the kubelet of the node `name` again, after [`stop_kubelet`](Self::stop_kubelet).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an unknown node or a kubelet that runs; I/O errors.
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

    /// Creates `pod` in `namespace` and waits until it is `Running` with an address (see
    /// [`wait_pod_running`](Self::wait_pod_running)); returns it then.
    ///
    /// # Errors
    ///
    /// API errors creating it; as [`wait_pod_running`](Self::wait_pod_running).
    pub async fn run_pod(
        &self,
        namespace: &str,
        pod: &Pod,
        timeout: Duration,
    ) -> Result<Pod, Error> {
        Api::<Pod>::namespaced(self.client()?, namespace)
            .create(&PostParams::default(), pod)
            .await?;
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.wait_pod_running(namespace, name, timeout).await
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

    /// The last lines of a process's log, for an error message.
    fn log_tail(&self, name: &str) -> String {
        log_tail(&self.control_plane.dir().join(format!("{name}.log")))
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
                        tail: self.log_tail(&format!("kubelet-{}", node.name())),
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
                    tail: self.log_tail(&format!("kubelet-{first}")),
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
    node.spec
        .as_ref()
        .and_then(|spec| spec.provider_id.as_deref())
        .is_some_and(|id| !id.is_empty())
        && !has_uninitialized_taint(node)
}

/// Whether `node` still has the taint its kubelet registered it with.
fn has_uninitialized_taint(node: &Node) -> bool {
    node.spec
        .iter()
        .flat_map(|spec| spec.taints.iter().flatten())
        .any(|taint| taint.key == UNINITIALIZED_TAINT)
}

/// kube-apiserver's URL inside the cluster.
fn apiserver_url_in_cluster() -> String {
    format!("https://{}:{APISERVER_PORT}", netns::GATEWAY)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_names_are_plain() {
        assert!(check_process_name("do-like-api-simulator").is_ok());
        for bad in ["", "../x", "a b", "ns-cluster", "x\ny"] {
            assert!(check_process_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn kubelet_flags_must_name_a_node_of_the_cluster() {
        let arg = |node: &str| (node.to_owned(), "--provider-id=metal://1".to_owned());
        assert!(check_kubelet_args(&[arg("ccm-worker2"), arg("ccm-control-plane")], 3).is_ok());
        let err = check_kubelet_args(&[arg("ccm-worker2")], 2)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"ccm-worker2\"") && err.contains("ccm-control-plane, ccm-worker"),
            "{err}"
        );
    }
}
