//! The delegated authenticator and authorizer built from the serving flags, as Go's
//! `DelegatingAuthenticationOptions.ApplyTo` and `DelegatingAuthorizationOptions.ApplyTo`
//! build them: the clients for the reviews (another cluster's when a kubeconfig names one),
//! the client CAs from the flags or from `kube-system/extension-apiserver-authentication`.

use std::path::Path;

use rustls::pki_types::CertificateDer;

use super::StartError;
use super::auth::{ClusterAuthentication, DelegatedAuth, PathMatcher, RequestHeaderConfig};
use super::options::ServingOptions;
use super::tls::{self, ChainVerifier, ClientCas};
use crate::flags::FlagError;

fn flag_error(flag: &'static str, message: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        message: message.into(),
    }
}

/// Reads the delegated-auth kubeconfig `flag` names, with every file it names inlined (see
/// [`crate::files::kubeconfig`]). Blocking: the start-up check calls it as it is, the server
/// off the runtime.
pub(crate) fn load_kubeconfig(
    flag: &'static str,
    path: &Path,
) -> Result<kube::config::Kubeconfig, StartError> {
    crate::files::kubeconfig(flag, path).map_err(|e| match e {
        crate::files::KubeconfigError::Read(e) => StartError::File(e),
        crate::files::KubeconfigError::Invalid { source, .. } => {
            flag_error(flag, format!("{}: {source}", path.display())).into()
        }
    })
}

/// Reads the client CA bundle `flag` names: at least one certificate. Blocking, as
/// [`load_kubeconfig`].
pub(crate) fn load_client_ca(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, StartError> {
    let bytes = ccm_provider::file::read_named(flag, path, tls::MAX_PEM_BYTES)?;
    tls::certs_from_pem(&bytes)
        .map_err(|e| flag_error(flag, format!("{}: {e}", path.display())).into())
}

/// Runs a blocking loader of `flag`'s file off the runtime.
async fn off_runtime<T: Send + 'static>(
    flag: &'static str,
    path: &Path,
    load: fn(&'static str, &Path) -> Result<T, StartError>,
) -> Result<T, StartError> {
    let owned = path.to_owned();
    crate::files::off_thread("read-serving-file", move || load(flag, &owned))
        .await
        .map_err(|e| StartError::from(flag_error(flag, format!("{}: {e}", path.display()))))?
}

/// A client from `--authentication-kubeconfig` / `--authorization-kubeconfig`: the file and
/// every file it names read off the runtime.
async fn client_from_kubeconfig(
    flag: &'static str,
    path: &Path,
) -> Result<kube::Client, StartError> {
    let invalid = |e: String| flag_error(flag, format!("{}: {e}", path.display()));
    let kubeconfig = off_runtime(flag, path, load_kubeconfig).await?;
    let config = crate::files::client_config(kubeconfig)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    Ok(
        crate::client::build_client(config, &crate::client::ApiLayer::new())
            .map_err(|e| invalid(e.to_string()))?,
    )
}

/// Builds the delegated authenticator and authorizer from the flags, as Go's `ApplyTo`
/// does: `client` (the manager's own, unfenced) reviews tokens and access unless the
/// `--authentication-kubeconfig` / `--authorization-kubeconfig` name another cluster, and
/// the client CA and request-header settings missing from the flags are read from
/// `kube-system/extension-apiserver-authentication` unless `--authentication-skip-lookup`.
/// Returns the authorities that client certificates are requested for.
///
/// # Errors
///
/// A flag's value is wrong, or a file it names cannot be read.
pub async fn from_options(
    options: &ServingOptions,
    client: &kube::Client,
) -> Result<(DelegatedAuth, ClientCas), StartError> {
    let token_client = match options.authentication_kubeconfig() {
        Some(path) => client_from_kubeconfig("--authentication-kubeconfig", &path).await?,
        None => client.clone(),
    };
    let access_client = match options.authorization_kubeconfig() {
        Some(path) => client_from_kubeconfig("--authorization-kubeconfig", &path).await?,
        None => client.clone(),
    };
    let [
        allowed_names,
        username_headers,
        uid_headers,
        group_headers,
        extra_prefixes,
    ] = options.request_header_lists();
    let mut cas = ClientCas::default();
    let mut request_header = None;
    if let Some(path) = options.client_ca_file() {
        cas.client_ca = off_runtime("--client-ca-file", &path, load_client_ca).await?;
    }
    if let Some(path) = options.requestheader_client_ca_file() {
        cas.requestheader_ca =
            off_runtime("--requestheader-client-ca-file", &path, load_client_ca).await?;
        request_header = Some(RequestHeaderConfig::new(
            allowed_names,
            username_headers,
            uid_headers,
            group_headers,
            extra_prefixes,
        ));
    }
    let missing = cas.client_ca.is_empty() || request_header.is_none();
    if missing && !options.authentication_skip_lookup {
        match ClusterAuthentication::lookup(&token_client).await {
            Ok(found) => {
                if cas.client_ca.is_empty()
                    && let Some(pem) = &found.client_ca
                {
                    cas.client_ca = tls::certs_from_pem(pem.as_bytes()).map_err(|e| {
                        flag_error("--client-ca-file", format!("client-ca-file of kube-system/extension-apiserver-authentication: {e}"))
                    })?;
                }
                if request_header.is_none()
                    && let Some(pem) = &found.requestheader_ca
                {
                    cas.requestheader_ca = tls::certs_from_pem(pem.as_bytes()).map_err(|e| {
                        flag_error("--requestheader-client-ca-file", format!("requestheader-client-ca-file of kube-system/extension-apiserver-authentication: {e}"))
                    })?;
                    request_header = Some(found.request_header);
                }
                tracing::info!(
                    client_ca = !cas.client_ca.is_empty(),
                    request_header = request_header.is_some(),
                    "read the client CA and request-header settings from kube-system/extension-apiserver-authentication"
                );
            }
            Err(e) if options.authentication_tolerate_lookup_failure => {
                tracing::warn!(error = %e, "error looking up in-cluster authentication configuration; continuing without it (--authentication-tolerate-lookup-failure): client certificates may not authenticate");
            }
            Err(e) => {
                return Err(flag_error(
                    "--authentication-tolerate-lookup-failure",
                    format!(
                        "unable to read kube-system/extension-apiserver-authentication ({e}); {}set --authentication-skip-lookup or --authentication-tolerate-lookup-failure",
                        e.hint()
                    ),
                )
                .into());
            }
        }
    }
    let paths = PathMatcher::new(&options.always_allow_paths())
        .map_err(|m| flag_error("--authorization-always-allow-paths", m))?;
    let mut auth = DelegatedAuth::new(paths)
        .with_token_reviews(token_client, options.authentication_token_webhook_cache_ttl)
        .with_access_reviews(
            access_client,
            options.authorization_webhook_cache_authorized_ttl,
            options.authorization_webhook_cache_unauthorized_ttl,
        );
    if !cas.client_ca.is_empty() {
        let verifier =
            ChainVerifier::new(&cas.client_ca).map_err(|e| flag_error("--client-ca-file", e))?;
        auth = auth.with_client_ca(verifier);
    }
    if let Some(config) = request_header
        && !cas.requestheader_ca.is_empty()
    {
        let verifier = ChainVerifier::new(&cas.requestheader_ca)
            .map_err(|e| flag_error("--requestheader-client-ca-file", e))?;
        auth = auth.with_request_header(verifier, config);
    }
    Ok((auth, cas))
}
