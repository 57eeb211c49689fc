//! The fake cloud's `Instances`, `LegacyInstances` and `Zones`.

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudResult, InstanceMetadata, Instances, LegacyInstances, ProviderId, Zone, Zones,
};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::{FakeCloud, FakeInstance, InstanceState, Method, PROVIDER_NAME};

use ccm_core::provider::{
    node_address, node_name, node_provider_id as spec_provider_id, provided_node_ips,
};

/// The `<id>` of a provider ID, or a clear error naming it.
fn parse_id(provider_id: &str) -> CloudResult<String> {
    ProviderId::parse_for(PROVIDER_NAME, provider_id)
        .map(|p| p.id().to_owned())
        .map_err(|e| CloudError::provider("invalid provider ID", e))
}

impl FakeCloud {
    /// The instance behind `node`: by `spec.providerID` when set, else by name.
    fn instance_for_node(&self, node: &Node) -> CloudResult<Option<FakeInstance>> {
        let mut state = self.state.lock();
        let seen = addresses_seen_on(node);
        match spec_provider_id(node) {
            Some(pid) => {
                let id = parse_id(pid)?;
                Ok(self.instance_by_id_seen(&mut state, &id, seen))
            }
            None => Ok(self
                .instance_mut_seen(&mut state, node_name(node), seen)
                .map(|i| i.clone())),
        }
    }

    fn instance_named(&self, name: &str) -> CloudResult<FakeInstance> {
        let mut state = self.state.lock();
        self.instance_mut(&mut state, name)
            .map(|i| i.clone())
            .ok_or(CloudError::InstanceNotFound)
    }

    fn instance_with_provider_id(&self, provider_id: &str) -> CloudResult<FakeInstance> {
        let id = parse_id(provider_id)?;
        let mut state = self.state.lock();
        self.instance_by_id(&mut state, &id)
            .ok_or(CloudError::InstanceNotFound)
    }
}

/// The addresses of the machine a Node's kubelet runs on, as far as the Node says: the
/// kubelet's `--node-ip` (the `alpha.kubernetes.io/provided-node-ip` annotation, one address
/// or two for dual-stack), as `InternalIP`s, and the Node's name as `Hostname`. `None` when
/// the Node names no valid address.
fn addresses_seen_on(node: &Node) -> Option<Vec<NodeAddress>> {
    let ips = provided_node_ips(node);
    if ips.is_empty() {
        return None;
    }
    let mut addresses: Vec<NodeAddress> = ips
        .iter()
        .map(|ip| node_address("InternalIP", ip.to_string()))
        .collect();
    addresses.push(node_address("Hostname", node_name(node)));
    Some(addresses)
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ccm_core::well_known::ANNOTATION_PROVIDED_NODE_IP;

    use super::*;

    fn node(provided: Option<&str>) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("worker-1".to_owned());
        node.metadata.annotations = provided
            .map(|ip| BTreeMap::from([(ANNOTATION_PROVIDED_NODE_IP.to_owned(), ip.to_owned())]));
        node
    }

    fn pairs(addresses: &[NodeAddress]) -> Vec<(&str, &str)> {
        addresses
            .iter()
            .map(|a| (a.type_.as_str(), a.address.as_str()))
            .collect()
    }

    #[test]
    fn a_node_instance_has_the_address_its_kubelet_was_given() {
        let seen = addresses_seen_on(&node(Some("10.88.0.11"))).unwrap();
        assert_eq!(
            pairs(&seen),
            [("InternalIP", "10.88.0.11"), ("Hostname", "worker-1")]
        );
        let dual = addresses_seen_on(&node(Some("10.88.0.11,fd00::b"))).unwrap();
        assert_eq!(dual.len(), 3);
        for bad in ["", "not-an-ip", "10.0.0.1,10.0.0.2,10.0.0.3", "10.0.0.1,,"] {
            assert!(addresses_seen_on(&node(Some(bad))).is_none(), "{bad:?}");
        }
        assert!(addresses_seen_on(&node(None)).is_none());
    }

    #[tokio::test]
    async fn nodes_are_instances_with_their_own_addresses() {
        let cloud = FakeCloud::nodes_are_instances();
        let meta = cloud
            .instance_metadata(&node(Some("10.88.0.11")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            pairs(&meta.node_addresses),
            [("InternalIP", "10.88.0.11"), ("Hostname", "worker-1")]
        );
        // Without a --node-ip, the next address of the fake cloud's own network.
        let mut other = node(None);
        other.metadata.name = Some("worker-2".to_owned());
        let meta = cloud.instance_metadata(&other).await.unwrap().unwrap();
        assert!(meta.node_addresses[0].address.starts_with("10.0.0."));
    }
}
