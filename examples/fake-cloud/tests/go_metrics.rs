//! The names Go's dashboards and alerts query answer: `fake-cloud-controller-manager`, run as
//! a leader with every controller (node-ipam included) against a real kube-apiserver + etcd,
//! is scraped, and every metric of `tests/data/go-metrics.txt` (taken from Go's sources; the
//! file says which) must have a series with exactly Go's label names.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use ccm_test::net::{free_port, http_get};
use ccm_test::process::CcmProcess;
use ccm_test::{ControlPlane, unique_name};
use common::{BIN, WAIT, create_node};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

/// Go's metrics: name → label names.
fn go_metrics() -> Vec<(String, BTreeSet<String>)> {
    include_str!("data/go-metrics.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, labels) = l.split_once(' ').expect("name and labels");
            let labels = match labels {
                "-" => BTreeSet::new(),
                labels => labels.split(',').map(str::to_owned).collect(),
            };
            (name.to_owned(), labels)
        })
        .collect()
}

/// The label-name sets each metric family of a Prometheus text exposition has, the
/// histogram series (`_bucket` without `le`, `_sum`, `_count`) under the family's name.
fn exposed(text: &str) -> BTreeMap<String, BTreeSet<BTreeSet<String>>> {
    let mut families: BTreeMap<String, BTreeSet<BTreeSet<String>>> = BTreeMap::new();
    let histograms: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" histogram"))
        .collect();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let mut name = &line[..name_end];
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix)
                && histograms.contains(base)
            {
                name = base;
            }
        }
        let labels: BTreeSet<String> = line[name_end..]
            .strip_prefix('{')
            .and_then(|rest| rest.split_once('}'))
            .map(|(labels, _)| {
                labels
                    .split(',')
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_owned()))
                    .filter(|k| k != "le")
                    .collect()
            })
            .unwrap_or_default();
        families.entry(name.to_owned()).or_default().insert(labels);
    }
    families
}

#[tokio::test]
async fn every_go_metric_a_dashboard_queries_is_served_with_go_s_labels() {
    let cp = common::control_plane(ControlPlane::builder()).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args = common::args_serving_on(
        &cp,
        dir.path(),
        port,
        &[
            "--leader-elect=true",
            "--controllers=*,nodeipam",
            "--allocate-node-cidrs",
        ],
    );
    let ccm = CcmProcess::start(BIN, args);
    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    let name = unique_name("metrics");
    create_node(&nodes, &name).await;
    common::wait_initialized(&nodes, &name, &ccm).await;

    let want = go_metrics();
    assert!(want.len() >= 30, "the list: {want:?}");
    ccm.eventually("every Go metric with Go's labels", WAIT, || async {
        let (status, text) = http_get(port, "/metrics").await;
        let have = exposed(&text);
        let missing: Vec<String> = want
            .iter()
            .filter(|(name, labels)| !have.get(name).is_some_and(|sets| sets.contains(labels)))
            .map(|(name, labels)| format!("{name}{labels:?} (served: {:?})", have.get(name)))
            .collect();
        if status == 200 && missing.is_empty() {
            Ok(())
        } else {
            Err(format!("{status}; missing:\n{}", missing.join("\n")))
        }
    })
    .await;
}

#[test]
fn the_exposition_parser_reads_labels_and_histograms() {
    let text = "# TYPE h histogram\n\
                h_bucket{verb=\"GET\",le=\"1\"} 1\n\
                h_sum{verb=\"GET\"} 1\n\
                h_count{verb=\"GET\"} 1\n\
                # TYPE c counter\n\
                c_total 3\n\
                g{a=\"x\",b=\"y,z\"} 1\n";
    let have = exposed(text);
    let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(have["h"], BTreeSet::from([set(&["verb"])]));
    assert_eq!(have["c_total"], BTreeSet::from([set(&[])]));
    assert!(have["g"].contains(&set(&["a", "b"])), "{have:?}");
}
