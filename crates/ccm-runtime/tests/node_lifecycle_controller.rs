//! The cloud-node-lifecycle controller against a real kube-apiserver + etcd, with the fake
//! cloud.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ccm_fake_cloud::{FakeCloud, FakeInstance, Fault, InstancesShape, Method};
use ccm_provider::CloudProvider;
use ccm_provider::well_known::{LABEL_EXCLUDE_FROM_LIFECYCLE_MANAGEMENT, TAINT_SHUTDOWN};
use ccm_runtime::controllers::node_lifecycle::{
    APPROVED_ANNOTATION, NodeDeletionGuard, NodeLifecycleController, NodeLifecycleControllerConfig,
    REASON_DELETING_NODE, REASON_DELETION_HELD_BACK,
};
use ccm_runtime::controllers::node_ownership::NodeOwnership;
use ccm_runtime::metrics::NodeDeletionGuardMetrics;
use ccm_test::eventually;
use ccm_test::fixtures::taint_keys;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

const WAIT: Duration = Duration::from_secs(30);

fn start(h: &Harness) {
    start_with(h, NodeLifecycleControllerConfig::default());
}

/// Starts the controller with `config`, checking every 200 ms.
fn start_with(h: &Harness, config: NodeLifecycleControllerConfig) {
    start_provider(h, h.cloud.clone(), config);
}

/// Starts the controller for `provider` with `config`, checking every 200 ms.
fn start_provider(
    h: &Harness,
    provider: Arc<dyn CloudProvider>,
    config: NodeLifecycleControllerConfig,
) {
    let informer = h.node_informer();
    let controller = NodeLifecycleController::new(
        h.client.clone(),
        &provider,
        informer.clone(),
        config.with_monitor_period(Duration::from_millis(200)),
    )
    .expect("instances supported");
    h.start_informer(&informer);
    tokio::spawn(controller.run(h.cancel.clone()));
}

/// Creates an initialised Node (no taint) with the given Ready status.
async fn ready_node(h: &Harness, prefix: &str, ready: &str) -> String {
    let mut node = h.new_node(prefix);
    node.spec.as_mut().unwrap().taints = None;
    let name = node.metadata.name.clone().unwrap();
    h.create_node(&node).await;
    set_ready(h, &name, ready).await;
    name
}

async fn set_ready(h: &Harness, name: &str, ready: &str) {
    h.nodes()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test"}]}})),
        )
        .await
        .unwrap();
}

fn has_shutdown_taint(node: &k8s_openapi::api::core::v1::Node) -> bool {
    taint_keys(node).iter().any(|k| k == TAINT_SHUTDOWN)
}

#[tokio::test]
async fn a_not_ready_node_whose_instance_is_gone_is_deleted() {
    let h = Harness::new(FakeCloud::new()).await;
    let name = ready_node(&h, "gone", "False").await;
    h.cloud.add_instance(FakeInstance::new(&name));
    let keep = ready_node(&h, "ready-gone", "True").await;
    start(&h);

    // While the instance exists, nothing happens.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.nodes().get_opt(&name).await.unwrap().is_some());

    h.cloud.remove_instance(&name);
    h.wait_node_gone(&name, WAIT).await;
    let note = h.wait_event(&name, REASON_DELETING_NODE, WAIT).await;
    assert!(
        note.contains("does not exist in the cloud provider"),
        "{note}"
    );

    // A Ready Node is never deleted, whatever the cloud says.
    assert!(h.nodes().get_opt(&keep).await.unwrap().is_some());
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 1);
}

#[tokio::test]
async fn shutdown_taint_is_added_and_removed() {
    let h = Harness::new(FakeCloud::new()).await;
    let name = ready_node(&h, "shutdown", "Unknown").await;
    h.cloud.add_instance(FakeInstance::new(&name));
    h.cloud.power_off(&name);
    start(&h);

    let node = h.wait_node(&name, WAIT, has_shutdown_taint).await;
    let taint = node
        .spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .find(|t| t.key == TAINT_SHUTDOWN)
        .unwrap();
    assert_eq!(taint.effect, "NoSchedule");
    assert_eq!(taint.value, None);

    // Back on and Ready: the taint goes.
    h.cloud.power_on(&name);
    set_ready(&h, &name, "True").await;
    h.wait_node(&name, WAIT, |n| !has_shutdown_taint(n)).await;
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "a shut-down Node is not deleted"
    );
}

#[tokio::test]
async fn cloud_errors_never_delete_a_node() {
    let h = Harness::new(FakeCloud::new()).await;
    let name = ready_node(&h, "cloud-down", "False").await;
    h.cloud.inject(
        Method::InstanceExists,
        Fault::Error("cloud API down".into()),
    );
    start(&h);
    eventually("five existence checks", WAIT, || async {
        let asked = h.cloud.call_count(Method::InstanceExists);
        if asked >= 5 {
            Ok(())
        } else {
            Err(format!("the controller stopped asking after {asked}"))
        }
    })
    .await;
    assert!(
        h.nodes().get_opt(&name).await.unwrap().is_some(),
        "errors delete nothing"
    );
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 0);

    // InstanceNotFound from a modern provider is an error too, not an answer.
    h.cloud
        .inject(Method::InstanceExists, Fault::InstanceNotFound);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.nodes().get_opt(&name).await.unwrap().is_some());
}

#[tokio::test]
async fn excluded_nodes_are_left_alone() {
    let h = Harness::new(FakeCloud::new()).await;
    let mut node = h.new_node("excluded");
    node.spec.as_mut().unwrap().taints = None;
    node.metadata.labels.as_mut().unwrap().insert(
        LABEL_EXCLUDE_FROM_LIFECYCLE_MANAGEMENT.into(),
        "true".into(),
    );
    let name = node.metadata.name.clone().unwrap();
    h.create_node(&node).await;
    set_ready(&h, &name, "False").await;
    start(&h);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.nodes().get_opt(&name).await.unwrap().is_some());
    assert_eq!(h.cloud.call_count(Method::InstanceExists), 0);
}

#[tokio::test]
async fn legacy_instances_gone_by_name_delete_the_node() {
    let cloud = FakeCloud::new();
    cloud.set_instances_shape(InstancesShape::Legacy);
    let h = Harness::new(cloud).await;
    let name = ready_node(&h, "legacy-gone", "False").await;
    start(&h);
    // No instance of that name: instance_id says InstanceNotFound, which means gone.
    h.wait_node_gone(&name, WAIT).await;
    assert!(h.cloud.call_count(Method::InstanceId) >= 1);
}

/// A NotReady, initialised Node of this run with `provider_id` (if any) and, when
/// `labelled`, the label `example.com/cloud=fake`.
async fn not_ready_node(
    h: &Harness,
    prefix: &str,
    provider_id: Option<&str>,
    labelled: bool,
) -> String {
    let mut node = h.new_node(prefix);
    let name = node.metadata.name.clone().unwrap();
    let spec = node.spec.as_mut().unwrap();
    spec.taints = None;
    spec.provider_id = provider_id.map(|id| id.replace("{name}", &name));
    if labelled {
        node.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("example.com/cloud".into(), "fake".into());
    }
    h.create_node(&node).await;
    set_ready(h, &name, "False").await;
    name
}

#[tokio::test]
async fn nodes_that_are_not_this_cloud_s_are_never_deleted_or_tainted() {
    // A cloud with no instance at all: every Node below would be deleted by Go's
    // controller, and by ours without the flags.
    let h = Harness::new(FakeCloud::new()).await;
    let other_id = not_ready_node(&h, "other-id", Some("metal://rack-1/7"), true).await;
    // Initialised without a provider ID (a kubelet without --cloud-provider=external).
    let no_id = not_ready_node(&h, "no-id", None, true).await;
    let no_label = not_ready_node(&h, "no-label", Some("fake://{name}"), false).await;
    // Shut down in our cloud, but not ours by label: no shutdown taint either.
    let off = not_ready_node(&h, "no-label-off", Some("fake://{name}"), false).await;
    h.cloud.add_instance(FakeInstance::new(&off));
    h.cloud.power_off(&off);
    let ours = not_ready_node(&h, "ours", Some("fake://{name}"), true).await;

    let prefixes = ["fake://".to_owned()];
    start_with(
        &h,
        NodeLifecycleControllerConfig::default()
            .with_node_ownership(NodeOwnership::new(&prefixes, "example.com/cloud=fake").unwrap()),
    );

    // Ours goes, as in Go.
    h.wait_node_gone(&ours, WAIT).await;
    // More passes, then the others are all there, untainted, and never asked about.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in [&other_id, &no_id, &no_label, &off] {
        let node = h.nodes().get_opt(name).await.unwrap();
        let node = node.unwrap_or_else(|| panic!("{name} was deleted"));
        assert!(!has_shutdown_taint(&node), "{name}");
        assert!(h.events_about(name).await.is_empty(), "{name}: no event");
    }
    let asked: HashSet<String> = h.cloud.calls().into_iter().map(|c| c.target).collect();
    assert_eq!(asked, HashSet::from([ours.clone()]));
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 1);
}

/// The guard's settings as `--node-deletion-guard` takes them.
fn guard(value: &str) -> NodeDeletionGuard {
    value.parse().unwrap()
}

/// `n` NotReady Nodes named `prefix-…`, in the order of their names.
async fn not_ready_nodes(h: &Harness, prefix: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..n {
        names.push(ready_node(h, &format!("{prefix}-{i:02}"), "False").await);
    }
    names.sort();
    names
}

/// Waits until the cloud has been asked `at_least` times in all, as `calls` counts (a few
/// passes).
async fn wait_asked(calls: impl Fn() -> u64, at_least: u64) {
    eventually("the controller to ask the cloud", WAIT, || async {
        let asked = calls();
        if asked >= at_least {
            Ok(())
        } else {
            Err(format!("asked {asked} times"))
        }
    })
    .await;
}

/// Waits until the guard holds back `held` Nodes for `reason`.
async fn wait_held(metrics: &NodeDeletionGuardMetrics, reason: &str, held: i64) {
    eventually(
        &format!("{held} nodes held back ({reason})"),
        WAIT,
        || async {
            let now = metrics.held_back(reason);
            if now == held {
                Ok(())
            } else {
                Err(format!("{now} held back"))
            }
        },
    )
    .await;
}

async fn existing(h: &Harness, names: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    for name in names {
        if h.nodes().get_opt(name).await.unwrap().is_some() {
            left.push(name.clone());
        }
    }
    left
}

#[tokio::test]
async fn a_cloud_that_suddenly_reports_every_instance_gone_deletes_at_most_the_bound() {
    let h = Harness::new(FakeCloud::new()).await;
    let names = not_ready_nodes(&h, "all-gone", 10).await;
    for name in &names {
        h.cloud.add_instance(FakeInstance::new(name));
    }
    let metrics = NodeDeletionGuardMetrics::default();
    start_with(
        &h,
        NodeLifecycleControllerConfig::default().with_metrics(metrics.clone()),
    );
    wait_asked(|| h.cloud.call_count(Method::InstanceExists), 20).await;
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 0);

    // Every machine gone at once, as far as the cloud says. A pass may see part of them
    // gone while they are removed: then it deletes within the budget (1 of 10 Nodes), never
    // more; the next one sees more than half of them gone and stops.
    for name in &names {
        h.cloud.remove_instance(name);
    }
    eventually("every Node not deleted held back (stop)", WAIT, || async {
        let held = metrics.held_back("stop");
        let deleted = h.api.counters().count("DELETE", "nodes");
        if held > 0 && u64::try_from(held).unwrap() + deleted == 10 {
            Ok(())
        } else {
            Err(format!("{held} held back, {deleted} deleted"))
        }
    })
    .await;
    assert_eq!(metrics.trips("stop"), 1);

    // It keeps watching and still deletes nothing.
    let asked = h.cloud.call_count(Method::InstanceExists);
    wait_asked(|| h.cloud.call_count(Method::InstanceExists), asked + 30).await;
    let deleted = h.api.counters().count("DELETE", "nodes");
    assert!(deleted <= 1, "at most the budget, 1 of 10: {deleted}");
    let left = existing(&h, &names).await;
    assert_eq!(left.len(), 10 - usize::try_from(deleted).unwrap());
    for name in &left {
        let event = h
            .events_about(name)
            .await
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(REASON_DELETION_HELD_BACK)
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("gone at once"))
            })
            .unwrap_or_else(|| panic!("{name}: no held-back Event of the stop"));
        let note = event.message.unwrap_or_default();
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.count, Some(1), "one Event a Node, not one a pass");
        let gone = format!(
            "reports {} of the cloud's {} Nodes gone",
            left.len(),
            left.len()
        );
        assert!(note.contains(&gone), "{note}");
        assert!(
            note.contains(APPROVED_ANNOTATION),
            "the Event says how to approve: {note}"
        );
    }

    // The cloud answers right again: the guard resets by itself...
    for name in &left {
        h.cloud.add_instance(FakeInstance::new(name));
    }
    wait_held(&metrics, "stop", 0).await;
    // ...and a machine really gone later is deleted as usual.
    h.cloud.remove_instance(&left[0]);
    h.wait_node_gone(&left[0], WAIT).await;
    assert_eq!(existing(&h, &left).await.len(), left.len() - 1);
    assert_eq!(metrics.trips("stop"), 1);
}

/// What the listing cloud's HTTP API answers to `GET /v1/instances`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListAnswer {
    /// 200 with every instance.
    Right,
    /// 200 with an empty list, as Linode's API did in linode-cloud-controller-manager #570.
    EmptyWithSuccess,
    /// 500.
    ServerError,
}

/// A cloud API on 127.0.0.1: `GET /v1/instances` answers `{"instances": [names]}`, or what
/// `answer` says.
struct ListingApi {
    instances: parking_lot::Mutex<Vec<String>>,
    answer: parking_lot::Mutex<ListAnswer>,
    lists: std::sync::atomic::AtomicU64,
}

impl ListingApi {
    /// Serves `instances` on a free port of 127.0.0.1 until the test's runtime ends.
    async fn serve(instances: Vec<String>) -> (Arc<Self>, u16) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let api = Arc::new(Self {
            instances: parking_lot::Mutex::new(instances),
            answer: parking_lot::Mutex::new(ListAnswer::Right),
            lists: std::sync::atomic::AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = api.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let api = server.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    api.lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let (status, body) = match *api.answer.lock() {
                        ListAnswer::Right => (
                            "200 OK",
                            json!({"instances": *api.instances.lock()}).to_string(),
                        ),
                        ListAnswer::EmptyWithSuccess => {
                            ("200 OK", json!({"instances": []}).to_string())
                        }
                        ListAnswer::ServerError => ("500 Internal Server Error", "{}".to_owned()),
                    };
                    let response = format!(
                        "HTTP/1.0 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (api, port)
    }

    fn set_answer(&self, answer: ListAnswer) {
        *self.answer.lock() = answer;
    }

    fn lists(&self) -> u64 {
        self.lists.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A provider that answers `instance_exists` as list-based ones do (Linode's, the DO-like
/// cloud's for Nodes without a provider ID): it lists the instances over HTTP and looks for
/// the Node's name. A status other than 200 is an error; a 200 is believed.
struct ListingCloud {
    port: u16,
}

impl CloudProvider for ListingCloud {
    fn provider_name(&self) -> &str {
        "listing"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }

    fn instances(&self) -> Option<&dyn ccm_provider::Instances> {
        Some(self)
    }
}

#[ccm_provider::async_trait]
impl ccm_provider::Instances for ListingCloud {
    async fn instance_exists(
        &self,
        node: &k8s_openapi::api::core::v1::Node,
    ) -> ccm_provider::CloudResult<bool> {
        let (status, body) = ccm_test::net::http_get(self.port, "/v1/instances").await;
        if status != 200 {
            return Err(ccm_provider::CloudError::msg(format!(
                "listing instances: HTTP {status}: {body}"
            )));
        }
        let list: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| ccm_provider::CloudError::msg(format!("listing instances: {e}")))?;
        let name = node.metadata.name.as_deref().unwrap_or_default();
        Ok(list["instances"]
            .as_array()
            .is_some_and(|names| names.iter().any(|n| n == name)))
    }

    async fn instance_shutdown(
        &self,
        _node: &k8s_openapi::api::core::v1::Node,
    ) -> ccm_provider::CloudResult<bool> {
        Ok(false)
    }

    async fn instance_metadata(
        &self,
        _node: &k8s_openapi::api::core::v1::Node,
    ) -> ccm_provider::CloudResult<Option<ccm_provider::InstanceMetadata>> {
        Ok(None)
    }
}

#[tokio::test]
async fn a_cloud_whose_list_answers_empty_with_success_deletes_nothing() {
    let h = Harness::new(FakeCloud::new()).await;
    let names = not_ready_nodes(&h, "empty-list", 8).await;
    let keep = ready_node(&h, "empty-list-ready", "True").await;
    let (api, port) =
        ListingApi::serve(names.iter().cloned().chain([keep.clone()]).collect()).await;
    let metrics = NodeDeletionGuardMetrics::default();
    start_provider(
        &h,
        Arc::new(ListingCloud { port }),
        NodeLifecycleControllerConfig::default().with_metrics(metrics.clone()),
    );
    wait_asked(|| api.lists(), 16).await;

    // An error is not an answer: nothing is gone, nothing is held back.
    api.set_answer(ListAnswer::ServerError);
    let lists = api.lists();
    wait_asked(|| api.lists(), lists + 16).await;
    assert_eq!(metrics.held_back("stop") + metrics.held_back("budget"), 0);

    // 200 with no instance at all: every NotReady Node looks gone.
    api.set_answer(ListAnswer::EmptyWithSuccess);
    wait_held(&metrics, "stop", 8).await;
    for name in &names {
        let note = h.wait_event(name, REASON_DELETION_HELD_BACK, WAIT).await;
        assert!(
            note.contains("reports 8 of the cloud's 9 Nodes gone"),
            "{note}"
        );
    }
    let lists = api.lists();
    wait_asked(|| api.lists(), lists + 24).await;
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 0);
    assert_eq!(existing(&h, &names).await, names);
    assert_eq!(metrics.trips("stop"), 1);

    // The list is right again: nothing was lost, and the guard has reset.
    api.set_answer(ListAnswer::Right);
    wait_held(&metrics, "stop", 0).await;
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 0);
    // A machine really removed from the list afterwards goes as usual.
    api.instances.lock().retain(|n| n != &names[0]);
    h.wait_node_gone(&names[0], WAIT).await;
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 1);
}

#[tokio::test]
async fn past_the_budget_deletions_wait_and_an_operator_can_approve_one() {
    let h = Harness::new(FakeCloud::new()).await;
    // None of these has an instance. Without the stop, the budget alone: 3 an hour.
    let names = not_ready_nodes(&h, "budget", 10).await;
    let metrics = NodeDeletionGuardMetrics::default();
    start_with(
        &h,
        NodeLifecycleControllerConfig::default()
            .with_deletion_guard(guard("max=3,window=1h,stop=off"))
            .with_metrics(metrics.clone()),
    );
    wait_held(&metrics, "budget", 7).await;
    let asked = h.cloud.call_count(Method::InstanceExists);
    wait_asked(|| h.cloud.call_count(Method::InstanceExists), asked + 30).await;
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 3);
    // The first 3 by name went (they have no NotReady time, so the name decides).
    assert_eq!(existing(&h, &names).await, names[3..]);
    let note = h
        .wait_event(&names[9], REASON_DELETION_HELD_BACK, WAIT)
        .await;
    assert!(
        note.contains(
            "3 Nodes were deleted in the last 1h0m0s (this pass's included) and the guard allows 3"
        ),
        "{note}"
    );
    assert_eq!(metrics.trips("budget"), 1);

    // An operator approves one: it goes at once, and does not count.
    h.nodes()
        .patch(
            &names[9],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {APPROVED_ANNOTATION: "true"}}})),
        )
        .await
        .unwrap();
    h.wait_node_gone(&names[9], WAIT).await;
    wait_held(&metrics, "budget", 6).await;
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 4);
    assert_eq!(existing(&h, &names).await, names[3..9]);
}

#[tokio::test]
async fn a_real_scale_down_of_many_nodes_still_completes() {
    let h = Harness::new(FakeCloud::new()).await;
    let mut staying = Vec::new();
    for i in 0..6 {
        let name = ready_node(&h, &format!("stay-{i}"), "True").await;
        h.cloud.add_instance(FakeInstance::new(&name));
        staying.push(name);
    }
    // 4 of the 10 machines really removed at once (their kubelets stopped): under the stop's
    // half, over the window's budget of 2.
    let going = not_ready_nodes(&h, "scaled-down", 4).await;
    let metrics = NodeDeletionGuardMetrics::default();
    start_with(
        &h,
        NodeLifecycleControllerConfig::default()
            .with_deletion_guard(guard("max=2,window=3s,stop=50%"))
            .with_metrics(metrics.clone()),
    );
    for name in &going {
        h.wait_node_gone(name, WAIT).await;
    }
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 4);
    assert_eq!(existing(&h, &staying).await, staying);
    // Two waited for the next window, once; no stop.
    assert_eq!(metrics.trips("budget"), 1);
    assert_eq!(metrics.trips("stop"), 0);
    wait_held(&metrics, "budget", 0).await;
    let mut held = Vec::new();
    for name in &going {
        if h.events_for(name)
            .await
            .iter()
            .any(|(_, r, _)| r == REASON_DELETION_HELD_BACK)
        {
            held.push(name.clone());
        }
    }
    assert_eq!(held, going[2..], "the last two by name waited");
}

#[tokio::test]
async fn shadow_mode_plans_held_back_deletions_as_refused() {
    let h = Harness::new(FakeCloud::new()).await;
    let names = not_ready_nodes(&h, "shadow-gone", 4).await;
    let shadow = ccm_runtime::shadow::Shadow::new();
    start_with(
        &h,
        NodeLifecycleControllerConfig::default().with_shadow(Some(
            shadow.for_controller("cloud-node-lifecycle-controller"),
        )),
    );
    // All 4 gone: past the stop, nothing to delete, every one refused in the plan.
    let planned = eventually("4 refused deletions in the plan", WAIT, || async {
        let changes = shadow.changes();
        if changes.len() == 4 {
            Ok(changes)
        } else {
            Err(format!("{changes:#?}"))
        }
    })
    .await;
    for (change, name) in planned.iter().zip(&names) {
        assert_eq!(change.action, ccm_runtime::shadow::Action::Refuse);
        assert_eq!(change.kind, "nodes");
        assert_eq!(&change.name, name);
        assert_eq!(change.request, format!("DELETE /api/v1/nodes/{name}"));
        assert!(change.why.contains("held back"), "{}", change.why);
    }
    assert_eq!(h.api.counters().count("DELETE", "nodes"), 0);
}

/// The value of the series `name{labels}` in a Prometheus text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_reaches_the_controller_and_its_metrics_are_served() {
    let h = Harness::new(FakeCloud::new()).await;
    // The fake cloud of the manager has no instance: all 3 are gone, as far as it says.
    let names = not_ready_nodes(&h, "flag", 3).await;
    let port = ccm_test::net::free_port();
    let ccm = FakeCcm::start(
        "{}\n",
        h.cp.kubeconfig_path(),
        &[
            "--leader-elect=false",
            "--controllers=cloud-node-lifecycle",
            "--node-monitor-period=200ms",
            // Only this test's Nodes are the cloud's: the API server is shared.
            &format!("--node-selector={}", h.label_selector()),
            "--node-deletion-guard=max=1,window=1h,stop=off",
            "--insecure-serving",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
        ],
    );
    let metrics = eventually("2 Nodes held back on /metrics", WAIT, || async {
        let (status, body) = ccm_test::net::http_get(port, "/metrics").await;
        let held = sample(&body, r#"ccm_node_deletions_held_back{reason="budget"}"#);
        if status == 200 && held == Some(2.0) {
            Ok(body)
        } else {
            Err(format!("HTTP {status}, held back {held:?}"))
        }
    })
    .await;
    assert_eq!(
        sample(
            &metrics,
            r#"ccm_node_deletion_guard_trips_total{reason="budget"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, r#"ccm_node_deletions_held_back{reason="stop"}"#),
        Some(0.0)
    );
    // The gauge is set before the pass's deletion is sent: wait for it.
    h.wait_node_gone(&names[0], WAIT).await;
    assert_eq!(existing(&h, &names).await, names[1..]);
    ccm.stop(WAIT).await;
}
