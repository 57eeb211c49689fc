//! `acme-cloud-controller-manager`: the whole binary a provider author writes.
#![forbid(unsafe_code)]

// ANCHOR: main
use std::process::ExitCode;

use acme_cloud_controller_manager::AcmeCloud;
use ccm_conformance::memory::MemoryCloud;
use ccm_core::app::{Capability, CloudControllerManager, Controller, ControllerFuture};
use ccm_core::provider::ProviderRegistry;

fn main() -> ExitCode {
    let mut registry = ProviderRegistry::new();
    if let Err(err) = AcmeCloud::register(&mut registry, MemoryCloud::new(AcmeCloud::NAME)) {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    // ANCHOR: custom_controller
    // A controller of Acme's own next to the four built-in ones: started only with
    // `--controllers=*,acme-lb-gc`, and only when the provider has load balancers.
    let gc = Controller::new("acme-lb-gc", |ctx| {
        let cancel = ctx.cancel.clone();
        Ok(Box::pin(async move { cancel.cancelled().await }) as ControllerFuture)
    })
    .requires(Capability::LoadBalancer)
    .disabled_by_default();
    CloudControllerManager::new("acme-cloud-controller-manager", registry)
        .with_controller(gc)
        .run()
    // ANCHOR_END: custom_controller
}
// ANCHOR_END: main
