//! What client-go's `rest_client_*` metrics count, kept per client layer and added up at
//! scrape time: responses by status code and HTTP method (`rest_client_requests_total`),
//! request latency and the wait for the rate limiter by HTTP method
//! (`rest_client_request_duration_seconds`, `rest_client_rate_limiter_duration_seconds`), all
//! labelled with the API server's `host` as Go labels them
//! (`k8s.io/component-base/metrics/prometheus/restclient`).

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;

/// client-go's buckets for both latency histograms, in seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The `code` of a request that got no response, as client-go writes it.
pub const NO_RESPONSE: &str = "<error>";

/// A histogram's state: a count per bucket of [`LATENCY_BUCKETS`] and one for `+Inf`, the
/// sum and the count; two add up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latencies {
    /// Observations per bucket (not cumulative), the last one `+Inf`.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    /// The sum of the observations, in seconds.
    pub sum: f64,
    /// How many.
    pub count: u64,
}

impl Latencies {
    fn observe(&mut self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[bucket] += 1;
        self.sum += seconds;
        self.count += 1;
    }

    /// Adds `other`'s observations to these.
    pub fn add(&mut self, other: &Self) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }

    /// The buckets as prometheus-client's encoder takes them: `(upper bound, count)`.
    pub fn encoded(&self) -> Vec<(f64, u64)> {
        LATENCY_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.buckets)
            .collect()
    }
}

/// One client's counts under Go's names and labels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoClientCounts {
    /// The API server's `host:port`, Go's `host` label.
    pub host: String,
    /// Responses by `(code, method)`; `code` is [`NO_RESPONSE`] when there was none.
    pub results: BTreeMap<(String, String), u64>,
    /// Request latency by HTTP method.
    pub latency: BTreeMap<String, Latencies>,
    /// Time waited for the client's rate limiter, by HTTP method.
    pub rate_limiter: BTreeMap<String, Latencies>,
}

/// Where a client layer records; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct GoClientMetrics {
    counts: Mutex<GoClientCounts>,
}

impl GoClientMetrics {
    pub(crate) fn set_host(&self, host: String) {
        self.counts.lock().host = host;
    }

    /// A request with `method` ended after `took` with `code` (a status, or
    /// [`NO_RESPONSE`]).
    pub(crate) fn finished(&self, method: &str, code: &str, took: Duration) {
        let mut counts = self.counts.lock();
        *counts
            .results
            .entry((code.to_owned(), method.to_owned()))
            .or_default() += 1;
        counts
            .latency
            .entry(method.to_owned())
            .or_default()
            .observe(took);
    }

    /// A request with `method` waited `took` for the rate limiter.
    pub(crate) fn waited(&self, method: &str, took: Duration) {
        self.counts
            .lock()
            .rate_limiter
            .entry(method.to_owned())
            .or_default()
            .observe(took);
    }

    pub(crate) fn snapshot(&self) -> GoClientCounts {
        self.counts.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_in_client_go_s_buckets_and_add_up() {
        let m = GoClientMetrics::default();
        m.finished("GET", "200", Duration::from_millis(3));
        m.finished("GET", "200", Duration::from_millis(30));
        m.finished("GET", NO_RESPONSE, Duration::from_secs(61));
        m.waited("PATCH", Duration::ZERO);
        let counts = m.snapshot();
        assert_eq!(counts.results[&("200".to_owned(), "GET".to_owned())], 2);
        assert_eq!(
            counts.results[&(NO_RESPONSE.to_owned(), "GET".to_owned())],
            1
        );
        let get = &counts.latency["GET"];
        assert_eq!(get.count, 3);
        assert_eq!(get.buckets[0], 1, "3 ms ≤ 5 ms");
        assert_eq!(get.buckets[2], 1, "30 ms ≤ 100 ms");
        assert_eq!(get.buckets[12], 1, "61 s: +Inf");
        assert!((get.sum - 61.033).abs() < 1e-9);
        let mut total = get.clone();
        total.add(get);
        assert_eq!(total.count, 6);
        assert_eq!(total.encoded().last(), Some(&(f64::INFINITY, 2)));
        assert_eq!(counts.rate_limiter["PATCH"].buckets[0], 1);
    }
}
