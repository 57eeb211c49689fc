//! What went wrong, as data. [`SyncError`] says what failed in a sync, one variant per kind
//! of failure, with what the provider or the API server said (a [`Cause`]); [`Failure`]
//! adds what goes wrong without failing the sync (a load balancer left alone, an existence
//! check that failed). Which Warning a failure gets is a pure function of it
//! ([`Failure::event`]): Go's `SyncLoadBalancerFailed` for a failed ensure or clean-up,
//! `UpdateLoadBalancerFailed` for a failed update of the Nodes, `DeleteLoadBalancerFailed`
//! for the load balancer of a Service that is gone, [`REASON_NOT_OWNED`] when the
//! provider would not touch a load balancer that is not the Service's, and
//! [`REASON_INVALID_NODE_SELECTOR`] when the Service's node selector is bad; when the queue tries
//! again is another ([`SyncError::outcome`]). Messages are cut to [`MAX_MESSAGE_BYTES`]
//! first, however long the user-written value they quote. The one function that writes a
//! failure's event, log line and count is the workers' `report`, in `sync`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;

use super::decision::nodes::SelectorError;
use super::decision::wants::go_list;
use super::{
    REASON_DELETE_FAILED, REASON_INVALID_NODE_SELECTOR, REASON_NOT_OWNED, REASON_SHARING_REFUSED,
    REASON_SYNC_FAILED, REASON_UPDATE_FAILED,
};
use crate::workqueue::Outcome;
use ccm_provider::CloudError;

/// The most of a sync's error message that goes into a log line (and an event, which the
/// recorder cuts to 1 KiB anyway).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// `text` cut to [`MAX_MESSAGE_BYTES`] with [`echo::cut`](ccm_provider::echo::cut): a
/// provider's error may quote a user-written annotation of any size, and it is logged on
/// every retry.
pub(crate) fn cut_message(text: String) -> String {
    ccm_provider::echo::cut(text, MAX_MESSAGE_BYTES)
}

/// How long a Service refused a place in a shared load balancer waits before it is looked
/// at again, when no change of its group wakes it sooner: Go's longest backoff.
pub(super) const REFUSAL_RECHECK: Duration = Duration::from_secs(300);

/// What the provider or the API server answered, as far as a report needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cause {
    /// The error and its sources, on one line (cut with the rest of the message).
    detail: String,
    /// The fixed delay the provider asked for ([`CloudError::RetryAfter`]).
    retry_after: Option<Duration>,
    /// The provider would not touch a load balancer that is not the Service's
    /// ([`CloudError::NotOwned`]).
    not_owned: bool,
    /// The load balancer is still coming up ([`CloudError::Provisioning`]).
    provisioning: bool,
    /// The cloud did not answer ([`CloudError::Unavailable`]).
    unavailable: bool,
    /// The Service may not share the load balancer it asks to share: `Some(left_group)`,
    /// whether its ports just left a group's load balancer.
    refused: Option<bool>,
}

impl From<&CloudError> for Cause {
    fn from(err: &CloudError) -> Self {
        Self {
            detail: err.chain_to_string(),
            retry_after: err.retry_after_delay(),
            not_owned: err.is_not_owned(),
            provisioning: err.is_provisioning(),
            unavailable: err.is_unavailable(),
            refused: super::shared::refusal(err),
        }
    }
}

impl From<&kube::Error> for Cause {
    fn from(err: &kube::Error) -> Self {
        Self {
            detail: err.to_string(),
            retry_after: None,
            not_owned: false,
            provisioning: false,
            unavailable: api_unavailable(err),
            refused: None,
        }
    }
}

/// Whether the API server did not answer (no connection, a timeout, a 5xx, a 429): the
/// same write may succeed unchanged once it is back, so the Service is held as for a cloud
/// that did not answer. A write the fence refused (this replica is not the leader) is not.
fn api_unavailable(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) => true,
        kube::Error::Service(source) => !source.is::<crate::client::Fenced>(),
        _ => false,
    }
}

/// Why a sync failed: what failed, and why. The sync is retried (see
/// [`outcome`](Self::outcome)).
#[derive(Debug)]
pub(super) enum SyncError {
    /// Adding our cleanup finalizer failed (before any cloud call).
    AddFinalizer(Cause),
    /// `ensure_load_balancer` failed, or the provider had no load balancers to ensure one.
    Ensure(Cause),
    /// The provider's status is one the API server would refuse: why.
    InvalidStatus(String),
    /// The Service's node selector is bad, so its Nodes cannot be chosen: no cloud call,
    /// the load balancer is left as it is.
    InvalidNodeSelector(SelectorError),
    /// Writing `status.loadBalancer` failed (the new ingress list, or clearing it).
    WriteStatus(Cause),
    /// Asking the cloud whether the load balancer exists, before a clean-up, failed.
    CheckBeforeCleanUp(Cause),
    /// Deleting the load balancer in a clean-up failed; the finalizer stays.
    CleanUp(Cause),
    /// Removing our cleanup finalizer after a clean-up failed.
    RemoveFinalizer(Cause),
    /// `update_load_balancer` with the eligible Nodes (by name) failed, and the load
    /// balancer still exists (or could not be looked up); or the provider refused to
    /// update a load balancer that is not the Service's.
    UpdateHosts {
        /// The Nodes the load balancer was to be given.
        nodes: Vec<String>,
        /// What the provider said.
        cause: Cause,
    },
    /// The provider had no load balancers when the Nodes of one were to be updated (it had
    /// when the controller started). Logged, with no event.
    UpdateUnsupported(Cause),
    /// Deleting the load balancer of `service`, a version gone from the cache or replaced
    /// by another Service of its name, failed (Go's `processLoadBalancerDelete`).
    DeleteGone {
        /// The version whose load balancer it is; its events are about it.
        service: Arc<Service>,
        /// What the provider said.
        cause: Cause,
    },
}

impl SyncError {
    /// What was being done, as the message says it.
    fn context(&self) -> &'static str {
        match self {
            Self::AddFinalizer(_) => "failed to add load balancer cleanup finalizer",
            Self::Ensure(_) => "failed to ensure load balancer",
            Self::InvalidStatus(_) => {
                "the cloud provider returned a load balancer status that cannot be written"
            }
            Self::InvalidNodeSelector(_) => "invalid load balancer node selector",
            Self::WriteStatus(_) => "failed to update load balancer status",
            Self::CheckBeforeCleanUp(_) => "failed to check if load balancer exists before cleanup",
            Self::CleanUp(_) | Self::DeleteGone { .. } => "failed to delete load balancer",
            Self::RemoveFinalizer(_) => "failed to remove load balancer cleanup finalizer",
            Self::UpdateHosts { .. } | Self::UpdateUnsupported(_) => {
                "failed to update load balancer hosts"
            }
        }
    }

    /// What the provider or the API server said, if they said it.
    fn cause(&self) -> Option<&Cause> {
        match self {
            Self::AddFinalizer(cause)
            | Self::Ensure(cause)
            | Self::WriteStatus(cause)
            | Self::CheckBeforeCleanUp(cause)
            | Self::CleanUp(cause)
            | Self::RemoveFinalizer(cause)
            | Self::UpdateHosts { cause, .. }
            | Self::UpdateUnsupported(cause)
            | Self::DeleteGone { cause, .. } => Some(cause),
            Self::InvalidStatus(_) | Self::InvalidNodeSelector(_) => None,
        }
    }

    /// The message for the event and the log: what was being done and why, cut to
    /// [`MAX_MESSAGE_BYTES`].
    pub(super) fn message(&self) -> String {
        let why: Cow<'_, str> = match self {
            Self::InvalidStatus(why) => why.into(),
            Self::InvalidNodeSelector(err) => err.to_string().into(),
            _ => self.cause().map_or("", |c| c.detail.as_str()).into(),
        };
        cut_message(format!("{}: {why}", self.context()))
    }

    /// Whether the provider would not touch a load balancer that is not the Service's.
    fn not_owned(&self) -> bool {
        self.cause().is_some_and(|c| c.not_owned)
    }

    /// Whether the Service may not share the load balancer it asks to share.
    pub(super) fn is_refusal(&self) -> bool {
        self.cause().is_some_and(|c| c.refused.is_some())
    }

    /// Whether the Service was refused and its ports just left a group's load balancer:
    /// its address (the group's) is no longer its own. A Service refused otherwise keeps
    /// what it had (a load balancer of its own from before it asked to share).
    pub(super) fn refusal_leaves_group(&self) -> bool {
        self.cause().is_some_and(|c| c.refused == Some(true))
    }

    /// Whether the ensure ended with the load balancer still coming up
    /// ([`CloudError::Provisioning`]): not a failure to warn about, a look again after the
    /// provider's delay.
    pub(super) fn is_provisioning(&self) -> bool {
        matches!(self, Self::Ensure(cause) if cause.provisioning)
    }

    /// The Service version the failure is about when it is not the cache's.
    pub(super) fn subject(&self) -> Option<&Arc<Service>> {
        match self {
            Self::DeleteGone { service, .. } => Some(service),
            _ => None,
        }
    }

    /// When the work queue tries again: after the delay the provider asked for, or with
    /// the Service's backoff. A load balancer still coming up is a follow-up: once due, its
    /// look is not queued behind every Service added meanwhile. A cloud that did not answer
    /// holds the Service until it answers again (its backoff, or sooner: see
    /// [`held`](crate::workqueue::held)).
    pub(super) fn outcome(&self) -> Outcome {
        // A refusal to share changes only when the group does, and then the group's other
        // members' syncs queue the refused ones again: a retry with backoff would only
        // repeat it (a thousand Services on one key, a thousand Warnings every few seconds).
        if self.is_refusal() {
            return Outcome::RequeueAfter(REFUSAL_RECHECK);
        }
        match self.cause().and_then(|c| c.retry_after) {
            Some(after) if self.is_provisioning() => Outcome::FollowUpAfter(after),
            Some(after) => Outcome::RequeueAfter(after),
            None if self.cause().is_some_and(|c| c.unavailable) => Outcome::Unavailable,
            None => Outcome::Retry,
        }
    }

    /// The Warning this failure is recorded with, if any.
    fn event(&self) -> Option<Event> {
        let message = self.message();
        Some(match self {
            Self::UpdateUnsupported(_) => return None,
            _ if self.is_provisioning() => return None,
            Self::UpdateHosts { .. } if self.not_owned() => Event::new(
                REASON_NOT_OWNED,
                "UpdateLoadBalancer",
                format!(
                    "Error updating load balancer with new hosts: {message}; it was left unchanged"
                ),
            ),
            Self::UpdateHosts { nodes, .. } => Event::new(
                REASON_UPDATE_FAILED,
                "UpdateLoadBalancer",
                format!(
                    "Error updating load balancer with new hosts {}: {message}",
                    go_list(nodes)
                ),
            ),
            Self::InvalidNodeSelector(_) => Event::new(
                REASON_INVALID_NODE_SELECTOR,
                "SyncLoadBalancer",
                format!(
                    "Error syncing load balancer: {message}; the load balancer was left as it is"
                ),
            ),
            Self::DeleteGone { .. } => Event::new(
                REASON_DELETE_FAILED,
                "DeleteLoadBalancer",
                format!("Error deleting load balancer: {message}"),
            ),
            _ if self.is_refusal() => Event::new(
                REASON_SHARING_REFUSED,
                "SyncLoadBalancer",
                format!("Error syncing load balancer: {message}"),
            ),
            // A failed ensure or clean-up: Go's `syncLoadBalancerIfNeeded`.
            _ if self.not_owned() => Event::new(
                REASON_NOT_OWNED,
                "SyncLoadBalancer",
                format!("Error syncing load balancer: {message}; it was left unchanged"),
            ),
            _ => Event::new(
                REASON_SYNC_FAILED,
                "SyncLoadBalancer",
                format!("Error syncing load balancer: {message}"),
            ),
        })
    }
}

/// Something that went wrong with a Service's load balancer, to report.
#[derive(Debug)]
pub(super) enum Failure<'a> {
    /// A sync failed; it is retried.
    Sync(&'a SyncError),
    /// A deletion finished without a load balancer that is not the Service's
    /// ([`CloudError::NotOwned`]): the provider left it alone.
    LeftAlone(&'a CloudError),
    /// After `update_load_balancer` failed, asking whether the load balancer still exists
    /// failed too (the update counts as failed).
    ExistenceUnknown(&'a CloudError),
}

impl Failure<'_> {
    /// The Warning this failure is recorded with, if any.
    pub(super) fn event(&self) -> Option<Event> {
        match self {
            Self::Sync(err) => err.event(),
            Self::LeftAlone(err) => Some(Event::new(
                REASON_NOT_OWNED,
                "DeleteLoadBalancer",
                format!(
                    "Did not delete: {}; it was left alone",
                    cut_message(err.chain_to_string())
                ),
            )),
            Self::ExistenceUnknown(_) => None,
        }
    }
}

/// A Warning event: its reason, its action and its note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Event {
    /// One of the controller's `REASON_*`.
    pub(super) reason: &'static str,
    /// What the controller was doing (`SyncLoadBalancer`, `UpdateLoadBalancer`, …).
    pub(super) action: &'static str,
    /// The message.
    pub(super) note: String,
}

impl Event {
    fn new(reason: &'static str, action: &'static str, note: String) -> Self {
        Self {
            reason,
            action,
            note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloud(err: &CloudError) -> Cause {
        err.into()
    }

    fn event(reason: &'static str, action: &'static str, note: &str) -> Option<Event> {
        Some(Event::new(reason, action, note.to_owned()))
    }

    #[test]
    fn a_load_balancer_still_provisioning_is_looked_at_again_without_a_warning() {
        let pending = SyncError::Ensure(cloud(&CloudError::provisioning(
            "load balancer 4de7 is new",
            Duration::from_secs(2),
        )));
        assert!(pending.is_provisioning());
        assert_eq!(
            pending.outcome(),
            Outcome::FollowUpAfter(Duration::from_secs(2))
        );
        assert_eq!(Failure::Sync(&pending).event(), None);
        // Only an ensure provisions: the same answer to a clean-up is a failure to report.
        let cleanup = SyncError::CleanUp(cloud(&CloudError::provisioning(
            "busy",
            Duration::from_secs(2),
        )));
        assert!(!cleanup.is_provisioning());
        assert_eq!(
            cleanup.outcome(),
            Outcome::RequeueAfter(Duration::from_secs(2))
        );
        assert!(Failure::Sync(&cleanup).event().is_some());
        assert!(!SyncError::Ensure(cloud(&CloudError::msg("boom"))).is_provisioning());
    }

    #[test]
    fn errors_map_to_outcomes() {
        let fixed = SyncError::Ensure(cloud(&CloudError::retry_after(
            "busy",
            Duration::from_secs(3),
        )));
        assert_eq!(
            fixed.outcome(),
            Outcome::RequeueAfter(Duration::from_secs(3))
        );
        assert_eq!(
            fixed.message(),
            "failed to ensure load balancer: busy (retry after 3s)"
        );
        let other = SyncError::Ensure(cloud(&CloudError::msg("boom")));
        assert_eq!(other.outcome(), Outcome::Retry);
        assert_eq!(other.message(), "failed to ensure load balancer: boom");
        assert_eq!(
            Failure::Sync(&other).event(),
            event(
                REASON_SYNC_FAILED,
                "SyncLoadBalancer",
                "Error syncing load balancer: failed to ensure load balancer: boom"
            )
        );
        // A cloud that did not answer: held until it answers again, whatever failed.
        let down = CloudError::unavailable("creating load balancer", std::io::Error::other("503"));
        for err in [
            SyncError::Ensure(cloud(&down)),
            SyncError::CleanUp(cloud(&down)),
            SyncError::CheckBeforeCleanUp(cloud(&down)),
        ] {
            assert_eq!(err.outcome(), Outcome::Unavailable, "{err:?}");
            assert!(Failure::Sync(&err).event().is_some(), "still a Warning");
        }
        // The API server did not answer either: held too; a refusal of the write is not.
        let status = |code: u16| {
            let mut status = kube::core::Status::failure("x", "y");
            status.code = code;
            kube::Error::Api(Box::new(status))
        };
        for (code, outcome) in [
            (503, Outcome::Unavailable),
            (500, Outcome::Unavailable),
            (429, Outcome::Unavailable),
            (409, Outcome::Retry),
            (422, Outcome::Retry),
        ] {
            let err = SyncError::WriteStatus(Cause::from(&status(code)));
            assert_eq!(err.outcome(), outcome, "{code}");
        }
        let refused_by_the_fence = kube::Error::Service(Box::new(crate::client::Fenced {
            since: None,
            renew_deadline: Duration::from_secs(10),
        }));
        assert_eq!(
            SyncError::AddFinalizer(Cause::from(&refused_by_the_fence)).outcome(),
            Outcome::Retry
        );
        let invalid =
            SyncError::InvalidStatus("ingress[0] has neither an IP nor a hostname".into());
        assert_eq!(invalid.outcome(), Outcome::Retry);
        assert_eq!(
            invalid.message(),
            "the cloud provider returned a load balancer status that cannot be written: \
             ingress[0] has neither an IP nor a hostname"
        );
    }

    #[test]
    fn a_load_balancer_that_is_not_the_services_is_its_own_warning_with_the_normal_backoff() {
        let err = SyncError::Ensure(cloud(&CloudError::not_owned(
            "lb-1",
            "annotation example.com/lb-id names it, but it was made for another Service",
        )));
        assert_eq!(err.outcome(), Outcome::Retry, "backoff, not a fixed delay");
        assert_eq!(
            Failure::Sync(&err).event(),
            event(
                REASON_NOT_OWNED,
                "SyncLoadBalancer",
                "Error syncing load balancer: failed to ensure load balancer: load balancer \
                 \"lb-1\" is not this Service's: annotation example.com/lb-id names it, but it \
                 was made for another Service; it was left unchanged"
            )
        );
        // However long what the provider quotes, the message stays one bounded line.
        let long = SyncError::Ensure(cloud(&CloudError::msg("x".repeat(100_000))));
        assert!(long.message().len() < 1100, "{}", long.message().len());
    }

    #[test]
    fn each_failure_names_what_failed() {
        let boom = || cloud(&CloudError::msg("boom"));
        let api = || Cause::from(&kube::Error::LinesCodecMaxLineLengthExceeded);
        let api_detail = kube::Error::LinesCodecMaxLineLengthExceeded.to_string();
        for (err, message) in [
            (
                SyncError::AddFinalizer(api()),
                format!("failed to add load balancer cleanup finalizer: {api_detail}"),
            ),
            (
                SyncError::WriteStatus(api()),
                format!("failed to update load balancer status: {api_detail}"),
            ),
            (
                SyncError::CheckBeforeCleanUp(boom()),
                "failed to check if load balancer exists before cleanup: boom".to_owned(),
            ),
            (
                SyncError::CleanUp(boom()),
                "failed to delete load balancer: boom".to_owned(),
            ),
            (
                SyncError::RemoveFinalizer(api()),
                format!("failed to remove load balancer cleanup finalizer: {api_detail}"),
            ),
        ] {
            assert_eq!(err.message(), message);
            assert_eq!(err.outcome(), Outcome::Retry, "{message}");
            assert!(err.subject().is_none(), "{message}");
            // A failed ensure or clean-up is Go's `SyncLoadBalancerFailed`.
            assert_eq!(
                Failure::Sync(&err).event(),
                event(
                    REASON_SYNC_FAILED,
                    "SyncLoadBalancer",
                    &format!("Error syncing load balancer: {message}")
                )
            );
        }
    }

    #[test]
    fn a_failed_update_of_the_nodes_names_them_unless_refused() {
        let failed = SyncError::UpdateHosts {
            nodes: vec!["a".into(), "b".into()],
            cause: cloud(&CloudError::retry_after("busy", Duration::from_secs(2))),
        };
        assert_eq!(
            failed.outcome(),
            Outcome::RequeueAfter(Duration::from_secs(2))
        );
        assert_eq!(
            Failure::Sync(&failed).event(),
            event(
                REASON_UPDATE_FAILED,
                "UpdateLoadBalancer",
                "Error updating load balancer with new hosts [a b]: failed to update load \
                 balancer hosts: busy (retry after 2s)"
            )
        );
        let refused = SyncError::UpdateHosts {
            nodes: vec!["a".into()],
            cause: cloud(&CloudError::not_owned("lb-1", "another Service's")),
        };
        assert_eq!(refused.outcome(), Outcome::Retry);
        assert_eq!(
            Failure::Sync(&refused).event(),
            event(
                REASON_NOT_OWNED,
                "UpdateLoadBalancer",
                "Error updating load balancer with new hosts: failed to update load balancer \
                 hosts: load balancer \"lb-1\" is not this Service's: another Service's; it \
                 was left unchanged"
            )
        );
        // No load balancers at all: logged, no event.
        let unsupported = SyncError::UpdateUnsupported(cloud(&CloudError::NotImplemented));
        assert!(
            unsupported
                .message()
                .starts_with("failed to update load balancer hosts: ")
        );
        assert_eq!(Failure::Sync(&unsupported).event(), None);
    }

    #[test]
    fn a_failed_deletion_of_a_gone_service_is_about_that_version() {
        let last = Arc::new(Service::default());
        let err = SyncError::DeleteGone {
            service: last.clone(),
            cause: cloud(&CloudError::msg("boom")),
        };
        assert!(err.subject().is_some_and(|s| Arc::ptr_eq(s, &last)));
        assert_eq!(err.outcome(), Outcome::Retry);
        assert_eq!(
            Failure::Sync(&err).event(),
            event(
                REASON_DELETE_FAILED,
                "DeleteLoadBalancer",
                "Error deleting load balancer: failed to delete load balancer: boom"
            )
        );
    }

    #[test]
    fn a_bad_node_selector_is_its_own_warning_with_the_normal_backoff() {
        let bad = super::super::decision::nodes::parse_node_selector("pool in a").unwrap_err();
        let err = SyncError::InvalidNodeSelector(bad.clone());
        assert_eq!(err.outcome(), Outcome::Retry, "backoff");
        assert!(!err.is_provisioning() && err.subject().is_none());
        assert_eq!(
            err.message(),
            format!("invalid load balancer node selector: {bad}")
        );
        assert_eq!(
            Failure::Sync(&err).event(),
            Some(Event::new(
                REASON_INVALID_NODE_SELECTOR,
                "SyncLoadBalancer",
                format!(
                    "Error syncing load balancer: invalid load balancer node selector: {bad}; \
                     the load balancer was left as it is"
                )
            ))
        );
    }

    #[test]
    fn what_goes_wrong_without_failing_the_sync() {
        let foreign = CloudError::not_owned("lb-1", "tagged for cluster other");
        assert_eq!(
            Failure::LeftAlone(&foreign).event(),
            event(
                REASON_NOT_OWNED,
                "DeleteLoadBalancer",
                "Did not delete: load balancer \"lb-1\" is not this Service's: tagged for \
                 cluster other; it was left alone"
            )
        );
        let long = CloudError::not_owned("lb-1", "y".repeat(100_000));
        let note = Failure::LeftAlone(&long).event().unwrap().note;
        assert!(note.len() < 1100, "{}", note.len());
        assert_eq!(
            Failure::ExistenceUnknown(&CloudError::msg("down")).event(),
            None
        );
    }

    #[test]
    fn messages_are_bounded_for_log_lines() {
        assert_eq!(cut_message("short".into()), "short");
        let exact = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(cut_message(exact.clone()), exact);
        let long = cut_message(format!("annotation x: {}", "y".repeat(100_000)));
        assert!(long.starts_with("annotation x: yyy"));
        assert!(long.ends_with("…(99012 more bytes)"), "{}", &long[1000..]);
        assert!(long.len() <= MAX_MESSAGE_BYTES);
        // Cut on a character boundary.
        let wide = cut_message("é".repeat(1000));
        assert!(wide.starts_with(&"é".repeat(502)));
        assert!(wide.ends_with("…(996 more bytes)"), "{wide}");
    }
}
