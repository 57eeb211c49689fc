//! The cloud-node controller against a real kube-apiserver + etcd, with the fake cloud.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ccm_fake_cloud::{FakeCloud, FakeInstance, Fault, InstancesShape, Method};
use ccm_provider::well_known::{
    ANNOTATION_PROVIDED_NODE_IP, LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA, LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE,
};
use ccm_provider::{CloudProvider, node_address};
use ccm_runtime::controllers::node::{
    CloudNodeController, CloudNodeControllerConfig, REASON_INITIALIZATION_FAILED,
    REASON_INVALID_NODE_PROVIDER_ID, REASON_SYNCED, REASON_UNUSUAL_NODE_ADDRESS,
};
use ccm_runtime::controllers::node_ownership::NodeOwnership;
use ccm_test::eventually;
use ccm_test::fixtures::{addresses, is_initialized, label, own_taint_keys, provider_id};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

const WAIT: Duration = Duration::from_secs(30);

fn start(h: &Harness, config: CloudNodeControllerConfig) {
    start_with_client(h, h.client.clone(), config);
}

/// [`start`], the controller writing with `client` (its informer reads with the harness's).
fn start_with_client(h: &Harness, client: kube::Client, config: CloudNodeControllerConfig) {
    let informer = h.node_informer();
    let provider: Arc<dyn CloudProvider> = h.cloud.clone();
    let controller = CloudNodeController::new(client, &provider, informer.clone(), config)
        .expect("instances supported");
    h.start_informer(&informer);
    let cancel = h.cancel.clone();
    tokio::spawn(controller.run(cancel));
}

/// A new (not yet created) Node of this run, named after `prefix`, and its name.
fn new_node(h: &Harness, prefix: &str) -> (Node, String) {
    let node = h.new_node(prefix);
    let name = node.metadata.name.clone().unwrap();
    (node, name)
}

/// A harness over `cloud`, and a new (not yet created) Node of its run with its name.
async fn harness_with_node(cloud: FakeCloud, prefix: &str) -> (Harness, Node, String) {
    let h = Harness::new(cloud).await;
    let (node, name) = new_node(&h, prefix);
    (h, node, name)
}

/// How many times the controller asked the cloud for an instance's metadata.
fn metadata_calls(h: &Harness) -> u64 {
    h.cloud.call_count(Method::InstanceMetadata)
}

/// Creates a Node of this run, named after `prefix`, as a kubelet registers it; returns its
/// name.
async fn create_node(h: &Harness, prefix: &str) -> String {
    let (node, name) = new_node(h, prefix);
    h.create_node(&node).await;
    name
}

/// Sets the Node's status addresses to `addresses` (type, address), as a kubelet reports
/// them.
async fn report_addresses(h: &Harness, name: &str, addresses: &[(&str, &str)]) {
    let addresses: Vec<_> = addresses
        .iter()
        .map(|(type_, address)| json!({"type": type_, "address": address}))
        .collect();
    let patch = json!({"status": {"addresses": addresses}});
    h.nodes()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// (type, address) pairs as [`addresses`] returns them.
fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// Creates a Node (named after `prefix`), starts the controller and waits for the Node's
/// InitializationFailed warning; asserts that the taint stays. Returns the Node's name, the
/// warning's note, and the Node as it is then.
async fn initialization_fails(h: &Harness, prefix: &str) -> (String, String, Node) {
    let name = create_node(h, prefix).await;
    start(h, fast());
    let note = h
        .wait_event(&name, REASON_INITIALIZATION_FAILED, WAIT)
        .await;
    let node = h.nodes().get(&name).await.unwrap();
    assert!(!is_initialized(&node), "the taint stays");
    (name, note, node)
}

/// Lets the cloud answer as it does by default and waits until the Node `name` is
/// initialised, with the fake cloud's provider ID.
async fn initialized_once_the_cloud_answers(h: &Harness, name: &str) {
    h.cloud.set_metadata_hook(None);
    let node = h.wait_node(name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node), Some(format!("fake://{name}")));
}

fn fast() -> CloudNodeControllerConfig {
    CloudNodeControllerConfig::default().with_workers(4)
}

#[tokio::test]
async fn initializes_a_node_in_three_requests() {
    let (h, mut node, name) = harness_with_node(FakeCloud::nodes_are_instances(), "init").await;
    node.spec.as_mut().unwrap().taints.as_mut().unwrap().insert(
        0,
        Taint {
            key: "example.com/keep-me".into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        },
    );
    h.cloud.add_instance(
        FakeInstance::new(&name)
            .with_id("i-42")
            .with_type("fake-large")
            .with_zone("zone-b", "region-2")
            .with_addresses(vec![
                node_address("InternalIP", "10.1.2.3"),
                node_address("ExternalIP", "203.0.113.9"),
            ]),
    );
    h.create_node(&node).await;
    // The kubelet reports its hostname.
    report_addresses(&h, &name, &[("Hostname", "host-1")]).await;
    start(&h, fast());

    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node).as_deref(), Some("fake://i-42"));
    assert_eq!(
        own_taint_keys(&node),
        vec!["example.com/keep-me"],
        "other taints are kept"
    );
    for (key, want) in [
        (LABEL_INSTANCE_TYPE, "fake-large"),
        (LABEL_INSTANCE_TYPE_BETA, "fake-large"),
        (LABEL_TOPOLOGY_ZONE, "zone-b"),
        (LABEL_FAILURE_DOMAIN_BETA_ZONE, "zone-b"),
        (LABEL_TOPOLOGY_REGION, "region-2"),
        (LABEL_FAILURE_DOMAIN_BETA_REGION, "region-2"),
    ] {
        assert_eq!(label(&node, key), Some(want), "{key}");
    }
    assert_eq!(
        addresses(&node),
        owned(&[
            ("InternalIP", "10.1.2.3"),
            ("ExternalIP", "203.0.113.9"),
            ("Hostname", "host-1"),
        ]),
        "addresses are written, and the kubelet's Hostname kept"
    );
    h.wait_event(&name, REASON_SYNCED, WAIT).await;

    // One status patch, one patch of the Node, one event: nothing else was written.
    assert_eq!(h.api.counters().count("PATCH", "nodes/status"), 1);
    assert_eq!(h.api.counters().count("PATCH", "nodes"), 1);
    assert_eq!(h.api.counters().count("POST", "events"), 1);
    assert_eq!(
        h.api.counters().count("GET", "nodes"),
        0,
        "no re-read: the watch cache suffices"
    );
    assert_eq!(metadata_calls(&h), 1);
}

#[tokio::test]
async fn many_nodes_are_initialized_once_each() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    start(&h, fast());
    let mut names = Vec::new();
    for _ in 0..20 {
        let node = h.new_node("many");
        names.push(node.metadata.name.clone().unwrap());
        h.create_node(&node).await;
    }
    for name in &names {
        let node = h.wait_node(name, WAIT, is_initialized).await;
        assert_eq!(provider_id(&node), Some(format!("fake://{name}")));
    }
    assert_eq!(metadata_calls(&h), 20, "one metadata call per Node");
    assert_eq!(h.api.counters().count("PATCH", "nodes"), 20);
}

#[tokio::test]
async fn existing_provider_id_is_kept() {
    let (h, mut node, name) = harness_with_node(FakeCloud::nodes_are_instances(), "keep-id").await;
    node.spec.as_mut().unwrap().provider_id = Some("fake://from-kubelet".into());
    h.create_node(&node).await;
    start(&h, fast());
    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node).as_deref(), Some("fake://from-kubelet"));
    // The cloud was asked about the instance the Node names.
    assert_eq!(
        h.cloud.instance("from-kubelet").map(|i| i.id),
        Some("from-kubelet".to_owned())
    );
}

#[tokio::test]
async fn no_provider_id_anywhere_keeps_the_taint_and_retries() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    h.cloud.set_metadata_hook(Some(Arc::new(|_, mut meta| {
        meta.provider_id.clear();
        Ok(Some(meta))
    })));
    let (name, note, node) = initialization_fails(&h, "no-id").await;
    assert!(note.contains("does not set node provider ID"), "{note}");
    assert_eq!(provider_id(&node), None);

    // Retried with backoff: once the cloud answers properly, the Node is initialised.
    initialized_once_the_cloud_answers(&h, &name).await;
    assert!(metadata_calls(&h) >= 2);
}

#[tokio::test]
async fn nil_metadata_leaves_the_node_alone() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    h.cloud.set_metadata_hook(Some(Arc::new(|_, _| Ok(None))));
    let name = create_node(&h, "nil-meta").await;
    start(&h, fast());
    eventually("the controller to ask the cloud", WAIT, || async {
        metadata_calls(&h) > 0
    })
    .await;
    // Then nothing more for a while: not a wait for something to happen.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let node = h.nodes().get(&name).await.unwrap();
    assert!(!is_initialized(&node));
    assert_eq!(metadata_calls(&h), 1, "no requeue");
    assert_eq!(h.api.counters().count("PATCH", "nodes"), 0);
}

#[tokio::test]
async fn invalid_provided_node_ip_keeps_the_taint_with_a_warning() {
    let (h, mut node, name) = harness_with_node(FakeCloud::new(), "bad-ip").await;
    // The cloud knows the instance by other addresses than the kubelet was given.
    h.cloud.add_instance(
        FakeInstance::new(&name).with_addresses(vec![node_address("InternalIP", "10.0.0.1")]),
    );
    node.metadata.annotations = Some(
        [(
            ANNOTATION_PROVIDED_NODE_IP.to_owned(),
            "192.0.2.99".to_owned(),
        )]
        .into(),
    );
    h.create_node(&node).await;
    start(&h, fast());
    let note = h
        .wait_event(&name, REASON_INITIALIZATION_FAILED, WAIT)
        .await;
    assert!(note.contains("provided node ip"), "{note}");
    assert!(note.contains("192.0.2.99"), "{note}");
    let node = h.nodes().get(&name).await.unwrap();
    assert!(!is_initialized(&node));
    assert!(addresses(&node).is_empty(), "nothing was written");
}

#[tokio::test]
async fn provided_node_ip_is_put_first() {
    let (h, mut node, name) = harness_with_node(FakeCloud::new(), "node-ip").await;
    node.metadata.annotations = Some(
        [(
            ANNOTATION_PROVIDED_NODE_IP.to_owned(),
            "10.0.0.2".to_owned(),
        )]
        .into(),
    );
    h.cloud
        .add_instance(FakeInstance::new(&name).with_addresses(vec![
            node_address("InternalIP", "10.0.0.1"),
            node_address("InternalIP", "10.0.0.2"),
            node_address("ExternalIP", "203.0.113.2"),
        ]));
    h.create_node(&node).await;
    start(&h, fast());
    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(
        addresses(&node),
        owned(&[("InternalIP", "10.0.0.2"), ("ExternalIP", "203.0.113.2")])
    );
}

#[tokio::test]
async fn additional_labels_are_filtered_and_never_overwrite() {
    let (h, mut node, name) = harness_with_node(FakeCloud::new(), "labels").await;
    node.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("example.com/pool".into(), "set-by-user".into());
    h.cloud.add_instance(
        FakeInstance::new(&name)
            .with_label("example.com/pool", "from-cloud")
            .with_label("example.com/rack", "r7")
            .with_label("kubernetes.io/arch", "sneaky")
            .with_label("node.k8s.io/x", "sneaky"),
    );
    h.create_node(&node).await;
    start(&h, fast());
    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(label(&node, "example.com/pool"), Some("set-by-user"));
    assert_eq!(label(&node, "example.com/rack"), Some("r7"));
    assert_eq!(label(&node, "kubernetes.io/arch"), None);
    assert_eq!(label(&node, "node.k8s.io/x"), None);
}

#[tokio::test]
async fn addresses_are_refreshed_periodically() {
    let (h, node, name) = harness_with_node(FakeCloud::new(), "refresh").await;
    h.cloud.add_instance(
        FakeInstance::new(&name).with_addresses(vec![node_address("InternalIP", "10.5.0.1")]),
    );
    h.create_node(&node).await;
    report_addresses(&h, &name, &[("Hostname", "host-r")]).await;
    start(
        &h,
        fast().with_status_update_frequency(Duration::from_millis(500)),
    );
    h.wait_node(&name, WAIT, is_initialized).await;

    h.cloud
        .set_addresses(&name, vec![node_address("InternalIP", "10.5.0.2")]);
    let node = h
        .wait_node(&name, WAIT, |n| {
            addresses(n).first().map(|a| a.1.as_str()) == Some("10.5.0.2")
        })
        .await;
    assert_eq!(
        addresses(&node),
        owned(&[("InternalIP", "10.5.0.2"), ("Hostname", "host-r")]),
        "the Hostname the cloud omits is kept"
    );
    // Unchanged addresses are not rewritten.
    let writes = h.api.counters().count("PATCH", "nodes/status");
    let calls = metadata_calls(&h);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(metadata_calls(&h) > calls, "the loop kept asking");
    assert_eq!(
        h.api.counters().count("PATCH", "nodes/status"),
        writes,
        "no write without a change"
    );
}

#[tokio::test]
async fn cloud_errors_are_retried_with_warnings() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    h.cloud.inject_times(
        Method::InstanceMetadata,
        Fault::Error("cloud API unavailable".into()),
        3,
    );
    let name = create_node(&h, "flaky").await;
    start(&h, fast());
    h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(metadata_calls(&h), 4);
    // Events are written behind the Node's writes: the Node may be initialised first.
    h.wait_event(&name, REASON_INITIALIZATION_FAILED, WAIT)
        .await;
    let events = h.events_for(&name).await;
    let warning = events
        .iter()
        .find(|(t, r, _)| t == "Warning" && r == REASON_INITIALIZATION_FAILED)
        .expect("a warning event");
    assert!(warning.2.contains("cloud API unavailable"), "{warning:?}");
}

#[tokio::test]
async fn odd_addresses_from_the_cloud_are_written_with_a_warning() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    // What Go writes as it is: a name as an InternalIP, a type it does not define; and a
    // repeat, which the API server would refuse (written once).
    h.cloud.set_metadata_hook(Some(Arc::new(|_, meta| {
        Ok(Some(
            meta.with_address(node_address("InternalIP", "ip-10-0-0-9.internal"))
                .with_address(node_address("PrivateDNS", "vm-9.cloud"))
                .with_address(node_address("PrivateDNS", "vm-9.cloud")),
        ))
    })));
    let name = create_node(&h, "odd-addr").await;
    start(&h, fast());

    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node), Some(format!("fake://{name}")));
    let written = addresses(&node);
    for want in [
        ("InternalIP", "ip-10-0-0-9.internal"),
        ("PrivateDNS", "vm-9.cloud"),
    ] {
        let count = written
            .iter()
            .filter(|(t, a)| (t.as_str(), a.as_str()) == want)
            .count();
        assert_eq!(count, 1, "{want:?} in {written:?}");
    }
    let note = h.wait_event(&name, REASON_UNUSUAL_NODE_ADDRESS, WAIT).await;
    assert!(
        note.contains("not an IP") || note.contains("unknown type") || note.contains("twice"),
        "{note}"
    );
    eventually("a warning for each odd address", WAIT, || async {
        let notes: Vec<String> = h
            .events_for(&name)
            .await
            .into_iter()
            .filter(|(t, r, _)| t == "Warning" && r == REASON_UNUSUAL_NODE_ADDRESS)
            .map(|(_, _, n)| n)
            .collect();
        let all = notes.join("\n");
        if [
            "ip-10-0-0-9.internal",
            "unknown type \"PrivateDNS\"",
            "twice",
        ]
        .iter()
        .all(|s| all.contains(s))
        {
            Ok(())
        } else {
            Err(all)
        }
    })
    .await;
    assert!(
        h.events_for(&name)
            .await
            .iter()
            .all(|(_, r, _)| r != REASON_INITIALIZATION_FAILED),
        "never refused"
    );
}

#[tokio::test]
async fn a_kubelet_s_provider_id_without_a_scheme_is_kept_and_the_node_initialized() {
    // A legacy provider, which finds the instance by name when the provider ID is of no use
    // (as Go's `getNodeAddressesByProviderIDOrName`).
    let cloud = FakeCloud::new();
    cloud.set_instances_shape(InstancesShape::Legacy);
    let (h, mut node, name) = harness_with_node(cloud, "no-scheme").await;
    node.spec.as_mut().unwrap().provider_id = Some("no-scheme-id".into());
    h.cloud.add_instance(
        FakeInstance::new(&name)
            .with_type("old")
            .with_addresses(vec![node_address("InternalIP", "10.6.0.1")]),
    );
    h.create_node(&node).await;
    start(&h, fast());

    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node).as_deref(), Some("no-scheme-id"), "kept");
    assert_eq!(label(&node, LABEL_INSTANCE_TYPE), Some("old"));
    assert_eq!(addresses(&node), owned(&[("InternalIP", "10.6.0.1")]));
    let note = h
        .wait_event(&name, REASON_INVALID_NODE_PROVIDER_ID, WAIT)
        .await;
    assert!(note.contains("\"no-scheme-id\""), "{note}");
    h.wait_event(&name, REASON_SYNCED, WAIT).await;
}

#[tokio::test]
async fn a_malformed_provider_id_from_the_cloud_keeps_the_taint() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    h.cloud.set_metadata_hook(Some(Arc::new(|_, mut meta| {
        meta.provider_id = "fake:/half-a-scheme".into();
        Ok(Some(meta))
    })));
    let (name, note, node) = initialization_fails(&h, "bad-id").await;
    assert!(note.contains("fake:/half-a-scheme"), "{note}");
    assert_eq!(
        provider_id(&node),
        None,
        "nothing written to the immutable field"
    );
    assert!(
        label(&node, LABEL_TOPOLOGY_ZONE).is_none(),
        "nothing written"
    );
    // Once the cloud answers properly, the Node is initialised.
    initialized_once_the_cloud_answers(&h, &name).await;
}

#[tokio::test]
async fn addresses_are_refreshed_at_start_not_one_period_later() {
    let h = Harness::new(FakeCloud::new()).await;
    // A Node initialised before a restart, whose addresses changed in the cloud meanwhile.
    let (mut node, name) = new_node(&h, "restart");
    node.spec.as_mut().unwrap().taints = None;
    node.spec.as_mut().unwrap().provider_id = Some(format!("fake://{name}"));
    h.create_node(&node).await;
    report_addresses(
        &h,
        &name,
        &[("InternalIP", "10.7.0.1"), ("Hostname", "host-s")],
    )
    .await;
    h.cloud.add_instance(
        FakeInstance::new(&name).with_addresses(vec![node_address("InternalIP", "10.7.0.2")]),
    );
    // The default period: 5 minutes, far beyond the wait.
    start(&h, fast());
    let node = h
        .wait_node(&name, Duration::from_secs(20), |n| {
            addresses(n).first().map(|a| a.1.as_str()) == Some("10.7.0.2")
        })
        .await;
    assert_eq!(
        addresses(&node),
        owned(&[("InternalIP", "10.7.0.2"), ("Hostname", "host-s")])
    );
    assert_eq!(metadata_calls(&h), 1, "one pass");
}

#[tokio::test]
async fn legacy_instances_with_zones_initialize_nodes() {
    let cloud = FakeCloud::new();
    cloud.set_instances_shape(InstancesShape::Legacy);
    let (h, node, name) = harness_with_node(cloud, "legacy").await;
    h.cloud.add_instance(
        FakeInstance::new(&name)
            .with_id("v1-7")
            .with_type("old")
            .with_zone("za", "ra"),
    );
    h.create_node(&node).await;
    start(&h, fast());
    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node).as_deref(), Some("fake://v1-7"));
    assert_eq!(label(&node, LABEL_INSTANCE_TYPE), Some("old"));
    assert_eq!(label(&node, LABEL_TOPOLOGY_ZONE), Some("za"));
    assert_eq!(label(&node, LABEL_TOPOLOGY_REGION), Some("ra"));
    assert_eq!(metadata_calls(&h), 0, "the legacy shape was used");
}

#[tokio::test]
async fn initialized_nodes_get_ga_labels_from_beta_ones() {
    let (h, mut node, name) = harness_with_node(FakeCloud::nodes_are_instances(), "beta").await;
    node.spec.as_mut().unwrap().taints = None;
    node.metadata.labels.as_mut().unwrap().extend([
        (
            LABEL_FAILURE_DOMAIN_BETA_ZONE.to_owned(),
            "old-zone".to_owned(),
        ),
        (LABEL_TOPOLOGY_ZONE.to_owned(), "stale".to_owned()),
    ]);
    h.create_node(&node).await;
    start(&h, fast());
    let node = h
        .wait_node(&name, WAIT, |n| {
            label(n, LABEL_TOPOLOGY_ZONE) == Some("old-zone")
        })
        .await;
    assert_eq!(
        label(&node, LABEL_FAILURE_DOMAIN_BETA_ZONE),
        Some("old-zone")
    );
    // The one cloud call is the address refresh at start, not an initialisation. (The
    // labels may be patched twice: the refresh's status write can reach the cache before
    // the labels patch does, and the Node is queued again.)
    assert!(metadata_calls(&h) <= 1);
    assert!(h.api.counters().count("PATCH", "nodes") <= 2);
    assert!(
        h.events_for(&name)
            .await
            .iter()
            .all(|(_, r, _)| r != REASON_SYNCED)
    );
}

/// While the cloud is slow to answer, someone adds a taint: it is kept, and the retry
/// reuses the cloud's answer. Returns the harness, to count the requests.
async fn concurrent_taint_change_is_kept(
    config: CloudNodeControllerConfig,
    prefix: &str,
) -> Harness {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    h.cloud.set_latency(Duration::from_millis(1500));
    let name = create_node(&h, prefix).await;
    start(&h, config);
    eventually("the controller to ask the cloud", WAIT, || async {
        metadata_calls(&h) > 0
    })
    .await;
    h.nodes()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "add", "path": "/spec/taints/-", "value": {"key": "example.com/added-meanwhile", "effect": "NoSchedule"}}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(own_taint_keys(&node), vec!["example.com/added-meanwhile"]);
    assert_eq!(metadata_calls(&h), 1, "the retry reused the answer");
    h
}

#[tokio::test]
async fn a_concurrent_taint_change_is_not_overwritten() {
    concurrent_taint_change_is_kept(fast(), "race").await;
}

#[tokio::test]
async fn a_node_without_labels_is_initialized_in_three_requests() {
    let (h, mut node, name) = harness_with_node(FakeCloud::nodes_are_instances(), "bare").await;
    node.metadata.labels = None;
    h.create_node(&node).await;
    // No labels to select on: watch this one Node by name.
    let informer = ccm_runtime::informer::Informer::new(
        kube::Api::all(h.client.clone()),
        kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}")),
        ccm_runtime::informer::trim_node,
    );
    let provider: Arc<dyn CloudProvider> = h.cloud.clone();
    let controller =
        CloudNodeController::new(h.client.clone(), &provider, informer.clone(), fast())
            .expect("instances supported");
    h.start_informer(&informer);
    tokio::spawn(controller.run(h.cancel.clone()));

    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(label(&node, LABEL_TOPOLOGY_ZONE), Some("zone-a"));
    h.wait_event(&name, REASON_SYNCED, WAIT).await;
    // The labels are added as a whole map guarded by the resourceVersion the status patch
    // returned: no conflict, no re-read.
    assert_eq!(h.api.counters().count("PATCH", "nodes/status"), 1);
    assert_eq!(h.api.counters().count("PATCH", "nodes"), 1);
    assert_eq!(h.api.counters().count("GET", "nodes"), 0);
}

/// Ownership by `prefixes` (`--node-provider-id-prefix`) and `selector` (`--node-selector`).
fn ownership(prefixes: &[&str], selector: &str) -> NodeOwnership {
    let prefixes: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
    NodeOwnership::new(&prefixes, selector).expect("valid flags")
}

const CLOUD_LABEL: &str = "example.com/cloud";

#[tokio::test]
async fn nodes_that_are_not_this_cloud_s_are_never_initialised_or_written() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    let labelled = |prefix: &str| {
        let (mut node, name) = new_node(&h, prefix);
        node.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(CLOUD_LABEL.into(), "fake".into());
        (node, name)
    };
    // Registered by its kubelet with another provider's ID (and the label).
    let (mut other_id, other_id_name) = labelled("other-id");
    other_id.spec.as_mut().unwrap().provider_id = Some("metal://rack-1/7".into());
    h.create_node(&other_id).await;
    // Without the ownership label.
    let unlabelled = create_node(&h, "no-label").await;
    // Initialised elsewhere: a beta zone label without its GA twin, another provider's ID.
    let (mut metal, metal_name) = labelled("metal-ready");
    metal.spec.as_mut().unwrap().taints = None;
    metal.spec.as_mut().unwrap().provider_id = Some("metal://rack-1/8".into());
    metal
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_FAILURE_DOMAIN_BETA_ZONE.into(), "rack-1".into());
    h.create_node(&metal).await;
    // Ours.
    let (ours, ours_name) = labelled("ours");
    h.create_node(&ours).await;

    start(
        &h,
        fast().with_node_ownership(ownership(&["fake://"], "example.com/cloud=fake")),
    );
    let node = h.wait_node(&ours_name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node), Some(format!("fake://{ours_name}")));

    // A moment more, then the others are as their kubelets registered them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in [&other_id_name, &unlabelled] {
        let node = h.nodes().get(name).await.unwrap();
        assert!(!is_initialized(&node), "{name} keeps its taint");
        assert!(h.events_about(name).await.is_empty(), "{name}: no event");
    }
    let metal = h.nodes().get(&metal_name).await.unwrap();
    assert_eq!(
        label(&metal, LABEL_TOPOLOGY_ZONE),
        None,
        "no GA twin written"
    );
    assert!(addresses(&metal).is_empty(), "no addresses refreshed");
    // The cloud was asked about our Node only (not even by the address refresh).
    let asked: Vec<String> = h.cloud.calls().into_iter().map(|c| c.target).collect();
    assert_eq!(asked, [ours_name.as_str()]);

    // The label added: the Node is ours, and initialised.
    h.nodes()
        .patch(
            &unlabelled,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {CLOUD_LABEL: "fake"}}})),
        )
        .await
        .unwrap();
    let node = h.wait_node(&unlabelled, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node), Some(format!("fake://{unlabelled}")));
}

#[tokio::test]
async fn without_ownership_flags_every_node_is_initialised_as_in_go() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    let unlabelled = create_node(&h, "go-no-label").await;
    start(&h, fast().with_node_ownership(ownership(&[], "")));
    h.wait_node(&unlabelled, WAIT, is_initialized).await;
}

fn protobuf_writes() -> CloudNodeControllerConfig {
    fast().with_protobuf_writes(true)
}

/// The Node as the API server holds it, untyped: every field it has, whether our types
/// know it or not.
async fn raw_node(h: &Harness, name: &str) -> serde_json::Value {
    let nodes: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(h.admin.clone(), &kube::api::ApiResource::erase::<Node>(&()));
    serde_json::to_value(nodes.get(name).await.expect("get node")).unwrap()
}

/// `node` without what initialising it writes (and what every write changes).
fn without_initialisation(mut node: serde_json::Value) -> serde_json::Value {
    for (part, field) in [
        ("metadata", "resourceVersion"),
        ("metadata", "managedFields"),
        ("metadata", "labels"),
        ("spec", "providerID"),
        ("spec", "taints"),
        ("status", "addresses"),
    ] {
        node[part].as_object_mut().unwrap().remove(field);
    }
    node
}

/// The controller's Node writes, (status patches, updates, patches), and no re-read.
fn assert_node_writes(h: &Harness, want: (u64, u64, u64)) {
    let c = h.api.counters();
    let got = (
        c.count("PATCH", "nodes/status"),
        c.count("PUT", "nodes"),
        c.count("PATCH", "nodes"),
    );
    assert_eq!(got, want, "(status patches, updates, patches)");
    assert_eq!(c.count("GET", "nodes"), 0, "no re-read");
}

/// Go's Node write, a protobuf update (PUT) of the whole Node, made from the Node's own
/// protobuf: the Node read back untyped (so whatever field the API server knows is compared,
/// of any Kubernetes version, known to k8s-openapi or not) is the Node before but for what
/// initialisation writes.
#[tokio::test]
async fn a_protobuf_update_keeps_every_field_of_the_node() {
    let (h, node, name) = harness_with_node(FakeCloud::nodes_are_instances(), "pb-put").await;
    let mut raw = serde_json::to_value(&node).unwrap();
    let extra = json!({
        "metadata": {
            "annotations": {"note": "ünïcödé ✓", "json": "{\"a\": [1, 2]}"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": "0b8a3c52-60b1-4d4a-9b0e-0d3f0e7c1a11", "controller": true, "blockOwnerDeletion": false}],
        },
        "spec": {
            "podCIDR": "10.244.9.0/24", "podCIDRs": ["10.244.9.0/24", "fd00:10:244:9::/64"],
            "unschedulable": true,
            "taints": [
                {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
                {"key": "example.com/kept", "effect": "NoExecute", "timeAdded": "2026-12-06T20:11:52Z"},
            ],
        },
    });
    for part in ["metadata", "spec"] {
        for (k, v) in extra[part].as_object().unwrap() {
            raw[part][k] = v.clone();
        }
    }
    let nodes: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(h.admin.clone(), &kube::api::ApiResource::erase::<Node>(&()));
    nodes
        .create(&Default::default(), &serde_json::from_value(raw).unwrap())
        .await
        .expect("create");
    let status = json!({"status": {
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110", "example.com/gpu": "0"},
        "allocatable": {"cpu": "1500m", "memory": "7.5Gi"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
             "lastHeartbeatTime": "2026-12-06T20:11:52Z", "lastTransitionTime": "2026-12-06T20:00:00Z"}],
        "addresses": [{"type": "Hostname", "address": "host-1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0",
            "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64", "swap": {"capacity": 1_073_741_824_i64}},
        "images": [{"names": ["registry.k8s.io/pause:3.10.2"], "sizeBytes": 321_000}],
        "volumesInUse": ["kubernetes.io/csi/a^b"],
        "runtimeHandlers": [{"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}],
        "features": {"supplementalGroupsPolicy": true},
    }});
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let before = raw_node(&h, &name).await;
    start(&h, protobuf_writes());

    let node = h.wait_node(&name, WAIT, is_initialized).await;
    h.wait_event(&name, REASON_SYNCED, WAIT).await;
    let after = raw_node(&h, &name).await;
    assert_eq!(
        without_initialisation(after.clone()),
        without_initialisation(before.clone()),
        "the update kept every field"
    );
    // What it wrote: the provider ID, the labels beside the old ones, the taint gone.
    assert_eq!(provider_id(&node), Some(format!("fake://{name}")));
    for (key, value) in before["metadata"]["labels"].as_object().unwrap() {
        assert_eq!(&after["metadata"]["labels"][key], value, "{key} kept");
    }
    assert_eq!(label(&node, LABEL_TOPOLOGY_ZONE), Some("zone-a"));
    assert!(own_taint_keys(&node).contains(&"example.com/kept".to_owned()));
    assert_eq!(
        after["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["key"] == "example.com/kept"),
        Some(
            &json!({"key": "example.com/kept", "effect": "NoExecute", "timeAdded": "2026-12-06T20:11:52Z"})
        )
    );
    assert_ne!(after["status"]["addresses"], before["status"]["addresses"]);
    // The update carried no managed fields: the API server kept the Node's and added ours.
    let managers = |node: &serde_json::Value| -> Vec<(String, String)> {
        node["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let s = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
                (s("manager"), s("subresource"))
            })
            .collect()
    };
    let (old, new) = (managers(&before), managers(&after));
    assert!(
        old.iter().all(|m| new.contains(m)),
        "{old:?} kept in {new:?}"
    );
    assert!(
        new.contains(&("cloud-node-controller".to_owned(), String::new())),
        "{new:?}"
    );
    // The status patch, then the update; no Node patch, no re-read.
    assert_node_writes(&h, (1, 1, 0));
    assert_eq!(h.api.counters().count("POST", "events"), 1);
}

/// A protobuf update conflicts with any change to the Node after the status write (as a
/// kubelet's status report landing between the CCM's two writes): the controller then
/// writes the guarded JSON Patch, and the change made meanwhile is kept.
#[tokio::test]
async fn a_conflicting_protobuf_update_falls_back_to_the_guarded_patch() {
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    let name = create_node(&h, "pb-conflict").await;
    // The controller's client: before each PUT of a Node, someone else annotates it.
    let (admin, base) = (h.admin.clone(), h.client.clone());
    let meddling = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (admin, base) = (admin.clone(), base.clone());
        async move {
            if req.method() == http::Method::PUT {
                let path = req.uri().path().to_owned();
                let node = path.rsplit('/').next().unwrap_or_default();
                let annotate =
                    json!({"metadata": {"annotations": {"example.com/meanwhile": "yes"}}});
                kube::Api::<Node>::all(admin)
                    .patch(node, &PatchParams::default(), &Patch::Merge(&annotate))
                    .await?;
            }
            base.send(req).await
        }
    });
    let client = kube::Client::new(meddling, "default");
    start_with_client(&h, client, protobuf_writes());

    let node = h.wait_node(&name, WAIT, is_initialized).await;
    assert_eq!(provider_id(&node), Some(format!("fake://{name}")));
    assert_eq!(label(&node, LABEL_TOPOLOGY_ZONE), Some("zone-a"));
    assert_eq!(
        node.metadata
            .annotations
            .unwrap_or_default()
            .get("example.com/meanwhile")
            .map(String::as_str),
        Some("yes")
    );
    h.wait_event(&name, REASON_SYNCED, WAIT).await;
    // The update conflicted once; the patch went through without a re-read.
    assert_node_writes(&h, (1, 1, 1));
}

/// As [`a_concurrent_taint_change_is_not_overwritten`], with protobuf updates: the taint
/// added while the cloud is asked is kept.
#[tokio::test]
async fn a_concurrent_taint_change_is_not_overwritten_by_a_protobuf_update() {
    let h = concurrent_taint_change_is_kept(protobuf_writes(), "pb-race").await;
    assert_eq!(h.api.counters().count("PUT", "nodes"), 1);
}

/// A role without `update` on Nodes (the least-privilege role of an earlier release): the
/// refused update falls back to the patch, and the next Node is patched without asking again.
#[tokio::test]
async fn a_role_without_update_falls_back_to_patches_for_good() {
    use ccm_test::rbac;
    let h = Harness::new(FakeCloud::nodes_are_instances()).await;
    let group = ccm_test::unique_name("no-update");
    let rules = vec![
        rbac::rule(&[""], &["nodes"], &["get", "list", "watch", "patch"]),
        rbac::rule(&[""], &["nodes/status"], &["patch"]),
        rbac::rule(&[""], &["events"], &["create", "patch"]),
    ];
    rbac::grant_cluster_role(&h.admin, &group, rules, rbac::group(&group))
        .await
        .unwrap();
    let base =
        h.cp.client_for_user("ccm-without-update", &[&group])
            .unwrap();
    // Counts the controller's updates.
    let puts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = {
        let puts = puts.clone();
        tower::service_fn(move |req: http::Request<kube::client::Body>| {
            if req.method() == http::Method::PUT {
                puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let base = base.clone();
            async move { base.send(req).await }
        })
    };
    let client = kube::Client::new(counted, "default");
    start_with_client(&h, client, protobuf_writes());

    for prefix in ["no-update-1", "no-update-2"] {
        let name = create_node(&h, prefix).await;
        let node = h.wait_node(&name, WAIT, is_initialized).await;
        assert_eq!(provider_id(&node), Some(format!("fake://{name}")));
    }
    assert_eq!(
        puts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one update refused, then patches only"
    );
}
