//! The errors a provider returns, with the meanings the Go `k8s.io/cloud-provider`
//! contract gives them.
//!
//! The controllers branch on the kind of an error, never on its text: a
//! [`CloudError::InstanceNotFound`] from the lifecycle controller's point of view means "the
//! machine is gone, delete the Node", while a [`CloudError::Provider`] means "the cloud could
//! not answer, try again later". Keep that distinction sharp in a provider: when in doubt,
//! return a [`CloudError::Provider`] error, which never deletes anything.

use std::time::Duration;

/// The boxed source error a [`CloudError::Provider`] carries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result of every provider call.
pub type CloudResult<T> = Result<T, CloudError>;

/// An error from a cloud provider, classified as the controllers need it.
///
/// | variant | Go equivalent | what the controllers do |
/// |---|---|---|
/// | [`NotImplemented`](Self::NotImplemented) | `cloudprovider.NotImplemented` | the legacy adapter falls back (by node name, or "not shut down"); elsewhere a retry |
/// | [`InstanceNotFound`](Self::InstanceNotFound) | `cloudprovider.InstanceNotFound` | lifecycle: the instance is gone, the Node is deleted; node init: retry |
/// | [`ImplementedElsewhere`](Self::ImplementedElsewhere) | `cloudprovider.ImplementedElsewhere` | service: another controller owns this load balancer; success with no status |
/// | [`RetryAfter`](Self::RetryAfter) | `api.RetryError` | retry after exactly that delay, with no backoff growth |
/// | [`Provisioning`](Self::Provisioning) | none (an error: a `SyncLoadBalancerFailed` Warning and a backoff) | service: the load balancer exists and the cloud is still bringing it up; no Warning, no second `EnsuringLoadBalancer`, the Service is looked at again after exactly that delay; elsewhere as `RetryAfter` |
/// | [`NotOwned`](Self::NotOwned) | none (Go has no such rule) | service: the load balancer a user-written hint leads to is not this Service's; a `LoadBalancerNotOwned` Warning, no status; ensure and update retry with backoff, deletion finishes without touching it |
/// | [`Unavailable`](Self::Unavailable) | any other error | as `Provider`, and the controllers that queue work (service, cloud-node) retry before the backoff ends once the cloud answers again |
/// | [`Provider`](Self::Provider) | any other error | a Warning event and a retry with backoff |
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloudError {
    /// The provider does not implement this call.
    #[error("unimplemented")]
    NotImplemented,

    /// The instance does not exist in the cloud (it is gone, not merely stopped).
    #[error("instance not found")]
    InstanceNotFound,

    /// Another controller implements this resource (for example an ingress controller owns
    /// the load balancer).
    #[error("implemented elsewhere")]
    ImplementedElsewhere,

    /// The call did not complete; try again after `after`, not sooner and not with backoff.
    #[error("{message} (retry after {after:?})")]
    RetryAfter {
        /// What happened, for the event and the log.
        message: String,
        /// How long to wait before the next attempt.
        after: Duration,
    },

    /// The load balancer exists and the cloud is still bringing it up (DigitalOcean's `new`,
    /// AWS's `provisioning`): not a failure. Look again after `after`, the provider's
    /// estimate of when it is worth looking (it knows its cloud's activation times, or backs
    /// off by how long the load balancer has been provisioning); build it with
    /// [`CloudError::provisioning`].
    ///
    /// From `ensure_load_balancer`, the service controller writes no status yet, records no
    /// Warning (Go's providers return an error here, which becomes a
    /// `SyncLoadBalancerFailed` Warning on every new load balancer), does not repeat
    /// `EnsuringLoadBalancer` when it comes back, and leaves the Service's backoff as it is;
    /// the worker is free meanwhile, so other Services' load balancers are created while this
    /// one comes up. From any other call it is [`RetryAfter`](Self::RetryAfter).
    #[error("{message} (still provisioning; looking again in {after:?})")]
    Provisioning {
        /// What is being waited for, for the log.
        message: String,
        /// How long until the next look.
        after: Duration,
    },

    /// The load balancer that something a user can write on the Service leads to (an ID
    /// annotation, a name hint) is not this Service's: the provider's own record of its owner
    /// (a tag or description derived from the Service's UID, the cluster's tag) names another
    /// Service or another cluster, or the hint cannot name a load balancer this provider made
    /// (a malformed or oversized ID). The provider did not touch it.
    ///
    /// From `ensure_load_balancer` and `update_load_balancer`: a refusal; the service
    /// controller reports it as a `LoadBalancerNotOwned` Warning on the Service, writes no
    /// status and retries with the normal backoff. From `get_load_balancer` and
    /// `ensure_load_balancer_deleted`: "nothing of this Service's" (after deleting whatever
    /// *is* the Service's own, found without the hint); the controller removes the
    /// finalizer and says in a Warning that the load balancer was left alone. Build it with
    /// [`CloudError::not_owned`], which bounds both texts.
    #[error("load balancer {load_balancer:?} is not this Service's: {conflict}")]
    NotOwned {
        /// The load balancer the hint leads to, as the hint names it (an ID, a name). It is
        /// user-written: shown quoted and escaped, cut by [`CloudError::not_owned`].
        load_balancer: String,
        /// What conflicts: the hint that led there and whose the load balancer is, e.g.
        /// `annotation example.com/load-balancer-id names it, but it was made for another
        /// Service`.
        conflict: String,
    },

    /// The cloud did not answer: the connection was refused or reset, the call timed out,
    /// the API answered with a server error (5xx). The same call may succeed unchanged once
    /// the cloud is back. Handled as [`Provider`](Self::Provider) (a Warning and a retry
    /// with backoff, never a deletion), and the queue holds the work: a later success of
    /// the same kind of call, or a probe, ends the backoff early, so everything a cloud
    /// outage held back converges within seconds of its end. Return it only for failures
    /// that say nothing about the request itself; a refusal (4xx) is a `Provider` error.
    /// Build it with [`CloudError::unavailable`].
    #[error("{context}")]
    Unavailable {
        /// What the provider was doing, e.g. `"creating load balancer"`.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// Any other failure of the cloud or the provider, with context.
    #[error("{context}")]
    Provider {
        /// What the provider was doing, e.g. `"listing droplets"`.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl CloudError {
    /// A [`CloudError::Provider`] error with a message and no source.
    ///
    /// ```
    /// use ccm_core::provider::CloudError;
    /// let err = CloudError::msg("the API answered 503");
    /// assert_eq!(err.to_string(), "the API answered 503");
    /// ```
    pub fn msg(context: impl Into<String>) -> Self {
        Self::Provider {
            context: context.into(),
            source: None,
        }
    }

    /// A [`CloudError::Provider`] error: `context` says what the provider was doing, `source`
    /// is the error that stopped it.
    ///
    /// ```
    /// use ccm_core::provider::CloudError;
    /// let io = std::io::Error::other("connection reset");
    /// let err = CloudError::provider("listing instances", io);
    /// assert_eq!(err.to_string(), "listing instances");
    /// assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "connection reset");
    /// ```
    pub fn provider(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Provider {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// A [`CloudError::Unavailable`] error: the cloud did not answer while the provider was
    /// doing `context`; `source` says how.
    ///
    /// ```
    /// use ccm_core::provider::CloudError;
    /// let reset = std::io::Error::other("connection reset");
    /// let err = CloudError::unavailable("creating load balancer", reset);
    /// assert!(err.is_unavailable());
    /// assert_eq!(err.chain_to_string(), "creating load balancer: connection reset");
    /// assert!(!CloudError::msg("invalid size").is_unavailable());
    /// ```
    pub fn unavailable(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// A [`CloudError::RetryAfter`] error (Go's `api.NewRetryError(msg, after)`).
    pub fn retry_after(message: impl Into<String>, after: Duration) -> Self {
        Self::RetryAfter {
            message: message.into(),
            after,
        }
    }

    /// A [`CloudError::Provisioning`] error: the load balancer is still coming up; look
    /// again after `after`.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use ccm_core::provider::CloudError;
    /// let err = CloudError::provisioning("load balancer 4de7 is new", Duration::from_secs(2));
    /// assert!(err.is_provisioning());
    /// assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(2)));
    /// ```
    pub fn provisioning(message: impl Into<String>, after: Duration) -> Self {
        Self::Provisioning {
            message: message.into(),
            after,
        }
    }

    /// A [`CloudError::NotOwned`] error: `load_balancer` is what the hint names (cut to 128
    /// bytes), `conflict` what conflicts (cut to 512), with [`echo::cut`](crate::echo::cut);
    /// a cut text ends with `…` and the number of bytes cut, so a 100 kB annotation value never reaches an event or a log line
    /// whole.
    ///
    /// ```
    /// use ccm_core::provider::CloudError;
    /// let err = CloudError::not_owned(
    ///     "lb-42",
    ///     "annotation example.com/load-balancer-id names it, but it was made for another Service",
    /// );
    /// assert!(err.is_not_owned());
    /// assert_eq!(
    ///     err.to_string(),
    ///     "load balancer \"lb-42\" is not this Service's: annotation example.com/load-balancer-id \
    ///      names it, but it was made for another Service"
    /// );
    /// let long = CloudError::not_owned("x".repeat(100_000), "malformed ID");
    /// assert!(long.to_string().len() < 256);
    /// ```
    pub fn not_owned(load_balancer: impl Into<String>, conflict: impl Into<String>) -> Self {
        Self::NotOwned {
            load_balancer: crate::echo::cut(load_balancer.into(), NOT_OWNED_NAME_MAX),
            conflict: crate::echo::cut(conflict.into(), NOT_OWNED_CONFLICT_MAX),
        }
    }

    /// Whether this is [`CloudError::NotImplemented`].
    pub fn is_not_implemented(&self) -> bool {
        matches!(self, Self::NotImplemented)
    }

    /// Whether this is [`CloudError::InstanceNotFound`].
    pub fn is_instance_not_found(&self) -> bool {
        matches!(self, Self::InstanceNotFound)
    }

    /// Whether this is [`CloudError::ImplementedElsewhere`].
    pub fn is_implemented_elsewhere(&self) -> bool {
        matches!(self, Self::ImplementedElsewhere)
    }

    /// Whether this is [`CloudError::NotOwned`].
    pub fn is_not_owned(&self) -> bool {
        matches!(self, Self::NotOwned { .. })
    }

    /// Whether this is [`CloudError::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// Whether this is [`CloudError::Provisioning`].
    pub fn is_provisioning(&self) -> bool {
        matches!(self, Self::Provisioning { .. })
    }

    /// The fixed delay a [`CloudError::RetryAfter`] or a [`CloudError::Provisioning`] asks
    /// for; `None` for every other kind.
    pub fn retry_after_delay(&self) -> Option<Duration> {
        match self {
            Self::RetryAfter { after, .. } | Self::Provisioning { after, .. } => Some(*after),
            _ => None,
        }
    }

    /// The error and all its sources joined with `": "`, for events and logs.
    ///
    /// ```
    /// use ccm_core::provider::CloudError;
    /// let err = CloudError::provider("creating load balancer", std::io::Error::other("quota exceeded"));
    /// assert_eq!(err.chain_to_string(), "creating load balancer: quota exceeded");
    /// ```
    pub fn chain_to_string(&self) -> String {
        display_chain(self)
    }
}

/// How many bytes of the load balancer's name or ID [`CloudError::not_owned`] keeps.
const NOT_OWNED_NAME_MAX: usize = 128;

/// How many bytes of the conflict [`CloudError::not_owned`] keeps.
const NOT_OWNED_CONFLICT_MAX: usize = 512;

/// An error and all its sources joined with `": "`, the one-line form used in events, logs
/// and startup errors.
pub fn display_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        out.push_str(": ");
        out.push_str(&err.to_string());
        source = err.source();
    }
    out
}

/// Adds context to any error, turning it into a [`CloudError::Provider`].
///
/// ```
/// use ccm_core::provider::{CloudError, ResultExt};
/// fn parse(s: &str) -> Result<u32, CloudError> {
///     s.parse::<u32>().context("parsing the instance ID")
/// }
/// assert_eq!(parse("x").unwrap_err().chain_to_string(),
///            "parsing the instance ID: invalid digit found in string");
/// ```
pub trait ResultExt<T> {
    /// Wraps the error with `context`.
    fn context(self, context: impl Into<String>) -> CloudResult<T>;

    /// Wraps the error with a context computed only on failure.
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> CloudResult<T>;
}

impl<T, E: Into<BoxError>> ResultExt<T> for Result<T, E> {
    fn context(self, context: impl Into<String>) -> CloudResult<T> {
        self.map_err(|e| CloudError::provider(context, e))
    }

    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> CloudResult<T> {
        self.map_err(|e| CloudError::provider(f(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_classified() {
        assert!(CloudError::NotImplemented.is_not_implemented());
        assert!(CloudError::InstanceNotFound.is_instance_not_found());
        assert!(CloudError::ImplementedElsewhere.is_implemented_elsewhere());
        assert!(CloudError::not_owned("lb", "another Service's").is_not_owned());
        assert!(!CloudError::msg("x").is_not_owned());
        assert!(!CloudError::msg("x").is_instance_not_found());
        assert!(CloudError::unavailable("x", std::io::Error::other("reset")).is_unavailable());
        assert!(!CloudError::msg("x").is_unavailable());
        assert_eq!(
            CloudError::retry_after("busy", Duration::from_secs(7)).retry_after_delay(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(CloudError::msg("x").retry_after_delay(), None);
    }

    #[test]
    fn messages_match_go() {
        // The Go errors' texts, so logs read the same after a migration.
        assert_eq!(CloudError::NotImplemented.to_string(), "unimplemented");
        assert_eq!(
            CloudError::InstanceNotFound.to_string(),
            "instance not found"
        );
        assert_eq!(
            CloudError::ImplementedElsewhere.to_string(),
            "implemented elsewhere"
        );
        assert_eq!(
            CloudError::retry_after("rate limited", Duration::from_secs(2)).to_string(),
            "rate limited (retry after 2s)"
        );
    }

    #[test]
    fn not_owned_bounds_and_escapes_what_a_user_wrote() {
        let err = CloudError::not_owned("a\nb", "tagged for cluster \"other\"");
        assert_eq!(
            err.to_string(),
            "load balancer \"a\\nb\" is not this Service's: tagged for cluster \"other\""
        );
        let CloudError::NotOwned {
            load_balancer,
            conflict,
        } = CloudError::not_owned("é".repeat(200), "c".repeat(100_000))
        else {
            unreachable!()
        };
        // Bytes, the note included, cut on a character boundary.
        assert_eq!(
            load_balancer,
            format!("{}…(292 more bytes)", "é".repeat(54))
        );
        assert!(load_balancer.len() <= NOT_OWNED_NAME_MAX);
        assert!(conflict.len() <= NOT_OWNED_CONFLICT_MAX);
        assert!(conflict.starts_with(&"c".repeat(NOT_OWNED_CONFLICT_MAX - 22)));
        assert!(conflict.ends_with("…(99510 more bytes)"), "{conflict}");
        // At the limit: nothing cut.
        let exact = "x".repeat(NOT_OWNED_NAME_MAX);
        assert!(
            matches!(CloudError::not_owned(exact.clone(), ""), CloudError::NotOwned { load_balancer, .. } if load_balancer == exact)
        );
    }

    #[test]
    fn chain_includes_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let err = CloudError::provider("calling the API", Outer(std::io::Error::other("inner")));
        assert_eq!(err.chain_to_string(), "calling the API: outer: inner");
    }
}
