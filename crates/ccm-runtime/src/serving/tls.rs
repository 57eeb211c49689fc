//! TLS for the endpoint server as Go's `SecureServingOptions` configures it, on rustls:
//! `--tls-min-version`, `--tls-cipher-suites` (Go's IANA names), `--tls-curve-preferences`
//! and `--tls-sni-cert-key` mapped onto the *ring* provider; the serving certificate from
//! `--tls-cert-file`, or self-signed and kept in `--cert-dir` (Go's `<dir>/<pair>.crt/.key`,
//! reused across restarts) or in memory. Client certificates are requested, never required,
//! and accepted at the handshake as Go's `tls.RequestClientCert` does (the handshake still
//! proves the client holds the key): which authority signed them is for
//! [`auth`](super::auth) to decide, per request. Go values that rustls does not implement
//! (TLS 1.0/1.1, CBC, RSA key exchange, RC4, 3DES suites) only ever narrow what is served:
//! they are skipped with a warning, and a setting that leaves nothing to serve is refused.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme, SupportedCipherSuite,
    SupportedProtocolVersion,
};

use super::ServeError;
use crate::flags::FlagError;

/// Go's `PairName` for the cloud-controller-manager: `--cert-dir` holds
/// `cloud-controller-manager.crt` and `cloud-controller-manager.key`.
pub const CERT_PAIR_NAME: &str = "cloud-controller-manager";

/// The largest PEM file read (certificates, keys, CA bundles): 1 MiB.
pub use ccm_provider::file::MAX_PEM_BYTES;

/// What the TLS flags ask for, mapped onto the *ring* provider.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TlsSettings {
    /// The protocol versions served (TLS 1.2 and 1.3 by default).
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// The cipher suites, `None` for rustls' defaults.
    pub cipher_suites: Option<Vec<SupportedCipherSuite>>,
    /// The key exchange groups, `None` for rustls' defaults.
    pub kx_groups: Option<Vec<&'static dyn SupportedKxGroup>>,
    /// `--tls-sni-cert-key`: certificate file, key file, names (empty: from the certificate).
    pub sni: Vec<(PathBuf, PathBuf, Vec<String>)>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            cipher_suites: None,
            kx_groups: None,
            sni: Vec::new(),
        }
    }
}

impl PartialEq for TlsSettings {
    fn eq(&self, other: &Self) -> bool {
        let names = |s: &Option<Vec<SupportedCipherSuite>>| {
            s.as_ref()
                .map(|v| v.iter().map(|c| c.suite()).collect::<Vec<_>>())
        };
        let groups = |g: &Option<Vec<&'static dyn SupportedKxGroup>>| {
            g.as_ref()
                .map(|v| v.iter().map(|k| k.name()).collect::<Vec<_>>())
        };
        self.versions
            .iter()
            .map(|v| v.version)
            .eq(other.versions.iter().map(|v| v.version))
            && names(&self.cipher_suites) == names(&other.cipher_suites)
            && groups(&self.kx_groups) == groups(&other.kx_groups)
            && self.sni == other.sni
    }
}

impl Eq for TlsSettings {}

/// How a Go cipher suite name maps onto rustls.
enum Suite {
    /// Implemented.
    Rustls(SupportedCipherSuite),
    /// A TLS 1.3 suite: Go ignores TLS 1.3 suites in this flag (all are always enabled).
    Tls13,
    /// Known to Go, not implemented by rustls; why.
    Unsupported(&'static str),
}

fn go_cipher_suite(name: &str) -> Option<Suite> {
    use rustls::crypto::ring::cipher_suite as cs;
    const CBC: &str = "a CBC suite, which rustls does not implement";
    const RSA_KEX: &str =
        "an RSA key exchange suite (no forward secrecy), which rustls does not implement";
    const INSECURE: &str = "insecure (RC4, 3DES or CBC-SHA256), which rustls does not implement";
    Some(match name {
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            Suite::Tls13
        }
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
            Suite::Rustls(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
        }
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
            Suite::Rustls(cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
        }
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            Suite::Rustls(cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => {
            Suite::Rustls(cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
        }
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => {
            Suite::Rustls(cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            Suite::Rustls(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA" => Suite::Unsupported(CBC),
        "TLS_RSA_WITH_AES_128_GCM_SHA256"
        | "TLS_RSA_WITH_AES_256_GCM_SHA384"
        | "TLS_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_RSA_WITH_AES_256_CBC_SHA" => Suite::Unsupported(RSA_KEX),
        "TLS_RSA_WITH_RC4_128_SHA"
        | "TLS_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256" => Suite::Unsupported(INSECURE),
        _ => return None,
    })
}

fn bad(flag: &'static str, message: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        message: message.into(),
    }
}

/// Maps the TLS flags (already split into lists) onto [`TlsSettings`], with the warnings
/// to log; the error names the flag.
pub fn settings(
    min_version: &str,
    cipher_suites: &[String],
    curves: &[String],
    sni: &[String],
) -> Result<(TlsSettings, Vec<String>), FlagError> {
    let mut warnings = Vec::new();
    let mut out = TlsSettings::default();
    match min_version {
        "" | "VersionTLS12" => {}
        "VersionTLS13" => out.versions = vec![&rustls::version::TLS13],
        "VersionTLS10" | "VersionTLS11" => warnings.push(format!(
            "--tls-min-version={min_version}: TLS 1.0 and 1.1 are not implemented (rustls); serving TLS 1.2 and 1.3 only"
        )),
        other => {
            return Err(bad(
                "--tls-min-version",
                format!("unknown version {other:?}; use VersionTLS12 or VersionTLS13"),
            ));
        }
    }
    if !cipher_suites.is_empty() {
        let mut tls12 = Vec::new();
        for name in cipher_suites {
            match go_cipher_suite(name) {
                None => {
                    return Err(bad(
                        "--tls-cipher-suites",
                        format!("unknown cipher suite {name:?}"),
                    ));
                }
                Some(Suite::Rustls(s)) => {
                    if !tls12
                        .iter()
                        .any(|t: &SupportedCipherSuite| t.suite() == s.suite())
                    {
                        tls12.push(s);
                    }
                }
                Some(Suite::Tls13) => {}
                Some(Suite::Unsupported(why)) => {
                    warnings.push(format!("--tls-cipher-suites: {name} is {why}; skipped"))
                }
            }
        }
        let serves_tls12 = out.versions.contains(&&rustls::version::TLS12);
        if tls12.is_empty() && serves_tls12 {
            // As with Go, the list holds no usable TLS 1.2 suite: TLS 1.2 cannot be served.
            warnings.push(
                "--tls-cipher-suites: no TLS 1.2 suite that rustls implements; serving TLS 1.3 only"
                    .to_owned(),
            );
            out.versions = vec![&rustls::version::TLS13];
        }
        // TLS 1.3 suites are always enabled, as in Go.
        let mut suites: Vec<SupportedCipherSuite> = rustls::crypto::ring::ALL_CIPHER_SUITES
            .iter()
            .copied()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .collect();
        suites.extend(tls12);
        out.cipher_suites = Some(suites);
    }
    if !curves.is_empty() {
        use rustls::crypto::ring::kx_group;
        let mut groups: Vec<&'static dyn SupportedKxGroup> = Vec::new();
        for id in curves {
            let group: &'static dyn SupportedKxGroup = match id.trim() {
                "23" => kx_group::SECP256R1,
                "24" => kx_group::SECP384R1,
                "29" => kx_group::X25519,
                "25" | "4588" | "4587" | "25497" | "25498" => {
                    warnings.push(format!(
                        "--tls-curve-preferences: curve {id} is not implemented (rustls, ring); skipped"
                    ));
                    continue;
                }
                other => {
                    return Err(bad(
                        "--tls-curve-preferences",
                        format!(
                            "unknown curve ID {other:?}; use 23 (P-256), 24 (P-384) or 29 (X25519)"
                        ),
                    ));
                }
            };
            if !groups.iter().any(|g| g.name() == group.name()) {
                groups.push(group);
            }
        }
        if groups.is_empty() {
            return Err(bad(
                "--tls-curve-preferences",
                "no curve that rustls implements (23, 24, 29)",
            ));
        }
        out.kx_groups = Some(groups);
    }
    for value in sni {
        out.sni.push(parse_sni(value)?);
    }
    Ok((out, warnings))
}

/// `cert,key` or `cert,key:name,name` (Go's `NamedCertKey`).
fn parse_sni(value: &str) -> Result<(PathBuf, PathBuf, Vec<String>), FlagError> {
    let err = || {
        bad(
            "--tls-sni-cert-key",
            format!("{value:?}: want CERT,KEY or CERT,KEY:NAME,NAME"),
        )
    };
    let (files, names) = match value.split_once(':') {
        Some((files, names)) => (
            files,
            names
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .collect(),
        ),
        None => (value, Vec::new()),
    };
    let (cert, key) = files.split_once(',').ok_or_else(err)?;
    if cert.trim().is_empty() || key.trim().is_empty() || names.iter().any(String::is_empty) {
        return Err(err());
    }
    Ok((PathBuf::from(cert.trim()), PathBuf::from(key.trim()), names))
}

/// The *ring* provider narrowed to `settings`.
#[must_use]
pub fn provider(settings: &TlsSettings) -> CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(suites) = &settings.cipher_suites {
        provider.cipher_suites.clone_from(suites);
    }
    if let Some(groups) = &settings.kx_groups {
        provider.kx_groups.clone_from(groups);
    }
    provider
}

/// Reads a PEM file named by `flag`, with the guards of [`ccm_provider::file::read`].
fn read_pem_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, ServeError> {
    Ok(ccm_provider::file::read_named(flag, path, MAX_PEM_BYTES)?)
}

/// The certificates of a PEM file named by `flag` (at least one). Blocking.
pub(crate) fn load_certs(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ServeError> {
    let bytes = read_pem_file(flag, path)?;
    certs_from_pem(&bytes).map_err(|reason| ServeError::Pem {
        flag,
        what: "certificate",
        path: path.to_owned(),
        reason,
    })
}

/// The certificates of PEM text (at least one).
pub(crate) fn certs_from_pem(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block".to_owned());
    }
    Ok(certs)
}

/// The private key of a PEM file named by `flag`. Blocking.
pub(crate) fn load_key(
    flag: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, ServeError> {
    let bytes = read_pem_file(flag, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| ServeError::Pem {
        flag,
        what: "private key",
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// A certificate chain and its key, loaded from the files the flags name.
pub(crate) type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// One `--tls-sni-cert-key` pair, loaded, with the names it serves.
pub(crate) type SniIdentity = (
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
    Vec<String>,
);

/// Loads every `--tls-sni-cert-key` pair of `settings`; a pair without names serves the
/// names of its certificate. Blocking.
pub(crate) fn load_sni(settings: &TlsSettings) -> Result<Vec<SniIdentity>, ServeError> {
    settings
        .sni
        .iter()
        .map(|(cert_file, key_file, names)| {
            let chain = load_certs("--tls-sni-cert-key", cert_file)?;
            let key = load_key("--tls-sni-cert-key", key_file)?;
            let names = if names.is_empty() {
                certificate_names(&chain[0])
            } else {
                names.clone()
            };
            Ok((chain, key, names))
        })
        .collect()
}

/// A self-signed certificate for the loopback names and `bind`, and its key, as PEM.
fn self_signed_pem(bind: IpAddr) -> Result<(String, String), ServeError> {
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !bind.is_unspecified() && !bind.is_loopback() {
        names.push(bind.to_string());
    }
    let certified = rcgen::generate_simple_self_signed(names).map_err(ServeError::SelfSigned)?;
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem()))
}

/// The serving certificate chain and key: `cert_dir`'s pair when both files are there
/// (Go's `canReadCertAndKey`), else a new self-signed one, written there when `cert_dir`
/// is given (Go's `MaybeDefaultWithSelfSignedCerts`) and kept in memory otherwise.
pub(crate) fn self_signed(
    bind: IpAddr,
    cert_dir: Option<&Path>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServeError> {
    let Some(dir) = cert_dir else {
        let (cert, key) = self_signed_pem(bind)?;
        return from_pem_pair(&cert, &key);
    };
    let cert_file = dir.join(format!("{CERT_PAIR_NAME}.crt"));
    let key_file = dir.join(format!("{CERT_PAIR_NAME}.key"));
    if cert_file.exists() && key_file.exists() {
        tracing::info!(cert = %cert_file.display(), "using the self-signed certificate in --cert-dir");
        return Ok((
            load_certs("--cert-dir", &cert_file)?,
            load_key("--cert-dir", &key_file)?,
        ));
    }
    let (cert, key) = self_signed_pem(bind)?;
    let write = |path: &Path, data: &str, private: bool| -> Result<(), ServeError> {
        write_file(path, data.as_bytes(), private).map_err(|e| ServeError::Pem {
            flag: "--cert-dir",
            what: if private {
                "private key"
            } else {
                "certificate"
            },
            path: path.to_owned(),
            reason: format!("cannot write: {e}"),
        })
    };
    std::fs::create_dir_all(dir).map_err(|e| ServeError::Pem {
        flag: "--cert-dir",
        what: "certificate",
        path: dir.to_owned(),
        reason: format!("cannot create: {e}"),
    })?;
    write(&key_file, &key, true)?;
    write(&cert_file, &cert, false)?;
    tracing::info!(cert = %cert_file.display(), "generated a self-signed certificate in --cert-dir");
    from_pem_pair(&cert, &key)
}

/// Writes `data` to `path`, which is a regular file or nothing yet: opening a named pipe
/// to write would wait for a reader.
fn write_file(path: &Path, data: &[u8], private: bool) -> io::Result<()> {
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "exists and is not a regular file",
        ));
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    use std::io::Write as _;
    options.open(path)?.write_all(data)
}

fn from_pem_pair(
    cert: &str,
    key: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServeError> {
    let pem = |reason: String| ServeError::Pem {
        flag: "--cert-dir",
        what: "certificate",
        path: PathBuf::from("(generated)"),
        reason,
    };
    let certs = certs_from_pem(cert.as_bytes()).map_err(pem)?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| pem(e.to_string()))?;
    Ok((certs, key))
}

/// The client certificate authorities: `--client-ca-file` and
/// `--requestheader-client-ca-file` (or their values from the cluster).
#[derive(Clone, Debug, Default)]
pub struct ClientCas {
    /// Signs certificates of users (CN = user, O = groups).
    pub client_ca: Vec<CertificateDer<'static>>,
    /// Signs certificates of front proxies that assert users in request headers.
    pub requestheader_ca: Vec<CertificateDer<'static>>,
}

impl ClientCas {
    /// Whether any authority is configured (then client certificates are requested).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.client_ca.is_empty() && self.requestheader_ca.is_empty()
    }
}

/// A verifier of client certificates against one bundle of authorities, requiring the
/// client-auth usage as Go's x509 authenticator does.
#[derive(Clone, Debug)]
pub struct ChainVerifier {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl ChainVerifier {
    /// A verifier trusting `cas`; an error when none can be used as a trust anchor.
    pub fn new(cas: &[CertificateDer<'static>]) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        let (added, _ignored) = roots.add_parsable_certificates(cas.iter().cloned());
        if added == 0 {
            return Err("no usable CA certificate".to_owned());
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| e.to_string())?;
        Ok(Self { verifier })
    }

    /// Whether `chain` (end entity first) leads to one of the authorities, now.
    pub fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let (end_entity, intermediates) = chain.split_first().ok_or("no certificate")?;
        self.verifier
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Go's `tls.RequestClientCert`: asks for a certificate (hinting `hints`), does not require
/// one, and checks at the handshake only that the client holds its key.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Serves the default certificate, or an SNI certificate whose name (exact, or `*.` for one
/// leading label) matches the requested server name, as Go's SNI selection does.
#[derive(Debug)]
struct SniResolver {
    default: Arc<CertifiedKey>,
    exact: HashMap<String, Arc<CertifiedKey>>,
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = client_hello.server_name() else {
            return Some(self.default.clone());
        };
        let name = name.to_ascii_lowercase();
        if let Some(key) = self.exact.get(&name) {
            return Some(key.clone());
        }
        let parent = name.split_once('.').map(|(_, rest)| rest);
        Some(
            parent
                .and_then(|p| self.wildcard.get(p))
                .unwrap_or(&self.default)
                .clone(),
        )
    }
}

/// The rustls server configuration: `settings`' versions and suites, this certificate (and
/// the SNI ones), client certificates requested when `cas` has any authority.
pub(crate) fn server_config(
    settings: &TlsSettings,
    (chain, key): Identity,
    sni: Vec<SniIdentity>,
    cas: &ClientCas,
) -> Result<rustls::ServerConfig, ServeError> {
    let provider = Arc::new(provider(settings));
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&settings.versions)
        .map_err(ServeError::Tls)?;
    let builder = if cas.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(cas.client_ca.iter().chain(&cas.requestheader_ca).cloned());
        builder.with_client_cert_verifier(Arc::new(RequestClientCert {
            hints: roots.subjects(),
            algorithms: provider.signature_verification_algorithms,
        }))
    };
    let mut config = if sni.is_empty() {
        builder
            .with_single_cert(chain, key)
            .map_err(ServeError::Tls)?
    } else {
        let certified = |chain, key| -> Result<Arc<CertifiedKey>, ServeError> {
            let signing = provider
                .key_provider
                .load_private_key(key)
                .map_err(ServeError::Tls)?;
            let certified = CertifiedKey::new(chain, signing);
            certified.keys_match().map_err(ServeError::Tls)?;
            Ok(Arc::new(certified))
        };
        let mut resolver = SniResolver {
            default: certified(chain, key)?,
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        };
        for (sni_chain, sni_key, names) in sni {
            let key = certified(sni_chain, sni_key)?;
            for name in names {
                // Earlier flags win, as Go's explicit names do.
                match name.strip_prefix("*.") {
                    Some(parent) => resolver.wildcard.entry(parent.to_owned()),
                    None => resolver.exact.entry(name),
                }
                .or_insert_with(|| key.clone());
            }
        }
        builder.with_cert_resolver(Arc::new(resolver))
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A certificate's subject common name and organizations (Go's x509 user: name and groups).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The `CN`.
    pub common_name: String,
    /// Each `O`, in order.
    pub organizations: Vec<String>,
}

/// Reads the subject of a DER certificate; `None` when it does not parse.
#[must_use]
pub fn subject(cert: &[u8]) -> Option<Subject> {
    let tbs = tbs_fields(cert)?;
    let subject = tbs.subject?;
    let mut out = Subject::default();
    // Name ::= SEQUENCE OF RelativeDistinguishedName (SET OF AttributeTypeAndValue)
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (_, set, rest) = der::next(rdns)?;
        rdns = rest;
        let mut atvs = set;
        while !atvs.is_empty() {
            let (_, atv, rest) = der::next(atvs)?;
            atvs = rest;
            let (tag, oid, value) = der::next(atv)?;
            if tag != der::OID {
                return None;
            }
            let (_, text, _) = der::next(value)?;
            let text = String::from_utf8_lossy(text).into_owned();
            match oid {
                [0x55, 0x04, 0x03] => out.common_name = text,
                [0x55, 0x04, 0x0a] => out.organizations.push(text),
                _ => {}
            }
        }
    }
    Some(out)
}

/// The DNS names of a certificate (its subject alternative names, else its CN), for SNI.
#[must_use]
pub fn certificate_names(cert: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(extensions) = tbs_fields(cert).and_then(|t| t.extensions) {
        // [3] { SEQUENCE OF Extension }
        let mut list = der::next(extensions).map(|(_, l, _)| l).unwrap_or_default();
        while let Some((_, ext, rest)) = der::next(list) {
            list = rest;
            let Some((_, oid, after)) = der::next(ext) else {
                continue;
            };
            if oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            // critical BOOLEAN is optional; the value is the last OCTET STRING.
            let mut value = after;
            let mut octets = None;
            while let Some((tag, v, rest)) = der::next(value) {
                if tag == 0x04 {
                    octets = Some(v);
                }
                value = rest;
            }
            let Some((_, mut general_names, _)) = octets.and_then(der::next) else {
                continue;
            };
            while let Some((tag, v, rest)) = der::next(general_names) {
                general_names = rest;
                if tag == 0x82 {
                    names.push(String::from_utf8_lossy(v).to_ascii_lowercase());
                }
            }
        }
    }
    if names.is_empty()
        && let Some(s) = subject(cert)
        && !s.common_name.is_empty()
    {
        names.push(s.common_name.to_ascii_lowercase());
    }
    names
}

struct Tbs<'a> {
    subject: Option<&'a [u8]>,
    extensions: Option<&'a [u8]>,
}

/// The subject and extensions of a certificate's `TBSCertificate`.
fn tbs_fields(cert: &[u8]) -> Option<Tbs<'_>> {
    let (_, certificate, _) = der::next(cert)?;
    let (_, tbs, _) = der::next(certificate)?;
    let mut fields = Vec::new();
    let mut rest = tbs;
    while let Some((tag, value, after)) = der::next(rest) {
        fields.push((tag, value));
        rest = after;
        if fields.len() > 16 {
            break;
        }
    }
    // Skip the optional [0] version; then serial, signature, issuer, validity, subject.
    let skip = usize::from(fields.first()?.0 == 0xa0);
    let subject = fields.get(skip + 4).map(|(_, v)| *v);
    let extensions = fields.iter().find(|(tag, _)| *tag == 0xa3).map(|(_, v)| *v);
    Some(Tbs {
        subject,
        extensions,
    })
}

/// Just enough DER to walk a certificate: one tag-length-value at a time, bounds-checked.
mod der {
    pub(super) const OID: u8 = 0x06;

    /// The first element of `input`: its tag, its contents and what follows it.
    pub(super) fn next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        if tag & 0x1f == 0x1f {
            return None; // multi-byte tags do not occur in certificates
        }
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 {
                return None;
            }
            let mut len = 0usize;
            for _ in 0..count {
                let (&b, r) = rest.split_first()?;
                len = (len << 8) | usize::from(b);
                rest = r;
            }
            len
        };
        if len > rest.len() {
            return None;
        }
        let (value, after) = rest.split_at(len);
        Some((tag, value, after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn versions_map_onto_rustls() {
        let (s, w) = settings("", &[], &[], &[]).unwrap();
        assert_eq!(s, TlsSettings::default());
        assert!(w.is_empty());
        let (s, _) = settings("VersionTLS13", &[], &[], &[]).unwrap();
        assert_eq!(s.versions.len(), 1);
        assert_eq!(s.versions[0].version, rustls::ProtocolVersion::TLSv1_3);
        let (s, w) = settings("VersionTLS10", &[], &[], &[]).unwrap();
        assert_eq!(s.versions.len(), 2, "TLS 1.2 and 1.3");
        assert!(w[0].contains("--tls-min-version=VersionTLS10"), "{w:?}");
        let err = settings("tls12", &[], &[], &[]).unwrap_err();
        assert_eq!(err.flag, "--tls-min-version");
    }

    #[test]
    fn cipher_suites_map_go_names() {
        // The CIS benchmark's list: two RSA key exchange suites rustls lacks.
        let cis = strings(&[
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_RSA_WITH_AES_128_GCM_SHA256",
        ]);
        let (s, w) = settings("VersionTLS12", &cis, &[], &[]).unwrap();
        let suites = s.cipher_suites.unwrap();
        assert_eq!(
            suites.len(),
            3 + 6,
            "every TLS 1.3 suite, the six ECDHE ones"
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("TLS_RSA_WITH_AES_256_GCM_SHA384") && w[0].contains("RSA key exchange")
        );

        let (s, _) = settings(
            "",
            &strings(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]),
            &[],
            &[],
        )
        .unwrap();
        let tls12: Vec<_> = s
            .cipher_suites
            .unwrap()
            .into_iter()
            .filter(|c| c.version() == &rustls::version::TLS12)
            .collect();
        assert_eq!(tls12.len(), 1);
        assert_eq!(
            tls12[0].suite(),
            rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        );

        // Only insecure (or TLS 1.3) names: TLS 1.3 only, as Go would end up.
        let (s, w) = settings(
            "",
            &strings(&["TLS_RSA_WITH_RC4_128_SHA", "TLS_AES_128_GCM_SHA256"]),
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(s.versions.len(), 1);
        assert!(w.iter().any(|w| w.contains("insecure")), "{w:?}");
        assert!(w.iter().any(|w| w.contains("TLS 1.3 only")), "{w:?}");

        let err = settings(
            "",
            &strings(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "tls_foo"]),
            &[],
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--tls-cipher-suites: unknown cipher suite \"tls_foo\""
        );
    }

    #[test]
    fn curves_and_sni() {
        let (s, w) = settings("", &[], &strings(&["29", "23", "25"]), &[]).unwrap();
        let names: Vec<_> = s.kx_groups.unwrap().iter().map(|g| g.name()).collect();
        assert_eq!(
            names,
            [rustls::NamedGroup::X25519, rustls::NamedGroup::secp256r1]
        );
        assert_eq!(w.len(), 1);
        assert_eq!(
            settings("", &[], &strings(&["7"]), &[]).unwrap_err().flag,
            "--tls-curve-preferences"
        );
        assert_eq!(
            settings("", &[], &strings(&["25"]), &[]).unwrap_err().flag,
            "--tls-curve-preferences"
        );

        let (s, _) = settings(
            "",
            &[],
            &[],
            &strings(&["a.crt,a.key", "b.crt,b.key:*.Foo.com,foo.com"]),
        )
        .unwrap();
        assert_eq!(
            s.sni[0],
            (PathBuf::from("a.crt"), PathBuf::from("a.key"), vec![])
        );
        assert_eq!(s.sni[1].2, ["*.foo.com", "foo.com"]);
        for bad in ["a.crt", "a.crt,:x", ",k", "a,b:x,,y"] {
            assert_eq!(
                settings("", &[], &[], &strings(&[bad])).unwrap_err().flag,
                "--tls-sni-cert-key",
                "{bad}"
            );
        }
    }

    #[test]
    fn subject_and_names_are_read_from_der() {
        let mut params =
            rcgen::CertificateParams::new(vec!["a.example".to_owned(), "b.example".to_owned()])
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "team");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let s = subject(cert.der()).unwrap();
        assert_eq!(s.common_name, "alice");
        assert_eq!(s.organizations, ["team"]);
        assert_eq!(certificate_names(cert.der()), ["a.example", "b.example"]);
        // Garbage and truncation do not panic.
        assert_eq!(subject(b"\x30\x82\xff\xff"), None);
        for n in 0..cert.der().len() {
            let _ = subject(&cert.der()[..n]);
            let _ = certificate_names(&cert.der()[..n]);
        }
    }

    #[test]
    fn cert_dir_keeps_the_self_signed_pair() {
        let dir = tempfile::tempdir().unwrap();
        let bind = IpAddr::from([0, 0, 0, 0]);
        let (first, _) = self_signed(bind, Some(dir.path())).unwrap();
        assert!(dir.path().join("cloud-controller-manager.crt").is_file());
        let key = dir.path().join("cloud-controller-manager.key");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        let (again, _) = self_signed(bind, Some(dir.path())).unwrap();
        assert_eq!(first, again, "reused after a restart");
        let (memory, _) = self_signed(bind, None).unwrap();
        assert_ne!(first, memory);
        // An unwritable --cert-dir is an error naming the flag.
        let file = dir.path().join("a-file");
        std::fs::write(&file, "x").unwrap();
        let err = self_signed(bind, Some(&file)).unwrap_err().to_string();
        assert!(err.contains("a-file"), "{err}");
    }
}
