//! The endpoint server on `--bind-address`:`--secure-port` (Go's `app/serve.go`):
//! `/healthz` and `/livez` answer `ok` while every liveness check of [`Health`] passes (Go's
//! `leaderElection` check: see the app's `LeaderHealthz`), `/readyz`
//! answers `ok` only while every readiness check passes (and lists them, Go's apiserver
//! format, when one fails), and `/metrics` serves [`Metrics::encode`]. Like Go it serves
//! HTTPS, with a self-signed certificate made at startup (kept in `--cert-dir` when given)
//! unless `--tls-cert-file` and `--tls-private-key-file` name one, the TLS flags of
//! [`TlsSettings`] applied, and every request authenticated and authorised by a
//! [`DelegatedAuth`] when one is configured; [`Serving::Http`] serves plain HTTP without
//! authentication, for local demos only. The server stops when its [`CancellationToken`]
//! fires.
//!
//! ```no_run
//! use ccm_runtime::serving::{EndpointServer, Health, ServeOptions};
//! use ccm_runtime::metrics::Metrics;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let health = Health::new();
//! let synced = health.register("informers-synced"); // failing until set_ok
//! let shutdown = CancellationToken::new();
//! let server = EndpointServer::start(&ServeOptions::default(), Metrics::new(), health, shutdown.clone())
//!     .await?; // None when --secure-port is 0
//! // ... later, once the informers have synced:
//! synced.set_ok();
//! # Ok(()) }
//! ```

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::ServeError;
use super::auth::DelegatedAuth;
use super::debug::DebugEndpoints;
use super::tls::{self, ClientCas, TlsSettings};
use crate::metrics::{self, Metrics};

/// Go's default `--secure-port` of the cloud-controller-manager.
pub const DEFAULT_SECURE_PORT: u16 = 10258;

/// How long a client has to finish the TLS handshake, and to send a request's headers.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of a request's head (request line and headers) read: 16 KiB. The
/// endpoints take no body; hyper answers a larger head with 431.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long in-flight requests may take to finish once the server is told to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How the endpoints are served.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Serving {
    /// HTTPS with this certificate chain and private key, PEM files
    /// (`--tls-cert-file`, `--tls-private-key-file`). The files are read once, at startup.
    Https {
        /// The certificate, followed by any intermediates.
        cert_file: PathBuf,
        /// The private key (PKCS#8, PKCS#1 or SEC1).
        key_file: PathBuf,
    },
    /// HTTPS with a self-signed certificate for `localhost`, `127.0.0.1`, `::1` and the bind
    /// address, made at startup or reused from [`ServeOptions::cert_dir`]; what Go does
    /// without certificate flags.
    #[default]
    HttpsSelfSigned,
    /// Plain HTTP with no authentication (`--insecure-serving`): for local demos only.
    Http,
}

/// Where and how to serve: `--bind-address`, `--secure-port`, the TLS choice and settings,
/// and who may ask.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The address to listen on (`--bind-address`, default `0.0.0.0`).
    pub bind_address: IpAddr,
    /// The port (`--secure-port`, default [`DEFAULT_SECURE_PORT`]); 0 disables serving.
    pub secure_port: u16,
    /// HTTPS (with which certificate) or HTTP.
    pub serving: Serving,
    /// Versions, suites, curves, SNI certificates (`--tls-*`).
    pub tls: TlsSettings,
    /// Where the self-signed certificate is kept (`--cert-dir`); `None`: in memory.
    pub cert_dir: Option<PathBuf>,
    /// The authorities client certificates are requested for (HTTPS only).
    pub client_cas: ClientCas,
    /// Authentication and authorization of every request; `None` serves everyone.
    pub auth: Option<Arc<DelegatedAuth>>,
    /// `SO_REUSEPORT` (`--permit-port-sharing`).
    pub permit_port_sharing: bool,
    /// `SO_REUSEADDR` (`--permit-address-sharing`).
    pub permit_address_sharing: bool,
    /// `/debug/flags/v` and `/configz`; off unless set.
    pub debug: DebugEndpoints,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            DEFAULT_SECURE_PORT,
            Serving::default(),
        )
    }
}

impl ServeOptions {
    /// Options with these values.
    #[must_use]
    pub fn new(bind_address: IpAddr, secure_port: u16, serving: Serving) -> Self {
        Self {
            bind_address,
            secure_port,
            serving,
            tls: TlsSettings::default(),
            cert_dir: None,
            client_cas: ClientCas::default(),
            auth: None,
            permit_port_sharing: false,
            permit_address_sharing: false,
            debug: DebugEndpoints::default(),
        }
    }

    /// Serves the live-debugging endpoints `debug` offers.
    #[must_use]
    pub fn with_debug(mut self, debug: DebugEndpoints) -> Self {
        self.debug = debug;
        self
    }

    /// Sets the TLS settings.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsSettings) -> Self {
        self.tls = tls;
        self
    }

    /// Keeps the self-signed certificate in `dir` (`--cert-dir`).
    #[must_use]
    pub fn with_cert_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cert_dir = dir;
        self
    }

    /// Authenticates and authorises every request with `auth`, requesting client
    /// certificates signed by `client_cas`.
    #[must_use]
    pub fn with_auth(mut self, auth: Arc<DelegatedAuth>, client_cas: ClientCas) -> Self {
        self.auth = Some(auth);
        self.client_cas = client_cas;
        self
    }

    /// Sets `SO_REUSEPORT` and `SO_REUSEADDR` on the listening socket.
    #[must_use]
    pub fn with_socket_sharing(mut self, port: bool, address: bool) -> Self {
        self.permit_port_sharing = port;
        self.permit_address_sharing = address;
        self
    }

    /// The address to listen on, or `None` when `secure_port` is 0 (serving disabled).
    #[must_use]
    pub fn address(&self) -> Option<SocketAddr> {
        (self.secure_port != 0).then(|| SocketAddr::new(self.bind_address, self.secure_port))
    }
}

/// The state of one check: `Ok(())`, or why it fails.
pub type CheckResult = Result<(), String>;

type CheckFn = Arc<dyn Fn() -> CheckResult + Send + Sync>;

#[derive(Clone)]
enum Check {
    State(HealthCheck),
    Fn(CheckFn),
}

impl Check {
    fn run(&self) -> CheckResult {
        match self {
            Self::State(check) => check.result(),
            Self::Fn(f) => f(),
        }
    }
}

/// The readiness checks behind `/readyz`: named checks such as `leader-election`,
/// `informers-synced` or one per controller, each passing or failing with a reason.
///
/// Cloning is cheap and shares the checks. A check is either a state that its owner sets
/// ([`register`](Self::register), [`set_ok`](Self::set_ok),
/// [`set_failed`](Self::set_failed)) or a function run at each probe
/// ([`register_fn`](Self::register_fn)). `/readyz` lists them in registration order.
///
/// A check says whether this replica works, not whether it leads: a standby that waits for
/// the Lease is ready, or rolling updates of a two-replica Deployment would stall.
///
/// Liveness checks ([`register_liveness_fn`](Self::register_liveness_fn)) are a separate
/// list, behind `/healthz` and `/livez`: a failing one gets the process restarted by its
/// liveness probe (Go's `leaderElection` check of a leader that stopped renewing).
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<RwLock<Vec<(String, Check)>>>,
    liveness: Arc<RwLock<Vec<(String, CheckFn)>>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.report()).finish()
    }
}

impl Health {
    /// No checks: ready.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a check named `name`, failing with reason `"not reported yet"` until its
    /// owner sets it, and returns the handle to set it with. If a state check of that name
    /// exists, returns it unchanged; a function check of that name is replaced.
    pub fn register(&self, name: impl Into<String>) -> HealthCheck {
        let name = name.into();
        let mut checks = self.write();
        if let Some((_, check)) = checks.iter_mut().find(|(n, _)| *n == name) {
            if let Check::State(existing) = check {
                return existing.clone();
            }
            let fresh = HealthCheck::new();
            *check = Check::State(fresh.clone());
            return fresh;
        }
        let check = HealthCheck::new();
        checks.push((name, Check::State(check.clone())));
        check
    }

    /// Registers a check that runs `f` at every probe, e.g. one that compares the time of
    /// the last Lease renewal with a deadline. Replaces any check of that name.
    pub fn register_fn(
        &self,
        name: impl Into<String>,
        f: impl Fn() -> CheckResult + Send + Sync + 'static,
    ) {
        let name = name.into();
        let check = Check::Fn(Arc::new(f));
        let mut checks = self.write();
        match checks.iter_mut().find(|(n, _)| *n == name) {
            Some((_, existing)) => *existing = check,
            None => checks.push((name, check)),
        }
    }

    /// Marks the check `name` passing, registering it if needed.
    pub fn set_ok(&self, name: &str) {
        self.register(name).set_ok();
    }

    /// Marks the check `name` failing with `reason`, registering it if needed.
    pub fn set_failed(&self, name: &str, reason: impl Into<String>) {
        self.register(name).set_failed(reason);
    }

    /// Registers a liveness check, run at every `/healthz` and `/livez` probe; replaces any
    /// liveness check of that name.
    pub fn register_liveness_fn(
        &self,
        name: impl Into<String>,
        f: impl Fn() -> CheckResult + Send + Sync + 'static,
    ) {
        let name = name.into();
        let check: CheckFn = Arc::new(f);
        let mut checks = self.liveness.write();
        match checks.iter_mut().find(|(n, _)| *n == name) {
            Some((_, existing)) => *existing = check,
            None => checks.push((name, check)),
        }
    }

    /// Removes the liveness check `name`; `true` if there was one.
    pub fn remove_liveness(&self, name: &str) -> bool {
        let mut checks = self.liveness.write();
        let before = checks.len();
        checks.retain(|(n, _)| n != name);
        checks.len() != before
    }

    /// Every liveness check and its current result, in registration order.
    #[must_use]
    pub fn liveness_report(&self) -> Vec<(String, CheckResult)> {
        let checks = self.liveness.read().clone();
        checks.into_iter().map(|(name, f)| (name, f())).collect()
    }

    /// Removes the check `name`; `true` if there was one.
    pub fn remove(&self, name: &str) -> bool {
        let mut checks = self.write();
        let before = checks.len();
        checks.retain(|(n, _)| n != name);
        checks.len() != before
    }

    /// Every check and its current result, in registration order.
    #[must_use]
    pub fn report(&self) -> Vec<(String, CheckResult)> {
        self.snapshot()
            .into_iter()
            .map(|(name, check)| (name, check.run()))
            .collect()
    }

    /// Whether every check passes.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.snapshot().iter().all(|(_, check)| check.run().is_ok())
    }

    /// The checks, copied out so that function checks run without the lock held.
    fn snapshot(&self) -> Vec<(String, Check)> {
        self.checks.read().clone()
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, Vec<(String, Check)>> {
        self.checks.write()
    }
}

/// The handle of one state check of a [`Health`]; cloning shares it.
#[derive(Clone, Debug)]
pub struct HealthCheck {
    state: Arc<Mutex<CheckResult>>,
}

impl HealthCheck {
    fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(Err("not reported yet".to_owned()))),
        }
    }

    /// Marks the check passing.
    pub fn set_ok(&self) {
        self.set(Ok(()));
    }

    /// Marks the check failing, with the reason `/readyz` shows.
    pub fn set_failed(&self, reason: impl Into<String>) {
        self.set(Err(reason.into()));
    }

    /// Sets the check's result.
    pub fn set(&self, result: CheckResult) {
        *self.state.lock() = result;
    }

    /// The check's current result.
    pub fn result(&self) -> CheckResult {
        self.state.lock().clone()
    }
}

/// A running endpoint server; see the [module docs](self).
///
/// Dropping it does not stop the server: cancel the token given to
/// [`start`](Self::start), then [`stopped`](Self::stopped) waits until it has.
#[derive(Debug)]
pub struct EndpointServer {
    local_addr: SocketAddr,
    certificate: Option<CertificateDer<'static>>,
    task: tokio::task::JoinHandle<()>,
}

impl EndpointServer {
    /// Starts serving as `options` say, or returns `None` when `secure_port` is 0. Binding
    /// and loading the certificate happen before this returns, so their errors surface at
    /// startup.
    pub async fn start(
        options: &ServeOptions,
        metrics: Metrics,
        health: Health,
        shutdown: CancellationToken,
    ) -> Result<Option<Self>, ServeError> {
        match options.address() {
            None => {
                tracing::info!("--secure-port is 0: not serving health and metrics endpoints");
                Ok(None)
            }
            Some(addr) => Self::bind_with(addr, options, metrics, health, shutdown)
                .await
                .map(Some),
        }
    }

    /// Starts serving on exactly `addr`, where port 0 means an ephemeral port (for tests;
    /// [`local_addr`](Self::local_addr) tells which), with default TLS settings and no
    /// authentication.
    pub async fn bind(
        addr: SocketAddr,
        serving: &Serving,
        metrics: Metrics,
        health: Health,
        shutdown: CancellationToken,
    ) -> Result<Self, ServeError> {
        let options = ServeOptions::new(addr.ip(), addr.port(), serving.clone());
        Self::bind_with(addr, &options, metrics, health, shutdown).await
    }

    /// Starts serving on exactly `addr` (port 0: an ephemeral port) as `options` say,
    /// ignoring their address and port.
    pub async fn bind_with(
        addr: SocketAddr,
        options: &ServeOptions,
        metrics: Metrics,
        health: Health,
        shutdown: CancellationToken,
    ) -> Result<Self, ServeError> {
        // Off the runtime: reading files may block (see `files`).
        let (serving, settings, cert_dir) = (
            options.serving.clone(),
            options.tls.clone(),
            options.cert_dir.clone(),
        );
        let tls = crate::files::off_thread("tls-files", move || {
            load_tls(&serving, &settings, addr.ip(), cert_dir.as_deref())
        })
        .await
        .map_err(|source| ServeError::Bind { addr, source })??;
        let certificate = tls
            .as_ref()
            .and_then(|((chain, _), _)| chain.first().cloned());
        let acceptor = tls
            .map(|(identity, sni)| {
                tls::server_config(&options.tls, identity, sni, &options.client_cas)
                    .map(|config| TlsAcceptor::from(Arc::new(config)))
            })
            .transpose()?;
        let listener = listen(
            addr,
            options.permit_port_sharing,
            options.permit_address_sharing,
        )
        .map_err(|source| ServeError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        // Over plain HTTP nobody is authenticated: serve everyone, as the flag says.
        let auth = if acceptor.is_some() {
            options.auth.clone()
        } else {
            None
        };
        tracing::info!(
            address = %local_addr,
            scheme = if acceptor.is_some() { "https" } else { "http" },
            authenticated = auth.is_some(),
            "serving /healthz, /livez, /readyz and /metrics"
        );
        let endpoints = Arc::new(Endpoints {
            metrics,
            health,
            auth,
            debug: options.debug.clone(),
        });
        let task = tokio::spawn(accept_loop(listener, acceptor, endpoints, shutdown));
        Ok(Self {
            local_addr,
            certificate,
            task,
        })
    }

    /// The address the server listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether it serves HTTPS.
    #[must_use]
    pub fn is_https(&self) -> bool {
        self.certificate.is_some()
    }

    /// The served certificate (the first of the chain), DER-encoded; `None` over HTTP.
    /// With [`Serving::HttpsSelfSigned`], a client that trusts it can verify the server.
    #[must_use]
    pub fn certificate_der(&self) -> Option<&[u8]> {
        self.certificate.as_deref()
    }

    /// Waits until the server has stopped: its token fired and in-flight requests finished
    /// (or the grace period of a few seconds ran out).
    pub async fn stopped(self) {
        if let Err(err) = self.task.await {
            tracing::error!(%err, "the endpoint server task failed");
        }
    }
}

/// A listening socket on `addr`, with `SO_REUSEPORT` / `SO_REUSEADDR` when asked.
fn listen(addr: SocketAddr, reuse_port: bool, reuse_address: bool) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if reuse_address {
        socket.set_reuseaddr(true)?;
    }
    #[cfg(unix)]
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    #[cfg(not(unix))]
    let _ = reuse_port;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The serving identity and the SNI identities `serving` asks for (none over HTTP).
/// Blocking: it reads files.
pub(crate) fn load_tls(
    serving: &Serving,
    settings: &TlsSettings,
    bind: IpAddr,
    cert_dir: Option<&std::path::Path>,
) -> Result<Option<(tls::Identity, Vec<tls::SniIdentity>)>, ServeError> {
    let identity = match serving {
        Serving::Http => return Ok(None),
        Serving::Https {
            cert_file,
            key_file,
        } => (
            tls::load_certs("--tls-cert-file", cert_file)?,
            tls::load_key("--tls-private-key-file", key_file)?,
        ),
        Serving::HttpsSelfSigned => tls::self_signed(bind, cert_dir)?,
    };
    Ok(Some((identity, tls::load_sni(settings)?)))
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    endpoints: Arc<Endpoints>,
    shutdown: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(connection(
                        stream,
                        tls.clone(),
                        Arc::clone(&endpoints),
                        shutdown.clone(),
                    ));
                }
                Err(err) => {
                    // E.g. out of file descriptors: wait a little rather than spin.
                    tracing::warn!(%err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("endpoint connections still open after the grace period; closing them");
    }
    tracing::debug!("endpoint server stopped");
}

/// The client certificate chain of a connection (empty without one).
type PeerCerts = Arc<[CertificateDer<'static>]>;

async fn connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    endpoints: Arc<Endpoints>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => serve_http(stream, Arc::from([]), endpoints, shutdown).await,
        Some(acceptor) => {
            let handshake = tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream));
            let stream = tokio::select! {
                () = shutdown.cancelled() => return,
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(err)) => {
                        tracing::debug!(%err, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("TLS handshake timed out");
                        return;
                    }
                },
            };
            let peer: PeerCerts = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|certs| certs.iter().map(|c| c.clone().into_owned()).collect())
                .unwrap_or_else(|| Arc::from([]));
            serve_http(stream, peer, endpoints, shutdown).await;
        }
    }
}

async fn serve_http<S>(
    stream: S,
    peer: PeerCerts,
    endpoints: Arc<Endpoints>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let endpoints = Arc::clone(&endpoints);
        let peer = Arc::clone(&peer);
        async move { Ok::<_, Infallible>(endpoints.respond(req, &peer).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(err) = result {
        tracing::debug!(%err, "endpoint connection ended with an error");
    }
}

/// What the handlers serve.
struct Endpoints {
    metrics: Metrics,
    health: Health,
    auth: Option<Arc<DelegatedAuth>>,
    debug: DebugEndpoints,
}

impl Endpoints {
    /// Authenticates and authorises the request (Go's filter chain runs before its mux),
    /// then answers it.
    async fn respond<B>(
        &self,
        req: Request<B>,
        peer: &[CertificateDer<'static>],
    ) -> Response<Full<Bytes>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if let Some(auth) = &self.auth
            && let Some(refused) = auth
                .check(req.headers(), peer, req.method(), req.uri().path())
                .await
        {
            return refused;
        }
        if DebugEndpoints::owns(req.uri().path()) {
            return self.debug.respond(req).await;
        }
        self.handle(&req)
    }

    fn handle<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut response = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "405 method not allowed\n".to_owned(),
            );
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        let path = req.uri().path();
        match path {
            "/healthz/ping" | "/livez/ping" => text(StatusCode::OK, "ok".to_owned()),
            "/healthz" | "/livez" => liveness(&self.health, &path[1..], &query(req.uri().query())),
            "/readyz" => readyz(&self.health, &query(req.uri().query())),
            "/metrics" => {
                let mut response = Response::new(Full::new(Bytes::from(self.metrics.encode())));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static(metrics::CONTENT_TYPE),
                );
                response
            }
            _ => {
                if let Some(name) = path.strip_prefix("/readyz/") {
                    readyz_check(&self.health, name)
                } else if let Some(name) = path
                    .strip_prefix("/healthz/")
                    .or_else(|| path.strip_prefix("/livez/"))
                {
                    liveness_check(&self.health, name)
                } else {
                    text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned())
                }
            }
        }
    }
}

/// `/healthz` and `/livez` as Go's healthz handler answers them: `ok` when every liveness
/// check passes (the list with `?verbose`), else 500 with the list, each failure's reason
/// withheld (it is logged: these paths answer anyone).
fn liveness(
    health: &Health,
    name: &str,
    params: &HashMap<&str, Vec<&str>>,
) -> Response<Full<Bytes>> {
    let excluded = params.get("exclude").cloned().unwrap_or_default();
    let verbose = params.contains_key("verbose");
    let mut body = String::from("[+]ping ok\n");
    let failed = list_checks(
        health.liveness_report(),
        &excluded,
        Reasons::Withheld,
        &mut body,
    );
    if !failed.is_empty() {
        tracing::warn!(?failed, "{name} check failed");
        let _ = writeln!(body, "{name} check failed");
        return text(StatusCode::INTERNAL_SERVER_ERROR, body);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".to_owned());
    }
    let _ = writeln!(body, "{name} check passed");
    text(StatusCode::OK, body)
}

/// Whether a check list shows why a check failed.
#[derive(Clone, Copy)]
enum Reasons {
    Shown,
    /// For the paths that answer anyone.
    Withheld,
}

/// Writes a line a check to `body` (`[+]name ok`, `[+]name excluded: ok`, `[-]name failed:
/// reason`) and returns the failed checks with their reasons.
fn list_checks(
    report: Vec<(String, CheckResult)>,
    excluded: &[&str],
    reasons: Reasons,
    body: &mut String,
) -> Vec<(String, String)> {
    let mut failed = Vec::new();
    for (name, result) in report {
        // Writing to a String cannot fail.
        let _ = match result {
            _ if excluded.contains(&name.as_str()) => writeln!(body, "[+]{name} excluded: ok"),
            Ok(()) => writeln!(body, "[+]{name} ok"),
            Err(reason) => {
                let line = match reasons {
                    Reasons::Shown => writeln!(body, "[-]{name} failed: {reason}"),
                    Reasons::Withheld => writeln!(body, "[-]{name} failed: reason withheld"),
                };
                failed.push((name, reason));
                line
            }
        };
    }
    failed
}

/// `/healthz/<name>` and `/livez/<name>`: one liveness check.
fn liveness_check(health: &Health, name: &str) -> Response<Full<Bytes>> {
    match health
        .liveness_report()
        .into_iter()
        .find(|(n, _)| n == name)
    {
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
        Some((_, Ok(()))) => text(StatusCode::OK, "ok".to_owned()),
        Some((_, Err(reason))) => {
            tracing::warn!(check = name, %reason, "liveness check failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: reason withheld\n".to_owned(),
            )
        }
    }
}

/// The query parameters: each name with all its values.
fn query(query: Option<&str>) -> HashMap<&str, Vec<&str>> {
    let mut params: HashMap<&str, Vec<&str>> = HashMap::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        params.entry(name).or_default().push(value);
    }
    params
}

/// `/readyz` as Go's apiserver answers it: `ok` when every check passes (the list with
/// `?verbose`), else 500 and the list with each failure's reason. `?exclude=name` skips a
/// check.
fn readyz(health: &Health, params: &HashMap<&str, Vec<&str>>) -> Response<Full<Bytes>> {
    let excluded = params.get("exclude").cloned().unwrap_or_default();
    let verbose = params.contains_key("verbose");
    let mut body = String::new();
    let failed = list_checks(health.report(), &excluded, Reasons::Shown, &mut body);
    if !failed.is_empty() {
        tracing::debug!(?failed, "readyz check failed");
        body.push_str("readyz check failed\n");
        return text(StatusCode::INTERNAL_SERVER_ERROR, body);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".to_owned());
    }
    body.push_str("readyz check passed\n");
    text(StatusCode::OK, body)
}

/// `/readyz/<name>`: one check.
fn readyz_check(health: &Health, name: &str) -> Response<Full<Bytes>> {
    match health.report().into_iter().find(|(n, _)| n == name) {
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
        Some((_, Ok(()))) => text(StatusCode::OK, "ok".to_owned()),
        Some((_, Err(reason))) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    super::response(status, "text/plain; charset=utf-8", body)
}

#[cfg(test)]
mod tests;
