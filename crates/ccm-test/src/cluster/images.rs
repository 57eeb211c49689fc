//! Images for a cluster where nothing can be pulled: the sandbox ("pause") image, built
//! from the C source this crate carries (`cluster/pause.c`: static, `FROM scratch`) with gcc
//! and buildah and cached by the digest of its source; and importing OCI archives into a
//! node's containerd.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::netns::run;
use super::node::PAUSE_IMAGE;
use crate::{Error, write_file};

const PAUSE_SOURCE: &str = include_str!("../../cluster/pause.c");

const PAUSE_CONTAINERFILE: &str = "FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT [\"/pause\"]
";

/// The pause image's OCI archive: `${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/cluster/
/// pause-<digest>.tar`, built first if missing. Blocking.
pub(crate) fn pause_archive() -> Result<PathBuf, Error> {
    let digest = ring::digest::digest(&ring::digest::SHA256, PAUSE_SOURCE.as_bytes());
    let short: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = crate::binaries::cache_dir()
        .ok_or_else(|| Error::InvalidArgument("neither CCM_CACHE_DIR nor HOME is set".into()))?
        .join("cluster");
    let archive = cache.join(format!("pause-{short}.tar"));
    if archive.is_file() {
        return Ok(archive);
    }
    std::fs::create_dir_all(&cache)
        .map_err(|e| Error::io(format!("creating {}", cache.display()), e))?;
    let context = tempfile::Builder::new()
        .prefix("ccm-test-pause-")
        .tempdir()
        .map_err(|e| Error::io("creating the pause image's build folder", e))?;
    let source = context.path().join("pause.c");
    write_file(&source, PAUSE_SOURCE)?;
    write_file(&context.path().join("Containerfile"), PAUSE_CONTAINERFILE)?;
    run(
        Command::new("gcc")
            .args(["-static", "-Os", "-s", "-Wall", "-o"])
            .arg(context.path().join("pause"))
            .arg(&source),
        "building the pause binary (gcc -static; install gcc and libc6-dev)",
    )?;
    let partial = cache.join(format!(".pause-{short}.{}.tar", std::process::id()));
    let buildah = |args: &[&str], what: &str| {
        run(
            Command::new("buildah")
                .args(["--storage-driver", "vfs"])
                .args(args),
            what,
        )
    };
    let context_path = context
        .path()
        .to_str()
        .ok_or_else(|| Error::InvalidArgument("the temporary folder is not UTF-8".into()))?;
    buildah(
        &[
            "bud",
            "--quiet",
            "--isolation",
            "chroot",
            "--layers=false",
            "-t",
            PAUSE_IMAGE,
            context_path,
        ],
        "building the pause image (apt-get install buildah)",
    )?;
    let destination = format!("oci-archive:{}:{PAUSE_IMAGE}", partial.display());
    let pushed = buildah(
        &["push", "--quiet", PAUSE_IMAGE, &destination],
        "saving the pause image",
    );
    let _ = buildah(
        &["rmi", PAUSE_IMAGE],
        "removing the pause image from buildah",
    );
    pushed?;
    std::fs::rename(&partial, &archive).map_err(|e| {
        Error::io(
            format!("moving the pause image to {}", archive.display()),
            e,
        )
    })?;
    Ok(archive)
}

/// Imports the OCI archive `archive` into the containerd at `socket`, in the namespace the
/// CRI uses (`k8s.io`). Blocking.
pub(crate) fn import(socket: &Path, archive: &Path) -> Result<(), Error> {
    if !archive.is_file() {
        return Err(Error::Cluster(format!(
            "no image archive at {} (scripts/images.sh writes them)",
            archive.display()
        )));
    }
    run(
        Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive),
        &format!("importing {}", archive.display()),
    )
    .map(drop)
}
