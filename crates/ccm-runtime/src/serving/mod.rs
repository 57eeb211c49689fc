//! The endpoint server, a layer of its own below the app (Go splits it the same way:
//! `k8s.io/apiserver`'s secure serving apart from `cloud-provider/app`): [`server`] serves
//! `/healthz`, `/livez`, `/readyz` and `/metrics`; [`tls`] and [`auth`] secure it as Go's
//! `SecureServingOptions` and delegated authentication and authorization do ([`delegation`]
//! builds the latter from the flags); [`options`]
//! holds its flags. This module starts it as the flags say, and reads every file those flags
//! name before anything else starts.

pub mod auth;
pub mod debug;
pub mod delegation;
pub mod options;
pub mod server;
pub mod tls;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use ccm_provider::display_chain;
use ccm_provider::file::FileError;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;

pub use self::debug::DebugEndpoints;
pub use self::options::ServingOptions;
pub use self::server::{EndpointServer, Health, ServeOptions, Serving};
use crate::flags::FlagError;

/// Why the endpoint server could not bind or load its certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The address could not be bound (in use, not local, no permission).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A certificate or key file could not be read.
    #[error(transparent)]
    File(#[from] ccm_provider::file::FileError),
    /// A certificate or key file holds no usable PEM block (or `--cert-dir` cannot be
    /// written).
    #[error("{flag}: cannot load {what} from {}: {reason}", path.display())]
    Pem {
        /// The flag that named the file.
        flag: &'static str,
        /// `"certificate"` or `"private key"`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The self-signed certificate could not be made.
    #[error("cannot generate a self-signed certificate")]
    SelfSigned(#[source] rcgen::Error),
    /// The certificate and key were refused (for example they do not match).
    #[error("invalid TLS certificate or key")]
    Tls(#[source] rustls::Error),
}

/// Why the endpoint server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A flag has a value it cannot take.
    #[error(transparent)]
    Flag(#[from] FlagError),
    /// A file a flag names (or a file named inside it) could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// The endpoints could not be served (e.g. the address is in use).
    #[error("{context}: {}", display_chain(source))]
    Serve {
        /// What was being done: `--secure-port: cannot serve on <address>`.
        context: String,
        /// Why it failed.
        #[source]
        source: ServeError,
    },
}

/// Starts the endpoint server as the flags say (the manager's step before the election):
/// HTTPS with delegated authentication and authorization through `client` (or the
/// `--authentication-kubeconfig` / `--authorization-kubeconfig` clusters), or, with
/// `--insecure-serving`, plain HTTP open to anyone, with a warning. `None` when
/// `--secure-port` is 0.
pub(crate) async fn start_server(
    options: &ServingOptions,
    client: &kube::Client,
    metrics: crate::metrics::Metrics,
    health: Health,
    debug: DebugEndpoints,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<Option<EndpointServer>, StartError> {
    let Some(port) = options.port() else {
        tracing::info!("--secure-port is 0: not serving health and metrics endpoints");
        return Ok(None);
    };
    let (tls_settings, warnings) = options.tls_settings()?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let serving = match (options.tls_cert_file(), options.tls_private_key_file()) {
        _ if options.insecure_serving => Serving::Http,
        (Some(cert_file), Some(key_file)) => Serving::Https {
            cert_file,
            key_file,
        },
        _ => Serving::HttpsSelfSigned,
    };
    let mut serve_options = ServeOptions::new(options.bind_address, port, serving)
        .with_tls(tls_settings)
        .with_cert_dir(options.cert_dir())
        .with_socket_sharing(options.permit_port_sharing, options.permit_address_sharing)
        .with_debug(debug);
    if options.insecure_serving {
        tracing::warn!(
            "--insecure-serving: serving /metrics, /healthz, /livez and /readyz over plain HTTP \
             to anyone, without authentication or authorization. For local demos only; never in a cluster"
        );
    } else {
        let (auth, cas) = delegation::from_options(options, client).await?;
        tracing::info!(
            ?auth,
            "delegated authentication and authorization configured"
        );
        serve_options = serve_options.with_auth(std::sync::Arc::new(auth), cas);
    }
    EndpointServer::start(&serve_options, metrics, health, shutdown)
        .await
        .map_err(|e| serve_error(e, options))
}

/// A server error at startup: a file's error under its flag, anything else under
/// `--secure-port`.
fn serve_error(e: ServeError, options: &ServingOptions) -> StartError {
    match e {
        ServeError::File(e) => StartError::File(e),
        ServeError::Pem {
            flag,
            what,
            path,
            reason,
        } => FlagError {
            flag,
            message: format!("cannot load {what} from {}: {reason}", path.display()),
        }
        .into(),
        source => StartError::Serve {
            context: format!(
                "--secure-port: cannot serve on {}:{}",
                options.bind_address, options.secure_port
            ),
            source,
        },
    }
}

/// Reads every file the serving flags name (the certificate and key, the SNI pairs, the
/// `--cert-dir` pair, the client CAs, the delegated-auth kubeconfigs and the files they
/// name), as Go's options do before anything else starts: a wrong path stops the process
/// at once with its flag named, before the provider is built or the cluster reached. The
/// server reads them again, through the same readers, when it starts. Blocking.
pub(crate) fn check_files(options: &ServingOptions) -> Result<(), StartError> {
    if options.port().is_none() || options.insecure_serving {
        return Ok(());
    }
    let (settings, _) = options.tls_settings()?;
    let serving = match (options.tls_cert_file(), options.tls_private_key_file()) {
        (Some(cert_file), Some(key_file)) => Serving::Https {
            cert_file,
            key_file,
        },
        _ => Serving::HttpsSelfSigned,
    };
    server::load_tls(
        &serving,
        &settings,
        options.bind_address,
        options.cert_dir().as_deref(),
    )
    .map_err(|e| serve_error(e, options))?;
    for (flag, path) in [
        ("--client-ca-file", options.client_ca_file()),
        (
            "--requestheader-client-ca-file",
            options.requestheader_client_ca_file(),
        ),
    ] {
        if let Some(path) = path {
            delegation::load_client_ca(flag, &path)?;
        }
    }
    for (flag, path) in [
        (
            "--authentication-kubeconfig",
            options.authentication_kubeconfig(),
        ),
        (
            "--authorization-kubeconfig",
            options.authorization_kubeconfig(),
        ),
    ] {
        if let Some(path) = path {
            delegation::load_kubeconfig(flag, &path)?;
        }
    }
    Ok(())
}

/// An answer of the endpoint server: `body` as `content_type`, which browsers must not
/// second-guess (`X-Content-Type-Options: nosniff`).
fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
