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
    NodeLifecycleController, NodeLifecycleControllerConfig, REASON_DELETING_NODE,
};
use ccm_runtime::controllers::node_ownership::NodeOwnership;
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
    let informer = h.node_informer();
    let provider: Arc<dyn CloudProvider> = h.cloud.clone();
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
