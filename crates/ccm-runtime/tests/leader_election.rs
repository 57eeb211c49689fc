//! Leader election on a real Lease, and the fence it keeps.

mod support;

use std::time::Duration;

use ccm_fake_cloud::FakeCloud;
use ccm_runtime::app::leader::{LeaderElectionConfig, LeaderElector, LeadershipEnd};
use ccm_runtime::client::Fence;
use ccm_test::unique_name;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::Harness;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn config(name: &str, identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig::new("kube-system", name)
        .with_identity(identity)
        .with_timing(
            Duration::from_secs(2),
            Duration::from_millis(1500),
            Duration::from_millis(200),
        )
}

/// A new Lease's name, and the elector `a` that has acquired it.
async fn a_leads(h: &Harness) -> (String, LeaderElector) {
    let lease = unique_name("lease");
    let mut a = LeaderElector::new(h.client.clone(), config(&lease, "a"));
    assert!(a.acquire(&CancellationToken::new()).await);
    (lease, a)
}

async fn holder(h: &Harness, name: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(h.admin.clone(), "kube-system");
    leases
        .get(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
}

/// Writes another holder into the Lease, as a candidate that took it over would, and
/// returns how the leader's `hold` then ends.
async fn intruder_takes(
    h: &Harness,
    lease: &str,
    hold: tokio::task::JoinHandle<LeadershipEnd>,
) -> LeadershipEnd {
    let leases: Api<Lease> = Api::namespaced(h.admin.clone(), "kube-system");
    leases
        .patch(
            lease,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), hold)
        .await
        .expect("hold ends")
        .unwrap()
}

#[tokio::test]
async fn one_leader_and_a_quick_handover_on_release() {
    let h = Harness::new(FakeCloud::new()).await;
    let lease = unique_name("lease");
    let mut a = LeaderElector::new(h.client.clone(), config(&lease, "a"));
    let mut b = LeaderElector::new(h.client.clone(), config(&lease, "b"));

    assert!(
        a.try_acquire_or_renew().await.unwrap(),
        "a creates the Lease"
    );
    assert!(
        !b.try_acquire_or_renew().await.unwrap(),
        "b sees a valid holder"
    );
    assert!(a.try_acquire_or_renew().await.unwrap(), "a renews");
    assert_eq!(holder(&h, &lease).await.as_deref(), Some("a"));

    a.release().await;
    assert_eq!(holder(&h, &lease).await, None);
    let started = Instant::now();
    assert!(b.acquire(&CancellationToken::new()).await);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "no wait for the lease to expire after a release"
    );
    assert_eq!(holder(&h, &lease).await.as_deref(), Some("b"));
    let leases: Api<Lease> = Api::namespaced(h.admin.clone(), "kube-system");
    let spec = leases.get(&lease).await.unwrap().spec.unwrap();
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test]
async fn a_dead_leader_is_replaced_after_the_lease_duration() {
    let h = Harness::new(FakeCloud::new()).await;
    let lease = unique_name("lease");
    let mut a = LeaderElector::new(h.client.clone(), config(&lease, "a"));
    assert!(a.try_acquire_or_renew().await.unwrap());
    drop(a); // crashed: no release

    let mut b = LeaderElector::new(h.client.clone(), config(&lease, "b"));
    let started = Instant::now();
    assert!(!b.try_acquire_or_renew().await.unwrap());
    assert!(b.acquire(&CancellationToken::new()).await);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2),
        "b waited out the lease: {waited:?}"
    );
    assert_eq!(holder(&h, &lease).await.as_deref(), Some("b"));
}

#[tokio::test]
async fn leadership_is_lost_when_another_holder_takes_the_lease() {
    let h = Harness::new(FakeCloud::new()).await;
    let (lease, mut a) = a_leads(&h).await;
    let hold = tokio::spawn(async move { a.hold(&CancellationToken::new(), |_| {}).await });
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert_eq!(intruder_takes(&h, &lease, hold).await, LeadershipEnd::Lost);
}

#[tokio::test]
async fn shutdown_releases_the_lease() {
    let h = Harness::new(FakeCloud::new()).await;
    let (lease, mut a) = a_leads(&h).await;
    let stop = CancellationToken::new();
    let hold = {
        let stop = stop.clone();
        tokio::spawn(async move { a.hold(&stop, |_| {}).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    assert_eq!(hold.await.unwrap(), LeadershipEnd::Shutdown);
    assert_eq!(holder(&h, &lease).await, None);
}

#[tokio::test]
async fn the_fence_is_open_only_while_the_lease_is_renewed() {
    let h = Harness::new(FakeCloud::new()).await;
    let lease = unique_name("lease");
    let config = config(&lease, "a");
    let fence = Fence::leased(config.renew_deadline);
    let mut a = LeaderElector::new(h.client.clone(), config).with_fence(fence.clone());
    assert!(!fence.is_open(), "closed before the Lease is held");
    assert!(a.acquire(&CancellationToken::new()).await);
    assert!(fence.is_open(), "open once acquired");

    // Not renewed: it closes by itself at the renew deadline (1.5 s), before the lease
    // (2 s) lets anyone else in.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(!fence.is_open(), "closed after the renew deadline");
    assert!(
        a.try_acquire_or_renew().await.unwrap(),
        "still ours: renewed"
    );
    assert!(fence.is_open(), "open again");

    // Renewed every 200 ms, it stays open across several deadlines.
    let hold = tokio::spawn(async move { a.hold(&CancellationToken::new(), |_| {}).await });
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(fence.is_open(), "open while renewing");
    }
    // Another holder: closed when the leader sees it.
    assert_eq!(intruder_takes(&h, &lease, hold).await, LeadershipEnd::Lost);
    assert!(!fence.is_open(), "closed on loss");
}

#[tokio::test]
async fn releasing_closes_the_fence() {
    let h = Harness::new(FakeCloud::new()).await;
    let (lease, mut a) = a_leads(&h).await;
    let fence = a.fence().clone();
    assert!(fence.is_open());
    a.release().await;
    assert!(!fence.is_open());
    assert_eq!(holder(&h, &lease).await, None);
}
