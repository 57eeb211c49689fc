//! Instances: what the node controllers ask the cloud about the machine behind a Node.
//!
//! [`Instances`] is the modern shape (Go's `InstancesV2`): three questions asked with the
//! whole `Node` in hand. [`LegacyInstances`] is Go's v1 `Instances`, keyed by node name or
//! provider ID; a provider that only has that shape (plus, optionally, [`Zones`](super::Zones))
//! still works, because the controllers never call it directly: [`resolve_instances`] wraps it
//! in [`LegacyInstancesAdapter`], which answers the three questions exactly as the Go
//! controllers' v1 code paths do.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use super::{CloudError, CloudProvider, CloudResult, InstanceMetadata, node_name};

/// Instance questions asked with a Node in hand (Go's `cloudprovider.InstancesV2`).
///
/// Implementations should look at `node.spec.provider_id` first and fall back to the node
/// name only when it is empty.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Instances: Send + Sync {
    /// Whether the instance behind `node` exists. A stopped instance exists; `Ok(false)`
    /// means it is gone for good, and the lifecycle controller deletes the Node.
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool>;

    /// Whether the instance behind `node` is shut down (stopped, but not gone).
    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool>;

    /// The instance's metadata. `Ok(None)` means "nothing to say": the controller leaves the
    /// Node as it is and does not retry.
    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>>;
}

/// Go's legacy v1 `cloudprovider.Instances`, keyed by node name or provider ID.
///
/// New providers should implement [`Instances`]; this trait exists so that providers ported
/// from the old interface keep working. Methods a provider cannot answer return
/// [`CloudError::NotImplemented`] (the default for the ones most providers lack).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait LegacyInstances: Send + Sync {
    /// The addresses of the instance named `node_name`.
    async fn node_addresses(&self, node_name: &str) -> CloudResult<Vec<NodeAddress>>;

    /// The addresses of the instance with this provider ID.
    async fn node_addresses_by_provider_id(
        &self,
        provider_id: &str,
    ) -> CloudResult<Vec<NodeAddress>>;

    /// The cloud's ID of the instance named `node_name`, without the `<provider>://` prefix.
    /// [`CloudError::InstanceNotFound`] only when the instance is gone, not when it is stopped.
    async fn instance_id(&self, node_name: &str) -> CloudResult<String>;

    /// The instance type of the instance named `node_name`.
    async fn instance_type(&self, node_name: &str) -> CloudResult<String>;

    /// The instance type of the instance with this provider ID.
    async fn instance_type_by_provider_id(&self, provider_id: &str) -> CloudResult<String>;

    /// Adds an SSH key to every instance; almost no provider supports it.
    async fn add_ssh_key_to_all_instances(&self, _user: &str, _key: &[u8]) -> CloudResult<()> {
        Err(CloudError::NotImplemented)
    }

    /// The node name of the instance this process runs on, given its hostname.
    async fn current_node_name(&self, hostname: &str) -> CloudResult<String> {
        Ok(hostname.to_owned())
    }

    /// Whether the instance with this provider ID exists; stopped instances exist.
    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> CloudResult<bool>;

    /// Whether the instance with this provider ID is shut down.
    async fn instance_shutdown_by_provider_id(&self, _provider_id: &str) -> CloudResult<bool> {
        Err(CloudError::NotImplemented)
    }
}

/// The provider ID of the instance named `node_name`: `provider_name://instance_id` (Go's
/// `cloudprovider.GetInstanceProviderID`).
///
/// [`CloudError::NotImplemented`] and [`CloudError::InstanceNotFound`] pass through unchanged;
/// other errors get context.
pub async fn get_instance_provider_id(
    provider_name: &str,
    instances: &dyn LegacyInstances,
    node_name: &str,
) -> CloudResult<String> {
    match instances.instance_id(node_name).await {
        Ok(id) => Ok(format!("{provider_name}://{id}")),
        Err(e @ (CloudError::NotImplemented | CloudError::InstanceNotFound)) => Err(e),
        Err(e) => Err(CloudError::provider(
            format!("failed to get instance ID of node {node_name:?} from cloud provider"),
            e,
        )),
    }
}

/// The [`Instances`] the node controllers use for `provider`, or `None` when it supports
/// neither shape (then the node controllers do not start).
///
/// A provider's own [`Instances`] wins; otherwise its [`LegacyInstances`] are adapted with
/// [`LegacyInstancesAdapter`]. Like Go, [`Zones`](super::Zones) is consulted only on the
/// legacy path.
pub fn resolve_instances(provider: &Arc<dyn CloudProvider>) -> Option<Arc<dyn Instances>> {
    if provider.instances().is_some() {
        Some(Arc::new(ProviderInstances(provider.clone())))
    } else if provider.legacy_instances().is_some() {
        Some(Arc::new(LegacyInstancesAdapter::new(provider.clone())))
    } else {
        None
    }
}

/// Owns the provider and forwards to its [`Instances`], so controllers can hold an `Arc`.
struct ProviderInstances(Arc<dyn CloudProvider>);

impl ProviderInstances {
    fn get(&self) -> CloudResult<&dyn Instances> {
        self.0.instances().ok_or(CloudError::NotImplemented)
    }
}

#[async_trait]
impl Instances for ProviderInstances {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        self.get()?.instance_exists(node).await
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        self.get()?.instance_shutdown(node).await
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        self.get()?.instance_metadata(node).await
    }
}

/// Answers the [`Instances`] questions from a provider's [`LegacyInstances`] and
/// [`Zones`](super::Zones), following the Go controllers' v1 code paths:
///
/// - **exists**: the provider ID from `spec.providerID`, else from
///   [`get_instance_provider_id`]; [`CloudError::InstanceNotFound`] there, or an empty ID,
///   means "does not exist"; then
///   [`instance_exists_by_provider_id`](LegacyInstances::instance_exists_by_provider_id).
/// - **shutdown**: the provider ID as for *exists* ([`CloudError::InstanceNotFound`] means
///   "not shut down"), then
///   [`instance_shutdown_by_provider_id`](LegacyInstances::instance_shutdown_by_provider_id);
///   [`CloudError::NotImplemented`] means "not shut down".
/// - **metadata**: the provider ID as for *exists*, where
///   [`CloudError::NotImplemented`] continues by node name and any other error (including
///   [`CloudError::InstanceNotFound`]) fails; instance type and addresses by provider ID,
///   falling back to by name on any error; the zone, when the provider has
///   [`Zones`](super::Zones), by provider ID then by name.
pub struct LegacyInstancesAdapter {
    provider: Arc<dyn CloudProvider>,
}

impl LegacyInstancesAdapter {
    /// Adapts `provider`'s legacy instances (and zones).
    pub fn new(provider: Arc<dyn CloudProvider>) -> Self {
        Self { provider }
    }

    fn legacy(&self) -> CloudResult<&dyn LegacyInstances> {
        self.provider
            .legacy_instances()
            .ok_or(CloudError::NotImplemented)
    }

    /// The provider ID for `node`: its spec, else looked up by name.
    async fn provider_id(&self, node: &Node) -> CloudResult<String> {
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            Some(id) if !id.is_empty() => Ok(id.to_owned()),
            _ => {
                get_instance_provider_id(
                    self.provider.provider_name(),
                    self.legacy()?,
                    node_name(node),
                )
                .await
            }
        }
    }
}

/// Calls `by_id` when there is a provider ID, and `by_name` when there is none or `by_id`
/// failed; reports both errors when both fail.
async fn by_id_or_name<T, A, B>(
    what: &str,
    provider_id: &str,
    by_id: A,
    by_name: B,
) -> CloudResult<T>
where
    A: std::future::Future<Output = CloudResult<T>>,
    B: std::future::Future<Output = CloudResult<T>>,
{
    let id_err = if provider_id.is_empty() {
        None
    } else {
        match by_id.await {
            Ok(v) => return Ok(v),
            Err(e) => Some(e),
        }
    };
    by_name.await.map_err(|name_err| match id_err {
        Some(id_err) => CloudError::msg(format!(
            "{what}: error fetching by provider ID: {}; error fetching by node name: {}",
            id_err.chain_to_string(),
            name_err.chain_to_string()
        )),
        None => CloudError::provider(format!("{what}: error fetching by node name"), name_err),
    })
}

#[async_trait]
impl Instances for LegacyInstancesAdapter {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        let provider_id = match self.provider_id(node).await {
            Ok(id) => id,
            Err(CloudError::InstanceNotFound) => return Ok(false),
            Err(e) => return Err(e),
        };
        if provider_id.is_empty() {
            tracing::warn!(
                node = node_name(node),
                "cannot find a valid provider ID for the node; assuming it does not exist"
            );
            return Ok(false);
        }
        self.legacy()?
            .instance_exists_by_provider_id(&provider_id)
            .await
    }

    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        let provider_id = match self.provider_id(node).await {
            Ok(id) => id,
            Err(CloudError::InstanceNotFound) => return Ok(false),
            Err(e) => return Err(e),
        };
        match self
            .legacy()?
            .instance_shutdown_by_provider_id(&provider_id)
            .await
        {
            Err(CloudError::NotImplemented) => Ok(false),
            other => other,
        }
    }

    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        let legacy = self.legacy()?;
        let name = node_name(node);
        let provider_id = match self.provider_id(node).await {
            Ok(id) => id,
            Err(CloudError::NotImplemented) => String::new(),
            Err(e) => return Err(e),
        };
        let instance_type = by_id_or_name(
            "instance type",
            &provider_id,
            legacy.instance_type_by_provider_id(&provider_id),
            legacy.instance_type(name),
        )
        .await?;
        let node_addresses = by_id_or_name(
            "node addresses",
            &provider_id,
            legacy.node_addresses_by_provider_id(&provider_id),
            legacy.node_addresses(name),
        )
        .await?;
        let mut meta = InstanceMetadata {
            provider_id: provider_id.clone(),
            instance_type,
            node_addresses,
            ..InstanceMetadata::default()
        };
        if let Some(zones) = self.provider.zones() {
            let zone = by_id_or_name(
                "zone",
                &provider_id,
                zones.get_zone_by_provider_id(&provider_id),
                zones.get_zone_by_node_name(name),
            )
            .await
            .map_err(|e| CloudError::provider("failed to get zone from cloud provider", e))?;
            meta.zone = zone.failure_domain;
            meta.region = zone.region;
        }
        Ok(Some(meta))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;
    use mockall::predicate::eq;

    use super::*;
    use crate::mock::MockCloud;
    use crate::mock::{MockLegacyInstances, MockZones};
    use crate::{Zone, node_address};

    fn node(name: &str, provider_id: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.spec = Some(NodeSpec {
            provider_id: provider_id.map(str::to_owned),
            ..NodeSpec::default()
        });
        n
    }

    fn adapter(legacy: MockLegacyInstances, zones: Option<MockZones>) -> Arc<dyn Instances> {
        let mut cloud = MockCloud::new("acme").with_legacy_instances(legacy);
        cloud.zones = zones;
        let cloud: Arc<dyn CloudProvider> = Arc::new(cloud);
        resolve_instances(&cloud).expect("legacy instances are adapted")
    }

    /// The adapter's `instance_exists` for Node `n1` with this `spec.providerID`.
    async fn exists(legacy: MockLegacyInstances, provider_id: Option<&str>) -> CloudResult<bool> {
        adapter(legacy, None)
            .instance_exists(&node("n1", provider_id))
            .await
    }

    /// The adapter's `instance_shutdown` for Node `n1` with this `spec.providerID`.
    async fn shutdown(legacy: MockLegacyInstances, provider_id: Option<&str>) -> CloudResult<bool> {
        adapter(legacy, None)
            .instance_shutdown(&node("n1", provider_id))
            .await
    }

    /// The adapter's `instance_metadata` for Node `n1` with this `spec.providerID`.
    async fn metadata(
        legacy: MockLegacyInstances,
        zones: Option<MockZones>,
        provider_id: Option<&str>,
    ) -> CloudResult<Option<InstanceMetadata>> {
        adapter(legacy, zones)
            .instance_metadata(&node("n1", provider_id))
            .await
    }

    #[test]
    fn nothing_to_resolve_without_instances() {
        let cloud: Arc<dyn CloudProvider> = Arc::new(MockCloud::new("acme"));
        assert!(resolve_instances(&cloud).is_none());
    }

    #[tokio::test]
    async fn provider_id_is_looked_up_by_name_when_the_spec_has_none() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_id()
            .with(eq("n1"))
            .returning(|_| Ok("i-1".into()));
        legacy
            .expect_instance_exists_by_provider_id()
            .with(eq("acme://i-1"))
            .times(1)
            .returning(|_| Ok(true));
        assert!(exists(legacy, None).await.unwrap());
    }

    #[tokio::test]
    async fn instance_not_found_by_name_means_gone() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_id()
            .returning(|_| Err(CloudError::InstanceNotFound));
        legacy.expect_instance_exists_by_provider_id().never();
        assert!(!exists(legacy, None).await.unwrap());
    }

    #[tokio::test]
    async fn other_errors_are_not_existence_answers() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_id()
            .returning(|_| Err(CloudError::msg("API down")));
        let err = exists(legacy, None).await.unwrap_err();
        assert!(matches!(err, CloudError::Provider { .. }));
        assert_eq!(
            err.chain_to_string(),
            "failed to get instance ID of node \"n1\" from cloud provider: API down"
        );
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_id()
            .returning(|_| Err(CloudError::NotImplemented));
        let err = exists(legacy, None).await.unwrap_err();
        assert!(
            err.is_not_implemented(),
            "Go skips the node on NotImplemented: {err:?}"
        );
    }

    #[tokio::test]
    async fn spec_provider_id_is_used_as_is() {
        let mut legacy = MockLegacyInstances::new();
        legacy.expect_instance_id().never();
        legacy
            .expect_instance_exists_by_provider_id()
            .with(eq("acme://from-spec"))
            .returning(|_| Ok(false));
        assert!(!exists(legacy, Some("acme://from-spec")).await.unwrap());
    }

    #[tokio::test]
    async fn shutdown_not_implemented_means_running() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_shutdown_by_provider_id()
            .returning(|_| Err(CloudError::NotImplemented));
        assert!(!shutdown(legacy, Some("acme://x")).await.unwrap());
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_shutdown_by_provider_id()
            .with(eq("acme://x"))
            .returning(|_| Ok(true));
        assert!(shutdown(legacy, Some("acme://x")).await.unwrap());
    }

    #[tokio::test]
    async fn metadata_falls_back_to_the_name() {
        let mut legacy = MockLegacyInstances::new();
        legacy.expect_instance_id().returning(|_| Ok("i-1".into()));
        legacy
            .expect_instance_type_by_provider_id()
            .returning(|_| Err(CloudError::msg("no by-ID lookup")));
        legacy
            .expect_instance_type()
            .with(eq("n1"))
            .returning(|_| Ok("big".into()));
        legacy
            .expect_node_addresses_by_provider_id()
            .with(eq("acme://i-1"))
            .returning(|_| Ok(vec![node_address("InternalIP", "10.0.0.1")]));
        legacy.expect_node_addresses().never();
        let mut zones = MockZones::new();
        zones
            .expect_get_zone_by_provider_id()
            .returning(|_| Err(CloudError::NotImplemented));
        zones
            .expect_get_zone_by_node_name()
            .with(eq("n1"))
            .returning(|_| Ok(Zone::new("z1", "r1")));
        let meta = metadata(legacy, Some(zones), None).await.unwrap().unwrap();
        assert_eq!(meta.provider_id, "acme://i-1");
        assert_eq!(meta.instance_type, "big");
        assert_eq!(
            meta.node_addresses,
            vec![node_address("InternalIP", "10.0.0.1")]
        );
        assert_eq!((meta.zone.as_str(), meta.region.as_str()), ("z1", "r1"));
    }

    #[tokio::test]
    async fn metadata_without_instance_id_goes_by_name() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_id()
            .returning(|_| Err(CloudError::NotImplemented));
        legacy.expect_instance_type_by_provider_id().never();
        legacy.expect_instance_type().returning(|_| Ok("t".into()));
        legacy.expect_node_addresses_by_provider_id().never();
        legacy.expect_node_addresses().returning(|_| Ok(vec![]));
        let meta = metadata(legacy, None, None).await.unwrap().unwrap();
        assert_eq!(
            meta.provider_id, "",
            "the controller then needs spec.providerID"
        );
        assert_eq!(meta.zone, "", "no Zones, no zone");
    }

    #[tokio::test]
    async fn metadata_errors_report_both_lookups() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_type_by_provider_id()
            .returning(|_| Err(CloudError::msg("by-id failed")));
        legacy
            .expect_instance_type()
            .returning(|_| Err(CloudError::msg("by-name failed")));
        let err = metadata(legacy, None, Some("acme://i-1"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "instance type: error fetching by provider ID: by-id failed; error fetching by node name: by-name failed"
        );
    }

    #[tokio::test]
    async fn metadata_instance_not_found_is_an_error() {
        let mut legacy = MockLegacyInstances::new();
        legacy
            .expect_instance_id()
            .returning(|_| Err(CloudError::InstanceNotFound));
        let err = metadata(legacy, None, None).await.unwrap_err();
        assert!(err.is_instance_not_found());
    }

    #[tokio::test]
    async fn get_instance_provider_id_formats_and_passes_sentinels() {
        let mut legacy = MockLegacyInstances::new();
        legacy.expect_instance_id().returning(|n| match n {
            "a" => Ok("i-a".into()),
            "gone" => Err(CloudError::InstanceNotFound),
            _ => Err(CloudError::NotImplemented),
        });
        assert_eq!(
            get_instance_provider_id("p", &legacy, "a").await.unwrap(),
            "p://i-a"
        );
        assert!(
            get_instance_provider_id("p", &legacy, "gone")
                .await
                .unwrap_err()
                .is_instance_not_found()
        );
        assert!(
            get_instance_provider_id("p", &legacy, "x")
                .await
                .unwrap_err()
                .is_not_implemented()
        );
    }
}
