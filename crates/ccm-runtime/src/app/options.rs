//! The controller manager's flags: every flag of Go's v1.36 `cloud-controller-manager`,
//! named, defaulted and spelled as Go parses them (booleans as `strconv.ParseBool`, `--x=`
//! for an unset string, Go durations), so a Deployment's arguments carry over unchanged.
//!
//! Flags that change behaviour here are fields of [`Options`]. Go's flags that do not apply
//! (profiling, webhooks, leader migration, log buffering, …) are accepted, checked for Go's
//! syntax, and reported by [`Options::ignored_flags`], which the manager logs once at
//! startup. Every value is checked before the cluster is touched; an error names the flag.
//! `tests/go_flags.rs` checks all of this against the flag list dumped from Go itself.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser};

use crate::controllers::node_lifecycle::NodeDeletionGuard;
use crate::controllers::node_ownership::NodeOwnership;
use crate::controllers::service::{ClassError, LoadBalancerClasses};
pub use crate::flags::FlagError;
use crate::flags::duration::parse_go_duration;
use crate::flags::feature_gates::FeatureGates;
use crate::flags::goflag::{self, VersionFlag};

/// The encoding of the CCM's requests to the API server (`--kube-api-content-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContentType {
    /// `application/vnd.kubernetes.protobuf`: Nodes and Services are listed and watched in
    /// protobuf (see [`crate::client::protobuf`]); the rest is JSON. Go's default.
    #[default]
    Protobuf,
    /// `application/json`: every request.
    Json,
}

fn content_type(s: &str) -> Result<ContentType, String> {
    match s {
        crate::client::protobuf::MEDIA_TYPE => Ok(ContentType::Protobuf),
        "application/json" => Ok(ContentType::Json),
        _ => Err(format!(
            "must be {} or application/json, got {s:?}",
            crate::client::protobuf::MEDIA_TYPE
        )),
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

fn node_deletion_guard(s: &str) -> Result<NodeDeletionGuard, String> {
    s.parse()
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
pub use ccm_provider::file::MAX_KUBECONFIG_BYTES;

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
    disable_version_flag = true,
    disable_help_flag = true
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
    #[arg(long, value_name = "FILE", value_parser = path, help_heading = "Cloud provider")]
    pub cloud_config: Option<PathBuf>,
    /// Start even if the cloud provider does not tag its resources with a cluster ID.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Cloud provider")]
    pub allow_untagged_cloud: bool,
    /// Shadow mode, to prove a swap of CCMs changes nothing: run every controller beside
    /// the CCM in charge and change nothing (every API write a dry run, no cloud
    /// mutation); what would change is served at /debug/shadow/plan, counted in
    /// ccm_shadow_planned_changes and logged. Leader election, when on, takes the Lease
    /// <--leader-elect-resource-name>-shadow.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub shadow: bool,

    /// The kubeconfig file with authorization and master location information. Empty: the
    /// in-cluster configuration, or ~/.kube/config.
    #[arg(long, value_name = "FILE", value_parser = path, help_heading = "Kubernetes API")]
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
        value_parser = goflag::go_float32,
        default_value_t = 20.0,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_qps: f32,
    /// Burst to use while talking with the API server.
    #[arg(
        long,
        value_name = "N",
        value_parser = goflag::go_int32,
        default_value_t = 30,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_burst: i32,
    /// Content type of requests sent to the API server: with
    /// `application/vnd.kubernetes.protobuf` (Go's default) the Node and Service informers
    /// list and watch in protobuf; `application/json` keeps every request JSON.
    #[arg(
        long,
        value_name = "TYPE",
        value_parser = content_type,
        default_value = crate::client::protobuf::MEDIA_TYPE,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_content_type: ContentType,

    /// Controllers to enable: '*' enables all on-by-default controllers, 'foo' enables the
    /// controller named foo, '-foo' disables it. Names: cloud-node-controller,
    /// cloud-node-lifecycle-controller, service-lb-controller, node-route-controller (aliases
    /// cloud-node, cloud-node-lifecycle, service, route).
    #[arg(
        long,
        value_name = "NAMES",
        value_parser = goflag::go_string_slice_flag,
        default_value = "*",
        help_heading = "Controllers"
    )]
    pub controllers: Vec<String>,
    /// The interval between starting controllers (jittered).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "0s", help_heading = "Controllers")]
    pub controller_start_interval: Duration,
    /// Service workers: how many Services are synced at once (1 to 10000).
    #[arg(
        long,
        value_name = "N",
        value_parser = goflag::go_int32,
        default_value_t = 1,
        help_heading = "Controllers"
    )]
    pub concurrent_service_syncs: i32,
    /// Node workers: how many Nodes are initialised at once (1 to 10000).
    #[arg(
        long,
        value_name = "N",
        value_parser = goflag::go_int32,
        default_value_t = 1,
        help_heading = "Controllers"
    )]
    pub concurrent_node_syncs: i32,
    /// How many Nodes have their addresses refreshed at once (0 to 10000); 0 uses
    /// --concurrent-node-syncs.
    #[arg(
        long,
        value_name = "N",
        value_parser = goflag::go_int32,
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
    /// Whether the node-ipam controller gives Nodes pod CIDRs from --cluster-cidr (it runs
    /// only when also named in --controllers, e.g. `*,nodeipam`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Node IPAM")]
    pub allocate_node_cidrs: bool,
    /// How the node-ipam controller allocates: `RangeAllocator` (from --cluster-cidr) is the
    /// one supported.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "RangeAllocator",
        help_heading = "Node IPAM"
    )]
    pub cidr_allocator_type: String,
    /// CIDR range(s) for Services, comma-separated (one per IP family); never given to a
    /// Node as its pod CIDR.
    #[arg(
        long,
        value_name = "CIDRS",
        default_value = "",
        help_heading = "Node IPAM"
    )]
    pub service_cluster_ip_range: String,
    /// Mask size of a Node's pod CIDR in a single-stack cluster (0: the family's default,
    /// 24 for IPv4, 64 for IPv6).
    #[arg(long, value_name = "BITS", value_parser = goflag::go_int32, default_value_t = 0, help_heading = "Node IPAM")]
    pub node_cidr_mask_size: i32,
    /// Mask size of a Node's IPv4 pod CIDR in a dual-stack cluster (0: 24).
    #[arg(long, value_name = "BITS", value_parser = goflag::go_int32, default_value_t = 0, help_heading = "Node IPAM")]
    pub node_cidr_mask_size_ipv4: i32,
    /// Mask size of a Node's IPv6 pod CIDR in a dual-stack cluster (0: 64).
    #[arg(long, value_name = "BITS", value_parser = goflag::go_int32, default_value_t = 0, help_heading = "Node IPAM")]
    pub node_cidr_mask_size_ipv6: i32,
    /// Kubernetes feature gates, `Name=bool,...`: the gates Go's cloud-controller-manager
    /// knows (see docs/app.md for those that change what this one does); an unknown one is
    /// refused.
    #[arg(long, value_name = "NAME=BOOL,...", value_parser = FeatureGates::parse, default_value = "", hide_default_value = true, help_heading = "Controllers")]
    pub feature_gates: FeatureGates,
    /// Whether the route controller configures cloud routes for pod CIDRs.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub configure_cloud_routes: bool,
    /// Which Nodes are this cloud's, by provider ID (ours; for clusters with Nodes of
    /// another cloud or bare metal): comma-separated or repeated prefixes such as
    /// `digitalocean://`. A Node whose spec.providerID starts with none of them, or that has
    /// none and no uninitialized taint, is never initialised, tainted, deleted, routed or
    /// made a load balancer backend. Unset: every Node is this cloud's, as in Go.
    #[arg(long, value_name = "PREFIXES", value_parser = crate::controllers::node_ownership::parse_prefix_flag, help_heading = "Nodes of this cloud")]
    pub node_provider_id_prefix: Vec<String>,
    /// Which Nodes are this cloud's, by label (ours): a label selector as `kubectl -l` takes
    /// it (`key=value`, `key!=value`, `key in (a,b)`, `key notin (a)`, `key`, `!key`,
    /// comma-separated; at most 4096 bytes and 64 requirements). A Node whose labels do not
    /// match is left alone as with --node-provider-id-prefix; with both, both must hold.
    /// Empty: every Node is this cloud's, as in Go.
    #[arg(long, value_name = "SELECTOR", value_parser = crate::controllers::node_ownership::parse_selector_flag, default_value = "", help_heading = "Nodes of this cloud")]
    pub node_selector: String,
    /// The guard against mass Node deletion (ours): the lifecycle controller deletes at most
    /// `max` Nodes (a count, or a share of the cloud's Nodes, at least 1) in any sliding
    /// `window` because the provider says their instance is gone, and none while more than
    /// `stop` of them are reported gone at once (and more than the budget); the rest are
    /// held back with a NodeDeletionHeldBack Warning. `off`: Go's behaviour, no bound.
    #[arg(long, value_name = "max=N|P%,window=DURATION,stop=P%|off", value_parser = node_deletion_guard, default_value = "max=10%,window=10m0s,stop=50%", help_heading = "Controllers")]
    pub node_deletion_guard: NodeDeletionGuard,
    /// Run each controller as its own ServiceAccount in kube-system (Go's client builder).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub use_service_account_credentials: bool,
    /// A `spec.loadBalancerClass` whose Services the service controller manages
    /// (repeatable, or comma-separated): a prefixed name such as `example.com/internal-vip`,
    /// which is also the cleanup finalizer of its Services. None: only Services without a
    /// class, as Go. Services of other classes are never touched.
    #[arg(long = "load-balancer-class", value_name = "CLASS", action = ArgAction::Append, value_delimiter = ',', help_heading = "Controllers")]
    pub load_balancer_class: Vec<String>,
    /// Whether the service controller manages Services without a `loadBalancerClass` (Go
    /// does); false leaves them to another controller, and then `--load-balancer-class` is
    /// required.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub manage_services_without_class: bool,
    /// Whether the service controller writes the conditions `LoadBalancerProvisioning`,
    /// `LoadBalancerServing` and `LoadBalancerDegraded` in a Service's `status.conditions`
    /// (for `kubectl wait --for=condition=LoadBalancerServing`); Go writes none.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub service_conditions: bool,
    /// With --service-conditions, how often each ensured load balancer's health is asked of
    /// the provider for `LoadBalancerDegraded`; 0 never asks.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1m0s", help_heading = "Controllers")]
    pub load_balancer_health_period: Duration,
    /// Whether MetalLB's `metallb.universe.tf/allow-shared-ip` annotation puts Services in a
    /// shared load balancer's group, like `ccm-rs.github.io/load-balancer-sharing-key` (which
    /// wins when both are set). Off by default: a Go CCM gives such Services a load balancer
    /// each, and swapping it for this one must not merge them.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Controllers")]
    pub metallb_allow_shared_ip: bool,

    /// Leader election settings.
    #[command(flatten)]
    pub leader_election: LeaderElectionOptions,

    /// Secure serving, authentication and authorization flags.
    #[command(flatten)]
    pub serving: crate::serving::ServingOptions,

    /// Log verbosity (klog's -v): 0 info, 2 more, 4 debug, 6 and up trace.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "LEVEL",
        value_parser = goflag::klog_level,
        default_value = "0",
        help_heading = "Logging"
    )]
    pub verbosity: u8,
    /// Per-module verbosity (klog's --vmodule): comma-separated `module=N`, where `module`
    /// is a Rust module path such as `ccm_runtime::controllers`. Go's file-name patterns
    /// with `*` or `?` are accepted and ignored.
    #[arg(long, value_name = "PATTERN=N,...", value_parser = goflag::vmodule_flag, default_value = "", help_heading = "Logging")]
    pub vmodule: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, help_heading = "Logging")]
    pub logging_format: LogFormat,

    /// Print help and exit.
    #[arg(short = 'h', long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", require_equals = true, help_heading = "Other")]
    pub(crate) help: bool,
    /// Print the version and exit; `--version=raw` prints every field.
    #[arg(long, value_name = "BOOL|raw", value_parser = goflag::version_flag, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Other")]
    pub(crate) version: VersionFlag,

    /// Go's flags that have no effect here.
    #[command(flatten)]
    pub(crate) ignored: IgnoredFlags,
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

/// Go's flags that have no effect here: accepted with Go's syntax so existing manifests
/// start, and reported by [`Options::ignored_flags`] when set. `None` (or empty): not given.
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct IgnoredFlags {
    /// Ignored: no profiling endpoints are served.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, help_heading = IGNORED_HEADING)]
    contention_profiling: Option<bool>,
    /// Ignored: only for Go's in-tree volume plugins.
    #[arg(long, value_name = "NAME", value_parser = goflag::any_string, help_heading = IGNORED_HEADING)]
    external_cloud_volume_plugin: Option<String>,
    /// Ignored: leader migration is not supported.
    #[arg(long, value_name = "FILE", value_parser = goflag::any_string, help_heading = IGNORED_HEADING)]
    leader_migration_config: Option<String>,
    /// Ignored: log lines are written as they come, unbuffered.
    #[arg(long, value_name = "DURATION", value_parser = duration, help_heading = IGNORED_HEADING)]
    log_flush_frequency: Option<Duration>,
    /// Ignored: log lines are written unbuffered.
    #[arg(long, value_name = "QUANTITY", value_parser = goflag::quantity, help_heading = IGNORED_HEADING)]
    log_json_info_buffer_size: Option<String>,
    /// Ignored: every log line goes to stderr.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, help_heading = IGNORED_HEADING)]
    log_json_split_stream: Option<bool>,
    /// Ignored: log lines are written unbuffered.
    #[arg(long, value_name = "QUANTITY", value_parser = goflag::quantity, help_heading = IGNORED_HEADING)]
    log_text_info_buffer_size: Option<String>,
    /// Ignored: every log line goes to stderr.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, help_heading = IGNORED_HEADING)]
    log_text_split_stream: Option<bool>,
    /// Ignored: watches here do not resync.
    #[arg(long, value_name = "DURATION", value_parser = duration, help_heading = IGNORED_HEADING)]
    min_resync_period: Option<Duration>,
    /// Ignored: a no-op in Go as well (deprecated there).
    #[arg(long, value_name = "DURATION", value_parser = duration, hide = true)]
    node_sync_period: Option<Duration>,
    /// Ignored: no pprof endpoints are served.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, help_heading = IGNORED_HEADING)]
    profiling: Option<bool>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "IP", value_parser = goflag::go_ip, help_heading = IGNORED_HEADING)]
    webhook_bind_address: Option<IpAddr>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "DIR", value_parser = goflag::any_string, help_heading = IGNORED_HEADING)]
    webhook_cert_dir: Option<String>,
    /// Ignored: no webhooks are served.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, help_heading = IGNORED_HEADING)]
    webhook_disable_http2_serving: Option<bool>,
    /// Ignored: no webhooks are served (0 to 65535, and not --secure-port).
    #[arg(long, value_name = "PORT", value_parser = goflag::go_int_as_i32, help_heading = IGNORED_HEADING)]
    webhook_secure_port: Option<i32>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "FILE", value_parser = goflag::any_string, help_heading = IGNORED_HEADING)]
    webhook_tls_cert_file: Option<String>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "NAMES", value_parser = goflag::go_string_slice_flag, help_heading = IGNORED_HEADING)]
    webhook_tls_cipher_suites: Option<String>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "IDS", value_parser = goflag::go_int32_slice, help_heading = IGNORED_HEADING)]
    webhook_tls_curve_preferences: Option<String>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "VERSION", value_parser = goflag::any_string, help_heading = IGNORED_HEADING)]
    webhook_tls_min_version: Option<String>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "FILE", value_parser = goflag::any_string, help_heading = IGNORED_HEADING)]
    webhook_tls_private_key_file: Option<String>,
    /// Ignored: no webhooks are served.
    #[arg(long, value_name = "CERT,KEY[:NAMES]", value_parser = goflag::named_cert_key, action = ArgAction::Append, help_heading = IGNORED_HEADING)]
    webhook_tls_sni_cert_key: Vec<String>,
    /// Ignored: there are no webhooks; only `*` (all of none) is accepted, as in Go.
    #[arg(long, value_name = "NAMES", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, help_heading = IGNORED_HEADING)]
    webhooks: Vec<String>,
}

const IGNORED_HEADING: &str = "Accepted for compatibility with Go, no effect";

/// The gates that change what Go's controllers do, and what this controller manager does
/// whatever they say.
const GATE_NOTES: &[(&str, &str)] = &[
    (
        "CloudControllerManagerWatchBasedRoutesReconciliation",
        "the route controller always reconciles on Node changes (debounced) as well as every \
         --route-reconciliation-period",
    ),
    (
        "ControllerManagerReleaseLeaderElectionLockOnExit",
        "the leader always releases its Lease when it shuts down",
    ),
    ("CloudControllerManagerWebhook", "no webhooks are served"),
];

/// Each ignored flag and why, as [`Options::ignored_flags`] reports it.
const IGNORED: &[(&str, &str)] = &[
    (
        "--contention-profiling",
        "no profiling endpoints are served",
    ),
    (
        "--external-cloud-volume-plugin",
        "it only configures Go's in-tree volume plugins",
    ),
    (
        "--disable-http2-serving",
        "the endpoints are served over HTTP/1.1",
    ),
    (
        "--http2-max-streams-per-connection",
        "the endpoints are served over HTTP/1.1",
    ),
    (
        "--leader-migration-config",
        "leader migration is not supported",
    ),
    ("--log-flush-frequency", "log lines are written unbuffered"),
    (
        "--log-json-info-buffer-size",
        "log lines are written unbuffered",
    ),
    ("--log-json-split-stream", "every log line goes to stderr"),
    (
        "--log-text-info-buffer-size",
        "log lines are written unbuffered",
    ),
    ("--log-text-split-stream", "every log line goes to stderr"),
    ("--min-resync-period", "watches here do not resync"),
    ("--node-sync-period", "a deprecated no-op in Go as well"),
    ("--profiling", "no profiling endpoints are served"),
    (
        "--version",
        "--version=vX.Y.Z sets the version Go reports on /version, which is not served here",
    ),
    (
        "--vmodule",
        "entries with * or ? match Go file names; only module paths such as ccm_runtime::controllers=4 apply",
    ),
    ("--webhook-bind-address", "no webhooks are served"),
    ("--webhook-cert-dir", "no webhooks are served"),
    ("--webhook-disable-http2-serving", "no webhooks are served"),
    ("--webhook-secure-port", "no webhooks are served"),
    ("--webhook-tls-cert-file", "no webhooks are served"),
    ("--webhook-tls-cipher-suites", "no webhooks are served"),
    ("--webhook-tls-curve-preferences", "no webhooks are served"),
    ("--webhook-tls-min-version", "no webhooks are served"),
    ("--webhook-tls-private-key-file", "no webhooks are served"),
    ("--webhook-tls-sni-cert-key", "no webhooks are served"),
    ("--webhooks", "there are no webhooks"),
];

impl IgnoredFlags {
    /// The flags given on the command line.
    fn given(&self) -> Vec<&'static str> {
        let flags = [
            (
                "--contention-profiling",
                self.contention_profiling.is_some(),
            ),
            (
                "--external-cloud-volume-plugin",
                self.external_cloud_volume_plugin.is_some(),
            ),
            (
                "--leader-migration-config",
                self.leader_migration_config.is_some(),
            ),
            ("--log-flush-frequency", self.log_flush_frequency.is_some()),
            (
                "--log-json-info-buffer-size",
                self.log_json_info_buffer_size.is_some(),
            ),
            (
                "--log-json-split-stream",
                self.log_json_split_stream.is_some(),
            ),
            (
                "--log-text-info-buffer-size",
                self.log_text_info_buffer_size.is_some(),
            ),
            (
                "--log-text-split-stream",
                self.log_text_split_stream.is_some(),
            ),
            ("--min-resync-period", self.min_resync_period.is_some()),
            ("--node-sync-period", self.node_sync_period.is_some()),
            ("--profiling", self.profiling.is_some()),
            (
                "--webhook-bind-address",
                self.webhook_bind_address.is_some(),
            ),
            ("--webhook-cert-dir", self.webhook_cert_dir.is_some()),
            (
                "--webhook-disable-http2-serving",
                self.webhook_disable_http2_serving.is_some(),
            ),
            ("--webhook-secure-port", self.webhook_secure_port.is_some()),
            (
                "--webhook-tls-cert-file",
                self.webhook_tls_cert_file.is_some(),
            ),
            (
                "--webhook-tls-cipher-suites",
                self.webhook_tls_cipher_suites.is_some(),
            ),
            (
                "--webhook-tls-curve-preferences",
                self.webhook_tls_curve_preferences.is_some(),
            ),
            (
                "--webhook-tls-min-version",
                self.webhook_tls_min_version.is_some(),
            ),
            (
                "--webhook-tls-private-key-file",
                self.webhook_tls_private_key_file.is_some(),
            ),
            (
                "--webhook-tls-sni-cert-key",
                !self.webhook_tls_sni_cert_key.is_empty(),
            ),
            ("--webhooks", !self.webhooks.is_empty()),
        ];
        flags
            .into_iter()
            .filter(|(_, given)| *given)
            .map(|(flag, _)| flag)
            .collect()
    }
}

/// What the binary prints instead of running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrintRequest {
    /// `--help`, `-h`.
    Help,
    /// `--version` (`raw`: `--version=raw`).
    Version {
        /// Every field, as Go's `--version=raw`.
        raw: bool,
    },
}

/// The clap command of [`Options`] with Go's value syntax on every flag, including those
/// other modules flatten in: every boolean takes `strconv.ParseBool`'s spellings, alone or
/// with `=` (never as the next argument, as in pflag), and every other flag takes its value
/// after `=` or as the next argument even when that starts with `-` (`--kube-api-burst -1`).
/// A flag given twice takes the last value; a list flag appends, as pflag's.
pub(crate) fn command() -> clap::Command {
    // pflag: a flag given again replaces its value (lists append).
    let command = <Options as clap::CommandFactory>::command().args_override_self(true);
    command.mut_args(|arg| {
        let takes_value = arg.get_action().takes_values();
        if !takes_value {
            return arg;
        }
        if arg.get_value_parser().type_id() == std::any::TypeId::of::<bool>() {
            arg.value_parser(goflag::go_bool)
                .value_name("BOOL")
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
        } else {
            arg.allow_hyphen_values(true)
        }
    })
}

/// A path flag: empty means not given, as in Go (`--cloud-config=`).
fn path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}

/// Maps a klog verbosity to a tracing level.
fn level_name(verbosity: i64) -> &'static str {
    match verbosity {
        ..=3 => "info",
        4 | 5 => "debug",
        _ => "trace",
    }
}

/// Whether a `--vmodule` pattern is a module path tracing can filter on (not a Go glob).
fn is_module_path(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern.split("::").all(|seg| {
            !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// The version a binary reports for `--version`; see
/// [`CloudControllerManager::with_version`](super::CloudControllerManager::with_version).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BinaryVersion {
    pub(crate) version: &'static str,
    pub(crate) git_commit: Option<&'static str>,
}

impl Default for BinaryVersion {
    fn default() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            git_commit: None,
        }
    }
}

impl BinaryVersion {
    /// The text `--version` prints (Go: `Kubernetes v1.36.3`): `NAME vVERSION` and the
    /// commit when known; `--version=raw` prints every field, like Go's `%#v`.
    pub(crate) fn render(&self, name: &str, raw: bool) -> String {
        let v = self.version.strip_prefix('v').unwrap_or(self.version);
        if raw {
            format!(
                "version.Info{{Name:{name:?}, GitVersion:\"v{v}\", GitCommit:{:?}, CcmCore:\"v{}\", Platform:\"{}/{}\"}}",
                self.git_commit.unwrap_or(""),
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
            )
        } else {
            match self.git_commit {
                Some(commit) => format!("{name} v{v} ({commit})"),
                None => format!("{name} v{v}"),
            }
        }
    }
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
    /// [`run_with_options`](super::CloudControllerManager::run_with_options). Values are
    /// read as Go reads them: booleans as `strconv.ParseBool` (`--leader-elect=False`), `--x`
    /// alone for a true boolean, `--x=` for an empty value. `--help` and `--version` are
    /// accepted here; [`run`](super::CloudControllerManager::run) acts on them.
    ///
    /// ```
    /// use ccm_core::app::Options;
    /// let o = Options::from_args(["ccm", "--cloud-provider=acme", "--leader-elect=F"]).unwrap();
    /// assert_eq!(o.cloud_provider, "acme");
    /// assert!(!o.leader_election.leader_elect);
    /// assert!(Options::from_args(["ccm", "--no-such-flag"]).is_err());
    /// ```
    pub fn from_args<I, T>(args: I) -> Result<Self, FlagError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let to_flag_error = |e: clap::Error| {
            // The first line, and clap's suggestion of a similar flag.
            let message = e.to_string();
            let mut lines = message.lines().map(str::trim);
            let mut text = lines
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_owned();
            for tip in lines.filter(|l| l.starts_with("tip:")) {
                text.push_str("; ");
                text.push_str(tip);
            }
            bad("arguments", text)
        };
        let matches = command()
            .try_get_matches_from(args)
            .map_err(to_flag_error)?;
        Self::from_matches(&matches).map_err(to_flag_error)
    }

    /// The options of parsed arguments (from [`command`]), normalized as Go reads them.
    pub(crate) fn from_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut options = <Self as clap::FromArgMatches>::from_arg_matches(matches)?;
        // Go: an empty path is no file.
        for path in [&mut options.cloud_config, &mut options.kubeconfig] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                *path = None;
            }
        }
        // Each occurrence is one CSV record, as pflag reads a stringSlice (checked above).
        options.controllers = options
            .controllers
            .iter()
            .flat_map(|v| goflag::go_string_slice(v).unwrap_or_default())
            .collect();
        options.node_provider_id_prefix = options
            .node_provider_id_prefix
            .iter()
            .flat_map(|v| goflag::go_string_slice(v).unwrap_or_default())
            .collect();
        Ok(options)
    }

    /// What to log at start about `--feature-gates`: Go's warnings (GA or deprecated gates
    /// set), and how this controller manager treats the gates that change Go's controllers.
    pub fn feature_gate_notes(&self) -> Vec<String> {
        let mut notes = self.feature_gates.warnings().to_vec();
        for (gate, how) in GATE_NOTES {
            if let Some(on) = self.feature_gates.given().get(*gate) {
                notes.push(format!("feature gate {gate}={on}: {how}"));
            }
        }
        notes
    }

    /// Go's flags that were given and have no effect here, each with why: the manager logs
    /// them once at startup (`flag --x is accepted and ignored: why`). Flags at their
    /// defaults are not listed.
    ///
    /// ```
    /// use ccm_core::app::Options;
    /// let o = Options::from_args(["ccm", "--profiling=false"]).unwrap();
    /// assert_eq!(o.ignored_flags(), vec![("--profiling", "no profiling endpoints are served")]);
    /// ```
    pub fn ignored_flags(&self) -> Vec<(&'static str, &'static str)> {
        let mut given = self.ignored.given();
        if matches!(self.version, VersionFlag::Set(_)) {
            given.push("--version");
        }
        if self.vmodule_entries().1 {
            given.push("--vmodule");
        }
        // The serving options' HTTP/2 flags, when not at Go's defaults.
        if self.serving.http2_max_streams_per_connection != 0 {
            given.push("--http2-max-streams-per-connection");
        }
        if self.serving.disable_http2_serving {
            given.push("--disable-http2-serving");
        }
        IGNORED
            .iter()
            .filter(|(flag, _)| given.contains(flag))
            .copied()
            .collect()
    }

    /// The `tracing_subscriber::filter::Targets` directives of `-v` at `verbosity` (the flag's
    /// value at start, the level `/debug/flags/v` sets later) and `--vmodule`, e.g.
    /// `info,kube_client=warn,hyper=warn,rustls=warn,ccm_runtime::controllers=debug`.
    pub(crate) fn log_directives_at(&self, verbosity: u8) -> String {
        let mut directives = format!(
            "{},kube_client=warn,hyper=warn,rustls=warn",
            level_name(i64::from(verbosity))
        );
        for (module, level) in self.vmodule_entries().0 {
            directives.push_str(&format!(",{module}={}", level_name(i64::from(level))));
        }
        directives
    }

    /// `--vmodule`'s entries that name module paths, and whether any did not (Go globs).
    fn vmodule_entries(&self) -> (Vec<(String, i32)>, bool) {
        let entries = goflag::vmodule(&self.vmodule).unwrap_or_default();
        let (paths, globs): (Vec<_>, Vec<_>) =
            entries.into_iter().partition(|(p, _)| is_module_path(p));
        (paths, !globs.is_empty())
    }

    /// What `--help` and `--version` ask the binary to print instead of running: `None`
    /// to run.
    pub(crate) fn print_request(&self) -> Option<PrintRequest> {
        if self.help {
            return Some(PrintRequest::Help);
        }
        match self.version {
            VersionFlag::Print => Some(PrintRequest::Version { raw: false }),
            VersionFlag::Raw => Some(PrintRequest::Version { raw: true }),
            VersionFlag::Off | VersionFlag::Set(_) => None,
        }
    }

    /// The Services the service controller manages, by class, from `--load-balancer-class`
    /// and `--manage-services-without-class`.
    ///
    /// # Errors
    ///
    /// A class that is not a prefixed qualified name, too many classes, or no Service
    /// managed at all; the error names the flag.
    pub fn load_balancer_classes(&self) -> Result<LoadBalancerClasses, FlagError> {
        LoadBalancerClasses::new(
            self.load_balancer_class
                .iter()
                .map(|c| c.trim())
                .filter(|c| !c.is_empty()),
            self.manage_services_without_class,
        )
        .map_err(|err| {
            let flag = match err {
                ClassError::Nothing => "--manage-services-without-class",
                _ => "--load-balancer-class",
            };
            bad(flag, err.to_string())
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
        self.load_balancer_classes()?;
        self.serving.validate()?;
        let webhook_port = self.ignored.webhook_secure_port.unwrap_or(10260);
        if !(0..=65535).contains(&webhook_port) {
            return Err(bad(
                "--webhook-secure-port",
                format!("must be between 0 and 65535, got {webhook_port}"),
            ));
        }
        if self.serving.secure_port != 0 && self.serving.secure_port == webhook_port {
            return Err(bad(
                "--webhook-secure-port",
                "must differ from --secure-port",
            ));
        }
        for list in &self.ignored.webhooks {
            for name in goflag::go_string_slice(list).unwrap_or_default() {
                if name != "*" {
                    return Err(bad(
                        "--webhooks",
                        format!("{name:?} is not in the list of known webhooks (there are none)"),
                    ));
                }
            }
        }
        self.node_ownership()?;
        self.leader_election.validate()
    }

    /// Which Nodes are this cloud's, from `--node-provider-id-prefix` and `--node-selector`;
    /// an error names the flag.
    pub(crate) fn node_ownership(&self) -> Result<NodeOwnership, FlagError> {
        NodeOwnership::new(&self.node_provider_id_prefix, &self.node_selector)
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
mod tests;
