//! Event aggregation against a real API server.

mod support;

use std::time::Duration;

use ccm_core::events::EventRecorder;
use ccm_fake_cloud::FakeCloud;
use support::Harness;

#[tokio::test]
async fn repeats_aggregate_and_new_messages_stay_separate() {
    let h = Harness::new(FakeCloud::new()).await;
    let node = h.create_node(&h.new_node("events")).await;
    let name = node.metadata.name.clone().unwrap();
    let recorder = EventRecorder::new(h.client.clone(), "test-controller");

    recorder
        .warning(&node, "SyncFailed", "Sync", "cloud API unavailable")
        .await;
    recorder
        .warning(&node, "SyncFailed", "Sync", "cloud API unavailable")
        .await;
    recorder
        .warning(&node, "SyncFailed", "Sync", "quota exceeded")
        .await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let events = h.events_about(&name).await;
        let count = |note: &str| {
            events
                .iter()
                .find(|e| e.note.as_deref() == Some(note))
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        };
        if count("cloud API unavailable") == Some(2) && count("quota exceeded") == Some(1) {
            assert_eq!(events.len(), 2, "{events:#?}");
            for e in &events {
                assert_eq!(e.reporting_controller.as_deref(), Some("test-controller"));
                assert_eq!(e.type_.as_deref(), Some("Warning"));
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
