//! The service controller against a real kube-apiserver + etcd, with the fake cloud.
//!
//! Each test has its own namespace (its Services) and its own labelled Nodes, so the tests
//! of this binary share one control plane and run concurrently.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ccm_fake_cloud::{ANNOTATION_LOAD_BALANCER_NAME, FakeCloud, FakeLoadBalancer, Fault, Method};
use ccm_provider::well_known::{
    FINALIZER_LOAD_BALANCER_CLEANUP, LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS,
    TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER,
};
use ccm_provider::{CloudProvider, CloudResult, LoadBalancer, default_load_balancer_name};
use ccm_runtime::controllers::service::{
    LOAD_BALANCER_DEGRADED, LOAD_BALANCER_PROVISIONING, LOAD_BALANCER_SERVING, LoadBalancerClasses,
    MAX_SHARED_MEMBERS, NODE_SELECTOR_ANNOTATION, REASON_DELETED, REASON_DELETING, REASON_ENSURED,
    REASON_ENSURING, REASON_INVALID_NODE_SELECTOR, REASON_NOT_OWNED, REASON_SHARING_REFUSED,
    REASON_SYNC_FAILED, REASON_UNAVAILABLE, REASON_UPDATE_FAILED, REASON_UPDATED,
    SHARING_KEY_ANNOTATION, SHARING_KEY_APPLIED_ANNOTATION, ServiceController,
    ServiceControllerConfig, ServiceKey,
};
use ccm_runtime::metrics::{ControllerMetrics, Metrics};
use ccm_runtime::workqueue::{Queue, RateLimit};
use ccm_test::eventually;
use ccm_test::fixtures::{has_lb_finalizer, ingress_of};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const CLUSTER: &str = "ccm-test";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Fast settings for tests: small backoff, short debounce, no periodic node sync.
fn config() -> ServiceControllerConfig {
    ServiceControllerConfig::default()
        .with_workers(2)
        .with_cluster_name(CLUSTER)
        .with_rate_limit(RateLimit::exponential(ms(100), ms(2000)))
        .with_node_sync_debounce(ms(200))
        .with_node_sync_period(None)
}

/// A running controller with its own informers, stopped by `cancel` or by aborting `task`.
struct Running {
    queue: Queue<ServiceKey>,
    metrics: ControllerMetrics,
    registry: Metrics,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops the controller as a crash or a lost lease would: its future is dropped
    /// wherever it is, in the middle of a cloud call if need be.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        self.cancel.cancel();
    }
}

/// Starts a controller with its own informers, and returns once they have listed (so the
/// Services a test creates afterwards reach the controller as events, in order).
async fn start(
    h: &Harness,
    namespace: &str,
    provider: Arc<dyn CloudProvider>,
    config: ServiceControllerConfig,
) -> Running {
    let cancel = h.cancel.child_token();
    let services = h.service_informer(namespace);
    let nodes = h.node_informer();
    let registry = Metrics::new();
    let metrics = registry.controllers().clone();
    let controller = ServiceController::new(
        h.client.clone(),
        &provider,
        services.clone(),
        nodes.clone(),
        config.with_metrics(metrics.clone()),
    )
    .expect("load balancers supported");
    let queue = controller.queue().clone();
    h.run_service_informer(&services, cancel.clone());
    h.run_node_informer(&nodes, cancel.clone());
    let task = tokio::spawn(controller.run(cancel.clone()));
    let synced = tokio::time::timeout(WAIT, async {
        services.wait_synced().await && nodes.wait_synced().await
    });
    assert!(synced.await.expect("informers synced in time"));
    Running {
        queue,
        metrics,
        registry,
        cancel,
        task,
    }
}

/// How many node-sync passes ran, read from the exported metrics text.
fn node_sync_passes(ctl: &Running) -> u64 {
    let text = ctl.registry.encode();
    text.lines()
        .find_map(|l| l.strip_prefix("service_controller_nodesync_latency_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no nodesync latency count in:\n{text}"))
}

fn fake(h: &Harness) -> Arc<dyn CloudProvider> {
    h.cloud.clone()
}

/// A harness over a fake cloud of its own, and a namespace for the test's Services named
/// after `svc-<test>`.
async fn harness(test: &str) -> (Harness, String) {
    let h = Harness::new(FakeCloud::new()).await;
    let ns = h.cp.create_namespace(&format!("svc-{test}")).await.unwrap();
    (h, ns)
}

/// Creates the Service `web` in `ns`: a load balancer for port 80.
async fn create_web(h: &Harness, ns: &str) -> Service {
    create_service(h, ns, &lb_service("web", &[("http", 80)])).await
}

/// Creates the Service `web` and waits until its load balancer is ensured (it has an
/// ingress); returns it then.
async fn ensured_web(h: &Harness, ns: &str) -> Service {
    create_web(h, ns).await;
    h.wait_service(ns, "web", WAIT, has_ingress).await
}

/// The reasons of the events about `ns/name`.
async fn reasons_of(h: &Harness, ns: &str, name: &str) -> Vec<String> {
    let events = h.events_in(ns, name).await;
    events.into_iter().map(|(_, reason, _, _)| reason).collect()
}

async fn create_service(h: &Harness, ns: &str, svc: &Service) -> Service {
    h.services(ns)
        .create(&PostParams::default(), svc)
        .await
        .expect("create service")
}

async fn patch_service(h: &Harness, ns: &str, name: &str, patch: serde_json::Value) -> Service {
    h.services(ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch service")
}

/// A Node of this run with a provider ID.
async fn create_node(h: &Harness, prefix: &str) -> String {
    let mut node = h.new_node(prefix);
    let name = node.metadata.name.clone().unwrap();
    node.spec.as_mut().unwrap().provider_id = Some(format!("fake://{name}"));
    h.create_node(&node).await;
    name
}

/// Labels the Node `name` to be excluded from load balancers, with `value` (which excludes
/// it unless it is `false`).
async fn set_exclude_label(h: &Harness, name: &str, value: &str) {
    let labels = json!({LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: value});
    patch_node(h, name, json!({"metadata": {"labels": labels}})).await;
}

async fn patch_node(h: &Harness, name: &str, patch: serde_json::Value) {
    h.nodes()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch node");
}

fn lb_of(h: &Harness, svc: &Service) -> Option<FakeLoadBalancer> {
    h.cloud.load_balancer(&default_load_balancer_name(svc))
}

/// Waits until the fake cloud's load balancer of `svc` has exactly `nodes`.
async fn until_lb_nodes(h: &Harness, svc: &Service, nodes: &[&String]) {
    let mut want: Vec<String> = nodes.iter().map(|n| (*n).clone()).collect();
    want.sort();
    eventually(&format!("load balancer nodes {want:?}"), WAIT, || async {
        let got = lb_of(h, svc).map(|lb| lb.nodes.to_vec());
        if got.as_ref() == Some(&want) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// The fake cloud's calls of `method` about `ns/name`.
fn calls_for(h: &Harness, method: Method, ns: &str, name: &str) -> usize {
    let target = format!("{ns}/{name}");
    h.cloud
        .calls()
        .iter()
        .filter(|c| c.method == method && c.target == target)
        .count()
}

fn has_ingress(svc: &Service) -> bool {
    !ingress_of(svc).is_empty()
}

#[tokio::test]
async fn creates_a_load_balancer_then_follows_a_port_edit() {
    let (h, ns) = harness("create").await;
    let n1 = create_node(&h, "create").await;
    let n2 = create_node(&h, "create").await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    let created = create_web(&h, &ns).await;

    let svc = h.wait_service(&ns, "web", WAIT, has_ingress).await;
    assert!(has_lb_finalizer(&svc));
    let lb = lb_of(&h, &svc).expect("a load balancer named after the UID");
    assert_eq!(lb.cluster_name, CLUSTER);
    assert_eq!(lb.service, format!("{ns}/web"));
    let node_port = svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .node_port
        .unwrap();
    assert_eq!(lb.ports, vec![format!("TCP:80->{node_port}")]);
    let mut want_nodes = vec![n1.clone(), n2.clone()];
    want_nodes.sort();
    assert_eq!(
        *lb.nodes, want_nodes,
        "every eligible Node, readiness aside"
    );
    assert_eq!(ingress_of(&svc), vec![lb.ingress_ip.clone()]);
    assert_eq!(svc.metadata.uid, created.metadata.uid);
    h.wait_event_in(&ns, "web", REASON_ENSURING, WAIT).await;
    h.wait_event_in(&ns, "web", REASON_ENSURED, WAIT).await;
    assert_eq!(h.cloud.call_count(Method::EnsureLoadBalancer), 1);
    assert_eq!(h.cloud.call_count(Method::UpdateLoadBalancer), 0);
    assert_eq!(
        h.api.counters().count("PATCH", "services"),
        1,
        "the finalizer"
    );
    assert_eq!(
        h.api.counters().count("PATCH", "services/status"),
        1,
        "the ingress"
    );

    // A port edit: the load balancer is ensured again with the new port; the ingress is
    // the same, so the status is not written again.
    let mut ports = svc.spec.as_ref().unwrap().ports.clone().unwrap();
    ports[0].port = 8080;
    patch_service(&h, &ns, "web", json!({"spec": {"ports": ports}})).await;
    eventually("the load balancer has the new port", WAIT, || async {
        lb_of(&h, &svc).is_some_and(|lb| lb.ports == vec![format!("TCP:8080->{node_port}")])
    })
    .await;
    eventually("the second ensure is over", WAIT, || async {
        match h.cloud.call_count(Method::EnsureLoadBalancer) {
            2 => Ok(()),
            n => Err(format!("{n} ensures")),
        }
    })
    .await;
    // The second EnsuredLoadBalancer comes after the ensure; once it is there, nothing more
    // is written.
    eventually("a second EnsuredLoadBalancer", WAIT, || async {
        h.event_count(&ns, "web", REASON_ENSURED).await >= 2
    })
    .await;
    let svc = h.services(&ns).get("web").await.unwrap();
    assert_eq!(ingress_of(&svc), vec![lb.ingress_ip.clone()]);
    assert_eq!(h.api.counters().count("PATCH", "services/status"), 1);
    assert_eq!(h.api.counters().count("PATCH", "services"), 1);
    assert_eq!(h.cloud.load_balancers().len(), 1);
    assert_eq!(ctl.metrics.loadbalancer_sync.get(), 2, "two ensures");
}

#[tokio::test]
async fn type_change_away_deletes_the_load_balancer_finalizer_and_status() {
    let (h, ns) = harness("type").await;
    create_node(&h, "type").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    let svc = ensured_web(&h, &ns).await;
    assert!(lb_of(&h, &svc).is_some());

    patch_service(&h, &ns, "web", json!({"spec": {"type": "ClusterIP"}})).await;
    let after = h
        .wait_service(&ns, "web", WAIT, |s| {
            !has_lb_finalizer(s) && ingress_of(s).is_empty()
        })
        .await;
    assert!(lb_of(&h, &svc).is_none(), "the load balancer is gone");
    assert_eq!(after.metadata.uid, svc.metadata.uid);
    h.wait_event_in(&ns, "web", REASON_DELETING, WAIT).await;
    h.wait_event_in(&ns, "web", REASON_DELETED, WAIT).await;
    // Go's service controller (cloud-provider v0.32 and later) records no event for the
    // change itself.
    let reasons = reasons_of(&h, &ns, "web").await;
    assert!(!reasons.iter().any(|r| r == "Type"), "{reasons:?}");
    assert_eq!(h.cloud.call_count(Method::EnsureLoadBalancerDeleted), 1);
}

#[tokio::test]
async fn deleting_a_service_deletes_its_load_balancer_before_the_finalizer_goes() {
    let (h, ns) = harness("delete").await;
    create_node(&h, "delete").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;

    // Another controller's finalizer keeps the Service visible after ours is removed.
    let mut kept = lb_service("kept", &[("http", 80)]);
    kept.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    create_service(&h, &ns, &kept).await;
    create_service(&h, &ns, &lb_service("plain", &[("http", 80)])).await;
    let kept = h.wait_service(&ns, "kept", WAIT, has_ingress).await;
    assert_eq!(
        kept.metadata.finalizers.as_deref().unwrap(),
        ["example.com/keep", FINALIZER_LOAD_BALANCER_CLEANUP],
        "ours is appended, the other kept"
    );
    let plain = h.wait_service(&ns, "plain", WAIT, has_ingress).await;

    h.services(&ns)
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    let deleting = h
        .wait_service(&ns, "kept", WAIT, |s| !has_lb_finalizer(s))
        .await;
    // Our finalizer went only after the load balancer was gone.
    assert!(lb_of(&h, &kept).is_none());
    assert_eq!(
        deleting.metadata.finalizers.as_deref().unwrap(),
        ["example.com/keep"]
    );
    let deleting = h
        .wait_service(&ns, "kept", WAIT, |s| ingress_of(s).is_empty())
        .await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    h.wait_event_in(&ns, "kept", REASON_DELETED, WAIT).await;
    patch_service(&h, &ns, "kept", json!({"metadata": {"finalizers": null}})).await;
    h.wait_service_gone(&ns, "kept", WAIT).await;

    // Without another finalizer the Service is gone once the load balancer is.
    h.services(&ns)
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_service_gone(&ns, "plain", WAIT).await;
    assert!(lb_of(&h, &plain).is_none());
    assert!(h.cloud.load_balancers().is_empty());
    h.wait_event_in(&ns, "plain", REASON_DELETED, WAIT).await;
}

#[tokio::test]
async fn a_load_balancer_class_gets_no_cloud_call_and_no_nodes_warn() {
    let (h, ns) = harness("class").await;
    // One worker: Services are synced in the order they came, so once the second one is
    // done, the first would have been too.
    let _ctl = start(&h, &ns, fake(&h), config().with_workers(1)).await;
    let mut classed = lb_service("classed", &[("http", 80)]);
    classed.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other-lb".into());
    create_service(&h, &ns, &classed).await;
    create_service(&h, &ns, &lb_service("plain", &[("http", 80)])).await;

    // No Node at all: a Warning, and the load balancer is ensured anyway.
    let plain = h.wait_service(&ns, "plain", WAIT, has_ingress).await;
    let note = h
        .wait_event_in(&ns, "plain", REASON_UNAVAILABLE, WAIT)
        .await;
    assert_eq!(note, "There are no available nodes for LoadBalancer");
    assert!(lb_of(&h, &plain).unwrap().nodes.is_empty());

    let classed = h.services(&ns).get("classed").await.unwrap();
    assert!(!has_lb_finalizer(&classed));
    assert!(ingress_of(&classed).is_empty());
    let target = format!("{ns}/classed");
    assert!(
        h.cloud.calls().iter().all(|c| c.target != target),
        "no cloud call about the classed Service: {:?}",
        h.cloud.calls()
    );
    assert!(h.events_in(&ns, "classed").await.is_empty());
}

#[tokio::test]
async fn two_controllers_each_manage_only_their_own_classes() {
    const CLASS: &str = "b.example/lb";
    let (h, ns) = harness("classes").await;
    create_node(&h, "classes").await;
    // A: Go's selection (Services without a class), on the harness's cloud. B: only CLASS,
    // on a cloud of its own.
    let _a = start(&h, &ns, fake(&h), config()).await;
    let cloud_b = Arc::new(FakeCloud::new());
    let provider_b: Arc<dyn CloudProvider> = cloud_b.clone();
    let only_b = LoadBalancerClasses::new([CLASS], false).unwrap();
    let _b = start(
        &h,
        &ns,
        provider_b,
        config().with_load_balancer_classes(only_b),
    )
    .await;
    let classed = |name: &str, class: &str| {
        let mut svc = lb_service(name, &[("http", 80)]);
        svc.spec.as_mut().unwrap().load_balancer_class = Some(class.into());
        svc
    };
    create_service(&h, &ns, &lb_service("plain", &[("http", 80)])).await;
    create_service(&h, &ns, &classed("of-b", CLASS)).await;
    create_service(&h, &ns, &classed("nobodys", "c.example/lb")).await;

    let plain = h.wait_service(&ns, "plain", WAIT, has_ingress).await;
    let of_b = h.wait_service(&ns, "of-b", WAIT, has_ingress).await;
    assert_eq!(
        plain.metadata.finalizers.as_deref(),
        Some(&[FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()][..])
    );
    assert_eq!(
        of_b.metadata.finalizers.as_deref(),
        Some(&[CLASS.to_owned()][..]),
        "a class's Services carry the class as their finalizer"
    );
    assert!(lb_of(&h, &plain).is_some());
    assert!(
        cloud_b
            .load_balancer(&default_load_balancer_name(&of_b))
            .is_some()
    );
    let calls_about = |cloud: &FakeCloud, name: &str| {
        let target = format!("{ns}/{name}");
        cloud.calls().iter().filter(|c| c.target == target).count()
    };
    assert_eq!(
        calls_about(&h.cloud, "of-b"),
        0,
        "A never calls its cloud for B's"
    );
    assert_eq!(
        calls_about(&cloud_b, "plain"),
        0,
        "B never calls its cloud for A's"
    );

    // B's Service changes type: Kubernetes clears its class, and its finalizer still says
    // whose load balancer it is. B deletes it; A, which manages Services without a class,
    // leaves it alone.
    patch_service(&h, &ns, "of-b", json!({"spec": {"type": "ClusterIP"}})).await;
    let after = h
        .wait_service(&ns, "of-b", WAIT, |s| s.metadata.finalizers.is_none())
        .await;
    assert_eq!(
        after.spec.as_ref().unwrap().load_balancer_class,
        None,
        "the API server cleared the class"
    );
    assert!(ingress_of(&after).is_empty());
    assert!(
        cloud_b
            .load_balancer(&default_load_balancer_name(&of_b))
            .is_none()
    );
    assert_eq!(calls_about(&h.cloud, "of-b"), 0);

    // Deleting A's Service: B takes no part.
    h.services(&ns)
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    eventually("plain's load balancer deleted", WAIT, || async {
        lb_of(&h, &plain).is_none()
    })
    .await;
    assert_eq!(calls_about(&cloud_b, "plain"), 0);

    // Nobody's class: no finalizer, no status, no event, no call, from either.
    let nobodys = h.services(&ns).get("nobodys").await.unwrap();
    assert!(nobodys.metadata.finalizers.is_none());
    assert!(ingress_of(&nobodys).is_empty());
    assert!(h.events_in(&ns, "nobodys").await.is_empty());
    assert_eq!(
        calls_about(&h.cloud, "nobodys") + calls_about(&cloud_b, "nobodys"),
        0
    );
}

/// The Service's condition of `type_`, if it has one.
fn condition(svc: &Service, type_: &str) -> Option<Condition> {
    svc.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Whether the Service's condition `type_` has `status` and `reason`.
fn says(svc: &Service, type_: &str, status: &str, reason: &str) -> bool {
    condition(svc, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

#[tokio::test]
async fn conditions_say_what_the_load_balancer_does() {
    let (h, ns) = harness("conditions").await;
    let node = create_node(&h, "conditions").await;
    // The first ensure fails.
    h.cloud.inject_times(
        Method::EnsureLoadBalancer,
        Fault::Error("the cloud is down".into()),
        1,
    );
    let conditions = config().with_conditions(true).with_health_period(ms(300));
    let _ctl = start(&h, &ns, fake(&h), conditions).await;
    create_web(&h, &ns).await;

    let failed = h
        .wait_service(&ns, "web", WAIT, |s| {
            says(s, LOAD_BALANCER_PROVISIONING, "False", REASON_SYNC_FAILED)
        })
        .await;
    let serving = condition(&failed, LOAD_BALANCER_SERVING).unwrap();
    assert_eq!(serving.status, "False");
    assert_eq!(serving.reason, REASON_SYNC_FAILED);
    assert!(serving.message.contains("the cloud is down"), "{serving:?}");
    assert!(!has_ingress(&failed));

    // Retried: serving, with its address, in the same write.
    let served = h
        .wait_service(&ns, "web", WAIT, |s| {
            says(s, LOAD_BALANCER_SERVING, "True", "LoadBalancerEnsured")
        })
        .await;
    assert!(has_ingress(&served), "the address comes with the condition");
    let provisioning = condition(&served, LOAD_BALANCER_PROVISIONING).unwrap();
    assert_eq!(provisioning.status, "False");
    assert_eq!(provisioning.reason, "Provisioned");
    assert_eq!(provisioning.observed_generation, served.metadata.generation);
    let since = condition(&served, LOAD_BALANCER_SERVING)
        .unwrap()
        .last_transition_time;

    // Health: reported once a period; degraded while no Node passes, then not again.
    h.wait_service(&ns, "web", WAIT, |s| {
        says(s, LOAD_BALANCER_DEGRADED, "False", "Healthy")
    })
    .await;
    h.cloud.set_node_healthy(&node, false);
    let degraded = h
        .wait_service(&ns, "web", WAIT, |s| {
            says(s, LOAD_BALANCER_DEGRADED, "True", "NoHealthyBackends")
        })
        .await;
    assert_eq!(
        condition(&degraded, LOAD_BALANCER_SERVING)
            .unwrap()
            .last_transition_time,
        since,
        "a condition that did not change keeps its transition time"
    );
    h.cloud.set_node_healthy(&node, true);
    h.wait_service(&ns, "web", WAIT, |s| {
        says(s, LOAD_BALANCER_DEGRADED, "False", "Healthy")
    })
    .await;

    // The steady state writes nothing, however many health passes run.
    let writes = || h.api.counters().count("PATCH", "services/status");
    let before = writes();
    let health_calls = || h.cloud.call_count(Method::LoadBalancerHealth);
    let asked = health_calls();
    tokio::time::sleep(ms(1500)).await;
    assert!(health_calls() >= asked + 2, "health is asked every period");
    assert_eq!(writes(), before, "no status write in the steady state");

    // Type changed away: our conditions go with the address.
    patch_service(&h, &ns, "web", json!({"spec": {"type": "ClusterIP"}})).await;
    let ours = [
        LOAD_BALANCER_PROVISIONING,
        LOAD_BALANCER_SERVING,
        LOAD_BALANCER_DEGRADED,
    ];
    h.wait_service(&ns, "web", WAIT, |s| {
        !has_lb_finalizer(s)
            && ingress_of(s).is_empty()
            && ours.iter().all(|t| condition(s, t).is_none())
    })
    .await;
}

#[tokio::test]
async fn node_changes_update_the_load_balancer_with_the_new_set() {
    let (h, ns) = harness("nodes").await;
    let n1 = create_node(&h, "nodes").await;
    let n2 = create_node(&h, "nodes").await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    let svc = ensured_web(&h, &ns).await;
    until_lb_nodes(&h, &svc, &[&n1, &n2]).await;
    let updates = || h.cloud.call_count(Method::UpdateLoadBalancer);
    assert_eq!(updates(), 0);

    // A new Node (without a provider ID yet).
    let mut node = h.new_node("nodes");
    let n3 = node.metadata.name.clone().unwrap();
    node.spec.as_mut().unwrap().taints = None;
    h.create_node(&node).await;
    until_lb_nodes(&h, &svc, &[&n1, &n2, &n3]).await;
    assert_eq!(updates(), 1);
    h.wait_event_in(&ns, "web", REASON_UPDATED, WAIT).await;

    // Its provider ID arrives: the set (name → provider ID) changed.
    patch_node(
        &h,
        &n3,
        json!({"spec": {"providerID": format!("fake://{n3}")}}),
    )
    .await;
    eventually("an update for the provider ID", WAIT, || async {
        match updates() {
            2 => Ok(()),
            n => Err(format!("{n} updates")),
        }
    })
    .await;

    // The exclude label.
    set_exclude_label(&h, &n1, "true").await;
    until_lb_nodes(&h, &svc, &[&n2, &n3]).await;
    assert_eq!(updates(), 3);

    // The cluster-autoscaler's taint.
    patch_node(
        &h,
        &n2,
        json!({"spec": {"taints": [{"key": TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER, "value": "1700000000", "effect": "NoSchedule"}]}}),
    )
    .await;
    until_lb_nodes(&h, &svc, &[&n3]).await;
    assert_eq!(updates(), 4);

    // A Ready flip is no reason to call the cloud, and the NotReady Node stays in. Then an
    // exclude label that parses as false brings n1 back: exactly one more update.
    h.nodes()
        .patch_status(
            &n3,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Test"}]}})),
        )
        .await
        .unwrap();
    set_exclude_label(&h, &n1, "false").await;
    until_lb_nodes(&h, &svc, &[&n1, &n3]).await;
    assert_eq!(updates(), 5);

    // An empty label value excludes, as does deleting the Node: no Node left.
    set_exclude_label(&h, &n1, "").await;
    h.nodes()
        .delete(&n3, &DeleteParams::default())
        .await
        .unwrap();
    until_lb_nodes(&h, &svc, &[]).await;
    h.wait_event_in(&ns, "web", REASON_UNAVAILABLE, WAIT).await;

    let counts = h.cloud.call_counts();
    assert_eq!(
        counts.get(&Method::EnsureLoadBalancer),
        Some(&1),
        "{counts:?}"
    );
    assert_eq!(counts.get(&Method::GetLoadBalancer), None, "{counts:?}");
    assert_eq!(ctl.metrics.nodesync_error.get(), 0);
}

#[tokio::test]
async fn a_burst_of_node_adds_costs_few_updates() {
    let (h, ns) = harness("burst").await;
    let first = create_node(&h, "burst").await;
    let debounce = Duration::from_secs(1);
    let ctl = start(
        &h,
        &ns,
        fake(&h),
        config().with_node_sync_debounce(debounce),
    )
    .await;
    let svc = ensured_web(&h, &ns).await;
    until_lb_nodes(&h, &svc, &[&first]).await;
    let passes_before = node_sync_passes(&ctl);

    let started = Instant::now();
    let mut names = vec![first];
    for _ in 0..50 {
        names.push(create_node(&h, "burst").await);
    }
    let creating = started.elapsed();
    let all: Vec<&String> = names.iter().collect();
    until_lb_nodes(&h, &svc, &all).await;
    let updates = h.cloud.call_count(Method::UpdateLoadBalancer);
    let passes = node_sync_passes(&ctl) - passes_before;
    // 50 Node events. Passes start at least a debounce apart, so however slow the machine,
    // there are at most (creation time / debounce) + 3 of them (the trailing one, and one
    // each side of the window), each with at most one update for this load balancer.
    let bound = (creating.as_secs_f64() / debounce.as_secs_f64()).floor() as u64 + 3;
    println!("50 Node adds in {creating:?}: {passes} node-sync passes, {updates} updates");
    assert!(
        passes <= bound,
        "{passes} passes for 50 Node adds in {creating:?} (debounce {debounce:?})"
    );
    assert!(updates <= passes, "{updates} updates, {passes} passes");
    assert!(updates >= 1);
    assert!(updates < 10, "{updates} updates for 50 Node adds");
}

#[tokio::test]
async fn a_node_sync_pass_waits_for_the_updates_of_the_previous_one() {
    let (h, ns) = harness("drain").await;
    let first = create_node(&h, "drain").await;
    let cloud = TestCloud::new(h.cloud.clone());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    cloud.hooks().update_gate = Some(("slow".to_owned(), gate.clone()));
    let debounce = ms(100);
    let ctl = start(
        &h,
        &ns,
        cloud.provider(),
        config().with_node_sync_debounce(debounce),
    )
    .await;
    create_service(&h, &ns, &lb_service("slow", &[("http", 80)])).await;
    create_service(&h, &ns, &lb_service("fast", &[("http", 80)])).await;
    let slow = h.wait_service(&ns, "slow", WAIT, has_ingress).await;
    let fast = h.wait_service(&ns, "fast", WAIT, has_ingress).await;
    until_lb_nodes(&h, &fast, &[&first]).await;
    let passes_before = node_sync_passes(&ctl);
    let updates = |name: &str| calls_for(&h, Method::UpdateLoadBalancer, &ns, name);

    // A Node joins: one pass queues both; "fast" is updated, "slow" hangs in the cloud.
    let second = create_node(&h, "drain").await;
    until_lb_nodes(&h, &fast, &[&first, &second]).await;
    assert_eq!(node_sync_passes(&ctl) - passes_before, 1);

    // More Nodes join, each well over a debounce apart, while "slow"'s update is in
    // flight: no pass starts, so "fast" is not updated again meanwhile.
    let mut names = vec![first.clone(), second.clone()];
    for _ in 0..3 {
        names.push(create_node(&h, "drain").await);
        tokio::time::sleep(debounce * 4).await;
    }
    assert_eq!(
        node_sync_passes(&ctl) - passes_before,
        1,
        "a pass started while the previous one's update was in flight"
    );
    assert_eq!(updates("fast"), 1);
    assert_eq!(updates("slow"), 0, "still in the cloud");

    // The update returns (with the Nodes its worker read): one more pass, with every Node
    // that joined meanwhile, one update each.
    gate.add_permits(100);
    let all: Vec<&String> = names.iter().collect();
    until_lb_nodes(&h, &fast, &all).await;
    until_lb_nodes(&h, &slow, &all).await;
    tokio::time::sleep(debounce * 5).await;
    assert_eq!(updates("fast"), 2);
    assert_eq!(updates("slow"), 2);
    assert_eq!(node_sync_passes(&ctl) - passes_before, 2);
}

/// The fake cloud with hooks: records when each `ensure_load_balancer` was called, and can
/// hang a Service's ensure before or after the cloud acts.
struct TestCloud {
    fake: Arc<FakeCloud>,
    hooks: Mutex<Hooks>,
}

#[derive(Default)]
struct Hooks {
    ensure_calls: Vec<(String, Instant)>,
    hang_before: HashSet<String>,
    hang_after: HashSet<String>,
    /// Hands the cloud only the TCP ports, as a provider that cannot balance others would.
    tcp_only: bool,
    /// Runs (once) inside the next `ensure_load_balancer_deleted`, before the cloud acts.
    before_delete: Option<futures::future::BoxFuture<'static, ()>>,
    /// `update_load_balancer` of this Service takes a permit first (and waits for one).
    update_gate: Option<(String, Arc<tokio::sync::Semaphore>)>,
    /// `ensure_load_balancer` of this Service takes a permit first (and waits for one).
    ensure_gate: Option<(String, Arc<tokio::sync::Semaphore>)>,
}

impl TestCloud {
    fn new(fake: Arc<FakeCloud>) -> Arc<Self> {
        Arc::new(Self {
            fake,
            hooks: Mutex::default(),
        })
    }

    /// The provider to give the controller: the fake cloud with these load balancers.
    fn provider(self: &Arc<Self>) -> Arc<dyn CloudProvider> {
        Fronted::load_balancer(self.fake.clone(), self.clone())
    }

    fn hooks(&self) -> std::sync::MutexGuard<'_, Hooks> {
        self.hooks.lock().unwrap()
    }

    /// The times `ensure_load_balancer` was called for the Service `name`.
    fn ensure_times(&self, name: &str) -> Vec<Instant> {
        self.hooks()
            .ensure_calls
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect()
    }
}

#[async_trait]
impl LoadBalancer for TestCloud {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        self.fake.get_load_balancer(cluster_name, service).await
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        let name = service.metadata.name.clone().unwrap_or_default();
        let (before, after, tcp_only, gate) = {
            let mut hooks = self.hooks();
            hooks.ensure_calls.push((name.clone(), Instant::now()));
            (
                hooks.hang_before.contains(&name),
                hooks.hang_after.contains(&name),
                hooks.tcp_only,
                hooks.ensure_gate.clone().filter(|(n, _)| *n == name),
            )
        };
        if let Some((_, gate)) = gate {
            gate.acquire().await.expect("gate open").forget();
        }
        let mut service = service.clone();
        if tcp_only && let Some(ports) = service.spec.as_mut().and_then(|s| s.ports.as_mut()) {
            ports.retain(|p| p.protocol.as_deref() == Some("TCP"));
        }
        if before {
            std::future::pending::<()>().await;
        }
        let result = self
            .fake
            .ensure_load_balancer(cluster_name, &service, nodes)
            .await;
        if after {
            std::future::pending::<()>().await;
        }
        result
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        let gate = self.hooks().update_gate.clone();
        if let Some((name, gate)) = gate
            && service.metadata.name.as_deref() == Some(name.as_str())
        {
            gate.acquire().await.expect("gate open").forget();
        }
        self.fake
            .update_load_balancer(cluster_name, service, nodes)
            .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        let hook = self.hooks().before_delete.take();
        if let Some(hook) = hook {
            hook.await;
        }
        self.fake
            .ensure_load_balancer_deleted(cluster_name, service)
            .await
    }
}

#[tokio::test]
async fn cloud_failures_back_off_with_growing_delays_then_converge() {
    let (h, ns) = harness("backoff").await;
    create_node(&h, "backoff").await;
    let cloud = TestCloud::new(h.cloud.clone());
    let base = ms(400);
    let ctl = start(
        &h,
        &ns,
        cloud.provider(),
        config()
            .with_workers(1)
            .with_rate_limit(RateLimit::exponential(base, Duration::from_secs(30))),
    )
    .await;
    h.cloud.inject_times(
        Method::EnsureLoadBalancer,
        Fault::Error("the cloud is down".into()),
        3,
    );
    let svc = ensured_web(&h, &ns).await;
    assert!(has_lb_finalizer(&svc));
    assert!(lb_of(&h, &svc).is_some());

    let times = cloud.ensure_times("web");
    assert_eq!(times.len(), 4, "three failures, then success");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // The queue hands a key out no earlier than its backoff: 400ms, 800ms, 1600ms. (Upper
    // bounds depend on the machine's load; only the lower ones are exact.)
    for (i, gap) in gaps.iter().enumerate() {
        let backoff = base * 2u32.pow(u32::try_from(i).unwrap());
        assert!(
            *gap >= backoff,
            "gap {i} is {gap:?}, below its backoff {backoff:?}: {gaps:?}"
        );
    }
    assert!(gaps[2] > gaps[0], "the delays grow: {gaps:?}");

    // Three identical Warnings: one Event, its count patched to 2, then 3 (client-go's
    // record package).
    wait_event_count(&h, &ns, "web", REASON_SYNC_FAILED, 3).await;
    let note = h.wait_event_in(&ns, "web", REASON_SYNC_FAILED, WAIT).await;
    assert_eq!(
        note,
        "Error syncing load balancer: failed to ensure load balancer: the cloud is down"
    );
    h.wait_event_in(&ns, "web", REASON_ENSURED, WAIT).await;
    assert_eq!(
        ctl.queue.num_requeues(&ServiceKey::new(&ns, "web")),
        0,
        "success forgets the failures"
    );
    assert_eq!(ctl.queue.metrics().retries_total(), 3);
}

/// A controller in a namespace of its own (`test`) that backs off 20 s doubling to 60 s,
/// far longer than a test waits, over [`TestCloud`]; one Node.
async fn slow_backoff(
    test: &str,
    config: ServiceControllerConfig,
) -> (Harness, String, Arc<TestCloud>, Running) {
    let (h, ns) = harness(test).await;
    create_node(&h, test).await;
    let cloud = TestCloud::new(h.cloud.clone());
    let limit = RateLimit::exponential(Duration::from_secs(20), Duration::from_secs(60));
    let ctl = start(&h, &ns, cloud.provider(), config.with_rate_limit(limit)).await;
    (h, ns, cloud, ctl)
}

/// A cloud that did not answer: the Services it failed wait for its return, not for a
/// backoff that grew meanwhile. With a 20 s backoff, both converge a probe interval (2 s)
/// after the cloud answers again; the probe's success releases the other one.
#[tokio::test]
async fn services_held_by_an_unavailable_cloud_converge_when_it_answers_again() {
    let (h, ns, cloud, ctl) = slow_backoff("unavailable", config().with_workers(1)).await;
    h.cloud.inject_times(
        Method::EnsureLoadBalancer,
        Fault::Unavailable("connection refused".into()),
        2,
    );
    let started = Instant::now();
    for name in ["one", "two"] {
        create_service(&h, &ns, &lb_service(name, &[("http", 80)])).await;
    }
    for name in ["one", "two"] {
        h.wait_service(&ns, name, WAIT, has_ingress).await;
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "{took:?}: the 20 s backoff was waited out"
    );
    for name in ["one", "two"] {
        let times = cloud.ensure_times(name);
        assert_eq!(
            times.len(),
            2,
            "{name}: one failure, one success: {times:?}"
        );
    }
    // Still a failure like any other: a Warning each, and counted as a retry.
    wait_event_count(&h, &ns, "one", REASON_SYNC_FAILED, 1).await;
    assert_eq!(ctl.queue.metrics().retries_total(), 2);
    assert_eq!(ctl.queue.num_requeues(&ServiceKey::new(&ns, "one")), 0);
}

#[tokio::test]
async fn retry_after_is_a_fixed_delay_without_backoff() {
    // A backoff far longer than the test: if RetryAfter were treated as an ordinary
    // failure, the second attempt would come after 20s.
    let (h, ns, cloud, ctl) = slow_backoff("retry-after", config()).await;
    h.cloud
        .inject_times(Method::EnsureLoadBalancer, Fault::RetryAfter(ms(300)), 3);
    create_web(&h, &ns).await;
    h.wait_service(&ns, "web", WAIT, has_ingress).await;
    let times = cloud.ensure_times("web");
    assert_eq!(times.len(), 4);
    for gap in times.windows(2).map(|w| w[1] - w[0]) {
        assert!(gap >= ms(300), "{gap:?}");
        assert!(gap < Duration::from_secs(15), "{gap:?}: no backoff growth");
    }
    assert_eq!(ctl.queue.metrics().retries_total(), 0, "never rate-limited");
    wait_event_count(&h, &ns, "web", REASON_SYNC_FAILED, 3).await;
}

/// A load balancer the provider says is still coming up: looked at again after its delay,
/// without backoff, without a Warning, and with one `EnsuringLoadBalancer` for the whole
/// ensure (Go's providers return an error there: a `SyncLoadBalancerFailed` on every new
/// load balancer).
#[tokio::test]
async fn a_provisioning_load_balancer_is_looked_at_again_without_a_warning() {
    let (h, ns) = harness("provisioning").await;
    create_node(&h, "provisioning").await;
    let cloud = TestCloud::new(h.cloud.clone());
    let ctl = start(
        &h,
        &ns,
        cloud.provider(),
        config().with_rate_limit(RateLimit::exponential(
            Duration::from_secs(20),
            Duration::from_secs(60),
        )),
    )
    .await;
    h.cloud
        .inject_times(Method::EnsureLoadBalancer, Fault::Provisioning(ms(300)), 2);
    create_web(&h, &ns).await;
    h.wait_service(&ns, "web", WAIT, has_ingress).await;
    let times = cloud.ensure_times("web");
    assert_eq!(times.len(), 3);
    for gap in times.windows(2).map(|w| w[1] - w[0]) {
        assert!(gap >= ms(300), "{gap:?}");
        assert!(gap < Duration::from_secs(15), "{gap:?}: no backoff");
    }
    assert_eq!(ctl.queue.metrics().retries_total(), 0, "never rate-limited");
    wait_event_count(&h, &ns, "web", REASON_ENSURED, 1).await;
    assert_eq!(h.event_count(&ns, "web", REASON_ENSURING).await, 1);
    assert_eq!(h.event_count(&ns, "web", REASON_SYNC_FAILED).await, 0);

    // A later change is a new ensure: announced again.
    patch_service(
        &h,
        &ns,
        "web",
        json!({"spec": {"ports": [{"port": 81, "protocol": "TCP"}]}}),
    )
    .await;
    wait_event_count(&h, &ns, "web", REASON_ENSURING, 2).await;
}

/// A look at a load balancer still coming up is not queued behind a burst of new Services:
/// once due, it goes before the Services queued ahead of it (alternating with them), though
/// the worker's own finalizer patch had queued the Service again behind the burst.
#[tokio::test]
async fn a_due_provisioning_look_is_not_queued_behind_a_burst_of_new_services() {
    const BURST: usize = 20;
    let (h, ns) = harness("follow-up").await;
    create_node(&h, "follow-up").await;
    let cloud = TestCloud::new(h.cloud.clone());
    let ctl = start(&h, &ns, cloud.provider(), config().with_workers(1)).await;
    // Every ensure takes 200 ms, and web's first is held until the burst is queued.
    h.cloud.set_latency(ms(200));
    h.cloud
        .inject_times(Method::EnsureLoadBalancer, Fault::Provisioning(ms(300)), 1);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    cloud.hooks().ensure_gate = Some(("web".to_owned(), gate.clone()));
    create_web(&h, &ns).await;
    eventually("web's ensure to start", WAIT, || async {
        match cloud.ensure_times("web").len() {
            1 => Ok(()),
            n => Err(format!("{n} ensures")),
        }
    })
    .await;
    for i in 0..BURST {
        create_service(
            &h,
            &ns,
            &lb_service(&format!("burst-{i:02}"), &[("http", 80)]),
        )
        .await;
    }
    eventually("the burst queued", WAIT, || async {
        match ctl.queue.len() {
            n if n >= BURST => Ok(()),
            n => Err(format!("{n} keys queued")),
        }
    })
    .await;
    gate.add_permits(BURST);
    h.wait_service(&ns, "web", WAIT, has_ingress).await;

    let order: Vec<String> = cloud
        .hooks()
        .ensure_calls
        .iter()
        .map(|(name, _)| name.clone())
        .collect();
    let second = order
        .iter()
        .enumerate()
        .filter(|(_, name)| *name == "web")
        .nth(1)
        .map(|(at, _)| at)
        .expect("a second ensure of web");
    // Due 300 ms after the first, while the burst's ensures take 200 ms each: one or two
    // of them (and the one in flight) before it, not all twenty.
    assert!(
        second <= 4,
        "web's look came after {second} ensures: {order:?}"
    );
    assert_eq!(ctl.queue.metrics().retries_total(), 0, "never rate-limited");
}

/// Waits until the events with `reason` about `ns/name` count `want` on the server (they
/// are written asynchronously), then checks that no more arrive.
async fn wait_event_count(h: &Harness, ns: &str, name: &str, reason: &str, want: i32) {
    eventually(&format!("{want} {reason} events"), WAIT, || async {
        match h.event_count(ns, name, reason).await {
            n if n >= want => Ok(()),
            n => Err(format!("{n} events")),
        }
    })
    .await;
    // Then no more for a while: not a wait for something to happen.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(h.event_count(ns, name, reason).await, want);
}

#[tokio::test]
async fn implemented_elsewhere_is_success_without_status_or_event() {
    let (h, ns) = harness("elsewhere").await;
    create_node(&h, "elsewhere").await;
    let _ctl = start(&h, &ns, fake(&h), config().with_workers(1)).await;
    h.cloud
        .inject_times(Method::EnsureLoadBalancer, Fault::ImplementedElsewhere, 1);
    create_service(&h, &ns, &lb_service("elsewhere", &[("http", 80)])).await;
    create_service(&h, &ns, &lb_service("here", &[("http", 80)])).await;
    // One worker, in order: once "here" is done, "elsewhere" was synced before it.
    h.wait_service(&ns, "here", WAIT, has_ingress).await;
    h.wait_event_in(&ns, "here", REASON_ENSURED, WAIT).await;

    let svc = h.services(&ns).get("elsewhere").await.unwrap();
    assert!(has_lb_finalizer(&svc), "the finalizer came before the call");
    assert!(ingress_of(&svc).is_empty());
    assert_eq!(
        calls_for(&h, Method::EnsureLoadBalancer, &ns, "elsewhere"),
        1,
        "no retry"
    );
    let reasons = reasons_of(&h, &ns, "elsewhere").await;
    assert_eq!(reasons, [REASON_ENSURING]);
}

#[tokio::test]
async fn invalid_ingress_from_the_provider_is_never_written() {
    let (h, ns) = harness("bad-ingress").await;
    create_node(&h, "bad-ingress").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    h.cloud.set_ingress_override(Some("not-an-ip".into()));
    create_web(&h, &ns).await;

    let note = h.wait_event_in(&ns, "web", REASON_SYNC_FAILED, WAIT).await;
    assert!(
        note.contains("\"not-an-ip\" is not a valid IP address"),
        "{note}"
    );
    eventually("a retry", WAIT, || async {
        calls_for(&h, Method::EnsureLoadBalancer, &ns, "web") >= 2
    })
    .await;
    let svc = h.services(&ns).get("web").await.unwrap();
    assert!(ingress_of(&svc).is_empty(), "nothing written");
    assert!(has_lb_finalizer(&svc));

    // An empty entry is refused too. (Another Service: the one above already has a
    // SyncLoadBalancerFailed event, which `wait_event_in` would find first.)
    h.cloud.set_ingress_override(Some(String::new()));
    create_service(&h, &ns, &lb_service("blank", &[("http", 80)])).await;
    let note = h
        .wait_event_in(&ns, "blank", REASON_SYNC_FAILED, WAIT)
        .await;
    assert!(
        note.contains("ingress[0] has neither an IP nor a hostname"),
        "{note}"
    );
    assert!(ingress_of(&h.services(&ns).get("blank").await.unwrap()).is_empty());
    assert!(ingress_of(&h.services(&ns).get("web").await.unwrap()).is_empty());

    // Once the provider answers properly, the Service converges.
    h.cloud.set_ingress_override(None);
    for name in ["web", "blank"] {
        let svc = h.wait_service(&ns, name, WAIT, has_ingress).await;
        assert_eq!(ingress_of(&svc), vec![lb_of(&h, &svc).unwrap().ingress_ip]);
    }
}

#[tokio::test]
async fn a_service_without_ports_cannot_reach_the_provider() {
    let (h, ns) = harness("no-ports").await;
    // The API server refuses a LoadBalancer Service without ports.
    let err = h
        .services(&ns)
        .create(&PostParams::default(), &lb_service("none", &[]))
        .await
        .expect_err("the API server requires ports");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_service_the_provider_sees_without_ports_is_warned_and_retried() {
    let (h, ns) = harness("no-tcp").await;
    create_node(&h, "no-tcp").await;
    // A provider that balances TCP only sees a UDP-only Service as one without ports, and
    // the fake cloud refuses it.
    let cloud = TestCloud::new(h.cloud.clone());
    cloud.hooks().tcp_only = true;
    let _ctl = start(&h, &ns, cloud.provider(), config()).await;
    let mut svc = lb_service("dns", &[("dns", 53)]);
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
    create_service(&h, &ns, &svc).await;

    let note = h.wait_event_in(&ns, "dns", REASON_SYNC_FAILED, WAIT).await;
    assert!(
        note.ends_with("has no ports: a load balancer needs at least one"),
        "{note}"
    );
    eventually("retries with backoff", WAIT, || async {
        cloud.ensure_times("dns").len() >= 3
    })
    .await;
    let svc = h.services(&ns).get("dns").await.unwrap();
    assert!(has_lb_finalizer(&svc));
    assert!(ingress_of(&svc).is_empty());
    assert!(lb_of(&h, &svc).is_none());

    // A TCP port is added: the Service converges.
    let mut ports = svc.spec.as_ref().unwrap().ports.clone().unwrap();
    ports.push(k8s_openapi::api::core::v1::ServicePort {
        name: Some("dns-tcp".into()),
        port: 53,
        protocol: Some("TCP".into()),
        ..Default::default()
    });
    patch_service(&h, &ns, "dns", json!({"spec": {"ports": ports}})).await;
    let svc = h.wait_service(&ns, "dns", WAIT, has_ingress).await;
    assert_eq!(lb_of(&h, &svc).unwrap().ports.len(), 1);
}

#[tokio::test]
async fn a_concurrent_finalizer_edit_is_kept() {
    let (h, ns) = harness("finalizers").await;
    create_node(&h, "finalizers").await;
    let cloud = TestCloud::new(h.cloud.clone());
    let _ctl = start(&h, &ns, cloud.provider(), config()).await;
    let svc = ensured_web(&h, &ns).await;

    // While the load balancer is being deleted (the type changed away), another controller
    // adds its finalizer: the controller's copy of the list is stale when it removes ours.
    let services = h.services(&ns);
    cloud.hooks().before_delete = Some(Box::pin(async move {
        services
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER_LOAD_BALANCER_CLEANUP, "example.com/late"]}})),
            )
            .await
            .expect("add a finalizer");
    }));
    patch_service(&h, &ns, "web", json!({"spec": {"type": "ClusterIP"}})).await;
    let after = h
        .wait_service(&ns, "web", WAIT, |s| {
            !has_lb_finalizer(s) && ingress_of(s).is_empty()
        })
        .await;
    assert!(cloud.hooks().before_delete.is_none(), "the edit happened");
    assert_eq!(
        after.metadata.finalizers.as_deref().unwrap(),
        ["example.com/late"],
        "the other finalizer is kept"
    );
    assert!(lb_of(&h, &svc).is_none());
    // The first removal found the list changed, re-read it, and removed ours only. (A
    // second sync, queued by the other controller's edit, may re-read once more.)
    assert!(h.api.counters().count("GET", "services") >= 1);
}

#[tokio::test]
async fn node_update_failures_warn_and_retry_unless_the_load_balancer_is_gone() {
    let (h, ns) = harness("update-fail").await;
    let n1 = create_node(&h, "update-fail").await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    let svc = ensured_web(&h, &ns).await;
    until_lb_nodes(&h, &svc, &[&n1]).await;

    // The update fails while the load balancer exists: a Warning, and the retry ensures
    // the load balancer in full, with the new Node.
    h.cloud.inject_times(
        Method::UpdateLoadBalancer,
        Fault::Error("update refused".into()),
        1,
    );
    let n2 = create_node(&h, "update-fail").await;
    let note = h
        .wait_event_in(&ns, "web", REASON_UPDATE_FAILED, WAIT)
        .await;
    assert!(
        note.starts_with("Error updating load balancer with new hosts ["),
        "{note}"
    );
    assert!(note.ends_with("update refused"), "{note}");
    until_lb_nodes(&h, &svc, &[&n1, &n2]).await;
    eventually("the full ensure after the failure", WAIT, || async {
        match h.cloud.call_count(Method::EnsureLoadBalancer) {
            2 => Ok(()),
            n => Err(format!("{n} ensures")),
        }
    })
    .await;
    assert_eq!(ctl.metrics.nodesync_error.get(), 1);

    // The load balancer vanishes behind the controller's back: a failed update of a load
    // balancer that does not exist is no error (Go's rule), so no Warning and no retry.
    h.cloud
        .ensure_load_balancer_deleted(CLUSTER, &svc)
        .await
        .unwrap();
    let updates = h.cloud.call_count(Method::UpdateLoadBalancer);
    let gets = h.cloud.call_count(Method::GetLoadBalancer);
    create_node(&h, "update-fail").await;
    eventually("the update and the existence check", WAIT, || async {
        let seen = (
            h.cloud.call_count(Method::UpdateLoadBalancer),
            h.cloud.call_count(Method::GetLoadBalancer),
        );
        if seen == (updates + 1, gets + 1) {
            Ok(())
        } else {
            Err(format!(
                "(updates, gets) {seen:?}, from {:?}",
                (updates, gets)
            ))
        }
    })
    .await;
    // Another Node: one more update, and still no retry of the first (which would have
    // ensured the load balancer again, 100ms after the failure, before this pass).
    create_node(&h, "update-fail").await;
    eventually("the next update", WAIT, || async {
        match h.cloud.call_count(Method::UpdateLoadBalancer) {
            n if n == updates + 2 => Ok(()),
            n => Err(format!("{n} updates, from {updates}")),
        }
    })
    .await;
    assert_eq!(h.cloud.call_count(Method::EnsureLoadBalancer), 2);
    assert!(lb_of(&h, &svc).is_none());
    assert_eq!(h.event_count(&ns, "web", REASON_UPDATE_FAILED).await, 1);
    assert_eq!(ctl.metrics.nodesync_error.get(), 1);
}

#[tokio::test]
async fn a_replaced_service_gets_the_old_load_balancer_deleted() {
    let (h, ns) = harness("replaced").await;
    create_node(&h, "replaced").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    let old = ensured_web(&h, &ns).await;
    assert!(lb_of(&h, &old).is_some());

    // Someone removes our finalizer, deletes the Service and creates it again at once.
    patch_service(&h, &ns, "web", json!({"metadata": {"finalizers": null}})).await;
    h.services(&ns)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    create_web(&h, &ns).await;

    let new = h
        .wait_service(&ns, "web", WAIT, |s| {
            has_ingress(s) && s.metadata.uid != old.metadata.uid
        })
        .await;
    eventually("the old load balancer is gone", WAIT, || async {
        lb_of(&h, &old).is_none()
    })
    .await;
    assert!(lb_of(&h, &new).is_some());
    assert_eq!(h.cloud.load_balancers().len(), 1);
    assert!(has_lb_finalizer(&new));
}

#[tokio::test]
async fn a_controller_killed_mid_ensure_leaves_no_duplicate_and_no_orphan() {
    let (h, ns) = harness("restart").await;
    let node = create_node(&h, "restart").await;
    let cloud = TestCloud::new(h.cloud.clone());
    let first = start(&h, &ns, cloud.provider(), config().with_workers(4)).await;

    // "a" is done; "b" and "c" hang after the cloud made their load balancers (no status
    // yet); "d" hangs before the cloud did anything.
    create_service(&h, &ns, &lb_service("a", &[("http", 80)])).await;
    let a = h.wait_service(&ns, "a", WAIT, has_ingress).await;
    {
        let mut hooks = cloud.hooks();
        hooks.hang_after.extend(["b".to_owned(), "c".to_owned()]);
        hooks.hang_before.insert("d".to_owned());
    }
    let mut created = Vec::new();
    for name in ["b", "c", "d"] {
        created.push(create_service(&h, &ns, &lb_service(name, &[("http", 80)])).await);
    }
    eventually(
        "b and c have load balancers, d's ensure is in flight",
        WAIT,
        || async {
            lb_of(&h, &created[0]).is_some()
                && lb_of(&h, &created[1]).is_some()
                && !cloud.ensure_times("d").is_empty()
        },
    )
    .await;
    first.kill().await;

    // The finalizer was there before each cloud call.
    for name in ["a", "b", "c", "d"] {
        let svc = h.services(&ns).get(name).await.unwrap();
        assert!(has_lb_finalizer(&svc), "{name}");
    }
    let b = h.services(&ns).get("b").await.unwrap();
    assert!(ingress_of(&b).is_empty(), "b's status was never written");
    // While no controller runs, "a" and "b" are deleted: the finalizer holds them.
    for name in ["a", "b"] {
        h.services(&ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    {
        let mut hooks = cloud.hooks();
        hooks.hang_after.clear();
        hooks.hang_before.clear();
    }
    let ensures_before = cloud.ensure_times("c").len();
    let _second = start(&h, &ns, cloud.provider(), config().with_workers(4)).await;
    h.wait_service_gone(&ns, "a", WAIT).await;
    h.wait_service_gone(&ns, "b", WAIT).await;
    let c = h.wait_service(&ns, "c", WAIT, has_ingress).await;
    let d = h.wait_service(&ns, "d", WAIT, has_ingress).await;

    assert!(lb_of(&h, &a).is_none(), "a's load balancer is not orphaned");
    assert!(
        lb_of(&h, &created[0]).is_none(),
        "b's load balancer is not orphaned"
    );
    let mut lbs: Vec<String> = h
        .cloud
        .load_balancers()
        .into_iter()
        .map(|lb| lb.service)
        .collect();
    lbs.sort();
    assert_eq!(
        lbs,
        [format!("{ns}/c"), format!("{ns}/d")],
        "one each, no duplicate"
    );
    let lb_c = lb_of(&h, &c).unwrap();
    assert_eq!(ingress_of(&c), vec![lb_c.ingress_ip.clone()]);
    assert_eq!(*lb_c.nodes, std::slice::from_ref(&node));
    assert_eq!(
        cloud.ensure_times("c").len(),
        ensures_before + 1,
        "the new controller ensured c once"
    );
    assert!(lb_of(&h, &d).is_some());
}

#[tokio::test]
async fn stopping_returns_while_cloud_calls_hang() {
    let (h, ns) = harness("stop").await;
    let cloud = TestCloud::new(h.cloud.clone());
    cloud.hooks().hang_before.insert("web".to_owned());
    let ctl = start(&h, &ns, cloud.provider(), config()).await;
    create_web(&h, &ns).await;
    eventually("the ensure is in flight", WAIT, || async {
        !cloud.ensure_times("web").is_empty()
    })
    .await;
    // A graceful stop (shutdown, lost lease) abandons the sync stuck in the cloud.
    ctl.cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), ctl.task)
        .await
        .expect("the controller stops although its cloud call hangs")
        .unwrap();
    assert!(ctl.queue.is_shut_down());
}

#[tokio::test]
async fn the_service_annotator_writes_one_key_and_respects_the_uid() {
    use ccm_provider::ServiceAnnotator;
    const KEY: &str = "example.com/load-balancer-id";

    let (h, ns) = harness("annotator").await;
    let mut svc = lb_service("web", &[("http", 80)]);
    svc.metadata.annotations = Some([("user.example.com/keep".to_owned(), "x".to_owned())].into());
    let stale = create_service(&h, &ns, &svc).await;
    // Someone adds an annotation our snapshot does not know about.
    patch_service(
        &h,
        &ns,
        "web",
        json!({"metadata": {"annotations": {"other.example.com/late": "y"}}}),
    )
    .await;
    let annotator = ServiceAnnotator::new(h.client.clone());
    let before = h.api.counters().total();
    annotator.set(&stale, KEY, "lb-1").await.unwrap();
    let live = h.services(&ns).get("web").await.unwrap();
    let annotations = live.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[KEY], "lb-1");
    assert_eq!(annotations["user.example.com/keep"], "x");
    assert_eq!(annotations["other.example.com/late"], "y");
    // Already there: no request.
    annotator.set(&live, KEY, "lb-1").await.unwrap();
    assert_eq!(h.api.counters().total() - before, 1, "one patch, then none");

    annotator.remove(&live, KEY).await.unwrap();
    let live = h.services(&ns).get("web").await.unwrap();
    let annotations = live.metadata.annotations.clone().unwrap();
    assert!(!annotations.contains_key(KEY));
    assert_eq!(annotations["user.example.com/keep"], "x");

    // The Service was deleted and created again under the same name: the old snapshot's
    // write is refused, the new object is untouched.
    patch_service(&h, &ns, "web", json!({"metadata": {"finalizers": null}})).await;
    h.services(&ns)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_service_gone(&ns, "web", WAIT).await;
    create_web(&h, &ns).await;
    let err = annotator.set(&live, KEY, "lb-old").await.unwrap_err();
    let chain = ccm_provider::display_chain(&err);
    assert!(chain.contains("metadata.uid"), "{chain}");
    let new = h.services(&ns).get("web").await.unwrap();
    let annotations = new.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(KEY), "{annotations:?}");
}

/// A Service carrying `hint` as the fake cloud's name annotation.
fn with_name_hint(mut svc: Service, hint: &str) -> Service {
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_LOAD_BALANCER_NAME.to_owned(), hint.to_owned());
    svc
}

/// The notes of the events with `reason` about `ns/name`.
async fn notes_of(h: &Harness, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let events = h.events_in(ns, name).await;
    let with_reason = events.into_iter().filter(|(_, r, _, _)| r == reason);
    with_reason.map(|(_, _, note, _)| note).collect()
}

/// Waits for an event with `reason` about `ns/name` whose note satisfies `matches`.
async fn wait_note(
    h: &Harness,
    ns: &str,
    name: &str,
    reason: &str,
    matches: impl Fn(&str) -> bool,
) -> String {
    eventually(
        &format!("a matching {reason} event for {name}"),
        WAIT,
        || async {
            let notes = notes_of(h, ns, name, reason).await;
            notes
                .iter()
                .find(|n| matches(n))
                .cloned()
                .ok_or(format!("{notes:?}"))
        },
    )
    .await
}

#[tokio::test]
async fn a_service_pointing_at_another_services_load_balancer_is_refused_and_can_go() {
    let (h, ns) = harness("not-owned").await;
    let n1 = create_node(&h, "not-owned").await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    create_service(&h, &ns, &lb_service("victim", &[("http", 80)])).await;
    let victim = h.wait_service(&ns, "victim", WAIT, has_ingress).await;
    let before = lb_of(&h, &victim).expect("the victim's load balancer");

    // The attacker names the victim's load balancer in the fake cloud's name hint (as a copy
    // of an ID annotation would), with other ports.
    let attacker = with_name_hint(lb_service("attacker", &[("https", 443)]), &before.name);
    create_service(&h, &ns, &attacker).await;
    let note = h
        .wait_event_in(&ns, "attacker", REASON_NOT_OWNED, WAIT)
        .await;
    assert_eq!(
        note,
        format!(
            "Error syncing load balancer: failed to ensure load balancer: load balancer {:?} is \
             not this Service's: annotation {ANNOTATION_LOAD_BALANCER_NAME} names it, but it was \
             made for another Service; it was left unchanged",
            before.name
        )
    );
    // Retried with the normal backoff (rate-limited requeues), never touching the victim's.
    let key = ServiceKey::new(&ns, "attacker");
    eventually("a few rate-limited retries", WAIT, || async {
        ctl.queue.num_requeues(&key) >= 2
    })
    .await;
    assert!(calls_for(&h, Method::EnsureLoadBalancer, &ns, "attacker") >= 2);
    assert_eq!(
        lb_of(&h, &victim),
        Some(before.clone()),
        "ports, Nodes, IP unchanged"
    );
    assert_eq!(h.cloud.load_balancers().len(), 1);
    let live = h.services(&ns).get("attacker").await.unwrap();
    assert!(ingress_of(&live).is_empty(), "no status");
    assert!(
        has_lb_finalizer(&live),
        "the finalizer came before the call, as ever"
    );
    assert!(
        notes_of(&h, &ns, "attacker", REASON_SYNC_FAILED)
            .await
            .is_empty(),
        "reported as what it is, not as a plain failure"
    );

    // Deleting the attacker finishes: the finalizer goes, the victim's load balancer stays,
    // and a Warning says it was left alone.
    h.services(&ns)
        .delete("attacker", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_service_gone(&ns, "attacker", WAIT).await;
    let left = wait_note(&h, &ns, "attacker", REASON_NOT_OWNED, |n| {
        n.starts_with("Did not delete:")
    })
    .await;
    assert_eq!(
        left,
        format!(
            "Did not delete: load balancer {:?} is not this Service's: annotation \
             {ANNOTATION_LOAD_BALANCER_NAME} names it, but it was made for another Service; it \
             was left alone",
            before.name
        )
    );
    h.wait_event_in(&ns, "attacker", REASON_DELETED, WAIT).await;
    assert_eq!(lb_of(&h, &victim), Some(before.clone()));
    let victim = h.services(&ns).get("victim").await.unwrap();
    assert_eq!(ingress_of(&victim), vec![before.ingress_ip.clone()]);
    assert_eq!(*before.nodes, [n1]);
}

#[tokio::test]
async fn a_hint_that_names_nothing_of_ours_never_holds_the_finalizer() {
    let (h, ns) = harness("bad-hint").await;
    create_node(&h, "bad-hint").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;

    // A 100 kB hint: refused, and what the event shows of it is bounded.
    let huge = with_name_hint(lb_service("huge", &[("http", 80)]), &"x".repeat(100_000));
    create_service(&h, &ns, &huge).await;
    let note = h.wait_event_in(&ns, "huge", REASON_NOT_OWNED, WAIT).await;
    assert!(note.len() < 1024, "{} bytes", note.len());
    assert!(note.contains("more bytes)"), "{note}");
    assert!(note.ends_with("is not a load balancer name (1 to 63 lowercase letters, digits and '-'); it was left unchanged"), "{note}");
    assert!(has_lb_finalizer(
        &h.services(&ns).get("huge").await.unwrap()
    ));
    h.services(&ns)
        .delete("huge", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_service_gone(&ns, "huge", WAIT).await;
    wait_note(&h, &ns, "huge", REASON_NOT_OWNED, |n| {
        n.starts_with("Did not delete:")
    })
    .await;

    // A Service that had its own load balancer, then a hint naming another cluster's: it
    // changes type away; its own load balancer is deleted, the other left alone, and the
    // finalizer and status go.
    let own = create_service(&h, &ns, &lb_service("own", &[("http", 80)])).await;
    let own = h
        .wait_service(&ns, "own", WAIT, |s| {
            has_ingress(s) && s.metadata.uid == own.metadata.uid
        })
        .await;
    let mut elsewhere = lb_service("elsewhere", &[("http", 80)]);
    elsewhere.metadata.uid = Some("uid-of-another-cluster".into());
    h.cloud
        .ensure_load_balancer("another-cluster", &with_name_hint(elsewhere, "theirs"), &[])
        .await
        .unwrap();
    patch_service(
        &h,
        &ns,
        "own",
        json!({"metadata": {"annotations": {ANNOTATION_LOAD_BALANCER_NAME: "theirs"}}}),
    )
    .await;
    h.wait_event_in(&ns, "own", REASON_NOT_OWNED, WAIT).await;
    patch_service(&h, &ns, "own", json!({"spec": {"type": "ClusterIP"}})).await;
    let after = h
        .wait_service(&ns, "own", WAIT, |s| {
            !has_lb_finalizer(s) && ingress_of(s).is_empty()
        })
        .await;
    assert_eq!(after.metadata.uid, own.metadata.uid);
    let left = wait_note(&h, &ns, "own", REASON_NOT_OWNED, |n| {
        n.starts_with("Did not delete:")
    })
    .await;
    assert!(
        left.contains("but it belongs to another cluster; it was left alone"),
        "{left}"
    );
    assert!(
        lb_of(&h, &own).is_none(),
        "its own load balancer was deleted"
    );
    let theirs = h
        .cloud
        .load_balancer("theirs")
        .expect("the other cluster's is left alone");
    assert_eq!(theirs.cluster_name, "another-cluster");
}

#[tokio::test]
async fn nodes_that_are_not_this_cloud_s_are_never_backends() {
    let (h, ns) = harness("not-ours").await;
    let n1 = create_node(&h, "ours").await;
    // Another provider's ID, set by its kubelet.
    let mut metal = h.new_node("metal-id");
    let metal_id = metal.metadata.name.clone().unwrap();
    metal.spec.as_mut().unwrap().provider_id = Some("metal://rack-1/7".into());
    h.create_node(&metal).await;
    // Labelled as bare metal.
    let metal_label = create_node(&h, "metal-label").await;
    patch_node(
        &h,
        &metal_label,
        json!({"metadata": {"labels": {"example.com/bare-metal": "true"}}}),
    )
    .await;
    let ownership = ccm_runtime::controllers::node_ownership::NodeOwnership::new(
        &["fake://".to_owned()],
        "!example.com/bare-metal",
    )
    .unwrap();
    let _ctl = start(&h, &ns, fake(&h), config().with_node_ownership(ownership)).await;
    let svc = ensured_web(&h, &ns).await;
    until_lb_nodes(&h, &svc, &[&n1]).await;

    // The label goes: the Node is ours, and a backend.
    patch_node(
        &h,
        &metal_label,
        json!({"metadata": {"labels": {"example.com/bare-metal": null}}}),
    )
    .await;
    until_lb_nodes(&h, &svc, &[&n1, &metal_label]).await;
    // And comes on another: it leaves.
    patch_node(
        &h,
        &n1,
        json!({"metadata": {"labels": {"example.com/bare-metal": ""}}}),
    )
    .await;
    until_lb_nodes(&h, &svc, &[&metal_label]).await;
    let lb = lb_of(&h, &svc).unwrap();
    assert!(!lb.nodes.contains(&metal_id), "{:?}", lb.nodes);
}

/// A LoadBalancer Service `name` with `ports`, asking to share the load balancer of `key`.
fn sharing(name: &str, key: &str, ports: &[(&str, i32)]) -> Service {
    let mut svc = lb_service(name, ports);
    svc.metadata.annotations = Some([(SHARING_KEY_ANNOTATION.to_owned(), key.to_owned())].into());
    svc
}

/// The key the controller says it put `svc`'s ports in, if any.
fn applied_key(svc: &Service) -> Option<&str> {
    let annotations = svc.metadata.annotations.as_ref()?;
    annotations
        .get(SHARING_KEY_APPLIED_ANNOTATION)
        .map(String::as_str)
}

/// The fake cloud's load balancers made for a Service of `ns`.
fn lbs_in(h: &Harness, ns: &str) -> Vec<FakeLoadBalancer> {
    let prefix = format!("{ns}/");
    let lbs = h.cloud.load_balancers().into_iter();
    lbs.filter(|lb| lb.service.starts_with(&prefix)).collect()
}

/// The ports of the one load balancer of `ns`, as `PROTOCOL:port->nodePort`, sorted; `None`
/// when there is none, a panic when there are several.
fn shared_ports(h: &Harness, ns: &str) -> Option<Vec<String>> {
    let lbs = lbs_in(h, ns);
    assert!(lbs.len() <= 1, "one load balancer for the group: {lbs:?}");
    lbs.first().map(|lb| {
        let mut ports = lb.ports.clone();
        ports.sort();
        ports
    })
}

/// `svc`'s ports as the fake cloud writes them.
fn cloud_ports(svc: &Service) -> Vec<String> {
    let ports = svc.spec.as_ref().unwrap().ports.iter().flatten();
    ports
        .map(|p| format!("TCP:{}->{}", p.port, p.node_port.unwrap()))
        .collect()
}

async fn until_shared_ports(h: &Harness, ns: &str, members: &[&Service]) {
    let mut want: Vec<String> = members.iter().flat_map(|s| cloud_ports(s)).collect();
    want.sort();
    eventually(
        &format!("shared load balancer ports {want:?}"),
        WAIT,
        || async {
            let got = shared_ports(h, ns);
            if got.as_ref() == Some(&want) {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn services_with_one_key_share_one_load_balancer() {
    let (h, ns) = harness("shared").await;
    create_node(&h, "shared").await;
    let conditions = config().with_conditions(true).with_health_period(ms(300));
    let _ctl = start(&h, &ns, fake(&h), conditions).await;

    // Two Services, one key: one load balancer, one address, both ports.
    create_service(&h, &ns, &sharing("a", "web", &[("http", 80)])).await;
    create_service(&h, &ns, &sharing("b", "web", &[("alt", 8080)])).await;
    let a = h.wait_service(&ns, "a", WAIT, has_ingress).await;
    let b = h.wait_service(&ns, "b", WAIT, has_ingress).await;
    assert_eq!(ingress_of(&a), ingress_of(&b), "one address");
    until_shared_ports(&h, &ns, &[&a, &b]).await;
    assert!(
        has_lb_finalizer(&a) && has_lb_finalizer(&b),
        "every member holds the finalizer"
    );
    let lb = lbs_in(&h, &ns).remove(0);
    assert!(lb.service.starts_with(&format!("{ns}/shared-")), "{lb:?}");
    // Each member's health is the group load balancer's.
    for name in ["a", "b"] {
        h.wait_service(&ns, name, WAIT, |s| {
            says(s, LOAD_BALANCER_DEGRADED, "False", "Healthy")
        })
        .await;
    }

    // A third with a port taken: refused, with a Warning and a condition; no address.
    create_service(&h, &ns, &sharing("c", "web", &[("http", 80)])).await;
    let note = wait_note(&h, &ns, "c", REASON_SHARING_REFUSED, |n| {
        n.contains("port 80/TCP is already \"a\"'s")
    })
    .await;
    assert!(note.len() <= 1024, "{note}");
    let c = h
        .wait_service(&ns, "c", WAIT, |s| {
            says(
                s,
                LOAD_BALANCER_PROVISIONING,
                "False",
                REASON_SHARING_REFUSED,
            )
        })
        .await;
    assert!(!has_ingress(&c));
    until_shared_ports(&h, &ns, &[&a, &b]).await;

    // The key in another namespace: a load balancer of its own; the first is unchanged.
    let other = h.cp.create_namespace("svc-shared-other").await.unwrap();
    let _other_ctl = start(&h, &other, fake(&h), config()).await;
    create_service(&h, &other, &sharing("a", "web", &[("http", 80)])).await;
    let copied = h.wait_service(&other, "a", WAIT, has_ingress).await;
    assert_ne!(ingress_of(&copied), ingress_of(&a), "another load balancer");
    until_shared_ports(&h, &other, &[&copied]).await;
    until_shared_ports(&h, &ns, &[&a, &b]).await;

    // A member goes: its ports leave the load balancer, and the refused one fits now.
    h.services(&ns)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_service_gone(&ns, "a", WAIT).await;
    let c = h.wait_service(&ns, "c", WAIT, has_ingress).await;
    assert_eq!(ingress_of(&c), ingress_of(&b), "the same address");
    until_shared_ports(&h, &ns, &[&b, &c]).await;

    // The rest go: the load balancer with them, and no finalizer holds them.
    for name in ["b", "c"] {
        h.services(&ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        h.wait_service_gone(&ns, name, WAIT).await;
    }
    assert_eq!(shared_ports(&h, &ns), None, "deleted with the last member");
    until_shared_ports(&h, &other, &[&copied]).await;
}

#[tokio::test]
async fn a_service_leaving_its_group_takes_its_ports_and_gets_its_own() {
    let (h, ns) = harness("shared-leave").await;
    create_node(&h, "shared-leave").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    create_service(&h, &ns, &sharing("a", "k", &[("http", 80)])).await;
    create_service(&h, &ns, &sharing("b", "k", &[("alt", 81)])).await;
    let a = h.wait_service(&ns, "a", WAIT, has_ingress).await;
    let b = h.wait_service(&ns, "b", WAIT, has_ingress).await;
    until_shared_ports(&h, &ns, &[&a, &b]).await;
    assert_eq!(applied_key(&b), Some("k"));

    // b drops the key: a load balancer of its own, and the group's has a's port alone.
    patch_service(
        &h,
        &ns,
        "b",
        json!({"metadata": {"annotations": {SHARING_KEY_ANNOTATION: null}}}),
    )
    .await;
    let b = h
        .wait_service(&ns, "b", WAIT, |s| {
            has_ingress(s) && ingress_of(s) != ingress_of(&a) && applied_key(s).is_none()
        })
        .await;
    assert!(lb_of(&h, &b).is_some(), "its own load balancer");
    eventually("the group's load balancer without b", WAIT, || async {
        let group = lbs_in(&h, &ns)
            .into_iter()
            .find(|lb| lb.service.contains("/shared-"));
        match group {
            Some(lb) if lb.ports == cloud_ports(&a) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // b joins again: its own load balancer goes, its ports are the group's again.
    patch_service(
        &h,
        &ns,
        "b",
        json!({"metadata": {"annotations": {SHARING_KEY_ANNOTATION: "k"}}}),
    )
    .await;
    h.wait_service(&ns, "b", WAIT, |s| ingress_of(s) == ingress_of(&a))
        .await;
    until_shared_ports(&h, &ns, &[&a, &b]).await;

    // The last members go by type: the load balancer is deleted.
    for name in ["a", "b"] {
        patch_service(&h, &ns, name, json!({"spec": {"type": "ClusterIP"}})).await;
    }
    for name in ["a", "b"] {
        h.wait_service(&ns, name, WAIT, |s| !has_lb_finalizer(s) && !has_ingress(s))
            .await;
    }
    assert_eq!(shared_ports(&h, &ns), None);
}

#[tokio::test]
async fn sharing_a_cloud_cannot_share_or_a_bad_key_is_refused_without_a_load_balancer() {
    let (h, ns) = harness("shared-refused").await;
    create_node(&h, "shared-refused").await;
    h.cloud.set_sharing(false);
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    create_service(&h, &ns, &sharing("a", "k", &[("http", 80)])).await;
    wait_note(&h, &ns, "a", REASON_SHARING_REFUSED, |n| {
        n.contains("does not support load balancers shared")
    })
    .await;
    // A key of 10 KB: refused as a key (before the provider is asked), the note bounded.
    create_service(
        &h,
        &ns,
        &sharing("huge", &"k".repeat(10 * 1024), &[("http", 80)]),
    )
    .await;
    let note = wait_note(&h, &ns, "huge", REASON_SHARING_REFUSED, |n| {
        n.contains("10240 bytes long")
    })
    .await;
    assert!(note.len() <= 1024, "{}", note.len());
    // Neither got a load balancer of its own, nor an address.
    assert!(lbs_in(&h, &ns).is_empty(), "{:?}", lbs_in(&h, &ns));
    for name in ["a", "huge"] {
        let svc = h.services(&ns).get(name).await.unwrap();
        assert!(!has_ingress(&svc));
        assert_eq!(calls_for(&h, Method::EnsureLoadBalancer, &ns, name), 0);
    }
}

/// A Node of this run with a provider ID and the label `pool=<pool>`.
async fn create_pool_node(h: &Harness, prefix: &str, pool: &str) -> String {
    let mut node = h.new_node(prefix);
    let name = node.metadata.name.clone().unwrap();
    node.spec.as_mut().unwrap().provider_id = Some(format!("fake://{name}"));
    node.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("pool".to_owned(), pool.to_owned());
    h.create_node(&node).await;
    name
}

async fn set_pool(h: &Harness, name: &str, pool: &str) {
    patch_node(h, name, json!({"metadata": {"labels": {"pool": pool}}})).await;
}

/// A load balancer Service `name` for port 80 whose backends are the Nodes `selector`
/// selects.
fn selecting(name: &str, selector: &str) -> Service {
    let mut svc = lb_service(name, &[("http", 80)]);
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(NODE_SELECTOR_ANNOTATION.to_owned(), selector.to_owned());
    svc
}

async fn set_selector(h: &Harness, ns: &str, name: &str, selector: &str) {
    let annotations = json!({NODE_SELECTOR_ANNOTATION: selector});
    patch_service(
        h,
        ns,
        name,
        json!({"metadata": {"annotations": annotations}}),
    )
    .await;
}

/// The fake cloud's calls, of any method, about `ns/name`.
fn all_calls_for(h: &Harness, ns: &str, name: &str) -> usize {
    let target = format!("{ns}/{name}");
    h.cloud
        .calls()
        .iter()
        .filter(|c| c.target == target)
        .count()
}

#[tokio::test]
async fn a_node_selector_limits_the_load_balancer_to_the_nodes_it_selects() {
    let (h, ns) = harness("selector").await;
    let a1 = create_pool_node(&h, "sel-a", "a").await;
    let a2 = create_pool_node(&h, "sel-a", "a").await;
    let b1 = create_pool_node(&h, "sel-b", "b").await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    let pool_a = create_service(&h, &ns, &selecting("pool-a", "pool=a")).await;
    let all = ensured_web(&h, &ns).await;
    h.wait_service(&ns, "pool-a", WAIT, has_ingress).await;
    until_lb_nodes(&h, &pool_a, &[&a1, &a2]).await;
    until_lb_nodes(&h, &all, &[&a1, &a2, &b1]).await;
    let updates = |name: &str| calls_for(&h, Method::UpdateLoadBalancer, &ns, name);
    assert_eq!((updates("pool-a"), updates("web")), (0, 0));

    // A Node relabelled into pool a joins that load balancer only.
    set_pool(&h, &b1, "a").await;
    until_lb_nodes(&h, &pool_a, &[&a1, &a2, &b1]).await;
    assert_eq!(updates("pool-a"), 1);
    // And one relabelled out of it leaves it.
    set_pool(&h, &a1, "b").await;
    until_lb_nodes(&h, &pool_a, &[&a2, &b1]).await;
    assert_eq!(updates("pool-a"), 2);
    // A label no selector reads wakes no node-sync pass at all.
    let passes = node_sync_passes(&ctl);
    patch_node(&h, &a2, json!({"metadata": {"labels": {"team": "x"}}})).await;
    tokio::time::sleep(ms(1000)).await;
    assert_eq!(node_sync_passes(&ctl), passes);
    // The Service without a selector kept every Node throughout, without a call.
    until_lb_nodes(&h, &all, &[&a1, &a2, &b1]).await;
    assert_eq!(updates("web"), 0);
    assert_eq!(calls_for(&h, Method::EnsureLoadBalancer, &ns, "web"), 1);

    // A selector of no Node: an empty list, and Go's Warning.
    set_selector(&h, &ns, "pool-a", "pool=c").await;
    until_lb_nodes(&h, &pool_a, &[]).await;
    h.wait_event_in(&ns, "pool-a", REASON_UNAVAILABLE, WAIT)
        .await;
    assert!(
        !reasons_of(&h, &ns, "web")
            .await
            .contains(&REASON_UNAVAILABLE.to_owned()),
        "only the Service concerned"
    );
    // The exclude label still applies under a selector.
    set_selector(&h, &ns, "pool-a", "pool in (a,b)").await;
    until_lb_nodes(&h, &pool_a, &[&a1, &a2, &b1]).await;
    set_exclude_label(&h, &a2, "true").await;
    until_lb_nodes(&h, &pool_a, &[&a1, &b1]).await;
    until_lb_nodes(&h, &all, &[&a1, &b1]).await;
    assert_eq!(ctl.metrics.nodesync_error.get(), 0);
}

#[tokio::test]
async fn a_bad_node_selector_warns_and_leaves_the_load_balancer_alone() {
    let (h, ns) = harness("bad-selector").await;
    let a1 = create_pool_node(&h, "bad-sel-a", "a").await;
    let b1 = create_pool_node(&h, "bad-sel-b", "b").await;
    // Conditions without the health loop: every cloud call here is the workers'.
    let config = config()
        .with_conditions(true)
        .with_health_period(Duration::ZERO);
    let _ctl = start(&h, &ns, fake(&h), config).await;

    // It does not parse: a Warning naming the annotation and the fault, the failure in the
    // conditions, and no cloud call (nor finalizer) at all.
    create_service(&h, &ns, &selecting("web", "pool in a")).await;
    let note = h
        .wait_event_in(&ns, "web", REASON_INVALID_NODE_SELECTOR, WAIT)
        .await;
    assert!(
        note.contains(NODE_SELECTOR_ANNOTATION) && note.contains("\"pool in a\""),
        "{note}"
    );
    let failed = h
        .wait_service(&ns, "web", WAIT, |s| {
            says(
                s,
                LOAD_BALANCER_PROVISIONING,
                "False",
                REASON_INVALID_NODE_SELECTOR,
            )
        })
        .await;
    assert!(!has_lb_finalizer(&failed));
    assert_eq!(all_calls_for(&h, &ns, "web"), 0);
    assert!(
        !reasons_of(&h, &ns, "web")
            .await
            .contains(&REASON_ENSURING.to_owned())
    );

    // Fixed: ensured, with the Nodes it selects.
    set_selector(&h, &ns, "web", "pool=b").await;
    let svc = h.wait_service(&ns, "web", WAIT, has_ingress).await;
    until_lb_nodes(&h, &svc, &[&b1]).await;
    h.wait_service(&ns, "web", WAIT, |s| {
        condition(s, LOAD_BALANCER_PROVISIONING)
            .is_some_and(|c| c.reason != REASON_INVALID_NODE_SELECTOR)
    })
    .await;

    // Broken again on an ensured load balancer: a Warning, and the load balancer is left as
    // it is, even when a Node moves into what it selected.
    let calls = all_calls_for(&h, &ns, "web");
    let warned = h
        .event_count(&ns, "web", REASON_INVALID_NODE_SELECTOR)
        .await;
    set_selector(&h, &ns, "web", "pool=(b").await;
    eventually("another InvalidLoadBalancerNodeSelector", WAIT, || async {
        match h
            .event_count(&ns, "web", REASON_INVALID_NODE_SELECTOR)
            .await
        {
            n if n > warned => Ok(()),
            n => Err(format!("{n} events")),
        }
    })
    .await;
    set_pool(&h, &a1, "b").await;
    tokio::time::sleep(ms(1500)).await;
    assert_eq!(
        all_calls_for(&h, &ns, "web"),
        calls,
        "{:?}",
        h.cloud.calls()
    );
    until_lb_nodes(&h, &svc, &[&b1]).await;
    let svc = h.wait_service(&ns, "web", WAIT, has_ingress).await;
    assert!(has_lb_finalizer(&svc), "nothing was cleaned up");

    // Fixed again: the Nodes of now.
    set_selector(&h, &ns, "web", "pool=b").await;
    until_lb_nodes(&h, &svc, &[&a1, &b1]).await;
    assert_eq!(
        calls_for(&h, Method::EnsureLoadBalancerDeleted, &ns, "web"),
        0
    );
}

#[tokio::test]
async fn a_thousand_services_on_one_key_fill_one_group_and_the_rest_are_refused() {
    let (h, ns) = harness("shared-many").await;
    create_node(&h, "shared-many").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    // Each its own port, no node ports (a thousand would crowd the range the other tests
    // of this binary allocate from).
    let services: Vec<Service> = (0..1000)
        .map(|i| {
            let mut svc = sharing(&format!("m{i:04}"), "many", &[("p", 1000 + i)]);
            let spec = svc.spec.as_mut().unwrap();
            spec.allocate_load_balancer_node_ports = Some(false);
            svc
        })
        .collect();
    for chunk in services.chunks(50) {
        futures::future::join_all(chunk.iter().map(|s| create_service(&h, &ns, s))).await;
    }
    eventually(
        "the group full, its load balancer with 32 ports",
        WAIT * 4,
        || async {
            let ports = shared_ports(&h, &ns).map_or(0, |p| p.len());
            let list = h.services(&ns).list(&Default::default()).await.unwrap();
            let served = list.items.iter().filter(|s| has_ingress(s)).count();
            if ports == MAX_SHARED_MEMBERS && served == MAX_SHARED_MEMBERS {
                Ok(())
            } else {
                Err(format!("{ports} ports, {served} served"))
            }
        },
    )
    .await;
    // The last one created is refused because the group is full, and says so.
    wait_note(&h, &ns, "m0999", REASON_SHARING_REFUSED, |n| {
        n.contains("already has 32 members")
    })
    .await;
    assert_eq!(
        lbs_in(&h, &ns).len(),
        1,
        "one load balancer, however many ask"
    );
}

#[tokio::test]
async fn a_member_displaced_while_the_controller_was_away_hears_it() {
    let (h, ns) = harness("shared-displaced").await;
    create_node(&h, "shared-displaced").await;
    // `a` is the older, but not a load balancer yet; `b` takes port 443 in the group.
    let mut a = sharing("a", "k", &[("https", 443)]);
    a.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    create_service(&h, &ns, &a).await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    create_service(&h, &ns, &sharing("b", "k", &[("https", 443)])).await;
    let b = h.wait_service(&ns, "b", WAIT, has_ingress).await;
    until_shared_ports(&h, &ns, &[&b]).await;

    // A new controller, which knows nothing of the group yet, sees `a` come back: the
    // older takes the port, and `b` hears that it is out, though nothing freed a place.
    ctl.kill().await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    patch_service(&h, &ns, "a", json!({"spec": {"type": "LoadBalancer"}})).await;
    let a = h.wait_service(&ns, "a", WAIT, has_ingress).await;
    until_shared_ports(&h, &ns, &[&a]).await;
    let b = h
        .wait_service(&ns, "b", WAIT, |s| {
            !has_ingress(s) && applied_key(s).is_none()
        })
        .await;
    wait_note(&h, &ns, "b", REASON_SHARING_REFUSED, |n| {
        n.contains("port 443/TCP is already \"a\"'s")
    })
    .await;
    assert!(
        has_lb_finalizer(&b),
        "it keeps the finalizer; nothing of its is left"
    );
}

#[tokio::test]
async fn a_refused_service_keeps_the_load_balancer_it_had() {
    let (h, ns) = harness("shared-keeps").await;
    create_node(&h, "shared-keeps").await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    create_service(&h, &ns, &sharing("first", "k", &[("http", 80)])).await;
    h.wait_service(&ns, "first", WAIT, has_ingress).await;
    let solo = ensured_web(&h, &ns).await;
    let own = lb_of(&h, &solo).expect("its own load balancer");

    // It asks to share, but its port is taken: refused, and it loses nothing.
    patch_service(
        &h,
        &ns,
        "web",
        json!({"metadata": {"annotations": {SHARING_KEY_ANNOTATION: "k"}}}),
    )
    .await;
    wait_note(&h, &ns, "web", REASON_SHARING_REFUSED, |n| {
        n.contains("port 80/TCP is already \"first\"'s")
    })
    .await;
    let web = h.services(&ns).get("web").await.unwrap();
    assert_eq!(ingress_of(&web), ingress_of(&solo), "its address stays");
    assert_eq!(
        lb_of(&h, &solo),
        Some(own),
        "its load balancer stays as it was"
    );

    // The group's member goes: the place is free, it joins, and its own goes.
    h.services(&ns)
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    let web = h
        .wait_service(&ns, "web", WAIT, |s| applied_key(s).is_some())
        .await;
    until_shared_ports(&h, &ns, &[&web]).await;
    assert!(
        lb_of(&h, &solo).is_none(),
        "its own load balancer is deleted when it joins"
    );
}

#[tokio::test]
async fn a_refused_service_without_a_load_balancer_of_its_own_shows_no_address() {
    let (h, ns) = harness("shared-unmarked").await;
    create_node(&h, "shared-unmarked").await;
    let ctl = start(&h, &ns, fake(&h), config()).await;
    create_service(&h, &ns, &sharing("first", "k", &[("http", 80)])).await;
    let first = h.wait_service(&ns, "first", WAIT, has_ingress).await;
    until_shared_ports(&h, &ns, &[&first]).await;
    ctl.kill().await;

    // What a member displaced by `first` is left with when the controller stops between
    // taking its applied key off and clearing its address (or when the sync that refused
    // it read a copy without the address yet): no applied key, no load balancer of its
    // own, and the group's address.
    let mut x = sharing("x", "k", &[("http", 80)]);
    x.metadata.finalizers = Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()]);
    create_service(&h, &ns, &x).await;
    let group_status = first.status.as_ref().unwrap().load_balancer.clone();
    h.services(&ns)
        .patch_status(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": group_status}})),
        )
        .await
        .unwrap();

    // Refused, it keeps nothing it does not have: the address goes.
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    wait_note(&h, &ns, "x", REASON_SHARING_REFUSED, |n| {
        n.contains("port 80/TCP is already \"first\"'s")
    })
    .await;
    let x = h
        .wait_service(&ns, "x", WAIT, |s| {
            !has_ingress(s) && applied_key(s).is_none()
        })
        .await;
    assert!(lb_of(&h, &x).is_none(), "no load balancer of its own");
    let first = h.services(&ns).get("first").await.unwrap();
    assert!(has_ingress(&first), "the member keeps the group's address");
    until_shared_ports(&h, &ns, &[&first]).await;
}

#[tokio::test]
async fn a_member_left_marked_by_an_interrupted_clean_up_is_cleaned() {
    let (h, ns) = harness("shared-marked").await;
    create_node(&h, "shared-marked").await;
    // What a controller killed between deleting the last member's group load balancer and
    // taking the member's applied key off leaves: no load balancer, a ClusterIP Service
    // with the finalizer and the applied key.
    let mut svc = sharing("x", "k", &[("http", 80)]);
    svc.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    svc.metadata.finalizers = Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()]);
    svc.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(SHARING_KEY_APPLIED_ANNOTATION.to_owned(), "k".to_owned());
    create_service(&h, &ns, &svc).await;
    let _ctl = start(&h, &ns, fake(&h), config()).await;
    h.wait_service(&ns, "x", WAIT, |s| {
        !has_lb_finalizer(s) && applied_key(s).is_none()
    })
    .await;
    assert!(lbs_in(&h, &ns).is_empty());
}

/// The guard the conditions' first write relies on: the API server's JSON Patch passes a
/// `test` of `null` on a missing member, and fails it once the member exists (so a list
/// someone else added meanwhile is never replaced unseen).
#[tokio::test]
async fn a_null_test_guards_an_absent_conditions_list() {
    let (h, ns) = harness("null-test").await;
    create_service(&h, &ns, &lb_service("web", &[("http", 80)])).await;
    let add = |reason: &str| {
        let ops = json!([
            {"op": "test", "path": "/status/conditions", "value": null},
            {"op": "add", "path": "/status/conditions", "value": [{
                "type": "Example", "status": "True", "reason": reason, "message": "",
                "lastTransitionTime": "2026-12-06T00:00:00Z",
            }]},
        ]);
        Patch::<()>::Json(serde_json::from_value(ops).unwrap())
    };
    let api = h.services(&ns);
    let written = api
        .patch_status("web", &PatchParams::default(), &add("First"))
        .await
        .expect("a null test passes on a missing member");
    let conditions = written.status.unwrap().conditions.unwrap();
    assert_eq!(conditions[0].reason, "First");
    let again = api
        .patch_status("web", &PatchParams::default(), &add("Second"))
        .await;
    assert!(again.is_err(), "the list exists now: the test fails");
    let svc = api.get("web").await.unwrap();
    assert_eq!(svc.status.unwrap().conditions.unwrap()[0].reason, "First");
}
