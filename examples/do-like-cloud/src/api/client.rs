//! A typed client of the DigitalOcean-like API: timeouts, one back-off for the whole client
//! (`Retry-After` of a 429 or 503, `ratelimit-remaining: 0` until `ratelimit-reset`; capped),
//! a client-side rate limit, retries of 5xx (not of a POST, which may have been applied), and
//! a short-TTL cache of the droplet list.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccm_core::provider::echo;
use parking_lot::{Mutex, MutexGuard};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::lb_index::{LbIndex, SeenLoadBalancer};
use crate::api::{Droplet, ErrorBody, Links, LoadBalancerObject, LoadBalancerRequest, XRoute};

/// An API token. Its `Debug` is redacted and it has no `Display`: it never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl ApiToken {
    /// Wraps a token (surrounding whitespace, e.g. a file's newline, is trimmed).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into().trim().to_owned())
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

/// How the client behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The API's base URL, e.g. `https://api.digitalocean.com` or the simulator's.
    pub api_url: String,
    /// The token.
    pub token: ApiToken,
    /// The per-request timeout.
    pub timeout: Duration,
    /// The most requests the client sends within any window of each length (a sliding
    /// window); DigitalOcean's API allows 250 a minute and 5,000 an hour
    /// ([`DIGITALOCEAN_RATE_WINDOWS`](Self::DIGITALOCEAN_RATE_WINDOWS), the default).
    pub rate_windows: Vec<RateWindow>,
    /// When set, requests are also spaced to this many a second; `None` (the default):
    /// they go as fast as the windows allow.
    pub requests_per_second: Option<f64>,
    /// The longest a request waits in place for [`rate_windows`](Self::rate_windows) (and
    /// the spacing): a minute by default, the length of DigitalOcean's shorter window, so
    /// a burst beyond a minute's limit waits for the window to move rather than failing
    /// every sync behind it; a longer wait (the hour's limit spent) is returned as
    /// [`ApiError::RateLimited`] without sending anything.
    pub max_rate_wait: Duration,
    /// Retries of a 429 or 5xx before giving up.
    pub max_retries: u32,
    /// The longest back-off waited in place (a `Retry-After`, or what remains of the client's
    /// hold); a longer one is returned to the caller as [`ApiError::RateLimited`].
    pub max_retry_after: Duration,
    /// The longest one answer can hold the client (its `Retry-After`, or its
    /// `ratelimit-reset` when `ratelimit-remaining` is 0): a longer value, from a misbehaving
    /// server or a skewed clock, is cut to this.
    pub retry_after_cap: Duration,
    /// How long a droplet list answers lookups.
    pub cache_ttl: Duration,
    /// The page size of lists.
    pub per_page: u32,
    /// Which requests go through which proxy: the environment's (`HTTPS_PROXY`,
    /// `HTTP_PROXY`, `NO_PROXY`) by Go's rules, by default.
    pub proxy: ccm_core::provider::proxy::EnvProxy,
}

impl ClientOptions {
    /// DigitalOcean's documented limits per token: 250 requests a minute and 5,000 an hour.
    pub const DIGITALOCEAN_RATE_WINDOWS: [RateWindow; 2] = [
        RateWindow {
            requests: 250,
            per: Duration::from_secs(60),
        },
        RateWindow {
            requests: 5000,
            per: Duration::from_secs(3600),
        },
    ];

    /// Defaults: 10 s timeout, DigitalOcean's limits (250 requests in any minute, 5,000 in
    /// any hour, no spacing, waited for in place up to a minute), 4 retries, waits for the
    /// API's back-offs of at most 10 s in place, holds of at most 5 minutes, 10 s cache,
    /// pages of 200, the environment's proxy.
    pub fn new(api_url: impl Into<String>, token: ApiToken) -> Self {
        Self {
            api_url: api_url.into().trim_end_matches('/').to_owned(),
            token,
            timeout: Duration::from_secs(10),
            rate_windows: Self::DIGITALOCEAN_RATE_WINDOWS.to_vec(),
            requests_per_second: None,
            max_rate_wait: Duration::from_secs(60),
            max_retries: 4,
            max_retry_after: Duration::from_secs(10),
            retry_after_cap: Duration::from_secs(300),
            cache_ttl: Duration::from_secs(10),
            per_page: 200,
            proxy: ccm_core::provider::proxy::EnvProxy::from_env(),
        }
    }
}

/// At most `requests` requests within any window of length `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateWindow {
    /// How many (0: no limit).
    pub requests: u32,
    /// Within how long.
    pub per: Duration,
}

/// What can go wrong talking to the API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// 404.
    #[error("not found")]
    NotFound,
    /// 401: the token is wrong.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 429 past the retries, or a back-off of the client longer than
    /// [`ClientOptions::max_retry_after`] (the request was then not sent).
    #[error("rate limited by the API; retry after {0:?}")]
    RateLimited(Duration),
    /// Any other error answer, with DigitalOcean's `id`, `message` and `request_id`.
    #[error("API error {status}: {id}: {message}{}", request_suffix(request_id))]
    Api {
        /// The HTTP status.
        status: u16,
        /// DigitalOcean's error id, e.g. `unprocessable_entity`.
        id: String,
        /// Its message.
        message: String,
        /// The request's ID (from the body, else the `x-request-id` header); may be empty.
        request_id: String,
    },
    /// The request did not complete (connection, timeout); the cause is the source.
    #[error("request failed")]
    Transport(#[source] reqwest::Error),
    /// The answer is not the JSON expected; the cause is the source.
    #[error("malformed answer from {path}")]
    Decode {
        /// The request path.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
}

/// Cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups answered from the cached list.
    pub hits: u64,
    /// Lookups that listed droplets.
    pub misses: u64,
}

fn request_suffix(request_id: &str) -> String {
    if request_id.is_empty() {
        String::new()
    } else {
        format!(" (request {request_id})")
    }
}

/// The DigitalOcean-like API client.
pub struct Client {
    http: reqwest::Client,
    opts: ClientOptions,
    pacer: Pacer,
    cache: Mutex<Option<(Instant, Arc<Vec<Droplet>>)>>,
    refresh: tokio::sync::Mutex<()>,
    lbs: Mutex<LbIndex>,
    lb_refresh: tokio::sync::Mutex<()>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("api_url", &self.opts.api_url)
            .field("token", &self.opts.token)
            .finish_non_exhaustive()
    }
}

/// One page of a list answer: its items (under the key of the listed kind, which must be
/// there: a list answered without it is an error, never an empty account) and its links.
#[derive(serde::Deserialize)]
struct Page<T> {
    #[serde(alias = "droplets", alias = "load_balancers", alias = "routes")]
    items: Vec<T>,
    #[serde(default)]
    links: Option<Links>,
}

impl Client {
    /// Builds the client.
    pub fn new(opts: ClientOptions) -> Result<Self, ApiError> {
        // reqwest is built without a default crypto provider; the workspace's rustls uses ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The environment's proxy, chosen as Go's `http.ProxyFromEnvironment` chooses it
        // (DigitalOcean's CCM uses Go's default transport): a CCM swapped for it behind a
        // corporate proxy reaches the API the same way. reqwest's own reading follows
        // curl's rules instead (`ALL_PROXY`, `.domain` matching the domain itself).
        // ANCHOR: proxy
        let env = opts.proxy.clone();
        let proxy = reqwest::Proxy::custom(move |url| {
            let value = env.proxy_for(url.scheme(), url.host_str()?, url.port())?;
            // What Go cannot parse it ignores: the request then goes directly.
            reqwest::Url::parse(value)
                .ok()
                .filter(|u| u.has_host())
                .or_else(|| reqwest::Url::parse(&format!("http://{value}")).ok())
        });
        let http = reqwest::Client::builder()
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout)
            .no_proxy()
            .proxy(proxy)
            // ANCHOR_END: proxy
            .build()
            .map_err(ApiError::Transport)?;
        Ok(Self {
            http,
            pacer: Pacer::new(opts.requests_per_second, &opts.rate_windows),
            opts,
            cache: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            lbs: Mutex::new(LbIndex::default()),
            lb_refresh: tokio::sync::Mutex::new(()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The options.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// Holds every request of this client for what the answer asks (capped at
    /// [`ClientOptions::retry_after_cap`]); returns the `Retry-After` of a 429 (1 s when it
    /// has none) or of a 503 that has one.
    fn note_backoff(
        &self,
        path: &str,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<Duration> {
        let cap = self.opts.retry_after_cap;
        let now = SystemTime::now();
        let retry_after = match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after(v, now))
                .or((status == StatusCode::TOO_MANY_REQUESTS).then_some(Duration::from_secs(1)))
                // A zero wait still spaces the retry a little.
                .map(|after| after.max(Duration::from_millis(50)).min(cap)),
            _ => None,
        };
        if let Some(hold) = retry_after {
            tracing::debug!(path, %status, ?hold, "the API asked to wait: holding every request");
            self.pacer.hold_until(Instant::now() + hold);
        }
        // The quota spent until its reset: a window the API announced, waited for as the
        // client's own (in place up to `max_rate_wait`), not a failure.
        if let Some(reset) = exhausted_until(headers, now).map(|d| d.min(cap)) {
            tracing::debug!(path, ?reset, "the API's quota is spent until its reset");
            self.pacer.quota_spent_until(Instant::now() + reset);
        }
        retry_after
    }

    /// Sends one request with retries; `None` for an empty answer (204).
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&(dyn erased::Body + Sync)>,
    ) -> Result<Option<T>, ApiError> {
        let url = format!("{}{}", self.opts.api_url, path);
        // A POST that failed with a 5xx or a timeout may have been applied: retrying it
        // could create a second resource. Callers look up before they create, so their next
        // attempt finds it. A 429 or a refused connection was not applied: always retried.
        let idempotent = method != Method::POST;
        let mut attempt = 0;
        loop {
            // Waits for a pacing slot outside any hold of the client; a hold longer than the
            // longest wait in place goes back to the caller without sending anything.
            self.pacer
                .wait(self.opts.max_retry_after, self.opts.max_rate_wait)
                .await
                .map_err(ApiError::RateLimited)?;
            let mut req = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(&self.opts.token.0);
            if let Some(body) = body {
                req = req
                    .header("content-type", "application/json")
                    .body(body.to_json());
            }
            tracing::debug!(%method, path, attempt, "API request");
            let result = req.send().await;
            let resp = match result {
                Ok(r) => r,
                Err(err)
                    if attempt < self.opts.max_retries
                        && (err.is_connect() || (idempotent && err.is_timeout())) =>
                {
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                    continue;
                }
                Err(err) => return Err(ApiError::Transport(err.without_url())),
            };
            let status = resp.status();
            let headers = resp.headers().clone();
            if let Some(after) = self.note_backoff(path, status, resp.headers()) {
                // The retry waits in `Pacer::wait` for the hold just set, with every other
                // request of this client. A 503 to a POST is not retried (it may have been
                // applied); it is reported below like any other error answer.
                let retry = status == StatusCode::TOO_MANY_REQUESTS || idempotent;
                if retry && attempt < self.opts.max_retries && after <= self.opts.max_retry_after {
                    attempt += 1;
                    continue;
                }
                if status == StatusCode::TOO_MANY_REQUESTS {
                    return Err(ApiError::RateLimited(after));
                }
            }
            if status.is_server_error() && idempotent && attempt < self.opts.max_retries {
                attempt += 1;
                tokio::time::sleep(backoff(attempt)).await;
                continue;
            }
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| ApiError::Transport(e.without_url()))?;
            if status == StatusCode::NO_CONTENT {
                return Ok(None);
            }
            if !status.is_success() {
                let mut e: ErrorBody = serde_json::from_slice(&bytes).unwrap_or_default();
                if e.request_id.is_empty() {
                    e.request_id = header_text(&headers, "x-request-id");
                }
                // The server's words reach errors, events and logs: bounded (`truncate` would
                // also panic inside a multi-byte character).
                e.id = echo::cut(e.id, 64);
                e.request_id = echo::cut(e.request_id, 64);
                e.message = echo::cut(e.message, 1024);
                return Err(match status {
                    StatusCode::NOT_FOUND => ApiError::NotFound,
                    StatusCode::UNAUTHORIZED => ApiError::Unauthorized(e.message),
                    _ => ApiError::Api {
                        status: status.as_u16(),
                        id: e.id,
                        message: e.message,
                        request_id: e.request_id,
                    },
                });
            }
            return serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| ApiError::Decode {
                    path: path.to_owned(),
                    source,
                });
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        self.call(Method::GET, path, None)
            .await?
            .ok_or_else(|| ApiError::Api {
                status: 204,
                id: "empty".into(),
                message: format!("empty answer from {path}"),
                request_id: String::new(),
            })
    }

    async fn list<T: DeserializeOwned>(&self, path: &str) -> Result<Vec<T>, ApiError> {
        self.list_map(path, |item| item).await
    }

    /// Every item of a paged list, each passed through `keep` as its page arrives (so that
    /// what is dropped of a page is never held for the whole list). A page is decoded
    /// straight into its items, without an intermediate JSON tree (at 10,000 droplets behind
    /// each of 200 load balancers a page's tree alone would be 64 MB).
    async fn list_map<T: DeserializeOwned, U>(
        &self,
        path: &str,
        mut keep: impl FnMut(T) -> U,
    ) -> Result<Vec<U>, ApiError> {
        let mut out = Vec::new();
        let mut page = 1;
        loop {
            let p = format!("{path}?page={page}&per_page={}", self.opts.per_page);
            let answer: Page<T> = self.get(&p).await?;
            let done = answer.items.is_empty() || answer.links.and_then(|l| l.pages.next).is_none();
            out.extend(answer.items.into_iter().map(&mut keep));
            if done || page > 10_000 {
                return Ok(out);
            }
            page += 1;
        }
    }

    /// Lists every droplet, page by page (uncached).
    pub async fn list_droplets(&self) -> Result<Vec<Droplet>, ApiError> {
        self.list("/v2/droplets").await
    }

    /// The droplet list, from the cache when it is younger than the TTL. Concurrent callers
    /// share one refresh.
    pub async fn cached_droplets(&self) -> Result<Arc<Vec<Droplet>>, ApiError> {
        self.droplets_younger_than(self.opts.cache_ttl).await
    }

    /// The droplet list, from the cache when it is younger than `max_age` (and the TTL).
    /// A lookup that missed in the cached list asks again with a small `max_age`, so that a
    /// droplet created since is found without a list per miss.
    pub async fn droplets_younger_than(
        &self,
        max_age: Duration,
    ) -> Result<Arc<Vec<Droplet>>, ApiError> {
        let max_age = max_age.min(self.opts.cache_ttl);
        if let Some(list) = self.fresh(max_age) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(list);
        }
        let _guard = self.refresh.lock().await;
        if let Some(list) = self.fresh(max_age) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(list);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let list = Arc::new(self.list_droplets().await?);
        *self.cache.lock() = Some((Instant::now(), list.clone()));
        Ok(list)
    }

    fn fresh(&self, max_age: Duration) -> Option<Arc<Vec<Droplet>>> {
        let cache = self.cache.lock();
        cache
            .as_ref()
            .filter(|(at, _)| at.elapsed() < max_age)
            .map(|(_, list)| list.clone())
    }

    /// Forgets the cached droplet list.
    pub fn invalidate(&self) {
        *self.cache.lock() = None;
    }

    /// Cache hit and miss counts.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// One droplet by ID; `None` when it does not exist.
    pub async fn droplet(&self, id: u64) -> Result<Option<Droplet>, ApiError> {
        #[derive(serde::Deserialize)]
        struct One {
            droplet: Droplet,
        }
        match self.get::<One>(&format!("/v2/droplets/{id}")).await {
            Ok(one) => Ok(Some(one.droplet)),
            Err(ApiError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every load balancer, page by page (uncached; the answer refreshes what
    /// [`cached_load_balancers`](Self::cached_load_balancers) answers).
    pub async fn list_load_balancers(&self) -> Result<Vec<LoadBalancerObject>, ApiError> {
        self.list_into_index(
            |lb| {
                let health = super::DropletHealthCount::of(&lb);
                (lb, health)
            },
            |all| all.iter().map(|(lb, _)| lb.clone()).collect(),
        )
        .await
    }

    /// Every load balancer, from the last list and the answers since when that list is
    /// younger than the TTL ([`ClientOptions::cache_ttl`]), else listed again. Concurrent
    /// callers share one list. The load balancers are as the index keeps them: without
    /// their `droplet_ids` unless they are `new` (read one again for those).
    pub async fn cached_load_balancers(&self) -> Result<Vec<Arc<LoadBalancerObject>>, ApiError> {
        let ttl = self.opts.cache_ttl;
        if let Some(all) = self.lbs.lock().fresh(ttl, Instant::now()) {
            return Ok(all);
        }
        let _guard = self.lb_refresh.lock().await;
        if let Some(all) = self.lbs.lock().fresh(ttl, Instant::now()) {
            return Ok(all);
        }
        self.list_into_index(LbIndex::keep, |_| ()).await?;
        Ok(self.lbs.lock().all())
    }

    /// Lists every load balancer into the index, each through `keep` as its page arrives;
    /// `answer` says what of the list the caller gets before the index takes it.
    async fn list_into_index<R>(
        &self,
        keep: fn(LoadBalancerObject) -> super::lb_index::Kept,
        answer: impl FnOnce(&Vec<super::lb_index::Kept>) -> R,
    ) -> Result<R, ApiError> {
        let token = self.lbs.lock().list_started(Instant::now());
        // Dropped mid-list (a cancelled sync): the index learns the list failed.
        let mut guard = ListGuard {
            index: &self.lbs,
            token: Some(token),
        };
        let all = self.list_map("/v2/load_balancers", keep).await?;
        let answer = answer(&all);
        if let Some(token) = guard.token.take() {
            self.lbs.lock().listed(token, all, Instant::now());
        }
        Ok(answer)
    }

    /// Load balancer `id` as this client last saw it (a list, a read, a create or an
    /// update), without a request; `None` when it was not seen or was seen gone.
    pub fn seen_load_balancer(&self, id: &str) -> Option<SeenLoadBalancer> {
        self.lbs.lock().get(id).cloned()
    }

    /// One load balancer; `None` when it does not exist.
    pub async fn load_balancer(&self, id: &str) -> Result<Option<LoadBalancerObject>, ApiError> {
        match self
            .get::<LbOne>(&format!("/v2/load_balancers/{}", encode(id)))
            .await
        {
            Ok(one) => {
                self.lbs
                    .lock()
                    .saw(one.load_balancer.clone(), Instant::now());
                Ok(Some(one.load_balancer))
            }
            Err(ApiError::NotFound) => {
                self.lbs.lock().gone(id);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates a load balancer.
    pub async fn create_load_balancer(
        &self,
        req: &LoadBalancerRequest,
    ) -> Result<LoadBalancerObject, ApiError> {
        self.send_lb(Method::POST, "/v2/load_balancers".into(), req, None)
            .await
    }

    /// Replaces a load balancer's spec.
    pub async fn update_load_balancer(
        &self,
        id: &str,
        req: &LoadBalancerRequest,
    ) -> Result<LoadBalancerObject, ApiError> {
        self.send_lb(
            Method::PUT,
            format!("/v2/load_balancers/{}", encode(id)),
            req,
            Some(id),
        )
        .await
    }

    /// Sends a create or (with the ID it is about) an update; the answer goes into the
    /// index, and a 404 to an update takes the load balancer out of it.
    async fn send_lb(
        &self,
        method: Method,
        path: String,
        req: &LoadBalancerRequest,
        id: Option<&str>,
    ) -> Result<LoadBalancerObject, ApiError> {
        let one: Option<LbOne> = match self.call(method, &path, Some(req)).await {
            Err(ApiError::NotFound) => {
                if let Some(id) = id {
                    self.lbs.lock().gone(id);
                }
                return Err(ApiError::NotFound);
            }
            answer => answer?,
        };
        let lb = one.map(|o| o.load_balancer).ok_or(ApiError::Api {
            status: 204,
            id: "empty".into(),
            message: format!("empty answer from {path}"),
            request_id: String::new(),
        })?;
        self.lbs.lock().saw(lb.clone(), Instant::now());
        Ok(lb)
    }

    /// Deletes a load balancer; a missing one is not an error.
    pub async fn delete_load_balancer(&self, id: &str) -> Result<(), ApiError> {
        self.delete(&format!("/v2/load_balancers/{}", encode(id)))
            .await?;
        self.lbs.lock().gone(id);
        Ok(())
    }

    async fn delete(&self, path: &str) -> Result<(), ApiError> {
        match self
            .call::<serde_json::Value>(Method::DELETE, path, None)
            .await
        {
            Ok(_) | Err(ApiError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether the API serves the `/v2/x-routes` extension (the simulator's; DigitalOcean's
    /// API does not): one `GET` of a one-item page. A 404 says it does not; any other error
    /// is returned, since it says nothing either way.
    pub async fn serves_routes(&self) -> Result<bool, ApiError> {
        match self
            .get::<serde_json::Value>("/v2/x-routes?page=1&per_page=1")
            .await
        {
            Ok(_) => Ok(true),
            Err(ApiError::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every route of the `/v2/x-routes` extension.
    pub async fn list_routes(&self) -> Result<Vec<XRoute>, ApiError> {
        self.list("/v2/x-routes").await
    }

    /// Creates a route; one to the same destination already there is not an error.
    pub async fn create_route(&self, route: &XRoute) -> Result<(), ApiError> {
        match self
            .call::<serde_json::Value>(Method::POST, "/v2/x-routes", Some(route))
            .await
        {
            Ok(_) => Ok(()),
            Err(ApiError::Api { status: 409, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes a route; a missing one is not an error.
    pub async fn delete_route(&self, id: u64) -> Result<(), ApiError> {
        self.delete(&format!("/v2/x-routes/{id}")).await
    }
}

/// Tells the index a list failed unless it completed (also when its future is dropped).
struct ListGuard<'a> {
    index: &'a Mutex<LbIndex>,
    token: Option<(u64, Instant)>,
}

impl Drop for ListGuard<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.index.lock().list_failed(token);
        }
    }
}

#[derive(serde::Deserialize)]
struct LbOne {
    load_balancer: LoadBalancerObject,
}

/// When this client's requests may start: never inside a hold (a back-off the API asked
/// for with a 429 or 503) nor before the API's spent quota resets, never more than a
/// window's limit within any window of its length (a sliding window: the start times of
/// the window's last `limit` requests are kept), and spaced to `requests_per_second` when
/// that is set. One per [`Client`], shared by all its requests.
#[derive(Debug)]
struct Pacer {
    interval: Option<Duration>,
    state: Mutex<PaceState>,
}

#[derive(Debug)]
struct PaceState {
    /// The next free spacing slot (with `requests_per_second`).
    next_slot: Instant,
    /// No request starts before this: the end of the latest hold.
    not_before: Instant,
    /// Nor before this: the reset of the API's quota, when an answer said it was spent.
    quota_until: Instant,
    /// Each window's limit and length, with the start times of its last `limit` requests.
    windows: Vec<(RateWindow, VecDeque<Instant>)>,
}

impl Pacer {
    fn new(requests_per_second: Option<f64>, windows: &[RateWindow]) -> Self {
        let now = Instant::now();
        Self {
            interval: requests_per_second.map(|r| Duration::from_secs_f64(1.0 / r.max(0.001))),
            state: Mutex::new(PaceState {
                next_slot: now,
                not_before: now,
                quota_until: now,
                windows: windows
                    .iter()
                    .filter(|w| w.requests > 0)
                    .map(|w| (*w, VecDeque::new()))
                    .collect(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, PaceState> {
        self.state.lock()
    }

    /// Waits for this request's slot. A hold set while it waits (a 429 to another request)
    /// holds it too: it takes a new slot after the hold. When the hold has longer to run
    /// than `max_hold`, or a full window (or the quota's reset) longer than
    /// `max_window_wait`, returns that wait at once and takes no slot. Dropping the future
    /// cancels the wait.
    async fn wait(&self, max_hold: Duration, max_window_wait: Duration) -> Result<(), Duration> {
        loop {
            let at = {
                let mut state = self.state();
                let now = Instant::now();
                let held = state.not_before.saturating_duration_since(now);
                if held > max_hold {
                    return Err(held);
                }
                let mut at = state.not_before.max(state.quota_until).max(now);
                if self.interval.is_some() {
                    at = at.max(state.next_slot);
                }
                for (window, sent) in &state.windows {
                    if sent.len() >= window.requests as usize
                        && let Some(oldest) = sent.front()
                    {
                        at = at.max(*oldest + window.per);
                    }
                }
                let wait = at.saturating_duration_since(now);
                if wait > held.max(max_window_wait) {
                    return Err(wait);
                }
                if let Some(interval) = self.interval {
                    state.next_slot = at + interval;
                }
                for (window, sent) in &mut state.windows {
                    sent.push_back(at);
                    while sent.len() > window.requests as usize {
                        sent.pop_front();
                    }
                }
                at
            };
            tokio::time::sleep_until(at).await;
            let state = self.state();
            let now = Instant::now();
            if state.not_before <= now && state.quota_until <= now {
                return Ok(());
            }
        }
    }

    /// Starts no request before `until` (a later hold already set stays).
    fn hold_until(&self, until: Instant) {
        let mut state = self.state();
        state.not_before = state.not_before.max(until);
    }

    /// Starts no request before `until`, the API's quota reset, waiting for it as for a
    /// window (a later reset already set stays).
    fn quota_spent_until(&self, until: Instant) {
        let mut state = self.state();
        state.quota_until = state.quota_until.max(until);
    }
}

/// A `Retry-After` value: delay-seconds, or an HTTP-date (a date past is no wait).
fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    Some(until_unix(http_date(value)?, now))
}

/// DigitalOcean's `ratelimit-remaining: 0` with `ratelimit-reset` (unix seconds): how long
/// until the quota is back. `None` while requests remain or the reset has passed.
fn exhausted_until(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    if number("ratelimit-remaining")? != 0 {
        return None;
    }
    Some(until_unix(number("ratelimit-reset")?, now)).filter(|d| !d.is_zero())
}

/// From `now` to `unix` seconds since the epoch; zero when that is past.
fn until_unix(unix: i64, now: SystemTime) -> Duration {
    let now = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    Duration::from_secs_f64((unix as f64 - now).clamp(0.0, 1e9))
}

/// Seconds since the epoch of an HTTP-date (RFC 9110 5.6.7): the IMF-fixdate
/// `Sun, 06 Nov 1994 08:49:37 GMT` and the obsolete `Sunday, 06-Nov-94 08:49:37 GMT` and
/// `Sun Nov  6 08:49:37 1994`.
fn http_date(value: &str) -> Option<i64> {
    const MONTHS: &str = "jan feb mar apr may jun jul aug sep oct nov dec";
    const SKIPPED: &str = "mon tue wed thu fri sat sun gmt \
        monday tuesday wednesday thursday friday saturday sunday";
    let (mut day, mut month, mut year, mut time) = (None, None, None, None);
    for token in value.split([' ', ',', '-']).filter(|t| !t.is_empty()) {
        let lower = token.to_ascii_lowercase();
        if let Some(m) = MONTHS.split(' ').position(|m| m == lower) {
            month = Some(m as i64 + 1);
        } else if token.contains(':') {
            let mut parts = token.split(':').map(|p| p.parse::<i64>().ok());
            let (Some(Some(h)), Some(Some(m)), Some(Some(s)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            time = Some((h, m, s));
        } else if token.bytes().all(|b| b.is_ascii_digit()) {
            let n: i64 = token.parse().ok()?;
            match token.len() {
                1 | 2 if day.is_none() => day = Some(n),
                // RFC 850's two-digit year.
                2 => year = Some(if n < 70 { 2000 + n } else { 1900 + n }),
                4 => year = Some(n),
                _ => return None,
            }
        } else if !SKIPPED.split_whitespace().any(|w| w == lower) {
            return None;
        }
    }
    let (day, month, year, (h, m, s)) = (day?, month?, year?, time?);
    if !(1..=31).contains(&day)
        || !(0..24).contains(&h)
        || !(0..60).contains(&m)
        || !(0..=60).contains(&s)
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64 << attempt.min(6))
}

/// A header's value as text; empty when absent or not text.
fn header_text(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Keeps IDs path-safe (they come from annotations, which users write).
fn encode(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

mod erased {
    /// A serializable body behind a trait object, so `call` stays one function.
    pub(super) trait Body {
        fn to_json(&self) -> Vec<u8>;
    }

    impl<T: serde::Serialize> Body for T {
        fn to_json(&self) -> Vec<u8> {
            serde_json::to_vec(self).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    /// Waits on `pacer` and says when it was let through (since `t0`).
    fn waiter(pacer: &Arc<Pacer>, t0: Instant) -> tokio::task::JoinHandle<Duration> {
        let pacer = pacer.clone();
        tokio::spawn(async move {
            pacer.wait(10 * SEC, 1000 * SEC).await.unwrap();
            t0.elapsed()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_stops_every_waiting_request_until_it_ends_then_paces_them() {
        let pacer = Arc::new(Pacer::new(Some(10.0), &[]));
        let t0 = Instant::now();
        // The first request goes at once; five more wait for their slots (100 ms apart).
        pacer.wait(10 * SEC, 10 * SEC).await.unwrap();
        let waiting: Vec<_> = (0..5).map(|_| waiter(&pacer, t0)).collect();
        tokio::time::sleep(Duration::from_millis(1)).await;
        // The first request's answer: 429, Retry-After: 2.
        pacer.hold_until(t0 + 2 * SEC);
        let mut released = Vec::new();
        for w in waiting {
            released.push(w.await.unwrap());
        }
        released.sort();
        let expected: Vec<Duration> = (0..5)
            .map(|i| 2 * SEC + Duration::from_millis(100 * i))
            .collect();
        assert_eq!(released, expected);
        // A request that comes later still takes the next slot.
        pacer.wait(10 * SEC, 10 * SEC).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(2500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_lets_its_limit_go_at_once_and_no_more_within_its_length() {
        let windows = [
            RateWindow {
                requests: 3,
                per: 10 * SEC,
            },
            RateWindow {
                requests: 4,
                per: 100 * SEC,
            },
        ];
        let pacer = Arc::new(Pacer::new(None, &windows));
        let t0 = Instant::now();
        let mut released: Vec<Duration> = Vec::new();
        for w in (0..5).map(|_| waiter(&pacer, t0)).collect::<Vec<_>>() {
            released.push(w.await.unwrap());
        }
        released.sort();
        // Three at once; the fourth when the first leaves the 10 s window; the fifth when
        // the first leaves the 100 s one.
        assert_eq!(
            released,
            [
                Duration::ZERO,
                Duration::ZERO,
                Duration::ZERO,
                10 * SEC,
                100 * SEC
            ]
        );
        // At 100 s two more go at once (the windows hold 0, 10, 100 and 0, 0, 10, 100), then
        // both are full until 110 s: a wait longer than the caller waits in place is
        // returned at once, and takes no slot.
        let t1 = Instant::now();
        pacer.wait(5 * SEC, 5 * SEC).await.unwrap();
        pacer.wait(5 * SEC, 5 * SEC).await.unwrap();
        assert_eq!(t1.elapsed(), Duration::ZERO);
        assert_eq!(pacer.wait(5 * SEC, 5 * SEC).await, Err(10 * SEC));
        assert_eq!(
            pacer.wait(5 * SEC, 5 * SEC).await,
            Err(10 * SEC),
            "no slot was taken"
        );
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_quota_is_waited_for_in_place_a_long_hold_is_returned() {
        let pacer = Pacer::new(None, &[]);
        let t0 = Instant::now();
        pacer.quota_spent_until(t0 + 30 * SEC);
        pacer.wait(10 * SEC, 60 * SEC).await.unwrap();
        assert_eq!(t0.elapsed(), 30 * SEC);
        // Longer than the caller waits for a window: returned.
        pacer.quota_spent_until(t0 + 120 * SEC);
        assert_eq!(pacer.wait(10 * SEC, 60 * SEC).await, Err(90 * SEC));
        // A hold (a 429's Retry-After) longer than `max_hold` is returned at once.
        let pacer = Pacer::new(None, &[]);
        pacer.hold_until(Instant::now() + 30 * SEC);
        assert_eq!(pacer.wait(10 * SEC, 60 * SEC).await, Err(30 * SEC));
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_hold_wins_and_an_earlier_one_does_not_shorten_it() {
        let pacer = Pacer::new(Some(1000.0), &[]);
        let t0 = Instant::now();
        pacer.hold_until(t0 + 3 * SEC);
        pacer.hold_until(t0 + SEC);
        pacer.wait(10 * SEC, 10 * SEC).await.unwrap();
        assert_eq!(t0.elapsed(), 3 * SEC);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_longer_than_the_longest_wait_is_returned_at_once() {
        let pacer = Pacer::new(Some(10.0), &[]);
        let t0 = Instant::now();
        pacer.hold_until(t0 + 30 * SEC);
        assert_eq!(pacer.wait(10 * SEC, 10 * SEC).await, Err(30 * SEC));
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // Once it has less than the longest wait to run, requests wait for it.
        tokio::time::sleep(25 * SEC).await;
        pacer.wait(10 * SEC, 10 * SEC).await.unwrap();
        assert_eq!(t0.elapsed(), 30 * SEC);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_in_a_hold_can_be_cancelled() {
        let pacer = Arc::new(Pacer::new(Some(10.0), &[]));
        let t0 = Instant::now();
        pacer.hold_until(t0 + 2 * SEC);
        let waiting = waiter(&pacer, t0);
        let cancelled =
            tokio::time::timeout(Duration::from_millis(500), pacer.wait(10 * SEC, 10 * SEC));
        assert!(
            cancelled.await.is_err(),
            "the wait did not end with its timeout"
        );
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
        // The others are still let through after the hold.
        assert!(waiting.await.unwrap() >= 2 * SEC);
    }

    /// 1994-11-06T08:49:37Z, RFC 9110's example date.
    fn example_now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = example_now();
        assert_eq!(retry_after("2", now), Some(2 * SEC));
        assert_eq!(retry_after(" 120 ", now), Some(120 * SEC));
        for date in [
            "Sun, 06 Nov 1994 08:49:47 GMT",
            "Sunday, 06-Nov-94 08:49:47 GMT",
            "Sun Nov  6 08:49:47 1994",
        ] {
            assert_eq!(retry_after(date, now), Some(10 * SEC), "{date}");
        }
        // A date past is no wait; what is neither is not a Retry-After.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:27 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in [
            "",
            "soon",
            "-1",
            "1.5",
            "Sun, 06 Nov 1994 25:00:00 GMT",
            "Sun, 32 Nov 1994 08:00:00 GMT",
            "Sun, 06 Nov 1994 GMT",
            "Sun, 06 Nov 1994 08:49:37:12 GMT",
        ] {
            assert_eq!(retry_after(bad, now), None, "{bad:?}");
        }
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(1_835_438_400)
        );
    }

    #[test]
    fn an_exhausted_quota_holds_until_its_reset() {
        let now = example_now();
        let headers = |remaining: &str, reset: Option<i64>| {
            let mut h = HeaderMap::new();
            h.insert("ratelimit-remaining", remaining.parse().unwrap());
            if let Some(reset) = reset {
                h.insert("ratelimit-reset", reset.to_string().parse().unwrap());
            }
            h
        };
        assert_eq!(
            exhausted_until(&headers("0", Some(784_111_780)), now),
            Some(3 * SEC)
        );
        assert_eq!(exhausted_until(&headers("1", Some(784_111_780)), now), None);
        assert_eq!(exhausted_until(&headers("0", Some(784_111_700)), now), None);
        assert_eq!(exhausted_until(&headers("0", None), now), None);
        assert_eq!(exhausted_until(&HeaderMap::new(), now), None);
    }

    #[tokio::test]
    async fn a_transport_error_says_its_cause_once() {
        let client = Client::new(ClientOptions::new("http://[::1", ApiToken::new("t"))).unwrap();
        let err = client.list_droplets().await.unwrap_err();
        let text = ccm_core::provider::display_chain(&err);
        assert!(text.starts_with("request failed: builder error"), "{text}");
        assert_eq!(text.matches("builder error").count(), 1, "{text}");
    }
}
