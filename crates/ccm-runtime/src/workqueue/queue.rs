//! A keyed work queue with client-go `workqueue` semantics.
//!
//! A key is queued at most once: adding a key that is already waiting does nothing, and
//! adding a key that a worker holds marks it dirty, so it is queued again when that worker
//! finishes. One key is therefore never held by two workers at once, and no add is lost.
//! Keys can also be added after a delay (the earliest pending deadline wins) or after the
//! key's [`RateLimit`] backoff. Time is [`tokio::time`], so paused-clock tests work.
//!
//! One departure from client-go: a key added back as a follow-up of work under way
//! ([`Outcome::FollowUpAfter`], e.g. a load balancer the cloud is still bringing up) waits in
//! a lane of its own once due, and the queue alternates between that lane and the others.
//! A burst of new keys then delays a due follow-up by one key, not by the whole burst, and
//! neither lane can starve the other.
//!
//! Another: a key whose work failed because the cloud did not answer
//! ([`Outcome::Unavailable`]) waits its backoff and is *held*, so that evidence that the
//! cloud answers again (a held key's work succeeding, or a probe's) hands it out before its
//! backoff ends; see [`held`](super::held).

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::held::Held;
use super::metrics::QueueMetrics;
use super::rate_limit::{RateLimit, TokenBucket, backoff_delay};

/// What a queue key must be: a Node name, a `(namespace, name)` pair, …
pub trait QueueKey: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static {}

impl<T: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static> QueueKey for T {}

/// What to do with a key once its worker is finished with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Success: forget the key's failures ([`Queue::forget`]).
    Done,
    /// Try again after this fixed delay, leaving the key's backoff as it is
    /// ([`Queue::add_after`]; Go's `api.RetryError`).
    RequeueAfter(Duration),
    /// Failure: try again after the key's backoff, which doubles
    /// ([`Queue::add_rate_limited`]).
    Retry,
    /// Work under way needs another look after this fixed delay (a load balancer the cloud
    /// is still bringing up): as [`RequeueAfter`](Self::RequeueAfter), but once due the key
    /// is handed out ahead of keys added before it, alternating with them
    /// ([`Queue::follow_up_after`]).
    FollowUpAfter(Duration),
    /// Failure because the cloud did not answer (a refused connection, a timeout, a 5xx:
    /// [`CloudError::Unavailable`](ccm_provider::CloudError::Unavailable)): as
    /// [`Retry`](Self::Retry), and the key is held, so that evidence that the cloud answers
    /// again ends its backoff early (see [`held`](super::held)).
    Unavailable,
}

/// Which of the two lanes of ready keys a key waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// Every key but follow-ups, first come, first served.
    Normal,
    /// Due follow-ups ([`Outcome::FollowUpAfter`]), served alternately with the others.
    FollowUp,
}

/// A keyed work queue; see the [module docs](self). Cloning it gives another handle to the
/// same queue.
pub struct Queue<K: QueueKey> {
    inner: Arc<Inner<K>>,
}

struct Inner<K> {
    name: String,
    limit: RateLimit,
    state: Mutex<State<K>>,
    /// Woken when a key is queued, a deadline moves earlier, or the queue shuts down.
    notify: Notify,
    metrics: Arc<QueueMetrics>,
}

struct State<K> {
    /// Keys ready to hand out, in order. Each is also in `dirty` and not in `processing`.
    ready: VecDeque<K>,
    /// Due follow-ups ready to hand out, in order; as `ready` otherwise.
    follow_ups: VecDeque<K>,
    /// Whether the last key handed out was a follow-up, so the next is not, if another
    /// waits.
    served_follow_up: bool,
    /// Keys that need processing, with the time they were added (for the queue duration)
    /// and the lane they wait in.
    dirty: HashMap<K, (Instant, Lane)>,
    /// Keys held by a worker, with the time it took them (for the work duration).
    processing: HashMap<K, Instant>,
    /// Delayed keys: their deadline (and a tie-breaker) and the lane they go to when due,
    /// and the same ordered by deadline.
    waiting: HashMap<K, ((Instant, u64), Lane)>,
    deadlines: BTreeMap<(Instant, u64), K>,
    next_seq: u64,
    /// Failures per key since it was last forgotten.
    failures: HashMap<K, u32>,
    /// Keys held back by a cloud that did not answer.
    held: Held<K>,
    bucket: Option<TokenBucket>,
    shutting_down: bool,
}

impl<K: QueueKey> Queue<K> {
    /// An empty queue. `name` is for logs and metrics (Go: `"Nodes"`, `"service"`).
    #[must_use]
    pub fn new(name: impl Into<String>, limit: RateLimit) -> Self {
        let state = State {
            ready: VecDeque::new(),
            follow_ups: VecDeque::new(),
            served_follow_up: false,
            dirty: HashMap::new(),
            processing: HashMap::new(),
            waiting: HashMap::new(),
            deadlines: BTreeMap::new(),
            next_seq: 0,
            failures: HashMap::new(),
            held: Held::default(),
            bucket: limit.bucket.and_then(TokenBucket::new),
            shutting_down: false,
        };
        let inner = Inner {
            name: name.into(),
            limit,
            state: Mutex::new(state),
            notify: Notify::new(),
            metrics: Arc::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The queue's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The queue's counters.
    #[must_use]
    pub fn metrics(&self) -> &QueueMetrics {
        &self.inner.metrics
    }

    /// The queue's counters as a shared handle that outlives the queue, for a metrics
    /// registry to read at scrape time
    /// ([`Metrics::register_queue`](crate::metrics::Metrics::register_queue)).
    #[must_use]
    pub fn shared_metrics(&self) -> Arc<QueueMetrics> {
        Arc::clone(&self.inner.metrics)
    }

    /// Queues `key` unless it is already waiting. If a worker holds it, it is queued again
    /// when that worker finishes. Does nothing once the queue is shut down.
    pub fn add(&self, key: K) {
        let mut state = self.inner.state.lock();
        self.inner
            .insert(&mut state, key, Instant::now(), Lane::Normal);
    }

    /// Adds `key` once `delay` has passed. If the key is already waiting for a deadline,
    /// the earlier deadline wins. A zero delay is [`add`](Self::add).
    pub fn add_after(&self, key: K, delay: Duration) {
        self.add_after_in(key, delay, Lane::Normal);
    }

    /// Adds `key` once `delay` has passed, as a follow-up of work under way: once due, it
    /// is handed out ahead of keys added before it, alternating with them (see the
    /// [module docs](self)). If the key is already waiting for a deadline, the earlier
    /// deadline wins, with its lane. A key already queued when its follow-up comes due (an
    /// echo of the worker's own writes, say) moves to the follow-up lane.
    pub fn follow_up_after(&self, key: K, delay: Duration) {
        self.add_after_in(key, delay, Lane::FollowUp);
    }

    fn add_after_in(&self, key: K, delay: Duration, lane: Lane) {
        let now = Instant::now();
        if delay.is_zero() {
            let mut state = self.inner.state.lock();
            return self.inner.insert(&mut state, key, now, lane);
        }
        let deadline = now.checked_add(delay).unwrap_or_else(|| far_future(now));
        let mut state = self.inner.state.lock();
        if state.shutting_down {
            return;
        }
        if let Some(&((earlier, _), _)) = state
            .waiting
            .get(&key)
            .filter(|((at, _), _)| *at <= deadline)
        {
            tracing::trace!(queue = %self.inner.name, ?key, ?earlier, "already waiting for an earlier deadline");
            return;
        }
        if let Some((later, _)) = state.waiting.remove(&key) {
            state.deadlines.remove(&later);
        }
        let slot = (deadline, state.next_seq);
        state.next_seq += 1;
        state.deadlines.insert(slot, key.clone());
        state.waiting.insert(key, (slot, lane));
        drop(state);
        // A waiting worker may be sleeping until a later deadline.
        self.inner.notify.notify_one();
    }

    /// Adds `key` after its backoff (see [`RateLimit`]) and counts one more failure for it.
    pub fn add_rate_limited(&self, key: K) {
        let now = Instant::now();
        let delay = {
            let mut state = self.inner.state.lock();
            if state.shutting_down {
                return;
            }
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let backoff = backoff_delay(self.inner.limit.base, self.inner.limit.max, *failures);
            *failures = failures.saturating_add(1);
            let bucket = state
                .bucket
                .as_mut()
                .map_or(Duration::ZERO, |b| b.reserve(now));
            backoff.max(bucket)
        };
        self.inner.metrics.inc_retries();
        self.add_after(key, delay);
    }

    /// Forgets `key`'s failures, so its next backoff starts again from the base. It does
    /// not remove the key from the queue. Call it for a key that is gone for good, too:
    /// failure counts are kept until forgotten.
    pub fn forget(&self, key: &K) {
        let mut state = self.inner.state.lock();
        state.failures.remove(key);
        state.held.forget(key);
    }

    /// Holds `key` as failed for want of the cloud ([`Outcome::Unavailable`]): after its
    /// backoff, or sooner on evidence that the cloud answers again.
    fn hold(&self, key: K) {
        self.add_rate_limited(key.clone());
        let mut state = self.inner.state.lock();
        if !state.shutting_down {
            state.held.hold(key, Instant::now());
        }
    }

    /// `key`'s work ended: a held key that got an answer from the cloud releases others
    /// early.
    fn settle_held(&self, key: &K, succeeded: bool) {
        let mut state = self.inner.state.lock();
        let release = state.held.finished(key, succeeded);
        if release > 0 {
            let released = self.inner.release_held(&mut state, release, Instant::now());
            drop(state);
            tracing::debug!(queue = %self.inner.name, ?key, released, "a held key succeeded: the cloud answers again");
        }
    }

    /// How many failures `key` has had since it was last forgotten.
    #[must_use]
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner
            .state
            .lock()
            .failures
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Waits for a key and hands it out, or returns `None` once the queue is shut down.
    /// The key is held until the returned [`WorkItem`] is finished or dropped.
    ///
    /// Cancel-safe: dropping the future never loses a key.
    pub async fn get(&self) -> Option<WorkItem<K>> {
        loop {
            // Registered before looking, so a wake-up between the look and the wait is kept.
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_deadline = {
                let mut state = self.inner.state.lock();
                if state.shutting_down {
                    return None;
                }
                let now = Instant::now();
                self.inner.promote_due(&mut state, now);
                if state.held.probe_at().is_some_and(|at| at <= now) {
                    state.held.probed(now);
                    if self.inner.release_held(&mut state, 1, now) > 0 {
                        tracing::debug!(queue = %self.inner.name, "keys held for want of the cloud: probing with the one due first");
                    }
                }
                if let Some(key) = state.pop_ready() {
                    state.held.handed_out(&key, now);
                    if let Some((added, _)) = state.dirty.remove(&key) {
                        self.inner.metrics.queue_duration().observe(now - added);
                    }
                    state.processing.insert(key.clone(), now);
                    self.inner.metrics.taken(now);
                    self.inner.metrics.set_depth(state.dirty.len());
                    return Some(WorkItem {
                        queue: self.clone(),
                        key,
                    });
                }
                let deadline = state.deadlines.first_key_value().map(|(&(at, _), _)| at);
                match (deadline, state.held.probe_at()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            match next_deadline {
                Some(at) => tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep_until(at) => {}
                },
                None => notified.await,
            }
        }
    }

    /// Keys waiting to be handed out, as [`QueueMetrics::depth`].
    #[must_use]
    pub fn len(&self) -> usize {
        let mut state = self.inner.state.lock();
        self.inner.promote_due(&mut state, Instant::now());
        state.dirty.len()
    }

    /// Whether no key is waiting to be handed out (delayed keys aside).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: [`get`](Self::get) returns `None` from now on, adds are ignored,
    /// and waiting and delayed keys are dropped. Keys held by workers stay theirs until
    /// they finish.
    pub fn shut_down(&self) {
        let mut state = self.inner.state.lock();
        state.shutting_down = true;
        state.ready.clear();
        state.follow_ups.clear();
        state.dirty.clear();
        state.waiting.clear();
        state.deadlines.clear();
        state.held.clear();
        self.inner.metrics.set_depth(0);
        drop(state);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    #[must_use]
    pub fn is_shut_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    /// Releases a key held by a worker; queues it again if it was added meanwhile.
    fn done(&self, key: &K) {
        let now = Instant::now();
        let mut state = self.inner.state.lock();
        if let Some(taken) = state.processing.remove(key) {
            self.inner.metrics.work_duration().observe(now - taken);
            self.inner.metrics.released(taken);
        }
        self.inner.promote_due(&mut state, now);
        if state.shutting_down {
            return;
        }
        if let Some(&(_, lane)) = state.dirty.get(key) {
            state.lane(lane).push_back(key.clone());
            drop(state);
            self.inner.notify.notify_one();
        }
    }
}

impl<K> State<K> {
    /// The ready keys of `lane`.
    fn lane(&mut self, lane: Lane) -> &mut VecDeque<K> {
        match lane {
            Lane::Normal => &mut self.ready,
            Lane::FollowUp => &mut self.follow_ups,
        }
    }

    /// The next ready key: a due follow-up unless the last key was one and another key
    /// waits too.
    fn pop_ready(&mut self) -> Option<K> {
        let follow_up =
            !self.follow_ups.is_empty() && (self.ready.is_empty() || !self.served_follow_up);
        let key = if follow_up {
            self.follow_ups.pop_front()
        } else {
            self.ready.pop_front()
        }?;
        self.served_follow_up = follow_up;
        Some(key)
    }
}

impl<K: QueueKey> Inner<K> {
    /// The heart of [`Queue::add`]: queues `key` in `lane` unless it is queued already; a
    /// key queued in the normal lane moves to the follow-up lane if that is `lane`.
    fn insert(&self, state: &mut State<K>, key: K, now: Instant, lane: Lane) {
        if state.shutting_down {
            return;
        }
        if let Some((_, queued)) = state.dirty.get_mut(&key) {
            if lane == Lane::FollowUp && *queued == Lane::Normal {
                *queued = Lane::FollowUp;
                // Linear, but only when a follow-up overtakes its own echo.
                if let Some(at) = state.ready.iter().position(|k| *k == key) {
                    state.ready.remove(at);
                    state.follow_ups.push_back(key);
                    self.notify.notify_one();
                }
            }
            return;
        }
        self.metrics.inc_adds();
        state.dirty.insert(key.clone(), (now, lane));
        self.metrics.set_depth(state.dirty.len());
        if !state.processing.contains_key(&key) {
            state.lane(lane).push_back(key);
            self.notify.notify_one();
        }
    }

    /// Hands out up to `n` held keys that wait for their backoff, the ones due first, now:
    /// how many.
    fn release_held(&self, state: &mut State<K>, n: usize, now: Instant) -> usize {
        let due: Vec<(Instant, u64)> = state
            .deadlines
            .iter()
            .filter(|(_, key)| state.held.is_waiting(key))
            .map(|(slot, _)| *slot)
            .take(n)
            .collect();
        for slot in &due {
            self.promote(state, *slot, now);
        }
        due.len()
    }

    /// Adds the delayed keys whose deadline has come.
    fn promote_due(&self, state: &mut State<K>, now: Instant) {
        while let Some((&slot, _)) = state.deadlines.first_key_value() {
            if slot.0 > now {
                break;
            }
            self.promote(state, slot, now);
        }
    }

    /// Queues the delayed key of `slot` now, in the lane it waits for.
    fn promote(&self, state: &mut State<K>, slot: (Instant, u64), now: Instant) {
        if let Some(key) = state.deadlines.remove(&slot) {
            let lane = state
                .waiting
                .remove(&key)
                .map_or(Lane::Normal, |(_, lane)| lane);
            self.insert(state, key, now, lane);
        }
    }
}

impl<K: QueueKey> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: QueueKey> fmt::Debug for Queue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.inner.name)
            .field("depth", &self.inner.metrics.depth())
            .finish_non_exhaustive()
    }
}

/// A key handed out by [`Queue::get`]. While it lives, no other worker gets the key;
/// dropping it (or [`finish`](Self::finish)) releases the key.
#[must_use = "dropping a WorkItem releases its key at once"]
pub struct WorkItem<K: QueueKey> {
    queue: Queue<K>,
    key: K,
}

impl<K: QueueKey> WorkItem<K> {
    /// The key.
    #[must_use]
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Acts on the outcome of the work (forget, add after a delay, or add rate-limited)
    /// and releases the key.
    pub fn finish(self, outcome: Outcome) {
        let key = self.key.clone();
        // What says the cloud answers again: the work done, or under way (a load balancer
        // created and still coming up). A failure of another kind says nothing either way.
        let answered = matches!(outcome, Outcome::Done | Outcome::FollowUpAfter(_));
        match outcome {
            Outcome::Done => {}
            Outcome::RequeueAfter(delay) => self.queue.add_after(key.clone(), delay),
            Outcome::FollowUpAfter(delay) => self.queue.follow_up_after(key.clone(), delay),
            Outcome::Retry => self.queue.add_rate_limited(key.clone()),
            Outcome::Unavailable => self.queue.hold(key.clone()),
        }
        self.queue.settle_held(&key, answered);
        // Forgotten after its success counted, which needs it among the held keys.
        if outcome == Outcome::Done {
            self.queue.forget(&key);
        }
    }
}

impl<K: QueueKey> Drop for WorkItem<K> {
    fn drop(&mut self) {
        self.queue.done(&self.key);
    }
}

impl<K: QueueKey> fmt::Debug for WorkItem<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkItem")
            .field("queue", &self.queue.name())
            .field("key", &self.key)
            .finish()
    }
}

/// A deadline that never comes, for delays too long to add to `now`.
fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(100 * 365 * 24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn queue(limit: RateLimit) -> Queue<&'static str> {
        Queue::new("test", limit)
    }

    fn plain() -> Queue<&'static str> {
        queue(RateLimit::exponential(secs(1), secs(8)))
    }

    /// The next key handed out within `within`, if any.
    async fn next(q: &Queue<&'static str>, within: Duration) -> Option<WorkItem<&'static str>> {
        tokio::time::timeout(within, q.get()).await.ok().flatten()
    }

    /// The next key, which must come within an hour.
    async fn must_get(q: &Queue<&'static str>) -> WorkItem<&'static str> {
        next(q, secs(3600)).await.expect("a key within an hour")
    }

    /// A [`plain`] queue that has handed out `key`, and the key's work item.
    async fn holding(key: &'static str) -> (Queue<&'static str>, WorkItem<&'static str>) {
        let q = plain();
        q.add(key);
        let held = must_get(&q).await;
        (q, held)
    }

    /// The result of a spawned task, which must end within a minute.
    async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
        tokio::time::timeout(secs(60), task)
            .await
            .expect("the task ended in time")
            .expect("the task did not panic")
    }

    /// Takes and releases keys until none comes within `within`, returning each with the
    /// time since `t0` it was handed out.
    async fn drain(
        q: &Queue<&'static str>,
        t0: Instant,
        within: Duration,
    ) -> Vec<(&'static str, Duration)> {
        let mut got = Vec::new();
        while let Some(item) = next(q, within).await {
            got.push((*item.key(), t0.elapsed()));
        }
        got
    }

    #[tokio::test(start_paused = true)]
    async fn add_dedups_waiting_keys_and_keeps_order() {
        let q = plain();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.metrics().adds_total(), 2);
        let t0 = Instant::now();
        let got = drain(&q, t0, secs(1)).await;
        assert_eq!(got, [("a", secs(0)), ("b", secs(0))]);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn key_added_while_held_is_requeued_once_released() {
        let (q, held) = holding("a").await;
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 1, "dirty while held counts in depth");
        assert!(
            next(&q, secs(60)).await.is_none(),
            "a held key is never handed out twice"
        );
        held.finish(Outcome::Done);
        let again = next(&q, secs(1)).await.expect("re-queued after release");
        assert_eq!(*again.key(), "a");
        drop(again);
        assert!(next(&q, secs(60)).await.is_none(), "the two adds were one");
    }

    #[tokio::test(start_paused = true)]
    async fn releasing_an_unchanged_key_does_not_requeue_it() {
        let (q, held) = holding("a").await;
        drop(held);
        assert!(next(&q, secs(60)).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_earliest_deadline_wins() {
        let q = plain();
        let t0 = Instant::now();
        q.add_after("a", secs(10));
        q.add_after("a", secs(5));
        q.add_after("a", secs(20));
        q.add_after("b", secs(7));
        q.add_after("c", Duration::ZERO);
        assert_eq!(
            q.len(),
            1,
            "a zero delay adds at once; delayed keys are not in depth"
        );
        let got = drain(&q, t0, secs(60)).await;
        assert_eq!(got, [("c", secs(0)), ("a", secs(5)), ("b", secs(7))]);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_wakes_a_worker_sleeping_on_a_later_deadline() {
        let q = plain();
        let t0 = Instant::now();
        q.add_after("late", secs(30));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await.map(|item| (*item.key(), t0.elapsed())) }
        });
        tokio::time::sleep(secs(1)).await;
        q.add_after("early", secs(2));
        assert_eq!(joined(waiter).await, Some(("early", secs(3))));
    }

    #[tokio::test(start_paused = true)]
    async fn due_follow_ups_alternate_with_a_backlog_of_other_keys() {
        let q = plain();
        let t0 = Instant::now();
        q.follow_up_after("f1", secs(1));
        q.follow_up_after("f2", secs(1));
        q.follow_up_after("f3", secs(1));
        for key in ["a", "b", "c", "d"] {
            q.add(key);
        }
        // The backlog is served until the follow-ups are due…
        let a = must_get(&q).await;
        assert_eq!(*a.key(), "a");
        tokio::time::sleep(secs(2)).await;
        drop(a);
        // …then they alternate with it, each lane in its own order; neither starves.
        let got: Vec<_> = drain(&q, t0, secs(60))
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(got, ["f1", "b", "f2", "c", "f3", "d"]);
        // A plain delay is no follow-up: it queues behind what came before it.
        q.add_after("late", secs(1));
        q.add("x");
        q.add("y");
        tokio::time::sleep(secs(2)).await;
        let got: Vec<_> = drain(&q, t0, secs(60))
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(got, ["x", "y", "late"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_up_keeps_its_lane_while_held_and_yields_to_an_earlier_deadline() {
        // Due while its key is held: queued in the follow-up lane once released.
        let (q, held) = holding("f").await;
        q.follow_up_after("f", secs(1));
        q.add("a");
        q.add("b");
        tokio::time::sleep(secs(2)).await;
        assert_eq!(q.len(), 3);
        drop(held);
        let t0 = Instant::now();
        let got: Vec<_> = drain(&q, t0, secs(60))
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(got, ["f", "a", "b"]);
        // The earlier deadline wins, with its lane: a plain delay before a follow-up's.
        q.follow_up_after("k", secs(5));
        q.add_after("k", secs(1));
        q.add("c");
        tokio::time::sleep(secs(2)).await;
        let got: Vec<_> = drain(&q, t0, secs(60))
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(got, ["c", "k"], "k came due as a plain key, behind c");
        // A key already queued (an echo of the worker's own write) when its follow-up comes
        // due moves to the follow-up lane, ahead of the backlog; once, not twice.
        q.add("d");
        q.add("k");
        q.add("e");
        q.follow_up_after("k", Duration::ZERO);
        q.follow_up_after("k", Duration::ZERO);
        q.add("k");
        assert_eq!(q.len(), 3);
        let got: Vec<_> = drain(&q, t0, secs(60))
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(got, ["k", "d", "e"]);
        // So does one held by a worker, dirty with its echo: back in the follow-up lane.
        q.add("h");
        let held = must_get(&q).await;
        q.add("h");
        q.add("x");
        q.follow_up_after("h", Duration::ZERO);
        drop(held);
        let got: Vec<_> = drain(&q, t0, secs(60))
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(got, ["h", "x"]);
        // WorkItem::finish with the outcome, and shut_down empties the lane.
        q.add("g");
        must_get(&q)
            .await
            .finish(Outcome::FollowUpAfter(Duration::ZERO));
        assert_eq!(q.len(), 1);
        q.shut_down();
        assert_eq!(q.len(), 0);
        assert!(next(&q, secs(1)).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_backoff_doubles_caps_and_resets_on_forget() {
        let q = plain(); // 1s .. 8s
        let mut delays = Vec::new();
        for _ in 0..6 {
            let t = Instant::now();
            q.add_rate_limited("a");
            let item = next(&q, secs(60)).await.unwrap();
            delays.push(t.elapsed());
            drop(item);
        }
        assert_eq!(delays, [1, 2, 4, 8, 8, 8].map(secs));
        assert_eq!(q.num_requeues(&"a"), 6);
        assert_eq!(q.num_requeues(&"b"), 0, "failures are per key");
        assert_eq!(q.metrics().retries_total(), 6);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        let t = Instant::now();
        q.add_rate_limited("a");
        drop(next(&q, secs(60)).await.unwrap());
        assert_eq!(t.elapsed(), secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_limits_rate_limited_adds_across_keys() {
        let q =
            queue(RateLimit::exponential(Duration::from_millis(1), secs(1)).with_bucket(1.0, 2));
        let t0 = Instant::now();
        for key in ["a", "b", "c", "d"] {
            q.add_rate_limited(key);
        }
        let got = drain(&q, t0, secs(60)).await;
        let ms = Duration::from_millis;
        // Two from the burst (after the 1ms backoff), then one a second.
        assert_eq!(
            got,
            [("a", ms(1)), ("b", ms(1)), ("c", secs(1)), ("d", secs(2))]
        );
        // Without a bucket, all four come after the backoff.
        let q = queue(RateLimit::exponential(ms(1), secs(1)));
        let t1 = Instant::now();
        for key in ["a", "b", "c", "d"] {
            q.add_rate_limited(key);
        }
        let got = drain(&q, t1, secs(60)).await;
        assert_eq!(
            got,
            [("a", ms(1)), ("b", ms(1)), ("c", ms(1)), ("d", ms(1))]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_stops_handing_out_keys() {
        let (q, held) = holding("held").await;
        q.add("ready");
        q.add_after("delayed", secs(10));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move {
                tokio::time::sleep(secs(5)).await; // the others are gone by then
                q.get().await.map(|item| *item.key())
            }
        });
        let idle = tokio::spawn({
            let q = q.clone();
            async move {
                let first = q.get().await.map(|i| *i.key()); // "ready"
                (first, q.get().await.map(|i| *i.key())) // blocks until shut down
            }
        });
        tokio::time::sleep(secs(2)).await;
        q.shut_down();
        assert!(q.is_shut_down());
        assert_eq!(joined(idle).await, (Some("ready"), None));
        assert_eq!(joined(waiter).await, None);
        q.add("late");
        q.add("held");
        q.add_rate_limited("late");
        assert_eq!(q.len(), 0);
        drop(held);
        let after = tokio::time::timeout(secs(60), q.get()).await;
        assert!(after.expect("get returns at once").is_none());
        assert_eq!(q.metrics().depth(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_track_depth_adds_and_durations() {
        let q = plain();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!((q.metrics().depth(), q.metrics().adds_total()), (2, 2));
        tokio::time::sleep(secs(3)).await;
        let a = must_get(&q).await;
        assert_eq!(q.metrics().depth(), 1);
        tokio::time::sleep(secs(2)).await;
        a.finish(Outcome::Done);
        let m = q.metrics();
        assert_eq!(
            (m.queue_duration().count(), m.queue_duration().sum()),
            (1, secs(3))
        );
        assert_eq!(
            (m.work_duration().count(), m.work_duration().sum()),
            (1, secs(2))
        );
        let b = must_get(&q).await;
        assert_eq!(m.queue_duration().sum(), secs(8), "b waited 5s");
        assert_eq!(m.depth(), 0);
        drop(b);
        assert_eq!(m.work_duration().count(), 2);
        assert_eq!(m.retries_total(), 0);
    }

    /// A queue with Go's service backoff (5 s doubling to 300 s) whose keys `keys` have
    /// each failed once for want of the cloud, at the start.
    async fn held_after_an_outage(keys: &[&'static str]) -> Queue<&'static str> {
        let q = queue(RateLimit::exponential(secs(5), secs(300)));
        for key in keys {
            q.add(key);
        }
        for _ in keys {
            must_get(&q).await.finish(Outcome::Unavailable);
        }
        q
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_succeeds_releases_the_held_keys_before_their_backoff() {
        let t0 = Instant::now();
        let q = held_after_an_outage(&["a", "b", "c", "d", "e"]).await;
        let mut got = Vec::new();
        while let Some(item) = next(&q, secs(60)).await {
            got.push((*item.key(), t0.elapsed()));
            item.finish(Outcome::Done);
        }
        // The probe two seconds in; its success releases two, each of theirs two more.
        let keys: Vec<_> = got.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e"]);
        assert!(got.iter().all(|(_, at)| *at == secs(2)), "{got:?}");
        assert_eq!(q.num_requeues(&"a"), 0, "a success forgets");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cloud_still_down_gets_the_backoff_and_sparse_probes_only() {
        let t0 = Instant::now();
        let q = held_after_an_outage(&["a", "b", "c"]).await;
        let mut tries = Vec::new();
        while let Some(item) = next(&q, secs(600)).await {
            if t0.elapsed() > secs(300) {
                break;
            }
            tries.push(t0.elapsed());
            item.finish(Outcome::Unavailable);
        }
        // The backoff alone: 5, 15, 35, 75, 155 s after the first failure, five tries a key;
        // the probes add at most one a probe interval, for the whole queue.
        let mut probes = 0;
        let mut at = Duration::ZERO;
        while at < secs(300) {
            at += super::super::held::probe_interval(at);
            probes += 1;
        }
        assert!(
            tries.len() <= 3 * 5 + probes,
            "{} tries: {tries:?}",
            tries.len()
        );
        // No hot loop: late in the outage, ten seconds or more between tries.
        let late: Vec<_> = tries.iter().filter(|t| **t > secs(100)).collect();
        assert!(
            late.windows(2).all(|p| *p[1] - *p[0] >= secs(10)),
            "{late:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn work_under_way_is_an_answer_too() {
        let t0 = Instant::now();
        let q = held_after_an_outage(&["a", "b", "c"]).await;
        // The probe's load balancer was created and is coming up: the cloud answers.
        let probe = must_get(&q).await;
        assert_eq!(t0.elapsed(), secs(2));
        probe.finish(Outcome::FollowUpAfter(secs(1)));
        let mut got = Vec::new();
        while let Some(item) = next(&q, secs(60)).await {
            got.push((*item.key(), t0.elapsed()));
            item.finish(Outcome::Done);
        }
        assert_eq!(got, [("b", secs(2)), ("c", secs(2)), ("a", secs(3))]);
    }

    #[tokio::test(start_paused = true)]
    async fn only_keys_held_for_want_of_the_cloud_are_released_early() {
        let t0 = Instant::now();
        let q = queue(RateLimit::exponential(secs(5), secs(300)));
        q.add("refused");
        q.add("down");
        must_get(&q).await.finish(Outcome::Retry);
        must_get(&q).await.finish(Outcome::Unavailable);
        let mut got = Vec::new();
        while let Some(item) = next(&q, secs(60)).await {
            got.push((*item.key(), t0.elapsed()));
            item.finish(Outcome::Done);
        }
        assert_eq!(got, [("down", secs(2)), ("refused", secs(5))]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutting_down_forgets_the_held_keys() {
        let q = held_after_an_outage(&["a"]).await;
        q.shut_down();
        assert!(next(&q, secs(60)).await.is_none());
    }
}
