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
///
/// # Ownership before action
///
/// A Service's annotations (and its name, and its namespace's) are written by whoever may
/// edit Services in one namespace, so nothing on a Service proves that a load balancer is
/// its. A load balancer found through anything a user can write — an ID annotation, a name
/// hint — is used only if it belongs to this Service:
///
/// - when you create a load balancer, record its owner in the cloud, where users of the
///   cluster cannot write: a tag or description derived from the Service's UID (e.g.
///   `kubernetes-service-uid:<uid>`) next to the cluster's tag;
/// - on every lookup through a hint, check that record. A load balancer without it, or with
///   another UID or cluster, is not this Service's; nor is anything a malformed or oversized
///   hint would name (do not send it to the cloud);
/// - then `ensure_load_balancer` and `update_load_balancer` change nothing and return
///   [`CloudError::NotOwned`](super::CloudError::NotOwned); `get_load_balancer` never reports
///   it (return `Ok(None)` or `NotOwned`); `ensure_load_balancer_deleted` never deletes it:
///   delete what is the Service's own (found without the hint), then return `NotOwned`, or
///   `Ok(())`.
///
/// A lookup that needs no hint — the name derived from the UID
/// ([`default_load_balancer_name`]) among the cluster's load balancers — is the Service's by
/// construction. The service controller turns `NotOwned` into a `LoadBalancerNotOwned`
/// Warning on the Service; on deletion it removes the finalizer, so a Service whose hint
/// cannot be resolved never stays stuck. The `ccm-conformance` check
/// `load_balancer.copied_annotations_never_take_over` verifies all of this.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait LoadBalancer: Send + Sync {
    /// The status of the Service's load balancer, or `None` when it does not exist. Only a
    /// load balancer this controller created for this Service counts as existing: one that a
    /// hint leads to but that is not the Service's is `Ok(None)` or
    /// [`CloudError::NotOwned`](super::CloudError::NotOwned), never its status.
    ///
    /// A load balancer still being provisioned exists too: answer `Some` with an empty
    /// ingress list. The service controller asks this before it deletes (as Go's does), and
    /// `None` skips the deletion, so the load balancer would leak.
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
    /// another controller owns it,
    /// [`CloudError::RetryAfter`](super::CloudError::RetryAfter) to be called again after a
    /// fixed delay (for example while the cloud is still provisioning), or
    /// [`CloudError::NotOwned`](super::CloudError::NotOwned), changing nothing, when a hint on
    /// the Service leads to a load balancer that is not its (see
    /// [Ownership before action](LoadBalancer#ownership-before-action)).
    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus>;

    /// Points an existing load balancer at a new set of Nodes. Like `ensure_load_balancer`,
    /// returns [`CloudError::NotOwned`](super::CloudError::NotOwned) rather than touch a load
    /// balancer that is not the Service's.
    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()>;

    /// Deletes the load balancer. Returns `Ok(())` when it is already gone; never
    /// [`CloudError::ImplementedElsewhere`](super::CloudError::ImplementedElsewhere).
    ///
    /// Never deletes a load balancer that is not the Service's: when a hint leads to one (or
    /// cannot be resolved at all), delete only what is the Service's own and return
    /// [`CloudError::NotOwned`](super::CloudError::NotOwned) (or `Ok(())`); the service
    /// controller then lets the Service go, with a Warning that the load balancer was left
    /// alone.
    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()>;

    /// What `ensure_load_balancer` (or `update_load_balancer`) with these arguments would
    /// do now, found without changing anything. Shadow mode (`--shadow`: a CCM run beside
    /// another to prove a swap changes nothing) asks this instead of either.
    ///
    /// The default asks `get_load_balancer`: [`LoadBalancerPlan::Create`] when there is
    /// none, else [`LoadBalancerPlan::Unknown`], which a shadow reports as a possible
    /// change. Implement it, comparing what the cloud has with what `ensure_load_balancer`
    /// would ask for, so that a shadow beside a CCM that has converged reports nothing. The
    /// same ownership rules apply: a load balancer that is not the Service's is
    /// [`CloudError::NotOwned`](super::CloudError::NotOwned), never a plan to change it.
    async fn plan_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        _nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerPlan> {
        Ok(match self.get_load_balancer(cluster_name, service).await? {
            None => LoadBalancerPlan::Create,
            Some(status) => LoadBalancerPlan::Unknown(status),
        })
    }

    /// Whether the Service's load balancer serves as it should, as its cloud sees it: for
    /// example, [`LoadBalancerHealth::Degraded`] when none of its backends passes the health
    /// check. With `--service-conditions`, the service controller asks this of every ensured
    /// load balancer once a health period and writes the answer as the Service's
    /// `LoadBalancerDegraded` condition (only when it changes). Answer from what the
    /// provider already knows where it can (a cached listing): it is asked often.
    ///
    /// The default answers [`CloudError::NotImplemented`](super::CloudError::NotImplemented):
    /// the controller then writes no `LoadBalancerDegraded` and stops asking.
    async fn load_balancer_health(
        &self,
        _cluster_name: &str,
        _service: &Service,
    ) -> CloudResult<LoadBalancerHealth> {
        Err(super::CloudError::NotImplemented)
    }

    /// Whether this provider serves several Services from one load balancer, and on what
    /// they must agree. `None` (the default): it does not, and the service controller
    /// refuses a Service that asks to share (a `LoadBalancerSharingRefused` Warning), never
    /// giving it a load balancer of its own.
    ///
    /// Opting in costs no other code. Services of one namespace that carry the same sharing
    /// key (`ccm-rs.github.io/load-balancer-sharing-key`) form a group, and the controller
    /// calls the methods above with one Service that stands for the whole group: every
    /// member's ports (each with its own `nodePort`), the first member's spec and
    /// annotations otherwise, the annotation [`LOAD_BALANCER_GROUP_ANNOTATION`] naming the
    /// key, and a UID derived from the cluster, the namespace and the key (so the usual
    /// ownership record, a tag from the UID, is the group's, and a key copied into another
    /// namespace names another load balancer). That Service does not exist in the API:
    /// write nothing on it ([`ServiceAnnotator`](super::ServiceAnnotator) skips it;
    /// [`load_balancer_group`] tells it apart).
    ///
    /// ```
    /// # use ccm_core::provider::LoadBalancerSharing;
    /// // Members must agree on every annotation that configures the cloud's load balancer.
    /// let sharing = LoadBalancerSharing::new()
    ///     .with_agreeing_annotations("service.beta.kubernetes.io/do-loadbalancer-");
    /// assert_eq!(sharing.agreeing_annotations(), ["service.beta.kubernetes.io/do-loadbalancer-"]);
    /// ```
    fn load_balancer_sharing(&self) -> Option<LoadBalancerSharing> {
        None
    }
}

/// The annotation on the Service that stands for a group of Services sharing one load
/// balancer (see [`LoadBalancer::load_balancer_sharing`]): the group's sharing key. Only the
/// service controller sets it on the Services it builds for groups.
pub const LOAD_BALANCER_GROUP_ANNOTATION: &str = "ccm-rs.github.io/load-balancer-group";

/// The sharing key of the group `service` stands for, when it is a group's Service built by
/// the service controller rather than a Service of the API (which must not be written to).
///
/// ```
/// # use k8s_openapi::api::core::v1::Service;
/// # use ccm_core::provider::{LOAD_BALANCER_GROUP_ANNOTATION, load_balancer_group};
/// let mut svc = Service::default();
/// assert_eq!(load_balancer_group(&svc), None);
/// svc.metadata.annotations = Some([(LOAD_BALANCER_GROUP_ANNOTATION.to_owned(), "web".to_owned())].into());
/// assert_eq!(load_balancer_group(&svc), Some("web"));
/// ```
pub fn load_balancer_group(service: &Service) -> Option<&str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(LOAD_BALANCER_GROUP_ANNOTATION)
        .map(String::as_str)
}

/// How a provider shares load balancers, as [`LoadBalancer::load_balancer_sharing`] answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadBalancerSharing {
    agreeing_annotations: Vec<String>,
}

impl LoadBalancerSharing {
    /// Sharing where members must agree on nothing beyond what the framework checks (the
    /// spec fields one load balancer cannot serve two ways: `externalTrafficPolicy`,
    /// `loadBalancerSourceRanges`, the IP families, session affinity, …).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Members must also agree on every annotation whose key starts with `prefix` (set the
    /// same way or absent on all): the ones that configure the cloud's load balancer. A
    /// Service that disagrees with the group's first member is refused, with the annotation
    /// named.
    #[must_use]
    pub fn with_agreeing_annotations(mut self, prefix: impl Into<String>) -> Self {
        self.agreeing_annotations.push(prefix.into());
        self
    }

    /// The annotation key prefixes members must agree on.
    pub fn agreeing_annotations(&self) -> &[String] {
        &self.agreeing_annotations
    }
}

/// How a load balancer serves, as [`LoadBalancer::load_balancer_health`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadBalancerHealth {
    /// It serves as it should.
    Healthy,
    /// It does not: why, as a `CamelCase` reason (made valid when it is not) and a message
    /// (cut to 1 KiB), which become the `LoadBalancerDegraded` condition's.
    Degraded {
        /// A `CamelCase` word, e.g. `NoHealthyBackends`.
        reason: String,
        /// What an operator reads, e.g. `0 of 3 droplets pass the health check`.
        message: String,
    },
}

impl LoadBalancerHealth {
    /// Degraded, for `reason` and `message`.
    pub fn degraded(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Degraded {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What [`LoadBalancer::ensure_load_balancer`] would do, as
/// [`LoadBalancer::plan_load_balancer`] answers.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LoadBalancerPlan {
    /// There is no load balancer: it would be created.
    Create,
    /// The load balancer is as it would be made: nothing would change. Its status.
    UpToDate(LoadBalancerStatus),
    /// The load balancer would be changed.
    Update {
        /// Its status now.
        status: LoadBalancerStatus,
        /// What would change, one short item each (e.g. `"droplet_ids: [1, 2] → [1, 2, 3]"`),
        /// shown to an operator as they are.
        changes: Vec<String>,
    },
    /// The load balancer exists; the provider cannot tell whether anything would change.
    Unknown(LoadBalancerStatus),
}

impl LoadBalancerPlan {
    /// An update of the load balancer with status `status`, or [`UpToDate`](Self::UpToDate)
    /// when `changes` is empty.
    #[must_use]
    pub fn update(status: LoadBalancerStatus, changes: Vec<String>) -> Self {
        if changes.is_empty() {
            Self::UpToDate(status)
        } else {
            Self::Update { status, changes }
        }
    }
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
