//! One back-off per client, against the simulator on 127.0.0.1: a 429 or 503 with
//! `Retry-After`, or `ratelimit-remaining: 0`, holds every request of the client until the
//! time passes (counted where the requests arrive, in the simulator's request log); absurd
//! values are capped; a hold longer than the longest wait in place is returned at once; a
//! request waiting in a hold can be cancelled.

use std::sync::Arc;
use std::time::Duration;

use ccm_do_like_cloud::{ApiError, ApiToken, Client, ClientOptions};
use ccm_do_like_simulator::{Faults, RequestRecord, RunningSimulator, SimulatorConfig};

const TOKEN: &str = "dop_v1_backoff-test-token";
const DROPLET: &str = "GET /v2/droplets/{id}";

async fn sim(tweak: impl FnOnce(&mut SimulatorConfig)) -> (RunningSimulator, u64) {
    let mut cfg = SimulatorConfig::new(TOKEN);
    tweak(&mut cfg);
    let sim = RunningSimulator::start(cfg).await.unwrap();
    let id = sim.handle().create_droplet("d1", "s-1vcpu-1gb", "nyc1").id;
    (sim, id)
}

fn client(sim: &RunningSimulator, tweak: impl FnOnce(&mut ClientOptions)) -> Arc<Client> {
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(TOKEN));
    opts.timeout = Duration::from_secs(5);
    tweak(&mut opts);
    Arc::new(Client::new(opts).unwrap())
}

fn inject(sim: &RunningSimulator, status: u16, retry_after_secs: u64) {
    let mut faults = Faults::default();
    match status {
        429 => faults.burst_429 = 1,
        503 => faults.burst_503 = 1,
        other => panic!("no fault injects {other}"),
    }
    faults.retry_after_secs = retry_after_secs;
    sim.handle().set_faults(faults);
}

/// The delay of a [`ApiError::RateLimited`]; anything else fails the test.
fn rate_limited<T: std::fmt::Debug>(result: Result<T, ApiError>) -> Duration {
    match result {
        Err(ApiError::RateLimited(after)) => after,
        other => panic!("expected a rate limit, got {other:?}"),
    }
}

/// The simulator's log of droplet GETs, and the one answered `status`.
fn log_around(sim: &RunningSimulator, status: u16) -> (Vec<RequestRecord>, RequestRecord) {
    let log: Vec<RequestRecord> = sim
        .handle()
        .request_log()
        .into_iter()
        .filter(|r| r.route == DROPLET)
        .collect();
    let held: Vec<&RequestRecord> = log.iter().filter(|r| r.status == status).collect();
    assert_eq!(held.len(), 1, "{log:?}");
    let held = held[0].clone();
    (log, held)
}

/// Six concurrent requests; the first is answered `status` with `Retry-After: 2`: none
/// reaches the API for the next 2 s, then all succeed.
async fn one_answer_holds_every_request(status: u16) {
    let (sim, id) = sim(|_| {}).await;
    // Requests 200 ms apart: far more than a round trip to 127.0.0.1, so that every request
    // after the first starts after the client has read the first one's answer.
    let client = client(&sim, |o| o.requests_per_second = Some(5.0));
    inject(&sim, status, 2);
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.droplet(id).await })
        })
        .collect();
    for task in tasks {
        let droplet = task.await.unwrap().unwrap();
        assert_eq!(droplet.map(|d| d.id), Some(id));
    }
    let (log, held) = log_around(&sim, status);
    let during: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.at > held.at && r.at < held.at + Duration::from_secs(2))
        .collect();
    assert!(
        during.is_empty(),
        "requests reached the API while it had asked to wait: {during:?}"
    );
    // Six requests and the retry of the one that was answered `status`, all successful.
    assert_eq!(log.len(), 7, "{log:?}");
    assert_eq!(log.iter().filter(|r| r.status == 200).count(), 6, "{log:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_429_holds_every_request_of_the_client() {
    one_answer_holds_every_request(429).await;
}

#[tokio::test]
async fn a_503_with_retry_after_holds_every_request_of_the_client() {
    one_answer_holds_every_request(503).await;
}

#[tokio::test]
async fn an_exhausted_quota_holds_the_client_until_its_reset() {
    // Three requests a second: the third answer says `ratelimit-remaining: 0`.
    let (sim, id) = sim(|c| c.rate_limit = 3).await;
    let client = client(&sim, |o| o.requests_per_second = Some(1000.0));
    for _ in 0..4 {
        assert!(client.droplet(id).await.unwrap().is_some());
    }
    // The client waited for `ratelimit-reset` instead of running into the limit.
    assert_eq!(sim.handle().request_count("429"), 0);
    assert_eq!(sim.handle().request_count(DROPLET), 4);
    sim.shutdown().await;
}

#[tokio::test]
async fn an_absurd_retry_after_is_capped() {
    let (sim, id) = sim(|_| {}).await;
    // With the default cap (5 minutes), past the longest wait in place: returned, capped.
    let default = client(&sim, |_| {});
    inject(&sim, 429, 1_000_000);
    assert_eq!(
        rate_limited(default.droplet(id).await),
        Duration::from_secs(300)
    );
    // With a cap of 1 s, waited in place.
    let capped = client(&sim, |o| o.retry_after_cap = Duration::from_secs(1));
    inject(&sim, 429, 1_000_000);
    assert!(capped.droplet(id).await.unwrap().is_some());
    let log = sim.handle().request_log();
    let (first, retry) = (&log[1], &log[2]);
    assert_eq!((first.status, retry.status), (429, 200), "{log:?}");
    assert!(retry.at >= first.at + Duration::from_secs(1), "{log:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_hold_longer_than_the_longest_wait_is_returned_without_a_request() {
    let (sim, id) = sim(|_| {}).await;
    let client = client(&sim, |o| o.max_retry_after = Duration::from_secs(1));
    inject(&sim, 429, 30);
    assert_eq!(
        rate_limited(client.droplet(id).await),
        Duration::from_secs(30)
    );
    // Another request of the same client is not sent: it gets what remains of the hold.
    let left = rate_limited(client.droplet(id).await);
    assert!(
        left > Duration::from_secs(25) && left <= Duration::from_secs(30),
        "{left:?}"
    );
    assert_eq!(sim.handle().request_count(DROPLET), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_request_waiting_in_a_hold_can_be_cancelled() {
    let (sim, id) = sim(|_| {}).await;
    let client = client(&sim, |_| {});
    inject(&sim, 429, 2);
    let timeout = Duration::from_millis(500);
    // The request answered 429 waits in place for its retry; another waits for the hold.
    // Both end with their caller's timeout.
    assert!(
        tokio::time::timeout(timeout, client.droplet(id))
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(timeout, client.droplet(id))
            .await
            .is_err()
    );
    assert_eq!(sim.handle().request_count(DROPLET), 1);
    // After the hold, the client works.
    assert!(client.droplet(id).await.unwrap().is_some());
    let (log, held) = log_around(&sim, 429);
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[1].at >= held.at + Duration::from_secs(2), "{log:?}");
    sim.shutdown().await;
}
