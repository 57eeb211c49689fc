//! `fake-cloud-controller-manager` under the ClusterRole of the Kubernetes documentation
//! (`tests/data/go-docs-rbac.yaml`), as an operator who swaps a Go CCM for ours keeps it:
//! every controller does its work, not one request is forbidden (in the binary's log and in
//! the API server's audit log), and the events are core/v1, listed by `kubectl get events`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ccm_test::{ControlPlane, eventually, unique_name};
use k8s_openapi::api::core::v1::{Event, Node, NodeSpec, Service, Taint};
use kube::api::{Api, ListParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_fake-cloud-controller-manager");
const WAIT: Duration = Duration::from_secs(30);
const USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";

/// The controller manager; killed on drop. Its stderr goes to a file.
struct Ccm {
    child: Child,
    log: PathBuf,
}

impl Ccm {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Ccm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubeconfig for the ServiceAccount: the admin one with the user swapped for its token.
async fn service_account_kubeconfig(cp: &ControlPlane, dir: &Path) -> PathBuf {
    let token = cp
        .service_account_token("kube-system", "cloud-controller-manager")
        .await
        .unwrap();
    let admin = std::fs::read_to_string(cp.kubeconfig_path()).unwrap();
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&admin).unwrap();
    for user in config["users"].as_sequence_mut().unwrap() {
        let mut auth = serde_yaml_ng::Mapping::new();
        auth.insert("token".into(), token.clone().into());
        user["user"] = serde_yaml_ng::Value::Mapping(auth);
    }
    let path = dir.join("sa.kubeconfig");
    std::fs::write(&path, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    path
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = cp.kubectl().expect("kubectl").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The audit log's responses to the ServiceAccount, as (verb, resource, subresource, code).
fn audited(log: &Path) -> Vec<(String, String, String, i64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["user"]["username"] == USER && e["stage"] == "ResponseComplete")
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&e["verb"]),
                text(&e["objectRef"]["resource"]),
                text(&e["objectRef"]["subresource"]),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

fn tainted_node(name: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.into());
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: ccm_core::well_known::TAINT_UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]),
        ..NodeSpec::default()
    });
    node
}

#[tokio::test]
async fn runs_under_the_kubernetes_docs_cluster_role_without_a_forbidden_request() {
    let dir = tempfile::tempdir().unwrap();
    // Every request's response, in the API server's own words.
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let audit_log = dir.path().join("audit.log");
    let cp = &ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
        .start()
        .await
        .expect(
            "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
        );

    let kubeconfig = service_account_kubeconfig(cp, dir.path()).await;
    let role = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/go-docs-rbac.yaml");
    kubectl(cp, &["apply", "-f", role.to_str().unwrap()]);

    // One Node backed by an instance, to initialise; one without, to delete.
    let name = unique_name("docs");
    let gone = unique_name("docs-gone");
    let config = dir.path().join("fake.yaml");
    std::fs::write(&config, format!("instances:\n- name: {name}\n")).unwrap();
    let log = dir.path().join("ccm.log");
    let child = Command::new(BIN)
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
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let ccm = Ccm { child, log };

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
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": svc_name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();

    // cloud-node: the taint is gone and the provider ID set.
    eventually("the Node initialised", WAIT, || async {
        let node = nodes.get(&name).await.unwrap();
        let spec = node.spec.unwrap_or_default();
        let tainted = spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == ccm_core::well_known::TAINT_UNINITIALIZED);
        if !tainted && spec.provider_id.as_deref() == Some(&format!("fake://{name}")) {
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
        let ingress = svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .unwrap_or_default();
        if ingress.is_empty() {
            Err(format!("no ingress; ccm log:\n{}", ccm.log()))
        } else {
            Ok(())
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
    let table = kubectl(
        cp,
        &[
            "get",
            "events",
            "-n",
            "default",
            "-o",
            "custom-columns=REASON:.reason,OBJECT:.involvedObject.name,SOURCE:.source.component",
        ],
    );
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
    let audited = audited(&audit_log);
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
