//! `do-like-cloud-controller-manager`: a cloud-controller-manager for the DigitalOcean-like
//! API (the `do-like-api-simulator`, or anything shaped like DigitalOcean's v2 API).
//!
//! ```sh
//! do-like-cloud-controller-manager --cloud-provider=digitalocean --cloud-config=do-like.yaml \
//!     --kubeconfig=$KUBECONFIG --cluster-name=demo --cluster-cidr=10.244.0.0/16
//! ```
//!
//! See `docs/do-like-cloud.md` for the cloud-config.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use ccm_core::app::CloudControllerManager;
use ccm_core::provider::ProviderRegistry;

fn main() -> ExitCode {
    let mut registry = ProviderRegistry::new();
    if let Err(err) = ccm_do_like_cloud::register(&mut registry) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("error: {err}");
        }
        return ExitCode::FAILURE;
    }
    CloudControllerManager::new("do-like-cloud-controller-manager", registry)
        .with_version(env!("CARGO_PKG_VERSION"), option_env!("CCM_GIT_COMMIT"))
        .run()
}
