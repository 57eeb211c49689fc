//! The process's log output, and its verbosity changed while it runs: Go's `/debug/flags/v`
//! (a `PUT` of a klog level) sets the filter again through a `tracing_subscriber` reload
//! layer. [`init`] installs the global subscriber once; [`verbosity`] is the handle the
//! endpoint server uses, `None` when this process did not install it (a test harness, or a
//! binary with a subscriber of its own).
//!
//! The filter is a [`Targets`] list (`info,kube_client=warn,ccm_runtime::controllers=debug`),
//! which is what `--v`, `--vmodule` and `RUST_LOG` give: per-target levels. `EnvFilter`'s span
//! and field filters are not taken: its matching code and the regular expressions it compiles
//! at start are left out of the binary and the process.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Registry, reload};

use crate::flags::goflag::klog_level;

/// The filter directives for a klog level: built by the options (`--v` and `--vmodule`).
type Directives = dyn Fn(u8) -> String + Send + Sync;

/// The running process's log verbosity; cloning shares it. See the [module docs](self).
#[derive(Clone)]
pub struct Verbosity {
    inner: Arc<Inner>,
}

struct Inner {
    handle: reload::Handle<Targets, Registry>,
    level: AtomicU8,
    directives: Box<Directives>,
}

impl std::fmt::Debug for Verbosity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verbosity")
            .field("level", &self.level())
            .finish_non_exhaustive()
    }
}

impl Verbosity {
    /// The current klog level.
    #[must_use]
    pub fn level(&self) -> u8 {
        self.inner.level.load(Ordering::Relaxed)
    }

    /// Sets the level from `value` as Go's `GlogSetter` does (an integer, e.g. `4`),
    /// answering Go's texts: `successfully set klog.logging.verbosity to 4`, or the error.
    /// A filter from `RUST_LOG` is replaced by the level's directives.
    pub fn set(&self, value: &str) -> Result<String, String> {
        let value = value.trim();
        let level = klog_level(value)
            .map_err(|e| format!("failed set klog.logging.verbosity {value}: {e}"))?;
        let filter = (self.inner.directives)(level)
            .parse::<Targets>()
            .map_err(|e| format!("failed set klog.logging.verbosity {value}: {e}"))?;
        self.inner
            .handle
            .reload(filter)
            .map_err(|e| format!("failed set klog.logging.verbosity {value}: {e}"))?;
        self.inner.level.store(level, Ordering::Relaxed);
        tracing::info!(level, "log verbosity changed");
        Ok(format!(
            "successfully set klog.logging.verbosity to {value}"
        ))
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

static VERBOSITY: OnceLock<Verbosity> = OnceLock::new();

/// Installs the global subscriber writing to standard error in `format`, filtered by
/// `RUST_LOG` when set, else by `directives(level)`; returns the handle (also kept for
/// [`verbosity`]). `None` when a global subscriber was installed before.
pub fn init(
    format: Format,
    level: u8,
    directives: impl Fn(u8) -> String + Send + Sync + 'static,
) -> Option<Verbosity> {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|text| text.parse::<Targets>().ok())
        .or_else(|| directives(level).parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let installed = match format {
        Format::Text => tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init(),
        Format::Json => tracing_subscriber::registry()
            .with(filter)
            .with(fmt.json())
            .try_init(),
    };
    installed.ok()?;
    let verbosity = Verbosity {
        inner: Arc::new(Inner {
            handle,
            level: AtomicU8::new(level),
            directives: Box::new(directives),
        }),
    };
    Some(VERBOSITY.get_or_init(|| verbosity).clone())
}

/// The handle [`init`] made, if it made one in this process.
#[must_use]
pub fn verbosity() -> Option<Verbosity> {
    VERBOSITY.get().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle over a reload layer of its own, not installed globally.
    fn local(level: u8) -> (Verbosity, impl tracing::Subscriber) {
        let (filter, handle) =
            reload::Layer::new(Targets::new().with_default(tracing::Level::INFO));
        let subscriber = tracing_subscriber::registry().with(filter);
        let verbosity = Verbosity {
            inner: Arc::new(Inner {
                handle,
                level: AtomicU8::new(level),
                directives: Box::new(|v| if v >= 4 { "debug" } else { "info" }.to_owned()),
            }),
        };
        (verbosity, subscriber)
    }

    #[test]
    fn set_changes_the_filter_and_answers_go_s_text() {
        let (v, subscriber) = local(0);
        tracing::subscriber::with_default(subscriber, || {
            assert!(!tracing::enabled!(tracing::Level::DEBUG));
            assert_eq!(
                v.set("4\n").unwrap(),
                "successfully set klog.logging.verbosity to 4"
            );
            assert_eq!(v.level(), 4);
            tracing::callsite::rebuild_interest_cache();
            assert!(tracing::enabled!(tracing::Level::DEBUG));
            let err = v.set("loud").unwrap_err();
            assert!(
                err.starts_with("failed set klog.logging.verbosity loud: "),
                "{err}"
            );
            assert_eq!(v.level(), 4, "unchanged by a bad value");
        });
    }
}
