//! `ccm_nodes_uninitialized` and `ccm_service_load_balancers_pending`, the gauges the
//! `CCMNodeInitialisationFailing` and `CCMServiceLoadBalancerPending` alerts page on, count
//! what really waits: `fake-cloud-controller-manager` against a real kube-apiserver + etcd,
//! with a Node its cloud does not know and a Service whose load balancer it refuses, is
//! scraped until the gauges say so; the Service fixed, its count drops.

mod common;

use std::collections::BTreeMap;

use ccm_fake_cloud::ANNOTATION_LOAD_BALANCER_NAME;
use ccm_test::net::{free_port, http_get};
use ccm_test::process::CcmProcess;
use ccm_test::{ControlPlane, unique_name};
use common::{BIN, WAIT, create_load_balancer, create_node, wait_ingress};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};

/// The value of the unlabelled series `name` in a scrape, if it is there.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the scrape of `port` shows `want` for both gauges (Nodes, Services).
async fn wait_gauges(ccm: &CcmProcess, port: u16, want: (f64, f64)) {
    ccm.eventually(&format!("the gauges at {want:?}"), WAIT, || async {
        let (status, text) = http_get(port, "/metrics").await;
        let have = (
            gauge(&text, "ccm_nodes_uninitialized"),
            gauge(&text, "ccm_service_load_balancers_pending"),
        );
        if status == 200 && have == (Some(want.0), Some(want.1)) {
            Ok(())
        } else {
            Err(format!("{status}: {have:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn the_gauges_count_the_nodes_and_services_still_waiting() {
    let cp = common::control_plane(ControlPlane::builder()).await;
    let dir = tempfile::tempdir().unwrap();
    let known = unique_name("known");
    let unknown = unique_name("unknown");
    // Only `known` is an instance; `unknown` stays tainted.
    let config = common::cloud_config(dir.path(), &format!("instances:\n  - name: {known}\n"));
    let mut args = common::base_args(cp.kubeconfig_path(), &config);
    args.extend([
        "--leader-elect=false".to_owned(),
        "--controllers=cloud-node,service".to_owned(),
    ]);
    let port = free_port();
    let ccm = CcmProcess::start(BIN, common::serving_on(port, &args));

    let client = cp.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    create_node(&nodes, &known).await;
    create_node(&nodes, &unknown).await;
    common::wait_initialized(&nodes, &known, &ccm).await;

    let services: Api<Service> = Api::namespaced(client, "default");
    let served = unique_name("served");
    create_load_balancer(&services, &served).await;
    wait_ingress(&services, &served, &ccm).await;
    // A name the fake cloud refuses: ensure_load_balancer fails, the Service waits.
    let refused = unique_name("refused");
    let mut svc = ccm_test::fixtures::ServiceBuilder::load_balancer(&refused)
        .port(80)
        .target_port(8080)
        .build();
    svc.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_LOAD_BALANCER_NAME.to_owned(),
        "Not A Name".to_owned(),
    )]));
    services.create(&PostParams::default(), &svc).await.unwrap();
    wait_gauges(&ccm, port, (1.0, 1.0)).await;

    // The annotation removed, the load balancer is made and nothing waits but the Node.
    let patch = serde_json::json!({
        "metadata": {"annotations": {ANNOTATION_LOAD_BALANCER_NAME: null}}
    });
    services
        .patch(&refused, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_ingress(&services, &refused, &ccm).await;
    wait_gauges(&ccm, port, (1.0, 0.0)).await;
}
