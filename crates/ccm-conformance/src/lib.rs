//! The provider conformance kit for `ccm-core`: checks a cloud provider against the contracts
//! the cloud-controller-manager's controllers rely on, and names the contract it breaks.
//!
//! The controllers trust a provider's answers: `instance_exists` returning `Ok(false)` deletes a
//! Node, a second `ensure_load_balancer` must not make a second load balancer, `list_routes`
//! must not list another cluster's routes. These contracts come from Go's
//! `k8s.io/cloud-provider`, where nothing checks them. This crate does: give it your provider and
//! a small [`TestCloud`] adapter that can create, stop and delete instances in your cloud, and
//! it runs one [`Check`] per contract and returns a [`Report`].
//!
//! # In one line
//!
//! As one test per contract, so `cargo test` lists them by name
//! (`conformance::instances::exists_true_for_stopped`, ...):
//!
//! ```
//! # async fn provider_and_test_cloud() -> ccm_conformance::UnderTest { unimplemented!() }
//! ccm_conformance::conformance_tests!(provider_and_test_cloud);
//! # fn main() {}
//! ```
//!
//! or as one test running them all:
//!
//! ```
//! # use std::sync::Arc;
//! # use ccm_conformance::{Options, TestCloud, TestCloudResult};
//! # use ccm_core::provider::CloudProvider;
//! # use ccm_fake_cloud::{FakeCloud, FakeInstance};
//! # use k8s_openapi::api::core::v1::{Node, NodeSpec};
//! # struct FakeTestCloud(Arc<FakeCloud>);
//! # #[async_trait::async_trait]
//! # impl TestCloud for FakeTestCloud {
//! #     async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
//! #         self.0.add_instance(FakeInstance::new(name));
//! #         let mut node = Node::default();
//! #         node.metadata.name = Some(name.into());
//! #         Ok(node)
//! #     }
//! #     async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
//! #         self.0.remove_instance(node.metadata.name.as_deref().unwrap_or_default());
//! #         Ok(())
//! #     }
//! #     async fn stop_instance(&self, node: &Node) -> TestCloudResult<()> {
//! #         self.0.power_off(node.metadata.name.as_deref().unwrap_or_default());
//! #         Ok(())
//! #     }
//! # }
//! # #[tokio::main]
//! # async fn main() {
//! let cloud = Arc::new(FakeCloud::new());
//! let report = ccm_conformance::run(
//!     cloud.clone(),                            // the provider
//!     Arc::new(FakeTestCloud(cloud)),           // its TestCloud
//!     Options::new("my-test-cluster"),
//! )
//! .await;
//! println!("{report}");
//! report.assert_all_passed();
//! # }
//! ```
//!
//! When the cloud is held in maps (a first provider, a test double), [`memory::MemoryCloud`]
//! is ready: the provider answers from it, and it is its own [`TestCloud`].
//!
//! `tests/fake_cloud.rs` in this crate's repository runs both forms against the bundled fake
//! cloud, in both instance shapes, and shows the suite catching a deliberately broken provider.
//!
//! # What a run does
//!
//! The checks ([`Check::ALL`]) run one after the other, each under
//! [`Options::check_timeout`] in a task of its own, so a provider that hangs or panics fails
//! that check (naming the call it was in) instead of the suite. Instance checks go through
//! [`resolve_instances`](ccm_core::provider::resolve_instances) exactly as the controllers do,
//! so a provider with only `LegacyInstances` is checked through `LegacyInstancesAdapter`. Each
//! check creates what it needs (instances through the [`TestCloud`], Services with fresh UIDs,
//! routes in [`Options::route_cidr`]) and removes it when it ends, however it ends; the
//! [`TestCloud::cleanup`] hook runs last.
//!
//! A check ends as an [`Outcome`]: passed; failed, with the broken contract and what the
//! provider answered; skipped, with why (a capability the provider lacks, a [`TestCloud`]
//! method it does not offer); not implemented, naming the call that returned
//! `CloudError::NotImplemented`; or errored, when the test set-up itself failed.
//!
//! # Kubernetes versions
//!
//! Like `ccm-core`, this crate enables no `k8s-openapi` version feature: your provider's
//! dev-dependencies pick one, e.g. `k8s-openapi = { version = "0.29", features = ["v1_36"] }`.
#![forbid(unsafe_code)]

mod check;
mod checks;
mod context;
pub mod memory;
mod options;
mod report;
mod test_cloud;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use ccm_core::provider::CloudProvider;

pub use self::check::{Check, UnknownCheck};
pub use self::options::Options;
pub use self::report::{CheckResult, ConformanceError, Outcome, Report};
pub use self::test_cloud::{TestCloud, TestCloudError, TestCloudResult};

use self::context::{Ctx, Shared};

/// What the setup function of [`conformance_tests!`] returns: the provider under test and its
/// [`TestCloud`].
pub type UnderTest = (Arc<dyn CloudProvider>, Arc<dyn TestCloud>);

/// Runs every check ([`Check::ALL`]) against `provider`, making and breaking instances with
/// `cloud`.
///
/// Never panics on a provider's answer: a wrong answer, an error, a panic or a hang inside
/// the provider fails the check concerned. Must be called inside a Tokio runtime with the
/// time driver enabled (`#[tokio::test]` is one).
pub async fn run(
    provider: Arc<dyn CloudProvider>,
    cloud: Arc<dyn TestCloud>,
    options: Options,
) -> Report {
    run_checks(provider, cloud, options, Check::ALL).await
}

/// Runs the given checks, in order; see [`run`].
pub async fn run_checks(
    provider: Arc<dyn CloudProvider>,
    cloud: Arc<dyn TestCloud>,
    options: Options,
    checks: &[Check],
) -> Report {
    let (provider_name, capabilities) = describe(&*provider);
    let cluster_name = options.cluster_name.clone();
    let strict = options.strict;
    let timeout = options.check_timeout;
    let shared = Arc::new(Shared::new(provider, cloud, options));
    let mut results = Vec::with_capacity(checks.len());
    for &check in checks {
        results.push(run_one(&shared, check).await);
    }
    let mut cleanup_errors = shared.delete_pool().await;
    match tokio::time::timeout(timeout, shared.cloud.cleanup()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => cleanup_errors.push(format!("TestCloud::cleanup: {e}")),
        Err(_) => cleanup_errors.push(format!("TestCloud::cleanup timed out after {timeout:?}")),
    }
    Report {
        provider_name,
        cluster_name,
        capabilities,
        strict,
        results,
        cleanup_errors,
    }
}

/// The provider's name and capabilities, for the report's header; a panicking accessor is
/// reported, not propagated.
fn describe(provider: &dyn CloudProvider) -> (String, String) {
    let name = std::panic::catch_unwind(AssertUnwindSafe(|| provider.provider_name().to_owned()))
        .unwrap_or_else(|_| "<provider_name() panicked>".into());
    let capabilities = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let instances = if provider.instances().is_some() {
            "Instances"
        } else if provider.legacy_instances().is_some() {
            "LegacyInstances through LegacyInstancesAdapter"
        } else {
            "none"
        };
        let others: Vec<&str> = [
            ("zones", provider.zones().is_some()),
            ("load_balancer", provider.load_balancer().is_some()),
            ("routes", provider.routes().is_some()),
            ("clusters", provider.clusters().is_some()),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        format!(
            "instances: {instances}; also: {}; has_cluster_id: {}",
            if others.is_empty() {
                "nothing".to_owned()
            } else {
                others.join(", ")
            },
            provider.has_cluster_id()
        )
    }))
    .unwrap_or_else(|_| "a capability accessor panicked".into());
    (name, capabilities)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

async fn run_one(shared: &Arc<Shared>, check: Check) -> CheckResult {
    let started = Instant::now();
    let result = |outcome, cleanup_errors| CheckResult {
        check,
        outcome,
        duration: started.elapsed(),
        cleanup_errors,
    };
    if shared.options.skip.contains(&check) {
        let reason = "listed in Options::skip".to_owned();
        return result(Outcome::Skipped { reason }, Vec::new());
    }
    let ctx = Arc::new(Ctx::new(shared.clone()));
    let task_ctx = ctx.clone();
    let mut task = tokio::spawn(async move { checks::run(check, &task_ctx).await });
    let timeout = shared.options.check_timeout;
    let outcome = match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(checked)) => context::outcome(checked),
        Ok(Err(e)) if e.is_panic() => Outcome::Failed {
            message: format!(
                "panicked during {}: {}",
                ctx.step(),
                panic_message(&*e.into_panic())
            ),
        },
        Ok(Err(e)) => Outcome::Errored {
            message: format!("the check's task ended early: {e}"),
        },
        Err(_) => {
            task.abort();
            Outcome::Failed {
                message: format!(
                    "no answer within {timeout:?} (Options::check_timeout), during {}",
                    ctx.step()
                ),
            }
        }
    };
    let duration = started.elapsed();
    let cleanup_errors = ctx.cleanup().await;
    CheckResult {
        duration,
        ..result(outcome, cleanup_errors)
    }
}

/// Expands to one test per conformance check, so `cargo test` lists every contract by name.
///
/// The argument is the path of an `async fn` (no arguments) returning an [`UnderTest`]: your
/// provider and its [`TestCloud`], made fresh for each test. An optional second argument is
/// an expression giving the [`Options`] (default: [`Options::default`]).
///
/// It expands, where it is invoked (at module level, once per module), to a module
/// `conformance` with a submodule per capability and a `#[test]` per check, named after the
/// check's id: `conformance::instances::exists_true_for_stopped`,
/// `conformance::load_balancer::ensure_is_idempotent`, ... Each test builds its own Tokio
/// runtime (so you need no Tokio features of your own), runs [`run_checks`] with that one
/// check, prints the report (`cargo test -- --nocapture` shows it) and fails with it when the
/// check fails (or, with [`Options::strict`], does not pass). A skipped check passes and
/// prints why. `conformance::CHECKS` lists the checks the tests cover.
///
/// The generated modules `use super::*`, so the setup function and anything the options
/// expression names resolve as they do where the macro is invoked.
///
/// ```
/// use std::sync::Arc;
/// use ccm_conformance::{Options, TestCloud, TestCloudResult, UnderTest};
/// use ccm_fake_cloud::{FakeCloud, FakeInstance};
/// use k8s_openapi::api::core::v1::Node;
///
/// /// Makes and breaks the fake cloud's instances for the checks.
/// struct FakeTestCloud(Arc<FakeCloud>);
///
/// #[async_trait::async_trait]
/// impl TestCloud for FakeTestCloud {
///     async fn create_instance(&self, name: &str) -> TestCloudResult<Node> {
///         self.0.add_instance(FakeInstance::new(name));
///         let mut node = Node::default();
///         node.metadata.name = Some(name.into());
///         Ok(node)
///     }
///     async fn delete_instance(&self, node: &Node) -> TestCloudResult<()> {
///         self.0.remove_instance(node.metadata.name.as_deref().unwrap_or_default());
///         Ok(())
///     }
/// }
///
/// async fn provider_and_test_cloud() -> UnderTest {
///     let cloud = Arc::new(FakeCloud::new());
///     (cloud.clone(), Arc::new(FakeTestCloud(cloud)))
/// }
///
/// // One #[test] per check; `cargo test` runs them.
/// ccm_conformance::conformance_tests!(provider_and_test_cloud);
///
/// // The same again, with options (one invocation per module).
/// mod with_options {
///     use super::*;
///     ccm_conformance::conformance_tests!(
///         provider_and_test_cloud,
///         Options::new("my-test-cluster").skipping(ccm_conformance::Check::RoutesListScopedToCluster)
///     );
/// }
/// # fn main() {
/// #     assert_eq!(conformance::CHECKS, ccm_conformance::Check::ALL);
/// # }
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($setup:path $(,)?) => {
        $crate::conformance_tests!($setup, $crate::Options::default());
    };
    ($setup:path, $options:expr $(,)?) => {
        $crate::__conformance_tests! {
            setup = $setup;
            options = $options;
            capabilities {
                not_implemented_reported_as_such => CapabilitiesNotImplementedReportedAsSuch,
            }
            instances {
                exists_true_for_running => InstancesExistsTrueForRunning,
                exists_true_for_stopped => InstancesExistsTrueForStopped,
                exists_false_only_when_gone => InstancesExistsFalseOnlyWhenGone,
                shutdown_true_when_stopped => InstancesShutdownTrueWhenStopped,
                metadata_provider_id_matches_scheme => InstancesMetadataProviderIdMatchesScheme,
                metadata_addresses_valid => InstancesMetadataAddressesValid,
                metadata_by_provider_id_when_name_differs => InstancesMetadataByProviderIdWhenNameDiffers,
            }
            legacy_instances {
                instance_id_not_found_only_when_gone => LegacyInstancesInstanceIdNotFoundOnlyWhenGone,
            }
            load_balancer {
                get_false_before_ensure => LoadBalancerGetFalseBeforeEnsure,
                ensure_is_idempotent => LoadBalancerEnsureIsIdempotent,
                update_with_new_nodes => LoadBalancerUpdateWithNewNodes,
                ensure_deleted_is_idempotent => LoadBalancerEnsureDeletedIsIdempotent,
                ensure_deleted_when_nothing_exists => LoadBalancerEnsureDeletedWhenNothingExists,
                status_has_valid_ingress => LoadBalancerStatusHasValidIngress,
                copied_annotations_never_take_over => LoadBalancerCopiedAnnotationsNeverTakeOver,
            }
            routes {
                create_list_delete_round_trip => RoutesCreateListDeleteRoundTrip,
                delete_exactly_what_list_returned => RoutesDeleteExactlyWhatListReturned,
                list_scoped_to_cluster => RoutesListScopedToCluster,
            }
        }
    };
}

/// The body of [`conformance_tests!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    (
        setup = $setup:path;
        options = $options:expr;
        $($group:ident { $($test:ident => $check:ident,)* })*
    ) => {
        /// The provider conformance checks of `ccm-conformance`, one test per contract.
        mod conformance {
            #[allow(unused_imports)]
            use super::*;

            /// Every check these tests cover, in order.
            #[allow(dead_code)]
            pub(crate) const CHECKS: &[$crate::Check] = &[$($($crate::Check::$check,)*)*];

            /// Type-checks the arguments in builds without tests too.
            #[allow(dead_code)]
            fn arguments() {
                $crate::__private::setup_is_valid(|| $setup());
                let _ = || -> $crate::Options { $options };
            }

            $(
                mod $group {
                    #[allow(unused_imports)]
                    use super::*;
                    $(
                        #[test]
                        fn $test() {
                            $crate::__private::run_test(
                                $crate::Check::$check,
                                || $setup(),
                                || $options,
                            );
                        }
                    )*
                }
            )*
        }
    };
}

/// What [`conformance_tests!`] expands to calls; not for direct use.
#[doc(hidden)]
pub mod __private {
    use std::future::Future;

    use crate::{Check, Options, UnderTest};

    /// Accepts only what [`conformance_tests!`](crate::conformance_tests) can call.
    pub fn setup_is_valid<S, F>(_setup: S)
    where
        S: FnOnce() -> F,
        F: Future<Output = UnderTest>,
    {
    }

    /// Runs one check in a runtime of its own, prints the report and panics when the check
    /// fails.
    pub fn run_test<S, F>(check: Check, setup: S, options: impl FnOnce() -> Options)
    where
        S: FnOnce() -> F,
        F: Future<Output = UnderTest>,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("ccm-conformance: cannot build a Tokio runtime: {e}"));
        let report = runtime.block_on(async move {
            let options = options();
            let (provider, cloud) = setup().await;
            crate::run_checks(provider, cloud, options, &[check]).await
        });
        println!("{report}");
        report.assert_all_passed();
    }
}
