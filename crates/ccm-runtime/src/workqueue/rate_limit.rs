//! How long [`Queue::add_rate_limited`](super::Queue::add_rate_limited) waits: a per-key
//! exponential backoff, optionally combined with an overall token bucket (the larger delay
//! wins), as client-go's `MaxOfRateLimiter` does. The arithmetic is pure and lives here.

use std::time::Duration;

use tokio::time::Instant;

/// The rate limit of a [`Queue`](super::Queue): per-key exponential backoff
/// (`base × 2^failures`, capped at `max`) and an optional overall [`Bucket`].
///
/// ```
/// use std::time::Duration;
/// use ccm_runtime::workqueue::RateLimit;
///
/// // Go's service controller: 5s doubling to 300s, no bucket.
/// let service = RateLimit::exponential(Duration::from_secs(5), Duration::from_secs(300));
/// assert!(service.bucket.is_none());
/// // client-go's default controller limiter: 5ms doubling to 1000s, plus 10 qps / 100 burst.
/// assert_eq!(RateLimit::client_go_default().bucket.map(|b| b.burst), Some(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RateLimit {
    /// The delay after a key's first failure.
    pub base: Duration,
    /// The longest delay of the per-key backoff.
    pub max: Duration,
    /// An overall token bucket shared by all keys, if any.
    pub bucket: Option<Bucket>,
}

impl RateLimit {
    /// Per-key exponential backoff only, from `base` doubling up to `max`.
    #[must_use]
    pub const fn exponential(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            bucket: None,
        }
    }

    /// client-go's `DefaultTypedControllerRateLimiter`: 5ms doubling to 1000s, and a token
    /// bucket of 10 qps with a burst of 100. Go's cloud-node controller uses it.
    #[must_use]
    pub const fn client_go_default() -> Self {
        Self::exponential(Duration::from_millis(5), Duration::from_secs(1000))
            .with_bucket(10.0, 100)
    }

    /// Adds an overall token bucket: `qps` tokens a second, at most `burst` saved up.
    /// A `qps` that is not finite and positive disables the bucket; a `burst` of 0 counts as 1.
    #[must_use]
    pub const fn with_bucket(mut self, qps: f64, burst: u32) -> Self {
        self.bucket = Some(Bucket { qps, burst });
        self
    }
}

impl Default for RateLimit {
    /// [`RateLimit::client_go_default`].
    fn default() -> Self {
        Self::client_go_default()
    }
}

/// An overall token bucket (Go's `BucketRateLimiter` over `x/time/rate`): every rate-limited
/// add takes a token, and waits for one when none is left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Tokens added per second.
    pub qps: f64,
    /// The most tokens the bucket holds; it starts full.
    pub burst: u32,
}

/// The per-key backoff after `failures` earlier failures: `base × 2^failures`, capped at `max`.
///
/// ```
/// use std::time::Duration;
/// use ccm_runtime::workqueue::rate_limit::backoff_delay;
///
/// let ms = Duration::from_millis;
/// assert_eq!(backoff_delay(ms(5), ms(1000), 0), ms(5));
/// assert_eq!(backoff_delay(ms(5), ms(1000), 3), ms(40));
/// assert_eq!(backoff_delay(ms(5), ms(1000), 80), ms(1000));
/// ```
#[must_use]
pub fn backoff_delay(base: Duration, max: Duration, failures: u32) -> Duration {
    2u32.checked_pow(failures)
        .and_then(|factor| base.checked_mul(factor))
        .map_or(max, |delay| delay.min(max))
}

/// The state of a [`Bucket`]: reservations may run the token count negative, and the
/// deficit is the wait, as in `x/time/rate`'s `Reserve().Delay()`.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// The state of a full bucket, or `None` if `bucket` is disabled.
    pub(crate) fn new(bucket: Bucket) -> Option<Self> {
        (bucket.qps.is_finite() && bucket.qps > 0.0).then(|| {
            let burst = f64::from(bucket.burst.max(1));
            Self {
                qps: bucket.qps,
                burst,
                tokens: burst,
                last: None,
            }
        })
    }

    /// Takes a token at `now` and returns how long to wait until it is really there.
    pub(crate) fn reserve(&mut self, now: Instant) -> Duration {
        if let Some(last) = self.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-self.tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let delays: Vec<_> = (0..8).map(|n| backoff_delay(ms(5), ms(100), n)).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 100, 100, 100].map(ms));
        // Overflow of the factor or of the multiplication saturates at max.
        assert_eq!(backoff_delay(ms(5), ms(100), u32::MAX), ms(100));
        assert_eq!(
            backoff_delay(Duration::MAX, Duration::MAX, 1),
            Duration::MAX
        );
        // client-go's service controller: 5s .. 300s.
        let s = Duration::from_secs;
        assert_eq!(backoff_delay(s(5), s(300), 5), s(160));
        assert_eq!(backoff_delay(s(5), s(300), 6), s(300));
    }

    #[test]
    fn bucket_spends_burst_then_waits_for_refill() {
        let mut bucket = TokenBucket::new(Bucket {
            qps: 10.0,
            burst: 3,
        })
        .unwrap();
        let t0 = Instant::now();
        let first: Vec<_> = (0..5).map(|_| bucket.reserve(t0)).collect();
        // Three from the burst, then one every 100ms, queued behind each other.
        assert_eq!(first, [0, 0, 0, 100, 200].map(ms));
        // One second later: 10 tokens refilled, 2 owed, capped at burst 3.
        assert_eq!(bucket.reserve(t0 + ms(1000)), Duration::ZERO);
        assert_eq!(bucket.reserve(t0 + ms(1000)), Duration::ZERO);
        assert_eq!(bucket.reserve(t0 + ms(1000)), Duration::ZERO);
        assert_eq!(bucket.reserve(t0 + ms(1000)), ms(100));
    }

    #[test]
    fn bucket_config_edge_cases() {
        assert!(
            TokenBucket::new(Bucket {
                qps: 0.0,
                burst: 10
            })
            .is_none()
        );
        assert!(
            TokenBucket::new(Bucket {
                qps: f64::NAN,
                burst: 10
            })
            .is_none()
        );
        assert!(
            TokenBucket::new(Bucket {
                qps: f64::INFINITY,
                burst: 10
            })
            .is_none()
        );
        let mut zero_burst = TokenBucket::new(Bucket { qps: 1.0, burst: 0 }).unwrap();
        let t0 = Instant::now();
        assert_eq!(zero_burst.reserve(t0), Duration::ZERO);
        assert_eq!(zero_burst.reserve(t0), ms(1000));
        let mut tiny = TokenBucket::new(Bucket {
            qps: 1e-300,
            burst: 1,
        })
        .unwrap();
        tiny.reserve(t0);
        assert_eq!(tiny.reserve(t0), Duration::MAX);
    }
}
