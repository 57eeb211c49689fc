//! A DigitalOcean-like HTTP cloud for `ccm-core`: the cloud's [`api`] (its wire types and a
//! typed HTTP [`Client`]) and [`DoLikeCloud`], a provider that talks to the API over HTTP.
//!
//! This is the example of how a real provider is written: it owns its API client and knows
//! nothing of the simulator that tests and demos run it against (crate
//! `ccm-do-like-simulator`, which depends on this one). See `docs/do-like-cloud.md` for
//! the cloud-config, the annotations and the design choices (the droplet-list cache, the
//! load balancer's ID annotation, cluster tags).
//!
//! ```no_run
//! use ccm_core::provider::ProviderRegistry;
//! let mut registry = ProviderRegistry::new();
//! ccm_do_like_cloud::register(&mut registry).unwrap();
//! ```
#![forbid(unsafe_code)]

mod annotations;
pub mod api;
mod config;
mod flags;
mod instances;
mod load_balancer;
mod routes;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use ccm_core::app::ProviderFlags;
use ccm_core::provider::{
    BoxError, CloudConfig, CloudError, CloudProvider, CloudResult, InitContext, Instances,
    LoadBalancer, ProviderRegistry, RegistryError, Routes, ServiceAnnotator,
};

pub use self::annotations::{
    ANNOTATION_ALGORITHM, ANNOTATION_ALLOW_RULES, ANNOTATION_CERTIFICATE_ID,
    ANNOTATION_CERTIFICATE_NAME, ANNOTATION_DENY_RULES,
    ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS, ANNOTATION_DISOWN,
    ANNOTATION_ENABLE_BACKEND_KEEPALIVE, ANNOTATION_ENABLE_PROXY_PROTOCOL,
    ANNOTATION_FIREWALL_MANAGED, ANNOTATION_HEALTH_CHECK_HEALTHY, ANNOTATION_HEALTH_CHECK_INTERVAL,
    ANNOTATION_HEALTH_CHECK_PATH, ANNOTATION_HEALTH_CHECK_PORT, ANNOTATION_HEALTH_CHECK_PROTOCOL,
    ANNOTATION_HEALTH_CHECK_TIMEOUT, ANNOTATION_HEALTH_CHECK_UNHEALTHY, ANNOTATION_HOSTNAME,
    ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS, ANNOTATION_HTTP_PORTS, ANNOTATION_HTTP2_PORTS,
    ANNOTATION_HTTP3_PORT, ANNOTATION_IP, ANNOTATION_LOAD_BALANCER_ID, ANNOTATION_NAME,
    ANNOTATION_NETWORK, ANNOTATION_NETWORK_STACK, ANNOTATION_OVERRIDE_HEALTH_CHECK,
    ANNOTATION_PROTOCOL, ANNOTATION_REDIRECT_HTTP_TO_HTTPS, ANNOTATION_SIZE_SLUG,
    ANNOTATION_SIZE_UNIT, ANNOTATION_STICKY_SESSIONS_COOKIE_NAME,
    ANNOTATION_STICKY_SESSIONS_COOKIE_TTL, ANNOTATION_STICKY_SESSIONS_TYPE, ANNOTATION_SUBNET_UUID,
    ANNOTATION_TLS_PASSTHROUGH, ANNOTATION_TLS_PORTS, ANNOTATION_TYPE, DIGITALOCEAN_ANNOTATIONS,
    KUBE_PROXY_HEALTH_PORT, LEGACY_ALIASES, LEGACY_ANNOTATION_LOAD_BALANCER_ID,
};
pub use self::api::{ApiError, ApiToken, CacheStats, Client, ClientOptions, RateWindow};
pub use self::config::DoLikeConfig;
pub use self::flags::DoLikeFlags;
pub use self::load_balancer::{cluster_tag, owner_tag};

/// The provider's name: the `--cloud-provider` value and the scheme of provider IDs
/// (`digitalocean://<droplet id>`).
pub const PROVIDER_NAME: &str = "digitalocean";

/// The DigitalOcean-like provider.
#[derive(Debug)]
pub struct DoLikeCloud {
    client: Client,
    region: String,
    /// Writes the LB ID annotation; set by `initialize` (absent when the provider is used
    /// without a cluster, as in its own tests).
    annotator: OnceLock<ServiceAnnotator>,
    /// Whether the API serves the routes extension: [`ROUTES_UNKNOWN`] until `initialize`
    /// probed it.
    routes: AtomicU8,
}

/// Not probed yet, or the probe failed: routes are offered (a failing call is an error the
/// route controller retries, like any other).
const ROUTES_UNKNOWN: u8 = 0;
/// The API answered `/v2/x-routes`.
const ROUTES_SERVED: u8 = 1;
/// The API answered 404 to `/v2/x-routes` (DigitalOcean's): routes are not offered.
const ROUTES_ABSENT: u8 = 2;

impl DoLikeCloud {
    /// A provider over `client`; `region` is the default region of new load balancers.
    pub fn new(client: Client, region: impl Into<String>) -> Self {
        Self {
            client,
            region: region.into(),
            annotator: OnceLock::new(),
            routes: AtomicU8::new(ROUTES_UNKNOWN),
        }
    }

    /// Remembers load balancer IDs on Services with `annotator` (what `initialize` does with
    /// the controller manager's client); for using the provider outside a controller manager.
    pub fn with_service_annotator(self, annotator: ServiceAnnotator) -> Self {
        let _ = self.annotator.set(annotator);
        self
    }

    /// Builds the provider from a parsed cloud-config (reads the token).
    pub fn from_config(config: &DoLikeConfig) -> Result<Self, BoxError> {
        let token = config.token()?;
        let client = Client::new(config.client_options(token))?;
        Ok(Self::new(client, config.region.clone()))
    }

    /// Asks the API once whether it serves the `/v2/x-routes` extension (what `initialize`
    /// does; a later call asks again only if no answer said so either way). Without it,
    /// [`routes`](CloudProvider::routes) is `None` from then on, so the route controller is
    /// not started. A failed probe leaves routes offered and is logged.
    pub async fn probe_routes(&self) {
        if self.routes.load(Ordering::Relaxed) != ROUTES_UNKNOWN {
            return;
        }
        match self.client.serves_routes().await {
            Ok(true) => {
                tracing::info!("the API serves the /v2/x-routes extension: routes are offered");
                self.routes.store(ROUTES_SERVED, Ordering::Relaxed);
            }
            Ok(false) => {
                tracing::info!(
                    "the API does not serve /v2/x-routes (DigitalOcean's does not): routes are \
                     not offered"
                );
                self.routes.store(ROUTES_ABSENT, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(
                error = %ccm_core::provider::display_chain(&e),
                "could not tell whether the API serves /v2/x-routes; routes stay offered"
            ),
        }
    }

    /// The API client (for its cache counters).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Registers the provider under [`PROVIDER_NAME`]; it needs a cloud-config.
    pub fn register(registry: &mut ProviderRegistry) -> Result<(), RegistryError> {
        Self::register_with_flags(registry, ProviderFlags::new())
    }

    /// [`register`](Self::register), reading the provider's own flags from `flags` when
    /// the provider is built: give the controller manager a clone
    /// ([`CloudControllerManager::with_flags`](ccm_core::app::CloudControllerManager::with_flags)),
    /// which fills it from the command line first. A flag given wins over the cloud-config.
    pub fn register_with_flags(
        registry: &mut ProviderRegistry,
        flags: ProviderFlags<DoLikeFlags>,
    ) -> Result<(), RegistryError> {
        // ANCHOR: register_with_flags
        registry.register(PROVIDER_NAME, move |config: Option<&CloudConfig>| {
            let Some(config) = config else {
                return Err("the digitalocean provider needs --cloud-config".into());
            };
            let mut parsed = DoLikeConfig::parse(config)?;
            // The command line is parsed by the time the factory runs (`None` when no
            // command line was: a test that builds the provider itself).
            if let Some(flags) = flags.get() {
                flags.apply(&mut parsed);
            }
            Ok(Arc::new(Self::from_config(&parsed)?) as Arc<dyn CloudProvider>)
        })?;
        // ANCHOR_END: register_with_flags
        Ok(())
    }
}

/// Registers [`DoLikeCloud`] (see [`DoLikeCloud::register`]).
pub fn register(registry: &mut ProviderRegistry) -> Result<(), RegistryError> {
    DoLikeCloud::register(registry)
}

#[async_trait]
impl CloudProvider for DoLikeCloud {
    fn provider_name(&self) -> &str {
        PROVIDER_NAME
    }

    fn has_cluster_id(&self) -> bool {
        true
    }

    async fn initialize(&self, ctx: InitContext) -> CloudResult<()> {
        // A second initialize (a new leadership term) keeps the first annotator: same cluster.
        let _ = self.annotator.set(ctx.service_annotator());
        self.probe_routes().await;
        Ok(())
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }

    /// Offered unless `initialize` found that the API does not serve `/v2/x-routes`
    /// (DigitalOcean's API does not; the simulator does).
    fn routes(&self) -> Option<&dyn Routes> {
        (self.routes.load(Ordering::Relaxed) != ROUTES_ABSENT).then_some(self as &dyn Routes)
    }
}

/// Maps an API error to a [`CloudError`]: a rate limit keeps its delay; a request that did
/// not complete or a server error (5xx) is [`CloudError::Unavailable`], so the framework
/// retries it as soon as the API answers again.
pub(crate) fn cloud_error(context: &str, err: ApiError) -> CloudError {
    // ANCHOR: unavailable
    match err {
        ApiError::RateLimited(after) => {
            CloudError::retry_after(format!("{context}: rate limited by the API"), after)
        }
        err @ (ApiError::Transport(_) | ApiError::Api { status: 500.., .. }) => {
            CloudError::unavailable(context.to_owned(), err)
        }
        other => CloudError::provider(context.to_owned(), other),
    }
    // ANCHOR_END: unavailable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16) -> ApiError {
        ApiError::Api {
            status,
            id: "x".into(),
            message: "m".into(),
            request_id: String::new(),
        }
    }

    #[test]
    fn server_errors_are_unavailable_and_refusals_are_not() {
        for status in [500, 502, 503, 504] {
            assert!(cloud_error("c", api(status)).is_unavailable(), "{status}");
        }
        for status in [400, 403, 404, 409, 422] {
            assert!(!cloud_error("c", api(status)).is_unavailable(), "{status}");
        }
        let limited = cloud_error(
            "c",
            ApiError::RateLimited(std::time::Duration::from_secs(2)),
        );
        assert_eq!(
            limited.retry_after_delay(),
            Some(std::time::Duration::from_secs(2))
        );
    }
}
