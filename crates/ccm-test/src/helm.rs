//! Helm against a [`Cluster`]: `helm install` of a chart as a user runs it, with helm's own
//! state (cache, configuration, repositories) kept in the cluster's folder, so a test leaves
//! nothing in the user's `~/.config/helm` and two tests never share it. The binary is
//! `$HELM`, else `helm` on `PATH`; any Helm 3 or 4 does (ccm-rs tests its chart with the
//! pinned helm of `tools/helm/build.sh`).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Cluster, Error};

/// A helm binary; see the [module docs](self).
///
/// ```no_run
/// # async fn demo(cluster: &ccm_test::Cluster) -> Result<(), ccm_test::Error> {
/// let helm = ccm_test::helm::Helm::find()?;
/// helm.run(cluster, [
///     "install", "ccm", "path/to/charts/cloud-controller-manager",
///     "--namespace", "kube-system", "--values", "acme-values.yaml", "--wait",
/// ])?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Helm {
    binary: PathBuf,
}

impl Helm {
    /// `$HELM`, else the first `helm` on `PATH`.
    pub fn find() -> Result<Self, Error> {
        if let Some(binary) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
            let binary = PathBuf::from(binary);
            return if binary.is_file() {
                Ok(Self { binary })
            } else {
                Err(Error::Helm(format!(
                    "HELM names {}, which is not a file",
                    binary.display()
                )))
            };
        }
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("helm"))
            .find(|path| path.is_file())
            .map(|binary| Self { binary })
            .ok_or_else(|| {
                Error::Helm(
                    "no helm on PATH and HELM is not set: install Helm 3 or 4 \
                     (https://helm.sh/docs/intro/install/) or set HELM to its path"
                        .to_owned(),
                )
            })
    }

    /// This binary.
    pub fn at(binary: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
        }
    }

    /// The binary's path.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Runs helm with `args` and `--kubeconfig` naming `cluster`'s admin kubeconfig; its
    /// standard output, or an error with the command, its status and its output.
    pub fn run<I>(&self, cluster: &Cluster, args: I) -> Result<String, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let home = cluster.control_plane().dir().join("helm");
        let output = Command::new(&self.binary)
            .args(&args)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .map_err(|e| Error::io(format!("running {}", self.binary.display()), e))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
            Err(Error::Helm(format!(
                "helm {}: {}\n{stdout}{}",
                shown.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )))
        }
    }
}
