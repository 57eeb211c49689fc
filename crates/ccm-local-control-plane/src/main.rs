//! `ccm-local-control-plane`: starts a local etcd + kube-apiserver (the test
//! control plane of `ccm-test`), prints how to reach it, and keeps it up until
//! Ctrl-C (SIGINT) or SIGTERM, then stops it and removes its folder.
//!
//! ```text
//! export KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
//! cargo run -p ccm-local-control-plane
//! cargo run -p ccm-local-control-plane -- --kubeconfig ./local.kubeconfig
//! ```
#![forbid(unsafe_code)]

mod cli;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ccm_test::ControlPlane;

const USAGE: &str = "\
usage: ccm-local-control-plane [--kubeconfig FILE]

Starts etcd and kube-apiserver on 127.0.0.1 (binaries from TEST_ASSET_*,
KUBEBUILDER_ASSETS or tools/control-plane/build.sh's folder), prints the
admin kubeconfig path, and runs until Ctrl-C.

  --kubeconfig FILE  also write the admin kubeconfig to FILE once the API
                     server is ready (removed again on exit)
";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut copy_to: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--kubeconfig") => match args.next() {
                Some(path) => copy_to = Some(path.into()),
                None => return usage_error("--kubeconfig needs a FILE"),
            },
            Some("-h" | "--help") => {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => return usage_error(&format!("unknown argument {arg:?}")),
        }
    }

    cli::init_logging();
    let runtime = match cli::runtime(&mut tokio::runtime::Builder::new_current_thread()) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(run(copy_to.as_deref()))
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}\n\n{USAGE}");
    ExitCode::from(2)
}

async fn run(copy_to: Option<&Path>) -> ExitCode {
    let cp = match ControlPlane::start().await {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kubeconfig = match copy_to {
        Some(path) => match copy_kubeconfig(cp.kubeconfig_path(), path) {
            Ok(()) => path.to_owned(),
            Err(e) => {
                eprintln!("error: writing {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => cp.kubeconfig_path().to_owned(),
    };

    println!(
        "Control plane ready in {:.1} s (Kubernetes {}, etcd {}).",
        cp.startup_time().as_secs_f64(),
        ccm_test::KUBERNETES_VERSION,
        ccm_test::ETCD_VERSION
    );
    println!("  API server: {}", cp.server_url());
    println!("  kubeconfig: {}", kubeconfig.display());
    match &cp.binaries().kubectl {
        Some(kubectl) => println!("  kubectl:    {}", kubectl.display()),
        None => println!("  kubectl:    (not found)"),
    }
    println!(
        "  logs:       {}/{{etcd,kube-apiserver}}.log",
        cp.dir().display()
    );
    println!();
    println!("export KUBECONFIG={}", shell_quote(&kubeconfig));
    if let Some(kubectl) = &cp.binaries().kubectl {
        println!("{} get namespaces", shell_quote(kubectl));
    }
    println!();
    println!("Press Ctrl-C to stop; the folder above is then removed.");

    let reason = wait_for_stop().await;
    eprintln!("{reason}: stopping the control plane");
    if let Some(path) = copy_to {
        let _ = std::fs::remove_file(path);
    }
    drop(cp);
    eprintln!("stopped");
    ExitCode::SUCCESS
}

/// Writes the kubeconfig next to `to` first, then renames it, so a reader
/// waiting for `to` never sees half a file.
fn copy_kubeconfig(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut partial = to.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::copy(from, &partial)?;
    std::fs::rename(&partial, to)
}

async fn wait_for_stop() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "interrupted";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = terminate.recv() => "terminated",
    }
}

/// Quotes a path for a POSIX shell when it needs it.
fn shell_quote(path: &Path) -> String {
    let text = path.display().to_string();
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%".contains(c))
    {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;
    use std::path::Path;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(
            shell_quote(Path::new("/tmp/a-b/kubeconfig")),
            "/tmp/a-b/kubeconfig"
        );
        assert_eq!(shell_quote(Path::new("/tmp/a b")), "'/tmp/a b'");
        assert_eq!(shell_quote(Path::new("/tmp/it's")), r"'/tmp/it'\''s'");
    }
}
