//! Where the controller manager's Kubernetes credentials come from, as Go's
//! `clientcmd.BuildConfigFromFlags` finds them: `--kubeconfig`, else the default kubeconfig
//! files, else the in-cluster configuration, with `--master` overriding the server. Every
//! file is read here, through the size and permission guards of `crate::files`, so a bad
//! one stops startup with a message naming the flag or the file.

use ccm_provider::BoxError;

use super::error::AppError;
use super::options::Options;

/// The client configuration `options` name: `--kubeconfig`, else the default files (the
/// paths in `$KUBECONFIG`, else `~/.kube/config`), else the in-cluster configuration;
/// `--master` overrides the server. Errors name the flag or file.
pub(super) async fn kube_config(options: &Options) -> Result<kube::Config, AppError> {
    let err = |context: &str, e: BoxError| AppError::Kube {
        context: context.to_owned(),
        source: e,
    };
    let kubeconfig_path = options
        .kubeconfig
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    tracing::info!(kubeconfig = ?kubeconfig_path, "configuring the Kubernetes client");
    // Every file is read here, with the guards of `files`, and inlined: kube reads none
    // itself but for a token file it re-reads (checked the same way).
    let kubeconfig = if let Some(path) = kubeconfig_path {
        Some(crate::files::kubeconfig("--kubeconfig", path).map_err(kubeconfig_error)?)
    } else {
        let mut merged: Option<kube::config::Kubeconfig> = None;
        for (source, path) in default_kubeconfig_files() {
            let config = match crate::files::kubeconfig(source, &path) {
                // kube then tries the next, and the in-cluster configuration.
                Err(crate::files::KubeconfigError::Read(e))
                    if e.source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                other => other.map_err(kubeconfig_error)?,
            };
            merged = Some(match merged {
                None => config,
                Some(first) => first.merge(config).map_err(|e| {
                    err(
                        &format!("{source}: cannot merge {}", path.display()),
                        Box::new(e),
                    )
                })?,
            });
        }
        merged
    };
    let mut config = match kubeconfig {
        Some(kubeconfig) => crate::files::client_config(kubeconfig).await.map_err(|e| {
            let source = kubeconfig_path.map_or("the default kubeconfig", |_| "--kubeconfig");
            err(&format!("{source}: invalid configuration"), Box::new(e))
        })?,
        None => {
            check_in_cluster_files()?;
            kube::Config::incluster().map_err(|e| {
                err(
                    "no --kubeconfig given and no in-cluster or default configuration found",
                    Box::new(e),
                )
            })?
        }
    };
    if !options.master.is_empty() {
        config.cluster_url = options
            .master
            .parse()
            .map_err(|e| err("--master: invalid URL", Box::new(e)))?;
    }
    Ok(config)
}

/// What the controller manager's client would use with `--kubeconfig path` (the files read,
/// an exec plugin run, the proxy chosen), or the error that would stop its startup, with
/// its causes. For the differential test against client-go's loader
/// (`tests/kubeconfig_differential.rs`); not a stable API. Blocking (as at startup, the
/// files are read and the plugin runs on the calling thread): call it off the runtime.
///
/// # Errors
///
/// The message of the error that would stop startup, causes and all.
#[doc(hidden)]
pub fn describe_kubeconfig(path: &std::path::Path) -> Result<crate::client::ClientUse, String> {
    let chain = |e: &(dyn std::error::Error + 'static)| ccm_provider::display_chain(e);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut flag = std::ffi::OsString::from("--kubeconfig=");
    flag.push(path);
    let options =
        <Options as clap::Parser>::try_parse_from([std::ffi::OsString::from("ccm"), flag])
            .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let config = kube_config(&options).await.map_err(|e| chain(&e))?;
        let factory = crate::client::ClientFactory::new(&config).map_err(|e| {
            chain(&AppError::Kube {
                context: "building the Kubernetes client".into(),
                source: Box::new(e),
            })
        })?;
        factory.describe().await.map_err(|e| chain(&e))
    })
}

/// A kubeconfig that could not be used, as a startup error naming its flag.
fn kubeconfig_error(e: crate::files::KubeconfigError) -> AppError {
    match e {
        crate::files::KubeconfigError::Read(e) => AppError::File(e),
        crate::files::KubeconfigError::Invalid {
            origin,
            path,
            source,
        } => AppError::Kube {
            context: format!("{origin}: invalid {}", path.display()),
            source,
        },
    }
}

/// The service-account files kube reads for the in-cluster configuration (the CA bundle
/// once, the token as it rotates), checked with the guards of `files` first.
fn check_in_cluster_files() -> Result<(), AppError> {
    const DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return Ok(()); // not in a Pod: kube says so
    }
    for (name, limit) in [
        ("token", ccm_provider::file::MAX_TOKEN_BYTES),
        ("ca.crt", ccm_provider::file::MAX_PEM_BYTES),
    ] {
        let path = std::path::Path::new(DIR).join(name);
        ccm_provider::file::read_named("in-cluster configuration", &path, limit)?;
    }
    Ok(())
}

/// The files `kube::Config::infer` reads without `--kubeconfig`, and where each came from:
/// the paths in `$KUBECONFIG`, else `~/.kube/config` (else the in-cluster configuration,
/// whose files the kubelet mounts).
fn default_kubeconfig_files() -> Vec<(&'static str, std::path::PathBuf)> {
    let from_env: Vec<_> = std::env::var_os("KUBECONFIG")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .map(|p| ("$KUBECONFIG", p))
                .collect()
        })
        .unwrap_or_default();
    if !from_env.is_empty() {
        return from_env;
    }
    std::env::var_os("HOME")
        .map(|home| {
            (
                "~/.kube/config",
                std::path::Path::new(&home).join(".kube/config"),
            )
        })
        .into_iter()
        .collect()
}
