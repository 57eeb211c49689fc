//! Acme's cloud provider: instances with a zone and a type, and load balancers, held in
//! memory (a `MemoryCloud` of the conformance kit) — the shape of a first provider, before
//! it meets its cloud's real API. Built only from what docs/writing-a-provider.md says.
#![forbid(unsafe_code)]

// ANCHOR: imports
use std::sync::Arc;

use ccm_conformance::memory::MemoryCloud;
use ccm_core::async_trait;
use ccm_core::k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};
use ccm_core::provider::{
    BoxError, CloudConfig, CloudError, CloudProvider, CloudResult, InstanceMetadata, Instances,
    LoadBalancer, LoadBalancerSharing, ProviderId, ProviderRegistry, ResultExt, node_address,
    provided_node_ips,
};
// ANCHOR_END: imports

// ANCHOR: config
/// Acme's `--cloud-config`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AcmeConfig {
    /// The zone every instance is in.
    pub zone: String,
    /// Its region.
    pub region: String,
    /// The instances that exist at start, by Node name.
    #[serde(default)]
    pub instances: Vec<String>,
}
// ANCHOR_END: config

// ANCHOR: type
/// The provider.
pub struct AcmeCloud {
    cloud: Arc<MemoryCloud>,
    config: AcmeConfig,
}

impl AcmeCloud {
    /// The name for `--cloud-provider`.
    pub const NAME: &'static str = "acme";

    /// A provider answering from `cloud`.
    pub fn new(cloud: Arc<MemoryCloud>, config: AcmeConfig) -> Self {
        Self { cloud, config }
    }
}
// ANCHOR_END: type

// ANCHOR: register
impl AcmeCloud {
    /// Registers the provider under [`AcmeCloud::NAME`]; its factory reads the cloud-config
    /// and adds its instances to `cloud`.
    pub fn register(
        registry: &mut ProviderRegistry,
        cloud: Arc<MemoryCloud>,
    ) -> Result<(), BoxError> {
        registry.register(Self::NAME, move |config: Option<&CloudConfig>| {
            let file = config.ok_or("acme needs --cloud-config")?;
            let parsed: AcmeConfig = file.parse_yaml()?; // errors name the file and the field
            if parsed.zone.is_empty() {
                return Err(file.invalid("zone", "must not be empty").into());
            }
            for name in &parsed.instances {
                cloud.add_instance(name);
            }
            Ok(Arc::new(AcmeCloud::new(cloud.clone(), parsed)) as Arc<dyn CloudProvider>)
        })?;
        Ok(())
    }
}
// ANCHOR_END: register

// ANCHOR: errors
/// The cloud's own ID of a Node's instance, from its provider ID.
pub fn instance_id(provider_id: &str) -> CloudResult<String> {
    let id =
        ProviderId::parse_for(AcmeCloud::NAME, provider_id).context("reading the provider ID")?;
    Ok(id.id().to_owned())
}
// ANCHOR_END: errors

// ANCHOR: zone_of
/// The zone of a Node, as an author's own logic to unit-test with mocks.
pub async fn zone_of(instances: &dyn Instances, node: &Node) -> CloudResult<Option<String>> {
    Ok(instances.instance_metadata(node).await?.map(|m| m.zone))
}
// ANCHOR_END: zone_of

// ANCHOR: instances
#[async_trait]
impl Instances for AcmeCloud {
    // A stopped instance exists. `Ok(false)` means gone for good: the Node is deleted.
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        Ok(self.cloud.instance(node).is_some())
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        Ok(self.cloud.instance(node).is_some_and(|i| !i.running))
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        let Some(instance) = self.cloud.instance(node) else {
            return Err(CloudError::InstanceNotFound);
        };
        let mut metadata = InstanceMetadata::new(instance.provider_id)
            .with_instance_type("acme-standard")
            .with_zone(&self.config.zone, &self.config.region);
        // Acme learns an instance's address from its kubelet (`--node-ip`): the Node is
        // initialised only if its provided IP is among the addresses reported.
        for ip in provided_node_ips(node) {
            metadata = metadata.with_address(node_address("InternalIP", ip.to_string()));
        }
        Ok(Some(
            metadata.with_address(node_address("Hostname", &instance.name)),
        ))
    }
}
// ANCHOR_END: instances

// ANCHOR: load_balancer
#[async_trait]
impl LoadBalancer for AcmeCloud {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        Ok(self
            .cloud
            .load_balancer(cluster_name, service)
            .map(|lb| lb.status()))
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        Ok(self
            .cloud
            .ensure_load_balancer(cluster_name, service, nodes)
            .status())
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        self.cloud
            .ensure_load_balancer(cluster_name, service, nodes);
        Ok(())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        self.cloud.delete_load_balancer(cluster_name, service);
        Ok(())
    }

    // Services with one sharing key share a load balancer: the methods above are then
    // called with one Service standing for the group (its own UID, every member's ports).
    fn load_balancer_sharing(&self) -> Option<LoadBalancerSharing> {
        Some(LoadBalancerSharing::new())
    }
}
// ANCHOR_END: load_balancer

// ANCHOR: provider
impl CloudProvider for AcmeCloud {
    fn provider_name(&self) -> &str {
        Self::NAME
    }

    // Load balancers are found by their cluster and the Service's UID, never another's.
    fn has_cluster_id(&self) -> bool {
        true
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }
}
// ANCHOR_END: provider

// ANCHOR: mock_test
#[cfg(test)]
mod tests {
    use ccm_core::k8s_openapi::api::core::v1::Node;
    use ccm_core::mock::{MockCloud, MockInstances};
    use ccm_core::provider::{CloudProvider, InstanceMetadata};

    #[tokio::test]
    async fn the_zone_comes_from_the_metadata() {
        let mut instances = MockInstances::new();
        instances
            .expect_instance_metadata()
            .times(1)
            .returning(|_| {
                Ok(Some(
                    InstanceMetadata::new("acme://a").with_zone("z9", "r9"),
                ))
            });
        let cloud = MockCloud::new("acme").with_instances(instances);
        let instances = cloud.instances().expect("set above");
        let zone = super::zone_of(instances, &Node::default()).await.unwrap();
        assert_eq!(zone.as_deref(), Some("z9"));
        // Dropping the mock checks `times(1)`.
    }
}
// ANCHOR_END: mock_test

#[cfg(test)]
mod provider_id_tests {
    #[test]
    fn a_foreign_provider_id_is_an_error_with_context() {
        let err = super::instance_id("other://i-1").unwrap_err();
        assert!(
            err.to_string().starts_with("reading the provider ID"),
            "{err}"
        );
        assert_eq!(super::instance_id("acme://i-1").unwrap(), "i-1");
    }
}
