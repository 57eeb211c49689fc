//! Images for a cluster where nothing can be pulled, built from the C sources this crate
//! carries (static, `FROM scratch`) with gcc and buildah, cached by the digest of their
//! source: the sandbox ("pause") image (`cluster/pause.c`) and a web workload
//! (`cluster/web.c`, answers each HTTP request with its Pod's name); and importing OCI
//! archives into a node's containerd.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::netns::run;
use super::node::{PAUSE_IMAGE, WEB_IMAGE};
use crate::{Error, write_file};

/// An image of one static C program: `FROM scratch`, the program as its entry point, run
/// as a user without rights.
struct CImage {
    /// Its reference, e.g. [`PAUSE_IMAGE`].
    reference: &'static str,
    /// The program's (and the cached archive's) name.
    name: &'static str,
    source: &'static str,
    /// The port the program listens on, passed as its argument.
    port: Option<u16>,
}

impl CImage {
    /// The Containerfile that builds the image, next to the program.
    fn containerfile(&self) -> String {
        let name = self.name;
        let exposed = self.port.map(|port| format!("EXPOSE {port}\n"));
        let command = self.port.map(|port| format!("CMD [\"{port}\"]\n"));
        format!(
            "FROM scratch\nCOPY {name} /{name}\nUSER 65535:65535\n{}ENTRYPOINT [\"/{name}\"]\n{}",
            exposed.unwrap_or_default(),
            command.unwrap_or_default()
        )
    }
}

const PAUSE: CImage = CImage {
    reference: PAUSE_IMAGE,
    name: "pause",
    source: include_str!("../../cluster/pause.c"),
    port: None,
};

const WEB: CImage = CImage {
    reference: WEB_IMAGE,
    name: "web",
    source: include_str!("../../cluster/web.c"),
    port: Some(8080),
};

/// The archives of the images every node gets: the pause image and the web workload, built
/// first where missing. Blocking.
pub(crate) fn builtin_archives() -> Result<Vec<PathBuf>, Error> {
    [PAUSE, WEB].iter().map(archive).collect()
}

/// `image`'s OCI archive: `${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/cluster/
/// <name>-<digest>.tar`, built first if missing. Blocking.
fn archive(image: &CImage) -> Result<PathBuf, Error> {
    let containerfile = image.containerfile();
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        [image.source, &containerfile].concat().as_bytes(),
    );
    let short: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = crate::binaries::cache_dir()
        .ok_or_else(|| Error::InvalidArgument("neither CCM_CACHE_DIR nor HOME is set".into()))?
        .join("cluster");
    let name = image.name;
    let archive = cache.join(format!("{name}-{short}.tar"));
    if archive.is_file() {
        return Ok(archive);
    }
    std::fs::create_dir_all(&cache)
        .map_err(|e| Error::io(format!("creating {}", cache.display()), e))?;
    let context = tempfile::Builder::new()
        .prefix(&format!("ccm-test-{name}-"))
        .tempdir()
        .map_err(|e| Error::io(format!("creating the {name} image's build folder"), e))?;
    let source = context.path().join(format!("{name}.c"));
    write_file(&source, image.source)?;
    write_file(&context.path().join("Containerfile"), &containerfile)?;
    run(
        Command::new("gcc")
            .args(["-static", "-Os", "-s", "-Wall", "-o"])
            .arg(context.path().join(name))
            .arg(&source),
        &format!("building the {name} binary (gcc -static; install gcc and libc6-dev)"),
    )?;
    let partial = cache.join(format!(".{name}-{short}.{}.tar", std::process::id()));
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
    let reference = image.reference;
    buildah(
        &[
            "bud",
            "--quiet",
            "--isolation",
            "chroot",
            "--layers=false",
            "-t",
            reference,
            context_path,
        ],
        &format!("building the {name} image (apt-get install buildah)"),
    )?;
    let destination = format!("oci-archive:{}:{reference}", partial.display());
    let pushed = buildah(
        &["push", "--quiet", reference, &destination],
        &format!("saving the {name} image"),
    );
    let _ = buildah(
        &["rmi", reference],
        &format!("removing the {name} image from buildah"),
    );
    pushed?;
    std::fs::rename(&partial, &archive).map_err(|e| {
        Error::io(
            format!("moving the {name} image to {}", archive.display()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The text is part of the cached archives' digests: a change builds them again.
    #[test]
    fn the_containerfiles_are_the_cached_images_ones() {
        assert_eq!(
            PAUSE.containerfile(),
            "FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n"
        );
        assert_eq!(
            WEB.containerfile(),
            "FROM scratch\nCOPY web /web\nUSER 65535:65535\nEXPOSE 8080\nENTRYPOINT [\"/web\"]\n\
             CMD [\"8080\"]\n"
        );
    }
}
