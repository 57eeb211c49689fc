//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`
//! does it, so a Go CCM and this one can even share a Lease during a migration.
//!
//! A candidate takes the Lease when it has no holder, or when its record has not changed for
//! `lease_duration` as measured on the candidate's own clock (never by comparing the
//! holder's timestamps with ours, so clock skew cannot cause two leaders). The leader renews
//! every `retry_period`; if it cannot renew for `renew_deadline`, it stops leading. On
//! shutdown it releases the Lease (no holder, a one-second duration) so a standby takes over
//! at its next try instead of waiting out the lease. While leading, renewals reuse the
//! Lease's `resourceVersion` instead of reading it first: half the requests of client-go.
//!
//! The elector keeps a [`Fence`] up to date ([`LeaderElector::with_fence`]): each
//! successful acquisition or renewal opens it until the renew deadline after the attempt
//! started; seeing another holder, or releasing, closes it. The API client and the cloud
//! provider check that fence before every write, so a leader that was paused past its lease
//! does nothing when it wakes up, before it has even noticed the loss.
//!
//! It also keeps a [`LeaderHealthz`] up to date ([`LeaderElector::with_healthz`]), the
//! `/healthz` check of client-go's `HealthzAdaptor`: failing while this replica leads and
//! has not renewed for the lease duration plus a tolerance (Go's cloud-controller-manager
//! uses 20 s), so a leader whose renewals are wedged is restarted by its liveness probe.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Fence;

/// Where the Lease is and how it is held.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LeaderElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's identity, unique among replicas (`hostname_random`).
    pub identity: String,
    /// How long a standby waits after the last change of the record before taking over.
    pub lease_duration: Duration,
    /// How long the leader tries to renew before it gives up.
    pub renew_deadline: Duration,
    /// The pause between tries.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// A configuration with Go's defaults (15s / 10s / 2s) and a fresh identity.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Sets the durations.
    pub fn with_timing(
        mut self,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        self.lease_duration = lease_duration;
        self.renew_deadline = renew_deadline;
        self.retry_period = retry_period;
        self
    }

    setters! {
        /// Sets the identity.
        pub fn with_identity(identity: impl Into<String>);
    }
}

/// `hostname_` followed by 16 random hex digits, like Go's `hostname_UUID`.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "ccm".to_owned());
    let mut bytes = [0u8; 8];
    let random = ring::rand::SystemRandom::new();
    if ring::rand::SecureRandom::fill(&random, &mut bytes).is_err() {
        // No system randomness: the process ID and the time still separate replicas.
        let seed = u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        bytes = seed.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{host}_{hex}")
}

/// The tolerance of Go's cloud-controller-manager's leader-election health check
/// (`NewLeaderHealthzAdaptor(time.Second * 20)`).
pub const MAX_TOLERABLE_EXPIRED_LEASE: Duration = Duration::from_secs(20);

/// The leader-election liveness check (client-go's `HealthzAdaptor`): passes while this
/// replica does not lead, and while it leads and last renewed the Lease less than the lease
/// duration plus `tolerance` ago. Cloning shares it.
#[derive(Clone, Debug)]
pub struct LeaderHealthz {
    tolerance: Duration,
    state: Arc<Mutex<HealthzState>>,
}

#[derive(Debug, Default)]
struct HealthzState {
    /// The Lease (for the message) and its duration; set by the elector.
    lease: Option<(String, Duration)>,
    /// When this replica last acquired or renewed the Lease; `None` while not leading.
    renewed: Option<Instant>,
}

impl LeaderHealthz {
    /// A check tolerating `tolerance` past the lease duration ([`MAX_TOLERABLE_EXPIRED_LEASE`]
    /// in Go's CCM).
    #[must_use]
    pub fn new(tolerance: Duration) -> Self {
        Self {
            tolerance,
            state: Arc::default(),
        }
    }

    fn set_lease(&self, name: &str, duration: Duration) {
        self.state.lock().lease = Some((name.to_owned(), duration));
    }

    fn renewed(&self, at: Instant) {
        self.state.lock().renewed = Some(at);
    }

    fn not_leading(&self) {
        self.state.lock().renewed = None;
    }

    /// `Ok` unless this replica leads and its last renewal is older than the lease duration
    /// plus the tolerance (Go's message: `failed election to renew leadership on lease X`).
    pub fn check(&self) -> Result<(), String> {
        let state = self.state.lock();
        let (Some(renewed), Some((name, duration))) = (state.renewed, &state.lease) else {
            return Ok(());
        };
        let since = renewed.elapsed();
        if since > *duration + self.tolerance {
            return Err(format!(
                "failed election to renew leadership on lease {name} (last renewed {since:.0?} ago)"
            ));
        }
        Ok(())
    }
}

/// How leading ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeadershipEnd {
    /// The token was cancelled (shutdown); the Lease was released.
    Shutdown,
    /// The Lease could not be renewed within the renew deadline, or another candidate holds it.
    Lost,
}

/// One candidate for the Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    /// The record last seen, and when (on our clock) it last changed.
    observed: Option<(LeaseSpec, Instant)>,
    /// The Lease as last written or read by us, for updates without a read.
    current: Option<Lease>,
    /// Open while we can prove we hold the Lease.
    fence: Fence,
    /// The `/healthz` check, if any.
    healthz: Option<LeaderHealthz>,
    /// Where `leader_election_slowpath_total` is counted, if anywhere.
    metrics: Option<crate::metrics::Metrics>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn same_record(a: &LeaseSpec, b: &LeaseSpec) -> bool {
    a.holder_identity == b.holder_identity
        && a.renew_time == b.renew_time
        && a.acquire_time == b.acquire_time
        && a.lease_duration_seconds == b.lease_duration_seconds
        && a.lease_transitions == b.lease_transitions
}

impl LeaderElector {
    /// A candidate using `client`. Give it a client of its own, without the fence (see
    /// [`ApiLayer::for_leader_election`](crate::client::ApiLayer::for_leader_election)):
    /// its renewals are what opens the fence.
    pub fn new(client: Client, config: LeaderElectionConfig) -> Self {
        let fence = Fence::leased(config.renew_deadline);
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            current: None,
            fence,
            healthz: None,
            metrics: None,
        }
    }

    /// Counts each renewal that could not write from the copy it holds and had to read the
    /// Lease again in `metrics`' `leader_election_slowpath_total{name}` (client-go's).
    #[must_use]
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        metrics.count_leader_slowpath(&self.config.name, 0);
        self.metrics = Some(metrics);
        self
    }

    /// Keeps `healthz` up to date: renewed at each successful acquisition or renewal, not
    /// leading when another candidate holds the Lease or on release.
    #[must_use]
    pub fn with_healthz(mut self, healthz: LeaderHealthz) -> Self {
        healthz.set_lease(&self.config.name, self.config.lease_duration);
        self.healthz = Some(healthz);
        self
    }

    setters! {
        /// Keeps `fence` up to date instead of a fence of its own: open until the renew
        /// deadline after the start of each successful acquisition or renewal, closed when
        /// another candidate holds the Lease or on release. Build it with
        /// [`Fence::leased`] and this elector's renew deadline.
        #[must_use]
        pub fn with_fence(fence: Fence);
    }

    /// The fence this elector keeps.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .and_then(|(spec, _)| spec.holder_identity.as_deref())
            == Some(self.config.identity.as_str())
    }

    fn observe(&mut self, spec: &LeaseSpec) {
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(old, _)| !same_record(old, spec));
        if changed {
            self.observed = Some((spec.clone(), Instant::now()));
        }
    }

    /// One attempt to acquire or renew; `Ok(true)` when we hold the Lease afterwards. The
    /// fence opens on `Ok(true)` (until the renew deadline after this call started) and
    /// closes on `Ok(false)`; an error leaves it to expire.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let started = Instant::now();
        let result = self.attempt().await;
        match result {
            Ok(true) => {
                self.fence.renewed(started);
                if let Some(healthz) = &self.healthz {
                    healthz.renewed(Instant::now());
                }
            }
            Ok(false) => {
                self.fence.close();
                if let Some(healthz) = &self.healthz {
                    healthz.not_leading();
                }
            }
            Err(_) => {}
        }
        result
    }

    async fn attempt(&mut self) -> Result<bool, kube::Error> {
        let duration_secs =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        // While leading, renew from the copy we wrote last; read only after a conflict.
        if self.is_leader()
            && let Some(mut lease) = self.current.clone()
        {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(now());
            spec.lease_duration_seconds = Some(duration_secs);
            match self.replace(&lease).await {
                Ok(written) => {
                    self.hold_written(written);
                    return Ok(true);
                }
                // Fall through to a fresh read: client-go's slow path.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    if let Some(metrics) = &self.metrics {
                        metrics.count_leader_slowpath(&self.config.name, 1);
                    }
                }
                Err(err) => return Err(err),
            }
        }

        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let t = now();
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(t.clone()),
                    renew_time: Some(t),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    self.hold_written(written);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false), // someone else created it
                Err(err) => Err(err),
            };
        };
        let old = lease.spec.clone().unwrap_or_default();
        self.observe(&old);
        let held_by_other = old
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty())
            && !self.is_leader();
        let observed_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, t)| *t);
        let their_duration =
            Duration::from_secs(old.lease_duration_seconds.unwrap_or(duration_secs).max(1) as u64);
        if held_by_other && observed_at.elapsed() < their_duration.max(self.config.lease_duration) {
            self.current = None;
            return Ok(false);
        }
        let t = now();
        let mut new = lease.clone();
        let spec = new.spec.get_or_insert_with(LeaseSpec::default);
        if self.is_leader() {
            spec.renew_time = Some(t);
        } else {
            spec.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1);
            spec.acquire_time = Some(t.clone());
            spec.renew_time = Some(t);
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(duration_secs);
        match self.replace(&new).await {
            Ok(written) => {
                self.hold_written(written);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Writes `lease` over the Lease (a conflict if it changed since it was read).
    async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        let params = PostParams::default();
        self.api.replace(&self.config.name, &params, lease).await
    }

    /// Takes `written`, the Lease as this candidate just wrote it, as the one it holds.
    fn hold_written(&mut self, written: Lease) {
        if let Some(spec) = &written.spec {
            self.observe(spec);
        }
        self.current = Some(written);
    }

    /// Waits until this candidate holds the Lease. Returns `false` if `cancel` fired first.
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(identity = %self.config.identity, lease = %self.config.name, "acquired leadership");
                    return true;
                }
                Ok(false) => {}
                Err(err) => tracing::warn!(error = %err, "error acquiring the leader lease"),
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.retry_period) => {}
                () = cancel.cancelled() => return false,
            }
        }
    }

    /// Renews the Lease until `cancel` fires (then releases it) or renewing fails for the
    /// renew deadline (then returns [`LeadershipEnd::Lost`] at once). `on_renew` is called with
    /// each attempt's success, for the readiness check.
    pub async fn hold(
        &mut self,
        cancel: &CancellationToken,
        on_renew: impl Fn(bool),
    ) -> LeadershipEnd {
        let mut last_renewed = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.retry_period) => {}
                () = cancel.cancelled() => {
                    self.release().await;
                    return LeadershipEnd::Shutdown;
                }
            }
            // Counted from the start of the attempt, as the fence counts it.
            let attempt_started = Instant::now();
            let ok = match tokio::time::timeout(
                self.config.renew_deadline,
                self.try_acquire_or_renew(),
            )
            .await
            {
                Ok(Ok(true)) => true,
                Ok(Ok(false)) => {
                    tracing::error!(identity = %self.config.identity, "another candidate holds the leader lease");
                    on_renew(false);
                    return LeadershipEnd::Lost;
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "error renewing the leader lease");
                    false
                }
                Err(_) => false,
            };
            on_renew(ok);
            if ok {
                last_renewed = attempt_started;
            } else if last_renewed.elapsed() >= self.config.renew_deadline {
                tracing::error!(identity = %self.config.identity, "failed to renew the leader lease within the renew deadline");
                self.fence.close();
                return LeadershipEnd::Lost;
            }
        }
    }

    /// Gives the Lease up if we hold it, so a standby can take over at once.
    pub async fn release(&mut self) {
        self.fence.close();
        if let Some(healthz) = &self.healthz {
            healthz.not_leading();
        }
        if !self.is_leader() {
            return;
        }
        let Some(mut lease) = self.current.clone() else {
            return;
        };
        let t = now();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(t.clone());
        spec.acquire_time = Some(t);
        match self.replace(&lease).await {
            Ok(_) => tracing::info!(identity = %self.config.identity, "released the leader lease"),
            Err(err) => tracing::warn!(error = %err, "failed to release the leader lease"),
        }
        self.observed = None;
        self.current = None;
    }
}
