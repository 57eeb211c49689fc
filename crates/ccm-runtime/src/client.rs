//! The Kubernetes client a CCM uses: a client-side rate limit (`--kube-api-qps` /
//! `--kube-api-burst`), a count of every request by verb and resource, for metrics and
//! for tests that hold a controller to a request budget, and the leader's [`Fence`].
//! [`service_account`] makes a client per controller, with its own ServiceAccount's token
//! (`--use-service-account-credentials`).
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

mod auth;
pub(crate) mod fields;
pub mod go_metrics;
pub(crate) mod priority;
pub mod protobuf;
mod proxy;
pub mod service_account;
mod transport;

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ccm_provider::BoxError;
use http::{Method, Request};
use tokio::time::{Instant, Sleep};

use self::go_metrics::{GoClientCounts, GoClientMetrics, NO_RESPONSE};
use tower::{Layer, Service};

/// Whether this replica may change anything: write to the API server or call the cloud to
/// create, change or delete. Cloning shares it.
///
/// Without leader election ([`Fence::open`]) it is always open. Under leader election
/// ([`Fence::leased`]) it is open only while the replica can prove it holds the Lease: the
/// leader elector reports each successful acquisition or renewal with the (monotonic) time
/// the attempt *started*, and the fence stays open until that time plus the renew deadline,
/// no longer. Another candidate takes the Lease only after the lease duration, counted from
/// when it saw the renewal, which was after that start; the renew deadline is shorter than
/// the lease duration, so the fence closes before anyone else can lead, even for a process
/// that was paused (SIGSTOP: the monotonic clock runs on) and wakes up with work in hand.
///
/// It is checked at the point of each call: by [`ApiLayer`] before every request that is not
/// a read (`GET`, `HEAD`, `OPTIONS`; lists and watches are `GET`s), and by the fenced
/// provider ([`crate::instrumented::wrap`]) before every cloud mutation. A closed fence
/// answers [`Fenced`] without sending anything. What it cannot stop is a call that started
/// while it was open and is still running; the margin between the renew deadline and the
/// lease duration (5 s with the default flags) is for those.
#[derive(Clone, Debug)]
pub struct Fence {
    lease: Option<Arc<LeaseClock>>,
}

#[derive(Debug)]
struct LeaseClock {
    renew_deadline: Duration,
    /// When the last successful renewal started; `None` before the first or after a loss.
    renewed: Mutex<Option<Instant>>,
}

impl Fence {
    /// A fence that is always open: no leader election, this replica always acts.
    #[must_use]
    pub fn open() -> Self {
        Self { lease: None }
    }

    /// A fence that opens on a renewal of the Lease and closes `renew_deadline` after the
    /// start of the last successful one. Closed until the first.
    #[must_use]
    pub fn leased(renew_deadline: Duration) -> Self {
        Self {
            lease: Some(Arc::new(LeaseClock {
                renew_deadline,
                renewed: Mutex::new(None),
            })),
        }
    }

    /// An acquisition or renewal of the Lease that started at `started` succeeded. An older
    /// time than the one recorded changes nothing.
    pub fn renewed(&self, started: Instant) {
        if let Some(lease) = &self.lease {
            let mut renewed = lease.renewed.lock();
            if renewed.is_none_or(|t| t < started) {
                *renewed = Some(started);
            }
        }
    }

    /// The Lease is lost or released: closed until the next renewal.
    pub fn close(&self) {
        if let Some(lease) = &self.lease {
            *lease.renewed.lock() = None;
        }
    }

    /// `Ok` while this replica may act; [`Fenced`] otherwise.
    pub fn check(&self) -> Result<(), Fenced> {
        let Some(lease) = &self.lease else {
            return Ok(());
        };
        let renewed = *lease.renewed.lock();
        match renewed.map(|t| t.elapsed()) {
            Some(since) if since < lease.renew_deadline => Ok(()),
            since => Err(Fenced {
                since,
                renew_deadline: lease.renew_deadline,
            }),
        }
    }

    /// Whether this replica may act now.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.check().is_ok()
    }

    /// Whether this is [`Fence::open`]: open whatever happens.
    #[must_use]
    pub fn is_always_open(&self) -> bool {
        self.lease.is_none()
    }
}

/// The error of a call the [`Fence`] refused: this replica cannot prove it holds the Lease.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", fenced_message(*.since, *.renew_deadline))]
pub struct Fenced {
    /// Time since the start of the last successful renewal; `None` if there is none.
    pub since: Option<Duration>,
    /// The renew deadline it exceeds.
    pub renew_deadline: Duration,
}

fn fenced_message(since: Option<Duration>, deadline: Duration) -> String {
    match since {
        Some(since) => format!(
            "not acting: this replica last renewed the leader Lease {since:.1?} ago, beyond the \
             renew deadline ({deadline:?}), so another may lead"
        ),
        None => "not acting: this replica does not hold the leader Lease".to_owned(),
    }
}

/// Requests made, by `(verb, resource)`, e.g. `("PATCH", "nodes/status")`. Verbs are the
/// HTTP method, except that a `GET` of a collection is `LIST`, and a watch is `WATCH`.
#[derive(Debug, Default)]
pub struct ApiCounters {
    counts: Mutex<BTreeMap<(String, String), u64>>,
    go: GoClientMetrics,
}

impl ApiCounters {
    /// What client-go's `rest_client_*` metrics count for these clients: responses by
    /// status code and method, latencies, and waits for the rate limiter.
    pub fn go_counts(&self) -> GoClientCounts {
        self.go.snapshot()
    }

    fn record<B>(&self, req: &Request<B>) {
        let key = (verb_of(req), resource_of(req.uri().path()));
        *self.counts.lock().entry(key).or_default() += 1;
    }

    /// All counts.
    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.counts.lock().clone()
    }

    /// Requests with this verb to this resource (`"nodes"`, `"nodes/status"`, `"events"`…).
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        self.counts
            .lock()
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
        self.counts.lock().clear();
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
/// `/api/v1/namespaces/default/events/n1.17a` → `events`.
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

    /// A bucket of the same rate and burst, full.
    fn fresh(&self) -> Self {
        Self {
            qps: self.qps,
            burst: self.burst,
            state: Mutex::new((self.burst, Instant::now())),
        }
    }

    /// Takes a token, or says how long until one is there.
    fn try_take(&self) -> Result<(), Duration> {
        let mut state = self.state.lock();
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
/// them and refuses writes while a [`Fence`] is closed. Cloning shares the counters, the
/// bucket and the fence.
#[derive(Clone, Debug, Default)]
pub struct ApiLayer {
    counters: Arc<ApiCounters>,
    bucket: Option<Arc<QpsLimiter>>,
    fence: Option<Fence>,
    /// Whether requests are counted here (not when an inner client counts them).
    uncounted: bool,
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

    /// Refuses every request that is not a read (`GET`, `HEAD`, `OPTIONS`) while `fence` is
    /// closed: the request is not sent, and its caller gets a [`Fenced`] error (in kube,
    /// `kube::Error::Service`). Refused requests are not counted.
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The same counters and fence with a rate limit of its own (the same `qps` and
    /// `burst`, a fresh bucket): a controller's client. Go builds one client per controller
    /// (and one for the shared informers), each with its own `--kube-api-qps` limiter, so
    /// one controller's burst of writes does not hold up another's; so do we.
    #[must_use]
    pub fn for_controller(&self) -> Self {
        Self {
            counters: self.counters.clone(),
            bucket: self.fresh_bucket(),
            fence: self.fence.clone(),
            uncounted: false,
        }
    }

    /// The same counters and fence, no rate limit: the client [`rate_limited`] clients
    /// send through.
    #[must_use]
    pub fn without_rate_limit(&self) -> Self {
        Self {
            bucket: None,
            ..self.clone()
        }
    }

    fn fresh_bucket(&self) -> Option<Arc<QpsLimiter>> {
        self.bucket.as_ref().map(|b| Arc::new(b.fresh()))
    }

    /// The same counters, without rate limit or fence: the leader elector's client, whose
    /// Lease renewals are what keeps the fence open and must not queue behind the
    /// controllers' requests (Go's controller manager has a client of its own for them too).
    #[must_use]
    pub fn for_leader_election(&self) -> Self {
        Self {
            counters: self.counters.clone(),
            bucket: None,
            fence: None,
            uncounted: false,
        }
    }

    /// The request counters.
    pub fn counters(&self) -> &Arc<ApiCounters> {
        &self.counters
    }
}

/// Whether a request only reads.
fn is_read<B>(req: &Request<B>) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiService {
            inner,
            layer: self.clone(),
            wait: None,
            permit: false,
            limiter: None,
        }
    }
}

/// The service [`ApiLayer`] makes.
pub struct ApiService<S> {
    inner: S,
    layer: ApiLayer,
    wait: Option<Pin<Box<Sleep>>>,
    permit: bool,
    /// When this request began waiting for the rate limiter, then how long it waited.
    limiter: Option<Result<Duration, Instant>>,
}

impl<S, B, RB> Service<Request<B>> for ApiService<S>
where
    S: Service<Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.layer.bucket {
            let started = *self.limiter.get_or_insert(Err(Instant::now()));
            while !self.permit {
                if let Some(wait) = self.wait.as_mut() {
                    match wait.as_mut().poll(cx) {
                        Poll::Ready(()) => self.wait = None,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                match bucket.try_take() {
                    Ok(()) => {
                        self.permit = true;
                        if let Err(since) = started {
                            self.limiter = Some(Ok(since.elapsed()));
                        }
                    }
                    Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
                }
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.permit = false;
        if let Some(Ok(waited)) = self.limiter.take() {
            self.layer.counters.go.waited(req.method().as_str(), waited);
        }
        if let Some(fence) = &self.layer.fence
            && !is_read(&req)
            && let Err(fenced) = fence.check()
        {
            tracing::warn!(
                verb = %req.method(),
                path = req.uri().path(),
                error = %fenced,
                "refused an API write"
            );
            return Box::pin(std::future::ready(Err(Box::new(fenced) as BoxError)));
        }
        if self.layer.fence.is_some() && !is_read(&req) {
            // What a pause right after this line lets reach the API server after it: the
            // fence was open when checked (the fencing test reads these lines).
            tracing::debug!(verb = %req.method(), path = req.uri().path(), "sending an API write past the fence");
        }
        if self.layer.uncounted {
            let call = self.inner.call(req);
            return Box::pin(async move { call.await.map_err(Into::into) });
        }
        self.layer.counters.record(&req);
        let method = req.method().as_str().to_owned();
        let counters = self.layer.counters.clone();
        // Events wait for the other writes (see `priority`): count those while in flight.
        let foreground = (!is_read(&req) && !priority::is_event_path(req.uri().path()))
            .then(|| priority::PROCESS.enter());
        let started = Instant::now();
        let call = self.inner.call(req);
        Box::pin(async move {
            let result = call.await.map_err(Into::into);
            drop(foreground);
            let code = match &result {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => NO_RESPONSE.to_owned(),
            };
            counters.go.finished(&method, &code, started.elapsed());
            result
        })
    }
}

/// A client configuration that cannot be used: the field at fault and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ClientConfigError {
    field: &'static str,
    message: String,
}

impl ClientConfigError {
    pub(crate) fn new(field: &'static str, message: String) -> Self {
        Self { field, message }
    }

    /// The kubeconfig field at fault (`user.exec`, `cluster.certificate-authority-data`, …).
    #[must_use]
    pub fn field(&self) -> &str {
        self.field
    }
}

/// What a client's requests carry and where they go, as [`ClientFactory::describe`] tells
/// it: for the differential test against client-go's kubeconfig loader
/// (`tests/kubeconfig_differential.rs`). It holds credentials in the clear: never log it.
/// Not a stable API.
#[doc(hidden)]
#[derive(Debug)]
#[non_exhaustive]
pub struct ClientUse {
    /// The API server's URL.
    pub server: String,
    /// The `Authorization` header of the next request.
    pub authorization: Option<String>,
    /// The client certificate's leaf (DER).
    pub client_certificate: Option<Vec<u8>>,
    /// How the server's certificate is verified.
    pub ca: CaUse,
    /// The name the server's certificate is checked against, when not the URL's host.
    pub server_name: Option<String>,
    /// The proxy a connection goes through.
    pub proxy: Option<ProxyUse>,
    /// The user impersonated (`as`).
    pub impersonate: Option<String>,
}

/// How a client verifies the API server's certificate ([`ClientUse`]).
#[doc(hidden)]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum CaUse {
    /// Not at all (`insecure-skip-tls-verify`).
    Insecure,
    /// Against the platform's roots: the kubeconfig names no CA.
    Platform,
    /// Against these certificates (DER).
    Certificates(Vec<Vec<u8>>),
    /// Against the certificates of this file, read again every minute (in-cluster).
    File(std::path::PathBuf),
}

/// The proxy a client goes through ([`ClientUse`]).
#[doc(hidden)]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyUse {
    /// `http://host:port`.
    pub url: String,
    /// The user and password sent to the proxy.
    pub credentials: Option<(String, String)>,
}

/// A kube client for `config`, wrapped in `layer` ([`ClientFactory::new`], then
/// [`ClientFactory::client`]).
///
/// # Errors
///
/// A field of `config` that cannot be used, named.
pub fn build_client(
    config: kube::Config,
    layer: &ApiLayer,
) -> Result<kube::Client, ClientConfigError> {
    Ok(ClientFactory::new(&config)?.client(layer))
}

/// Clients of one configuration: kube's HTTP stack, but with our own credentials and TLS
/// configuration (what a kubeconfig may name: tokens, token files, usernames and passwords,
/// client certificates, exec plugins; no `auth-provider` and no proxy). Everything the
/// configuration names is read and checked once, in [`ClientFactory::new`], where an exec
/// plugin runs (a blocking call: the controller manager makes it on a thread of its own, so
/// SIGTERM need not wait for a plugin that hangs); its clients share those credentials, each
/// with a connection pool of its own. Cloning shares them too.
#[derive(Clone)]
pub struct ClientFactory {
    prepared: transport::Prepared,
    host: String,
}

impl ClientFactory {
    /// Reads and checks what `config` names, and runs its exec plugin if it has one.
    ///
    /// # Errors
    ///
    /// A field of `config` that cannot be used, named.
    pub fn new(config: &kube::Config) -> Result<Self, ClientConfigError> {
        Ok(Self {
            prepared: transport::Prepared::new(config)?,
            host: config
                .cluster_url
                .authority()
                .map(ToString::to_string)
                .unwrap_or_default(),
        })
    }

    /// What these clients' requests carry and where they go. Not a stable API: for the
    /// differential test against client-go's loader.
    ///
    /// # Errors
    ///
    /// The exec plugin failed when run for a token.
    #[doc(hidden)]
    pub async fn describe(&self) -> Result<ClientUse, ClientConfigError> {
        self.prepared.describe().await
    }

    /// A client, wrapped in `layer`.
    #[must_use]
    pub fn client(&self, layer: &ApiLayer) -> kube::Client {
        layer.counters.go.set_host(self.host.clone());
        self.prepared.builder().with_layer(layer).build()
    }
}

/// A client that waits for a token of a bucket of its own (`layer`'s `qps` and `burst`,
/// fresh) and then sends through `base`: its connections, and the counts and fence of the
/// layer `base` was built with ([`ApiLayer::without_rate_limit`]). The controllers' clients
/// are made so: a rate limit each, as Go's per-controller clients, and one connection pool,
/// as Go's clients built from one config share one transport.
pub fn rate_limited(base: &kube::Client, layer: &ApiLayer) -> kube::Client {
    let own = ApiLayer {
        counters: layer.counters.clone(),
        bucket: layer.fresh_bucket(),
        fence: None,
        uncounted: true,
    };
    kube::Client::new(own.layer(Through(base.clone())), base.default_namespace())
}

/// Sends each request through a kube client.
#[derive(Clone)]
struct Through(kube::Client);

impl Service<Request<kube::client::Body>> for Through {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(req).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request without a body.
    fn request(method: &str, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

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
            ("/api/v1/namespaces/default/events", "events"),
            (
                "/api/v1/namespaces/default/events/n1.1826c5e9a7f0a3b1",
                "events",
            ),
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
        let verb = |method: &str, uri: &str| verb_of(&request(method, uri));
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
    async fn each_controller_has_a_bucket_of_its_own_and_shares_the_counts() {
        let manager = ApiLayer::new().with_rate_limit(10.0, 2);
        let (a, b) = (manager.for_controller(), manager.for_controller());
        let bucket = |l: &ApiLayer| l.bucket.clone().expect("rate-limited");
        for _ in 0..2 {
            assert!(bucket(&a).try_take().is_ok());
        }
        assert!(bucket(&a).try_take().is_err(), "a's burst is spent");
        assert!(bucket(&b).try_take().is_ok(), "b's is not");
        assert!(bucket(&manager).try_take().is_ok(), "nor the manager's");
        assert!(Arc::ptr_eq(a.counters(), manager.counters()));
        assert!(
            ApiLayer::new().for_controller().bucket.is_none(),
            "no limit stays none"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_clients_wait_apart_and_count_once_through_one_base() {
        let api = ApiLayer::new().with_rate_limit(1.0, 1);
        let base_layer = api.without_rate_limit();
        let answer = tower::service_fn(|_req: Request<kube::client::Body>| async {
            Ok::<_, BoxError>(http::Response::new(kube::client::Body::empty()))
        });
        let base = kube::Client::new(base_layer.layer(answer), "default");
        let (a, b) = (rate_limited(&base, &api), rate_limited(&base, &api));
        let get = || {
            Request::builder()
                .method("GET")
                .uri("/api/v1/nodes/n1")
                .body(kube::client::Body::empty())
                .unwrap()
        };
        let start = Instant::now();
        a.send(get()).await.unwrap();
        b.send(get()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO, "one token each at once");
        a.send(get()).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "a waits for its own"
        );
        assert_eq!(api.counters().count("GET", "nodes"), 3, "counted once each");
        // Go's names: three responses, and the rate limiter's waits (the third waited 1 s).
        let go = api.counters().go_counts();
        assert_eq!(go.results[&("200".to_owned(), "GET".to_owned())], 3);
        assert_eq!(go.latency["GET"].count, 3);
        let waits = &go.rate_limiter["GET"];
        assert_eq!((waits.count, waits.sum), (3, 1.0));
        assert_eq!(waits.buckets[0], 2, "two did not wait");
        assert_eq!(waits.buckets[5], 1, "one waited 1 s (≤ 1 s)");
    }

    #[tokio::test(start_paused = true)]
    async fn service_waits_for_tokens_and_counts() {
        let layer = ApiLayer::new().with_rate_limit(2.0, 1);
        let mut svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(()))
        }));
        let start = Instant::now();
        for _ in 0..3 {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            svc.call(request("PATCH", "/api/v1/nodes/n1"))
                .await
                .unwrap();
        }
        // One token at once, then one every 500ms.
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(layer.counters().count("PATCH", "nodes"), 3);
        assert_eq!(layer.counters().total(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_fence_closes_at_the_renew_deadline_after_the_renewal_started() {
        let deadline = Duration::from_secs(10);
        let fence = Fence::leased(deadline);
        assert_eq!(
            fence.check(),
            Err(Fenced {
                since: None,
                renew_deadline: deadline
            }),
            "closed before the first renewal"
        );
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await; // the renewal's round trip
        fence.renewed(started);
        assert!(fence.is_open());
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(fence.is_open(), "9.999 s after the renewal started");
        tokio::time::advance(Duration::from_millis(1)).await;
        let err = fence.check().unwrap_err();
        assert_eq!(err.since, Some(deadline));
        assert!(err.to_string().contains("renew deadline"), "{err}");
        // A renewal that started earlier than the one recorded does not extend it.
        fence.renewed(started);
        assert!(!fence.is_open());
        fence.renewed(Instant::now());
        assert!(fence.is_open());
        // A pause of the whole process (SIGSTOP) is time like any other.
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(!fence.is_open());
        fence.renewed(Instant::now());
        fence.close();
        assert!(!fence.is_open(), "closed on loss or release");
        assert!(Fence::open().is_open(), "no leader election: always open");
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_fence_refuses_writes_without_sending_them() {
        let fence = Fence::leased(Duration::from_secs(2));
        let layer = ApiLayer::new().with_fence(fence.clone());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let mut svc = layer.layer(tower::service_fn({
            let sent = sent.clone();
            move |req: Request<()>| {
                sent.lock().push(req.method().to_string());
                async { Ok::<_, BoxError>(http::Response::new(())) }
            }
        }));
        let mut call = |method: &str, uri: &str| svc.call(request(method, uri));
        // Reads pass a closed fence: a standby and a fenced leader keep their caches.
        call("GET", "/api/v1/nodes?watch=true").await.unwrap();
        call("GET", "/api/v1/nodes/n1").await.unwrap();
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            let err = call(method, "/api/v1/nodes/n1").await.unwrap_err();
            assert!(err.downcast_ref::<Fenced>().is_some(), "{method}: {err}");
        }
        fence.renewed(Instant::now());
        call("PATCH", "/api/v1/nodes/n1").await.unwrap();
        assert_eq!(*sent.lock(), ["GET", "GET", "PATCH"]);
        assert_eq!(
            layer.counters().total(),
            3,
            "refused requests are not counted"
        );
        // The leader elector's layer shares the counters and has no fence.
        let elector = layer.for_leader_election();
        tokio::time::advance(Duration::from_secs(3)).await;
        let mut svc = elector.layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(()))
        }));
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm";
        svc.call(request("PUT", lease)).await.unwrap();
        assert_eq!(layer.counters().count("PUT", "leases"), 1);
    }
}
