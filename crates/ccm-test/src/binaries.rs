//! Finding `kube-apiserver`, `etcd` and `kubectl` the way envtest does.

use std::path::{Path, PathBuf};

use crate::Error;

/// The Kubernetes version `tools/control-plane/build.sh` builds.
pub const KUBERNETES_VERSION: &str = "v1.36.3";
/// The etcd version `tools/control-plane/build.sh` builds.
pub const ETCD_VERSION: &str = "v3.6.16";

/// Paths of the three control-plane binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kubectl`, when found: not needed to run the control plane, offered
    /// to users and tests.
    pub kubectl: Option<PathBuf>,
}

/// One binary: its file name and the variable that names it directly.
struct Asset {
    file: &'static str,
    variable: &'static str,
}

const KUBE_APISERVER: Asset = Asset {
    file: "kube-apiserver",
    variable: "TEST_ASSET_KUBE_APISERVER",
};
const ETCD: Asset = Asset {
    file: "etcd",
    variable: "TEST_ASSET_ETCD",
};
const KUBECTL: Asset = Asset {
    file: "kubectl",
    variable: "TEST_ASSET_KUBECTL",
};

impl Binaries {
    /// Finds the binaries from the process environment.
    ///
    /// For each binary, in order: its `TEST_ASSET_*` variable
    /// (`TEST_ASSET_KUBE_APISERVER`, `TEST_ASSET_ETCD`, `TEST_ASSET_KUBECTL`),
    /// then the folder `$KUBEBUILDER_ASSETS`, then the folder
    /// [`default_assets_dir`] that `tools/control-plane/build.sh` fills.
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`] naming every place looked at and how to get
    /// the binary.
    pub fn find() -> Result<Self, Error> {
        Self::find_with(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
    }

    /// [`Binaries::find`] with an explicit environment lookup (for tests).
    pub(crate) fn find_with(
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Self, Error> {
        let assets_dir = env("KUBEBUILDER_ASSETS").map(PathBuf::from);
        let default_dir = default_assets_dir_with(&env);
        let find = |asset: &Asset| -> Result<PathBuf, Error> {
            let mut searched = Vec::new();
            if let Some(path) = env(asset.variable) {
                let path = PathBuf::from(path);
                if is_executable(&path) {
                    return Ok(path);
                }
                // An explicit path that is wrong is an error, not a fallback.
                return Err(Error::BinaryNotFound {
                    name: asset.file,
                    searched: format!("{}={}", asset.variable, path.display()),
                });
            }
            searched.push(format!("{} (unset)", asset.variable));
            if let Some(dir) = &assets_dir {
                let path = dir.join(asset.file);
                if is_executable(&path) {
                    return Ok(path);
                }
                searched.push(format!("$KUBEBUILDER_ASSETS/{}", asset.file));
            } else {
                searched.push("KUBEBUILDER_ASSETS (unset)".to_owned());
            }
            if let Some(dir) = &default_dir {
                let path = dir.join(asset.file);
                if is_executable(&path) {
                    return Ok(path);
                }
                searched.push(path.display().to_string());
            }
            Err(Error::BinaryNotFound {
                name: asset.file,
                searched: searched.join(", "),
            })
        };
        Ok(Self {
            kube_apiserver: find(&KUBE_APISERVER)?,
            etcd: find(&ETCD)?,
            kubectl: find(&KUBECTL).ok(),
        })
    }
}

/// The folder `tools/control-plane/build.sh` builds into:
/// `${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/control-plane/k8s-<version>-etcd-<version>`.
///
/// `None` when neither `CCM_CACHE_DIR` nor `HOME` is set.
pub fn default_assets_dir() -> Option<PathBuf> {
    default_assets_dir_with(&|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

fn default_assets_dir_with(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let cache = env("CCM_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".cache/ccm-rs")))?;
    Some(
        cache
            .join("control-plane")
            .join(format!("k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}")),
    )
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::OsString;

    use super::*;

    fn fake_assets(dir: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        for name in ["kube-apiserver", "etcd", "kubectl"] {
            let path = dir.join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    fn env_of(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_os_str().to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn kubebuilder_assets_is_used() {
        let dir = tempfile::tempdir().unwrap();
        fake_assets(dir.path());
        let found = Binaries::find_with(env_of(&[("KUBEBUILDER_ASSETS", dir.path())])).unwrap();
        assert_eq!(found.kube_apiserver, dir.path().join("kube-apiserver"));
        assert_eq!(found.etcd, dir.path().join("etcd"));
        assert_eq!(found.kubectl, Some(dir.path().join("kubectl")));
    }

    #[test]
    fn test_asset_variables_win_over_folders() {
        let assets = tempfile::tempdir().unwrap();
        fake_assets(assets.path());
        let other = tempfile::tempdir().unwrap();
        fake_assets(other.path());
        let etcd = other.path().join("etcd");
        let found = Binaries::find_with(env_of(&[
            ("KUBEBUILDER_ASSETS", assets.path()),
            ("TEST_ASSET_ETCD", &etcd),
        ]))
        .unwrap();
        assert_eq!(found.etcd, etcd);
        assert_eq!(found.kube_apiserver, assets.path().join("kube-apiserver"));
    }

    #[test]
    fn default_folder_is_under_the_cache_dir() {
        let cache = tempfile::tempdir().unwrap();
        let dir = default_assets_dir_with(&env_of(&[("CCM_CACHE_DIR", cache.path())])).unwrap();
        assert_eq!(
            dir,
            cache.path().join("control-plane/k8s-v1.36.3-etcd-v3.6.16")
        );
        std::fs::create_dir_all(&dir).unwrap();
        fake_assets(&dir);
        let found = Binaries::find_with(env_of(&[("CCM_CACHE_DIR", cache.path())])).unwrap();
        assert_eq!(found.kubectl, Some(dir.join("kubectl")));
    }

    #[test]
    fn missing_binary_says_how_to_get_it() {
        let empty = tempfile::tempdir().unwrap();
        let err = Binaries::find_with(env_of(&[
            ("KUBEBUILDER_ASSETS", empty.path()),
            ("CCM_CACHE_DIR", empty.path()),
        ]))
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("kube-apiserver"), "{message}");
        assert!(
            message.contains("tools/control-plane/build.sh"),
            "{message}"
        );
        assert!(message.contains("KUBEBUILDER_ASSETS"), "{message}");
    }

    #[test]
    fn a_wrong_explicit_path_is_an_error() {
        let assets = tempfile::tempdir().unwrap();
        fake_assets(assets.path());
        let missing = assets.path().join("no-such-etcd");
        let err = Binaries::find_with(env_of(&[
            ("KUBEBUILDER_ASSETS", assets.path()),
            ("TEST_ASSET_ETCD", &missing),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("TEST_ASSET_ETCD"), "{err}");
    }
}
