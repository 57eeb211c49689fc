//! The HTTP stack under every client, built from a `kube::Config` as kube's
//! `ClientBuilder` builds it (the cluster's base URI, kube's retries of 429, 503 and 504, the
//! credentials, impersonation headers, a hyper client over rustls with the config's
//! timeouts), but with our credentials ([`super::auth`]) and TLS configuration: a client
//! certificate from the kubeconfig or an exec plugin, the cluster's CA (re-read every minute
//! from the in-cluster `ca.crt`, as kube does, for CA rotation), the platform's roots when
//! the kubeconfig names no CA, or no verification for `insecure-skip-tls-verify`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::middleware::ExtraHeadersLayer;
use kube::client::retry::RetryPolicy;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use secrecy::ExposeSecret;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

use super::ClientConfigError;
use super::auth::{AuthLayer, Credentials, ExecIdentity, Header, credentials};
use super::proxy::{ProxyChoice, ProxyConnector, ProxyUrl};
use super::{CaUse, ClientUse};

/// A configuration made ready for clients: its credentials read (an exec plugin run once),
/// its TLS configuration built, its server name and impersonation headers checked. Each
/// client built from it ([`Prepared::builder`]) has a connection pool of its own and shares
/// the credentials: one exec plugin, one token file.
#[derive(Clone)]
pub(crate) struct Prepared {
    config: kube::Config,
    header: Header,
    tls: rustls::ClientConfig,
    server_name: Option<ServerName<'static>>,
    headers: ExtraHeadersLayer,
    /// An exec plugin's client certificate, renewed as it runs again.
    identity: Option<Arc<ExecIdentity>>,
    proxy: ProxyChoice,
    tls_use: Arc<TlsUse>,
}

impl Prepared {
    /// Reads and checks everything `config` names; errors name the field.
    pub(crate) fn new(config: &kube::Config) -> Result<Self, ClientConfigError> {
        let proxy = ProxyChoice::new(config.proxy_url.as_ref())?;
        let server_name = config
            .tls_server_name
            .as_ref()
            .map(|name| {
                ServerName::try_from(name.clone()).map_err(|e| {
                    ClientConfigError::new("cluster.tls-server-name", format!("{name:?}: {e}"))
                })
            })
            .transpose()?;
        let headers = config.extra_headers_layer().map_err(|e| {
            ClientConfigError::new(
                "user.as",
                format!("an impersonation header is invalid: {e}"),
            )
        })?;
        // client-go reads no credentials, client certificate or CA for a server reached
        // over plain HTTP, where a token would travel in the clear.
        let plain_http = config.cluster_url.scheme_str() == Some("http");
        let credentials = if plain_http {
            Credentials::default()
        } else {
            credentials(&config.auth_info)?
        };
        let (tls, tls_use) = if plain_http {
            let mut bare = kube::Config::new(config.cluster_url.clone());
            bare.accept_invalid_certs = false;
            tls_config(&bare, None)?
        } else {
            tls_config(config, credentials.exec_identity.as_ref())?
        };
        Ok(Self {
            config: config.clone(),
            header: credentials.header,
            tls,
            server_name,
            headers,
            identity: credentials.exec_identity,
            proxy,
            tls_use: Arc::new(tls_use),
        })
    }

    /// A kube client builder: the whole stack but for the caller's layers.
    pub(crate) fn builder(&self) -> kube::client::ClientBuilder<impl ServiceStack + use<>> {
        let config = &self.config;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let http = ProxyConnector::new(http, self.proxy.clone(), self.identity.clone());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.tls.clone())
            .https_or_http();
        let https = match &self.server_name {
            Some(name) => https.with_server_name_resolver(
                hyper_rustls::FixedServerNameResolver::new(name.clone()),
            ),
            None => https,
        };
        let mut connector =
            hyper_timeout::TimeoutConnector::new(https.enable_http1().wrap_connector(http));
        connector.set_connect_timeout(config.connect_timeout);
        connector.set_read_timeout(config.read_timeout);
        connector.set_write_timeout(config.write_timeout);
        connector.set_reset_reader_on_write(config.reset_reader_on_write);
        let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
            hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(
                config
                    .default_retry
                    .then(|| RetryLayer::new(RetryPolicy::server_retry())),
            )
            .layer(AuthLayer(self.header.clone()))
            .layer(self.headers.clone())
            .service(client);
        kube::client::ClientBuilder::new(service, config.default_namespace.clone())
    }
}

impl Prepared {
    /// What a request of these clients carries and where it goes (see [`ClientUse`]); the
    /// `Authorization` header is the one the next request would get (an exec plugin's
    /// cached token, a token file's last read).
    pub(crate) async fn describe(&self) -> Result<ClientUse, ClientConfigError> {
        let authorization = match &self.header {
            Header::None => None,
            Header::Fixed(h) => Some(h.clone()),
            Header::TokenFile(file) => Some(file.header()),
            Header::Exec(plugin) => plugin.current().await?,
        }
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
        let proxy = self
            .proxy
            .for_server(&self.config.cluster_url)
            .map(ProxyUrl::described);
        Ok(ClientUse {
            server: self.config.cluster_url.to_string(),
            authorization,
            client_certificate: match &self.identity {
                Some(identity) => identity.leaf(),
                None => self.tls_use.client_certificate.clone(),
            },
            ca: self.tls_use.ca.clone(),
            server_name: self.config.tls_server_name.clone(),
            proxy,
            impersonate: self.config.auth_info.impersonate.clone(),
        })
    }
}

/// What the TLS configuration was built from.
struct TlsUse {
    ca: CaUse,
    /// The client certificate's leaf, DER.
    client_certificate: Option<Vec<u8>>,
}

/// A kube client builder for `config` ([`Prepared::new`], then [`Prepared::builder`]).
pub(crate) fn builder(
    config: &kube::Config,
) -> Result<kube::client::ClientBuilder<impl ServiceStack>, ClientConfigError> {
    Ok(Prepared::new(config)?.builder())
}

/// What [`builder`] returns: a service kube's client and our layers take.
pub(crate) trait ServiceStack:
    tower::Service<
        http::Request<kube::client::Body>,
        Response = http::Response<hyper::body::Incoming>,
        Error = ccm_provider::BoxError,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<S> ServiceStack for S where
    S: tower::Service<
            http::Request<kube::client::Body>,
            Response = http::Response<hyper::body::Incoming>,
            Error = ccm_provider::BoxError,
            Future: Send + 'static,
        > + Send
        + 'static
{
}

/// The TLS configuration `config` asks for; `exec_identity` is an exec plugin's client
/// certificate, which takes the kubeconfig's place.
fn tls_config(
    config: &kube::Config,
    exec_identity: Option<&Arc<ExecIdentity>>,
) -> Result<(rustls::ClientConfig, TlsUse), ClientConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientConfigError::new("cluster", format!("TLS: {e}")))?;
    if config.accept_invalid_certs
        && (config.root_cert_file.is_some() || config.root_cert.is_some())
    {
        // client-go refuses the pair too, rather than verify nothing while a CA is named.
        return Err(ClientConfigError::new(
            "cluster.insecure-skip-tls-verify",
            "is set together with a certificate authority: name one or the other".to_owned(),
        ));
    }
    let ca = if config.accept_invalid_certs {
        CaUse::Insecure
    } else if let Some(path) = &config.root_cert_file {
        CaUse::File(path.clone())
    } else if let Some(roots) = &config.root_cert {
        CaUse::Certificates(roots.clone())
    } else {
        CaUse::Platform
    };
    let builder = if config.accept_invalid_certs {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ServerVerifier::insecure(provider)))
    } else if let Some(path) = &config.root_cert_file {
        let verifier = ServerVerifier::reloading(path.clone(), provider)?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
    } else if let Some(roots) = &config.root_cert {
        let mut store = RootCertStore::empty();
        for der in roots {
            store.add(CertificateDer::from(der.clone())).map_err(|e| {
                ClientConfigError::new("cluster.certificate-authority-data", e.to_string())
            })?;
        }
        builder.with_root_certificates(store)
    } else {
        use rustls_platform_verifier::BuilderVerifierExt;
        builder.with_platform_verifier().map_err(|e| {
            ClientConfigError::new(
                "cluster.certificate-authority",
                format!("none given, and the platform's roots cannot be used: {e}"),
            )
        })?
    };
    if let Some(identity) = exec_identity {
        let mut tls = builder.with_client_cert_resolver(Arc::clone(identity) as Arc<_>);
        // A resumed session keeps the identity of the one it resumes: after a renewal it
        // would present the replaced certificate. (Go's client, without a session cache,
        // never resumes either.)
        tls.resumption = rustls::client::Resumption::disabled();
        return Ok((
            tls,
            TlsUse {
                ca,
                client_certificate: None,
            },
        ));
    }
    let identity = kubeconfig_identity(&config.auth_info)?;
    let field = "user.client-certificate";
    match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ClientConfigError::new(field, format!("certificate: {e}")))?;
            if chain.is_empty() {
                return Err(ClientConfigError::new(field, "holds no certificate".into()));
            }
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| ClientConfigError::new(field, format!("private key: {e}")))?;
            let leaf = chain.first().map(|c| c.to_vec());
            let tls = builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ClientConfigError::new(field, e.to_string()))?;
            Ok((
                tls,
                TlsUse {
                    ca,
                    client_certificate: leaf,
                },
            ))
        }
        None => Ok((
            builder.with_no_client_auth(),
            TlsUse {
                ca,
                client_certificate: None,
            },
        )),
    }
}

/// A client certificate chain and its key, PEM.
type PemPair = (Vec<u8>, Vec<u8>);

/// The kubeconfig's client certificate and key (PEM), inline or from their files; one
/// without the other is an error, as in client-go.
fn kubeconfig_identity(
    user: &kube::config::AuthInfo,
) -> Result<Option<PemPair>, ClientConfigError> {
    let load = |data: Option<&str>, file: Option<&String>, field: &'static str| {
        if let Some(data) = data {
            return base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map(Some)
                .map_err(|e| ClientConfigError::new(field, format!("is not base64: {e}")));
        }
        file.map(|path| {
            ccm_provider::file::read(path, ccm_provider::file::MAX_PEM_BYTES)
                .map_err(|e| ClientConfigError::new(field, format!("{path}: {e}")))
        })
        .transpose()
    };
    let cert = load(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_ref(),
        "user.client-certificate-data",
    )?;
    let key = load(
        user.client_key_data
            .as_ref()
            .map(ExposeSecret::expose_secret),
        user.client_key.as_ref(),
        "user.client-key-data",
    )?;
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some((cert, key))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(ClientConfigError::new(
            "user.client-key-data",
            "is missing: a client certificate needs its key".into(),
        )),
        // client-go ignores a key without its certificate.
        (None, Some(_)) => Ok(None),
    }
}

/// How the server's certificate is checked where rustls' own verifier will not do: not at
/// all (`insecure-skip-tls-verify`), or against a CA bundle file read again at most once a
/// minute for new connections (the in-cluster `ca.crt` rotates; kube does the same, and a
/// read that fails keeps the last roots). The handshake's signatures are checked either way.
#[derive(Debug)]
struct ServerVerifier {
    provider: Arc<CryptoProvider>,
    /// `None`: any certificate is taken.
    roots: Option<ReloadingRoots>,
}

/// A CA bundle file and the verifier last built from it, with when it was read.
#[derive(Debug)]
struct ReloadingRoots {
    path: std::path::PathBuf,
    current: parking_lot::Mutex<(Arc<WebPkiServerVerifier>, Instant)>,
}

/// How often a [`ReloadingRoots`] file is read.
const CA_RELOAD: Duration = Duration::from_secs(60);

impl ServerVerifier {
    /// Takes any server certificate.
    fn insecure(provider: Arc<CryptoProvider>) -> Self {
        Self {
            provider,
            roots: None,
        }
    }

    /// Checks against the CA bundle at `path`, read now and again every minute.
    fn reloading(
        path: std::path::PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, ClientConfigError> {
        let verifier = Self::load(&path, &provider).map_err(|e| {
            ClientConfigError::new(
                "cluster.certificate-authority",
                format!("{}: {e}", path.display()),
            )
        })?;
        Ok(Self {
            provider,
            roots: Some(ReloadingRoots {
                path,
                current: parking_lot::Mutex::new((verifier, Instant::now())),
            }),
        })
    }

    fn load(
        path: &std::path::Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<WebPkiServerVerifier>, String> {
        let pem = ccm_provider::file::read(path, ccm_provider::file::MAX_PEM_BYTES)
            .map_err(|e| e.to_string())?;
        let mut store = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(&pem) {
            store
                .add(der.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
            .build()
            .map_err(|e| e.to_string())
    }

    /// The verifier of the file's roots, read again when a minute has passed.
    fn roots(&self, roots: &ReloadingRoots) -> Arc<WebPkiServerVerifier> {
        let mut current = roots.current.lock();
        if current.1.elapsed() >= CA_RELOAD {
            match Self::load(&roots.path, &self.provider) {
                Ok(fresh) => current.0 = fresh,
                Err(e) => tracing::warn!(
                    path = %roots.path.display(),
                    error = %e,
                    "cannot read the CA bundle again; keeping the last roots"
                ),
            }
            current.1 = Instant::now();
        }
        current.0.clone()
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.roots {
            None => Ok(ServerCertVerified::assertion()),
            Some(roots) => self.roots(roots).verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp,
                now,
            ),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::WebPkiClientVerifier;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn certified(name: &str) -> rcgen::CertifiedKey<rcgen::KeyPair> {
        rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap()
    }

    /// A TLS acceptor presenting `server`'s certificate that trusts `clients`' (a client
    /// certificate is asked for, not required).
    fn acceptor(
        server: &rcgen::CertifiedKey<rcgen::KeyPair>,
        clients: &[&rcgen::CertifiedKey<rcgen::KeyPair>],
    ) -> tokio_rustls::TlsAcceptor {
        let mut roots = RootCertStore::empty();
        for client in clients {
            roots.add(client.cert.der().clone()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![server.cert.der().clone()],
                PrivateKeyDer::try_from(server.signing_key.serialize_der()).unwrap(),
            )
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// An HTTPS server on 127.0.0.1 with a certificate for `kubernetes.internal`, which
    /// trusts `client` as a client certificate (not required) and answers each request
    /// with whether one was shown.
    async fn server(
        server: &rcgen::CertifiedKey<rcgen::KeyPair>,
        client: &rcgen::CertifiedKey<rcgen::KeyPair>,
    ) -> u16 {
        let acceptor = acceptor(server, &[client]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let shown = tls.get_ref().1.peer_certificates().is_some();
                    let body = if shown { "cert" } else { "none" };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(response.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        port
    }

    fn config(port: u16, ca: Option<&rcgen::CertifiedKey<rcgen::KeyPair>>) -> kube::Config {
        let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
        config.root_cert = ca.map(|c| vec![c.cert.der().to_vec()]);
        config
    }

    async fn get(config: kube::Config) -> Result<String, String> {
        let client = builder(&config).map_err(|e| e.to_string())?.build();
        client
            .request_text(http::Request::get("/version").body(Vec::new()).unwrap())
            .await
            // With its causes: where a connection failed is in them.
            .map_err(|e| ccm_provider::display_chain(&e))
    }

    #[tokio::test]
    async fn the_server_is_verified_by_its_ca_and_name_and_sees_the_client_certificate() {
        let (server_cert, client_cert) = (certified("kubernetes.internal"), certified("alice"));
        let port = server(&server_cert, &client_cert).await;

        // The certificate names kubernetes.internal, not 127.0.0.1.
        assert!(get(config(port, Some(&server_cert))).await.is_err());
        let mut named = config(port, Some(&server_cert));
        named.tls_server_name = Some("kubernetes.internal".to_owned());
        assert_eq!(get(named.clone()).await.unwrap(), "none");
        // A CA that did not sign it.
        let mut other = config(port, Some(&certified("kubernetes.internal")));
        other.tls_server_name = Some("kubernetes.internal".to_owned());
        assert!(get(other).await.is_err());
        // insecure-skip-tls-verify.
        let mut insecure = config(port, None);
        insecure.accept_invalid_certs = true;
        assert_eq!(get(insecure).await.unwrap(), "none");

        // The kubeconfig's client certificate, inline.
        let encode = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
        named.auth_info.client_certificate_data = Some(encode(client_cert.cert.pem()));
        named.auth_info.client_key_data =
            Some(encode(client_cert.signing_key.serialize_pem()).into());
        assert_eq!(get(named).await.unwrap(), "cert");
    }

    #[tokio::test]
    async fn a_proxy_url_carries_the_connection_through_a_connect_tunnel() {
        let (server_cert, client_cert) = (certified("kubernetes.test"), certified("alice"));
        let port = server(&server_cert, &client_cert).await;
        let target = format!("kubernetes.test:{port}");
        let proxy = ccm_test::proxy::ForwardProxy::start(&[(
            target.as_str(),
            ([127, 0, 0, 1], port).into(),
        )])
        .await;
        // A name that resolves nowhere: only the proxy knows where it is.
        let mut config = kube::Config::new(format!("https://{target}").parse().unwrap());
        config.root_cert = Some(vec![server_cert.cert.der().to_vec()]);
        config.proxy_url = Some(proxy.url_with("proxyuser", "pa55word").parse().unwrap());
        assert_eq!(get(config.clone()).await.unwrap(), "none");
        let seen = proxy.seen();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].method, "CONNECT");
        assert_eq!(seen[0].target, target);
        assert_eq!(
            seen[0].authorization.as_deref(),
            Some(
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("proxyuser:pa55word")
                )
                .as_str()
            )
        );
        // A proxy that refuses the tunnel: the error names it, without its password.
        config.proxy_url = Some(
            format!(
                "http://proxyuser:pa55word@{}",
                proxy.url().trim_start_matches("http://")
            )
            .parse()
            .unwrap(),
        );
        config.cluster_url = "https://elsewhere.test:1".parse().unwrap();
        let error = get(config).await.unwrap_err();
        assert!(
            error.contains("through the proxy http://proxyuser:(password)@127.0.0.1"),
            "{error}"
        );
        assert!(!error.contains("pa55word"), "{error}");
    }

    /// A certificate's first 8 bytes of SHA-256, in hex.
    fn short(der: &[u8]) -> String {
        ring::digest::digest(&ring::digest::SHA256, der)
            .as_ref()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// An HTTPS server on 127.0.0.1 for `kubernetes.test` that keeps connections open,
    /// trusts `clients`' certificates (not required), answers `/refuse` with 401 and any
    /// other request with the client certificate's hash (its leaf's first 8 bytes of
    /// SHA-256, or `none`) and the connection's number.
    async fn keepalive_server(
        server: &rcgen::CertifiedKey<rcgen::KeyPair>,
        clients: &[&rcgen::CertifiedKey<rcgen::KeyPair>],
    ) -> u16 {
        let acceptor = acceptor(server, clients);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            for number in 0.. {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let cert = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .map_or_else(|| "none".to_owned(), |certs| short(&certs[0]));
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        let end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                        let head = String::from_utf8_lossy(&request[..end]).into_owned();
                        request.drain(..end + 4);
                        let (status, body) = if head.starts_with("GET /refuse") {
                            ("401 Unauthorized", String::new())
                        } else {
                            ("200 OK", format!("{cert} {number}"))
                        };
                        let response = format!(
                            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if tls.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn an_exec_plugins_client_certificate_is_renewed_and_old_connections_retired() {
        let server_cert = certified("kubernetes.test");
        let (one, two) = (certified("alice-1"), certified("alice-2"));
        let port = keepalive_server(&server_cert, &[&one, &two]).await;
        let hash = |c: &rcgen::CertifiedKey<rcgen::KeyPair>| short(c.cert.der());
        let dir = tempfile::tempdir().unwrap();
        let answer = dir.path().join("answer.yaml");
        let write_answer = |c: &rcgen::CertifiedKey<rcgen::KeyPair>| {
            let indent = |pem: String| {
                pem.lines()
                    .map(|l| format!("    {l}\n"))
                    .collect::<String>()
            };
            std::fs::write(
                &answer,
                format!(
                    "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  \
                     clientCertificateData: |\n{}  clientKeyData: |\n{}",
                    indent(c.cert.pem()),
                    indent(c.signing_key.serialize_pem())
                ),
            )
            .unwrap();
        };
        write_answer(&one);
        let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
        config.root_cert = Some(vec![server_cert.cert.der().to_vec()]);
        config.tls_server_name = Some("kubernetes.test".to_owned());
        config.auth_info.exec = Some(kube::config::ExecConfig {
            api_version: Some("client.authentication.k8s.io/v1".to_owned()),
            command: Some("/bin/cat".to_owned()),
            args: Some(vec![answer.display().to_string()]),
            interactive_mode: Some(kube::config::ExecInteractiveMode::Never),
            ..Default::default()
        });
        let client = builder(&config).unwrap().build();
        let send = async |path: &str| {
            let request = http::Request::get(path).body(Vec::new()).unwrap();
            client.request_text(request).await
        };
        assert_eq!(send("/version").await.unwrap(), format!("{} 0", hash(&one)));
        assert_eq!(
            send("/version").await.unwrap(),
            format!("{} 0", hash(&one)),
            "kept"
        );

        // The API server refuses it: the plugin runs again and answers another certificate.
        write_answer(&two);
        assert!(send("/refuse").await.is_err());
        // This request may still go out on the old connection, which is then retired ...
        let on_old = send("/version").await.unwrap();
        assert!(
            on_old == format!("{} 0", hash(&one)) || on_old == format!("{} 1", hash(&two)),
            "{on_old}; one {}, two {}",
            hash(&one),
            hash(&two)
        );
        // ... so that from now on the new certificate is presented.
        let now = send("/version").await.unwrap();
        assert!(now.starts_with(&hash(&two)), "{now}");
        assert_eq!(
            send("/version").await.unwrap(),
            now,
            "and its connection kept"
        );
    }

    #[tokio::test]
    async fn the_in_cluster_ca_file_is_read_again_for_new_connections() {
        let (server_cert, client_cert) = (certified("kubernetes.internal"), certified("alice"));
        let port = server(&server_cert, &client_cert).await;
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, certified("x").cert.pem()).unwrap();
        let mut config = config(port, None);
        config.tls_server_name = Some("kubernetes.internal".to_owned());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = ServerVerifier::reloading(ca.clone(), provider).unwrap();
        std::fs::write(&ca, server_cert.cert.pem()).unwrap();
        let name = ServerName::try_from("kubernetes.internal").unwrap();
        let verify = |v: &ServerVerifier| {
            v.verify_server_cert(server_cert.cert.der(), &[], &name, &[], UnixTime::now())
        };
        assert!(
            verify(&verifier).is_err(),
            "the roots read at first, for a minute"
        );
        verifier.roots.as_ref().unwrap().current.lock().1 -= CA_RELOAD;
        assert!(verify(&verifier).is_ok(), "then the rotated file");
        std::fs::remove_file(&ca).unwrap();
        verifier.roots.as_ref().unwrap().current.lock().1 -= CA_RELOAD;
        assert!(
            verify(&verifier).is_ok(),
            "a file gone keeps the last roots"
        );

        // Through the whole stack.
        std::fs::write(&ca, server_cert.cert.pem()).unwrap();
        config.root_cert_file = Some(ca);
        assert_eq!(get(config).await.unwrap(), "none");
    }

    #[test]
    fn unusable_fields_are_named() {
        let field = |config: kube::Config| builder(&config).err().unwrap().field().to_owned();
        // No verification: what is checked here is the client's own certificate.
        let mut base = config(1, None);
        base.accept_invalid_certs = true;
        let mut c = base.clone();
        c.auth_info.client_certificate_data = Some("aGVsbG8=".to_owned());
        assert_eq!(field(c), "user.client-key-data");
        // A key without its certificate is ignored, as client-go ignores it.
        let mut c = base.clone();
        c.auth_info.client_key_data = Some("aGVsbG8=".to_owned().into());
        assert!(builder(&c).is_ok());
        let mut c = base.clone();
        c.auth_info.client_certificate_data = Some("not base64!".to_owned());
        c.auth_info.client_key_data = Some("aGVsbG8=".to_owned().into());
        assert_eq!(field(c), "user.client-certificate-data");
        let mut c = base.clone();
        c.auth_info.client_certificate_data = Some("aGVsbG8=".to_owned());
        c.auth_info.client_key_data = Some("aGVsbG8=".to_owned().into());
        assert_eq!(field(c), "user.client-certificate", "no PEM in it");
        let mut c = config(1, None);
        c.root_cert = Some(vec![b"not DER".to_vec()]);
        assert_eq!(field(c), "cluster.certificate-authority-data");
        let mut c = base.clone();
        c.proxy_url = Some("https://proxy:3128".parse().unwrap());
        assert_eq!(field(c), "cluster.proxy-url");
        let mut c = base.clone();
        c.root_cert = Some(vec![]);
        assert_eq!(
            field(c),
            "cluster.insecure-skip-tls-verify",
            "insecure and a CA"
        );
        let mut c = base;
        c.tls_server_name = Some("bad name!".to_owned());
        assert_eq!(field(c), "cluster.tls-server-name");
    }
}
