//! What each node's processes are given: containerd's configuration, the kubelet's, the
//! kube-proxy's and the CNI network's, as pure functions of the node and its folder, so
//! that tests read them without starting anything.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Error;

/// The pod network of the whole cluster (kube-controller-manager's `--cluster-cidr`, and
/// the release manifests' `--cluster-cidr`).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The Service network (kube-apiserver's `--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The IPv6 pod network of a dual-stack cluster (the second `--cluster-cidr`), cut into a
/// `/64` per node. Unique-local, as every IPv6 address of the cluster is.
pub const CLUSTER_CIDR_V6: &str = "fd00:10:244::/56";
/// The IPv6 Service network of a dual-stack cluster (the second
/// `--service-cluster-ip-range`).
pub const SERVICE_CIDR_V6: &str = "fd00:10:96::/112";
/// The image containerd runs as every Pod's sandbox; built by the cluster tier and imported
/// into every node, never pulled. A Pod that only has to run (a workload to schedule) can
/// run it too.
pub const PAUSE_IMAGE: &str = "localhost/ccm-test/pause:1.0";
/// A web workload every node has (built like [`PAUSE_IMAGE`]): an HTTP server on port 8080
/// (or the port given as its argument) answering every request with its Pod's name.
pub const WEB_IMAGE: &str = "localhost/ccm-test/web:1.0";
/// The taint kubeadm gives control-plane nodes.
pub(crate) const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane";

/// One node's names, address and files.
#[derive(Debug, Clone)]
pub(crate) struct NodeLayout {
    /// The Node's name (`--hostname-override`).
    pub(crate) name: String,
    /// Its address on the cluster's bridge (`--node-ip`).
    pub(crate) address: Ipv4Addr,
    /// Its IPv6 address there, in a dual-stack cluster (the second `--node-ip`).
    pub(crate) address_v6: Option<Ipv6Addr>,
    /// Whether it is the control-plane node (tainted `node-role.kubernetes.io/control-plane`).
    pub(crate) control_plane: bool,
    /// Its folder: containerd's root and state, the kubelet's root, configurations, CNI.
    pub(crate) dir: PathBuf,
    /// The cgroup (in every hierarchy) that its Pods' cgroups are made under.
    pub(crate) cgroup_root: String,
    /// Flags for its kubelet beyond ours ([`ClusterBuilder::kubelet_arg`](super::ClusterBuilder::kubelet_arg)).
    pub(crate) kubelet_args: Vec<String>,
}

impl NodeLayout {
    /// containerd's socket.
    pub(crate) fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The folder containerd reads CNI network configurations from.
    pub(crate) fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni")
    }

    /// Where a file of the node's goes.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// containerd's configuration: its own root, state and socket in the node's folder, the CRI
/// plugin with our sandbox image, the CNI plugins of Debian's `containernetworking-plugins`,
/// and `restrict_oom_score_adj` (the kubelet asks for a negative `oom_score_adj` for
/// sandboxes, which needs `CAP_SYS_RESOURCE`; without it every sandbox fails with runc's
/// "can't get final child's PID from pipe").
pub(crate) fn containerd_config(node: &NodeLayout, cni_bin_dir: &Path) -> String {
    let dir = node.dir.display();
    format!(
        r#"version = 2
root = "{dir}/containerd/root"
state = "{dir}/containerd/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
"#,
        socket = node.containerd_socket().display(),
        cni_bin = cni_bin_dir.display(),
        cni_conf = node.cni_conf_dir().display(),
    )
}

/// The kubelet's configuration: what works on a machine with a hybrid cgroup v1 hierarchy
/// and without `CAP_SYS_RESOURCE` (cgroupfs, no node-allocatable enforcement), with the
/// Pods' cgroups under the node's own cgroup root (`kubepods` below it: with
/// `cgroupsPerQOS: false` the kubelet gives containerd no parent, and every container lands
/// in the host's `/k8s.io`, where a run cannot tell its own from others'), plus
/// certificate authentication and webhook authorization (as kubeadm sets them), a serving
/// certificate signed by the cluster's CA, no DNS for Pods (nothing to resolve), image
/// garbage collection off (the images cannot be pulled again) and eviction only in
/// extremity (the machine's disk and memory are shared by every node). With
/// `status_report_frequency` (whole seconds), its `nodeStatusReportFrequency`.
pub(crate) fn kubelet_config(
    node: &NodeLayout,
    ca_file: &Path,
    status_report_frequency: Option<Duration>,
) -> String {
    let mut extra = String::new();
    if node.control_plane {
        extra.push_str(&format!(
            "registerWithTaints:\n- key: {CONTROL_PLANE_TAINT}\n  effect: NoSchedule\n"
        ));
    }
    if let Some(every) = status_report_frequency {
        extra.push_str(&format!(
            "nodeStatusReportFrequency: {}s\n",
            every.as_secs()
        ));
    }
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {address}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [{dns}]
resolvConf: ""
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
localStorageCapacityIsolation: false
volumePluginDir: {plugins}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
{extra}"#,
        address = node.address,
        dns = super::netns::GATEWAY,
        cert = node.file("kubelet.crt").display(),
        key = node.file("kubelet.key").display(),
        ca = ca_file.display(),
        cgroup_root = node.cgroup_root,
        socket = node.containerd_socket().display(),
        plugins = node.file("volume-plugins").display(),
    )
}

/// The kubelet's arguments (the rest is in its configuration file), then the node's own
/// (a kubelet takes the last of a flag given twice).
pub(crate) fn kubelet_args(node: &NodeLayout) -> Vec<String> {
    let mut args = vec![
        format!("--config={}", node.file("kubelet.yaml").display()),
        format!("--kubeconfig={}", node.file("kubelet.kubeconfig").display()),
        format!("--hostname-override={}", node.name),
        match node.address_v6 {
            Some(v6) => format!("--node-ip={},{v6}", node.address),
            None => format!("--node-ip={}", node.address),
        },
        format!("--root-dir={}", node.file("kubelet").display()),
        format!("--cert-dir={}", node.file("kubelet-pki").display()),
        "--cloud-provider=external".to_owned(),
    ];
    args.extend(node.kubelet_args.iter().cloned());
    args
}

/// kube-proxy's configuration: iptables mode in the node's namespace; the conntrack
/// settings it would write are host-wide, so it writes none; its health check listens on
/// the node's addresses (10256), where load balancers check it.
pub(crate) fn kube_proxy_config(node: &NodeLayout) -> String {
    let cluster_cidr = match node.address_v6 {
        Some(_) => format!("{CLUSTER_CIDR},{CLUSTER_CIDR_V6}"),
        None => CLUSTER_CIDR.to_owned(),
    };
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {name}
mode: iptables
clusterCIDR: {cluster_cidr}
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
"#,
        kubeconfig = node.file("kube-proxy.kubeconfig").display(),
        name = node.name,
    )
}

/// The node's CNI network: a bridge (`cni0`) that is the Pods' gateway, host-local
/// addresses from the node's pod CIDR (and its IPv6 one, in a dual-stack cluster: each Pod
/// gets one address of each family), and port mappings (`hostPort`); containerd adds the
/// loopback itself.
pub(crate) fn cni_config(pod_cidr: &str, pod_cidr_v6: Option<&str>) -> Result<String, Error> {
    super::netns::validate_ipv4_cidr(pod_cidr)?;
    let (mut ranges, mut routes) = (
        format!(r#"[{{"subnet": "{pod_cidr}"}}]"#),
        r#"{"dst": "0.0.0.0/0"}"#.to_owned(),
    );
    if let Some(v6) = pod_cidr_v6 {
        super::netns::validate_ipv6_cidr(v6)?;
        ranges += &format!(r#", [{{"subnet": "{v6}"}}]"#);
        routes += r#", {"dst": "::/0"}"#;
    }
    Ok(format!(
        r#"{{
  "cniVersion": "0.4.0",
  "name": "ccm-test",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [{ranges}],
        "routes": [{routes}]
      }}
    }},
    {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
  ]
}}
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(control_plane: bool) -> NodeLayout {
        NodeLayout {
            name: "ccm-worker".to_owned(),
            address: Ipv4Addr::new(10, 88, 0, 11),
            address_v6: None,
            control_plane,
            dir: PathBuf::from("/tmp/c/ccm-worker"),
            cgroup_root: "/ccm-test-1/ccm-worker".to_owned(),
            kubelet_args: Vec::new(),
        }
    }

    #[test]
    fn a_node_s_own_kubelet_flags_come_last() {
        let mut node = layout(false);
        node.kubelet_args = vec![
            "--provider-id=metal://rack-1/2".to_owned(),
            "--node-labels=example.com/bare-metal=true".to_owned(),
        ];
        let args = kubelet_args(&node);
        assert_eq!(args[args.len() - 3], "--cloud-provider=external");
        assert_eq!(args[args.len() - 2], "--provider-id=metal://rack-1/2");
        assert_eq!(
            args[args.len() - 1],
            "--node-labels=example.com/bare-metal=true"
        );
    }

    #[test]
    fn containerd_keeps_to_the_nodes_folder() {
        let config = containerd_config(&layout(false), Path::new("/usr/lib/cni"));
        assert!(config.contains(r#"root = "/tmp/c/ccm-worker/containerd/root""#));
        assert!(config.contains(r#"address = "/tmp/c/ccm-worker/containerd.sock""#));
        assert!(config.contains(r#"conf_dir = "/tmp/c/ccm-worker/cni""#));
        assert!(config.contains("restrict_oom_score_adj = true"));
        assert!(config.contains(PAUSE_IMAGE));
    }

    #[test]
    fn only_the_control_plane_node_registers_with_its_taint() {
        let ca = Path::new("/tmp/c/ca.crt");
        let worker = kubelet_config(&layout(false), ca, None);
        assert!(!worker.contains("registerWithTaints"));
        assert!(!worker.contains("nodeStatusReportFrequency"));
        assert!(worker.contains("address: 10.88.0.11"));
        assert!(worker.contains("cgroupRoot: /ccm-test-1/ccm-worker"));
        let control_plane = kubelet_config(&layout(true), ca, Some(Duration::from_secs(10)));
        assert!(control_plane.ends_with("nodeStatusReportFrequency: 10s\n"));
        assert!(control_plane.contains(
            "registerWithTaints:\n- key: node-role.kubernetes.io/control-plane\n  effect: NoSchedule\n"
        ));
        assert!(kubelet_args(&layout(false)).contains(&"--cloud-provider=external".to_owned()));
    }

    #[test]
    fn the_cni_network_is_the_nodes_pod_cidr() {
        let config = cni_config("10.244.3.0/24", None).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&config).unwrap();
        let ipam = &parsed["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][0][0]["subnet"], "10.244.3.0/24");
        assert_eq!(ipam["ranges"].as_array().unwrap().len(), 1);
        assert!(cni_config("10.244.3.0/24\"}", None).is_err());

        // Dual-stack: one range and one default route per family.
        let config = cni_config("10.244.3.0/24", Some("fd00:10:244:3::/64")).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&config).unwrap();
        let ipam = &parsed["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][1][0]["subnet"], "fd00:10:244:3::/64");
        assert_eq!(ipam["routes"][1]["dst"], "::/0");
        assert!(cni_config("10.244.3.0/24", Some("10.244.4.0/24")).is_err());
        assert!(cni_config("10.244.3.0/24", Some("fd00::/64\"}")).is_err());
    }

    #[test]
    fn kube_proxy_writes_no_host_wide_conntrack_setting() {
        let config = kube_proxy_config(&layout(false));
        assert!(config.contains("maxPerCore: 0"));
        assert!(config.contains("hostnameOverride: ccm-worker"));
        assert!(config.contains("clusterCIDR: 10.244.0.0/16\n"));
    }

    #[test]
    fn a_dual_stack_node_has_an_address_of_each_family() {
        let mut node = layout(false);
        node.address_v6 = Some("fd00:10:88::b".parse().unwrap());
        assert!(kubelet_args(&node).contains(&"--node-ip=10.88.0.11,fd00:10:88::b".to_owned()));
        assert!(kube_proxy_config(&node).contains("clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n"));
    }
}
