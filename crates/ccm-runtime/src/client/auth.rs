//! A client's credentials, as a kubeconfig's `user` names them and client-go uses them: a
//! bearer token, a token file read again every minute, a username and password, or an exec
//! plugin (`client.authentication.k8s.io/v1` and `v1beta1`) whose token is kept until it
//! expires or the API server refuses it. [`AuthLayer`] puts them on each request. An
//! `auth-provider` is refused: client-go removed the `gcp` and `azure` providers in 1.26 and
//! `k8s.io/cloud-provider` registers none; an exec plugin takes their place.
//!
//! Ours rather than kube's `ClientBuilder`: kube's connector runs its own credential code to
//! build its TLS configuration, which links its `auth-provider` support (a JSONPath engine,
//! regular expressions, a second YAML parser) into every binary: 1.2 MB of code and data that
//! a controller manager maps whether it runs or not (docs/benchmarks.md, "Peak RSS of the
//! shipped binary").

use std::future::Future;
use std::io::Read;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use ccm_provider::BoxError;
use http::header::AUTHORIZATION;
use http::{HeaderValue, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::capture_connection;
use k8s_openapi::jiff::Timestamp;
use kube::config::{AuthInfo, ExecConfig, ExecInteractiveMode};
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use secrecy::ExposeSecret;
use serde::Deserialize;
use tower::{Layer, Service};

use super::ClientConfigError;

/// How long a token file's token is used before the file is read again (client-go's and
/// kube's minute).
const TOKEN_FILE_TTL: Duration = Duration::from_secs(60);

/// How long before its `expirationTimestamp` an exec plugin's token is renewed.
const EXEC_RENEW_MARGIN: Duration = Duration::from_secs(10);

/// How long an exec plugin may take to answer and exit, at start and at each renewal; one
/// that takes longer is ended and its run is an error (client-go waits without a bound; a
/// controller manager cannot: every request waits on the token).
pub(crate) const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of an exec plugin's answer that is read; a longer one is an error.
pub(crate) const MAX_EXEC_OUTPUT: u64 = 1024 * 1024;

/// The `ExecCredential` versions client-go speaks (`v1alpha1` was removed in 1.24).
const EXEC_API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];

/// What a client presents: a header on each request, and the client certificate for its
/// TLS connections.
#[derive(Default)]
pub(crate) struct Credentials {
    /// What goes into each request's `Authorization` header.
    pub(crate) header: Header,
    /// The client certificate an exec plugin answered with, renewed with its token (it
    /// takes the place of the kubeconfig's `client-certificate` and `client-key`).
    pub(crate) exec_identity: Option<Arc<ExecIdentity>>,
}

/// An exec plugin's client certificate, as rustls asks for it at each handshake: the one of
/// the plugin's latest run. A run replaces it when the certificate nears its
/// `expirationTimestamp` or the API server answers `401`, as client-go runs the plugin
/// again; connections made with an older one are then retired as they are next used
/// ([`AuthService`]), so new ones present the new certificate.
#[derive(Debug)]
pub(crate) struct ExecIdentity {
    current: parking_lot::RwLock<Arc<CertifiedKey>>,
    /// Counts the certificates, from 1.
    generation: AtomicU64,
    provider: Arc<CryptoProvider>,
}

/// The [`ExecIdentity`] generation a connection was made with, in its responses'
/// extensions (put there by the connector).
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdentityGeneration(pub(crate) u64);

impl ExecIdentity {
    /// The identity of a plugin's answer (PEM: the key and the chain).
    fn new(pem: &[u8], provider: Arc<CryptoProvider>) -> Result<Self, String> {
        Ok(Self {
            current: parking_lot::RwLock::new(Arc::new(certified_key(pem, &provider)?)),
            generation: AtomicU64::new(1),
            provider,
        })
    }

    /// Replaces the certificate by a new run's.
    fn renew(&self, pem: &[u8]) -> Result<(), String> {
        let key = certified_key(pem, &self.provider)?;
        *self.current.write() = Arc::new(key);
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The current certificate's generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The current certificate's leaf, DER.
    pub(crate) fn leaf(&self) -> Option<Vec<u8>> {
        self.current.read().cert.first().map(|c| c.to_vec())
    }
}

impl ResolvesClientCert for ExecIdentity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read()))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A chain and its key, from PEM; errors say what is wrong without repeating the text.
fn certified_key(pem: &[u8], provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("clientCertificateData: {e}"))?;
    if chain.is_empty() {
        return Err("clientCertificateData holds no certificate".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("clientKeyData: {e}"))?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("clientKeyData: {e}"))?;
    Ok(CertifiedKey::new(chain, signer))
}

/// Where each request's `Authorization` header comes from. Cloning shares the cache.
#[derive(Clone, Default)]
pub(crate) enum Header {
    /// No header (a client certificate, or anonymous).
    #[default]
    None,
    /// The same header on every request (a token, a username and password).
    Fixed(HeaderValue),
    /// A bearer token read from a file, again after a minute.
    TokenFile(Arc<TokenFile>),
    /// A bearer token, a client certificate or both from an exec plugin.
    Exec(Arc<ExecPlugin>),
}

/// The credentials `user` names, chosen as client-go chooses them: a username and password
/// or a token (both is an error); a `tokenFile` read again every minute, the `token` beside it
/// serving while the file cannot be read; an exec plugin (run now, once) only when the
/// kubeconfig names none of those and no client certificate, since client-go then never
/// runs it. The client certificate of `user` itself is the TLS layer's (see `transport`).
pub(crate) fn credentials(user: &AuthInfo) -> Result<Credentials, ClientConfigError> {
    let mut credentials = Credentials {
        header: Header::None,
        exec_identity: None,
    };
    if let Some(provider) = &user.auth_provider {
        return Err(ClientConfigError::new(
            "user.auth-provider",
            format!(
                "the {:?} provider is not supported (client-go removed the gcp and azure \
                 providers in Kubernetes 1.26, and k8s.io/cloud-provider registers none): \
                 use an exec plugin (user.exec) or a token",
                ccm_provider::echo::echo(&provider.name)
            ),
        ));
    }
    fn nonempty(v: Option<&str>) -> Option<&str> {
        v.filter(|v| !v.is_empty())
    }
    // client-go sends a username and password only when there is a username (a password
    // alone is not sent), but counts either as a second way in beside a token.
    let username = nonempty(user.username.as_deref());
    let password = nonempty(user.password.as_ref().map(ExposeSecret::expose_secret));
    let token = nonempty(user.token.as_ref().map(ExposeSecret::expose_secret));
    let token_file = nonempty(user.token_file.as_deref());
    if (username.is_some() || password.is_some()) && (token.is_some() || token_file.is_some()) {
        return Err(ClientConfigError::new(
            "user.username",
            "a username and password and a token (token or tokenFile) may not both be set"
                .to_owned(),
        ));
    }
    let has_certificate = nonempty(user.client_certificate.as_deref()).is_some()
        || nonempty(user.client_certificate_data.as_deref()).is_some();
    if let Some(username) = username {
        let password = password.unwrap_or_default();
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        credentials.header = Header::Fixed(sensitive(&format!("Basic {basic}"), "user.username")?);
    } else if let Some(path) = token_file {
        let fallback = token.map(|t| bearer(t, "user.token")).transpose()?;
        credentials.header =
            Header::TokenFile(Arc::new(TokenFile::new(PathBuf::from(path), fallback)?));
    } else if let Some(token) = token {
        credentials.header = Header::Fixed(bearer(token, "user.token")?);
    } else if let Some(exec) = &user.exec
        && !has_certificate
    {
        let plugin = ExecPlugin::new(exec.clone())?;
        let answer = plugin.run()?;
        let identity = answer
            .identity
            .as_deref()
            .map(|pem| {
                ExecIdentity::new(pem, Arc::new(rustls::crypto::ring::default_provider()))
                    .map(Arc::new)
                    .map_err(|e| ClientConfigError::new("user.exec", e))
            })
            .transpose()?;
        credentials.exec_identity.clone_from(&identity);
        let token = ExecToken {
            header: answer.token,
            expires: answer.expires,
            generation: 1,
            stale: false,
        };
        credentials.header = Header::Exec(Arc::new(plugin.holding(token, identity)));
    } else if let Some(exec) = &user.exec {
        // Checked all the same, as client-go checks it, but never run.
        ExecPlugin::new(exec.clone())?;
    }
    Ok(credentials)
}

/// `value` as a header value, marked sensitive (kept out of logs and debug output).
fn sensitive(value: &str, field: &'static str) -> Result<HeaderValue, ClientConfigError> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| ClientConfigError::new(field, "is not valid in an HTTP header".to_owned()))?;
    header.set_sensitive(true);
    Ok(header)
}

/// A bearer token's header.
fn bearer(token: &str, field: &'static str) -> Result<HeaderValue, ClientConfigError> {
    sensitive(&format!("Bearer {token}"), field)
}

/// A token file: its token, and when it was read.
pub(crate) struct TokenFile {
    path: PathBuf,
    cached: parking_lot::Mutex<(HeaderValue, Instant)>,
}

impl TokenFile {
    /// Reads `path` now. A file that cannot be read, or holds no token, stops the client's
    /// construction, unless the kubeconfig's `token` is there to serve until it can be
    /// (client-go then reads the file at the first request).
    fn new(path: PathBuf, fallback: Option<HeaderValue>) -> Result<Self, ClientConfigError> {
        let cached = match (Self::read(&path), fallback) {
            (Ok(header), _) => (header, Instant::now()),
            // Read again at the first request.
            (Err(_), Some(token)) => (
                token,
                Instant::now()
                    .checked_sub(TOKEN_FILE_TTL)
                    .unwrap_or_else(Instant::now),
            ),
            (Err(e), None) => {
                return Err(ClientConfigError::new(
                    "user.tokenFile",
                    format!("{}: {e}", path.display()),
                ));
            }
        };
        Ok(Self {
            path,
            cached: parking_lot::Mutex::new(cached),
        })
    }

    /// The token's header, surrounding white space trimmed as client-go does; a file of
    /// white space alone holds no token (client-go refuses it too, rather than send
    /// `Bearer ` with nothing after it).
    fn read(path: &std::path::Path) -> Result<HeaderValue, String> {
        let text = ccm_provider::file::read_text(path, ccm_provider::file::MAX_TOKEN_BYTES)
            .map_err(|e| e.to_string())?;
        let token = text.trim();
        if token.is_empty() {
            return Err("holds no token".to_owned());
        }
        bearer(token, "user.tokenFile").map_err(|e| e.to_string())
    }

    /// The header, from a read at most a minute old. A file that cannot be read again, or
    /// is empty, keeps the last token (client-go does so: some set-ups remove the file
    /// after start, and a writer may truncate it before it writes the next token).
    pub(crate) fn header(&self) -> HeaderValue {
        let mut cached = self.cached.lock();
        if cached.1.elapsed() >= TOKEN_FILE_TTL {
            match Self::read(&self.path) {
                Ok(header) => cached.0 = header,
                Err(e) => tracing::warn!(
                    path = %self.path.display(),
                    error = %e,
                    "cannot read a token from the token file again; keeping the last token"
                ),
            }
            cached.1 = Instant::now();
        }
        cached.0.clone()
    }

    #[cfg(test)]
    fn age_by(&self, by: Duration) {
        let mut cached = self.cached.lock();
        cached.1 = cached.1.checked_sub(by).unwrap_or(cached.1);
    }
}

/// An exec credential plugin and its last token.
pub(crate) struct ExecPlugin {
    config: ExecConfig,
    state: tokio::sync::Mutex<ExecToken>,
    /// The client certificate it answered with, if it did.
    identity: Option<Arc<ExecIdentity>>,
    /// How long a run may take ([`EXEC_TIMEOUT`]; shorter in tests).
    timeout: Duration,
}

/// What an exec plugin last gave.
#[derive(Default)]
struct ExecToken {
    /// Its token (`None`: it answers a client certificate alone).
    header: Option<HeaderValue>,
    expires: Option<Timestamp>,
    /// Counts the runs, so a refusal forgets only the answer that was refused.
    generation: u64,
    /// The API server refused it (or there is none yet): the next request runs the plugin.
    stale: bool,
}

/// What an exec plugin answered.
struct ExecAnswer {
    token: Option<HeaderValue>,
    /// Client certificate chain and key, PEM.
    identity: Option<Vec<u8>>,
    expires: Option<Timestamp>,
}

/// An `ExecCredential`, as much of it as is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredential {
    kind: Option<String>,
    api_version: Option<String>,
    status: Option<ExecCredentialStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredentialStatus {
    expiration_timestamp: Option<String>,
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

impl ExecPlugin {
    /// Checks what client-go checks before running a plugin: a command, a known
    /// `apiVersion`, and no need of a terminal.
    fn new(config: ExecConfig) -> Result<Self, ClientConfigError> {
        if config.command.as_deref().is_none_or(str::is_empty) {
            return Err(ClientConfigError::new(
                "user.exec.command",
                "is required".to_owned(),
            ));
        }
        match config.api_version.as_deref() {
            Some(v) if EXEC_API_VERSIONS.contains(&v) => {}
            other => {
                return Err(ClientConfigError::new(
                    "user.exec.apiVersion",
                    format!(
                        "{} is not one of {}",
                        other.map_or_else(
                            || "(missing)".to_owned(),
                            |v| format!("{:?}", ccm_provider::echo::echo(v))
                        ),
                        EXEC_API_VERSIONS.join(", ")
                    ),
                ));
            }
        }
        if config.interactive_mode.is_none() {
            // client-go's validation asks for it too (there is no default).
            return Err(ClientConfigError::new(
                "user.exec.interactiveMode",
                "is required (Never, IfAvailable or Always)".to_owned(),
            ));
        }
        if config.interactive_mode == Some(ExecInteractiveMode::Always) {
            return Err(ClientConfigError::new(
                "user.exec.interactiveMode",
                "Always needs a terminal, and a controller manager has none".to_owned(),
            ));
        }
        if config.provide_cluster_info && config.cluster.is_none() {
            return Err(ClientConfigError::new(
                "user.exec.provideClusterInfo",
                "is set but the context names no cluster".to_owned(),
            ));
        }
        Ok(Self {
            config,
            state: tokio::sync::Mutex::new(ExecToken {
                stale: true,
                ..ExecToken::default()
            }),
            identity: None,
            timeout: EXEC_TIMEOUT,
        })
    }

    /// This plugin, holding its first run's `token` and client certificate.
    fn holding(self, token: ExecToken, identity: Option<Arc<ExecIdentity>>) -> Self {
        Self {
            config: self.config,
            state: tokio::sync::Mutex::new(token),
            identity,
            timeout: self.timeout,
        }
    }

    /// The token's header (if it answers one) and its run's generation: the cached one, or
    /// a new run's when the API server refused the last or it expires within
    /// [`EXEC_RENEW_MARGIN`]. A run renews the client certificate too.
    async fn header(self: &Arc<Self>) -> Result<(Option<HeaderValue>, u64), ClientConfigError> {
        let mut state = self.state.lock().await;
        if !state.stale && state.expires.is_none_or(|at| !expires_soon(at)) {
            return Ok((state.header.clone(), state.generation));
        }
        // On a thread of its own rather than the runtime's blocking pool, whose shutdown
        // would wait for it: SIGTERM need not wait for a plugin (each run is bounded by
        // EXEC_TIMEOUT all the same).
        let plugin = Arc::clone(self);
        let (send, answer) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("exec-plugin".to_owned())
            .spawn(move || {
                let _ = send.send(plugin.run());
            })
            .map_err(|e| ClientConfigError::new("user.exec", format!("cannot run it: {e}")))?;
        let answer = answer.await.map_err(|_| {
            ClientConfigError::new("user.exec", "the plugin's run ended unanswered".to_owned())
        })??;
        if answer.token.is_none() && state.header.is_some() {
            return Err(ClientConfigError::new(
                "user.exec",
                "the plugin answered without a token, where it gave one before".to_owned(),
            ));
        }
        match (&self.identity, &answer.identity) {
            (Some(identity), Some(pem)) => identity
                .renew(pem)
                .map_err(|e| ClientConfigError::new("user.exec", e))?,
            (Some(_), None) => {
                return Err(ClientConfigError::new(
                    "user.exec",
                    "the plugin answered without a client certificate, where it gave one \
                     before"
                        .to_owned(),
                ));
            }
            // A certificate where there was none is not used: the TLS configuration was
            // made without one (client-go too decides at the first run).
            (None, _) => {}
        }
        state.generation += 1;
        state.header.clone_from(&answer.token);
        state.expires = answer.expires;
        state.stale = false;
        Ok((answer.token, state.generation))
    }

    /// The header the next request gets (running the plugin if its token expires).
    pub(crate) async fn current(
        self: &Arc<Self>,
    ) -> Result<Option<HeaderValue>, ClientConfigError> {
        Ok(self.header().await?.0)
    }

    /// Its client certificate, if it answers one.
    pub(crate) fn identity(&self) -> Option<&Arc<ExecIdentity>> {
        self.identity.as_ref()
    }

    /// The API server refused the token of run `generation`: the next request runs the
    /// plugin again (client-go does the same on a 401), unless a newer run replaced it.
    async fn refused(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state.generation == generation {
            state.stale = true;
        }
    }

    /// Runs the plugin as client-go does: the kubeconfig's arguments and environment,
    /// `KUBERNETES_EXEC_INFO` describing the request, no standard input, its standard error
    /// passed through, and an answer of at most [`MAX_EXEC_OUTPUT`] bytes.
    fn run(&self) -> Result<ExecAnswer, ClientConfigError> {
        let config = &self.config;
        let command = config.command.as_deref().unwrap_or_default();
        let named = ccm_provider::echo::echo(command);
        let fail = |message: String| {
            ClientConfigError::new("user.exec", format!("plugin {named:?}: {message}"))
        };
        let api_version = config.api_version.clone().unwrap_or_default();
        let mut info = serde_json::json!({
            "apiVersion": api_version,
            "kind": "ExecCredential",
            "spec": { "interactive": false },
        });
        if config.provide_cluster_info
            && let Some(cluster) = &config.cluster
        {
            info["spec"]["cluster"] = serde_json::to_value(cluster)
                .map_err(|e| fail(format!("cannot describe the cluster: {e}")))?;
        }
        let mut cmd = Command::new(command);
        cmd.args(config.args.iter().flatten());
        for var in config.env.iter().flatten() {
            if let (Some(name), Some(value)) = (var.get("name"), var.get("value")) {
                cmd.env(name, value);
            }
        }
        cmd.env("KUBERNETES_EXEC_INFO", info.to_string());
        for name in config.drop_env.iter().flatten() {
            cmd.env_remove(name);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| {
            let hint = config
                .install_hint
                .as_deref()
                .map(|h| format!(" ({})", ccm_provider::echo::echo(h)))
                .unwrap_or_default();
            fail(format!("cannot start it: {e}{hint}"))
        })?;
        let deadline = Instant::now() + self.timeout;
        // Read on a thread of its own, so that a plugin that neither answers nor ends is
        // ended at the deadline rather than waited for.
        let (send, read) = std::sync::mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::Builder::new()
                .name("exec-plugin-stdout".to_owned())
                .spawn(move || {
                    let mut out = Vec::new();
                    let result = stdout.take(MAX_EXEC_OUTPUT + 1).read_to_end(&mut out);
                    let _ = send.send((out, result));
                })
                .map_err(|e| fail(format!("cannot read its answer: {e}")))?;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((out, read)) = read.recv_timeout(left) else {
            end(&mut child);
            return Err(fail(format!(
                "it did not answer within {} s; ended it",
                self.timeout.as_secs_f32()
            )));
        };
        if out.len() as u64 > MAX_EXEC_OUTPUT {
            // It may be blocked writing the rest: end it rather than wait.
            end(&mut child);
            return Err(fail(format!(
                "its answer is longer than {MAX_EXEC_OUTPUT} bytes"
            )));
        }
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    end(&mut child);
                    return Err(fail(format!(
                        "it answered but did not exit within {} s; ended it",
                        self.timeout.as_secs_f32()
                    )));
                }
                Err(e) => return Err(fail(format!("cannot wait for it: {e}"))),
            }
        };
        read.map_err(|e| fail(format!("cannot read its answer: {e}")))?;
        if !status.success() {
            return Err(fail(format!("it exited with {status}")));
        }
        parse_answer(&out, &api_version).map_err(fail)
    }
}

/// Ends a plugin that overran, and reaps it.
fn end(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `at` is within [`EXEC_RENEW_MARGIN`] of now, or past.
fn expires_soon(at: Timestamp) -> bool {
    let margin = k8s_openapi::jiff::SignedDuration::try_from(EXEC_RENEW_MARGIN).unwrap_or_default();
    Timestamp::now()
        .saturating_add(margin)
        .is_ok_and(|soon| soon >= at)
}

/// An exec plugin's answer (JSON, or YAML as client-go also takes), checked as client-go
/// checks it: an `ExecCredential` of the version asked for, with a token or a client
/// certificate and key.
fn parse_answer(out: &[u8], api_version: &str) -> Result<ExecAnswer, String> {
    // The parser's message is not repeated: it quotes what it read, and a plugin that
    // prints a bare token would see its token in the log.
    let credential: ExecCredential = serde_yaml_ng::from_slice(out).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
            .unwrap_or_default();
        format!(
            "cannot parse its answer{at}: it is not an ExecCredential in JSON or YAML \
             (its text is not repeated here: it may hold a credential)"
        )
    })?;
    if credential.kind.as_deref() != Some("ExecCredential") {
        return Err(format!(
            "it answered kind {:?}, not ExecCredential",
            credential.kind.unwrap_or_default()
        ));
    }
    if credential.api_version.as_deref() != Some(api_version) {
        return Err(format!(
            "it answered apiVersion {:?}, not the {api_version} asked for",
            credential.api_version.unwrap_or_default()
        ));
    }
    let status = credential
        .status
        .ok_or_else(|| "its answer has no status".to_owned())?;
    let expires = status
        .expiration_timestamp
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<Timestamp>()
                .map_err(|e| format!("status.expirationTimestamp {t:?}: {e}"))
        })
        .transpose()?;
    let token = status
        .token
        .filter(|t| !t.is_empty())
        .map(|t| bearer(&t, "status.token").map_err(|e| e.to_string()))
        .transpose()?;
    let identity = match (status.client_certificate_data, status.client_key_data) {
        (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => {
            Some(format!("{key}\n{cert}\n").into_bytes())
        }
        (None, None) => None,
        (Some(c), Some(k)) if c.is_empty() && k.is_empty() => None,
        _ => {
            return Err(
                "status must hold both clientCertificateData and clientKeyData, or neither"
                    .to_owned(),
            );
        }
    };
    if token.is_none() && identity.is_none() {
        return Err("its answer holds neither a token nor a client certificate".to_owned());
    }
    Ok(ExecAnswer {
        token,
        identity,
        expires,
    })
}

/// Puts a client's [`Header`] on each request.
#[derive(Clone)]
pub(crate) struct AuthLayer(pub(crate) Header);

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            header: self.0.clone(),
        }
    }
}

/// The service [`AuthLayer`] makes.
#[derive(Clone)]
pub(crate) struct AuthService<S> {
    inner: S,
    header: Header,
}

impl<S, B, RB> Service<Request<B>> for AuthService<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let fixed = match &self.header {
            Header::None => None,
            Header::Fixed(header) => Some(header.clone()),
            Header::TokenFile(file) => Some(file.header()),
            Header::Exec(plugin) => {
                // The header needs an await: take the service that is ready, leave a clone.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let plugin = Arc::clone(plugin);
                return Box::pin(async move {
                    let (header, generation) = plugin.header().await?;
                    if let Some(header) = header {
                        req.headers_mut().insert(AUTHORIZATION, header);
                    }
                    let connection = capture_connection(&mut req);
                    let response = inner.call(req).await.map_err(Into::into)?;
                    if response.status() == StatusCode::UNAUTHORIZED {
                        plugin.refused(generation).await;
                    }
                    // A connection made with a client certificate that a run has replaced
                    // is not used again: the next one presents the new certificate.
                    if let Some(identity) = plugin.identity()
                        && response
                            .extensions()
                            .get::<IdentityGeneration>()
                            .is_some_and(|made| made.0 < identity.generation())
                        && let Some(connected) = connection.connection_metadata().as_ref()
                    {
                        connected.poison();
                    }
                    Ok(response)
                });
            }
        };
        if let Some(header) = fixed {
            req.headers_mut().insert(AUTHORIZATION, header);
        }
        let call = self.inner.call(req);
        Box::pin(async move { call.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const V1: &str = "client.authentication.k8s.io/v1";

    /// A plugin script in `dir`: counts its runs in `dir/runs`, writes its environment's
    /// `KUBERNETES_EXEC_INFO` and `GREETING` to `dir/info`, and answers `body` (a shell
    /// word, expanded).
    fn plugin(dir: &Path, body: &str) -> ExecConfig {
        let script = dir.join("plugin.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho x >> '{d}/runs'\nprintf '%s\\n%s' \"$KUBERNETES_EXEC_INFO\" \"$GREETING\" > '{d}/info'\n{body}\n",
                d = dir.display()
            ),
        )
        .unwrap();
        ExecConfig {
            api_version: Some(V1.to_owned()),
            command: Some("/bin/sh".to_owned()),
            args: Some(vec![script.display().to_string()]),
            interactive_mode: Some(ExecInteractiveMode::Never),
            env: Some(vec![
                [("name", "GREETING"), ("value", "hello")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ]),
            ..ExecConfig::default()
        }
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// An answer printing a token read from `dir/token` at each run, expiring at `expiry`.
    fn token_answer(dir: &Path, expiry: &str) -> String {
        format!(
            r#"printf '{{"apiVersion":"{V1}","kind":"ExecCredential","status":{{"token":"%s","expirationTimestamp":"{expiry}"}}}}' "$(cat '{}/token')""#,
            dir.display()
        )
    }

    fn user_with(exec: ExecConfig) -> AuthInfo {
        AuthInfo {
            exec: Some(exec),
            ..AuthInfo::default()
        }
    }

    fn header_of(credentials: &Credentials) -> Header {
        credentials.header.clone()
    }

    async fn current(header: &Header) -> String {
        match header {
            Header::Exec(plugin) => plugin.header().await.unwrap().0.unwrap(),
            Header::TokenFile(file) => file.header(),
            Header::Fixed(h) => h.clone(),
            Header::None => return String::new(),
        }
        .to_str()
        .unwrap()
        .to_owned()
    }

    #[tokio::test]
    async fn an_exec_token_is_kept_until_it_nearly_expires() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "one").unwrap();
        let far = (Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1)).to_string();
        let creds = credentials(&user_with(plugin(
            dir.path(),
            &token_answer(dir.path(), &far),
        )))
        .unwrap();
        assert_eq!(runs(dir.path()), 1, "run once while the client is built");
        let header = header_of(&creds);
        std::fs::write(dir.path().join("token"), "two").unwrap();
        assert_eq!(current(&header).await, "Bearer one");
        assert_eq!(current(&header).await, "Bearer one");
        assert_eq!(runs(dir.path()), 1, "kept while it is valid");

        // A token expiring within the margin is renewed at every use.
        let soon = (Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(5)).to_string();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "a").unwrap();
        let creds = credentials(&user_with(plugin(
            dir.path(),
            &token_answer(dir.path(), &soon),
        )))
        .unwrap();
        let header = header_of(&creds);
        std::fs::write(dir.path().join("token"), "b").unwrap();
        assert_eq!(current(&header).await, "Bearer b");
        assert_eq!(runs(dir.path()), 2);
    }

    #[tokio::test]
    async fn the_plugin_is_told_what_client_go_tells_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t").unwrap();
        let mut exec = plugin(dir.path(), &token_answer(dir.path(), ""));
        exec.provide_cluster_info = true;
        exec.cluster = Some(kube::config::ExecAuthCluster {
            server: Some("https://127.0.0.1:6443".to_owned()),
            ..Default::default()
        });
        credentials(&user_with(exec)).unwrap();
        let info = std::fs::read_to_string(dir.path().join("info")).unwrap();
        let (json, greeting) = info.split_once('\n').unwrap();
        assert_eq!(greeting, "hello", "the kubeconfig's env reaches the plugin");
        let json: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": V1,
                "kind": "ExecCredential",
                "spec": {"interactive": false, "cluster": {"server": "https://127.0.0.1:6443"}},
            })
        );
    }

    #[tokio::test]
    async fn a_refused_token_runs_the_plugin_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "stale").unwrap();
        let creds = credentials(&user_with(plugin(
            dir.path(),
            &token_answer(dir.path(), ""),
        )))
        .unwrap();
        // An API server that refuses "stale" and takes anything else.
        let server = tower::service_fn(|req: Request<()>| async move {
            let status = match req.headers().get(AUTHORIZATION).map(HeaderValue::to_str) {
                Some(Ok("Bearer stale")) => StatusCode::UNAUTHORIZED,
                Some(Ok(_)) => StatusCode::OK,
                _ => StatusCode::FORBIDDEN,
            };
            let mut response = Response::new(());
            *response.status_mut() = status;
            Ok::<_, std::convert::Infallible>(response)
        });
        let mut service = AuthLayer(header_of(&creds)).layer(server);
        let mut send = async || {
            use tower::ServiceExt;
            service
                .ready()
                .await
                .unwrap()
                .call(Request::new(()))
                .await
                .unwrap()
                .status()
        };
        assert_eq!(send().await, StatusCode::UNAUTHORIZED);
        assert_eq!(
            runs(dir.path()),
            1,
            "no token without an expiry is renewed unasked"
        );
        std::fs::write(dir.path().join("token"), "fresh").unwrap();
        assert_eq!(
            send().await,
            StatusCode::OK,
            "the 401 asked the plugin again"
        );
        assert_eq!(send().await, StatusCode::OK);
        assert_eq!(runs(dir.path()), 2);
    }

    #[test]
    fn a_plugin_that_fails_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = |body: &str| {
            credentials(&user_with(plugin(dir.path(), body)))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let failed = error("exit 3");
        assert!(
            failed.starts_with("user.exec: plugin \"/bin/sh\": it exited with"),
            "{failed}"
        );
        // Endless output is cut at the bound, and the plugin ended rather than waited for.
        let endless = error("yes");
        assert!(endless.contains("longer than 1048576 bytes"), "{endless}");
        let garbage = error("echo '{not'");
        assert!(garbage.contains("cannot parse its answer"), "{garbage}");

        let mut missing = plugin(dir.path(), "");
        missing.command = Some(dir.path().join("no-such-plugin").display().to_string());
        missing.install_hint = Some("install it with: get-plugin".to_owned());
        let missing = credentials(&user_with(missing)).err().unwrap().to_string();
        assert!(missing.contains("cannot start it"), "{missing}");
        assert!(missing.contains("install it with: get-plugin"), "{missing}");
    }

    #[test]
    fn the_kubeconfig_is_checked_before_any_plugin_runs() {
        let dir = tempfile::tempdir().unwrap();
        let field = |exec: ExecConfig| {
            credentials(&user_with(exec))
                .err()
                .unwrap()
                .field()
                .to_owned()
        };
        let base = plugin(dir.path(), "exit 0");
        let mut e = base.clone();
        e.api_version = None;
        assert_eq!(field(e), "user.exec.apiVersion");
        let mut e = base.clone();
        e.api_version = Some("client.authentication.k8s.io/v1alpha1".to_owned());
        assert_eq!(field(e), "user.exec.apiVersion");
        let mut e = base.clone();
        e.command = None;
        assert_eq!(field(e), "user.exec.command");
        let mut e = base.clone();
        e.interactive_mode = Some(ExecInteractiveMode::Always);
        assert_eq!(field(e), "user.exec.interactiveMode");
        let mut e = base.clone();
        e.provide_cluster_info = true;
        assert_eq!(field(e), "user.exec.provideClusterInfo");
        assert_eq!(runs(dir.path()), 0);

        let provider = AuthInfo {
            auth_provider: Some(kube::config::AuthProviderConfig {
                name: "gcp".to_owned(),
                ..Default::default()
            }),
            token: Some("t".to_owned().into()),
            ..AuthInfo::default()
        };
        let refused = credentials(&provider).err().unwrap();
        assert_eq!(refused.field(), "user.auth-provider");
        assert!(refused.to_string().contains("\"gcp\""), "{refused}");
    }

    #[test]
    fn answers_are_checked_as_client_go_checks_them() {
        let answer = |json: serde_json::Value| parse_answer(json.to_string().as_bytes(), V1);
        let with_status = |status: serde_json::Value| {
            answer(
                serde_json::json!({"apiVersion": V1, "kind": "ExecCredential", "status": status}),
            )
        };
        let ok = with_status(
            serde_json::json!({"token": "t", "expirationTimestamp": "2030-01-02T03:04:05Z"}),
        )
        .unwrap();
        assert_eq!(ok.token.unwrap().to_str().unwrap(), "Bearer t");
        assert_eq!(ok.expires.unwrap().to_string(), "2030-01-02T03:04:05Z");
        let cert =
            with_status(serde_json::json!({"clientCertificateData": "C", "clientKeyData": "K"}))
                .unwrap();
        assert_eq!(cert.identity.unwrap(), b"K\nC\n");
        assert!(cert.token.is_none());

        let err = |r: Result<ExecAnswer, String>| r.err().unwrap();
        assert!(
            err(with_status(
                serde_json::json!({"clientCertificateData": "C"})
            ))
            .contains("both")
        );
        assert!(err(with_status(serde_json::json!({}))).contains("neither"));
        assert!(
            err(with_status(
                serde_json::json!({"token": "t", "expirationTimestamp": "soon"})
            ))
            .contains("expirationTimestamp")
        );
        assert!(err(with_status(serde_json::json!({"token": "a\nb"}))).contains("status.token"));
        assert!(
            err(answer(
                serde_json::json!({"apiVersion": V1, "kind": "ExecCredential"})
            ))
            .contains("no status")
        );
        assert!(
            err(answer(
                serde_json::json!({"apiVersion": V1, "kind": "Pod", "status": {"token": "t"}})
            ))
            .contains("kind")
        );
        let beta = serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
            "status": {"token": "t"},
        });
        assert!(err(answer(beta)).contains("not the client.authentication.k8s.io/v1 asked for"));
        // YAML, as client-go's decoder also takes.
        let yaml = format!("apiVersion: {V1}\nkind: ExecCredential\nstatus:\n  token: y\n");
        assert_eq!(
            parse_answer(yaml.as_bytes(), V1)
                .unwrap()
                .token
                .unwrap()
                .to_str()
                .unwrap(),
            "Bearer y"
        );
    }

    #[test]
    fn a_token_file_is_read_again_after_a_minute_and_outlives_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let user = AuthInfo {
            token_file: Some(path.display().to_string()),
            ..AuthInfo::default()
        };
        let Header::TokenFile(file) = credentials(&user).unwrap().header else {
            panic!("a token file");
        };
        assert_eq!(
            file.header(),
            "Bearer first",
            "trimmed, as client-go trims it"
        );
        std::fs::write(&path, "second").unwrap();
        assert_eq!(file.header(), "Bearer first", "kept for a minute");
        file.age_by(TOKEN_FILE_TTL);
        assert_eq!(file.header(), "Bearer second");
        std::fs::remove_file(&path).unwrap();
        file.age_by(TOKEN_FILE_TTL);
        assert_eq!(
            file.header(),
            "Bearer second",
            "the last token outlives its file"
        );

        let missing = credentials(&user).err().unwrap();
        assert_eq!(missing.field(), "user.tokenFile");
    }

    #[test]
    fn credentials_are_chosen_as_client_go_chooses_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").unwrap();
        let file = file.display().to_string();
        let header = |user: &AuthInfo| match credentials(user).unwrap().header {
            Header::Fixed(h) => h.to_str().unwrap().to_owned(),
            Header::TokenFile(f) => f.header().to_str().unwrap().to_owned(),
            Header::Exec(_) => "exec".to_owned(),
            Header::None => String::new(),
        };
        let token = AuthInfo {
            token: Some("tok".to_owned().into()),
            ..AuthInfo::default()
        };
        assert_eq!(header(&token), "Bearer tok");
        // The file wins over the token beside it; the token serves while the file cannot
        // be read.
        let both = AuthInfo {
            token_file: Some(file.clone()),
            ..token.clone()
        };
        assert_eq!(header(&both), "Bearer from-file");
        let missing = AuthInfo {
            token_file: Some(dir.path().join("missing").display().to_string()),
            ..token.clone()
        };
        assert_eq!(header(&missing), "Bearer tok");
        // A username and password, or either, beside a token is refused.
        for (username, password) in [
            (Some("admin"), Some("pw")),
            (None, Some("pw")),
            (Some("admin"), None),
        ] {
            let user = AuthInfo {
                username: username.map(str::to_owned),
                password: password.map(|p| p.to_owned().into()),
                ..both.clone()
            };
            assert_eq!(credentials(&user).err().unwrap().field(), "user.username");
        }
        let basic = AuthInfo {
            username: Some("admin".to_owned()),
            password: Some("secret".to_owned().into()),
            ..AuthInfo::default()
        };
        assert_eq!(header(&basic), "Basic YWRtaW46c2VjcmV0");
        // A password alone is not sent; a username alone is, with an empty password.
        let password_only = AuthInfo {
            password: Some("secret".to_owned().into()),
            ..AuthInfo::default()
        };
        assert_eq!(header(&password_only), "");
        let username_only = AuthInfo {
            username: Some("admin".to_owned()),
            ..AuthInfo::default()
        };
        assert_eq!(header(&username_only), "Basic YWRtaW46");
        assert!(matches!(
            credentials(&AuthInfo::default()).unwrap().header,
            Header::None
        ));

        // An exec plugin runs only when nothing else is named.
        let exec = plugin(dir.path(), "exit 3");
        for user in [
            AuthInfo {
                exec: Some(exec.clone()),
                ..token.clone()
            },
            AuthInfo {
                exec: Some(exec.clone()),
                ..basic.clone()
            },
            AuthInfo {
                exec: Some(exec.clone()),
                client_certificate_data: Some("cert".to_owned()),
                ..AuthInfo::default()
            },
        ] {
            credentials(&user).unwrap();
        }
        assert_eq!(runs(dir.path()), 0, "the plugin never ran");
    }

    #[test]
    fn an_empty_token_file_is_no_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, " \n").unwrap();
        let user = AuthInfo {
            token_file: Some(path.display().to_string()),
            ..AuthInfo::default()
        };
        let refused = credentials(&user).err().unwrap();
        assert_eq!(refused.field(), "user.tokenFile");
        assert!(refused.to_string().contains("holds no token"), "{refused}");

        // Emptied later: the last token is kept, never `Bearer ` alone.
        std::fs::write(&path, "good").unwrap();
        let Header::TokenFile(file) = credentials(&user).unwrap().header else {
            panic!("a token file");
        };
        std::fs::write(&path, "").unwrap();
        file.age_by(TOKEN_FILE_TTL);
        assert_eq!(file.header(), "Bearer good");
    }

    #[test]
    fn a_plugin_never_has_its_answer_repeated_in_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for answer in [
            "echo SECRET-TOKEN-abc123xyz",
            "echo '{\"kind\": SECRET-TOKEN-abc123xyz'",
            "printf 'apiVersion: [SECRET-TOKEN-abc123xyz]\\n'",
            // A token no header can hold (a BEL character).
            "printf '%s' '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET-TOKEN-abc123xyz\\u0007\"}}'",
        ] {
            let error = match credentials(&user_with(plugin(dir.path(), answer))) {
                Ok(_) => panic!("{answer}: taken"),
                Err(e) => e.to_string(),
            };
            assert!(error.starts_with("user.exec: plugin"), "{error}");
            assert!(!error.contains("SECRET"), "{answer}: {error}");
        }
    }

    #[tokio::test]
    async fn a_plugin_that_hangs_is_ended_at_start_and_at_renewal() {
        let dir = tempfile::tempdir().unwrap();
        let hang = |body: &str| {
            let mut plugin = ExecPlugin::new(plugin(dir.path(), body)).unwrap();
            plugin.timeout = Duration::from_millis(300);
            plugin
        };
        let started = Instant::now();
        let error = hang("exec sleep 600").run().err().unwrap().to_string();
        assert!(error.contains("did not answer within 0.3 s"), "{error}");
        // An answer with the plugin still running (its output closed): ended too.
        let error = hang(&format!(
            "{}; exec 1>&-; exec sleep 600",
            token_answer(dir.path(), "")
        ))
        .run()
        .err()
        .unwrap()
        .to_string();
        assert!(error.contains("did not exit within 0.3 s"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));

        // At renewal, on a thread of its own: the request gets the error, in time.
        std::fs::write(dir.path().join("token"), "t").unwrap();
        let plugin = Arc::new(hang("exec sleep 600"));
        let started = Instant::now();
        let error = plugin.header().await.err().unwrap().to_string();
        assert!(error.contains("did not answer"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn an_exec_plugin_needs_an_interactive_mode() {
        let dir = tempfile::tempdir().unwrap();
        let mut exec = plugin(dir.path(), "exit 0");
        exec.interactive_mode = None;
        let refused = credentials(&user_with(exec)).err().unwrap();
        assert_eq!(refused.field(), "user.exec.interactiveMode");
        assert_eq!(runs(dir.path()), 0);
    }
}
