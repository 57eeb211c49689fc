//! Starting a [`ControlPlane`]: its builder, etcd's and kube-apiserver's flags on loopback
//! or in a cluster's network namespace, and the checks that they are ready.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ADMIN_USER, ControlPlane, ETCD, KUBE_APISERVER, lock, log_tail};
use crate::cluster::netns::{Forwarder, NetworkNamespace};
use crate::pki::{self, Ca};
use crate::supervisor::{ServerState, Supervisor};
use crate::{Binaries, Error, net, write_file};

/// Default time allowed for etcd and kube-apiserver to become ready.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How many times a start is retried when a server could not bind its port
/// (another process took a free port between our check and the bind).
const PORT_ATTEMPTS: usize = 3;

/// Options for starting a [`ControlPlane`]; see [`ControlPlane::builder`].
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    binaries: Option<Binaries>,
    start_timeout: Duration,
    extra_apiserver_args: Vec<String>,
    audit_policy: Option<String>,
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
            audit_policy: None,
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

    /// Has kube-apiserver write an audit log under `policy` (the YAML of an
    /// `audit.k8s.io/v1` `Policy`), as JSON lines in the control plane's folder:
    /// [`ControlPlane::audit_log_path`], read with
    /// [`read_audit_log`](crate::audit::read_audit_log).
    #[must_use]
    pub fn audit_policy(mut self, policy: impl Into<String>) -> Self {
        self.audit_policy = Some(policy.into());
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
        let audit_log = match &self.audit_policy {
            Some(policy) => {
                let policy_file = dir.join("audit-policy.yaml");
                write_file(&policy_file, policy)?;
                let log = dir.join("audit.log");
                apiserver_args.extend([
                    format!("--audit-policy-file={}", policy_file.display()),
                    format!("--audit-log-path={}", log.display()),
                ]);
                Some(log)
            }
            None => None,
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
            audit_log,
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
pub(super) enum Site {
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
    pub(super) fn command(&self, program: &Path, args: Vec<String>) -> (PathBuf, Vec<String>) {
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
pub(super) async fn wait_ready<T, F, Fut>(
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

/// etcd's `GET /health` over plain HTTP/1.0, at `address` as seen from `site`.
pub(super) async fn etcd_healthy(site: &Site, address: SocketAddr) -> Result<(), String> {
    let check = async {
        let stream = site.connect(address).await?;
        net::exchange(stream, "127.0.0.1", "/health").await
    };
    match tokio::time::timeout(Duration::from_secs(2), check).await {
        Ok(Ok(response)) => match net::parse_response(&response) {
            (200, body) if body.contains(r#""health":"true""#) => Ok(()),
            (200, _) => Err(format!("/health answered {response:?}")),
            _ => Err(format!(
                "/health answered {:?}",
                response.lines().next().unwrap_or_default()
            )),
        },
        Ok(Err(e)) => Err(format!("/health: {e}")),
        Err(_) => Err("/health: no answer in 2 s".to_owned()),
    }
}
