//! The fake cloud's `Instances`, `LegacyInstances` and `Zones`.

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudResult, InstanceMetadata, Instances, LegacyInstances, ProviderId, Zone, Zones,
};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::{FakeCloud, FakeInstance, InstanceState, Method, PROVIDER_NAME, lock};

use ccm_core::provider::{node_name, node_provider_id as spec_provider_id};

/// The `<id>` of a provider ID, or a clear error naming it.
fn parse_id(provider_id: &str) -> CloudResult<String> {
    ProviderId::parse_for(PROVIDER_NAME, provider_id)
        .map(|p| p.id().to_owned())
        .map_err(|e| CloudError::provider("invalid provider ID", e))
}

impl FakeCloud {
    /// The instance behind `node`: by `spec.providerID` when set, else by name.
    fn instance_for_node(&self, node: &Node) -> CloudResult<Option<FakeInstance>> {
        let mut state = lock(&self.state);
        match spec_provider_id(node) {
            Some(pid) => {
                let id = parse_id(pid)?;
                Ok(self.instance_by_id(&mut state, &id))
            }
            None => Ok(self
                .instance_mut(&mut state, node_name(node))
                .map(|i| i.clone())),
        }
    }

    fn instance_named(&self, name: &str) -> CloudResult<FakeInstance> {
        let mut state = lock(&self.state);
        self.instance_mut(&mut state, name)
            .map(|i| i.clone())
            .ok_or(CloudError::InstanceNotFound)
    }

    fn instance_with_provider_id(&self, provider_id: &str) -> CloudResult<FakeInstance> {
        let id = parse_id(provider_id)?;
        let mut state = lock(&self.state);
        self.instance_by_id(&mut state, &id)
            .ok_or(CloudError::InstanceNotFound)
    }
}

#[async_trait]
impl Instances for FakeCloud {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        self.call(Method::InstanceExists, node_name(node)).await?;
        Ok(self.instance_for_node(node)?.is_some())
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        self.call(Method::InstanceShutdown, node_name(node)).await?;
        match self.instance_for_node(node)? {
            Some(inst) => Ok(inst.state == InstanceState::Stopped),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        self.call(Method::InstanceMetadata, node_name(node)).await?;
        let inst = self
            .instance_for_node(node)?
            .ok_or(CloudError::InstanceNotFound)?;
        let mut meta = InstanceMetadata::new(inst.provider_id())
            .with_instance_type(inst.instance_type)
            .with_zone(inst.zone, inst.region)
            .with_addresses(inst.addresses);
        meta.additional_labels = inst.labels;
        match self.metadata_hook() {
            Some(hook) => hook(node, meta),
            None => Ok(Some(meta)),
        }
    }
}

#[async_trait]
impl LegacyInstances for FakeCloud {
    async fn node_addresses(&self, node_name: &str) -> CloudResult<Vec<NodeAddress>> {
        self.call(Method::NodeAddresses, node_name).await?;
        Ok(self.instance_named(node_name)?.addresses)
    }

    async fn node_addresses_by_provider_id(
        &self,
        provider_id: &str,
    ) -> CloudResult<Vec<NodeAddress>> {
        self.call(Method::NodeAddressesByProviderId, provider_id)
            .await?;
        Ok(self.instance_with_provider_id(provider_id)?.addresses)
    }

    async fn instance_id(&self, node_name: &str) -> CloudResult<String> {
        self.call(Method::InstanceId, node_name).await?;
        Ok(self.instance_named(node_name)?.id)
    }

    async fn instance_type(&self, node_name: &str) -> CloudResult<String> {
        self.call(Method::InstanceType, node_name).await?;
        Ok(self.instance_named(node_name)?.instance_type)
    }

    async fn instance_type_by_provider_id(&self, provider_id: &str) -> CloudResult<String> {
        self.call(Method::InstanceTypeByProviderId, provider_id)
            .await?;
        Ok(self.instance_with_provider_id(provider_id)?.instance_type)
    }

    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> CloudResult<bool> {
        self.call(Method::InstanceExistsByProviderId, provider_id)
            .await?;
        match self.instance_with_provider_id(provider_id) {
            Ok(_) => Ok(true),
            Err(CloudError::InstanceNotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn instance_shutdown_by_provider_id(&self, provider_id: &str) -> CloudResult<bool> {
        self.call(Method::InstanceShutdownByProviderId, provider_id)
            .await?;
        Ok(self.instance_with_provider_id(provider_id)?.state == InstanceState::Stopped)
    }
}

#[async_trait]
impl Zones for FakeCloud {
    async fn get_zone(&self) -> CloudResult<Zone> {
        self.call(Method::GetZone, "").await?;
        Ok(Zone::new(
            self.defaults.zone.clone(),
            self.defaults.region.clone(),
        ))
    }

    async fn get_zone_by_provider_id(&self, provider_id: &str) -> CloudResult<Zone> {
        self.call(Method::GetZoneByProviderId, provider_id).await?;
        let inst = self.instance_with_provider_id(provider_id)?;
        Ok(Zone::new(inst.zone, inst.region))
    }

    async fn get_zone_by_node_name(&self, node_name: &str) -> CloudResult<Zone> {
        self.call(Method::GetZoneByNodeName, node_name).await?;
        let inst = self.instance_named(node_name)?;
        Ok(Zone::new(inst.zone, inst.region))
    }
}
