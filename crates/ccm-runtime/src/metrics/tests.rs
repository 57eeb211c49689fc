//! Unit tests of `metrics`.

use std::future::pending;
use std::time::Duration;

use async_trait::async_trait;
use ccm_provider::{
    CloudError, CloudResult, InitContext, InstanceMetadata, Instances, Route, Zone,
};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};

use ccm_test::fixtures::NodeBuilder;
use tower::Layer as _;
use tower::Service as _;

use super::*;
use crate::client::ApiLayer;
use crate::workqueue::{Outcome, Queue, RateLimit};
use ccm_provider::mock::{
    MockCloud, MockClusters, MockInstances, MockLegacyInstances, MockLoadBalancer, MockRoutes,
    MockZones,
};
use ccm_provider::resolve_instances;

/// The value of the sample `series` (name and labels exactly as encoded), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn calls(text: &str, method: &str, result: &str) -> f64 {
    value(
        text,
        &format!(
            r#"ccm_cloud_requests_total{{provider="acme",method="{method}",result="{result}"}}"#
        ),
    )
    .unwrap_or(0.0)
}

fn node(name: &str) -> Node {
    NodeBuilder::new(name)
        .provider_id(format!("acme://{name}"))
        .build()
}

fn full_cloud() -> MockCloud {
    MockCloud::new("acme")
        .with_cluster_id(false)
        .with_instances(MockInstances::new())
        .with_legacy_instances(MockLegacyInstances::new())
        .with_zones(MockZones::new())
        .with_load_balancer(MockLoadBalancer::new())
        .with_routes(MockRoutes::new())
        .with_clusters(MockClusters::new())
}

#[test]
fn capabilities_are_preserved() {
    // Which of instances, legacy instances, zones, load balancer, routes and clusters the
    // provider supports.
    let supports = |p: &dyn CloudProvider| {
        [
            p.instances().is_some(),
            p.legacy_instances().is_some(),
            p.zones().is_some(),
            p.load_balancer().is_some(),
            p.routes().is_some(),
            p.clusters().is_some(),
        ]
    };
    let metrics = Metrics::new();
    let bare = metrics.instrument(Arc::new(MockCloud::new("acme")));
    assert_eq!(bare.provider_name(), "acme");
    assert!(bare.has_cluster_id());
    assert_eq!(supports(&*bare), [false; 6]);

    let full = metrics.instrument(Arc::new(full_cloud()));
    assert!(!full.has_cluster_id(), "forwarded");
    assert_eq!(supports(&*full), [true; 6]);

    let only_lb = metrics.instrument(Arc::new(
        MockCloud::new("acme").with_load_balancer(MockLoadBalancer::new()),
    ));
    assert_eq!(
        supports(&*only_lb),
        [false, false, false, true, false, false]
    );
}

#[tokio::test]
async fn every_call_is_forwarded_and_counted() {
    let mut cloud = full_cloud();
    let inst = cloud.instances.as_mut().unwrap();
    inst.expect_instance_exists()
        .times(1)
        .returning(|n| Ok(n.metadata.name.as_deref() == Some("n1")));
    inst.expect_instance_shutdown()
        .times(1)
        .returning(|_| Ok(true));
    inst.expect_instance_metadata()
        .times(1)
        .returning(|_| Ok(Some(InstanceMetadata::new("acme://n1"))));
    let legacy = cloud.legacy_instances.as_mut().unwrap();
    legacy
        .expect_node_addresses()
        .times(1)
        .returning(|_| Ok(vec![]));
    legacy
        .expect_node_addresses_by_provider_id()
        .times(1)
        .returning(|_| Ok(vec![]));
    legacy
        .expect_instance_id()
        .times(1)
        .returning(|n| Ok(format!("id-{n}")));
    legacy
        .expect_instance_type()
        .times(1)
        .returning(|_| Ok("big".into()));
    legacy
        .expect_instance_type_by_provider_id()
        .times(1)
        .returning(|_| Ok("big".into()));
    legacy
        .expect_add_ssh_key_to_all_instances()
        .times(1)
        .returning(|_, _| Ok(()));
    legacy
        .expect_current_node_name()
        .times(1)
        .returning(|h| Ok(h.to_owned()));
    legacy
        .expect_instance_exists_by_provider_id()
        .times(1)
        .returning(|_| Ok(true));
    legacy
        .expect_instance_shutdown_by_provider_id()
        .times(1)
        .returning(|_| Ok(false));
    let zones = cloud.zones.as_mut().unwrap();
    zones
        .expect_get_zone()
        .times(1)
        .returning(|| Ok(Zone::new("z", "r")));
    zones
        .expect_get_zone_by_provider_id()
        .times(1)
        .returning(|_| Ok(Zone::new("z", "r")));
    zones
        .expect_get_zone_by_node_name()
        .times(1)
        .returning(|_| Ok(Zone::new("z", "r")));
    let lb = cloud.load_balancer.as_mut().unwrap();
    lb.expect_get_load_balancer()
        .times(1)
        .returning(|_, _| Ok(None));
    lb.expect_get_load_balancer_name()
        .times(1)
        .returning(|c, _| format!("{c}-lb"));
    lb.expect_ensure_load_balancer()
        .times(1)
        .returning(|_, _, nodes| {
            assert_eq!(nodes.len(), 1);
            Ok(LoadBalancerStatus::default())
        });
    lb.expect_update_load_balancer()
        .times(1)
        .returning(|_, _, _| Ok(()));
    lb.expect_ensure_load_balancer_deleted()
        .times(1)
        .returning(|_, _| Ok(()));
    let routes = cloud.routes.as_mut().unwrap();
    routes
        .expect_list_routes()
        .times(1)
        .returning(|_| Ok(vec![Route::new("n1", "10.0.0.0/24")]));
    routes
        .expect_create_route()
        .times(1)
        .returning(|_, _, _| Ok(()));
    routes
        .expect_delete_route()
        .times(1)
        .returning(|_, _| Ok(()));
    let clusters = cloud.clusters.as_mut().unwrap();
    clusters
        .expect_list_clusters()
        .times(1)
        .returning(|| Ok(vec!["c".into()]));
    clusters
        .expect_master()
        .times(1)
        .returning(|c| Ok(format!("{c}.example")));

    let metrics = Metrics::new();
    let p = metrics.instrument(Arc::new(cloud));
    let n1 = node("n1");
    let svc = Service::default();
    let nodes = [Arc::new(n1.clone())];
    let route = Route::new("n1", "10.0.0.0/24");

    let i = p.instances().unwrap();
    assert!(
        i.instance_exists(&n1).await.unwrap(),
        "answers pass through"
    );
    assert!(i.instance_shutdown(&n1).await.unwrap());
    assert_eq!(
        i.instance_metadata(&n1).await.unwrap().unwrap().provider_id,
        "acme://n1"
    );
    let l = p.legacy_instances().unwrap();
    l.node_addresses("n1").await.unwrap();
    l.node_addresses_by_provider_id("acme://n1").await.unwrap();
    assert_eq!(l.instance_id("n1").await.unwrap(), "id-n1");
    l.instance_type("n1").await.unwrap();
    l.instance_type_by_provider_id("acme://n1").await.unwrap();
    l.add_ssh_key_to_all_instances("u", b"k").await.unwrap();
    assert_eq!(l.current_node_name("h").await.unwrap(), "h");
    l.instance_exists_by_provider_id("acme://n1").await.unwrap();
    l.instance_shutdown_by_provider_id("acme://n1")
        .await
        .unwrap();
    let z = p.zones().unwrap();
    z.get_zone().await.unwrap();
    z.get_zone_by_provider_id("acme://n1").await.unwrap();
    z.get_zone_by_node_name("n1").await.unwrap();
    let lb = p.load_balancer().unwrap();
    assert_eq!(lb.get_load_balancer("c", &svc).await.unwrap(), None);
    assert_eq!(lb.get_load_balancer_name("c", &svc), "c-lb");
    lb.ensure_load_balancer("c", &svc, &nodes).await.unwrap();
    lb.update_load_balancer("c", &svc, &nodes).await.unwrap();
    lb.ensure_load_balancer_deleted("c", &svc).await.unwrap();
    let r = p.routes().unwrap();
    assert_eq!(r.list_routes("c").await.unwrap(), vec![route.clone()]);
    r.create_route("c", "uid", &route).await.unwrap();
    r.delete_route("c", &route).await.unwrap();
    let c = p.clusters().unwrap();
    c.list_clusters().await.unwrap();
    assert_eq!(c.master("c").await.unwrap(), "c.example");

    let text = metrics.encode();
    let methods = [
        "instance_exists",
        "instance_shutdown",
        "instance_metadata",
        "node_addresses",
        "node_addresses_by_provider_id",
        "instance_id",
        "instance_type",
        "instance_type_by_provider_id",
        "add_ssh_key_to_all_instances",
        "current_node_name",
        "instance_exists_by_provider_id",
        "instance_shutdown_by_provider_id",
        "get_zone",
        "get_zone_by_provider_id",
        "get_zone_by_node_name",
        "get_load_balancer",
        "ensure_load_balancer",
        "update_load_balancer",
        "ensure_load_balancer_deleted",
        "list_routes",
        "create_route",
        "delete_route",
        "list_clusters",
        "master",
    ];
    for method in methods {
        assert_eq!(calls(&text, method, "success"), 1.0, "{method}\n{text}");
        let count = format!(
            r#"ccm_cloud_request_duration_seconds_count{{provider="acme",method="{method}"}}"#
        );
        assert_eq!(value(&text, &count), Some(1.0), "{method}");
    }
    assert!(
        !text.contains(r#"method="get_load_balancer_name""#),
        "not a cloud call"
    );
    let total: f64 = text
        .lines()
        .filter(|l| l.starts_with("ccm_cloud_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total, methods.len() as f64, "one sample per call");
}

#[tokio::test]
async fn results_are_classified() {
    let mut instances = MockInstances::new();
    instances.expect_instance_exists().returning(|n| {
        match n.metadata.name.as_deref().unwrap_or_default() {
            "gone" => Err(CloudError::InstanceNotFound),
            "nyi" => Err(CloudError::NotImplemented),
            "busy" => Err(CloudError::retry_after("busy", Duration::from_secs(3))),
            "broken" => Err(CloudError::msg("API down")),
            _ => Ok(true),
        }
    });
    let mut lb = MockLoadBalancer::new();
    lb.expect_ensure_load_balancer()
        .returning(|_, _, _| Err(CloudError::ImplementedElsewhere));
    let metrics = Metrics::new();
    let p = metrics.instrument(Arc::new(
        MockCloud::new("acme")
            .with_instances(instances)
            .with_load_balancer(lb),
    ));
    let i = resolve_instances(&p).unwrap();
    for name in ["gone", "nyi", "busy", "broken", "broken", "ok"] {
        let _ = i.instance_exists(&node(name)).await;
    }
    // The error itself passes through unchanged.
    let err = i.instance_exists(&node("busy")).await.unwrap_err();
    assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(3)));
    let err = p
        .load_balancer()
        .unwrap()
        .ensure_load_balancer("c", &Service::default(), &[])
        .await
        .unwrap_err();
    assert!(err.is_implemented_elsewhere());

    let text = metrics.encode();
    assert_eq!(calls(&text, "instance_exists", "instance_not_found"), 1.0);
    assert_eq!(calls(&text, "instance_exists", "not_implemented"), 1.0);
    assert_eq!(calls(&text, "instance_exists", "retry_after"), 2.0);
    assert_eq!(calls(&text, "instance_exists", "error"), 2.0);
    assert_eq!(calls(&text, "instance_exists", "success"), 1.0);
    assert_eq!(
        calls(&text, "ensure_load_balancer", "implemented_elsewhere"),
        1.0
    );
}

/// A provider whose calls take a while, or never finish.
struct Slow;

#[async_trait]
impl Instances for Slow {
    async fn instance_exists(&self, _node: &Node) -> CloudResult<bool> {
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok(true)
    }
    async fn instance_shutdown(&self, _node: &Node) -> CloudResult<bool> {
        pending().await
    }
    async fn instance_metadata(&self, _node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(None)
    }
}

impl CloudProvider for Slow {
    fn provider_name(&self) -> &str {
        "acme"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }
}

#[tokio::test(start_paused = true)]
async fn durations_are_observed_and_cancelled_calls_counted() {
    let metrics = Metrics::new();
    let p = metrics.instrument(Arc::new(Slow));
    let i = p.instances().unwrap();
    i.instance_exists(&node("n1")).await.unwrap();
    i.instance_metadata(&node("n1")).await.unwrap();
    let cancelled =
        tokio::time::timeout(Duration::from_secs(5), i.instance_shutdown(&node("n1"))).await;
    assert!(cancelled.is_err(), "never finishes");

    let text = metrics.encode();
    let series = |suffix: &str, method: &str, le: Option<&str>| {
        let labels = match le {
            Some(le) => format!(r#"{{provider="acme",method="{method}",le="{le}"}}"#),
            None => format!(r#"{{provider="acme",method="{method}"}}"#),
        };
        value(
            &text,
            &format!("ccm_cloud_request_duration_seconds_{suffix}{labels}"),
        )
    };
    assert_eq!(series("sum", "instance_exists", None), Some(3.0));
    assert_eq!(series("bucket", "instance_exists", Some("2")), Some(0.0));
    assert_eq!(series("bucket", "instance_exists", Some("4")), Some(1.0));
    assert_eq!(
        series("bucket", "instance_metadata", Some("0.25")),
        Some(0.0)
    );
    assert_eq!(
        series("bucket", "instance_metadata", Some("0.5")),
        Some(1.0)
    );
    assert_eq!(
        series("bucket", "instance_metadata", Some("+Inf")),
        Some(1.0)
    );
    assert_eq!(calls(&text, "instance_shutdown", "cancelled"), 1.0);
    assert_eq!(series("sum", "instance_shutdown", None), Some(5.0));
    assert_eq!(calls(&text, "instance_shutdown", "success"), 0.0);
}

#[tokio::test]
async fn initialize_is_forwarded_and_counted() {
    let client = kube::Client::new(
        tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no cluster"))
        }),
        "default",
    );
    let metrics = Metrics::new();
    let p = metrics.instrument(Arc::new(MockCloud::new("acme")));
    p.initialize(InitContext::new(
        client,
        tokio_util::sync::CancellationToken::new(),
    ))
    .await
    .unwrap();
    assert_eq!(calls(&metrics.encode(), "initialize", "success"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn workqueue_metrics_are_read_at_scrape_time() {
    let metrics = Metrics::new();
    let text = metrics.encode();
    assert!(
        !text.contains("workqueue_"),
        "no queue registered, no workqueue metrics"
    );

    let queue = Queue::new("Nodes", RateLimit::client_go_default());
    metrics.register_queue(queue.name(), queue.shared_metrics());
    queue.add("a".to_string());
    queue.add("b".to_string());
    queue.add("a".to_string()); // deduplicated: not an add
    let text = metrics.encode();
    assert_eq!(value(&text, r#"workqueue_depth{name="Nodes"}"#), Some(2.0));
    assert_eq!(
        value(&text, r#"workqueue_adds_total{name="Nodes"}"#),
        Some(2.0)
    );
    assert_eq!(
        value(&text, r#"workqueue_retries_total{name="Nodes"}"#),
        Some(0.0)
    );

    tokio::time::advance(Duration::from_millis(20)).await;
    let item = queue.get().await.unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    item.finish(Outcome::Retry);
    let text = metrics.encode();
    assert_eq!(value(&text, r#"workqueue_depth{name="Nodes"}"#), Some(1.0));
    assert_eq!(
        value(&text, r#"workqueue_retries_total{name="Nodes"}"#),
        Some(1.0)
    );
    let h = |name: &str, le: &str| {
        value(
            &text,
            &format!(r#"workqueue_{name}_duration_seconds_bucket{{name="Nodes",le="{le}"}}"#),
        )
    };
    // One key waited 20ms, and was then held for 2s.
    assert_eq!(h("queue", "0.01"), Some(0.0));
    assert_eq!(h("queue", "0.1"), Some(1.0));
    assert_eq!(h("queue", "+Inf"), Some(1.0));
    assert_eq!(h("work", "1"), Some(0.0));
    assert_eq!(h("work", "10"), Some(1.0));
    assert_eq!(
        value(
            &text,
            r#"workqueue_work_duration_seconds_sum{name="Nodes"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            r#"workqueue_work_duration_seconds_count{name="Nodes"}"#
        ),
        Some(1.0)
    );
    assert!(text.contains("# TYPE workqueue_adds_total counter\n"));
    assert!(text.contains("# TYPE workqueue_depth gauge\n"));
    assert!(text.contains("# TYPE workqueue_queue_duration_seconds histogram\n"));
}

#[tokio::test]
async fn api_requests_are_read_at_scrape_time() {
    let metrics = Metrics::new();
    let layers = [ApiLayer::new(), ApiLayer::new()];
    for layer in &layers {
        metrics.register_api_counters(Arc::clone(layer.counters()));
    }
    for (layer, uri) in [
        (&layers[0], "/api/v1/nodes/n1/status"),
        (&layers[1], "/api/v1/nodes/n2/status"),
        (&layers[1], "/api/v1/namespaces/kube-system/events"),
    ] {
        let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        }));
        let req = http::Request::builder()
            .method("PATCH")
            .uri(uri)
            .body(())
            .unwrap();
        svc.call(req).await.unwrap();
    }
    let text = metrics.encode();
    assert_eq!(
        value(
            &text,
            r#"ccm_api_requests_total{verb="PATCH",resource="nodes/status"}"#
        ),
        Some(2.0),
        "clients add up:\n{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"ccm_api_requests_total{verb="PATCH",resource="events"}"#
        ),
        Some(1.0)
    );
    // client-go's names and labels: by status code, host (none here: no kubeconfig) and
    // method, the two clients added up.
    assert_eq!(
        value(
            &text,
            r#"rest_client_requests_total{code="200",host="",method="PATCH"}"#
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"rest_client_request_duration_seconds_count{host="",verb="PATCH"}"#
        ),
        Some(3.0),
        "{text}"
    );
}

#[test]
fn controllers_and_leadership_gauges() {
    let metrics = Metrics::new();
    metrics.controller_started("cloud-node-controller");
    metrics.controller_started("service-lb-controller");
    metrics.controller_stopped("service-lb-controller");
    metrics.set_leader("cloud-controller-manager", true);
    let text = metrics.encode();
    let running = |name: &str| {
        value(
            &text,
            &format!(
                r#"running_managed_controllers{{name="{name}",manager="cloud-controller-manager"}}"#
            ),
        )
    };
    assert_eq!(running("cloud-node-controller"), Some(1.0));
    assert_eq!(running("service-lb-controller"), Some(0.0));
    assert_eq!(
        value(
            &text,
            r#"leader_election_master_status{name="cloud-controller-manager"}"#
        ),
        Some(1.0)
    );
    metrics.set_leader("cloud-controller-manager", false);
    assert_eq!(
        value(
            &metrics.encode(),
            r#"leader_election_master_status{name="cloud-controller-manager"}"#
        ),
        Some(0.0)
    );

    let custom = Metrics::with_manager("acme-ccm");
    custom.controller_started("x");
    assert_eq!(
        value(
            &custom.encode(),
            r#"running_managed_controllers{name="x",manager="acme-ccm"}"#
        ),
        Some(1.0)
    );
}

#[test]
fn controller_metrics_use_go_names_and_buckets() {
    let metrics = Metrics::new();
    let c = metrics.controllers().clone(); // clones share the values
    c.initial_node_sync_delay.observe(3.0);
    c.cloud_provider_taint_removal_delay.observe(100.0);
    c.loadbalancer_sync.inc();
    c.nodesync_error.inc_by(2);
    c.nodesync_latency.observe(1.5);
    c.update_loadbalancer_host_latency.observe(0.5);
    c.route_sync.inc();
    let text = metrics.encode();
    for (series, want) in [
        (
            r#"node_controller_initial_node_sync_delay_seconds_bucket{le="1"}"#,
            0.0,
        ),
        (
            r#"node_controller_initial_node_sync_delay_seconds_bucket{le="4"}"#,
            1.0,
        ),
        (
            r#"node_controller_cloud_provider_taint_removal_delay_seconds_bucket{le="64"}"#,
            0.0,
        ),
        (
            r#"node_controller_cloud_provider_taint_removal_delay_seconds_bucket{le="256"}"#,
            1.0,
        ),
        (
            r#"node_controller_cloud_provider_taint_removal_delay_seconds_bucket{le="1024"}"#,
            1.0,
        ),
        ("service_controller_loadbalancer_sync_total", 1.0),
        ("service_controller_nodesync_error_total", 2.0),
        (
            r#"service_controller_nodesync_latency_seconds_bucket{le="2"}"#,
            1.0,
        ),
        (
            r#"service_controller_nodesync_latency_seconds_bucket{le="16384"}"#,
            1.0,
        ),
        (
            r#"service_controller_update_loadbalancer_host_latency_seconds_bucket{le="1"}"#,
            1.0,
        ),
        ("route_controller_route_sync_total", 1.0),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series}\n{text}");
    }
}

#[test]
fn extra_metrics_can_be_registered() {
    let metrics = Metrics::new();
    let hits = Counter::<u64>::default();
    metrics.register("acme_cache_hits", "Cache hits.", hits.clone());
    hits.inc_by(3);
    let gauge = Gauge::<i64>::default();
    metrics.with_registry(|r| {
        r.sub_registry_with_prefix("acme")
            .register("servers", "Servers.", gauge.clone());
    });
    gauge.set(7);
    let text = metrics.encode();
    assert_eq!(value(&text, "acme_cache_hits_total"), Some(3.0));
    assert_eq!(value(&text, "acme_servers"), Some(7.0));
}

#[test]
fn cache_gauges_are_read_at_each_scrape() {
    let metrics = Metrics::new();
    assert!(
        !metrics.encode().contains("ccm_nodes_uninitialized"),
        "not before it is registered"
    );
    let count = Arc::new(std::sync::atomic::AtomicI64::new(3));
    let read = Arc::clone(&count);
    metrics.register_cache_gauge(super::NODES_UNINITIALIZED, move || {
        read.load(std::sync::atomic::Ordering::SeqCst)
    });
    let text = metrics.encode();
    assert!(
        text.contains("# TYPE ccm_nodes_uninitialized gauge"),
        "{text}"
    );
    assert_eq!(value(&text, "ccm_nodes_uninitialized"), Some(3.0));
    count.store(0, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        value(&metrics.encode(), "ccm_nodes_uninitialized"),
        Some(0.0)
    );
    // Registered again (a controller restarted): the new reader counts.
    metrics.register_cache_gauge(super::NODES_UNINITIALIZED, || 9);
    assert_eq!(
        value(&metrics.encode(), "ccm_nodes_uninitialized"),
        Some(9.0)
    );
}

/// Every metric `docs/metrics.md` lists is exported, and every exported one is listed.
#[tokio::test]
async fn docs_list_exactly_the_exported_metrics() {
    let metrics = Metrics::new();
    let queue: Queue<String> = Queue::new("q", RateLimit::client_go_default());
    metrics.register_queue("q", queue.shared_metrics());
    let layer = ApiLayer::new().with_rate_limit(100.0, 10);
    metrics.register_api_counters(Arc::clone(layer.counters()));
    let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(()))
    }));
    let req = http::Request::get("/api/v1/nodes").body(()).unwrap();
    std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
    svc.call(req).await.unwrap();
    // Labelled metrics appear once they have a first label set.
    metrics.controller_started("c");
    metrics.set_leader("l", false);
    crate::events::count_drop("c", "queue_full");
    metrics.count_leader_slowpath("l", 0);
    metrics.set_build_info("1.2.3", Some("abc1234"));
    metrics.register_cache_gauge(super::NODES_UNINITIALIZED, || 0);
    metrics.register_cache_gauge(super::SERVICE_LOAD_BALANCERS_PENDING, || 0);
    // Shadow mode's, with a planned change.
    let shadow = crate::shadow::Shadow::new();
    metrics.with_registry(|registry| shadow.register(registry));
    shadow
        .for_controller("cloud-node-lifecycle-controller")
        .plan(crate::shadow::Planned {
            kind: "nodes".to_owned(),
            namespace: None,
            name: "n1".to_owned(),
            scope: "n1".to_owned(),
            action: crate::shadow::Action::Delete,
            request: "DELETE /api/v1/nodes/n1".to_owned(),
            why: String::new(),
        });
    let ipam = &metrics.controllers().node_ipam;
    ipam.count("10.0.0.0/8", 65536, 1, 1, 0);
    ipam.observe_tries("10.0.0.0/8", 0);
    let mut instances = MockInstances::new();
    instances.expect_instance_exists().returning(|_| Ok(true));
    let p = metrics.instrument(Arc::new(MockCloud::new("acme").with_instances(instances)));
    p.instances()
        .unwrap()
        .instance_exists(&node("n"))
        .await
        .unwrap();

    let text = metrics.encode();
    let exported: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let docs = include_str!("../../../../docs/metrics.md");
    let documented: std::collections::BTreeSet<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    assert_eq!(exported, documented);
}
