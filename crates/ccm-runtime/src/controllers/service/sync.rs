//! One pass of the work queue for one Service: read it from the cache, mark its record,
//! take a [`Known`](super::decision::Known) copy of the record and the eligible Nodes, let
//! the pure [`plan`] (or [`plan_gone`], for a Service gone from the cache) pick the step,
//! run that step (the cloud steps are in `steps`), then record how it ended, tell the
//! node-sync loop, and report a failure with [`Worker::report`], the one function through
//! which every failure of the controller becomes its Warning event, its log line and its
//! count. The [`Worker`] is what every worker shares.

use crate::shadow::{self, ControllerShadow};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::ServiceKey;
use super::decision::conditions::{Observed, wanted};
use super::decision::ingress::ingress;
use super::decision::nodes::SelectorError;
use super::decision::wants::{is_deleting, wants_load_balancer};
use super::decision::{GoneStep, Step, plan, plan_gone};
use super::eligible::EligibleNodes;
use super::failure::{Failure, SyncError, cut_message};
use super::node_sync::NodeSync;
use super::records::{Records, start_sync};
use super::writes;
use crate::events::EventRecorder;
use crate::informer::Informer;
use crate::metrics::ControllerMetrics;
use crate::workqueue::Outcome;
use ccm_provider::{CloudError, CloudProvider, LoadBalancer};

/// Where the workers count (Go's `service_controller_*` metrics); unregistered stand-ins
/// without [`ServiceControllerConfig::with_metrics`](super::ServiceControllerConfig::with_metrics).
pub(super) struct Metrics {
    /// `service_controller_loadbalancer_sync_total`.
    pub(super) load_balancer_syncs: Counter,
    /// `service_controller_nodesync_error_total`.
    pub(super) node_sync_errors: Counter,
    /// `service_controller_update_loadbalancer_host_latency_seconds`.
    pub(super) update_host_latency: Histogram,
}

impl From<&ControllerMetrics> for Metrics {
    fn from(metrics: &ControllerMetrics) -> Self {
        Self {
            load_balancer_syncs: metrics.loadbalancer_sync.clone(),
            node_sync_errors: metrics.nodesync_error.clone(),
            update_host_latency: metrics.update_loadbalancer_host_latency.clone(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            load_balancer_syncs: Counter::default(),
            node_sync_errors: Counter::default(),
            update_host_latency: Histogram::new([1.0]),
        }
    }
}

/// What the service workers share: the clients, the caches, the records and the node-sync
/// loop they report to.
pub(super) struct Worker {
    /// For the Services' patches.
    pub(super) client: Client,
    /// The cloud.
    pub(super) provider: Arc<dyn CloudProvider>,
    /// The shared Service informer.
    pub(super) services: Informer<Service>,
    /// Events under [`COMPONENT`](super::COMPONENT).
    pub(super) recorder: EventRecorder,
    /// What the controller remembers of each Service.
    pub(super) records: Records,
    /// The eligible Nodes, and the loop that waits for the updates it queued.
    pub(super) node_sync: Arc<NodeSync>,
    /// The cluster name given to the provider.
    pub(super) cluster_name: String,
    /// Where the workers count.
    pub(super) metrics: Metrics,
    /// In shadow mode, the plan each sync settles.
    pub(super) shadow: Option<ControllerShadow>,
    /// Whether it writes the Service conditions (`--service-conditions`).
    pub(super) conditions: bool,
    /// The provider's load balancers, with groups of Services sharing one.
    pub(super) shared: super::shared::SharingLoadBalancer,
}

impl Worker {
    /// The provider's load balancers.
    pub(super) fn load_balancer(&self) -> Result<&dyn LoadBalancer, CloudError> {
        self.provider
            .load_balancer()
            .ok_or(CloudError::NotImplemented)?;
        Ok(&self.shared)
    }

    /// The Services of `namespace`.
    pub(super) fn api(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The cluster name given to the provider.
    pub(super) fn cluster(&self) -> &str {
        &self.cluster_name
    }

    /// The eligible Nodes of `service` now: the controller's, narrowed by the Service's
    /// node selector ([`NODE_SELECTOR_ANNOTATION`](super::NODE_SELECTOR_ANNOTATION)) if it
    /// has one; an error when that selector is bad. Services of one selector share one set.
    pub(super) fn eligible_for(&self, service: &Service) -> Result<EligibleNodes, SelectorError> {
        self.node_sync.eligible_for(service)
    }

    /// One pass of the work queue for one Service.
    pub(super) async fn sync(&self, key: &ServiceKey) -> Outcome {
        let _settle = shadow::syncing(self.shadow.as_ref(), key.to_string());
        let started = tokio::time::Instant::now();
        let cached = self
            .services
            .store()
            .get(&ObjectRef::new(&key.name).within(&key.namespace));
        let result = match &cached {
            None => self.sync_gone(key).await,
            Some(service) => self.sync_present(key, service.clone()).await,
        };
        self.records.finished(
            key,
            result.is_ok(),
            result.as_ref().is_err_and(SyncError::is_provisioning),
        );
        self.node_sync.sync_ended(key, result.is_ok());
        match result {
            Ok(()) => {
                tracing::debug!(service = %key, took = ?started.elapsed(), "finished syncing service");
                Outcome::Done
            }
            Err(err) => {
                // The version the failure is about: the cache's, unless the failure names
                // another (the load balancer of a version gone or replaced).
                let subject = err.subject().or(cached.as_ref());
                self.report(key, subject.map(|s| &**s), &Failure::Sync(&err));
                if let Some(service) = cached {
                    if self.conditions {
                        self.failure_conditions(key, service, &err).await;
                    } else if err.refusal_leaves_group() && !ingress(&service).is_empty() {
                        // Refused after its ports left a group's load balancer.
                        let api = self.api(&key.namespace);
                        if let Err(e) = writes::set_ingress(&api, service, &[]).await {
                            tracing::debug!(service = %key, error = %e, "failed to clear the service's ingress");
                        }
                    }
                }
                err.outcome()
            }
        }
    }

    /// The Service is gone from the cache: delete the load balancer its last version may
    /// have had.
    async fn sync_gone(&self, key: &ServiceKey) -> Result<(), SyncError> {
        let last = match plan_gone(self.records.classes(), self.records.known(key).as_ref()) {
            GoneStep::Nothing => return Ok(()),
            GoneStep::Forget => {
                self.records.forget(key);
                return Ok(());
            }
            GoneStep::DeleteLoadBalancer { last } => last,
        };
        self.records.mark_syncing(key);
        let _guard = self.records.syncing_guard(key);
        tracing::info!(service = %key, "service has been deleted; cleaning up its load balancer");
        self.delete_load_balancer_of(&last).await?;
        self.records.forget(key);
        Ok(())
    }

    /// The Service is in the cache: the step [`plan`] picks.
    async fn sync_present(&self, key: &ServiceKey, service: Arc<Service>) -> Result<(), SyncError> {
        // What the controller knew of the Service when the sync began. Its own record (the
        // same UID, or a new one) is marked as being synced at once, before the Nodes are
        // read, so that a node-sync pass from here on queues the Service again; a record of
        // another UID is left as it is until its load balancer has been dealt with.
        let (known, marked) = {
            let mut records = self.records.lock();
            let known = records.get(key).map(|r| r.known());
            let own = known
                .as_ref()
                .is_none_or(|k| k.service.metadata.uid == service.metadata.uid);
            if own {
                start_sync(&mut records, key, &service);
            }
            (known, own)
        };
        let _guard = self.records.syncing_guard(key);
        // A bad node selector stops every step but the clean-up (which needs no Node); it
        // is reported after a replaced Service's load balancer is deleted, below.
        let eligible = self.eligible_for(&service);
        let hosts = eligible
            .as_ref()
            .map_or_else(|_| Arc::default(), |e| e.hosts.clone());
        let plan = plan(self.records.classes(), &service, known.as_ref(), &hosts);

        // A different UID under the same name: the Service was deleted and created again
        // while we looked away. The old one's load balancer goes first.
        if let Some(old) = &plan.delete_replaced {
            tracing::info!(service = %key, "service was replaced; deleting the old load balancer first");
            self.delete_load_balancer_of(old).await?;
            self.records.forget(key);
        }
        if !marked {
            start_sync(&mut self.records.lock(), key, &service);
        }

        let EligibleNodes { nodes, hosts, .. } = match (plan.step, eligible) {
            (Step::CleanUp, _) => return self.clean_up(key, service).await,
            // The load balancer is left as it is: no ensure, no update, no deletion.
            (_, Err(err)) => return Err(SyncError::InvalidNodeSelector(err)),
            (_, Ok(eligible)) => eligible,
        };
        match plan.step {
            Step::UpdateHosts => self.update_hosts(key, &service, &nodes, hosts).await,
            Step::Ensure => self.ensure(key, service).await,
            Step::Nothing | Step::CleanUp => Ok(()),
        }
    }

    /// Writes what a failed sync of a Service that wants its load balancer means to its
    /// conditions (`LoadBalancerProvisioning`, and `LoadBalancerServing` while it has no
    /// address), if they do not say it already. A failed write is logged; the sync is
    /// retried anyway.
    async fn failure_conditions(&self, key: &ServiceKey, service: Arc<Service>, err: &SyncError) {
        if !wants_load_balancer(self.records.classes(), &service)
            || is_deleting(&service)
            || err.subject().is_some()
        {
            return;
        }
        let observed = if err.is_provisioning() {
            Observed::Provisioning(err.message())
        } else {
            match Failure::Sync(err).event() {
                Some(event) => Observed::Failed {
                    reason: event.reason.to_owned(),
                    message: event.note,
                },
                None => return,
            }
        };
        // Refused after its ports left a group's load balancer: that address is not its own.
        let left = err.refusal_leaves_group();
        let serving = !left && !ingress(&service).is_empty();
        let wanted = wanted(&observed, serving);
        let clear = left.then_some(&[][..]);
        if let Err(e) = writes::set_status(&self.api(&key.namespace), service, clear, &wanted).await
        {
            tracing::debug!(service = %key, error = %e, "failed to write the service's conditions");
        }
    }

    /// Reports `failure` of the Service `key`: its Warning event about `service` (the
    /// version the failure is about; none, no event), its warning line, and a failed update
    /// of the Nodes counted in `service_controller_nodesync_error_total`. The one place the
    /// service controller reports what went wrong.
    pub(super) fn report(
        &self,
        key: &ServiceKey,
        service: Option<&Service>,
        failure: &Failure<'_>,
    ) {
        if let Failure::Sync(SyncError::UpdateHosts { .. }) = failure {
            self.metrics.node_sync_errors.inc();
        }
        // The event comes before the line of a failed sync, after that of a load balancer
        // left alone, as it always has.
        let record = || {
            if let (Some(event), Some(service)) = (failure.event(), service) {
                self.recorder
                    .warning(service, event.reason, event.action, event.note);
            }
        };
        match failure {
            Failure::Sync(err) if err.is_provisioning() => {
                let outcome = err.outcome();
                tracing::info!(service = %key, status = %err.message(), ?outcome, "load balancer is still provisioning");
            }
            Failure::Sync(err) => {
                record();
                let outcome = err.outcome();
                tracing::warn!(service = %key, error = %err.message(), ?outcome, "error processing service (will retry)");
            }
            Failure::LeftAlone(err) => {
                tracing::warn!(
                    service = %key,
                    error = %cut_message(err.chain_to_string()),
                    "load balancer is not this service's; left it alone and finished the deletion"
                );
                record();
            }
            Failure::ExistenceUnknown(err) => {
                tracing::warn!(service = %key, error = %err.chain_to_string(), "failed to check if load balancer exists");
            }
        }
    }
}
