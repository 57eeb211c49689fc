//! The cluster tier: kubelets register their Nodes tainted `uninitialized`, a Pod runs on
//! the worker with an address from its pod CIDR, the API server reaches the kubelet (logs),
//! and after the drop nothing is left: no process, folder, cgroup, mount or namespace; nor
//! after the test process is killed.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ccm_test::cluster::{CONTROL_PLANE_LABEL, PAUSE_IMAGE, PodNetwork, UNINITIALIZED_TAINT};
use ccm_test::fixtures::taint_keys;
use ccm_test::{Cluster, eventually};
use common::{process_alive, remove_uninitialized_taint, run_child, wait_nothing_left};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;

const WAIT: Duration = Duration::from_secs(120);

/// What a running cluster has on the machine.
struct Footprint {
    dir: PathBuf,
    pids: Vec<u32>,
    cgroups: Vec<PathBuf>,
}

impl Footprint {
    fn of(cluster: &Cluster) -> Self {
        let dir = cluster.control_plane().dir().to_owned();
        let pids = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                (path.extension()? == "pid").then_some(())?;
                std::fs::read_to_string(path).ok()?.trim().parse().ok()
            })
            .collect();
        let cgroups = cluster
            .nodes()
            .iter()
            .map(|node| {
                let run = Path::new(node.cgroup_root()).parent().unwrap().to_owned();
                Path::new("/sys/fs/cgroup/pids").join(run.strip_prefix("/").unwrap())
            })
            .collect();
        Self { dir, pids, cgroups }
    }

    /// One line: the folder, the cgroups and the process ids.
    fn line(&self) -> String {
        let cgroups: Vec<String> = self
            .cgroups
            .iter()
            .map(|c| c.display().to_string())
            .collect();
        let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
        format!(
            "{REPORT} {} {} {}",
            self.dir.display(),
            cgroups.join(","),
            pids.join(",")
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let start = line.find(REPORT)? + REPORT.len();
        let mut words = line[start..].split_whitespace();
        let dir = PathBuf::from(words.next()?);
        let cgroups = words.next()?.split(',').map(PathBuf::from).collect();
        let pids = words
            .next()?
            .split(',')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        Some(Self { dir, pids, cgroups })
    }

    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        if self.dir.exists() {
            left.push(format!("folder {}", self.dir.display()));
        }
        for pid in &self.pids {
            if process_alive(*pid) {
                left.push(format!("process {pid}"));
            }
        }
        for cgroup in &self.cgroups {
            if cgroup.exists() {
                left.push(format!("cgroup {}", cgroup.display()));
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let dir = self.dir.display().to_string();
        left.extend(
            mounts
                .lines()
                .filter(|line| line.contains(&dir))
                .map(|line| format!("mount {line}")),
        );
        left
    }
}

/// Set in the child process that starts a cluster and is killed.
const CHILD: &str = "CCM_TEST_CLUSTER_CHILD";
/// The line the child prints once its cluster is up.
const REPORT: &str = "CCM-CLUSTER-CHILD";

fn netns_files() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks each Node as its kubelet registered it (tainted `uninitialized`, labelled as a
/// control-plane node or not), and removes the taint as a cloud-controller-manager would.
async fn initialise_as_registered(cluster: &Cluster, nodes: &Api<Node>) {
    for node in cluster.nodes() {
        let object = nodes.get(node.name()).await.unwrap();
        let keys = taint_keys(&object);
        assert!(keys.iter().any(|k| k == UNINITIALIZED_TAINT), "{keys:?}");
        let labels = object.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.contains_key(CONTROL_PLANE_LABEL),
            node.is_control_plane(),
            "{}",
            node.name()
        );
        remove_uninitialized_taint(nodes, node.name()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_runs_pods_and_leaves_nothing_behind() {
    let netns_before = netns_files();
    let cluster = Cluster::builder()
        .pod_network(PodNetwork::AtPodCidr)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());

    initialise_as_registered(&cluster, &nodes).await;
    eventually("every Node Ready", WAIT, || async {
        let list = nodes
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let ready = |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        let waiting: Vec<_> = list
            .items
            .iter()
            .filter(|n| !ready(n))
            .map(|n| n.metadata.name.clone())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("not ready: {waiting:?}"))
        }
    })
    .await;

    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pause"},
        "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE}]}
    }))
    .unwrap();
    let running = cluster
        .run_pod("default", &pod, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ip = running.status.unwrap().pod_ip.unwrap();
    let worker = nodes.get("ccm-worker").await.unwrap();
    let cidr = worker.spec.unwrap().pod_cidr.unwrap();
    let prefix = cidr.trim_end_matches("0/24");
    assert!(ip.starts_with(prefix), "{ip} in {cidr}");

    // The API server reaches the kubelet (by its InternalIP, with its client certificate,
    // checking the kubelet's serving certificate): logs of a container that writes none.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let logs = pods.logs("pause", &Default::default()).await.unwrap();
    assert_eq!(logs, "");

    let footprint = Footprint::of(&cluster);
    assert!(footprint.pids.len() >= 13, "{:?}", footprint.pids);
    assert!(footprint.cgroups.iter().all(|c| c.exists()));
    let dropped = Instant::now();
    drop(cluster);
    let took = dropped.elapsed();
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
    assert_eq!(
        netns_files(),
        netns_before,
        "no namespace left in /run/netns"
    );
    eprintln!("the cluster stopped in {took:?}");
}

/// Run by `a_killed_test_process_leaves_nothing_behind` in a process of its own: starts a
/// one-node cluster, reports it, and dies by SIGKILL (no destructor, no handler runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of a_killed_test_process_leaves_nothing_behind"]
async fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let cluster = Cluster::builder()
        .nodes(1)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{}", Footprint::of(&cluster).line());
    std::io::stdout().flush().unwrap();
    let _ = Command::new("kill")
        .args(["-KILL", &std::process::id().to_string()])
        .status();
    unreachable!("killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_test_process_leaves_nothing_behind() {
    let child = run_child(CHILD, "1", WAIT).await;
    let footprint = child
        .stdout
        .lines()
        .find_map(Footprint::parse)
        .unwrap_or_else(|| panic!("the child reports its cluster; its log:\n{}", child.log));
    assert!(
        !child.status.success(),
        "the child was killed: {}",
        child.status
    );
    // Two namespace holders, etcd, kube-apiserver, the scheduler, the controller manager,
    // and the node's containerd, kubelet and kube-proxy.
    assert_eq!(footprint.pids.len(), 9, "{:?}", footprint.pids);
    let started = Instant::now();
    wait_nothing_left("the killed process's cluster cleaned up", WAIT, || {
        footprint.leftovers()
    })
    .await;
    eprintln!("cleaned up {:?} after the kill", started.elapsed());
}
