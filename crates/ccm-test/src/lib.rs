//! Test support for ccm-rs: a real Kubernetes control plane (etcd and
//! kube-apiserver) for tests, started on loopback ports in a temporary folder.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Node;
//! use kube::Api;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cp = ccm_test::ControlPlane::shared().await?;
//! let nodes: Api<Node> = Api::all(cp.client()?);
//! let _ = nodes.list(&Default::default()).await?;
//!
//! // Real authentication and RBAC: this user has no binding yet.
//! let alice = cp.client_for_user(&ccm_test::unique_name("alice"), &["dev"])?;
//! let denied = Api::<Node>::all(alice).list(&Default::default()).await;
//! assert!(matches!(denied, Err(kube::Error::Api(s)) if s.code == 403));
//! # Ok(()) }
//! ```
//!
//! To wait for the cluster to reach a state, poll it with [`eventually`]: it panics
//! with what it waited for, and what it last saw, if the state does not come.
//!
//! What tests of a controller manager share is here too, so that each is written once:
//!
//! - [`fixtures`]: a Node as a kubelet registers it ([`fixtures::tainted_node`],
//!   [`fixtures::NodeBuilder`]), a `type: LoadBalancer` Service
//!   ([`fixtures::ServiceBuilder`]), and the fields tests read off them;
//! - [`TestRun`]: one test's Nodes, Services and Events on a shared control plane, and
//!   waits for them;
//! - [`process`]: a controller manager binary as a process ([`process::CcmProcess`]): its
//!   log, signals, its exit, killed on drop;
//! - [`net`]: a free loopback port and a minimal HTTP `GET` for its endpoints;
//! - [`audit`]: the API server's audit log, read;
//! - [`rbac`]: rules and subjects, and a role granted to a subject in one call.
//!
//! The binaries are found as envtest finds them ([`Binaries::find`]: `KUBEBUILDER_ASSETS`,
//! this crate's cache folder, setup-envtest's folder); when they are nowhere and Go is
//! installed, [`ControlPlane::start`] builds them from their Go modules with the build script
//! this crate carries ([`build_script`]), once, into the cache folder. See
//! `docs/control-plane.md`.
#![forbid(unsafe_code)]

pub mod audit;
mod binaries;
pub mod cluster;
mod control_plane;
pub mod fixtures;
pub mod helm;
pub mod image;
pub mod net;
mod pki;
pub mod process;
pub mod proxy;
pub mod rbac;
mod supervisor;
mod test_run;
mod wait;

use std::sync::atomic::{AtomicU64, Ordering};

pub use binaries::{
    Binaries, ClusterBinaries, ETCD_VERSION, KUBERNETES_VERSION, build_script, default_assets_dir,
    envtest_assets_dir,
};
pub use cluster::{Cluster, ClusterBuilder, ClusterNode};
pub use control_plane::{ADMIN_USER, ControlPlane, ControlPlaneBuilder, Server};
pub use test_run::{RUN_LABEL, TestRun};
pub use wait::{Outcome, POLL_INTERVAL, eventually};

/// Errors from starting or using a [`ControlPlane`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A control-plane binary was not found.
    #[error(
        "cannot find the `{name}` binary (looked at: {searched}). Install Go and ccm-test builds \
         the control plane from its Go modules (the build script it carries, \
         control-plane/build.sh; in this repository also tools/control-plane/build.sh), or set \
         KUBEBUILDER_ASSETS (or TEST_ASSET_KUBE_APISERVER, TEST_ASSET_ETCD, TEST_ASSET_KUBECTL) \
         to existing envtest binaries; see docs/control-plane.md"
    )]
    BinaryNotFound {
        /// The binary's file name.
        name: &'static str,
        /// Where it was looked for.
        searched: String,
    },
    /// Building the binaries from their Go modules failed.
    #[error("building the control plane failed: {0}")]
    Build(String),
    /// A server exited or did not become ready in time.
    #[error("{component} failed to start: {reason}\n--- last lines of {component}.log ---\n{tail}")]
    Start {
        /// `etcd` or `kube-apiserver`.
        component: &'static str,
        /// What went wrong.
        reason: String,
        /// The last lines of the server's log.
        tail: String,
    },
    /// The shared control plane ([`ControlPlane::shared`]) failed to start.
    #[error("the shared test control plane failed to start: {0}")]
    Shared(String),
    /// A file-system or process error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Making a key or certificate failed.
    #[error("certificate: {0}")]
    Certificate(String),
    /// Setting up or running a [`Cluster`] failed: a missing prerequisite, a namespace,
    /// a node that did not register.
    #[error("cluster: {0}")]
    Cluster(String),
    /// `helm` was not found, or failed ([`helm::Helm`]).
    #[error("{0}")]
    Helm(String),
    /// `kubectl` was not found, or failed ([`ControlPlane::run_kubectl`]).
    #[error("kubectl: {0}")]
    Kubectl(String),
    /// An argument that cannot be used (e.g. a path that is not UTF-8).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A Kubernetes API or client error.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Writes `contents` to `path`; the error names the file.
pub(crate) fn write_file(path: &std::path::Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Sends this test process's `tracing` output to the test harness's captured output, once
/// per process: `RUST_LOG` when set, else `default_filter` (an `EnvFilter` directive such as
/// `"warn,ccm_test=info"`). Later calls, from other tests of the same binary, do nothing.
pub fn init_tracing(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// An object of kind `K` named `name`, with nothing else set.
pub(crate) fn named<K: kube::Resource + Default>(name: &str) -> K {
    let mut object = K::default();
    object.meta_mut().name = Some(name.to_owned());
    object
}

/// A name unique within this test process (and very likely across runs):
/// `prefix` (lowercased, other characters than `a-z0-9-` replaced by `-`, at
/// most 40 characters) followed by `-` and a suffix. Valid as a namespace or
/// object name (an RFC 1123 label).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut clean: String = prefix
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .take(40)
        .collect();
    let trimmed = clean.trim_start_matches('-').len();
    clean.drain(..clean.len() - trimmed);
    if clean.is_empty() {
        clean.push('x');
    }
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{clean}-{:x}{count:x}{:04x}",
        std::process::id(),
        nanos & 0xffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_rfc1123_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn unique_names_are_unique_and_valid() {
        let names: Vec<String> = (0..1000).map(|_| unique_name("Node_Test")).collect();
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len());
        for name in &names {
            assert!(name.starts_with("node-test-"), "{name}");
            assert!(is_rfc1123_label(name), "{name}");
        }
        assert!(is_rfc1123_label(&unique_name(&"x".repeat(100))));
        assert!(is_rfc1123_label(&unique_name("--")));
        assert!(is_rfc1123_label(&unique_name("")));
    }
}
