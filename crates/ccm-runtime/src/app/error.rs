//! Why the controller manager stopped: [`AppError`], one variant per kind of start-up or
//! run failure, each message naming the flag, file or step, as the binary prints it.

use ccm_provider::{BoxError, RegistryError, display_chain};

use super::options::FlagError;
use crate::serving;

/// Why the controller manager stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// A flag has a value it cannot take.
    #[error(transparent)]
    Flag(#[from] FlagError),
    /// A file a flag names (or a file named inside it) could not be read: the message
    /// names the flag, the file and why.
    #[error(transparent)]
    File(#[from] ccm_provider::file::FileError),
    /// The provider could not be picked or built.
    #[error("{}", display_chain(.0))]
    Provider(#[from] RegistryError),
    /// The API server could not be reached or configured. The message carries the whole
    /// cause chain.
    #[error("{context}: {}", display_chain(&**source))]
    Kube {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: BoxError,
    },
    /// The provider's `initialize` failed.
    #[error("initializing the cloud provider: {}", .0.chain_to_string())]
    Initialize(#[source] ccm_provider::CloudError),
    /// The endpoints could not be served (e.g. the address is in use).
    #[error("{context}: {}", display_chain(source))]
    Serve {
        /// What was being done: `--secure-port: cannot serve on <address>`.
        context: String,
        /// Why it failed.
        #[source]
        source: serving::ServeError,
    },
    /// A start-up step could not run (a thread could not be started).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A controller failed to start.
    #[error("controller {name}: {}", display_chain(&**source))]
    Controller {
        /// The controller.
        name: String,
        /// Why.
        source: BoxError,
    },
    /// The leader Lease was lost.
    #[error("leader election lost")]
    LostLeadership,
}

impl From<serving::StartError> for AppError {
    fn from(e: serving::StartError) -> Self {
        match e {
            serving::StartError::Flag(e) => Self::Flag(e),
            serving::StartError::File(e) => Self::File(e),
            serving::StartError::Serve { context, source } => Self::Serve { context, source },
        }
    }
}
