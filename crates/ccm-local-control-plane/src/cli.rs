//! What both commands (`ccm-local-control-plane`, `ccm-local-cluster`) do before their work:
//! their log on standard error, and the Tokio runtime they run on.

use std::process::ExitCode;

use tokio::runtime::{Builder, Runtime};

/// Sends `tracing` output to standard error, coloured on a terminal: `RUST_LOG` when set,
/// else `ccm_test=info` (how the control plane or the cluster comes up).
pub(crate) fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "ccm_test=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// The runtime `builder` describes, with its I/O and time drivers; or, when it cannot
/// start, the exit code of a command that failed, the reason said on standard error.
pub(crate) fn runtime(builder: &mut Builder) -> Result<Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the Tokio runtime: {e}");
        ExitCode::FAILURE
    })
}
