//! Acme's cloud provider: every Node is an instance in zone `acme-1a`.
#![forbid(unsafe_code)]

use std::sync::Arc;

use ccm_core::provider::{
    BoxError, CloudConfig, CloudProvider, CloudResult, InstanceMetadata, Instances,
    ProviderRegistry,
};
use k8s_openapi::api::core::v1::Node;

/// The provider.
pub struct AcmeCloud;

impl AcmeCloud {
    /// The name for `--cloud-provider`.
    pub const NAME: &'static str = "acme";

    /// Registers the provider under [`AcmeCloud::NAME`].
    pub fn register(registry: &mut ProviderRegistry) -> Result<(), BoxError> {
        registry.register(Self::NAME, |_: Option<&CloudConfig>| {
            Ok(Arc::new(AcmeCloud) as Arc<dyn CloudProvider>)
        })?;
        Ok(())
    }
}

/// Zones of Acme's instances, as an author's own logic to unit-test with mocks.
pub async fn zone_of(instances: &dyn Instances, node: &Node) -> CloudResult<Option<String>> {
    Ok(instances.instance_metadata(node).await?.map(|m| m.zone))
}

#[async_trait::async_trait]
impl Instances for AcmeCloud {
    async fn instance_exists(&self, _node: &Node) -> CloudResult<bool> {
        Ok(true)
    }
    async fn instance_shutdown(&self, _node: &Node) -> CloudResult<bool> {
        Ok(false)
    }
    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        Ok(Some(
            InstanceMetadata::new(format!("acme://{name}")).with_zone("acme-1a", "acme-1"),
        ))
    }
}

impl CloudProvider for AcmeCloud {
    fn provider_name(&self) -> &str {
        Self::NAME
    }
    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccm_core::mock::MockInstances;

    #[tokio::test]
    async fn zone_comes_from_the_metadata() {
        let mut instances = MockInstances::new();
        instances
            .expect_instance_metadata()
            .times(1)
            .returning(|_| Ok(Some(InstanceMetadata::new("acme://a").with_zone("z9", "r9"))));
        let zone = zone_of(&instances, &Node::default()).await.unwrap();
        assert_eq!(zone.as_deref(), Some("z9"));
    }
}
