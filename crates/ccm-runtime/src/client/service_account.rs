//! One client per controller, each authenticated as its own ServiceAccount
//! (`--use-service-account-credentials`; Go's `clientbuilder.DynamicControllerClientBuilder`).
//!
//! The manager's own client (the root client) creates the ServiceAccount in `kube-system`
//! when it is missing and asks the TokenRequest API for a token of one hour. A task per
//! account requests the next token at 80% of the lifetime (a lifetime under 10 minutes
//! counts as 10, Go's guard against clock skew), and at once when the API server answers
//! `401 Unauthorized` to the current token (the account was deleted and recreated, or the
//! token revoked); failed requests are retried with a backoff from 0.5 s doubling to 30 s,
//! each bounded by a timeout. Requests never wait for a refresh: they carry the token in
//! hand, so a slow or failing TokenRequest holds up no reconcile. The per-controller
//! clients share the root client's [`ApiLayer`] (rate limit, fence, request counts); only
//! the credentials differ.
//!
//! ```no_run
//! # async fn demo(root: kube::Client, config: kube::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use ccm_runtime::client::ApiLayer;
//! use ccm_runtime::client::service_account::ServiceAccountClients;
//! let cancel = tokio_util::sync::CancellationToken::new();
//! let clients = ServiceAccountClients::new(root, &config, ApiLayer::new());
//! let service_controller = clients.client("service-controller", &cancel).await?;
//! # Ok(()) }
//! ```

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderValue, Request, Response, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::AuthInfo;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

use super::ApiLayer;
use super::fields::{field, optional};
use ccm_provider::BoxError;

/// The namespace of the controllers' ServiceAccounts (Go's `metav1.NamespaceSystem`).
pub const DEFAULT_NAMESPACE: &str = "kube-system";
/// The lifetime asked of each token (Go's `defaultExpirationSeconds`).
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// The share of a token's lifetime after which the next is requested (Go's 20% leeway).
pub const DEFAULT_REFRESH_AT: f64 = 0.8;
/// A token lifetime shorter than this counts as this (Go's guard against clock skew).
const MIN_LIFETIME: Duration = Duration::from_secs(600);
/// How long one API call of a token request may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The first retry delay of a failed token request; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest retry delay of a failed token request.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long the first token of an account may take, retries included, before
/// [`ServiceAccountClients::client`] gives up.
const FIRST_TOKEN_DEADLINE: Duration = Duration::from_secs(60);
/// The least time between two token requests caused by `401` answers.
const MIN_REFRESH_GAP: Duration = Duration::from_secs(1);

/// Why a ServiceAccount's client could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceAccountError {
    /// No token could be had within the deadline (the last error is given).
    #[error(
        "--use-service-account-credentials: no token for the ServiceAccount {namespace}/{name} \
         within {deadline:?}: {last}"
    )]
    NoToken {
        /// The ServiceAccount's namespace.
        namespace: String,
        /// The ServiceAccount.
        name: String,
        /// How long it tried.
        deadline: Duration,
        /// The last failure.
        last: String,
    },
    /// The client could not be built from the manager's configuration.
    #[error("--use-service-account-credentials: building the client of {name}: {source}")]
    Client {
        /// The ServiceAccount.
        name: String,
        /// Why.
        source: super::ClientConfigError,
    },
    /// The cancellation token fired first.
    #[error("cancelled while requesting a token for the ServiceAccount {0}")]
    Cancelled(String),
}

/// Makes and keeps the per-controller clients. Cloning shares them. See the
/// [module docs](self).
#[derive(Clone)]
pub struct ServiceAccountClients {
    inner: Arc<Inner>,
}

struct Inner {
    root: Client,
    /// The manager's configuration without its credentials.
    anonymous: kube::Config,
    layer: ApiLayer,
    namespace: String,
    lifetime: Duration,
    refresh_at: f64,
    /// Each account's client, and the token that ends its renewals.
    accounts: tokio::sync::Mutex<BTreeMap<String, (Client, CancellationToken)>>,
}

impl ServiceAccountClients {
    /// Clients for ServiceAccounts in `kube-system`, reaching the API server `config` names
    /// (its credentials are dropped: Go's `AnonymousClientConfig`), through `layer`. `root`
    /// is the manager's own client: it creates the accounts and requests their tokens.
    #[must_use]
    pub fn new(root: Client, config: &kube::Config, layer: ApiLayer) -> Self {
        let mut anonymous = config.clone();
        anonymous.auth_info = AuthInfo::default();
        Self {
            inner: Arc::new(Inner {
                root,
                anonymous,
                layer,
                namespace: DEFAULT_NAMESPACE.to_owned(),
                lifetime: DEFAULT_TOKEN_LIFETIME,
                refresh_at: DEFAULT_REFRESH_AT,
                accounts: tokio::sync::Mutex::default(),
            }),
        }
    }

    /// Changes a setting; only before the value is cloned (a clone shares the settings).
    fn set(mut self, change: impl FnOnce(&mut Inner)) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => change(inner),
            None => {
                tracing::warn!("ServiceAccountClients: a setting changed after cloning is ignored")
            }
        }
        self
    }

    /// The accounts' namespace (default `kube-system`). Call before cloning.
    #[must_use]
    pub fn with_namespace(self, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        self.set(|i| i.namespace = namespace)
    }

    /// The lifetime asked of each token (default one hour; the API server's minimum is 10
    /// minutes). Call before cloning.
    #[must_use]
    pub fn with_token_lifetime(self, lifetime: Duration) -> Self {
        self.set(|i| i.lifetime = lifetime)
    }

    /// The share of a token's lifetime after which the next is requested (default 0.8;
    /// clamped to 0.001..=1). Call before cloning.
    #[must_use]
    pub fn with_refresh_at(self, share: f64) -> Self {
        let share = if share.is_finite() {
            share.clamp(0.001, 1.0)
        } else {
            DEFAULT_REFRESH_AT
        };
        self.set(|i| i.refresh_at = share)
    }

    /// The client of the ServiceAccount `name`: made on the first call (the account
    /// created if missing, a first token requested, retried for up to a minute) and kept
    /// fresh by a task that ends when `cancel` fires; later calls return the same client
    /// while that task runs, and make a new one after.
    ///
    /// # Errors
    ///
    /// No token within the deadline, `cancel` fired first, or the client could not be
    /// built.
    pub async fn client(
        &self,
        name: &str,
        cancel: &CancellationToken,
    ) -> Result<Client, ServiceAccountError> {
        let mut accounts = self.inner.accounts.lock().await;
        if let Some((client, renewing)) = accounts.get(name)
            && !renewing.is_cancelled()
        {
            return Ok(client.clone());
        }
        let slot = Arc::new(TokenSlot::default());
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let lifetime = loop {
            let attempt = cancel.run_until_cancelled(self.inner.token(name)).await;
            match attempt {
                None => return Err(ServiceAccountError::Cancelled(name.to_owned())),
                Some(Ok((token, lifetime))) => {
                    slot.set(&token);
                    break lifetime;
                }
                Some(Err(e)) if started.elapsed() + backoff >= FIRST_TOKEN_DEADLINE => {
                    return Err(ServiceAccountError::NoToken {
                        namespace: self.inner.namespace.clone(),
                        name: name.to_owned(),
                        deadline: FIRST_TOKEN_DEADLINE,
                        last: e,
                    });
                }
                Some(Err(e)) => {
                    tracing::warn!(account = name, error = %e, retry_in = ?backoff, "cannot get a token for the controller's ServiceAccount");
                    if cancel
                        .run_until_cancelled(tokio::time::sleep(backoff))
                        .await
                        .is_none()
                    {
                        return Err(ServiceAccountError::Cancelled(name.to_owned()));
                    }
                    backoff = next_backoff(backoff);
                }
            }
        };
        let client = super::transport::builder(&self.inner.anonymous)
            .map_err(|source| ServiceAccountError::Client {
                name: name.to_owned(),
                source,
            })?
            .with_layer(&BearerLayer { slot: slot.clone() })
            // A rate limit of its own per controller, as Go's clients.
            .with_layer(&self.inner.layer.for_controller())
            .build();
        tracing::info!(
            account = %format!("system:serviceaccount:{}:{name}", self.inner.namespace),
            refresh_in = ?refresh_delay(lifetime, self.inner.refresh_at),
            "controller client uses its ServiceAccount's token"
        );
        tokio::spawn(keep_fresh(
            self.inner.clone(),
            name.to_owned(),
            slot,
            lifetime,
            cancel.clone(),
        ));
        accounts.insert(name.to_owned(), (client.clone(), cancel.clone()));
        Ok(client)
    }
}

impl Inner {
    /// One token for the account `name`: gets (or creates) the account, then requests a
    /// token. Each call bounded by [`CALL_TIMEOUT`]. Returns the token and its lifetime.
    async fn token(&self, name: &str) -> Result<(String, Duration), String> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.root.clone(), &self.namespace);
        let existing = with_timeout("get the ServiceAccount", accounts.get_opt(name)).await?;
        if existing.is_none() {
            let account = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                ..ServiceAccount::default()
            };
            match with_timeout(
                "create the ServiceAccount",
                accounts.create(&PostParams::default(), &account),
            )
            .await
            {
                Ok(_) => tracing::info!(
                    namespace = %self.namespace,
                    account = name,
                    "created the controller's ServiceAccount"
                ),
                // Someone else created it meanwhile.
                Err(CallError::Api(409, _)) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        let request = TokenRequest {
            spec: field(TokenRequestSpec {
                expiration_seconds: Some(i64::try_from(self.lifetime.as_secs()).unwrap_or(3600)),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let asked = Instant::now();
        let answer = with_timeout(
            "request a token",
            accounts.create_token_request(name, &PostParams::default(), &request),
        )
        .await?;
        // The status's fields are optional from Kubernetes 1.36's types on, required before
        // (`super::fields`); an empty token is none at every version.
        let Some(status) = answer.status else {
            return Err("request a token: the answer holds no token".to_owned());
        };
        let Some(token) = optional::<String>(status.token).filter(|t| !t.is_empty()) else {
            return Err("request a token: the answer holds no token".to_owned());
        };
        // The lifetime left by the server's clock; the one asked for when it gives none.
        let left = optional::<Time>(status.expiration_timestamp).and_then(|t| {
            let left = t.0.duration_since(k8s_openapi::jiff::Timestamp::now());
            left.is_positive().then(|| left.unsigned_abs())
        });
        let lifetime = left.unwrap_or_else(|| self.lifetime.saturating_sub(asked.elapsed()));
        Ok((token, lifetime))
    }
}

/// A failed API call of a token request.
#[derive(Debug, thiserror::Error)]
enum CallError {
    /// The API server answered with this status code; the message says what was done.
    #[error("{1}")]
    Api(u16, String),
    /// Any other failure of what was being done.
    #[error("{0}: {1}")]
    Other(&'static str, String),
}

impl From<CallError> for String {
    fn from(e: CallError) -> Self {
        e.to_string()
    }
}

/// `call`, given up after [`CALL_TIMEOUT`]; errors name `what` was being done.
async fn with_timeout<T>(
    what: &'static str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(kube::Error::Api(status))) => {
            Err(CallError::Api(status.code, format!("{what}: {status}")))
        }
        Ok(Err(e)) => Err(CallError::Other(what, e.to_string())),
        Err(_) => Err(CallError::Other(
            what,
            format!("no answer within {CALL_TIMEOUT:?}"),
        )),
    }
}

/// When to request the next token for one that lives `lifetime`: at `share` of it, a
/// lifetime under 10 minutes counting as 10 (Go: `lifetime - leeway`, pinned likewise).
pub(crate) fn refresh_delay(lifetime: Duration, share: f64) -> Duration {
    lifetime.max(MIN_LIFETIME).mul_f64(share)
}

fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_BACKOFF)
}

/// Keeps the account's token fresh until `cancel` fires: the next one at the refresh time,
/// or at once after a `401` to the current one; failures retried with backoff, the old
/// token in use meanwhile.
async fn keep_fresh(
    inner: Arc<Inner>,
    name: String,
    slot: Arc<TokenSlot>,
    lifetime: Duration,
    cancel: CancellationToken,
) {
    let mut next = refresh_delay(lifetime, inner.refresh_at);
    let mut fetched = Instant::now();
    loop {
        let refused = tokio::select! {
            () = tokio::time::sleep(next) => false,
            () = slot.refused.notified() => true,
            () = cancel.cancelled() => return,
        };
        if refused {
            let gap = MIN_REFRESH_GAP.saturating_sub(fetched.elapsed());
            if cancel
                .run_until_cancelled(tokio::time::sleep(gap))
                .await
                .is_none()
            {
                return;
            }
            tracing::info!(account = %name, "the API server refused the controller's token; requesting a new one");
        }
        let mut backoff = FIRST_BACKOFF;
        loop {
            match cancel.run_until_cancelled(inner.token(&name)).await {
                None => return,
                Some(Ok((token, lifetime))) => {
                    slot.set(&token);
                    fetched = Instant::now();
                    next = refresh_delay(lifetime, inner.refresh_at);
                    tracing::debug!(account = %name, refresh_in = ?next, "renewed the controller's token");
                    break;
                }
                Some(Err(e)) => {
                    tracing::warn!(account = %name, error = %e, retry_in = ?backoff, "cannot renew the controller's token; the current one stays in use");
                    if cancel
                        .run_until_cancelled(tokio::time::sleep(backoff))
                        .await
                        .is_none()
                    {
                        return;
                    }
                    backoff = next_backoff(backoff);
                }
            }
        }
    }
}

/// The current token of one account, as an `Authorization` header value, and the signal
/// that the API server refused it.
#[derive(Default)]
struct TokenSlot {
    header: RwLock<Option<HeaderValue>>,
    refused: Notify,
}

impl TokenSlot {
    fn set(&self, token: &str) {
        match HeaderValue::from_str(&format!("Bearer {token}")) {
            Ok(mut value) => {
                value.set_sensitive(true);
                *self.header.write() = Some(value);
            }
            Err(_) => {
                tracing::warn!("the API server gave a token that is no header value; ignored")
            }
        }
    }

    fn current(&self) -> Option<HeaderValue> {
        self.header.read().clone()
    }

    /// The API server answered `401` to a request that carried `used`: a refresh, unless a
    /// newer token is already in place.
    fn was_refused(&self, used: &HeaderValue) {
        if self.current().as_ref() == Some(used) {
            self.refused.notify_one();
        }
    }
}

/// Sets each request's `Authorization` header to the account's current token and reports
/// a `401`.
struct BearerLayer {
    slot: Arc<TokenSlot>,
}

impl<S> Layer<S> for BearerLayer {
    type Service = BearerService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerService {
            inner,
            slot: self.slot.clone(),
        }
    }
}

/// The service [`BearerLayer`] makes.
struct BearerService<S> {
    inner: S,
    slot: Arc<TokenSlot>,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for BearerService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let used = self.slot.current();
        if let Some(value) = &used {
            req.headers_mut().insert(AUTHORIZATION, value.clone());
        }
        let slot = self.slot.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            if response.status() == StatusCode::UNAUTHORIZED
                && let Some(used) = &used
            {
                slot.was_refused(used);
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_token_is_asked_at_80_percent_of_at_least_10_minutes() {
        let share = DEFAULT_REFRESH_AT;
        assert_eq!(
            refresh_delay(Duration::from_secs(3600), share),
            Duration::from_secs(2880)
        );
        // Shorter lifetimes (a skewed clock) count as 10 minutes, as in Go.
        assert_eq!(
            refresh_delay(Duration::from_secs(30), share),
            Duration::from_secs(480)
        );
        assert_eq!(
            refresh_delay(Duration::from_secs(600), 0.005),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn backoff_doubles_up_to_30_seconds() {
        let mut b = FIRST_BACKOFF;
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(b.as_millis());
            b = next_backoff(b);
        }
        assert_eq!(
            seen,
            [
                500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000
            ]
        );
    }

    #[tokio::test]
    async fn requests_carry_the_current_token_and_a_401_asks_for_a_new_one() {
        let slot = Arc::new(TokenSlot::default());
        slot.set("one");
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut svc = BearerLayer { slot: slot.clone() }.layer(tower::service_fn({
            let seen = seen.clone();
            move |req: Request<()>| {
                let auth = req.headers().get(AUTHORIZATION).cloned();
                seen.lock().push(auth.clone());
                async move {
                    let status =
                        if auth.as_ref().and_then(|v| v.to_str().ok()) == Some("Bearer one") {
                            StatusCode::UNAUTHORIZED
                        } else {
                            StatusCode::OK
                        };
                    Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap())
                }
            }
        }));
        let refused = svc.call(Request::new(())).await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        // The refusal was signalled: a waiter is woken at once.
        tokio::time::timeout(Duration::from_secs(1), slot.refused.notified())
            .await
            .expect("a refresh was asked for");
        slot.set("two");
        assert_eq!(
            svc.call(Request::new(())).await.unwrap().status(),
            StatusCode::OK
        );
        // A late 401 to the old token after the new one is in place asks for nothing.
        slot.was_refused(&HeaderValue::from_static("Bearer one"));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), slot.refused.notified())
                .await
                .is_err()
        );
        let seen = seen.lock();
        assert_eq!(seen[0].as_ref().unwrap(), "Bearer one");
        assert!(seen[0].as_ref().unwrap().is_sensitive());
        assert_eq!(seen[1].as_ref().unwrap(), "Bearer two");
    }
}
