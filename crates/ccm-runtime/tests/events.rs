//! Events against a real API server: core/v1 Events with client-go's fields, counted,
//! combined and spam-filtered as client-go's recorder does, and never waited for.

mod support;

use std::time::Duration;

use ccm_fake_cloud::FakeCloud;
use ccm_runtime::events::{EventRecorder, MAX_QUEUED_EVENTS};
use ccm_runtime::metrics::Metrics;
use ccm_test::eventually;
use ccm_test::fixtures::{NodeBuilder, ServiceBuilder};
use k8s_openapi::api::core::v1::{Event, Node, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use support::Harness;

const WAIT: Duration = Duration::from_secs(15);

/// Polls until `check` accepts the events about `name`; returns them.
async fn wait_events(
    h: &Harness,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    eventually(what, WAIT, || async {
        let events = h.events_about_in(namespace, name).await;
        if check(&events) {
            Ok(events)
        } else {
            Err(format!("events: {events:#?}"))
        }
    })
    .await
}

fn message(e: &Event) -> &str {
    e.message.as_deref().unwrap_or_default()
}

/// A harness, a Node of its run named after `prefix`, its name, and a recorder for
/// `component` with the controllers' (counted) client.
async fn node_and_recorder(
    prefix: &str,
    component: &str,
) -> (Harness, Node, String, EventRecorder) {
    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node(prefix)).await;
    let name = node.metadata.name.clone().unwrap();
    let recorder = EventRecorder::new(h.client.clone(), component);
    (h, node, name, recorder)
}

fn writes(h: &Harness) -> (u64, u64) {
    let c = h.api.counters();
    (c.count("POST", "events"), c.count("PATCH", "events"))
}

#[tokio::test]
async fn events_are_core_v1_in_the_objects_namespace_with_client_gos_fields() {
    let (h, node, node_name, recorder) = node_and_recorder("ev-fields", "test-controller").await;
    let ns = h.cp.create_namespace("ev-fields").await.unwrap();
    let services: Api<Service> = Api::namespaced(h.admin.clone(), &ns);
    // A ClusterIP Service (the API server's default type).
    let svc = ServiceBuilder::new("web").port(80).build();
    let svc = services.create(&PostParams::default(), &svc).await.unwrap();

    let before = Timestamp::now();
    recorder.warning(
        &node,
        "FailedToInitializeNode",
        "InitializeNode",
        "no instance",
    );
    recorder.normal(
        &svc,
        "EnsuringLoadBalancer",
        "EnsureLoadBalancer",
        "Ensuring load balancer",
    );

    // A Node's event is in "default", as Go's recorder puts events of cluster-scoped objects.
    let got = wait_events(&h, "default", &node_name, "the Node's event", |e| {
        e.len() == 1
    })
    .await;
    let e = &got[0];
    let after = Timestamp::now();
    let name = e.metadata.name.as_deref().unwrap();
    let hex = name
        .strip_prefix(&format!("{node_name}."))
        .unwrap_or_else(|| panic!("{name} is not <node>.<hex nanos>"));
    let nanos = i128::from_str_radix(hex, 16).unwrap();
    assert!(
        (before.as_nanosecond()..=after.as_nanosecond()).contains(&nanos),
        "{name}: the suffix is the time of the event in Unix nanoseconds"
    );
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.reason.as_deref(), Some("FailedToInitializeNode"));
    assert_eq!(message(e), "no instance");
    assert_eq!(e.count, Some(1));
    assert!(e.first_timestamp.is_some());
    assert_eq!(e.first_timestamp, e.last_timestamp);
    let source = e.source.as_ref().unwrap();
    assert_eq!(source.component.as_deref(), Some("test-controller"));
    assert_eq!(source.host, None);
    assert_eq!(e.reporting_component.as_deref(), Some("test-controller"));
    assert_eq!(e.reporting_instance.as_deref().unwrap_or_default(), "");
    let o = &e.involved_object;
    assert_eq!(o.kind.as_deref(), Some("Node"));
    assert_eq!(o.api_version.as_deref(), Some("v1"));
    assert_eq!(o.uid, node.metadata.uid);
    assert_eq!(o.namespace, None);

    // A Service's event is in the Service's namespace.
    let got = wait_events(&h, &ns, "web", "the Service's event", |e| e.len() == 1).await;
    let e = &got[0];
    assert_eq!(e.metadata.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Service"));
    assert_eq!(e.involved_object.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(e.involved_object.uid, svc.metadata.uid);
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(message(e), "Ensuring load balancer");
    assert_eq!(writes(&h), (2, 0), "two creates, nothing else");
}

#[tokio::test]
async fn repeats_bump_count_and_last_timestamp_of_one_event() {
    let (h, node, name, recorder) = node_and_recorder("ev-repeat", "test-controller").await;

    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    let first = wait_events(&h, "default", &name, "the first", |e| e.len() == 1).await;
    // Timestamps have whole seconds: let one pass.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    recorder.warning(&node, "SyncFailed", "Sync", "quota exceeded");

    let got = wait_events(&h, "default", &name, "count 3 and a new message", |e| {
        e.len() == 2 && e.iter().any(|e| e.count == Some(3))
    })
    .await;
    let repeated = got
        .iter()
        .find(|e| message(e) == "cloud API unavailable")
        .unwrap();
    assert_eq!(
        repeated.metadata.name, first[0].metadata.name,
        "one Event, patched"
    );
    assert_eq!(repeated.metadata.uid, first[0].metadata.uid);
    assert_eq!(repeated.first_timestamp, first[0].first_timestamp);
    assert!(
        repeated.last_timestamp.as_ref().unwrap().0 > repeated.first_timestamp.as_ref().unwrap().0,
        "{repeated:#?}"
    );
    let other = got.iter().find(|e| message(e) == "quota exceeded").unwrap();
    assert_eq!(other.count, Some(1), "another message is another Event");
    assert_eq!(writes(&h), (2, 2), "(creates, patches)");
}

#[tokio::test]
async fn the_tenth_message_of_one_reason_is_combined_as_client_go_does() {
    let (h, node, name, recorder) = node_and_recorder("ev-combine", "test-controller").await;

    for i in 0..12 {
        recorder.warning(&node, "SyncFailed", "Sync", format!("error {i}"));
    }
    let combined = "(combined from similar events): error 11";
    let got = wait_events(
        &h,
        "default",
        &name,
        "nine events and a combined one",
        |e| {
            e.iter()
                .any(|e| message(e) == combined && e.count == Some(3))
        },
    )
    .await;
    assert_eq!(got.len(), 10, "{got:#?}");
    for i in 0..9 {
        let e = got.iter().find(|e| message(e) == format!("error {i}"));
        assert_eq!(e.and_then(|e| e.count), Some(1), "error {i}: {got:#?}");
    }
    let e = got.iter().find(|e| message(e) == combined).unwrap();
    assert_eq!(e.reason.as_deref(), Some("SyncFailed"));
    let source = e.source.as_ref().and_then(|s| s.component.as_deref());
    assert_eq!(source, Some("test-controller"));
    assert_eq!(writes(&h), (10, 2), "(creates, patches)");
}

#[tokio::test]
async fn the_spam_filter_bounds_a_flood() {
    let (h, node, name, recorder) = node_and_recorder("ev-flood", "test-flood").await;

    for _ in 0..200 {
        recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    }
    let got = wait_events(&h, "default", &name, "25 occurrences written", |e| {
        e.len() == 1 && e[0].count == Some(25)
    })
    .await;
    // Nothing more comes: not a wait for something to happen.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(writes(&h), (1, 24), "25 writes of 200: {got:#?}");
    assert_eq!(h.events_about_in("default", &name).await[0].count, Some(25));

    // A Normal event has a bucket of its own (client-go's spam key has the type).
    recorder.normal(&node, "Synced", "Sync", "Node synced successfully");
    wait_events(&h, "default", &name, "the Normal event", |e| e.len() == 2).await;
    let dropped = Metrics::new().encode();
    assert!(
        dropped.contains(
            r#"ccm_events_dropped_total{component="test-flood",reason="spam_filter"} 175"#
        ),
        "{dropped}"
    );
}

#[tokio::test]
async fn a_repeat_of_an_event_deleted_on_the_server_creates_it_again() {
    let (h, node, name, recorder) = node_and_recorder("ev-gone", "test-controller").await;
    let api: Api<Event> = Api::namespaced(h.admin.clone(), "default");

    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    let first = wait_events(&h, "default", &name, "the event", |e| e.len() == 1).await;
    let event_name = first[0].metadata.name.clone().unwrap();
    api.delete(&event_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_events(&h, "default", &name, "the event gone", <[Event]>::is_empty).await;

    // client-go patches, finds it gone, and creates it with the count it has reached.
    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    let again = wait_events(&h, "default", &name, "the event again", |e| e.len() == 1).await;
    assert_eq!(again[0].metadata.name.as_deref(), Some(event_name.as_str()));
    assert_eq!(again[0].count, Some(2));
    assert_eq!(writes(&h), (2, 1), "(creates, patches)");
}

#[tokio::test]
async fn publishing_does_not_wait_for_the_rate_limited_api() {
    use ccm_runtime::client::{ApiLayer, build_client};

    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node("ev-async")).await;
    let name = node.metadata.name.clone().unwrap();
    // Two requests a second: five events take two seconds to write.
    let api = ApiLayer::new().with_rate_limit(2.0, 1);
    let slow = build_client(h.cp.admin_config().unwrap(), &api).unwrap();
    let recorder = EventRecorder::new(slow, "test-controller");

    let started = tokio::time::Instant::now();
    for i in 0..5 {
        recorder.normal(&node, "Step", "Step", format!("step {i}"));
    }
    let queued_in = started.elapsed();
    assert!(
        queued_in < Duration::from_millis(200),
        "queueing five events took {queued_in:?}: publishing waited for the API"
    );

    // They are all written, in order, at the client's pace.
    let got = wait_events(&h, "default", &name, "five events", |e| e.len() == 5).await;
    let written_in = started.elapsed();
    let mut messages: Vec<&str> = got.iter().map(message).collect();
    messages.sort_unstable();
    assert_eq!(messages, ["step 0", "step 1", "step 2", "step 3", "step 4"]);
    assert!(written_in >= Duration::from_secs(1), "the rate limit held");
}

#[tokio::test]
async fn an_unreachable_api_server_blocks_no_publisher_and_drops_past_the_queue() {
    // A server that accepts connections and never answers (not even the TLS handshake).
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let h = Harness::new(FakeCloud::new()).await;
    let mut config = h.cp.admin_config().unwrap();
    config.cluster_url = format!("https://127.0.0.1:{port}").parse().unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let recorder = EventRecorder::new(client, "test-unreachable");

    // Twice the queue's Nodes (objects only; the recorder needs no more), one event each: no
    // spam filter.
    let count = 2 * MAX_QUEUED_EVENTS;
    let nodes: Vec<Node> = (0..count)
        .map(|i| {
            NodeBuilder::new(&format!("unreachable-{i}"))
                .uid(&format!("uid-{i}"))
                .build()
        })
        .collect();
    let started = std::time::Instant::now();
    for node in &nodes {
        recorder.warning(node, "SyncFailed", "Sync", "cloud API unavailable");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{count} events took {took:?} to record"
    );

    // The queue holds MAX_QUEUED_EVENTS (a quarter a lane, plus the one each lane's writer
    // holds).
    let metrics = Metrics::new().encode();
    let dropped: usize = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                r#"ccm_events_dropped_total{component="test-unreachable",reason="queue_full"} "#,
            )
        })
        .unwrap_or_else(|| panic!("no drop count:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(
        (MAX_QUEUED_EVENTS - 4..=MAX_QUEUED_EVENTS).contains(&dropped),
        "{dropped} dropped"
    );
    drop(blackhole);
}
