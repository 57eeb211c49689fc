//! Events after the writes that matter: the API server's time goes to Node, Service and
//! Lease writes first.
//!
//! The client layer counts every write of this process that is not an Event's while it is
//! in flight ([`Foreground`]); the event recorder's writers wait before each Event write
//! until none is ([`WritePriority::background_turn`]), at most [`MAX_EVENT_DEFERRAL`]. Under a burst — a
//! thousand Nodes registering at once — the API server then spends its time on the Nodes,
//! and the Events follow as the writes thin out; no Event is lost for it (the recorder's
//! queue holds [`MAX_QUEUED_EVENTS`](crate::events::MAX_QUEUED_EVENTS)), and while the
//! writes never stop each of the recorder's lanes still writes one Event per bound. Go's recorder gets the same effect
//! from its single sequential writer, at the cost of a slower drain afterwards. The count
//! is per process, as the API server's load is: every client of the controller manager
//! (the per-controller ones of `--use-service-account-credentials` too) adds to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest an Event write waits for the other writes to stop.
pub(crate) const MAX_EVENT_DEFERRAL: Duration = Duration::from_secs(1);

/// The process's count, which the client layer and the event recorder share.
pub(crate) static PROCESS: LazyLock<Arc<WritePriority>> = LazyLock::new(Arc::default);

/// Writes in flight that Events give way to.
#[derive(Debug, Default)]
pub(crate) struct WritePriority {
    in_flight: AtomicUsize,
    /// Woken when `in_flight` drops to 0.
    quiet: Notify,
}

impl WritePriority {
    /// Counts one write in flight until the value returned is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> Foreground {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Foreground(self.clone())
    }

    /// Waits until no [`Foreground`] write is in flight, or `max` has passed.
    pub(crate) async fn background_turn(&self, max: Duration) {
        let deadline = Instant::now() + max;
        loop {
            let notified = self.quiet.notified();
            tokio::pin!(notified);
            // Registered before the check, so a drop to 0 in between is not missed.
            notified.as_mut().enable();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }
}

/// A write Events give way to, counted while this lives.
#[derive(Debug)]
pub(crate) struct Foreground(Arc<WritePriority>);

impl Drop for Foreground {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.quiet.notify_waiters();
        }
    }
}

/// Whether a request writes Events (core `events` or `events.k8s.io`): those wait for the
/// others, and are not counted as foreground writes.
pub(crate) fn is_event_path(path: &str) -> bool {
    let mut segments = path.trim_matches('/').split('/');
    let mut next = || segments.next();
    match (next(), next(), next(), next(), next()) {
        (Some("apis"), Some("events.k8s.io"), ..) => true,
        // /api/v1/events, /api/v1/namespaces/NS/events[/NAME]
        (Some("api"), Some(_), Some("events"), ..)
        | (Some("api"), Some(_), Some("namespaces"), Some(_), Some("events")) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_paths_are_told_apart() {
        for path in [
            "/api/v1/namespaces/default/events",
            "/api/v1/namespaces/default/events/n1.17f",
            "/api/v1/events",
            "/apis/events.k8s.io/v1/namespaces/default/events",
        ] {
            assert!(is_event_path(path), "{path}");
        }
        for path in [
            "/api/v1/nodes/events",
            "/api/v1/nodes/n1/status",
            "/api/v1/namespaces/events/services/s",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/events",
        ] {
            assert!(!is_event_path(path), "{path}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn events_wait_for_writes_in_flight_at_most_the_bound() {
        let writes = Arc::new(WritePriority::default());
        // Nothing in flight: no wait.
        let start = Instant::now();
        writes.background_turn(MAX_EVENT_DEFERRAL).await;
        assert_eq!(start.elapsed(), Duration::ZERO);

        // Two writes; the turn comes when the last one ends.
        let (a, b) = (writes.enter(), writes.enter());
        let waiter = tokio::spawn({
            let writes = writes.clone();
            async move {
                let start = Instant::now();
                writes.background_turn(Duration::from_secs(10)).await;
                start.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "one write still in flight");
        drop(b);
        assert_eq!(waiter.await.unwrap(), Duration::from_millis(200));

        // Writes that never stop: the bound.
        let _busy = writes.enter();
        let start = Instant::now();
        writes.background_turn(MAX_EVENT_DEFERRAL).await;
        assert_eq!(start.elapsed(), MAX_EVENT_DEFERRAL);
    }
}
