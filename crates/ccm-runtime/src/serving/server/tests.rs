//! Unit tests of `server`.

use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1 as client;
use rustls::pki_types::ServerName;

use super::*;
use ccm_provider::CloudProvider;
use ccm_provider::mock::{MockCloud, MockInstances};

/// How a test client reaches the server.
#[derive(Clone)]
enum Client {
    Http,
    /// HTTPS, trusting only this certificate, for this server name.
    Https(CertificateDer<'static>, &'static str),
}

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    /// The status and the body.
    fn answer(&self) -> (StatusCode, &str) {
        (self.status, &self.body)
    }
}

async fn request(client: &Client, addr: SocketAddr, method: Method, path: &str) -> Reply {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    match client {
        Client::Http => send(tcp, req).await,
        Client::Https(cert, name) => send(tls_connect(cert, name, tcp).await.unwrap(), req).await,
    }
}

async fn send<S>(stream: S, req: Request<Empty<Bytes>>) -> Reply
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = client::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let response = sender.send_request(req).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn get(client: &Client, addr: SocketAddr, path: &str) -> Reply {
    request(client, addr, Method::GET, path).await
}

async fn start(
    serving: Serving,
    metrics: Metrics,
    health: Health,
) -> (EndpointServer, CancellationToken) {
    let shutdown = CancellationToken::new();
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let server = EndpointServer::bind(addr, &serving, metrics, health, shutdown.clone())
        .await
        .unwrap();
    (server, shutdown)
}

/// Why a server with `serving`, on a port of its own, cannot start.
async fn bind_error(serving: &Serving) -> ServeError {
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let shutdown = CancellationToken::new();
    EndpointServer::bind(addr, serving, Metrics::new(), Health::new(), shutdown)
        .await
        .unwrap_err()
}

/// [`EndpointServer::start`] with `options`, empty metrics and checks.
async fn start_with(options: &ServeOptions) -> Result<Option<EndpointServer>, ServeError> {
    EndpointServer::start(
        options,
        Metrics::new(),
        Health::new(),
        CancellationToken::new(),
    )
    .await
}

/// A self-signed certificate for `host`, and the files (in `dir`) of it and its key, named
/// `name.crt` and `name.key`.
fn certificate_files(
    dir: &std::path::Path,
    name: &str,
    host: &str,
) -> (rcgen::CertifiedKey<rcgen::KeyPair>, PathBuf, PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec![host.to_owned()]).unwrap();
    let cert_file = dir.join(format!("{name}.crt"));
    let key_file = dir.join(format!("{name}.key"));
    std::fs::write(&cert_file, certified.cert.pem()).unwrap();
    std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
    (certified, cert_file, key_file)
}

#[tokio::test]
async fn liveness_answers_ok_and_unknown_paths_404() {
    let health = Health::new();
    health.set_failed("informers-synced", "not synced");
    let (server, _shutdown) = start(Serving::Http, Metrics::new(), health).await;
    assert!(!server.is_https() && server.certificate_der().is_none());
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0, "an ephemeral port was picked");
    for path in ["/healthz", "/livez", "/healthz/ping", "/livez/ping"] {
        let reply = get(&Client::Http, addr, path).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{path}: liveness ignores readiness"
        );
        assert_eq!(reply.body, "ok");
        assert_eq!(
            reply.headers[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }
    for path in [
        "/",
        "/metricsx",
        "/healthz/other",
        "/debug/pprof",
        "/readyz/unknown",
    ] {
        let reply = get(&Client::Http, addr, path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.body, "404 page not found\n");
    }
    let reply = request(&Client::Http, addr, Method::POST, "/healthz").await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.headers[header::ALLOW], "GET, HEAD");
    let reply = request(&Client::Http, addr, Method::HEAD, "/healthz").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "", "no body for HEAD");
}

#[tokio::test]
async fn readiness_follows_the_checks() {
    let health = Health::new();
    let (server, _shutdown) = start(Serving::Http, Metrics::new(), health.clone()).await;
    let addr = server.local_addr();
    let reply = get(&Client::Http, addr, "/readyz").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"), "no checks");

    let leader = health.register("leader-election");
    leader.set_ok();
    let synced = health.register("informers-synced");
    let reply = get(&Client::Http, addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        reply.body,
        "[+]leader-election ok\n[-]informers-synced failed: not reported yet\nreadyz check failed\n"
    );
    let reply = get(&Client::Http, addr, "/readyz/informers-synced").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply.body, "internal server error: not reported yet\n");
    let reply = get(&Client::Http, addr, "/readyz/leader-election").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"));
    let reply = get(&Client::Http, addr, "/readyz?exclude=informers-synced").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"));

    synced.set_ok();
    let reply = get(&Client::Http, addr, "/readyz").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"));
    let reply = get(&Client::Http, addr, "/readyz?verbose").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body,
        "[+]leader-election ok\n[+]informers-synced ok\nreadyz check passed\n"
    );

    // A check evaluated at each probe, and a by-name update.
    let renewing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = Arc::clone(&renewing);
    health.register_fn("lease-renewal", move || {
        if flag.load(std::sync::atomic::Ordering::Relaxed) {
            Ok(())
        } else {
            Err("lease not renewed for 25s".to_owned())
        }
    });
    assert_eq!(
        get(&Client::Http, addr, "/readyz").await.status,
        StatusCode::OK
    );
    renewing.store(false, std::sync::atomic::Ordering::Relaxed);
    health.set_failed("leader-election", "lost");
    let reply = get(&Client::Http, addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        reply.body,
        "[-]leader-election failed: lost\n[+]informers-synced ok\n\
         [-]lease-renewal failed: lease not renewed for 25s\nreadyz check failed\n"
    );
    assert!(
        leader.result().is_err(),
        "the name and the handle are one check"
    );
    assert!(health.remove("lease-renewal"));
    leader.set_ok();
    assert_eq!(
        get(&Client::Http, addr, "/readyz").await.status,
        StatusCode::OK
    );
}

#[test]
fn registering_a_name_twice_shares_the_check() {
    let health = Health::new();
    let a = health.register("x");
    let b = health.register("x");
    a.set_ok();
    assert_eq!(b.result(), Ok(()));
    assert_eq!(health.report().len(), 1);
    assert!(health.is_ready());
    b.set_failed("no");
    assert!(!health.is_ready());
    assert!(!health.remove("y"));
}

#[tokio::test]
async fn metrics_show_the_instrumented_provider() {
    let metrics = Metrics::new();
    let mut instances = MockInstances::new();
    instances
        .expect_instance_exists()
        .times(1)
        .returning(|_| Ok(true));
    let cloud: Arc<dyn CloudProvider> = Arc::new(MockCloud::new("acme").with_instances(instances));
    let cloud = metrics.instrument(cloud);
    let (server, _shutdown) = start(Serving::Http, metrics.clone(), Health::new()).await;

    let before = get(&Client::Http, server.local_addr(), "/metrics").await;
    assert!(!before.body.contains("ccm_cloud_requests_total{"));
    cloud
        .instances()
        .unwrap()
        .instance_exists(&k8s_openapi::api::core::v1::Node::default())
        .await
        .unwrap();
    metrics.controller_started("cloud-node-controller");
    let reply = get(&Client::Http, server.local_addr(), "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers[header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    for line in [
        r#"ccm_cloud_requests_total{provider="acme",method="instance_exists",result="success"} 1"#,
        r#"ccm_cloud_request_duration_seconds_count{provider="acme",method="instance_exists"} 1"#,
        r#"running_managed_controllers{name="cloud-node-controller",manager="cloud-controller-manager"} 1"#,
        "route_controller_route_sync_total 0",
    ] {
        assert!(
            reply.body.lines().any(|l| l == line),
            "{line}\n{}",
            reply.body
        );
    }
}

#[tokio::test]
async fn https_with_a_self_signed_certificate() {
    let (server, _shutdown) = start(Serving::HttpsSelfSigned, Metrics::new(), Health::new()).await;
    assert!(server.is_https());
    let cert = CertificateDer::from(server.certificate_der().unwrap().to_vec());
    let addr = server.local_addr();
    for name in ["localhost", "127.0.0.1"] {
        let reply = get(&Client::Https(cert.clone(), name), addr, "/healthz").await;
        assert_eq!(reply.answer(), (StatusCode::OK, "ok"), "{name}");
    }
    let reply = get(&Client::Https(cert.clone(), "localhost"), addr, "/metrics").await;
    assert!(
        reply
            .body
            .contains("# TYPE route_controller_route_sync_total counter")
    );

    // The certificate does not claim other names, and another server's is not it.
    let tcp = TcpStream::connect(addr).await.unwrap();
    assert!(
        tls_connect(&cert, "example.com", tcp).await.is_err(),
        "wrong name accepted"
    );
    let (other, _s) = start(Serving::HttpsSelfSigned, Metrics::new(), Health::new()).await;
    assert_ne!(
        other.certificate_der(),
        server.certificate_der(),
        "made per server"
    );
    let tcp = TcpStream::connect(addr).await.unwrap();
    let other_cert = CertificateDer::from(other.certificate_der().unwrap().to_vec());
    assert!(tls_connect(&other_cert, "localhost", tcp).await.is_err());

    // Plain HTTP to the HTTPS port gets no answer.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tcp.read_to_end(&mut buf).await;
    assert!(!String::from_utf8_lossy(&buf).contains("200 OK"));
}

async fn tls_connect(
    cert: &CertificateDer<'static>,
    name: &'static str,
    tcp: TcpStream,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name).unwrap(), tcp)
        .await
}

#[tokio::test]
async fn https_with_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let (certified, cert_file, key_file) = certificate_files(dir.path(), "tls", "ccm.example");
    let serving = Serving::Https {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
    };
    let (server, _shutdown) = start(serving, Metrics::new(), Health::new()).await;
    assert_eq!(
        server.certificate_der(),
        Some(certified.cert.der().as_ref())
    );
    let client = Client::Https(certified.cert.der().clone(), "ccm.example");
    let reply = get(&client, server.local_addr(), "/livez").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"));

    // Bad files are startup errors that name the file.
    let missing = Serving::Https {
        cert_file: dir.path().join("missing.crt"),
        key_file: key_file.clone(),
    };
    let err = bind_error(&missing).await;
    assert!(err.to_string().contains("missing.crt"), "{err}");
    let swapped = Serving::Https {
        cert_file: key_file.clone(),
        key_file: cert_file.clone(),
    };
    let err = bind_error(&swapped).await;
    assert!(
        matches!(&err, ServeError::Pem { what: "certificate", path, .. } if *path == key_file),
        "{err:?}"
    );
    let other = rcgen::generate_simple_self_signed(vec!["x".to_owned()]).unwrap();
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, other.signing_key.serialize_pem()).unwrap();
    let mismatched = Serving::Https {
        cert_file,
        key_file: other_key,
    };
    let err = bind_error(&mismatched).await;
    assert!(matches!(err, ServeError::Tls(_)), "{err:?}");
}

#[tokio::test]
async fn port_zero_disables_and_bind_errors_surface() {
    let options = ServeOptions::new(IpAddr::from([127, 0, 0, 1]), 0, Serving::Http);
    assert_eq!(options.address(), None);
    let none = start_with(&options).await.unwrap();
    assert!(none.is_none());
    let defaults = ServeOptions::default();
    assert_eq!(
        defaults.address(),
        Some(SocketAddr::from(([0, 0, 0, 0], 10258)))
    );
    assert_eq!(defaults.serving, Serving::HttpsSelfSigned);

    let (taken, _shutdown) = start(Serving::Http, Metrics::new(), Health::new()).await;
    let options = ServeOptions::new(
        IpAddr::from([127, 0, 0, 1]),
        taken.local_addr().port(),
        Serving::Http,
    );
    let err = start_with(&options).await.unwrap_err();
    assert!(matches!(err, ServeError::Bind { .. }), "{err:?}");
    assert!(err.to_string().contains(&taken.local_addr().to_string()));
}

#[tokio::test]
async fn liveness_runs_its_own_checks_with_reasons_withheld() {
    let health = Health::new();
    health.set_failed("informers-synced", "not synced");
    let (server, _shutdown) = start(Serving::Http, Metrics::new(), health.clone()).await;
    let addr = server.local_addr();
    let reply = get(&Client::Http, addr, "/healthz?verbose").await;
    assert_eq!(
        reply.answer(),
        (StatusCode::OK, "[+]ping ok\nhealthz check passed\n"),
        "readiness checks are not liveness checks"
    );
    let wedged = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&wedged);
    health.register_liveness_fn("leaderElection", move || {
        if flag.load(std::sync::atomic::Ordering::Relaxed) {
            Err("failed election to renew leadership on lease x".to_owned())
        } else {
            Ok(())
        }
    });
    let reply = get(&Client::Http, addr, "/livez").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"));
    wedged.store(true, std::sync::atomic::Ordering::Relaxed);
    for (path, name) in [("/healthz", "healthz"), ("/livez", "livez")] {
        let reply = get(&Client::Http, addr, path).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            reply.body,
            format!("[+]ping ok\n[-]leaderElection failed: reason withheld\n{name} check failed\n")
        );
    }
    let reply = get(&Client::Http, addr, "/healthz/leaderElection").await;
    assert_eq!(
        reply.answer(),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error: reason withheld\n"
        )
    );
    let reply = get(&Client::Http, addr, "/healthz?exclude=leaderElection").await;
    assert_eq!(reply.answer(), (StatusCode::OK, "ok"));
    assert_eq!(
        get(&Client::Http, addr, "/healthz/ping").await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(&Client::Http, addr, "/livez/nope").await.status,
        StatusCode::NOT_FOUND
    );
    assert!(health.remove_liveness("leaderElection"));
    assert_eq!(
        get(&Client::Http, addr, "/healthz").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn request_heads_are_bounded() {
    let (server, _shutdown) = start(Serving::Http, Metrics::new(), Health::new()).await;
    let mut tcp = TcpStream::connect(server.local_addr()).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let big = "x".repeat(20 * 1024);
    let request = format!("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: {big}\r\n\r\n");
    let _ = tcp.write_all(request.as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut buf)).await;
    let answer = String::from_utf8_lossy(&buf);
    assert!(!answer.contains("200 OK"), "{answer}");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
}

#[tokio::test]
async fn sni_selects_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (sni, cert_file, key_file) = certificate_files(dir.path(), "sni", "sni.example");
    let flag = format!("{},{}", cert_file.display(), key_file.display());
    let (settings, _) = tls::settings("VersionTLS13", &[], &[], &[flag]).unwrap();
    let options = ServeOptions::new(IpAddr::from([127, 0, 0, 1]), 0, Serving::HttpsSelfSigned)
        .with_tls(settings);
    let server = EndpointServer::bind_with(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &options,
        Metrics::new(),
        Health::new(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let addr = server.local_addr();
    // The name from the certificate's SANs selects it; other names get the default.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = tls_connect(sni.cert.der(), "sni.example", tcp)
        .await
        .unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    let default = CertificateDer::from(server.certificate_der().unwrap().to_vec());
    let tcp = TcpStream::connect(addr).await.unwrap();
    assert!(tls_connect(&default, "localhost", tcp).await.is_ok());
    let tcp = TcpStream::connect(addr).await.unwrap();
    assert!(tls_connect(sni.cert.der(), "localhost", tcp).await.is_err());
}

#[tokio::test]
async fn stops_when_the_token_fires() {
    let (server, shutdown) = start(Serving::Http, Metrics::new(), Health::new()).await;
    let addr = server.local_addr();
    // An idle keep-alive connection must not hold the server up.
    let idle = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = client::handshake(TokioIo::new(idle)).await.unwrap();
    let conn = tokio::spawn(conn);
    let req = Request::get("/healthz")
        .header(header::HOST, "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(
        sender.send_request(req).await.unwrap().status(),
        StatusCode::OK
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(2), server.stopped())
        .await
        .expect("stopped promptly");
    tokio::time::timeout(Duration::from_secs(2), conn)
        .await
        .expect("the idle connection was closed")
        .unwrap()
        .unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}
