//! The app layer: what turns a provider into a complete cloud-controller-manager binary
//! (Go's `k8s.io/cloud-provider/app`): the flags, controller selection, leader election,
//! the run loop, and [`serve`], the endpoint server for liveness, readiness and `/metrics`.

pub mod duration;
pub mod leader;
pub mod manager;
pub mod options;
pub mod selection;
pub mod serve;

pub use self::manager::{
    AppError, CloudControllerManager, ControllerContext, ControllerFuture, ControllerInit,
};
pub use self::options::{FlagError, LeaderElectionOptions, LogFormat, Options};
pub use self::selection::ControllerSelection;
pub use self::serve::{EndpointServer, Health, ServeOptions, Serving};
