//! When the route controller looks again after the cloud did not answer. Go's controller
//! retries a failed route at the next `--route-reconciliation-period` (10 s by default, and
//! often set to minutes); a call that failed with
//! [`CloudError::Unavailable`](ccm_provider::CloudError::Unavailable) here asks for an extra
//! reconcile, which lists the routes again, after the work queue's probe interval
//! ([`probe_interval`]: a tenth of how long the cloud has not answered, 2 s to 30 s). A
//! reconcile that finds the cloud still down asks for the next one further out; one that
//! answers ends the outage, so every route a fault held back is created within seconds of
//! its end, with at most one listing a probe interval during it.

use parking_lot::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::workqueue::held::probe_interval;
use ccm_provider::CloudError;

/// Since when the cloud has not answered, and when the next reconcile is due because of it.
#[derive(Debug, Default)]
pub(super) struct Outage {
    state: Mutex<State>,
    /// Woken when a retry is asked for, so a trigger waiting for the period sees it.
    asked: Notify,
}

#[derive(Debug, Default)]
struct State {
    since: Option<Instant>,
    retry_at: Option<Instant>,
}

impl Outage {
    /// A cloud call failed with `err`: if the cloud did not answer, a retry is due after the
    /// probe interval.
    pub(super) fn failed(&self, err: &CloudError) {
        if !err.is_unavailable() {
            return;
        }
        let now = Instant::now();
        let mut state = self.state.lock();
        let since = *state.since.get_or_insert(now);
        let at = now + probe_interval(now - since);
        state.retry_at = Some(state.retry_at.map_or(at, |due| due.min(at)));
        drop(state);
        self.asked.notify_one();
    }

    /// A cloud call succeeded: the cloud answers again (a retry already asked for stays).
    pub(super) fn answered(&self) {
        self.state.lock().since = None;
    }

    /// When the retry is due, if one is.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.state.lock().retry_at
    }

    /// A reconcile starts: it is the retry.
    pub(super) fn reconciling(&self) {
        self.state.lock().retry_at = None;
    }

    /// Waits until a retry is asked for (or the time of one moves).
    pub(super) async fn asked(&self) {
        self.asked.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn only_an_unavailable_cloud_asks_for_a_retry_and_it_moves_out() {
        let outage = Outage::default();
        outage.failed(&CloudError::msg("quota exceeded"));
        assert_eq!(outage.retry_at(), None, "a refusal waits for the period");
        let t0 = Instant::now();
        let down = CloudError::unavailable("listing routes", std::io::Error::other("503"));
        outage.failed(&down);
        assert_eq!(outage.retry_at(), Some(t0 + Duration::from_secs(2)));
        outage.reconciling();
        assert_eq!(outage.retry_at(), None);
        tokio::time::advance(Duration::from_secs(100)).await;
        outage.failed(&down);
        assert_eq!(
            outage.retry_at(),
            Some(t0 + Duration::from_secs(110)),
            "a hundred seconds down: ten seconds to the next look"
        );
        outage.reconciling();
        outage.answered();
        outage.failed(&down);
        assert_eq!(
            outage.retry_at(),
            Some(t0 + Duration::from_secs(102)),
            "a new outage starts again"
        );
    }
}
