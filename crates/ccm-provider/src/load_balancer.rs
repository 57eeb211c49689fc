//! Load balancers for `Service`s of `type: LoadBalancer` (Go's `cloudprovider.LoadBalancer`).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};

use super::CloudResult;

/// Creates, updates and deletes the cloud load balancer of a Service.
///
/// The arguments are read-only snapshots. Every method may be called again for the same
/// Service at any time (after a restart, a conflict, a retry), so each must be idempotent.
/// `nodes` are the Nodes eligible to receive traffic (see the service controller docs);
/// readiness is not a filter.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait LoadBalancer: Send + Sync {
    /// The status of the Service's load balancer, or `None` when it does not exist. Only a
    /// load balancer this controller created counts as existing.
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>>;

    /// The cloud name of the Service's load balancer. The default is
    /// [`default_load_balancer_name`](super::default_load_balancer_name).
    fn get_load_balancer_name(&self, _cluster_name: &str, service: &Service) -> String {
        super::default_load_balancer_name(service)
    }

    /// Creates the load balancer, or brings an existing one up to date, and returns its
    /// status (the ingress IPs or hostnames). Runs on every sync: it must be idempotent.
    ///
    /// Return [`CloudError::ImplementedElsewhere`](super::CloudError::ImplementedElsewhere) when
    /// another controller owns it, or
    /// [`CloudError::RetryAfter`](super::CloudError::RetryAfter) to be called again after a
    /// fixed delay (for example while the cloud is still provisioning).
    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus>;

    /// Points an existing load balancer at a new set of Nodes.
    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()>;

    /// Deletes the load balancer. Returns `Ok(())` when it is already gone; never
    /// [`CloudError::ImplementedElsewhere`](super::CloudError::ImplementedElsewhere).
    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()>;
}

/// The default cloud name of a Service's load balancer: `"a"` followed by the Service's UID
/// without dashes, cut to 32 characters (Go's `cloudprovider.DefaultLoadBalancerName`).
///
/// ```
/// use k8s_openapi::api::core::v1::Service;
/// let mut svc = Service::default();
/// svc.metadata.uid = Some("6c9d2b0e-5f3a-4e0b-9a43-8f6b7c2d1e00".into());
/// assert_eq!(ccm_core::provider::default_load_balancer_name(&svc),
///            "a6c9d2b0e5f3a4e0b9a438f6b7c2d1e0");
/// ```
pub fn default_load_balancer_name(service: &Service) -> String {
    let mut name: String = std::iter::once('a')
        .chain(
            service
                .metadata
                .uid
                .as_deref()
                .unwrap_or_default()
                .chars()
                .filter(|c| *c != '-'),
        )
        .collect();
    if name.len() > 32 {
        // The UID is ASCII, so byte 32 is a character boundary; stay safe if it is not.
        let cut = (0..=32)
            .rev()
            .find(|i| name.is_char_boundary(*i))
            .unwrap_or(0);
        name.truncate(cut);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(uid: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.uid = uid.map(str::to_owned);
        s
    }

    #[test]
    fn default_name_cuts_to_32() {
        let name = default_load_balancer_name(&svc(Some("12345678-1234-1234-1234-123456789012")));
        assert_eq!(name, "a1234567812341234123412345678901");
        assert_eq!(name.len(), 32);
    }

    #[test]
    fn default_name_of_short_or_missing_uid() {
        assert_eq!(default_load_balancer_name(&svc(Some("ab-cd"))), "aabcd");
        assert_eq!(default_load_balancer_name(&svc(None)), "a");
    }
}
