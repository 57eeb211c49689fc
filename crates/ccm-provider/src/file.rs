//! One way to read a file the process is told about: a flag's file, the cloud-config, a
//! kubeconfig and the files it names, certificates, keys, CA bundles, tokens.
//!
//! [`read`] refuses at once what is not a regular file (a named pipe nobody writes would
//! block the open for good, a device like `/dev/zero` never ends), reads at most a limit
//! chosen per kind of file ([`MAX_PEM_BYTES`], [`MAX_KUBECONFIG_BYTES`], [`MAX_TOKEN_BYTES`],
//! [`CloudConfig::MAX_BYTES`](crate::CloudConfig::MAX_BYTES)), and its [`FileError`] names
//! the flag or field the path came from. The controller manager calls it off the runtime
//! threads, where SIGTERM can leave it behind; a provider reads its own files (from its
//! factory, which runs there too) with [`read`] or [`read_text`].

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest PEM file read: 1 MiB (a certificate chain or CA bundle is a few kilobytes;
/// every public CA of a distribution's bundle together is about 200 KiB).
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// The largest kubeconfig read: 4 MiB (generous for a kubeconfig with many clusters and
/// inlined certificates, far below what would hurt).
pub const MAX_KUBECONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// The largest token file read: 64 KiB (a service-account token is about 1 KiB).
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// A file that could not be read, with where its path came from.
///
/// ```
/// use ccm_core::provider::file;
/// let err = file::read_named("--tls-cert-file", "/dev/zero", file::MAX_PEM_BYTES).unwrap_err();
/// assert_eq!(err.to_string(),
///            "--tls-cert-file: cannot read /dev/zero: is a character device, not a regular file");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{origin}: cannot read {}: {source}", path.display())]
pub struct FileError {
    /// The flag or field that named the file: `--tls-cert-file`,
    /// `certificate-authority of cluster "c" in --kubeconfig`.
    pub origin: String,
    /// The file.
    pub path: PathBuf,
    /// Why it could not be read; [`read`] explains the kinds.
    #[source]
    pub source: io::Error,
}

impl FileError {
    /// An error reading `path`, named by `origin`.
    pub fn new(origin: impl Into<String>, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self {
            origin: origin.into(),
            path: path.into(),
            source,
        }
    }
}

/// Reads the file at `path`, of at most `max_bytes`.
///
/// Symbolic links are followed (a mounted ConfigMap or Secret is one); the target must be a
/// regular file, so a named pipe or a device is an error of kind
/// [`InvalidInput`](io::ErrorKind::InvalidInput) at once instead of a hang or an endless
/// read. At most `max_bytes + 1` bytes are read: a longer file is an error of kind
/// [`FileTooLarge`](io::ErrorKind::FileTooLarge). The error says what is wrong, not which
/// file: [`read_named`] adds that.
///
/// ```
/// use ccm_core::provider::file;
/// let dir = tempfile::tempdir().unwrap();
/// let token = dir.path().join("token");
/// std::fs::write(&token, "s3cr3t\n").unwrap();
/// assert_eq!(file::read(&token, 64).unwrap(), b"s3cr3t\n");
/// let err = file::read(&token, 4).unwrap_err();
/// assert_eq!(err.to_string(), "is larger than 4 bytes, the limit for this file");
/// let err = file::read(dir.path(), 4).unwrap_err();
/// assert_eq!(err.to_string(), "is a directory, not a regular file");
/// ```
pub fn read(path: impl AsRef<Path>, max_bytes: u64) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    // Check before opening: opening a named pipe blocks until a writer comes.
    regular_file(&std::fs::metadata(path)?)?;
    let file = File::open(path)?;
    // The path may have been replaced in between (by a device, say): check what was opened.
    // (A named pipe swapped in would block the open itself; the callers read off the
    // runtime, where a signal still ends the process.)
    regular_file(&file.metadata()?)?;
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "is larger than {}, the limit for this file",
                size(max_bytes)
            ),
        ));
    }
    Ok(bytes)
}

/// [`read`], for UTF-8 text: other bytes are an error of kind
/// [`InvalidData`](io::ErrorKind::InvalidData) that gives the offset.
pub fn read_text(path: impl AsRef<Path>, max_bytes: u64) -> io::Result<String> {
    String::from_utf8(read(path, max_bytes)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// [`read`], with an error that names `origin`, the flag or field `path` came from.
pub fn read_named(
    origin: &str,
    path: impl AsRef<Path>,
    max_bytes: u64,
) -> Result<Vec<u8>, FileError> {
    let path = path.as_ref();
    read(path, max_bytes).map_err(|e| FileError::new(origin, path, e))
}

/// Whether `meta` is a regular file; otherwise an error saying what it is.
fn regular_file(meta: &std::fs::Metadata) -> io::Result<()> {
    let file_type = meta.file_type();
    if file_type.is_file() {
        return Ok(());
    }
    let what = if file_type.is_dir() {
        "a directory"
    } else {
        special_file(&file_type)
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("is {what}, not a regular file"),
    ))
}

#[cfg(unix)]
fn special_file(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "a named pipe (FIFO)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_file(_file_type: &std::fs::FileType) -> &'static str {
    "a special file"
}

/// `bytes` as people write limits: `1 MiB`, `64 KiB`, `100 bytes`.
pub(crate) fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    if bytes >= KIB * KIB && bytes.is_multiple_of(KIB * KIB) {
        format!("{} MiB", bytes / (KIB * KIB))
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(path: &Path) -> String {
        read(path, 64).unwrap_err().to_string()
    }

    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(why(dir.path()), "is a directory, not a regular file");
        assert_eq!(
            why(Path::new("/dev/zero")),
            "is a character device, not a regular file"
        );
        // A named pipe nobody writes: an error at once, not a hang.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(why(&fifo), "is a named pipe (FIFO), not a regular file");
        assert_eq!(
            read(dir.path().join("missing"), 64).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        // A symbolic link to a regular file (how a ConfigMap is mounted) is followed.
        let file = dir.path().join("cloud.yaml");
        std::fs::write(&file, "name: a\n").unwrap();
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_text(&link, 64).unwrap(), "name: a\n");
    }

    #[test]
    fn reads_at_most_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, "#".repeat(1024)).unwrap();
        assert_eq!(read(&path, 1024).unwrap().len(), 1024);
        let err = read(&path, 1023).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(
            err.to_string(),
            "is larger than 1023 bytes, the limit for this file"
        );
        // A sparse 100 MB file is refused after reading one byte more than the limit.
        let file = File::create(&path).unwrap();
        file.set_len(100_000_000).unwrap();
        let err = read(&path, MAX_PEM_BYTES).unwrap_err();
        assert_eq!(
            err.to_string(),
            "is larger than 1 MiB, the limit for this file"
        );
    }

    #[test]
    fn text_must_be_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, b"name: \xff\n").unwrap();
        let err = read_text(&path, 64).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            err.to_string(),
            "is not UTF-8 text (invalid byte at offset 6)"
        );
    }

    #[test]
    fn the_error_names_where_the_path_came_from() {
        let err = read_named("--client-ca-file", "/nonexistent/ca.crt", 64).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--client-ca-file: cannot read /nonexistent/ca.crt: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn limit_sizes_read_as_written() {
        assert_eq!(size(1024 * 1024), "1 MiB");
        assert_eq!(size(64 * 1024), "64 KiB");
        assert_eq!(size(1000), "1000 bytes");
        assert_eq!(size(1536), "1536 bytes");
    }
}
