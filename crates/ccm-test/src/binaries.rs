//! Finding `kube-apiserver`, `etcd` and `kubectl` the way envtest does, and building them
//! from their Go modules when they are nowhere: the crate carries the Go module files and
//! the build script (`control-plane/` in its source), so it works from crates.io too.

use std::path::{Path, PathBuf};

use crate::Error;

/// The Kubernetes version `control-plane/build.sh` (in this crate) builds.
pub const KUBERNETES_VERSION: &str = "v1.36.3";
/// The etcd version `control-plane/build.sh` (in this crate) builds.
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

/// The variable that names the binary `file` directly, as envtest spells it:
/// `TEST_ASSET_KUBE_APISERVER` for `kube-apiserver`.
fn asset_variable(file: &str) -> String {
    format!("TEST_ASSET_{}", file.to_uppercase().replace('-', "_"))
}

impl Binaries {
    /// Finds the binaries from the process environment.
    ///
    /// For each binary, in order: its `TEST_ASSET_*` variable
    /// (`TEST_ASSET_KUBE_APISERVER`, `TEST_ASSET_ETCD`, `TEST_ASSET_KUBECTL`),
    /// then the folder `$KUBEBUILDER_ASSETS`, then the folder
    /// [`default_assets_dir`] that the build script fills, then setup-envtest's folder
    /// ([`envtest_assets_dir`]).
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
        let default_dirs: Vec<PathBuf> = default_assets_dir_with(&env)
            .into_iter()
            .chain(envtest_assets_dir_with(&env))
            .collect();
        let find = |file: &'static str| -> Result<PathBuf, Error> {
            let mut searched = Vec::new();
            let variable = asset_variable(file);
            if let Some(path) = env(&variable) {
                let path = PathBuf::from(path);
                if is_executable(&path) {
                    return Ok(path);
                }
                // An explicit path that is wrong is an error, not a fallback.
                return Err(Error::BinaryNotFound {
                    name: file,
                    searched: format!("{variable}={}", path.display()),
                });
            }
            searched.push(format!("{variable} (unset)"));
            if let Some(dir) = &assets_dir {
                let path = dir.join(file);
                if is_executable(&path) {
                    return Ok(path);
                }
                searched.push(format!("$KUBEBUILDER_ASSETS/{file}"));
            } else {
                searched.push("KUBEBUILDER_ASSETS (unset)".to_owned());
            }
            for dir in &default_dirs {
                let path = dir.join(file);
                if is_executable(&path) {
                    return Ok(path);
                }
                searched.push(path.display().to_string());
            }
            Err(Error::BinaryNotFound {
                name: file,
                searched: searched.join(", "),
            })
        };
        Ok(Self {
            kube_apiserver: find("kube-apiserver")?,
            etcd: find("etcd")?,
            kubectl: find("kubectl").ok(),
        })
    }
}

/// The folder the build script (`control-plane/build.sh`) builds into:
/// `${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/control-plane/k8s-<version>-etcd-<version>`.
///
/// `None` when neither `CCM_CACHE_DIR` nor `HOME` is set.
pub fn default_assets_dir() -> Option<PathBuf> {
    default_assets_dir_with(&|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

fn default_assets_dir_with(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    Some(
        cache_dir_with(env)?
            .join("control-plane")
            .join(format!("k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}")),
    )
}

/// This crate's cache folder, `${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}` (the build script's
/// too); `None` when neither variable is set.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    cache_dir_with(&|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

fn cache_dir_with(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    env("CCM_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".cache/ccm-rs")))
}

/// setup-envtest's folder for this crate's Kubernetes minor version:
/// `${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest/k8s/1.36.<patch>-linux-<arch>`,
/// the highest patch present. `None` when there is none.
pub fn envtest_assets_dir() -> Option<PathBuf> {
    envtest_assets_dir_with(&|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

fn envtest_assets_dir_with(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let data = env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".local/share")))?;
    let root = data.join("kubebuilder-envtest/k8s");
    let minor = KUBERNETES_VERSION
        .trim_start_matches('v')
        .rsplit_once('.')
        .map_or(KUBERNETES_VERSION, |(minor, _)| minor);
    let suffix = format!("-linux-{}", go_arch());
    std::fs::read_dir(&root)
        .ok()?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let version = name.strip_suffix(&suffix)?;
            let patch: u32 = version
                .strip_prefix(minor)?
                .strip_prefix('.')?
                .parse()
                .ok()?;
            Some((patch, root.join(&name)))
        })
        .max_by_key(|(patch, _)| *patch)
        .map(|(_, dir)| dir)
}

/// Go's name of this machine's architecture, as envtest's folders use it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The build script this crate carries (`control-plane/build.sh` in its source): builds
/// kube-apiserver, kubectl and etcd from their Go modules into [`default_assets_dir`].
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("control-plane/build.sh")
}

impl Binaries {
    /// [`Binaries::find`], and when a binary is nowhere and Go is installed, builds them with
    /// [`build_script`] (minutes the first time, with the Go module proxy; concurrent
    /// callers wait for one build). Progress goes to standard error. Blocking.
    ///
    /// # Errors
    ///
    /// The error of [`Binaries::find`] when Go is not installed, or [`Error::Build`] with the
    /// end of the build's output.
    pub fn find_or_build() -> Result<Self, Error> {
        match Self::find() {
            Err(Error::BinaryNotFound { .. }) if go_installed() => {}
            other => return other,
        }
        let script = build_script();
        eprintln!(
            "ccm-test: building the control plane with {} (Kubernetes {KUBERNETES_VERSION}, \
             etcd {ETCD_VERSION}); set KUBEBUILDER_ASSETS to use existing binaries",
            script.display()
        );
        let out = std::process::Command::new("bash")
            .arg(&script)
            .env_remove("KUBEBUILDER_ASSETS")
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| Error::Build(format!("cannot run {}: {e}", script.display())))?;
        if !out.status.success() {
            return Err(Error::Build(format!(
                "{} failed ({}); its output is above",
                script.display(),
                out.status
            )));
        }
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Self::find_with(|name| match name {
            "KUBEBUILDER_ASSETS" => Some(dir.clone().into()),
            _ => None,
        })
    }
}

/// Paths of the cluster tier's binaries ([`Cluster`](crate::Cluster)), all of
/// [`KUBERNETES_VERSION`]: the node agents and the two controllers kube-apiserver needs
/// beside it. The build script builds them into the same folder as the control plane's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterBinaries {
    /// `kubelet`.
    pub kubelet: PathBuf,
    /// `kube-proxy`.
    pub kube_proxy: PathBuf,
    /// `kube-scheduler`.
    pub kube_scheduler: PathBuf,
    /// `kube-controller-manager`.
    pub kube_controller_manager: PathBuf,
}

const CLUSTER_FILES: [&str; 4] = [
    "kubelet",
    "kube-proxy",
    "kube-scheduler",
    "kube-controller-manager",
];

impl ClusterBinaries {
    /// Finds them in the folder of `control_plane`'s kube-apiserver, then in
    /// [`default_assets_dir`].
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`] naming the folders looked in.
    pub fn find(control_plane: &Binaries) -> Result<Self, Error> {
        let dirs: Vec<PathBuf> = control_plane
            .kube_apiserver
            .parent()
            .map(Path::to_owned)
            .into_iter()
            .chain(default_assets_dir())
            .collect();
        let find = |file: &'static str| -> Result<PathBuf, Error> {
            dirs.iter()
                .map(|dir| dir.join(file))
                .find(|path| is_executable(path))
                .ok_or_else(|| Error::BinaryNotFound {
                    name: file,
                    searched: dirs
                        .iter()
                        .map(|dir| dir.join(file).display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        };
        let [kubelet, kube_proxy, kube_scheduler, kube_controller_manager] = CLUSTER_FILES;
        Ok(Self {
            kubelet: find(kubelet)?,
            kube_proxy: find(kube_proxy)?,
            kube_scheduler: find(kube_scheduler)?,
            kube_controller_manager: find(kube_controller_manager)?,
        })
    }

    /// [`ClusterBinaries::find`], and when one is missing and Go is installed, runs
    /// [`build_script`] (which builds only what its folder lacks) and looks again.
    /// Blocking.
    ///
    /// # Errors
    ///
    /// As [`ClusterBinaries::find`], or [`Error::Build`].
    pub fn find_or_build(control_plane: &Binaries) -> Result<Self, Error> {
        match Self::find(control_plane) {
            Err(Error::BinaryNotFound { .. }) if go_installed() => {}
            other => return other,
        }
        let script = build_script();
        eprintln!(
            "ccm-test: building the cluster binaries (kubelet, kube-proxy, kube-scheduler, \
             kube-controller-manager {KUBERNETES_VERSION}) with {}",
            script.display()
        );
        let status = std::process::Command::new("bash")
            .arg(&script)
            .env_remove("KUBEBUILDER_ASSETS")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .status()
            .map_err(|e| Error::Build(format!("cannot run {}: {e}", script.display())))?;
        if !status.success() {
            return Err(Error::Build(format!(
                "{} failed ({status}); its output is above",
                script.display()
            )));
        }
        Self::find(control_plane)
    }
}

fn go_installed() -> bool {
    std::process::Command::new("go")
        .arg("version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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

    /// [`Binaries::find_with`] `KUBEBUILDER_ASSETS=assets` and `TEST_ASSET_ETCD=etcd`.
    fn find_with_etcd(assets: &Path, etcd: &Path) -> Result<Binaries, Error> {
        Binaries::find_with(env_of(&[
            ("KUBEBUILDER_ASSETS", assets),
            ("TEST_ASSET_ETCD", etcd),
        ]))
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
        let found = find_with_etcd(assets.path(), &etcd).unwrap();
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
    fn setup_envtest_folder_of_our_minor_version_is_used() {
        let data = tempfile::tempdir().unwrap();
        let root = data.path().join("kubebuilder-envtest/k8s");
        let arch = go_arch();
        for version in ["1.35.9", "1.36.1", "1.36.12", "1.37.0"] {
            std::fs::create_dir_all(root.join(format!("{version}-linux-{arch}"))).unwrap();
        }
        std::fs::create_dir_all(root.join("1.36.99-darwin-arm64")).unwrap();
        let want = root.join(format!("1.36.12-linux-{arch}"));
        fake_assets(&want);
        let vars = [("XDG_DATA_HOME", data.path())];
        let env = env_of(&vars);
        assert_eq!(envtest_assets_dir_with(&env), Some(want.clone()));
        let found = Binaries::find_with(env).unwrap();
        assert_eq!(found.etcd, want.join("etcd"));
        // $HOME/.local/share without XDG_DATA_HOME.
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join(".local/share/kubebuilder-envtest/k8s");
        std::fs::create_dir_all(root.join(format!("1.36.3-linux-{arch}"))).unwrap();
        assert_eq!(
            envtest_assets_dir_with(&env_of(&[("HOME", home.path())])),
            Some(root.join(format!("1.36.3-linux-{arch}")))
        );
        assert_eq!(envtest_assets_dir_with(&env_of(&[])), None);
    }

    #[test]
    fn the_build_script_ships_with_the_crate() {
        let script = build_script();
        assert!(script.is_file(), "{}", script.display());
        let dir = script.parent().unwrap();
        for file in ["go.mod", "go.sum", "tools.go", "etcd/go.mod", "etcd/go.sum"] {
            assert!(dir.join(file).is_file(), "{file} beside the build script");
        }
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
            message.contains("control-plane/build.sh") && message.contains("Install Go"),
            "{message}"
        );
        assert!(message.contains("KUBEBUILDER_ASSETS"), "{message}");
    }

    #[test]
    fn a_wrong_explicit_path_is_an_error() {
        let assets = tempfile::tempdir().unwrap();
        fake_assets(assets.path());
        let missing = assets.path().join("no-such-etcd");
        let err = find_with_etcd(assets.path(), &missing).unwrap_err();
        assert!(err.to_string().contains("TEST_ASSET_ETCD"), "{err}");
    }
}
