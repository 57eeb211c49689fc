//! Starting a cluster's processes under the supervisor: the namespace holders,
//! kube-scheduler and kube-controller-manager in the cluster's namespace, and each node's
//! containerd (with the images imported), kubelet and kube-proxy in the node's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::netns::{self, NetworkNamespace};
use super::node;
use super::{
    CLUSTER_CIDR, CLUSTER_CIDR_V6, CNI_BIN_DIR, ClusterNode, SERVICE_CIDR, SERVICE_CIDR_V6, images,
};
use crate::control_plane::log_tail;
use crate::supervisor::Supervisor;
use crate::{ClusterBinaries, ControlPlane, Error, write_file};

/// Starts a namespace holder and waits for it to be set up.
pub(super) async fn start_holder(
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
            return Err(Error::Cluster(format!(
                "the namespace holder of {name} exited ({status}): {}",
                log_tail(&dir.join(format!("{process}.log"))).trim()
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
pub(super) fn start_controllers(
    control_plane: &ControlPlane,
    cluster_ns: &NetworkNamespace,
    binaries: &ClusterBinaries,
    server: &str,
    dual_stack: bool,
    extra_controller_manager_args: &[String],
) -> Result<(), Error> {
    let start = |name: &str, program: &Path, args: Vec<String>| {
        start_component(control_plane, cluster_ns, server, name, program, args)
    };
    start("kube-scheduler", &binaries.kube_scheduler, Vec::new())?;
    let dir = control_plane.dir();
    let controller_manager_args = [
        "--cloud-provider=external".to_owned(),
        "--use-service-account-credentials=true".to_owned(),
        format!(
            "--service-account-private-key-file={}",
            dir.join("sa.key").display()
        ),
        format!("--root-ca-file={}", dir.join("client-ca.crt").display()),
        "--allocate-node-cidrs=true".to_owned(),
    ];
    let networks = if dual_stack {
        vec![
            format!("--cluster-cidr={CLUSTER_CIDR},{CLUSTER_CIDR_V6}"),
            "--node-cidr-mask-size-ipv4=24".to_owned(),
            "--node-cidr-mask-size-ipv6=64".to_owned(),
            format!("--service-cluster-ip-range={SERVICE_CIDR},{SERVICE_CIDR_V6}"),
        ]
    } else {
        vec![
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            "--node-cidr-mask-size=24".to_owned(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        ]
    };
    start(
        "kube-controller-manager",
        &binaries.kube_controller_manager,
        controller_manager_args
            .into_iter()
            .chain(networks)
            .chain(extra_controller_manager_args.iter().cloned())
            .collect(),
    )
}

/// Starts the control-plane component `name` (`kube-scheduler`, say) in the cluster's
/// namespace: `program` as the user `system:<name>`, with a kubeconfig of its own for
/// `server`, `--bind-address=127.0.0.1 --leader-elect=false` and `args`.
fn start_component(
    control_plane: &ControlPlane,
    cluster_ns: &NetworkNamespace,
    server: &str,
    name: &str,
    program: &Path,
    args: Vec<String>,
) -> Result<(), Error> {
    let kubeconfig = control_plane.dir().join(format!("{name}.kubeconfig"));
    let user = format!("system:{name}");
    write_file(
        &kubeconfig,
        &control_plane.kubeconfig_for_server(server, &user, &[])?,
    )?;
    let common = [
        format!("--kubeconfig={}", kubeconfig.display()),
        "--bind-address=127.0.0.1".to_owned(),
        "--leader-elect=false".to_owned(),
    ];
    let (program, args) =
        cluster_ns.command(false, program, common.into_iter().chain(args).collect());
    control_plane.start_process(name, &program, &args)
}

/// What makes containerd run as the first process of a PID namespace of its own, below the
/// node's: when it is stopped (SIGKILL: the node is being torn down) the kernel ends every
/// shim and container with it. `unshare` itself ignores SIGTERM while it waits, so this
/// shell turns the supervisor's SIGTERM into SIGKILL of containerd (`unshare`'s child, which
/// `unshare` then reaps before it exits; killing `unshare` first would leave containerd to
/// the machine's init).
pub(super) const CONTAINERD_WRAPPER: &str = r#""$@" &
child=$!
trap 'kill -KILL $(cat "/proc/$child/task/$child/children" 2>/dev/null) 2>/dev/null || kill -KILL "$child" 2>/dev/null' TERM INT
wait "$child"
status=$?
wait "$child" 2>/dev/null
exit "$status"
"#;
/// The file name of [`CONTAINERD_WRAPPER`] in the cluster's folder.
pub(super) const CONTAINERD_WRAPPER_FILE: &str = "containerd-wrapper.sh";

/// Writes a node's files and starts its containerd (importing the images), kubelet and
/// kube-proxy.
pub(super) async fn start_node(
    control_plane: &ControlPlane,
    binaries: &ClusterBinaries,
    node: &ClusterNode,
    server: &str,
    builtin: &[PathBuf],
    images: &[PathBuf],
    status_report_frequency: Option<Duration>,
) -> Result<(), Error> {
    let layout = &node.layout;
    let name = &layout.name;
    let write = |file: &str, contents: &str| write_file(&layout.file(file), contents);
    let ca_file = control_plane.dir().join("client-ca.crt");
    control_plane
        .ca()
        .issue_server(
            &[name.as_str()],
            &std::iter::once(layout.address.into())
                .chain(layout.address_v6.map(Into::into))
                .collect::<Vec<_>>(),
        )?
        .write_pair(&layout.dir, "kubelet")?;
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
    write(
        "kubelet.yaml",
        &node::kubelet_config(layout, &ca_file, status_report_frequency),
    )?;
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
    let archives: Vec<PathBuf> = builtin.iter().chain(images).cloned().collect();
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
        let log = || log_tail(&control_plane.dir().join(format!("{process}.log")));
        if let Some(status) = control_plane.process_exit(process) {
            return Err(Error::Start {
                component: "containerd",
                reason: format!("{process} exited ({status})"),
                tail: log(),
            });
        }
        if Instant::now() >= deadline {
            return Err(Error::Start {
                component: "containerd",
                reason: format!("{process} did not answer on {} in 30 s", socket.display()),
                tail: log(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
