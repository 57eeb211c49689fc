//! The adapter a provider author writes so the suite can make and break instances in their
//! cloud: [`TestCloud`].
//!
//! The provider traits only ask questions about instances; they never create or stop one. To
//! check that a stopped instance still "exists" or that a deleted one does not, the suite
//! needs a way to stop and delete instances, and that is cloud-specific. [`TestCloud`] is that
//! small surface: create, stop, start and delete an instance, and optionally look at load
//! balancers from the cloud's side. Methods a cloud cannot offer return
//! [`TestCloudError::Unsupported`], and the checks that need them are reported as skipped with
//! that reason, never silently passed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use ccm_core::provider::BoxError;
use k8s_openapi::api::core::v1::{Node, Service};

/// The result of a [`TestCloud`] call.
pub type TestCloudResult<T> = Result<T, TestCloudError>;

/// Why a [`TestCloud`] call did not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestCloudError {
    /// The test cloud cannot do this at all; the checks that need it are skipped with this
    /// reason.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// The test cloud tried and failed (quota, API error, timeout). The check that needed it
    /// is reported as an error of the test set-up, not as a broken contract.
    #[error("{context}")]
    Failed {
        /// What the test cloud was doing.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl TestCloudError {
    /// [`TestCloudError::Unsupported`] with a reason.
    pub fn unsupported(reason: impl Into<String>) -> Self {
        Self::Unsupported(reason.into())
    }

    /// [`TestCloudError::Failed`] with a message and no source.
    pub fn msg(context: impl Into<String>) -> Self {
        Self::Failed {
            context: context.into(),
            source: None,
        }
    }

    /// [`TestCloudError::Failed`] with what was being done and the error that stopped it.
    pub fn failed(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Failed {
            context: context.into(),
            source: Some(source.into()),
        }
    }
}

/// Makes and breaks instances (and looks at load balancers) in the provider's cloud, for the
/// conformance checks.
///
/// Implement it next to your provider's tests, on top of your cloud's API client (or of an
/// in-memory double of it). Every method that changes something must return only once the
/// cloud's API reports the change (the instance runs, is stopped, is gone): the checks then
/// ask the provider right away, or keep asking for at most
/// [`Options::settle_timeout`](crate::Options::settle_timeout) when your cloud is only
/// eventually consistent.
///
/// Only [`create_instance`](Self::create_instance) and
/// [`delete_instance`](Self::delete_instance) are required. The others default to
/// [`TestCloudError::Unsupported`]: the checks that need them are skipped with the reason,
/// or check a little less and say so in the report.
///
/// ```
/// use ccm_conformance::{TestCloud, TestCloudError, TestCloudResult};
/// use k8s_openapi::api::core::v1::Node;
///
/// /// A cloud whose instances cannot be stopped.
/// struct MyTestCloud;
///
/// #[async_trait::async_trait]
/// impl TestCloud for MyTestCloud {
///     async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
///         // ... call the cloud's API, wait until the instance runs ...
///         let mut node = Node::default();
///         node.metadata.name = Some(name.to_owned());
///         Ok(node)
///     }
///     async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
///         // ... call the cloud's API, wait until the instance is gone ...
///         Ok(())
///     }
///     async fn stop_instance(&self, _node: &Node) -> TestCloudResult<()> {
///         Err(TestCloudError::unsupported("my cloud bills stopped instances, so tests never stop one"))
///     }
/// }
/// ```
#[async_trait]
pub trait TestCloud: Send + Sync + 'static {
    /// Creates a running instance for a Node named `name` and returns that Node as its
    /// kubelet would register it: `metadata.name` is `name`, and `spec.providerID` is set
    /// when the cloud knows it at registration (kubelet's `--provider-id`), empty otherwise.
    /// The suite fills in the rest itself when it needs it, from
    /// [`Instances::instance_metadata`](ccm_core::provider::Instances::instance_metadata).
    ///
    /// Names are unique per run and valid DNS labels:
    /// `<`[`Options::name_prefix`](crate::Options::name_prefix)`>-<run id>-<n>`.
    async fn create_instance(&self, name: &str) -> TestCloudResult<Node>;

    /// Deletes (terminates) the instance behind `node`, for good. Deleting an instance that
    /// is already gone is not an error.
    async fn delete_instance(&self, node: &Node) -> TestCloudResult<()>;

    /// Stops (powers off) the instance behind `node`, without deleting it.
    async fn stop_instance(&self, _node: &Node) -> TestCloudResult<()> {
        Err(TestCloudError::unsupported(
            "TestCloud::stop_instance is not implemented",
        ))
    }

    /// Starts the stopped instance behind `node` again.
    async fn start_instance(&self, _node: &Node) -> TestCloudResult<()> {
        Err(TestCloudError::unsupported(
            "TestCloud::start_instance is not implemented",
        ))
    }

    /// The names (or IDs) of every load balancer of cluster `cluster_name` the cloud holds,
    /// as the cloud sees them. Lets the suite count load balancers: two
    /// `ensure_load_balancer` calls must leave one.
    async fn list_load_balancers(&self, _cluster_name: &str) -> TestCloudResult<Vec<String>> {
        Err(TestCloudError::unsupported(
            "TestCloud::list_load_balancers is not implemented",
        ))
    }

    /// The names of the Nodes the load balancer of `service` sends traffic to, as the cloud
    /// sees them, or `None` when it has no load balancer. Lets the suite check that
    /// `update_load_balancer` really changed the targets.
    async fn load_balancer_nodes(
        &self,
        _cluster_name: &str,
        _service: &Service,
    ) -> TestCloudResult<Option<Vec<String>>> {
        Err(TestCloudError::unsupported(
            "TestCloud::load_balancer_nodes is not implemented",
        ))
    }

    /// The annotations by which the provider finds `service`'s load balancer in cluster
    /// `cluster_name`, with the values they have once `ensure_load_balancer` made it: those
    /// the provider writes onto the Service itself (its cloud ID, through the
    /// `ServiceAnnotator`) and those a user may set to name it (a name hint). Anyone who can
    /// edit Services in one namespace can copy them onto another Service; the check
    /// `load_balancer.copied_annotations_never_take_over` does, and verifies that the copy
    /// never reaches this load balancer.
    ///
    /// Outside a cluster the provider's annotation writes go nowhere, so the suite asks here
    /// what they would have been (e.g. `{"example.com/load-balancer-id": <the ID the cloud
    /// gave it>}`). Empty when the provider finds load balancers by UID only. Unsupported by
    /// default: the check then copies only the Service's own annotations, and says so.
    async fn load_balancer_annotations(
        &self,
        _cluster_name: &str,
        _service: &Service,
    ) -> TestCloudResult<BTreeMap<String, String>> {
        Err(TestCloudError::unsupported(
            "TestCloud::load_balancer_annotations is not implemented",
        ))
    }

    /// Called once at the end of a run, after the suite deleted what it made: remove
    /// anything left behind (for example every instance whose name starts with the prefix).
    async fn cleanup(&self) -> TestCloudResult<()> {
        Ok(())
    }
}
