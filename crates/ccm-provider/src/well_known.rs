//! Well-known keys: the taints, labels, annotations, finalizers, conditions and ports a CCM
//! reads and writes, spelled exactly as Kubernetes spells them.

/// The taint a kubelet started with `--cloud-provider=external` puts on its Node; the
/// cloud-node controller removes it once the Node is initialised.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The taint (effect `NoSchedule`, no value) the lifecycle controller puts on a Node whose
/// instance is shut down, and removes when the Node is Ready again.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// The taint the cluster-autoscaler puts on a Node it is about to delete; such Nodes get no
/// load balancer traffic.
pub const TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER: &str = "ToBeDeletedByClusterAutoscaler";

/// The annotation a kubelet sets from its `--node-ip`: one IP, or an IPv4,IPv6 pair. The
/// cloud-node controller puts the matching cloud addresses first.
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// The finalizer the service controller puts on a `type: LoadBalancer` Service before its
/// first cloud call, and removes only after the load balancer is gone.
pub const FINALIZER_LOAD_BALANCER_CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";

/// The GA zone label.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// The GA region label.
pub const LABEL_TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";
/// The GA instance-type label.
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// The deprecated beta zone label, still written beside the GA one.
pub const LABEL_FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// The deprecated beta region label, still written beside the GA one.
pub const LABEL_FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// The deprecated beta instance-type label, still written beside the GA one.
pub const LABEL_INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";

/// A Node label that, unless it parses as a false boolean, keeps the Node out of load
/// balancers.
pub const LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// The Node condition the route controller sets: `False`/`RouteCreated` once the Node's
/// routes exist, `True`/`NoRouteCreated` otherwise.
pub const CONDITION_NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// The default port of the controller manager's HTTPS endpoint (`--secure-port`).
pub const DEFAULT_SECURE_PORT: u16 = 10258;

/// The default port of the admission webhook server (`--webhook-secure-port`).
pub const DEFAULT_WEBHOOK_SECURE_PORT: u16 = 10260;

/// The default name of the leader-election Lease.
pub const DEFAULT_LEADER_ELECTION_NAME: &str = "cloud-controller-manager";

/// The default namespace of the leader-election Lease.
pub const DEFAULT_LEADER_ELECTION_NAMESPACE: &str = "kube-system";

/// A Node label that keeps the Node out of the lifecycle controller's hands: it is neither
/// deleted nor tainted, whatever the cloud says.
pub const LABEL_EXCLUDE_FROM_LIFECYCLE_MANAGEMENT: &str =
    "node.kubernetes.io/exclude-from-lifecycle-management";
