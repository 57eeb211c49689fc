//! The controller manager's flags, named and defaulted as Go's `cloud-controller-manager`
//! names them, so a Deployment's arguments carry over unchanged.
//!
//! Flags Go has that do not apply here (profiling, webhooks, leader migration) are accepted, so existing manifests still start,
//! and documented as having no effect. Every value is checked before the cluster is touched;
//! an error names the flag.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser};

use super::duration::parse_go_duration;

fn duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

/// The most workers one `--concurrent-*` flag may ask for: 10,000. Workers beyond the
/// number of objects they sync are idle, and Kubernetes' scalability limits are 5,000 Nodes
/// and 10,000 Services a cluster, so no cluster keeps more busy; a worker is a task of a few
/// kilobytes, so 10,000 cost little. The bound turns a typo (`1000000000`, which used to end
/// in an allocation failure) into a clear error.
pub const MAX_WORKERS: i32 = 10_000;

/// The largest kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`) read: 4 MiB. A
/// kubeconfig embeds base64 certificates, a few kilobytes a context, and merged ones grow:
/// 4 MiB holds hundreds of contexts, while a wrong path (a log, a device) is refused.
pub const MAX_KUBECONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// The log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// Every flag of the controller manager.
#[derive(Clone, Debug, Parser)]
#[command(
    about = "A Kubernetes cloud-controller-manager: connects the cluster to its cloud",
    long_about = "A Kubernetes cloud-controller-manager built on ccm-core. It initialises Nodes from the cloud, \
deletes Nodes whose instance is gone, manages load balancers for type: LoadBalancer Services and routes \
for pod CIDRs. Flags are named and defaulted as Go's cloud-controller-manager's.",
    disable_version_flag = true
)]
#[non_exhaustive]
pub struct Options {
    /// The cloud provider to use.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "",
        help_heading = "Cloud provider"
    )]
    pub cloud_provider: String,
    /// The path to the cloud provider configuration file. Empty for none.
    #[arg(long, value_name = "FILE", help_heading = "Cloud provider")]
    pub cloud_config: Option<PathBuf>,
    /// Start even if the cloud provider does not tag its resources with a cluster ID.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Cloud provider")]
    pub allow_untagged_cloud: bool,

    /// The kubeconfig file with authorization and master location information. Empty: the
    /// in-cluster configuration, or ~/.kube/config.
    #[arg(long, value_name = "FILE", help_heading = "Kubernetes API")]
    pub kubeconfig: Option<PathBuf>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig).
    #[arg(
        long,
        value_name = "URL",
        default_value = "",
        help_heading = "Kubernetes API"
    )]
    pub master: String,
    /// Queries per second to the API server (client-side rate limit).
    #[arg(
        long,
        value_name = "QPS",
        default_value_t = 20.0,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_qps: f32,
    /// Burst to use while talking with the API server.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 30,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_burst: i32,
    /// Content type of requests sent to the API server (accepted; requests are JSON).
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "application/vnd.kubernetes.protobuf",
        help_heading = "Kubernetes API"
    )]
    pub kube_api_content_type: String,

    /// Controllers to enable: '*' enables all on-by-default controllers, 'foo' enables the
    /// controller named foo, '-foo' disables it. Names: cloud-node-controller,
    /// cloud-node-lifecycle-controller, service-lb-controller, node-route-controller (aliases
    /// cloud-node, cloud-node-lifecycle, service, route).
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "*",
        help_heading = "Controllers"
    )]
    pub controllers: Vec<String>,
    /// The interval between starting controllers (jittered).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "0s", help_heading = "Controllers")]
    pub controller_start_interval: Duration,
    /// The resync period of informers (accepted; watches here do not resync).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "12h0m0s", help_heading = "Controllers")]
    pub min_resync_period: Duration,
    /// Service workers: how many Services are synced at once (1 to 10000).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Controllers"
    )]
    pub concurrent_service_syncs: i32,
    /// Node workers: how many Nodes are initialised at once (1 to 10000).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Controllers"
    )]
    pub concurrent_node_syncs: i32,
    /// How many Nodes have their addresses refreshed at once (0 to 10000); 0 uses
    /// --concurrent-node-syncs.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Controllers"
    )]
    pub concurrent_node_status_updates: i32,
    /// How often the lifecycle controller checks Nodes with the cloud.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "5s", help_heading = "Controllers")]
    pub node_monitor_period: Duration,
    /// How often Node addresses are refreshed from the cloud.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "5m0s", help_heading = "Controllers")]
    pub node_status_update_frequency: Duration,
    /// How often routes are reconciled with the cloud.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s", help_heading = "Controllers")]
    pub route_reconciliation_period: Duration,
    /// The instance prefix for the cluster; cloud resources are tagged with it.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "kubernetes",
        help_heading = "Controllers"
    )]
    pub cluster_name: String,
    /// CIDR range(s) for pods in the cluster, comma-separated (one per IP family). Required
    /// when routes are configured.
    #[arg(
        long,
        value_name = "CIDRS",
        default_value = "",
        help_heading = "Controllers"
    )]
    pub cluster_cidr: String,
    /// Accepted for compatibility; pod CIDRs are allocated by kube-controller-manager.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub allocate_node_cidrs: bool,
    /// Whether the route controller configures cloud routes for pod CIDRs.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub configure_cloud_routes: bool,
    /// Accepted for compatibility; all controllers use the manager's credentials.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub use_service_account_credentials: bool,

    /// Leader election settings.
    #[command(flatten)]
    pub leader_election: LeaderElectionOptions,

    /// Secure serving, authentication and authorization flags.
    #[command(flatten)]
    pub serving: super::serving_options::ServingOptions,
    /// Accepted for compatibility; no pprof endpoints are served.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true, help_heading = "Serving")]
    pub profiling: bool,
    /// The webhook server port (accepted; no webhooks are served).
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 10260,
        help_heading = "Serving"
    )]
    pub webhook_secure_port: i32,
    /// Webhooks to enable (accepted; no webhooks are served).
    #[arg(
        long,
        value_name = "NAMES",
        default_value = "",
        help_heading = "Serving"
    )]
    pub webhooks: String,
    /// Feature gates (accepted; none apply).
    #[arg(
        long,
        value_name = "GATES",
        default_value = "",
        help_heading = "Serving"
    )]
    pub feature_gates: String,
    /// Log verbosity: 0 info, 2 more, 4 debug, 6 and up trace.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "LEVEL",
        default_value_t = 0,
        help_heading = "Logging"
    )]
    pub verbosity: u8,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, help_heading = "Logging")]
    pub logging_format: LogFormat,
}

/// Leader election flags (Go's `--leader-elect*`).
#[derive(Clone, Debug, Args)]
#[non_exhaustive]
pub struct LeaderElectionOptions {
    /// Elect a leader before running the controllers, so that only one replica acts.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true, help_heading = "Leader election")]
    pub leader_elect: bool,
    /// How long a standby waits after the last renewal before taking over.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "15s", help_heading = "Leader election")]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s", help_heading = "Leader election")]
    pub leader_elect_renew_deadline: Duration,
    /// How long clients wait between attempts to acquire or renew.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "2s", help_heading = "Leader election")]
    pub leader_elect_retry_period: Duration,
    /// The lock object type; only `leases` is supported.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "leases",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_lock: String,
    /// The name of the Lease.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "cloud-controller-manager",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_name: String,
    /// The namespace of the Lease.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kube-system",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_namespace: String,
    /// Accepted for compatibility; must be false.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Leader election")]
    pub enable_leader_migration: bool,
}

/// A flag with a value it cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct FlagError {
    /// The flag, e.g. `--kube-api-qps`.
    pub flag: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

fn bad(flag: &'static str, message: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        message: message.into(),
    }
}

impl Options {
    /// Parses command-line arguments (the first is the program name) as the binary does,
    /// for tests and for binaries that run the manager with
    /// [`run_with_options`](super::CloudControllerManager::run_with_options).
    ///
    /// ```
    /// use ccm_core::app::Options;
    /// let o = Options::from_args(["ccm", "--cloud-provider=acme", "--leader-elect=false"]).unwrap();
    /// assert_eq!(o.cloud_provider, "acme");
    /// assert!(Options::from_args(["ccm", "--no-such-flag"]).is_err());
    /// ```
    pub fn from_args<I, T>(args: I) -> Result<Self, FlagError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        <Self as Parser>::try_parse_from(args).map_err(|e| {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or_default();
            bad("arguments", first.trim_start_matches("error: ").to_owned())
        })
    }

    /// Checks the values clap cannot: ranges and relations between flags. The route
    /// controller's `--cluster-cidr` is checked when that controller is built.
    pub fn validate(&self) -> Result<(), FlagError> {
        if self.cloud_provider.is_empty() {
            return Err(bad("--cloud-provider", "is required"));
        }
        if !(self.kube_api_qps.is_finite() && self.kube_api_qps > 0.0) {
            return Err(bad(
                "--kube-api-qps",
                format!("must be greater than 0, got {}", self.kube_api_qps),
            ));
        }
        if self.kube_api_burst < 1 {
            return Err(bad(
                "--kube-api-burst",
                format!("must be at least 1, got {}", self.kube_api_burst),
            ));
        }
        for (flag, v, min) in [
            (
                "--concurrent-service-syncs",
                self.concurrent_service_syncs,
                1,
            ),
            ("--concurrent-node-syncs", self.concurrent_node_syncs, 1),
            // 0: as many as --concurrent-node-syncs.
            (
                "--concurrent-node-status-updates",
                self.concurrent_node_status_updates,
                0,
            ),
        ] {
            if !(min..=MAX_WORKERS).contains(&v) {
                return Err(bad(
                    flag,
                    format!("must be between {min} and {MAX_WORKERS}, got {v}"),
                ));
            }
        }
        for (flag, d) in [
            ("--node-monitor-period", self.node_monitor_period),
            (
                "--node-status-update-frequency",
                self.node_status_update_frequency,
            ),
            (
                "--route-reconciliation-period",
                self.route_reconciliation_period,
            ),
        ] {
            if d.is_zero() {
                return Err(bad(flag, "must be greater than 0"));
            }
        }
        if self.cluster_name.is_empty() {
            return Err(bad("--cluster-name", "must not be empty"));
        }
        self.serving.validate()?;
        if self.serving.secure_port != 0 && self.serving.secure_port == self.webhook_secure_port {
            return Err(bad(
                "--webhook-secure-port",
                "must differ from --secure-port",
            ));
        }
        self.leader_election.validate()
    }
}

impl LeaderElectionOptions {
    fn validate(&self) -> Result<(), FlagError> {
        if !self.leader_elect {
            return Ok(());
        }
        if self.leader_elect_resource_lock != "leases" {
            return Err(bad(
                "--leader-elect-resource-lock",
                format!(
                    "only \"leases\" is supported, got {:?}",
                    self.leader_elect_resource_lock
                ),
            ));
        }
        if self.enable_leader_migration {
            return Err(bad(
                "--enable-leader-migration",
                "leader migration is not supported",
            ));
        }
        if self.leader_elect_resource_name.is_empty() {
            return Err(bad("--leader-elect-resource-name", "must not be empty"));
        }
        if self.leader_elect_resource_namespace.is_empty() {
            return Err(bad(
                "--leader-elect-resource-namespace",
                "must not be empty",
            ));
        }
        for (flag, d) in [
            (
                "--leader-elect-lease-duration",
                self.leader_elect_lease_duration,
            ),
            (
                "--leader-elect-renew-deadline",
                self.leader_elect_renew_deadline,
            ),
            (
                "--leader-elect-retry-period",
                self.leader_elect_retry_period,
            ),
        ] {
            if d.is_zero() {
                return Err(bad(flag, "must be greater than 0"));
            }
        }
        if self.leader_elect_lease_duration <= self.leader_elect_renew_deadline {
            return Err(bad(
                "--leader-elect-lease-duration",
                "must be greater than --leader-elect-renew-deadline",
            ));
        }
        if self.leader_elect_renew_deadline <= self.leader_elect_retry_period {
            return Err(bad(
                "--leader-elect-renew-deadline",
                "must be greater than --leader-elect-retry-period",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Options {
        Options::try_parse_from(std::iter::once("ccm").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_match_go() {
        let o = parse(&[]);
        assert_eq!(o.kube_api_qps, 20.0);
        assert_eq!(o.kube_api_burst, 30);
        assert!(o.leader_election.leader_elect);
        assert_eq!(
            o.leader_election.leader_elect_lease_duration,
            Duration::from_secs(15)
        );
        assert_eq!(
            o.leader_election.leader_elect_renew_deadline,
            Duration::from_secs(10)
        );
        assert_eq!(
            o.leader_election.leader_elect_retry_period,
            Duration::from_secs(2)
        );
        assert_eq!(
            o.leader_election.leader_elect_resource_name,
            "cloud-controller-manager"
        );
        assert_eq!(
            o.leader_election.leader_elect_resource_namespace,
            "kube-system"
        );
        assert_eq!(o.controllers, vec!["*"]);
        assert_eq!(o.concurrent_service_syncs, 1);
        assert_eq!(o.concurrent_node_syncs, 1);
        assert_eq!(o.concurrent_node_status_updates, 0);
        assert_eq!(o.node_monitor_period, Duration::from_secs(5));
        assert_eq!(o.node_status_update_frequency, Duration::from_secs(300));
        assert_eq!(o.route_reconciliation_period, Duration::from_secs(10));
        assert_eq!(o.min_resync_period, Duration::from_secs(12 * 3600));
        assert_eq!(o.cluster_name, "kubernetes");
        assert_eq!(o.cluster_cidr, "");
        assert!(!o.allocate_node_cidrs);
        assert!(o.configure_cloud_routes);
        assert_eq!(o.serving.bind_address.to_string(), "0.0.0.0");
        assert_eq!(o.serving.secure_port, 10258);
        assert_eq!(o.webhook_secure_port, 10260);
    }

    #[test]
    fn go_style_arguments_parse() {
        let o = parse(&[
            "--cloud-provider=fake",
            "--leader-elect=false",
            "--configure-cloud-routes=false",
            "--controllers=*,-route",
            "--node-status-update-frequency=1m30s",
            "--kube-api-qps=50",
            "--v=4",
            "--allocate-node-cidrs",
            "--profiling=false",
        ]);
        assert_eq!(o.cloud_provider, "fake");
        assert!(!o.leader_election.leader_elect);
        assert!(!o.configure_cloud_routes);
        assert!(o.allocate_node_cidrs);
        assert_eq!(o.controllers, vec!["*", "-route"]);
        assert_eq!(o.node_status_update_frequency, Duration::from_secs(90));
        assert_eq!(o.verbosity, 4);
        assert!(o.validate().is_ok());
    }

    #[test]
    fn validation_names_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "--cloud-provider: is required"),
            (
                &["--cloud-provider=x", "--kube-api-qps=0"],
                "--kube-api-qps: must be greater than 0, got 0",
            ),
            (
                &["--cloud-provider=x", "--kube-api-burst=0"],
                "--kube-api-burst: must be at least 1, got 0",
            ),
            (
                &["--cloud-provider=x", "--concurrent-node-syncs=0"],
                "--concurrent-node-syncs: must be between 1 and 10000, got 0",
            ),
            (
                &[
                    "--cloud-provider=x",
                    "--concurrent-service-syncs=1000000000",
                ],
                "--concurrent-service-syncs: must be between 1 and 10000, got 1000000000",
            ),
            (
                &["--cloud-provider=x", "--concurrent-node-syncs=10001"],
                "--concurrent-node-syncs: must be between 1 and 10000, got 10001",
            ),
            (
                &["--cloud-provider=x", "--concurrent-node-status-updates=-1"],
                "--concurrent-node-status-updates: must be between 0 and 10000, got -1",
            ),
            (
                &[
                    "--cloud-provider=x",
                    "--concurrent-node-status-updates=20000",
                ],
                "--concurrent-node-status-updates: must be between 0 and 10000, got 20000",
            ),
            (
                &["--cloud-provider=x", "--secure-port=70000"],
                "--secure-port: must be between 0 and 65535, got 70000",
            ),
            (
                &[
                    "--cloud-provider=x",
                    "--leader-elect-resource-lock=endpoints",
                ],
                "--leader-elect-resource-lock: only \"leases\" is supported, got \"endpoints\"",
            ),
            (
                &["--cloud-provider=x", "--leader-elect-lease-duration=5s"],
                "--leader-elect-lease-duration: must be greater than --leader-elect-renew-deadline",
            ),
            (
                &["--cloud-provider=x", "--node-monitor-period=0s"],
                "--node-monitor-period: must be greater than 0",
            ),
            (
                &["--cloud-provider=x", "--tls-cert-file=/c"],
                "--tls-private-key-file: is required with --tls-cert-file",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(
                parse(args).validate().unwrap_err().to_string(),
                *want,
                "{args:?}"
            );
        }
        // The bounds themselves are accepted.
        assert!(
            parse(&[
                "--cloud-provider=x",
                "--concurrent-service-syncs=10000",
                "--concurrent-node-syncs=10000",
                "--concurrent-node-status-updates=0",
            ])
            .validate()
            .is_ok()
        );
        // Leader election settings do not matter when it is off.
        assert!(
            parse(&[
                "--cloud-provider=x",
                "--leader-elect=false",
                "--leader-elect-resource-lock=x"
            ])
            .validate()
            .is_ok()
        );
    }

    #[test]
    fn malformed_values_are_clap_errors_naming_the_flag() {
        for (arg, flag) in [
            ("--node-monitor-period=5", "--node-monitor-period"),
            ("--kube-api-burst=many", "--kube-api-burst"),
            ("--bind-address=localhost", "--bind-address"),
            ("--leader-elect=maybe", "--leader-elect"),
        ] {
            let err = Options::try_parse_from(["ccm", arg])
                .unwrap_err()
                .to_string();
            assert!(err.contains(flag), "{arg}: {err}");
        }
        let err = Options::try_parse_from(["ccm", "--cloud-providr=x"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--cloud-provider"),
            "suggests the right flag: {err}"
        );
    }
}
