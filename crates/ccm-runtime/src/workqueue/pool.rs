//! The worker pool: a bounded number of workers take keys from a [`Queue`], run the
//! controller's handler on each, and act on the [`Outcome`]. A panicking handler is logged
//! and its key retried with backoff; the worker goes on.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::queue::{Outcome, Queue, QueueKey};

/// Runs `concurrency` workers (at least one) on `queue` until `cancel` fires or the queue is
/// shut down, and returns when the last worker has stopped.
///
/// Each worker takes a key, awaits `handler(key)` and acts on its [`Outcome`]:
/// [`Done`](Outcome::Done) forgets the key's failures, [`RequeueAfter`](Outcome::RequeueAfter)
/// adds it back after a fixed delay, [`FollowUpAfter`](Outcome::FollowUpAfter) too, ahead of
/// other keys once due, [`Retry`](Outcome::Retry) adds it back after its backoff, and
/// [`Unavailable`](Outcome::Unavailable) too, held until the cloud answers again (see
/// [`held`](super::held)). A handler that panics counts as `Retry`.
///
/// When `cancel` fires, the queue is [shut down](Queue::shut_down), so no key is handed out
/// any more, and handlers already running are left to finish. A handler that can take long
/// should watch the same token itself, e.g. with
/// [`CancellationToken::run_until_cancelled`]. Dropping the returned future instead aborts
/// the workers and their handlers at once; the keys they held are released.
///
/// ```
/// use std::time::Duration;
/// use ccm_runtime::workqueue::{Outcome, Queue, RateLimit, run};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = Queue::new("service", RateLimit::exponential(Duration::from_secs(5), Duration::from_secs(300)));
/// queue.add(("default".to_string(), "web".to_string()));
/// queue.add(("default".to_string(), "web".to_string())); // already queued: no second sync
///
/// let cancel = CancellationToken::new();
/// let stop = cancel.clone(); // a real controller runs until shutdown
/// run(queue.clone(), 4, cancel, move |(namespace, name): (String, String)| {
///     let stop = stop.clone();
///     async move {
///         println!("syncing {namespace}/{name}");
///         stop.cancel();
///         Outcome::Done
///     }
/// })
/// .await;
/// assert_eq!(queue.metrics().work_duration().count(), 1);
/// # }
/// ```
pub async fn run<K, F, Fut>(
    queue: Queue<K>,
    concurrency: usize,
    cancel: CancellationToken,
    handler: F,
) where
    K: QueueKey,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let handler = Arc::new(handler);
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        workers.spawn(work(queue.clone(), Arc::clone(&handler)));
    }
    let mut cancelled = false;
    loop {
        tokio::select! {
            () = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                queue.shut_down();
            }
            joined = workers.join_next() => match joined {
                None => break,
                Some(Ok(())) => {}
                Some(Err(error)) => tracing::error!(queue = queue.name(), %error, "queue worker failed"),
            },
        }
    }
}

/// One worker: takes keys until the queue shuts down.
async fn work<K, F, Fut>(queue: Queue<K>, handler: Arc<F>)
where
    K: QueueKey,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    while let Some(item) = queue.get().await {
        let key = item.key().clone();
        // `handler(key)` itself may panic too, so it is called inside the guarded future.
        let outcome = AssertUnwindSafe(async { handler(key.clone()).await })
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                let panic = panic_message(panic.as_ref());
                tracing::error!(
                    queue = queue.name(),
                    ?key,
                    panic,
                    "handler panicked; retrying with backoff"
                );
                Outcome::Retry
            });
        tracing::trace!(queue = queue.name(), ?key, ?outcome, "key processed");
        item.finish(outcome);
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    use futures::future::BoxFuture;
    use tokio::time::Instant;

    use super::*;
    use crate::workqueue::RateLimit;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Waits for a spawned [`run`] to return, failing instead of hanging if it does not.
    async fn stopped(pool: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(secs(24 * 3600), pool)
            .await
            .expect("run did not return")
            .expect("run panicked");
    }

    /// Per key: workers on it now, the most at once, and the last version a worker saw.
    #[derive(Default)]
    struct KeyLog {
        in_flight: usize,
        max_in_flight: usize,
        last_seen: u64,
    }

    #[derive(Default)]
    struct Shared {
        /// The newest version of each key, written before each add.
        latest: Mutex<HashMap<u32, u64>>,
        keys: Mutex<HashMap<u32, KeyLog>>,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
    }

    impl Shared {
        fn start(&self, key: u32) -> u64 {
            let seen = self.latest.lock().unwrap()[&key];
            let mut keys = self.keys.lock().unwrap();
            let log = keys.entry(key).or_default();
            log.in_flight += 1;
            log.max_in_flight = log.max_in_flight.max(log.in_flight);
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.max_in_flight.fetch_max(now, SeqCst);
            seen
        }

        fn end(&self, key: u32, seen: u64) {
            self.in_flight.fetch_sub(1, SeqCst);
            let mut keys = self.keys.lock().unwrap();
            let log = keys.get_mut(&key).unwrap();
            log.in_flight -= 1;
            log.last_seen = seen;
        }

        /// A handler for [`run`] that logs each call here, around `work` on the key.
        fn handler<W, Fut>(
            self: &Arc<Self>,
            work: W,
        ) -> impl Fn(u32) -> BoxFuture<'static, Outcome> + Send + Sync + 'static
        where
            W: Fn(u32) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = ()> + Send + 'static,
        {
            let (shared, work) = (Arc::clone(self), Arc::new(work));
            move |key| {
                let (shared, work) = (Arc::clone(&shared), Arc::clone(&work));
                Box::pin(async move {
                    let seen = shared.start(key);
                    work(key).await;
                    shared.end(key, seen);
                    Outcome::Done
                })
            }
        }

        fn bump(&self, queue: &Queue<u32>, key: u32, version: u64) {
            self.latest.lock().unwrap().insert(key, version);
            queue.add(key);
        }

        fn check(&self) {
            let latest = self.latest.lock().unwrap();
            let keys = self.keys.lock().unwrap();
            assert_eq!(keys.len(), latest.len());
            for (key, log) in keys.iter() {
                assert_eq!(log.max_in_flight, 1, "key {key} had two workers at once");
                assert_eq!(
                    log.last_seen, latest[key],
                    "key {key}: its last update was never processed"
                );
            }
            assert!(
                self.max_in_flight.load(SeqCst) > 1,
                "the pool never ran two keys at once"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn never_two_workers_on_one_key_and_no_update_lost() {
        let queue = Queue::new("test", RateLimit::exponential(ms(1), secs(1)));
        let shared = Arc::new(Shared::default());
        let cancel = CancellationToken::new();
        let handler = shared.handler(|key| tokio::time::sleep(ms(3 + u64::from(key))));
        let pool = tokio::spawn(run(queue.clone(), 8, cancel.clone(), handler));
        for version in 1..=500 {
            shared.bump(&queue, (version % 5) as u32, version);
            if version % 3 == 0 {
                tokio::time::sleep(ms(1)).await;
            }
        }
        tokio::time::sleep(secs(1)).await;
        cancel.cancel();
        stopped(pool).await;
        shared.check();
        assert!(
            queue.metrics().work_duration().count() > 50,
            "keys were processed many times"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn never_two_workers_on_one_key_on_many_threads() {
        let queue = Queue::new("test", RateLimit::exponential(ms(1), secs(1)));
        let shared = Arc::new(Shared::default());
        let cancel = CancellationToken::new();
        let handler = shared.handler(|_| async {
            for _ in 0..10 {
                std::thread::sleep(Duration::from_micros(20));
                tokio::task::yield_now().await;
            }
        });
        let pool = tokio::spawn(run(queue.clone(), 6, cancel.clone(), handler));
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let (queue, shared) = (queue.clone(), Arc::clone(&shared));
                tokio::spawn(async move {
                    for i in 0..500u64 {
                        let version = i * 4 + p + 1;
                        shared.bump(&queue, (version % 7) as u32, version);
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        // Versions from different producers race, so settle on one final version per key.
        for key in 0..7 {
            shared.bump(&queue, key, 10_000 + u64::from(key));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let settled = {
                let latest = shared.latest.lock().unwrap();
                let keys = shared.keys.lock().unwrap();
                keys.iter()
                    .all(|(k, log)| log.in_flight == 0 && log.last_seen == latest[k])
            };
            if settled && queue.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the pool did not settle"
            );
            tokio::time::sleep(ms(5)).await;
        }
        cancel.cancel();
        tokio::time::timeout(secs(10), pool)
            .await
            .expect("run did not return")
            .unwrap();
        shared.check();
    }

    /// When each call of a [`scripted`] handler came (since the start), and the key's
    /// failure count then.
    type CallLog = Arc<Mutex<Vec<(Duration, u32)>>>;

    /// A handler that plays a script of outcomes, one per call, and logs the calls.
    fn scripted(
        queue: &Queue<&'static str>,
        script: Vec<Outcome>,
    ) -> (
        impl Fn(&'static str) -> std::future::Ready<Outcome> + Send + Sync + 'static,
        CallLog,
    ) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let (queue, log) = (queue.clone(), Arc::clone(&calls));
        let handler = move |key: &'static str| {
            let mut log = log.lock().unwrap();
            log.push((t0.elapsed(), queue.num_requeues(&key)));
            std::future::ready(script.get(log.len() - 1).copied().unwrap_or(Outcome::Done))
        };
        (handler, calls)
    }

    #[tokio::test(start_paused = true)]
    async fn retry_backs_off_and_done_forgets() {
        use Outcome::*;
        let queue = Queue::new("test", RateLimit::exponential(secs(1), secs(100)));
        let (handler, calls) = scripted(&queue, vec![Retry, Retry, Retry, Done, Retry, Done]);
        let cancel = CancellationToken::new();
        let pool = tokio::spawn(run(queue.clone(), 2, cancel.clone(), handler));
        queue.add("a");
        tokio::time::sleep(secs(20)).await;
        assert_eq!(queue.num_requeues(&"a"), 0, "Done forgot the failures");
        queue.add("a");
        tokio::time::sleep(secs(20)).await;
        cancel.cancel();
        stopped(pool).await;
        let calls = calls.lock().unwrap().clone();
        // 1s, 2s, 4s; then after Done the backoff starts again from 1s.
        assert_eq!(
            calls,
            [(0, 0), (1, 1), (3, 2), (7, 3), (20, 0), (21, 1)].map(|(t, n)| (secs(t), n))
        );
        assert_eq!(queue.num_requeues(&"a"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_after_is_a_fixed_delay_without_backoff_growth() {
        use Outcome::*;
        let queue = Queue::new("test", RateLimit::exponential(secs(1), secs(100)));
        let fixed = RequeueAfter(secs(3));
        let (handler, calls) =
            scripted(&queue, vec![fixed, fixed, fixed, Retry, fixed, Retry, Done]);
        let cancel = CancellationToken::new();
        let pool = tokio::spawn(run(queue.clone(), 1, cancel.clone(), handler));
        queue.add("a");
        tokio::time::sleep(secs(60)).await;
        cancel.cancel();
        stopped(pool).await;
        let calls = calls.lock().unwrap().clone();
        // Fixed 3s steps leave the count at 0; a Retry is 1s, then the fixed step keeps the
        // count (1), and the next Retry is 2s, not 1s: RequeueAfter did not reset it either.
        let want = [(0, 0), (3, 0), (6, 0), (9, 0), (10, 1), (13, 1), (15, 2)];
        assert_eq!(calls, want.map(|(t, n)| (secs(t), n)));
        assert_eq!(queue.metrics().retries_total(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn panicking_handler_is_retried_and_the_pool_survives() {
        let queue = Queue::new("test", RateLimit::exponential(secs(1), secs(100)));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let handler = {
            let calls = Arc::clone(&calls);
            move |key: &'static str| {
                let n = {
                    let mut calls = calls.lock().unwrap();
                    calls.push((key, t0.elapsed()));
                    calls.iter().filter(|(k, _)| *k == key).count()
                };
                assert!(!(key == "sync-panic" && n == 1), "boom before the future");
                async move {
                    tokio::task::yield_now().await;
                    assert!(!(key == "async-panic" && n < 3), "boom in the future");
                    Outcome::Done
                }
            }
        };
        let cancel = CancellationToken::new();
        let pool = tokio::spawn(run(queue.clone(), 1, cancel.clone(), handler));
        queue.add("async-panic");
        queue.add("sync-panic");
        queue.add("ok");
        tokio::time::sleep(secs(10)).await;
        queue.add("after"); // the single worker is still alive
        tokio::time::sleep(secs(1)).await;
        cancel.cancel();
        stopped(pool).await;
        let calls = calls.lock().unwrap().clone();
        let want = [
            ("async-panic", 0),
            ("sync-panic", 0),
            ("ok", 0),
            ("async-panic", 1), // backoff 1s
            ("sync-panic", 1),
            ("async-panic", 3), // backoff 2s
            ("after", 10),
        ];
        assert_eq!(calls, want.map(|(k, t)| (k, secs(t))));
        assert_eq!(
            queue.num_requeues(&"async-panic"),
            0,
            "its final Done forgot the panics"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_stops_handing_out_keys_and_lets_running_work_finish() {
        let queue = Queue::new("test", RateLimit::exponential(secs(1), secs(100)));
        let handled = Arc::new(Mutex::new(Vec::new()));
        let handler = {
            let handled = Arc::clone(&handled);
            move |key: &'static str| {
                let handled = Arc::clone(&handled);
                async move {
                    tokio::time::sleep(secs(10)).await;
                    handled.lock().unwrap().push(key);
                    Outcome::Done
                }
            }
        };
        queue.add("slow");
        queue.add("queued");
        let cancel = CancellationToken::new();
        let t0 = Instant::now();
        let pool = tokio::spawn(run(queue.clone(), 1, cancel.clone(), handler));
        tokio::time::sleep(secs(1)).await;
        cancel.cancel();
        stopped(pool).await;
        assert_eq!(t0.elapsed(), secs(10), "the running handler finished");
        assert_eq!(*handled.lock().unwrap(), ["slow"]);
        assert!(queue.is_shut_down());
    }

    #[tokio::test(start_paused = true)]
    async fn handler_watching_the_token_stops_at_once() {
        let queue = Queue::new("test", RateLimit::default());
        let cancel = CancellationToken::new();
        let handler = {
            let cancel = cancel.clone();
            move |_key: u8| {
                let cancel = cancel.clone();
                async move {
                    match cancel
                        .run_until_cancelled(tokio::time::sleep(secs(3600)))
                        .await
                    {
                        Some(()) => Outcome::Done,
                        None => Outcome::Retry,
                    }
                }
            }
        };
        queue.add(1);
        let t0 = Instant::now();
        let pool = tokio::spawn(run(queue.clone(), 2, cancel.clone(), handler));
        tokio::time::sleep(secs(2)).await;
        cancel.cancel();
        stopped(pool).await;
        assert_eq!(t0.elapsed(), secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn run_returns_when_the_queue_is_shut_down() {
        let queue = Queue::new("test", RateLimit::default());
        let t0 = Instant::now();
        let pool = tokio::spawn(run(
            queue.clone(),
            3,
            CancellationToken::new(),
            |_: u8| async { Outcome::Done },
        ));
        tokio::time::sleep(secs(1)).await;
        queue.shut_down();
        stopped(pool).await;
        assert_eq!(t0.elapsed(), secs(1));
    }
}
