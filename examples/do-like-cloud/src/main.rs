//! `do-like-cloud-controller-manager`: a cloud-controller-manager for the DigitalOcean-like
//! API (the `do-like-api-simulator`, or anything shaped like DigitalOcean's v2 API).
//!
//! ```sh
//! do-like-cloud-controller-manager --cloud-provider=digitalocean --cloud-config=do-like.yaml \
//!     --kubeconfig=$KUBECONFIG --cluster-name=demo --cluster-cidr=10.244.0.0/16
//! ```
//!
//! See `docs/do-like-cloud.md` for the cloud-config and the provider's own flag,
//! `--do-like-api-url`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use ccm_core::app::{CloudControllerManager, ProviderFlags};
use ccm_core::provider::ProviderRegistry;
use ccm_do_like_cloud::{DoLikeCloud, DoLikeFlags};

// ANCHOR: main
fn main() -> ExitCode {
    // One handle on the provider's flags: the manager fills it from the command line, the
    // provider's factory (which runs after) reads it.
    let flags = ProviderFlags::<DoLikeFlags>::new();
    let mut registry = ProviderRegistry::new();
    if let Err(err) = DoLikeCloud::register_with_flags(&mut registry, flags.clone()) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("error: {err}");
        }
        return ExitCode::FAILURE;
    }
    CloudControllerManager::new("do-like-cloud-controller-manager", registry)
        .with_version(env!("CARGO_PKG_VERSION"), option_env!("CCM_GIT_COMMIT"))
        .with_flags(flags)
        .run()
}
// ANCHOR_END: main
