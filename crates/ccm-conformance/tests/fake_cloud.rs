//! The conformance kit against the bundled fake cloud, in both instance shapes, and against
//! deliberately broken providers, whose broken contracts the report must name.
//!
//! The DigitalOcean-like provider gets the same treatment once it lands.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ccm_conformance::{
    Check, Options, Outcome, Report, TestCloud, TestCloudError, TestCloudResult, UnderTest,
};
use ccm_core::provider::{
    CloudError, CloudProvider, CloudResult, Clusters, InstanceMetadata, Instances, LoadBalancer,
    Route, Routes, default_load_balancer_name,
};
use ccm_fake_cloud::{
    ANNOTATION_LOAD_BALANCER_NAME, FakeCloud, FakeInstance, InstanceState, InstancesShape,
};
use ccm_test::fixtures::NodeBuilder;
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};

// ----- the fake cloud's TestCloud -----

/// Makes and breaks instances of a [`FakeCloud`].
struct FakeTestCloud {
    cloud: Arc<FakeCloud>,
    /// Whether the Nodes it returns carry `spec.providerID`, as with kubelet's `--provider-id`.
    provider_ids: bool,
}

fn name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

#[async_trait]
impl TestCloud for FakeTestCloud {
    async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
        let instance = FakeInstance::new(name);
        let provider_id = instance.provider_id();
        self.cloud.add_instance(instance);
        let node = NodeBuilder::new(name);
        Ok(if self.provider_ids {
            node.provider_id(provider_id)
        } else {
            node
        }
        .build())
    }

    async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
        self.cloud.remove_instance(name(node));
        Ok(())
    }

    async fn stop_instance(&self, node: &Node) -> TestCloudResult<()> {
        if self.cloud.power_off(name(node)) {
            Ok(())
        } else {
            Err(TestCloudError::msg(format!("no instance {:?}", name(node))))
        }
    }

    async fn start_instance(&self, node: &Node) -> TestCloudResult<()> {
        if self.cloud.power_on(name(node)) {
            Ok(())
        } else {
            Err(TestCloudError::msg(format!("no instance {:?}", name(node))))
        }
    }

    async fn list_load_balancers(&self, cluster_name: &str) -> TestCloudResult<Vec<String>> {
        Ok(self
            .cloud
            .load_balancers()
            .into_iter()
            .filter(|lb| lb.cluster_name == cluster_name)
            .map(|lb| lb.name)
            .collect())
    }

    async fn load_balancer_nodes(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> TestCloudResult<Option<Vec<String>>> {
        Ok(self
            .cloud
            .load_balancer(&default_load_balancer_name(service))
            .filter(|lb| lb.cluster_name == cluster_name)
            .map(|lb| lb.nodes.to_vec()))
    }

    /// The name hint naming the Service's load balancer (the fake cloud writes nothing on
    /// Services itself).
    async fn load_balancer_annotations(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> TestCloudResult<BTreeMap<String, String>> {
        let uid = service.metadata.uid.as_deref().unwrap_or_default();
        Ok(self
            .cloud
            .load_balancers()
            .into_iter()
            .filter(|lb| lb.cluster_name == cluster_name && lb.service_uid == uid)
            .map(|lb| (ANNOTATION_LOAD_BALANCER_NAME.to_owned(), lb.name))
            .collect())
    }

    async fn cleanup(&self) -> TestCloudResult<()> {
        let left: Vec<String> = self.cloud.instances().into_iter().map(|i| i.name).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(TestCloudError::msg(format!(
                "instances left behind: {}",
                left.join(", ")
            )))
        }
    }
}

fn fake(shape: InstancesShape, provider_ids: bool) -> (Arc<FakeCloud>, Arc<FakeTestCloud>) {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_instances_shape(shape);
    let test_cloud = Arc::new(FakeTestCloud {
        cloud: cloud.clone(),
        provider_ids,
    });
    (cloud, test_cloud)
}

// ----- the macro, in both shapes -----

async fn v2_with_provider_ids() -> UnderTest {
    let (cloud, test_cloud) = fake(InstancesShape::V2, true);
    (cloud, test_cloud)
}

async fn legacy_without_provider_ids() -> UnderTest {
    let (cloud, test_cloud) = fake(InstancesShape::Legacy, false);
    (cloud, test_cloud)
}

mod v2 {
    use super::*;
    ccm_conformance::conformance_tests!(v2_with_provider_ids);

    #[test]
    fn the_macro_makes_a_test_per_check() {
        assert_eq!(conformance::CHECKS, Check::ALL);
    }
}

mod legacy {
    use super::*;
    // Every check must run and pass: the legacy fake cloud supports everything.
    ccm_conformance::conformance_tests!(
        legacy_without_provider_ids,
        Options::new("legacy-cluster").with_strict(true)
    );
}

// ----- the function, in both shapes, with and without provider IDs -----

fn labels(report: &Report, label: &str) -> Vec<&'static str> {
    report.with_label(label).iter().map(|c| c.id()).collect()
}

#[tokio::test]
async fn v2_fake_cloud_passes_everything_it_supports() {
    for provider_ids in [true, false] {
        let (cloud, test_cloud) = fake(InstancesShape::V2, provider_ids);
        // ANCHOR: run_all
        let report = ccm_conformance::run(cloud.clone(), test_cloud, Options::default()).await;
        println!("{report}");
        report.assert_all_passed(); // or `report.into_result()?`
        // ANCHOR_END: run_all
        assert_eq!(
            labels(&report, "skip"),
            ["legacy_instances.instance_id_not_found_only_when_gone"],
            "only the legacy check is skipped for a V2 provider"
        );
        assert!(report.cleanup_errors().is_empty(), "{report}");
        assert_eq!(report.results().len(), Check::ALL.len());
        assert!(
            cloud.load_balancers().is_empty(),
            "every load balancer was removed"
        );
        assert!(cloud.routes("ccm-conformance").is_empty());
    }
}

#[tokio::test]
async fn legacy_fake_cloud_passes_everything() {
    for provider_ids in [true, false] {
        let (cloud, test_cloud) = fake(InstancesShape::Legacy, provider_ids);
        let options = Options::new("legacy").with_strict(true);
        let report = ccm_conformance::run(cloud, test_cloud, options).await;
        println!("{report}");
        report.assert_all_passed();
        assert!(
            report.capabilities().contains("LegacyInstancesAdapter"),
            "{report}"
        );
    }
}

#[tokio::test]
async fn skips_say_why() {
    let (cloud, test_cloud) = fake(InstancesShape::V2, true);
    cloud.set_routes_enabled(false);
    let options = Options::default().skipping(Check::InstancesExistsTrueForRunning);
    let report = ccm_conformance::run(cloud, test_cloud, options).await;
    report.assert_all_passed();
    assert_eq!(
        report.outcome(Check::InstancesExistsTrueForRunning),
        Some(&Outcome::Skipped {
            reason: "listed in Options::skip".into()
        })
    );
    assert_eq!(
        report.outcome(Check::RoutesListScopedToCluster),
        Some(&Outcome::Skipped {
            reason: "the provider has no Routes (routes() returns None)".into()
        })
    );
    let text = report.to_string();
    assert!(
        text.contains("why: the provider has no Routes (routes() returns None)"),
        "{text}"
    );
    assert!(
        text.contains("skip      routes.create_list_delete_round_trip"),
        "{text}"
    );
}

/// A test cloud that can only create and delete: the checks that need more are skipped or
/// check less, and say so.
struct MinimalTestCloud(Arc<FakeTestCloud>);

#[async_trait]
impl TestCloud for MinimalTestCloud {
    async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
        self.0.create_instance(name).await
    }
    async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
        self.0.delete_instance(node).await
    }
}

#[tokio::test]
async fn unsupported_test_cloud_methods_skip_or_say_what_was_not_checked() {
    let (cloud, test_cloud) = fake(InstancesShape::Legacy, true);
    let report = ccm_conformance::run(
        cloud,
        Arc::new(MinimalTestCloud(test_cloud)),
        Options::default(),
    )
    .await;
    println!("{report}");
    report.assert_all_passed();
    assert_eq!(
        labels(&report, "skip"),
        [
            "instances.exists_true_for_stopped",
            "instances.shutdown_true_when_stopped"
        ]
    );
    assert!(
        matches!(report.outcome(Check::InstancesExistsTrueForStopped),
            Some(Outcome::Skipped { reason }) if reason.starts_with("TestCloud::stop_instance(\"ccm-conformance-")
                && reason.ends_with("\"): TestCloud::stop_instance is not implemented")),
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("note: load balancers not counted: TestCloud::list_load_balancers: TestCloud::list_load_balancers is not implemented"),
        "{text}"
    );
    assert!(
        text.contains("note: targets not verified: TestCloud::load_balancer_nodes"),
        "{text}"
    );
    assert!(
        text.contains("note: not checked for a stopped instance: TestCloud::stop_instance"),
        "{text}"
    );
}

// ----- a deliberately broken provider -----

/// The fake cloud with five contracts broken:
/// - a stopped instance does not exist;
/// - `ensure_load_balancer` re-creates an existing load balancer (new address each time);
/// - `ensure_load_balancer_deleted` fails when there is nothing to delete;
/// - `list_routes` lists every cluster's routes;
/// - `Clusters::master` says "not implemented" in a Provider error.
struct Broken(Arc<FakeCloud>);

impl CloudProvider for Broken {
    fn provider_name(&self) -> &str {
        self.0.provider_name()
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }
    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }
    fn routes(&self) -> Option<&dyn Routes> {
        Some(self)
    }
    fn clusters(&self) -> Option<&dyn Clusters> {
        Some(self)
    }
}

#[async_trait]
impl Instances for Broken {
    async fn instance_exists(&self, node: &Node) -> CloudResult<bool> {
        let stopped = self
            .0
            .instance(name(node))
            .is_some_and(|i| i.state == InstanceState::Stopped);
        // Broken: "stopped" is taken for "gone".
        Ok(!stopped && Instances::instance_exists(&*self.0, node).await?)
    }
    async fn instance_shutdown(&self, node: &Node) -> CloudResult<bool> {
        Instances::instance_shutdown(&*self.0, node).await
    }
    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        self.0.instance_metadata(node).await
    }
}

#[async_trait]
impl LoadBalancer for Broken {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        self.0.get_load_balancer(cluster, service).await
    }
    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        // Broken: not idempotent, every call makes the load balancer anew.
        self.0
            .ensure_load_balancer_deleted(cluster, service)
            .await?;
        self.0.ensure_load_balancer(cluster, service, nodes).await
    }
    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        self.0.update_load_balancer(cluster, service, nodes).await
    }
    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> CloudResult<()> {
        // Broken: "nothing to delete" is an error.
        if self.0.get_load_balancer(cluster, service).await?.is_none() {
            return Err(CloudError::msg("load balancer not found"));
        }
        self.0.ensure_load_balancer_deleted(cluster, service).await
    }
}

#[async_trait]
impl Routes for Broken {
    async fn list_routes(&self, _cluster: &str) -> CloudResult<Vec<Route>> {
        // Broken: not scoped to the cluster.
        let mut all = Vec::new();
        for cluster in self.0.list_clusters().await? {
            all.extend(self.0.routes(&cluster));
        }
        Ok(all)
    }
    async fn create_route(&self, cluster: &str, hint: &str, route: &Route) -> CloudResult<()> {
        self.0.create_route(cluster, hint, route).await
    }
    async fn delete_route(&self, cluster: &str, route: &Route) -> CloudResult<()> {
        self.0.delete_route(cluster, route).await
    }
}

#[async_trait]
impl Clusters for Broken {
    async fn list_clusters(&self) -> CloudResult<Vec<String>> {
        self.0.list_clusters().await
    }
    async fn master(&self, _cluster: &str) -> CloudResult<String> {
        // Broken: NotImplemented in words, not in kind.
        Err(CloudError::msg("master: not implemented"))
    }
}

#[tokio::test]
async fn the_report_names_the_broken_contracts() {
    let (cloud, test_cloud) = fake(InstancesShape::V2, false);
    let report =
        ccm_conformance::run(Arc::new(Broken(cloud)), test_cloud, Options::default()).await;
    println!("{report}");
    let failed: Vec<&str> = report.failures().iter().map(|c| c.id()).collect();
    assert_eq!(
        failed,
        [
            "capabilities.not_implemented_reported_as_such",
            "instances.exists_true_for_stopped",
            "load_balancer.ensure_is_idempotent",
            "load_balancer.ensure_deleted_is_idempotent",
            "load_balancer.ensure_deleted_when_nothing_exists",
            "routes.list_scoped_to_cluster",
        ],
        "{report}"
    );
    let message = |check| match report.outcome(check) {
        Some(Outcome::Failed { message }) => message.clone(),
        other => panic!("{check} did not fail: {other:?}"),
    };
    assert!(
        message(Check::CapabilitiesNotImplementedReportedAsSuch).contains(
            "Clusters::master(\"ccm-conformance\") returned a Provider error that says it is not implemented"
        ),
        "{report}"
    );
    let stopped = message(Check::InstancesExistsTrueForStopped);
    assert!(
        stopped.starts_with("instance_exists for Node \""),
        "{stopped}"
    );
    assert!(
        stopped.contains("instance stopped returned Ok(false)"),
        "{stopped}"
    );
    let idempotent = message(Check::LoadBalancerEnsureIsIdempotent);
    assert!(
        idempotent.contains("the second ensure_load_balancer(Service ccm-conformance/")
            && idempotent.contains("with the same arguments returned ingress [ip 100.64.0."),
        "{idempotent}"
    );
    assert!(
        message(Check::LoadBalancerEnsureDeletedIsIdempotent).contains(
            "second call, nothing left to delete returned Provider error: load balancer not found"
        ),
        "{report}"
    );
    assert!(
        message(Check::LoadBalancerEnsureDeletedWhenNothingExists)
            .contains("returned Provider error: load balancer not found: it must return Ok"),
        "{report}"
    );
    assert!(
        message(Check::RoutesListScopedToCluster)
            .contains("list_routes(\"ccm-conformance\") lists the route for 10.253."),
        "{report}"
    );
    // The table names each broken contract next to what was observed.
    let text = report.to_string();
    for check in report.failures() {
        assert!(
            text.contains(&format!("FAIL      {check}")),
            "{check} in\n{text}"
        );
        assert!(
            text.contains(&format!("contract: {}", check.contract())),
            "{text}"
        );
    }
    assert!(report.into_result().is_err());
}

// ----- providers that misbehave in other ways -----

/// Panics in `instance_exists`, never answers `get_load_balancer`.
struct Unruly;

impl CloudProvider for Unruly {
    fn provider_name(&self) -> &str {
        "unruly"
    }

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

#[async_trait]
impl Instances for Unruly {
    async fn instance_exists(&self, _node: &Node) -> CloudResult<bool> {
        panic!("bug in the provider");
    }
    async fn instance_shutdown(&self, _node: &Node) -> CloudResult<bool> {
        Err(CloudError::NotImplemented)
    }
    async fn instance_metadata(&self, node: &Node) -> CloudResult<Option<InstanceMetadata>> {
        Ok(Some(
            InstanceMetadata::new(format!("unruly://{}", name(node)))
                .with_address(ccm_core::provider::node_address("InternalIP", "10.0.0.300")),
        ))
    }
}

#[async_trait]
impl LoadBalancer for Unruly {
    async fn get_load_balancer(
        &self,
        _cluster: &str,
        _service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        std::future::pending().await
    }
    async fn ensure_load_balancer(
        &self,
        _cluster: &str,
        _service: &Service,
        _nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        Ok(LoadBalancerStatus::default())
    }
    async fn update_load_balancer(
        &self,
        _cluster: &str,
        _service: &Service,
        _nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        Err(CloudError::NotImplemented)
    }
    async fn ensure_load_balancer_deleted(
        &self,
        _cluster: &str,
        _service: &Service,
    ) -> CloudResult<()> {
        Err(CloudError::ImplementedElsewhere)
    }
}

#[tokio::test]
async fn panics_hangs_and_bad_answers_fail_their_check_not_the_suite() {
    let (_, test_cloud) = fake(InstancesShape::V2, false);
    let test_cloud = Arc::new(MinimalTestCloud(test_cloud));
    let options = Options::default().with_check_timeout(Duration::from_millis(300));
    let report = ccm_conformance::run_checks(
        Arc::new(Unruly),
        test_cloud,
        options,
        &[
            Check::InstancesExistsTrueForRunning,
            Check::InstancesShutdownTrueWhenStopped,
            Check::InstancesMetadataAddressesValid,
            Check::LoadBalancerGetFalseBeforeEnsure,
            Check::LoadBalancerUpdateWithNewNodes,
            Check::LoadBalancerEnsureDeletedWhenNothingExists,
            Check::LoadBalancerStatusHasValidIngress,
        ],
    )
    .await;
    println!("{report}");
    let outcome = |check| report.outcome(check).cloned().unwrap();
    assert!(
        matches!(outcome(Check::InstancesExistsTrueForRunning),
            Outcome::Failed { message } if message.starts_with("panicked during instance_exists for Node \"ccm-conformance-")
                && message.ends_with(": bug in the provider")),
        "{report}"
    );
    assert!(
        matches!(outcome(Check::InstancesShutdownTrueWhenStopped),
            Outcome::NotImplemented { call } if call.starts_with("instance_shutdown for Node")),
        "{report}"
    );
    assert!(
        matches!(outcome(Check::InstancesMetadataAddressesValid),
            Outcome::Failed { message } if message.ends_with("returned invalid addresses: InternalIP address \"10.0.0.300\" is not an IP address")),
        "{report}"
    );
    assert!(
        matches!(outcome(Check::LoadBalancerGetFalseBeforeEnsure),
            Outcome::Failed { message } if message.starts_with("no answer within 300ms (Options::check_timeout), during get_load_balancer(Service ccm-conformance/")),
        "{report}"
    );
    assert!(
        matches!(outcome(Check::LoadBalancerUpdateWithNewNodes),
            Outcome::NotImplemented { call } if call.starts_with("update_load_balancer(")),
        "{report}"
    );
    assert!(
        matches!(outcome(Check::LoadBalancerEnsureDeletedWhenNothingExists),
            Outcome::Failed { message } if message.contains("returned ImplementedElsewhere, which it never may")),
        "{report}"
    );
    assert!(
        matches!(outcome(Check::LoadBalancerStatusHasValidIngress),
            Outcome::Failed { message } if message.contains("returned a status with no ingress")),
        "{report}"
    );
    // The clean-up of the load balancers fails too (ImplementedElsewhere), and says so.
    assert!(
        report.results().iter().any(|r| r
            .cleanup_errors
            .iter()
            .any(|e| e.contains("ImplementedElsewhere"))),
        "{report}"
    );
}

/// Supports nothing.
struct Nothing;

impl CloudProvider for Nothing {
    fn provider_name(&self) -> &str {
        "nothing"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_provider_without_capabilities_is_skipped_with_reasons() {
    let (_, test_cloud) = fake(InstancesShape::V2, false);
    let report =
        ccm_conformance::run(Arc::new(Nothing), test_cloud.clone(), Options::default()).await;
    println!("{report}");
    assert!(report.is_success(), "{report}");
    assert_eq!(
        labels(&report, "pass"),
        ["capabilities.not_implemented_reported_as_such"]
    );
    assert_eq!(report.with_label("skip").len(), Check::ALL.len() - 1);
    for r in report.results().iter().skip(1) {
        assert!(
            matches!(&r.outcome, Outcome::Skipped { reason } if reason.ends_with("None)")),
            "{r:?}"
        );
    }
    let strict = ccm_conformance::run(
        Arc::new(Nothing),
        test_cloud,
        Options::default().with_strict(true),
    )
    .await;
    assert_eq!(strict.failures().len(), Check::ALL.len() - 1);
}

/// Offers routes whose every call is NotImplemented: it should have said `None`.
struct HollowRoutes;

impl CloudProvider for HollowRoutes {
    fn provider_name(&self) -> &str {
        "hollow"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
    fn routes(&self) -> Option<&dyn Routes> {
        Some(self)
    }
}

#[async_trait]
impl Routes for HollowRoutes {
    async fn list_routes(&self, _cluster: &str) -> CloudResult<Vec<Route>> {
        Err(CloudError::NotImplemented)
    }
    async fn create_route(&self, _: &str, _: &str, _: &Route) -> CloudResult<()> {
        Err(CloudError::NotImplemented)
    }
    async fn delete_route(&self, _: &str, _: &Route) -> CloudResult<()> {
        Err(CloudError::NotImplemented)
    }
}

#[tokio::test]
async fn not_implemented_is_reported_as_such() {
    let (_, test_cloud) = fake(InstancesShape::V2, false);
    let report = ccm_conformance::run(Arc::new(HollowRoutes), test_cloud, Options::default()).await;
    println!("{report}");
    assert!(
        matches!(report.outcome(Check::CapabilitiesNotImplementedReportedAsSuch),
            Some(Outcome::Failed { message }) if message == "routes() returns Some, but every call returned NotImplemented; return None from routes() when the capability is unsupported, so its controller does not start"),
        "{report}"
    );
    assert!(
        matches!(report.outcome(Check::RoutesCreateListDeleteRoundTrip),
            Some(Outcome::NotImplemented { call }) if call == "list_routes(\"ccm-conformance\") before creating any route"),
        "{report}"
    );
    assert!(report.to_string().contains(
        "list_routes(\"ccm-conformance\") before creating any route returned CloudError::NotImplemented"
    ));
}

/// Panics when asked whether it has routes.
struct PanickyAccessor;

impl CloudProvider for PanickyAccessor {
    fn provider_name(&self) -> &str {
        "panicky"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
    fn routes(&self) -> Option<&dyn Routes> {
        panic!("routes() is broken");
    }
}

#[tokio::test]
async fn a_panicking_accessor_fails_the_checks_that_ask_it() {
    let (_, test_cloud) = fake(InstancesShape::V2, false);
    let report = ccm_conformance::run_checks(
        Arc::new(PanickyAccessor),
        test_cloud,
        Options::default(),
        &[
            Check::CapabilitiesNotImplementedReportedAsSuch,
            Check::LoadBalancerEnsureDeletedWhenNothingExists,
            Check::RoutesCreateListDeleteRoundTrip,
        ],
    )
    .await;
    println!("{report}");
    assert_eq!(report.capabilities(), "a capability accessor panicked");
    for check in [
        Check::CapabilitiesNotImplementedReportedAsSuch,
        Check::RoutesCreateListDeleteRoundTrip,
    ] {
        assert_eq!(
            report.outcome(check),
            Some(&Outcome::Failed {
                message: "panicked during routes(): routes() is broken".into()
            }),
            "{report}"
        );
    }
    assert!(
        matches!(
            report.outcome(Check::LoadBalancerEnsureDeletedWhenNothingExists),
            Some(Outcome::Skipped { .. })
        ),
        "{report}"
    );
}

// ----- providers that trust what a user wrote on a Service -----

/// How a provider that skips the ownership check goes wrong.
#[derive(Clone, Copy)]
enum Trust {
    /// It uses whatever load balancer the name hint names, as its owner would.
    TakesOver,
    /// It refuses a load balancer that is not the Service's, but with a plain Provider error
    /// (so the service controller keeps the Service's finalizer forever on deletion).
    RefusesInWords,
}

/// The fake cloud behind a provider that gets the ownership rule wrong.
struct Trusting(Arc<FakeCloud>, Trust);

impl Trusting {
    /// The Service as the hint's owner: what a provider that trusts the hint acts as.
    fn as_owner(&self, service: &Service) -> Service {
        let mut service = service.clone();
        let hint = service
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_LOAD_BALANCER_NAME))
            .cloned();
        if let (Trust::TakesOver, Some(lb)) = (self.1, hint.and_then(|h| self.0.load_balancer(&h)))
        {
            service.metadata.uid = Some(lb.service_uid);
        }
        service
    }

    fn answer<T>(&self, result: CloudResult<T>) -> CloudResult<T> {
        match (self.1, result) {
            (Trust::RefusesInWords, Err(e)) if e.is_not_owned() => Err(CloudError::msg(format!(
                "refusing to manage another Service's load balancer ({e})"
            ))),
            (_, result) => result,
        }
    }
}

impl CloudProvider for Trusting {
    fn provider_name(&self) -> &str {
        self.0.provider_name()
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
    fn instances(&self) -> Option<&dyn Instances> {
        CloudProvider::instances(&*self.0)
    }
    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }
}

#[async_trait]
impl LoadBalancer for Trusting {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        let service = self.as_owner(service);
        self.answer(self.0.get_load_balancer(cluster, &service).await)
    }
    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        let service = self.as_owner(service);
        self.answer(self.0.ensure_load_balancer(cluster, &service, nodes).await)
    }
    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        let service = self.as_owner(service);
        self.answer(self.0.update_load_balancer(cluster, &service, nodes).await)
    }
    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> CloudResult<()> {
        let service = self.as_owner(service);
        self.answer(self.0.ensure_load_balancer_deleted(cluster, &service).await)
    }
}

/// What the ownership check observed of a provider that gets the rule wrong.
async fn ownership_failure(trust: Trust) -> String {
    let (cloud, test_cloud) = fake(InstancesShape::V2, true);
    let report = ccm_conformance::run_checks(
        Arc::new(Trusting(cloud, trust)),
        test_cloud,
        Options::default(),
        &[Check::LoadBalancerCopiedAnnotationsNeverTakeOver],
    )
    .await;
    println!("{report}");
    match report.outcome(Check::LoadBalancerCopiedAnnotationsNeverTakeOver) {
        Some(Outcome::Failed { message }) => message.clone(),
        other => panic!("not failed: {other:?}\n{report}"),
    }
}

#[tokio::test]
async fn a_provider_that_trusts_a_copied_hint_fails_the_ownership_check() {
    let message = ownership_failure(Trust::TakesOver).await;
    assert!(
        message.starts_with("ensure_load_balancer(Service ccm-conformance-other/")
            && message.contains(", for a Service of another namespace carrying a copy of the first's annotations, returned ingress [ip 100.64.0.1] but the cloud has no new load balancer")
            && message.ends_with("it used the first Service's instead of refusing with CloudError::NotOwned or making its own"),
        "{message}"
    );
}

#[tokio::test]
async fn a_provider_that_refuses_in_words_fails_the_ownership_check() {
    let message = ownership_failure(Trust::RefusesInWords).await;
    assert!(
        message.contains("returned Provider error: refusing to manage another Service's load balancer (load balancer \"a")
            && message.ends_with(": a load balancer that is not the Service's is refused with CloudError::NotOwned (the service controller reports it as such), or the Service gets its own"),
        "{message}"
    );
}

#[tokio::test]
async fn the_ownership_check_says_what_it_copied_and_cleans_up() {
    // With the fake cloud's name hint copied: passes, leaves nothing behind.
    let (cloud, test_cloud) = fake(InstancesShape::V2, true);
    let report = ccm_conformance::run_checks(
        cloud.clone(),
        test_cloud.clone(),
        Options::default(),
        &[Check::LoadBalancerCopiedAnnotationsNeverTakeOver],
    )
    .await;
    println!("{report}");
    report.assert_all_passed();
    assert!(report.cleanup_errors().is_empty(), "{report}");
    assert!(
        cloud.load_balancers().is_empty(),
        "{:?}",
        cloud.load_balancers()
    );
    // A test cloud that cannot say which annotations lead to a load balancer: the check
    // still runs and says what it did not copy.
    let report = ccm_conformance::run_checks(
        cloud.clone(),
        Arc::new(MinimalTestCloud(test_cloud)),
        Options::default(),
        &[Check::LoadBalancerCopiedAnnotationsNeverTakeOver],
    )
    .await;
    report.assert_all_passed();
    let text = report.to_string();
    assert!(
        text.contains("only the Service's own annotations were copied: TestCloud::load_balancer_annotations: TestCloud::load_balancer_annotations is not implemented"),
        "{text}"
    );
    assert!(
        text.contains("no annotation to copy, so no oversized copy"),
        "{text}"
    );
    assert!(cloud.load_balancers().is_empty());
}
