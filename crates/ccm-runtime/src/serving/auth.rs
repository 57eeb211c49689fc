//! Delegated authentication and authorization of the endpoint server, as
//! `k8s.io/apiserver`'s `DelegatingAuthenticationOptions` and
//! `DelegatingAuthorizationOptions` set them up for Go's cloud-controller-manager.
//!
//! Authentication tries, in Go's order, a front proxy's request headers (its client
//! certificate verified against the request-header CA and allowed names), a client
//! certificate signed by the client CA (user = CN, groups = O), and a bearer token checked
//! with a `TokenReview`; the first to succeed wins, a credential that fails is a 401, and no
//! credential at all is `system:anonymous`. Authorization allows the always-allowed groups
//! (`system:masters`) and paths (`--authorization-always-allow-paths`, a trailing `*`
//! matching a prefix), and asks a `SubjectAccessReview` about the rest, with
//! `nonResourceAttributes` {path, verb = the lower-case HTTP method}: denied is a 403, an
//! error a 500, with Go's `Status` bodies. Review results are cached (bounded, with the TTL
//! flags), reviews time out after 10 s and at most [`MAX_CONCURRENT_REVIEWS`] run at once,
//! so a failing API server fails requests instead of wedging the server; the always-allowed
//! paths never wait for it.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use http::{HeaderMap, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rustls::pki_types::CertificateDer;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::tls::{self, ChainVerifier};
use crate::client::fields::field;

/// How long one `TokenReview` or `SubjectAccessReview` may take (Go's 10 s client timeouts).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// How many reviews may be in flight at once; more requests wait (within the timeout).
pub const MAX_CONCURRENT_REVIEWS: usize = 32;

/// How many results each review cache keeps.
pub const MAX_CACHE_ENTRIES: usize = 4096;

/// The longest bearer token looked at: 16 KiB (a ServiceAccount token is about 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Go's default always-allowed group.
pub const SYSTEM_MASTERS: &str = "system:masters";

/// The ConfigMap kube-apiserver publishes its client CA and request-header settings in.
pub const AUTHENTICATION_CONFIGMAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");

/// Who made a request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    /// The user name.
    pub name: String,
    /// The UID, empty when unknown.
    pub uid: String,
    /// The groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// `system:anonymous` in `system:unauthenticated`: a request without credentials.
    #[must_use]
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".to_owned(),
            groups: vec!["system:unauthenticated".to_owned()],
            ..Self::default()
        }
    }

    /// Adds `system:authenticated` as Go's `AuthenticatedGroupAdder` does.
    fn authenticated(mut self) -> Self {
        if !self
            .groups
            .iter()
            .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
        {
            self.groups.push("system:authenticated".to_owned());
        }
        self
    }
}

/// `--authorization-always-allow-paths`: exact paths, and prefixes written with a trailing
/// `*`; a leading `/` is optional (Go's `path.NewAuthorizer`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathMatcher {
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl PathMatcher {
    /// Parses the patterns; only a trailing `*` is allowed.
    pub fn new(patterns: &[String]) -> Result<Self, String> {
        let mut out = Self::default();
        for p in patterns {
            let p = p.strip_prefix('/').unwrap_or(p);
            if p.is_empty() {
                out.exact.insert(String::new());
                continue;
            }
            if p[..p.len() - 1].contains('*') {
                return Err(format!("only trailing * allowed in {p:?}"));
            }
            match p.strip_suffix('*') {
                Some(prefix) => out.prefixes.push(prefix.to_owned()),
                None => {
                    out.exact.insert(p.to_owned());
                }
            }
        }
        Ok(out)
    }

    /// Whether `path` is always allowed.
    #[must_use]
    pub fn matches(&self, path: &str) -> bool {
        let path = path.strip_prefix('/').unwrap_or(path);
        self.exact.contains(path) || self.prefixes.iter().any(|p| path.starts_with(p.as_str()))
    }
}

/// A bounded map whose entries expire: when full, expired entries go first, then the one
/// closest to expiry.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    capacity: usize,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// A cache of at most `capacity` entries.
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The value of `key` if it has not expired.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.entries.lock();
        match entries.get(key) {
            Some((v, expires)) if *expires > Instant::now() => Some(v.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `ttl` (not at all for a zero TTL or capacity).
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() || self.capacity == 0 {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= self.capacity
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    /// The number of entries, expired ones included.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The request-header (front proxy) settings.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RequestHeaderConfig {
    /// Client certificate common names allowed to assert users; empty allows any.
    pub allowed_names: Vec<String>,
    /// Headers holding the user name (the first non-empty wins).
    pub username_headers: Vec<String>,
    /// Headers holding the UID.
    pub uid_headers: Vec<String>,
    /// Headers holding groups (every value).
    pub group_headers: Vec<String>,
    /// Prefixes of headers holding extra attributes.
    pub extra_prefixes: Vec<String>,
}

impl RequestHeaderConfig {
    /// The settings with these lists.
    #[must_use]
    pub fn new(
        allowed_names: Vec<String>,
        username_headers: Vec<String>,
        uid_headers: Vec<String>,
        group_headers: Vec<String>,
        extra_prefixes: Vec<String>,
    ) -> Self {
        Self {
            allowed_names,
            username_headers,
            uid_headers,
            group_headers,
            extra_prefixes,
        }
    }

    /// The user the headers assert, `None` without a user name (Go's `requestHeaderAuthRequestHandler`).
    #[must_use]
    pub fn user(&self, headers: &HeaderMap) -> Option<UserInfo> {
        let values = |name: &String| {
            headers
                .get_all(name.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let first = |names: &[String]| names.iter().find_map(|n| values(n).into_iter().next());
        let name = first(&self.username_headers)?;
        let uid = first(&self.uid_headers).unwrap_or_default();
        let groups = self.group_headers.iter().flat_map(values).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            for prefix in &self.extra_prefixes {
                let prefix = prefix.to_ascii_lowercase();
                if let Some(key) = header.strip_prefix(prefix.as_str())
                    && !key.is_empty()
                    && let Ok(value) = value.to_str()
                {
                    extra
                        .entry(percent_decode(key).to_ascii_lowercase())
                        .or_default()
                        .push(value.to_owned());
                }
            }
        }
        Some(UserInfo {
            name,
            uid,
            groups,
            extra,
        })
    }
}

/// Go's `url.PathUnescape` of an extra key (`%2F` and the like); invalid escapes stay.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The bearer token of an `Authorization` header, as Go's `bearertoken` reads it.
#[must_use]
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// What authorization decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied (or no opinion), with the reviewer's reason (may be empty).
    Deny(String),
}

/// The delegated authenticator and authorizer of the endpoint server; see the
/// [module docs](self).
pub struct DelegatedAuth {
    request_header: Option<(ChainVerifier, RequestHeaderConfig)>,
    client_ca: Option<ChainVerifier>,
    token_reviews: Option<kube::Client>,
    token_cache: TtlCache<[u8; 32], Option<UserInfo>>,
    token_ttl: Duration,
    access_reviews: Option<kube::Client>,
    access_cache: TtlCache<String, Decision>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    always_allow_paths: PathMatcher,
    always_allow_groups: Vec<String>,
    reviews: Semaphore,
    timeout: Duration,
}

impl std::fmt::Debug for DelegatedAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatedAuth")
            .field("request_header", &self.request_header.is_some())
            .field("client_ca", &self.client_ca.is_some())
            .field("token_reviews", &self.token_reviews.is_some())
            .field("access_reviews", &self.access_reviews.is_some())
            .field("always_allow_paths", &self.always_allow_paths)
            .field("always_allow_groups", &self.always_allow_groups)
            .finish_non_exhaustive()
    }
}

impl DelegatedAuth {
    /// Nothing authenticates (everyone is anonymous) and only `always_allow_paths` and the
    /// group `system:masters` are allowed; add the rest with the `with_*` methods.
    #[must_use]
    pub fn new(always_allow_paths: PathMatcher) -> Self {
        Self {
            request_header: None,
            client_ca: None,
            token_reviews: None,
            token_cache: TtlCache::new(MAX_CACHE_ENTRIES),
            token_ttl: Duration::from_secs(10),
            access_reviews: None,
            access_cache: TtlCache::new(MAX_CACHE_ENTRIES),
            allowed_ttl: Duration::from_secs(10),
            denied_ttl: Duration::from_secs(10),
            always_allow_paths,
            always_allow_groups: vec![SYSTEM_MASTERS.to_owned()],
            reviews: Semaphore::new(MAX_CONCURRENT_REVIEWS),
            timeout: REVIEW_TIMEOUT,
        }
    }

    /// Client certificates signed by `ca` authenticate as their CN, in their O groups.
    #[must_use]
    pub fn with_client_ca(mut self, ca: ChainVerifier) -> Self {
        self.client_ca = Some(ca);
        self
    }

    /// Front proxies whose client certificate `ca` signed assert users in headers.
    #[must_use]
    pub fn with_request_header(mut self, ca: ChainVerifier, config: RequestHeaderConfig) -> Self {
        self.request_header = Some((ca, config));
        self
    }

    /// Bearer tokens are checked with `TokenReview`s through `client`, results cached for `ttl`.
    #[must_use]
    pub fn with_token_reviews(mut self, client: kube::Client, ttl: Duration) -> Self {
        self.token_reviews = Some(client);
        self.token_ttl = ttl;
        self
    }

    /// Other requests are authorised with `SubjectAccessReview`s through `client`, allowed
    /// results cached for `allowed_ttl`, denied ones for `denied_ttl`.
    #[must_use]
    pub fn with_access_reviews(
        mut self,
        client: kube::Client,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Self {
        self.access_reviews = Some(client);
        self.allowed_ttl = allowed_ttl;
        self.denied_ttl = denied_ttl;
        self
    }

    setters! {
        /// Replaces the always-allowed groups (default `system:masters`).
        #[must_use]
        pub fn with_always_allow_groups(always_allow_groups: Vec<String>);
        /// Sets the time limit of each review (default [`REVIEW_TIMEOUT`]).
        #[must_use]
        pub fn with_review_timeout(timeout: Duration);
    }

    /// Authenticates a request: `Ok(user)` (possibly anonymous) or `Err(why)` for a 401.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: &[CertificateDer<'static>],
    ) -> Result<UserInfo, String> {
        let mut errors = Vec::new();
        if let (Some((ca, config)), false) = (&self.request_header, peer.is_empty()) {
            match ca.verify(peer) {
                Err(e) => errors.push(format!("request-header client certificate: {e}")),
                Ok(()) => {
                    let cn = tls::subject(&peer[0])
                        .map(|s| s.common_name)
                        .unwrap_or_default();
                    if !config.allowed_names.is_empty() && !config.allowed_names.contains(&cn) {
                        errors.push(format!(
                            "request-header client certificate: CN {cn:?} is not in --requestheader-allowed-names"
                        ));
                    } else if let Some(user) = config.user(headers) {
                        return Ok(user.authenticated());
                    }
                }
            }
        }
        if let (Some(ca), false) = (&self.client_ca, peer.is_empty()) {
            match ca.verify(peer) {
                Err(e) => errors.push(format!("client certificate: {e}")),
                Ok(()) => match tls::subject(&peer[0]) {
                    Some(s) if !s.common_name.is_empty() => {
                        return Ok(UserInfo {
                            name: s.common_name,
                            groups: s.organizations,
                            ..UserInfo::default()
                        }
                        .authenticated());
                    }
                    _ => {}
                },
            }
        }
        if let (Some(client), Some(token)) = (&self.token_reviews, bearer_token(headers)) {
            match self.review_token(client, token).await {
                Ok(Some(user)) => return Ok(user.authenticated()),
                Ok(None) => errors.push("invalid bearer token".to_owned()),
                Err(e) => errors.push(format!("invalid bearer token, {e}")),
            }
        }
        if errors.is_empty() {
            Ok(UserInfo::anonymous())
        } else {
            Err(errors.join("; "))
        }
    }

    async fn review_token(
        &self,
        client: &kube::Client,
        token: &str,
    ) -> Result<Option<UserInfo>, String> {
        if token.len() > MAX_TOKEN_BYTES {
            return Ok(None);
        }
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        if let Some(cached) = self.token_cache.get(&key) {
            return Ok(cached);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                // `String` from Kubernetes 1.36's types on, `Option<String>` before.
                token: field(token.to_owned()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = self.review(client, review).await?;
        let status = reviewed.status.unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            let u = status.user.unwrap_or_default();
            Some(UserInfo {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            })
        } else {
            None
        };
        self.token_cache.insert(key, user.clone(), self.token_ttl);
        Ok(user)
    }

    /// Creates one review (a `TokenReview` or `SubjectAccessReview`) through `client`,
    /// under the concurrency bound and the timeout, and returns it as the API server
    /// answered it.
    async fn review<R>(&self, client: &kube::Client, review: R) -> Result<R, String>
    where
        R: kube::Resource<Scope = kube::core::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        R::DynamicType: Default,
    {
        let api: Api<R> = Api::all(client.clone());
        let timeout = self.timeout;
        tokio::time::timeout(timeout, async {
            let _permit = self.reviews.acquire().await.map_err(|e| e.to_string())?;
            let created = api.create(&PostParams::default(), &review).await;
            created.map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
    }

    /// Authorises `user` to `verb` the non-resource `path`: `Err(why)` for a 500.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        path: &str,
        verb: &str,
    ) -> Result<Decision, String> {
        if user
            .groups
            .iter()
            .any(|g| self.always_allow_groups.contains(g))
            || self.always_allow_paths.matches(path)
        {
            return Ok(Decision::Allow);
        }
        let Some(client) = &self.access_reviews else {
            return Ok(Decision::Deny(String::new()));
        };
        let spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(verb.to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        };
        let key = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
        if let Some(cached) = self.access_cache.get(&key) {
            return Ok(cached);
        }
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let reviewed = self.review(client, review).await?;
        let status = reviewed.status.unwrap_or_default();
        let (decision, ttl) = if status.allowed {
            (Decision::Allow, self.allowed_ttl)
        } else {
            (
                Decision::Deny(status.reason.unwrap_or_default()),
                self.denied_ttl,
            )
        };
        self.access_cache.insert(key, decision.clone(), ttl);
        Ok(decision)
    }

    /// Authenticates and authorises a request for `path` with `method`: `None` to serve it,
    /// or the 401/403/500 answer.
    pub async fn check(
        &self,
        headers: &HeaderMap,
        peer: &[CertificateDer<'static>],
        method: &http::Method,
        path: &str,
    ) -> Option<Response<Full<Bytes>>> {
        let user = match self.authenticate(headers, peer).await {
            Ok(user) => user,
            Err(why) => {
                tracing::debug!(%why, path, "unable to authenticate the request");
                return Some(status_response(
                    StatusCode::UNAUTHORIZED,
                    "Unauthorized",
                    "Unauthorized",
                    None,
                ));
            }
        };
        let verb = method.as_str().to_ascii_lowercase();
        match self.authorize(&user, path, &verb).await {
            Ok(Decision::Allow) => None,
            Ok(Decision::Deny(reason)) => {
                let mut message = format!(
                    "forbidden: User {:?} cannot {verb} path {:?}",
                    user.name, path
                );
                if !reason.is_empty() {
                    message = format!("{message}: {reason}");
                }
                tracing::debug!(user = %user.name, path, %reason, "forbidden");
                Some(status_response(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    &message,
                    Some(serde_json::json!({})),
                ))
            }
            Err(why) => {
                tracing::warn!(%why, path, "authorization failed");
                Some(status_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &format!("Internal error occurred: {why}"),
                    Some(serde_json::json!({"causes": [{"message": why}]})),
                ))
            }
        }
    }
}

/// A `meta/v1` `Status` answer, as Go's `responsewriters` write them.
fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<serde_json::Value>,
) -> Response<Full<Bytes>> {
    let mut body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(details) = details {
        body["details"] = details;
    }
    let mut text = body.to_string();
    text.push('\n');
    super::response(code, "application/json", text)
}

/// What kube-apiserver publishes in `kube-system/extension-apiserver-authentication`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterAuthentication {
    /// `client-ca-file`.
    pub client_ca: Option<String>,
    /// `requestheader-client-ca-file`.
    pub requestheader_ca: Option<String>,
    /// The request-header lists (`requestheader-*`, JSON arrays).
    pub request_header: RequestHeaderConfig,
}

impl PartialEq for RequestHeaderConfig {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.allowed_names,
            &self.username_headers,
            &self.uid_headers,
            &self.group_headers,
            &self.extra_prefixes,
        ) == (
            &other.allowed_names,
            &other.username_headers,
            &other.uid_headers,
            &other.group_headers,
            &other.extra_prefixes,
        )
    }
}

impl Eq for RequestHeaderConfig {}

impl ClusterAuthentication {
    /// Reads the ConfigMap's data; a missing ConfigMap is empty (as Go treats it).
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, String> {
        let list = |key: &str| -> Result<Vec<String>, String> {
            match data.get(key).map(String::as_str) {
                None | Some("") => Ok(Vec::new()),
                Some(json) => serde_json::from_str(json).map_err(|e| format!("{key}: {e}")),
            }
        };
        let text = |key: &str| data.get(key).filter(|v| !v.is_empty()).cloned();
        Ok(Self {
            client_ca: text("client-ca-file"),
            requestheader_ca: text("requestheader-client-ca-file"),
            request_header: RequestHeaderConfig {
                allowed_names: list("requestheader-allowed-names")?,
                username_headers: list("requestheader-username-headers")?,
                uid_headers: list("requestheader-uid-headers")?,
                group_headers: list("requestheader-group-headers")?,
                extra_prefixes: list("requestheader-extra-headers-prefix")?,
            },
        })
    }

    /// Reads it from the cluster (once, within [`REVIEW_TIMEOUT`]).
    ///
    /// # Errors
    ///
    /// No answer in time, the API server's error, or data that does not parse.
    pub async fn lookup(client: &kube::Client) -> Result<Self, LookupError> {
        let (namespace, name) = AUTHENTICATION_CONFIGMAP;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let found = tokio::time::timeout(REVIEW_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| LookupError::NoAnswer)?
            .map_err(|e| match &e {
                kube::Error::Api(status) if status.code == 403 => {
                    LookupError::Forbidden(e.to_string())
                }
                _ => LookupError::Failed(e.to_string()),
            })?;
        Self::from_data(&found.and_then(|c| c.data).unwrap_or_default())
            .map_err(LookupError::Failed)
    }
}

/// Why [`ClusterAuthentication::lookup`] failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// The API server did not answer within [`REVIEW_TIMEOUT`].
    #[error("no answer within {REVIEW_TIMEOUT:?}")]
    NoAnswer,
    /// The API server refused: the identity may not read the ConfigMap.
    #[error("{0}")]
    Forbidden(String),
    /// Any other error, or data that does not parse.
    #[error("{0}")]
    Failed(String),
}

impl LookupError {
    /// What to do about it, as the start of a sentence: granting the Role helps only when
    /// the server refused.
    pub(crate) fn hint(&self) -> &'static str {
        match self {
            Self::NoAnswer => "check that the API server is reachable, or ",
            Self::Forbidden(_) => "grant the Role extension-apiserver-authentication-reader, or ",
            Self::Failed(_) => "",
        }
    }
}

#[cfg(test)]
mod tests;
