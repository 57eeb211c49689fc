//! A ready in-memory cloud, for a provider written against a map before it meets its real
//! API, and for tests: [`MemoryCloud`] holds instances and load balancers, gives a provider
//! what its traits need to answer, and is its own [`TestCloud`].
//!
//! A provider built on it answers from the maps (see the example on [`MemoryCloud`]); the
//! conformance suite then makes and breaks instances in the same maps, so the whole adapter
//! is `Arc::clone`. Load balancers are keyed by cluster and by
//! [`default_load_balancer_name`] (derived from the Service's UID): a copy of another
//! Service's annotations can never lead to one, which is the ownership rule of
//! `ccm_core::provider::LoadBalancer` by construction.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use async_trait::async_trait;
use ccm_core::provider::{ProviderId, default_load_balancer_name};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeSpec, Service,
};

use crate::{TestCloud, TestCloudResult};

/// An instance of a [`MemoryCloud`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryInstance {
    /// The Node name it runs as.
    pub name: String,
    /// Its provider ID, `<provider>://<name>`.
    pub provider_id: String,
    /// Whether it runs (`false`: stopped, still there).
    pub running: bool,
}

/// A load balancer of a [`MemoryCloud`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryLoadBalancer {
    /// Its name: [`default_load_balancer_name`] of its Service.
    pub name: String,
    /// The cluster it was made for.
    pub cluster: String,
    /// The Nodes it sends traffic to, by name, sorted.
    pub nodes: Vec<String>,
    /// Its address, from 192.0.2.0/24 (TEST-NET-1, never routed).
    pub ip: String,
}

impl MemoryLoadBalancer {
    /// The status the service controller writes for it.
    #[must_use]
    pub fn status(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(self.ip.clone()),
                ..LoadBalancerIngress::default()
            }]),
        }
    }
}

#[derive(Default)]
struct State {
    instances: BTreeMap<String, MemoryInstance>,
    load_balancers: BTreeMap<(String, String), MemoryLoadBalancer>,
    next_ip: u8,
}

/// Instances and load balancers in maps, for a provider and its tests; see the
/// [module](self).
///
/// ```
/// use std::sync::Arc;
/// use ccm_conformance::memory::MemoryCloud;
/// use ccm_core::async_trait;
/// use ccm_core::provider::{CloudProvider, CloudResult, InstanceMetadata, Instances};
/// use k8s_openapi::api::core::v1::Node;
///
/// /// A provider whose cloud is a `MemoryCloud`.
/// struct Acme(Arc<MemoryCloud>);
///
/// #[async_trait]
/// impl Instances for Acme {
///     async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
///         Ok(self.0.instance(node).is_some())
///     }
///     async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
///         Ok(self.0.instance(node).is_some_and(|i| !i.running))
///     }
///     async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
///         Ok(self.0.instance(node).map(|i| InstanceMetadata::new(i.provider_id)))
///     }
/// }
///
/// impl CloudProvider for Acme {
///     fn provider_name(&self) -> &str { "acme" }
///     fn has_cluster_id(&self) -> bool { true }
///     fn instances(&self) -> Option<&dyn Instances> { Some(self) }
/// }
///
/// // The conformance suite's adapter is the same cloud:
/// let cloud = MemoryCloud::new("acme");
/// let under_test: ccm_conformance::UnderTest = (Arc::new(Acme(cloud.clone())), cloud);
/// ```
pub struct MemoryCloud {
    provider_name: String,
    state: Mutex<State>,
}

impl MemoryCloud {
    /// An empty cloud whose provider IDs are `<provider_name>://<node name>`.
    #[must_use]
    pub fn new(provider_name: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            provider_name: provider_name.into(),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Adds a running instance named `name` (or starts it again if it exists).
    pub fn add_instance(&self, name: &str) -> MemoryInstance {
        let instance = MemoryInstance {
            name: name.to_owned(),
            provider_id: format!("{}://{name}", self.provider_name),
            running: true,
        };
        self.state()
            .instances
            .insert(name.to_owned(), instance.clone());
        instance
    }

    /// Removes the instance named `name`, for good; `false` when there was none.
    pub fn remove_instance(&self, name: &str) -> bool {
        self.state().instances.remove(name).is_some()
    }

    /// Stops (`false`) or starts (`true`) the instance named `name`; `false` when there is
    /// none.
    pub fn set_running(&self, name: &str, running: bool) -> bool {
        match self.state().instances.get_mut(name) {
            Some(instance) => {
                instance.running = running;
                true
            }
            None => false,
        }
    }

    /// The instance behind `node`: by its `spec.providerID` when set (which must be this
    /// cloud's), else by its name, as Go's controllers look instances up.
    #[must_use]
    pub fn instance(&self, node: &Node) -> Option<MemoryInstance> {
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .filter(|id| !id.is_empty());
        let state = self.state();
        match provider_id {
            Some(id) => {
                let id = ProviderId::parse_for(&self.provider_name, id).ok()?;
                state.instances.get(id.id()).cloned()
            }
            None => state.instances.get(node.metadata.name.as_deref()?).cloned(),
        }
    }

    /// Every instance, by name.
    #[must_use]
    pub fn instances(&self) -> Vec<MemoryInstance> {
        self.state().instances.values().cloned().collect()
    }

    /// The load balancer of `service` in `cluster`, if it has one.
    #[must_use]
    pub fn load_balancer(&self, cluster: &str, service: &Service) -> Option<MemoryLoadBalancer> {
        let key = (cluster.to_owned(), default_load_balancer_name(service));
        self.state().load_balancers.get(&key).cloned()
    }

    /// Makes the load balancer of `service` in `cluster`, or points the existing one at
    /// `nodes` (by name); its address never changes.
    pub fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> MemoryLoadBalancer {
        let name = default_load_balancer_name(service);
        let mut names: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        names.sort();
        names.dedup();
        let mut state = self.state();
        let ip = match state
            .load_balancers
            .get(&(cluster.to_owned(), name.clone()))
        {
            Some(existing) => existing.ip.clone(),
            None => {
                state.next_ip = state.next_ip.wrapping_add(1).max(1);
                format!("192.0.2.{}", state.next_ip)
            }
        };
        let lb = MemoryLoadBalancer {
            name: name.clone(),
            cluster: cluster.to_owned(),
            nodes: names,
            ip,
        };
        state
            .load_balancers
            .insert((cluster.to_owned(), name), lb.clone());
        lb
    }

    /// Deletes the load balancer of `service` in `cluster`; `false` when it had none.
    pub fn delete_load_balancer(&self, cluster: &str, service: &Service) -> bool {
        let key = (cluster.to_owned(), default_load_balancer_name(service));
        self.state().load_balancers.remove(&key).is_some()
    }

    /// The load balancers of `cluster`.
    #[must_use]
    pub fn load_balancers(&self, cluster: &str) -> Vec<MemoryLoadBalancer> {
        self.state()
            .load_balancers
            .values()
            .filter(|lb| lb.cluster == cluster)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl TestCloud for MemoryCloud {
    async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
        let instance = self.add_instance(name);
        let mut node = Node::default();
        node.metadata.name = Some(instance.name);
        // As a kubelet with `--provider-id` would register it.
        node.spec = Some(NodeSpec {
            provider_id: Some(instance.provider_id),
            ..NodeSpec::default()
        });
        Ok(node)
    }

    async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
        if let Some(name) = node.metadata.name.as_deref() {
            self.remove_instance(name);
        }
        Ok(())
    }

    async fn stop_instance(&self, node: &Node) -> TestCloudResult<()> {
        self.set_running(node.metadata.name.as_deref().unwrap_or_default(), false);
        Ok(())
    }

    async fn start_instance(&self, node: &Node) -> TestCloudResult<()> {
        self.set_running(node.metadata.name.as_deref().unwrap_or_default(), true);
        Ok(())
    }

    async fn list_load_balancers(&self, cluster_name: &str) -> TestCloudResult<Vec<String>> {
        Ok(self
            .load_balancers(cluster_name)
            .into_iter()
            .map(|lb| lb.name)
            .collect())
    }

    async fn load_balancer_nodes(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> TestCloudResult<Option<Vec<String>>> {
        Ok(self.load_balancer(cluster_name, service).map(|lb| lb.nodes))
    }

    async fn load_balancer_annotations(
        &self,
        _cluster_name: &str,
        _service: &Service,
    ) -> TestCloudResult<BTreeMap<String, String>> {
        // Found by the UID-derived name alone: nothing on the Service leads to it.
        Ok(BTreeMap::new())
    }

    async fn cleanup(&self) -> TestCloudResult<()> {
        let mut state = self.state();
        state.instances.clear();
        state.load_balancers.clear();
        Ok(())
    }
}

impl std::fmt::Debug for MemoryCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("MemoryCloud")
            .field("provider_name", &self.provider_name)
            .field("instances", &state.instances.len())
            .field("load_balancers", &state.load_balancers.len())
            .finish()
    }
}
