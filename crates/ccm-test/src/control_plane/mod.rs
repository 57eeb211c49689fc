//! [`ControlPlane`]: etcd and kube-apiserver on loopback ports in a temp dir. Its start
//! (the builder, the servers' flags, the readiness checks) is in `launch.rs`.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::AuthInfo;
use kube::{Client, Config};
use secrecy::SecretString;

use self::launch::{Site, etcd_healthy, wait_ready};
use crate::cluster::netns::Forwarder;
use crate::pki::{self, Ca};
use crate::supervisor::{ServerState, Supervisor};
use crate::{Binaries, Error, named, unique_name, write_file};

mod launch;

pub use self::launch::ControlPlaneBuilder;

const ETCD: &str = "etcd";
const KUBE_APISERVER: &str = "kube-apiserver";

/// Lines of server log quoted in a start-up error.
const LOG_TAIL_LINES: usize = 40;
/// The user name of the admin client certificate.
pub const ADMIN_USER: &str = "ccm-test-admin";

static SHARED: tokio::sync::OnceCell<Result<ControlPlane, String>> =
    tokio::sync::OnceCell::const_new();

/// A running etcd + kube-apiserver pair for tests, listening on `127.0.0.1`.
///
/// Start one with [`ControlPlane::start`], or share one per test process with
/// [`ControlPlane::shared`]. Clients for the admin (`system:masters`), for any
/// user and groups ([`ControlPlane::client_for_user`]) and for any
/// ServiceAccount ([`ControlPlane::client_for_service_account`]) talk to the
/// real API server with real authentication and RBAC authorization.
///
/// Everything lives in one temporary folder (etcd data, certificates,
/// kubeconfig, server logs). Dropping the value stops both servers and removes
/// the folder; if the test process dies instead (panic with `panic = "abort"`,
/// `std::process::exit`, a signal) the servers' supervisor notices the closed
/// pipe and does the same, so no process or folder is left behind.
///
/// ```no_run
/// # async fn demo() -> Result<(), ccm_test::Error> {
/// let cp = ccm_test::ControlPlane::shared().await?;
/// let client = cp.client()?;
/// let version = client.apiserver_version().await?;
/// assert_eq!(version.git_version, ccm_test::KUBERNETES_VERSION);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    binaries: Binaries,
    server_url: String,
    etcd_url: String,
    /// PEM of the API server's serving certificate and its CA.
    serving_ca_pem: String,
    ca: Ca,
    admin: pki::Issued,
    kubeconfig_path: PathBuf,
    /// How long a server may take to become ready, at start and at a restart.
    start_timeout: Duration,
    startup: Duration,
    supervisor: Mutex<Supervisor>,
    /// Where etcd and kube-apiserver run.
    site: Site,
    /// kube-apiserver's audit log, when it writes one.
    audit_log: Option<PathBuf>,
    /// In a namespace, the loopback forwarder to kube-apiserver; it stops when dropped.
    _forwarder: Option<Forwarder>,
}

/// One of the two servers of a [`ControlPlane`], to stop and start again: see
/// [`ControlPlane::restart_server`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Server {
    /// etcd; its data stays in the control plane's folder.
    Etcd,
    /// kube-apiserver; it comes back on the same port with the same certificates.
    KubeApiserver,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Self::Etcd => ETCD,
            Self::KubeApiserver => KUBE_APISERVER,
        }
    }
}

impl ControlPlane {
    /// Starts a new control plane with default options.
    ///
    /// Prefer [`ControlPlane::shared`] in tests: one start-up (a few seconds)
    /// per test process instead of one per test.
    ///
    /// # Errors
    ///
    /// See [`ControlPlaneBuilder::start`].
    pub async fn start() -> Result<Self, Error> {
        Self::builder().start().await
    }

    /// Options for a new control plane.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// The control plane shared by every test in this process, started on
    /// first use.
    ///
    /// Tests that share it must not get in each other's way: use unique names
    /// ([`unique_name`], [`ControlPlane::create_namespace`]). It is stopped and
    /// its folder removed when the test process exits.
    ///
    /// Clients are tied to the Tokio runtime they are made in, so get a new
    /// one in each test ([`ControlPlane::client`]) rather than storing one.
    ///
    /// # Errors
    ///
    /// [`Error::Shared`] with the start-up error's message, for every caller,
    /// when the one start-up attempt failed.
    pub async fn shared() -> Result<&'static Self, Error> {
        SHARED
            .get_or_init(|| async { Self::start().await.map_err(|e| e.to_string()) })
            .await
            .as_ref()
            .map_err(|message| Error::Shared(message.clone()))
    }

    /// A client for the admin user (`ccm-test-admin` in `system:masters`).
    ///
    /// # Errors
    ///
    /// When the client cannot be built (a bug); must be called inside a Tokio
    /// runtime.
    pub fn client(&self) -> Result<Client, Error> {
        Ok(Client::try_from(self.admin_config()?)?)
    }

    /// A client authenticated by a new client certificate signed by the
    /// control plane's client CA, with `CN=user` and one `O=` per group: the
    /// API server sees user `user` in `groups` (plus `system:authenticated`).
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] for an empty user name; client build errors.
    pub fn client_for_user(&self, user: &str, groups: &[&str]) -> Result<Client, Error> {
        let cert = self.ca.issue_client(user, groups)?;
        Ok(Client::try_from(self.config_with(cert_auth(&cert))?)?)
    }

    /// A client for the ServiceAccount `namespace/name`, with a real token
    /// from the TokenRequest API. Creates the namespace and the ServiceAccount
    /// when they do not exist.
    ///
    /// # Errors
    ///
    /// API errors from creating the objects or the token.
    pub async fn client_for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Client, Error> {
        let token = self.service_account_token(namespace, name).await?;
        let auth = AuthInfo {
            token: Some(SecretString::from(token)),
            ..AuthInfo::default()
        };
        let mut config = self.config_with(auth)?;
        namespace.clone_into(&mut config.default_namespace);
        Ok(Client::try_from(config)?)
    }

    /// A token for the ServiceAccount `namespace/name` (valid for one hour),
    /// creating the namespace and the ServiceAccount when they do not exist.
    ///
    /// # Errors
    ///
    /// API errors from creating the objects or the token.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        let client = self.client()?;
        create_if_missing(
            &Api::<Namespace>::all(client.clone()),
            &named::<Namespace>(namespace),
        )
        .await?;
        let service_accounts = Api::<ServiceAccount>::namespaced(client, namespace);
        create_if_missing(&service_accounts, &named::<ServiceAccount>(name)).await?;
        let request = TokenRequest {
            spec: version_neutral(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let response = service_accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await?;
        response
            .status
            .and_then(|s| optional::<String>(s.token))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Error::Certificate(format!(
                    "the TokenRequest for {namespace}/{name} returned no token"
                ))
            })
    }

    /// Creates a namespace with a unique name starting with `prefix` and
    /// returns its name.
    ///
    /// (Without kube-controller-manager a deleted namespace stays
    /// `Terminating`; tests need not delete theirs.)
    ///
    /// # Errors
    ///
    /// API errors.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String, Error> {
        let name = unique_name(prefix);
        Api::<Namespace>::all(self.client()?)
            .create(&PostParams::default(), &named::<Namespace>(&name))
            .await?;
        Ok(name)
    }

    /// Writes a kubeconfig for `user` in `groups` (a new client certificate, as
    /// [`client_for_user`](Self::client_for_user) makes) into the control plane's folder
    /// and returns its path: for a process under test that must appear in the API server's
    /// audit log, or pass RBAC, as a user of its own.
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] for an empty user name; [`Error::InvalidArgument`] for a
    /// name that is not a plain file name; I/O errors.
    pub fn kubeconfig_for_user(&self, user: &str, groups: &[&str]) -> Result<PathBuf, Error> {
        if user.contains(['/', '\\']) || user.starts_with('.') {
            return Err(Error::InvalidArgument(format!(
                "user {user:?}: not usable as a file name"
            )));
        }
        let cert = self.ca.issue_client(user, groups)?;
        let path = self.dir.join(format!("{user}.kubeconfig"));
        write_file(&path, &self.kubeconfig_with(user, &cert))?;
        Ok(path)
    }

    /// Writes a kubeconfig for the ServiceAccount `namespace/name` (its token from the
    /// TokenRequest API, as [`service_account_token`](Self::service_account_token) gets it:
    /// valid for one hour, the namespace and the ServiceAccount created when missing) into
    /// the control plane's folder and returns its path: for a process under test that runs
    /// as its Pod would, under the RBAC of its ServiceAccount.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for names that are not plain file names; API and I/O
    /// errors.
    pub async fn kubeconfig_for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf, Error> {
        if [namespace, name]
            .iter()
            .any(|n| n.contains(['/', '\\']) || n.starts_with('.'))
        {
            return Err(Error::InvalidArgument(format!(
                "ServiceAccount {namespace}/{name}: not usable as a file name"
            )));
        }
        let token = self.service_account_token(namespace, name).await?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let path = self
            .dir
            .join(format!("serviceaccount-{namespace}-{name}.kubeconfig"));
        let credentials = format!("    token: {token}\n");
        write_file(
            &path,
            &self.kubeconfig_yaml(&self.server_url, &user, &credentials),
        )?;
        Ok(path)
    }

    /// The path of an admin kubeconfig, e.g. for `kubectl --kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// A [`kube::Config`] for the admin user.
    ///
    /// # Errors
    ///
    /// Only for a malformed server URL (a bug).
    pub fn admin_config(&self) -> Result<Config, Error> {
        self.config_with(cert_auth(&self.admin))
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// etcd's client URL, `http://127.0.0.1:<port>`.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// kube-apiserver's audit log (JSON lines), when the control plane was started with
    /// an [`audit_policy`](ControlPlaneBuilder::audit_policy): read it with
    /// [`read_audit_log`](crate::audit::read_audit_log). The API server creates it with
    /// its first entry.
    pub fn audit_log_path(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The folder holding etcd's data, the certificates, the kubeconfig and
    /// the server logs (`etcd.log`, `kube-apiserver.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The binaries this control plane runs; `kubectl` is there to use
    /// with [`ControlPlane::kubeconfig_path`].
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// A `kubectl` command (from [`Binaries`]) preset with the admin
    /// kubeconfig, or `None` when no kubectl was found.
    pub fn kubectl(&self) -> Option<std::process::Command> {
        let kubectl = self.binaries.kubectl.as_ref()?;
        let mut command = std::process::Command::new(kubectl);
        command.env("KUBECONFIG", &self.kubeconfig_path);
        Some(command)
    }

    /// Runs `kubectl args` as the admin (the [`kubectl`](Self::kubectl) command) and returns
    /// what it wrote to its standard output: `cp.run_kubectl(["apply", "-f", path])`.
    ///
    /// # Errors
    ///
    /// [`Error::Kubectl`] when no kubectl was found, or it failed (with its error output);
    /// I/O errors when it cannot be run.
    pub fn run_kubectl<I, S>(&self, args: I) -> Result<String, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut command = self
            .kubectl()
            .ok_or_else(|| Error::Kubectl("no kubectl was found (see Binaries)".to_owned()))?;
        command.args(args);
        let out = command
            .output()
            .map_err(|e| Error::io("running kubectl", e))?;
        if !out.status.success() {
            return Err(Error::Kubectl(format!(
                "{command:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Process ids of etcd and kube-apiserver (for diagnostics and for tests
    /// of the clean-up); new ones after [`ControlPlane::restart_server`].
    pub fn process_ids(&self) -> (Option<u32>, Option<u32>) {
        let supervisor = lock(&self.supervisor);
        (supervisor.pid(ETCD), supervisor.pid(KUBE_APISERVER))
    }

    /// Stops `server` (SIGTERM, SIGKILL after 5 s) and waits until it has exited. Clients
    /// keep their configuration; their requests fail until
    /// [`start_server`](Self::start_server).
    ///
    /// Only on a control plane of the test's own ([`ControlPlane::start`]): the shared one
    /// serves other tests.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on the shared control plane; [`Error::Start`] if the
    /// server has not exited after the supervisor's SIGKILL (30 s).
    pub async fn stop_server(&self, server: Server) -> Result<(), Error> {
        self.refuse_shared()?;
        self.stop_process(server.name(), server.name()).await
    }

    /// Starts `server` again after [`stop_server`](Self::stop_server), with the same
    /// flags: the same ports, certificates, keys and etcd data, so every client made before
    /// reconnects. Returns when it is ready (etcd's `/health`, kube-apiserver's `/readyz`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on the shared control plane or when `server` is running;
    /// [`Error::Start`] as for a first start.
    pub async fn start_server(&self, server: Server) -> Result<(), Error> {
        self.refuse_shared()?;
        let name = server.name();
        let deadline = Instant::now() + self.start_timeout;
        self.restart_process(name)?;
        let started = Instant::now();
        match server {
            Server::Etcd => {
                let port: u16 = self
                    .etcd_url
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| Error::InvalidArgument(format!("etcd URL {}", self.etcd_url)))?;
                let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                let site = &self.site;
                wait_ready(&self.supervisor, &self.dir, ETCD, deadline, move || {
                    etcd_healthy(site, address)
                })
                .await?;
            }
            Server::KubeApiserver => self.wait_apiserver_ready(deadline).await?,
        }
        tracing::info!(
            server = name,
            ready_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "started again"
        );
        Ok(())
    }

    /// [`stop_server`](Self::stop_server) then [`start_server`](Self::start_server): an
    /// outage as short as the server's shutdown and start-up.
    ///
    /// # Errors
    ///
    /// As those two.
    pub async fn restart_server(&self, server: Server) -> Result<(), Error> {
        self.stop_server(server).await?;
        self.start_server(server).await
    }

    fn refuse_shared(&self) -> Result<(), Error> {
        let shared = SHARED
            .get()
            .and_then(|r| r.as_ref().ok())
            .is_some_and(|shared| std::ptr::eq(shared, self));
        if shared {
            return Err(Error::InvalidArgument(
                "the shared control plane serves other tests: stop and start the servers of \
                 a control plane of the test's own (ControlPlane::start)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// Waits until kube-apiserver's `/readyz` answers `ok`.
    async fn wait_apiserver_ready(&self, deadline: Instant) -> Result<(), Error> {
        let mut config = self.admin_config()?;
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(5));
        let probe = &Client::try_from(config)?;
        wait_ready(
            &self.supervisor,
            &self.dir,
            KUBE_APISERVER,
            deadline,
            move || async move {
                let request = http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| e.to_string())?;
                match probe.request_text(request).await {
                    Ok(body) if body.trim() == "ok" => Ok(()),
                    Ok(body) => Err(format!("/readyz answered {body:?}")),
                    Err(e) => Err(format!("/readyz: {e}")),
                }
            },
        )
        .await
    }

    /// How long the start took, from the first process spawned to
    /// kube-apiserver's `/readyz` answering `ok`.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    fn config_with(&self, auth_info: AuthInfo) -> Result<Config, Error> {
        let url = self
            .server_url
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("server URL {}: {e}", self.server_url)))?;
        let mut config = Config::new(url);
        config.root_cert = Some(pki::pem_certificates(&self.serving_ca_pem));
        config.auth_info = auth_info;
        Ok(config)
    }

    fn kubeconfig_with(&self, user: &str, cert: &pki::Issued) -> String {
        self.kubeconfig_at(&self.server_url, user, cert)
    }

    /// A kubeconfig for `user` in `groups` (a new client certificate) that reaches the API
    /// server at `server`: for a cluster's own processes, inside its network.
    pub(crate) fn kubeconfig_for_server(
        &self,
        server: &str,
        user: &str,
        groups: &[&str],
    ) -> Result<String, Error> {
        let cert = self.ca.issue_client(user, groups)?;
        Ok(self.kubeconfig_at(server, user, &cert))
    }

    /// The CA that signs the control plane's client (and, in a cluster, serving)
    /// certificates.
    pub(crate) fn ca(&self) -> &Ca {
        &self.ca
    }

    /// Starts `program args` under the control plane's supervisor as `name` (its log is
    /// `name.log` in [`dir`](Self::dir)); it is stopped with the control plane, before the
    /// servers started earlier.
    pub(crate) fn start_process(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
    ) -> Result<(), Error> {
        lock(&self.supervisor).start(name, program, args)
    }

    /// Stops the process `name` (a server, or one started by
    /// [`start_process`](Self::start_process)): SIGTERM, SIGKILL after 5 s; waits until it
    /// has exited. A failure is reported as `component`'s.
    pub(crate) async fn stop_process(
        &self,
        component: &'static str,
        name: &str,
    ) -> Result<(), Error> {
        lock(&self.supervisor).stop_server(name)?;
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        loop {
            if let ServerState::Exited(_) = lock(&self.supervisor).state(name) {
                tracing::info!(
                    server = name,
                    stop_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "stopped"
                );
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Start {
                    component,
                    reason: format!("{name} did not exit within 30 s of being told to stop"),
                    tail: log_tail(&self.dir.join(format!("{name}.log"))),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the process `name` again, with the arguments it was first started with.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] while it runs: two of one server would fight over its
    /// ports and files.
    pub(crate) fn restart_process(&self, name: &str) -> Result<(), Error> {
        let mut supervisor = lock(&self.supervisor);
        if let ServerState::Running = supervisor.state(name) {
            return Err(Error::InvalidArgument(format!(
                "{name} is running: stop it first"
            )));
        }
        supervisor.forget_exit(name)?;
        supervisor.restart(name)
    }

    /// Whether the process `name` has exited, and how.
    pub(crate) fn process_exit(&self, name: &str) -> Option<String> {
        match lock(&self.supervisor).state(name) {
            ServerState::Running => None,
            ServerState::Exited(status) => Some(status),
        }
    }

    fn kubeconfig_at(&self, server: &str, user: &str, cert: &pki::Issued) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let credentials = format!(
            "    client-certificate-data: {cert}\n    client-key-data: {key}\n",
            cert = b64(&cert.cert_pem),
            key = b64(&cert.key_pem),
        );
        self.kubeconfig_yaml(server, user, &credentials)
    }

    /// A kubeconfig for `user` at `server`; `credentials` are the lines of its `user:`
    /// (indented by four spaces, each ending with a newline).
    fn kubeconfig_yaml(&self, server: &str, user: &str, credentials: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.serving_ca_pem);
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: ccm-test
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
{credentials}contexts:
- name: ccm-test
  context:
    cluster: ccm-test
    user: {user}
    namespace: default
current-context: ccm-test
",
        )
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let started = Instant::now();
        self.supervisor
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .stop();
        tracing::debug!(
            stop_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "control plane stopped"
        );
    }
}

fn cert_auth(cert: &pki::Issued) -> AuthInfo {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    AuthInfo {
        client_certificate_data: Some(b64(&cert.cert_pem)),
        client_key_data: Some(SecretString::from(b64(&cert.key_pem))),
        ..AuthInfo::default()
    }
}

/// A field's value, for a field k8s-openapi types `T` at some Kubernetes versions and
/// `Option<T>` at others (the binary picks the version): `TokenRequest.spec` is optional
/// from Kubernetes 1.36's types on, required before.
fn version_neutral<T, F: From<T>>(value: T) -> F {
    F::from(value)
}

/// A field typed `T` at some Kubernetes versions and `Option<T>` at others, read as an
/// `Option<T>`: `TokenRequestStatus.token` is optional from Kubernetes 1.36's types on.
fn optional<T>(field: impl Into<Option<T>>) -> Option<T> {
    field.into()
}

async fn create_if_missing<K>(api: &Api<K>, object: &K) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The supervisor, even if a panic poisoned its lock (its state is a child process).
fn lock(supervisor: &Mutex<Supervisor>) -> std::sync::MutexGuard<'_, Supervisor> {
    supervisor
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The last lines of a log file, for an error message.
pub(crate) fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
