//! [`ControlPlane`]: etcd and kube-apiserver on loopback ports in a temp dir.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::AuthInfo;
use kube::{Client, Config};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cluster::netns::{Forwarder, NetworkNamespace};
use crate::pki::{self, Ca};
use crate::supervisor::{ServerState, Supervisor};
use crate::{Binaries, Error, unique_name, write_file};

const ETCD: &str = "etcd";
const KUBE_APISERVER: &str = "kube-apiserver";

/// Default time allowed for etcd and kube-apiserver to become ready.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How many times a start is retried when a server could not bind its port
/// (another process took a free port between our check and the bind).
const PORT_ATTEMPTS: usize = 3;
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

/// Options for starting a [`ControlPlane`]; see [`ControlPlane::builder`].
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    binaries: Option<Binaries>,
    start_timeout: Duration,
    extra_apiserver_args: Vec<String>,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        let start_timeout = std::env::var("CCM_CONTROL_PLANE_START_TIMEOUT")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(DEFAULT_START_TIMEOUT, Duration::from_secs);
        Self {
            binaries: None,
            start_timeout,
            extra_apiserver_args: Vec::new(),
        }
    }
}

impl ControlPlaneBuilder {
    /// Uses these binaries instead of looking them up with [`Binaries::find_or_build`].
    #[must_use]
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    /// How long etcd and kube-apiserver may take to become ready (default
    /// 120 s, or `CCM_CONTROL_PLANE_START_TIMEOUT` seconds).
    #[must_use]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Adds a kube-apiserver flag, e.g. `--feature-gates=...`. A flag given
    /// here and by default is passed twice; kube-apiserver takes the last.
    #[must_use]
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_apiserver_args.push(arg.into());
        self
    }

    /// Starts the control plane and waits until kube-apiserver is ready.
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`] when a binary is missing (the message says
    /// how to build it); [`Error::Start`] with the tail of the server's log
    /// when a server exits or is not ready in time; I/O and certificate
    /// errors.
    pub async fn start(self) -> Result<ControlPlane, Error> {
        let binaries = match self.binaries.clone() {
            Some(binaries) => binaries,
            // Finding is quick; building (when Go is there and nothing was found) blocks
            // for minutes, off the runtime's workers.
            None => tokio::task::spawn_blocking(Binaries::find_or_build)
                .await
                .map_err(|e| Error::Build(format!("the build task failed: {e}")))??,
        };
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            match self.start_once(&binaries, started).await {
                Err(Error::Start { reason, .. })
                    if attempt < PORT_ATTEMPTS && reason.contains(PORT_IN_USE) =>
                {
                    tracing::info!(
                        attempt,
                        "a control-plane port was taken; retrying with new ports"
                    );
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn start_once(
        &self,
        binaries: &Binaries,
        started: Instant,
    ) -> Result<ControlPlane, Error> {
        let temp = tempfile::Builder::new()
            .prefix("ccm-test-")
            .tempdir()
            .map_err(|e| Error::io("creating the control-plane folder", e))?;
        let dir = temp.path().to_owned();
        let [etcd_port, peer_port, apiserver_port] = free_ports()?;
        // From here on the supervisor owns the folder and removes it.
        let supervisor = Supervisor::spawn(&dir)?;
        let _ = temp.keep();
        self.launch(
            binaries,
            started,
            dir,
            supervisor,
            Site::Loopback {
                etcd_port,
                peer_port,
                apiserver_port,
            },
        )
        .await
    }

    /// Starts etcd and kube-apiserver inside the network namespace `namespace` (a
    /// [`Cluster`](crate::cluster::Cluster)'s), under `supervisor`, which owns `dir`.
    /// kube-apiserver listens on `address:6443` there and is reached from this process
    /// through a loopback forwarder; its serving certificate is signed by the control
    /// plane's CA for the names and addresses a cluster uses.
    pub(crate) async fn start_in_namespace(
        self,
        binaries: &Binaries,
        dir: PathBuf,
        supervisor: Supervisor,
        namespace: Arc<NetworkNamespace>,
        address: Ipv4Addr,
    ) -> Result<ControlPlane, Error> {
        let started = Instant::now();
        self.launch(
            binaries,
            started,
            dir,
            supervisor,
            Site::Namespace { namespace, address },
        )
        .await
    }

    async fn launch(
        &self,
        binaries: &Binaries,
        started: Instant,
        dir: PathBuf,
        supervisor: Supervisor,
        site: Site,
    ) -> Result<ControlPlane, Error> {
        let deadline = started + self.start_timeout;
        let supervisor = Mutex::new(supervisor);

        // Certificates and keys.
        let ca = Ca::generate()?;
        let admin = ca.issue_client(ADMIN_USER, &["system:masters"])?;
        let sa_key = pki::service_account_key()?;
        write_file(&dir.join("client-ca.crt"), &ca.cert_pem())?;
        write_file(&dir.join("sa.key"), &sa_key.private_key_pem())?;
        write_file(&dir.join("sa.pub"), &sa_key.public_key_pem())?;
        let cert_dir = dir.join("apiserver-certs");
        let etcd_dir = dir.join("etcd");

        let (etcd_port, peer_port, apiserver_port) = match &site {
            Site::Loopback {
                etcd_port,
                peer_port,
                apiserver_port,
            } => (*etcd_port, *peer_port, *apiserver_port),
            // A namespace of the run's own: the well-known ports are free.
            Site::Namespace { .. } => (2379, 2380, 6443),
        };
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");

        let etcd_args = vec![
            "--name=default".to_owned(),
            format!("--data-dir={}", etcd_dir.display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".to_owned(),
        ];
        let (program, args) = site.command(&binaries.etcd, etcd_args);
        lock(&supervisor).start(ETCD, &program, &args)?;
        let etcd_address = SocketAddr::from((Ipv4Addr::LOCALHOST, etcd_port));
        let probe_site = &site;
        wait_ready(&supervisor, &dir, ETCD, deadline, move || {
            etcd_healthy(probe_site, etcd_address)
        })
        .await?;
        let etcd_ready = started.elapsed();

        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--cert-dir={}", cert_dir.display()),
            format!("--secure-port={apiserver_port}"),
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            "--allow-privileged=true".to_owned(),
            format!(
                "--service-account-key-file={}",
                dir.join("sa.pub").display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                dir.join("sa.key").display()
            ),
            format!("--client-ca-file={}", dir.join("client-ca.crt").display()),
        ];
        let mut forwarder = None;
        let (server_url, serving_ca_pem) = match &site {
            Site::Loopback { .. } => {
                let server_url = format!("https://127.0.0.1:{apiserver_port}");
                apiserver_args.extend([
                    "--bind-address=127.0.0.1".to_owned(),
                    "--advertise-address=127.0.0.1".to_owned(),
                    "--authorization-mode=RBAC".to_owned(),
                    "--disable-admission-plugins=ServiceAccount".to_owned(),
                    format!("--service-account-issuer={server_url}/"),
                ]);
                (server_url, None)
            }
            Site::Namespace { namespace, address } => {
                // Kubelets are users of the Node authorizer; Pods get ServiceAccount
                // tokens (the ServiceAccount admission plugin stays on); the API server
                // reaches kubelets (logs, exec) with a client certificate of its own.
                let serving = ca.issue_server(
                    &[
                        "kubernetes",
                        "kubernetes.default",
                        "kubernetes.default.svc",
                        "kubernetes.default.svc.cluster.local",
                        "localhost",
                    ],
                    &[
                        Ipv4Addr::LOCALHOST.into(),
                        (*address).into(),
                        KUBERNETES_SERVICE_IP.into(),
                    ],
                )?;
                let kubelet_client = ca.issue_client(
                    "ccm-test:kube-apiserver-kubelet-client",
                    &["system:masters"],
                )?;
                let (serving_cert, serving_key) = serving.write_pair(&dir, "apiserver")?;
                let (client_cert, client_key) =
                    kubelet_client.write_pair(&dir, "apiserver-kubelet-client")?;
                apiserver_args.extend([
                    "--bind-address=0.0.0.0".to_owned(),
                    format!("--advertise-address={address}"),
                    "--authorization-mode=Node,RBAC".to_owned(),
                    "--enable-admission-plugins=NodeRestriction".to_owned(),
                    // Never the Node's name: that would be a DNS look-up of a made-up name.
                    "--kubelet-preferred-address-types=InternalIP,ExternalIP".to_owned(),
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local"
                        .to_owned(),
                    format!("--tls-cert-file={}", serving_cert.display()),
                    format!("--tls-private-key-file={}", serving_key.display()),
                    format!("--kubelet-client-certificate={}", client_cert.display()),
                    format!("--kubelet-client-key={}", client_key.display()),
                    format!(
                        "--kubelet-certificate-authority={}",
                        dir.join("client-ca.crt").display()
                    ),
                ]);
                let to_apiserver = Forwarder::start(
                    namespace.clone(),
                    SocketAddr::from((*address, apiserver_port)),
                )
                .map_err(|e| Error::io("forwarding a loopback port to kube-apiserver", e))?;
                let server_url = format!("https://{}", to_apiserver.local_addr());
                forwarder = Some(to_apiserver);
                (server_url, Some(ca.cert_pem()))
            }
        };
        apiserver_args.extend(self.extra_apiserver_args.iter().cloned());
        let (program, args) = site.command(&binaries.kube_apiserver, apiserver_args);
        lock(&supervisor).start(KUBE_APISERVER, &program, &args)?;

        let serving_ca_pem = match serving_ca_pem {
            Some(pem) => pem,
            None => {
                // The API server writes its self-signed serving certificate (followed
                // by the CA that signed it) into --cert-dir before it listens.
                let serving_cert = cert_dir.join("apiserver.crt");
                let serving_cert = &serving_cert;
                wait_ready(
                    &supervisor,
                    &dir,
                    KUBE_APISERVER,
                    deadline,
                    move || async move {
                        match std::fs::read_to_string(serving_cert) {
                            Ok(pem) if !pki::pem_certificates(&pem).is_empty() => Ok(pem),
                            Ok(_) => Err("the serving certificate is not complete yet".to_owned()),
                            Err(e) => Err(format!("{}: {e}", serving_cert.display())),
                        }
                    },
                )
                .await?
            }
        };

        let mut cp = ControlPlane {
            kubeconfig_path: dir.join("kubeconfig"),
            dir,
            binaries: binaries.clone(),
            server_url,
            etcd_url,
            serving_ca_pem,
            ca,
            admin,
            start_timeout: self.start_timeout,
            startup: Duration::ZERO,
            supervisor,
            site,
            _forwarder: forwarder,
        };
        cp.wait_apiserver_ready(deadline).await?;
        write_file(
            &cp.kubeconfig_path,
            &cp.kubeconfig_with(ADMIN_USER, &cp.admin),
        )?;
        cp.startup = started.elapsed();
        tracing::info!(
            startup_ms = u64::try_from(cp.startup.as_millis()).unwrap_or(u64::MAX),
            etcd_ready_ms = u64::try_from(etcd_ready.as_millis()).unwrap_or(u64::MAX),
            server = %cp.server_url,
            dir = %cp.dir.display(),
            "control plane ready"
        );
        Ok(cp)
    }
}

/// The ClusterIP of the `kubernetes` Service: the first address of
/// `--service-cluster-ip-range`.
pub(crate) const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// Where a control plane's servers run.
#[derive(Debug)]
enum Site {
    /// On this host's loopback, on free ports.
    Loopback {
        etcd_port: u16,
        peer_port: u16,
        apiserver_port: u16,
    },
    /// Inside a cluster's network namespace; kube-apiserver listens on `address`.
    Namespace {
        namespace: Arc<NetworkNamespace>,
        address: Ipv4Addr,
    },
}

impl Site {
    /// The program and arguments that run `program args` at this site.
    fn command(&self, program: &Path, args: Vec<String>) -> (PathBuf, Vec<String>) {
        match self {
            Self::Loopback { .. } => (program.to_owned(), args),
            Self::Namespace { namespace, .. } => namespace.command(false, program, args),
        }
    }

    /// A TCP connection to `address` as seen from this site.
    async fn connect(&self, address: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        match self {
            Self::Loopback { .. } => tokio::net::TcpStream::connect(address).await,
            Self::Namespace { namespace, .. } => namespace.connect(address).await,
        }
    }
}

/// Text of a server log line when a listen address is taken.
const PORT_IN_USE: &str = "address already in use";

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
            &Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(namespace.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
        let service_accounts = Api::<ServiceAccount>::namespaced(client, namespace);
        create_if_missing(
            &service_accounts,
            &ServiceAccount {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
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
            .and_then(|s| s.token)
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
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
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
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: ccm-test
  context:
    cluster: ccm-test
    user: {user}
    namespace: default
current-context: ccm-test
",
            ca = b64(&self.serving_ca_pem),
            cert = b64(&cert.cert_pem),
            key = b64(&cert.key_pem),
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

/// Three distinct free loopback ports (all bound at once, then released).
fn free_ports() -> Result<[u16; 3], Error> {
    let bind = || {
        TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .map_err(|e| Error::io("finding a free port on 127.0.0.1", e))
    };
    let listeners = [bind()?, bind()?, bind()?];
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(|e| Error::io("finding a free port on 127.0.0.1", e))?
            .port();
    }
    Ok(ports)
}

/// Polls `probe` every 50 ms until it succeeds, the server exits, or the
/// deadline passes; the two failures quote the server's log.
async fn wait_ready<T, F, Fut>(
    supervisor: &Mutex<Supervisor>,
    dir: &Path,
    name: &'static str,
    deadline: Instant,
    mut probe: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    loop {
        let last = match probe().await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let state = lock(supervisor).state(name);
        let failure = match state {
            ServerState::Exited(status) => {
                Some(format!("it exited ({status}); last check: {last}"))
            }
            ServerState::Running if Instant::now() >= deadline => Some(format!(
                "not ready in time (CCM_CONTROL_PLANE_START_TIMEOUT); last check: {last}"
            )),
            ServerState::Running => None,
        };
        if let Some(mut reason) = failure {
            let log = dir.join(format!("{name}.log"));
            let tail = log_tail(&log);
            if tail.contains(PORT_IN_USE) {
                reason.push_str(&format!(" ({PORT_IN_USE})"));
            }
            return Err(Error::Start {
                component: name,
                reason,
                tail,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
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

/// etcd's `GET /health` over plain HTTP/1.0, at `address` as seen from `site`.
async fn etcd_healthy(site: &Site, address: SocketAddr) -> Result<(), String> {
    let check = async {
        let mut stream = site.connect(address).await?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    match tokio::time::timeout(Duration::from_secs(2), check).await {
        Ok(Ok(response))
            if response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200") =>
        {
            if response.contains(r#""health":"true""#) {
                Ok(())
            } else {
                Err(format!("/health answered {response:?}"))
            }
        }
        Ok(Ok(response)) => Err(format!(
            "/health answered {:?}",
            response.lines().next().unwrap_or_default()
        )),
        Ok(Err(e)) => Err(format!("/health: {e}")),
        Err(_) => Err("/health: no answer in 2 s".to_owned()),
    }
}
