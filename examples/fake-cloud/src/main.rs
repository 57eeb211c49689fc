//! `fake-cloud-controller-manager`: a complete cloud-controller-manager for the in-memory
//! fake cloud. Run it against any cluster to see the controllers work without a cloud:
//!
//! ```sh
//! fake-cloud-controller-manager --cloud-provider=fake --cloud-config=fake.yaml \
//!     --kubeconfig=$KUBECONFIG --cluster-cidr=10.244.0.0/16
//! ```
//!
//! `fake.yaml` seeds instances, or sets `nodesAreInstances: true` so that every Node is one.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use ccm_core::app::CloudControllerManager;
use ccm_core::provider::ProviderRegistry;
use ccm_fake_cloud::FakeCloud;

// ANCHOR: main
fn main() -> ExitCode {
    let mut registry = ProviderRegistry::new();
    if let Err(err) = FakeCloud::register(&mut registry) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("error: {err}");
        }
        return ExitCode::FAILURE;
    }
    CloudControllerManager::new("fake-cloud-controller-manager", registry)
        .with_version(env!("CARGO_PKG_VERSION"), option_env!("CCM_GIT_COMMIT"))
        .run()
}
// ANCHOR_END: main
