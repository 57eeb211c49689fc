//! What a [`Queue`](super::Queue) counts, for a metrics layer to read: plain atomics, named
//! after client-go's `workqueue_*` metrics (each labelled with the queue's name in Go).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Upper bounds, in seconds, of the [`DurationHistogram`] buckets: client-go's
/// `ExponentialBuckets(10e-9, 10, 10)`, 10ns to 10s.
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// [`DURATION_BUCKETS`] in nanoseconds, for exact comparisons.
const BUCKET_NANOS: [u64; 10] = [
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// The counters of one queue. Read them at any time; the queue updates them.
#[derive(Debug, Default)]
pub struct QueueMetrics {
    depth: AtomicU64,
    adds: AtomicU64,
    retries: AtomicU64,
    queue_duration: DurationHistogram,
    work_duration: DurationHistogram,
    /// When each key now held by a worker was taken (how many were taken at that instant).
    running: Mutex<BTreeMap<Instant, usize>>,
}

impl QueueMetrics {
    /// Keys waiting to be handed out, counting those that will be re-queued when their
    /// current worker finishes, but not those still waiting out a delay
    /// (`workqueue_depth`). A delayed key counts from the first queue operation after its
    /// deadline.
    #[must_use]
    pub fn depth(&self) -> u64 {
        self.depth.load(Relaxed)
    }

    /// Adds that queued a key, i.e. not counting deduplicated ones (`workqueue_adds_total`).
    #[must_use]
    pub fn adds_total(&self) -> u64 {
        self.adds.load(Relaxed)
    }

    /// Rate-limited adds (`workqueue_retries_total`).
    #[must_use]
    pub fn retries_total(&self) -> u64 {
        self.retries.load(Relaxed)
    }

    /// How long keys waited in the queue before a worker took them
    /// (`workqueue_queue_duration_seconds`).
    #[must_use]
    pub fn queue_duration(&self) -> &DurationHistogram {
        &self.queue_duration
    }

    /// How long workers held keys (`workqueue_work_duration_seconds`).
    #[must_use]
    pub fn work_duration(&self) -> &DurationHistogram {
        &self.work_duration
    }

    /// What workers hold now, at `now`: the seconds they have held their keys, added up
    /// (`workqueue_unfinished_work_seconds`), and the longest one
    /// (`workqueue_longest_running_processor_seconds`).
    #[must_use]
    pub fn unfinished_work(&self, now: Instant) -> (f64, f64) {
        let running = self.running.lock();
        let sum = running
            .iter()
            .map(|(taken, n)| now.saturating_duration_since(*taken).as_secs_f64() * *n as f64)
            .sum();
        let longest = running.keys().next().map_or(0.0, |first| {
            now.saturating_duration_since(*first).as_secs_f64()
        });
        (sum, longest)
    }

    pub(crate) fn taken(&self, at: Instant) {
        *self.running.lock().entry(at).or_default() += 1;
    }

    pub(crate) fn released(&self, taken: Instant) {
        let mut running = self.running.lock();
        if let Some(n) = running.get_mut(&taken) {
            *n -= 1;
            if *n == 0 {
                running.remove(&taken);
            }
        }
    }

    pub(crate) fn set_depth(&self, depth: usize) {
        self.depth
            .store(u64::try_from(depth).unwrap_or(u64::MAX), Relaxed);
    }

    pub(crate) fn inc_adds(&self) {
        self.adds.fetch_add(1, Relaxed);
    }

    pub(crate) fn inc_retries(&self) {
        self.retries.fetch_add(1, Relaxed);
    }
}

/// A histogram of durations over [`DURATION_BUCKETS`], with a count and a sum.
#[derive(Debug, Default)]
pub struct DurationHistogram {
    /// Observations per bucket, not cumulative; the last slot is above the last bound.
    buckets: [AtomicU64; 11],
    sum_nanos: AtomicU64,
}

impl DurationHistogram {
    /// Records one duration.
    pub fn observe(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let slot = BUCKET_NANOS
            .iter()
            .position(|&bound| nanos <= bound)
            .unwrap_or(BUCKET_NANOS.len());
        self.buckets[slot].fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// The number of observations.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }

    /// The sum of all observations.
    #[must_use]
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_nanos.load(Relaxed))
    }

    /// Cumulative counts as Prometheus wants them: `(upper bound in seconds, observations
    /// at or below it)` for each of [`DURATION_BUCKETS`]; `+Inf` is [`count`](Self::count).
    #[must_use]
    pub fn buckets(&self) -> [(f64, u64); 10] {
        let mut total = 0;
        std::array::from_fn(|i| {
            total += self.buckets[i].load(Relaxed);
            (DURATION_BUCKETS[i], total)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_adds_up_what_workers_hold() {
        let m = QueueMetrics::default();
        assert_eq!(m.unfinished_work(Instant::now()), (0.0, 0.0));
        let first = Instant::now();
        m.taken(first);
        tokio::time::advance(Duration::from_secs(2)).await;
        let second = Instant::now();
        m.taken(second);
        m.taken(second);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(m.unfinished_work(Instant::now()), (3.0 + 1.0 + 1.0, 3.0));
        m.released(first);
        m.released(second);
        assert_eq!(m.unfinished_work(Instant::now()), (1.0, 1.0));
        m.released(second);
        assert_eq!(m.unfinished_work(Instant::now()), (0.0, 0.0));
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = DurationHistogram::default();
        h.observe(Duration::from_nanos(10)); // on the first bound
        h.observe(Duration::from_millis(5)); // <= 10ms
        h.observe(Duration::from_secs(2)); // <= 10s
        h.observe(Duration::from_secs(60)); // +Inf only
        assert_eq!(h.count(), 4);
        assert_eq!(
            h.sum(),
            Duration::from_nanos(10) + Duration::from_millis(5) + Duration::from_secs(62)
        );
        let counts: Vec<u64> = h.buckets().iter().map(|&(_, n)| n).collect();
        assert_eq!(counts, [1, 1, 1, 1, 1, 1, 2, 2, 2, 3]);
        assert_eq!(h.buckets()[9].0, 10.0);
    }
}
