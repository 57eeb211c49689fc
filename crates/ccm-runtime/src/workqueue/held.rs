//! Keys held back by a cloud that did not answer ([`Outcome::Unavailable`]), and when to
//! try them before their backoff ends. Such a key waits its backoff like any failed key, and
//! is *held*: evidence that the cloud answers again ends the wait early. The evidence is a
//! held key's next try getting an answer (its work done, or under way:
//! [`Outcome::Done`](super::Outcome::Done), [`Outcome::FollowUpAfter`](super::Outcome::FollowUpAfter)):
//! each such answer releases up to [`RELEASE_PER_SUCCESS`] more held keys at once (the ones
//! due first), so a recovery spreads through every held key in a few rounds while a cloud
//! that still fails stops each chain at its first failure.
//! When keys are held, none is being tried and none has been tried for the probe interval
//! (a tenth of how long keys have been held, [`PROBE_MIN`] to [`PROBE_MAX`]), the one due
//! first is tried as a probe. A released or probed key that fails again counts one more
//! failure: its backoff keeps growing. During an outage the probes add at most one attempt
//! per interval, for the whole queue, to what the backoff alone would send. The bookkeeping
//! is here; the [`Queue`](super::Queue) picks the keys and hands them out.
//!
//! [`Outcome::Unavailable`]: super::Outcome::Unavailable

use std::collections::HashSet;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// How many held keys one answer releases.
pub const RELEASE_PER_SUCCESS: usize = 2;

/// The shortest probe interval: the first probe of an outage comes this long after its
/// first held failure (or the last try of a held key).
pub const PROBE_MIN: Duration = Duration::from_secs(2);

/// The longest probe interval, reached after keys have been held for ten times as long.
pub const PROBE_MAX: Duration = Duration::from_secs(30);

/// The probe interval after keys have been held for `age`: a tenth of it, from [`PROBE_MIN`]
/// to [`PROBE_MAX`]. A short fault is noticed over within two seconds of its end, a long
/// outage costs a probe every half minute at most, and the probes of an outage of length
/// `T` number about `10 + 10 × ln(T / 20 s)` (14 in 30 s, 37 in 5 minutes, then two a
/// minute), for the whole queue however many keys it holds.
///
/// ```
/// use std::time::Duration;
/// use ccm_runtime::workqueue::held::probe_interval;
///
/// let s = Duration::from_secs;
/// assert_eq!(probe_interval(s(3)), s(2));
/// assert_eq!(probe_interval(s(30)), s(3));
/// assert_eq!(probe_interval(s(3600)), s(30));
/// ```
#[must_use]
pub fn probe_interval(age: Duration) -> Duration {
    (age / 10).clamp(PROBE_MIN, PROBE_MAX)
}

/// Which keys are held, which are being tried, and since when.
#[derive(Debug)]
pub(crate) struct Held<K> {
    /// Held keys not handed out since they failed: each is delayed or ready in the queue.
    waiting: HashSet<K>,
    /// Held keys handed out (by their backoff, a release or a probe) whose work has not
    /// ended.
    trying: HashSet<K>,
    /// Since when keys have been held without a pause: the outage's age.
    since: Option<Instant>,
    /// When a held key was last handed out.
    last_try: Option<Instant>,
}

impl<K> Default for Held<K> {
    fn default() -> Self {
        Self {
            waiting: HashSet::new(),
            trying: HashSet::new(),
            since: None,
            last_try: None,
        }
    }
}

impl<K: Eq + Hash + Clone> Held<K> {
    /// `key`'s work failed because the cloud did not answer.
    pub(crate) fn hold(&mut self, key: K, now: Instant) {
        self.trying.remove(&key);
        self.waiting.insert(key);
        self.since.get_or_insert(now);
    }

    /// `key` was handed out to a worker.
    pub(crate) fn handed_out(&mut self, key: &K, now: Instant) {
        if self.waiting.remove(key) {
            self.trying.insert(key.clone());
            self.last_try = Some(now);
        }
    }

    /// A probe was started (or found nothing to hand out): the next waits an interval.
    pub(crate) fn probed(&mut self, now: Instant) {
        self.last_try = Some(now);
    }

    /// `key`'s work ended, `succeeded` or not (a failure for want of the cloud is
    /// [`hold`](Self::hold), called before this): how many held keys to release now.
    pub(crate) fn finished(&mut self, key: &K, succeeded: bool) -> usize {
        let was_trying = self.trying.remove(key);
        self.settle();
        if was_trying && succeeded {
            RELEASE_PER_SUCCESS.min(self.waiting.len())
        } else {
            0
        }
    }

    /// Forgets `key` (gone for good, or its failures forgotten).
    pub(crate) fn forget(&mut self, key: &K) {
        self.waiting.remove(key);
        self.trying.remove(key);
        self.settle();
    }

    /// Forgets every key (the queue shuts down).
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Whether `key` is held and waiting to be tried.
    pub(crate) fn is_waiting(&self, key: &K) -> bool {
        self.waiting.contains(key)
    }

    /// When the next probe is due: `None` while no key waits, while one is being tried
    /// (its result is the evidence), or before any key was held.
    pub(crate) fn probe_at(&self) -> Option<Instant> {
        if self.waiting.is_empty() || !self.trying.is_empty() {
            return None;
        }
        let since = self.since?;
        let from = self.last_try.map_or(since, |t| t.max(since));
        Some(from + probe_interval(from - since))
    }

    /// Starts the outage's age again once nothing is held.
    fn settle(&mut self) {
        if self.waiting.is_empty() && self.trying.is_empty() {
            self.since = None;
            self.last_try = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn probe_interval_is_a_tenth_of_the_age_within_bounds() {
        assert_eq!(probe_interval(Duration::ZERO), PROBE_MIN);
        assert_eq!(probe_interval(s(10)), s(2));
        assert_eq!(probe_interval(s(50)), s(5));
        assert_eq!(probe_interval(s(300)), s(30));
        assert_eq!(probe_interval(Duration::MAX), PROBE_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_of_a_held_key_releases_others_and_no_other_success_does() {
        let t0 = Instant::now();
        let mut held = Held::default();
        for key in ["a", "b", "c", "d"] {
            held.hold(key, t0);
        }
        // A key that was never held succeeding says nothing about the cloud.
        assert_eq!(held.finished(&"x", true), 0);
        held.handed_out(&"a", t0 + s(1));
        assert!(!held.is_waiting(&"a"));
        assert_eq!(held.finished(&"a", true), RELEASE_PER_SUCCESS);
        // A held key that fails again is held again and releases nothing.
        held.handed_out(&"b", t0 + s(2));
        held.hold("b", t0 + s(2));
        assert_eq!(held.finished(&"b", false), 0);
        assert!(held.is_waiting(&"b"));
        // Never more than are waiting.
        held.forget(&"c");
        held.forget(&"d");
        held.handed_out(&"b", t0 + s(3));
        assert_eq!(held.finished(&"b", true), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn probes_wait_for_the_interval_and_never_overlap_a_try() {
        let t0 = Instant::now();
        let mut held = Held::default();
        assert_eq!(held.probe_at(), None, "nothing held");
        held.hold("a", t0);
        held.hold("b", t0 + s(5));
        assert_eq!(held.probe_at(), Some(t0 + s(2)));
        held.handed_out(&"a", t0 + s(40));
        assert_eq!(held.probe_at(), None, "a try is under way");
        held.hold("a", t0 + s(41));
        held.finished(&"a", false);
        // Forty seconds held: the next probe four seconds after the last try.
        assert_eq!(held.probe_at(), Some(t0 + s(44)));
        // Once nothing is held the outage's age starts again.
        held.forget(&"a");
        held.forget(&"b");
        held.hold("c", t0 + s(100));
        assert_eq!(held.probe_at(), Some(t0 + s(102)));
    }
}
