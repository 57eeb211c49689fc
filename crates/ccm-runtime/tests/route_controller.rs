//! The route controller against a real kube-apiserver + etcd, with the fake cloud.
//!
//! Each test has its own fake cloud, its own cluster name (routes are stored per cluster)
//! and a Node informer that sees only its own Nodes.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ccm_fake_cloud::{FakeCloud, Fault, Method};
use ccm_provider::{CloudProvider, CloudResult, Route, Routes, node_address};
use ccm_runtime::controllers::route::{
    CONDITION_REASON_NO_ROUTE_CREATED, CONDITION_REASON_ROUTE_CREATED,
    REASON_FAILED_TO_CREATE_ROUTE, RouteController, RouteControllerConfig,
};
use ccm_runtime::informer::Informer;
use ccm_runtime::metrics::Metrics;
use ccm_test::eventually;
use ccm_test::fixtures::node_condition;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::*;

const WAIT: Duration = Duration::from_secs(30);
const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// A config for a fresh cluster name, reconciling every `period`, debouncing 200 ms.
fn config(cidr: &str, period: Duration) -> RouteControllerConfig {
    RouteControllerConfig::new(ccm_test::unique_name("cluster"), cidr)
        .expect("valid config")
        .with_reconciliation_period(period)
        .expect("valid period")
        .with_debounce(Duration::from_millis(200))
}

/// Starts the informer and the controller over `provider`; returns the cluster name.
fn start_with(
    h: &Harness,
    provider: Arc<dyn CloudProvider>,
    config: RouteControllerConfig,
    metrics: Option<&Metrics>,
) -> String {
    let informer: Informer<Node> = h.node_informer();
    let cluster = config.cluster_name().to_owned();
    let config = match metrics {
        Some(metrics) => config.with_metrics(metrics.controllers().clone()),
        None => config,
    };
    let controller = RouteController::new(h.client.clone(), &provider, informer.clone(), config)
        .expect("routes supported");
    h.start_informer(&informer);
    tokio::spawn(controller.run(h.cancel.clone()));
    cluster
}

fn start(h: &Harness, config: RouteControllerConfig) -> String {
    start_with(h, h.cloud.clone(), config, None)
}

fn name(node: &Node) -> String {
    node.name_any()
}

/// The routes of `cluster` as (target node, destination), sorted.
fn route_set(h: &Harness, cluster: &str) -> BTreeSet<(String, String)> {
    h.cloud
        .routes(cluster)
        .into_iter()
        .map(|r| (r.target_node, r.destination_cidr))
        .collect()
}

/// Waits until `cluster`'s routes are exactly `want`.
async fn wait_routes(h: &Harness, cluster: &str, want: &BTreeSet<(String, String)>) {
    eventually(&format!("routes {want:?}"), WAIT, || async {
        let routes = route_set(h, cluster);
        if routes == *want {
            Ok(())
        } else {
            Err(format!("{routes:?}"))
        }
    })
    .await;
}

/// Waits until every Node of the run named in `names` has NetworkUnavailable = `status`
/// with `reason`.
async fn wait_condition(h: &Harness, names: &[String], status: &str, reason: &str) {
    eventually(
        &format!(
            "NetworkUnavailable={status}/{reason} on {} nodes",
            names.len()
        ),
        WAIT,
        || async {
            let nodes = h.run_nodes().await;
            names.iter().all(|n| {
                nodes.iter().any(|node| {
                    node.name_any() == *n
                        && node_condition(node, NETWORK_UNAVAILABLE)
                            == Some((status.to_owned(), reason.to_owned()))
                })
            })
        },
    )
    .await;
}

/// [`wait_condition`] for the one Node `name`.
async fn wait_node_condition(h: &Harness, name: &str, status: &str, reason: &str) {
    wait_condition(h, &[name.to_owned()], status, reason).await;
}

/// Creates a Node of this run (named after `prefix`) with the pod CIDR `cidr`; returns its
/// name.
async fn create_routed_node(h: &Harness, prefix: &str, cidr: &str) -> String {
    name(
        &h.create_node(&h.new_node_with_pod_cidrs(prefix, &[cidr]))
            .await,
    )
}

/// Waits until the controller has listed routes `passes` more times: proof that it ran
/// that many more reconciles.
async fn wait_passes(h: &Harness, passes: u64) {
    let target = h.cloud.call_count(Method::ListRoutes) + passes;
    eventually(&format!("{passes} more reconciles"), WAIT, || async {
        let listed = h.cloud.call_count(Method::ListRoutes);
        if listed >= target {
            Ok(())
        } else {
            Err(format!("{listed} route lists of {target}"))
        }
    })
    .await;
}

/// What a cloud answers a create past its route quota.
fn quota_exceeded() -> Fault {
    Fault::Error("route quota exceeded".into())
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test]
async fn hundred_nodes_get_exactly_hundred_routes_and_their_conditions() {
    let h = Harness::new(FakeCloud::new()).await;
    // The period is a minute: after the first (empty) reconcile, Node events drive it.
    let started = tokio::time::Instant::now();
    let cluster = start(
        &h,
        config("10.244.0.0/16", Duration::from_secs(60)).with_debounce(Duration::from_secs(1)),
    );

    // A hundred Nodes join at once, after the controller started.
    let nodes: Vec<Node> = (0..100)
        .map(|i| h.new_node_with_pod_cidrs("node", &[&format!("10.244.{i}.0/24")]))
        .collect();
    let created: Vec<Node> = futures::stream::iter(nodes.iter())
        .map(|n| h.create_node(n))
        .buffer_unordered(16)
        .collect()
        .await;
    let names: Vec<String> = created.iter().map(name).collect();
    let want: BTreeSet<(String, String)> = nodes
        .iter()
        .map(|n| {
            let cidr = n.spec.as_ref().unwrap().pod_cidr.clone().unwrap();
            (name(n), cidr)
        })
        .collect();
    wait_routes(&h, &cluster, &want).await;
    wait_condition(&h, &names, "False", CONDITION_REASON_ROUTE_CREATED).await;

    assert_eq!(h.cloud.call_count(Method::CreateRoute), 100);
    assert_eq!(h.cloud.duplicate_route_creates(), 0);
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 0);
    // Each route is named after its Node's UID (the fake cloud names it cluster-hint).
    for node in &created {
        let uid = node.uid().unwrap();
        assert!(
            h.cloud
                .routes(&cluster)
                .iter()
                .any(|r| r.name == format!("{cluster}-{uid}") && r.target_node == name(node)),
            "no route named by the UID of {}",
            name(node)
        );
    }
    // A hundred Node events cost no listing: the reconciles they trigger plan against the
    // first listing and the creates since. Only the period lists.
    let lists = h.cloud.call_count(Method::ListRoutes);
    let periods = started.elapsed().as_secs() / 60;
    assert_eq!(
        lists as u64,
        1 + periods,
        "route listings for 100 node events"
    );
    // One condition write per Node.
    assert!(h.api.counters().count("PATCH", "nodes/status") >= 100);
}

#[tokio::test]
async fn nodes_joining_in_bursts_are_routed_without_listing_and_a_delete_lists() {
    let h = Harness::new(FakeCloud::new()).await;
    let started = tokio::time::Instant::now();
    let debounce = Duration::from_millis(100);
    let cluster = start(
        &h,
        config("10.244.0.0/16", Duration::from_secs(60)).with_debounce(debounce),
    );
    wait_passes(&h, 1).await;
    // Five bursts, each of four Nodes, each burst well after the last one's reconcile.
    let mut want = BTreeSet::new();
    let mut names = Vec::new();
    for burst in 0..5 {
        for i in 0..4 {
            let cidr = format!("10.244.{}.0/24", burst * 4 + i);
            let node = h
                .create_node(&h.new_node_with_pod_cidrs("burst", &[&cidr]))
                .await;
            want.insert((name(&node), cidr));
            names.push(name(&node));
        }
        wait_routes(&h, &cluster, &want).await;
    }
    wait_condition(&h, &names, "False", CONDITION_REASON_ROUTE_CREATED).await;
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 20);
    assert_eq!(h.cloud.duplicate_route_creates(), 0);
    let periods = started.elapsed().as_secs() / 60;
    assert_eq!(
        h.cloud.call_count(Method::ListRoutes) as u64,
        1 + periods,
        "five bursts of joins listed the routes"
    );

    // A deleted Node: the plan against the table would delete, so it lists first (a
    // delete needs the cloud's name for the route), then deletes.
    h.nodes()
        .delete(&names[0], &DeleteParams::default())
        .await
        .expect("delete node");
    want.retain(|(n, _)| *n != names[0]);
    wait_routes(&h, &cluster, &want).await;
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 1);
    let periods = started.elapsed().as_secs() / 60;
    assert_eq!(
        h.cloud.call_count(Method::ListRoutes) as u64,
        2 + periods,
        "one listing for the delete"
    );

    // A failed create distrusts the table: the next reconcile lists.
    h.cloud
        .inject_times(Method::CreateRoute, quota_exceeded(), 1);
    let node = create_routed_node(&h, "burst", "10.244.99.0/24").await;
    wait_node_condition(&h, &node, "True", CONDITION_REASON_NO_ROUTE_CREATED).await;
    let lists = h.cloud.call_count(Method::ListRoutes);
    let other = create_routed_node(&h, "burst", "10.244.98.0/24").await;
    wait_node_condition(&h, &other, "False", CONDITION_REASON_ROUTE_CREATED).await;
    assert!(
        h.cloud.call_count(Method::ListRoutes) > lists,
        "no listing after a failed create"
    );
}

#[tokio::test]
async fn a_deleted_node_loses_its_route() {
    let h = Harness::new(FakeCloud::new()).await;
    let a = create_routed_node(&h, "del-a", "10.244.1.0/24").await;
    let b = create_routed_node(&h, "del-b", "10.244.2.0/24").await;
    let metrics = Metrics::new();
    let cluster = start_with(
        &h,
        h.cloud.clone(),
        config("10.244.0.0/16", Duration::from_secs(60)),
        Some(&metrics),
    );
    wait_routes(
        &h,
        &cluster,
        &set(&[(&a, "10.244.1.0/24"), (&b, "10.244.2.0/24")]),
    )
    .await;

    h.nodes()
        .delete(&a, &DeleteParams::default())
        .await
        .expect("delete node");
    // The period is a minute: the Node event alone brings the delete.
    wait_routes(&h, &cluster, &set(&[(&b, "10.244.2.0/24")])).await;
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 1);
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 2);
    // One sync per listing: the first reconcile and the one after the delete, at least.
    let syncs = metrics.controllers().route_sync.get();
    assert!(
        (2..=h.cloud.call_count(Method::ListRoutes)).contains(&syncs),
        "route_controller_route_sync_total = {syncs}"
    );
    assert!(
        metrics
            .encode()
            .contains("route_controller_route_sync_total")
    );
}

#[tokio::test]
async fn a_changed_pod_cidr_moves_the_route() {
    let h = Harness::new(FakeCloud::new()).await;
    let first = h.new_node_with_pod_cidrs("move", &["10.244.1.0/24"]);
    let node_name = name(&first);
    let first = h.create_node(&first).await;
    let cluster = start(&h, config("10.244.0.0/16", Duration::from_secs(1)));
    wait_routes(&h, &cluster, &set(&[(&node_name, "10.244.1.0/24")])).await;

    // The API server does not let a pod CIDR change once set...
    let err = h
        .nodes()
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"podCIDR": "10.244.9.0/24", "podCIDRs": ["10.244.9.0/24"]}}),
            ),
        )
        .await
        .expect_err("podCIDR is immutable once set");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "unexpected error: {err}"
    );

    // ...so a Node gets a new one by being deleted and registered again, under the same name.
    h.nodes()
        .delete(&node_name, &DeleteParams::default())
        .await
        .expect("delete node");
    h.wait_node_gone(&node_name, WAIT).await;
    let mut again = first.clone();
    again.metadata = kube::api::ObjectMeta {
        name: first.metadata.name.clone(),
        labels: first.metadata.labels.clone(),
        ..Default::default()
    };
    again.status = None;
    let spec = again.spec.as_mut().unwrap();
    spec.pod_cidr = Some("10.244.9.0/24".into());
    spec.pod_cidrs = Some(vec!["10.244.9.0/24".into()]);
    let again = h.create_node(&again).await;
    assert_ne!(again.uid(), first.uid());

    wait_routes(&h, &cluster, &set(&[(&node_name, "10.244.9.0/24")])).await;
    let routes = h.cloud.routes(&cluster);
    assert_eq!(
        routes[0].name,
        format!("{cluster}-{}", again.uid().unwrap()),
        "created with the new UID as name hint"
    );
    wait_node_condition(&h, &node_name, "False", CONDITION_REASON_ROUTE_CREATED).await;
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 1);
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 2);
    assert_eq!(h.cloud.duplicate_route_creates(), 0);
}

#[tokio::test]
async fn only_routes_inside_the_cluster_cidr_are_deleted() {
    let h = Harness::new(FakeCloud::new()).await;
    let node = create_routed_node(&h, "own", "10.244.1.0/24").await;
    let config = config("10.244.0.0/16", Duration::from_millis(300));
    let cluster = config.cluster_name().to_owned();
    let foreign = [
        Route::new("someone-else", "192.168.5.0/24").with_name("foreign"),
        Route::new("", "172.16.0.0/24")
            .with_name("foreign-blackhole")
            .with_blackhole(true),
        Route::new("gone-node", "10.0.0.0/16").with_name("foreign-next-door"),
    ];
    for r in &foreign {
        h.cloud.insert_route(&cluster, r.clone());
    }
    // In range: a route without a target, a blackhole, and one to a Node that is no more.
    h.cloud.insert_route(
        &cluster,
        Route::new("", "10.244.200.0/24").with_name("stray"),
    );
    h.cloud.insert_route(
        &cluster,
        Route::new("gone-node", "10.244.201.0/24")
            .with_name("hole")
            .with_blackhole(true),
    );
    h.cloud.insert_route(
        &cluster,
        Route::new("gone-node", "10.244.202.0/24").with_name("orphan"),
    );
    start(&h, config);

    let mut want: BTreeSet<(String, String)> = foreign
        .iter()
        .map(|r| (r.target_node.clone(), r.destination_cidr.clone()))
        .collect();
    want.insert((node.clone(), "10.244.1.0/24".into()));
    wait_routes(&h, &cluster, &want).await;
    wait_passes(&h, 3).await;
    assert_eq!(route_set(&h, &cluster), want);
    for r in &foreign {
        assert!(
            h.cloud.routes(&cluster).contains(r),
            "foreign route {r:?} changed"
        );
    }
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 3);
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 1);
}

#[tokio::test]
async fn dual_stack_nodes_get_one_route_per_family() {
    let h = Harness::new(FakeCloud::new()).await;
    let mut names = Vec::new();
    let mut want = BTreeSet::new();
    for i in 1..=3 {
        let v4 = format!("10.244.{i}.0/24");
        let v6 = format!("fd00:10:244:{i}::/64");
        let node = h
            .create_node(&h.new_node_with_pod_cidrs("dual", &[&v4, &v6]))
            .await;
        want.insert((name(&node), v4));
        want.insert((name(&node), v6));
        names.push(name(&node));
    }
    let cluster = start(
        &h,
        config("10.244.0.0/16,fd00:10:244::/48", Duration::from_secs(1)),
    );
    wait_routes(&h, &cluster, &want).await;
    wait_condition(&h, &names, "False", CONDITION_REASON_ROUTE_CREATED).await;
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 6);
    assert_eq!(h.cloud.duplicate_route_creates(), 0);
    // Both routes of a Node got its UID as the name hint (the fake cloud suffixes IPv6).
    for n in h.run_nodes().await {
        let uid = n.uid().unwrap();
        let mut names: Vec<String> = h
            .cloud
            .routes(&cluster)
            .into_iter()
            .filter(|r| r.target_node == name(&n))
            .map(|r| r.name)
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![format!("{cluster}-{uid}"), format!("{cluster}-{uid}-v6")]
        );
    }

    // Steady state: further reconciles change nothing, in the cloud or on the Nodes.
    h.cloud.clear_calls();
    h.api.counters().reset();
    wait_passes(&h, 2).await;
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 0);
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 0);
    assert_eq!(h.api.counters().count("PATCH", "nodes/status"), 0);
}

#[tokio::test]
async fn nodes_without_pod_cidr() {
    let h = Harness::new(FakeCloud::new()).await;
    // Routes but no pod CIDR: the route goes and the Node is marked unavailable.
    let stale = h.create_node(&h.new_node("stale")).await;
    let quiet = h.create_node(&h.new_node("quiet")).await;
    let config = config("10.244.0.0/16", Duration::from_secs(1));
    let cluster = config.cluster_name().to_owned();
    h.cloud.insert_route(
        &cluster,
        Route::new(name(&stale), "10.244.5.0/24").with_name("stale"),
    );
    start(&h, config);
    wait_routes(&h, &cluster, &BTreeSet::new()).await;
    wait_node_condition(&h, &name(&stale), "True", CONDITION_REASON_NO_ROUTE_CREATED).await;
    // Neither pod CIDR nor routes: untouched.
    wait_passes(&h, 2).await;
    let quiet = h.nodes().get(&name(&quiet)).await.unwrap();
    assert_eq!(node_condition(&quiet, NETWORK_UNAVAILABLE), None);
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 0);
}

#[tokio::test]
async fn a_failed_create_warns_and_the_node_stays_unavailable_until_it_succeeds() {
    let h = Harness::new(FakeCloud::new()).await;
    h.cloud.inject(Method::CreateRoute, quota_exceeded());
    let node = create_routed_node(&h, "quota", "10.244.3.0/24").await;
    let cluster = start(&h, config("10.244.0.0/16", Duration::from_millis(500)));

    let note = h
        .wait_event(&node, REASON_FAILED_TO_CREATE_ROUTE, WAIT)
        .await;
    assert!(note.contains("route quota exceeded"), "{note}");
    assert!(note.contains("10.244.3.0/24"), "{note}");
    wait_node_condition(&h, &node, "True", CONDITION_REASON_NO_ROUTE_CREATED).await;
    let events = h.events_for(&node).await;
    assert!(
        events
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == REASON_FAILED_TO_CREATE_ROUTE),
        "{events:?}"
    );

    h.cloud.clear_faults();
    wait_routes(&h, &cluster, &set(&[(&node, "10.244.3.0/24")])).await;
    wait_node_condition(&h, &node, "False", CONDITION_REASON_ROUTE_CREATED).await;
}

/// A create that failed because the cloud did not answer is tried again a probe interval
/// (2 s) after it, not at the next period (a minute here; Go waits for it).
#[tokio::test]
async fn a_create_the_cloud_did_not_answer_is_retried_before_the_period() {
    let h = Harness::new(FakeCloud::new()).await;
    h.cloud.inject_times(
        Method::CreateRoute,
        Fault::Unavailable("connection refused".into()),
        1,
    );
    let node = create_routed_node(&h, "down", "10.244.4.0/24").await;
    let cluster = start(&h, config("10.244.0.0/16", Duration::from_secs(60)));
    h.wait_event(&node, REASON_FAILED_TO_CREATE_ROUTE, WAIT)
        .await;
    let failed = std::time::Instant::now();
    wait_routes(&h, &cluster, &set(&[(&node, "10.244.4.0/24")])).await;
    let took = failed.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "{took:?}: waited for the period"
    );
    wait_node_condition(&h, &node, "False", CONDITION_REASON_ROUTE_CREATED).await;
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 2);
}

#[tokio::test]
async fn the_condition_patch_leaves_other_conditions_alone() {
    let h = Harness::new(FakeCloud::new()).await;
    let node = create_routed_node(&h, "merge", "10.244.4.0/24").await;
    let set_conditions = |conditions: serde_json::Value| {
        let nodes = h.nodes();
        let node = node.clone();
        async move {
            nodes
                .patch_status(
                    &node,
                    &PatchParams::default(),
                    &Patch::Strategic(json!({"status": {"conditions": conditions}})),
                )
                .await
                .expect("patch status");
        }
    };
    // Another writer's reason on a False NetworkUnavailable, and a Ready condition.
    set_conditions(json!([
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "NetworkUnavailable", "status": "False", "reason": "SomeoneElse",
         "lastTransitionTime": "2020-01-01T00:00:00Z"},
    ]))
    .await;
    start(&h, config("10.244.0.0/16", Duration::from_secs(1)));
    wait_node_condition(&h, &node, "False", CONDITION_REASON_ROUTE_CREATED).await;
    let n = h.nodes().get(&node).await.unwrap();
    assert_eq!(
        node_condition(&n, "Ready"),
        Some(("True".into(), "KubeletReady".into())),
        "the strategic merge kept the other condition"
    );
    let conditions = n.status.unwrap().conditions.unwrap();
    assert_eq!(conditions.len(), 2, "{conditions:?}");
    let network = conditions
        .iter()
        .find(|c| c.type_ == NETWORK_UNAVAILABLE)
        .unwrap();
    assert_eq!(
        network.last_transition_time.as_ref().unwrap().0.to_string(),
        "2020-01-01T00:00:00Z",
        "same status, so no transition"
    );
}

#[tokio::test]
async fn changed_addresses_replace_the_route_delete_first() {
    let h = Harness::new(FakeCloud::new()).await;
    let node = create_routed_node(&h, "moved", "10.244.6.0/24").await;
    h.nodes()
        .patch_status(
            &node,
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.6"}]}}),
            ),
        )
        .await
        .expect("patch addresses");
    let config = config("10.244.0.0/16", Duration::from_secs(1));
    let cluster = config.cluster_name().to_owned();
    // The provider routes by address, and the route still has the old one.
    h.cloud.insert_route(
        &cluster,
        Route::new(&node, "10.244.6.0/24")
            .with_name("old")
            .with_node_addresses(vec![node_address("InternalIP", "10.0.0.99")]),
    );
    start(&h, config);
    eventually("the route is replaced", WAIT, || async {
        h.cloud
            .routes(&cluster)
            .iter()
            .any(|r| r.name != "old" && r.target_node == node)
    })
    .await;
    let calls: Vec<Method> = h
        .cloud
        .calls()
        .into_iter()
        .map(|c| c.method)
        .filter(|m| matches!(m, Method::CreateRoute | Method::DeleteRoute))
        .collect();
    assert_eq!(calls, vec![Method::DeleteRoute, Method::CreateRoute]);
    let route = h.cloud.routes(&cluster).pop().unwrap();
    assert_eq!(
        route.target_node_addresses,
        Vec::new(),
        "created as Go creates it, without enable_node_addresses (the fake drops them)"
    );
    wait_node_condition(&h, &node, "False", CONDITION_REASON_ROUTE_CREATED).await;
    assert_eq!(h.cloud.duplicate_route_creates(), 0);
}

#[tokio::test]
async fn no_controller_without_routes() {
    let h = Harness::new(FakeCloud::new()).await;
    h.cloud.set_routes_enabled(false);
    let provider: Arc<dyn CloudProvider> = h.cloud.clone();
    let controller = RouteController::new(
        h.client.clone(),
        &provider,
        h.node_informer(),
        config("10.244.0.0/16", Duration::from_secs(1)),
    );
    assert!(controller.is_none());
}

/// The fake cloud's routes, with creates made slower still and listings that are `extra`
/// old when they arrive (as a real cloud's are: the table is read mid-call), counting what
/// is in flight.
struct SlowCreates {
    cloud: Arc<FakeCloud>,
    extra: Duration,
    stale_list: Duration,
    creating: AtomicUsize,
    most_creating: AtomicUsize,
    creating_when_listed: AtomicUsize,
}

#[async_trait]
impl Routes for SlowCreates {
    async fn list_routes(&self, cluster_name: &str) -> CloudResult<Vec<Route>> {
        self.creating_when_listed
            .fetch_max(self.creating.load(Ordering::SeqCst), Ordering::SeqCst);
        let routes = self.cloud.list_routes(cluster_name).await;
        tokio::time::sleep(self.stale_list).await;
        routes
    }

    async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> CloudResult<()> {
        let now = self.creating.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_creating.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.extra).await;
        let result = self
            .cloud
            .create_route(cluster_name, name_hint, route)
            .await;
        self.creating.fetch_sub(1, Ordering::SeqCst);
        result
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> CloudResult<()> {
        self.cloud.delete_route(cluster_name, route).await
    }
}

#[tokio::test]
async fn a_cloud_slower_than_the_period_gets_no_duplicate_creates() {
    let h = Harness::new(FakeCloud::new()).await;
    // Every call takes longer than the period, creates much longer: reconciles keep
    // listing while creates from earlier ones are in flight.
    h.cloud.set_latency(Duration::from_millis(300));
    let slow = Arc::new(SlowCreates {
        cloud: h.cloud.clone(),
        extra: Duration::from_millis(1200),
        stale_list: Duration::from_millis(300),
        creating: AtomicUsize::new(0),
        most_creating: AtomicUsize::new(0),
        creating_when_listed: AtomicUsize::new(0),
    });
    let mut names = Vec::new();
    let mut want = BTreeSet::new();
    let mut add = async |i: usize| {
        let cidr = format!("10.244.{i}.0/24");
        let node = h
            .create_node(&h.new_node_with_pod_cidrs("slow", &[&cidr]))
            .await;
        want.insert((name(&node), cidr));
        names.push(name(&node));
    };
    for i in 0..8 {
        add(i).await;
    }
    let config = config("10.244.0.0/16", Duration::from_millis(100))
        .with_max_concurrent_operations(5)
        .unwrap();
    let provider = Fronted::routes(h.cloud.clone(), slow.clone());
    let cluster = start_with(&h, provider, config, None);

    // More Nodes join while the first creates are in flight.
    eventually("the first creates start", WAIT, || async {
        h.cloud.call_count(Method::CreateRoute) > 0 || slow.creating.load(Ordering::SeqCst) > 0
    })
    .await;
    for i in 8..15 {
        add(i).await;
    }
    wait_routes(&h, &cluster, &want).await;
    wait_condition(&h, &names, "False", CONDITION_REASON_ROUTE_CREATED).await;
    wait_passes(&h, 3).await;

    assert!(
        slow.creating_when_listed.load(Ordering::SeqCst) > 0,
        "no reconcile listed routes while creates were in flight: the test proved nothing"
    );
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 15);
    assert_eq!(h.cloud.duplicate_route_creates(), 0);
    let most = slow.most_creating.load(Ordering::SeqCst);
    assert!(
        (1..=5).contains(&most),
        "{most} creates at once, over the cap of 5"
    );
}

#[tokio::test]
async fn nodes_that_are_not_this_cloud_s_get_no_route_and_keep_theirs() {
    let h = Harness::new(FakeCloud::new()).await;
    let ours = create_routed_node(&h, "ours", "10.244.1.0/24").await;
    // Labelled as bare metal, with a pod CIDR.
    let mut metal = h.new_node_with_pod_cidrs("metal", &["10.244.2.0/24"]);
    metal
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("example.com/bare-metal".into(), "true".into());
    let metal = name(&h.create_node(&metal).await);
    let config = config("10.244.0.0/16", Duration::from_millis(300)).with_node_ownership(
        ccm_runtime::controllers::node_ownership::NodeOwnership::new(
            &[],
            "!example.com/bare-metal",
        )
        .unwrap(),
    );
    let cluster = config.cluster_name().to_owned();
    // A route someone made to the bare-metal Node (say, through a VPN gateway): ours to
    // leave alone, even inside the cluster CIDR and marked a blackhole.
    let theirs = Route::new(metal.clone(), "10.244.9.0/24")
        .with_name("to-metal")
        .with_blackhole(true);
    h.cloud.insert_route(&cluster, theirs.clone());
    start(&h, config);

    let want: BTreeSet<(String, String)> = [
        (ours.clone(), "10.244.1.0/24".to_owned()),
        (metal.clone(), "10.244.9.0/24".to_owned()),
    ]
    .into();
    wait_routes(&h, &cluster, &want).await;
    wait_node_condition(&h, &ours, "False", CONDITION_REASON_ROUTE_CREATED).await;
    wait_passes(&h, 3).await;
    assert_eq!(route_set(&h, &cluster), want);
    assert!(h.cloud.routes(&cluster).contains(&theirs));
    assert_eq!(h.cloud.call_count(Method::DeleteRoute), 0);
    assert_eq!(h.cloud.call_count(Method::CreateRoute), 1);
    let node = h.nodes().get(&metal).await.unwrap();
    assert_eq!(
        node_condition(&node, NETWORK_UNAVAILABLE),
        None,
        "no condition"
    );
    assert!(h.events_about(&metal).await.is_empty());
}
