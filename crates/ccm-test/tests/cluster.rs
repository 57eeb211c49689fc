//! The cluster tier: kubelets register their Nodes tainted `uninitialized`, a Pod runs on
//! a worker with an address from the node's pod CIDR, and nothing is left behind.

use std::time::Duration;

use ccm_test::cluster::{PodNetwork, UNINITIALIZED_TAINT};
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_register_and_a_pod_runs() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let cluster = Cluster::builder()
        .pod_network(PodNetwork::AtPodCidr)
        .start()
        .await
        .unwrap();
    let client = cluster.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in cluster.nodes() {
        let n = nodes.get(node.name()).await.unwrap();
        let taints = n.spec.unwrap().taints.unwrap_or_default();
        eprintln!(
            "{}: {:?}",
            node.name(),
            taints.iter().map(|t| &t.key).collect::<Vec<_>>()
        );
        assert!(taints.iter().any(|t| t.key == UNINITIALIZED_TAINT));
    }
    // Stand in for a cloud-controller-manager: remove the taint.
    for node in cluster.nodes() {
        let n = nodes.get(node.name()).await.unwrap();
        let taints: Vec<_> = n
            .spec
            .unwrap()
            .taints
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != UNINITIALIZED_TAINT)
            .collect();
        nodes
            .patch(
                node.name(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"taints": taints}})),
            )
            .await
            .unwrap();
    }
    eventually("every Node Ready", Duration::from_secs(120), || async {
        let list = nodes
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let not_ready: Vec<String> = list
            .items
            .iter()
            .filter(|n| {
                !n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .map(|n| n.metadata.name.clone().unwrap())
            .collect();
        if not_ready.is_empty() {
            Ok(())
        } else {
            Err(format!("not ready: {not_ready:?}"))
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pause"},
        "spec": {"containers": [{"name": "pause", "image": "localhost/ccm-test/pause:1.0"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ip = eventually("the Pod running", Duration::from_secs(120), || async {
        let pod = pods.get("pause").await.map_err(|e| e.to_string())?;
        let status = pod.status.clone().unwrap_or_default();
        match (status.phase.as_deref(), status.pod_ip.clone()) {
            (Some("Running"), Some(ip)) => Ok(ip),
            _ => Err(format!("{status:?}")),
        }
    })
    .await;
    eprintln!("pod ip {ip}");
        eprintln!("HOLDING {}", cluster.control_plane().dir().display());
        tokio::time::sleep(Duration::from_secs(secs.parse().unwrap())).await;
    }
    drop(cluster);
}
