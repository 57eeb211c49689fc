//! Kubernetes objects for tests, and what tests read off them: a Node as a kubelet with
//! `--cloud-provider=external` registers it ([`tainted_node`], [`NodeBuilder`]), a Service
//! ([`ServiceBuilder`], `type: LoadBalancer` with [`ServiceBuilder::load_balancer`]), and
//! the few fields a CCM test checks (taints, provider ID, addresses, conditions, ingress,
//! finalizers).
//!
//! ```
//! use ccm_test::fixtures::{NodeBuilder, ServiceBuilder, is_initialized, node_condition, tainted_node};
//!
//! let node = tainted_node("node-1");
//! assert!(!is_initialized(&node));
//! assert_eq!(node_condition(&node, "Ready"), None);
//!
//! let ready = NodeBuilder::new("node-3").uninitialized().ready().build();
//! assert_eq!(
//!     node_condition(&ready, "Ready"),
//!     Some(("True".into(), "KubeletReady".into()))
//! );
//!
//! let node = NodeBuilder::new("node-2")
//!     .uninitialized()
//!     .pod_cidrs(&["10.244.2.0/24"])
//!     .label("zone", "a")
//!     .build();
//! assert_eq!(node.spec.unwrap().pod_cidr.as_deref(), Some("10.244.2.0/24"));
//!
//! let service = ServiceBuilder::load_balancer("web")
//!     .port(80)
//!     .target_port(8080)
//!     .annotation("example.com/algorithm", "least_connections")
//!     .build();
//! assert_eq!(service.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, Service, ServicePort, ServiceSpec, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use crate::cluster::UNINITIALIZED_TAINT;
use crate::named;

/// The finalizer the service controller puts on a `type: LoadBalancer` Service while its
/// load balancer may exist (`ccm_core::well_known::FINALIZER_LOAD_BALANCER_CLEANUP`).
pub const LOAD_BALANCER_CLEANUP_FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// Sets `key: value` in a map of labels, annotations or a selector, made when there is none.
fn insert(map: &mut Option<BTreeMap<String, String>>, key: &str, value: &str) {
    map.get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
}

/// The taint a kubelet with `--cloud-provider=external` registers its Node with:
/// [`UNINITIALIZED_TAINT`], value `true`, effect `NoSchedule`.
pub fn uninitialized_taint() -> Taint {
    Taint {
        key: UNINITIALIZED_TAINT.to_owned(),
        value: Some("true".to_owned()),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    }
}

/// A Node named `name` as a kubelet with `--cloud-provider=external` registers it: with
/// the [`uninitialized_taint`] and nothing else.
pub fn tainted_node(name: &str) -> Node {
    NodeBuilder::new(name).uninitialized().build()
}

/// A Node, field by field; [`build`](Self::build) returns it. `spec` stays unset unless a
/// method sets a field of it.
#[derive(Clone, Debug)]
#[must_use]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A Node named `name`, with nothing else set.
    pub fn new(name: &str) -> Self {
        Self { node: named(name) }
    }

    fn spec(&mut self) -> &mut NodeSpec {
        self.node.spec.get_or_insert_with(NodeSpec::default)
    }

    /// Adds the [`uninitialized_taint`].
    pub fn uninitialized(mut self) -> Self {
        self.spec()
            .taints
            .get_or_insert_with(Vec::new)
            .push(uninitialized_taint());
        self
    }

    /// Sets `spec.providerID`, as kubelet's `--provider-id` does.
    pub fn provider_id(mut self, provider_id: impl Into<String>) -> Self {
        self.spec().provider_id = Some(provider_id.into());
        self
    }

    /// Sets `spec.podCIDRs` to `cidrs` and `spec.podCIDR` to the first of them.
    pub fn pod_cidrs(mut self, cidrs: &[&str]) -> Self {
        let spec = self.spec();
        spec.pod_cidr = cidrs.first().map(|c| (*c).to_owned());
        spec.pod_cidrs = Some(cidrs.iter().map(|c| (*c).to_owned()).collect());
        self
    }

    /// Adds the label `key=value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        insert(&mut self.node.metadata.labels, key, value);
        self
    }

    /// Sets the `Ready` condition `True`, as a running kubelet reports it (registration
    /// keeps a created Node's status).
    pub fn ready(mut self) -> Self {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let condition = NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(now),
        };
        self.node
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new)
            .push(condition);
        self
    }

    /// Sets `metadata.uid` (a Node that never reaches an API server has none otherwise).
    pub fn uid(mut self, uid: &str) -> Self {
        self.node.metadata.uid = Some(uid.to_owned());
        self
    }

    /// The Node.
    pub fn build(self) -> Node {
        self.node
    }
}

impl From<NodeBuilder> for Node {
    fn from(builder: NodeBuilder) -> Self {
        builder.build()
    }
}

/// A Service, field by field; [`build`](Self::build) returns it.
///
/// Ports are added with [`port`](Self::port); [`target_port`](Self::target_port),
/// [`node_port`](Self::node_port), [`protocol`](Self::protocol) and
/// [`port_name`](Self::port_name) set a field of the port added last, and panic when no
/// port was added yet. What is not set is left to the API server's defaults (a target port
/// equal to the port, TCP, a node port it picks).
#[derive(Clone, Debug)]
#[must_use]
pub struct ServiceBuilder {
    service: Service,
}

impl ServiceBuilder {
    /// A Service named `name` with no type (a `ClusterIP` Service once the API server has
    /// it) and no ports.
    pub fn new(name: &str) -> Self {
        let service = Service {
            spec: Some(ServiceSpec::default()),
            ..named(name)
        };
        Self { service }
    }

    /// A `type: LoadBalancer` Service named `name`, with no ports yet.
    pub fn load_balancer(name: &str) -> Self {
        let mut builder = Self::new(name);
        builder.spec().type_ = Some("LoadBalancer".to_owned());
        builder
    }

    fn spec(&mut self) -> &mut ServiceSpec {
        self.service.spec.get_or_insert_with(ServiceSpec::default)
    }

    fn last_port(&mut self, field: &str) -> &mut ServicePort {
        self.spec()
            .ports
            .as_mut()
            .and_then(|ports| ports.last_mut())
            .unwrap_or_else(|| panic!("ServiceBuilder::{field} before any port was added"))
    }

    /// Sets `metadata.namespace` (an object passed to a provider, which no API server
    /// filled in).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.service.metadata.namespace = Some(namespace.to_owned());
        self
    }

    /// Sets `metadata.uid` (load balancer names are made from it).
    pub fn uid(mut self, uid: &str) -> Self {
        self.service.metadata.uid = Some(uid.to_owned());
        self
    }

    /// Adds the annotation `key: value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        insert(&mut self.service.metadata.annotations, key, value);
        self
    }

    /// Adds `key=value` to the selector.
    pub fn selector(mut self, key: &str, value: &str) -> Self {
        insert(&mut self.spec().selector, key, value);
        self
    }

    /// Adds a port: `{port: port}`, its other fields set by the methods that follow.
    pub fn port(mut self, port: i32) -> Self {
        self.spec()
            .ports
            .get_or_insert_with(Vec::new)
            .push(ServicePort {
                port,
                ..ServicePort::default()
            });
        self
    }

    /// Sets the `targetPort` of the port added last.
    pub fn target_port(mut self, target_port: i32) -> Self {
        self.last_port("target_port").target_port = Some(IntOrString::Int(target_port));
        self
    }

    /// Sets the `nodePort` of the port added last.
    pub fn node_port(mut self, node_port: i32) -> Self {
        self.last_port("node_port").node_port = Some(node_port);
        self
    }

    /// Sets the `protocol` (`TCP`, `UDP`, `SCTP`) of the port added last.
    pub fn protocol(mut self, protocol: &str) -> Self {
        self.last_port("protocol").protocol = Some(protocol.to_owned());
        self
    }

    /// Sets the `name` of the port added last.
    pub fn port_name(mut self, name: &str) -> Self {
        self.last_port("port_name").name = Some(name.to_owned());
        self
    }

    /// The Service.
    pub fn build(self) -> Service {
        self.service
    }
}

impl From<ServiceBuilder> for Service {
    fn from(builder: ServiceBuilder) -> Self {
        builder.build()
    }
}

/// The keys of the Node's taints, in order.
pub fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

/// The keys of the Node's taints, less `node.kubernetes.io/not-ready`, which the API
/// server's admission adds to every new Node that has no Ready condition.
pub fn own_taint_keys(node: &Node) -> Vec<String> {
    taint_keys(node)
        .into_iter()
        .filter(|k| k != "node.kubernetes.io/not-ready")
        .collect()
}

/// Whether the Node no longer has the [`uninitialized_taint`]: a CCM initialised it.
pub fn is_initialized(node: &Node) -> bool {
    !taint_keys(node).iter().any(|k| k == UNINITIALIZED_TAINT)
}

/// The Node's `spec.providerID`.
pub fn provider_id(node: &Node) -> Option<String> {
    node.spec.as_ref().and_then(|s| s.provider_id.clone())
}

/// The value of the Node's label `key`.
pub fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The Node's `status.addresses`, as (type, address).
pub fn addresses(node: &Node) -> Vec<(String, String)> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| (a.type_.clone(), a.address.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The Node's condition of type `type_`, as (status, reason).
pub fn node_condition(node: &Node, type_: &str) -> Option<(String, String)> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// The Service's load balancer ingress, one entry each: its IP, else its hostname, else
/// "". Empty until a load balancer is written into the status.
pub fn ingress_of(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|i| {
            i.iter()
                .map(|i| {
                    i.ip.clone()
                        .or_else(|| i.hostname.clone())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the Service's status has at least one load balancer ingress.
pub fn has_ingress(service: &Service) -> bool {
    !ingress_of(service).is_empty()
}

/// Whether the Service carries the [`LOAD_BALANCER_CLEANUP_FINALIZER`].
pub fn has_lb_finalizer(service: &Service) -> bool {
    service
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == LOAD_BALANCER_CLEANUP_FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object `json` describes.
    fn from_json<T: serde::de::DeserializeOwned>(json: serde_json::Value) -> T {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_well_known_names_are_ccm_cores() {
        use ccm_provider::well_known;
        assert_eq!(UNINITIALIZED_TAINT, well_known::TAINT_UNINITIALIZED);
        assert_eq!(
            LOAD_BALANCER_CLEANUP_FINALIZER,
            well_known::FINALIZER_LOAD_BALANCER_CLEANUP
        );
    }

    #[test]
    fn a_tainted_node_is_what_a_kubelet_registers() {
        let node = tainted_node("n1");
        assert_eq!(
            node,
            from_json(serde_json::json!({
                "metadata": {"name": "n1"},
                "spec": {"taints": [{
                    "key": "node.cloudprovider.kubernetes.io/uninitialized",
                    "value": "true",
                    "effect": "NoSchedule"
                }]}
            }))
        );
        assert!(!is_initialized(&node));
        assert!(is_initialized(&NodeBuilder::new("n2").build()));
    }

    #[test]
    fn a_node_gets_only_the_fields_set() {
        let node = NodeBuilder::new("n1")
            .provider_id("fake://n1")
            .pod_cidrs(&["10.244.1.0/24", "fd00::/64"])
            .label("a", "b")
            .uid("u-1")
            .build();
        assert_eq!(
            node,
            from_json(serde_json::json!({
                "metadata": {"name": "n1", "uid": "u-1", "labels": {"a": "b"}},
                "spec": {
                    "providerID": "fake://n1",
                    "podCIDR": "10.244.1.0/24",
                    "podCIDRs": ["10.244.1.0/24", "fd00::/64"]
                }
            }))
        );
        assert_eq!(provider_id(&node).as_deref(), Some("fake://n1"));
        assert_eq!(label(&node, "a"), Some("b"));
        assert_eq!(label(&node, "c"), None);
        assert_eq!(
            NodeBuilder::new("n").build(),
            from_json(serde_json::json!({"metadata": {"name": "n"}}))
        );
    }

    #[test]
    fn a_load_balancer_service_is_the_json_tests_wrote() {
        let service = ServiceBuilder::load_balancer("web")
            .port(80)
            .target_port(8080)
            .build();
        let written: Service = from_json(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
        }));
        assert_eq!(service, written);

        let service = ServiceBuilder::load_balancer("dns")
            .namespace("default")
            .uid("u-1")
            .annotation("k", "v")
            .selector("app", "dns")
            .port(53)
            .port_name("dns")
            .protocol("UDP")
            .node_port(30053)
            .port(80)
            .build();
        let written: Service = from_json(serde_json::json!({
            "metadata": {"name": "dns", "namespace": "default", "uid": "u-1",
                         "annotations": {"k": "v"}},
            "spec": {"type": "LoadBalancer", "selector": {"app": "dns"}, "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                {"port": 80}
            ]}
        }));
        assert_eq!(service, written);
        assert_eq!(
            ServiceBuilder::new("plain").build().spec.unwrap().type_,
            None
        );
    }

    #[test]
    #[should_panic(expected = "ServiceBuilder::target_port before any port was added")]
    fn a_port_field_needs_a_port() {
        let _ = ServiceBuilder::load_balancer("web").target_port(8080);
    }

    #[test]
    fn what_tests_read_off_objects() {
        let node: Node = from_json(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                {"key": "x", "effect": "NoSchedule"}
            ]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "NetworkUnavailable", "status": "False",
                                "reason": "RouteCreated"}]
            }
        }));
        assert_eq!(taint_keys(&node), ["node.kubernetes.io/not-ready", "x"]);
        assert_eq!(own_taint_keys(&node), ["x"]);
        assert_eq!(
            addresses(&node),
            [("InternalIP".to_owned(), "10.0.0.1".to_owned())]
        );
        assert_eq!(
            node_condition(&node, "NetworkUnavailable"),
            Some(("False".to_owned(), "RouteCreated".to_owned()))
        );
        assert_eq!(node_condition(&node, "Ready"), None);

        let mut service = ServiceBuilder::load_balancer("web").port(80).build();
        assert!(!has_ingress(&service) && !has_lb_finalizer(&service));
        service = from_json(serde_json::json!({
            "metadata": {"name": "web", "finalizers": [LOAD_BALANCER_CLEANUP_FINALIZER]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"hostname": "lb"}]}}
        }));
        assert_eq!(ingress_of(&service), ["192.0.2.1", "lb"]);
        assert!(has_ingress(&service) && has_lb_finalizer(&service));
    }
}
