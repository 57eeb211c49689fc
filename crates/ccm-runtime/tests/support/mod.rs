//! What the real-control-plane tests share: one kube-apiserver + etcd per test binary, a
//! counted client, a fake cloud, and Node helpers. Nodes are cluster-scoped, so each test
//! labels its Nodes with a run ID and its informer watches only those.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ccm_fake_cloud::FakeCloud;
use ccm_runtime::client::{ApiLayer, build_client};
use ccm_runtime::informer::{Informer, trim_node};
use ccm_test::{ControlPlane, eventually, unique_name};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

pub const RUN_LABEL: &str = "ccm-test/run";

pub struct Harness {
    pub cp: &'static ControlPlane,
    /// An admin client for the test's own reads and writes (not counted).
    pub admin: Client,
    /// The controllers' client; its requests are counted by `api`.
    pub client: Client,
    pub api: ApiLayer,
    pub cloud: Arc<FakeCloud>,
    pub run: String,
    pub cancel: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Harness {
    pub async fn new(cloud: FakeCloud) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn,kube_client=off,ccm_core=info".into()),
            )
            .with_test_writer()
            .try_init();
        let cp = ControlPlane::shared().await.expect(
            "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
        );
        let api = ApiLayer::new();
        let client = build_client(cp.admin_config().expect("admin config"), &api).expect("client");
        Self {
            cp,
            admin: cp.client().expect("admin client"),
            client,
            api,
            cloud: Arc::new(cloud),
            run: unique_name("run"),
            cancel: CancellationToken::new(),
        }
    }

    /// A Node informer over this test's Nodes only, already running.
    pub fn node_informer(&self) -> Informer<Node> {
        let config = watcher::Config::default().labels(&format!("{RUN_LABEL}={}", self.run));
        Informer::new(Api::all(self.client.clone()), config, trim_node)
    }

    pub fn start_informer(&self, informer: &Informer<Node>) {
        let informer = informer.clone();
        let cancel = self.cancel.clone();
        tokio::spawn(async move { informer.run(cancel).await });
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    /// A Node as a kubelet with `--cloud-provider=external` registers it: tainted, labelled.
    pub fn new_node(&self, prefix: &str) -> Node {
        let name = unique_name(prefix);
        let mut node = Node::default();
        node.metadata.name = Some(name.clone());
        node.metadata.labels = Some(BTreeMap::from([
            (RUN_LABEL.to_owned(), self.run.clone()),
            ("kubernetes.io/hostname".to_owned(), name),
        ]));
        node.spec = Some(NodeSpec {
            taints: Some(vec![uninitialized_taint()]),
            ..NodeSpec::default()
        });
        node
    }

    pub async fn create_node(&self, node: &Node) -> Node {
        self.nodes()
            .create(&PostParams::default(), node)
            .await
            .expect("create node")
    }

    /// Polls the Node until `pred` holds, for up to `timeout`.
    pub async fn wait_node(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Node) -> bool,
    ) -> Node {
        eventually(
            &format!("node {name} to reach the expected state"),
            timeout,
            || async {
                match self.nodes().get_opt(name).await.expect("get node") {
                    Some(node) if pred(&node) => Ok(node),
                    Some(node) => Err(format!("{node:#?}")),
                    None => Err(format!("node {name} is gone")),
                }
            },
        )
        .await
    }

    /// Polls until `name` no longer exists.
    pub async fn wait_node_gone(&self, name: &str, timeout: Duration) {
        eventually(&format!("node {name} to be gone"), timeout, || async {
            match self.nodes().get_opt(name).await.expect("get node") {
                None => Ok(()),
                Some(node) => Err(format!("it still exists: {:#?}", node.metadata)),
            }
        })
        .await;
    }

    /// Events about the object named `name`, in any namespace.
    pub async fn events_about(&self, name: &str) -> Vec<Event> {
        let events: Api<Event> = Api::all(self.admin.clone());
        events
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect()
    }

    /// Events about the object named `name`, as (type, reason, message).
    pub async fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        self.events_about(name)
            .await
            .into_iter()
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Polls until an event with `reason` about `name` exists; returns its message.
    pub async fn wait_event(&self, name: &str, reason: &str, timeout: Duration) -> String {
        eventually(&format!("a {reason} event for {name}"), timeout, || async {
            let events = self.events_for(name).await;
            match events.iter().find(|(_, r, _)| r == reason) {
                Some((_, _, note)) => Ok(note.clone()),
                None => Err(format!("events: {events:?}")),
            }
        })
        .await
    }
}

pub fn uninitialized_taint() -> Taint {
    Taint {
        key: ccm_provider::well_known::TAINT_UNINITIALIZED.to_owned(),
        value: Some("true".to_owned()),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    }
}

pub fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

/// The taint keys, less `node.kubernetes.io/not-ready`, which the API server's admission
/// adds to every new Node that has no Ready condition.
pub fn own_taint_keys(node: &Node) -> Vec<String> {
    taint_keys(node)
        .into_iter()
        .filter(|k| k != "node.kubernetes.io/not-ready")
        .collect()
}

pub fn is_initialized(node: &Node) -> bool {
    !taint_keys(node)
        .iter()
        .any(|k| k == ccm_provider::well_known::TAINT_UNINITIALIZED)
}

pub fn provider_id(node: &Node) -> Option<String> {
    node.spec.as_ref().and_then(|s| s.provider_id.clone())
}

pub fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.labels().get(key).map(String::as_str)
}

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

// ----- Route controller helpers (appended) -----

/// The Node's condition of type `type_`, as (status, reason).
pub fn node_condition(node: &Node, type_: &str) -> Option<(String, String)> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

impl Harness {
    /// A Node of this run (as [`Harness::new_node`] makes it) with these pod CIDRs in
    /// `spec.podCIDRs` and the first in `spec.podCIDR`.
    pub fn new_node_with_pod_cidrs(&self, prefix: &str, cidrs: &[&str]) -> Node {
        let mut node = self.new_node(prefix);
        let spec = node.spec.get_or_insert_with(NodeSpec::default);
        spec.pod_cidr = cidrs.first().map(|c| (*c).to_owned());
        spec.pod_cidrs = Some(cidrs.iter().map(|c| (*c).to_owned()).collect());
        node
    }

    /// This run's Nodes, as the API server has them now.
    pub async fn run_nodes(&self) -> Vec<Node> {
        self.nodes()
            .list(&ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run)))
            .await
            .expect("list nodes")
            .items
    }
}

// ----- Service controller helpers (appended) -----

/// A `type: LoadBalancer` Service named `name` with TCP `ports` as (name, port); the API
/// server picks the node ports.
pub fn lb_service(name: &str, ports: &[(&str, i32)]) -> k8s_openapi::api::core::v1::Service {
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    let mut svc = Service::default();
    svc.metadata.name = Some(name.to_owned());
    svc.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".to_owned()),
        selector: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
        ports: Some(
            ports
                .iter()
                .map(|(port_name, port)| ServicePort {
                    name: Some((*port_name).to_owned()),
                    port: *port,
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                })
                .collect(),
        ),
        ..ServiceSpec::default()
    });
    svc
}

/// The Service's ingress IPs (and hostnames).
pub fn ingress_of(svc: &k8s_openapi::api::core::v1::Service) -> Vec<String> {
    svc.status
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

/// Whether the Service carries the load balancer cleanup finalizer.
pub fn has_lb_finalizer(svc: &k8s_openapi::api::core::v1::Service) -> bool {
    svc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == ccm_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP)
}

impl Harness {
    /// A Service informer over one namespace, not yet running.
    pub fn service_informer(
        &self,
        namespace: &str,
    ) -> Informer<k8s_openapi::api::core::v1::Service> {
        Informer::new(
            Api::namespaced(self.client.clone(), namespace),
            watcher::Config::default(),
            ccm_runtime::informer::trim_service,
        )
    }

    /// Runs a Service informer until `cancel` fires.
    pub fn run_service_informer(
        &self,
        informer: &Informer<k8s_openapi::api::core::v1::Service>,
        cancel: CancellationToken,
    ) {
        let informer = informer.clone();
        tokio::spawn(async move { informer.run(cancel).await });
    }

    /// Runs a Node informer until `cancel` fires.
    pub fn run_node_informer(&self, informer: &Informer<Node>, cancel: CancellationToken) {
        let informer = informer.clone();
        tokio::spawn(async move { informer.run(cancel).await });
    }

    /// The Services of `namespace`, with the admin client.
    pub fn services(&self, namespace: &str) -> Api<k8s_openapi::api::core::v1::Service> {
        Api::namespaced(self.admin.clone(), namespace)
    }

    /// The Service `namespace/name`, if it exists.
    pub async fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<k8s_openapi::api::core::v1::Service> {
        self.services(namespace)
            .get_opt(name)
            .await
            .expect("get service")
    }

    /// Polls the Service until `pred` holds, for up to `timeout`; panics at once if it is
    /// gone.
    pub async fn wait_service(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&k8s_openapi::api::core::v1::Service) -> bool,
    ) -> k8s_openapi::api::core::v1::Service {
        let what = format!("service {namespace}/{name} to reach the expected state");
        eventually(&what, timeout, || async {
            match self.service(namespace, name).await {
                Some(svc) if pred(&svc) => Ok(svc),
                Some(svc) => Err(format!("{svc:#?}")),
                None => panic!("service {namespace}/{name} is gone"),
            }
        })
        .await
    }

    /// Polls until the Service no longer exists.
    pub async fn wait_service_gone(&self, namespace: &str, name: &str, timeout: Duration) {
        let what = format!("service {namespace}/{name} to be gone");
        eventually(&what, timeout, || async {
            match self.service(namespace, name).await {
                None => Ok(()),
                Some(svc) => Err(format!("it still exists: {svc:#?}")),
            }
        })
        .await;
    }

    /// Events about the object `name` in `namespace`, as (type, reason, message, count).
    pub async fn events_in(
        &self,
        namespace: &str,
        name: &str,
    ) -> Vec<(String, String, String, i32)> {
        self.events_about(name)
            .await
            .into_iter()
            .filter(|e| e.metadata.namespace.as_deref() == Some(namespace))
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                    e.count.unwrap_or(1),
                )
            })
            .collect()
    }

    /// How many times an event with `reason` about `namespace/name` was recorded.
    pub async fn event_count(&self, namespace: &str, name: &str, reason: &str) -> i32 {
        self.events_in(namespace, name)
            .await
            .into_iter()
            .filter(|(_, r, _, _)| r == reason)
            .map(|(_, _, _, count)| count)
            .sum()
    }

    /// Polls until an event with `reason` about `namespace/name` exists; returns its message.
    pub async fn wait_event_in(
        &self,
        namespace: &str,
        name: &str,
        reason: &str,
        timeout: Duration,
    ) -> String {
        let what = format!("a {reason} event for {namespace}/{name}");
        eventually(&what, timeout, || async {
            let events = self.events_in(namespace, name).await;
            match events.iter().find(|(_, r, _, _)| r == reason) {
                Some((_, _, note, _)) => Ok(note.clone()),
                None => Err(format!("events: {events:?}")),
            }
        })
        .await
    }
}
