//! `acme-cloud-controller-manager`: the whole binary a provider author writes.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use acme_cloud_controller_manager::AcmeCloud;
use ccm_core::app::CloudControllerManager;
use ccm_core::provider::ProviderRegistry;

fn main() -> ExitCode {
    let mut registry = ProviderRegistry::new();
    if let Err(err) = AcmeCloud::register(&mut registry) {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    CloudControllerManager::new("acme-cloud-controller-manager", registry).run()
}
