//! The cluster level: Acme's own image, built by the recipe ccm-test ships, installed with
//! the ccm-rs Helm chart into a real cluster of kubelets started with
//! `--cloud-provider=external` (containerd, kube-proxy, in network namespaces made for the
//! run), and every Node initialised by it.
//!
//! Needs root, buildah and the cluster tier's Debian packages (docs/cluster.md), helm
//! (`$HELM` or on `PATH`) and the chart (`CCM_CHART`: the folder
//! `charts/cloud-controller-manager` of a ccm-rs clone, or a packaged chart). Ignored by a
//! plain `cargo test`; run it with
//!
//! ```text
//! CCM_CHART=../ccm-rs/charts/cloud-controller-manager cargo test --test cluster -- --ignored
//! ```

// ANCHOR: cluster_test
use std::time::Duration;

use ccm_core::well_known::LABEL_TOPOLOGY_ZONE;
use ccm_test::Cluster;
use ccm_test::helm::Helm;
use ccm_test::image::ProviderImage;

const WAIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, buildah, helm and CCM_CHART: see the file's header"]
async fn the_chart_installs_acme_and_it_initialises_every_node() {
    let chart = std::env::var("CCM_CHART")
        .expect("CCM_CHART: the chart, e.g. a ccm-rs clone's charts/cloud-controller-manager");
    let helm = Helm::find().unwrap_or_else(|e| panic!("{e}"));
    // localhost/acme-cloud-controller-manager:<version>, one platform: quick to build.
    let archive = ProviderImage::new(env!("CARGO_MANIFEST_DIR"))
        .platform("linux/amd64")
        .debug()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let cluster = Cluster::builder()
        .nodes(2)
        .image(&archive)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Acme's cloud-config names its instances: here, the cluster's machines.
    let instances: Vec<&str> = cluster.nodes().iter().map(|n| n.name()).collect();
    let values = format!(
        "provider: acme\n\
         image:\n  repository: localhost/acme-cloud-controller-manager\n  tag: {version}\n\
         cloudConfig:\n  content: |\n    zone: acme-1a\n    region: acme-1\n    instances: {instances:?}\n",
        version = env!("CARGO_PKG_VERSION"),
    );
    let values_file = cluster.control_plane().dir().join("acme-values.yaml");
    std::fs::write(&values_file, values).unwrap();
    let values_file = values_file.display().to_string();
    let installed = helm
        .run(
            &cluster,
            [
                "install",
                "acme",
                &chart,
                "--namespace",
                "kube-system",
                "--values",
                &values_file,
                "--wait",
                "--timeout",
                "180s",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{installed}");

    // Every Node: Acme's provider ID, its zone, the kubelet's IP confirmed, no taint left.
    let nodes = cluster
        .wait_initialised(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nodes.len(), instances.len());
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        assert_eq!(provider_id, Some(format!("acme://{name}")));
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(LABEL_TOPOLOGY_ZONE).map(String::as_str),
            Some("acme-1a")
        );
        let addresses = node.status.as_ref().and_then(|s| s.addresses.clone());
        let internal = addresses
            .iter()
            .flatten()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address.clone());
        assert_eq!(
            internal,
            Some(cluster.node(&name).unwrap().address().to_string())
        );
    }
}
// ANCHOR_END: cluster_test
