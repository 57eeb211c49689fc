//! The fake cloud's own metrics, registered on the controller manager's `/metrics` by
//! `initialize`: what the benchmark reads to see the cloud's state from outside the process
//! (every load balancer pointed at every Node, no route created twice, no load balancer
//! updated to the hosts it had). The Go reference CCM in `bench/go-reference-ccm` exports
//! the same names.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use ccm_core::provider::MetricsRegistry;
use ccm_core::provider::prometheus_client::metrics::counter::Counter;
use ccm_core::provider::prometheus_client::metrics::gauge::Gauge;

use crate::FakeLoadBalancer;

/// The gauges and counters; cheap to update, read at scrape time.
#[derive(Debug, Default)]
pub(crate) struct CloudMetrics {
    load_balancers: Gauge,
    hosts_min: Gauge,
    duplicate_route_creates: Counter<u64, AtomicU64>,
    redundant_load_balancer_updates: Counter<u64, AtomicU64>,
}

impl CloudMetrics {
    /// New metrics, registered in `metrics`.
    pub(crate) fn register(metrics: &MetricsRegistry) -> Self {
        let this = Self::default();
        // ANCHOR: register_metric
        metrics.register(
            "fake_cloud_load_balancers",
            "Load balancers in the fake cloud.",
            this.load_balancers.clone(),
        );
        // ANCHOR_END: register_metric
        metrics.register(
            "fake_cloud_load_balancer_hosts_min",
            "The fewest Nodes any load balancer of the fake cloud points at (0 without any).",
            this.hosts_min.clone(),
        );
        metrics.register(
            "fake_cloud_duplicate_route_creates",
            "Route creates the fake cloud refused because the route existed.",
            this.duplicate_route_creates.clone(),
        );
        metrics.register(
            "fake_cloud_redundant_load_balancer_updates",
            "Load balancer updates that gave a load balancer the host set (Node name to \
             provider ID) it already had.",
            this.redundant_load_balancer_updates.clone(),
        );
        this
    }

    /// Publishes the load balancers' count and their fewest hosts.
    pub(crate) fn load_balancers_changed(&self, lbs: &BTreeMap<String, FakeLoadBalancer>) {
        let count = i64::try_from(lbs.len()).unwrap_or(i64::MAX);
        let min = lbs.values().map(|lb| lb.nodes.len()).min().unwrap_or(0);
        self.load_balancers.set(count);
        self.hosts_min.set(i64::try_from(min).unwrap_or(i64::MAX));
    }

    /// Counts a refused duplicate route create.
    pub(crate) fn duplicate_route_create(&self) {
        self.duplicate_route_creates.inc();
    }

    /// Counts an update that gave a load balancer the host set it had.
    pub(crate) fn redundant_load_balancer_update(&self) {
        self.redundant_load_balancer_updates.inc();
    }
}
