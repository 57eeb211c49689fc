//! What the real-control-plane tests share: one kube-apiserver + etcd per test binary, a
//! counted client, a fake cloud, and Node helpers. Nodes are cluster-scoped, so each test
//! labels its Nodes with a run ID and its informer watches only those.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ccm_core::client::{ApiLayer, build_client};
use ccm_core::informer::{Informer, trim_node};
use ccm_fake_cloud::FakeCloud;
use ccm_test::{ControlPlane, unique_name};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::api::events::v1::Event;
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
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let node = self.nodes().get_opt(name).await.expect("get node");
            if let Some(node) = node {
                if pred(&node) {
                    return node;
                }
                if tokio::time::Instant::now() > deadline {
                    panic!(
                        "node {name} did not reach the expected state in {timeout:?}: {node:#?}"
                    );
                }
            } else if tokio::time::Instant::now() > deadline {
                panic!("node {name} is gone");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until `name` no longer exists.
    pub async fn wait_node_gone(&self, name: &str, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self
            .nodes()
            .get_opt(name)
            .await
            .expect("get node")
            .is_some()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {name} still exists after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Events about the object named `name`, as (type, reason, note).
    pub async fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        let events: Api<Event> = Api::all(self.admin.clone());
        events
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Polls until an event with `reason` about `name` exists; returns its note.
    pub async fn wait_event(&self, name: &str, reason: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some((_, _, note)) = self
                .events_for(name)
                .await
                .into_iter()
                .find(|(_, r, _)| r == reason)
            {
                return note;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {reason} event for {name} in {timeout:?}; events: {:?}",
                self.events_for(name).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

pub fn uninitialized_taint() -> Taint {
    Taint {
        key: ccm_core::well_known::TAINT_UNINITIALIZED.to_owned(),
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
        .any(|k| k == ccm_core::well_known::TAINT_UNINITIALIZED)
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
