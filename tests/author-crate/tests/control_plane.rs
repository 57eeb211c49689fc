//! ccm-test from its package: it finds (or builds, with the Go module files it carries)
//! kube-apiserver and etcd without this author's repository holding any of our tools.

use ccm_core::provider::Instances;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};

#[tokio::test]
async fn a_real_apiserver_from_the_packaged_ccm_test() {
    let cp = ccm_test::ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let mut node = Node::default();
    node.metadata.name = Some("acme-node".into());
    let node = nodes.create(&PostParams::default(), &node).await.unwrap();
    let meta = acme_cloud_controller_manager::AcmeCloud
        .instance_metadata(&node)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, "acme://acme-node");
}
