//! Debouncing Node events for the controllers that act on the whole Node set (node sync,
//! routes): after a first change, wait until the changes have been quiet for a tenth of
//! the debounce, or for the whole debounce since the first change, whichever comes first.
//! A burst of Nodes joining (a hundred created in 100 ms) is acted on a tenth of the
//! debounce after it ends, rather than a full debounce after it began; a steady stream of
//! changes (Nodes initialised one by one at a QPS limit) is acted on once per debounce, so
//! the work per change stays bounded however fast they come.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// A source of change notifications.
pub(crate) trait Changes {
    /// Resolves on the next change; `false` when no change can come any more.
    fn changed(&mut self) -> impl Future<Output = bool> + Send;
}

impl Changes for watch::Receiver<u64> {
    async fn changed(&mut self) -> bool {
        watch::Receiver::changed(self).await.is_ok()
    }
}

impl Changes for &Notify {
    async fn changed(&mut self) -> bool {
        self.notified().await;
        true
    }
}

/// The quiet time that ends a wait early: a tenth of the debounce.
pub(crate) fn quiet(debounce: Duration) -> Duration {
    debounce / 10
}

/// Called after a first change: returns once `changes` has been quiet for
/// [`quiet`]`(debounce)`, or `debounce` after `first`, whichever comes first.
pub(crate) async fn settle(first: Instant, debounce: Duration, changes: &mut impl Changes) {
    let deadline = first + debounce;
    let quiet = quiet(debounce);
    loop {
        let until = (Instant::now() + quiet).min(deadline);
        tokio::select! {
            () = tokio::time::sleep_until(until) => return,
            more = changes.changed() => {
                if !more {
                    return;
                }
            }
        }
        if Instant::now() >= deadline {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBOUNCE: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_burst_ends_the_wait_a_quiet_time_after_its_last_change() {
        let (tx, mut rx) = watch::channel(0u64);
        let first = Instant::now();
        let sender = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                tx.send_modify(|n| *n += 1);
            }
            tx
        });
        settle(first, DEBOUNCE, &mut rx).await;
        assert_eq!(
            first.elapsed(),
            Duration::from_millis(200) + quiet(DEBOUNCE)
        );
        drop(sender.await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_waits_the_whole_debounce_and_no_longer() {
        let notify = Notify::new();
        let first = Instant::now();
        let steady = async {
            loop {
                tokio::time::sleep(quiet(DEBOUNCE) / 2).await;
                notify.notify_one();
            }
        };
        let mut changes = &notify;
        tokio::select! {
            () = settle(first, DEBOUNCE, &mut changes) => {}
            () = steady => unreachable!(),
        }
        assert_eq!(first.elapsed(), DEBOUNCE);
    }

    #[tokio::test(start_paused = true)]
    async fn no_change_after_the_first_waits_the_quiet_time() {
        let (_tx, mut rx) = watch::channel(0u64);
        let first = Instant::now();
        settle(first, DEBOUNCE, &mut rx).await;
        assert_eq!(first.elapsed(), quiet(DEBOUNCE));
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_changes_possible_ends_the_wait() {
        let (tx, mut rx) = watch::channel(0u64);
        drop(tx);
        let first = Instant::now();
        settle(first, DEBOUNCE, &mut rx).await;
        assert_eq!(first.elapsed(), Duration::ZERO);
    }
}
