//! A handle on the controller manager's Prometheus registry, for a provider's own metrics.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::registry::{Metric, Registry};

/// The `prometheus-client` crate [`MetricsRegistry`] is built on, for metrics of your own at
/// the same version.
pub use prometheus_client;

/// A shared Prometheus registry: what [`InitContext::metrics`](crate::InitContext::metrics)
/// hands a provider so that its own metrics (a cache's hits, rate-limit waits) are served on
/// the controller manager's `/metrics` beside the framework's.
///
/// Cloning is cheap and shares the registry. Register each metric once: `initialize` runs
/// again on every leadership term, against the same registry.
///
/// ```
/// use ccm_core::provider::MetricsRegistry;
/// use ccm_core::provider::prometheus_client::metrics::counter::Counter;
///
/// let registry = MetricsRegistry::new();
/// let hits = Counter::<u64>::default();
/// registry.register("acme_cache_hits", "Instance lookups answered from the cache.", hits.clone());
/// hits.inc();
/// assert!(registry.encode().contains("acme_cache_hits_total 1"));
/// ```
#[derive(Clone, Default)]
pub struct MetricsRegistry {
    inner: Arc<Mutex<Registry>>,
}

impl fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsRegistry").finish_non_exhaustive()
    }
}

impl From<Registry> for MetricsRegistry {
    /// Shares `registry`, with what is registered in it already.
    fn from(registry: Registry) -> Self {
        Self {
            inner: Arc::new(Mutex::new(registry)),
        }
    }
}

impl MetricsRegistry {
    /// An empty registry of its own (the controller manager passes its shared one).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `metric`. `name` is exported as given, plus `_total` for a counter; the
    /// help text gets a closing period.
    pub fn register(&self, name: impl Into<String>, help: impl Into<String>, metric: impl Metric) {
        self.with_registry(|r| r.register(name, help, metric));
    }

    /// Runs `f` with the registry, for what [`register`](Self::register) cannot do:
    /// metrics with a unit, collectors, sub-registries with a prefix or labels.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every metric in the Prometheus text format 0.0.4.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        self.with_registry(|r| {
            // Writing to a String cannot fail; an encoding error leaves the output short.
            let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, r);
        });
        out
    }
}
