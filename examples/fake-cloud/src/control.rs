//! The fake cloud's test controls: the call log, injected faults and injected latency.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use ccm_core::provider::CloudError;

/// A provider call the fake cloud answers, as the call log and fault injection name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Method {
    /// `Instances::instance_exists`.
    InstanceExists,
    /// `Instances::instance_shutdown`.
    InstanceShutdown,
    /// `Instances::instance_metadata`.
    InstanceMetadata,
    /// `LegacyInstances::node_addresses`.
    NodeAddresses,
    /// `LegacyInstances::node_addresses_by_provider_id`.
    NodeAddressesByProviderId,
    /// `LegacyInstances::instance_id`.
    InstanceId,
    /// `LegacyInstances::instance_type`.
    InstanceType,
    /// `LegacyInstances::instance_type_by_provider_id`.
    InstanceTypeByProviderId,
    /// `LegacyInstances::instance_exists_by_provider_id`.
    InstanceExistsByProviderId,
    /// `LegacyInstances::instance_shutdown_by_provider_id`.
    InstanceShutdownByProviderId,
    /// `Zones::get_zone`.
    GetZone,
    /// `Zones::get_zone_by_provider_id`.
    GetZoneByProviderId,
    /// `Zones::get_zone_by_node_name`.
    GetZoneByNodeName,
    /// `LoadBalancer::get_load_balancer`.
    GetLoadBalancer,
    /// `LoadBalancer::ensure_load_balancer`.
    EnsureLoadBalancer,
    /// `LoadBalancer::update_load_balancer`.
    UpdateLoadBalancer,
    /// `LoadBalancer::ensure_load_balancer_deleted`.
    EnsureLoadBalancerDeleted,
    /// `LoadBalancer::load_balancer_health`.
    LoadBalancerHealth,
    /// `Routes::list_routes`.
    ListRoutes,
    /// `Routes::create_route`.
    CreateRoute,
    /// `Routes::delete_route`.
    DeleteRoute,
    /// `Clusters::list_clusters`.
    ListClusters,
    /// `Clusters::master`.
    Master,
}

impl Method {
    /// The method's name in the call log, as Go's `fake.Cloud` records it where it has one.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstanceExists => "instance-exists",
            Self::InstanceShutdown => "instance-shutdown",
            Self::InstanceMetadata => "instance-metadata",
            Self::NodeAddresses => "node-addresses",
            Self::NodeAddressesByProviderId => "node-addresses-by-provider-id",
            Self::InstanceId => "instance-id",
            Self::InstanceType => "instance-type",
            Self::InstanceTypeByProviderId => "instance-type-by-provider-id",
            Self::InstanceExistsByProviderId => "instance-exists-by-provider-id",
            Self::InstanceShutdownByProviderId => "instance-shutdown-by-provider-id",
            Self::GetZone => "get-zone",
            Self::GetZoneByProviderId => "get-zone-by-provider-id",
            Self::GetZoneByNodeName => "get-zone-by-node-name",
            Self::GetLoadBalancer => "get",
            Self::EnsureLoadBalancer => "create",
            Self::UpdateLoadBalancer => "update",
            Self::EnsureLoadBalancerDeleted => "delete",
            Self::LoadBalancerHealth => "health",
            Self::ListRoutes => "list-routes",
            Self::CreateRoute => "create-route",
            Self::DeleteRoute => "delete-route",
            Self::ListClusters => "list-clusters",
            Self::Master => "master",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One call in the log: the method and what it was about (a node name, a provider ID, a
/// `namespace/name` of a Service, a route's CIDR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The method.
    pub method: Method,
    /// What the call was about.
    pub target: String,
}

/// An error to inject. Unlike [`CloudError`] it can be cloned, so one injection can fail
/// many calls.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// [`CloudError::NotImplemented`].
    NotImplemented,
    /// [`CloudError::InstanceNotFound`].
    InstanceNotFound,
    /// [`CloudError::ImplementedElsewhere`].
    ImplementedElsewhere,
    /// [`CloudError::RetryAfter`] with this delay.
    RetryAfter(Duration),
    /// [`CloudError::Provisioning`] with this delay: the load balancer is still coming up.
    Provisioning(Duration),
    /// A [`CloudError::Provider`] with this message.
    Error(String),
    /// A [`CloudError::Unavailable`] with this message: the cloud did not answer.
    Unavailable(String),
}

impl Fault {
    /// The [`CloudError`] this fault raises.
    pub fn to_error(&self) -> CloudError {
        match self {
            Self::NotImplemented => CloudError::NotImplemented,
            Self::InstanceNotFound => CloudError::InstanceNotFound,
            Self::ImplementedElsewhere => CloudError::ImplementedElsewhere,
            Self::RetryAfter(d) => CloudError::retry_after("injected: retry later", *d),
            Self::Provisioning(d) => CloudError::provisioning("injected: still provisioning", *d),
            Self::Error(msg) => CloudError::msg(msg.clone()),
            Self::Unavailable(msg) => {
                CloudError::unavailable("injected: the cloud did not answer", msg.clone())
            }
        }
    }
}

/// How many times an injected fault fires.
#[derive(Clone, Debug)]
pub(crate) struct Injection {
    pub(crate) fault: Fault,
    /// `None` for every call until cleared.
    pub(crate) remaining: Option<u64>,
}

/// The call log, per-method counters and injections. Lives behind the fake cloud's lock.
#[derive(Debug)]
pub(crate) struct Control {
    log: VecDeque<Call>,
    log_capacity: usize,
    counts: BTreeMap<Method, u64>,
    injections: BTreeMap<Method, Injection>,
    pub(crate) latency: Duration,
}

impl Control {
    pub(crate) fn new(log_capacity: usize) -> Self {
        Self {
            log: VecDeque::new(),
            log_capacity,
            counts: BTreeMap::new(),
            injections: BTreeMap::new(),
            latency: Duration::ZERO,
        }
    }

    /// Records a call and returns the fault to raise for it, if any.
    pub(crate) fn record(&mut self, method: Method, target: &str) -> Option<CloudError> {
        *self.counts.entry(method).or_default() += 1;
        if self.log_capacity > 0 {
            if self.log.len() == self.log_capacity {
                self.log.pop_front();
            }
            self.log.push_back(Call {
                method,
                target: target.to_owned(),
            });
        }
        let injection = self.injections.get_mut(&method)?;
        let err = injection.fault.to_error();
        match &mut injection.remaining {
            None => {}
            Some(1) => {
                self.injections.remove(&method);
            }
            Some(n) => *n -= 1,
        }
        Some(err)
    }

    pub(crate) fn inject(&mut self, method: Method, fault: Fault, times: Option<u64>) {
        if times == Some(0) {
            self.injections.remove(&method);
        } else {
            self.injections.insert(
                method,
                Injection {
                    fault,
                    remaining: times,
                },
            );
        }
    }

    pub(crate) fn clear_faults(&mut self) {
        self.injections.clear();
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.log.iter().cloned().collect()
    }

    pub(crate) fn count(&self, method: Method) -> u64 {
        self.counts.get(&method).copied().unwrap_or_default()
    }

    pub(crate) fn counts(&self) -> BTreeMap<Method, u64> {
        self.counts.clone()
    }

    pub(crate) fn clear_calls(&mut self) {
        self.log.clear();
        self.counts.clear();
    }
}
