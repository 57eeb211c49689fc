//! Event aggregation against a real API server.

mod support;

use std::time::Duration;

use ccm_fake_cloud::FakeCloud;
use ccm_runtime::events::EventRecorder;
use ccm_test::eventually;
use support::Harness;

#[tokio::test]
async fn repeats_aggregate_and_new_messages_stay_separate() {
    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node("events")).await;
    let name = node.metadata.name.clone().unwrap();
    let recorder = EventRecorder::new(h.client.clone(), "test-controller");

    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    recorder.warning(&node, "SyncFailed", "Sync", "quota exceeded");

    let what = "the repeat counted twice and the new message once";
    let events = eventually(what, Duration::from_secs(10), || async {
        let events = h.events_about(&name).await;
        let count = |note: &str| {
            events
                .iter()
                .find(|e| e.note.as_deref() == Some(note))
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        };
        if count("cloud API unavailable") == Some(2) && count("quota exceeded") == Some(1) {
            Ok(events)
        } else {
            Err(format!("events: {events:#?}"))
        }
    })
    .await;
    assert_eq!(events.len(), 2, "{events:#?}");
    for e in &events {
        assert_eq!(e.reporting_controller.as_deref(), Some("test-controller"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
    }
}

#[tokio::test]
async fn publishing_does_not_wait_for_the_rate_limited_api() {
    use ccm_runtime::client::{ApiLayer, build_client};

    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node("events-async")).await;
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
    let (mut notes, written_in) = eventually("five events", Duration::from_secs(15), || async {
        let notes: Vec<String> = h
            .events_about(&name)
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        if notes.len() == 5 {
            Ok((notes, started.elapsed()))
        } else {
            Err(format!("only {notes:?} written"))
        }
    })
    .await;
    notes.sort();
    assert_eq!(
        notes,
        (0..5).map(|i| format!("step {i}")).collect::<Vec<_>>()
    );
    assert!(written_in >= Duration::from_secs(1), "the rate limit held");
}

#[tokio::test]
async fn a_repeat_of_an_event_deleted_on_the_server_starts_a_new_one() {
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, DeleteParams};

    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node("events-gone")).await;
    let name = node.metadata.name.clone().unwrap();
    let recorder = EventRecorder::new(h.client.clone(), "test-controller");
    let events: Api<Event> = Api::namespaced(h.admin.clone(), "default");

    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    let first = wait_for_events(&h, &name, 1).await;
    events
        .delete(
            first[0].metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    recorder.warning(&node, "SyncFailed", "Sync", "cloud API unavailable");
    let second = wait_for_events(&h, &name, 1).await;
    assert_ne!(second[0].metadata.name, first[0].metadata.name);
    assert!(second[0].series.is_none(), "{second:#?}");
}

/// Polls until exactly `n` events about `name` exist; returns them.
async fn wait_for_events(
    h: &Harness,
    name: &str,
    n: usize,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let what = format!("{n} events about {name}");
    eventually(&what, Duration::from_secs(10), || async {
        let events = h.events_about(name).await;
        if events.len() == n {
            Ok(events)
        } else {
            Err(format!("{} events: {events:#?}", events.len()))
        }
    })
    .await
}

#[tokio::test]
async fn a_running_series_is_written_twice_then_counted_locally() {
    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node("events-series")).await;
    let name = node.metadata.name.clone().unwrap();
    let recorder = EventRecorder::new(h.client.clone(), "test-controller");
    let before = h.api.counters().total();

    for _ in 0..6 {
        recorder.normal(&node, "Updated", "Update", "updated with new hosts");
    }
    let events = wait_for_events(&h, &name, 1).await;
    // The event, then its series at 2; the four after that stay local for 30 minutes.
    eventually("the series written", Duration::from_secs(10), || async {
        let written = h.api.counters().total() - before;
        if written >= 2 {
            Ok(())
        } else {
            Err(format!("{written} requests"))
        }
    })
    .await;
    // Nothing more for a while: not a wait for something to happen.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.api.counters().total() - before, 2, "{events:#?}");
    let events = h.events_about(&name).await;
    assert_eq!(events[0].series.as_ref().map(|s| s.count), Some(2));
}
