//! The user's path in a real cluster: kubelets with `--cloud-provider=external` register
//! their Nodes, `kubectl apply -f releases/v0.1.0/fake-cloud.yaml` (only the image pointed at
//! the locally built one) starts the CCM's Pods on those uninitialised, not-ready Nodes, they
//! initialise them, and an ordinary Pod then runs on the worker. Then the kubelets' status
//! reports go on next to the CCM, and the CCM writes nothing to any Node (the API server's
//! audit log says who wrote what).
//!
//! `scripts/test.sh` builds the image archive first (`scripts/images.sh --debug`); run alone,
//! this test fails with that command if the archive is missing. Needs root and the cluster
//! tier's packages (see `ccm_test::cluster`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::audit::parse_audit_log;
use ccm_test::cluster::{CONTROL_PLANE_LABEL, PAUSE_IMAGE, UNINITIALIZED_TAINT};
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};

const IMAGE: &str = "fake-cloud-controller-manager";
const RELEASED_IMAGE: &str = "ghcr.io/ccm-rs/fake-cloud-controller-manager:0.1.0";
const LOCAL_IMAGE: &str = "localhost/fake-cloud-controller-manager:0.1.0";
const WAIT: Duration = Duration::from_secs(120);
/// The CCM's user, as the audit log names it.
const CCM_USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";
/// How often each kubelet reports its whole status here (the default is 5 minutes).
const STATUS_REPORTS: Duration = Duration::from_secs(10);
/// How long the CCM and the kubelets are watched side by side.
const COEXISTENCE: Duration = Duration::from_secs(90);

/// Every write to a Node (or its status) the API server saw, as the audit policy records.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [nodes, nodes/status]}]
    verbs: [create, update, patch, delete]
  - level: None
"#;

/// (user, verb, subresource) of each Node write in the audit log after `offset` bytes.
fn node_writes(log: &Path, offset: usize) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    parse_audit_log(text.get(offset..).unwrap_or_default())
        .into_iter()
        .filter(|event| event.stage == "ResponseComplete")
        .map(|event| (event.user, event.verb, event.subresource))
        .collect()
}

/// The CCM's writes to Nodes (not their status) in the audit log: (verb, response code).
fn ccm_node_writes(log: &Path) -> Vec<(String, i64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    parse_audit_log(&text)
        .into_iter()
        .filter(|e| e.stage == "ResponseComplete" && e.user == CCM_USER && e.subresource.is_empty())
        .map(|e| (e.verb, e.code))
        .collect()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ANCHOR: cluster_manifest
/// The release manifest, with only the image reference changed.
fn release_manifest() -> String {
    let text = std::fs::read_to_string(workspace().join("releases/v0.1.0/fake-cloud.yaml"))
        .expect("the release manifest");
    let field = format!("image: {RELEASED_IMAGE}");
    assert_eq!(text.matches(&field).count(), 1, "one container image");
    text.replace(&field, &format!("image: {LOCAL_IMAGE}"))
}
// ANCHOR_END: cluster_manifest

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_manifest_initialises_the_clusters_nodes() {
    let archive = ccm_test::image::archive(&workspace(), IMAGE);
    let audit = tempfile::tempdir().unwrap();
    let policy = audit.path().join("policy.yaml");
    let audit_log = audit.path().join("audit.log");
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    // ANCHOR: cluster_start
    let cluster = Cluster::builder()
        .image(&archive)
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
        .node_status_report_frequency(STATUS_REPORTS)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());

    // As kubelets register them: tainted, not ready (no pod network before the cloud).
    for node in cluster.nodes() {
        let taints = nodes.get(node.name()).await.unwrap().spec.unwrap().taints;
        let keys: Vec<String> = taints.into_iter().flatten().map(|t| t.key).collect();
        assert!(keys.iter().any(|k| k == UNINITIALIZED_TAINT), "{keys:?}");
    }

    let applied = cluster
        .apply(&release_manifest())
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{applied}");
    // ANCHOR_END: cluster_start

    let initialised = match cluster.wait_initialised(WAIT).await {
        Ok(nodes) => nodes,
        Err(e) => panic!("{e}\n{}", diagnostics(&cluster)),
    };
    for node in &initialised {
        let name = node.metadata.name.clone().unwrap();
        let spec = node.spec.clone().unwrap();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some(&*format!("fake://{name}"))
        );
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for (label, value) in [
            ("node.kubernetes.io/instance-type", "fake-small"),
            ("topology.kubernetes.io/zone", "zone-a"),
            ("topology.kubernetes.io/region", "region-1"),
        ] {
            assert_eq!(labels.get(label).map(String::as_str), Some(value), "{name}");
        }
        let addresses = node.status.clone().unwrap().addresses.unwrap_or_default();
        assert!(!addresses.is_empty(), "{name} has addresses");
    }
    assert!(
        initialised.iter().any(|n| n
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))),
        "the control-plane node keeps its role"
    );
    // Each Node was written once: as a protobuf update (Go's write; the manifest keeps
    // `--kube-api-content-type` at its default) after the status write, or as the guarded
    // patch (no status write to build the update from, or an update that conflicted with a
    // kubelet's status report). The conflicts are what an update costs over a patch.
    let writes = ccm_node_writes(&audit_log);
    let count = |verb: &str, ok: bool| {
        writes
            .iter()
            .filter(|(v, code)| v == verb && (200..300).contains(code) == ok)
            .count()
    };
    let (updates, conflicts, patches) = (
        count("update", true),
        count("update", false),
        count("patch", true),
    );
    eprintln!(
        "initialising {} Nodes: {updates} updates, {conflicts} refused, {patches} patches",
        initialised.len()
    );
    assert_eq!(updates + patches, initialised.len(), "{writes:?}");

    // The CCM's Pods run, and their readiness probes pass through the kubelets.
    let system: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    eventually("both CCM Pods running and ready", WAIT, || async {
        let pods = system
            .list(&ListParams::default().labels("app=cloud-controller-manager"))
            .await
            .map_err(|e| e.to_string())?;
        let ready = pods.items.iter().filter(|p| is_ready(p)).count();
        if ready == 2 {
            Ok(())
        } else {
            Err(format!(
                "{ready} ready: {:?}",
                pods.items
                    .iter()
                    .map(|p| (p.metadata.name.clone(), p.status.clone()))
                    .collect::<Vec<_>>()
            ))
        }
    })
    .await;

    // An ordinary Pod: scheduled onto the worker (the control-plane node is tainted) and
    // running, with an address from the worker's pod CIDR.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "workload"},
        "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running = cluster
        .wait_pod_running("default", "workload", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let node = running.spec.unwrap().node_name.unwrap();
    let ip = running.status.unwrap().pod_ip.unwrap();
    assert_eq!(node, "ccm-worker");
    assert!(ip.starts_with("10.244."), "{ip}");

    // An upgrade, as an operator rolls one out: one more argument (the CCM's own periodic
    // Node sync every 20 s instead of 5 minutes, so that the window below holds several).
    // Host-network replicas cannot surge onto a node that runs one already.
    let patch = r#"[{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                     "value": "--node-status-update-frequency=20s"}]"#;
    let kubectl = |args: &[&str]| {
        let out = cluster.kubectl().unwrap().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl(&[
        "-n",
        "kube-system",
        "patch",
        "deployment",
        "cloud-controller-manager",
        "--type=json",
        "-p",
        patch,
    ]);
    let rollout = cluster
        .kubectl()
        .unwrap()
        .args(["-n", "kube-system", "rollout", "status"])
        .args(["deployment/cloud-controller-manager", "--timeout=180s"])
        .output()
        .unwrap();
    if !rollout.status.success() {
        panic!(
            "rollout: {}{}\n{}",
            String::from_utf8_lossy(&rollout.stdout),
            String::from_utf8_lossy(&rollout.stderr),
            diagnostics(&cluster)
        );
    }

    // Coexistence: initialised Nodes, kubelets reporting their status, and no Node write by
    // the CCM. (Every status report of a kubelet is a patch of nodes/status.)
    let since = std::fs::metadata(&audit_log).unwrap().len() as usize;
    tokio::time::sleep(COEXISTENCE).await;
    let writes = node_writes(&audit_log, since);
    let by_kubelets = writes
        .iter()
        .filter(|(user, verb, sub)| {
            user.starts_with("system:node:") && verb == "patch" && sub == "status"
        })
        .count();
    let by_ccm: Vec<_> = writes
        .iter()
        .filter(|(user, ..)| user == CCM_USER)
        .collect();
    eprintln!(
        "in {COEXISTENCE:?}: {} Node writes, {by_kubelets} kubelet status patches, {} by the CCM",
        writes.len(),
        by_ccm.len()
    );
    // The kubelet checks every 10 s (nodeStatusUpdateFrequency) whether a report is due, so
    // reports come every 10 to 20 s: at least four from each node in 90 s.
    for node in cluster.nodes() {
        let user = format!("system:node:{}", node.name());
        let reports = writes
            .iter()
            .filter(|(u, verb, sub)| *u == user && verb == "patch" && sub == "status")
            .count();
        assert!(
            reports as u64 >= COEXISTENCE.as_secs() / (2 * STATUS_REPORTS.as_secs()),
            "{user} reported {reports} times: {writes:?}"
        );
    }
    assert_eq!(
        by_ccm,
        Vec::<&(String, String, String)>::new(),
        "no Node write by the CCM"
    );
}

/// What a failed wait prints: the Pods, what the kubelets and the scheduler said of the
/// CCM's, and the CCM's logs (of the running and the previous containers).
fn diagnostics(cluster: &Cluster) -> String {
    let run = |args: &[&str]| {
        let out = cluster.kubectl().unwrap().args(args).output().unwrap();
        format!(
            "--- kubectl {} ---\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let mut text = [
        run(&["get", "pods", "-A", "-o", "wide"]),
        run(&[
            "get",
            "events",
            "-n",
            "kube-system",
            "--sort-by=.lastTimestamp",
        ]),
        run(&[
            "describe",
            "pods",
            "-n",
            "kube-system",
            "-l",
            "app=cloud-controller-manager",
        ]),
    ]
    .concat();
    // The running containers' logs, and those of the ones before them (a restart).
    for previous in [None, Some("--previous")] {
        let selector = ["-n", "kube-system", "-l", "app=cloud-controller-manager"];
        let args: Vec<&str> = ["logs"]
            .into_iter()
            .chain(selector)
            .chain(["--tail=60", "--prefix"])
            .chain(previous)
            .collect();
        text += &run(&args);
    }
    for node in cluster.nodes() {
        let log = cluster.log(&format!("kubelet-{}", node.name()));
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        text += &format!("--- kubelet-{} (last 60 lines) ---\n", node.name());
        for line in tail.into_iter().rev() {
            text += line;
            text.push('\n');
        }
    }
    text
}
