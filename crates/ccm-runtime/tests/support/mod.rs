//! What the real-control-plane tests of ccm-runtime share: one kube-apiserver + etcd per test
//! binary, a counted client for the controllers, a fake cloud, and informers over the test's
//! own Nodes; the fake cloud with a test's own load balancers or routes in front
//! ([`Fronted`]); and the fake cloud's whole controller manager run in the test's process
//! ([`FakeCcm`]). The rest is ccm-test's, for every crate's tests: [`TestRun`] (this test's
//! Nodes, labelled with a run ID so that its informers see only those; its Services and
//! Events; the waits), which a [`Harness`] derefs to, and the object helpers of
//! `ccm_test::fixtures`.
#![allow(dead_code, unreachable_pub)]

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ccm_fake_cloud::FakeCloud;
use ccm_provider::{CloudProvider, LoadBalancer, ProviderRegistry, Routes};
use ccm_runtime::app::{AppError, CloudControllerManager, Options};
use ccm_runtime::client::{ApiLayer, build_client};
use ccm_runtime::informer::{Informer, trim_node};
use ccm_test::fixtures::ServiceBuilder;
use ccm_test::{ControlPlane, TestRun};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The name the fake cloud's controller manager runs under.
const FAKE_CCM: &str = "fake-cloud-controller-manager";

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
        ccm_test::init_tracing("warn,kube_client=off,ccm_core=info");
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

/// The fake cloud, as the provider controllers are given, with a test's own load balancers
/// or routes in front of the fake cloud's (which they call on to): the provider supports
/// only that capability.
pub struct Fronted {
    fake: Arc<FakeCloud>,
    load_balancer: Option<Arc<dyn LoadBalancer>>,
    routes: Option<Arc<dyn Routes>>,
}

impl Fronted {
    /// The fake cloud with `front` as its load balancers.
    pub fn load_balancer(fake: Arc<FakeCloud>, front: Arc<dyn LoadBalancer>) -> Arc<Self> {
        Arc::new(Self {
            fake,
            load_balancer: Some(front),
            routes: None,
        })
    }

    /// The fake cloud with `front` as its routes.
    pub fn routes(fake: Arc<FakeCloud>, front: Arc<dyn Routes>) -> Arc<Self> {
        Arc::new(Self {
            fake,
            load_balancer: None,
            routes: Some(front),
        })
    }
}

impl CloudProvider for Fronted {
    fn provider_name(&self) -> &str {
        self.fake.provider_name()
    }

    fn has_cluster_id(&self) -> bool {
        self.fake.has_cluster_id()
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        self.load_balancer.as_deref()
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.routes.as_deref()
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

/// The fake cloud's controller manager, run in this process as its binary runs it:
/// `--cloud-provider=fake --cloud-config=FILE --kubeconfig=PATH` and the test's own flags.
pub struct FakeCcm {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), AppError>>,
    /// The folder of the cloud config.
    _dir: tempfile::TempDir,
}

impl FakeCcm {
    /// Starts it with `cloud_config` (the fake cloud's YAML) as its `--cloud-config`,
    /// `kubeconfig` as its `--kubeconfig`, then `flags`.
    pub fn start(cloud_config: &str, kubeconfig: &Path, flags: &[&str]) -> Self {
        Self::start_with(|manager| manager, cloud_config, kubeconfig, flags)
    }

    /// [`start`](Self::start), the manager set up by `configure` first.
    pub fn start_with(
        configure: impl FnOnce(CloudControllerManager) -> CloudControllerManager,
        cloud_config: &str,
        kubeconfig: &Path,
        flags: &[&str],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("fake.yaml");
        std::fs::write(&config, cloud_config).unwrap();
        let args = [FAKE_CCM, "--cloud-provider=fake"]
            .into_iter()
            .map(String::from)
            .chain([
                format!("--cloud-config={}", config.display()),
                format!("--kubeconfig={}", kubeconfig.display()),
            ])
            .chain(flags.iter().map(|flag| (*flag).to_owned()));
        let options = Options::from_args(args).unwrap();
        let mut registry = ProviderRegistry::new();
        FakeCloud::register(&mut registry).unwrap();
        let manager = configure(CloudControllerManager::new(FAKE_CCM, registry));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(manager.run_with_options(options, shutdown.clone()));
        Self {
            shutdown,
            task,
            _dir: dir,
        }
    }

    /// Whether it has returned (it should not before [`stop`](Self::stop)).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Shuts it down, as SIGTERM does, and asserts that it returns `Ok` within `within`.
    pub async fn stop(self, within: Duration) {
        self.shutdown.cancel();
        tokio::time::timeout(within, self.task)
            .await
            .unwrap_or_else(|_| {
                panic!("the controller manager still runs {within:?} after shutdown")
            })
            .unwrap()
            .unwrap();
    }
}
