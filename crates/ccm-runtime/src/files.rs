//! Reading the files that flags name, off the runtime, and kubeconfigs with their files.
//!
//! Every file goes through [`ccm_provider::file::read`] (regular files only, a size limit
//! per kind, an error naming the flag or field). This module runs those reads on a thread
//! of their own ([`off_thread`]): a read that blocks (a slow network file system, a path
//! swapped for a named pipe between the check and the open) then never holds a runtime
//! thread, and the caller's `run_until_cancelled` lets SIGTERM end the process all the same.
//! [`kubeconfig`] reads a kubeconfig and every file it names (CA bundles, client
//! certificates and keys) the same way and inlines them, so that kube never reads a file
//! itself, but for the token file it must re-read as the token rotates (checked here).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ccm_provider::BoxError;
use ccm_provider::file::{self, FileError, MAX_KUBECONFIG_BYTES, MAX_PEM_BYTES, MAX_TOKEN_BYTES};
use kube::config::Kubeconfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// Runs `work` on a thread named `name`, inside the current runtime's context, and waits
/// for its answer without holding a runtime thread. Dropping the future leaves the thread
/// behind: it ends by itself or with the process. A panic in `work` resumes in the caller.
///
/// # Errors
///
/// The thread could not be started.
pub(crate) async fn off_thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _runtime = runtime.enter();
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
        })?;
    match rx.await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // The thread ends by sending; a panic is caught and sent.
        Err(_) => Err(std::io::Error::other(format!(
            "the {name} thread ended without an answer"
        ))),
    }
}

/// Why a kubeconfig could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KubeconfigError {
    /// It, or a file it names, could not be read.
    #[error(transparent)]
    Read(#[from] FileError),
    /// It is not a kubeconfig.
    #[error("{origin}: invalid {}: {source}", path.display())]
    Invalid {
        /// The flag it came from.
        origin: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: BoxError,
    },
}

/// Reads the kubeconfig at `path` (named by `origin`, a flag) and every file it names,
/// inlined as `…-data`: `certificate-authority`, `client-certificate` and `client-key`,
/// each a PEM file of at most [`MAX_PEM_BYTES`]. Relative paths are relative to the
/// kubeconfig's directory, as client-go and kube resolve them. A `tokenFile` is checked (a
/// regular file of at most [`MAX_TOKEN_BYTES`]) and left as a path, made absolute: kube
/// re-reads it as it rotates. Text in UTF-16 with a byte-order mark is read, as kube and
/// client-go do. Blocking: call it through [`off_thread`].
///
/// # Errors
///
/// A file could not be read (the message names `origin`, and the field and the cluster or
/// user that named the file), or the text is not a kubeconfig.
pub(crate) fn kubeconfig(origin: &str, path: &Path) -> Result<Kubeconfig, KubeconfigError> {
    let invalid = |source| KubeconfigError::Invalid {
        origin: origin.to_owned(),
        path: path.to_owned(),
        source,
    };
    let bytes = file::read_named(origin, path, MAX_KUBECONFIG_BYTES)?;
    let text =
        decode(&bytes).map_err(|e| FileError::new(origin, path, std::io::Error::other(e)))?;
    let mut config =
        from_yaml(&text).map_err(|e| invalid(without_values(&e.to_string()).into()))?;
    inline(&mut config, origin, path)?;
    Ok(config)
}

/// The client configuration of `kubeconfig`'s current context, as kube reads it, but with
/// `proxy_url` the cluster's `proxy-url` alone: kube fills it from `HTTPS_PROXY` too, where
/// client-go leaves the environment to Go's rules (`NO_PROXY`, never for loopback), which
/// the client applies when the kubeconfig names no proxy (`client::proxy`).
///
/// # Errors
///
/// kube's, when the kubeconfig names no usable context, cluster or user.
pub(crate) async fn client_config(
    mut kubeconfig: Kubeconfig,
) -> Result<kube::Config, kube::config::KubeconfigError> {
    let (cluster_name, _) = current_names(&kubeconfig);
    let mut proxy = None;
    if let Some(cluster) = kubeconfig
        .clusters
        .iter_mut()
        .find(|c| Some(&c.name) == cluster_name.as_ref())
        .and_then(|c| c.cluster.as_mut())
    {
        // A server without a scheme is reached over plain HTTP, as client-go reaches it
        // (it reads the CA and credentials only for an `https` server, and decides before
        // it reads them).
        if let Some(server) = &mut cluster.server
            && !server.is_empty()
            && !server.contains("://")
        {
            *server = format!("http://{server}");
        }
        // kube reads `HTTPS_PROXY` when the cluster names no proxy, and stops at a value it
        // cannot parse, which Go ignores: with a proxy named here (replaced below by the
        // cluster's own, or none), it reads nothing from the environment.
        proxy = cluster.proxy_url.replace("http://127.0.0.1".to_owned());
    }
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.proxy_url = match proxy.filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => Some(
            p.parse()
                .map_err(kube::config::KubeconfigError::ParseProxyUrl)?,
        ),
    };
    Ok(config)
}

/// Parses a kubeconfig as `Kubeconfig::from_yaml` does (each YAML document merged into the
/// first, the first of two same-named entries kept), with the YAML parser the cloud-configs
/// use: kube's parser, the other one in the binary, then serves only exec plugins' answers,
/// and the kubeconfig's types are not compiled for both (220 KB of code, nearly all of it
/// resident in a running CCM: docs/benchmarks.md, "Peak RSS of the shipped binary").
fn from_yaml(text: &str) -> Result<Kubeconfig, BoxError> {
    let mut merged = Kubeconfig::default();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let next: Option<Kubeconfig> = serde::Deserialize::deserialize(document)?;
        if let Some(next) = next {
            merged = merged.merge(next)?;
        }
    }
    Ok(merged)
}

/// Replaces the file fields of the clusters and users by the files' contents (see
/// [`kubeconfig`]). The current context's cluster and user are checked as client-go checks
/// them: a file that cannot be read, a field given both as a file and inline, CA data
/// without a certificate, each an error. Another context's entries, which client-go never
/// reads, are inlined where their files can be read and left as they are otherwise (a file
/// of `$KUBECONFIG` that names no current context is checked whole: the merged current
/// context may be any of its entries).
fn inline(config: &mut Kubeconfig, origin: &str, path: &Path) -> Result<(), KubeconfigError> {
    let dir = path.parent().unwrap_or(Path::new(""));
    let encode = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let nonempty = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
    let both = |field: &str, entry: &str, name: &str| KubeconfigError::Invalid {
        origin: origin.to_owned(),
        path: path.to_owned(),
        source: format!(
            "{field} and {field}-data are both set in {entry} {:?}: name one or the other",
            ccm_provider::echo::echo(name)
        )
        .into(),
    };
    let (cluster_name, user_name) = current_names(config);
    for named in &mut config.clusters {
        let Some(cluster) = &mut named.cluster else {
            continue;
        };
        let strict = cluster_name
            .as_deref()
            .is_none_or(|current| current == named.name);
        if strict
            && nonempty(&cluster.certificate_authority)
            && nonempty(&cluster.certificate_authority_data)
        {
            return Err(both("certificate-authority", "cluster", &named.name));
        }
        if let Some(ca) = cluster
            .certificate_authority
            .take()
            .filter(|ca| !ca.is_empty())
        {
            let what = format!(
                "{origin}: certificate-authority of cluster {:?}",
                ccm_provider::echo::echo(&named.name)
            );
            match file::read_named(&what, dir.join(&ca), MAX_PEM_BYTES) {
                Ok(bytes) => cluster.certificate_authority_data = Some(encode(bytes)),
                Err(e) if strict => return Err(e.into()),
                Err(_) => cluster.certificate_authority = Some(ca),
            }
        }
        // CA data that holds no PEM certificate is refused, as client-go refuses it,
        // rather than left to trust nothing; an empty CA (an empty file) does trust
        // nothing, in client-go too.
        if strict
            && let Some(data) = &cluster.certificate_authority_data
            && let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(data.trim())
            && !pem.iter().all(u8::is_ascii_whitespace)
            && !CertificateDer::pem_slice_iter(&pem).any(|c| c.is_ok())
        {
            return Err(KubeconfigError::Invalid {
                origin: origin.to_owned(),
                path: path.to_owned(),
                source: format!(
                    "the certificate-authority of cluster {:?} holds no PEM certificate",
                    ccm_provider::echo::echo(&named.name)
                )
                .into(),
            });
        }
    }
    for named in &mut config.auth_infos {
        let Some(user) = &mut named.auth_info else {
            continue;
        };
        let strict = user_name
            .as_deref()
            .is_none_or(|current| current == named.name);
        let what = |field: &str| {
            format!(
                "{origin}: {field} of user {:?}",
                ccm_provider::echo::echo(&named.name)
            )
        };
        if strict && nonempty(&user.client_certificate) && nonempty(&user.client_certificate_data) {
            return Err(both("client-certificate", "user", &named.name));
        }
        let key_data = user
            .client_key_data
            .as_ref()
            .is_some_and(|k| !secrecy::ExposeSecret::expose_secret(k).is_empty());
        if strict && nonempty(&user.client_key) && key_data {
            return Err(both("client-key", "user", &named.name));
        }
        if let Some(cert) = user.client_certificate.take().filter(|c| !c.is_empty()) {
            match file::read_named(&what("client-certificate"), dir.join(&cert), MAX_PEM_BYTES) {
                Ok(bytes) => user.client_certificate_data = Some(encode(bytes)),
                Err(e) if strict => return Err(e.into()),
                Err(_) => user.client_certificate = Some(cert),
            }
        }
        if let Some(key) = user.client_key.take().filter(|k| !k.is_empty()) {
            match file::read_named(&what("client-key"), dir.join(&key), MAX_PEM_BYTES) {
                Ok(bytes) => user.client_key_data = Some(encode(bytes).into()),
                Err(e) if strict => return Err(e.into()),
                Err(_) => user.client_key = Some(key),
            }
        }
        if let Some(token_file) = user.token_file.take().filter(|f| !f.is_empty()) {
            let token_file = dir.join(token_file);
            // Without a token beside it the file must be readable now (client-go reads it
            // at once); with one, the client reads it at its first request and falls back
            // to the token (`client::auth`).
            let has_token = user
                .token
                .as_ref()
                .is_some_and(|t| !secrecy::ExposeSecret::expose_secret(t).is_empty());
            if strict && !has_token {
                file::read_named(&what("tokenFile"), &token_file, MAX_TOKEN_BYTES)?;
            }
            user.token_file = Some(token_file.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// The names of the current context's cluster and user.
fn current_names(config: &Kubeconfig) -> (Option<String>, Option<String>) {
    let context = config.current_context.as_deref().and_then(|current| {
        config
            .contexts
            .iter()
            .find(|c| c.name == current)
            .and_then(|c| c.context.as_ref())
    });
    (
        context.map(|c| c.cluster.clone()),
        context.and_then(|c| c.user.clone()),
    )
}

/// A parser's message about a kubeconfig without the values it quotes (`"…"`, `` `…` ``):
/// a value in the wrong place may be a token or a password.
fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quote = None;
    let mut escaped = false;
    for c in message.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    out.push_str("(value)");
                    out.push(c);
                    quote = None;
                }
            }
            None => {
                out.push(c);
                if c == '"' || c == '`' {
                    quote = Some(c);
                }
            }
        }
    }
    if quote.is_some() {
        out.push_str("(value)");
    }
    out
}

/// A kubeconfig's text: UTF-8, or UTF-16 after a byte-order mark.
fn decode(bytes: &[u8]) -> Result<String, String> {
    let utf16 = |be: bool| {
        let units: Vec<u16> = bytes[2..]
            .chunks(2)
            .map(|c| {
                let pair = [c[0], c.get(1).copied().unwrap_or(0)];
                if be {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            })
            .collect();
        String::from_utf16(&units).map_err(|_| "is not valid UTF-16 text".to_owned())
    };
    match bytes {
        [0xFF, 0xFE, ..] => utf16(false),
        [0xFE, 0xFF, ..] => utf16(true),
        _ => String::from_utf8(bytes.to_vec()).map_err(|e| {
            format!(
                "is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path) -> PathBuf {
        let path = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        path
    }

    fn write_kubeconfig(dir: &Path, cluster: &str, user: &str) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:1\"{cluster}}}\n\
                 users:\n- name: u\n  user: {{{user}}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
                 current-context: x\n"
            ),
        )
        .unwrap();
        path
    }

    #[test]
    fn named_files_are_inlined_relative_to_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let ca = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n";
        std::fs::write(dir.path().join("ca.crt"), ca).unwrap();
        std::fs::write(dir.path().join("client.crt"), "CERT").unwrap();
        std::fs::write(dir.path().join("client.key"), "KEY").unwrap();
        std::fs::write(dir.path().join("token"), "T").unwrap();
        let path = write_kubeconfig(
            dir.path(),
            ", certificate-authority: ca.crt",
            "client-certificate: client.crt, client-key: client.key, tokenFile: token",
        );
        let config = kubeconfig("--kubeconfig", &path).unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority, None);
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(
                base64::engine::general_purpose::STANDARD
                    .encode(ca)
                    .as_str()
            )
        );
        let user = config.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate, None);
        assert_eq!(user.client_certificate_data.as_deref(), Some("Q0VSVA=="));
        assert_eq!(user.client_key, None);
        assert!(user.client_key_data.is_some());
        assert_eq!(
            user.token_file.as_deref(),
            Some(dir.path().join("token").to_str().unwrap())
        );
    }

    #[test]
    fn a_named_file_that_cannot_be_read_is_named_with_its_field() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo(dir.path());
        for (cluster, user, named) in [
            (
                format!(", certificate-authority: {}", fifo.display()),
                String::new(),
                "certificate-authority of cluster \"c\"",
            ),
            (
                String::new(),
                format!("client-certificate: {}, client-key: k", fifo.display()),
                "client-certificate of user \"u\"",
            ),
            (
                String::new(),
                "client-key: /dev/zero".to_owned(),
                "client-key of user \"u\"",
            ),
            (
                String::new(),
                format!("tokenFile: {}", dir.path().display()),
                "tokenFile of user \"u\"",
            ),
        ] {
            let path = write_kubeconfig(dir.path(), &cluster, &user);
            let err = kubeconfig("--kubeconfig", &path).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("--kubeconfig: {named}: cannot read ")),
                "{err}"
            );
            assert!(err.ends_with(", not a regular file"), "{err}");
        }
    }

    #[test]
    fn a_file_and_its_inline_data_together_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo(dir.path());
        for (cluster, user, field) in [
            (
                format!(
                    ", certificate-authority: {}, certificate-authority-data: Q0E=",
                    fifo.display()
                ),
                String::new(),
                "certificate-authority and certificate-authority-data",
            ),
            (
                String::new(),
                format!(
                    "client-certificate: {}, client-certificate-data: Q0E=",
                    fifo.display()
                ),
                "client-certificate and client-certificate-data",
            ),
            (
                String::new(),
                format!("client-key: {}, client-key-data: Q0E=", fifo.display()),
                "client-key and client-key-data",
            ),
        ] {
            let path = write_kubeconfig(dir.path(), &cluster, &user);
            let error = kubeconfig("--kubeconfig", &path).err().unwrap().to_string();
            assert!(error.contains(field), "{error}");
        }
    }

    #[test]
    fn only_the_current_contexts_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "clusters:\n- name: other\n  cluster: {server: \"https://127.0.0.1:2\", certificate-authority: missing.pem}\n\
             - name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n\
             users:\n- name: other\n  user: {tokenFile: missing}\n- name: u\n  user: {token: t}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        )
        .unwrap();
        let read = kubeconfig("--kubeconfig", &path).unwrap();
        let other = read.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            other.certificate_authority.as_deref(),
            Some("missing.pem"),
            "left as it was"
        );
        // A file of `$KUBECONFIG` without a current context is checked whole.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("current-context: x\n", "")).unwrap();
        let error = kubeconfig("--kubeconfig", &path).err().unwrap().to_string();
        assert!(
            error.contains("certificate-authority of cluster \"other\""),
            "{error}"
        );
    }

    #[test]
    fn a_value_in_the_wrong_place_is_not_repeated() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_kubeconfig(dir.path(), ", insecure-skip-tls-verify: SECRET-abc", "");
        let error = kubeconfig("--kubeconfig", &path).err().unwrap().to_string();
        assert!(
            error.contains("invalid type: string \"(value)\""),
            "{error}"
        );
        assert!(!error.contains("SECRET"), "{error}");
        assert_eq!(
            without_values(r#"a "b\"c" `d` "e"#),
            r#"a "(value)" `(value)` "(value)"#
        );
        let bad_ca = write_kubeconfig(
            dir.path(),
            ", certificate-authority-data: bm90IGEgY2VydA==",
            "",
        );
        let error = kubeconfig("--kubeconfig", &bad_ca)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
    }

    #[test]
    fn the_yaml_is_read_as_kube_reads_it() {
        let one = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\n\
                   users:\n- name: u\n  user: {token: t, exec: {apiVersion: client.authentication.k8s.io/v1, command: x, args: [a], env: [{name: N, value: V}], interactiveMode: Never}}\n\
                   contexts:\n- name: x\n  context: {cluster: c, user: u, namespace: n}\ncurrent-context: x\npreferences: {}\n\
                   extensions:\n- name: e\n  extension: {a: 1}\nunknown-field: [1, 2]\n";
        // Two documents: the first of two same-named entries wins, as in kube.
        let two = format!(
            "{one}---\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.2:2\"}}\n- name: d\n  cluster: {{server: \"https://127.0.0.3:3\"}}\n---\n"
        );
        for text in [one, two.as_str(), "", "---\n", "# a comment\n"] {
            let ours = from_yaml(text).unwrap();
            let kube = Kubeconfig::from_yaml(text).unwrap();
            assert_eq!(
                serde_json::to_value(&ours).unwrap(),
                serde_json::to_value(&kube).unwrap(),
                "{text}"
            );
        }
        assert_eq!(from_yaml(&two).unwrap().clusters.len(), 2);
        for bad in [
            "clusters: 3",
            "kind: Config\n---\nkind: Other\n",
            "a: [",
            "clusters:\n- name: c\n  cluster: {server: 1, insecure-skip-tls-verify: [x]}\n",
        ] {
            assert!(from_yaml(bad).is_err(), "{bad}");
            assert!(Kubeconfig::from_yaml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_is_utf8_or_utf16_with_a_byte_order_mark() {
        assert_eq!(decode(b"a: b").unwrap(), "a: b");
        let le: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("a: b".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(decode(&le).unwrap(), "a: b");
        let be: Vec<u8> = [0xFE, 0xFF]
            .into_iter()
            .chain("a: b".encode_utf16().flat_map(u16::to_be_bytes))
            .collect();
        assert_eq!(decode(&be).unwrap(), "a: b");
        assert_eq!(
            decode(b"a: \xff").unwrap_err(),
            "is not UTF-8 text (invalid byte at offset 3)"
        );
    }

    #[tokio::test]
    async fn a_blocked_read_is_left_behind_when_the_caller_gives_up() {
        // Opening a named pipe nobody writes blocks for good: the reader refuses it before
        // opening, but a path swapped in between, or a hung network file system, would
        // still block. The caller's cancellation must not wait for it.
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo(dir.path());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let blocked = off_thread("blocked", move || std::fs::read(&fifo));
        let cancel = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            cancel.cancel();
        });
        assert!(shutdown.run_until_cancelled(blocked).await.is_none());
    }

    #[tokio::test]
    async fn a_panic_resumes_in_the_caller() {
        let answer = tokio::spawn(off_thread("panics", || panic!("boom"))).await;
        assert!(answer.unwrap_err().is_panic());
    }
}
