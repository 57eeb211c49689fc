//! The app layer: what turns a provider into a complete cloud-controller-manager binary
//! (Go's `k8s.io/cloud-provider/app`): the flags, controller registration and selection,
//! leader election and the run loop. The endpoint server it starts is the layer below,
//! [`crate::serving`]; Go's flag syntax is [`crate::flags`].

pub mod builtin;
mod configz;
pub mod controller;
mod error;
mod kubeconfig;
pub mod leader;
pub mod manager;
pub mod options;
pub mod provider_flags;
pub mod selection;

pub use self::builtin::{
    CLOUD_NODE_CONTROLLER, CLOUD_NODE_LIFECYCLE_CONTROLLER, NODE_IPAM_CONTROLLER,
    NODE_ROUTE_CONTROLLER, SERVICE_LB_CONTROLLER,
};
pub use self::controller::{Capability, Controller, ControllerContext, ControllerFuture};
#[doc(hidden)]
pub use self::kubeconfig::describe_kubeconfig;
pub use self::manager::{AppError, CloudControllerManager};
pub use self::options::{ContentType, FlagError, LeaderElectionOptions, LogFormat, Options};
pub use self::provider_flags::ProviderFlags;
pub use self::selection::ControllerSelection;
pub use crate::serving::{EndpointServer, Health, ServeOptions, Serving, ServingOptions};
/// The clap crate the flags are parsed with: a provider's flags derive `clap::Args` with it
/// (`use ccm_core::app::clap;`), at the same version.
pub use clap;
