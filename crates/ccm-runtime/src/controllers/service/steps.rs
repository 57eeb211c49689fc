//! The steps a sync takes, each Go's counterpart with its Normal events: [`ensure`] (the
//! finalizer first, then `ensure_load_balancer` with the Service's eligible Nodes, then
//! the status),
//! [`update_hosts`] (`update_load_balancer` with new Nodes only), [`clean_up`] (delete the
//! load balancer, then remove the finalizer, then clear the status) and
//! [`delete_load_balancer_of`] (the load balancer of a Service version that is gone or
//! replaced). What a provider's answer means is decided by the pure functions of
//! `decision`; a failure is returned as a [`SyncError`] and reported by the caller
//! ([`Worker::report`]).
//!
//! [`ensure`]: Worker::ensure
//! [`update_hosts`]: Worker::update_hosts
//! [`clean_up`]: Worker::clean_up
//! [`delete_load_balancer_of`]: Worker::delete_load_balancer_of

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};

use super::decision::conditions::{Observed, wanted};
use super::decision::ingress::validate_ingress;
use super::decision::nodes::NodeSet;
use super::decision::{Deletion, delete_call_needed, deletion};
use super::eligible::EligibleNodes;
use super::failure::{Failure, SyncError};
use super::sync::Worker;
use super::writes;
use super::{
    REASON_DELETED, REASON_DELETING, REASON_ENSURED, REASON_ENSURING, REASON_UNAVAILABLE,
    REASON_UPDATED, ServiceKey,
};
use crate::controllers::node_util::node_name;
use ccm_provider::CloudError;

impl Worker {
    /// Go's `processLoadBalancerDelete`: deletes the load balancer of a Service version
    /// that is gone or replaced, with events.
    pub(super) async fn delete_load_balancer_of(
        &self,
        service: &Arc<Service>,
    ) -> Result<(), SyncError> {
        self.recorder.normal(
            &**service,
            REASON_DELETING,
            "DeleteLoadBalancer",
            "Deleting load balancer",
        );
        let result = match self.load_balancer() {
            Ok(lb) => {
                lb.ensure_load_balancer_deleted(self.cluster(), service)
                    .await
            }
            Err(err) => Err(err),
        };
        match deletion(&result) {
            Deletion::Done => {}
            Deletion::LeftAlone(err) => self.left_alone(service, err),
            Deletion::Failed(err) => {
                return Err(SyncError::DeleteGone {
                    service: service.clone(),
                    cause: err.into(),
                });
            }
        }
        self.recorder.normal(
            &**service,
            REASON_DELETED,
            "DeleteLoadBalancer",
            "Deleted load balancer",
        );
        Ok(())
    }

    /// Reports a load balancer the provider left alone on deletion because it is not the
    /// Service's ([`CloudError::NotOwned`]).
    fn left_alone(&self, service: &Service, err: &CloudError) {
        self.report(
            &ServiceKey::of(service),
            Some(service),
            &Failure::LeftAlone(err),
        );
    }

    /// The Service no longer wants a load balancer (or is being deleted): delete it, then
    /// remove the finalizer, then clear the status (Go's delete branch).
    pub(super) async fn clean_up(
        &self,
        key: &ServiceKey,
        service: Arc<Service>,
    ) -> Result<(), SyncError> {
        let lb = self
            .load_balancer()
            .map_err(|e| SyncError::CheckBeforeCleanUp((&e).into()))?;
        let answer = lb.get_load_balancer(self.cluster(), &service).await;
        let exists =
            delete_call_needed(&answer).map_err(|e| SyncError::CheckBeforeCleanUp(e.into()))?;
        if exists {
            tracing::info!(service = %key, "deleting existing load balancer");
            self.recorder.normal(
                &*service,
                REASON_DELETING,
                "DeleteLoadBalancer",
                "Deleting load balancer",
            );
            self.metrics.load_balancer_syncs.inc();
            let result = lb
                .ensure_load_balancer_deleted(self.cluster(), &service)
                .await;
            match deletion(&result) {
                Deletion::Done => {
                    if result.is_err() {
                        tracing::debug!(service = %key, "load balancer implemented elsewhere; ignoring the deletion error");
                    }
                    if let Err(foreign) = &answer {
                        // `get_load_balancer` said the hint leads to a load balancer that
                        // is not the Service's; the deletion left it alone.
                        self.left_alone(&service, foreign);
                    }
                }
                Deletion::LeftAlone(err) => self.left_alone(&service, err),
                Deletion::Failed(err) => return Err(SyncError::CleanUp(err.into())),
            }
        }
        let api = self.api(&key.namespace);
        let written = writes::remove_finalizer(&api, self.records.classes(), service.clone())
            .await
            .map_err(|e| SyncError::RemoveFinalizer((&e).into()))?;
        self.recorder.normal(
            &*service,
            REASON_DELETED,
            "DeleteLoadBalancer",
            "Deleted load balancer",
        );
        if let Some(current) = written.filter(|s| !writes::is_going_away(s)) {
            writes::clear_status(&api, current)
                .await
                .map_err(|e| SyncError::WriteStatus((&e).into()))?;
        }
        self.records.cleaned(key);
        Ok(())
    }

    /// The Service wants a load balancer: finalizer first, then the cloud, then the status.
    pub(super) async fn ensure(
        &self,
        key: &ServiceKey,
        service: Arc<Service>,
    ) -> Result<(), SyncError> {
        tracing::info!(service = %key, "ensuring load balancer");
        // A load balancer that was still coming up at the last look: this ensure goes on
        // with the one that event announced.
        if !self.records.provisioning(key) {
            self.recorder.normal(
                &*service,
                REASON_ENSURING,
                "EnsureLoadBalancer",
                "Ensuring load balancer",
            );
        }
        let api = self.api(&key.namespace);
        let Some(service) = writes::add_finalizer(&api, self.records.classes(), service)
            .await
            .map_err(|e| SyncError::AddFinalizer((&e).into()))?
        else {
            tracing::debug!(service = %key, "service is gone; nothing to ensure");
            return Ok(());
        };
        let lb = self
            .load_balancer()
            .map_err(|e| SyncError::Ensure((&e).into()))?;
        let EligibleNodes { nodes, hosts, .. } = self
            .eligible_for(&service)
            .map_err(SyncError::InvalidNodeSelector)?;
        if nodes.is_empty() {
            self.recorder.warning(
                &*service,
                REASON_UNAVAILABLE,
                "EnsureLoadBalancer",
                "There are no available nodes for LoadBalancer",
            );
        }
        self.metrics.load_balancer_syncs.inc();
        let status = match lb
            .ensure_load_balancer(self.cluster(), &service, &nodes)
            .await
        {
            Ok(status) => status,
            Err(err) if err.is_implemented_elsewhere() => {
                tracing::debug!(service = %key, "load balancer implemented elsewhere; nothing to do");
                self.records.applied(key, &service, hosts);
                return Ok(());
            }
            Err(err) => return Err(SyncError::Ensure((&err).into())),
        };
        let ingress = status.ingress.unwrap_or_default();
        validate_ingress(&ingress).map_err(SyncError::InvalidStatus)?;
        self.recorder.normal(
            &*service,
            REASON_ENSURED,
            "EnsureLoadBalancer",
            "Ensured load balancer",
        );
        if self.conditions {
            let wanted = wanted(&Observed::Ensured, true);
            writes::set_status(&api, service.clone(), Some(&ingress), &wanted).await
        } else {
            writes::set_ingress(&api, service.clone(), &ingress).await
        }
        .map_err(|e| SyncError::WriteStatus((&e).into()))?;
        self.records.applied(key, &service, hosts);
        Ok(())
    }

    /// Points an ensured load balancer at the eligible `nodes` (whose set is `hosts`), which
    /// differ from those it was given (Go's node-sync `UpdateLoadBalancer`).
    pub(super) async fn update_hosts(
        &self,
        key: &ServiceKey,
        service: &Arc<Service>,
        nodes: &[Arc<Node>],
        hosts: Arc<NodeSet>,
    ) -> Result<(), SyncError> {
        let lb = self
            .load_balancer()
            .map_err(|e| SyncError::UpdateUnsupported((&e).into()))?;
        tracing::info!(service = %key, nodes = hosts.len(), "updating load balancer hosts");
        tracing::debug!(service = %key, nodes = ?hosts.keys().collect::<Vec<_>>(), "load balancer hosts");
        self.metrics.load_balancer_syncs.inc();
        let started = tokio::time::Instant::now();
        let result = lb
            .update_load_balancer(self.cluster(), service, nodes)
            .await;
        self.metrics
            .update_host_latency
            .observe(started.elapsed().as_secs_f64());
        let err = match result {
            Ok(()) => {
                if nodes.is_empty() {
                    self.recorder.warning(
                        &**service,
                        REASON_UNAVAILABLE,
                        "UpdateLoadBalancer",
                        "There are no available nodes for LoadBalancer",
                    );
                } else {
                    self.recorder.normal(
                        &**service,
                        REASON_UPDATED,
                        "UpdateLoadBalancer",
                        "Updated load balancer with new hosts",
                    );
                }
                self.records.applied(key, service, hosts);
                return Ok(());
            }
            Err(err) if err.is_implemented_elsewhere() => {
                self.records.applied(key, service, hosts);
                return Ok(());
            }
            // Refused: the load balancer a hint on the Service leads to is not its. Not
            // "gone" either: no existence check, a Warning and a retry.
            Err(err) if err.is_not_owned() => return Err(update_failed(nodes, &err)),
            Err(err) => err,
        };
        // It is only an error if the load balancer still exists.
        match lb.get_load_balancer(self.cluster(), service).await {
            Ok(None) => {
                tracing::info!(service = %key, "load balancer is gone; nothing to update");
                self.records.applied(key, service, hosts);
                return Ok(());
            }
            Ok(Some(_)) => {}
            Err(get_err) => self.report(key, Some(service), &Failure::ExistenceUnknown(&get_err)),
        }
        Err(update_failed(nodes, &err))
    }
}

/// The failure of `update_load_balancer` with `nodes`.
fn update_failed(nodes: &[Arc<Node>], err: &CloudError) -> SyncError {
    SyncError::UpdateHosts {
        nodes: nodes.iter().map(|n| node_name(n).to_owned()).collect(),
        cause: err.into(),
    }
}
