//! The health loop, with `--service-conditions`: once a health period, it asks the provider
//! how each ensured load balancer serves ([`LoadBalancer::load_balancer_health`]) and writes
//! the answer as the Service's `LoadBalancerDegraded` condition, only when it changes, so a
//! steady state costs cloud reads and no API write. A provider that does not report health
//! ([`CloudError::NotImplemented`]) is asked once and never again. The loop runs beside the
//! workers; its write is a guarded patch of the conditions alone, so it never undoes theirs.
//!
//! [`LoadBalancer::load_balancer_health`]: ccm_provider::LoadBalancer::load_balancer_health
//! [`CloudError::NotImplemented`]: ccm_provider::CloudError::NotImplemented

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;

use super::ServiceKey;
use super::decision::LbState;
use super::decision::conditions::{Observed, wanted};
use super::decision::ingress::ingress;
use super::decision::wants::{is_deleting, wants_load_balancer};
use super::sync::Worker;
use super::writes;
use ccm_provider::LoadBalancerHealth;

/// Whether the loop goes on after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Continue {
    /// Ask again next period.
    Yes,
    /// The provider reports no health: stop.
    No,
}

impl Worker {
    /// Runs a health pass every `period` until `cancel` fires or the provider turns out to
    /// report no health.
    pub(super) async fn run_health(&self, period: Duration, cancel: &CancellationToken) {
        loop {
            if cancel
                .run_until_cancelled(tokio::time::sleep(period))
                .await
                .is_none()
            {
                return;
            }
            let pass = cancel.run_until_cancelled(self.health_pass()).await;
            if pass != Some(Continue::Yes) {
                return;
            }
        }
    }

    /// One pass: the health of every ensured load balancer of a Service that still wants
    /// it and has its address, written when it changed.
    pub(super) async fn health_pass(&self) -> Continue {
        let keys: Vec<ServiceKey> = {
            let records = self.records.lock();
            let mut keys: Vec<ServiceKey> = records
                .iter()
                .filter(|(_, r)| matches!(r.lb, LbState::Applied { .. }))
                .map(|(k, _)| k.clone())
                .collect();
            keys.sort();
            keys
        };
        let Ok(lb) = self.load_balancer() else {
            return Continue::No;
        };
        for key in keys {
            let Some(service) = self
                .services
                .store()
                .get(&ObjectRef::new(&key.name).within(&key.namespace))
            else {
                continue;
            };
            if !self.serves(&service) {
                continue;
            }
            let observed = match lb.load_balancer_health(self.cluster(), &service).await {
                Ok(LoadBalancerHealth::Degraded { reason, message }) => {
                    Observed::Health(Some((reason, message)))
                }
                // Healthy, or a state newer than this controller: not degraded.
                Ok(_) => Observed::Health(None),
                Err(err) if err.is_not_implemented() => {
                    tracing::info!(
                        "the provider reports no load balancer health; no LoadBalancerDegraded conditions"
                    );
                    return Continue::No;
                }
                Err(err) => {
                    tracing::debug!(service = %key, error = %err.chain_to_string(), "failed to read the load balancer's health");
                    continue;
                }
            };
            let wanted = wanted(&observed, true);
            if let Err(e) =
                writes::set_status(&self.api(&key.namespace), service, None, &wanted).await
            {
                tracing::debug!(service = %key, error = %e, "failed to write the LoadBalancerDegraded condition");
            }
        }
        Continue::Yes
    }

    /// Whether the Service's load balancer is one whose health is reported: wanted, not
    /// being deleted, with its address written.
    fn serves(&self, service: &Service) -> bool {
        wants_load_balancer(self.records.classes(), service)
            && !is_deleting(service)
            && !ingress(service).is_empty()
    }
}

/// The default health period: a minute.
pub(super) const DEFAULT_HEALTH_PERIOD: Duration = Duration::from_secs(60);
