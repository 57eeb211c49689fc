//! [`TestRun`]: one test's objects on a control plane that other tests share.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use crate::fixtures::NodeBuilder;
use crate::{eventually, unique_name};

/// The label [`TestRun::new_node`] puts on a test's Nodes, its value the run's
/// [`id`](TestRun::id).
pub const RUN_LABEL: &str = "ccm-test/run";

/// One test's view of a control plane: an admin client for the test's own reads and
/// writes, and a run ID unique to the test that labels its Nodes ([`RUN_LABEL`]).
///
/// Nodes are cluster-scoped, so tests that share a [`ControlPlane`](crate::ControlPlane)
/// see each other's; a controller under test given a watch with
/// [`label_selector`](Self::label_selector) sees only this test's. Services and Events go
/// in a namespace of the test's own ([`ControlPlane::create_namespace`](
/// crate::ControlPlane::create_namespace)).
///
/// Its methods panic on API errors, with what they were doing, and its waits are
/// [`eventually`]'s.
///
/// ```no_run
/// use std::time::Duration;
///
/// use ccm_test::fixtures::is_initialized;
///
/// # async fn demo() -> Result<(), ccm_test::Error> {
/// let cp = ccm_test::ControlPlane::shared().await?;
/// let run = ccm_test::TestRun::new(cp.client()?);
/// let node = run.create_node(&run.new_node("worker")).await;
/// // … a controller watching `run.label_selector()` initialises it …
/// let name = node.metadata.name.unwrap();
/// run.wait_node(&name, Duration::from_secs(30), is_initialized).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TestRun {
    admin: Client,
    id: String,
}

impl std::fmt::Debug for TestRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRun").field("id", &self.id).finish()
    }
}

impl TestRun {
    /// A new run with a unique ID, reading and writing with `admin` (a client that may do
    /// anything: [`ControlPlane::client`](crate::ControlPlane::client)).
    pub fn new(admin: Client) -> Self {
        Self {
            admin,
            id: unique_name("run"),
        }
    }

    /// The run's ID, the value of [`RUN_LABEL`] on its Nodes.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The label selector of this run's Nodes: `ccm-test/run=<id>`.
    pub fn label_selector(&self) -> String {
        format!("{RUN_LABEL}={}", self.id)
    }

    /// The admin client it reads and writes with.
    pub fn admin(&self) -> &Client {
        &self.admin
    }

    /// Nodes, with the admin client.
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.admin.clone())
    }

    /// A Node of this run as a kubelet with `--cloud-provider=external` registers it:
    /// named [`unique_name`]`(prefix)`, with the uninitialized taint, [`RUN_LABEL`] and
    /// `kubernetes.io/hostname`. Not created yet: see [`create_node`](Self::create_node).
    pub fn new_node(&self, prefix: &str) -> Node {
        self.node_builder(prefix).build()
    }

    /// [`new_node`](Self::new_node) with these pod CIDRs in `spec.podCIDRs` and the first
    /// in `spec.podCIDR`.
    pub fn new_node_with_pod_cidrs(&self, prefix: &str, cidrs: &[&str]) -> Node {
        self.node_builder(prefix).pod_cidrs(cidrs).build()
    }

    fn node_builder(&self, prefix: &str) -> NodeBuilder {
        let name = unique_name(prefix);
        NodeBuilder::new(&name)
            .label(RUN_LABEL, &self.id)
            .label("kubernetes.io/hostname", &name)
            .uninitialized()
    }

    /// Creates `node`; returns it as the API server has it.
    pub async fn create_node(&self, node: &Node) -> Node {
        self.nodes()
            .create(&PostParams::default(), node)
            .await
            .expect("create node")
    }

    /// This run's Nodes, as the API server has them now.
    pub async fn run_nodes(&self) -> Vec<Node> {
        self.nodes()
            .list(&ListParams::default().labels(&self.label_selector()))
            .await
            .expect("list nodes")
            .items
    }

    /// Polls the Node `name` until `pred` holds, for up to `timeout`; returns it.
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

    /// Polls until the Node `name` no longer exists, for up to `timeout`.
    pub async fn wait_node_gone(&self, name: &str, timeout: Duration) {
        eventually(&format!("node {name} to be gone"), timeout, || async {
            match self.nodes().get_opt(name).await.expect("get node") {
                None => Ok(()),
                Some(node) => Err(format!("it still exists: {:#?}", node.metadata)),
            }
        })
        .await;
    }

    /// The Services of `namespace`, with the admin client.
    pub fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.admin.clone(), namespace)
    }

    /// The Service `namespace/name`, if it exists.
    pub async fn service(&self, namespace: &str, name: &str) -> Option<Service> {
        self.services(namespace)
            .get_opt(name)
            .await
            .expect("get service")
    }

    /// Polls the Service `namespace/name` until `pred` holds, for up to `timeout`; returns
    /// it. Panics at once if it is gone.
    pub async fn wait_service(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Service) -> bool,
    ) -> Service {
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

    /// Polls until the Service `namespace/name` no longer exists, for up to `timeout`.
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

    /// The Events about the object named `name`, in any namespace, without those of the API
    /// server's repair loops.
    pub async fn events_about(&self, name: &str) -> Vec<Event> {
        events_about(Api::all(self.admin.clone()), name).await
    }

    /// The Events in `namespace` about the object named `name`, listed as `kubectl get
    /// events -n namespace` lists them (core/v1), without those of the API server's repair
    /// loops. A cluster-scoped object's are in `default`.
    pub async fn events_about_in(&self, namespace: &str, name: &str) -> Vec<Event> {
        events_about(Api::namespaced(self.admin.clone(), namespace), name).await
    }

    /// The Events about the object named `name`, in any namespace, as (type, reason,
    /// message).
    pub async fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        self.events_about(name)
            .await
            .into_iter()
            .map(type_reason_message)
            .collect()
    }

    /// The Events about the object `name` in `namespace`, as (type, reason, message,
    /// count).
    pub async fn events_in(
        &self,
        namespace: &str,
        name: &str,
    ) -> Vec<(String, String, String, i32)> {
        self.events_about_in(namespace, name)
            .await
            .into_iter()
            .map(|e| {
                let count = e.count.unwrap_or(1);
                let (type_, reason, message) = type_reason_message(e);
                (type_, reason, message, count)
            })
            .collect()
    }

    /// How many times an Event with `reason` about `namespace/name` was recorded (the sum
    /// of their counts).
    pub async fn event_count(&self, namespace: &str, name: &str, reason: &str) -> i32 {
        self.events_in(namespace, name)
            .await
            .into_iter()
            .filter(|(_, r, _, _)| r == reason)
            .map(|(_, _, _, count)| count)
            .sum()
    }

    /// Polls until an Event with `reason` about the object named `name` (in any namespace)
    /// exists, for up to `timeout`; returns its message.
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

    /// Polls until an Event with `reason` about `namespace/name` exists, for up to
    /// `timeout`; returns its message.
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

/// The API server's own controllers that record Events about Services: its repair loops
/// report a Service created while they run (`ClusterIPNotAllocated`, `PortNotAllocated`),
/// a race of the API server that says nothing about the controllers under test.
const API_SERVER_REPORTERS: &[&str] = &[
    "ipallocator-repair-controller",
    "portallocator-repair-controller",
];

/// The Events `api` lists about the object named `name`, without the API server's own.
async fn events_about(api: Api<Event>, name: &str) -> Vec<Event> {
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter(|e| {
            !API_SERVER_REPORTERS.contains(&e.reporting_component.as_deref().unwrap_or_default())
        })
        .collect()
}

/// The Event's type, reason and message ("" for what it has not).
fn type_reason_message(event: Event) -> (String, String, String) {
    (
        event.type_.unwrap_or_default(),
        event.reason.unwrap_or_default(),
        event.message.unwrap_or_default(),
    )
}
