//! A cloud whose machines are a table: instances and nothing else, tested with the mocks.

use std::collections::BTreeMap;

use ccm_core::provider::{CloudProvider, CloudResult, InstanceMetadata, Instances};
use k8s_openapi::api::core::v1::Node;

/// Machines by Node name: (zone, region).
pub struct TableCloud(pub BTreeMap<String, (String, String)>);

fn name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

#[async_trait::async_trait]
impl Instances for TableCloud {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        Ok(self.0.contains_key(name(node)))
    }
    async fn instance_shutdown(&self, _node: &Node) -> CloudResult<bool> {
        Ok(false)
    }
    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        Ok(self.0.get(name(node)).map(|(zone, region)| {
            InstanceMetadata::new(format!("table://{}", name(node))).with_zone(zone, region)
        }))
    }
}

impl CloudProvider for TableCloud {
    fn provider_name(&self) -> &str {
        "table"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ccm_core::mock::{MockCloud, MockInstances};
    use ccm_core::provider::resolve_instances;

    use super::*;

    #[tokio::test]
    async fn a_mock_answers_like_the_table() {
        let mut mock = MockInstances::new();
        mock.expect_instance_exists().returning(|_| Ok(true));
        let cloud: Arc<dyn CloudProvider> = Arc::new(MockCloud::new("m").with_instances(mock));
        let node = Node::default();
        assert!(resolve_instances(&cloud).unwrap().instance_exists(&node).await.unwrap());
        let table = TableCloud(BTreeMap::new());
        assert!(!table.instance_exists(&node).await.unwrap());
    }
}
