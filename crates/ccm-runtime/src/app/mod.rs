//! The app layer: what turns a provider into a complete cloud-controller-manager binary
//! (Go's `k8s.io/cloud-provider/app`): the flags, controller registration and selection,
//! leader election, the run loop, and [`serve`], the endpoint server for liveness,
//! readiness and `/metrics`, secured by [`tls`] and [`auth`] as [`serving_options`] say.

pub mod auth;
pub mod builtin;
pub mod controller;
pub mod duration;
mod goflag;
pub mod leader;
pub mod manager;
pub mod options;
pub mod selection;
pub mod serve;
pub mod serving_options;
pub mod tls;

pub use self::builtin::{
    CLOUD_NODE_CONTROLLER, CLOUD_NODE_LIFECYCLE_CONTROLLER, NODE_ROUTE_CONTROLLER,
    SERVICE_LB_CONTROLLER,
};
pub use self::controller::{Capability, Controller, ControllerFuture};
pub use self::manager::{AppError, CloudControllerManager, ControllerContext};
pub use self::options::{FlagError, LeaderElectionOptions, LogFormat, Options};
pub use self::selection::ControllerSelection;
pub use self::serve::{EndpointServer, Health, ServeOptions, Serving};
pub use self::serving_options::ServingOptions;
