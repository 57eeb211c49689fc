//! Acme's controller manager in-process against a real kube-apiserver + etcd from the
//! packaged ccm-test, which finds (or builds, with the Go module files it carries) the
//! binaries without this author's repository holding any of our tools.

// ANCHOR: control_plane
use std::time::Duration;

use acme_cloud_controller_manager::AcmeCloud;
use ccm_conformance::memory::MemoryCloud;
use ccm_core::CancellationToken;
use ccm_core::app::{CloudControllerManager, Options};
use ccm_core::k8s_openapi::api::core::v1::{
    Node, NodeSpec, Service, ServicePort, ServiceSpec, Taint,
};
use ccm_core::kube::api::{Api, PostParams};
use ccm_core::provider::ProviderRegistry;
use ccm_core::well_known::TAINT_UNINITIALIZED;
use ccm_test::{ControlPlane, eventually, unique_name};

#[tokio::test]
async fn initialises_a_node_and_serves_a_load_balancer() {
    let cp = ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let name = unique_name("acme");
    let dir = std::env::temp_dir().join(unique_name("acme-config"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cloud.yaml");
    std::fs::write(
        &config,
        format!("zone: acme-1a\nregion: acme-1\ninstances: [{name}]\n"),
    )
    .unwrap();

    let options = Options::from_args([
        "acme-ccm".to_owned(),
        "--cloud-provider=acme".to_owned(),
        format!("--cloud-config={}", config.display()),
        format!("--kubeconfig={}", cp.kubeconfig_path().display()),
        "--leader-elect=false".to_owned(),
        "--secure-port=0".to_owned(),
        "--controllers=cloud-node,service".to_owned(),
    ])
    .unwrap();
    let mut registry = ProviderRegistry::new();
    AcmeCloud::register(&mut registry, MemoryCloud::new(AcmeCloud::NAME)).unwrap();
    let shutdown = CancellationToken::new();
    let ccm = tokio::spawn(
        CloudControllerManager::new("acme-ccm", registry)
            .run_with_options(options, shutdown.clone()),
    );

    // A Node as a kubelet with --cloud-provider=external registers it.
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let mut node = Node::default();
    node.metadata.name = Some(name.clone());
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: TAINT_UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]),
        ..NodeSpec::default()
    });
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let node = eventually("the Node initialised", Duration::from_secs(30), || async {
        let node = nodes.get(&name).await.unwrap();
        let spec = node.spec.clone().unwrap_or_default();
        let tainted = spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == TAINT_UNINITIALIZED);
        match spec.provider_id {
            Some(_) if !tainted => Ok(node),
            _ => Err(format!("{spec:?}")),
        }
    })
    .await;
    assert_eq!(
        node.spec.unwrap().provider_id.as_deref(),
        Some(format!("acme://{name}").as_str())
    );
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["topology.kubernetes.io/zone"], "acme-1a");

    // A LoadBalancer Service gets the memory cloud's address.
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let mut service = Service::default();
    service.metadata.name = Some(unique_name("web"));
    service.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![ServicePort {
            port: 80,
            ..ServicePort::default()
        }]),
        ..ServiceSpec::default()
    });
    let service = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let web = service.metadata.name.unwrap();
    eventually("the Service's ingress", Duration::from_secs(30), || async {
        let service = services.get(&web).await.unwrap();
        let ingress = service
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress);
        match ingress.as_deref() {
            Some([one])
                if one
                    .ip
                    .as_deref()
                    .is_some_and(|ip| ip.starts_with("192.0.2.")) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    shutdown.cancel();
    ccm.await.unwrap().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
// ANCHOR_END: control_plane
