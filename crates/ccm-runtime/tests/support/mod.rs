//! What the real-control-plane tests of ccm-runtime share: one kube-apiserver + etcd per test
//! binary, a counted client for the controllers, a fake cloud, and informers over the test's
//! own Nodes. The rest is ccm-test's, for every crate's tests: [`TestRun`] (this test's
//! Nodes, labelled with a run ID so that its informers see only those; its Services and
//! Events; the waits), which a [`Harness`] derefs to, and the object helpers of
//! `ccm_test::fixtures`.
#![allow(dead_code, unreachable_pub)]

use std::ops::Deref;
use std::sync::Arc;

use ccm_fake_cloud::FakeCloud;
use ccm_runtime::client::{ApiLayer, build_client};
use ccm_runtime::informer::{Informer, trim_node};
use ccm_test::fixtures::ServiceBuilder;
use ccm_test::{ControlPlane, TestRun};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

pub struct Harness {
    pub cp: &'static ControlPlane,
    /// An admin client for the test's own reads and writes (not counted).
    pub admin: Client,
    /// The controllers' client; its requests are counted by `api`.
    pub client: Client,
    pub api: ApiLayer,
    pub cloud: Arc<FakeCloud>,
    /// This test's Nodes, Services and Events, read and written with `admin`.
    pub run: TestRun,
    pub cancel: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Deref for Harness {
    type Target = TestRun;

    fn deref(&self) -> &TestRun {
        &self.run
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
        let admin = cp.client().expect("admin client");
        Self {
            cp,
            run: TestRun::new(admin.clone()),
            admin,
            client,
            api,
            cloud: Arc::new(cloud),
            cancel: CancellationToken::new(),
        }
    }

    /// A Node informer over this test's Nodes only, with the controllers' client; not yet
    /// running.
    pub fn node_informer(&self) -> Informer<Node> {
        let config = watcher::Config::default().labels(&self.run.label_selector());
        Informer::new(Api::all(self.client.clone()), config, trim_node)
    }

    /// Runs a Node informer until the harness is dropped.
    pub fn start_informer(&self, informer: &Informer<Node>) {
        self.run_node_informer(informer, self.cancel.clone());
    }

    /// A Service informer over one namespace, not yet running.
    pub fn service_informer(&self, namespace: &str) -> Informer<Service> {
        Informer::new(
            Api::namespaced(self.client.clone(), namespace),
            watcher::Config::default(),
            ccm_runtime::informer::trim_service,
        )
    }

    /// Runs a Service informer until `cancel` fires.
    pub fn run_service_informer(&self, informer: &Informer<Service>, cancel: CancellationToken) {
        let informer = informer.clone();
        tokio::spawn(async move { informer.run(cancel).await });
    }

    /// Runs a Node informer until `cancel` fires.
    pub fn run_node_informer(&self, informer: &Informer<Node>, cancel: CancellationToken) {
        let informer = informer.clone();
        tokio::spawn(async move { informer.run(cancel).await });
    }
}

/// A `type: LoadBalancer` Service named `name`, selecting `app=name`, with TCP `ports` as
/// (name, port); the API server picks the node ports.
pub fn lb_service(name: &str, ports: &[(&str, i32)]) -> Service {
    let service = ServiceBuilder::load_balancer(name).selector("app", name);
    let mut service = ports
        .iter()
        .fold(service, |s, (port_name, port)| {
            s.port(*port).port_name(port_name).protocol("TCP")
        })
        .build();
    // With no ports, `ports: []`: the list the API server refuses as empty.
    if let Some(spec) = service.spec.as_mut() {
        spec.ports.get_or_insert_with(Vec::new);
    }
    service
}
