//! A typed client of the DigitalOcean-like API: timeouts, `Retry-After` honoured (with a cap),
//! a client-side rate limit, retries of 5xx (not of a POST, which may have been applied), and
//! a short-TTL cache of the droplet list.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::api::{Droplet, LoadBalancerObject, LoadBalancerRequest, XRoute};

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
    /// Requests per second the client allows itself.
    pub requests_per_second: f64,
    /// Retries of a 429 or 5xx before giving up.
    pub max_retries: u32,
    /// The longest `Retry-After` waited in place; a longer one is returned to the caller.
    pub max_retry_after: Duration,
    /// How long a droplet list answers lookups.
    pub cache_ttl: Duration,
    /// The page size of lists.
    pub per_page: u32,
}

impl ClientOptions {
    /// Defaults: 10 s timeout, 10 requests/s, 4 retries, waits of at most 10 s, 10 s cache,
    /// pages of 200.
    pub fn new(api_url: impl Into<String>, token: ApiToken) -> Self {
        Self {
            api_url: api_url.into().trim_end_matches('/').to_owned(),
            token,
            timeout: Duration::from_secs(10),
            requests_per_second: 10.0,
            max_retries: 4,
            max_retry_after: Duration::from_secs(10),
            cache_ttl: Duration::from_secs(10),
            per_page: 200,
        }
    }
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
    /// 429 past the retries or with a wait longer than the cap.
    #[error("rate limited by the API; retry after {0:?}")]
    RateLimited(Duration),
    /// Any other error answer, with DigitalOcean's `id` and `message`.
    #[error("API error {status}: {id}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// DigitalOcean's error id.
        id: String,
        /// Its message.
        message: String,
    },
    /// The request did not complete (connection, timeout).
    #[error("request failed: {0}")]
    Transport(#[source] reqwest::Error),
    /// The answer is not the JSON expected.
    #[error("malformed answer from {path}: {source}")]
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

#[derive(serde::Deserialize)]
struct Links {
    #[serde(default)]
    pages: Pages,
}

#[derive(serde::Deserialize, Default)]
struct Pages {
    #[serde(default)]
    next: Option<String>,
}

/// The DigitalOcean-like API client.
pub struct Client {
    http: reqwest::Client,
    opts: ClientOptions,
    next_slot: Mutex<Instant>,
    cache: Mutex<Option<(Instant, Arc<Vec<Droplet>>)>>,
    refresh: tokio::sync::Mutex<()>,
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

impl Client {
    /// Builds the client.
    pub fn new(opts: ClientOptions) -> Result<Self, ApiError> {
        // reqwest is built without a default crypto provider; the workspace's rustls uses ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout)
            .build()
            .map_err(ApiError::Transport)?;
        Ok(Self {
            http,
            opts,
            next_slot: Mutex::new(Instant::now()),
            cache: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The options.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    async fn pace(&self) {
        let interval = Duration::from_secs_f64(1.0 / self.opts.requests_per_second.max(0.001));
        let at = {
            let mut next = self.next_slot.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at).await;
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
            self.pace().await;
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
            if status == StatusCode::TOO_MANY_REQUESTS {
                let after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(Duration::from_secs(1));
                tracing::debug!(path, ?after, "API rate limit: 429");
                if attempt < self.opts.max_retries && after <= self.opts.max_retry_after {
                    attempt += 1;
                    tokio::time::sleep(after.max(Duration::from_millis(50))).await;
                    continue;
                }
                return Err(ApiError::RateLimited(after));
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
                #[derive(serde::Deserialize, Default)]
                struct ErrorBody {
                    #[serde(default)]
                    id: String,
                    #[serde(default)]
                    message: String,
                }
                let e: ErrorBody = serde_json::from_slice(&bytes).unwrap_or_default();
                return Err(match status {
                    StatusCode::NOT_FOUND => ApiError::NotFound,
                    StatusCode::UNAUTHORIZED => ApiError::Unauthorized(e.message),
                    _ => ApiError::Api {
                        status: status.as_u16(),
                        id: e.id,
                        message: e.message,
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
            })
    }

    async fn list<T: DeserializeOwned>(&self, path: &str, key: &str) -> Result<Vec<T>, ApiError> {
        let mut out = Vec::new();
        let mut page = 1;
        loop {
            let p = format!("{path}?page={page}&per_page={}", self.opts.per_page);
            let mut v: serde_json::Value = self.get(&p).await?;
            let items = v.get_mut(key).map(serde_json::Value::take);
            let decode = |source| ApiError::Decode {
                path: p.clone(),
                source,
            };
            let items: Vec<T> =
                serde_json::from_value(items.unwrap_or_default()).map_err(decode)?;
            let links: Option<Links> = match v.get_mut("links").map(serde_json::Value::take) {
                Some(l) => serde_json::from_value(l).map_err(decode)?,
                None => None,
            };
            let done = items.is_empty() || links.and_then(|l| l.pages.next).is_none();
            out.extend(items);
            if done || page > 10_000 {
                return Ok(out);
            }
            page += 1;
        }
    }

    /// Lists every droplet, page by page (uncached).
    pub async fn list_droplets(&self) -> Result<Vec<Droplet>, ApiError> {
        self.list("/v2/droplets", "droplets").await
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
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), list.clone()));
        Ok(list)
    }

    fn fresh(&self, max_age: Duration) -> Option<Arc<Vec<Droplet>>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .as_ref()
            .filter(|(at, _)| at.elapsed() < max_age)
            .map(|(_, list)| list.clone())
    }

    /// Forgets the cached droplet list.
    pub fn invalidate(&self) {
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
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

    /// Every load balancer.
    pub async fn list_load_balancers(&self) -> Result<Vec<LoadBalancerObject>, ApiError> {
        self.list("/v2/load_balancers", "load_balancers").await
    }

    /// One load balancer; `None` when it does not exist.
    pub async fn load_balancer(&self, id: &str) -> Result<Option<LoadBalancerObject>, ApiError> {
        match self
            .get::<LbOne>(&format!("/v2/load_balancers/{}", encode(id)))
            .await
        {
            Ok(one) => Ok(Some(one.load_balancer)),
            Err(ApiError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates a load balancer.
    pub async fn create_load_balancer(
        &self,
        req: &LoadBalancerRequest,
    ) -> Result<LoadBalancerObject, ApiError> {
        self.send_lb(Method::POST, "/v2/load_balancers".into(), req)
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
        )
        .await
    }

    async fn send_lb(
        &self,
        method: Method,
        path: String,
        req: &LoadBalancerRequest,
    ) -> Result<LoadBalancerObject, ApiError> {
        let one: Option<LbOne> = self.call(method, &path, Some(req)).await?;
        one.map(|o| o.load_balancer).ok_or(ApiError::Api {
            status: 204,
            id: "empty".into(),
            message: format!("empty answer from {path}"),
        })
    }

    /// Deletes a load balancer; a missing one is not an error.
    pub async fn delete_load_balancer(&self, id: &str) -> Result<(), ApiError> {
        self.delete(&format!("/v2/load_balancers/{}", encode(id)))
            .await
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

    /// Every route of the `/v2/x-routes` extension.
    pub async fn list_routes(&self) -> Result<Vec<XRoute>, ApiError> {
        self.list("/v2/x-routes", "routes").await
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

#[derive(serde::Deserialize)]
struct LbOne {
    load_balancer: LoadBalancerObject,
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64 << attempt.min(6))
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
