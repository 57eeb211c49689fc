//! Unit-testing a provider's own logic with `ccm-core`'s `mockall` mocks (feature `mock`).
//!
//! The conformance kit checks a whole provider against a cloud; the mocks test one piece of
//! its logic alone, with no cloud at all. Here the piece is `RegionRouter`, the `Instances` of a
//! multi-region provider: it sends each question to the provider of the region named in the
//! Node's provider ID (`acme://<region>/<id>`). Each region is a [`MockCloud`] holding a
//! [`MockInstances`], so the tests say exactly which region must be asked, how often, and what
//! it answers, and the mocks check it when they are dropped.
//!
//! ```text
//! cargo test -p ccm-conformance --example unit_test_with_mocks
//! ```
//!
//! [`MockCloud`]: ccm_core::mock::MockCloud
//! [`MockInstances`]: ccm_core::mock::MockInstances
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ccm_core::provider::{
    CloudError, CloudProvider, CloudResult, InstanceMetadata, Instances, ProviderId,
};
use k8s_openapi::api::core::v1::Node;

/// The `Instances` of a provider with one backend provider per region.
pub struct RegionRouter {
    regions: BTreeMap<String, Arc<dyn CloudProvider>>,
}

impl RegionRouter {
    /// A router over these regions.
    pub fn new<I, S>(regions: I) -> Self
    where
        I: IntoIterator<Item = (S, Arc<dyn CloudProvider>)>,
        S: Into<String>,
    {
        Self {
            regions: regions.into_iter().map(|(r, p)| (r.into(), p)).collect(),
        }
    }

    /// The instances of the Node's region. When the region cannot be told, the answer is an
    /// error, never "does not exist": `Ok(false)` would make the controllers delete the Node.
    fn region_of(&self, node: &Node) -> CloudResult<&dyn Instances> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .ok_or_else(|| {
                CloudError::msg(format!(
                    "Node {name:?} has no spec.providerID, so its region is unknown"
                ))
            })?;
        let id = ProviderId::parse_for("acme", provider_id)
            .map_err(|e| CloudError::provider("reading the provider ID", e))?;
        let region = id.id().split('/').next().unwrap_or_default();
        let provider = self.regions.get(region).ok_or_else(|| {
            CloudError::msg(format!("Node {name:?} is in unknown region {region:?}"))
        })?;
        provider.instances().ok_or(CloudError::NotImplemented)
    }
}

#[async_trait]
impl Instances for RegionRouter {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        self.region_of(node)?.instance_exists(node).await
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        self.region_of(node)?.instance_shutdown(node).await
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        self.region_of(node)?.instance_metadata(node).await
    }
}

fn main() {
    let router = RegionRouter::new(Vec::<(String, Arc<dyn CloudProvider>)>::new());
    println!(
        "A router over {} regions. Run the tests: cargo test -p ccm-conformance --example \
         unit_test_with_mocks",
        router.regions.len()
    );
}

#[cfg(test)]
mod tests {
    use ccm_core::mock::{MockCloud, MockInstances};
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    fn node(name: &str, provider_id: &str) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.spec = Some(NodeSpec {
            provider_id: Some(provider_id.into()),
            ..NodeSpec::default()
        });
        node
    }

    fn provider_id(node: &Node) -> &str {
        node.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default()
    }

    /// A region backed by this mock.
    fn region(instances: MockInstances) -> Arc<dyn CloudProvider> {
        Arc::new(MockCloud::new("acme").with_instances(instances))
    }

    // ANCHOR: region_tests
    #[tokio::test]
    async fn asks_the_region_of_the_node_and_no_other() {
        let mut eu = MockInstances::new();
        eu.expect_instance_exists()
            .withf(|node| provider_id(node) == "acme://eu-1/i-7")
            .times(1)
            .returning(|_| Ok(true));
        let mut us = MockInstances::new();
        us.expect_instance_exists().never();
        let router = RegionRouter::new([("eu-1", region(eu)), ("us-1", region(us))]);

        assert!(
            router
                .instance_exists(&node("web-1", "acme://eu-1/i-7"))
                .await
                .unwrap()
        );
        // Dropping `router` drops the mocks, which check `times(1)` and `never()`.
    }

    #[tokio::test]
    async fn an_unknown_region_is_an_error_not_a_gone_instance() {
        // No expectations: any call to the mock would fail the test.
        let router = RegionRouter::new([("eu-1", region(MockInstances::new()))]);
        let err = router
            .instance_exists(&node("web-1", "acme://ap-9/i-7"))
            .await
            .unwrap_err();
        assert!(matches!(err, CloudError::Provider { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "Node \"web-1\" is in unknown region \"ap-9\""
        );
    }

    // ANCHOR_END: region_tests

    #[tokio::test]
    async fn error_kinds_pass_through_unchanged() {
        // The controllers branch on the kind: InstanceNotFound must stay InstanceNotFound.
        let mut eu = MockInstances::new();
        eu.expect_instance_metadata()
            .times(1)
            .returning(|_| Err(CloudError::InstanceNotFound));
        let router = RegionRouter::new([("eu-1", region(eu))]);
        let err = router
            .instance_metadata(&node("web-1", "acme://eu-1/i-7"))
            .await
            .unwrap_err();
        assert!(err.is_instance_not_found(), "{err:?}");
    }

    #[tokio::test]
    async fn a_region_without_instances_is_not_implemented() {
        let no_instances: Arc<dyn CloudProvider> = Arc::new(MockCloud::new("acme"));
        let router = RegionRouter::new([("eu-1", no_instances)]);
        let err = router
            .instance_shutdown(&node("web-1", "acme://eu-1/i-7"))
            .await
            .unwrap_err();
        assert!(err.is_not_implemented(), "{err:?}");
    }
}
