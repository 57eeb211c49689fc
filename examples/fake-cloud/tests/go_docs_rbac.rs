//! `fake-cloud-controller-manager` under the ClusterRole of the Kubernetes documentation
//! (`tests/data/go-docs-rbac.yaml`), as an operator who swaps a Go CCM for ours keeps it:
//! every controller does its work, not one request is forbidden (in the binary's log and in
//! the API server's audit log), and the events are core/v1, listed by `kubectl get events`.

use std::path::Path;
use std::time::Duration;

use ccm_test::audit::read_audit_log;
use ccm_test::fixtures::{ServiceBuilder, has_ingress, is_initialized, provider_id, tainted_node};
use ccm_test::process::CcmProcess;
use ccm_test::{ControlPlane, eventually, unique_name};
use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::api::{Api, ListParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_fake-cloud-controller-manager");
const WAIT: Duration = Duration::from_secs(30);
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
    let cp = &ControlPlane::builder()
        // Every request's response, in the API server's own words.
        .audit_policy(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
        )
        .start()
        .await
        .expect(
            "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
        );

    let kubeconfig = cp
        .kubeconfig_for_service_account("kube-system", "cloud-controller-manager")
        .await
        .unwrap();
    let role = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/go-docs-rbac.yaml");
    cp.run_kubectl(["apply", "-f", role.to_str().unwrap()])
        .unwrap();

    // One Node backed by an instance, to initialise; one without, to delete.
    let name = unique_name("docs");
    let gone = unique_name("docs-gone");
    let config = dir.path().join("fake.yaml");
    std::fs::write(&config, format!("instances:\n- name: {name}\n")).unwrap();
    let ccm = CcmProcess::builder(BIN)
        .args([
            "--cloud-provider=fake",
            &format!("--cloud-config={}", config.display()),
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--cluster-cidr=10.244.0.0/16",
            "--secure-port=0",
            // The page's role has no Lease.
            "--leader-elect=false",
            "--node-monitor-period=500ms",
        ])
        .log_file(dir.path().join("ccm.log"))
        .spawn();

    let nodes: Api<Node> = Api::all(cp.client().unwrap());
    nodes
        .create(&PostParams::default(), &tainted_node(&name))
        .await
        .unwrap();
    let mut orphan = tainted_node(&gone);
    orphan.spec = None;
    nodes.create(&PostParams::default(), &orphan).await.unwrap();
    let services: Api<Service> = Api::namespaced(cp.client().unwrap(), "default");
    let svc_name = unique_name("docs-lb");
    let svc = ServiceBuilder::load_balancer(&svc_name)
        .port(80)
        .target_port(8080)
        .build();
    services.create(&PostParams::default(), &svc).await.unwrap();

    // cloud-node: the taint is gone and the provider ID set.
    eventually("the Node initialised", WAIT, || async {
        let node = nodes.get(&name).await.unwrap();
        let initialized = is_initialized(&node);
        if initialized && provider_id(&node).as_deref() == Some(&format!("fake://{name}")) {
            Ok(())
        } else {
            Err(format!("not yet; ccm log:\n{}", ccm.log()))
        }
    })
    .await;
    // lifecycle: the Node without an instance is deleted.
    eventually("the orphan Node deleted", WAIT, || async {
        match nodes.get_opt(&gone).await.unwrap() {
            None => Ok(()),
            Some(_) => Err(format!("still there; ccm log:\n{}", ccm.log())),
        }
    })
    .await;
    // service: the load balancer's ingress on the Service's status.
    eventually("an ingress", WAIT, || async {
        let svc = services.get(&svc_name).await.unwrap();
        if has_ingress(&svc) {
            Ok(())
        } else {
            Err(format!("no ingress; ccm log:\n{}", ccm.log()))
        }
    })
    .await;

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

    // Let the writes in flight land, then look for refusals: none in the log…
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = ccm.log();
    // (Not "403": generated names are hex and may contain it.)
    for needle in ["forbidden", "Forbidden"] {
        assert!(!log.contains(needle), "a request was refused:\n{log}");
    }
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
