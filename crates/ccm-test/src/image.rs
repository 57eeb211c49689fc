//! Runs a container image as a process, without a container engine: an OCI archive
//! (`buildah push … oci-archive:…`, what `scripts/images.sh` writes) is unpacked by
//! `buildah` (vfs storage, chroot isolation, the host's network) and its entrypoint started
//! with the arguments a Deployment would give it, as the image's user. Tests use it to prove
//! that the image a provider ships, not just its binary, runs as a CCM against a
//! [`ControlPlane`](crate::ControlPlane). Needs `buildah` and root.
//!
//! [`ProviderImage`] builds a provider author's image the way ccm-rs builds its own, with
//! the recipe this crate ships ([`PROVIDER_IMAGE_SCRIPT`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::unique_name;

/// Why a container could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The archive does not exist.
    #[error(
        "no image archive at {}: build it with `scripts/images.sh --debug` (needs buildah)",
        .0.display()
    )]
    NoArchive(PathBuf),
    /// `buildah` failed or is not installed.
    #[error("buildah {step}: {message}")]
    Buildah {
        /// What was being done.
        step: &'static str,
        /// Its error output.
        message: String,
    },
    /// Building a provider's image ([`ProviderImage::build`]) failed.
    #[error("building the provider's image: {message}")]
    Build {
        /// What failed.
        message: String,
    },
}

/// A container started from an image archive; killed and removed on drop.
#[derive(Debug)]
pub struct Container {
    child: Child,
    name: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// A host path mounted read-only into the container.
#[derive(Clone, Debug)]
pub struct Mount {
    host: PathBuf,
    container: String,
}

impl Mount {
    /// Mounts `host` (a file or folder) at `container`, read-only. The image's user must be
    /// able to read it: a test makes the files world-readable, as a Secret volume would.
    pub fn read_only(host: impl Into<PathBuf>, container: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            container: container.into(),
        }
    }
}

fn buildah() -> Command {
    let mut cmd = Command::new("buildah");
    cmd.args(["--storage-driver", "vfs"]);
    cmd
}

fn run(step: &'static str, cmd: &mut Command) -> Result<String, ImageError> {
    let out = cmd.output().map_err(|e| ImageError::Buildah {
        step,
        message: format!("cannot run buildah ({e}); install it (apt-get install buildah)"),
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(ImageError::Buildah {
            step,
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

impl Container {
    /// Starts the entrypoint of the image in `archive` with `args`, on the host's network,
    /// with `mounts`. Its standard error and output go to a log ([`Container::log`]).
    pub fn start(archive: &Path, mounts: &[Mount], args: &[String]) -> Result<Self, ImageError> {
        if !archive.is_file() {
            return Err(ImageError::NoArchive(archive.to_owned()));
        }
        let name = unique_name("ccm-image");
        run(
            "from",
            buildah()
                .args(["from", "--quiet", "--name", &name])
                .arg(format!("oci-archive:{}", archive.display())),
        )?;
        let entrypoint = run(
            "inspect",
            buildah().args([
                "inspect",
                "--format",
                "{{range .OCIv1.Config.Entrypoint}}{{.}}\n{{end}}",
                &name,
            ]),
        )
        .inspect_err(|_| remove(&name))?;
        let dir = tempfile::tempdir().map_err(|e| ImageError::Buildah {
            step: "log",
            message: e.to_string(),
        })?;
        let log = dir.path().join("container.log");
        let file = std::fs::File::create(&log).map_err(|e| ImageError::Buildah {
            step: "log",
            message: e.to_string(),
        })?;
        let mut cmd = buildah();
        cmd.args(["run", "--isolation", "chroot", "--network", "host"]);
        for m in mounts {
            cmd.arg("--volume")
                .arg(format!("{}:{}:ro", m.host.display(), m.container));
        }
        cmd.arg(&name)
            .arg("--")
            .args(entrypoint.lines())
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().map_err(|e| ImageError::Buildah {
                step: "log",
                message: e.to_string(),
            })?)
            .stderr(file);
        // Its own process group, so drop kills buildah and the process it runs.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(|e| {
            remove(&name);
            ImageError::Buildah {
                step: "run",
                message: e.to_string(),
            }
        })?;
        Ok(Self {
            child,
            name,
            log,
            _dir: dir,
        })
    }

    /// What the container wrote so far (standard output and error).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The container's exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

fn remove(name: &str) {
    let _ = buildah()
        .args(["rm", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
        remove(&self.name);
    }
}

/// The files of a Pod's volumes, written where a test can mount them: a folder per volume,
/// world-readable as the kubelet makes ConfigMap volumes (the image runs as its own user,
/// not as the owner of the test's files). Removed on drop.
#[derive(Debug)]
pub struct VolumeFiles {
    dir: tempfile::TempDir,
}

impl VolumeFiles {
    /// An empty set of volumes in a new temporary folder.
    pub fn new() -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        world_readable(dir.path(), 0o755)?;
        Ok(Self { dir })
    }

    /// Writes `files` (name, content) into the folder of volume `volume` and returns a
    /// read-only mount of it at `mount_path`.
    pub fn volume<'a>(
        &self,
        volume: &str,
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
        mount_path: &str,
    ) -> std::io::Result<Mount> {
        let dir = self.dir.path().join(volume);
        std::fs::create_dir_all(&dir)?;
        world_readable(&dir, 0o755)?;
        for (name, content) in files {
            let path = dir.join(name);
            std::fs::write(&path, content)?;
            world_readable(&path, 0o644)?;
        }
        Ok(Mount::read_only(dir, mount_path))
    }

    /// Copies one file (a kubeconfig, say) in, world-readable, and returns a read-only mount
    /// of it at `mount_path`.
    pub fn file(&self, host: &Path, mount_path: &str) -> std::io::Result<Mount> {
        let name = host.file_name().unwrap_or_else(|| "file".as_ref());
        let path = self.dir.path().join(name);
        std::fs::copy(host, &path)?;
        world_readable(&path, 0o644)?;
        Ok(Mount::read_only(path, mount_path))
    }
}

fn world_readable(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// A loopback port that nothing listens on now, for a container on the host's network.
/// ([`net::free_port`](crate::net::free_port), with the error.)
pub fn free_port() -> std::io::Result<u16> {
    crate::net::try_free_port()
}

/// The objects of kind `kind` in a multi-document YAML manifest (a `deploy/*.yaml`), parsed
/// as `T`, in order: what a test reads to run an image as the manifest would.
pub fn manifest_objects<T: serde::de::DeserializeOwned>(
    yaml: &str,
    kind: &str,
) -> Result<Vec<T>, serde_yaml_ng::Error> {
    use serde::Deserialize as _;
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value = serde_yaml_ng::Value::deserialize(document)?;
        if value.get("kind").and_then(serde_yaml_ng::Value::as_str) == Some(kind) {
            objects.push(serde_yaml_ng::from_value(value)?);
        }
    }
    Ok(objects)
}

/// Where the archive of `image` is: `$CCM_IMAGE_DIR/<image>.tar`, else
/// `<workspace>/target/images/<image>.tar` (what `scripts/images.sh` writes), `workspace`
/// being the repository root of the test's crate.
pub fn archive(workspace: &Path, image: &str) -> PathBuf {
    std::env::var_os("CCM_IMAGE_DIR")
        .map_or_else(|| workspace.join("target/images"), PathBuf::from)
        .join(format!("{image}.tar"))
}

/// A manifest container's arguments as a test runs them on the host's network: the
/// `--secure-port` moved to `secure_port` (10258 is shared by every test on the host), and
/// `--kubeconfig` naming the kubeconfig a Pod would get from its ServiceAccount.
pub fn container_args(args: &[String], secure_port: u16, kubeconfig: &str) -> Vec<String> {
    args.iter()
        .map(|a| match a.strip_prefix("--secure-port=") {
            Some(_) => format!("--secure-port={secure_port}"),
            None => a.clone(),
        })
        .chain(std::iter::once(format!("--kubeconfig={kubeconfig}")))
        .collect()
}

/// `provider-image.sh`, the image recipe this crate ships (in its package, beside
/// `Cargo.toml`): a provider's binary built static for each platform and put in an image
/// `FROM scratch` with the CA certificates, saved as an OCI archive. [`ProviderImage`] runs
/// it; an author can also run the file itself (`--help` lists its options).
pub const PROVIDER_IMAGE_SCRIPT: &str = include_str!("../provider-image.sh");

/// The container image of a provider's own CCM binary, built by [`PROVIDER_IMAGE_SCRIPT`]
/// as ccm-rs builds its own (static glibc binary, `FROM scratch`, user 65532, buildah with
/// vfs storage and chroot isolation, an OCI image index). The archive it writes is what
/// [`ClusterBuilder::image`](crate::ClusterBuilder::image) imports into a cluster's nodes,
/// and what `skopeo copy --all oci-archive:FILE docker://REGISTRY/NAME:TAG` pushes.
///
/// [`build`](Self::build) runs `cargo build` and buildah: it blocks for as long as the build
/// takes (call it before starting a cluster, or from `spawn_blocking`). Needs root and
/// `buildah`; for `linux/arm64` the cross linker named in the script's errors.
///
/// ```no_run
/// # fn demo() -> Result<(), ccm_test::image::ImageError> {
/// let archive = ccm_test::image::ProviderImage::new(env!("CARGO_MANIFEST_DIR"))
///     .platform("linux/amd64")
///     .debug()
///     .build()?; // <target>/images/<bin>.tar, named localhost/<bin>:<version>
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ProviderImage {
    crate_dir: PathBuf,
    bin: Option<String>,
    platforms: Vec<String>,
    debug: bool,
    name: Option<String>,
    tag: Option<String>,
    out: Option<PathBuf>,
}

impl ProviderImage {
    /// The image of the crate in `crate_dir` (its only binary unless [`bin`](Self::bin)
    /// names one), for linux/amd64 and linux/arm64, a release build.
    pub fn new(crate_dir: impl Into<PathBuf>) -> Self {
        Self {
            crate_dir: crate_dir.into(),
            bin: None,
            platforms: Vec::new(),
            debug: false,
            name: None,
            tag: None,
            out: None,
        }
    }

    /// The binary to put in the image.
    pub fn bin(mut self, name: impl Into<String>) -> Self {
        self.bin = Some(name.into());
        self
    }

    /// Builds for `platform` (`linux/amd64` or `linux/arm64`); repeat for more. Without
    /// it, both.
    pub fn platform(mut self, platform: impl Into<String>) -> Self {
        self.platforms.push(platform.into());
        self
    }

    /// A debug build (quicker, larger) instead of a stripped release build.
    pub fn debug(mut self) -> Self {
        self.debug = true;
        self
    }

    /// The image's name, `localhost/<bin>` by default.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The image's tag, the crate's version by default.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Where to write the archive, `<target dir>/images/<bin>.tar` by default.
    pub fn out(mut self, archive: impl Into<PathBuf>) -> Self {
        self.out = Some(archive.into());
        self
    }

    /// The script's arguments for these options.
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--manifest-path".to_owned(),
            self.crate_dir.join("Cargo.toml").display().to_string(),
        ];
        let mut option = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                args.push(flag.to_owned());
                args.push(value);
            }
        };
        option("--bin", self.bin.clone());
        option(
            "--platform",
            (!self.platforms.is_empty()).then(|| self.platforms.join(",")),
        );
        option("--name", self.name.clone());
        option("--tag", self.tag.clone());
        option("--out", self.out.as_ref().map(|p| p.display().to_string()));
        if self.debug {
            args.push("--debug".to_owned());
        }
        args
    }

    /// Builds the binary and the image; returns the archive's path. The build's output goes
    /// to this process's standard error.
    pub fn build(&self) -> Result<PathBuf, ImageError> {
        let failed = |message: String| ImageError::Build { message };
        let output = Command::new("bash")
            .arg("-c")
            .arg(PROVIDER_IMAGE_SCRIPT)
            .arg("provider-image.sh")
            .args(self.args())
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| failed(format!("running bash: {e}")))?;
        if !output.status.success() {
            return Err(failed(format!(
                "provider-image.sh {} ({}; its errors are above)",
                self.args().join(" "),
                output.status
            )));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let archive = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        if archive.is_file() {
            Ok(archive)
        } else {
            Err(failed(format!(
                "provider-image.sh printed {stdout:?}, not an archive's path"
            )))
        }
    }
}

#[cfg(test)]
mod provider_image_tests {
    use super::*;

    #[test]
    fn the_script_gets_only_the_options_set() {
        let image = ProviderImage::new("/src/acme");
        assert_eq!(image.args(), ["--manifest-path", "/src/acme/Cargo.toml"]);
        let image = image
            .bin("acme-ccm")
            .platform("linux/amd64")
            .platform("linux/arm64")
            .debug()
            .name("registry.example.com/acme")
            .tag("1.2.3")
            .out("/tmp/acme.tar");
        assert_eq!(
            image.args().join(" "),
            "--manifest-path /src/acme/Cargo.toml --bin acme-ccm \
             --platform linux/amd64,linux/arm64 --name registry.example.com/acme --tag 1.2.3 \
             --out /tmp/acme.tar --debug"
        );
    }

    #[test]
    fn a_script_that_fails_is_an_error_naming_it() {
        let err = ProviderImage::new("/nonexistent/crate")
            .build()
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("building the provider's image: provider-image.sh --manifest-path /nonexistent/crate/Cargo.toml"),
            "{message}"
        );
    }
}
