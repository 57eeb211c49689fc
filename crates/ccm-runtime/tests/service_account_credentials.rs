//! `--use-service-account-credentials` against a real kube-apiserver with RBAC and an audit
//! log: the controller manager, run in-process with the fake cloud, under an identity of its
//! own that may only hold the Lease, create ServiceAccounts and their tokens, and list and
//! watch Nodes and Services (its informers). The controllers' rights are granted only to
//! the per-controller accounts (`node-controller`, `service-controller`,
//! `route-controller` in `kube-system`, as Go names them). Every controller must do its
//! work, the audit log must show each write made by the right account and none by the
//! manager, and no request of any of them may be refused.
//!
//! The token machinery alone ([`ServiceAccountClients`]) is tested on the shared control
//! plane: refresh before expiry, recovery from a `401`, cancellation while the first token
//! cannot be had.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use ccm_runtime::client::service_account::{ServiceAccountClients, ServiceAccountError};
use ccm_runtime::client::{ApiLayer, ClientFactory, build_client};
use ccm_test::audit::read_audit_log;
use ccm_test::fixtures::{
    NodeBuilder, ServiceBuilder, has_ingress, is_initialized, node_condition, provider_id,
    taint_keys,
};
use ccm_test::{ControlPlane, eventually, unique_name};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Node, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use support::FakeCcm;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const MANAGER: &str = "ccm-manager";
const NODE_SA: &str = "system:serviceaccount:kube-system:node-controller";
const SERVICE_SA: &str = "system:serviceaccount:kube-system:service-controller";
const ROUTE_SA: &str = "system:serviceaccount:kube-system:route-controller";

fn init_tracing() {
    ccm_test::init_tracing("warn,ccm_runtime::client=info");
}

async fn apply(client: &Client, objects: Vec<serde_json::Value>) {
    let pp = PostParams::default();
    for value in objects {
        match value["kind"].as_str() {
            Some("ClusterRole") => {
                let api: Api<ClusterRole> = Api::all(client.clone());
                api.create(&pp, &serde_json::from_value(value).unwrap())
                    .await
                    .unwrap();
            }
            Some("ClusterRoleBinding") => {
                let api: Api<ClusterRoleBinding> = Api::all(client.clone());
                api.create(&pp, &serde_json::from_value(value).unwrap())
                    .await
                    .unwrap();
            }
            other => panic!("unexpected kind {other:?}"),
        }
    }
}

fn cluster_role(name: &str, rules: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    })
}

fn binding(role: &str, subject: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    })
}

fn sa(name: &str) -> serde_json::Value {
    serde_json::json!({"kind": "ServiceAccount", "name": name, "namespace": "kube-system"})
}

/// Events in both API groups: the recorder's group is not this test's concern.
fn events_rule() -> serde_json::Value {
    serde_json::json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]})
}

/// The manager's rights: its Lease, the accounts and their tokens, its informers. The
/// controllers' rights: to their accounts only.
fn rbac() -> Vec<serde_json::Value> {
    let read = serde_json::json!(["get", "list", "watch"]);
    vec![
        cluster_role(
            "test:ccm-manager",
            serde_json::json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "create"]},
                {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["nodes", "services"], "verbs": ["list", "watch"]},
            ]),
        ),
        binding(
            "test:ccm-manager",
            serde_json::json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": MANAGER}),
        ),
        cluster_role(
            "test:node-controller",
            serde_json::json!([
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
                events_rule(),
            ]),
        ),
        binding("test:node-controller", sa("node-controller")),
        cluster_role(
            "test:service-controller",
            serde_json::json!([
                {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "patch", "update"]},
                {"apiGroups": [""], "resources": ["services/status"], "verbs": ["patch", "update"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": read},
                events_rule(),
            ]),
        ),
        binding("test:service-controller", sa("service-controller")),
        cluster_role(
            "test:route-controller",
            serde_json::json!([
                {"apiGroups": [""], "resources": ["nodes"], "verbs": read},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
                events_rule(),
            ]),
        ),
        binding("test:route-controller", sa("route-controller")),
    ]
}

/// (user, verb, resource[/subresource], response code) of each audited request.
fn audited(log: &Path) -> Vec<(String, String, String, i64)> {
    read_audit_log(log)
        .unwrap_or_default()
        .into_iter()
        .map(|event| {
            let resource = event.resource_path();
            (event.user, event.verb, resource, event.code)
        })
        .collect()
}

fn node(name: &str, tainted: bool, pod_cidr: Option<&str>) -> Node {
    let mut node = NodeBuilder::new(name);
    if tainted {
        node = node.uninitialized();
    }
    if let Some(cidr) = pod_cidr {
        node = node.pod_cidrs(&[cidr]);
    }
    node.build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_controller_works_as_its_own_service_account() {
    init_tracing();
    let cp = ControlPlane::builder()
        .audit_policy(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n",
        )
        .start()
        .await
        .expect(
            "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
        );
    let admin = cp.client().unwrap();
    apply(&admin, rbac()).await;

    let nodes: Api<Node> = Api::all(admin.clone());
    let pp = PostParams::default();
    nodes
        .create(&pp, &node("sa-running", true, Some("10.244.1.0/24")))
        .await
        .unwrap();
    nodes
        .create(&pp, &node("sa-stopped", false, None))
        .await
        .unwrap();
    nodes
        .create(&pp, &node("sa-gone", false, None))
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    services
        .create(
            &pp,
            &ServiceBuilder::load_balancer("sa-lb")
                .port(80)
                .target_port(8080)
                .build(),
        )
        .await
        .unwrap();

    let kubeconfig = cp.kubeconfig_for_user(MANAGER, &[]).unwrap();
    // The cloud: one running instance, one stopped; a third Node has none.
    let ccm = FakeCcm::start(
        "instances:\n\
         - { name: sa-running, addresses: [{ type: InternalIP, address: 10.0.0.11 }] }\n\
         - { name: sa-stopped, state: stopped }\n",
        &kubeconfig,
        &[
            "--use-service-account-credentials",
            "--leader-elect=true",
            "--cluster-cidr=10.244.0.0/16",
            "--secure-port=0",
            "--controller-start-interval=0s",
            "--node-monitor-period=1s",
        ],
    );

    // cloud-node: initialised.
    eventually("sa-running initialised", WAIT, || async {
        let n = nodes.get("sa-running").await.map_err(|e| e.to_string())?;
        match (provider_id(&n), !is_initialized(&n)) {
            (Some(id), false) => Ok(id),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // route: the route is in place and the Node says so.
    eventually("sa-running's route created", WAIT, || async {
        let n = nodes.get("sa-running").await.map_err(|e| e.to_string())?;
        let condition = node_condition(&n, "NetworkUnavailable");
        match condition {
            Some((status, reason)) if status == "False" && reason == "RouteCreated" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // service: an ingress.
    eventually("sa-lb's ingress", WAIT, || async {
        let s = services.get("sa-lb").await.map_err(|e| e.to_string())?;
        if has_ingress(&s) {
            Ok(())
        } else {
            Err("no ingress yet".to_owned())
        }
    })
    .await;
    // lifecycle: the stopped instance's Node tainted, the Node without one deleted.
    eventually("sa-stopped tainted as shut down", WAIT, || async {
        let n = nodes.get("sa-stopped").await.map_err(|e| e.to_string())?;
        let keys = taint_keys(&n);
        if keys
            .iter()
            .any(|k| k == "node.cloudprovider.kubernetes.io/shutdown")
        {
            Ok(())
        } else {
            Err(format!("{keys:?}"))
        }
    })
    .await;
    eventually("sa-gone deleted", WAIT, || async {
        match nodes.get_opt("sa-gone").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        }
    })
    .await;

    // SIGTERM still ends it promptly.
    let stopping = tokio::time::Instant::now();
    ccm.stop(Duration::from_secs(20)).await;
    println!("stopped {:.1?} after the signal", stopping.elapsed());

    let events = audited(cp.audit_log_path().unwrap());
    let did = |user: &str, verb: &str, resource: &str| {
        events
            .iter()
            .any(|(u, v, r, code)| u == user && v == verb && r == resource && *code < 300)
    };
    for (user, verb, resource) in [
        // cloud-node and cloud-node-lifecycle share node-controller, as in Go.
        (NODE_SA, "patch", "nodes"),
        (NODE_SA, "patch", "nodes/status"),
        (NODE_SA, "delete", "nodes"),
        (SERVICE_SA, "patch", "services/status"),
        (ROUTE_SA, "patch", "nodes/status"),
        (MANAGER, "create", "serviceaccounts"),
        (MANAGER, "create", "serviceaccounts/token"),
        (MANAGER, "update", "leases"),
        (MANAGER, "watch", "nodes"),
    ] {
        assert!(
            did(user, verb, resource),
            "{user} {verb} {resource} not in the audit log: {:#?}",
            summary(&events)
        );
    }
    let ours = [MANAGER, NODE_SA, SERVICE_SA, ROUTE_SA];
    let refused: Vec<_> = events
        .iter()
        .filter(|(u, _, _, code)| ours.contains(&u.as_str()) && (*code == 401 || *code == 403))
        .collect();
    assert!(refused.is_empty(), "refused requests: {refused:#?}");
    // The manager's own identity changed no Node and no Service.
    let manager_writes: Vec<_> = events
        .iter()
        .filter(|(u, v, r, _)| {
            u == MANAGER
                && ["create", "update", "patch", "delete"].contains(&v.as_str())
                && (r.starts_with("nodes") || r.starts_with("services"))
        })
        .collect();
    assert!(manager_writes.is_empty(), "{manager_writes:#?}");
    println!("{:#?}", summary(&events));
}

/// The distinct (user, verb, resource, code) of our identities, for messages.
fn summary(events: &[(String, String, String, i64)]) -> BTreeSet<(String, String, String, i64)> {
    events
        .iter()
        .filter(|(u, ..)| u == MANAGER || u.starts_with("system:serviceaccount:kube-system:"))
        .cloned()
        .collect()
}

async fn whoami(client: &Client) -> Result<String, kube::Error> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

#[tokio::test]
async fn tokens_are_renewed_before_expiry_and_after_a_401() {
    init_tracing();
    let cp = ControlPlane::shared().await.expect("a real control plane");
    let ns = cp.create_namespace("sa-tokens").await.unwrap();
    let root_layer = ApiLayer::new();
    let root = build_client(cp.admin_config().unwrap(), &root_layer).unwrap();
    let layer = ApiLayer::new();
    // Ten minutes (the API server's least), renewed after 0.5% of it: every 3 s.
    let clients = ServiceAccountClients::new(root, &cp.admin_config().unwrap(), layer.clone())
        .with_namespace(&ns)
        .with_token_lifetime(Duration::from_secs(600))
        .with_refresh_at(0.005);
    let cancel = CancellationToken::new();
    let robot = clients.client("robot", &cancel).await.unwrap();
    assert_eq!(
        whoami(&robot).await.unwrap(),
        format!("system:serviceaccount:{ns}:robot"),
        "the client is the account, not the admin"
    );
    // The same account, the same client; its requests counted by the shared layer.
    let again = clients.client("robot", &cancel).await.unwrap();
    whoami(&again).await.unwrap();
    assert!(layer.counters().count("POST", "selfsubjectreviews") >= 2);
    assert!(
        Api::<ServiceAccount>::namespaced(cp.client().unwrap(), &ns)
            .get_opt("robot")
            .await
            .unwrap()
            .is_some(),
        "the account was created"
    );

    // Renewed before expiry, without blocking requests.
    let tokens = || root_layer.counters().count("POST", "serviceaccounts/token");
    assert_eq!(tokens(), 1);
    eventually("two renewals", Duration::from_secs(20), || async {
        if tokens() >= 3 { Ok(()) } else { Err(tokens()) }
    })
    .await;
    whoami(&robot).await.unwrap();

    // The account deleted: its tokens die with it. The next request gets a 401, which
    // asks for a new token; the account is created again and the client works again.
    let accounts = Api::<ServiceAccount>::namespaced(cp.client().unwrap(), &ns);
    let clients_slow = ServiceAccountClients::new(
        build_client(cp.admin_config().unwrap(), &ApiLayer::new()).unwrap(),
        &cp.admin_config().unwrap(),
        ApiLayer::new(),
    )
    .with_namespace(&ns);
    // An account whose token would live an hour: only a 401 renews it within the test.
    let slow = clients_slow.client("slow", &cancel).await.unwrap();
    let old_uid = accounts.get("slow").await.unwrap().metadata.uid;
    accounts
        .delete("slow", &DeleteParams::default())
        .await
        .unwrap();
    // The API server looks accounts up through its informer cache, so the deletion
    // reaches its authenticator a moment later: until then the old token still works.
    eventually(
        "the deleted account's token to be refused",
        Duration::from_secs(20),
        || async {
            match whoami(&slow).await {
                Err(kube::Error::Api(s)) if s.code == 401 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let name = eventually(
        "the client to work again",
        Duration::from_secs(20),
        || async { whoami(&slow).await.map_err(|e| e.to_string()) },
    )
    .await;
    assert_eq!(name, format!("system:serviceaccount:{ns}:slow"));
    let new_uid = accounts.get("slow").await.unwrap().metadata.uid;
    assert_ne!(old_uid, new_uid, "the account was created again");
    cancel.cancel();
}

#[tokio::test]
async fn no_token_without_rights_and_cancellation_ends_the_wait() {
    init_tracing();
    let cp = ControlPlane::shared().await.expect("a real control plane");
    let ns = cp.create_namespace("sa-denied").await.unwrap();
    // A root identity that may not create accounts or tokens: every attempt is a 403.
    let nobody = cp.client_for_user(&unique_name("nobody"), &[]).unwrap();
    let clients = ServiceAccountClients::new(nobody, &cp.admin_config().unwrap(), ApiLayer::new())
        .with_namespace(&ns);
    let cancel = CancellationToken::new();
    let waiting = tokio::spawn({
        let (clients, cancel) = (clients.clone(), cancel.clone());
        async move { clients.client("robot", &cancel).await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!waiting.is_finished(), "retrying with backoff");
    let cancelled = tokio::time::Instant::now();
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("ends at once when cancelled")
        .unwrap();
    assert!(
        matches!(result, Err(ServiceAccountError::Cancelled(_))),
        "{:?}",
        result.err()
    );
    assert!(cancelled.elapsed() < Duration::from_secs(1));
}

/// A token the API server gives the account `name` of `ns` (created here), for ten minutes.
async fn account_token(root: &Client, ns: &str, name: &str) -> String {
    let accounts = Api::<ServiceAccount>::namespaced(root.clone(), ns);
    let account = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let request =
        serde_json::from_value(serde_json::json!({"spec": {"expirationSeconds": 600}})).unwrap();
    let answer = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    serde_json::to_value(answer).unwrap()["status"]["token"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Our own client stack (`client::auth`, `client::transport`) against the real API server:
/// a kubeconfig's token file and exec plugin authenticate as the account whose token they
/// give, and a token the server refuses (401) makes the next request run the plugin again.
#[tokio::test]
async fn token_files_and_exec_plugins_authenticate_and_a_401_runs_the_plugin_again() {
    init_tracing();
    let cp = ControlPlane::shared().await.expect("a real control plane");
    let ns = cp.create_namespace("sa-kubeconfig").await.unwrap();
    let root = build_client(cp.admin_config().unwrap(), &ApiLayer::new()).unwrap();
    let token = account_token(&root, &ns, "reader").await;
    let dir = tempfile::tempdir().unwrap();
    let anonymous = || {
        let mut config = cp.admin_config().unwrap();
        config.auth_info = kube::config::AuthInfo::default();
        config
    };

    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let mut config = anonymous();
    config.auth_info.token_file = Some(token_file.display().to_string());
    let client = build_client(config, &ApiLayer::new()).unwrap();
    assert_eq!(
        whoami(&client).await.unwrap(),
        format!("system:serviceaccount:{ns}:reader")
    );

    // The plugin answers whatever `answer` holds, and counts its runs.
    let answer = dir.path().join("answer");
    let runs = dir.path().join("runs");
    let script = dir.path().join("plugin.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho run >> '{}'\nprintf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\"}}}}' \"$(cat '{}')\"\n",
            runs.display(),
            answer.display()
        ),
    )
    .unwrap();
    std::fs::write(&answer, "not-a-token").unwrap();
    let mut config = anonymous();
    config.auth_info.exec = Some(kube::config::ExecConfig {
        api_version: Some("client.authentication.k8s.io/v1".to_owned()),
        command: Some("/bin/sh".to_owned()),
        args: Some(vec![script.display().to_string()]),
        interactive_mode: Some(kube::config::ExecInteractiveMode::Never),
        ..Default::default()
    });
    let layer = ApiLayer::new();
    let client = build_client(config.clone(), &layer).unwrap();
    let run_count = || std::fs::read_to_string(&runs).unwrap().lines().count();
    assert_eq!(
        run_count(),
        1,
        "the plugin runs once as the client is built"
    );
    match whoami(&client).await {
        Err(kube::Error::Api(s)) if s.code == 401 => {}
        other => panic!("a bad token is refused: {other:?}"),
    }
    std::fs::write(&answer, &token).unwrap();
    assert_eq!(
        whoami(&client).await.unwrap(),
        format!("system:serviceaccount:{ns}:reader"),
        "the refusal made the next request run the plugin again"
    );
    whoami(&client).await.unwrap();
    assert_eq!(
        run_count(),
        2,
        "a token without expiry is kept until refused"
    );
    assert_eq!(layer.counters().count("POST", "selfsubjectreviews"), 3);

    // The controller manager's clients (its own, the Lease's) come from one factory: one
    // plugin, run once, for all of them.
    let factory = ClientFactory::new(&config).unwrap();
    let (own, lease) = (
        factory.client(&ApiLayer::new()),
        factory.client(&ApiLayer::new()),
    );
    for client in [own, lease] {
        assert_eq!(
            whoami(&client).await.unwrap(),
            format!("system:serviceaccount:{ns}:reader")
        );
    }
    assert_eq!(run_count(), 3);
}
