//! The app layer: what turns a provider into a complete cloud-controller-manager binary
//! (Go's `k8s.io/cloud-provider/app`). [`serve`] is the endpoint server for liveness,
//! readiness and `/metrics`; the flags, leader election, controller selection and the run
//! loop that ties them together live beside it.

pub mod serve;
