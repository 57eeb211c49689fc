//! The controller manager: what turns a provider into a complete cloud-controller-manager
//! binary (Go's `k8s.io/cloud-provider/app`).
//!
//! [`CloudControllerManager`] parses Go's flags ([`Options`]), builds the provider from
//! `--cloud-provider` and `--cloud-config`, serves `/healthz`, `/readyz` and `/metrics`,
//! wins the leader election and runs the controllers chosen by `--controllers`: the four
//! built-in ones and any [`Controller`] of your own, registered the same way. A provider's
//! own flags join ours with [`ProviderFlags`].

/// The clap crate the flags are parsed with: a provider's own flags ([`ProviderFlags`])
/// derive `clap::Args` with it, at the version ccm-core parses with:
/// `use ccm_core::app::clap;` then `#[derive(clap::Args)]`.
#[doc(no_inline)]
pub use ccm_runtime::app::clap;
#[doc(inline)]
pub use ccm_runtime::app::{
    AppError, CLOUD_NODE_CONTROLLER, CLOUD_NODE_LIFECYCLE_CONTROLLER, Capability,
    CloudControllerManager, ContentType, Controller, ControllerContext, ControllerFuture,
    FlagError, Health, LeaderElectionOptions, LogFormat, NODE_ROUTE_CONTROLLER, Options,
    ProviderFlags, SERVICE_LB_CONTROLLER, ServingOptions,
};
/// Which Nodes are this cloud's, as the controllers ask it
/// ([`ControllerContext::node_ownership`]).
#[doc(inline)]
pub use ccm_runtime::controllers::node_ownership::{NodeOwnership, NotOwned, Ownership};
#[doc(inline)]
pub use ccm_runtime::informer::{Change, Informer};
/// Shadow mode (`--shadow`): what a controller of your own uses to settle the plan
/// ([`ControllerContext::shadow`]).
#[doc(inline)]
pub use ccm_runtime::shadow::{ControllerShadow, SyncGuard};
