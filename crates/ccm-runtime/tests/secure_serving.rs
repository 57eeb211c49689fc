//! Secure serving as Go's cloud-controller-manager serves it, against the real API server:
//! the manager (in-process, real flags) serves HTTPS with its self-signed certificate in
//! `--cert-dir`, authenticates with TokenReview, client certificates and request headers,
//! and authorises with SubjectAccessReview; `/healthz` stays open. Also the leader-election
//! liveness check on a real Lease, and a hung API server that must not wedge the server.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ccm_runtime::app::leader::{LeaderElectionConfig, LeaderElector, LeaderHealthz};
use ccm_runtime::metrics::Metrics;
use ccm_runtime::serving::auth::{DelegatedAuth, PathMatcher};
use ccm_runtime::serving::tls::ClientCas;
use ccm_runtime::serving::{EndpointServer, Health, ServeOptions, Serving};
use ccm_test::net::{free_port, http_get};
use ccm_test::{ControlPlane, eventually, rbac, unique_name};
use http::{Request, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::rbac::v1::Subject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::FakeCcm;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// A client certificate chain and key.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// One HTTPS request to 127.0.0.1:`port` trusting only `server_cert`: (status, body).
async fn get(
    port: u16,
    server_cert: &CertificateDer<'static>,
    identity: Option<&Identity>,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server_cert.clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::get(path).header(header::HOST, "localhost");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The client certificate and key of a kubeconfig written by `kubeconfig_for_user`.
fn identity_of(kubeconfig: &Path) -> Identity {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let config: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    let user = &config["users"][0]["user"];
    let b64 = |key: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(user[key].as_str().unwrap())
            .unwrap()
    };
    pem_identity(&b64("client-certificate-data"), &b64("client-key-data"))
}

fn pem_identity(cert: &[u8], key: &[u8]) -> Identity {
    use rustls::pki_types::pem::PemObject as _;
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (chain, PrivateKeyDer::from_pem_slice(key).unwrap())
}

/// A CA of our own (the front proxy's), and a client certificate it signs for `cn`.
struct ProxyCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl ProxyCa {
    fn new() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "front-proxy-ca");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    fn client(&self, cn: &str) -> Identity {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        pem_identity(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
    }
}

/// Grants `get` on the non-resource URL `/metrics` to a ServiceAccount or a group.
async fn grant_metrics(admin: &kube::Client, subject: Subject) {
    let rules = vec![rbac::non_resource_rule(&["/metrics"], &["get"])];
    rbac::grant_cluster_role(admin, &unique_name("metrics-reader"), rules, subject)
        .await
        .unwrap();
}

/// [`get`] without a client certificate, with `Authorization: Bearer <token>`.
async fn get_with_token(
    port: u16,
    server_cert: &CertificateDer<'static>,
    token: &str,
    path: &str,
) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    get(port, server_cert, None, path, &[("authorization", &bearer)]).await
}

/// Waits until `request` is answered 200; returns the body.
async fn wait_ok<F, Fut>(what: &str, request: F) -> String
where
    F: Fn() -> Fut,
    Fut: Future<Output = (u16, String)>,
{
    eventually(what, WAIT, || async {
        match request().await {
            (200, body) => Ok(body),
            (status, body) => Err(format!("{status}: {body}")),
        }
    })
    .await
}

/// The file in `--cert-dir` of the manager's self-signed certificate.
const SELF_SIGNED_CERT: &str = "cloud-controller-manager.crt";

/// Waits until the manager has written its self-signed certificate to `cert_dir` and
/// listens on `port`; returns the certificate.
async fn wait_serving(ccm: &FakeCcm, cert_dir: &Path, port: u16) -> CertificateDer<'static> {
    let cert_file = cert_dir.join(SELF_SIGNED_CERT);
    let server_cert = eventually("the certificate in --cert-dir", WAIT, || async {
        if ccm.is_finished() {
            return Err("the manager stopped".to_owned());
        }
        std::fs::read(&cert_file)
            .map_err(|e| e.to_string())
            .and_then(|pem| pem_identity_cert(&pem))
    })
    .await;
    eventually("the endpoint server", WAIT, || async {
        TcpStream::connect(("127.0.0.1", port)).await
    })
    .await;
    server_cert
}

/// Grants `/metrics` to a new group and waits until a client certificate of a user in it,
/// signed by the cluster's client CA, reads `/metrics`; returns the group.
async fn cert_reads_metrics(
    cp: &ControlPlane,
    port: u16,
    server_cert: &CertificateDer<'static>,
) -> String {
    let readers = unique_name("metrics-readers");
    grant_metrics(&cp.client().unwrap(), rbac::group(&readers)).await;
    let reader = identity_of(
        &cp.kubeconfig_for_user(&unique_name("cert-reader"), &[&readers])
            .unwrap(),
    );
    wait_ok("a client certificate of the group reading /metrics", || {
        get(port, server_cert, Some(&reader), "/metrics", &[])
    })
    .await;
    readers
}

/// Asserts that a token of the ServiceAccount `nobody` in `ns`, which has no RBAC, is
/// forbidden `/metrics` (authenticated, not authorised); returns the body.
async fn assert_nobody_forbidden(
    cp: &ControlPlane,
    ns: &str,
    port: u16,
    server_cert: &CertificateDer<'static>,
) -> String {
    let token = cp.service_account_token(ns, "nobody").await.unwrap();
    let (status, body) = get_with_token(port, server_cert, &token, "/metrics").await;
    assert_eq!(status, 403, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_authenticated_and_authorised_as_go() {
    let cp = ControlPlane::shared().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_dir = dir.path().join("certs");
    let proxy_ca = ProxyCa::new();
    let proxy_ca_file = dir.path().join("front-proxy-ca.crt");
    std::fs::write(&proxy_ca_file, &proxy_ca.pem).unwrap();
    let port = free_port();
    let ccm = FakeCcm::start(
        "nodesAreInstances: true\n",
        cp.kubeconfig_path(),
        &[
            "--leader-elect=false",
            "--controllers=cloud-node",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
            &format!("--cert-dir={}", cert_dir.display()),
            &format!(
                "--client-ca-file={}",
                cp.dir().join("client-ca.crt").display()
            ),
            &format!("--requestheader-client-ca-file={}", proxy_ca_file.display()),
            "--requestheader-allowed-names=front-proxy",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            // Denials are cached for a second only: the RBAC below takes effect quickly.
            "--authorization-webhook-cache-unauthorized-ttl=1s",
            "--tls-min-version=VersionTLS12",
            "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_GCM_SHA256",
        ],
    );

    // The self-signed certificate is written to --cert-dir; trust it.
    let server_cert = wait_serving(&ccm, &cert_dir, port).await;

    // Open: the always-allowed paths, anonymously.
    for path in ["/healthz", "/livez", "/readyz"] {
        let (status, body) = get(port, &server_cert, None, path, &[]).await;
        assert_eq!(
            status,
            if path == "/readyz" { status } else { 200 },
            "{path}: {body}"
        );
        assert_ne!(status, 401, "{path}");
        assert_ne!(status, 403, "{path}");
    }
    let (status, body) = get(port, &server_cert, None, "/healthz?verbose", &[]).await;
    assert_eq!(
        (status, body.as_str()),
        (200, "[+]ping ok\nhealthz check passed\n")
    );

    // Anonymous /metrics: authenticated as system:anonymous, refused by authorization (Go: 403).
    let (status, body) = get(port, &server_cert, None, "/metrics", &[]).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(
            r#""message":"forbidden: User \"system:anonymous\" cannot get path \"/metrics\"""#
        ),
        "{body}"
    );
    // A token the API server does not know: 401, even on an always-allowed path (as Go).
    for path in ["/metrics", "/healthz"] {
        let (status, body) = get_with_token(port, &server_cert, "not-a-token", path).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains(r#""reason":"Unauthorized""#), "{body}");
    }

    // A ServiceAccount token without RBAC: 403 naming the account.
    let ns = cp.create_namespace("serving").await.unwrap();
    let body = assert_nobody_forbidden(cp, &ns, port, &server_cert).await;
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:nobody")),
        "{body}"
    );

    // One with `get` on /metrics: 200 and the metrics.
    let token = cp.service_account_token(&ns, "scraper").await.unwrap();
    grant_metrics(&cp.client().unwrap(), rbac::service_account(&ns, "scraper")).await;
    let body = wait_ok("the scraper's token reading /metrics", || {
        get_with_token(port, &server_cert, &token, "/metrics")
    })
    .await;
    assert!(
        body.contains("# TYPE running_managed_controllers gauge"),
        "{body}"
    );

    // A client certificate signed by --client-ca-file: the user is its CN, groups its O.
    let readers = cert_reads_metrics(cp, port, &server_cert).await;
    let outsider_name = unique_name("cert-outsider");
    let outsider = identity_of(&cp.kubeconfig_for_user(&outsider_name, &["nobody"]).unwrap());
    let (status, body) = get(port, &server_cert, Some(&outsider), "/metrics", &[]).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!(r#"User \"{outsider_name}\""#)),
        "{body}"
    );

    // A certificate no trusted authority signed: 401.
    let stranger = ProxyCa::new().client("stranger");
    let (status, body) = get(port, &server_cert, Some(&stranger), "/healthz", &[]).await;
    assert_eq!(status, 401, "{body}");

    // A front proxy (request-header CA, allowed name) asserting a user of the group: 200;
    // the same headers from a proxy whose CN is not allowed, or without a certificate: no.
    let proxy = proxy_ca.client("front-proxy");
    let asserted = [
        ("x-remote-user", "alice"),
        ("x-remote-group", readers.as_str()),
    ];
    let (status, body) = get(port, &server_cert, Some(&proxy), "/metrics", &asserted).await;
    assert_eq!(status, 200, "{body}");
    let other_proxy = proxy_ca.client("other-proxy");
    let (status, body) = get(
        port,
        &server_cert,
        Some(&other_proxy),
        "/metrics",
        &asserted,
    )
    .await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = get(port, &server_cert, None, "/metrics", &asserted).await;
    assert_eq!(status, 403, "headers alone are not trusted: {body}");

    ccm.stop(WAIT).await;

    // A restart reuses the certificate in --cert-dir.
    assert_eq!(
        pem_identity_cert(&std::fs::read(cert_dir.join(SELF_SIGNED_CERT)).unwrap()).unwrap(),
        server_cert
    );
}

fn pem_identity_cert(pem: &[u8]) -> Result<CertificateDer<'static>, String> {
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::pem_slice_iter(pem)
        .next()
        .ok_or_else(|| "no certificate yet".to_owned())?
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_leader_check_fails_when_renewals_stop() {
    let cp = ControlPlane::shared().await.unwrap();
    let lease = unique_name("healthz-lease");
    let config = LeaderElectionConfig::new("kube-system", &lease)
        .with_identity("wedged")
        .with_timing(
            Duration::from_secs(2),
            Duration::from_millis(1500),
            Duration::from_millis(200),
        );
    let healthz = LeaderHealthz::new(Duration::from_secs(1));
    let mut elector =
        LeaderElector::new(cp.client().unwrap(), config).with_healthz(healthz.clone());
    assert_eq!(healthz.check(), Ok(()), "not leading: healthy");

    // Served on /healthz and /livez, as the manager registers it.
    let health = Health::new();
    let check = healthz.clone();
    health.register_liveness_fn("leaderElection", move || check.check());
    let shutdown = CancellationToken::new();
    let server = EndpointServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        &Serving::Http,
        Metrics::new(),
        health,
        shutdown.clone(),
    )
    .await
    .unwrap();
    let port = server.local_addr().port();

    assert!(elector.acquire(&shutdown).await);
    assert_eq!(healthz.check(), Ok(()));
    // Renewing keeps it healthy past lease + tolerance.
    let stop = CancellationToken::new();
    let renewing = {
        let stop = stop.clone();
        tokio::spawn(async move {
            elector.hold(&stop, |_| {}).await;
            elector
        })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(healthz.check(), Ok(()), "renewed while held");
    assert_eq!(http_get(port, "/healthz").await.0, 200);

    // Wedged: the renewals stop while this replica still holds the Lease (no release).
    renewing.abort();
    let _ = renewing.await;
    let started = tokio::time::Instant::now();
    let failed = eventually(
        "the leader check to fail",
        Duration::from_secs(10),
        || async {
            match http_get(port, "/healthz").await {
                (500, body) => Ok(body),
                (status, body) => Err(format!("{status}: {body}")),
            }
        },
    )
    .await;
    assert_eq!(
        failed,
        "[+]ping ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before lease + tolerance"
    );
    assert_eq!(http_get(port, "/livez").await.0, 500);
    assert_eq!(
        http_get(port, "/readyz").await.0,
        200,
        "readiness is another list"
    );
    let reason = healthz.check().unwrap_err();
    assert!(
        reason.starts_with(&format!(
            "failed election to renew leadership on lease {lease}"
        )),
        "{reason}"
    );
    shutdown.cancel();
    server.stopped().await;
}

/// An API server that accepts connections and never answers: reviews time out, requests
/// that need one fail (401, 500) within the timeout, and the always-allowed paths answer
/// at once.
#[tokio::test]
async fn a_hung_api_server_does_not_wedge_the_server() {
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_addr = hung.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = hung.accept().await {
            open.push(stream);
        }
    });
    let config = kube::Config::new(format!("http://{hung_addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let timeout = Duration::from_millis(500);
    let auth = DelegatedAuth::new(PathMatcher::new(&["/healthz".to_owned()]).unwrap())
        .with_token_reviews(client.clone(), Duration::from_secs(10))
        .with_access_reviews(client, Duration::from_secs(10), Duration::from_secs(10))
        .with_review_timeout(timeout);
    let shutdown = CancellationToken::new();
    let options = ServeOptions::new("127.0.0.1".parse().unwrap(), 0, Serving::HttpsSelfSigned)
        .with_auth(Arc::new(auth), ClientCas::default());
    let server = EndpointServer::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        &options,
        Metrics::new(),
        Health::new(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let cert = CertificateDer::from(server.certificate_der().unwrap().to_vec());
    let port = server.local_addr().port();

    let started = tokio::time::Instant::now();
    let (status, _) = get(port, &cert, None, "/healthz", &[]).await;
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < timeout,
        "no review for an always-allowed path"
    );

    let started = tokio::time::Instant::now();
    let (status, _) = get_with_token(port, &cert, "t", "/metrics").await;
    assert_eq!(status, 401, "the TokenReview timed out");
    let (status, body) = get(port, &cert, None, "/metrics", &[]).await;
    assert_eq!(status, 500, "the SubjectAccessReview timed out: {body}");
    assert!(body.contains("Internal error occurred"), "{body}");
    assert!(started.elapsed() < 4 * timeout, "{:?}", started.elapsed());

    // Many at once do not queue past the timeout either.
    let started = tokio::time::Instant::now();
    let requests: Vec<_> = (0..40)
        .map(|i| {
            let cert = cert.clone();
            tokio::spawn(async move {
                get_with_token(port, &cert, &format!("t{i}"), "/metrics")
                    .await
                    .0
            })
        })
        .collect();
    for r in requests {
        assert_eq!(r.await.unwrap(), 401);
    }
    assert!(started.elapsed() < 4 * timeout, "{:?}", started.elapsed());
    shutdown.cancel();
    server.stopped().await;
    held.abort();
}

/// The shipped RBAC (`examples/fake-cloud/deploy/rbac.yaml`) is enough for secure serving:
/// the manager, as the ServiceAccount `kube-system/cloud-controller-manager`, reads the
/// authentication ConfigMap at startup and reviews tokens and access for `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_rbac_allows_secure_serving() {
    let cp = ControlPlane::shared().await.unwrap();
    let rbac =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fake-cloud/deploy/rbac.yaml");
    // A kubeconfig with the ServiceAccount's token instead of the admin's certificate.
    let kubeconfig_path = cp
        .kubeconfig_for_service_account("kube-system", "cloud-controller-manager")
        .await
        .unwrap();
    cp.run_kubectl(["apply", "-f", rbac.to_str().unwrap()])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_dir = dir.path().join("certs");
    let port = free_port();
    let ccm = FakeCcm::start(
        "nodesAreInstances: true\n",
        &kubeconfig_path,
        &[
            "--leader-elect=false",
            "--controllers=cloud-node",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
            &format!("--cert-dir={}", cert_dir.display()),
        ],
    );
    let server_cert = wait_serving(&ccm, &cert_dir, port).await;

    // The client CA came from the ConfigMap (no --client-ca-file): a certificate of the
    // cluster's client CA authenticates, and the access review runs.
    cert_reads_metrics(cp, port, &server_cert).await;
    // And tokens are reviewed: one without RBAC is forbidden (not unauthorised).
    let ns = cp.create_namespace("serving-rbac").await.unwrap();
    assert_nobody_forbidden(cp, &ns, port, &server_cert).await;
    assert_eq!(get(port, &server_cert, None, "/healthz", &[]).await.0, 200);

    ccm.stop(WAIT).await;
}
