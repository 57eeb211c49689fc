//! `fake-cloud-controller-manager` under the ClusterRole of the Kubernetes documentation
//! (`tests/data/go-docs-rbac.yaml`), as an operator who swaps a Go CCM for ours keeps it:
//! every controller does its work, not one request is forbidden (in the binary's log and in
//! the API server's audit log), and the events are core/v1, listed by `kubectl get events`.

mod common;

use std::path::Path;

use ccm_test::audit::read_audit_log;
use ccm_test::process::CcmProcess;
use ccm_test::{ControlPlane, eventually, unique_name};
use common::{BIN, NodeAndOrphan, WAIT, base_args};
use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::api::{Api, ListParams};

const USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";

/// The audit log's responses to the ServiceAccount, as (verb, resource, subresource, code).
fn audited(log: &Path) -> Vec<(String, String, String, i64)> {
    read_audit_log(log)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.user == USER && e.stage == "ResponseComplete")
        .map(|e| (e.verb, e.resource, e.subresource, e.code))
        .collect()
}

#[tokio::test]
async fn runs_under_the_kubernetes_docs_cluster_role_without_a_forbidden_request() {
    let dir = tempfile::tempdir().unwrap();
    let cp = &common::control_plane(
        // Every request's response, in the API server's own words.
        ControlPlane::builder().audit_policy(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
        ),
    )
    .await;
    let kubeconfig = common::service_account_under(cp, "tests/data/go-docs-rbac.yaml").await;
    let (lifecycle, config) = NodeAndOrphan::new("docs", dir.path());
    let mut args = base_args(&kubeconfig, &config);
    // The page's role has no Lease.
    args.extend([
        "--leader-elect=false".into(),
        "--node-monitor-period=500ms".into(),
    ]);
    let ccm = CcmProcess::builder(BIN)
        .args(args)
        .log_file(dir.path().join("ccm.log"))
        .spawn();

    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    lifecycle.create(&nodes).await;
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let svc_name = unique_name("docs-lb");
    common::create_load_balancer(&services, &svc_name).await;

    // cloud-node: the taint is gone and the provider ID set.
    common::wait_initialized(&nodes, &lifecycle.name, &ccm).await;
    // lifecycle: the Node without an instance is deleted.
    lifecycle.wait_orphan_deleted(&nodes, &ccm).await;
    // service: the load balancer's ingress on the Service's status.
    common::wait_ingress(&services, &svc_name, &ccm).await;
    let (name, gone) = (&lifecycle.name, &lifecycle.gone);

    // The events, as Go's controllers write them: core/v1, in "default", from each source.
    let events: Api<Event> = Api::namespaced(cp.client().unwrap(), "default");
    let want = [
        (name.as_str(), "Synced", "cloud-node-controller"),
        (
            gone.as_str(),
            "DeletingNode",
            "cloud-node-lifecycle-controller",
        ),
        (
            svc_name.as_str(),
            "EnsuringLoadBalancer",
            "service-controller",
        ),
        (
            svc_name.as_str(),
            "EnsuredLoadBalancer",
            "service-controller",
        ),
    ];
    eventually("every controller's event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        let seen = |(object, reason, source): &(&str, &str, &str)| {
            list.iter().any(|e| {
                e.involved_object.name.as_deref() == Some(*object)
                    && e.reason.as_deref() == Some(*reason)
                    && e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(*source)
            })
        };
        let missing: Vec<_> = want.iter().filter(|w| !seen(w)).collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "missing {missing:?} in {list:#?}\nccm log:\n{}",
                ccm.log()
            ))
        }
    })
    .await;
    let table = cp
        .run_kubectl([
            "get",
            "events",
            "-n",
            "default",
            "-o",
            "custom-columns=REASON:.reason,OBJECT:.involvedObject.name,SOURCE:.source.component",
        ])
        .unwrap();
    for (object, reason, source) in want {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().eq([reason, object, source])),
            "{reason} {object} {source} not in `kubectl get events`:\n{table}"
        );
    }

    // No refusals: none in the log…
    common::assert_nothing_refused(&ccm).await;
    // …and none in the API server's audit log, which did see the controllers' writes.
    let audited = audited(cp.audit_log_path().unwrap());
    let refused: Vec<_> = audited.iter().filter(|(.., code)| *code == 403).collect();
    assert!(refused.is_empty(), "forbidden: {refused:#?}");
    let created = |resource: &str| {
        audited
            .iter()
            .filter(|(verb, r, _, code)| verb == "create" && r == resource && *code == 201)
            .count()
    };
    assert!(created("events") >= want.len(), "{audited:#?}");
    let status_patches = audited
        .iter()
        .filter(|(verb, r, sub, _)| verb == "patch" && r == "services" && sub == "status")
        .count();
    assert!(status_patches >= 1, "{audited:#?}");
}
