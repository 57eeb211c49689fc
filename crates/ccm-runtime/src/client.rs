//! The Kubernetes client a CCM uses: a client-side rate limit (`--kube-api-qps` /
//! `--kube-api-burst`) and a count of every request by verb and resource, for metrics and
//! for tests that hold a controller to a request budget.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use ccm_runtime::client::{ApiLayer, build_client};
//! let layer = ApiLayer::new().with_rate_limit(20.0, 30);
//! let client = build_client(kube::Config::infer().await?, &layer)?;
//! // ... use `client`; later:
//! println!("{} requests so far", layer.counters().total());
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;
use kube::client::ClientBuilder;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Requests made, by `(verb, resource)`, e.g. `("PATCH", "nodes/status")`. Verbs are the
/// HTTP method, except that a `GET` of a collection is `LIST`, and a watch is `WATCH`.
#[derive(Debug, Default)]
pub struct ApiCounters {
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

impl ApiCounters {
    fn record<B>(&self, req: &Request<B>) {
        let key = (verb_of(req), resource_of(req.uri().path()));
        *self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default() += 1;
    }

    /// All counts.
    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests with this verb to this resource (`"nodes"`, `"nodes/status"`, `"events"`…).
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Requests with this verb, to any resource.
    pub fn count_verb(&self, verb: &str) -> u64 {
        self.snapshot()
            .iter()
            .filter(|((v, _), _)| v == verb)
            .map(|(_, n)| n)
            .sum()
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    /// Forgets all counts.
    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// The Kubernetes verb of a request: the HTTP method, or `LIST` / `WATCH` for a `GET` of a
/// collection.
fn verb_of<B>(req: &Request<B>) -> String {
    let method = req.method().as_str();
    if method != "GET" {
        return method.to_owned();
    }
    let query = req.uri().query().unwrap_or_default();
    if query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
    {
        return "WATCH".to_owned();
    }
    let parts: Vec<&str> = req.uri().path().trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return method.to_owned(),
    };
    let collection = matches!(rest, [_] | ["namespaces", _, _]);
    if collection { "LIST" } else { "GET" }.to_owned()
}

/// The resource a request path names: `/api/v1/nodes/n1/status` → `nodes/status`,
/// `/apis/events.k8s.io/v1/namespaces/default/events` → `events`.
fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return path.to_owned(),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    match rest {
        [resource] | [resource, _] => (*resource).to_owned(),
        [resource, _name, sub, ..] => format!("{resource}/{sub}"),
        [] => path.to_owned(),
    }
}

/// The client's request limiter (client-go's `tokenBucketRateLimiter`): a token bucket of
/// `qps` tokens a second, at most `burst` saved, starting full; a request waits for a token.
/// (The work queue's `TokenBucket` computes delays instead of waiting.)
#[derive(Debug)]
struct QpsLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl QpsLimiter {
    fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token, or says how long until one is there.
    fn try_take(&self) -> Result<(), Duration> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let (tokens, last) = *state;
        let tokens = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            Ok(())
        } else {
            *state = (tokens, now);
            Err(Duration::from_secs_f64((1.0 - tokens) / self.qps))
        }
    }
}

/// A tower layer for kube's client: counts requests and, when configured, rate-limits
/// them. Cloning shares the counters and the bucket.
#[derive(Clone, Debug, Default)]
pub struct ApiLayer {
    counters: Arc<ApiCounters>,
    bucket: Option<Arc<QpsLimiter>>,
}

impl ApiLayer {
    /// Counts requests; no rate limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows `qps` requests a second with bursts of `burst` (client-go's token bucket). A
    /// `qps` that is not finite and positive means no limit.
    pub fn with_rate_limit(mut self, qps: f64, burst: u32) -> Self {
        self.bucket = (qps.is_finite() && qps > 0.0).then(|| Arc::new(QpsLimiter::new(qps, burst)));
        self
    }

    /// The request counters.
    pub fn counters(&self) -> &Arc<ApiCounters> {
        &self.counters
    }
}

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiService {
            inner,
            layer: self.clone(),
            wait: None,
            permit: false,
        }
    }
}

/// The service [`ApiLayer`] makes.
pub struct ApiService<S> {
    inner: S,
    layer: ApiLayer,
    wait: Option<Pin<Box<Sleep>>>,
    permit: bool,
}

impl<S, B> Service<Request<B>> for ApiService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.layer.bucket {
            while !self.permit {
                if let Some(wait) = self.wait.as_mut() {
                    match wait.as_mut().poll(cx) {
                        Poll::Ready(()) => self.wait = None,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                match bucket.try_take() {
                    Ok(()) => self.permit = true,
                    Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.permit = false;
        self.layer.counters.record(&req);
        self.inner.call(req)
    }
}

/// A kube client for `config`, wrapped in `layer`.
pub fn build_client(config: kube::Config, layer: &ApiLayer) -> Result<kube::Client, kube::Error> {
    let builder = ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(layer).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_named_from_paths() {
        for (path, want) in [
            ("/api/v1/nodes", "nodes"),
            ("/api/v1/nodes/n1", "nodes"),
            ("/api/v1/nodes/n1/status", "nodes/status"),
            (
                "/api/v1/namespaces/default/services/web/status",
                "services/status",
            ),
            ("/api/v1/namespaces/default/services", "services"),
            ("/apis/events.k8s.io/v1/namespaces/default/events", "events"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
                "leases",
            ),
            ("/api/v1/namespaces/kube-system", "namespaces"),
            ("/version", "/version"),
        ] {
            assert_eq!(resource_of(path), want, "{path}");
        }
    }

    #[test]
    fn verbs_distinguish_list_and_watch() {
        let verb =
            |m: &str, uri: &str| verb_of(&Request::builder().method(m).uri(uri).body(()).unwrap());
        assert_eq!(verb("GET", "/api/v1/nodes?labelSelector=a"), "LIST");
        assert_eq!(
            verb("GET", "/api/v1/nodes?watch=true&resourceVersion=5"),
            "WATCH"
        );
        assert_eq!(verb("GET", "/api/v1/nodes/n1"), "GET");
        assert_eq!(verb("GET", "/api/v1/namespaces/default/services"), "LIST");
        assert_eq!(
            verb("GET", "/api/v1/namespaces/default/services/web"),
            "GET"
        );
        assert_eq!(verb("GET", "/api/v1/namespaces/default"), "GET");
        assert_eq!(verb("PATCH", "/api/v1/nodes/n1"), "PATCH");
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_bursts_then_the_rate() {
        let bucket = QpsLimiter::new(10.0, 3);
        for _ in 0..3 {
            assert!(bucket.try_take().is_ok());
        }
        let wait = bucket.try_take().unwrap_err();
        assert!(
            wait > Duration::from_millis(99) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        tokio::time::advance(wait).await;
        assert!(bucket.try_take().is_ok());
        assert!(bucket.try_take().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn service_waits_for_tokens_and_counts() {
        let layer = ApiLayer::new().with_rate_limit(2.0, 1);
        let mut svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, std::convert::Infallible>(())
        }));
        let start = Instant::now();
        for _ in 0..3 {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            let req = Request::builder()
                .method("PATCH")
                .uri("/api/v1/nodes/n1")
                .body(())
                .unwrap();
            svc.call(req).await.unwrap();
        }
        // One token at once, then one every 500ms.
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(layer.counters().count("PATCH", "nodes"), 3);
        assert_eq!(layer.counters().total(), 3);
    }
}
